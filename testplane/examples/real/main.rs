//! The real-cluster benches' driver: bootlet beside the kubelet's own identity code (`kube
//! kubelet-identity`, the peer) on one real cluster (etcd, kube-apiserver and
//! kube-controller-manager built from upstream, `testplane::kube`), each subject's
//! connections through a counting relay.
//!
//! - `real bench` (`bash bench/run.sh --real`): N agents of each kind in turn (N = 100,
//!   500), node-side and server-side figures per renewal and the ratio bootlet ÷ peer;
//!   the table goes to stdout and `target/bench-real.md`.
//! - `real rotation` (the rest of `run.sh --real`): the cost of one certificate rotation of
//!   each kind, on a cluster signing 3-minute certificates; appended to `target/bench-real.md`.
//! - `real fleet N` (`bash bench/fleet.sh N --real`): N agents of each kind in turn, then
//!   kube-apiserver SIGKILLed and started again (the return spread, the first minute against
//!   a steady one), then restarted with a low `--max-requests-inflight` (429s, pacing).
//!
//! See bench/README.md for the knobs. Exit status 2 when the harness could not measure.

mod agents;
mod apimetrics;
mod bench;
mod fleet;
#[allow(dead_code)] // shared with the suite, which uses all of it
#[path = "../suite/procfs.rs"]
mod procfs;
mod relay;
mod rotation;
mod table;
mod window;

use std::path::PathBuf;
use std::time::Duration;

use agents::Bins;
use testplane::kube::{Cluster, Options};

/// A number from the environment, or `default`.
pub fn num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

pub fn secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(num(name, default))
}

/// MemAvailable from /proc/meminfo, in KiB.
pub fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
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

/// Start the cluster for a run, state under `target/NAME-state`.
pub async fn cluster(name: &str) -> Result<Cluster, String> {
    let dir = PathBuf::from("target").join(format!("{name}-state"));
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!(
        "real: starting etcd, kube-apiserver, kube-controller-manager under {}",
        dir.display()
    );
    let c = Cluster::start(Options::new(dir))
        .await
        .map_err(|e| format!("start the cluster: {e}"))?;
    eprintln!("real: Kubernetes {} at {}", c.release(), c.url());
    Ok(c)
}

pub fn bins(c: &Cluster) -> Result<Bins, String> {
    let bootlet = std::env::var_os("BOOTLET_BIN")
        .map_or_else(|| PathBuf::from("target/release/bootlet"), PathBuf::from);
    let bootlet = std::path::absolute(&bootlet).map_err(|e| e.to_string())?;
    if !bootlet.exists() {
        return Err(format!(
            "{}: no such file (cargo build --release)",
            bootlet.display()
        ));
    }
    Ok(Bins {
        bootlet,
        kube: c.bin().to_path_buf(),
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = rt.block_on(async {
        match args.first().map(String::as_str) {
            Some("bench") => bench::run().await,
            Some("rotation") => rotation::run().await,
            Some("fleet") => {
                let n = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(500);
                fleet::run(n).await
            }
            _ => Err("usage: real bench | real rotation | real fleet N".into()),
        }
    });
    match result {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("real: {e}");
            std::process::exit(2);
        }
    }
}
