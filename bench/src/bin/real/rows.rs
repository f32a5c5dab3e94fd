//! One N's rows of `real bench`'s table: every figure for each subject that ran (bootlet,
//! the peer, the floor, the baseline), empty where a figure does not apply to a subject.

use crate::agents::Sample;
use crate::renewals::Writes;
use crate::subject::Subject;
use crate::table::{Row, Unit};
use crate::window::Figures;

/// One group's figures, net of the idle cluster where they are server-side.
pub struct Group {
    pub subject: Subject,
    pub n: usize,
    pub cert_p50: Option<f64>,
    pub cert_max: Option<f64>,
    pub f: Figures,
    pub end: Sample,
    pub renewals: f64,
    pub requests: f64,
    pub api_cpu_ns: f64,
    /// Its renewals as kube-apiserver saw them (PUTs; the baseline's PATCHes).
    pub writes: Writes,
    /// The baseline's peak RSS per shell, from GNU time (KiB); empty for the others.
    pub peaks: Vec<u64>,
}

/// The rows of the groups run for `n`.
pub fn rows_for(n: usize, groups: &[Group]) -> Vec<Row> {
    let fewer: Vec<String> = groups
        .iter()
        .filter(|g| g.n != n)
        .map(|g| format!("{} {}", g.subject.label(), g.n))
        .collect();
    let ns = if fewer.is_empty() {
        format!("N = {n}")
    } else {
        format!("N = {n} ({})", fewer.join(", "))
    };
    let row = |what: &str, unit, f: &dyn Fn(&Group) -> Option<f64>| {
        let values = Subject::ALL.map(|s| groups.iter().find(|g| g.subject == s).and_then(f));
        Row::all(format!("{ns}: {what}"), unit, values)
    };
    let per = |g: &Group, v: f64| Some(v / g.renewals);
    let per_agent = |g: &Group, kib: u64| Some(kib as f64 / g.end.alive.max(1) as f64);
    let baseline = |g: &Group| g.subject == Subject::Baseline;
    let q =
        |g: &Group, x: f64| crate::apimetrics::quantile(&g.writes.lat_buckets, x).map(|s| s * 1e9);
    vec![
        row("renewals in the window", Unit::Num(0), &|g| {
            Some(g.renewals)
        }),
        row("start → certificate on disk, p50", Unit::Secs, &|g| {
            g.cert_p50
        }),
        row("start → certificate on disk, max", Unit::Secs, &|g| {
            g.cert_max
        }),
        row("node CPU per renewal (all threads)", Unit::Ms, &|g| {
            per(g, g.f.agents_cpu_ns)
        })
        .budget(1.0 / 3.0, "≤ 1/3"),
        row("node wake-ups per renewal", Unit::Num(1), &|g| {
            (!baseline(g)).then(|| g.f.agents_wakeups / g.renewals)
        }),
        row("RSS per agent, steady (mean VmRSS)", Unit::Mib, &|g| {
            per_agent(g, g.end.rss_kib_sum)
        })
        .budget(1.0 / 3.0, "≤ 1/3"),
        row("peak RSS per agent (mean VmHWM)", Unit::Mib, &|g| {
            if baseline(g) {
                let sum: u64 = g.peaks.iter().sum();
                (!g.peaks.is_empty()).then(|| sum as f64 / g.peaks.len() as f64)
            } else {
                per_agent(g, g.end.hwm_kib_sum)
            }
        }),
        row("peak RSS, largest agent (VmHWM)", Unit::Mib, &|g| {
            if baseline(g) {
                g.peaks.iter().max().map(|&k| k as f64)
            } else {
                Some(g.end.hwm_kib_max as f64)
            }
        }),
        row("private memory per agent (mean RssAnon)", Unit::Mib, &|g| {
            per_agent(g, g.end.anon_kib_sum)
        }),
        row("requests per renewal", Unit::Num(2), &|g| {
            per(g, g.requests)
        }),
        row("bytes per renewal, node → server", Unit::Num(0), &|g| {
            per(g, g.f.relay.up as f64)
        }),
        row("bytes per renewal, server → node", Unit::Num(0), &|g| {
            per(g, g.f.relay.down as f64)
        }),
        row("bytes per renewal, both ways", Unit::Num(0), &|g| {
            per(g, (g.f.relay.up + g.f.relay.down) as f64)
        })
        .budget(1.0, "≤ 1"),
        row("TLS handshakes per hour per agent", Unit::Num(2), &|g| {
            Some(g.f.relay.conns as f64 * 3600.0 / g.f.secs / g.n as f64)
        }),
        row(
            "kube-apiserver CPU per renewal (net of idle)",
            Unit::Ms,
            &|g| per(g, g.api_cpu_ns),
        )
        .budget(1.0, "≤ 1"),
        row("Lease PUT latency, mean (apiserver)", Unit::Ms, &|g| {
            (g.writes.lat_count > 0.0).then(|| g.writes.lat_sum / g.writes.lat_count * 1e9)
        }),
        row(
            "Lease PUT latency, p50 (apiserver buckets)",
            Unit::Ms,
            &|g| q(g, 0.5),
        ),
        row(
            "Lease PUT latency, p99 (apiserver buckets)",
            Unit::Ms,
            &|g| q(g, 0.99),
        ),
    ]
}
