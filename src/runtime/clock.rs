//! The wall clock the certificate loops read (rotation deadlines, expiry): the system
//! clock, which tests can step without root — this crate's unit tests per thread, and,
//! only in a build with the `test-hooks` feature, the binary through the hidden
//! `--test-clock-offset-file`. Retry delays and heartbeats are monotonic (tokio's clock)
//! and never read this.

use std::time::{Duration, SystemTime};

/// The wall clock: `SystemTime::now()`, shifted only under the test switches.
#[allow(clippy::disallowed_methods)] // the one place that reads it
pub fn now() -> SystemTime {
    shifted(SystemTime::now(), offset_secs())
}

fn offset_secs() -> i64 {
    if let Some(secs) = tests_offset() {
        return secs;
    }
    file::offset()
}

#[cfg(not(feature = "test-hooks"))]
mod file {
    /// No offset file in a shipped build.
    pub(super) fn offset() -> i64 {
        0
    }
}

/// The offset file (`--test-clock-offset-file`): set once per process, by the test hooks
/// at start; a process-wide setting, as the clock it shifts is.
#[cfg(feature = "test-hooks")]
mod file {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    static OFFSET_FILE: OnceLock<PathBuf> = OnceLock::new();

    /// From now on [`super::now`] is the system clock plus the signed whole seconds
    /// written in `path` (`3600`, `-60`), read again at every reading, so a test steps the
    /// agent's clock by rewriting the file. A missing or unparsable file counts as 0.
    pub fn offset_by_file(path: PathBuf) {
        let _ = OFFSET_FILE.set(path);
    }

    pub(super) fn offset() -> i64 {
        OFFSET_FILE.get().map_or(0, |path| file_offset(path))
    }

    /// The signed whole seconds in `path`; 0 when it is missing or holds anything else.
    pub(super) fn file_offset(path: &Path) -> i64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(feature = "test-hooks")]
pub use file::offset_by_file;

/// `t` moved by `secs` (either way), or `t` itself where that leaves `SystemTime`'s range.
fn shifted(t: SystemTime, secs: i64) -> SystemTime {
    let by = Duration::from_secs(secs.unsigned_abs());
    let moved = if secs >= 0 {
        t.checked_add(by)
    } else {
        t.checked_sub(by)
    };
    moved.unwrap_or(t)
}

#[cfg(not(test))]
fn tests_offset() -> Option<i64> {
    None
}

#[cfg(test)]
fn tests_offset() -> Option<i64> {
    TEST_OFFSET.with(std::cell::Cell::get)
}

#[cfg(test)]
thread_local! {
    static TEST_OFFSET: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// Unit tests: step this thread's wall clock by `secs` from the system clock (a
/// current-thread runtime runs every task of a test on its thread); `0` undoes it.
#[cfg(test)]
pub fn step_for_tests(secs: i64) {
    TEST_OFFSET.with(|c| c.set(Some(secs)));
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the shifted clock against the system one
mod tests {
    use super::*;

    #[test]
    fn the_offset_steps_the_clock_both_ways_and_zero_undoes_it() {
        let hour = Duration::from_secs(3600);
        step_for_tests(3600);
        let ahead = now().duration_since(SystemTime::now()).unwrap();
        assert!(
            ahead > hour - Duration::from_secs(5) && ahead <= hour,
            "{ahead:?}"
        );
        step_for_tests(-3600);
        let behind = SystemTime::now().duration_since(now()).unwrap();
        assert!(behind >= hour - Duration::from_secs(5), "{behind:?}");
        step_for_tests(0);
        let off = now()
            .duration_since(SystemTime::now())
            .unwrap_or_else(|e| e.duration());
        assert!(off < Duration::from_secs(5), "{off:?}");
        let t = SystemTime::now();
        assert_eq!(shifted(t, i64::MAX), t, "out of range: unshifted");
    }

    #[cfg(feature = "test-hooks")]
    #[test]
    fn a_file_offset_is_read_at_every_reading() {
        use super::file::file_offset;
        // Not armed here: the switch is process-wide, and other tests read the clock.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offset");
        assert_eq!(file_offset(&path), 0, "missing file: no offset");
        std::fs::write(&path, "7200\n").unwrap();
        assert_eq!(file_offset(&path), 7200);
        std::fs::write(&path, "-30").unwrap();
        assert_eq!(file_offset(&path), -30);
        std::fs::write(&path, "soon").unwrap();
        assert_eq!(file_offset(&path), 0);
    }
}
