//! Parsers for the procfs files the memory sampler reads, each a pure function of the text so
//! fixtures test them exactly, plus thin readers through the configurable procfs root.

use crate::host::HostPaths;

/// /proc/meminfo values, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub mem_total: u64,
    pub mem_available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

/// The /proc/vmstat counters that tell about swapping and the OOM killer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmStat {
    pub pswpin: u64,
    pub pswpout: u64,
    pub pgmajfault: u64,
    /// Absent before Linux 4.13; treated as 0.
    pub oom_kill: u64,
}

/// One line of /proc/swaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapDevice {
    pub name: String,
    /// `partition` or `file` as the kernel says; zram devices are partitions named /dev/zramN.
    pub kind: String,
    pub size_bytes: u64,
    pub used_bytes: u64,
    pub zram: bool,
}

/// A process's memory from /proc/<pid>/status and /proc/<pid>/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcMemory {
    pub rss_bytes: u64,
    /// Peak resident set ("high water mark").
    pub hwm_bytes: u64,
    /// The process's own pages now in swap.
    pub swap_bytes: u64,
    /// Major page faults of the process (stat field 12).
    pub major_faults: u64,
    /// Major page faults of its children that it has waited for (stat field 13).
    pub reaped_major_faults: u64,
}

impl ProcMemory {
    /// The memory of a process tree: resident and swapped pages summed; the peak is the larger
    /// of that sum and any one process's own peak (a lower bound: the processes' peaks need not
    /// coincide); faults include those of reaped children, so the count never drops when a
    /// child exits.
    pub fn tree(processes: &[ProcMemory]) -> Option<ProcMemory> {
        let (first, _) = processes.split_first()?;
        let rss: u64 = processes.iter().map(|p| p.rss_bytes).sum();
        Some(ProcMemory {
            rss_bytes: rss,
            hwm_bytes: processes
                .iter()
                .map(|p| p.hwm_bytes)
                .max()
                .unwrap_or(0)
                .max(rss),
            swap_bytes: processes.iter().map(|p| p.swap_bytes).sum(),
            major_faults: processes
                .iter()
                .map(|p| p.major_faults + p.reaped_major_faults)
                .sum(),
            reaped_major_faults: first.reaped_major_faults,
        })
    }
}

/// The parent pid from /proc/<pid>/stat (field 4).
pub(crate) fn parse_ppid(stat: &str) -> Option<u32> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The process group id from /proc/<pid>/stat (field 5).
pub(crate) fn parse_pgid(stat: &str) -> Option<u32> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// /proc/pressure/memory totals (microseconds stalled), absent on Jetson L4T kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Psi {
    pub some_total_us: u64,
    pub full_total_us: u64,
}

fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.split_whitespace().next()?.parse::<u64>().ok())?
    })
}

pub(crate) fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let kb = |key| kb_field(text, key).map(|v| v * 1024);
    Some(MemInfo {
        mem_total: kb("MemTotal")?,
        // MemAvailable exists since 3.14; older kernels: free + cached is the usual stand-in.
        mem_available: kb("MemAvailable")
            .or_else(|| Some(kb("MemFree")? + kb("Cached").unwrap_or(0)))?,
        swap_total: kb("SwapTotal").unwrap_or(0),
        swap_free: kb("SwapFree").unwrap_or(0),
    })
}

pub(crate) fn parse_vmstat(text: &str) -> VmStat {
    let mut v = VmStat::default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(Ok(value))) = (parts.next(), parts.next().map(str::parse::<u64>))
        else {
            continue;
        };
        match key {
            "pswpin" => v.pswpin = value,
            "pswpout" => v.pswpout = value,
            "pgmajfault" => v.pgmajfault = value,
            "oom_kill" => v.oom_kill = value,
            _ => {}
        }
    }
    v
}

pub(crate) fn parse_swaps(text: &str) -> Vec<SwapDevice> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 {
                return None;
            }
            let name = f[0].to_string();
            Some(SwapDevice {
                zram: name.contains("/zram"),
                kind: f[1].to_string(),
                size_bytes: f[2].parse::<u64>().ok()? * 1024,
                used_bytes: f[3].parse::<u64>().ok()? * 1024,
                name,
            })
        })
        .collect()
}

/// Parses /proc/<pid>/status (VmRSS, VmHWM, VmSwap) and /proc/<pid>/stat (majflt).
pub(crate) fn parse_proc_memory(status: &str, stat: &str) -> Option<ProcMemory> {
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 on; majflt is field 12, so index 9 here.
    let mut fields = after_comm.split_whitespace().skip(9);
    let major_faults = fields.next()?.parse().ok()?;
    let reaped_major_faults = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
    Some(ProcMemory {
        rss_bytes: kb_field(status, "VmRSS").unwrap_or(0) * 1024,
        hwm_bytes: kb_field(status, "VmHWM").unwrap_or(0) * 1024,
        swap_bytes: kb_field(status, "VmSwap").unwrap_or(0) * 1024,
        major_faults,
        reaped_major_faults,
    })
}

pub(crate) fn parse_psi(text: &str) -> Option<Psi> {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse::<u64>()
            .ok()
    };
    Some(Psi {
        some_total_us: total("some")?,
        full_total_us: total("full").unwrap_or(0),
    })
}

/// Processes a tree is summed over at most (a fork bomb must not stall the sampler).
const MAX_TREE: usize = 4096;

/// Reads through the procfs root; a missing file is `None`, never an error: not every kernel
/// has every file (PSI is off on Jetson kernels).
pub struct ProcReader {
    paths: HostPaths,
}

impl ProcReader {
    pub fn new(paths: &HostPaths) -> ProcReader {
        ProcReader {
            paths: paths.clone(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.paths.proc(rel)).ok()
    }

    pub fn meminfo(&self) -> Option<MemInfo> {
        parse_meminfo(&self.read("meminfo")?)
    }

    pub fn vmstat(&self) -> Option<VmStat> {
        self.read("vmstat").map(|t| parse_vmstat(&t))
    }

    pub fn swaps(&self) -> Vec<SwapDevice> {
        self.read("swaps")
            .map(|t| parse_swaps(&t))
            .unwrap_or_default()
    }

    pub fn process(&self, pid: u32) -> Option<ProcMemory> {
        parse_proc_memory(
            &self.read(&format!("{pid}/status"))?,
            &self.read(&format!("{pid}/stat"))?,
        )
    }

    /// `pid` and every process below it, summed ([`ProcMemory::tree`]); None once `pid` is
    /// gone. A process that left the tree (reparented to init) is no longer counted.
    pub(crate) fn process_tree(&self, pid: u32) -> Option<ProcMemory> {
        let root = self.process(pid)?;
        let mut members = vec![root];
        members.extend(
            self.tree_pids(pid)
                .into_iter()
                .skip(1)
                .filter_map(|child| self.process(child)),
        );
        ProcMemory::tree(&members)
    }

    /// `pid` first, then every process below it (at most [`MAX_TREE`]).
    pub(crate) fn tree_pids(&self, pid: u32) -> Vec<u32> {
        // Without CONFIG_PROC_CHILDREN, every process's parent is read instead.
        let all = match self
            .paths
            .proc(&format!("{pid}/task/{pid}/children"))
            .exists()
        {
            true => None,
            false => Some(self.parents()),
        };
        let mut members = vec![pid];
        let mut queue = vec![pid];
        while let Some(parent) = queue.pop() {
            let children = match &all {
                Some(all) => all
                    .iter()
                    .filter(|(_, p)| *p == parent)
                    .map(|(c, _)| *c)
                    .collect(),
                None => self.children_of(parent),
            };
            for child in children {
                if members.len() >= MAX_TREE {
                    break;
                }
                members.push(child);
                queue.push(child);
            }
        }
        members
    }

    /// The process group of `pid`; None once it is gone.
    pub fn process_group(&self, pid: u32) -> Option<u32> {
        parse_pgid(&self.read(&format!("{pid}/stat"))?)
    }

    /// The children of every thread of `pid` (/proc/<pid>/task/<tid>/children).
    fn children_of(&self, pid: u32) -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(self.paths.proc(&format!("{pid}/task"))) else {
            return Vec::new();
        };
        tasks
            .filter_map(|t| {
                let tid = t.ok()?.file_name().into_string().ok()?;
                self.read(&format!("{pid}/task/{tid}/children"))
            })
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|c| c.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }

    /// (pid, parent pid) of every process.
    fn parents(&self) -> Vec<(u32, u32)> {
        let Ok(dir) = std::fs::read_dir(self.paths.proc("")) else {
            return Vec::new();
        };
        dir.filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            Some((pid, parse_ppid(&self.read(&format!("{pid}/stat"))?)?))
        })
        .collect()
    }

    pub fn psi(&self) -> Option<Psi> {
        parse_psi(&self.read("pressure/memory")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:        4059284 kB\nMemFree:          211340 kB\n\
        MemAvailable:    1520900 kB\nBuffers:           40000 kB\nCached:          1200000 kB\n\
        SwapCached:        12000 kB\nSwapTotal:       2029632 kB\nSwapFree:        1900000 kB\n";

    #[test]
    fn meminfo_in_bytes() {
        let m = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(m.mem_total, 4_059_284 * 1024);
        assert_eq!(m.mem_available, 1_520_900 * 1024);
        assert_eq!(
            (m.swap_total, m.swap_free),
            (2_029_632 * 1024, 1_900_000 * 1024)
        );
        // 3.10 kernels (L4T 28) have no MemAvailable
        let old = "MemTotal: 100 kB\nMemFree: 10 kB\nCached: 5 kB\n";
        assert_eq!(parse_meminfo(old).unwrap().mem_available, 15 * 1024);
        assert_eq!(parse_meminfo("garbage"), None);
    }

    #[test]
    fn vmstat_counters() {
        let v = parse_vmstat(
            "nr_free_pages 1000\npswpin 17\npswpout 230\npgmajfault 999\noom_kill 2\n",
        );
        assert_eq!(
            v,
            VmStat {
                pswpin: 17,
                pswpout: 230,
                pgmajfault: 999,
                oom_kill: 2
            }
        );
        assert_eq!(parse_vmstat("pswpin 1\n").oom_kill, 0);
    }

    #[test]
    fn swaps_zram_and_file() {
        let text = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
            /dev/zram0                              partition\t507416\t\t1024\t\t5\n\
            /swapfile                               file\t\t2097148\t\t0\t\t-2\n";
        let s = parse_swaps(text);
        assert_eq!(s.len(), 2);
        assert!(s[0].zram && s[0].kind == "partition" && s[0].used_bytes == 1024 * 1024);
        assert!(!s[1].zram && s[1].kind == "file" && s[1].size_bytes == 2_097_148 * 1024);
        assert!(parse_swaps("Filename Type Size Used Priority\n").is_empty());
    }

    #[test]
    fn process_memory_with_a_hostile_command_name() {
        let status = "Name:\tedgebench\nVmHWM:\t 2000 kB\nVmRSS:\t 1500 kB\nVmSwap:\t  300 kB\n";
        let stat = "4242 (edge bench) (x)) R 1 4242 4242 0 -1 4194304 5000 0 77 0 10 5 0 0 20 0";
        let p = parse_proc_memory(status, stat).unwrap();
        assert_eq!((p.major_faults, p.reaped_major_faults), (77, 0));
        assert_eq!(
            (p.rss_bytes, p.hwm_bytes, p.swap_bytes),
            (1_536_000, 2_048_000, 307_200)
        );
    }

    /// A prepared procfs with `pid -> (ppid, rss kB, hwm kB, majflt, cmajflt)`, with or without
    /// the per-thread `children` files.
    fn procfs(procs: &[(u32, u32, u64, u64, u64, u64)], children_files: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for &(pid, ppid, rss, hwm, majflt, cmajflt) in procs {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(d.join(format!("task/{pid}"))).unwrap();
            std::fs::write(
                d.join("status"),
                format!("VmHWM:\t{hwm} kB\nVmRSS:\t{rss} kB\nVmSwap:\t0 kB\n"),
            )
            .unwrap();
            std::fs::write(
                d.join("stat"),
                format!("{pid} (p {pid}) S {ppid} 1 1 0 -1 0 10 0 {majflt} {cmajflt} 1 1 0 0 20 0"),
            )
            .unwrap();
            if children_files {
                let kids: Vec<String> = procs
                    .iter()
                    .filter(|p| p.1 == pid)
                    .map(|p| p.0.to_string())
                    .collect();
                std::fs::write(d.join(format!("task/{pid}/children")), kids.join(" ")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn a_process_tree_sums_its_members_and_leaves_out_others() {
        // 10 -> 11 -> 12, and 13 under init: not part of 10's tree.
        let procs = [
            (10, 1, 1000, 1200, 1, 5),
            (11, 10, 2000, 2000, 2, 0),
            (12, 11, 30_000, 50_000, 4, 0),
            (13, 1, 90_000, 90_000, 100, 0),
        ];
        for children_files in [true, false] {
            let dir = procfs(&procs, children_files);
            let reader = ProcReader::new(&HostPaths {
                procfs: dir.path().to_path_buf(),
                ..HostPaths::default()
            });
            let t = reader.process_tree(10).unwrap();
            assert_eq!(
                t.rss_bytes,
                33_000 * 1024,
                "children files: {children_files}"
            );
            // The grandchild's own peak is above the summed resident set.
            assert_eq!(t.hwm_bytes, 50_000 * 1024);
            assert_eq!(t.major_faults, 1 + 5 + 2 + 4);
            assert_eq!(reader.process(10).unwrap().rss_bytes, 1000 * 1024);
            assert!(reader.process_tree(99).is_none());
        }
    }

    #[test]
    fn parent_pid_after_a_hostile_command_name() {
        assert_eq!(parse_ppid("4242 (a) b) (c) S 17 4242 4242"), Some(17));
        assert_eq!(parse_ppid("garbage"), None);
        assert_eq!(parse_pgid("4242 (a) b) (c) S 17 4240 4242"), Some(4240));
    }

    #[test]
    fn psi_totals() {
        let text = "some avg10=0.00 avg60=0.10 avg300=0.05 total=123456\n\
            full avg10=0.00 avg60=0.00 avg300=0.00 total=6543\n";
        assert_eq!(
            parse_psi(text),
            Some(Psi {
                some_total_us: 123_456,
                full_total_us: 6543
            })
        );
        assert_eq!(parse_psi(""), None);
    }

    #[test]
    fn reader_uses_the_procfs_root_and_tolerates_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("meminfo"), MEMINFO).unwrap();
        let r = ProcReader::new(&HostPaths {
            sysfs: dir.path().join("sys"),
            procfs: dir.path().to_path_buf(),
            rootfs: dir.path().to_path_buf(),
        });
        assert_eq!(r.meminfo().unwrap().mem_total, 4_059_284 * 1024);
        assert_eq!(r.psi(), None); // no PSI, as on L4T
        assert_eq!(r.vmstat(), None);
        assert!(r.swaps().is_empty());
        assert_eq!(r.process(1), None);
    }
}
