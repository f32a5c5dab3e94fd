//! `bash bench/fleet.sh N --real`: first, with no agent at all, kube-apiserver's own warm-up
//! (an idle steady minute, then kube-apiserver SIGKILLed and started again exactly as below,
//! and its first minute after `/readyz`); then N agents of one kind started together against
//! the real cluster (bootlet's, then the peer's if FLEET_REAL_PEER is not 0, as many as fit),
//! and: a steady minute; kube-apiserver SIGKILLed and started again as an upgrade restarts
//! it, the return spread (each node's first Lease renewal after the restart, from the Leases'
//! renewTime) and the first minute after `/readyz` against the steady one, raw and net of the
//! warm-up; then kube-apiserver restarted with a low `--max-requests-inflight` and
//! `--max-mutating-requests-inflight` (API Priority and Fairness with a couple of seats): its
//! 429s and how the agents paced.
//!
//! Every measured minute (idle or not, steady or after `/readyz`) carries the same load of
//! the driver's own: a mark at each end and a watch on the node Leases for its first
//! `RETURN_WATCH` (45 s), in requests of `WATCH_EACH` each, every one starting with the
//! Leases' current state (so no renewal between two requests is missed). After a restart
//! that watch finds each node's first renewal; in a steady minute it finds nothing anyone
//! reads, but costs the server what it costs after the restart.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use testplane::kube::Cluster;
use tokio::time::Instant;

use crate::agents::{delete_nodes, Agents, Kind, Set, Stage};
use crate::fleet_report::{
    apf_report, peers_note, restart_report, warmup_report, Minute, Restart, Watched, RETURN_WATCH,
};
use crate::relay::Relay;
use crate::window::{between, mark};

const API: &str = "kube-apiserver";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const CERT_LIMIT: Duration = Duration::from_secs(900);
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
const MINUTE: Duration = Duration::from_secs(60);
/// One watch request's `timeoutSeconds` (under the driver's 15 s bound on a request).
const WATCH_EACH: Duration = Duration::from_secs(9);
/// From the cluster's start to the idle steady minute: past the cluster's own start.
const IDLE_SETTLE: Duration = Duration::from_secs(60);
/// A peer's private memory (RssAnon) before any peer ran here: `real bench` measured 15.8 to
/// 15.9 MiB at N = 500 (`REAL_PEER_ANON_MIB` overrides; `peers_that_fit` adds half).
const PEER_ANON_MIB: u64 = 16;

pub async fn run(n: usize) -> Result<String, String> {
    // Not pinned: kube-apiserver is started again from the driver, on the driver's CPUs.
    let (c, _) = crate::setup::cluster("fleet-real", false).await?;
    let result = measure(&c, n).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster, n: usize) -> Result<String, String> {
    let set = Set::up(c).await?;
    let stage = set.stage(c);
    let relay = &set.relay;
    let mut report = format!(
        "# fleet on the real cluster (Kubernetes {}), N = {n} requested\n\n",
        c.release()
    );

    // kube-apiserver's own warm-up, before any agent.
    eprintln!(
        "fleet-real: no agent: an idle minute, then kube-apiserver restarted and its first minute"
    );
    tokio::time::sleep(IDLE_SETTLE).await;
    let idle = restart(c, None, relay).await?;
    report.push_str(&warmup_report(&idle));

    let mut kinds = vec![];
    if crate::setup::num("FLEET_REAL_BOOTLET", 1) != 0 {
        kinds.push((Kind::Bootlet, n));
    }
    if crate::setup::num("FLEET_REAL_PEER", 1) != 0 {
        kinds.push((Kind::Peer, n));
    }
    let mut peer_peak: Option<f64> = None;
    let mut bootlet_peak: Option<f64> = None;
    for (kind, want) in kinds {
        let k = match kind {
            Kind::Bootlet => want,
            Kind::Peer => {
                let anon_mib = crate::setup::num("REAL_PEER_ANON_MIB", PEER_ANON_MIB);
                let available = crate::setup::mem_available_kib();
                let k = crate::setup::peers_that_fit(want, anon_mib as f64 * 1024.0);
                report.push_str(&peers_note(k, want, available, anon_mib));
                k
            }
        };
        let (text, peak) = one_kind(stage, kind, k, &idle).await?;
        match kind {
            Kind::Bootlet => bootlet_peak = Some(peak),
            Kind::Peer => peer_peak = Some(peak),
        }
        report.push_str(&text);
    }
    if let (Some(b), Some(p)) = (bootlet_peak, peer_peak) {
        writeln!(
            report,
            "peak RSS per agent: bootlet {:.1} MiB, peer {:.1} MiB (bootlet ÷ peer {:.2})",
            b / 1024.0,
            p / 1024.0,
            b / p
        )
        .ok();
    }
    std::fs::write("target/bench-fleet-real.md", &report)
        .map_err(|e| format!("target/bench-fleet-real.md: {e}"))?;
    Ok(report)
}

/// One kind's whole run; returns its report and the mean peak RSS per agent (KiB).
async fn one_kind(
    stage: Stage<'_>,
    kind: Kind,
    n: usize,
    idle: &Restart,
) -> Result<(String, f64), String> {
    let Stage { c, relay, .. } = stage;
    let label = kind.label();
    let prefix = format!("fleet-{label}");
    let mut out = format!("## {n} × {label}\n\n");
    let started = Instant::now();
    eprintln!("fleet-real: {n} {label} agents starting");
    let mut agents = Agents::join(stage, kind, n, &prefix).await?;
    agents.wait_certs(CERT_LIMIT).await?;
    writeln!(
        out,
        "- all {n} certificates on disk {:.1}s after the first start",
        started.elapsed().as_secs_f64()
    )
    .ok();
    agents
        .hold(
            crate::setup::secs("FLEET_REAL_SETTLE_SECONDS", 30),
            SAMPLE_EVERY,
        )
        .await?;

    // A steady minute, the restart and the first minute after it.
    let lines_before = agents.log_total();
    let fleet = restart(c, Some(&mut agents), relay).await?;
    let end = &fleet.steady.b;
    let peak = end.agents.hwm_kib_sum as f64 / n as f64;
    writeln!(
        out,
        "- RSS at the steady minute's end: {:.1} MiB in all, {:.1} MiB per agent (peak {:.1} MiB \
         per agent); private (RssAnon) {:.1} MiB per agent; MemAvailable {} MiB",
        end.agents.rss_kib_sum as f64 / 1024.0,
        end.agents.rss_kib_sum as f64 / 1024.0 / n as f64,
        peak / 1024.0,
        end.agents.anon_kib_sum as f64 / 1024.0 / n as f64,
        crate::setup::mem_available_kib() / 1024
    )
    .ok();
    out.push_str(&restart_report(&fleet, idle, n));
    let lines_restart = agents.log_total() - lines_before;
    writeln!(
        out,
        "- agents' log lines over the restart and the minute after: {lines_restart}"
    )
    .ok();

    // API Priority and Fairness with a couple of seats.
    let inflight = crate::setup::num("FLEET_REAL_INFLIGHT", 1);
    let mutating = crate::setup::num("FLEET_REAL_MUTATING_INFLIGHT", 1);
    let orig = c.component_args(API).await.ok_or("no kube-apiserver")?;
    let mut low = orig.clone();
    low.push(format!("--max-requests-inflight={inflight}"));
    low.push(format!("--max-mutating-requests-inflight={mutating}"));
    eprintln!("fleet-real: restart kube-apiserver with --max-requests-inflight={inflight} --max-mutating-requests-inflight={mutating}");
    c.stop_component(API).await;
    c.set_component_args(API, low).await;
    let lines_before = agents.log_total();
    let lines_429 = agents.log_lines("429")
        + agents.log_lines("Too Many Requests")
        + agents.log_lines("TooManyRequests");
    c.start_component(API)
        .await
        .map_err(|e| format!("restart kube-apiserver: {e}"))?;
    let p0 = mark(c, Some(&mut agents), relay).await?;
    agents.hold(MINUTE, SAMPLE_EVERY).await?;
    let p1 = mark(c, Some(&mut agents), relay).await?;
    let apf = between(&p0, &p1);
    let lines = agents.log_total() - lines_before;
    let lines_429 = agents.log_lines("429")
        + agents.log_lines("Too Many Requests")
        + agents.log_lines("TooManyRequests")
        - lines_429;
    out.push_str(&apf_report(
        &apf, &p1, inflight, mutating, lines, lines_429, n,
    ));
    c.stop_component(API).await;
    c.set_component_args(API, orig).await;
    c.start_component(API)
        .await
        .map_err(|e| format!("restart kube-apiserver: {e}"))?;
    agents.stop().await;
    delete_nodes(c, &prefix).await?;
    out.push('\n');
    Ok((out, peak))
}

/// A steady minute; kube-apiserver SIGKILLed and, after `FLEET_REAL_DOWN_SECONDS` (5),
/// started again with the same flags, as an upgrade restarts the static pod; the first
/// minute after its `/readyz`. With agents or without (the server's own warm-up): the
/// same steps, the same driver's load.
async fn restart(
    c: &Cluster,
    mut agents: Option<&mut Agents>,
    relay: &Relay,
) -> Result<Restart, String> {
    let steady = minute(c, agents.as_deref_mut(), relay, testplane::wall_now()).await?;
    let killed = testplane::wall_now();
    let killed_at = Instant::now();
    eprintln!("fleet-real: SIGKILL kube-apiserver");
    c.kill_component(API).await;
    wait(
        agents.as_deref_mut(),
        crate::setup::secs("FLEET_REAL_DOWN_SECONDS", 5),
    )
    .await?;
    c.start_component(API)
        .await
        .map_err(|e| format!("restart kube-apiserver: {e}"))?;
    let ready = testplane::wall_now();
    let down = killed_at.elapsed();
    eprintln!("fleet-real: kube-apiserver ready again after {down:?}");
    let first = minute(c, agents, relay, killed).await?;
    Ok(Restart {
        steady,
        first,
        ready,
        down,
    })
}

/// One measured minute from now: a mark; the Lease watch for `RETURN_WATCH` (renewals after
/// `since`) while the agents are sampled; a mark 60 s after the first.
async fn minute(
    c: &Cluster,
    mut agents: Option<&mut Agents>,
    relay: &Relay,
    since: SystemTime,
) -> Result<Minute, String> {
    let a = mark(c, agents.as_deref_mut(), relay).await?;
    let rest = MINUTE.saturating_sub(a.at.elapsed());
    let (watched, held) = tokio::join!(watch_leases(c, since), wait(agents.as_deref_mut(), rest));
    held?;
    let b = mark(c, agents, relay).await?;
    let f = between(&a, &b);
    Ok(Minute { a, b, f, watched })
}

/// Sample the agents (an agent that dies fails) or, without agents, sleep.
async fn wait(agents: Option<&mut Agents>, dur: Duration) -> Result<(), String> {
    match agents {
        Some(agents) => agents.hold(dur, SAMPLE_EVERY).await.map(|_| ()),
        None => {
            tokio::time::sleep(dur).await;
            Ok(())
        }
    }
}

/// Each node's first renewTime after `since`, from watches on the node Leases back to back
/// for `RETURN_WATCH`: each request without a resourceVersion, so it starts with every
/// Lease's current state (what renewed before it, or between two requests) and goes on
/// with the changes for `WATCH_EACH`.
async fn watch_leases(c: &Cluster, since: SystemTime) -> Watched {
    let mut w = Watched::default();
    let until = Instant::now() + RETURN_WATCH;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return w;
        }
        let each = WATCH_EACH.min(left).as_secs().max(1);
        let path = format!("{LEASES}?watch=1&timeoutSeconds={each}");
        let began = Instant::now();
        w.requests += 1;
        match c.api("GET", &path, None).await {
            Ok((200, body)) => record(&mut w, &body, since),
            _ => {
                // Not served (yet): again in a second, as long as the watch lasts.
                w.failed += 1;
                let next = began + Duration::from_secs(1);
                tokio::time::sleep_until(next.min(until)).await;
            }
        }
    }
}

/// Count a watch's events and keep each Lease's earliest renewTime after `since`.
fn record(w: &mut Watched, body: &str, since: SystemTime) {
    for event in serde_json::Deserializer::from_str(body).into_iter::<Value>() {
        let Ok(event) = event else { break };
        w.events += 1;
        let lease = &event["object"];
        let name = lease["metadata"]["name"].as_str().unwrap_or_default();
        let Some(t) = lease["spec"]["renewTime"].as_str().and_then(parse_time) else {
            continue;
        };
        if t > since {
            let first = w.first.entry(name.to_string()).or_insert(t);
            *first = (*first).min(t);
        }
    }
}

fn parse_time(s: &str) -> Option<SystemTime> {
    let t: jiff::Timestamp = s.parse().ok()?;
    Some(SystemTime::from(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_keeps_each_leases_first_renewal_after_the_kill() {
        let lease = |name: &str, t: &str| {
            format!(
                r#"{{"type":"MODIFIED","object":{{"metadata":{{"name":"{name}"}},"spec":{{"renewTime":"{t}"}}}}}}"#
            )
        };
        let body = [
            lease("a", "2026-01-01T00:00:01.000000Z"),
            lease("a", "2026-01-01T00:00:11.000000Z"),
            lease("b", "2026-01-01T00:00:09.500000Z"),
            lease("b", "2026-01-01T00:00:04.000000Z"),
        ]
        .join("\n");
        let since = parse_time("2026-01-01T00:00:05Z").unwrap();
        let mut w = Watched::default();
        record(&mut w, &body, since);
        assert_eq!(w.events, 4);
        let at = |s| parse_time(s).unwrap();
        assert_eq!(w.first["a"], at("2026-01-01T00:00:11Z"));
        assert_eq!(w.first["b"], at("2026-01-01T00:00:09.5Z"));
    }
}
