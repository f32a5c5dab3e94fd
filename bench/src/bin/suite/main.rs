//! `bash bench/run.sh`'s driver: bootlet, the hand-written baseline and the bare HTTP stack
//! against one in-process testplane, measured the same way, printed as one table (see
//! bench/README.md). Phase A: bootlet's bootstraps, then one fresh node followed through
//! window 1 (the first minutes after bootstrap) and the steady window, with the floor
//! beside it in the steady window. Phase B: bench/baseline.sh. Sequential, not side by side.
//!
//! Exit status: 0 with the table (a missed budget prints FAIL), 2 when the harness could
//! not measure (a binary missing, a process that died or stopped renewing).

mod agent;
mod baseline;
mod report;
mod stats;
mod table;
mod track;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bootlet_bench::{knobs, procfs};
use testplane::TestPlane;

/// What to run and for how long; every field from the environment (bench/README.md).
pub struct Cfg {
    /// `BENCH_INTERVAL_MS` (10000): the Lease renewal interval of all three.
    pub interval: Duration,
    /// `BENCH_WINDOW1_SECONDS` (120), as renewals: window 1, right after bootstrap.
    pub window1: usize,
    /// `BENCH_STEADY_SECONDS` (120), as renewals: the steady window, right after window 1.
    pub steady: usize,
    /// `BENCH_BASELINE_SECONDS` (120), as renewals: the baseline's window.
    pub baseline: usize,
    /// `BENCH_BOOTSTRAP_RUNS` (10).
    pub bootstrap_runs: u32,
    /// `BENCH_UNDER_SYSTEMD=1`: the followed bootlet gets NOTIFY_SOCKET and WATCHDOG_USEC.
    pub under_systemd: bool,
    /// `BOOTLET_BIN` (target/release/bootlet).
    pub bootlet: PathBuf,
    /// `FLOOR_BIN` (target/release/floor).
    pub floor: PathBuf,
    /// `BASELINE_SCRIPT` (bench/baseline.sh).
    pub baseline_script: PathBuf,
    /// `KUBECTL` (kubectl): the baseline's kubectl.
    pub kubectl: String,
    /// `BENCH_TIME` (/usr/bin/time when it exists): GNU time, for the baseline's peak RSS.
    pub time: Option<PathBuf>,
}

impl Cfg {
    fn from_env() -> Cfg {
        let (num, path) = (knobs::num, knobs::path);
        let interval = Duration::from_millis(num("BENCH_INTERVAL_MS", 10_000).max(100));
        let renewals = |name: &str| {
            let secs = Duration::from_secs(num(name, 120));
            (secs.as_millis() / interval.as_millis()).max(1) as usize
        };
        let time = path("BENCH_TIME", "/usr/bin/time");
        Cfg {
            interval,
            window1: renewals("BENCH_WINDOW1_SECONDS"),
            steady: renewals("BENCH_STEADY_SECONDS"),
            baseline: renewals("BENCH_BASELINE_SECONDS"),
            bootstrap_runs: u32::try_from(num("BENCH_BOOTSTRAP_RUNS", 10).max(1)).unwrap_or(10),
            under_systemd: num("BENCH_UNDER_SYSTEMD", 0) == 1,
            bootlet: knobs::bootlet_bin(),
            floor: knobs::floor_bin(),
            baseline_script: path("BASELINE_SCRIPT", "bench/baseline.sh"),
            kubectl: std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()),
            time: time.exists().then_some(time),
        }
    }
}

#[tokio::main]
async fn main() {
    let cfg = Cfg::from_env();
    bootlet_bench::exit_on_error("bench", run(&cfg).await);
}

async fn run(cfg: &Cfg) -> Result<(), String> {
    let load_before = procfs::loadavg();
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(24 * 3600))
        .start()
        .await
        .map_err(|e| format!("testplane: {e}"))?;
    let tp = Arc::new(tp);
    let ms = cfg.interval.as_millis();
    eprintln!(
        "bench: phase A: {} bootstraps, then one node for {} + {} renewals at {ms} ms (the floor beside it in the second window)",
        cfg.bootstrap_runs, cfg.window1, cfg.steady
    );
    let boot = agent::bootstrap_runs(cfg, &tp).await?;
    let long = agent::long_run(cfg, tp.clone()).await?;
    eprintln!(
        "bench: phase B: the baseline ({}, kubectl {}) for {} renewals",
        cfg.baseline_script.display(),
        cfg.kubectl,
        cfg.baseline
    );
    let base = baseline::run(cfg, tp.clone()).await?;
    let requests = tp.requests();
    let load_after = procfs::loadavg();
    let figures = report::Figures {
        cfg,
        boot: &boot,
        long: &long,
        base: &base,
        requests: &requests,
    };
    let (text, failed) = table::render(&report::rows(&figures));
    println!("{text}");
    let machine = format!(
        "Load average {load_before} before, {load_after} after ({} cores; the machine is shared, other builds may run).",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for note in report::notes(&figures, machine) {
        println!("- {note}");
    }
    println!(
        "\n{failed} budget(s) missed{}",
        if failed == 0 { "" } else { " (marked FAIL)" }
    );
    Ok(())
}
