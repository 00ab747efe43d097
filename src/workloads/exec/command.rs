//! Commands of the external-command workload: the `[[exec]]` config entry and its placeholder
//! expansion, the trial's resume parameters, and running a command in its own process group
//! with its output passed through, kept (the last 64 KB of each stream) and parsed line by line.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::parse::{Parser, StepTracker, TrackedStep};
use crate::clock::monotonic_ns;
use crate::config::Timeout;
use crate::record::Control;

/// The placeholders a command may use, for help and error messages.
pub(crate) const PLACEHOLDERS: &str = "{net}, {batch}, {device}, {images}, {epochs}, {iterations}";

/// One `[[exec]]` table of the config: a command to run for every point of the sweep, e.g.
/// `name = "pytorch"`, `command = ["python3", "bench/torch_train.py", "{net}", "{batch}", "20"]`,
/// `parser = "edgebench"`. Checked and expanded by the exec workload before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecEntry {
    /// The engine's name in results and reports (`pytorch`, `caffe`, ...).
    pub name: String,
    /// Program and arguments; placeholders are replaced per trial, `{{` and `}}` are literal
    /// braces.
    pub command: Vec<String>,
    /// Log parser (`caffe`, `tensorflow`, `edgebench`, `regex:PATTERN`); none: the trial gets
    /// whole-command figures only.
    #[serde(default)]
    pub parser: Option<String>,
    /// The command is ended (SIGTERM, then SIGKILL) and the trial `failed` after this long,
    /// e.g. "30m".
    #[serde(default)]
    pub timeout: Option<Timeout>,
    /// The account the command runs as, e.g. `user = "bench"`, when edgebench runs as root
    /// (the daemon): a framework's script then cannot touch edgebench's files. None: the
    /// command runs as edgebench itself.
    #[serde(default)]
    pub user: Option<String>,
}

/// `[[exec]]`: the commands of the exec workload, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecSection(pub Vec<ExecEntry>);

/// The values of one sweep point that a command's placeholders take.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepValues {
    pub net: String,
    pub batch: usize,
    /// The device as edgebench names it (`cpu`, `cuda`).
    pub device: String,
    pub images: usize,
    pub epochs: usize,
}

impl SweepValues {
    /// Training steps of the sweep point: `(images / batch) * epochs`, as the studies' Caffe
    /// and TF-Slim runs set `max_iter` and `max_number_of_steps`; 0 without a batch.
    pub fn iterations(&self) -> usize {
        self.images
            .checked_div(self.batch)
            .map_or(0, |steps| steps * self.epochs)
    }
}

impl ExecEntry {
    /// Checks the entry before anything runs: a name, a program, known placeholders, a known
    /// parser, an account that exists and that edgebench may switch to.
    pub fn validate(&self) -> Result<()> {
        let what = format!("[[exec]] entry '{}'", self.name);
        if self.name.trim().is_empty() {
            bail!("an [[exec]] entry has an empty name: give each engine a name, e.g. name = \"pytorch\"");
        }
        if self.command.first().is_none_or(|p| p.trim().is_empty()) {
            bail!("{what}: command is empty: give the program and its arguments, e.g. command = [\"python3\", \"train.py\", \"{{batch}}\"]");
        }
        let probe = SweepValues {
            net: String::new(),
            batch: 0,
            device: String::new(),
            images: 0,
            epochs: 0,
        };
        self.expand(&probe)?;
        if let Some(parser) = &self.parser {
            Parser::from_name(parser).with_context(|| what.clone())?;
        }
        if let Some(user) = &self.user {
            RunAs::resolve(user).with_context(|| what.clone())?;
        }
        Ok(())
    }

    /// The command for one sweep point.
    pub(crate) fn expand(&self, values: &SweepValues) -> Result<Vec<String>> {
        self.command
            .iter()
            .map(|arg| expand_arg(arg, values))
            .collect::<Result<_>>()
            .with_context(|| format!("[[exec]] entry '{}'", self.name))
    }
}

/// Replaces the placeholders of one argument.
pub(crate) fn expand_arg(template: &str, values: &SweepValues) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            bail!("argument '{template}': lone '}}' (write '}}}}' for a literal brace)");
        } else {
            let Some(end) = tail.find('}') else {
                bail!("argument '{template}': '{{' without its '}}' (write '{{{{' for a literal brace)");
            };
            let name = &tail[1..end];
            match name {
                "net" => out.push_str(&values.net),
                "batch" => out.push_str(&values.batch.to_string()),
                "device" => out.push_str(&values.device),
                "images" => out.push_str(&values.images.to_string()),
                "epochs" => out.push_str(&values.epochs.to_string()),
                // The studies' step count, (images / batch) x epochs, so every engine of a
                // sweep point does the same work.
                "iterations" => out.push_str(&values.iterations().to_string()),
                _ => bail!(
                    "argument '{template}': unknown placeholder {{{name}}} (known: {PLACEHOLDERS}; \
                     write '{{{{' and '}}}}' for literal braces)"
                ),
            }
            rest = &tail[end + 1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The workload parameters of an exec trial, which with the common columns make its resume
/// key: the same engine running the same expanded command is the same trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    pub engine: String,
    /// The expanded argv.
    pub command: Vec<String>,
}

impl ExecParams {
    /// The canonical JSON object text stored as the trial's `params` (keys sorted).
    pub(crate) fn canonical_json(&self) -> String {
        crate::workloads::params_text(self)
    }
}

/// Bytes of each stream kept with a trial.
pub(crate) const TAIL_BYTES: usize = 64 * 1024;

/// The last `capacity` bytes written to a stream.
#[derive(Debug, Clone)]
pub(crate) struct TailBuffer {
    capacity: usize,
    bytes: VecDeque<u8>,
    total: u64,
}

impl TailBuffer {
    pub(crate) fn new(capacity: usize) -> TailBuffer {
        TailBuffer {
            capacity,
            bytes: VecDeque::with_capacity(capacity.min(TAIL_BYTES)),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(self.capacity)..];
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        drop(self.bytes.drain(..overflow));
        self.bytes.extend(data);
    }

    /// Bytes ever pushed.
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> u64 {
        self.total
    }

    /// True when older output was dropped.
    pub(crate) fn truncated(&self) -> bool {
        self.total > self.bytes.len() as u64
    }

    /// The kept bytes as text: invalid UTF-8 replaced, and a character cut by the start of the
    /// window dropped rather than shown as garbage.
    pub(crate) fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut bytes = Vec::with_capacity(a.len() + b.len());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b);
        let start = if self.truncated() {
            // UTF-8 continuation bytes are 0b10xxxxxx; a character has at most 3 of them.
            bytes
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count()
        } else {
            0
        };
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// The process group of the command the worker is running now (0: none), for the handler that
/// ends it when the edgebench process that started the trial dies.
static RUNNING_GROUP: AtomicU32 = AtomicU32::new(0);

/// The process group of the command running now in this process, if any.
pub(crate) fn running_group() -> Option<u32> {
    match RUNNING_GROUP.load(Ordering::SeqCst) {
        0 => None,
        pgid => Some(pgid),
    }
}

/// A less privileged account to run a command as (`[[exec]] user`), resolved before the fork:
/// the child may only make system calls between fork and exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub name: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    /// Supplementary groups (`video`, `i2c`, ... on a Jetson), as in /etc/group.
    pub groups: Vec<libc::gid_t>,
    pub home: std::path::PathBuf,
}

impl RunAs {
    /// Looks the account up; running as another account needs root.
    pub(crate) fn resolve(name: &str) -> Result<RunAs> {
        let user = nix::unistd::User::from_name(name)
            .with_context(|| format!("cannot look up user '{name}'"))?
            .with_context(|| {
                format!("user '{name}' does not exist: create it, or name an existing account")
            })?;
        let current = nix::unistd::geteuid();
        if !current.is_root() && current != user.uid {
            bail!(
                "running commands as user '{name}' needs edgebench to run as root (it runs as \
                 uid {current}); run it as root, or drop `user`"
            );
        }
        let c_name = std::ffi::CString::new(name)?;
        let groups = nix::unistd::getgrouplist(&c_name, user.gid)
            .with_context(|| format!("cannot list the groups of user '{name}'"))?;
        Ok(RunAs {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups: groups.iter().map(|g| g.as_raw()).collect(),
            home: user.dir,
        })
    }
}

/// Starts `argv` in a process group of its own (its pid is the group id), so ending the trial
/// reaches every process it started. stdin is empty, stdout and stderr are piped.
/// `PYTHONUNBUFFERED=1` (unless set) makes Python scripts write each line when printed, so
/// lines are timestamped as they happen. With `run_as`, the command runs as that account.
pub(crate) fn spawn_in_group(argv: &[String], run_as: Option<&RunAs>) -> Result<Child> {
    let Some((program, args)) = argv.split_first() else {
        bail!("empty command: give the program to run and its arguments");
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The worker's own setting is not the command's business.
        .env_remove(TRIAL_CGROUP_ENV);
    if std::env::var_os("PYTHONUNBUFFERED").is_none() {
        command.env("PYTHONUNBUFFERED", "1");
    }
    if let Some(user) = run_as {
        command
            .env("USER", &user.name)
            .env("LOGNAME", &user.name)
            .env("HOME", &user.home);
        let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
        // SAFETY: setgroups(2), setgid(2) and setuid(2) are async-signal-safe; the group list
        // was allocated before the fork.
        unsafe {
            command.pre_exec(move || {
                // Groups first: after setuid the process may no longer change them.
                if libc::setgroups(groups.len() as _, groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    // The command must not outlive the process that watches it (a worker killed when a stop
    // takes too long); whatever it started is in its group and ended by the trial's cgroup.
    // SAFETY: prctl(2) is async-signal-safe and only sets a flag on the new process.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let as_user = run_as.map_or(String::new(), |u| format!(" as user '{}'", u.name));
    command.spawn().with_context(|| {
        format!(
            "cannot start `{program}`{as_user} (is it installed and on PATH, or the path right?)"
        )
    })
}

pub(crate) use crate::memory::cgroup::TRIAL_CGROUP_ENV;

/// Sends `signal` to every process of the group led by `pgid`. A group already gone is fine.
pub(crate) fn signal_group(pgid: u32, signal: i32) -> std::io::Result<()> {
    let pgid = i32::try_from(pgid).map_err(|_| std::io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) takes plain integers; a negative pid addresses the process group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ESRCH) => Ok(()),
        _ => Err(err),
    }
}

/// Ends a command's process group: SIGTERM to the group, then SIGKILL to whatever is left
/// once the leader has exited or `grace` has passed. Returns the leader's exit status.
pub(crate) fn end_group(child: &mut Child, grace: Duration) -> Result<ExitStatus> {
    let pgid = child.id();
    signal_group(pgid, libc::SIGTERM).context("cannot signal the command's process group")?;
    let deadline = Instant::now() + grace;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Children that ignore SIGTERM or outlive the leader go too.
    signal_group(pgid, libc::SIGKILL).context("cannot kill the command's process group")?;
    match status {
        Some(status) => Ok(status),
        None => Ok(child.wait()?),
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CommandEnd {
    /// Exited by itself with this code.
    Exited(i32),
    /// Died of this signal, not sent by edgebench.
    Signaled(i32),
    /// Ran past the timeout; edgebench ended it.
    TimedOut,
    /// A stop was asked (Ctrl-C); edgebench ended it.
    Interrupted,
}

impl CommandEnd {
    fn from_status(status: ExitStatus) -> CommandEnd {
        match (status.code(), status.signal()) {
            (Some(code), _) => CommandEnd::Exited(code),
            (None, Some(sig)) => CommandEnd::Signaled(sig),
            (None, None) => CommandEnd::Exited(-1),
        }
    }

    /// The exit code to store, when the command exited by itself.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            CommandEnd::Exited(code) => Some(code),
            _ => None,
        }
    }

    /// The trial's (status, error). `oom_killed`: the kernel's OOM killer killed a process of
    /// the trial (its cgroup's `oom_kill` counter rose). `stderr_tail`: the end of what the
    /// command wrote to stderr, quoted in a failure.
    pub fn status(
        self,
        oom_killed: bool,
        timeout: Option<Duration>,
        stderr_tail: &str,
    ) -> (&'static str, Option<String>) {
        let last_lines = || {
            let lines: Vec<&str> = stderr_tail.trim_end().lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        match self {
            CommandEnd::Exited(0) => ("ok", None),
            _ if oom_killed => (
                "oom",
                Some("killed by the kernel OOM killer (oom_kill counter rose): the command does not fit memory".into()),
            ),
            CommandEnd::Exited(code) => {
                let tail = last_lines();
                let error = if tail.is_empty() {
                    format!("command exited with code {code} (stderr empty)")
                } else {
                    format!("command exited with code {code}; end of stderr:\n{tail}")
                };
                ("failed", Some(error))
            }
            CommandEnd::Signaled(sig) => (
                "crashed",
                Some(format!("command died of {}", crate::host::signal_name(sig))),
            ),
            CommandEnd::TimedOut => (
                "failed",
                Some(match timeout {
                    Some(t) => format!("timeout: still running after {:.0} s; ended (SIGTERM, then SIGKILL)", t.as_secs_f64()),
                    None => "timeout".into(),
                }),
            ),
            CommandEnd::Interrupted => ("interrupted", None),
        }
    }
}

/// Longest line handed to the parser; the rest of a longer one is dropped (the console and the
/// tail still get it all).
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Copies a stream to `sink` as it arrives (progress bars' `\r` included), keeps its tail, and
/// sends each line (ended by `\n` or `\r`) with the CLOCK_MONOTONIC instant it was read.
/// `lines` is bounded: while the parser is behind, the pump stops reading and the command
/// blocks on its full pipe, so a flood of output costs edgebench no memory.
pub(crate) fn pump(
    stream: Stream,
    mut reader: impl Read + Send + 'static,
    mut sink: impl Write + Send + 'static,
    tail: Arc<Mutex<TailBuffer>>,
    lines: mpsc::SyncSender<(Stream, String, i64)>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        let mut partial: Vec<u8> = Vec::new();
        let send = |bytes: &[u8]| {
            if !bytes.is_empty() {
                let text = String::from_utf8_lossy(bytes).into_owned();
                let _ = lines.send((stream, text, monotonic_ns()));
            }
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            // A console that went away must not stop the trial.
            let _ = sink.write_all(chunk).and_then(|_| sink.flush());
            tail.lock().unwrap_or_else(|e| e.into_inner()).push(chunk);
            for piece in chunk.split_inclusive(|&b| b == b'\n' || b == b'\r') {
                let (body, ended) = match piece.split_last() {
                    Some((b'\n' | b'\r', body)) => (body, true),
                    _ => (piece, false),
                };
                // A line without end (binary output) is cut rather than held without bound.
                let room = MAX_LINE_BYTES.saturating_sub(partial.len());
                partial.extend_from_slice(&body[..body.len().min(room)]);
                if ended {
                    send(&partial);
                    partial.clear();
                }
            }
        }
        send(&partial);
    })
}

/// What to run and how long it may take.
#[derive(Debug, Clone)]
pub(crate) struct CommandSpec {
    pub argv: Vec<String>,
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when edgebench ends the command.
    pub grace: Duration,
    /// Gives the epoch of step lines that carry none.
    pub steps_per_epoch: Option<usize>,
    pub echo: Echo,
    /// The account to run the command as; None: edgebench's own.
    pub run_as: Option<RunAs>,
}

/// Where the command's output is passed through to as it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    /// Both to stderr: for a process whose stdout carries its own messages (the worker's).
    Stderr,
    /// Nowhere (the tails still keep the end).
    #[cfg(test)]
    Off,
}

impl Echo {
    fn sink(self, stream: Stream) -> Box<dyn Write + Send> {
        match (self, stream) {
            (Echo::Stderr, _) => Box::new(std::io::stderr()),
            #[cfg(test)]
            (Echo::Off, _) => Box::new(std::io::sink()),
        }
    }
}

/// What a finished command left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandOutcome {
    pub end: CommandEnd,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// CLOCK_MONOTONIC at spawn and once the command had ended: the whole command's interval.
    pub started_ns: i64,
    pub ended_ns: i64,
    /// Records handed to `emit`.
    pub records: usize,
    /// Lines that claimed the parser's format but could not be read (the first few).
    pub parse_errors: Vec<String>,
}

/// Lines read but not yet parsed, per command: at most this many times [`MAX_LINE_BYTES`].
pub(crate) const LINE_QUEUE: usize = 64;

/// How often the command's state is looked at while no line arrives.
const POLL: Duration = Duration::from_millis(20);
/// How long output is still read after the command's group has ended.
const DRAIN: Duration = Duration::from_secs(2);

/// Malformed lines kept for the report; more are only counted.
const MAX_PARSE_ERRORS: usize = 10;

/// Runs a command to its end: in its own process group, output passed through as `spec.echo`
/// says and parsed line by line (stdout and stderr both; frameworks log to
/// either) into records handed to `emit`. Ends the group on `timeout`, when `stop` is set, or
/// when `emit` returns [`Control::Stop`]; once the leader exits, whatever it left in its group
/// is killed.
pub(crate) fn run_command(
    spec: &CommandSpec,
    parser: Option<Parser>,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&TrackedStep) -> Result<Control>,
) -> Result<CommandOutcome> {
    let started_ns = monotonic_ns();
    let started = Instant::now();
    let mut child = spawn_in_group(&spec.argv, spec.run_as.as_ref())?;
    let pgid = child.id();
    RUNNING_GROUP.store(pgid, Ordering::SeqCst);
    let outcome = watch_command(spec, parser, stop, emit, &mut child, started_ns, started);
    if outcome.is_err() {
        // Whatever went wrong here, the command must not run on unwatched.
        let _ = signal_group(pgid, libc::SIGKILL);
        let _ = child.wait();
    }
    RUNNING_GROUP.store(0, Ordering::SeqCst);
    outcome
}

fn watch_command(
    spec: &CommandSpec,
    mut parser: Option<Parser>,
    stop: &AtomicBool,
    emit: &mut dyn FnMut(&TrackedStep) -> Result<Control>,
    child: &mut Child,
    started_ns: i64,
    started: Instant,
) -> Result<CommandOutcome> {
    let pgid = child.id();
    let (tx, rx) = mpsc::sync_channel(LINE_QUEUE);
    let stdout_tail = Arc::new(Mutex::new(TailBuffer::new(TAIL_BYTES)));
    let stderr_tail = Arc::new(Mutex::new(TailBuffer::new(TAIL_BYTES)));
    let pumps = [
        pump(
            Stream::Stdout,
            child.stdout.take().expect("stdout is piped"),
            spec.echo.sink(Stream::Stdout),
            stdout_tail.clone(),
            tx.clone(),
        ),
        pump(
            Stream::Stderr,
            child.stderr.take().expect("stderr is piped"),
            spec.echo.sink(Stream::Stderr),
            stderr_tail.clone(),
            tx,
        ),
    ];
    let mut tracker = StepTracker::new(started_ns, spec.steps_per_epoch);
    let mut records = 0;
    let mut parse_errors = Vec::new();
    let mut ended_by_us = None;
    let mut status = None;
    let mut emit_error = None;
    let mut drain_deadline = None;
    loop {
        match rx.recv_timeout(POLL) {
            Ok((_, line, read_ns)) => {
                let Some(parser) = parser.as_mut() else {
                    continue;
                };
                match parser.parse(&line) {
                    Ok(Some(event)) => {
                        if let Some(step) = tracker.feed(event, read_ns) {
                            records += 1;
                            match emit(&step) {
                                Ok(Control::Continue) => {}
                                Ok(Control::Stop) => {
                                    ended_by_us.get_or_insert(CommandEnd::Interrupted);
                                }
                                Err(e) => {
                                    emit_error = Some(e);
                                    ended_by_us.get_or_insert(CommandEnd::Interrupted);
                                }
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(e) if parse_errors.len() < MAX_PARSE_ERRORS => {
                        tracing::warn!("{e:#}");
                        parse_errors.push(format!("{e:#}"));
                    }
                    Err(_) => {}
                }
            }
            // Both streams closed: everything in the group has ended or closed them.
            Err(mpsc::RecvTimeoutError::Disconnected) if status.is_some() => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(POLL),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        // A process that left the group (setsid) may hold the pipes open: stop reading it.
        if drain_deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if status.is_none() {
            if stop.load(Ordering::SeqCst) {
                ended_by_us.get_or_insert(CommandEnd::Interrupted);
            }
            if spec.timeout.is_some_and(|t| started.elapsed() >= t) {
                ended_by_us.get_or_insert(CommandEnd::TimedOut);
            }
            if ended_by_us.is_some() {
                status = Some(end_group(child, spec.grace)?);
                drain_deadline = Some(Instant::now() + DRAIN);
            } else if let Some(exited) = child.try_wait()? {
                // Leftover processes would hold the pipes open and outlive the trial.
                signal_group(pgid, libc::SIGKILL)?;
                status = Some(exited);
                drain_deadline = Some(Instant::now() + DRAIN);
            }
        }
    }
    for pump in pumps {
        if pump.is_finished() {
            let _ = pump.join();
        }
    }
    let ended_ns = monotonic_ns();
    if let Some(e) = emit_error {
        return Err(e.context("recording an iteration of the command"));
    }
    let status = status.expect("loop ends after the command");
    let end = ended_by_us.unwrap_or_else(|| CommandEnd::from_status(status));
    let text =
        |tail: &Arc<Mutex<TailBuffer>>| tail.lock().unwrap_or_else(|e| e.into_inner()).text();
    Ok(CommandOutcome {
        end,
        stdout_tail: text(&stdout_tail),
        stderr_tail: text(&stderr_tail),
        started_ns,
        ended_ns,
        records,
        parse_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> SweepValues {
        SweepValues {
            net: "alexnet".into(),
            batch: 16,
            device: "cuda".into(),
            images: 1024,
            epochs: 10,
        }
    }

    fn entry(command: &[&str]) -> ExecEntry {
        ExecEntry {
            name: "pytorch".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            parser: Some("edgebench".into()),
            timeout: None,
            user: None,
        }
    }

    #[test]
    fn placeholders_expand_over_the_sweep_point() {
        let e = entry(&[
            "python3",
            "bench/torch_train.py",
            "{net}",
            "--batch_size={batch}",
            "--max_number_of_steps={images}x{epochs}",
            "{iterations}",
            "--{device}",
            "-c",
            "print({{'a': 1}})",
        ]);
        e.validate().unwrap();
        assert_eq!(
            e.expand(&values()).unwrap(),
            [
                "python3",
                "bench/torch_train.py",
                "alexnet",
                "--batch_size=16",
                "--max_number_of_steps=1024x10",
                "640",
                "--cuda",
                "-c",
                "print({'a': 1})"
            ]
        );
    }

    #[test]
    fn bad_entries_are_refused_with_what_to_write() {
        for (command, says) in [
            (
                vec!["train", "{lr}"],
                "unknown placeholder {lr} (known: {net}, {batch}",
            ),
            (vec!["train", "{batch"], "'{' without its '}'"),
            (vec!["train", "a}b"], "lone '}'"),
            (vec![], "command is empty"),
        ] {
            let err = format!("{:#}", entry(&command).validate().unwrap_err());
            assert!(err.contains(says) && err.contains("pytorch"), "{err}");
        }
        let mut e = entry(&["train"]);
        e.parser = Some("mxnet".into());
        let err = format!("{:#}", e.validate().unwrap_err());
        assert!(err.contains("unknown log parser 'mxnet'"), "{err}");
        let toml_err =
            toml::from_str::<ExecEntry>("name = \"x\"\ncommand = [\"a\"]\nparsr = \"caffe\"")
                .unwrap_err()
                .to_string();
        assert!(toml_err.contains("parsr"), "{toml_err}");
    }

    #[test]
    fn exec_tables_read_from_a_config() {
        #[derive(Deserialize)]
        struct Doc {
            exec: Vec<ExecEntry>,
        }
        let doc: Doc = toml::from_str(
            r#"
            [[exec]]
            name = "pytorch"
            command = ["python3", "bench/torch_train.py", "{net}", "{batch}", "20"]
            parser = "edgebench"

            [[exec]]
            name = "plain"
            command = ["./train.sh"]
            timeout = "2h"
            "#,
        )
        .unwrap();
        assert_eq!(doc.exec.len(), 2);
        assert_eq!(doc.exec[0].parser.as_deref(), Some("edgebench"));
        assert_eq!(doc.exec[1].parser, None);
        assert_eq!(doc.exec[1].timeout.map(|t| t.0.as_secs()), Some(7200));
        for e in &doc.exec {
            e.validate().unwrap();
        }
    }

    #[test]
    fn an_endless_line_is_cut_for_the_parser_but_kept_whole_in_the_tail() {
        let (tx, rx) = mpsc::sync_channel(LINE_QUEUE);
        let tail = Arc::new(Mutex::new(TailBuffer::new(4 * MAX_LINE_BYTES)));
        let mut input = vec![b'x'; 3 * MAX_LINE_BYTES];
        input.extend_from_slice(b"\nEDGEBENCH step=1 loss=1\rlast");
        let pump = pump(
            Stream::Stdout,
            std::io::Cursor::new(input.clone()),
            std::io::sink(),
            tail.clone(),
            tx,
        );
        pump.join().unwrap();
        let lines: Vec<String> = rx.iter().map(|(_, line, _)| line).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "x".repeat(MAX_LINE_BYTES));
        assert_eq!(lines[1..], ["EDGEBENCH step=1 loss=1", "last"]);
        assert_eq!(tail.lock().unwrap().total_bytes(), input.len() as u64);
    }

    /// A reader of `total` bytes of short lines that counts how far it has been read.
    struct CountingFlood {
        left: usize,
        read: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Read for CountingFlood {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            const LINE: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789\n";
            let n = buf.len().min(self.left) / LINE.len() * LINE.len();
            for chunk in buf[..n].chunks_mut(LINE.len()) {
                chunk.copy_from_slice(LINE);
            }
            self.left -= n;
            self.read.fetch_add(n, Ordering::SeqCst);
            Ok(n)
        }
    }

    #[test]
    fn a_flooding_command_waits_for_the_parser_instead_of_queueing_its_output_in_memory() {
        let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let total = 256 << 20;
        let flood = CountingFlood {
            left: total,
            read: read.clone(),
        };
        let (tx, rx) = mpsc::sync_channel(LINE_QUEUE);
        let tail = Arc::new(Mutex::new(TailBuffer::new(TAIL_BYTES)));
        let pump = pump(Stream::Stdout, flood, std::io::sink(), tail, tx);
        // Nobody parses: the pump must stall once the queue is full, not read on.
        let mut last = usize::MAX;
        let deadline = Instant::now() + Duration::from_secs(10);
        while read.load(Ordering::SeqCst) != last && Instant::now() < deadline {
            last = read.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(200));
        }
        let stalled_at = read.load(Ordering::SeqCst);
        // The queue's lines plus one read buffer, far from the 256 MiB on offer.
        assert!(
            stalled_at < 1 << 20,
            "read {stalled_at} bytes ahead of the parser"
        );
        // Once the parser drains the queue, everything arrives.
        let lines = rx.iter().count();
        pump.join().unwrap();
        assert_eq!(lines, total / 37);
        assert_eq!(read.load(Ordering::SeqCst), total / 37 * 37);
    }

    #[test]
    fn exec_params_json_has_the_engine_and_the_argv() {
        let p = ExecParams {
            engine: "caffe".into(),
            command: vec!["caffe".into(), "train".into(), "-solver=s \"q\"".into()],
        };
        assert_eq!(
            p.canonical_json(),
            r#"{"command":["caffe","train","-solver=s \"q\""],"engine":"caffe"}"#
        );
    }

    #[test]
    fn tail_buffer_keeps_the_last_bytes() {
        let mut t = TailBuffer::new(TAIL_BYTES);
        let mut written = 0;
        for i in 0..4000 {
            let line = format!("line {i:05} of the log\n");
            written += line.len() as u64;
            t.push(line.as_bytes());
        }
        let text = t.text();
        assert!(t.truncated());
        assert_eq!(t.total_bytes(), written);
        assert_eq!(text.len(), TAIL_BYTES);
        assert!(text.ends_with("line 03999 of the log\n"));
        // One push larger than the buffer keeps its own end.
        t.push(&vec![b'x'; 2 * TAIL_BYTES]);
        assert_eq!(t.text(), "x".repeat(TAIL_BYTES));
        // A character cut at the window's start is dropped, not shown as garbage.
        let mut small = TailBuffer::new(4);
        small.push("aé€".as_bytes()); // 1 + 2 + 3 bytes: the window starts inside 'é'
        assert_eq!(small.text(), "€");
        let mut whole = TailBuffer::new(16);
        whole.push(b"ok\n");
        assert!(!whole.truncated());
        assert_eq!(whole.text(), "ok\n");
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// A process is gone when it no longer exists or is a zombie nobody reaped yet.
    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    fn wait_gone(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if gone(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn spec(argv: Vec<String>, timeout_ms: Option<u64>) -> CommandSpec {
        CommandSpec {
            argv,
            timeout: timeout_ms.map(Duration::from_millis),
            grace: Duration::from_millis(300),
            steps_per_epoch: None,
            echo: Echo::Off,
            run_as: None,
        }
    }

    fn run(
        spec: &CommandSpec,
        parser: Option<&str>,
        stop: &AtomicBool,
    ) -> (CommandOutcome, Vec<TrackedStep>) {
        let mut steps = Vec::new();
        let outcome = run_command(
            spec,
            parser.map(|p| Parser::from_name(p).unwrap()),
            stop,
            &mut |s| {
                steps.push(s.clone());
                Ok(Control::Continue)
            },
        )
        .unwrap();
        (outcome, steps)
    }

    #[test]
    fn timeout_ends_the_command_and_its_child() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        // The child ignores SIGTERM: only the SIGKILL after the grace ends it.
        let script = format!(
            "sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & echo $! > {}; wait",
            pidfile.display()
        );
        let started = Instant::now();
        let (outcome, steps) = run(&spec(sh(&script), Some(500)), None, &AtomicBool::new(false));
        assert_eq!(outcome.end, CommandEnd::TimedOut);
        assert!(steps.is_empty());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let child: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(wait_gone(child), "child {child} outlived the timeout");
        let (status, error) = outcome.end.status(false, Some(Duration::from_secs(1)), "");
        assert_eq!(status, "failed");
        assert!(error.unwrap().starts_with("timeout"));
    }

    #[test]
    fn leftover_children_end_with_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 30 & echo $! > {}; exit 0", pidfile.display());
        let (outcome, _) = run(&spec(sh(&script), None), None, &AtomicBool::new(false));
        assert_eq!(outcome.end, CommandEnd::Exited(0));
        let child: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_gone(child),
            "background child {child} outlived the command"
        );
    }

    #[test]
    fn stop_interrupts_the_command() {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::SeqCst);
            });
            let (outcome, _) = run(&spec(sh("sleep 30"), None), None, &stop);
            assert_eq!(outcome.end, CommandEnd::Interrupted);
            assert_eq!(outcome.end.status(false, None, "").0, "interrupted");
        });
    }

    #[test]
    fn step_lines_become_records_as_they_are_read() {
        let script = "echo starting; \
            for i in 1 2 3; do sleep 0.2; echo \"EDGEBENCH step=$i loss=0.$i images=4\"; done; \
            echo 'EDGEBENCH step=x loss=1' ; echo done >&2";
        let (outcome, steps) = run(
            &spec(sh(script), None),
            Some("edgebench"),
            &AtomicBool::new(false),
        );
        assert_eq!(outcome.end, CommandEnd::Exited(0));
        assert_eq!(outcome.records, 3);
        assert_eq!(
            steps.iter().map(|s| s.record.step).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(steps[2].record.loss, 0.3);
        assert_eq!(steps[0].images, Some(4));
        for s in &steps[1..] {
            // No time in the line: the interval between lines, about the script's 0.2 s sleep.
            assert!((0.15..1.5).contains(&s.record.step_s), "{s:?}");
        }
        assert!(outcome.started_ns <= steps[0].record.t_start_ns);
        assert!(steps[2].record.t_end_ns <= outcome.ended_ns);
        assert_eq!(outcome.parse_errors.len(), 1, "{:?}", outcome.parse_errors);
        assert!(outcome
            .stdout_tail
            .starts_with("starting\nEDGEBENCH step=1"));
        assert_eq!(outcome.stderr_tail, "done\n");
    }

    #[test]
    fn a_command_without_step_lines_still_ends_with_its_status() {
        let (outcome, steps) = run(
            &spec(sh("echo working; echo 'out of patience' >&2; exit 3"), None),
            Some("caffe"),
            &AtomicBool::new(false),
        );
        assert!(steps.is_empty());
        assert_eq!(outcome.end, CommandEnd::Exited(3));
        assert_eq!(outcome.end.exit_code(), Some(3));
        let (status, error) = outcome.end.status(false, None, &outcome.stderr_tail);
        assert_eq!(status, "failed");
        let error = error.unwrap();
        assert!(
            error.contains("code 3") && error.contains("out of patience"),
            "{error}"
        );

        let (outcome, _) = run(
            &spec(sh("kill -SEGV $$"), None),
            None,
            &AtomicBool::new(false),
        );
        assert_eq!(outcome.end, CommandEnd::Signaled(libc::SIGSEGV));
        let (status, error) = outcome.end.status(false, None, "");
        assert_eq!(
            (status, error.unwrap().contains("SIGSEGV")),
            ("crashed", true)
        );
        assert_eq!(
            CommandEnd::Signaled(libc::SIGKILL).status(true, None, "").0,
            "oom"
        );
    }

    #[test]
    fn a_missing_program_is_named() {
        let err = format!(
            "{:#}",
            spawn_in_group(&["/nonexistent/trainer".to_string()], None).unwrap_err()
        );
        assert!(err.contains("cannot start `/nonexistent/trainer`"), "{err}");
    }
}
