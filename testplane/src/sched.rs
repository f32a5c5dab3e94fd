//! What the benches read from /proc: CPU to charge to one thread or process, and its memory.

/// (CPU nanoseconds, times scheduled in) from the text of a `/proc/…/schedstat` file
/// (`run_ns wait_ns timeslices`); zeros when it cannot be read.
pub fn schedstat(text: &str) -> (u64, u64) {
    let mut f = text.split_whitespace().map(|v| v.parse().unwrap_or(0));
    let run = f.next().unwrap_or(0);
    let slices = f.nth(1).unwrap_or(0);
    (run, slices)
}

/// A `/proc/PID/status` field in KiB (`VmRSS:`, `VmHWM:`); `None` once the process is gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_run_time_and_timeslices() {
        assert_eq!(super::schedstat("1200 34 5\n"), (1200, 5));
        assert_eq!(super::schedstat(""), (0, 0));
    }
}
