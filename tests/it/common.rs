//! Helpers shared by the test modules: the real binary with a clean environment, waiting on its
//! database, signals and the process tree, and skipping what a host cannot run.

use rusqlite::Connection;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binary, in `dir`, with a clean environment: no DB or sysfs root from the caller, no
/// config/edgebench.toml in the cwd, two math threads.
pub(crate) fn edgebench(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_edgebench"));
    cmd.current_dir(dir)
        .env_remove("EDGEBENCH_DB")
        .env_remove("EDGEBENCH_SYSFS")
        .env("RAYON_NUM_THREADS", "2");
    cmd
}

/// `edgebench args` in `dir`, run to the end.
pub(crate) fn run_edgebench(dir: &Path, args: &[&str]) -> Output {
    edgebench(dir).args(args).output().unwrap()
}

/// A path as a command-line argument (the tests' temporary paths are UTF-8).
pub(crate) fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub(crate) fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn ok(out: Output) -> Output {
    assert!(out.status.success(), "{}", describe(&out));
    out
}

/// `edgebench results --json` as JSON objects.
pub(crate) fn results(dir: &Path, db: &Path) -> Vec<Value> {
    let out = ok(edgebench(dir)
        .args(["results", "--json", "--db"])
        .arg(db)
        .output()
        .unwrap());
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// One number from the DB, 0 while the file or table does not exist yet.
pub(crate) fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .ok()
        .and_then(|c| c.query_row(sql, [], |r| r.get::<_, i64>(0)).ok())
        .unwrap_or(0)
}

/// Polls until `sql` counts at least `n`, failing after `limit`. The poll is short enough for
/// a test to act between two training steps of a small trial.
pub(crate) fn wait_for(db: &Path, sql: &str, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let got = count(db, sql);
        if got >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {sql} >= {n} (at {got} after {limit:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to `pid`, a process the test started (directly or through the binary).
pub(crate) fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2); the caller has not reaped `pid`, so it is still that process.
    unsafe { libc::kill(pid as i32, sig) };
}

/// The state letter and parent pid of `pid`, from /proc/<pid>/stat.
fn state_and_parent(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
    let mut fields = stat[stat.rfind(')')? + 2..].split(' ');
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Pids of the live children of `parent`.
pub(crate) fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| state_and_parent(pid).is_some_and(|(s, p)| p == parent && s != 'Z'))
        .collect()
}

/// Whether `pid` still runs (a zombie nobody reaped yet counts as gone).
pub(crate) fn alive(pid: u32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Why the memory cgroup tests cannot run here (not root, no usable memory cgroup), if they
/// cannot. Probed once per test process: the probe cgroup is named after the process, so two
/// tests probing at once would collide on it and one would see the cgroup as unusable.
pub(crate) fn cgroup_unusable() -> Option<String> {
    static UNUSABLE: OnceLock<Option<String>> = OnceLock::new();
    UNUSABLE
        .get_or_init(|| {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Some("not root".into());
            }
            edgebench::memory::cgroup::check(&edgebench::host::HostPaths::default(), 1 << 30)
                .err()
                .map(|e| e.to_string())
        })
        .clone()
}

/// For a test that cannot run on this host: it fails naming what is missing, since a test
/// that was not run is not a pass. `.ci/run` provides every capability these tests need.
pub(crate) fn cannot_run(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    panic!("{test} cannot run here ({reason}); .ci/run installs and sets up what the tests need");
}
