//! The crate's one retry backoff: jittered exponential, validated at construction.
//! It computes delays only; callers sleep with `tokio::time` and decide when to reset.

use std::time::Duration;

use rand::{rngs::StdRng, Rng, SeedableRng};

/// Why a [`Backoff`] could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackoffError {
    #[error("backoff minimum must be greater than zero")]
    ZeroMin,
    #[error("backoff minimum {min:?} is greater than its maximum {max:?}")]
    MinAboveMax { min: Duration, max: Duration },
    #[error("backoff jitter must be in [0, 1), got {jitter}")]
    Jitter { jitter: f64 },
}

/// Jittered exponential backoff: `min`, `2*min`, `4*min`, ... capped at `max`, each step
/// multiplied by a factor drawn uniformly from `[1 - jitter, 1 + jitter]`.
///
/// Invariants: every delay is greater than zero and at most `max * (1 + jitter)`; the
/// un-jittered base never decreases until [`Backoff::reset`] puts it back to `min`.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    jitter: f64,
    base: Duration,
    rng: StdRng,
}

// === impl Backoff ===

impl Backoff {
    /// `min > 0`, `min <= max`, `0 <= jitter < 1`.
    pub fn new(min: Duration, max: Duration, jitter: f64) -> Result<Backoff, BackoffError> {
        if min.is_zero() {
            return Err(BackoffError::ZeroMin);
        }
        if min > max {
            return Err(BackoffError::MinAboveMax { min, max });
        }
        if !(0.0..1.0).contains(&jitter) {
            return Err(BackoffError::Jitter { jitter });
        }
        Ok(Backoff {
            min,
            max,
            jitter,
            base: min,
            // Seeded from the thread-local generator (itself seeded once from the OS):
            // a backoff is built per renewal, and a getrandom(2) each time is waste.
            rng: StdRng::from_rng(&mut rand::rng()),
        })
    }

    /// Replaces the random source with a seeded one, for reproducible tests.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Backoff {
        self.rng = StdRng::seed_from_u64(seed);
        self
    }

    /// The delay to wait before the next attempt; advances the base step (doubling, capped
    /// at `max`). Never zero, never above `max * (1 + jitter)`.
    pub fn next_delay(&mut self) -> Duration {
        let factor = if self.jitter == 0.0 {
            1.0
        } else {
            self.rng
                .random_range((1.0 - self.jitter)..=(1.0 + self.jitter))
        };
        let delay = self
            .base
            .mul_f64(factor)
            .clamp(Duration::from_nanos(1), self.ceiling());
        self.base = self.base.saturating_mul(2).min(self.max);
        delay
    }

    /// For a throttled request (HTTP 429 `Retry-After`): the larger of the server's hint
    /// and [`Backoff::next_delay`], capped at `max`. Advances the step like `next_delay`.
    pub fn with_retry_after(&mut self, server_hint: Option<Duration>) -> Duration {
        let own = self.next_delay();
        server_hint.map_or(own, |hint| hint.max(own)).min(self.max)
    }

    /// Back to the first step, after a success.
    pub fn reset(&mut self) {
        self.base = self.min;
    }

    /// The un-jittered current step (for logs and tests).
    pub fn peek_base(&self) -> Duration {
        self.base
    }

    /// The first step.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The largest un-jittered step.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The jitter fraction in `[0, 1)`.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The largest delay `next_delay` can return: `max * (1 + jitter)`.
    pub fn ceiling(&self) -> Duration {
        self.max.mul_f64(1.0 + self.jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn rejects_invalid_parameters() {
        assert_eq!(
            Backoff::new(Duration::ZERO, secs(1), 0.1).unwrap_err(),
            BackoffError::ZeroMin
        );
        assert!(matches!(
            Backoff::new(secs(2), secs(1), 0.1),
            Err(BackoffError::MinAboveMax { .. })
        ));
        for jitter in [-0.1, 1.0, 1.5, f64::NAN] {
            assert!(matches!(
                Backoff::new(secs(1), secs(2), jitter),
                Err(BackoffError::Jitter { .. })
            ));
        }
    }

    #[test]
    fn doubles_to_max_without_jitter_and_resets() {
        let mut b = Backoff::new(secs(60), secs(3600), 0.0).unwrap();
        let got: Vec<u64> = (0..8).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(got, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        b.reset();
        assert_eq!(b.peek_base(), secs(60));
        assert_eq!(b.next_delay(), secs(60));
    }

    #[test]
    fn retry_after_takes_the_larger_capped_at_max() {
        let mut b = Backoff::new(secs(1), secs(30), 0.0).unwrap();
        assert_eq!(b.with_retry_after(Some(secs(10))), secs(10));
        assert_eq!(b.with_retry_after(None), secs(2));
        assert_eq!(b.with_retry_after(Some(secs(1))), secs(4));
        assert_eq!(b.with_retry_after(Some(secs(3600))), secs(30));
    }

    #[test]
    fn seeded_backoffs_repeat() {
        let mut a = Backoff::new(secs(1), secs(60), 0.5).unwrap().with_seed(7);
        let mut b = Backoff::new(secs(1), secs(60), 0.5).unwrap().with_seed(7);
        for _ in 0..10 {
            assert_eq!(a.next_delay(), b.next_delay());
        }
    }

    fn params() -> impl Strategy<Value = (Duration, Duration, f64, u64)> {
        (
            1u64..=10_000_000_000,
            1u64..=1_000,
            0.0f64..0.99,
            any::<u64>(),
        )
            .prop_map(|(min_ns, factor, jitter, seed)| {
                let min = Duration::from_nanos(min_ns);
                (min, min.saturating_mul(factor as u32), jitter, seed)
            })
    }

    proptest! {
        #[test]
        fn delays_stay_in_bounds((min, max, jitter, seed) in params(), steps in 1usize..80) {
            let mut b = Backoff::new(min, max, jitter).unwrap().with_seed(seed);
            for _ in 0..steps {
                let base = b.peek_base();
                let d = b.next_delay();
                prop_assert!(d > Duration::ZERO);
                prop_assert!(d <= max.mul_f64(1.0 + jitter));
                prop_assert!(d <= base.mul_f64(1.0 + jitter));
                prop_assert!(d >= base.mul_f64(1.0 - jitter).saturating_sub(Duration::from_nanos(1)));
            }
        }

        #[test]
        fn base_is_monotone_and_capped((min, max, jitter, seed) in params(), steps in 1usize..80) {
            let mut b = Backoff::new(min, max, jitter).unwrap().with_seed(seed);
            let mut prev = b.peek_base();
            prop_assert_eq!(prev, min);
            for _ in 0..steps {
                b.next_delay();
                let now = b.peek_base();
                prop_assert!(now >= prev);
                prop_assert!(now <= max);
                prev = now;
            }
        }

        #[test]
        fn reset_returns_to_min((min, max, jitter, seed) in params(), steps in 0usize..40) {
            let mut b = Backoff::new(min, max, jitter).unwrap().with_seed(seed);
            for _ in 0..steps {
                b.next_delay();
            }
            b.reset();
            prop_assert_eq!(b.peek_base(), min);
            let d = b.next_delay();
            prop_assert!(d <= min.mul_f64(1.0 + jitter));
        }

        #[test]
        fn retry_after_respects_hint_and_max(
            (min, max, jitter, seed) in params(),
            hint_ns in proptest::option::of(0u64..100_000_000_000_000),
        ) {
            let mut b = Backoff::new(min, max, jitter).unwrap().with_seed(seed);
            let hint = hint_ns.map(Duration::from_nanos);
            let d = b.with_retry_after(hint);
            prop_assert!(d > Duration::ZERO);
            prop_assert!(d <= max);
            if let Some(h) = hint {
                prop_assert!(d >= h.min(max));
            }
        }
    }
}
