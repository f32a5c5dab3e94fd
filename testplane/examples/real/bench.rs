//! `bash bench/run.sh --real`: one real cluster; an idle window first (what the cluster
//! costs with no node, taken off the server-side figures); then for each N (REAL_NS,
//! "100,500") bootlet's N agents, then the peer's N (or as many as fit in memory), each group
//! a fresh set of nodes bootstrapping from one join token through the relay, measured over
//! a steady window after a settling time, then stopped and its Nodes and Leases deleted.

use std::fmt::Write;
use std::time::Duration;

use testplane::kube::Cluster;
use testplane::stats::percentile;

use crate::agents::{delete_nodes, Agents, Kind, Sample, Stage};
use crate::relay::Relay;
use crate::table::{render, Row, Unit};
use crate::window::{between, end_sample, mark, Figures};

/// How long N agents may take to all have a certificate.
const CERT_LIMIT: Duration = Duration::from_secs(600);
/// How often agents' threads are read inside a window.
const SAMPLE_EVERY: Duration = Duration::from_secs(3);

/// One group's figures, net of the idle cluster where they are server-side.
struct Group {
    n: usize,
    cert_p50: Option<f64>,
    cert_max: Option<f64>,
    f: Figures,
    end: Sample,
    renewals: f64,
    requests: f64,
    api_cpu_ns: f64,
}

pub async fn run() -> Result<String, String> {
    let c = crate::setup::cluster("bench-real").await?;
    let result = measure(&c).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster) -> Result<String, String> {
    let bins = crate::setup::bins(c)?;
    let ns: Vec<usize> = std::env::var("REAL_NS")
        .unwrap_or_else(|_| "100,500".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let steady = crate::setup::secs("REAL_STEADY_SECONDS", 60);
    let settle = crate::setup::secs("REAL_SETTLE_SECONDS", 30);
    let idle_secs = crate::setup::secs("REAL_IDLE_SECONDS", 60);
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
    let load_before = crate::procfs::loadavg();

    eprintln!("real: idle cluster for {idle_secs:?}");
    let a = mark(c, None, &relay).await?;
    tokio::time::sleep(idle_secs).await;
    let idle = between(&a, &mark(c, None, &relay).await?);

    let mut report = String::new();
    let mut rows = Vec::new();
    let mut peer_anon_kib: Option<f64> = None;
    let mut notes = Vec::new();
    for &n in &ns {
        let mut groups = Vec::new();
        for kind in [Kind::Bootlet, Kind::Peer] {
            let mut k = n;
            if kind == Kind::Peer {
                let peak = peer_anon_kib
                    .unwrap_or(crate::setup::num("REAL_PEER_ANON_MIB", 24) as f64 * 1024.0);
                k = crate::setup::peers_that_fit(n, peak);
                if k < n {
                    notes.push(format!(
                        "N = {n}: {k} peers, not {n}: a peer's private memory (RssAnon) is {:.1} MiB and \
                         MemAvailable was {} MiB (margin REAL_MEM_MARGIN_MIB)",
                        peak / 1024.0,
                        crate::setup::mem_available_kib() / 1024
                    ));
                }
            }
            let g = group(stage, kind, k, settle, steady, &idle).await?;
            if kind == Kind::Peer {
                peer_anon_kib = Some(g.end.anon_kib_sum as f64 / g.n.max(1) as f64);
            }
            groups.push(g);
        }
        rows.extend(rows_for(&groups[0], &groups[1]));
    }
    let table = render(&rows);
    writeln!(
        report,
        "## bootlet vs the kubelet's identity code on Kubernetes {}\n",
        c.release()
    )
    .ok();
    report.push_str(&table);
    writeln!(report).ok();
    writeln!(
        report,
        "- interval 10 s (both defaults), steady window {}s after {}s of settling; idle cluster \
         {:.1}s: kube-apiserver {:.1} ms CPU/s, {:.2} Lease PUT/s, {:.2} node requests/s \
         (taken off the server-side figures)",
        steady.as_secs(),
        settle.as_secs(),
        idle.secs,
        idle.api_cpu_ns / idle.secs / 1e6,
        idle.lease_puts / idle.secs,
        idle.node_requests / idle.secs
    )
    .ok();
    for n in notes {
        writeln!(report, "- {n}").ok();
    }
    writeln!(
        report,
        "- load average before {load_before}, after {}; 2 cores shared with the cluster and the driver",
        crate::procfs::loadavg()
    )
    .ok();
    std::fs::write("target/bench-real.md", &report)
        .map_err(|e| format!("target/bench-real.md: {e}"))?;
    Ok(report)
}

async fn group(
    stage: Stage<'_>,
    kind: Kind,
    n: usize,
    settle: Duration,
    steady: Duration,
    idle: &Figures,
) -> Result<Group, String> {
    let Stage { c, relay, .. } = stage;
    let prefix = format!("{}-{n}", kind.label());
    eprintln!("real: {n} {} agents starting", kind.label());
    let mut agents = Agents::join(stage, kind, n, &prefix).await?;
    agents.wait_certs(CERT_LIMIT).await?;
    let certs: Vec<f64> = agents
        .agents
        .iter()
        .filter_map(|a| a.cert_after.map(|d| d.as_secs_f64()))
        .collect();
    eprintln!(
        "real: {n} {} agents have certificates; settling {settle:?}",
        kind.label()
    );
    agents.hold(settle, SAMPLE_EVERY).await?;
    let a = mark(c, Some(&mut agents), relay).await?;
    agents.hold(steady, SAMPLE_EVERY).await?;
    let b = mark(c, Some(&mut agents), relay).await?;
    let f = between(&a, &b);
    let end = end_sample(&b);
    agents.stop().await;
    delete_nodes(c, &prefix).await?;
    let scale = f.secs / idle.secs;
    let renewals = (f.lease_puts - idle.lease_puts * scale).max(1.0);
    eprintln!(
        "real: {n} {}: {renewals:.0} renewals in {:.1}s",
        kind.label(),
        f.secs
    );
    Ok(Group {
        n,
        cert_p50: percentile(&certs, 0.5),
        cert_max: percentile(&certs, 1.0),
        requests: f.node_requests - idle.node_requests * scale,
        api_cpu_ns: f.api_cpu_ns - idle.api_cpu_ns * scale,
        renewals,
        end,
        f,
    })
}

fn rows_for(b: &Group, p: &Group) -> Vec<Row> {
    let ns = if b.n == p.n {
        format!("N = {}", b.n)
    } else {
        format!("N = {} (peer {})", b.n, p.n)
    };
    let per = |g: &Group, v: f64| Some(v / g.renewals);
    let both = |what: &str, unit, f: &dyn Fn(&Group) -> Option<f64>| {
        Row::new(format!("{ns}: {what}"), unit, f(b), f(p))
    };
    let q = |g: &Group, x: f64| crate::apimetrics::quantile(&g.f.lat_buckets, x).map(|s| s * 1e9);
    vec![
        both("renewals in the window", Unit::Num(0), &|g| {
            Some(g.renewals)
        }),
        both("start → certificate on disk, p50", Unit::Secs, &|g| {
            g.cert_p50
        }),
        both("start → certificate on disk, max", Unit::Secs, &|g| {
            g.cert_max
        }),
        both("node CPU per renewal (all threads)", Unit::Ms, &|g| {
            per(g, g.f.agents_cpu_ns)
        })
        .budget(1.0 / 3.0, "≤ 1/3"),
        both("node wake-ups per renewal", Unit::Num(1), &|g| {
            per(g, g.f.agents_wakeups)
        }),
        both("RSS per agent, steady (mean VmRSS)", Unit::Mib, &|g| {
            Some(g.end.rss_kib_sum as f64 / g.end.alive.max(1) as f64)
        })
        .budget(1.0 / 3.0, "≤ 1/3"),
        both("peak RSS per agent (mean VmHWM)", Unit::Mib, &|g| {
            Some(g.end.hwm_kib_sum as f64 / g.end.alive.max(1) as f64)
        }),
        both("peak RSS, largest agent (VmHWM)", Unit::Mib, &|g| {
            Some(g.end.hwm_kib_max as f64)
        }),
        both("private memory per agent (mean RssAnon)", Unit::Mib, &|g| {
            Some(g.end.anon_kib_sum as f64 / g.end.alive.max(1) as f64)
        }),
        both("requests per renewal", Unit::Num(2), &|g| {
            per(g, g.requests)
        }),
        both("bytes per renewal, node → server", Unit::Num(0), &|g| {
            per(g, g.f.relay.up as f64)
        }),
        both("bytes per renewal, server → node", Unit::Num(0), &|g| {
            per(g, g.f.relay.down as f64)
        }),
        both("bytes per renewal, both ways", Unit::Num(0), &|g| {
            per(g, (g.f.relay.up + g.f.relay.down) as f64)
        })
        .budget(1.0, "≤ 1"),
        both("TLS handshakes per hour per agent", Unit::Num(2), &|g| {
            Some(g.f.relay.conns as f64 * 3600.0 / g.f.secs / g.n as f64)
        }),
        both(
            "kube-apiserver CPU per renewal (net of idle)",
            Unit::Ms,
            &|g| per(g, g.api_cpu_ns),
        )
        .budget(1.0, "≤ 1"),
        both("Lease PUT latency, mean (apiserver)", Unit::Ms, &|g| {
            (g.f.lat_count > 0.0).then(|| g.f.lat_sum / g.f.lat_count * 1e9)
        }),
        both(
            "Lease PUT latency, p50 (apiserver buckets)",
            Unit::Ms,
            &|g| q(g, 0.5),
        ),
        both(
            "Lease PUT latency, p99 (apiserver buckets)",
            Unit::Ms,
            &|g| q(g, 0.99),
        ),
    ]
}
