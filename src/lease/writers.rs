//! After another writer of the Lease has been seen, bootlet no longer writes it: it only
//! reads it now and then to tell whether that writer still renews it. This is the
//! bookkeeping of those reads (pure; time comes in as arguments). A writer that stops is
//! what a dead kubelet looks like, so noticing it never by itself makes bootlet write
//! again: only the loop may, and only while the health probe answers (lease.rs).

use std::time::Duration;

use tokio::time::Instant;

use super::body::is_marked;

/// Whether a renewTime `found` in the Lease is one bootlet wrote (pure), `sent` being the
/// newest this process sent (`None` before its first write).
///
/// Every renewTime bootlet writes carries its mark (`body::MARK_MICROS`), and a process
/// only ever writes later ones (`next_renew_time`). So a marked renewTime no newer than the
/// newest sent is ours, however it came back: a write answered or not (a reset, an
/// abandoned exchange), or one from long ago that an etcd (or `kube-node-lease` backup)
/// restore put back. That needs no memory of the past, so it survives restarts too: before
/// the first write any marked renewTime is a process before this one. An unmarked renewTime
/// is another writer's (the kubelet), and so is a marked one newer than anything sent: a
/// second bootlet for the same node.
///
/// What a wrong answer costs: one kubelet renewTime in a thousand carries the mark by
/// chance; found after a 409, it is taken for ours, bootlet retries its write and sees the
/// kubelet at its next renewal (a write war one period longer). A wall clock stepped back
/// makes a second bootlet's renewTimes look older than ours until the clock catches up.
pub(super) fn ours(found: jiff::Timestamp, sent: Option<jiff::Timestamp>) -> bool {
    is_marked(found) && sent.is_none_or(|sent| found <= sent)
}

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
    /// The Lease has not changed (or stayed gone) for `idle`, at least the whole duration
    /// the writer declared: its Lease ran out unrenewed, which a writer pausing under
    /// throttling (a kubelet backing off for 20 s) does not do. `first` is true the first
    /// time.
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
                if idle >= declared.max(self.every) {
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

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_marked_renew_time_no_newer_than_the_last_sent_is_ours() {
        let sent = ts("2026-12-04T10:00:00.000271Z");
        // Just sent (answered or not), and one an etcd restore brought back from an hour ago,
        // written by this process or one before it.
        assert!(ours(sent, Some(sent)));
        assert!(ours(ts("2026-12-04T09:00:07.123271Z"), Some(sent)));
        // Before the first write: any marked one is a process before this one.
        assert!(ours(ts("2026-12-04T09:59:58.005271Z"), None));
        // The kubelet's (no mark), older or newer, before the first write or after.
        assert!(!ours(ts("2026-12-04T09:59:59.999999Z"), Some(sent)));
        assert!(!ours(ts("2026-12-04T10:00:00.100123Z"), Some(sent)));
        assert!(!ours(ts("2026-12-04T09:59:58.005270Z"), None));
        // A second bootlet for the node: marked, but newer than anything sent.
        assert!(!ours(ts("2026-12-04T10:00:00.001271Z"), Some(sent)));
    }

    /// Before: a Lease unchanged over half its declared duration (two reads 20 s apart at
    /// the defaults) was "stopped", so a kubelet backing off under API throttling for 20 s
    /// while its /healthz said 200 was taken over, then handed back, in a loop. Now the
    /// writer is stopped only once the Lease it declared has run out unrenewed.
    #[tokio::test(start_paused = true)]
    async fn a_writer_quiet_for_less_than_its_whole_duration_still_renews() {
        let t0 = Instant::now();
        let forty = 40 * S;
        let mut b = Bystander::new(t0, 20 * S);
        assert_eq!(b.observe(t0 + 20 * S, Some("5"), forty), Verdict::Renewing);
        // A 20 s (and a 39 s) pause in its renewals: still its Lease.
        assert_eq!(b.observe(t0 + 40 * S, Some("5"), forty), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 59 * S, Some("5"), forty), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 60 * S, Some("6"), forty), Verdict::Renewing);
        // Its whole duration: stopped.
        assert_eq!(
            b.observe(t0 + 100 * S, Some("6"), forty),
            Verdict::Stopped {
                idle: forty,
                first: true
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_unchanged_for_its_duration_is_stopped_reported_once() {
        let t0 = Instant::now();
        let mut b = Bystander::new(t0, 20 * S);
        assert!(!b.read_due(t0));
        assert!(b.read_due(t0 + 20 * S));
        let forty = 40 * S;
        // Renewed between every read.
        assert_eq!(b.observe(t0 + 20 * S, Some("5"), forty), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 40 * S, Some("9"), forty), Verdict::Renewing);
        // Unchanged over two reads 20 s apart: the whole 40 s, four of a kubelet's renewals.
        assert_eq!(b.observe(t0 + 60 * S, Some("9"), forty), Verdict::Renewing);
        assert_eq!(
            b.observe(t0 + 80 * S, Some("9"), forty),
            Verdict::Stopped {
                idle: 40 * S,
                first: true
            }
        );
        assert_eq!(
            b.observe(t0 + 100 * S, Some("9"), forty),
            Verdict::Stopped {
                idle: 60 * S,
                first: false
            }
        );
        // It comes back, then stops again: reported again.
        assert_eq!(b.observe(t0 + 120 * S, Some("12"), forty), Verdict::Resumed);
        assert_eq!(
            b.observe(t0 + 140 * S, Some("13"), forty),
            Verdict::Renewing
        );
        assert!(matches!(
            b.observe(t0 + 180 * S, Some("13"), forty),
            Verdict::Stopped { first: true, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_with_a_longer_duration_gets_longer_and_a_gone_lease_is_a_version() {
        let t0 = Instant::now();
        let mut b = Bystander::new(t0, S);
        // It declared 10 s: unchanged for 9 s is not yet stopped, 10 s is.
        let ten = 10 * S;
        assert_eq!(b.observe(t0 + S, Some("3"), ten), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 10 * S, Some("3"), ten), Verdict::Renewing);
        assert!(matches!(
            b.observe(t0 + 11 * S, Some("3"), ten),
            Verdict::Stopped { first: true, .. }
        ));
        // Deleted (by the garbage collector, by hand): a change, then stopped if it stays so.
        let mut b = Bystander::new(t0, S);
        assert_eq!(b.observe(t0 + S, Some("3"), 2 * S), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 2 * S, None, 2 * S), Verdict::Renewing);
        assert_eq!(b.observe(t0 + 3 * S, None, 2 * S), Verdict::Renewing);
        assert!(matches!(
            b.observe(t0 + 4 * S, None, 2 * S),
            Verdict::Stopped { first: true, .. }
        ));
        b.read_failed(t0 + 5 * S);
        assert!(!b.read_due(t0 + 5 * S));
        assert!(b.read_due(t0 + 6 * S));
    }
}
