//! `bench/outage.sh`'s driver (issue #14): the real `bootlet` (release build) against an
//! in-process testplane, renewing its Lease at the real interval; then the API server is
//! gone (listener closed, every connection dropped) for `OUTAGE_SECONDS` (300), and back.
//! It prints, beside their budgets:
//! - the agent's CPU (every thread, from /proc/PID/task/*/schedstat) in each
//!   `CPU_WINDOW_SECONDS` (60) window of the outage, as a share of one core, with its
//!   wake-ups and the warning lines it logged (budget: ≤ 1 % of one core);
//! - the time from the server's return to the first request and to the first Lease renewal
//!   (budget: ≤ one lease interval).
//!
//! Knobs: `OUTAGE_SECONDS` (300), `OUTAGE_INTERVAL_MS` (10000, the Lease interval),
//! `OUTAGE_PHASE_PCT` (50: the server goes this far into a period after a renewal, so an
//! outage of whole intervals does not end just before a renewal is due anyway),
//! `CPU_WINDOW_SECONDS` (60), `BOOTLET_BIN` (target/release/bootlet). Exit status 2 when it
//! could not measure (no renewal, the agent died); a missed budget is a FAIL line, not an
//! exit status.

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bootlet_bench::knobs;
use bootlet_bench::node::NodeDir;
use bootlet_bench::procfs;
use bootlet_bench::table::verdict;
use testplane::{wait_for, Event, TestPlane};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::broadcast;
use tokio::time::Instant;

const NODE: &str = "outage-bench";

fn fail(why: &str) -> ! {
    eprintln!("outage: cannot measure: {why}");
    std::process::exit(2)
}

fn renewal(e: &Event) -> Option<()> {
    match e {
        Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. } if name == NODE => {
            Some(())
        }
        _ => None,
    }
}

#[tokio::main]
async fn main() {
    let outage = Duration::from_secs(knobs::num("OUTAGE_SECONDS", 300));
    let interval = Duration::from_millis(knobs::num("OUTAGE_INTERVAL_MS", 10_000));
    let window = Duration::from_secs(knobs::num("CPU_WINDOW_SECONDS", 60).max(1));
    let phase = interval.mul_f64(knobs::num("OUTAGE_PHASE_PCT", 50).min(99) as f64 / 100.0);
    let bin = knobs::bootlet_bin();

    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(24 * 3600))
        .start()
        .await
        .unwrap_or_else(|e| fail(&format!("testplane: {e}")));
    tp.create_node(NODE);
    let node =
        NodeDir::new(&tp.bootstrap_kubeconfig()).unwrap_or_else(|e| fail(&format!("node: {e}")));
    let mut events = tp.events();
    let interval_arg = format!("{}ms", interval.as_millis());
    let mut child = node
        .command(&bin, NODE, "off")
        .args(["--lease-renew-interval", &interval_arg])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("{}: {e} (cargo build --release)", bin.display())));
    let pid = child.id().unwrap_or_else(|| fail("bootlet exited at once"));
    let warnings = Arc::new(AtomicUsize::new(0));
    if let Some(stderr) = child.stderr.take() {
        let warnings = warnings.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                warnings.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("OUTAGE_ECHO").is_some() {
                    eprintln!("[bootlet] {line}");
                }
            }
        });
    }

    // Steady state first: three renewals.
    for _ in 0..3 {
        if wait_for(&mut events, interval * 2 + Duration::from_secs(10), renewal)
            .await
            .is_none()
        {
            fail("no Lease renewal before the outage");
        }
    }
    tokio::time::sleep(phase).await;
    eprintln!(
        "outage: renewing every {interval:?}; cutting the server {phase:?} after a renewal, for {outage:?} (pid {pid})"
    );

    let mut ledger = procfs::ThreadLedger::new(pid);
    let faults = tp.faults();
    let start_cpu = ledger.refresh();
    let start_warnings = warnings.load(Ordering::Relaxed);
    let started = Instant::now();
    faults.outage(outage).await;
    // From here on: nothing reaches the server until it is back.
    let mut after = events.resubscribe();
    let mut windows = Vec::new();
    let (mut cpu, mut lines, mut from) = (start_cpu, start_warnings, started);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let ended = loop {
        tokio::select! {
            _ = tick.tick() => {
                let now_cpu = ledger.refresh();
                if from.elapsed() >= window {
                    let now_lines = warnings.load(Ordering::Relaxed);
                    windows.push((from.elapsed(), now_cpu.ns - cpu.ns, now_cpu.wakeups - cpu.wakeups, now_lines - lines));
                    (cpu, lines, from) = (now_cpu, now_lines, Instant::now());
                }
                if child.try_wait().ok().flatten().is_some() {
                    fail("bootlet exited during the outage");
                }
            }
            ev = events.recv() => match ev {
                Ok(Event::OutageEnded) => break Instant::now(),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => fail("testplane gone"),
            },
        }
    };
    let total_cpu = ledger.refresh();
    let lasted = ended - started;
    let total_lines = warnings.load(Ordering::Relaxed) - start_warnings;
    if from.elapsed() >= Duration::from_secs(1) {
        // The last, shorter window.
        windows.push((
            from.elapsed(),
            total_cpu.ns - cpu.ns,
            total_cpu.wakeups - cpu.wakeups,
            total_lines + start_warnings - lines,
        ));
    }
    let user = format!("system:node:{NODE}");
    // Events of requests answered just as the server went away come before the return.
    let first_request = async {
        wait_for(&mut after, interval, |e| {
            (*e == Event::OutageEnded).then_some(())
        })
        .await?;
        wait_for(&mut after, interval * 3, |e| match e {
            Event::Request(r) if r.user == user => Some(Instant::now()),
            _ => None,
        })
        .await
    };
    let first_renewal = wait_for(&mut events, interval * 3, |e| {
        renewal(e).map(|()| Instant::now())
    });
    let (request_at, renewed_at) = tokio::join!(first_request, first_renewal);
    let renewed_at =
        renewed_at.unwrap_or_else(|| fail("no renewal within 3 intervals of the return"));
    let _ = child.kill().await;

    println!("## Outage of {lasted:.1?} at a {interval:?} Lease interval, from {phase:?} after a renewal (bootlet pid {pid})");
    println!();
    println!(
        "| window of the outage | CPU | share of one core | wake-ups | warning lines | budget | |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut worst: f64 = 0.0;
    for (i, (len, ns, wakeups, warned)) in windows.iter().enumerate() {
        let share = *ns as f64 / len.as_nanos() as f64 * 100.0;
        worst = worst.max(share);
        println!(
            "| {} ({:.0} s) | {:.1} ms | {share:.3} % | {wakeups} | {warned} | ≤ 1 % | {} |",
            i + 1,
            len.as_secs_f64(),
            *ns as f64 / 1e6,
            verdict(share <= 1.0)
        );
    }
    let ns = total_cpu.ns - start_cpu.ns;
    let share = ns as f64 / lasted.as_nanos() as f64 * 100.0;
    println!(
        "| whole outage ({:.0} s) | {:.1} ms | {share:.3} % | {} | {total_lines} | ≤ 1 % | {} |",
        lasted.as_secs_f64(),
        ns as f64 / 1e6,
        total_cpu.wakeups - start_cpu.wakeups,
        verdict(share <= 1.0)
    );
    println!();
    let to_request = request_at.map(|t| t.saturating_duration_since(ended));
    let to_renewal = renewed_at.saturating_duration_since(ended);
    println!("| after the server's return | measured | budget | |");
    println!("|---|---|---|---|");
    match to_request {
        Some(t) => println!(
            "| first request | {t:.2?} | ≤ {interval:?} | {} |",
            verdict(t <= interval)
        ),
        None => println!("| first request | none within 3 intervals | ≤ {interval:?} | FAIL |"),
    }
    println!(
        "| first Lease renewal | {to_renewal:.2?} | ≤ {interval:?} | {} |",
        verdict(to_renewal <= interval)
    );
    if !windows.is_empty() {
        println!();
        println!("worst {window:?} window: {worst:.3} % of one core");
    }
}
