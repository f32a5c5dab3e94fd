//! What every part of the driver shares: knobs from the environment, the memory the peers
//! may take, the cluster's start and the binaries (and the baseline's script) the agents run.

use std::path::PathBuf;
use std::time::Duration;

use testplane::kube::{Cluster, Options};

use crate::pin::Split;
use crate::spawn::Bins;

pub use bootlet_bench::knobs::num;
pub use bootlet_bench::procfs::mem_available_kib;

pub fn secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(num(name, default))
}

/// The most peers that fit: what is available now less `REAL_MEM_MARGIN_MIB` (4096), over
/// a peer's private memory (RssAnon; the binary's file pages are shared by every peer) with
/// half added, at most `want`.
pub fn peers_that_fit(want: usize, peer_anon_kib: f64) -> usize {
    let margin = num("REAL_MEM_MARGIN_MIB", 4096) * 1024;
    let room = mem_available_kib().saturating_sub(margin) as f64;
    let fit = (room / (peer_anon_kib.max(1.0) * 1.5)).floor() as usize;
    fit.clamp(1, want)
}

/// Start the cluster for a run, state under `target/NAME-state`, its control plane on a
/// CPU of its own when `pinned` (`pin.rs`; the split used is returned).
pub async fn cluster(name: &str, pinned: bool) -> Result<(Cluster, Option<Split>), String> {
    let dir = PathBuf::from("target").join(format!("{name}-state"));
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!(
        "real: starting etcd, kube-apiserver, kube-controller-manager under {}",
        dir.display()
    );
    let mut opts = Options::new(dir);
    if pprof_dir().is_some() {
        opts.apiserver_args.push("--profiling=true".into());
    }
    let split = if pinned { Split::from_env() } else { None };
    let (c, split) = crate::pin::cluster(opts, split).await?;
    eprintln!("real: Kubernetes {} at {}", c.release(), c.url());
    Ok((c, split))
}

/// `REAL_PPROF`: a directory for kube-apiserver's CPU profiles (one per subject's steady
/// window, `go tool pprof` reads them); unset, kube-apiserver runs with profiling off.
pub fn pprof_dir() -> Option<PathBuf> {
    std::env::var_os("REAL_PPROF")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// kube-apiserver's CPU profile over the next `secs` seconds, written to `DIR/NAME.pb.gz`
/// when `REAL_PPROF` is set (a failed profile is reported, not fatal: it is a diagnosis).
pub async fn pprof(c: &Cluster, name: &str, secs: u64) {
    let Some(dir) = pprof_dir() else { return };
    let path = format!("/debug/pprof/profile?seconds={secs}");
    let out = c.kubectl(&["get", "--raw", &path]).await;
    let file = dir.join(format!("{name}.pb.gz"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, &out.stdout));
    match (out.status.success(), written) {
        (true, Ok(())) => eprintln!("real: kube-apiserver's CPU profile in {}", file.display()),
        (ok, w) => eprintln!(
            "real: no CPU profile for {name} (kubectl ok: {ok}, write: {w:?}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }
}

/// A path from the environment, or `default`, made absolute.
fn path(name: &str, default: &str) -> Result<PathBuf, String> {
    let p = bootlet_bench::knobs::path(name, default);
    std::path::absolute(&p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The binaries. bootlet must exist; the floor (`FLOOR_BIN`) and the baseline
/// (`BASELINE_SCRIPT`, with the release's kubectl and GNU time when present) are checked when
/// `real bench` starts them.
pub fn bins(c: &Cluster) -> Result<Bins, String> {
    let bootlet = path("BOOTLET_BIN", "target/release/bootlet")?;
    if !bootlet.exists() {
        return Err(format!(
            "{}: no such file (cargo build --release)",
            bootlet.display()
        ));
    }
    let kubectl = testplane::kube::build::kubectl().map_err(|e| format!("kubectl: {e}"))?;
    let time = PathBuf::from("/usr/bin/time");
    Ok(Bins {
        bootlet,
        kube: c.bin().to_path_buf(),
        floor: path("FLOOR_BIN", "target/release/floor")?,
        baseline: path("BASELINE_SCRIPT", "bench/baseline.sh")?,
        kubectl,
        time: time.exists().then_some(time),
    })
}
