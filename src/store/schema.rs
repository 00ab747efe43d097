//! Database schema and its migrations.
//!
//! The schema version lives in `PRAGMA user_version` (cheap to read, survives copies) and is
//! mirrored in the `meta` table so that a human with `sqlite3` sees it too. Each entry of
//! [`MIGRATIONS`], one SQL file under `migrations/` named by its version, moves the database
//! from version `n - 1` to `n` and runs in its own transaction together with the version bump,
//! so a crash leaves either the old or the new schema, never half of one. New steps are
//! appended; a released step is never edited, since files already migrated by it keep its
//! result.
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
//!
//! # Version 11: the push ledger
//!
//! ## `pushed` — trials a central PostgreSQL holds (`edgebench push`), WITHOUT ROWID
//!
//! | column | type | meaning |
//! |--------|------|---------|
//! | `trial_uuid` | TEXT NOT NULL | the trial (`trials.uuid`) |
//! | `target` | TEXT NOT NULL | the server as `postgres://USER@HOST:PORT/DB` (never a password) |
//! | `pushed_at` | TEXT NOT NULL | RFC 3339 UTC time the server's commit was seen |
//!
//! Primary key (`trial_uuid`, `target`). Only a hint: each push asks the server which trials
//! it holds, and the server's answer wins. `merge` leaves this table out (it is per board).

/// Value of `meta.application` that marks a file as ours.
pub(crate) const APPLICATION: &str = "edgebench";

/// One schema step: applying `sql` to a database at `version - 1` yields `version`.
pub struct Migration {
    pub version: u32,
    pub sql: &'static str,
}

/// Ordered migrations, one SQL file each under `migrations/`, numbered by the version it
/// yields; the last one's version is the version this binary writes.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        sql: include_str!("migrations/0002_memory.sql"),
    },
    Migration {
        version: 3,
        sql: include_str!("migrations/0003_power.sql"),
    },
    Migration {
        version: 4,
        sql: include_str!("migrations/0004_provenance.sql"),
    },
    Migration {
        version: 5,
        sql: include_str!("migrations/0005_power_scope.sql"),
    },
    Migration {
        version: 6,
        sql: include_str!("migrations/0006_workloads.sql"),
    },
    Migration {
        version: 7,
        sql: include_str!("migrations/0007_output.sql"),
    },
    Migration {
        version: 8,
        sql: include_str!("migrations/0008_gpu_memory.sql"),
    },
    Migration {
        version: 9,
        sql: include_str!("migrations/0009_logged_text.sql"),
    },
    Migration {
        version: 10,
        sql: include_str!("migrations/0010_repetition.sql"),
    },
    Migration {
        version: 11,
        sql: include_str!("migrations/0011_pushed.sql"),
    },
];

/// Schema version this binary creates and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].version;

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
