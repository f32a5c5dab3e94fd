//! `real rotation` (the last part of `bash bench/run.sh --real`): the cost of one client
//! certificate rotation, bootlet's and the peer's. A cluster of its own signs 3-minute
//! certificates (`--cluster-signing-duration`; the real signer backdates notBefore by 5
//! minutes, so a certificate lives 8 minutes of which 3 are ahead: bootlet rotates at
//! 75 % ± 5 % of it, 36-84 s after issuance, the kubelet at 70-90 %, 36-132 s). For each
//! kind, REAL_ROTATION_N (10) agents: a Lease-only window right after their bootstrap (before
//! the earliest rotation), then a window until every agent has rotated; a rotation's cost is
//! the second window's less its renewals at the first window's cost per renewal.

use std::fmt::Write;
use std::time::Duration;

use testplane::kube::{Cluster, Options};
use tokio::time::Instant;

use crate::agents::{Agents, Kind, Stage};
use crate::relay::Relay;
use crate::table::{render, Row, Unit};
use crate::window::{between, mark, Figures};

/// From all certificates on disk to the Lease-only window's start (past the Lease's create
/// and the owner lookup), and its length: it ends before the earliest rotation (36 s after
/// issuance).
const SETTLE: Duration = Duration::from_secs(10);
const LEASE_ONLY: Duration = Duration::from_secs(20);
/// Bound on every agent rotating once.
const ROTATE_LIMIT: Duration = Duration::from_secs(240);

/// A kind's rotation figures: per rotation, net of the renewals in the window.
#[derive(Debug, Default)]
struct Cost {
    rotations: usize,
    cpu_ns: f64,
    wakeups: f64,
    requests: f64,
    bytes: f64,
    conns: f64,
    api_cpu_ns: f64,
}

pub async fn run() -> Result<String, String> {
    let dir = std::path::absolute("target/rotation-real-state").map_err(|e| e.to_string())?;
    let mut opts = Options::new(dir);
    opts.cert_ttl = crate::setup::secs("REAL_ROTATION_CERT_SECONDS", 180);
    eprintln!(
        "rotation: starting a cluster signing {:?} certificates",
        opts.cert_ttl
    );
    let c = Cluster::start(opts)
        .await
        .map_err(|e| format!("start the cluster: {e}"))?;
    let result = measure(&c).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster) -> Result<String, String> {
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
    let n = crate::setup::num("REAL_ROTATION_N", 10) as usize;
    let mut costs = Vec::new();
    for kind in [Kind::Bootlet, Kind::Peer] {
        costs.push(one(stage, kind, n).await?);
    }
    let (b, p) = (&costs[0], &costs[1]);
    let row = |what: &str, unit, f: &dyn Fn(&Cost) -> f64| {
        Row::new(
            format!("one rotation: {what}"),
            unit,
            Some(f(b)),
            Some(f(p)),
        )
    };
    let rows = [
        row("rotations measured", Unit::Num(0), &|c| c.rotations as f64),
        row("node CPU", Unit::Ms, &|c| c.cpu_ns),
        row("node wake-ups", Unit::Num(0), &|c| c.wakeups),
        row("requests", Unit::Num(1), &|c| c.requests),
        row("bytes on the wire, both ways", Unit::Num(0), &|c| c.bytes),
        row("new connections (TLS handshakes)", Unit::Num(2), &|c| {
            c.conns
        }),
        row("kube-apiserver CPU", Unit::Ms, &|c| c.api_cpu_ns),
    ];
    let mut out = format!(
        "\n## One client certificate rotation, {n} agents of each kind ({} certificates)\n\n",
        crate::setup::secs("REAL_ROTATION_CERT_SECONDS", 180).as_secs()
    );
    out.push_str(&render(&rows));
    writeln!(out, "\n- per rotation, net of the window's Lease renewals at the cost of a renewal measured just before; kube-apiserver's figure includes kube-controller-manager's approval and signing requests").ok();
    let path = "target/bench-real.md";
    let mut md = std::fs::read_to_string(path).unwrap_or_default();
    md.push_str(&out);
    std::fs::write(path, md).map_err(|e| format!("{path}: {e}"))?;
    Ok(out)
}

async fn one(stage: Stage<'_>, kind: Kind, n: usize) -> Result<Cost, String> {
    let Stage { c, relay, .. } = stage;
    let prefix = format!("rot-{}", kind.label());
    eprintln!("rotation: {n} {} agents", kind.label());
    let mut agents = Agents::join(stage, kind, n, &prefix).await?;
    agents.wait_certs(Duration::from_secs(120)).await?;
    let first = agents.cert_pems();
    agents.hold(SETTLE, Duration::from_secs(1)).await?;
    let a = mark(c, Some(&mut agents), relay).await?;
    agents.hold(LEASE_ONLY, Duration::from_secs(2)).await?;
    let b = mark(c, Some(&mut agents), relay).await?;
    let lease = between(&a, &b);
    if agents.cert_pems() != first {
        return Err(format!(
            "{}: a rotation inside the Lease-only window",
            kind.label()
        ));
    }
    // Until every agent has rotated; count each change of a certificate file.
    let mut seen = first.clone();
    let mut rotations = 0;
    let mut rotated = vec![false; n];
    let until = Instant::now() + ROTATE_LIMIT;
    while rotated.iter().any(|r| !r) {
        if Instant::now() >= until {
            return Err(format!(
                "{}: not every agent rotated within {ROTATE_LIMIT:?}",
                kind.label()
            ));
        }
        agents
            .hold(Duration::from_secs(1), Duration::from_secs(1))
            .await?;
        for (i, pem) in agents.cert_pems().into_iter().enumerate() {
            if !pem.is_empty() && pem != seen[i] {
                seen[i] = pem;
                rotations += 1;
                rotated[i] = true;
            }
        }
    }
    // Let the last rotation's requests finish (the new client's first connection).
    agents
        .hold(Duration::from_secs(3), Duration::from_secs(1))
        .await?;
    let d = mark(c, Some(&mut agents), relay).await?;
    for (i, pem) in agents.cert_pems().into_iter().enumerate() {
        if !pem.is_empty() && pem != seen[i] {
            rotations += 1;
        }
    }
    let rot = between(&b, &d);
    agents.stop().await;
    crate::agents::delete_nodes(c, &prefix).await?;
    Ok(net(&lease, &rot, rotations))
}

/// The rotation window less its renewals at the Lease-only window's cost, per rotation.
fn net(lease: &Figures, rot: &Figures, rotations: usize) -> Cost {
    let per = |f: &dyn Fn(&Figures) -> f64| {
        let unit = f(lease) / lease.lease_puts.max(1.0);
        (f(rot) - unit * rot.lease_puts) / rotations.max(1) as f64
    };
    Cost {
        rotations,
        cpu_ns: per(&|f| f.agents_cpu_ns),
        wakeups: per(&|f| f.agents_wakeups),
        requests: per(&|f| f.node_requests),
        bytes: per(&|f| (f.relay.up + f.relay.down) as f64),
        conns: per(&|f| f.relay.conns as f64),
        api_cpu_ns: per(&|f| f.api_cpu_ns),
    }
}
