//! The fleet's report on the real cluster: the return spread after a kube-apiserver restart
//! as histograms (slots of the interval, seconds after `/readyz`), the first minute against
//! a steady one, and the API Priority and Fairness minute. Rendering only.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

pub fn restart_report(
    steady: &Figures,
    back: &Figures,
    first: &HashMap<String, SystemTime>,
    ready: SystemTime,
    down: Duration,
    before_ready: f64,
    n: usize,
) -> String {
    let mut out = String::new();
    let times: Vec<f64> = first.values().map(|t| epoch(*t)).collect();
    let h = slots(&times);
    let used = h.iter().filter(|&&c| c > 0).count();
    let fair = n as f64 / 10.0;
    let dense = h.iter().filter(|&&c| c as f64 >= fair / 2.0).count();
    writeln!(
        out,
        "- kube-apiserver SIGKILLed and started again: /readyz ok {:.1}s after the kill",
        down.as_secs_f64()
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
        fair / 2.0, if used >= 6 { "PASS" } else { "FAIL" }).ok();
    out.push_str(&bars(&h, &|i| format!("{i}-{}s", i + 1)));
    let since: Vec<f64> = times.iter().map(|t| t - epoch(ready)).collect();
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
    let row = |what: &str, s: f64, b: f64| {
        format!(
            "| {what} | {s:.1} | {b:.1} | {:.2} |\n",
            if s > 0.0 { b / s } else { 0.0 }
        )
    };
    out.push_str(
        "\n| minute | steady | first after /readyz | first ÷ steady |\n|---|---:|---:|---:|\n",
    );
    out.push_str(&row(
        "kube-apiserver CPU (ms)",
        steady.api_cpu_ns / 1e6,
        back.api_cpu_ns / 1e6,
    ));
    out.push_str(&row(
        "node requests",
        steady.node_requests,
        back.node_requests,
    ));
    out.push_str(&row(
        "every request (any client)",
        steady.all_requests,
        back.all_requests,
    ));
    out.push_str(&row("Lease PUTs", steady.lease_puts, back.lease_puts));
    out.push_str(&row(
        "connections (TLS handshakes) at the relay",
        steady.relay.conns as f64,
        back.relay.conns as f64,
    ));
    out.push_str(&row(
        "nodes' CPU (ms, all agents)",
        steady.agents_cpu_ns / 1e6,
        back.agents_cpu_ns / 1e6,
    ));
    writeln!(out, "\n- node requests the new kube-apiserver counted before /readyz: {before_ready:.0}; the minute's figures are per 60 s (steady {:.1}s, after {:.1}s)", steady.secs, back.secs).ok();
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
        .sum("apiserver_request_total", |l| l.get("code") == "429");
    let rejected = end
        .scrape
        .sum("apiserver_flowcontrol_rejected_requests_total", |_| true);
    let terminated = end.scrape.sum("apiserver_request_terminations_total", |l| {
        l.get("code") == "429"
    });
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
