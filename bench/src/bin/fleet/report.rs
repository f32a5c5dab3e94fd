//! How the fleet driver prints: distributions as one line of percentiles, histograms as
//! rows of bars; and which requests are a node's Lease writes and CSRs.

use std::time::{Duration, SystemTime};

use bootlet_bench::stats::percentile;
use testplane::RequestRecord;

/// `p50 … p90 … p99 … max` of `values` (seconds), with `unit` after each.
pub fn distribution(values: &[f64]) -> String {
    let q = |p| percentile(values, p).map_or("-".into(), |v| format!("{v:.2} s"));
    format!(
        "min {}, p50 {}, p90 {}, p99 {}, max {} (n = {})",
        q(0.0),
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0),
        values.len()
    )
}

/// One row per bin: `  +12 s   23 ######` with the bin's start, count and a bar scaled to
/// the largest bin (at most 50 characters).
pub fn bars(counts: &[usize], width: Duration) -> String {
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut out = String::new();
    for (i, &c) in counts.iter().enumerate() {
        let at = width.as_secs_f64() * i as f64;
        let bar = "#".repeat((c * 50).div_ceil(top).min(50));
        out.push_str(&format!("    +{at:>6.1} s {c:>6} {bar}\n"));
    }
    out
}

/// Seconds from `origin` to `t` (zero when `t` is earlier).
pub fn since(t: SystemTime, origin: SystemTime) -> Duration {
    t.duration_since(origin).unwrap_or_default()
}

/// Requests by a node's certificate in `[from, to)`.
pub fn node_requests(
    requests: &[RequestRecord],
    from: SystemTime,
    to: SystemTime,
) -> Vec<&RequestRecord> {
    requests
        .iter()
        .filter(|r| r.at >= from && r.at < to && crate::track::is_node(&r.user))
        .collect()
}

pub fn is_lease_write(r: &RequestRecord) -> bool {
    r.path.contains("/leases") && matches!(r.method.as_str(), "PUT" | "POST") && r.status / 100 == 2
}

/// A node filing a CSR (a rotation: bootstrap CSRs are filed with the token).
pub fn is_rotation_csr(r: &RequestRecord) -> bool {
    crate::track::is_node(&r.user)
        && r.method == "POST"
        && r.path
            .starts_with("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        && r.status / 100 == 2
}

/// A bootstrap CSR (filed with the token).
pub fn is_bootstrap_csr(r: &RequestRecord) -> bool {
    !crate::track::is_node(&r.user)
        && r.method == "POST"
        && r.path
            .starts_with("/apis/certificates.k8s.io/v1/certificatesigningrequests")
        && r.status / 100 == 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_bin() {
        let text = bars(&[0, 5, 10], Duration::from_secs(1));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].ends_with(" 0 "), "{:?}", lines[0]);
        assert_eq!(lines[1].matches('#').count(), 25);
        assert_eq!(lines[2].matches('#').count(), 50);
        assert!(lines[2].contains("+   2.0 s"), "{}", lines[2]);
    }

    #[test]
    fn distribution_names_every_quantile() {
        let d = distribution(&[1.0, 2.0, 3.0]);
        assert!(d.starts_with("min 1.00 s, p50 2.00 s"), "{d}");
        assert!(d.ends_with("max 3.00 s (n = 3)"), "{d}");
    }
}
