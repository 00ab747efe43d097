//! Database schema and its migrations.
//!
//! The schema version lives in `PRAGMA user_version` (cheap to read, survives copies) and is
//! mirrored in the `meta` table so that a human with `sqlite3` sees it too. Each entry of
//! [`MIGRATIONS`] moves the database from version `n - 1` to `n` and runs in its own
//! transaction together with the version bump, so a crash leaves either the old or the new
//! schema, never half of one. Later issues append steps; never edit a released step.
//!
//! # Tables
//!
//! Times are RFC 3339 UTC text (`2025-01-31T12:00:00Z`), durations are seconds (REAL), counts
//! are INTEGER. SQLite stores a NaN REAL as NULL, so a NaN loss reads back as NULL.
//!
//! ## `meta`
//!
//! | column  | type | meaning |
//! |---------|------|---------|
//! | `key`   | TEXT PRIMARY KEY | `application` (always `edgebench`), `schema_version`, `created_with` (edgebench version that created the file) |
//! | `value` | TEXT NOT NULL | the value |
//!
//! ## `runs` — one invocation of `edgebench run`
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `id` | INTEGER PRIMARY KEY | local row id; differs between boards, use `uuid` to merge |
//! | `uuid` | TEXT UNIQUE NOT NULL | globally unique run id (UUID v4) |
//! | `host` | TEXT NOT NULL | host name of the board |
//! | `started_at` | TEXT NOT NULL | RFC 3339 UTC start time |
//! | `ended_at` | TEXT | RFC 3339 UTC end time; NULL while running or after a crash |
//! | `status` | TEXT NOT NULL | `running`, `finished` or `interrupted` |
//! | `config_toml` | TEXT NOT NULL | the full effective configuration, as TOML |
//! | `edgebench_version` | TEXT NOT NULL | version of the edgebench binary |
//! | `git_commit` | TEXT NOT NULL | commit the binary was built from (`unknown` if not known) |
//! | `candle_version` | TEXT NOT NULL | candle version linked in |
//! | `cpu_threads` | INTEGER NOT NULL | CPU threads used for training |
//! | `cpu_model` | TEXT | CPU model name, NULL if unknown |
//! | `os` | TEXT NOT NULL | operating system / kernel description |
//!
//! ## `trials` — one (net, device, batch, epochs, images, dataset) training job of a run
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `id` | INTEGER PRIMARY KEY | local row id (referenced by `iterations.trial_id`) |
//! | `uuid` | TEXT UNIQUE NOT NULL | globally unique trial id (UUID v4) |
//! | `run_id` | INTEGER NOT NULL → `runs.id` | the run this trial belongs to |
//! | `net` | TEXT NOT NULL | network, e.g. `alexnet`, `googlenet` |
//! | `device` | TEXT NOT NULL | `cpu` or `cuda` |
//! | `batch` | INTEGER NOT NULL | batch size |
//! | `epochs` | INTEGER NOT NULL | epochs planned |
//! | `images` | INTEGER NOT NULL | training images per epoch |
//! | `dataset` | TEXT NOT NULL | identity of the data set (name/path/hash text) |
//! | `iterations_planned` | INTEGER NOT NULL | training steps planned |
//! | `iterations_done` | INTEGER NOT NULL | steps recorded in `iterations` so far |
//! | `warmup_iterations` | INTEGER NOT NULL | leading steps excluded from the timing summary |
//! | `status` | TEXT NOT NULL | `running`, `ok`, `failed`, `interrupted` (more may be added; no CHECK) |
//! | `error` | TEXT | error message if the trial failed, else NULL |
//! | `started_at` | TEXT NOT NULL | RFC 3339 UTC start time |
//! | `ended_at` | TEXT | RFC 3339 UTC end time; NULL while running or after a crash |
//! | `time_per_image_s` | REAL | seconds per image (step time / batch, warm-up excluded) |
//! | `time_per_image_spread_s` | REAL | spread of the above (seconds) |
//! | `images_per_s` | REAL | throughput, images per second |
//! | `loss_first` | REAL | loss of the first step |
//! | `loss_last` | REAL | loss of the last step |
//! | `loss_anomaly` | INTEGER NOT NULL | 1 if the loss diverged or was not finite, else 0 |
//! | `energy_j` | REAL | energy of the trial in joules (NULL until power sampling exists) |
//! | `avg_power_w` | REAL | mean power in watts (NULL until power sampling exists) |
//! | `energy_per_image_j` | REAL | joules per image (NULL until power sampling exists) |
//! | `edp_js` | REAL | energy-delay product, J·s (NULL until power sampling exists) |
//! | `swap_pressure` | INTEGER | 1 if the system swapped during the trial, 0 if not, NULL if unmeasured |
//! | `peak_rss_bytes` | INTEGER | peak resident set size in bytes, NULL if unmeasured |
//!
//! Index `trials_key` on (`net`, `device`, `batch`, `epochs`, `images`, `dataset`, `status`)
//! serves resume (`completed_keys`); `trials_run` on `run_id` serves the foreign key.
//!
//! ## `iterations` — one training step (WITHOUT ROWID, clustered by trial and step)
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER NOT NULL → `trials.id` | the trial |
//! | `step` | INTEGER NOT NULL | 0-based step within the trial |
//! | `epoch` | INTEGER NOT NULL | 0-based epoch of the step |
//! | `loss` | REAL | training loss of the step (NULL if NaN) |
//! | `lr` | REAL | learning rate used (NULL since v7 when a command's log gives none) |
//! | `data_s` | REAL NOT NULL | seconds spent loading the batch |
//! | `step_s` | REAL NOT NULL | seconds for forward + backward + update |
//! | `t_start_ns` | INTEGER NOT NULL | CLOCK_MONOTONIC ns at step start (to align power samples) |
//! | `t_end_ns` | INTEGER NOT NULL | CLOCK_MONOTONIC ns at step end |
//!
//! Primary key (`trial_id`, `step`).
//!
//! ## `trial_memory` (v2) — what memory did to a trial; `trials.swap_pressure` and
//! `trials.peak_rss_bytes` hold the verdict and the peak
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER PRIMARY KEY → `trials.id` | the trial |
//! | `mem_estimate_bytes` | INTEGER | memory predicted before the trial ran |
//! | `mem_limit_bytes` | INTEGER | the cgroup cap (`--mem-limit`), NULL if none |
//! | `swap_in_pages` / `swap_out_pages` | INTEGER | system-wide pswpin/pswpout over the measured iterations |
//! | `major_faults` | INTEGER | the worker's own major page faults over the measured iterations |
//! | `swapped_bytes_max` | INTEGER | most of the worker's own memory seen in swap (VmSwap) |
//! | `mem_available_min_bytes` | INTEGER | lowest MemAvailable over the measured iterations |
//! | `psi_memory_some_us` / `psi_memory_full_us` | INTEGER | PSI memory stall time; NULL without PSI |
//! | `memory_note` | TEXT | the verdict in words |
//! # Version 3: power and energy
//!
//! Added to `runs`: `board` (TEXT, board profile used, NULL without `--power`),
//! `power_total` (TEXT, how the total power is formed, e.g. `VDD_IN (the board's input rail)`),
//! `baseline_power_w` (REAL, mean idle power of the total before the sweep, W),
//! `baseline_s` (REAL, seconds the baseline was measured over).
//!
//! Added to `trials` (NULL without `--power`; `energy_j`, `avg_power_w`,
//! `energy_per_image_j`, `edp_js` of v1 are now filled; all over the measured, post-warm-up
//! iterations, from the first one's `t_start_ns` to the last one's `t_end_ns`):
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `dynamic_energy_j` | REAL | `energy_j` - `runs.baseline_power_w` x duration (J) |
//! | `power_samples` | INTEGER | samples of the (first) total rail inside the interval |
//! | `power_rate_hz` | REAL | achieved sampling rate over the interval |
//! | `power_jitter_s` | REAL | standard deviation of the sample spacing (s) |
//! | `power_incomplete` | INTEGER | 1 if part of the interval had no valid samples (sensor errors) |
//! | `power_gap_s` | REAL | seconds of the interval without valid samples |
//!
//! Added to `iterations`: `energy_j` (REAL, total energy over the step's
//! [`t_start_ns`, `t_end_ns`], warm-up steps included).
//!
//! ## `power_samples` — every sample of every rail during a trial
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER NOT NULL → `trials.id` | the trial |
//! | `source` | TEXT NOT NULL | the monitor, e.g. `ina3221 1-0040 (/sys/...)` |
//! | `rail` | TEXT NOT NULL | rail name, e.g. `VDD_IN` |
//! | `t_ns` | INTEGER NOT NULL | CLOCK_MONOTONIC ns (same clock as `iterations.t_start_ns`) |
//! | `volts` | REAL | bus voltage (V), NULL for energy counters (RAPL) |
//! | `amps` | REAL | current (A), NULL for energy counters |
//! | `watts` | REAL NOT NULL | power (W) |
//!
//! Index `power_samples_trial` on (`trial_id`, `rail`, `t_ns`).
//!
//! ## `trial_rail_energy` — each rail's energy over the trial's measured interval
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER NOT NULL → `trials.id` | the trial |
//! | `rail` | TEXT NOT NULL | rail name |
//! | `energy_j` | REAL NOT NULL | joules |
//! | `in_total` | INTEGER NOT NULL | 1 if the rail is part of the total (`trials.energy_j`) |
//!
//! Primary key (`trial_id`, `rail`).
//!
//! # Version 4: provenance and throttling
//!
//! Added to `trials`: `throttled` (INTEGER, 1 if the trial's clocks changed or dropped for
//! temperature while it ran — the rule is in `src/provenance/clocks.rs` — 0 if they held, NULL
//! when the host exposes no clocks) and `throttle_note` (TEXT, the reasons, or what was watched).
//!
//! ## `run_provenance` — what the run was measured on, one row per item
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `run_id` | INTEGER NOT NULL → `runs.id` | the run |
//! | `key` | TEXT NOT NULL | e.g. `board`, `board.model`, `l4t`, `nvpmodel`, `jetson_clocks`, `kernel`, `cpu.policy0.governor`, `cpu.policy0.cur_khz`, `gpu.cur_hz`, `temp.CPU-therm.start_c`, `temp.CPU-therm.end_c` |
//! | `value` | TEXT NOT NULL | the value as read; an item the host lacks has no row |
//!
//! Primary key (`run_id`, `key`).
//!
//! ## `trial_clocks` — each watched clock, load and temperature over a trial
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER NOT NULL → `trials.id` | the trial |
//! | `key` | TEXT NOT NULL | `cpu.<policy>.cur_khz`, `gpu.cur_hz`, `gpu.load_permille`, `temp.<zone>.c` |
//! | `start_value` / `min_value` / `max_value` / `end_value` | REAL NOT NULL | first, lowest, highest and last reading |
//!
//! Primary key (`trial_id`, `key`).
//!
//! # Version 5: power scope, trials too short for the sensor
//!
//! Added to `runs`: `power_scope` (TEXT, `module` or `board`: what the total covers; NULL
//! without `--power` and for runs recorded before v5, whose total was module scope).
//!
//! Added to `trials`: `power_low_samples` (INTEGER, set only when fewer than 10 sensor updates
//! fell inside the measured interval: that count; the energy rests on too few readings. NULL
//! when enough, or without `--power`); `power_note` (TEXT, why the power record is incomplete:
//! the failing sensor and its error; NULL when complete).
//!
//! # Version 6: workloads
//!
//! A trial is (workload, device, parameters): the CNN training, the MLP study, operator
//! micro-benchmarks or an external command. Added to `trials`:
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `workload` | TEXT NOT NULL DEFAULT `cnn` | `cnn`, `mlp`, `ops`, `exec`; trials recorded before v6 are `cnn` |
//! | `params` | TEXT NOT NULL DEFAULT `{}` | the workload's own parameters as a JSON object (keys sorted), part of the resume key; `results --json` shows each as a key of its own (e.g. `style`, `size`); `{}` for `cnn`, whose parameters are the common columns |
//! | `time_per_iteration_s` | REAL | median step time over the measured iterations |
//! | `time_per_iteration_spread_s` | REAL | interquartile range of the above |
//! | `total_time_s` | REAL | sum of the measured iterations' step times |
//! | `gflop_per_s` | REAL | floating-point work per second, where the workload counts its FLOPs |
//! | `metrics` | TEXT | the workload's other figures as a JSON object, shown as keys of their own by `results --json`; NULL if none |
//!
//! The common columns keep their meaning for every workload: `net` names the model (`mlp` for
//! the MLP study), `batch` the items per iteration, `epochs`, `images` and `dataset` what was
//! planned and drawn from.

//!
//! # Version 7: what an external command printed
//!
//! ## `trial_output` — the end of each output stream of an `exec` trial's command
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_id` | INTEGER NOT NULL → `trials.id` | the trial |
//! | `stream` | TEXT NOT NULL | `stdout` or `stderr` |
//! | `tail` | TEXT NOT NULL | the last 64 KiB the command wrote there (invalid UTF-8 replaced) |
//!
//! Primary key (`trial_id`, `stream`).
//!
//! `iterations.lr` may be NULL: a command's log may give no learning rate.
//!
//! # Version 8: GPU memory
//!
//! Added to `trials`:
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `peak_gpu_bytes` | INTEGER | peak GPU memory allocated at once by the trial's process, bytes; NULL on the CPU or unmeasured |
//!
//! # Version 9: numbers as a log wrote them
//!
//! Added to `iterations` (NULL unless the iteration was imported from a log that gave it; the
//! CSV export repeats them, as the studies' parser copied them, e.g. `0.5000`):
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `loss_text` | TEXT | the loss as written |
//! | `step_s_text` | TEXT | the step's seconds as written, when they are `step_s` unscaled |
//!
//! # Version 10: repetitions
//!
//! Added to `trials`:
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `repetition` | INTEGER NOT NULL DEFAULT 1 | which repetition of its key the trial is (1-based, `[sweep] repeat`); 1 for trials stored before repetitions |

/// Value of `meta.application` that marks a file as ours.
pub const APPLICATION: &str = "edgebench";

/// One schema step: applying `sql` to a database at `version - 1` yields `version`.
pub struct Migration {
    pub version: u32,
    pub sql: &'static str,
}

/// Ordered migrations; the last one's version is the version this binary writes.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: V1,
    },
    Migration {
        version: 2,
        sql: V2_MEMORY,
    },
    Migration {
        version: 3,
        sql: V3_POWER,
    },
    Migration {
        version: 4,
        sql: V4_PROVENANCE,
    },
    Migration {
        version: 5,
        sql: V5_POWER_SCOPE,
    },
    Migration {
        version: 6,
        sql: V6_WORKLOADS,
    },
    Migration {
        version: 7,
        sql: V7_OUTPUT,
    },
    Migration {
        version: 8,
        sql: V8_GPU_MEMORY,
    },
    Migration {
        version: 9,
        sql: V9_LOGGED_TEXT,
    },
    Migration {
        version: 10,
        sql: V10_REPETITION,
    },
];

/// Schema version this binary creates and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

const V1: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('application', 'edgebench');

CREATE TABLE runs (
    id                INTEGER PRIMARY KEY,
    uuid              TEXT NOT NULL UNIQUE,
    host              TEXT NOT NULL,
    started_at        TEXT NOT NULL,
    ended_at          TEXT,
    status            TEXT NOT NULL,
    config_toml       TEXT NOT NULL,
    edgebench_version TEXT NOT NULL,
    git_commit        TEXT NOT NULL,
    candle_version    TEXT NOT NULL,
    cpu_threads       INTEGER NOT NULL,
    cpu_model         TEXT,
    os                TEXT NOT NULL
);

CREATE TABLE trials (
    id                      INTEGER PRIMARY KEY,
    uuid                    TEXT NOT NULL UNIQUE,
    run_id                  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    net                     TEXT NOT NULL,
    device                  TEXT NOT NULL,
    batch                   INTEGER NOT NULL,
    epochs                  INTEGER NOT NULL,
    images                  INTEGER NOT NULL,
    dataset                 TEXT NOT NULL,
    iterations_planned      INTEGER NOT NULL,
    iterations_done         INTEGER NOT NULL DEFAULT 0,
    warmup_iterations       INTEGER NOT NULL,
    status                  TEXT NOT NULL,
    error                   TEXT,
    started_at              TEXT NOT NULL,
    ended_at                TEXT,
    time_per_image_s        REAL,
    time_per_image_spread_s REAL,
    images_per_s            REAL,
    loss_first              REAL,
    loss_last               REAL,
    loss_anomaly            INTEGER NOT NULL DEFAULT 0 CHECK (loss_anomaly IN (0, 1)),
    energy_j                REAL,
    avg_power_w             REAL,
    energy_per_image_j      REAL,
    edp_js                  REAL,
    swap_pressure           INTEGER CHECK (swap_pressure IN (0, 1)),
    peak_rss_bytes          INTEGER
);
CREATE INDEX trials_key ON trials (net, device, batch, epochs, images, dataset, status);
CREATE INDEX trials_run ON trials (run_id);

CREATE TABLE iterations (
    trial_id   INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    loss       REAL,
    lr         REAL NOT NULL,
    data_s     REAL NOT NULL,
    step_s     REAL NOT NULL,
    t_start_ns INTEGER NOT NULL,
    t_end_ns   INTEGER NOT NULL,
    PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
";

/// v2: what memory did to each trial (see `src/memory/verdict.rs` for the rule).
const V2_MEMORY: &str = "
CREATE TABLE trial_memory (
    trial_id                INTEGER PRIMARY KEY REFERENCES trials(id) ON DELETE CASCADE,
    mem_estimate_bytes      INTEGER,
    mem_limit_bytes         INTEGER,
    swap_in_pages           INTEGER,
    swap_out_pages          INTEGER,
    major_faults            INTEGER,
    swapped_bytes_max       INTEGER,
    mem_available_min_bytes INTEGER,
    psi_memory_some_us      INTEGER,
    psi_memory_full_us      INTEGER,
    memory_note             TEXT
);
";

/// v3: power and energy (see the table docs above).
const V3_POWER: &str = "
ALTER TABLE runs ADD COLUMN board TEXT;
ALTER TABLE runs ADD COLUMN power_total TEXT;
ALTER TABLE runs ADD COLUMN baseline_power_w REAL;
ALTER TABLE runs ADD COLUMN baseline_s REAL;

ALTER TABLE trials ADD COLUMN dynamic_energy_j REAL;
ALTER TABLE trials ADD COLUMN power_samples INTEGER;
ALTER TABLE trials ADD COLUMN power_rate_hz REAL;
ALTER TABLE trials ADD COLUMN power_jitter_s REAL;
ALTER TABLE trials ADD COLUMN power_incomplete INTEGER CHECK (power_incomplete IN (0, 1));
ALTER TABLE trials ADD COLUMN power_gap_s REAL;

ALTER TABLE iterations ADD COLUMN energy_j REAL;

CREATE TABLE power_samples (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    source   TEXT NOT NULL,
    rail     TEXT NOT NULL,
    t_ns     INTEGER NOT NULL,
    volts    REAL,
    amps     REAL,
    watts    REAL NOT NULL
);
CREATE INDEX power_samples_trial ON power_samples (trial_id, rail, t_ns);

CREATE TABLE trial_rail_energy (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    rail     TEXT NOT NULL,
    energy_j REAL NOT NULL,
    in_total INTEGER NOT NULL CHECK (in_total IN (0, 1)),
    PRIMARY KEY (trial_id, rail)
) WITHOUT ROWID;
";

/// v4: provenance per run, clocks and throttling per trial (see the table docs above).
const V4_PROVENANCE: &str = "
ALTER TABLE trials ADD COLUMN throttled INTEGER CHECK (throttled IN (0, 1));
ALTER TABLE trials ADD COLUMN throttle_note TEXT;

CREATE TABLE run_provenance (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE trial_clocks (
    trial_id    INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    start_value REAL NOT NULL,
    min_value   REAL NOT NULL,
    max_value   REAL NOT NULL,
    end_value   REAL NOT NULL,
    PRIMARY KEY (trial_id, key)
) WITHOUT ROWID;
";

/// v5: what a run's power total covers, and trials too short for the power sensor.
const V5_POWER_SCOPE: &str = "
ALTER TABLE runs ADD COLUMN power_scope TEXT;
ALTER TABLE trials ADD COLUMN power_low_samples INTEGER;
ALTER TABLE trials ADD COLUMN power_note TEXT;
";

/// v6: a trial is (workload, device, parameters); workload-neutral timing and metrics.
const V6_WORKLOADS: &str = "
ALTER TABLE trials ADD COLUMN workload TEXT NOT NULL DEFAULT 'cnn';
ALTER TABLE trials ADD COLUMN params TEXT NOT NULL DEFAULT '{}';
ALTER TABLE trials ADD COLUMN time_per_iteration_s REAL;
ALTER TABLE trials ADD COLUMN time_per_iteration_spread_s REAL;
ALTER TABLE trials ADD COLUMN total_time_s REAL;
ALTER TABLE trials ADD COLUMN gflop_per_s REAL;
ALTER TABLE trials ADD COLUMN metrics TEXT;
";

const V7_OUTPUT: &str = "
CREATE TABLE iterations_v7 (
    trial_id   INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    loss       REAL,
    lr         REAL,
    data_s     REAL NOT NULL,
    step_s     REAL NOT NULL,
    t_start_ns INTEGER NOT NULL,
    t_end_ns   INTEGER NOT NULL,
    energy_j   REAL,
    PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
INSERT INTO iterations_v7 SELECT trial_id, step, epoch, loss, lr, data_s, step_s, t_start_ns, t_end_ns, energy_j FROM iterations;
DROP TABLE iterations;
ALTER TABLE iterations_v7 RENAME TO iterations;
CREATE TABLE trial_output (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    stream   TEXT NOT NULL,
    tail     TEXT NOT NULL,
    PRIMARY KEY (trial_id, stream)
);
";

/// v8: the trial's peak GPU memory (see the table docs above).
const V8_GPU_MEMORY: &str = "
ALTER TABLE trials ADD COLUMN peak_gpu_bytes INTEGER;
";

/// v9: an imported iteration's loss and time as its log wrote them.
const V9_LOGGED_TEXT: &str = "
ALTER TABLE iterations ADD COLUMN loss_text TEXT;
ALTER TABLE iterations ADD COLUMN step_s_text TEXT;
";

/// v10: the repetition index of a trial (see the table docs above).
const V10_REPETITION: &str = "
ALTER TABLE trials ADD COLUMN repetition INTEGER NOT NULL DEFAULT 1 CHECK (repetition >= 1);
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "migration {i} out of order");
        }
    }
}
