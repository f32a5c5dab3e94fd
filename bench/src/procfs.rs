//! What the drivers read from /proc: a process's CPU over its live threads or over every
//! thread it ever had (threads that exit keep their time), a shell's CPU with its reaped
//! children and child pids, memory fields of a process and of the machine, the load
//! average; and the peak RSS GNU time wrote for a shell.
//! Reading only; no process is touched here.

use std::collections::HashMap;

/// Linux reports /proc/PID/stat times in USER_HZ ticks, 100 per second on every
/// architecture's user ABI.
const NS_PER_TICK: u64 = 10_000_000;

/// CPU nanoseconds and wake-ups (times scheduled in) summed over a process's threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    pub ns: u64,
    pub wakeups: u64,
}

/// Per-thread CPU of one process from /proc/PID/task/*/schedstat (nanoseconds), remembered
/// across refreshes so a thread that exits (a blocking-pool thread after its idle timeout)
/// does not take its time with it. Refresh often (the suite does every second): only what a
/// thread ran between its last refresh and its exit is lost.
#[derive(Debug)]
pub struct ThreadLedger {
    pid: u32,
    threads: HashMap<u32, Cpu>,
    /// Time of threads whose id came back with less time on it (an id reused).
    retired: Cpu,
}

impl ThreadLedger {
    pub fn new(pid: u32) -> Self {
        ThreadLedger {
            pid,
            threads: HashMap::new(),
            retired: Cpu::default(),
        }
    }

    /// Reads every live thread and returns the total over all threads ever seen.
    pub fn refresh(&mut self) -> Cpu {
        for (tid, cpu) in threads(self.pid) {
            self.record(tid, cpu);
        }
        self.total()
    }

    fn record(&mut self, tid: u32, now: Cpu) {
        let seen = self.threads.entry(tid).or_default();
        if now.ns < seen.ns {
            self.retired.ns += seen.ns;
            self.retired.wakeups += seen.wakeups;
        }
        *seen = now;
    }

    fn total(&self) -> Cpu {
        self.threads.values().fold(self.retired, |a, c| Cpu {
            ns: a.ns + c.ns,
            wakeups: a.wakeups + c.wakeups,
        })
    }
}

/// The CPU of each live thread of `pid` (thread id, its time), from
/// /proc/PID/task/*/schedstat; empty once the process is gone.
pub fn threads(pid: u32) -> Vec<(u32, Cpu)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            let (ns, wakeups) = testplane::sched::schedstat(&text);
            Some((tid, Cpu { ns, wakeups }))
        })
        .collect()
}

/// The CPU of `pid`'s live threads, summed: what a thread that has exited ran is not in
/// it (`ThreadLedger` keeps that).
pub fn live_threads(pid: u32) -> Cpu {
    threads(pid)
        .into_iter()
        .fold(Cpu::default(), |a, (_, c)| Cpu {
            ns: a.ns + c.ns,
            wakeups: a.wakeups + c.wakeups,
        })
}

/// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`, `RssAnon:`); `None` once the
/// process is gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&status, field)
}

/// MemAvailable from /proc/meminfo, in KiB (0 when unreadable).
pub fn mem_available_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    kib_field(&meminfo, "MemAvailable:").unwrap_or(0)
}

/// The value of the `field` line (`Name:   1234 kB`) of a /proc status-like text, in KiB.
fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// utime + stime + cutime + cstime of `pid` in nanoseconds (tick resolution, 10 ms): a
/// shell's own CPU plus every child it has waited for. `None` once the process is gone.
pub fn with_reaped_children_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_ticks(&stat).map(|t| t * NS_PER_TICK)
}

/// The four time fields (14–17) of a /proc/PID/stat line, summed, in ticks. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted from its last `)`.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field N is fields[N - 3].
    let sum = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some(sum)
}

/// The children of `pid`'s main thread.
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The 1-, 5- and 15-minute load averages, as /proc/loadavg prints them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// GNU time's `-f %M` output: the last line is the peak RSS in KiB (a line before it says
/// "Command terminated by signal 15" when the shell was ended).
pub fn read_maxrss(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_counted_after_the_command_name() {
        let line = "42 (b a) s) S 1 42 42 0 -1 4194560 100 200 0 0 7 3 11 5 20 0 1 0 99 1 2";
        assert_eq!(stat_ticks(line), Some(7 + 3 + 11 + 5));
        assert_eq!(stat_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn an_exited_thread_keeps_its_time_and_a_reused_id_adds_to_it() {
        let mut l = ThreadLedger::new(0);
        l.record(1, Cpu { ns: 10, wakeups: 1 });
        l.record(2, Cpu { ns: 5, wakeups: 2 });
        l.record(2, Cpu { ns: 7, wakeups: 3 });
        assert_eq!(l.total(), Cpu { ns: 17, wakeups: 4 });
        // Thread 1 exited (no longer read) and its id came back for a new thread.
        l.record(1, Cpu { ns: 2, wakeups: 1 });
        assert_eq!(l.total(), Cpu { ns: 19, wakeups: 5 });
    }

    #[test]
    fn kib_fields_by_name() {
        let text = "Name:\tx\nVmHWM:\t   9216 kB\nVmRSS:\t   8192 kB\n";
        assert_eq!(kib_field(text, "VmRSS:"), Some(8192));
        assert_eq!(kib_field(text, "VmHWM:"), Some(9216));
        assert_eq!(kib_field(text, "RssAnon:"), None);
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(status_kib(pid, "VmRSS:").is_some_and(|k| k > 0));
        assert!(ThreadLedger::new(pid).refresh().ns > 0);
        assert!(live_threads(pid).ns > 0);
        assert!(with_reaped_children_ns(pid).is_some());
        assert!(mem_available_kib() > 0);
    }
}
