//! How much CPU a thread had, from its `/proc/…/schedstat`: for tests that charge CPU to
//! the agent (tests/local/faults.rs) and the benches (bench/src/procfs.rs, which owns the rest of
//! what they read from /proc).

/// (CPU nanoseconds, times scheduled in) from the text of a `/proc/…/schedstat` file
/// (`run_ns wait_ns timeslices`); zeros when it cannot be read.
pub fn schedstat(text: &str) -> (u64, u64) {
    let mut f = text.split_whitespace().map(|v| v.parse().unwrap_or(0));
    let run = f.next().unwrap_or(0);
    let slices = f.nth(1).unwrap_or(0);
    (run, slices)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_run_time_and_timeslices() {
        assert_eq!(super::schedstat("1200 34 5\n"), (1200, 5));
        assert_eq!(super::schedstat(""), (0, 0));
    }
}
