//! Importing old training logs: a folder laid out as the Caffe and TensorFlow study scripts
//! leave it, one log per run named `train_{net}_{CPU|GPU}_{batch}.log` (the batch zero-padded
//! to three digits, e.g. `train_alexnet_GPU_016.log`), read into trials with their iterations.
//!
//! Times: Caffe's glog lines (`I1222 14:03:21.372112 ...`) carry a timestamp, which places each
//! iteration; other lines are placed one after the other by the log's own step times. Instants
//! are nanoseconds from the log's first timestamp (or 0), not CLOCK_MONOTONIC: an imported
//! trial has no power record to line up with.
//!
//! [`prepare`] turns a folder into a run of `exec` trials for the store ([`Prepared::write`]):
//! params `{"command":[],"engine":ENGINE}` (an empty command: nothing was run), epochs and
//! images 0 (a log does not say), no warm-up (every logged step counts, as the study's parser
//! counts them), iterations planned 0 (as for any command), no power, memory or clock record
//! (`power_note` says so), `exit_code` and `wall_time_s` null, and `imported_log` the file read.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use anyhow::{bail, Context, Result};
use regex::Regex;

use super::command::ExecParams;
use super::parse::{LogEvent, Parser, StepTracker, TrackedStep};
use crate::provenance::Provenance;
use crate::record::{IterationRecord, MeasuredWindow, Metrics};
use crate::stats;
use crate::store::{
    ImportOutcome, ImportedTrial, LoggedText, RunInfo, Store, TrialKey, TrialStatus, TrialSummary,
};

/// Bytes read from a log at a time: logs are read a line at a time, never whole (a study's log
/// can be hundreds of megabytes).
const LOG_BUFFER: usize = 64 << 10;

/// The file naming of the study scripts, for messages.
pub(crate) const LOG_NAME_PATTERN: &str = "train_{net}_{CPU|GPU}_{batch}.log";

static LOG_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^train_(?P<net>.+)_(?P<device>[A-Za-z]+)_(?P<batch>\d+)\.log$")
        .expect("log name pattern compiles")
});

/// glog's line prefix: `Lmmdd hh:mm:ss.uuuuuu`.
static GLOG_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^[IWEF](?P<mo>\d{2})(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<us>\d{6})",
    )
    .expect("glog pattern compiles")
});

/// One imported log: a trial's identity and its iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedLog {
    pub path: PathBuf,
    pub net: String,
    /// As edgebench names devices: `cpu` or `cuda` (the scripts' `GPU`).
    pub device: String,
    pub batch: usize,
    pub iterations: Vec<TrackedStep>,
    /// Step lines that had neither a timestamp nor a time of their own, so no step time: left
    /// out of `iterations`.
    pub untimed_lines: usize,
    /// When the run's first iteration started and its last ended, by the log's own dates
    /// (glog's `Log file created at:` line and its timestamps), in the board's local time
    /// (a log names no zone); None for a log without dates.
    pub ran: Option<(String, String)>,
}

/// (net, device, batch) from a log's file name; None when the name is not a study log's.
pub(crate) fn parse_log_name(file_name: &str) -> Option<Result<(String, String, usize)>> {
    let c = LOG_NAME.captures(file_name)?;
    let device = match &c["device"] {
        "CPU" | "cpu" => "cpu",
        "GPU" | "gpu" | "CUDA" | "cuda" => "cuda",
        other => {
            return Some(Err(anyhow::anyhow!(
                "{file_name}: device '{other}' is neither CPU nor GPU (expected {LOG_NAME_PATTERN})"
            )))
        }
    };
    let batch = match c["batch"].parse::<usize>() {
        Ok(b) if b > 0 => b,
        _ => {
            return Some(Err(anyhow::anyhow!(
                "{file_name}: batch '{}' is not a batch size >= 1 (expected {LOG_NAME_PATTERN})",
                &c["batch"]
            )))
        }
    };
    Some(Ok((c["net"].to_string(), device.to_string(), batch)))
}

/// Reads every study log of `dir` with the parser named `parser_name`. Refuses the whole
/// folder, naming every problem, when a `.log` file is not named as the scripts name them, a
/// log has no step line of the format, or there is no log at all; other files and folders
/// (TensorFlow's train dirs sit beside its logs) are passed over.
pub(crate) fn import_dir(dir: &Path, parser_name: &str) -> Result<Vec<ImportedLog>> {
    Parser::from_name(parser_name)?;
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the log folder {}", dir.display()))?;
    let mut logs = Vec::new();
    let mut problems = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read the log folder {}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !path.is_file() || !name.ends_with(".log") {
            continue;
        }
        let (net, device, batch) = match parse_log_name(&name) {
            None => {
                problems.push(format!("{name}: not named {LOG_NAME_PATTERN}"));
                continue;
            }
            Some(Err(e)) => {
                problems.push(format!("{e:#}"));
                continue;
            }
            Some(Ok(identity)) => identity,
        };
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) => {
                problems.push(format!("{name}: cannot read: {e}"));
                continue;
            }
        };
        let parser = Parser::from_name(parser_name)?;
        match read_log_to_end(BufReader::with_capacity(LOG_BUFFER, file), parser) {
            Ok(read) if read.iterations.is_empty() => problems.push(format!(
                "{name}: no {parser_name} step line with a time (is --parser right?)"
            )),
            Ok(read) => {
                if let Some(line) = read.cut_off_line {
                    tracing::warn!(
                        "{name}: line {line}, the last, has no end of line: the log was cut \
                         off (a run killed while it wrote, or a copy of a running log), and \
                         that line may be too; its run is imported as far as it goes"
                    );
                }
                logs.push(ImportedLog {
                    path,
                    net,
                    device,
                    batch,
                    ran: read.ran(),
                    iterations: read.iterations,
                    untimed_lines: read.untimed,
                })
            }
            Err(e) => problems.push(format!("{name}: {e:#}")),
        }
    }
    if !problems.is_empty() {
        problems.sort();
        bail!(
            "cannot import the logs in {}; nothing was imported:\n  {}",
            dir.display(),
            problems.join("\n  ")
        );
    }
    if logs.is_empty() {
        bail!(
            "no log named {LOG_NAME_PATTERN} in {}: give the folder the run scripts wrote their \
             logs to",
            dir.display()
        );
    }
    logs.sort_by(|a, b| (&a.net, &a.device, a.batch).cmp(&(&b.net, &b.device, b.batch)));
    Ok(logs)
}

/// The engine name of edgebench's own trainer (the `cnn` workload) in reports and exports.
pub(crate) const OWN_ENGINE: &str = "edgebench";

/// `power_note` of every imported trial.
pub(crate) const POWER_NOTE: &str = "imported log: no power measured";

/// An engine name for an import: a plain name (it becomes part of file names), not edgebench's
/// own.
pub(crate) fn check_engine(engine: &str) -> Result<()> {
    if engine.is_empty()
        || !engine
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || engine.starts_with('.')
    {
        bail!(
            "--engine {engine:?}: give the framework's name in letters, digits, '-', '_' or '.', \
             e.g. --engine caffe"
        );
    }
    if engine == OWN_ENGINE {
        bail!(
            "--engine {OWN_ENGINE}: that name is edgebench's own trainer in reports; name the \
             framework that wrote the logs, e.g. --engine caffe"
        );
    }
    Ok(())
}

/// What `edgebench import logs` was asked to read.
#[derive(Debug, Clone)]
pub struct LogImport<'a> {
    pub dir: &'a Path,
    pub parser: &'a str,
    pub engine: &'a str,
    /// The machine the logs come from, as reports will name it.
    pub host: &'a str,
}

/// A folder read and checked, ready to be written as one run.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub logs: Vec<ImportedLog>,
    pub run: RunInfo,
    pub provenance: Provenance,
    pub trials: Vec<ImportedTrial>,
}

/// Reads and checks everything before the database is touched: an error here (a bad engine
/// name, a folder that cannot be read, a log that is not named or formatted as expected)
/// refuses the import with nothing written.
pub fn prepare(req: &LogImport<'_>) -> Result<Prepared> {
    let now = crate::clock::now_rfc3339();
    let now = now.as_str();
    check_engine(req.engine)?;
    if req.host.trim().is_empty() {
        bail!("--host is empty: give the name of the machine the logs come from");
    }
    let logs = import_dir(req.dir, req.parser)?;
    let dir = std::path::absolute(req.dir).unwrap_or_else(|_| req.dir.to_path_buf());
    let import: toml::Table = [
        ("dir", dir.display().to_string()),
        ("parser", req.parser.to_string()),
        ("engine", req.engine.to_string()),
        ("host", req.host.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), toml::Value::String(v)))
    .collect();
    let mut config = toml::Table::new();
    config.insert("import".into(), toml::Value::Table(import));
    let run = RunInfo {
        uuid: uuid::Uuid::new_v4().to_string(),
        host: req.host.to_string(),
        started_at: now.to_string(),
        config_toml: format!("# edgebench import logs\n{config}"),
        edgebench_version: crate::host::VERSION.to_string(),
        git_commit: crate::host::GIT_COMMIT.to_string(),
        candle_version: crate::host::CANDLE_VERSION.to_string(),
        // Nothing was trained here; the logs do not say what ran them.
        cpu_threads: 0,
        cpu_model: None,
        os: "unknown (imported logs)".to_string(),
    };
    let provenance = Provenance(
        [
            ("import.dir", dir.display().to_string()),
            ("import.parser", req.parser.to_string()),
            ("import.engine", req.engine.to_string()),
            ("import.logs", logs.len().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    );
    let trials: Vec<ImportedTrial> = logs
        .iter()
        .map(|log| imported_trial(log, req.engine, now))
        .collect();
    // The store's own rules, checked before it is opened: a log whose numbers no command could
    // read back (a NaN step time, a count past the integers) is named, nothing imported.
    let problems: Vec<String> = logs
        .iter()
        .zip(&trials)
        .filter_map(|(log, trial)| {
            let name = log.path.file_name().unwrap_or_default().to_string_lossy();
            trial.check().err().map(|v| format!("{name}: {v}"))
        })
        .collect();
    if !problems.is_empty() {
        bail!(
            "cannot import the logs of host {} in {}; nothing was imported:\n  {}",
            crate::store::validate::excerpt(req.host),
            req.dir.display(),
            problems.join("\n  ")
        );
    }
    Ok(Prepared {
        logs,
        run,
        provenance,
        trials,
    })
}

impl Prepared {
    /// Writes the run and its trials in one transaction, skipping trials already imported.
    pub fn write(&self, store: &mut Store) -> crate::store::Result<ImportOutcome> {
        store.import_run(&self.run, &self.provenance, &self.trials)
    }
}

/// The trial a log stands for.
pub(crate) fn imported_trial(log: &ImportedLog, engine: &str, now: &str) -> ImportedTrial {
    let (started_at, ended_at) = match &log.ran {
        Some((from, to)) => (Some(from.clone()), to.clone()),
        None => (None, now.to_string()),
    };
    let records: Vec<IterationRecord> = log.iterations.iter().map(|s| s.record).collect();
    let step_s: Vec<f64> = records.iter().map(|r| r.step_s).collect();
    let losses: Vec<f64> = records.iter().map(|r| r.loss).collect();
    let times = stats::time_summary(&step_s, 0, log.batch);
    let (median, iqr) = stats::median_iqr(&step_s).unzip();
    let mut extra = serde_json::Map::new();
    // Not known from a log: the keys of a measured exec trial, null.
    extra.insert("exit_code".into(), serde_json::Value::Null);
    extra.insert("wall_time_s".into(), serde_json::Value::Null);
    // When the log was read into the store; the trial is dated by the log where it can be.
    extra.insert("imported_at".into(), now.into());
    extra.insert(
        "imported_log".into(),
        std::path::absolute(&log.path)
            .unwrap_or_else(|_| log.path.clone())
            .display()
            .to_string()
            .into(),
    );
    let params = ExecParams {
        engine: engine.to_string(),
        command: Vec::new(),
    };
    let mut metrics = Metrics {
        time_per_iteration_s: median,
        time_per_iteration_spread_s: iqr,
        // Each record's time is per iteration, over the iterations it stands for.
        total_time_s: (!records.is_empty()).then(|| super::total_time_s(&records, 0)),
        gflop_per_s: None,
        extra,
    };
    metrics.set_window(MeasuredWindow::of(&records, 0));
    ImportedTrial {
        key: TrialKey {
            workload: "exec".into(),
            net: log.net.clone(),
            device: log.device.clone(),
            batch: log.batch,
            epochs: 0,
            images: 0,
            dataset: String::new(),
            params: params.canonical_json(),
        },
        summary: TrialSummary {
            status: TrialStatus::Ok,
            error: None,
            ended_at,
            time_per_image_s: times.as_ref().map(|t| t.time_per_image_s),
            time_per_image_spread_s: times.as_ref().map(|t| t.time_per_image_spread_s),
            images_per_s: times.as_ref().map(|t| t.images_per_s),
            loss_first: losses.first().copied(),
            loss_last: losses.last().copied(),
            loss_anomaly: stats::loss_anomaly(&losses).is_some(),
            metrics,
        },
        iterations: records,
        power_note: POWER_NOTE.to_string(),
        started_at,
        logged: log
            .iterations
            .iter()
            .map(|s| LoggedText {
                loss: s.text.loss.clone(),
                step_s: s.text.time.clone(),
            })
            .collect(),
    }
}

/// Nanoseconds of a glog timestamp from the start of the year (glog writes no year; a leap
/// day is counted every year, which only shifts instants, not intervals within a run).
fn glog_ns(line: &str) -> Option<i64> {
    const DAYS_BEFORE: [i64; 12] = [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335];
    let c = GLOG_TIME.captures(line)?;
    let field = |name: &str| c[name].parse::<i64>().ok();
    let month = field("mo")?;
    let day = *DAYS_BEFORE.get(usize::try_from(month).ok()?.checked_sub(1)?)? + field("d")? - 1;
    let seconds = ((day * 24 + field("h")?) * 60 + field("mi")?) * 60 + field("s")?;
    Some(seconds * 1_000_000_000 + field("us")? * 1000)
}

/// A log's iterations, and how many step lines had no time to give. The log is read a line at
/// a time: what is kept is its step records and the line being parsed. Lines end at `\n` or
/// `\r` (progress bars redraw with `\r`), bytes that are not UTF-8 read as U+FFFD, and lines
/// are numbered from 1 in that sense for errors.
pub(crate) fn read_log(log: impl BufRead, parser: Parser) -> Result<(Vec<TrackedStep>, usize)> {
    read_log_to_end(log, parser).map(|read| (read.iterations, read.untimed))
}

/// What [`read_log_to_end`] read.
#[derive(Debug)]
pub(crate) struct LogRead {
    pub iterations: Vec<TrackedStep>,
    /// Step lines without a time to give.
    pub untimed: usize,
    /// The number of a last line that has text but no end of line: the log was cut off (a
    /// run killed while it wrote, a copy taken while it ran), and that line may be too.
    pub cut_off_line: Option<usize>,
    /// The date and time glog's header gives (`Log file created at: 2017/12/22 14:03:20`),
    /// where the records' instants count from.
    pub created: Option<jiff::civil::DateTime>,
}

impl LogRead {
    /// The first record's start and the last one's end as dates (`YYYY-MM-DDTHH:MM:SS.mmm`,
    /// the log's local time), from its header's date; None without one.
    pub(crate) fn ran(&self) -> Option<(String, String)> {
        let created = self.created?;
        let at = |ns: i64| -> Option<String> {
            let when = created.checked_add(jiff::SignedDuration::from_nanos(ns)).ok()?;
            Some(when.strftime("%Y-%m-%dT%H:%M:%S%.3f").to_string())
        };
        Some((
            at(self.iterations.first()?.record.t_start_ns)?,
            at(self.iterations.last()?.record.t_end_ns)?,
        ))
    }
}

/// [`read_log`], saying whether the last line was cut off. A second run appended to the log
/// (a killed run, then another) is refused, naming the line where it starts: a solver header
/// or `Starting Session` after the first, or an iteration counter that goes back.
pub(crate) fn read_log_to_end(mut log: impl BufRead, parser: Parser) -> Result<LogRead> {
    let mut lines = LogLines::new(parser);
    // Whether the last line read has text but no end of line.
    let mut cut_off = false;
    let mut chunk = Vec::new();
    let mut number = 0usize;
    // Whether the next byte starts a line: an empty log, or one ending in `\n`, ends with an
    // empty line.
    let mut at_line_start = true;
    let mut feed = |segment: &[u8]| {
        number += 1;
        lines
            .feed(&String::from_utf8_lossy(segment))
            .with_context(|| format!("line {number}"))
    };
    loop {
        chunk.clear();
        if log.read_until(b'\n', &mut chunk).context("cannot read")? == 0 {
            if at_line_start {
                feed(b"")?;
            }
            break;
        }
        let body = match chunk.strip_suffix(b"\n") {
            Some(body) => {
                at_line_start = true;
                body
            }
            None => {
                at_line_start = false;
                &chunk[..]
            }
        };
        for segment in body.split(|&b| b == b'\r') {
            feed(segment)?;
        }
        cut_off = !at_line_start && body.last().is_some_and(|&b| b != b'\r');
    }
    Ok(LogRead {
        iterations: lines.iterations,
        untimed: lines.untimed,
        cut_off_line: cut_off.then_some(number),
        created: lines.created,
    })
}

/// The state of [`read_log`] between lines.
struct LogLines {
    parser: Parser,
    origin: Option<i64>,
    year_offset: i64,
    last_stamp: Option<i64>,
    /// Instants count from the first timestamp, or from 0 for a log without any.
    tracker: StepTracker,
    /// Where the next line without a timestamp ends: after the previous one, by its own time.
    cursor_ns: i64,
    last_step: Option<usize>,
    iterations: Vec<TrackedStep>,
    untimed: usize,
    /// Whether a run's start (a solver header, `Starting Session`) was read.
    run_started: bool,
    /// glog's header date, when the log has one.
    created: Option<jiff::civil::DateTime>,
}

/// Lines a framework writes once as a run starts: Caffe's solver header, TF-Slim's session.
const RUN_STARTS: [&str; 2] = ["] Solving ", "Starting Session"];

impl LogLines {
    fn new(parser: Parser) -> LogLines {
        LogLines {
            parser,
            origin: None,
            year_offset: 0,
            last_stamp: None,
            tracker: StepTracker::new(0, None),
            cursor_ns: 0,
            last_step: None,
            iterations: Vec::new(),
            untimed: 0,
            run_started: false,
            created: None,
        }
    }

    fn feed(&mut self, line: &str) -> Result<()> {
        const YEAR_NS: i64 = 366 * 86_400 * 1_000_000_000;
        // Saturating: a log's numbers are whatever its lines say, never past the integers.
        let stamp = glog_ns(line).map(|ns| {
            // A run across New Year goes on counting.
            if self
                .last_stamp
                .is_some_and(|last| ns.saturating_add(self.year_offset) < last)
            {
                self.year_offset = self.year_offset.saturating_add(YEAR_NS);
            }
            let ns = ns.saturating_add(self.year_offset);
            self.last_stamp = Some(ns);
            ns.saturating_sub(*self.origin.get_or_insert(ns))
        });
        if let Some(date) = line.strip_prefix("Log file created at: ") {
            // The first header dates the log (a second one is a second run, refused below).
            if self.created.is_none() && self.iterations.is_empty() {
                self.created =
                    jiff::civil::DateTime::strptime("%Y/%m/%d %H:%M:%S", date.trim()).ok();
            }
        }
        if let Some(start) = RUN_STARTS.iter().find(|start| line.contains(**start)) {
            if self.run_started || !self.iterations.is_empty() {
                bail!(
                    "a second run starts here ('{}' again after {} iteration record(s)): the \
                     log holds two runs; split it into one log per run, or keep the one to import",
                    start.trim_start_matches("] "),
                    self.iterations.len()
                );
            }
            self.run_started = true;
        }
        let Some(event) = self.parser.parse(line)? else {
            return Ok(());
        };
        if let (LogEvent::Step(s), Some(last)) = (&event, self.last_step) {
            if s.step < last {
                bail!(
                    "a second run starts here (the iteration counter goes back from {last} to \
                     {}): the log holds two runs; split it into one log per run, or keep the \
                     one to import",
                    s.step
                );
            }
        }
        // Caffe prints a step's learning rate just after its loss line: the rate of that step
        // (the running tracker can only give it to the steps after).
        if let (LogEvent::LearningRate { step, lr }, Some(last)) =
            (&event, self.iterations.last_mut())
        {
            let last: &mut TrackedStep = last;
            if last.record.step == *step {
                last.record.lr = *lr;
            }
        }
        let read_ns = match (&event, stamp) {
            (_, Some(ns)) => ns,
            (LogEvent::Step(s), None) => {
                let steps = match self.last_step {
                    Some(prev) if s.step > prev => s.step - prev,
                    Some(_) => return Ok(()),
                    None => 1,
                };
                match s.time_s {
                    Some(t) if t.is_finite() && t >= 0.0 => self
                        .cursor_ns
                        .saturating_add((t * steps as f64 * 1e9).round() as i64),
                    _ => {
                        self.untimed += 1;
                        return Ok(());
                    }
                }
            }
            (LogEvent::LearningRate { .. }, None) => self.cursor_ns,
        };
        if let Some(step) = self.tracker.feed(event, read_ns) {
            self.cursor_ns = step.record.t_end_ns;
            self.last_step = Some(step.record.step);
            self.iterations.push(step);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caffe_log(batch: usize, lapse_s: f64) -> String {
        // Display every 2 iterations, as the solver writes it into logs/caffe.INFO.
        let per_s = 2.0 / lapse_s;
        format!(
            "Log file created at: 2017/12/22 14:03:20
I1222 14:03:20.000000  2471 caffe.cpp:217] Using GPUs 0
I1222 14:03:20.500000  2471 solver.cpp:289] Solving AlexNet (batch {batch})
I1222 14:03:21.000000  2471 solver.cpp:218] Iteration 0 (0 iter/s, 0.5s/2 iters), loss = 6.9
I1222 14:03:21.000100  2471 sgd_solver.cpp:105] Iteration 0, lr = 0.01
I1222 14:03:23.000000  2471 solver.cpp:218] Iteration 2 ({per_s} iter/s, {lapse_s}s/2 iters), loss = 6.8
I1222 14:03:23.000100  2471 sgd_solver.cpp:105] Iteration 2, lr = 0.01
I1222 14:03:25.000000  2471 solver.cpp:218] Iteration 4 ({per_s} iter/s, {lapse_s}s/2 iters), loss = 6.7
I1222 14:03:25.500000  2471 solver.cpp:310] Iteration 6, loss = 6.6
I1222 14:03:25.600000  2471 solver.cpp:315] Optimization Done.
"
        )
    }

    fn folder(files: &[(&str, String)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_log_holding_two_runs_is_refused_at_the_line_the_second_starts() {
        // A killed run (iterations 0 to 4 logged, lines 1 to 8), then a run appended: its
        // solver header is line 10.
        let killed: String = caffe_log(16, 2.0).lines().take(8).map(|l| format!("{l}\n")).collect();
        let both = format!("{killed}{}{}", "Log file created at: 2017/12/22 15:00:00\n", "I1222 15:00:00.500000  2471 solver.cpp:289] Solving AlexNet\n");
        let err = format!("{:#}", read_log(both.as_bytes(), Parser::from_name("caffe").unwrap()).unwrap_err());
        assert!(err.starts_with("line 10: a second run starts here"), "{err}");
        assert!(err.contains("Solving"), "{err}");
        // Without a header, the counter going back gives it away.
        let restarted = format!("{killed}I1222 15:00:01.000000  2471 solver.cpp:218] Iteration 0 (0 iter/s, 0.5s/2 iters), loss = 6.9\n");
        let err = format!("{:#}", read_log(restarted.as_bytes(), Parser::from_name("caffe").unwrap()).unwrap_err());
        assert!(err.starts_with("line 9: a second run starts here") && err.contains("from 4 to 0"), "{err}");
        // TF-Slim: a second session.
        let tf = "INFO:tensorflow:Starting Session.\n\
                  INFO:tensorflow:global step 10: loss = 6.9 (0.500 sec/step)\n\
                  INFO:tensorflow:Starting Session.\n\
                  INFO:tensorflow:global step 10: loss = 6.9 (0.500 sec/step)\n";
        let err = format!("{:#}", read_log(tf.as_bytes(), Parser::from_name("tensorflow").unwrap()).unwrap_err());
        assert!(err.starts_with("line 3: a second run starts here"), "{err}");
        // One run, its final line repeating the last step: read as before.
        assert!(read_log(caffe_log(16, 2.0).as_bytes(), Parser::from_name("caffe").unwrap()).is_ok());
    }

    #[test]
    fn a_glog_log_is_dated_by_its_header_and_timestamps() {
        let read =
            read_log_to_end(caffe_log(16, 2.0).as_bytes(), Parser::from_name("caffe").unwrap())
                .unwrap();
        // Instants count from the first timestamp (14:03:20); the records run from
        // iteration 0's start to iteration 4's line at 14:03:25.
        let (from, to) = read.ran().unwrap();
        assert!(from.starts_with("2017-12-22T14:03:2"), "{from}");
        assert_eq!(to, "2017-12-22T14:03:25.000");
        let undated = read_log_to_end(
            &b"EDGEBENCH step=1 loss=3 time=0.5\n"[..],
            Parser::from_name("edgebench").unwrap(),
        )
        .unwrap();
        assert_eq!(undated.ran(), None);
    }

    #[test]
    fn a_last_line_without_its_end_is_reported_cut_off() {
        let parser = || Parser::from_name("edgebench").unwrap();
        let whole: &[u8] = b"EDGEBENCH step=1 loss=3 time=0.5\nEDGEBENCH step=2 loss=2 time=0.5\n";
        assert_eq!(read_log_to_end(whole, parser()).unwrap().cut_off_line, None);
        let cut: &[u8] = b"EDGEBENCH step=1 loss=3 time=0.5\nEDGEBENCH step=2 loss=2 time=0.5";
        let read = read_log_to_end(cut, parser()).unwrap();
        assert_eq!(read.cut_off_line, Some(2));
        assert_eq!(read.iterations.len(), 2);
    }

    #[test]
    fn caffe_folder_in_the_scripts_layout() {
        let dir = folder(&[
            ("train_alexnet_GPU_016.log", caffe_log(16, 2.0)),
            ("train_alexnet_CPU_001.log", caffe_log(1, 2.0)),
            ("train_inception_v1_CPU_512.log", caffe_log(512, 2.0)),
            ("notes.txt", "not a log".into()),
        ]);
        // TensorFlow's train dirs sit next to its logs.
        std::fs::create_dir(dir.path().join("train_alexnet_CPU_001")).unwrap();
        let logs = import_dir(dir.path(), "caffe").unwrap();
        let ids: Vec<(&str, &str, usize)> = logs
            .iter()
            .map(|l| (l.net.as_str(), l.device.as_str(), l.batch))
            .collect();
        assert_eq!(
            ids,
            [
                ("alexnet", "cpu", 1),
                ("alexnet", "cuda", 16),
                ("inception_v1", "cpu", 512)
            ]
        );
        let its = &logs[1].iterations;
        // Iterations 0 to 5 trained; the final `Iteration 6, loss` line is no step.
        assert_eq!(
            its.iter().map(|i| i.record.step).collect::<Vec<_>>(),
            [0, 2, 4]
        );
        assert_eq!(its.iter().map(|i| i.steps).collect::<Vec<_>>(), [1, 2, 2]);
        assert_eq!(its[1].record.loss, 6.8);
        assert_eq!(its[1].record.lr, 0.01);
        // The rate printed after a step's loss line is that step's.
        assert_eq!(its[0].record.lr, 0.01);
        // Placed by glog's timestamps, from the log's first line.
        assert_eq!(its[1].record.t_end_ns, 3_000_000_000);
        assert_eq!(its[1].record.t_start_ns, 1_000_000_000);
        assert!((its[1].record.step_s - 1.0).abs() < 1e-9);
        assert_eq!(its[2].record.t_end_ns, 5_000_000_000);
        assert_eq!(logs[1].untimed_lines, 0);
    }

    #[test]
    fn tensorflow_log_without_timestamps_is_laid_out_by_its_step_times() {
        let log = "\
INFO:tensorflow:Starting Session.
INFO:tensorflow:global step 1: loss = 6.9100 (2.500 sec/step)
INFO:tensorflow:global step 2: loss = 6.9000 (0.500 sec/step)
INFO:tensorflow:global step 4: loss = 6.8000 (0.250 sec/step)
INFO:tensorflow:Stopping Training.
";
        let dir = folder(&[("train_googlenet_CPU_008.log", log.into())]);
        let logs = import_dir(dir.path(), "tensorflow").unwrap();
        let its = &logs[0].iterations;
        let spans: Vec<(i64, i64)> = its
            .iter()
            .map(|i| {
                (
                    i.record.t_start_ns / 1_000_000,
                    i.record.t_end_ns / 1_000_000,
                )
            })
            .collect();
        assert_eq!(spans, [(0, 2500), (2500, 3000), (3000, 3500)]);
        assert_eq!(its[2].record.step_s, 0.25);
        assert_eq!((logs[0].net.as_str(), logs[0].batch), ("googlenet", 8));
    }

    #[test]
    fn bad_folders_are_refused_naming_every_problem() {
        let dir = folder(&[
            ("train_alexnet_CPU_001.log", caffe_log(1, 1.0)),
            ("train_alexnet_TPU_001.log", caffe_log(1, 1.0)),
            ("train_alexnet_CPU_000.log", caffe_log(1, 1.0)),
            ("alexnet.log", caffe_log(1, 1.0)),
            (
                "train_googlenet_GPU_004.log",
                "INFO:tensorflow:global step 1: loss = 1 (1 sec/step)\n".into(),
            ),
        ]);
        let err = format!("{:#}", import_dir(dir.path(), "caffe").unwrap_err());
        for says in [
            "nothing was imported",
            "alexnet.log: not named train_{net}_{CPU|GPU}_{batch}.log",
            "device 'TPU' is neither CPU nor GPU",
            "batch '000' is not a batch size",
            "train_googlenet_GPU_004.log: no caffe step line",
        ] {
            assert!(err.contains(says), "{says}: {err}");
        }
        assert!(!err.contains("train_alexnet_CPU_001"), "{err}");

        let empty = tempfile::tempdir().unwrap();
        let err = format!("{:#}", import_dir(empty.path(), "caffe").unwrap_err());
        assert!(err.contains("no log named"), "{err}");
        let err = format!(
            "{:#}",
            import_dir(&empty.path().join("absent"), "caffe").unwrap_err()
        );
        assert!(err.contains("cannot read the log folder"), "{err}");
        let err = format!("{:#}", import_dir(empty.path(), "mxnet").unwrap_err());
        assert!(err.contains("unknown log parser 'mxnet'"), "{err}");
    }

    /// A log made a line at a time as it is read, counting the bytes taken from it.
    struct LazyLog<I> {
        lines: I,
        line: Vec<u8>,
        at: usize,
        taken: usize,
    }

    impl<I: Iterator<Item = String>> std::io::Read for LazyLog<I> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = {
                let have = self.fill_buf()?;
                let n = have.len().min(buf.len());
                buf[..n].copy_from_slice(&have[..n]);
                n
            };
            self.consume(n);
            Ok(n)
        }
    }

    impl<I: Iterator<Item = String>> BufRead for LazyLog<I> {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            if self.at == self.line.len() {
                if let Some(next) = self.lines.next() {
                    self.line = next.into_bytes();
                    self.at = 0;
                }
            }
            Ok(&self.line[self.at..])
        }

        fn consume(&mut self, n: usize) {
            self.at += n;
            self.taken += n;
        }
    }

    #[test]
    fn a_log_is_parsed_as_it_is_read_never_read_whole() {
        let good = |i: usize| format!("EDGEBENCH step={i} loss=2.5 time=0.125\n");
        let bad = "EDGEBENCH step=x loss=2.5\n".to_string();
        // Some 7 MB after the bad line; a reader that took the whole log would take them all.
        let lines = (0..1000)
            .map(good)
            .chain(std::iter::once(bad.clone()))
            .chain((1001..200_000).map(good));
        let mut log = LazyLog {
            lines,
            line: Vec::new(),
            at: 0,
            taken: 0,
        };
        let err = format!("{:#}", read_log(&mut log, Parser::Edgebench).unwrap_err());
        assert!(
            err.starts_with("line 1001: ") && err.contains("'x'"),
            "{err}"
        );
        let through_bad: usize = (0..1000).map(|i| good(i).len()).sum::<usize>() + bad.len();
        assert_eq!(log.taken, through_bad);

        // A whole log read the same way gives every step.
        let mut log = LazyLog {
            lines: (0..200_000).map(good),
            line: Vec::new(),
            at: 0,
            taken: 0,
        };
        let (steps, untimed) = read_log(&mut log, Parser::Edgebench).unwrap();
        assert_eq!((steps.len(), untimed), (200_000, 0));
        assert_eq!(steps[199_999].record.t_end_ns, 200_000 * 125_000_000);
    }

    #[test]
    fn log_lines_end_at_either_line_break_and_the_last_needs_none() {
        let log: &[u8] = b"EDGEBENCH step=1 loss=3 time=0.5\r\n\
            EDGEBENCH step=2 loss=2 time=0.5 note=\xff\rEDGEBENCH step=3 loss=1 time=0.5";
        let (steps, _) = read_log(log, Parser::Edgebench).unwrap();
        let read: Vec<(usize, f64)> = steps
            .iter()
            .map(|s| (s.record.step, s.record.loss))
            .collect();
        assert_eq!(read, [(1, 3.0), (2, 2.0), (3, 1.0)]);
    }
}
