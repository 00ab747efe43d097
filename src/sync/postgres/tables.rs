//! The tables both sides share, column by column: how each SQLite column (see the store's
//! schema docs) is typed on the server, and [`Cell`], one value on its way between them.

use postgres::types::private::BytesMut;
use postgres::types::{IsNull, ToSql, Type};
use rusqlite::types::ValueRef;

/// A column's type on the server; SQLite holds it as INTEGER, REAL or TEXT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// bigint
    Int,
    /// double precision
    Real,
    Text,
    /// boolean (SQLite 0/1)
    Bool,
    /// timestamptz (SQLite RFC 3339 text)
    Time,
    /// jsonb (SQLite JSON text)
    Json,
}

use Kind::{Bool, Int, Json, Real, Text, Time};

/// A table whose rows hang off a run or a trial (its parent column comes first).
pub(crate) struct Table {
    pub name: &'static str,
    pub parent: &'static str,
    pub columns: &'static [(&'static str, Kind)],
    /// Many rows per trial: sent with binary COPY.
    pub bulk: bool,
}

/// `runs` without its local id.
pub(crate) const RUN_COLUMNS: &[(&str, Kind)] = &[
    ("uuid", Text),
    ("host", Text),
    ("started_at", Time),
    ("ended_at", Time),
    ("status", Text),
    ("config_toml", Text),
    ("edgebench_version", Text),
    ("git_commit", Text),
    ("candle_version", Text),
    ("cpu_threads", Int),
    ("cpu_model", Text),
    ("os", Text),
    ("board", Text),
    ("power_total", Text),
    ("baseline_power_w", Real),
    ("baseline_s", Real),
    ("power_scope", Text),
];

/// `trials` without its local id and run id.
/// What a trial's workload says of its rows, which the server holds beside the board's
/// columns for its views (migration 3): pushed, never fetched back (the board's build says it
/// again when it reads its rows).
pub(crate) const TRIAL_DESCRIPTION: &[(&str, Kind)] = &[
    ("item", Text),
    ("per_iteration", Text),
    ("over_dataset", Bool),
];

pub(crate) const TRIAL_COLUMNS: &[(&str, Kind)] = &[
    ("uuid", Text),
    ("net", Text),
    ("device", Text),
    ("batch", Int),
    ("epochs", Int),
    ("images", Int),
    ("dataset", Text),
    ("iterations_planned", Int),
    ("iterations_done", Int),
    ("warmup_iterations", Int),
    ("status", Text),
    ("error", Text),
    ("started_at", Time),
    ("ended_at", Time),
    ("time_per_image_s", Real),
    ("time_per_image_spread_s", Real),
    ("images_per_s", Real),
    ("loss_first", Real),
    ("loss_last", Real),
    ("loss_anomaly", Bool),
    ("energy_j", Real),
    ("avg_power_w", Real),
    ("energy_per_image_j", Real),
    ("edp_js", Real),
    ("swap_pressure", Bool),
    ("peak_rss_bytes", Int),
    ("dynamic_energy_j", Real),
    ("power_samples", Int),
    ("power_rate_hz", Real),
    ("power_jitter_s", Real),
    ("power_incomplete", Bool),
    ("power_gap_s", Real),
    ("throttled", Bool),
    ("throttle_note", Text),
    ("power_low_samples", Int),
    ("power_note", Text),
    ("workload", Text),
    ("params", Json),
    ("time_per_iteration_s", Real),
    ("time_per_iteration_spread_s", Real),
    ("total_time_s", Real),
    ("gflop_per_s", Real),
    ("metrics", Json),
    ("peak_gpu_bytes", Int),
    ("repetition", Int),
];

pub(crate) const ITERATIONS: Table = Table {
    name: "iterations",
    parent: "trial_id",
    columns: &[
        ("step", Int),
        ("epoch", Int),
        ("loss", Real),
        ("lr", Real),
        ("data_s", Real),
        ("step_s", Real),
        ("t_start_ns", Int),
        ("t_end_ns", Int),
        ("energy_j", Real),
        ("loss_text", Text),
        ("step_s_text", Text),
    ],
    bulk: true,
};

pub(crate) const POWER_SAMPLES: Table = Table {
    name: "power_samples",
    parent: "trial_id",
    columns: &[
        ("source", Text),
        ("rail", Text),
        ("t_ns", Int),
        ("volts", Real),
        ("amps", Real),
        ("watts", Real),
    ],
    bulk: true,
};

/// Every per-trial table, in insertion order.
pub(crate) const TRIAL_TABLES: &[Table] = &[
    ITERATIONS,
    POWER_SAMPLES,
    Table {
        name: "trial_memory",
        parent: "trial_id",
        columns: &[
            ("mem_estimate_bytes", Int),
            ("mem_limit_bytes", Int),
            ("swap_in_pages", Int),
            ("swap_out_pages", Int),
            ("major_faults", Int),
            ("swapped_bytes_max", Int),
            ("mem_available_min_bytes", Int),
            ("psi_memory_some_us", Int),
            ("psi_memory_full_us", Int),
            ("memory_note", Text),
        ],
        bulk: false,
    },
    Table {
        name: "trial_rail_energy",
        parent: "trial_id",
        columns: &[("rail", Text), ("energy_j", Real), ("in_total", Bool)],
        bulk: false,
    },
    Table {
        name: "trial_clocks",
        parent: "trial_id",
        columns: &[
            ("key", Text),
            ("start_value", Real),
            ("min_value", Real),
            ("max_value", Real),
            ("end_value", Real),
        ],
        bulk: false,
    },
    Table {
        name: "trial_output",
        parent: "trial_id",
        columns: &[("stream", Text), ("tail", Text)],
        bulk: false,
    },
];

pub(crate) const RUN_PROVENANCE: Table = Table {
    name: "run_provenance",
    parent: "run_id",
    columns: &[("key", Text), ("value", Text)],
    bulk: false,
};

/// The column names joined with `, `.
pub(crate) fn names(columns: &[(&str, Kind)]) -> String {
    columns
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `$first, $first+1, ...` with the casts that let text stand for times and JSON.
pub(crate) fn placeholders(columns: &[(&str, Kind)], first: usize) -> String {
    columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            let n = first + i;
            match kind {
                Time => format!("${n}::text::timestamptz"),
                Json => format!("${n}::text::jsonb"),
                _ => format!("${n}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Server expressions that read each column of `table` back as SQLite holds it. Text is cut
/// on the server one character past the store's limit for the column, so a hostile row costs
/// a bounded read and is then refused for its length.
pub(crate) fn server_selects(table: &str, columns: &[(&str, Kind)], alias: &str) -> String {
    let limit = |n: &str| match crate::store::validate::table(table)
        .and_then(|rules| rules.iter().find(|c| c.name == n))
        .map(|c| c.kind)
    {
        Some(crate::store::validate::Kind::Text(max)) => max,
        Some(crate::store::validate::Kind::Id) => crate::store::validate::MAX_ID,
        _ => crate::store::validate::MAX_DOCUMENT,
    };
    columns
        .iter()
        .map(|(n, kind)| match kind {
            Time => format!(
                "to_char({alias}.{n} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
            ),
            Bool => format!("{alias}.{n}::int::int8"),
            Json => format!("left({alias}.{n}::text, {})", limit(n) + 1),
            Text => format!("left({alias}.{n}, {})", limit(n) + 1),
            Int | Real => format!("{alias}.{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The type binary COPY writes for a column.
pub(crate) fn copy_type(kind: Kind) -> Type {
    match kind {
        Int => Type::INT8,
        Real => Type::FLOAT8,
        Bool => Type::BOOL,
        Text | Time | Json => Type::TEXT,
    }
}

/// One value between SQLite and the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
}

impl Cell {
    /// Column `i` of a SQLite row, as the server's `kind` wants it.
    pub(crate) fn from_sqlite(
        row: &rusqlite::Row<'_>,
        i: usize,
        kind: Kind,
    ) -> rusqlite::Result<Cell> {
        let v = row.get_ref(i)?;
        let text = |v: ValueRef<'_>| -> Option<String> {
            match v {
                ValueRef::Null => None,
                ValueRef::Integer(n) => Some(n.to_string()),
                ValueRef::Real(f) => Some(f.to_string()),
                ValueRef::Text(t) | ValueRef::Blob(t) => {
                    Some(String::from_utf8_lossy(t).into_owned())
                }
            }
        };
        Ok(match kind {
            Int => Cell::Int(match v {
                ValueRef::Integer(n) => Some(n),
                ValueRef::Real(f) => Some(f as i64),
                other => text(other).and_then(|t| t.parse().ok()),
            }),
            Real => Cell::Real(match v {
                ValueRef::Integer(n) => Some(n as f64),
                ValueRef::Real(f) => Some(f),
                other => text(other).and_then(|t| t.parse().ok()),
            }),
            Bool => Cell::Bool(match v {
                ValueRef::Integer(n) => Some(n != 0),
                ValueRef::Real(f) => Some(f != 0.0),
                other => text(other).map(|t| t == "1" || t == "true"),
            }),
            Text | Time | Json => Cell::Text(text(v)),
        })
    }

    /// Column `i` of a server row read with [`server_selects`].
    pub(crate) fn from_server(
        row: &postgres::Row,
        i: usize,
        kind: Kind,
    ) -> Result<Cell, postgres::Error> {
        Ok(match kind {
            Int | Bool => Cell::Int(row.try_get(i)?),
            Real => Cell::Real(row.try_get(i)?),
            Text | Time | Json => Cell::Text(row.try_get(i)?),
        })
    }
}

impl ToSql for Cell {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Cell::Int(v) => v.to_sql(ty, out),
            Cell::Real(v) => v.to_sql(ty, out),
            Cell::Text(v) => v.to_sql(ty, out),
            Cell::Bool(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        <i64 as ToSql>::accepts(ty)
            || <f64 as ToSql>::accepts(ty)
            || <String as ToSql>::accepts(ty)
            || <bool as ToSql>::accepts(ty)
    }

    postgres::types::to_sql_checked!();
}

impl rusqlite::ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Cell::Int(v) => rusqlite::ToSql::to_sql(v),
            Cell::Real(v) => rusqlite::ToSql::to_sql(v),
            Cell::Text(v) => rusqlite::ToSql::to_sql(v),
            Cell::Bool(v) => Ok(rusqlite::types::ToSqlOutput::Owned(match v {
                Some(b) => rusqlite::types::Value::Integer(i64::from(*b)),
                None => rusqlite::types::Value::Null,
            })),
        }
    }
}
