//! When the rotation loop acts, from the two clocks (pure): the rotation deadline and the
//! expiry are wall-clock times, compared with the wall clock as it reads at every wake, so
//! a clock step moves them as it should and its correction moves them back; the back-off
//! after a failed attempt is monotonic, so a step neither stretches nor skips it.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// What the loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing is due: look again after at most this long.
    Wait(Duration),
    /// Rotate through the current certificate.
    Rotate,
    /// The certificate has expired: fall back to the bootstrap kubeconfig.
    FallBack,
}

/// The schedule of one certificate.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The rotation deadline; `None` with `--rotate-certificates=false`.
    pub at: Option<SystemTime>,
    pub not_after: SystemTime,
    /// No attempt before this, after a failed one (monotonic).
    retry_at: Option<Instant>,
    /// Bootstrap was tried since the certificate expired (by the wall clock). Cleared as
    /// soon as the clock says it is valid again (a forward step corrected).
    fell_back: bool,
}

// === impl Schedule ===

impl Schedule {
    pub fn new(at: Option<SystemTime>, not_after: SystemTime) -> Self {
        Self {
            at,
            not_after,
            retry_at: None,
            fell_back: false,
        }
    }

    /// At wall-clock `now` and monotonic `mono`: rotate once the deadline has passed and
    /// any back-off is over; fall back to bootstrap at expiry at once (even while a refused
    /// rotation backs off), and after that at the back-off. Without a deadline (rotation
    /// off) nothing is ever due.
    pub fn next(&self, now: SystemTime, mono: Instant) -> Next {
        let Some(at) = self.at else {
            return Next::Wait(Duration::MAX);
        };
        let backoff = self
            .retry_at
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(mono));
        let to_expiry = self.not_after.duration_since(now).unwrap_or_default();
        if to_expiry.is_zero() {
            return match self.fell_back && !backoff.is_zero() {
                true => Next::Wait(backoff),
                false => Next::FallBack,
            };
        }
        let wait = at.duration_since(now).unwrap_or_default().max(backoff);
        match wait.is_zero() {
            true => Next::Rotate,
            false => Next::Wait(wait.min(to_expiry)),
        }
    }

    /// The wall clock reads `now`: while the certificate is valid, it has not fallen back
    /// (a forward step was corrected), so its next expiry falls back at once again. `true`
    /// when that cleared a fallback.
    pub fn observe(&mut self, now: SystemTime) -> bool {
        let valid = now < self.not_after;
        valid && std::mem::take(&mut self.fell_back)
    }

    /// Bootstrap was tried for the expired certificate.
    pub fn fell_back_now(&mut self) {
        self.fell_back = true;
    }

    /// Whether bootstrap was tried since the certificate expired.
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// An attempt failed at `mono`: the next waits `delay` of monotonic time.
    pub fn failed(&mut self, mono: Instant, delay: Duration) {
        self.retry_at = Some(mono + delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    const DAY: u64 = 86_400;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    /// M5: a clock stepped a day forward (past expiry) and corrected. Before, the retry
    /// after the failed fallback was a wall-clock time a day ahead, and `fell_back` stayed
    /// set: both the rotation and the expiry fallback moved a day later, and the
    /// certificate could expire with nothing happening.
    #[tokio::test(start_paused = true)]
    async fn a_clock_step_past_expiry_and_its_correction_postpone_nothing() {
        let m = Instant::now();
        // Valid t(0)..t(1000), deadline at t(750).
        let mut plan = Schedule::new(Some(t(750)), t(1000));
        assert_eq!(plan.next(t(100), m), Next::Wait(s(650)));
        // The clock jumps a day: expired, fall back at once.
        assert!(!plan.observe(t(100 + DAY)));
        assert_eq!(plan.next(t(100 + DAY), m), Next::FallBack);
        plan.fell_back_now();
        plan.failed(m, s(60));
        // Still stepped: the next fallback waits for the back-off, in monotonic time.
        assert!(!plan.observe(t(110 + DAY)));
        assert_eq!(plan.next(t(110 + DAY), m + s(10)), Next::Wait(s(50)));
        assert!(plan.fell_back());
        // Corrected: valid again, so no longer fallen back; rotation at its own deadline.
        assert!(
            plan.observe(t(111)),
            "cleared while the certificate is valid"
        );
        assert!(!plan.fell_back() && !plan.observe(t(112)));
        assert_eq!(plan.next(t(111), m + s(11)), Next::Wait(s(639)));
        assert_eq!(plan.next(t(750), m + s(650)), Next::Rotate);
        // A rotation that fails right at its deadline retries after its back-off...
        plan.failed(m + s(650), s(20));
        assert_eq!(plan.next(t(760), m + s(660)), Next::Wait(s(10)));
        assert_eq!(plan.next(t(770), m + s(670)), Next::Rotate);
        // ...and expiry is a deadline of its own: the fallback at once, even while backing off.
        plan.failed(m + s(990), s(600));
        assert_eq!(plan.next(t(995), m + s(995)), Next::Wait(s(5)));
        assert_eq!(plan.next(t(1000), m + s(1000)), Next::FallBack);
    }

    #[tokio::test(start_paused = true)]
    async fn a_back_off_is_monotonic_whatever_the_wall_clock_does() {
        let m = Instant::now();
        let mut plan = Schedule::new(Some(t(100)), t(1000));
        plan.failed(m, s(60));
        // The wall clock at another pace neither lengthens the back-off...
        assert_eq!(plan.next(t(110), m + s(10)), Next::Wait(s(50)));
        // ...nor does a step forward (within the lifetime) cut it short.
        assert_eq!(plan.next(t(900), m + s(10)), Next::Wait(s(50)));
        assert_eq!(plan.next(t(900), m + s(60)), Next::Rotate);
        // A step back before the deadline: wait for the deadline again.
        assert_eq!(plan.next(t(40), m + s(60)), Next::Wait(s(60)));
    }

    #[tokio::test(start_paused = true)]
    async fn without_rotation_nothing_is_due() {
        let m = Instant::now();
        let plan = Schedule::new(None, t(1000));
        assert_eq!(plan.next(t(999), m), Next::Wait(Duration::MAX));
        assert_eq!(plan.next(t(5000), m), Next::Wait(Duration::MAX));
    }
}
