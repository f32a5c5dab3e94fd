//! Statistics over what the drivers sampled: percentiles (the nearest-rank ones the
//! testplane's fleet tests use too) and how far a cadence strays from its interval.
//! Pure: no IO, no clock.

use std::time::{Duration, SystemTime};

/// The nearest-rank percentile `q` (0..=1) of unsorted values; `None` when empty.
pub use testplane::stats::percentile;

/// |interval − nominal| in milliseconds for each pair of consecutive `writes`, sorted.
pub fn deviations_ms(writes: &[SystemTime], nominal: Duration) -> Vec<f64> {
    let nominal = nominal.as_secs_f64() * 1000.0;
    let mut d: Vec<f64> = writes
        .windows(2)
        .map(|w| {
            let gap = w[1].duration_since(w[0]).unwrap_or_default();
            (gap.as_secs_f64() * 1000.0 - nominal).abs()
        })
        .collect();
    d.sort_by(f64::total_cmp);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn deviations_and_percentiles() {
        let writes = [t(0), t(10_002), t(20_001), t(30_050)];
        assert_eq!(
            deviations_ms(&writes, Duration::from_secs(10)),
            [1.0, 2.0, 49.0]
        );
        assert!(deviations_ms(&writes[..1], Duration::from_secs(10)).is_empty());
        let d = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&d, 0.5), Some(2.0));
        assert_eq!(percentile(&d, 0.99), Some(4.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
