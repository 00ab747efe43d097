//! Line parsers for training logs, and the tracker that turns parsed step lines into iteration
//! records.
//!
//! Formats:
//! - `caffe`: the solver's display line `Iteration N (X iter/s, Ts/K iters), loss = L` (Caffe
//!   1.0), the older form `Iteration N, loss = L`, and `Iteration N, lr = R`. In a log that
//!   has display lines with a rate, a line of the older form is the one Caffe prints after
//!   training and its snapshot: the loss at `max_iter`, no training step, so not a record
//!   (as annex C of the study ignores it).
//! - `tensorflow`: TF-Slim's `global step N: loss = L (T sec/step)` (TF1), the Estimator's
//!   `loss = L, step = N (T sec)`, and Keras' progress lines (`Epoch e/E`, then
//!   `k/n [====>....] - ... - loss: L` and the epoch's last line with `Xms/step`).
//! - `edgebench`: one line per step, for scripts people write:
//!   `EDGEBENCH step=N loss=L [time=T] [images=B] [epoch=E] [lr=R]` (T in seconds for this
//!   step; other `key=value` pairs are ignored).
//! - `trtexec`: TensorRT's `trtexec` (8.x, 10.x). Its per-run lines come all at once after the
//!   run, so they make no records: the trial is measured whole, power around the command, and
//!   its "Performance summary" (read by [`trtexec_summary`] from the output's tail) gives the
//!   latency percentiles, throughput and GPU compute time.
//! - `regex:PATTERN`: named groups `step` (required), and optionally `loss`, `time` (seconds per
//!   step) and `images`.
//!
//! Numbers accept `nan` and `inf` in any case and sign, as frameworks print them for a diverged
//! loss.

use std::sync::LazyLock;

use anyhow::{anyhow, bail, Context, Result};
use regex::Regex;

use crate::record::IterationRecord;

/// A float as C++ streams, Python and printf write it, `nan`/`inf` included.
const NUM: &str = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))";

fn re(pattern: &str) -> Regex {
    Regex::new(&pattern.replace("NUM", NUM)).expect("built-in log pattern compiles")
}

static CAFFE_DISPLAY: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"Iteration (?P<step>\d+) \((?P<rate>NUM) iter/s, (?P<lapse>NUM)s/\d+ iters?\), loss = (?P<loss>NUM)",
    )
});
static CAFFE_LOSS: LazyLock<Regex> =
    LazyLock::new(|| re(r"Iteration (?P<step>\d+), loss = (?P<loss>NUM)"));
static CAFFE_LR: LazyLock<Regex> =
    LazyLock::new(|| re(r"Iteration (?P<step>\d+), lr = (?P<lr>NUM)"));
static TF_SLIM: LazyLock<Regex> = LazyLock::new(|| {
    re(r"global step (?P<step>\d+): loss = (?P<loss>NUM) \((?P<time>NUM) sec/step\)")
});
static TF_ESTIMATOR: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\bloss = (?P<loss>NUM), step = (?P<step>\d+)(?: \((?P<lapse>NUM) sec\))?")
});
static KERAS_EPOCH: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*Epoch (?P<epoch>\d+)/(?P<epochs>\d+)\s*$"));
// Keras 2 draws `[====>....] - `, Keras 3 `━━━━ `, and `verbose=2` no bar at all (`k/n - `).
static KERAS_PROGRESS: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(?P<k>\d+)/(?P<n>\d+) (?:\[[=>.]*\]|[━─]+|-)(?P<rest>.*)$"));
static KERAS_LOSS: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|\s)loss: (?P<loss>NUM)"));
static ANSI_ESCAPE: LazyLock<Regex> = LazyLock::new(|| re(r"\x1b\[[0-9;]*[A-Za-z]"));
static KERAS_STEP_TIME: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:^|\s)(?P<t>NUM)(?P<unit>s|ms|us|µs)/step\b"));

/// One step line of a log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepLine {
    /// The step number as the log writes it (Caffe counts from 0, TensorFlow from 1).
    pub step: usize,
    pub loss: Option<f64>,
    /// Seconds per step as the log states it (for a line that covers several steps, their mean).
    pub time_s: Option<f64>,
    /// Images in the step, when the log says.
    pub images: Option<usize>,
    /// Epoch (from 0), when the log says.
    pub epoch: Option<usize>,
    /// Learning rate from this step on, when the line says.
    pub lr: Option<f64>,
    /// The loss and time as the line writes them, for exports that must repeat the log.
    pub(crate) text: Logged,
}

/// A step line's numbers as written (e.g. TF-Slim's `0.5000`, which no float formatting gives
/// back). `time` only where it is the line's own seconds per step, unscaled.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Logged {
    pub(crate) loss: Option<String>,
    pub(crate) time: Option<String>,
}

/// What a log line carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LogEvent {
    Step(StepLine),
    /// The learning rate from this step on (Caffe logs it after each display line).
    LearningRate {
        step: usize,
        lr: f64,
    },
}

/// A log-line parser. Stateful: Keras numbers steps within an epoch and the Estimator's time
/// covers the steps since its previous line.
#[derive(Debug, Clone)]
pub(crate) enum Parser {
    Caffe(CaffeState),
    TensorFlow(TfState),
    Edgebench,
    Trtexec,
    Regex(Box<Regex>),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct CaffeState {
    /// A display line with a rate was seen: Caffe 1.0, whose rate-less loss line is the final one.
    rated_display: bool,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TfState {
    /// Keras' current epoch (from 1), from its `Epoch e/E` line.
    keras_epoch: Option<usize>,
    /// The Estimator's previous logged step.
    estimator_last_step: Option<usize>,
}

/// The accepted parser names, for help and error messages.
pub(crate) const PARSER_NAMES: &str = "caffe, tensorflow, edgebench, trtexec or regex:PATTERN (PATTERN with a \
                                named group `step`, optionally `loss`, `time`, `images`)";

impl Parser {
    pub(crate) fn from_name(name: &str) -> Result<Parser> {
        if let Some(pattern) = name.strip_prefix("regex:") {
            let re = Regex::new(pattern).with_context(|| {
                format!("parser regex:{pattern}: not a valid regular expression")
            })?;
            let groups: Vec<&str> = re.capture_names().flatten().collect();
            if !groups.contains(&"step") {
                bail!(
                    "parser regex:{pattern}: the pattern needs a named group `step`, e.g. \
                     regex:'step (?P<step>\\d+) loss (?P<loss>\\S+)'"
                );
            }
            if let Some(other) = groups
                .iter()
                .find(|g| !["step", "loss", "time", "images"].contains(g))
            {
                bail!(
                    "parser regex:{pattern}: unknown named group `{other}` (known: step, loss, \
                     time, images)"
                );
            }
            return Ok(Parser::Regex(Box::new(re)));
        }
        match name {
            "caffe" => Ok(Parser::Caffe(CaffeState::default())),
            "tensorflow" => Ok(Parser::TensorFlow(TfState::default())),
            "edgebench" => Ok(Parser::Edgebench),
            "trtexec" => Ok(Parser::Trtexec),
            other => bail!("unknown log parser '{other}': expected {PARSER_NAMES}"),
        }
    }

    /// Parses one line (without its line ending). `Ok(None)`: not a line of this format. An error
    /// is a line that claims the format but is malformed; the caller reports it and goes on.
    pub(crate) fn parse(&mut self, line: &str) -> Result<Option<LogEvent>> {
        // Progress bars colour their text even into a pipe.
        let plain;
        let line = if line.contains('\x1b') {
            plain = ANSI_ESCAPE.replace_all(line, "");
            &*plain
        } else {
            line
        };
        match self {
            Parser::Caffe(state) => parse_caffe(state, line),
            Parser::TensorFlow(state) => parse_tensorflow(state, line),
            Parser::Edgebench => parse_edgebench(line),
            Parser::Trtexec => Ok(None),
            Parser::Regex(re) => parse_regex(re, line),
        }
    }
}

fn num(s: &str, what: &str, line: &str) -> Result<f64> {
    s.parse::<f64>()
        .map_err(|_| anyhow!("{what} '{s}' is not a number in log line: {line}"))
}

fn count(s: &str, what: &str, line: &str) -> Result<usize> {
    s.parse::<usize>()
        .map_err(|_| anyhow!("{what} '{s}' is not a whole number in log line: {line}"))
}

fn parse_caffe(state: &mut CaffeState, line: &str) -> Result<Option<LogEvent>> {
    if let Some(c) = CAFFE_DISPLAY.captures(line) {
        state.rated_display = true;
        let step = count(&c["step"], "step", line)?;
        let rate = num(&c["rate"], "iter/s", line)?;
        let lapse = num(&c["lapse"], "seconds", line)?;
        // `lapse` covers the iterations since the previous display line, `rate` of them per
        // second; the first line of a run prints rate 0 and the time of its single iteration.
        let iterations = (rate * lapse).round();
        let time_s = if iterations >= 1.0 {
            lapse / iterations
        } else {
            lapse
        };
        return Ok(Some(LogEvent::Step(StepLine {
            step,
            loss: Some(num(&c["loss"], "loss", line)?),
            time_s: Some(time_s),
            images: None,
            epoch: None,
            lr: None,
            text: Logged {
                loss: Some(c["loss"].to_string()),
                time: (iterations <= 1.0).then(|| c["lapse"].to_string()),
            },
        })));
    }
    if let Some(c) = CAFFE_LOSS.captures(line) {
        if state.rated_display {
            // The final line: its time since the last display line is the snapshot's.
            return Ok(None);
        }
        return Ok(Some(LogEvent::Step(StepLine {
            step: count(&c["step"], "step", line)?,
            loss: Some(num(&c["loss"], "loss", line)?),
            time_s: None,
            images: None,
            epoch: None,
            lr: None,
            text: Logged {
                loss: Some(c["loss"].to_string()),
                time: None,
            },
        })));
    }
    if let Some(c) = CAFFE_LR.captures(line) {
        return Ok(Some(LogEvent::LearningRate {
            step: count(&c["step"], "step", line)?,
            lr: num(&c["lr"], "lr", line)?,
        }));
    }
    Ok(None)
}

fn parse_tensorflow(state: &mut TfState, line: &str) -> Result<Option<LogEvent>> {
    if let Some(c) = TF_SLIM.captures(line) {
        return Ok(Some(LogEvent::Step(StepLine {
            step: count(&c["step"], "step", line)?,
            loss: Some(num(&c["loss"], "loss", line)?),
            time_s: Some(num(&c["time"], "sec/step", line)?),
            images: None,
            epoch: None,
            lr: None,
            text: Logged {
                loss: Some(c["loss"].to_string()),
                time: Some(c["time"].to_string()),
            },
        })));
    }
    if let Some(c) = TF_ESTIMATOR.captures(line) {
        let step = count(&c["step"], "step", line)?;
        // The Estimator's time covers the steps since its previous line.
        let time_s = match (c.name("lapse"), state.estimator_last_step) {
            (Some(lapse), Some(prev)) if step > prev => {
                Some(num(lapse.as_str(), "sec", line)? / (step - prev) as f64)
            }
            _ => None,
        };
        state.estimator_last_step = Some(step);
        return Ok(Some(LogEvent::Step(StepLine {
            step,
            loss: Some(num(&c["loss"], "loss", line)?),
            time_s,
            images: None,
            epoch: None,
            lr: None,
            text: Logged {
                loss: Some(c["loss"].to_string()),
                time: None,
            },
        })));
    }
    if let Some(c) = KERAS_EPOCH.captures(line) {
        state.keras_epoch = Some(count(&c["epoch"], "epoch", line)?);
        return Ok(None);
    }
    if let Some(c) = KERAS_PROGRESS.captures(line) {
        let k = count(&c["k"], "step", line)?;
        let n = count(&c["n"], "steps per epoch", line)?;
        let rest = &c["rest"];
        let epoch = state.keras_epoch.unwrap_or(1).max(1) - 1;
        let loss = KERAS_LOSS
            .captures(rest)
            .map(|l| num(&l["loss"], "loss", line))
            .transpose()?;
        // Keras shows seconds per step (the epoch's mean so far) only on an epoch's last line.
        let time_s = KERAS_STEP_TIME
            .captures(rest)
            .map(|t| {
                let scale = match &t["unit"] {
                    "s" => 1.0,
                    "ms" => 1e-3,
                    _ => 1e-6,
                };
                num(&t["t"], "time per step", line).map(|v| v * scale)
            })
            .transpose()?;
        // A line of a log's own numbers, whatever they are: never past the integers.
        let step = epoch
            .checked_mul(n)
            .and_then(|s| s.checked_add(k))
            .ok_or_else(|| {
                anyhow!("step {k} of epoch {} is past any step number in log line: {line}", epoch + 1)
            })?;
        return Ok(Some(LogEvent::Step(StepLine {
            step,
            loss,
            time_s,
            images: None,
            epoch: Some(epoch),
            lr: None,
            text: Logged::default(),
        })));
    }
    Ok(None)
}

fn parse_edgebench(line: &str) -> Result<Option<LogEvent>> {
    let mut tokens = line.split_whitespace();
    if tokens.next() != Some("EDGEBENCH") {
        return Ok(None);
    }
    let (mut step, mut loss, mut time_s, mut images, mut epoch, mut lr) =
        (None, None, None, None, None, None);
    let mut text = Logged::default();
    for token in tokens {
        let Some((key, value)) = token.split_once('=') else {
            bail!("'{token}' is not key=value in EDGEBENCH line: {line}");
        };
        match key {
            "step" => step = Some(count(value, "step", line)?),
            "loss" => {
                loss = Some(num(value, "loss", line)?);
                text.loss = Some(value.to_string());
            }
            "time" => {
                let t = num(value, "time", line)?;
                if !(t >= 0.0 && t.is_finite()) {
                    bail!("time '{value}' must be seconds >= 0 in EDGEBENCH line: {line}");
                }
                time_s = Some(t);
                text.time = Some(value.to_string());
            }
            "images" => images = Some(count(value, "images", line)?),
            "epoch" => epoch = Some(count(value, "epoch", line)?),
            "lr" => lr = Some(num(value, "lr", line)?),
            _ => {}
        }
    }
    let Some(step) = step else {
        bail!("EDGEBENCH line without step=N: {line}");
    };
    if loss.is_none() {
        bail!("EDGEBENCH line without loss=L (write loss=nan when there is none): {line}");
    }
    Ok(Some(LogEvent::Step(StepLine {
        step,
        loss,
        time_s,
        images,
        epoch,
        lr,
        text,
    })))
}

fn parse_regex(re: &Regex, line: &str) -> Result<Option<LogEvent>> {
    // A match whose `step` group took no part (an alternative without it) is no step line.
    let Some(c) = re.captures(line) else {
        return Ok(None);
    };
    let Some(step) = c.name("step") else {
        return Ok(None);
    };
    let step = count(step.as_str(), "step", line)?;
    let loss = c
        .name("loss")
        .map(|m| num(m.as_str(), "loss", line))
        .transpose()?;
    let time_s = c
        .name("time")
        .map(|m| num(m.as_str(), "time", line))
        .transpose()?;
    let images = c
        .name("images")
        .map(|m| count(m.as_str(), "images", line))
        .transpose()?;
    let text = Logged {
        loss: c.name("loss").map(|m| m.as_str().to_string()),
        time: c.name("time").map(|m| m.as_str().to_string()),
    };
    Ok(Some(LogEvent::Step(StepLine {
        step,
        loss,
        time_s,
        images,
        epoch: None,
        lr: None,
        text,
    })))
}

static TRTEXEC_STATS: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\[I\] (?P<what>Latency|GPU Compute Time|Enqueue Time|H2D Latency|D2H Latency): (?P<stats>.*)$")
});
static TRTEXEC_STAT: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?P<name>min|max|mean|median|percentile\((?P<p>NUM)%\)) = (?P<v>NUM) (?P<unit>ms|s|us)")
});
static TRTEXEC_THROUGHPUT: LazyLock<Regex> =
    LazyLock::new(|| re(r"\[I\] Throughput: (?P<v>NUM) qps"));
static TRTEXEC_TOTAL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\[I\] Total (?P<what>Host Walltime|GPU Compute Time): (?P<v>NUM) (?P<unit>ms|s|us)")
});

/// The figures of `trtexec`'s "Performance summary" in `text` (its output), in seconds and
/// queries per second, as NVIDIA's trtexec documentation names them: `Latency` (host latency
/// of a query: H2D + GPU compute + D2H) → `latency_min_s`, `latency_max_s`, `latency_mean_s`,
/// `latency_p50_s` (its median), `latency_pNN_s` for each `--percentile`; `GPU Compute Time` →
/// `gpu_compute_*_s` likewise; `Throughput` → `throughput_qps`; `Total Host Walltime` and
/// `Total GPU Compute Time` → `host_walltime_s`, `gpu_compute_total_s`. Empty when the text
/// holds no summary; the last summary counts when there are several.
pub(crate) fn trtexec_summary(text: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    let seconds = |v: &str, unit: &str| -> Option<f64> {
        let v: f64 = v.parse().ok()?;
        let scale = match unit {
            "s" => 1.0,
            "ms" => 1e-3,
            _ => 1e-6,
        };
        Some(v * scale).filter(|v| v.is_finite())
    };
    let Some(start) = text.rfind("=== Performance summary ===") else {
        return out;
    };
    for line in text[start..].lines() {
        if let Some(c) = TRTEXEC_THROUGHPUT.captures(line) {
            if let Some(v) = c["v"].parse::<f64>().ok().filter(|v| v.is_finite()) {
                out.insert("throughput_qps".into(), v.into());
            }
        } else if let Some(c) = TRTEXEC_TOTAL.captures(line) {
            let key = match &c["what"] {
                "Host Walltime" => "host_walltime_s",
                _ => "gpu_compute_total_s",
            };
            out.insert(key.into(), seconds(&c["v"], &c["unit"]).into());
        } else if let Some(c) = TRTEXEC_STATS.captures(line) {
            let prefix = match &c["what"] {
                "Latency" => "latency",
                "GPU Compute Time" => "gpu_compute",
                // Enqueue and copies: not figures edgebench keeps.
                _ => continue,
            };
            for stat in TRTEXEC_STAT.captures_iter(&c["stats"]) {
                let name = match (&stat["name"], stat.name("p")) {
                    (_, Some(p)) => format!("p{}", p.as_str().trim_end_matches(".0")),
                    ("median", None) => "p50".into(),
                    (other, None) => other.to_string(),
                };
                out.insert(
                    format!("{prefix}_{name}_s"),
                    seconds(&stat["v"], &stat["unit"]).into(),
                );
            }
        }
    }
    out
}

/// An iteration record made from a step line, with how many iterations of the run it stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedStep {
    /// `step_s` is seconds per iteration; `t_start_ns..t_end_ns` spans all `steps` iterations.
    /// The log does not separate data loading, so `data_s` is 0 and the step time includes it.
    /// `lr` is NaN until the log gives one, `loss` NaN when the line has none.
    pub record: IterationRecord,
    /// Iterations this record covers: 1 when every step is logged, Caffe's display interval
    /// when only every K-th is.
    pub steps: usize,
    /// Images per iteration, when the line says.
    pub images: Option<usize>,
    /// The line's loss and time as written; `time` only when it is the record's `step_s`.
    pub(crate) text: Logged,
}

/// Turns parsed log lines, each with the CLOCK_MONOTONIC instant it was read, into iteration
/// records. A step's time is the log's own when the line gives one (ending at the instant the
/// line was read), else the interval since the previous step line (or since the command
/// started, for the first). A line whose step does not advance (a repeated final line, a
/// restart) makes no record.
#[derive(Debug, Clone)]
pub(crate) struct StepTracker {
    start_ns: i64,
    /// Step number and end instant of the last record.
    previous: Option<(usize, i64)>,
    lr: f64,
    steps_per_epoch: Option<usize>,
}

impl StepTracker {
    /// `start_ns`: when the command started. `steps_per_epoch` gives the epoch of lines that do
    /// not carry one.
    pub(crate) fn new(start_ns: i64, steps_per_epoch: Option<usize>) -> StepTracker {
        StepTracker {
            start_ns,
            previous: None,
            lr: f64::NAN,
            steps_per_epoch: steps_per_epoch.filter(|&n| n > 0),
        }
    }

    pub(crate) fn feed(&mut self, event: LogEvent, read_ns: i64) -> Option<TrackedStep> {
        let line = match event {
            LogEvent::LearningRate { lr, .. } => {
                self.lr = lr;
                return None;
            }
            LogEvent::Step(line) => line,
        };
        if let Some(lr) = line.lr {
            self.lr = lr;
        }
        let (steps, since_ns) = match self.previous {
            Some((step, _)) if line.step <= step => return None,
            Some((step, end_ns)) => (line.step - step, end_ns),
            None => (1, self.start_ns),
        };
        // Records never overlap, so energy over them is not counted twice.
        let t_end_ns = read_ns.max(since_ns);
        let mut text = line.text;
        let (step_s, t_start_ns) = match line.time_s {
            Some(t) if t.is_finite() && t >= 0.0 => {
                let span_ns = (t * steps as f64 * 1e9).round() as i64;
                (t, t_end_ns.saturating_sub(span_ns).max(since_ns))
            }
            _ => {
                text.time = None;
                ((t_end_ns - since_ns) as f64 * 1e-9 / steps as f64, since_ns)
            }
        };
        let epoch = line
            .epoch
            .or_else(|| self.steps_per_epoch.map(|n| line.step / n))
            .unwrap_or(0);
        self.previous = Some((line.step, t_end_ns));
        Some(TrackedStep {
            record: IterationRecord {
                step: line.step,
                epoch,
                loss: line.loss.unwrap_or(f64::NAN),
                lr: self.lr,
                data_s: 0.0,
                step_s,
                t_start_ns,
                t_end_ns,
            },
            steps,
            images: line.images,
            text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(parser: &mut Parser, line: &str) -> StepLine {
        match parser.parse(line) {
            Ok(Some(LogEvent::Step(s))) => s,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn none(parser: &mut Parser, line: &str) {
        assert!(matches!(parser.parse(line), Ok(None)), "{line}");
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// A complete Caffe 1.0 solver log as glog writes it (`caffe train -log_dir=logs`, annex A):
    /// the solver dump, display and lr lines, a test pass, the snapshot, the final loss line
    /// and "Optimization Done.".
    const CAFFE_LOG: &str = "\
Log file created at: 2017/12/22 14:03:20
Running on machine: tegra-ubuntu
Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg
I1222 14:03:20.000000  2471 caffe.cpp:217] Using GPUs 0
I1222 14:03:20.050000  2471 solver.cpp:48] Initializing solver from parameters:
test_iter: 1
test_interval: 40
base_lr: 0.01
display: 20
max_iter: 60
lr_policy: \"step\"
snapshot_prefix: \"caffe_alexnet_train\"
I1222 14:03:20.100000  2471 solver.cpp:57] Solver scaffolding done.
I1222 14:03:20.200000  2471 solver.cpp:289] Solving AlexNet
I1222 14:03:20.200100  2471 solver.cpp:290] Learning Rate Policy: step
I1222 14:03:20.300000  2471 solver.cpp:347] Iteration 0, Testing net (#0)
I1222 14:03:20.350000  2471 solver.cpp:414]     Test net output #0: accuracy = 0
I1222 14:03:20.350100  2471 solver.cpp:414]     Test net output #1: loss = 6.9078 (* 1 = 6.9078 loss)
I1222 14:03:21.372112  2471 solver.cpp:218] Iteration 0 (0 iter/s, 1.25s/20 iters), loss = 6.91092
I1222 14:03:21.372215  2471 solver.cpp:237]     Train net output #0: loss = 6.91092 (* 1 = 6.91092 loss)
I1222 14:03:21.372238  2471 sgd_solver.cpp:105] Iteration 0, lr = 0.01
I1222 14:03:45.122112  2471 solver.cpp:218] Iteration 20 (0.842105 iter/s, 23.75s/20 iters), loss = 6.90775
I1222 14:03:45.122200  2471 sgd_solver.cpp:105] Iteration 20, lr = 0.001
I1222 14:04:08.800000  2471 solver.cpp:347] Iteration 40, Testing net (#0)
I1222 14:04:08.850000  2471 solver.cpp:414]     Test net output #0: accuracy = 0
I1222 14:04:08.872112  2471 solver.cpp:218] Iteration 40 (0.842105 iter/s, 23.75s/20 iters), loss = -nan
I1222 14:04:30.000000  2471 solver.cpp:447] Snapshotting to binary proto file caffe_alexnet_train_iter_60.caffemodel
I1222 14:04:30.400000  2471 sgd_solver.cpp:273] Snapshotting solver state to binary proto file caffe_alexnet_train_iter_60.solverstate
I1222 14:04:30.500000  2471 solver.cpp:310] Iteration 60, loss = 6.1
I1222 14:04:30.500100  2471 solver.cpp:330] Iteration 60, Testing net (#0)
I1222 14:04:30.600000  2471 solver.cpp:414]     Test net output #0: accuracy = 0
I1222 14:04:31.000000  2471 solver.cpp:315] Optimization Done.
I1222 14:04:31.000100  2471 caffe.cpp:259] Optimization Done.";

    #[test]
    fn caffe_display_lines_are_the_steps_and_the_final_loss_line_is_not() {
        let mut p = Parser::from_name("caffe").unwrap();
        let events: Vec<LogEvent> = CAFFE_LOG
            .lines()
            .filter_map(|l| p.parse(l).unwrap())
            .collect();
        let steps: Vec<&StepLine> = events
            .iter()
            .filter_map(|e| match e {
                LogEvent::Step(s) => Some(s),
                _ => None,
            })
            .collect();
        // Iterations 0..60 trained, displayed every 20; the line for 60 after the snapshot is
        // the loss once training ended.
        assert_eq!(
            steps.iter().map(|s| s.step).collect::<Vec<_>>(),
            [0, 20, 40]
        );
        // The first line's rate is 0: its time is that of its single iteration.
        assert_eq!(steps[0].time_s, Some(1.25));
        assert_eq!(steps[0].loss, Some(6.91092));
        // 23.75 s for the 20 iterations since the previous display line.
        assert!(close(steps[1].time_s.unwrap(), 23.75 / 20.0));
        assert!(steps[2].loss.unwrap().is_nan());
        // As written: the time only where it is the step's own (one iteration), not 20's.
        assert_eq!(
            steps.iter().map(|s| s.text.clone()).collect::<Vec<_>>(),
            [
                Logged {
                    loss: Some("6.91092".into()),
                    time: Some("1.25".into()),
                },
                Logged {
                    loss: Some("6.90775".into()),
                    time: None,
                },
                Logged {
                    loss: Some("-nan".into()),
                    time: None,
                },
            ]
        );
        let lrs: Vec<(usize, f64)> = events
            .iter()
            .filter_map(|e| match e {
                LogEvent::LearningRate { step, lr } => Some((*step, *lr)),
                _ => None,
            })
            .collect();
        assert_eq!(lrs, [(0, 0.01), (20, 0.001)]);
    }

    #[test]
    fn caffe_older_display_line_and_exponent_rates() {
        let mut p = Parser::Caffe(CaffeState::default());
        let s = step(
            &mut p,
            "I0512 10:11:12.345678 12345 solver.cpp:209] Iteration 100, loss = 5.5",
        );
        assert_eq!((s.step, s.loss, s.time_s), (100, Some(5.5), None));
        let s = step(
            &mut p,
            "I0512 10:11:12.3 1 solver.cpp:218] Iteration 2000 (1234.57 iter/s, 0.0162s/20 iters), loss = 1.2e-05",
        );
        assert_eq!(s.loss, Some(1.2e-5));
        assert!(close(s.time_s.unwrap(), 0.0162 / 20.0), "{s:?}");
        none(
            &mut p,
            "I0512 10:11:12.3 1 solver.cpp:237]     Train net output #0: loss1/loss1 = 6.9 (* 0.3 = 2.07 loss)",
        );
        none(
            &mut p,
            "I0512 10:11:12.3 1 solver.cpp:330] Iteration 60, Testing net (#0)",
        );
    }

    #[test]
    fn tensorflow_slim_lines_as_tf1_and_absl_write_them() {
        let mut p = Parser::from_name("tensorflow").unwrap();
        let s = step(
            &mut p,
            "INFO:tensorflow:global step 10: loss = 6.9078 (0.512 sec/step)",
        );
        assert_eq!((s.step, s.loss, s.time_s), (10, Some(6.9078), Some(0.512)));
        let s = step(
            &mut p,
            "I1222 14:03:21.372112 140234 learning.py:507] global step 11: loss = 6.9011 (0.498 sec/step)",
        );
        assert_eq!((s.step, s.time_s), (11, Some(0.498)));
        // `%.4f` and `%.3f` as written, trailing zeros included.
        let s = step(
            &mut p,
            "INFO:tensorflow:global step 12: loss = 0.5000 (1.000 sec/step)",
        );
        assert_eq!((s.loss, s.time_s), (Some(0.5), Some(1.0)));
        assert_eq!(
            (s.text.loss.as_deref(), s.text.time.as_deref()),
            (Some("0.5000"), Some("1.000"))
        );
        none(&mut p, "INFO:tensorflow:Recording summary at step 10.");
        none(&mut p, "INFO:tensorflow:global_step/sec: 1.95");
    }

    #[test]
    fn tensorflow_estimator_time_covers_the_steps_since_its_previous_line() {
        let mut p = Parser::from_name("tensorflow").unwrap();
        let s = step(&mut p, "INFO:tensorflow:loss = 6.9077554, step = 1");
        assert_eq!((s.step, s.loss, s.time_s), (1, Some(6.9077554), None));
        let s = step(
            &mut p,
            "INFO:tensorflow:loss = 0.40212, step = 101 (10.857 sec)",
        );
        assert_eq!(s.step, 101);
        assert!(close(s.time_s.unwrap(), 10.857 / 100.0));
    }

    #[test]
    fn keras_progress_lines_number_steps_across_epochs() {
        let mut p = Parser::from_name("tensorflow").unwrap();
        none(&mut p, "Epoch 1/2");
        let s = step(
            &mut p,
            " 1/32 [..............................] - ETA: 1:32 - loss: 2.3125 - accuracy: 0.0625",
        );
        assert_eq!(
            (s.step, s.epoch, s.loss, s.time_s),
            (1, Some(0), Some(2.3125), None)
        );
        let s = step(
            &mut p,
            "32/32 [==============================] - 5s 120ms/step - loss: 2.1000 - accuracy: 0.2000 - val_loss: 9.0",
        );
        assert_eq!((s.step, s.loss), (32, Some(2.1)));
        assert!(close(s.time_s.unwrap(), 0.120));
        none(&mut p, "Epoch 2/2");
        // Keras 3, colours and all.
        let s = step(
            &mut p,
            "\x1b[1m32/32\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1m4s\x1b[0m 118ms/step - accuracy: 0.3000 - loss: 1.9000",
        );
        assert_eq!((s.step, s.epoch, s.loss), (64, Some(1), Some(1.9)));
        assert!(close(s.time_s.unwrap(), 0.118));
        // verbose=2: one line per epoch.
        let s = step(&mut p, "32/32 - 4s - loss: 1.8 - 4s/epoch - 125ms/step");
        assert_eq!(
            (s.loss, s.time_s.map(|t| (t * 1e3).round())),
            (Some(1.8), Some(125.0))
        );
    }

    #[test]
    fn edgebench_lines_and_their_errors() {
        let mut p = Parser::from_name("edgebench").unwrap();
        let s = step(
            &mut p,
            "EDGEBENCH step=3 loss=2.25 time=0.125 images=16 accuracy=0.5",
        );
        assert_eq!(
            s,
            StepLine {
                step: 3,
                loss: Some(2.25),
                time_s: Some(0.125),
                images: Some(16),
                epoch: None,
                lr: None,
                text: Logged {
                    loss: Some("2.25".into()),
                    time: Some("0.125".into()),
                },
            }
        );
        let s = step(&mut p, "EDGEBENCH step=4 loss=nan");
        assert!(s.loss.unwrap().is_nan() && s.time_s.is_none());
        none(&mut p, "step 4 s=0.1 s_per_image=0.01 loss=2.2");
        none(
            &mut p,
            "RESULT net=alexnet batch=16 median_s_per_image=0.01",
        );
        for (line, says) in [
            ("EDGEBENCH loss=2", "without step"),
            ("EDGEBENCH step=2", "without loss"),
            ("EDGEBENCH step=two loss=2", "'two' is not a whole number"),
            ("EDGEBENCH step=2 loss=2 time=-1", "seconds >= 0"),
            ("EDGEBENCH step=2 loss", "not key=value"),
        ] {
            let err = p.parse(line).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains(line), "{err}");
        }
    }

    #[test]
    fn regex_parser_needs_a_step_group() {
        let mut p =
            Parser::from_name(r"regex:it (?P<step>\d+) l=(?P<loss>\S+) dt=(?P<time>\S+)").unwrap();
        let s = step(&mut p, "[12:00] it 7 l=0.5 dt=0.25");
        assert_eq!((s.step, s.loss, s.time_s), (7, Some(0.5), Some(0.25)));
        none(&mut p, "something else");
        let err = p.parse("it 8 l=x dt=1").unwrap_err().to_string();
        assert!(err.contains("loss 'x'"), "{err}");
        for (name, says) in [
            (r"regex:loss=(?P<loss>\S+)", "named group `step`"),
            (r"regex:(?P<step>\d+ (", "not a valid regular expression"),
            (
                r"regex:(?P<step>\d+) (?P<acc>\S+)",
                "unknown named group `acc`",
            ),
            ("pytorch", "unknown log parser 'pytorch'"),
        ] {
            let err = format!("{:#}", Parser::from_name(name).unwrap_err());
            assert!(err.contains(says), "{name}: {err}");
        }
    }

    const MS: i64 = 1_000_000;

    #[test]
    fn tracker_uses_the_log_time_or_else_the_interval_between_lines() {
        let mut t = StepTracker::new(1000 * MS, Some(2));
        let mut p = Parser::Caffe(CaffeState::default());
        let mut feed = |line: &str, at_ms: i64| {
            let event = p.parse(line).unwrap().unwrap();
            t.feed(event, at_ms * MS)
        };
        // Before any step line, the learning rate is unknown.
        let first = feed("Iteration 0 (0 iter/s, 0.5s/20 iters), loss = 7", 1600).unwrap();
        assert_eq!(first.steps, 1);
        assert!(first.record.lr.is_nan());
        assert_eq!(first.record.step_s, 0.5);
        assert_eq!(
            (first.record.t_start_ns, first.record.t_end_ns),
            (1100 * MS, 1600 * MS)
        );
        assert!(feed("Iteration 0, lr = 0.01", 1601).is_none());
        // 20 iterations at 0.1 s each end when the line is read.
        let second = feed("Iteration 20 (10 iter/s, 2s/20 iters), loss = 6", 3700).unwrap();
        assert_eq!(second.steps, 20);
        assert_eq!(second.record.lr, 0.01);
        assert!(close(second.record.step_s, 0.1));
        assert_eq!(
            (second.record.t_start_ns, second.record.t_end_ns),
            (1700 * MS, 3700 * MS)
        );
        assert_eq!(second.record.epoch, 10);
        // Caffe 1.0's loss line after training is no step.
        assert!(p.parse("Iteration 60, loss = 5").unwrap().is_none());
        // An older Caffe's display line has no time: the 20 iterations share the interval
        // since the last record.
        let mut older = Parser::Caffe(CaffeState::default());
        let mut feed = |line: &str, at_ms: i64| {
            let event = older.parse(line).unwrap().unwrap();
            t.feed(event, at_ms * MS)
        };
        let last = feed("Iteration 40, loss = 5", 5700).unwrap();
        assert!(close(last.record.step_s, 0.1));
        assert_eq!(last.record.t_start_ns, 3700 * MS);
        // The same step again makes no second record.
        assert!(feed("Iteration 40, loss = 5", 5800).is_none());
    }

    #[test]
    fn tracker_never_overlaps_records() {
        let mut t = StepTracker::new(0, None);
        let line = |step, time_s| {
            LogEvent::Step(StepLine {
                step,
                loss: Some(1.0),
                time_s,
                images: Some(8),
                epoch: None,
                lr: None,
                text: Logged::default(),
            })
        };
        // No time and no previous line: the interval since the command started.
        let a = t.feed(line(1, None), 300 * MS).unwrap();
        assert_eq!(a.record.t_start_ns, 0);
        assert!(close(a.record.step_s, 0.3));
        assert_eq!(a.images, Some(8));
        // A log time longer than the interval (buffered output arrives in bursts) starts at
        // the previous record's end.
        let b = t.feed(line(2, Some(0.5)), 400 * MS).unwrap();
        assert_eq!((b.record.t_start_ns, b.record.step_s), (300 * MS, 0.5));
    }

    /// The end of a `trtexec --loadEngine=alexnet.plan --iterations=200 --percentile=90,99`
    /// run (TensorRT 8.6), as the trtexec documentation shows its performance summary.
    pub(crate) const TRTEXEC_OUTPUT: &str = "\
[12/02/2026-10:00:01] [I] Average on 10 runs - GPU latency: 1.20654 ms - Host latency: 1.36182 ms (enqueue 0.0583496 ms)
[12/02/2026-10:00:01] [I] 
[12/02/2026-10:00:01] [I] === Performance summary ===
[12/02/2026-10:00:01] [I] Throughput: 812.447 qps
[12/02/2026-10:00:01] [I] Latency: min = 1.19629 ms, max = 2.41992 ms, mean = 1.22451 ms, median = 1.21094 ms, percentile(90%) = 1.23438 ms, percentile(99%) = 1.63672 ms
[12/02/2026-10:00:01] [I] Enqueue Time: min = 0.0366211 ms, max = 0.138672 ms, mean = 0.0483156 ms, median = 0.046875 ms, percentile(90%) = 0.0527344 ms, percentile(99%) = 0.0893555 ms
[12/02/2026-10:00:01] [I] H2D Latency: min = 0.0766602 ms, max = 0.0913086 ms, mean = 0.0791187 ms, median = 0.0786133 ms, percentile(90%) = 0.0800781 ms, percentile(99%) = 0.0869141 ms
[12/02/2026-10:00:01] [I] GPU Compute Time: min = 1.11328 ms, max = 2.33203 ms, mean = 1.14111 ms, median = 1.12695 ms, percentile(90%) = 1.15039 ms, percentile(99%) = 1.55273 ms
[12/02/2026-10:00:01] [I] D2H Latency: min = 0.00390625 ms, max = 0.00585938 ms, mean = 0.00428375 ms, median = 0.00415039 ms, percentile(90%) = 0.00488281 ms, percentile(99%) = 0.00537109 ms
[12/02/2026-10:00:01] [I] Total Host Walltime: 3.00328 s
[12/02/2026-10:00:01] [I] Total GPU Compute Time: 2.78532 s
[12/02/2026-10:00:01] [I] Explanations of the performance metrics are printed in the verbose logs.
&&&& PASSED TensorRT.trtexec [TensorRT v8601] # trtexec --loadEngine=alexnet.plan --iterations=200 --percentile=90,99
";

    #[test]
    fn trtexec_summary_gives_latency_percentiles_throughput_and_gpu_compute() {
        let mut p = Parser::from_name("trtexec").unwrap();
        // Its per-run lines come after the run: no records, the trial is measured whole.
        for line in TRTEXEC_OUTPUT.lines() {
            none(&mut p, line);
        }
        let m = trtexec_summary(TRTEXEC_OUTPUT);
        let f = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k} in {m:?}"));
        assert!(close(f("throughput_qps"), 812.447));
        assert!(close(f("latency_p50_s"), 1.21094e-3));
        assert!(close(f("latency_p90_s"), 1.23438e-3));
        assert!(close(f("latency_p99_s"), 1.63672e-3));
        assert!(close(f("latency_mean_s"), 1.22451e-3));
        assert!(close(f("latency_max_s"), 2.41992e-3));
        assert!(close(f("gpu_compute_p50_s"), 1.12695e-3));
        assert!(close(f("gpu_compute_p99_s"), 1.55273e-3));
        assert!(close(f("host_walltime_s"), 3.00328));
        assert!(close(f("gpu_compute_total_s"), 2.78532));
        // Enqueue and copy times are not kept.
        assert!(!m.keys().any(|k| k.contains("enqueue") || k.contains("h2d")), "{m:?}");
        assert!(trtexec_summary("[I] Throughput: 5 qps").is_empty());
    }
}
