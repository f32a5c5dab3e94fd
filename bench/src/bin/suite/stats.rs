//! Pure arithmetic over what a `Track` saw: a window between two samples (CPU, wake-ups,
//! requests, bytes and handshakes per renewal, peak RSS in it) and the Lease renewals on a
//! subject's connections; deviations and percentiles are the crate's (`bootlet_bench::stats`).
//! No IO, no clock.

use std::collections::BTreeSet;
use std::time::SystemTime;

pub use bootlet_bench::stats::{deviations_ms, percentile};

use testplane::RequestRecord;

use crate::track::Seen;

/// The figures of one window: from sample `from` to sample `to` (each taken half an
/// interval after a Lease write, while the process sleeps).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub renewals: u64,
    pub secs: f64,
    pub cpu_ms_per_renewal: f64,
    pub wakeups_per_renewal: Option<f64>,
    pub requests_per_renewal: f64,
    /// (request bytes, response bytes) per renewal, TLS records included.
    pub bytes_per_renewal: (f64, f64),
    pub handshakes: usize,
    pub handshakes_per_hour: f64,
    pub rss_max_kib: Option<u64>,
}

/// The window over samples `start ..= start + len` of `seen`; `None` when they are not
/// all there or no renewal happened in between.
pub fn window(seen: &Seen, requests: &[RequestRecord], start: usize, len: usize) -> Option<Window> {
    let from = seen.samples.get(start)?;
    let to = seen.samples.get(start + len)?;
    let renewals = to.writes.checked_sub(from.writes).filter(|n| *n > 0)?;
    let n = renewals as f64;
    let secs = to
        .at
        .duration_since(from.at)
        .unwrap_or_default()
        .as_secs_f64();
    let inside = |t: SystemTime| t > from.at && t <= to.at;
    let requests = requests
        .iter()
        .filter(|r| seen.conns.contains(&r.conn) && inside(r.at))
        .count();
    let handshakes = seen.handshakes.iter().filter(|t| inside(**t)).count();
    let wakeups = match (from.wakeups, to.wakeups) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / n),
        _ => None,
    };
    let samples = &seen.samples[start..=start + len];
    Some(Window {
        renewals,
        secs,
        cpu_ms_per_renewal: to.cpu_ns.saturating_sub(from.cpu_ns) as f64 / 1e6 / n,
        wakeups_per_renewal: wakeups,
        requests_per_renewal: requests as f64 / n,
        bytes_per_renewal: (
            to.wire.from_client.saturating_sub(from.wire.from_client) as f64 / n,
            to.wire.to_client.saturating_sub(from.wire.to_client) as f64 / n,
        ),
        handshakes,
        handshakes_per_hour: if secs > 0.0 {
            handshakes as f64 * 3600.0 / secs
        } else {
            0.0
        },
        rss_max_kib: samples.iter().filter_map(|s| s.rss_kib).max(),
    })
}

/// When the server handled each Lease renewal (update or patch; not the create, which is
/// off the cadence) on `conns`, in order.
pub fn lease_renewals(requests: &[RequestRecord], conns: &BTreeSet<u64>) -> Vec<SystemTime> {
    let mut at: Vec<SystemTime> = requests
        .iter()
        .filter(|r| {
            conns.contains(&r.conn)
                && r.path.contains("/leases")
                && matches!(r.verb.as_str(), "update" | "patch")
                && (200..300).contains(&r.status)
        })
        .map(|r| r.at)
        .collect();
    at.sort();
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::Sample;
    use std::time::Duration;
    use testplane::WireBytes;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn sample(ms: u64, writes: u64, cpu_ns: u64, rss: u64, wire: (u64, u64)) -> Sample {
        Sample {
            at: t(ms),
            writes,
            cpu_ns,
            wakeups: Some(writes * 2),
            rss_kib: Some(rss),
            wire: WireBytes {
                from_client: wire.0,
                to_client: wire.1,
            },
        }
    }

    fn request(ms: u64, conn: u64, verb: &str) -> RequestRecord {
        RequestRecord {
            at: t(ms),
            conn,
            user: "system:node:n".into(),
            verb: verb.into(),
            method: "PUT".into(),
            path: "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n".into(),
            status: 200,
            version: "HTTP/1.1".into(),
            content_type: String::new(),
            response_type: String::new(),
        }
    }

    #[test]
    fn a_window_divides_by_the_renewals_between_its_samples() {
        let seen = Seen {
            conns: [7].into(),
            handshakes: vec![t(500), t(15_000)],
            samples: vec![
                sample(5_000, 1, 1_000_000, 8_000, (100, 200)),
                sample(15_000, 2, 1_400_000, 9_000, (700, 1_200)),
                sample(25_000, 3, 1_800_000, 8_500, (1_300, 2_200)),
            ],
        };
        // Two renewals in the window, one request each on the process's connection, one
        // on someone else's, one before the window.
        let reqs = [
            request(1_000, 7, "create"),
            request(10_000, 7, "update"),
            request(20_000, 7, "update"),
            request(20_001, 8, "update"),
        ];
        let w = window(&seen, &reqs, 0, 2).unwrap();
        assert_eq!(w.renewals, 2);
        assert!((w.cpu_ms_per_renewal - 0.4).abs() < 1e-9);
        assert_eq!(w.wakeups_per_renewal, Some(2.0));
        assert_eq!(w.requests_per_renewal, 1.0);
        assert_eq!(w.bytes_per_renewal, (600.0, 1_000.0));
        assert_eq!(w.handshakes, 1);
        assert!((w.handshakes_per_hour - 180.0).abs() < 1e-9);
        assert_eq!(w.rss_max_kib, Some(9_000));
        assert_eq!(window(&seen, &reqs, 1, 2), None, "sample 3 does not exist");
    }

    #[test]
    fn only_successful_renewals_on_own_connections_count() {
        let mut failed = request(3, 1, "update");
        failed.status = 409;
        let mut get = request(4, 1, "get");
        get.method = "GET".into();
        let reqs = [
            request(6, 1, "update"),
            request(2, 1, "patch"),
            request(1, 1, "create"),
            failed,
            get,
            request(5, 2, "update"),
        ];
        assert_eq!(lease_renewals(&reqs, &[1].into()), [t(2), t(6)]);
    }
}
