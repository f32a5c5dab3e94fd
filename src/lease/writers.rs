//! After another writer of the Lease has been seen, bootlet no longer writes it: it only
//! reads it now and then to tell whether that writer still renews it. This is the
//! bookkeeping of those reads (pure; time comes in as arguments). A writer that stops is
//! what a dead kubelet looks like, so noticing it never by itself makes bootlet write
//! again: only the loop may, and only while the health probe answers (lease.rs).

use std::time::Duration;

use tokio::time::Instant;

/// What the reads of a Lease someone else renews have shown.
#[derive(Debug)]
pub(super) struct Bystander {
    /// The version last read (`None`: the Lease was gone) and since when it is unchanged.
    seen: Option<(Option<String>, Instant)>,
    /// "Stopped" was reported and nothing has changed since.
    stopped: bool,
    next_read: Instant,
    every: Duration,
}

/// What one read says about the other writer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It still renews the Lease (or one read is not enough to tell).
    Renewing,
    /// It renews again after it was found stopped.
    Resumed,
    /// The Lease has not changed (or stayed gone) for `idle`, over half the duration the
    /// writer declared: it missed two renewals at least. `first` is true the first time.
    Stopped { idle: Duration, first: bool },
}

// === impl Bystander ===

impl Bystander {
    /// Another writer was just seen at `now`; the Lease is read every `every` from now on.
    pub(super) fn new(now: Instant, every: Duration) -> Self {
        Self {
            seen: None,
            stopped: false,
            next_read: now + every,
            every,
        }
    }

    /// Whether a read is due at `now`.
    pub(super) fn read_due(&self, now: Instant) -> bool {
        now >= self.next_read
    }

    /// A read at `now` failed: the next one waits the usual time.
    pub(super) fn read_failed(&mut self, now: Instant) {
        self.next_read = now + self.every;
    }

    /// A read at `now` found the Lease at `version` (`None`: gone), declaring `declared`
    /// as its duration.
    pub(super) fn observe(
        &mut self,
        now: Instant,
        version: Option<&str>,
        declared: Duration,
    ) -> Verdict {
        self.next_read = now + self.every;
        let version = version.map(str::to_string);
        match &self.seen {
            Some((seen, since)) if *seen == version => {
                let idle = now.saturating_duration_since(*since);
                if idle >= (declared / 2).max(self.every) {
                    let first = !self.stopped;
                    self.stopped = true;
                    Verdict::Stopped { idle, first }
                } else {
                    Verdict::Renewing
                }
            }
            _ => {
                self.seen = Some((version, now));
                if std::mem::take(&mut self.stopped) {
                    Verdict::Resumed
                } else {
                    Verdict::Renewing
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_lease_unchanged_for_half_its_duration_is_stopped_reported_once() {
        let t0 = Instant::now();
        let mut b = Bystander::new(t0, 20 * S);
        assert!(!b.read_due(t0));
        assert!(b.read_due(t0 + 20 * S));
        let forty = 40 * S;
        // Renewed between every read.
        assert_eq!(b.observe(t0 + 20 * S, Some("5"), forty), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 40 * S, Some("9"), forty), Verdict::Renewing);
        // Unchanged over one read 20 s apart: half of 40 s, two of a kubelet's renewals.
        assert_eq!(
            b.observe(t0 + 60 * S, Some("9"), forty),
            Verdict::Stopped {
                idle: 20 * S,
                first: true
            }
        );
        assert_eq!(
            b.observe(t0 + 80 * S, Some("9"), forty),
            Verdict::Stopped {
                idle: 40 * S,
                first: false
            }
        );
        // It comes back, then stops again: reported again.
        assert_eq!(b.observe(t0 + 100 * S, Some("12"), forty), Verdict::Resumed);
        assert_eq!(
            b.observe(t0 + 120 * S, Some("13"), forty),
            Verdict::Renewing
        );
        assert!(matches!(
            b.observe(t0 + 140 * S, Some("13"), forty),
            Verdict::Stopped { first: true, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_with_a_longer_duration_gets_longer_and_a_gone_lease_is_a_version() {
        let t0 = Instant::now();
        let mut b = Bystander::new(t0, S);
        // It declared 10 s: unchanged for 4 s is not yet stopped, 5 s is.
        let ten = 10 * S;
        assert_eq!(b.observe(t0 + S, Some("3"), ten), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 5 * S, Some("3"), ten), Verdict::Renewing);
        assert!(matches!(
            b.observe(t0 + 6 * S, Some("3"), ten),
            Verdict::Stopped { first: true, .. }
        ));
        // Deleted (by the garbage collector, by hand): a change, then stopped if it stays so.
        let mut b = Bystander::new(t0, S);
        assert_eq!(b.observe(t0 + S, Some("3"), 2 * S), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 2 * S, None, 2 * S), Verdict::Renewing);
        assert!(matches!(
            b.observe(t0 + 3 * S, None, 2 * S),
            Verdict::Stopped { first: true, .. }
        ));
        b.read_failed(t0 + 4 * S);
        assert!(!b.read_due(t0 + 4 * S));
        assert!(b.read_due(t0 + 5 * S));
    }
}
