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

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use testplane::{Event, TestPlane};
use tokio::process::{Child, Command};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bootlet_bin() -> PathBuf {
    std::env::var_os("BOOTLET_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release/bootlet"))
}

struct Node {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn node(tp: &TestPlane) -> Node {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("bootstrap.conf"), tp.bootstrap_kubeconfig()).expect("write");
    Node { _tmp: tmp, dir }
}

fn spawn(node: &Node, name: &str, extra: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Child {
    let d = |f: &str| node.dir.join(f).to_string_lossy().into_owned();
    Command::new(bootlet_bin())
        .args([
            "run",
            "--bootstrap-kubeconfig",
            &d("bootstrap.conf"),
            "--kubeconfig",
        ])
        .arg(d("kubelet.conf"))
        .args([
            "--cert-dir",
            &d("pki"),
            "--node-name",
            name,
            "--metrics-bind-address",
            "off",
        ])
        .args(extra)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bootlet (build it with `cargo build --release`)")
}

/// `VmHWM` or `VmRSS` of a process, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    testplane::sched::status_kib(pid, field).unwrap_or(0)
}

/// CPU time (nanoseconds) and wake-ups (times scheduled in) summed over every thread of
/// `pid`, from /proc/PID/task/*/schedstat.
fn cpu_ns(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .map(|s| testplane::sched::schedstat(&s))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

async fn bootstrap_once(tp: &TestPlane, run: u64) -> (Duration, u64) {
    let node = node(tp);
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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(24 * 3600))
        .start()
        .await
        .expect("testplane");

    // --- Phase 1: bootstrap latency and peak RSS.
    let runs = env_u64("BOOTSTRAP_RUNS", 10);
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
        percentile(&times, 0.5),
        times[times.len() - 1],
        peak as f64 / 1024.0
    );

    // --- Phase 2: the lease loop at the given interval.
    let secs = env_u64("LEASE_SECONDS", 600);
    let interval_ms = env_u64("LEASE_INTERVAL_MS", 10_000);
    let node = node(&tp);
    let name = "bench-lease";
    // As on a real node, the Node object exists (the kubelet registers it): one owner
    // lookup, then nothing but Lease writes.
    tp.create_node(name);
    let mut events = tp.events();
    let interval = format!("{interval_ms}ms");
    let duration = format!("{}s", (interval_ms * 4 / 1000).max(2));
    // UNDER_SYSTEMD=1: as systemd runs it, with a notify socket that counts what bootlet
    // sends and the unit's WatchdogSec=30s. The default runs it bare: the renewal alone.
    let systemd = env_u64("UNDER_SYSTEMD", 0) == 1;
    let notify = systemd.then(|| Notify::bind(&node.dir));
    // WATCHDOG_USEC as the unit sets it (WatchdogSec=30s); at a short LEASE_INTERVAL_MS,
    // scale it (e.g. 2000000 at 1000 ms) to keep one ping per renewal as at 10 s.
    let watchdog_usec = std::ffi::OsString::from(env_u64("WATCHDOG_USEC", 30_000_000).to_string());
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
    let t0 = SystemTime::now();
    let cpu0 = cpu_ns(pid);
    let sent0 = notify.as_ref().map(Notify::counts);
    let mut rss_max = 0;
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(end - tokio::time::Instant::now())).await;
        rss_max = rss_max.max(status_kib(pid, "VmRSS:"));
    }
    let (cpu1, wakes1) = cpu_ns(pid);
    let (cpu, wakes) = (cpu1 - cpu0.0, wakes1 - cpu0.1);
    let sent = notify.as_ref().map(Notify::counts);
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
    let interval = Duration::from_millis(interval_ms).as_secs_f64() * 1000.0;
    let mut dev: Vec<f64> = renewals
        .windows(2)
        .map(|w| {
            (w[1].duration_since(w[0]).unwrap_or_default().as_secs_f64() * 1000.0 - interval).abs()
        })
        .collect();
    dev.sort_by(f64::total_cmp);
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
            percentile(&dev, 0.5),
            percentile(&dev, 0.99),
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

/// A stand-in for systemd's notify socket: counts datagrams and the states in them.
struct Notify {
    path: PathBuf,
    counts: std::sync::Arc<std::sync::Mutex<Sent>>,
}

#[derive(Clone, Copy, Default)]
struct Sent {
    datagrams: u64,
    status: u64,
    watchdog: u64,
}

impl Notify {
    fn bind(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let socket = tokio::net::UnixDatagram::bind(&path).expect("bind the notify socket");
        let counts = std::sync::Arc::new(std::sync::Mutex::new(Sent::default()));
        let tally = counts.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = socket.recv(&mut buf).await {
                let text = String::from_utf8_lossy(&buf[..n]);
                let mut c = tally.lock().unwrap_or_else(|e| e.into_inner());
                c.datagrams += 1;
                for line in text.lines() {
                    c.status += u64::from(line.starts_with("STATUS="));
                    c.watchdog += u64::from(line == "WATCHDOG=1");
                }
            }
        });
        Notify { path, counts }
    }

    fn counts(&self) -> Sent {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
