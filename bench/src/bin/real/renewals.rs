//! A subject's Lease renewals between two marks, from kube-apiserver's own /metrics: the
//! Lease requests of the verb it renews with and their latency histogram. PUTs (bootlet, the
//! peer, the floor) are the window's own figures; the baseline's `kubectl patch` is a PATCH,
//! read here from the marks' scrapes the same way.

use crate::apimetrics::{bucket_delta, Labels};
use crate::window::{Figures, Mark};

const DURATION: &str = "apiserver_request_duration_seconds";
const REQUESTS: &str = "apiserver_request_total";

/// Lease writes of one verb in a window.
#[derive(Debug, Clone, Default)]
pub struct Writes {
    /// Answered, every code.
    pub count: f64,
    /// Latency: cumulative buckets, sum and count.
    pub lat_buckets: Vec<(f64, f64)>,
    pub lat_sum: f64,
    pub lat_count: f64,
}

/// The Lease writes with `verb` ("PUT" or "PATCH") from `a` to `b`, whose figures are `f`.
pub fn between(a: &Mark, b: &Mark, f: &Figures, verb: &str) -> Writes {
    if verb == "PUT" {
        return Writes {
            count: f.lease_puts,
            lat_buckets: f.lat_buckets.clone(),
            lat_sum: f.lat_sum,
            lat_count: f.lat_count,
        };
    }
    let pred = |l: &Labels| l.get("resource") == "leases" && l.get("verb") == verb;
    let d = |name: &str| b.scrape.sum(name, pred) - a.scrape.sum(name, pred);
    Writes {
        count: d(REQUESTS),
        lat_buckets: bucket_delta(
            &b.scrape.buckets(DURATION, pred),
            &a.scrape.buckets(DURATION, pred),
        ),
        lat_sum: d(&format!("{DURATION}_sum")),
        lat_count: d(&format!("{DURATION}_count")),
    }
}
