//! One exact wake-up per period for the Lease loop.
//!
//! tokio's timer wheel parks the runtime until the start of the wheel slot that holds the
//! next deadline, not until the deadline itself: a sleep of 10 s (level 2, 4.1 s slots)
//! wakes the thread up to three times (slot, sub-slot, deadline), and a sleep of 100 ms
//! twice. The Lease loop sleeps for nearly every second of its life, so those wake-ups
//! were most of its CPU time. A `timerfd` armed for the exact deadline and registered
//! with the runtime's epoll wakes the thread exactly once; anything that cannot create
//! one (a seccomp filter, an old kernel) falls back to tokio's sleep.

use std::os::fd::OwnedFd;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Sleeps until a deadline with one wake-up. Cancel-safe: dropping a pending
/// [`Ticker::sleep_until`] leaves the timer armed, and the next call re-arms it.
pub struct Ticker {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Ticker {
    pub fn new() -> Self {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(std::io::Error::from)
        .and_then(register)
        .map_err(|e| tracing::debug!(error = %e, "no timerfd; using the runtime's timer"))
        .ok();
        Ticker { fd }
    }

    /// For the certificate loops: [`Ticker::new`], except in this crate's unit tests, which
    /// drive those loops on tokio's paused clock — a timerfd counts real time, and only
    /// tokio's own timer follows a paused clock.
    pub fn for_loops() -> Self {
        if cfg!(test) {
            Ticker { fd: None }
        } else {
            Ticker::new()
        }
    }

    /// Whether wake-ups come from a timerfd (false: tokio's timer wheel).
    pub fn is_exact(&self) -> bool {
        self.fd.is_some()
    }

    /// Returns at `at` (at once if it has passed).
    pub async fn sleep_until(&mut self, at: Instant) {
        let Some(fd) = &self.fd else {
            return tokio::time::sleep_until(at).await;
        };
        let wait = at.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return;
        }
        if arm(fd, wait).is_err() {
            return tokio::time::sleep_until(at).await;
        }
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return tokio::time::sleep_until(at).await;
            };
            let mut expirations = [0u8; 8];
            let read = rustix::io::read(fd.get_ref(), &mut expirations);
            // Drained either way: the next sleep re-arms first, so a readiness kept from
            // this expiration would only cost a read that finds nothing.
            ready.clear_ready();
            match read {
                Ok(_) => return,
                Err(rustix::io::Errno::AGAIN) => {}
                Err(_) => return tokio::time::sleep_until(at).await,
            }
        }
    }
}

impl Default for Ticker {
    fn default() -> Self {
        Self::new()
    }
}

/// tokio 1.54 deprecated the safe `AsyncFd::new` because an arbitrary `AsRawFd` may close or
/// swap its descriptor while registered; its replacement is `unsafe`, which this crate
/// forbids. An `OwnedFd` that the `AsyncFd` owns until drop cannot do either, so the
/// safety contract of `register` holds here by construction.
#[allow(deprecated)]
fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::new(fd)
}

/// One-shot, relative to now (re-arming also resets any unread expiration).
fn arm(fd: &AsyncFd<OwnedFd>, wait: std::time::Duration) -> rustix::io::Result<()> {
    let value = Timespec::try_from(wait).map_err(|_| rustix::io::Errno::INVAL)?;
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    timerfd_settime(
        fd.get_ref(),
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: zero,
            it_value: value,
        },
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_at_the_deadline_not_before() {
        let mut ticker = Ticker::new();
        assert!(ticker.is_exact(), "this kernel has timerfd");
        for ms in [1u64, 30, 80] {
            let start = Instant::now();
            let at = start + Duration::from_millis(ms);
            ticker.sleep_until(at).await;
            let late = Instant::now().saturating_duration_since(at);
            assert!(Instant::now() >= at, "woke before the deadline");
            assert!(late < Duration::from_millis(50), "{ms} ms: {late:?} late");
        }
    }

    #[tokio::test]
    async fn a_cancelled_sleep_does_not_end_the_next_one_early() {
        let mut ticker = Ticker::new();
        let soon = Instant::now() + Duration::from_millis(5);
        // Cancelled before its deadline; the timer stays armed and fires unread.
        let _ = tokio::time::timeout(Duration::from_millis(1), ticker.sleep_until(soon)).await;
        tokio::time::sleep_until(soon + Duration::from_millis(5)).await;
        let at = Instant::now() + Duration::from_millis(40);
        ticker.sleep_until(at).await;
        assert!(
            Instant::now() >= at,
            "a stale expiration ended the sleep early"
        );
    }

    #[tokio::test]
    async fn a_past_deadline_returns_at_once() {
        let mut ticker = Ticker::new();
        let start = Instant::now();
        ticker.sleep_until(start - Duration::from_millis(1)).await;
        ticker.sleep_until(start).await;
        assert!(start.elapsed() < Duration::from_millis(50));
    }
}
