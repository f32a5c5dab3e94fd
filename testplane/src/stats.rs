//! How a fleet's requests spread in time, for tests/local/fleet.rs and the fleet bench: where
//! instants fall in a repeating interval (equal slices, the largest empty gap), plain
//! histograms, percentiles, and the binomial bound on how full a slice may get by chance.
//! Pure: times come in as `Duration`s since a reference the caller picks.

use std::time::Duration;

/// `offsets` folded into `interval` (taken modulo it) and counted in `k` equal slices.
pub fn slices(offsets: &[Duration], interval: Duration, k: usize) -> Vec<usize> {
    let period = interval.as_nanos().max(1);
    let k = k.max(1);
    let mut counts = vec![0; k];
    for o in offsets {
        let folded = o.as_nanos() % period;
        counts[(folded * k as u128 / period) as usize] += 1;
    }
    counts
}

/// `offsets` as they are (not folded) in `k` bins of `width` from zero; anything past the
/// last bin is counted in it.
pub fn histogram(offsets: &[Duration], width: Duration, k: usize) -> Vec<usize> {
    let width = width.as_nanos().max(1);
    let mut counts = vec![0; k.max(1)];
    let last = counts.len() - 1;
    for o in offsets {
        counts[((o.as_nanos() / width) as usize).min(last)] += 1;
    }
    counts
}

/// The largest stretch of the circle of `interval` with none of the folded `offsets` in it
/// (the whole interval when there are none). 20 uniform points leave a largest gap of about
/// 18 % of the circle; a fleet in lockstep leaves nearly all of it empty.
pub fn largest_gap(offsets: &[Duration], interval: Duration) -> Duration {
    let period = interval.as_nanos().max(1);
    let mut folded: Vec<u128> = offsets.iter().map(|o| o.as_nanos() % period).collect();
    folded.sort_unstable();
    let (Some(first), Some(last)) = (folded.first(), folded.last()) else {
        return interval;
    };
    let wrap = period - last + first;
    let inner = folded.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Duration::from_nanos(u64::try_from(inner.max(wrap)).unwrap_or(u64::MAX))
}

/// P(X ≥ k) for X ~ Binomial(n, p), summed in log space (n up to millions).
pub fn binomial_tail(n: u64, p: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    // log C(n, i), built up term by term.
    let mut log_choose = 0.0;
    let mut tail = 0.0;
    for i in 0..=n {
        if i > 0 {
            log_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        if i >= k {
            tail += (log_choose + i as f64 * lp + (n - i) as f64 * lq).exp();
        }
    }
    tail.min(1.0)
}

/// The most events any one of `k` equal slices may hold when `n` events fall uniformly at
/// random, with a chance of at most `false_alarm` that some slice holds more (union bound
/// over the slices): the smallest `c` with `k × P(Binomial(n, 1/k) > c) ≤ false_alarm`.
pub fn slice_bound(n: usize, k: usize, false_alarm: f64) -> usize {
    let k = k.max(1);
    let p = 1.0 / k as f64;
    (0..=n)
        .find(|&c| k as f64 * binomial_tail(n as u64, p, c as u64 + 1) <= false_alarm)
        .unwrap_or(n)
}

/// An upper bound on the chance that `n` uniform points on a circle leave an empty arc
/// longer than `fraction` of it: `n × (1 − fraction)^(n − 1)`.
pub fn gap_false_alarm(n: usize, fraction: f64) -> f64 {
    if n < 2 {
        return 1.0;
    }
    (n as f64 * (1.0 - fraction).powi(n as i32 - 1)).min(1.0)
}

/// The `q` quantile (0..=1) of `values` by the nearest-rank method; `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn slices_fold_offsets_into_the_interval() {
        let s = slices(&ms(&[0, 99, 100, 1050, 2999]), Duration::from_secs(1), 10);
        // 0, 99 and 1050 (50 into its interval) in the first tenth; 2999 in the last.
        assert_eq!(s, vec![3, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn histogram_keeps_overflow_in_the_last_bin() {
        let h = histogram(&ms(&[0, 999, 1000, 5000]), Duration::from_secs(1), 3);
        assert_eq!(h, vec![2, 1, 1]);
    }

    #[test]
    fn the_largest_gap_wraps_around_the_circle() {
        let i = Duration::from_secs(1);
        assert_eq!(largest_gap(&[], i), i);
        assert_eq!(largest_gap(&ms(&[100, 200]), i), Duration::from_millis(900));
        assert_eq!(
            largest_gap(&ms(&[0, 100, 700]), i),
            Duration::from_millis(600)
        );
        // Evenly spread: every gap a tenth.
        let even: Vec<u64> = (0..10).map(|i| i * 100).collect();
        assert_eq!(largest_gap(&ms(&even), i), Duration::from_millis(100));
    }

    #[test]
    fn binomial_tails_match_known_values() {
        // P(Bin(20, 0.1) >= 9) = 5.9859e-5; >= 1 = 1 - 0.9^20.
        assert!((binomial_tail(20, 0.1, 9) - 5.985_853e-5).abs() < 1e-9);
        assert!((binomial_tail(20, 0.1, 1) - (1.0 - 0.9f64.powi(20))).abs() < 1e-12);
        assert_eq!(binomial_tail(20, 0.1, 0), 1.0);
        assert_eq!(binomial_tail(20, 0.1, 21), 0.0);
        // Large n does not underflow: the mean of Bin(50_000, 0.1) is 5,000.
        let half = binomial_tail(50_000, 0.1, 5_000);
        assert!((0.45..0.55).contains(&half), "{half}");
    }

    #[test]
    fn slice_bounds_for_the_fleet_sizes_we_use() {
        // 20 agents in 10 slices: 10 * P(X >= 10) = 7.2e-5 <= 1e-4 < 10 * P(X >= 9).
        assert_eq!(slice_bound(20, 10, 1e-4), 9);
        // 200 agents, 10 slices (a second each at 10 s): twice the mean of 20 is the
        // 1e-4 bound, so bench/fleet.sh's "at most 2x the steady rate" is that test.
        assert_eq!(slice_bound(200, 10, 1e-4), 40);
    }

    #[test]
    fn gap_false_alarms_shrink_with_the_fleet() {
        assert!(gap_false_alarm(20, 0.5) < 4e-5);
        assert_eq!(gap_false_alarm(1, 0.5), 1.0);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(3.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(5.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
