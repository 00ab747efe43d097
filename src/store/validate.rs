//! What a stored row must hold for every edgebench command to read it: one rule per column of
//! every table the store writes, merges and syncs.
//!
//! The writer checks what it is about to write against these rules; `merge` (and so `fetch`
//! and `pull`, which merge what they bring) checks every incoming row and refuses the trial (or
//! run) a bad row belongs to, naming board, trial and field; the readers convert each row on
//! its own and report and skip one that a file written by something else holds. A database
//! that only went through these doors never holds a row its own commands cannot read.

use rusqlite::types::ValueRef;

use super::status::TrialStatus;

/// The longest text of a column that names or notes something (host, net, error text,
/// provenance values, output tails): far above any real one, low enough that a hostile row
/// cannot make a reader allocate much.
pub(crate) const MAX_TEXT: usize = 1 << 20;

/// The longest configuration document (`runs.config_toml`) or JSON object.
pub(crate) const MAX_DOCUMENT: usize = 4 << 20;

/// The longest identifier (`uuid`): a UUID is 36 characters.
pub(crate) const MAX_ID: usize = 64;

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// UTF-8 text of at most this many bytes.
    Text(usize),
    /// An identifier: 1 to [`MAX_ID`] ASCII letters, digits, `-` and `_` (it becomes part of
    /// file names).
    Id,
    /// An integer of at least this value (a count: 0).
    Int(i64),
    /// A number (integer or real).
    Real,
    /// 0 or 1.
    Flag,
    /// A time: RFC 3339 UTC text as edgebench writes it, at most [`MAX_ID`] bytes. Its form is
    /// not checked: no command parses it, and files from other tools may write it otherwise.
    Time,
    /// A trial status name ([`TrialStatus`]).
    Status,
    /// A JSON object as text.
    JsonObject,
}

/// One column's rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) null: bool,
}

const fn req(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        null: false,
    }
}

const fn opt(name: &'static str, kind: Kind) -> Column {
    Column {
        name,
        kind,
        null: true,
    }
}

const TEXT: Kind = Kind::Text(MAX_TEXT);
const DOCUMENT: Kind = Kind::Text(MAX_DOCUMENT);
const COUNT: Kind = Kind::Int(0);
const INT: Kind = Kind::Int(i64::MIN);

/// `runs` without its local id.
pub(crate) const RUNS: &[Column] = &[
    req("uuid", Kind::Id),
    req("host", TEXT),
    req("started_at", Kind::Time),
    opt("ended_at", Kind::Time),
    req("status", TEXT),
    req("config_toml", DOCUMENT),
    req("edgebench_version", TEXT),
    req("git_commit", TEXT),
    req("candle_version", TEXT),
    req("cpu_threads", COUNT),
    opt("cpu_model", TEXT),
    req("os", TEXT),
    opt("board", TEXT),
    opt("power_total", TEXT),
    opt("baseline_power_w", Kind::Real),
    opt("baseline_s", Kind::Real),
    opt("power_scope", TEXT),
];

/// `trials` without its local id and run id.
pub(crate) const TRIALS: &[Column] = &[
    req("uuid", Kind::Id),
    req("net", TEXT),
    req("device", TEXT),
    req("batch", COUNT),
    req("epochs", COUNT),
    req("images", COUNT),
    req("dataset", TEXT),
    req("iterations_planned", COUNT),
    req("iterations_done", COUNT),
    req("warmup_iterations", COUNT),
    req("status", Kind::Status),
    opt("error", DOCUMENT),
    req("started_at", Kind::Time),
    opt("ended_at", Kind::Time),
    opt("time_per_image_s", Kind::Real),
    opt("time_per_image_spread_s", Kind::Real),
    opt("images_per_s", Kind::Real),
    opt("loss_first", Kind::Real),
    opt("loss_last", Kind::Real),
    req("loss_anomaly", Kind::Flag),
    opt("energy_j", Kind::Real),
    opt("avg_power_w", Kind::Real),
    opt("energy_per_image_j", Kind::Real),
    opt("edp_js", Kind::Real),
    opt("swap_pressure", Kind::Flag),
    opt("peak_rss_bytes", INT),
    opt("dynamic_energy_j", Kind::Real),
    opt("power_samples", INT),
    opt("power_rate_hz", Kind::Real),
    opt("power_jitter_s", Kind::Real),
    opt("power_incomplete", Kind::Flag),
    opt("power_gap_s", Kind::Real),
    opt("throttled", Kind::Flag),
    opt("throttle_note", TEXT),
    opt("power_low_samples", INT),
    opt("power_note", TEXT),
    req("workload", TEXT),
    req("params", Kind::JsonObject),
    opt("time_per_iteration_s", Kind::Real),
    opt("time_per_iteration_spread_s", Kind::Real),
    opt("total_time_s", Kind::Real),
    opt("gflop_per_s", Kind::Real),
    opt("metrics", Kind::JsonObject),
    opt("peak_gpu_bytes", INT),
    req("repetition", Kind::Int(1)),
];

/// The child tables (their parent column left out), by name.
pub(crate) const CHILDREN: &[(&str, &[Column])] = &[
    (
        "iterations",
        &[
            req("step", COUNT),
            req("epoch", COUNT),
            opt("loss", Kind::Real),
            opt("lr", Kind::Real),
            req("data_s", Kind::Real),
            req("step_s", Kind::Real),
            req("t_start_ns", INT),
            req("t_end_ns", INT),
            opt("energy_j", Kind::Real),
            opt("loss_text", TEXT),
            opt("step_s_text", TEXT),
        ],
    ),
    (
        "power_samples",
        &[
            req("source", TEXT),
            req("rail", TEXT),
            req("t_ns", INT),
            opt("volts", Kind::Real),
            opt("amps", Kind::Real),
            req("watts", Kind::Real),
        ],
    ),
    (
        "trial_memory",
        &[
            opt("mem_estimate_bytes", INT),
            opt("mem_limit_bytes", INT),
            opt("swap_in_pages", INT),
            opt("swap_out_pages", INT),
            opt("major_faults", INT),
            opt("swapped_bytes_max", INT),
            opt("mem_available_min_bytes", INT),
            opt("psi_memory_some_us", INT),
            opt("psi_memory_full_us", INT),
            opt("memory_note", TEXT),
        ],
    ),
    (
        "trial_rail_energy",
        &[
            req("rail", TEXT),
            req("energy_j", Kind::Real),
            req("in_total", Kind::Flag),
        ],
    ),
    (
        "trial_clocks",
        &[
            req("key", TEXT),
            req("start_value", Kind::Real),
            req("min_value", Kind::Real),
            req("max_value", Kind::Real),
            req("end_value", Kind::Real),
        ],
    ),
    (
        "trial_output",
        &[req("stream", TEXT), req("tail", DOCUMENT)],
    ),
    ("run_provenance", &[req("key", TEXT), req("value", TEXT)]),
];

/// The rules of `table`'s columns; None for a table without rules (`meta`, `pushed`).
pub(crate) fn table(table: &str) -> Option<&'static [Column]> {
    match table {
        "runs" => Some(RUNS),
        "trials" => Some(TRIALS),
        other => CHILDREN.iter().find(|(n, _)| *n == other).map(|(_, c)| *c),
    }
}

/// A rule a value breaks: the column (`table.column`) and what is wrong with the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub problem: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// At most 40 characters of a value, for messages: a bad row's text may be huge.
pub(crate) fn excerpt(text: &str) -> String {
    const SHOWN: usize = 40;
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(SHOWN).collect();
    match chars.next() {
        Some(_) => format!("{head:?}... ({} bytes)", text.len()),
        None => format!("{head:?}"),
    }
}

fn type_name(v: ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real number",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    }
}

/// Whether `v` may stand in a column of `kind` (`null`: whether NULL may); the problem if not.
pub(crate) fn check_value(kind: Kind, null: bool, v: ValueRef<'_>) -> Result<(), String> {
    let wrong = |what: &str| Err(format!("{} where {what} belongs", type_name(v)));
    if matches!(v, ValueRef::Null) {
        return if null {
            Ok(())
        } else {
            Err("NULL where a value is required".into())
        };
    }
    fn text<'a>(v: ValueRef<'a>) -> Option<&'a str> {
        match v {
            ValueRef::Text(t) => std::str::from_utf8(t).ok(),
            _ => None,
        }
    }
    match kind {
        Kind::Text(max) => match v {
            ValueRef::Text(t) if t.len() > max => {
                Err(format!("{} bytes of text, more than {max}", t.len()))
            }
            ValueRef::Text(t) if std::str::from_utf8(t).is_err() => {
                Err("text that is not UTF-8".into())
            }
            ValueRef::Text(_) => Ok(()),
            _ => wrong("text"),
        },
        Kind::Id => match text(v) {
            Some(id)
                if !id.is_empty()
                    && id.len() <= MAX_ID
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
            {
                Ok(())
            }
            Some(id) => Err(format!(
                "{} is not an id (1 to {MAX_ID} letters, digits, '-' and '_')",
                excerpt(id)
            )),
            None => wrong("an id (text)"),
        },
        Kind::Int(min) => match v {
            ValueRef::Integer(n) if n < min => Err(match min {
                0 => format!("{n} is negative (a count)"),
                _ => format!("{n} is below {min}"),
            }),
            ValueRef::Integer(_) => Ok(()),
            _ => wrong("an integer"),
        },
        Kind::Real => match v {
            ValueRef::Integer(_) | ValueRef::Real(_) => Ok(()),
            _ => wrong("a number"),
        },
        Kind::Flag => match v {
            ValueRef::Integer(0 | 1) => Ok(()),
            ValueRef::Integer(n) => Err(format!("{n} where 0 or 1 belongs")),
            _ => wrong("0 or 1"),
        },
        Kind::Time => match text(v) {
            Some(t) if t.len() <= MAX_ID => Ok(()),
            Some(t) => Err(format!(
                "{} is too long for a time (e.g. 2025-01-31T12:00:00Z)",
                excerpt(t)
            )),
            None => wrong("a time (text)"),
        },
        Kind::Status => match text(v) {
            Some(t) if TrialStatus::parse(t).is_some() => Ok(()),
            Some(t) => Err(format!(
                "unknown trial status {} (known: {})",
                excerpt(t),
                TrialStatus::ALL.map(TrialStatus::as_str).join(", ")
            )),
            None => wrong("a status (text)"),
        },
        Kind::JsonObject => match text(v) {
            Some(t) if t.len() > MAX_DOCUMENT => Err(format!(
                "{} bytes of JSON, more than {MAX_DOCUMENT}",
                t.len()
            )),
            Some(t) => match serde_json::from_str::<serde_json::Value>(t) {
                Ok(serde_json::Value::Object(_)) => Ok(()),
                Ok(_) => Err(format!("{} is not a JSON object", excerpt(t))),
                Err(e) => Err(format!("{} is not JSON ({e})", excerpt(t))),
            },
            None => wrong("a JSON object (text)"),
        },
    }
}

/// Checks the columns of `row` that `table` has rules for (by name: a row of an older schema
/// lacks some; the parent and local id columns have none).
pub(crate) fn check_row(table: &str, row: &rusqlite::Row<'_>) -> Result<(), Violation> {
    let Some(rules) = self::table(table) else {
        return Ok(());
    };
    let stmt = row.as_ref();
    for i in 0..stmt.column_count() {
        let Ok(name) = stmt.column_name(i) else {
            continue;
        };
        let Some(rule) = rules.iter().find(|c| c.name == name) else {
            continue;
        };
        let value = row.get_ref(i).map_err(|e| Violation {
            field: format!("{table}.{name}"),
            problem: e.to_string(),
        })?;
        check_value(rule.kind, rule.null, value).map_err(|problem| Violation {
            field: format!("{table}.{name}"),
            problem,
        })?;
    }
    Ok(())
}

/// Checks values about to be written to `table` as (column, value) pairs: the writer's side of
/// the same rules.
pub(crate) fn check_values(
    table: &str,
    values: &[(&str, &dyn rusqlite::ToSql)],
) -> Result<(), Violation> {
    let Some(rules) = self::table(table) else {
        return Ok(());
    };
    for (name, value) in values {
        let Some(rule) = rules.iter().find(|c| c.name == *name) else {
            continue;
        };
        let field = || format!("{table}.{name}");
        let out = value.to_sql().map_err(|e| Violation {
            field: field(),
            problem: e.to_string(),
        })?;
        let v = match &out {
            rusqlite::types::ToSqlOutput::Borrowed(v) => *v,
            rusqlite::types::ToSqlOutput::Owned(v) => ValueRef::from(v),
            _ => continue,
        };
        // SQLite stores a NaN as NULL.
        let v = match v {
            ValueRef::Real(f) if f.is_nan() => ValueRef::Null,
            v => v,
        };
        check_value(rule.kind, rule.null, v).map_err(|problem| Violation {
            field: field(),
            problem,
        })?;
    }
    Ok(())
}

/// The column and problem of a failed conversion of `row` (a reader's view of a broken rule).
pub(crate) fn conversion_violation(row: &rusqlite::Row<'_>, e: &rusqlite::Error) -> Violation {
    use rusqlite::Error as E;
    let stmt = row.as_ref();
    let name = |i: usize| stmt.column_name(i).unwrap_or("?").to_string();
    match e {
        E::IntegralValueOutOfRange(i, n) => Violation {
            field: name(*i),
            problem: format!("{n} is out of range (a count is 0 or more)"),
        },
        E::FromSqlConversionFailure(i, _, inner) => Violation {
            field: name(*i),
            problem: inner.to_string(),
        },
        E::InvalidColumnType(i, _, ty) => Violation {
            field: name(*i),
            problem: format!("holds {ty}, not what the column holds"),
        },
        other => Violation {
            field: "?".into(),
            problem: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value;

    fn check(kind: Kind, null: bool, v: Value) -> Result<(), String> {
        check_value(kind, null, ValueRef::from(&v))
    }

    #[test]
    fn each_kind_takes_what_the_readers_read_and_refuses_the_rest() {
        use Value::{Blob, Integer, Null, Real, Text};
        assert!(check(COUNT, false, Integer(0)).is_ok());
        let e = check(COUNT, false, Integer(-1)).unwrap_err();
        assert!(e.contains("-1 is negative"), "{e}");
        assert!(check(COUNT, false, Real(1.5)).is_err());
        assert!(check(COUNT, false, Null).unwrap_err().contains("NULL"));
        assert!(check(COUNT, true, Null).is_ok());
        assert!(check(Kind::Int(1), false, Integer(0)).is_err());
        assert!(check(Kind::Real, false, Integer(3)).is_ok());
        assert!(check(Kind::Real, false, Real(f64::INFINITY)).is_ok());
        assert!(check(Kind::Real, false, Text("1".into())).is_err());
        assert!(check(Kind::Flag, false, Integer(1)).is_ok());
        assert!(check(Kind::Flag, false, Integer(2)).is_err());
        assert!(check(Kind::Flag, false, Real(1.0)).is_err());
        assert!(check(TEXT, false, Text("x".repeat(MAX_TEXT))).is_ok());
        let e = check(TEXT, false, Text("x".repeat(MAX_TEXT + 1))).unwrap_err();
        assert!(e.contains("more than"), "{e}");
        assert!(check(TEXT, false, Integer(7)).is_err());
        assert!(check(TEXT, false, Blob(vec![0xff])).is_err());
        assert!(check(Kind::Id, false, Text(uuid::Uuid::new_v4().to_string())).is_ok());
        for bad in ["", "../x", "€€€", &"a".repeat(MAX_ID + 1)] {
            assert!(check(Kind::Id, false, Text(bad.into())).is_err(), "{bad:?}");
        }
        for good in ["2025-01-31T12:00:00Z", "2025-01-31T12:00:00.123Z"] {
            assert!(
                check(Kind::Time, false, Text(good.into())).is_ok(),
                "{good}"
            );
        }
        assert!(check(Kind::Time, false, Text("x".repeat(MAX_ID + 1))).is_err());
        assert!(check(Kind::Time, false, Integer(1)).is_err());
        assert!(check(Kind::Status, false, Text("ok".into())).is_ok());
        let e = check(Kind::Status, false, Text("done".into())).unwrap_err();
        assert!(e.contains("unknown trial status \"done\""), "{e}");
        assert!(check(Kind::JsonObject, false, Text("{\"a\": 1}".into())).is_ok());
        let e = check(Kind::JsonObject, false, Text("[1]".into())).unwrap_err();
        assert!(e.contains("not a JSON object"), "{e}");
        assert!(check(Kind::JsonObject, false, Text("{".into())).is_err());
    }

    #[test]
    fn excerpts_are_short_whatever_the_value() {
        let long = "é".repeat(100_000);
        let e = excerpt(&long);
        assert!(e.len() < 120 && e.contains("200000 bytes"), "{e}");
        assert_eq!(excerpt("ok"), "\"ok\"");
    }

    #[test]
    fn the_writer_side_sees_nan_as_null_and_names_the_field() {
        let nan = f64::NAN;
        let e = check_values("iterations", &[("step_s", &nan)]).unwrap_err();
        assert_eq!(e.field, "iterations.step_s");
        check_values("iterations", &[("loss", &nan)]).unwrap();
        let bad = "{".to_string();
        let e = check_values("trials", &[("params", &bad)]).unwrap_err();
        assert_eq!(e.field, "trials.params");
    }
}
