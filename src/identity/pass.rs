//! One pass of a certificate loop through the issuing pipeline — filing the CSR (which the
//! pipeline retries on transport errors, 5xx and 429), then the approval wait — bounded
//! in time as a whole, with the loop's heartbeat promising exactly that bound plus slack.
//! An API outage then ends the pass, and the loop backs off and tries again, instead of
//! outliving the heartbeat and getting bootlet killed by the watchdog.

use std::future::Future;
use std::time::Duration;

use crate::checkid::CheckId;
use crate::runtime::health::{self, Health};

/// What filing may take on top of the approval wait (a few retries of the create at the
/// pipeline's 30 s cap), and never more than the wait itself.
pub const FILING_ALLOWANCE: Duration = Duration::from_secs(120);

/// How long one pass whose approval wait is bounded by `wait_limit` may take:
/// `wait_limit` + min([`FILING_ALLOWANCE`], `wait_limit`).
pub fn bound(wait_limit: Duration) -> Duration {
    wait_limit.saturating_add(FILING_ALLOWANCE.min(wait_limit))
}

/// Why a bounded pass produced no certificate.
#[derive(Debug, thiserror::Error)]
pub enum PassError<E: std::error::Error + 'static> {
    /// The pipeline's own failure.
    #[error(transparent)]
    Failed(E),
    /// Filing and waiting took the whole bound: the API server did not answer, or kept
    /// failing. The pending key stays, so the next pass adopts the same CSR.
    #[error("no answer about the CSR within {} (filing it and waiting for approval); the API server kept failing or did not answer", health::human(*after))]
    TimedOut { after: Duration },
}

// === impl PassError ===

impl<E: std::error::Error + 'static> PassError<E> {
    /// The pipeline's failure, unless the pass ran out of time.
    pub fn failed(&self) -> Option<&E> {
        match self {
            PassError::Failed(e) => Some(e),
            PassError::TimedOut { .. } => None,
        }
    }

    /// The doctor check: `of` the pipeline's failure, or the API server's reachability
    /// for a pass that ran out of time.
    pub fn check(&self, of: impl FnOnce(&E) -> CheckId) -> CheckId {
        self.failed().map_or(CheckId::ServerReachable, of)
    }
}

/// Run `pass` (one trip through the pipeline with approval wait `wait_limit`) for at most
/// [`bound`]`(wait_limit)`, after promising `task`'s next heartbeat within that plus
/// `slack`. Cancelling the pass is safe: the pipeline's writes happen after its last
/// await, and its pending key is on disk before the CSR is filed.
pub async fn bounded<T, E, F>(
    health: &Health,
    task: &'static str,
    wait_limit: Duration,
    slack: Duration,
    pass: F,
) -> Result<T, PassError<E>>
where
    E: std::error::Error + 'static,
    F: Future<Output = Result<T, E>>,
{
    let after = bound(wait_limit);
    health.beat(task, after + slack);
    match tokio::time::timeout(after, pass).await {
        Ok(result) => result.map_err(PassError::Failed),
        Err(_) => Err(PassError::TimedOut { after }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn the_bound_is_the_wait_plus_a_filing_allowance_never_more_than_twice_the_wait() {
        let s = Duration::from_secs;
        assert_eq!(bound(s(3600)), s(3600 + 120));
        assert_eq!(bound(s(300)), s(420));
        assert_eq!(bound(s(60)), s(120));
        assert_eq!(bound(s(1)), s(2));
        assert_eq!(bound(Duration::MAX), Duration::MAX);
    }

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[tokio::test(start_paused = true)]
    async fn a_pass_that_never_ends_is_cut_at_its_bound_and_the_beat_covers_it() {
        let health = Health::new(false);
        let start = Instant::now();
        let never = std::future::pending::<Result<(), Inner>>();
        let watch = async {
            // Every moment of the pass is inside the promise.
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert_eq!(health.stalled(Instant::now()), None);
            }
        };
        let result = tokio::select! {
            r = bounded(&health, "t", Duration::from_secs(300), Duration::from_secs(60), never) => r,
            () = watch => unreachable!(),
        };
        assert!(
            matches!(result, Err(PassError::TimedOut { after }) if after == Duration::from_secs(420))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(420));
        let e = result.unwrap_err();
        assert_eq!(e.check(|_| CheckId::Csr), CheckId::ServerReachable);
        assert!(e.to_string().contains("within 7m0s"), "{e}");
        let failed: PassError<Inner> = PassError::Failed(Inner);
        assert_eq!(failed.check(|_| CheckId::Csr), CheckId::Csr);
        assert_eq!(failed.to_string(), "inner");
    }
}
