//! Phase A, the real `bootlet` binary: repeated bootstraps (start → certificate, start →
//! READY, peak RSS), then one fresh node followed from bootstrap through window 1 and the
//! steady window, with the floor (a bare HTTP/2 PUT loop in a child process) running in
//! the steady window half an interval out of phase. `/metrics` is on throughout.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bootlet_bench::node::{NodeDir, Notify};
use bootlet_bench::procfs::{status_kib, ThreadLedger};
use testplane::TestPlane;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::track::{CpuSource, Seen, Track};
use crate::Cfg;

/// The Lease the followed bootlet renews, and the floor's.
pub const NODE: &str = "bench-node";
pub const FLOOR_NODE: &str = "bench-floor";

/// Phase A's bootstraps.
pub struct Boot {
    pub cert_ms: Vec<f64>,
    pub ready_ms: Vec<f64>,
    pub hwm_kib: u64,
}

/// Phase A's followed node and the floor beside it.
pub struct Long {
    pub bootlet: Seen,
    pub floor: Seen,
    pub hwm_kib: Option<u64>,
    pub metrics_addr: String,
    /// What one GET /metrics after the CPU windows answered.
    pub scrape: String,
    /// Datagrams bootlet sent to the notify socket during the windows (BENCH_UNDER_SYSTEMD).
    pub notify_datagrams: Option<u64>,
}

/// A loopback address nobody listens on right now, for `--metrics-bind-address`.
fn free_addr() -> Result<String, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.to_string())
        .map_err(|e| format!("local_addr: {e}"))
}

fn spawn_bootlet(
    cfg: &Cfg,
    node: &NodeDir,
    name: &str,
    metrics: &str,
    extra: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<Child, String> {
    node.command(&cfg.bootlet, name, metrics)
        .args(extra)
        .envs(env.iter().copied())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            format!(
                "{}: {e} (build it with bench/run.sh)",
                cfg.bootlet.display()
            )
        })
}

fn has_key(p: &Path) -> bool {
    std::fs::read_to_string(p).is_ok_and(|s| s.contains("PRIVATE KEY"))
}

/// `runs` bootstraps of fresh nodes, each with a notify socket for READY=1.
pub async fn bootstrap_runs(cfg: &Cfg, tp: &TestPlane) -> Result<Boot, String> {
    let mut boot = Boot {
        cert_ms: vec![],
        ready_ms: vec![],
        hwm_kib: 0,
    };
    for run in 0..cfg.bootstrap_runs {
        let node = NodeDir::new(&tp.bootstrap_kubeconfig())?;
        let notify = Notify::bind(node.dir.join("notify.sock"))?;
        let current = node.dir.join("pki/kubelet-client-current.pem");
        let start = Instant::now();
        let mut child = spawn_bootlet(
            cfg,
            &node,
            &format!("bench-boot-{run}"),
            &free_addr()?,
            &["--renew-lease=false"],
            &[("NOTIFY_SOCKET", notify.path.as_os_str())],
        )?;
        let pid = child.id().ok_or("bootlet exited at once")?;
        let (mut cert, mut hwm) = (None, 0);
        while cert.is_none() || notify.ready_at().is_none() {
            hwm = hwm.max(status_kib(pid, "VmHWM:").unwrap_or(0));
            if cert.is_none() && has_key(&current) {
                cert = Some(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "bootstrap run {run}: no certificate or READY=1 after 10 s"
                ));
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        hwm = hwm.max(status_kib(pid, "VmHWM:").unwrap_or(0));
        let _ = child.kill().await;
        let ready = notify.ready_at().unwrap_or(start) - start;
        boot.cert_ms
            .push(cert.unwrap_or_default().as_secs_f64() * 1e3);
        boot.ready_ms.push(ready.as_secs_f64() * 1e3);
        boot.hwm_kib = boot.hwm_kib.max(hwm);
    }
    Ok(boot)
}

/// Waiting on `n` samples of a process renewing every `interval`, with room to spare.
fn patience(interval: Duration, n: usize) -> Duration {
    interval * (n as u32 + 3) + Duration::from_secs(60)
}

/// One fresh node from bootstrap through window 1 and the steady window.
pub async fn long_run(cfg: &Cfg, tp: Arc<TestPlane>) -> Result<Long, String> {
    // As on a real node, the Node object exists (the kubelet registers it): one owner
    // lookup, then nothing but Lease writes.
    tp.create_node(NODE);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig())?;
    let metrics_addr = free_addr()?;
    let interval = format!("{}ms", cfg.interval.as_millis());
    let duration = format!("{}ms", cfg.interval.as_millis() * 4);
    let notify = if cfg.under_systemd {
        Some(Notify::bind(node.dir.join("notify.sock"))?)
    } else {
        None
    };
    let mut env = vec![];
    if let Some(n) = &notify {
        env.push(("NOTIFY_SOCKET", n.path.as_os_str()));
        env.push(("WATCHDOG_USEC", std::ffi::OsStr::new("30000000")));
    }
    let events = tp.events();
    let mut child = spawn_bootlet(
        cfg,
        &node,
        NODE,
        &metrics_addr,
        &[
            "--lease-renew-interval",
            &interval,
            "--lease-duration",
            &duration,
        ],
        &env,
    )?;
    let pid = child.id().ok_or("bootlet exited at once")?;
    let floor_cn = format!("system:node:{FLOOR_NODE}");
    let not_floor = floor_cn.clone();
    let mut track = Track::start(
        tp.clone(),
        events,
        CpuSource::Threads(ThreadLedger::new(pid)),
        pid,
        NODE,
        Box::new(move |cn| cn != Some(not_floor.as_str())),
        cfg.interval,
    );
    // The floor starts an interval before the steady window, so its connection is up and
    // its first sample taken when the window opens.
    let floor_at = cfg.window1.saturating_sub(1).max(1);
    track
        .samples(floor_at, patience(cfg.interval, floor_at), "bootlet")
        .await?;
    let floor_events = tp.events();
    let (mut floor, _floor_dir) = spawn_floor(cfg, &tp)?;
    let floor_pid = floor.id().ok_or("the floor exited at once")?;
    let mut floor_track = Track::start(
        tp.clone(),
        floor_events,
        CpuSource::Threads(ThreadLedger::new(floor_pid)),
        floor_pid,
        FLOOR_NODE,
        Box::new(move |cn| cn == Some(floor_cn.as_str())),
        cfg.interval,
    );
    let sent0 = notify.as_ref().map(|n| n.sent().datagrams);
    let n = cfg.window1 + cfg.steady + 1;
    track
        .samples(n, patience(cfg.interval, n), "bootlet")
        .await?;
    let sent1 = notify.as_ref().map(|n| n.sent().datagrams);
    floor_track
        .samples(
            cfg.steady + 2,
            patience(cfg.interval, cfg.steady + 2),
            "floor",
        )
        .await?;
    let hwm_kib = status_kib(pid, "VmHWM:");
    let scrape = scrape_metrics(&metrics_addr).await;
    let (bootlet, floor_seen) = (track.stop(), floor_track.stop());
    let _ = child.kill().await;
    let _ = floor.kill().await;
    Ok(Long {
        bootlet,
        floor: floor_seen,
        hwm_kib,
        metrics_addr,
        scrape,
        notify_datagrams: sent0.zip(sent1).map(|(a, b)| b - a),
    })
}

/// The floor: bench/src/bin/floor.rs's child mode, a bare reqwest PUT of a Lease over HTTP/2 +
/// mTLS woken by bootlet's timerfd Ticker, for enough rounds to cover the steady window.
fn spawn_floor(cfg: &Cfg, tp: &TestPlane) -> Result<(Child, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let (cert, key) = tp
        .client_cert(&format!("system:node:{FLOOR_NODE}"), &["system:nodes"])
        .map_err(|e| format!("floor client certificate: {e}"))?;
    for (file, text) in [
        ("url", tp.url()),
        ("ca.pem", tp.ca_pem()),
        ("cert.pem", cert),
        ("key.pem", key),
        ("name", FLOOR_NODE.to_string()),
    ] {
        std::fs::write(dir.path().join(file), text).map_err(|e| format!("{file}: {e}"))?;
    }
    let child = Command::new(&cfg.floor)
        .env("FLOOR_CHILD", dir.path())
        .env("FLOOR_INTERVAL_MS", cfg.interval.as_millis().to_string())
        .env("FLOOR_ROUNDS", (cfg.steady + 4).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e} (build it with bench/run.sh)", cfg.floor.display()))?;
    Ok((child, dir))
}

/// One plain GET /metrics: "HTTP 200, N bytes" or why not.
async fn scrape_metrics(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut body = Vec::new();
        s.read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    match tokio::time::timeout(Duration::from_secs(5), get).await {
        Err(_) => "no answer within 5 s".into(),
        Ok(Err(e)) => format!("not served by this build ({e})"),
        Ok(Ok(body)) => {
            let text = String::from_utf8_lossy(&body);
            let status = text.lines().next().unwrap_or("").trim().to_string();
            format!("{status}, {} bytes", body.len())
        }
    }
}
