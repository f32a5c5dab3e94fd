//! Measures the real `bootlet` binary against an in-process testplane, for the budgets in
//! issues #3 and #4. Run it with `bench/agent.sh` (which builds release binaries first).
//!
//! Phase 1 (bootstrap, repeated `BOOTSTRAP_RUNS` times): process start → certificate file
//! on disk, with an approver that answers at once; peak RSS (VmHWM) of that run.
//! Phase 2 (lease, `LEASE_SECONDS` long at `LEASE_INTERVAL_MS`): requests per renewal, TLS
//! handshakes by the node identity, renewal-interval deviation (p50/p99/max), CPU per
//! renewal (from /proc/PID/task/*/schedstat, nanoseconds) and steady RSS (VmRSS).
//! `UNDER_SYSTEMD=1` runs bootlet as systemd does: `NOTIFY_SOCKET` on a socket this bench
//! reads and counts, and `WATCHDOG_USEC` (30 s unless set).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use bootlet_bench::node::{NodeDir, Notify};
use bootlet_bench::stats::{deviations_ms, percentile};
use bootlet_bench::{knobs, procfs};
use testplane::{Event, TestPlane};
use tokio::process::Child;

fn spawn(node: &NodeDir, name: &str, extra: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Child {
    node.command(&knobs::bootlet_bin(), name, "off")
        .args(extra)
        .envs(env.iter().copied())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn bootlet (build it with `cargo build --release`)")
}

/// `VmHWM` or `VmRSS` of a process, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    procfs::status_kib(pid, field).unwrap_or(0)
}

/// CPU time (nanoseconds) and wake-ups (times scheduled in) summed over every live thread
/// of `pid`.
fn cpu_ns(pid: u32) -> (u64, u64) {
    let cpu = procfs::live_threads(pid);
    (cpu.ns, cpu.wakeups)
}

async fn bootstrap_once(tp: &TestPlane, run: u64) -> (Duration, u64) {
    let node = NodeDir::new(&tp.bootstrap_kubeconfig()).expect("node directory");
    let current = node.dir.join("pki/kubelet-client-current.pem");
    let start = tokio::time::Instant::now();
    let mut child = spawn(
        &node,
        &format!("bench-boot-{run}"),
        &["--renew-lease=false"],
        &[],
    );
    let pid = child.id().expect("pid");
    let mut hwm = 0;
    while !exists_with_key(&current) {
        hwm = hwm.max(status_kib(pid, "VmHWM:"));
        tokio::time::sleep(Duration::from_micros(500)).await;
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no certificate after 10 s"
        );
    }
    let took = start.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    hwm = hwm.max(status_kib(pid, "VmHWM:"));
    let _ = child.kill().await;
    (took, hwm)
}

fn exists_with_key(p: &Path) -> bool {
    std::fs::read_to_string(p).is_ok_and(|s| s.contains("PRIVATE KEY"))
}

#[tokio::main]
async fn main() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(24 * 3600))
        .start()
        .await
        .expect("testplane");

    // --- Phase 1: bootstrap latency and peak RSS.
    let runs = knobs::num("BOOTSTRAP_RUNS", 10);
    let mut times = Vec::new();
    let mut peak = 0;
    for run in 0..runs {
        let (took, hwm) = bootstrap_once(&tp, run).await;
        times.push(took.as_secs_f64() * 1000.0);
        peak = peak.max(hwm);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "bootstrap: start -> certificate on disk over {runs} runs: min {:.1} ms, median {:.1} ms, max {:.1} ms; peak RSS (VmHWM) {:.1} MiB",
        times[0],
        percentile(&times, 0.5).unwrap_or_default(),
        times[times.len() - 1],
        peak as f64 / 1024.0
    );

    // --- Phase 2: the lease loop at the given interval.
    let secs = knobs::num("LEASE_SECONDS", 600);
    let interval_ms = knobs::num("LEASE_INTERVAL_MS", 10_000);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig()).expect("node directory");
    let name = "bench-lease";
    // As on a real node, the Node object exists (the kubelet registers it): one owner
    // lookup, then nothing but Lease writes.
    tp.create_node(name);
    let mut events = tp.events();
    let interval = format!("{interval_ms}ms");
    let duration = format!("{}s", (interval_ms * 4 / 1000).max(2));
    // UNDER_SYSTEMD=1: as systemd runs it, with a notify socket that counts what bootlet
    // sends and the unit's WatchdogSec=30s. The default runs it bare: the renewal alone.
    let systemd = knobs::num("UNDER_SYSTEMD", 0) == 1;
    let notify = systemd
        .then(|| Notify::bind(node.dir.join("notify.sock")).expect("bind the notify socket"));
    // WATCHDOG_USEC as the unit sets it (WatchdogSec=30s); at a short LEASE_INTERVAL_MS,
    // scale it (e.g. 2000000 at 1000 ms) to keep one ping per renewal as at 10 s.
    let watchdog_usec =
        std::ffi::OsString::from(knobs::num("WATCHDOG_USEC", 30_000_000).to_string());
    let mut env = Vec::new();
    if let Some(n) = &notify {
        env.push(("NOTIFY_SOCKET", n.path.as_os_str()));
        env.push(("WATCHDOG_USEC", watchdog_usec.as_os_str()));
    }
    let mut child = spawn(
        &node,
        name,
        &[
            "--lease-renew-interval",
            &interval,
            "--lease-duration",
            &duration,
        ],
        &env,
    );
    let pid = child.id().expect("pid");
    // Wait for the first renewal, then measure the steady state from there.
    loop {
        match events.recv().await {
            Ok(Event::LeaseCreated { name: n, .. } | Event::LeaseRenewed { name: n, .. })
                if n == name =>
            {
                break
            }
            Ok(_) => {}
            Err(e) => panic!("events: {e}"),
        }
    }
    let t0 = testplane::wall_now();
    let cpu0 = cpu_ns(pid);
    let sent0 = notify.as_ref().map(Notify::sent);
    let mut rss_max = 0;
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(end - tokio::time::Instant::now())).await;
        rss_max = rss_max.max(status_kib(pid, "VmRSS:"));
    }
    let (cpu1, wakes1) = cpu_ns(pid);
    let (cpu, wakes) = (cpu1 - cpu0.0, wakes1 - cpu0.1);
    let sent = notify.as_ref().map(Notify::sent);
    let _ = child.kill().await;

    let user = format!("system:node:{name}");
    let reqs: Vec<_> = tp
        .requests()
        .into_iter()
        .filter(|r| r.user == user && r.at > t0)
        .collect();
    let renewals: Vec<SystemTime> = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path.contains("/leases/") && r.status == 200)
        .map(|r| r.at)
        .collect();
    let handshakes = {
        let mut n = 0;
        while let Ok(e) = events.try_recv() {
            if let Event::TlsHandshake {
                client_cn: Some(cn),
                ..
            } = e
            {
                if cn == user {
                    n += 1;
                }
            }
        }
        n
    };
    let dev = deviations_ms(&renewals, Duration::from_millis(interval_ms));
    let interval = interval_ms as f64;
    let n = renewals.len().max(1);
    println!(
        "lease: {} renewals in {secs} s at {interval_ms} ms; {} requests by the node ({:.2} per renewal); {handshakes} TLS handshakes by the node after the first renewal",
        renewals.len(),
        reqs.len(),
        reqs.len() as f64 / n as f64
    );
    if !dev.is_empty() {
        println!(
            "lease: interval deviation p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (jitter allowance {:.0} ms)",
            percentile(&dev, 0.5).unwrap_or_default(),
            percentile(&dev, 0.99).unwrap_or_default(),
            dev[dev.len() - 1],
            interval * 0.04
        );
    }
    println!(
        "lease: CPU {:.3} ms per renewal ({:.1} ms over {secs} s, all threads), {:.1} wake-ups per renewal; steady RSS max {:.1} MiB",
        cpu as f64 / 1e6 / n as f64,
        cpu as f64 / 1e6,
        wakes as f64 / n as f64,
        rss_max as f64 / 1024.0
    );
    match (sent0, sent) {
        (Some(a), Some(b)) => println!(
            "lease: under systemd (NOTIFY_SOCKET, WATCHDOG_USEC={}): {} datagrams to the notify socket, {} STATUS= and {} WATCHDOG=1 ({:.2} datagrams per renewal)",
            watchdog_usec.to_string_lossy(),
            b.datagrams - a.datagrams,
            b.status - a.status,
            b.watchdog - a.watchdog,
            (b.datagrams - a.datagrams) as f64 / n as f64
        ),
        _ => println!(
            "lease: run without NOTIFY_SOCKET/WATCHDOG_USEC (UNDER_SYSTEMD=1 adds them)"
        ),
    }
    tp.shutdown().await;
}
