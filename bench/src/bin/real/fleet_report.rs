//! The fleet's report on the real cluster: kube-apiserver's own warm-up after a restart (no
//! agent), how many peers fit, the return spread after a kube-apiserver restart as histograms
//! (slots of the interval, seconds after `/readyz`), the first minute against a steady one
//! (raw, and net of the warm-up), the return's TLS handshakes and the server's RSS, and the
//! API Priority and Fairness minute. What a measured minute and a restart hold, and the
//! rendering.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bootlet_bench::table::verdict;

use crate::window::{Figures, Mark};

/// How long after `/readyz` the Leases are watched for each node's first renewal.
pub const RETURN_WATCH: Duration = Duration::from_secs(45);

/// Seconds since the epoch, as f64.
fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The ten 1-second slots of the 10 s interval each first renewal falls in.
pub fn slots(times: &[f64]) -> [usize; 10] {
    let mut h = [0usize; 10];
    for t in times {
        h[(t.rem_euclid(10.0).floor() as usize).min(9)] += 1;
    }
    h
}

fn bars(h: &[usize], label: &dyn Fn(usize) -> String) -> String {
    let most = h.iter().copied().max().unwrap_or(0).max(1);
    h.iter()
        .enumerate()
        .map(|(i, &c)| {
            format!(
                "    {:>7} {:>5} {}\n",
                label(i),
                c,
                "#".repeat(c * 50 / most)
            )
        })
        .collect()
}

/// One measured minute: its marks, its figures and what the driver's Lease watch saw.
pub struct Minute {
    pub a: Mark,
    pub b: Mark,
    pub f: Figures,
    pub watched: Watched,
}

/// What the driver's watch on the node Leases saw over a minute, and what it cost: each
/// node's first renewTime after the start it was given, the requests and events.
#[derive(Debug, Default)]
pub struct Watched {
    pub first: HashMap<String, SystemTime>,
    pub requests: usize,
    pub failed: usize,
    pub events: usize,
}

/// A steady minute, kube-apiserver SIGKILLed and started again, and the first minute after
/// its `/readyz`: with the fleet, or with no agent (the server's own warm-up).
pub struct Restart {
    pub steady: Minute,
    pub first: Minute,
    /// `/readyz` ok, and how long after the kill.
    pub ready: SystemTime,
    pub down: Duration,
}

impl Restart {
    /// kube-apiserver's CPU in the first minute less in the steady one, per 60 s (ns): with
    /// no agent, what a fresh server spends warming up by itself.
    pub fn warmup_cpu_ns(&self) -> f64 {
        per_minute(&self.first.f, self.first.f.api_cpu_ns)
            - per_minute(&self.steady.f, self.steady.f.api_cpu_ns)
    }

    /// Connections at the relay from the steady minute's end (just before the kill) to
    /// `/readyz`'s mark: the handshakes of the return made before `/readyz`.
    pub fn conns_before_ready(&self) -> u64 {
        self.first.a.relay.conns - self.steady.b.relay.conns
    }
}

/// kube-apiserver's Go garbage collection over a minute, from its own /metrics: the
/// runtime's estimate of its CPU (ns) and the cycles.
fn gc(m: &Minute) -> (f64, f64) {
    let d = |name: &str| m.b.scrape.sum(name, |_| true) - m.a.scrape.sum(name, |_| true);
    (
        d("go_cpu_classes_gc_total_cpu_seconds_total") * 1e9,
        d("go_gc_cycles_total_gc_cycles_total"),
    )
}

/// `x`, measured over `f`'s window, per 60 s.
fn per_minute(f: &Figures, x: f64) -> f64 {
    x * 60.0 / f.secs.max(1e-9)
}

fn ratio(num: f64, den: f64) -> String {
    if den > 0.0 {
        format!("{:.2}", num / den)
    } else {
        "—".into()
    }
}

/// PASS when a ratio is at most one.
fn at_most_one(r: f64) -> &'static str {
    verdict(r <= 1.0)
}

fn watch_line(what: &str, m: &Minute) -> String {
    format!(
        "{what} {} watch requests ({} not served), {} events",
        m.watched.requests, m.watched.failed, m.watched.events
    )
}

/// The server's own warm-up, measured with no agent.
pub fn warmup_report(idle: &Restart) -> String {
    let (s, f) = (&idle.steady, &idle.first);
    let mut out = String::from("## kube-apiserver's own warm-up (no agent)\n\n");
    writeln!(
        out,
        "- an idle steady minute; then kube-apiserver SIGKILLed and started again exactly as \
         for the fleets below, /readyz ok {:.1}s after the kill; then its first minute after \
         /readyz; the driver's Lease watch in both ({}; {})",
        idle.down.as_secs_f64(),
        watch_line("steady", s),
        watch_line("first", f)
    )
    .ok();
    out.push_str(
        "\n| minute (per 60 s) | idle steady | idle, first after /readyz | first − steady |\n\
         |---|---:|---:|---:|\n",
    );
    let row = |what: &str, a: f64, b: f64| format!("| {what} | {a:.1} | {b:.1} | {:.1} |\n", b - a);
    out.push_str(&row(
        "kube-apiserver CPU (ms)",
        per_minute(&s.f, s.f.api_cpu_ns) / 1e6,
        per_minute(&f.f, f.f.api_cpu_ns) / 1e6,
    ));
    let (gc_s, gc_f) = (gc(s), gc(f));
    out.push_str(&row(
        "of which Go garbage collection (ms, the runtime's estimate)",
        per_minute(&s.f, gc_s.0) / 1e6,
        per_minute(&f.f, gc_f.0) / 1e6,
    ));
    out.push_str(&row("Go GC cycles", gc_s.1, gc_f.1));
    out.push_str(&row(
        "every request (any client)",
        per_minute(&s.f, s.f.all_requests),
        per_minute(&f.f, f.f.all_requests),
    ));
    out.push_str(&row(
        "kube-apiserver RSS at the minute's end (MiB)",
        s.b.api_rss_kib as f64 / 1024.0,
        f.b.api_rss_kib as f64 / 1024.0,
    ));
    writeln!(
        out,
        "\n- kube-apiserver's CPU from its start to /readyz (not in any minute): {:.1} ms",
        f.a.api_cpu_ns as f64 / 1e6
    )
    .ok();
    writeln!(
        out,
        "- kube-apiserver's own warm-up: {:.1} ms of CPU in its first minute beyond a steady \
         one; taken off each fleet's first minute below (windows {:.1}s and {:.1}s)\n",
        idle.warmup_cpu_ns() / 1e6,
        s.f.secs,
        f.f.secs
    )
    .ok();
    out
}

/// How many peers run, and why.
pub fn peers_note(k: usize, want: usize, available_kib: u64, anon_mib: u64) -> String {
    let margin = crate::setup::num("REAL_MEM_MARGIN_MIB", 4096);
    let each = anon_mib as f64 * 1.5;
    let fit = (available_kib / 1024).saturating_sub(margin) as f64 / each;
    let mut out = format!(
        "- peers: MemAvailable {} MiB less the margin (REAL_MEM_MARGIN_MIB) {margin} MiB, over \
         {each:.0} MiB a peer (REAL_PEER_ANON_MIB {anon_mib} MiB of private memory, half added): \
         {} fit",
        available_kib / 1024,
        fit.floor()
    );
    if k < want {
        write!(out, "; {k} peers run, not {want}").ok();
    }
    out.push_str("\n\n");
    out
}

pub fn restart_report(fleet: &Restart, idle: &Restart, n: usize) -> String {
    let (steady, back) = (&fleet.steady.f, &fleet.first.f);
    let first = &fleet.first.watched.first;
    let mut out = String::new();
    let times: Vec<f64> = first.values().map(|t| epoch(*t)).collect();
    let h = slots(&times);
    let used = h.iter().filter(|&&c| c > 0).count();
    let fair = n as f64 / 10.0;
    let dense = h.iter().filter(|&&c| c as f64 >= fair / 2.0).count();
    writeln!(
        out,
        "- kube-apiserver SIGKILLed and started again: /readyz ok {:.1}s after the kill",
        fleet.down.as_secs_f64()
    )
    .ok();
    writeln!(
        out,
        "- first Lease renewal after the restart: {} of {n} nodes within {}s of /readyz",
        first.len(),
        RETURN_WATCH.as_secs()
    )
    .ok();
    writeln!(out, "- return spread over the ten 1-second slots of the interval (renewTime mod 10 s): {used}/10 slots used, {dense}/10 hold at least half a fair share ({:.0}); goal ≥ 6/10: {}",
        fair / 2.0, verdict(used >= 6)).ok();
    out.push_str(&bars(&h, &|i| format!("{i}-{}s", i + 1)));
    let since: Vec<f64> = times.iter().map(|t| t - epoch(fleet.ready)).collect();
    let mut after = [0usize; 12];
    for s in &since {
        let i = if *s < 0.0 {
            0
        } else {
            (s.floor() as usize + 1).min(11)
        };
        after[i] += 1;
    }
    writeln!(out, "- the same renewals by seconds after /readyz:").ok();
    out.push_str(&bars(&after, &|i| match i {
        0 => "before".to_string(),
        11 => "≥10s".to_string(),
        i => format!("{}-{}s", i - 1, i),
    }));

    let warmup = idle.warmup_cpu_ns();
    let (cpu_s, cpu_b) = (
        per_minute(steady, steady.api_cpu_ns),
        per_minute(back, back.api_cpu_ns),
    );
    let row =
        |what: &str, s: f64, b: f64| format!("| {what} | {s:.1} | {b:.1} | {} |\n", ratio(b, s));
    let pm = |what: &str, f: &dyn Fn(&Figures) -> f64| {
        row(
            what,
            per_minute(steady, f(steady)),
            per_minute(back, f(back)),
        )
    };
    out.push_str(
        "\n| minute (per 60 s) | steady | first after /readyz | first ÷ steady |\n|---|---:|---:|---:|\n",
    );
    out.push_str(&row("kube-apiserver CPU (ms)", cpu_s / 1e6, cpu_b / 1e6));
    out.push_str(&row(
        "kube-apiserver CPU less its own warm-up (ms)",
        cpu_s / 1e6,
        (cpu_b - warmup) / 1e6,
    ));
    let (gc_s, gc_b) = (gc(&fleet.steady), gc(&fleet.first));
    out.push_str(&row(
        "of kube-apiserver's CPU, Go garbage collection (ms, the runtime's estimate)",
        per_minute(steady, gc_s.0) / 1e6,
        per_minute(back, gc_b.0) / 1e6,
    ));
    out.push_str(&row("Go GC cycles", gc_s.1, gc_b.1));
    out.push_str(&pm("node requests", &|f| f.node_requests));
    out.push_str(&pm("every request (any client)", &|f| f.all_requests));
    out.push_str(&pm("Lease PUTs", &|f| f.lease_puts));
    out.push_str(&pm("connections (TLS handshakes) at the relay", &|f| {
        f.relay.conns as f64
    }));
    out.push_str(&pm("nodes' CPU (ms, all agents)", &|f| {
        f.agents_cpu_ns / 1e6
    }));
    out.push_str(&row(
        "kube-apiserver RSS at the minute's end (MiB)",
        fleet.steady.b.api_rss_kib as f64 / 1024.0,
        fleet.first.b.api_rss_kib as f64 / 1024.0,
    ));
    let raw = cpu_b / cpu_s.max(1.0);
    let net = (cpu_b - warmup) / cpu_s.max(1.0);
    writeln!(
        out,
        "\n- goal \"the first minute after the return costs the server no more than a steady \
         minute\", kube-apiserver CPU: raw, first ÷ steady = {:.1} ÷ {:.1} ms = {raw:.2}: {}; \
         net of its own warm-up W = the idle first minute − the idle steady minute = {:.1} − \
         {:.1} = {:.1} ms (above), (first − W) ÷ steady = {:.1} ÷ {:.1} ms = {net:.2}: {}",
        cpu_b / 1e6,
        cpu_s / 1e6,
        at_most_one(raw),
        per_minute(&idle.first.f, idle.first.f.api_cpu_ns) / 1e6,
        per_minute(&idle.steady.f, idle.steady.f.api_cpu_ns) / 1e6,
        warmup / 1e6,
        (cpu_b - warmup) / 1e6,
        cpu_s / 1e6,
        at_most_one(net)
    )
    .ok();
    let before = fleet.conns_before_ready();
    let during = back.relay.conns;
    writeln!(
        out,
        "- TLS handshakes of the return (connections at the relay): {before} from the kill to \
         /readyz, {during} in the first minute, {} in all ({:.2} per node; the steady minute: {})",
        before + during,
        (before + during) as f64 / n.max(1) as f64,
        steady.relay.conns
    )
    .ok();
    let before_ready = fleet
        .first
        .a
        .scrape
        .sum("apiserver_request_total", crate::apimetrics::node_request);
    writeln!(
        out,
        "- before /readyz, the new kube-apiserver counted {before_ready:.0} node requests and \
         spent {:.1} ms of CPU from its start (with no agent: {:.1} ms); windows {:.1}s \
         (steady) and {:.1}s (after), figures scaled to 60 s",
        fleet.first.a.api_cpu_ns as f64 / 1e6,
        idle.first.a.api_cpu_ns as f64 / 1e6,
        steady.secs,
        back.secs
    )
    .ok();
    writeln!(
        out,
        "- the driver's own load, the same in both minutes: a watch on the node Leases for the \
         first {}s ({}; {})",
        RETURN_WATCH.as_secs(),
        watch_line("steady", &fleet.steady),
        watch_line("first", &fleet.first)
    )
    .ok();
    out
}

pub fn apf_report(
    apf: &Figures,
    end: &Mark,
    inflight: u64,
    mutating: u64,
    lines: usize,
    lines_429: usize,
    n: usize,
) -> String {
    let mut out = String::new();
    let since_start_429 = end
        .scrape
        .sum("apiserver_request_total", |l| l.get("code") == "429")
        + 0.0;
    let rejected = end
        .scrape
        .sum("apiserver_flowcontrol_rejected_requests_total", |_| true)
        + 0.0;
    let terminated = end.scrape.sum("apiserver_request_terminations_total", |l| {
        l.get("code") == "429"
    }) + 0.0;
    writeln!(out, "\n- API Priority and Fairness: kube-apiserver restarted with --max-requests-inflight={inflight} --max-mutating-requests-inflight={mutating}; the minute after /readyz:").ok();
    writeln!(out, "  - 429s since its start: apiserver_request_total{{code=\"429\"}} {since_start_429:.0}, apiserver_flowcontrol_rejected_requests_total {rejected:.0}, apiserver_request_terminations_total{{code=\"429\"}} {terminated:.0}; in the minute: {:.0}", apf.too_many).ok();
    let renewals = apf.lease_puts.max(1.0);
    writeln!(out, "  - Lease PUTs {:.0} (of {} due), node requests {:.0}, requests per renewal {:.2}; connections at the relay {}",
        apf.lease_puts, n * 6, apf.node_requests, apf.node_requests / renewals, apf.relay.conns).ok();
    writeln!(out, "  - the agents' log lines over the restart and the minute: {lines} (of which naming 429/Too Many Requests: {lines_429}); kube-apiserver CPU {:.1} ms", apf.api_cpu_ns / 1e6).ok();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_seconds_mod_ten() {
        let h = super::slots(&[10.5, 21.2, 29.99, 1_700_000_003.5]);
        assert_eq!(h, [1, 1, 0, 1, 0, 0, 0, 0, 0, 1]);
    }
}
