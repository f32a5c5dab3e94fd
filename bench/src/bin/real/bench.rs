//! `bash bench/run.sh --real`: one real cluster, its control plane on a CPU of its own
//! (`pin.rs`); an idle window first (what the cluster costs with no node, taken off the
//! server-side figures); then for each N (REAL_NS, "100,500") five groups in turn, never
//! side by side: bootlet's N agents, the peer's N (or as many as fit in memory), the
//! floor's N, the baseline's N (at most REAL_BASELINE_N, 50) and bootlet's over HTTP/1.1.
//! Each group is a fresh set of nodes reaching the API server through the relay
//! (bootstrapping from one join token, but the floor, whose certificates the driver mints),
//! measured over a steady window after a settling time, then stopped and its Nodes and
//! Leases deleted.

use std::fmt::Write;
use std::time::Duration;

use bootlet_bench::stats::percentile;
use testplane::kube::Cluster;

use crate::agents::{delete_nodes, Agents, Set, Stage};
use crate::pin::Split;
use crate::rows::{rows_for, Group};
use crate::subject::Subject;
use crate::table::render_all;
use crate::window::{between, end_sample, mark, Figures, Mark};

/// How long N agents may take to all have a certificate.
const CERT_LIMIT: Duration = Duration::from_secs(600);
/// How often agents' threads are read inside a window.
const SAMPLE_EVERY: Duration = Duration::from_secs(3);

/// The idle window: its figures, and its two marks (each subject's renewals are net of the
/// cluster's own Lease writes of the verb it renews with).
struct Idle {
    a: Mark,
    b: Mark,
    f: Figures,
}

pub async fn run() -> Result<String, String> {
    let (c, split) = crate::setup::cluster("bench-real", true).await?;
    let result = measure(&c, split.as_ref()).await;
    c.shutdown().await;
    result
}

async fn measure(c: &Cluster, split: Option<&Split>) -> Result<String, String> {
    let ns: Vec<usize> = std::env::var("REAL_NS")
        .unwrap_or_else(|_| "100,500".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let steady = crate::setup::secs("REAL_STEADY_SECONDS", 120);
    let settle = crate::setup::secs("REAL_SETTLE_SECONDS", 30);
    let idle_secs = crate::setup::secs("REAL_IDLE_SECONDS", 60);
    let set = Set::up(c).await?;
    let stage = set.stage(c);
    let relay = &set.relay;
    let baseline_n = crate::setup::num("REAL_BASELINE_N", 50) as usize;
    let load_before = bootlet_bench::procfs::loadavg();

    eprintln!("real: idle cluster for {idle_secs:?}");
    let a = mark(c, None, relay).await?;
    tokio::time::sleep(idle_secs).await;
    let b = mark(c, None, relay).await?;
    let idle = Idle {
        f: between(&a, &b),
        a,
        b,
    };

    let mut report = String::new();
    let mut rows = Vec::new();
    let mut peer_anon_kib: Option<f64> = None;
    let mut notes = Vec::new();
    // REAL_SUBJECTS (e.g. "bootlet") runs only those, in its order; REAL_BOOTLET_ARGS adds
    // flags to bootlet's command line (e.g. "--test-lease-http1"): with both, one variant of
    // bootlet against the same cluster, for docs/performance.md's protocol comparisons.
    let only = std::env::var("REAL_SUBJECTS").unwrap_or_default();
    let subjects: Vec<Subject> = if only.is_empty() {
        Subject::ALL.to_vec()
    } else {
        // In the order given: "peer,bootlet" runs the peer's group first.
        only.split(',')
            .filter_map(|o| Subject::ALL.into_iter().find(|s| s.label() == o.trim()))
            .collect()
    };
    if let Ok(extra) = std::env::var("REAL_BOOTLET_ARGS") {
        notes.push(format!("bootlet ran with REAL_BOOTLET_ARGS: {extra}"));
    }
    for &n in &ns {
        let mut groups = Vec::new();
        for &who in &subjects {
            let k = match who {
                Subject::Peer => {
                    let peak = peer_anon_kib
                        .unwrap_or(crate::setup::num("REAL_PEER_ANON_MIB", 24) as f64 * 1024.0);
                    let k = crate::setup::peers_that_fit(n, peak);
                    if k < n {
                        notes.push(format!(
                            "N = {n}: {k} peers, not {n}: a peer's private memory (RssAnon) is {:.1} MiB and \
                             MemAvailable was {} MiB (margin REAL_MEM_MARGIN_MIB)",
                            peak / 1024.0,
                            crate::setup::mem_available_kib() / 1024
                        ));
                    }
                    k
                }
                Subject::Baseline => {
                    let k = n.min(baseline_n);
                    notes.push(format!(
                        "N = {n}: {k} baseline agents ran (at most REAL_BASELINE_N = {baseline_n}: \
                         a kubectl process per renewal)"
                    ));
                    k
                }
                Subject::Bootlet | Subject::Floor | Subject::BootletHttp1 => n,
            };
            if k == 0 {
                continue;
            }
            let g = group(stage, who, k, settle, steady, &idle).await?;
            if who == Subject::Peer {
                peer_anon_kib = Some(g.end.anon_kib_sum as f64 / g.n.max(1) as f64);
            }
            groups.push(g);
        }
        rows.extend(rows_for(n, &groups));
    }
    let table = render_all(&rows);
    let idle_f = &idle.f;
    writeln!(
        report,
        "## bootlet vs the kubelet's identity code on Kubernetes {}, with the floor and the baseline\n",
        c.release()
    )
    .ok();
    report.push_str(&table);
    writeln!(report).ok();
    writeln!(
        report,
        "- interval 10 s (every subject), steady window {}s after {}s of settling; idle cluster \
         {:.1}s: kube-apiserver {:.1} ms CPU/s, {:.2} Lease PUT/s, {:.2} node requests/s \
         (taken off the server-side figures)",
        steady.as_secs(),
        settle.as_secs(),
        idle_f.secs,
        idle_f.api_cpu_ns / idle_f.secs / 1e6,
        idle_f.lease_puts / idle_f.secs,
        idle_f.node_requests / idle_f.secs
    )
    .ok();
    writeln!(
        report,
        "- the floor: bench/src/bin/floor.rs's child, a bare reqwest PUT of its Lease over one HTTP/2 + \
         mTLS connection, its certificate minted by the driver (no join), its N starts spread \
         over one interval; the baseline: bench/baseline.sh with the release's kubectl, which \
         renews with `kubectl patch` (a GET, then a PATCH, a new process and TLS connection \
         each): its renewals and \"Lease PUT latency\" are its PATCHes, its CPU the shell's \
         with every child (cutime/cstime, 10 ms ticks), its peak RSS its largest process's \
         (GNU time), its steady RSS the shell's and its live children's at the window's end; \
         no wake-ups"
    )
    .ok();
    for n in notes {
        writeln!(report, "- {n}").ok();
    }
    let cpus = crate::pin::describe(split);
    writeln!(
        report,
        "- load average before {load_before}, after {}; {cpus}",
        bootlet_bench::procfs::loadavg()
    )
    .ok();
    std::fs::write("target/bench-real.md", &report)
        .map_err(|e| format!("target/bench-real.md: {e}"))?;
    Ok(report)
}

async fn group(
    stage: Stage<'_>,
    who: Subject,
    n: usize,
    settle: Duration,
    steady: Duration,
    idle: &Idle,
) -> Result<Group, String> {
    let Stage { c, relay, .. } = stage;
    let label = who.label();
    let prefix = format!("{label}-{n}");
    eprintln!("real: {n} {label} agents starting");
    let mut agents = Agents::join(stage, who, n, &prefix).await?;
    agents.wait_certs(CERT_LIMIT).await?;
    let certs: Vec<f64> = agents
        .agents
        .iter()
        .filter_map(|a| a.cert_after.map(|d| d.as_secs_f64()))
        .collect();
    eprintln!("real: {n} {label} agents have certificates; settling {settle:?}");
    agents.hold(settle, SAMPLE_EVERY).await?;
    let a = mark(c, Some(&mut agents), relay).await?;
    let profile = crate::setup::pprof(c, &prefix, steady.as_secs().saturating_sub(2).max(1));
    let (held, ()) = tokio::join!(agents.hold(steady, SAMPLE_EVERY), profile);
    held?;
    let b = mark(c, Some(&mut agents), relay).await?;
    let f = between(&a, &b);
    let end = end_sample(&b);
    let peaks = agents.stop().await;
    delete_nodes(c, &prefix).await?;
    let idle_f = &idle.f;
    let scale = f.secs / idle_f.secs;
    let verb = who.renewal_verb();
    let writes = crate::renewals::between(&a, &b, &f, verb);
    let idle_writes = crate::renewals::between(&idle.a, &idle.b, idle_f, verb);
    let renewals = (writes.count - idle_writes.count * scale).max(1.0);
    eprintln!(
        "real: {n} {label}: {renewals:.0} renewals in {:.1}s",
        f.secs
    );
    Ok(Group {
        subject: who,
        n,
        cert_p50: percentile(&certs, 0.5),
        cert_max: percentile(&certs, 1.0),
        requests: f.node_requests - idle_f.node_requests * scale,
        api_cpu_ns: f.api_cpu_ns - idle_f.api_cpu_ns * scale,
        renewals,
        end,
        f,
        writes,
        peaks,
    })
}
