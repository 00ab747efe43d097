//! A memory cgroup per trial (`--mem-limit`), so a workstation can reproduce a 4 GB TX1 or an
//! 8 GB TX2. cgroup v2 where the unified hierarchy has the memory controller, else v1's memory
//! hierarchy. Paths go through the sysfs root (`<sysfs>/fs/cgroup`), our own cgroup through the
//! procfs root (`<procfs>/self/cgroup`).

use crate::host::HostPaths;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "--mem-limit needs a memory cgroup, and none is usable here: {0}. Run edgebench as root, \
         or under systemd with Delegate=yes (e.g. `systemd-run --user -p Delegate=yes --scope edgebench run ...`), \
         or drop --mem-limit"
    )]
    Unavailable(String),
    #[error("cannot set up memory cgroup {path}: {reason}")]
    Setup { path: PathBuf, reason: String },
}

/// Where new cgroups go: the memory hierarchy's directory for our own cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupParent {
    pub version: Version,
    pub dir: PathBuf,
}

/// `<procfs>/self/cgroup` lines: `0::/path` (v2) or `N:memory:/path` (v1; controllers may be
/// comma-joined).
pub(crate) fn own_cgroup_path(self_cgroup: &str, version: Version) -> Option<String> {
    self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = match version {
            Version::V2 => controllers.is_empty(),
            Version::V1 => controllers.split(',').any(|c| c == "memory"),
        };
        wanted.then(|| path.trim().to_string())
    })
}

/// Finds the hierarchy and our place in it.
pub fn locate(paths: &HostPaths) -> Result<CgroupParent, CgroupError> {
    let root = paths.sys("fs/cgroup");
    let self_cgroup = std::fs::read_to_string(paths.proc("self/cgroup")).map_err(|e| {
        CgroupError::Unavailable(format!(
            "cannot read {}: {e}",
            paths.proc("self/cgroup").display()
        ))
    })?;
    let v2_controllers =
        std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let (version, base) = if v2_controllers.split_whitespace().any(|c| c == "memory") {
        (Version::V2, root.clone())
    } else if root.join("memory").is_dir() {
        (Version::V1, root.join("memory"))
    } else {
        return Err(CgroupError::Unavailable(format!(
            "no memory controller under {} (neither cgroup v2 with `memory` nor a v1 memory hierarchy)",
            root.display()
        )));
    };
    let own = own_cgroup_path(&self_cgroup, version).unwrap_or_else(|| "/".into());
    Ok(CgroupParent {
        version,
        dir: base.join(own.trim_start_matches('/')),
    })
}

/// One trial's cgroup; removed when dropped (after its process has exited).
#[derive(Debug)]
pub(crate) struct TrialCgroup {
    pub version: Version,
    pub dir: PathBuf,
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|e| CgroupError::Setup {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

impl TrialCgroup {
    /// Creates `<parent>/<name>` capped at `limit` bytes of RAM (None: no cap, the cgroup only
    /// counts, so an OOM kill is attributed to this trial and not to another process) and, when
    /// `swap` is given, that much swap on top (None leaves swap as the host has it).
    pub(crate) fn create(
        parent: &CgroupParent,
        name: &str,
        limit: Option<u64>,
        swap: Option<u64>,
    ) -> Result<TrialCgroup, CgroupError> {
        let dir = parent.dir.join(name);
        if parent.version == Version::V2 {
            // Children only get the controller if the parent hands it down.
            let control = parent.dir.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&control).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                write(&control, "+memory").map_err(|e| CgroupError::Unavailable(e.to_string()))?;
            }
        }
        std::fs::create_dir(&dir).map_err(|e| {
            CgroupError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
        let cg = TrialCgroup {
            version: parent.version,
            dir,
        };
        let Some(limit) = limit else {
            return Ok(cg);
        };
        match cg.version {
            Version::V2 => {
                write(&cg.dir.join("memory.max"), &limit.to_string())?;
                if let Some(swap) = swap {
                    write(&cg.dir.join("memory.swap.max"), &swap.to_string())?;
                }
            }
            Version::V1 => {
                write(&cg.dir.join("memory.limit_in_bytes"), &limit.to_string())?;
                if let Some(swap) = swap {
                    // memsw counts RAM + swap; it must be set after, and be >=, the RAM limit.
                    let memsw = cg.dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &limit.saturating_add(swap).to_string())?;
                    } else if swap == 0 {
                        write(&cg.dir.join("memory.swappiness"), "0")?;
                    }
                }
            }
        }
        Ok(cg)
    }

    pub(crate) fn add(&self, pid: u32) -> Result<(), CgroupError> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    /// OOM kills inside this cgroup.
    pub(crate) fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        counter(
            &std::fs::read_to_string(self.dir.join(file)).ok()?,
            "oom_kill",
        )
    }
}

impl TrialCgroup {
    /// SIGKILLs every process still in the cgroup: what a trial's command started and left
    /// behind (a daemonised child) must not run on into the next trial.
    pub(crate) fn kill_remaining(&self) -> usize {
        kill_members(&self.dir, None)
    }
}

/// The worker's environment variable naming the trial's cgroup directory, so a worker whose
/// parent died can end everything the trial started.
pub(crate) const TRIAL_CGROUP_ENV: &str = "EDGEBENCH_TRIAL_CGROUP";

/// SIGKILLs every process in the cgroup at `dir` but `except`, again until none is left (a
/// process may fork while it is being killed); returns how many distinct processes were
/// killed (one that takes several rounds to exit counts once).
pub(crate) fn kill_members(dir: &Path, except: Option<u32>) -> usize {
    let mut killed = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p: &i32| Some(p as u32) != except)
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill(2) with plain integers; a pid already gone fails harmlessly.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.insert(pid);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed.len()
}

/// The pid of the edgebench process that made a trial or probe cgroup, from its name
/// (`edgebench-<pid>-<trial>`, `edgebench-probe-<pid>`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("edgebench-")?;
    let pid = match rest.strip_prefix("probe-") {
        Some(pid) => pid,
        None => {
            let (pid, trial) = rest.split_once('-')?;
            trial.parse::<u64>().ok()?;
            pid
        }
    };
    pid.parse().ok()
}

/// What [`remove_stale`] cleaned up.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StaleCleanup {
    pub cgroups: usize,
    pub processes: usize,
    /// Stale cgroups that could not be removed, with the reason.
    pub left: Vec<(PathBuf, String)>,
}

/// How long a stale cgroup's killed processes get to leave it. A killed process leaves only
/// once the kernel has run its exit, which on a loaded board (every core busy, memory in swap)
/// takes far longer than on an idle one.
const STALE_REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a trial's own cgroup waits for its killed processes when the trial ends; one that
/// stays busy longer is removed as stale by the next run.
const TRIAL_REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Removes the trial cgroups under `parent` whose edgebench process is gone (killed with
/// -9, or ended by a second Ctrl-C before it could remove them), killing what still runs in
/// them first. A cgroup whose owner lives belongs to another sweep and is left alone.
pub(crate) fn remove_stale(parent: &CgroupParent, paths: &HostPaths) -> StaleCleanup {
    let mut done = StaleCleanup::default();
    let Ok(entries) = std::fs::read_dir(&parent.dir) else {
        return done;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if owner == std::process::id() || paths.proc(&owner.to_string()).exists() {
            continue;
        }
        let dir = entry.path();
        done.processes += kill_members(&dir, None);
        match remove_when_empty(&dir, STALE_REMOVAL_WAIT) {
            Ok(()) => done.cgroups += 1,
            Err(e) => done.left.push((dir, e.to_string())),
        }
    }
    done
}

/// Removes the cgroup directory `dir`, retrying for up to `wait` while it is busy: a killed
/// process is gone from `cgroup.procs` before the kernel has finished its exit, and until then
/// the cgroup cannot be removed.
fn remove_when_empty(dir: &Path, wait: std::time::Duration) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match std::fs::remove_dir(dir) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl Drop for TrialCgroup {
    fn drop(&mut self) {
        // Fails only while a process is still inside; then the directory is left, and the next
        // run removes it as stale.
        let _ = remove_when_empty(&self.dir, TRIAL_REMOVAL_WAIT);
    }
}

/// Proves before the run that a cgroup can be made here (creates and removes a probe).
pub fn check(paths: &HostPaths, limit: u64) -> Result<CgroupParent, CgroupError> {
    let parent = locate(paths)?;
    let probe = TrialCgroup::create(
        &parent,
        &format!("edgebench-probe-{}", std::process::id()),
        Some(limit),
        None,
    )?;
    drop(probe);
    Ok(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_from_proc_self_cgroup() {
        let text = "9:name=systemd:/\n4:cpu,memory:/process_api/abc\n0::/user.slice/x.scope\n";
        assert_eq!(
            own_cgroup_path(text, Version::V1).as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(
            own_cgroup_path(text, Version::V2).as_deref(),
            Some("/user.slice/x.scope")
        );
    }

    fn tree(v2: bool) -> (tempfile::TempDir, HostPaths) {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        let proc_ = dir.path().join("proc");
        std::fs::create_dir_all(proc_.join("self")).unwrap();
        if v2 {
            std::fs::create_dir_all(sys.join("fs/cgroup/user.slice")).unwrap();
            std::fs::write(
                sys.join("fs/cgroup/cgroup.controllers"),
                "cpu io memory pids\n",
            )
            .unwrap();
            std::fs::write(sys.join("fs/cgroup/user.slice/cgroup.subtree_control"), "").unwrap();
            std::fs::write(proc_.join("self/cgroup"), "0::/user.slice\n").unwrap();
        } else {
            std::fs::create_dir_all(sys.join("fs/cgroup/memory/jobs")).unwrap();
            std::fs::write(proc_.join("self/cgroup"), "4:memory:/jobs\n0::/\n").unwrap();
        }
        let paths = HostPaths {
            sysfs: sys,
            procfs: proc_,
            rootfs: "/".into(),
        };
        (dir, paths)
    }

    // A plain directory tree stands in for cgroupfs: the files edgebench writes are checked.
    #[test]
    fn v2_limits_and_oom_counter() {
        let (_d, paths) = tree(true);
        let parent = locate(&paths).unwrap();
        assert_eq!(parent.version, Version::V2);
        assert!(parent.dir.ends_with("fs/cgroup/user.slice"));
        let cg = TrialCgroup::create(&parent, "t1", Some(1 << 30), Some(0)).unwrap();
        assert_eq!(
            std::fs::read_to_string(cg.dir.join("memory.max")).unwrap(),
            "1073741824"
        );
        assert_eq!(
            std::fs::read_to_string(cg.dir.join("memory.swap.max")).unwrap(),
            "0"
        );
        assert_eq!(
            std::fs::read_to_string(parent.dir.join("cgroup.subtree_control")).unwrap(),
            "+memory"
        );
        std::fs::write(
            cg.dir.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(1));
    }

    #[test]
    fn v1_limits_and_oom_counter() {
        let (_d, paths) = tree(false);
        let parent = locate(&paths).unwrap();
        assert_eq!(parent.version, Version::V1);
        assert!(parent.dir.ends_with("fs/cgroup/memory/jobs"));
        let cg = TrialCgroup::create(&parent, "t2", Some(100), Some(50)).unwrap();
        assert_eq!(
            std::fs::read_to_string(cg.dir.join("memory.limit_in_bytes")).unwrap(),
            "100"
        );
        std::fs::write(
            cg.dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(2));
    }

    #[test]
    fn stale_cgroups_are_named_by_their_owner() {
        assert_eq!(owner_pid("edgebench-4242-17"), Some(4242));
        assert_eq!(owner_pid("edgebench-probe-99"), Some(99));
        for other in [
            "edgebench-x-1",
            "edgebench-12",
            "user.slice",
            "edgebench-12-a",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
    }

    #[test]
    fn only_cgroups_of_gone_owners_are_removed() {
        let (_d, paths) = tree(true);
        let parent = locate(&paths).unwrap();
        let mine = std::process::id();
        // A pid that the procfs tree does not list is a gone owner.
        std::fs::create_dir_all(paths.proc(&mine.to_string())).unwrap();
        std::fs::create_dir_all(paths.proc("8")).unwrap();
        for name in [
            "edgebench-7-1",
            "edgebench-probe-7",
            "edgebench-8-2",
            "other",
        ] {
            std::fs::create_dir(parent.dir.join(name)).unwrap();
        }
        let live = format!("edgebench-{mine}-3");
        std::fs::create_dir(parent.dir.join(&live)).unwrap();
        let done = remove_stale(&parent, &paths);
        assert_eq!(
            done,
            StaleCleanup {
                cgroups: 2,
                processes: 0,
                left: Vec::new(),
            }
        );
        assert!(!parent.dir.join("edgebench-7-1").exists());
        assert!(!parent.dir.join("edgebench-probe-7").exists());
        assert!(parent.dir.join("other").exists());
        assert!(
            parent.dir.join("edgebench-8-2").exists(),
            "its owner, pid 8, lives"
        );
        assert!(parent.dir.join(live).exists());
    }

    // On the host's real cgroupfs: a plain directory is never busy.
    #[test]
    fn a_busy_cgroup_is_waited_for_and_removed_once_its_killed_member_has_exited() {
        use std::time::{Duration, Instant};
        let parent = locate(&HostPaths::default())
            .expect("this test needs a writable memory cgroup: run it as root, as .ci/run does");
        let cgroup = TrialCgroup::create(
            &parent,
            &format!("edgebench-test-busy-{}", std::process::id()),
            None,
            None,
        )
        .unwrap();
        let mut member = std::process::Command::new("sleep")
            .arg("317")
            .spawn()
            .unwrap();
        cgroup.add(member.id()).unwrap();

        let start = Instant::now();
        let busy = remove_when_empty(&cgroup.dir, Duration::from_millis(300)).unwrap_err();
        assert_eq!(busy.raw_os_error(), Some(libc::EBUSY), "{busy}");
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(cgroup.dir.exists());

        assert_eq!(cgroup.kill_remaining(), 1);
        remove_when_empty(&cgroup.dir, Duration::from_secs(15)).unwrap();
        assert!(!cgroup.dir.exists());
        assert!(
            member.wait().unwrap().code().is_none(),
            "killed by a signal"
        );
    }

    #[test]
    fn no_memory_controller_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::testkit::jetson::host_under(dir.path());
        std::fs::create_dir_all(paths.proc("self")).unwrap();
        std::fs::write(paths.proc("self/cgroup"), "0::/\n").unwrap();
        let err = locate(&paths).unwrap_err().to_string();
        assert!(
            err.contains("--mem-limit") && err.contains("memory controller"),
            "{err}"
        );
    }
}
