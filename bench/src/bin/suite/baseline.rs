//! Phase B, the hand-written baseline (bench/baseline.sh: bash, openssl, kubectl) against
//! the same testplane, after phase A (not beside it: two cores). Its CPU is the shell's plus
//! every child it reaped (/proc/PID/stat); its peak RSS is the largest process's, from GNU
//! time's getrusage when /usr/bin/time exists.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bootlet_bench::procfs;
use testplane::TestPlane;
use tokio::process::Command;
use tokio::time::Instant;

use crate::track::{CpuSource, Seen, Track};
use crate::Cfg;

pub const NODE: &str = "bench-baseline";

pub struct Base {
    pub seen: Seen,
    pub cert_ms: f64,
    pub kubeconfig_ms: f64,
    /// The largest process's peak RSS (a kubectl), from getrusage via GNU time.
    pub maxrss_kib: Option<u64>,
    /// The shell's own RSS, the most seen at a sample.
    pub bash_rss_kib: Option<u64>,
}

pub async fn run(cfg: &Cfg, tp: Arc<TestPlane>) -> Result<Base, String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path();
    let home = dir.join("home");
    std::fs::create_dir(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    std::fs::write(dir.join("bootstrap.conf"), tp.bootstrap_kubeconfig())
        .map_err(|e| format!("bootstrap.conf: {e}"))?;
    let stderr =
        std::fs::File::create(dir.join("stderr")).map_err(|e| format!("baseline stderr: {e}"))?;
    let time_out = dir.join("time.out");
    let mut cmd = match &cfg.time {
        Some(time) => {
            let mut c = Command::new(time);
            c.arg("-f").arg("%M").arg("-o").arg(&time_out).arg("bash");
            c
        }
        None => Command::new("bash"),
    };
    let events = tp.events();
    let start = Instant::now();
    let mut child = cmd
        .arg(&cfg.baseline_script)
        .env("NODE_NAME", NODE)
        .env("BOOTSTRAP_KUBECONFIG", dir.join("bootstrap.conf"))
        .env("KUBECONFIG_OUT", dir.join("kubelet.conf"))
        .env("CERT_DIR", dir.join("pki"))
        .env("INTERVAL", cfg.interval.as_secs_f64().to_string())
        .env("KUBECTL", &cfg.kubectl)
        // A fresh HOME: kubectl's discovery cache starts cold, as on a new node.
        .env("HOME", &home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", cfg.baseline_script.display()))?;
    let wrapper = child.id().ok_or("the baseline exited at once")?;
    let failed = |what: &str| {
        let err = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
        format!("baseline: {what}; its stderr:\n{err}")
    };
    let bash = match cfg.time {
        Some(_) => wait_for(start, Duration::from_secs(5), || {
            procfs::children(wrapper).first().copied()
        })
        .await
        .ok_or_else(|| failed("no shell under GNU time"))?,
        None => wrapper,
    };
    let pem = dir.join("pki/kubelet-client-current.pem");
    let cert = wait_for(start, Duration::from_secs(120), || {
        std::fs::read_to_string(&pem)
            .is_ok_and(|s| s.contains("PRIVATE KEY"))
            .then(|| start.elapsed())
    })
    .await
    .ok_or_else(|| failed("no certificate after 120 s"))?;
    let kubeconfig = dir.join("kubelet.conf");
    let ready = wait_for(start, Duration::from_secs(120), || {
        kubeconfig.exists().then(|| start.elapsed())
    })
    .await
    .ok_or_else(|| failed("no kubeconfig after 120 s"))?;
    let mut track = Track::start(
        tp,
        events,
        CpuSource::Shell(bash),
        bash,
        NODE,
        Box::new(|_| true),
        cfg.interval,
    );
    let n = cfg.baseline + 1;
    let within = cfg.interval * (n as u32 + 3) + Duration::from_secs(60);
    if let Err(e) = track.samples(n, within, "baseline").await {
        return Err(failed(&e));
    }
    let seen = track.stop();
    // End the shell (GNU time then reports), then whatever it left in its process group
    // (the `sleep` it was waiting on).
    kill(&["-TERM", &bash.to_string()]).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    kill(&["-TERM", "--", &format!("-{wrapper}")]).await;
    let maxrss_kib = cfg
        .time
        .as_ref()
        .and_then(|_| procfs::read_maxrss(&time_out));
    Ok(Base {
        bash_rss_kib: seen.samples.iter().filter_map(|s| s.rss_kib).max(),
        seen,
        cert_ms: cert.as_secs_f64() * 1e3,
        kubeconfig_ms: ready.as_secs_f64() * 1e3,
        maxrss_kib,
    })
}

/// Polls `f` every millisecond until it yields or `within` has passed since `start`.
async fn wait_for<T>(
    start: Instant,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        if let Some(t) = f() {
            return Some(t);
        }
        if start.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// kill(1) with these arguments: signals only the processes this phase started, by id.
async fn kill(args: &[&str]) {
    let _ = Command::new("kill")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .await;
}
