//! From the phases' figures to the table's rows (each beside its budget, from issue #13) and
//! the notes under it (load, windows, what each column ran). Pure: no IO.

use testplane::RequestRecord;

use crate::agent::{Boot, Long};
use crate::baseline::Base;
use crate::stats::{self, Window};
use crate::table::{fmt, times, Budget, Row};
use crate::Cfg;

pub struct Figures<'a> {
    pub cfg: &'a Cfg,
    pub boot: &'a Boot,
    pub long: &'a Long,
    pub base: &'a Base,
    pub requests: &'a [RequestRecord],
}

/// The windows the rows are about.
struct Windows {
    first: Option<Window>,
    steady: Option<Window>,
    baseline: Option<Window>,
    floor: Option<Window>,
}

impl Figures<'_> {
    fn windows(&self) -> Windows {
        let (cfg, r) = (self.cfg, self.requests);
        Windows {
            first: stats::window(&self.long.bootlet, r, 0, cfg.window1),
            steady: stats::window(&self.long.bootlet, r, cfg.window1, cfg.steady),
            baseline: stats::window(&self.base.seen, r, 0, cfg.baseline),
            // The floor's sample 0 follows its Lease create; its window starts at its first PUT.
            floor: stats::window(&self.long.floor, r, 1, cfg.steady),
        }
    }
}

fn median(v: &[f64]) -> Option<f64> {
    stats::percentile(v, 0.5)
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.1}–{hi:.1}, {} runs", v.len())
}

fn mib(kib: Option<u64>) -> Option<f64> {
    kib.map(|k| k as f64 / 1024.0)
}

fn bytes(w: &Option<Window>) -> (String, Option<f64>) {
    match w {
        Some(w) => (
            format!(
                "{:.0} B / {:.0} B",
                w.bytes_per_renewal.0, w.bytes_per_renewal.1
            ),
            Some(w.bytes_per_renewal.0 + w.bytes_per_renewal.1),
        ),
        None => ("n/a".into(), None),
    }
}

fn deviation(f: &Figures, seen: &crate::track::Seen) -> (String, Option<f64>) {
    let writes = stats::lease_renewals(f.requests, &seen.conns);
    let d = stats::deviations_ms(&writes, f.cfg.interval);
    let (p50, p99) = (stats::percentile(&d, 0.5), stats::percentile(&d, 0.99));
    match (p50, p99) {
        (Some(a), Some(b)) => (
            format!("p50 {a:.1} ms, p99 {b:.1} ms ({} intervals)", d.len()),
            Some(b),
        ),
        _ => ("n/a".into(), None),
    }
}

pub fn rows(f: &Figures) -> Vec<Row> {
    let w = f.windows();
    let cpu = |w: &Option<Window>| w.as_ref().map(|w| w.cpu_ms_per_renewal);
    let mut rows = vec![];

    let cert = median(&f.boot.cert_ms);
    rows.push(
        Row::new("process start → certificate on disk (approver answers at once)")
            .budget("≤ 50 ms", Budget::AtMost(50.0), cert)
            .bootlet(format!(
                "median {} ({})",
                fmt(cert, 1, " ms"),
                range(&f.boot.cert_ms)
            ))
            .baseline(format!("{:.0} ms (1 run)", f.base.cert_ms))
            .ratio(times(Some(f.base.cert_ms), cert).1),
    );
    let ready = median(&f.boot.ready_ms);
    rows.push(
        Row::new("process start → READY (bootlet: READY=1 on the notify socket; baseline: its kubeconfig on disk)")
            .bootlet(format!("median {} ({})", fmt(ready, 1, " ms"), range(&f.boot.ready_ms)))
            .baseline(format!("{:.0} ms (1 run)", f.base.kubeconfig_ms))
            .ratio(times(Some(f.base.kubeconfig_ms), ready).1),
    );

    let (first, steady) = (cpu(&w.first), cpu(&w.steady));
    let (base_cpu, floor_cpu) = (cpu(&w.baseline), cpu(&w.floor));
    rows.push(
        Row::new(format!(
            "CPU per renewal, window 1: the first {} renewals after bootstrap, all threads, `/metrics` on",
            f.cfg.window1
        ))
        .budget("≤ 0.5 ms", Budget::AtMost(0.5), first)
        .bootlet(fmt(first, 3, " ms"))
        .ratio(format!("{} of steady", times(first, steady).1)),
    );
    rows.push(
        Row::new(format!(
            "CPU per renewal, steady window: the {} renewals after window 1, `/metrics` on (baseline: its own {})",
            f.cfg.steady, f.cfg.baseline
        ))
        .budget("≤ 0.5 ms", Budget::AtMost(0.5), steady)
        .bootlet(fmt(steady, 3, " ms"))
        .baseline(fmt(base_cpu, 1, " ms"))
        .floor(fmt(floor_cpu, 3, " ms")),
    );
    let (vs_base, vs_base_text) = times(base_cpu, steady);
    rows.push(
        Row::new("CPU per renewal: baseline ÷ bootlet (steady)")
            .budget("≥ 100×", Budget::AtLeast(100.0), vs_base)
            .ratio(vs_base_text),
    );
    let (vs_floor, vs_floor_text) = times(steady, floor_cpu);
    rows.push(
        Row::new("CPU per renewal: bootlet ÷ floor (same window, both HTTP/2 + mTLS, both a child process)")
            .budget("≤ 1.3×", Budget::AtMost(1.3), vs_floor)
            .ratio(vs_floor_text),
    );
    let wake = |w: &Option<Window>| w.as_ref().and_then(|w| w.wakeups_per_renewal);
    rows.push(
        Row::new("wake-ups per renewal (times scheduled in, all threads)")
            .bootlet(format!(
                "{} (window 1), {} (steady)",
                fmt(wake(&w.first), 1, ""),
                fmt(wake(&w.steady), 1, "")
            ))
            .floor(fmt(wake(&w.floor), 1, "")),
    );

    let steady_rss = mib(w.steady.as_ref().and_then(|w| w.rss_max_kib));
    let base_rss = match (f.base.bash_rss_kib, f.base.maxrss_kib) {
        (Some(bash), Some(kubectl)) => Some((bash + kubectl) as f64 / 1024.0),
        _ => None,
    };
    rows.push(
        Row::new("steady RSS (bootlet, floor: most VmRSS at the steady window's samples; baseline: bash + its largest child's peak)")
            .budget("≤ 10 MiB", Budget::AtMost(10.0), steady_rss)
            .bootlet(fmt(steady_rss, 1, " MiB"))
            .baseline(match (f.base.bash_rss_kib, f.base.maxrss_kib) {
                (Some(b), Some(k)) => format!(
                    "{:.1} MiB (bash {:.1} + kubectl {:.1})",
                    (b + k) as f64 / 1024.0,
                    b as f64 / 1024.0,
                    k as f64 / 1024.0
                ),
                _ => "n/a (no GNU time)".into(),
            })
            .floor(fmt(mib(w.floor.as_ref().and_then(|w| w.rss_max_kib)), 1, " MiB"))
            .ratio(times(base_rss, steady_rss).1),
    );
    let peak = mib(Some(f.boot.hwm_kib.max(f.long.hwm_kib.unwrap_or(0))));
    rows.push(
        Row::new("peak RSS (VmHWM over every bootstrap run and the followed node's whole life)")
            .budget("≤ 10 MiB", Budget::AtMost(10.0), peak)
            .bootlet(fmt(peak, 1, " MiB")),
    );

    let reqs = |w: &Option<Window>| w.as_ref().map(|w| w.requests_per_renewal);
    rows.push(
        Row::new("requests per renewal (steady window; bootlet's window 1 in brackets)")
            .budget("1", Budget::AtMost(1.0), reqs(&w.steady))
            .bootlet(format!(
                "{} ({})",
                fmt(reqs(&w.steady), 2, ""),
                fmt(reqs(&w.first), 2, "")
            ))
            .baseline(fmt(reqs(&w.baseline), 2, ""))
            .floor(fmt(reqs(&w.floor), 2, ""))
            .ratio(times(reqs(&w.baseline), reqs(&w.steady)).1),
    );
    let (b_text, b_total) = bytes(&w.steady);
    let (base_text, base_total) = bytes(&w.baseline);
    rows.push(
        Row::new("bytes on the wire per renewal, request / response (TLS records included, at the server's socket)")
            .bootlet(format!("{b_text} (window 1: {})", bytes(&w.first).0))
            .baseline(base_text)
            .floor(bytes(&w.floor).0)
            .ratio(times(base_total, b_total).1),
    );
    let hs = |w: &Option<Window>| w.as_ref().map(|w| w.handshakes_per_hour);
    rows.push(
        Row::new("TLS handshakes per hour (steady window, scaled; bootlet's window 1 in brackets)")
            .bootlet(format!(
                "{} ({})",
                fmt(hs(&w.steady), 0, ""),
                fmt(hs(&w.first), 0, "")
            ))
            .baseline(fmt(hs(&w.baseline), 0, ""))
            .floor(fmt(hs(&w.floor), 0, "")),
    );
    let (dev, dev_p99) = deviation(f, &f.long.bootlet);
    rows.push(
        Row::new("renewal interval deviation |interval − nominal| between Lease updates (bootlet: both windows)")
            .budget("p99 ≤ 50 ms", Budget::AtMost(50.0), dev_p99)
            .bootlet(dev)
            .baseline(deviation(f, &f.base.seen).0)
            .floor(deviation(f, &f.long.floor).0),
    );
    rows.push(
        Row::new("`/metrics` endpoint during every bootlet run").bootlet(format!(
            "on (`--metrics-bind-address {}`); one GET /metrics after the CPU windows: {}",
            f.long.metrics_addr, f.long.scrape
        )),
    );
    rows
}

/// What the table ran on and how, one line each.
/// `machine` is the line about the load and the cores.
pub fn notes(f: &Figures, machine: String) -> Vec<String> {
    let cfg = f.cfg;
    let ms = cfg.interval.as_millis();
    let mut notes = vec![
        machine,
        format!(
            "Renewal interval {ms} ms for all three. Each window runs from one sample to another, a sample taken half an interval after a Lease write (the process asleep); window 1 starts half an interval after bootlet's first Lease write."
        ),
        "bootlet: the release binary, a fresh node (CSR approved at once, Node object present), `RUST_LOG=warn`; CPU from /proc/PID/task/*/schedstat over every thread it ever had.".into(),
        format!(
            "baseline: bench/baseline.sh under bash with openssl and `{}`, `while sleep {}; do kubectl patch lease …; done`, a fresh HOME (cold kubectl cache); CPU = utime+stime+cutime+cstime of the shell (10 ms ticks).",
            cfg.kubectl,
            cfg.interval.as_secs_f64()
        ),
        "floor: bench/src/bin/floor.rs's child mode, a bare reqwest PUT of a Lease over HTTP/2 + mTLS (as bootlet's Lease connection speaks to the testplane) on one keep-alive connection, woken by bootlet's timerfd Ticker, no bootlet code; run in the steady window beside bootlet, half an interval out of phase.".into(),
    ];
    notes.push(match (cfg.under_systemd, f.long.notify_datagrams) {
        (true, Some(n)) => format!(
            "The followed bootlet ran as under systemd (NOTIFY_SOCKET, WATCHDOG_USEC=30s): {n} datagrams to the notify socket during its windows."
        ),
        _ => "The followed bootlet ran without NOTIFY_SOCKET (BENCH_UNDER_SYSTEMD=1 adds it and WATCHDOG_USEC); the bootstrap runs had a notify socket for READY=1.".into(),
    });
    notes
}
