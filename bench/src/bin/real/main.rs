//! The real-cluster benches' driver: bootlet beside the kubelet's own identity code (`kube
//! kubelet-identity`, the peer) on one real cluster (etcd, kube-apiserver and
//! kube-controller-manager built from upstream, `testplane::kube`), each subject's
//! connections through a counting relay.
//!
//! - `real bench` (`bash bench/run.sh --real`): N agents of each kind in turn (N = 100,
//!   500), then as references the floor (the bare HTTP stack renewing the Lease) and the
//!   baseline (bench/baseline.sh), node-side and server-side figures per renewal and the
//!   ratio bootlet ÷ peer; the table goes to stdout and `target/bench-real.md`.
//! - `real rotation` (the rest of `run.sh --real`): the cost of one certificate rotation of
//!   each kind, on a cluster signing 8-minute certificates; appended to `target/bench-real.md`.
//! - `real fleet N` (`bash bench/fleet.sh N --real`): N agents of each kind in turn, then
//!   kube-apiserver SIGKILLed and started again (the return spread, the first minute against
//!   a steady one), then restarted with a low `--max-requests-inflight` (429s, pacing).
//!
//! See bench/README.md for the knobs. Exit status 2 when the harness could not measure.

mod agents;
mod apimetrics;
mod baseline;
mod bench;
mod fleet;
mod fleet_report;
mod floor;
mod pin;
mod relay;
mod renewals;
mod rotation;
mod rows;
mod setup;
mod spawn;
mod subject;
mod table;
mod window;

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
