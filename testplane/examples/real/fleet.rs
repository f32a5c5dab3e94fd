//! `bash bench/fleet.sh N --real`: N agents of one kind started together against the real
//! cluster (bootlet's, then the peer's if FLEET_REAL_PEER is not 0, as many as fit), then:
//! a steady minute; kube-apiserver SIGKILLed and started again as an upgrade restarts it,
//! the return spread (each node's first Lease renewal after the restart, from the Leases'
//! renewTime) and the first minute after `/readyz` against the steady one; then kube-apiserver
//! restarted with a low `--max-requests-inflight` and `--max-mutating-requests-inflight`
//! (API Priority and Fairness with a couple of seats): its 429s and how the agents paced.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use testplane::kube::Cluster;
use tokio::time::Instant;

use crate::agents::{delete_nodes, Agents, Kind, Stage};
use crate::fleet_report::{apf_report, restart_report, RETURN_WATCH};
use crate::relay::Relay;
use crate::window::{between, mark, Mark};

const API: &str = "kube-apiserver";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
const CERT_LIMIT: Duration = Duration::from_secs(900);
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
const MINUTE: Duration = Duration::from_secs(60);

pub async fn run(n: usize) -> Result<String, String> {
    let c = crate::setup::cluster("fleet-real").await?;
    let result = measure(&c, n).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster, n: usize) -> Result<String, String> {
    let bins = crate::setup::bins(c)?;
    let relay = Relay::start(c.addr())
        .await
        .map_err(|e| format!("relay: {e}"))?;
    let root = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let stage = Stage {
        c,
        bins: &bins,
        relay: &relay,
        root: root.path(),
    };
    let mut report = format!(
        "# fleet on the real cluster (Kubernetes {}), N = {n} requested\n\n",
        c.release()
    );
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
            // A peer's private memory (RssAnon) before any ran: `real bench` measured ~16 MiB.
            Kind::Peer => crate::setup::peers_that_fit(
                want,
                crate::setup::num("REAL_PEER_ANON_MIB", 24) as f64 * 1024.0,
            ),
        };
        if k < want {
            writeln!(
                report,
                "peer: {k} agents, not {want}: that is what fits in MemAvailable ({} MiB) \
                 less the margin at REAL_PEER_ANON_MIB (24) of private memory a peer, with half added\n",
                crate::setup::mem_available_kib() / 1024
            )
            .ok();
        }
        let (text, peak) = one_kind(stage, kind, k).await?;
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
async fn one_kind(stage: Stage<'_>, kind: Kind, n: usize) -> Result<(String, f64), String> {
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
        .hold(secs_of("FLEET_REAL_SETTLE_SECONDS", 30), SAMPLE_EVERY)
        .await?;

    // A steady minute.
    let a = mark(c, Some(&mut agents), relay).await?;
    agents.hold(MINUTE, SAMPLE_EVERY).await?;
    let b = mark(c, Some(&mut agents), relay).await?;
    let steady = between(&a, &b);
    let peak = b.agents.hwm_kib_sum as f64 / n as f64;
    writeln!(
        out,
        "- RSS: {:.1} MiB in all, {:.1} MiB per agent (peak {:.1} MiB per agent); private \
         (RssAnon) {:.1} MiB per agent; MemAvailable {} MiB",
        b.agents.rss_kib_sum as f64 / 1024.0,
        b.agents.rss_kib_sum as f64 / 1024.0 / n as f64,
        peak / 1024.0,
        b.agents.anon_kib_sum as f64 / 1024.0 / n as f64,
        crate::setup::mem_available_kib() / 1024
    )
    .ok();

    // SIGKILL and start again, as an upgrade restarts the static pod.
    let lines_before = agents.log_total();
    let killed = SystemTime::now();
    let killed_at = Instant::now();
    eprintln!("fleet-real: SIGKILL kube-apiserver");
    c.kill_component(API).await;
    agents
        .hold(secs_of("FLEET_REAL_DOWN_SECONDS", 5), SAMPLE_EVERY)
        .await?;
    c.start_component(API)
        .await
        .map_err(|e| format!("restart kube-apiserver: {e}"))?;
    let ready_wall = SystemTime::now();
    let down = killed_at.elapsed();
    eprintln!("fleet-real: kube-apiserver ready again after {down:?}");
    let r0 = mark(c, Some(&mut agents), relay).await?;
    let requests_before_ready = all_node_requests(&r0);
    let first = first_renewals(c, &mut agents, killed, n).await?;
    let rest = MINUTE.saturating_sub(r0.at.elapsed());
    agents.hold(rest, SAMPLE_EVERY).await?;
    let r1 = mark(c, Some(&mut agents), relay).await?;
    let back = between(&r0, &r1);
    out.push_str(&restart_report(
        &steady,
        &back,
        &first,
        ready_wall,
        down,
        requests_before_ready,
        n,
    ));
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

fn secs_of(name: &str, default: u64) -> Duration {
    crate::setup::secs(name, default)
}

/// Node requests a fresh API server counted up to this mark (its counters start at 0).
fn all_node_requests(m: &Mark) -> f64 {
    m.scrape
        .sum("apiserver_request_total", crate::apimetrics::node_request)
}

/// Each node's first renewTime after `killed`, from the Leases, polled every second for
/// `RETURN_WATCH` or until every node has one.
async fn first_renewals(
    c: &Cluster,
    agents: &mut Agents,
    killed: SystemTime,
    n: usize,
) -> Result<HashMap<String, SystemTime>, String> {
    let mut first: HashMap<String, SystemTime> = HashMap::new();
    let until = Instant::now() + RETURN_WATCH;
    while Instant::now() < until && first.len() < n {
        if let Ok((200, body)) = c.api("GET", LEASES, None).await {
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            for item in v["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                let Some(t) = item["spec"]["renewTime"].as_str().and_then(parse_time) else {
                    continue;
                };
                if t > killed && !first.contains_key(name) {
                    first.insert(name.to_string(), t);
                }
            }
        }
        agents.sample();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(first)
}

fn parse_time(s: &str) -> Option<SystemTime> {
    let t: jiff::Timestamp = s.parse().ok()?;
    Some(SystemTime::from(t))
}
