//! `bash bench/fleet.sh N`'s driver: N real bootlet processes (default 200; distinct node
//! names, each its own cert dir, one join token) against one in-process testplane, and what
//! the API server sees: the bootstrap completion times, the steady request rate (ideal N per
//! interval) and bytes per renewal, RSS, the fleet's return after a 60 s outage, and a
//! cluster-wide certificate rotation (every certificate issued at once, so every one is due
//! in the same window). See bench/README.md.
//!
//! Exit status: 0 with the report (a missed criterion prints FAIL), 2 when the harness could
//! not measure (a binary missing, an agent that died, a phase that never completed).

mod agents;
mod report;
mod track;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bootlet_bench::knobs;
use bootlet_bench::stats::percentile;
use bootlet_bench::table::verdict;
use testplane::stats::histogram;
use testplane::TestPlane;

use report::{bars, distribution, since};
use track::Tracker;

/// What to run; every field from the command line or the environment (bench/README.md).
pub struct Cfg {
    /// First argument or `FLEET_N` (200).
    pub n: usize,
    /// `FLEET_INTERVAL_MS` (10000): `--lease-renew-interval`; `--lease-duration` is 4×.
    pub interval: Duration,
    /// `FLEET_STEADY_SECONDS` (60): the steady window.
    pub steady: Duration,
    /// `FLEET_OUTAGE_SECONDS` (60): how long the server is cut.
    pub outage: Duration,
    /// `FLEET_CERT_SECONDS` (300): the signer's certificate lifetime, so the whole fleet
    /// rotates inside the run (at 70–80 % of it).
    pub cert: Duration,
    /// `BOOTLET_BIN` (target/release/bootlet).
    pub bootlet: PathBuf,
}

impl Cfg {
    fn from_env() -> Cfg {
        let num = knobs::num;
        let n = std::env::args()
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(num("FLEET_N", 200) as usize);
        Cfg {
            n: n.max(1),
            interval: Duration::from_millis(num("FLEET_INTERVAL_MS", 10_000).max(100)),
            steady: Duration::from_secs(num("FLEET_STEADY_SECONDS", 60).max(1)),
            outage: Duration::from_secs(num("FLEET_OUTAGE_SECONDS", 60)),
            cert: Duration::from_secs(num("FLEET_CERT_SECONDS", 300).max(60)),
            bootlet: knobs::bootlet_bin(),
        }
    }
}

#[tokio::main]
async fn main() {
    let cfg = Cfg::from_env();
    bootlet_bench::exit_on_error("fleet", run(&cfg).await);
}

async fn run(cfg: &Cfg) -> Result<(), String> {
    let tp = TestPlane::builder()
        .cert_ttl(cfg.cert)
        // notBefore = the moment of issue, so 70–80 % of the lifetime is exactly that.
        .backdate(Duration::ZERO)
        .start()
        .await
        .map_err(|e| format!("testplane: {e}"))?;
    // As on real nodes, the kubelet has registered each Node: one owner lookup, then
    // nothing but Lease writes.
    for i in 0..cfg.n {
        tp.create_node(&agents::node_name(i));
    }
    let tracker = Tracker::start(&tp);
    let (n, interval) = (cfg.n, cfg.interval);
    println!(
        "# {n} bootlet agents, Lease every {interval:?}, certificates of {:?}, one testplane\n",
        cfg.cert
    );
    eprintln!("fleet: starting {n} agents");
    let mut fleet = agents::start(cfg, &tp.bootstrap_kubeconfig()).await?;
    fleet
        .all_ready(Duration::from_secs(60) + Duration::from_millis(200) * n as u32)
        .await?;

    println!("## Bootstrap (process start -> READY=1, all {n} started at once)");
    println!(
        "  per agent:              {}",
        distribution(&fleet.bootstrap_secs())
    );
    let since_first = fleet.ready_since_first_spawn();
    println!("  since the first start:  {}", distribution(&since_first));
    let hwm = fleet.hwm_kib();
    println!(
        "  peak RSS per agent:     max {:.1} MiB\n",
        hwm.iter().max().copied().unwrap_or(0) as f64 / 1024.0
    );

    // Settle: every agent past its second renewal, the one that puts it on its phase.
    eprintln!("fleet: waiting for every agent's third Lease write");
    let settle = interval * 4 + Duration::from_secs(30);
    wait_until(settle, "three Lease writes per agent", || {
        let writes = lease_writes_per_node(&tp.requests());
        writes.len() == n && writes.values().all(|&c| c >= 3)
    })
    .await?;
    if let Some(dead) = fleet.dead() {
        return Err(dead);
    }

    // The steady window.
    eprintln!("fleet: steady window of {:?}", cfg.steady);
    let before = bytes(&tp, &tracker);
    let w0 = testplane::wall_now();
    tokio::time::sleep(cfg.steady).await;
    let w1 = testplane::wall_now();
    let after = bytes(&tp, &tracker);
    let (open_all, open_nodes) = tracker.open();
    let rss = fleet.rss_kib();
    let requests = tp.requests();
    let window = report::node_requests(&requests, w0, w1);
    let secs = since(w1, w0).as_secs_f64();
    let renewals = window.iter().filter(|r| report::is_lease_write(r)).count();
    let ideal = n as f64 / interval.as_secs_f64();
    let rate = window.len() as f64 / secs;
    let offsets: Vec<Duration> = window.iter().map(|r| since(r.at, w0)).collect();
    let per_sec = histogram(
        &offsets,
        Duration::from_secs(1),
        secs.floor().max(1.0) as usize,
    );
    let moved: u64 = after
        .iter()
        .map(|(c, b)| b.saturating_sub(before.get(c).copied().unwrap_or(0)))
        .sum();
    println!("## Steady state ({secs:.0} s window)");
    println!(
        "  requests/s from the fleet: {rate:.2} (ideal {n} / {interval:?} = {ideal:.2}); {renewals} Lease writes, {} requests",
        window.len()
    );
    println!(
        "  requests per second: min {}, max {} (the busiest second is {:.2}x the mean)",
        per_sec.iter().min().unwrap_or(&0),
        per_sec.iter().max().unwrap_or(&0),
        *per_sec.iter().max().unwrap_or(&0) as f64 / rate.max(f64::MIN_POSITIVE)
    );
    println!(
        "  bytes on the wire per renewal (both ways, TLS records included): {:.0}",
        moved as f64 / renewals.max(1) as f64
    );
    println!(
        "  open connections: {open_nodes} with a node certificate ({:.2} per agent), {open_all} in all",
        open_nodes as f64 / n as f64
    );
    let total: u64 = rss.iter().sum();
    println!(
        "  RSS: {:.1} MiB in all, per agent mean {:.2} MiB, max {:.2} MiB ({} agents read)\n",
        total as f64 / 1024.0,
        total as f64 / 1024.0 / rss.len().max(1) as f64,
        rss.iter().max().copied().unwrap_or(0) as f64 / 1024.0,
        rss.len()
    );

    outage(cfg, &tp, &tracker, ideal).await?;
    rotation(cfg, &tp, &tracker).await?;

    if let Some(dead) = fleet.dead() {
        return Err(dead);
    }
    let lagged = tracker.with(|s| s.lagged);
    let clean = fleet.stop().await;
    println!("\n{clean} of {n} agents exited 0 after SIGTERM; {lagged} events lagged.");
    tp.shutdown().await;
    Ok(())
}

/// Cut the server, then where each agent's first request after its return falls.
async fn outage(cfg: &Cfg, tp: &TestPlane, tracker: &Tracker, ideal: f64) -> Result<(), String> {
    let (n, interval) = (cfg.n, cfg.interval);
    eprintln!("fleet: cutting the server for {:?}", cfg.outage);
    tp.faults().outage(cfg.outage).await;
    let cut = testplane::wall_now();
    wait_until(
        cfg.outage + Duration::from_secs(30),
        "the outage to end",
        || tracker.with(|s| s.outage_ended.is_some()),
    )
    .await?;
    let back = tracker.with(|s| s.outage_ended).unwrap_or(cut);
    wait_until(
        interval * 3 + Duration::from_secs(30),
        "every agent back",
        || {
            tp.requests()
                .iter()
                .filter(|r| r.at > cut && track::is_node(&r.user))
                .map(|r| r.user.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == n
        },
    )
    .await?;
    // Once every agent is back, a little more so the second attempts show too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = tp.requests();
    let mut first = std::collections::BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.at > cut && track::is_node(&r.user))
    {
        first.entry(r.user.clone()).or_insert(since(r.at, back));
    }
    let firsts: Vec<Duration> = first.values().copied().collect();
    let bins = (interval.as_secs_f64().ceil() as usize + 3).max(5);
    let per_sec = histogram(&firsts, Duration::from_secs(1), bins);
    let everything: Vec<Duration> = requests
        .iter()
        .filter(|r| r.at > cut && track::is_node(&r.user))
        .map(|r| since(r.at, back))
        .collect();
    let all_per_sec = histogram(&everything, Duration::from_secs(1), bins);
    let secs: Vec<f64> = firsts.iter().map(Duration::as_secs_f64).collect();
    let lo = percentile(&secs, 0.0).unwrap_or(0.0);
    let hi = percentile(&secs, 1.0).unwrap_or(0.0);
    let peak = *per_sec.iter().max().unwrap_or(&0);
    println!(
        "## After a {:?} outage: each agent's first request after the return",
        cfg.outage
    );
    print!("{}", bars(&per_sec, Duration::from_secs(1)));
    println!(
        "  spread: first at +{lo:.2} s, last at +{hi:.2} s ({:.2} s); p50 +{:.2} s",
        hi - lo,
        percentile(&secs, 0.5).unwrap_or(0.0)
    );
    // Half the interval: 5 s at the real 10 s (uniform returns span ~90 % of it).
    let half = interval.as_secs_f64() / 2.0;
    println!(
        "  spread over >= {half:.1} s: {} ; busiest second {peak} vs the steady {ideal:.1}/s (<= 2x: {})",
        verdict(hi - lo >= half),
        verdict(peak as f64 <= 2.0 * ideal)
    );
    println!("  every request per second after the return (first and later): {all_per_sec:?}\n");
    Ok(())
}

/// The fleet's certificates were all issued within its bootstrap; they come due together.
async fn rotation(cfg: &Cfg, tp: &TestPlane, tracker: &Tracker) -> Result<(), String> {
    let n = cfg.n;
    let issued = tracker.with(|s| s.issued.clone());
    let last_issue = issued
        .iter()
        .map(|(at, _)| *at)
        .max()
        .unwrap_or(testplane::wall_now());
    let first_issue = issued.iter().map(|(at, _)| *at).min().unwrap_or(last_issue);
    let earliest = first_issue + cfg.cert.mul_f64(0.70);
    if testplane::wall_now() > earliest {
        println!("## Rotation: skipped (the outage phase ran into the rotation window; raise FLEET_CERT_SECONDS)");
        return Ok(());
    }
    eprintln!(
        "fleet: waiting for the rotations, due {:.0}-{:.0} s from now",
        since(earliest, testplane::wall_now()).as_secs_f64(),
        since(last_issue + cfg.cert.mul_f64(0.80), testplane::wall_now()).as_secs_f64()
    );
    let patience =
        since(last_issue + cfg.cert.mul_f64(0.80), testplane::wall_now()) + Duration::from_secs(60);
    wait_until(patience, "every agent's rotation CSR", || {
        tp.requests()
            .iter()
            .filter(|r| report::is_rotation_csr(r))
            .count()
            >= n
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = tp.requests();
    let boots: Vec<SystemTime> = requests
        .iter()
        .filter(|r| report::is_bootstrap_csr(r))
        .map(|r| r.at)
        .collect();
    let rots: Vec<SystemTime> = requests
        .iter()
        .filter(|r| report::is_rotation_csr(r))
        .map(|r| r.at)
        .collect();
    let t0 = *rots.iter().min().ok_or("no rotation CSR")?;
    let t1 = *rots.iter().max().unwrap_or(&t0);
    // Everything the nodes sent about CSRs while they rotated (create, watch, get).
    let csr_requests = requests
        .iter()
        .filter(|r| {
            r.at >= t0 && track::is_node(&r.user) && r.path.contains("certificatesigningrequests")
        })
        .count();
    let span = since(t1, t0);
    let boot_span = match (boots.iter().min(), boots.iter().max()) {
        (Some(a), Some(b)) => since(*b, *a),
        _ => Duration::ZERO,
    };
    let offsets: Vec<Duration> = rots.iter().map(|t| since(*t, t0)).collect();
    let per_sec = histogram(
        &offsets,
        Duration::from_secs(1),
        span.as_secs() as usize + 1,
    );
    let peak = *per_sec.iter().max().unwrap_or(&0);
    let window = cfg.cert.mul_f64(0.10);
    let mean = n as f64 / (window + boot_span).as_secs_f64().max(1.0);
    println!(
        "## Cluster-wide rotation: every certificate issued within {:.1} s, due at 70-80 % of {:?}",
        boot_span.as_secs_f64(),
        cfg.cert
    );
    println!("  rotation CSRs per second since the first:");
    print!("{}", bars(&per_sec, Duration::from_secs(1)));
    println!(
        "  {} rotation CSRs over {:.1} s (the jitter window is {:.0} s, plus the {:.1} s the certificates were issued over); busiest second {peak}, mean {mean:.1}/s: {}",
        rots.len(),
        span.as_secs_f64(),
        window.as_secs_f64(),
        boot_span.as_secs_f64(),
        if span >= window.mul_f64(0.8) { "spread over the jitter window, not a burst" } else { "BURST" }
    );
    println!(
        "  CSR requests per rotation (create, watch, get): {:.2}",
        csr_requests as f64 / rots.len().max(1) as f64
    );
    Ok(())
}

/// Successful Lease writes per node so far.
fn lease_writes_per_node(
    requests: &[testplane::RequestRecord],
) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| track::is_node(&r.user) && report::is_lease_write(r))
    {
        *m.entry(r.user.clone()).or_insert(0) += 1;
    }
    m
}

/// Bytes so far (both ways) on every connection with a node's certificate.
fn bytes(tp: &TestPlane, tracker: &Tracker) -> std::collections::BTreeMap<u64, u64> {
    tracker
        .node_conns()
        .into_iter()
        .filter_map(|c| tp.wire_bytes(c).map(|b| (c, b.from_client + b.to_client)))
        .collect()
}

/// Polls `done` every 500 ms until it holds, or fails naming `what` after `within`.
async fn wait_until(
    within: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("no {what} after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
