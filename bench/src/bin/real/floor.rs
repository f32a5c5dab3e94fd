//! The floor on the real cluster: bench/src/bin/floor.rs in its child mode, one process per node —
//! a bare reqwest PUT of its node's Lease every 10 s over one keep-alive HTTP/2 + mTLS
//! connection (ALPN h2, as bootlet's Lease connection to kube-apiserver), woken by bootlet's
//! timerfd `Ticker`, with no bootlet code. It measures the renewal loop only, not a join:
//! the driver mints each node's client certificate (CN `system:node:NAME`, O
//! `system:nodes`) with the cluster's own CA and writes the child's directory; the child
//! creates its Lease, then renews it.

use std::path::Path;
use std::time::Duration;

use testplane::kube::{procs::Proc, Cluster};
use testplane::pki::Ca;

/// Rounds the child is told to run: more than any window (11 days at 10 s); it is stopped
/// with the rest of its group.
const ROUNDS: u32 = 100_000;

/// The cluster's CA, loaded once per group, to mint the floor nodes' client certificates.
pub struct Minter {
    ca: Ca,
}

impl Minter {
    pub fn new(c: &Cluster) -> Result<Minter, String> {
        let f = c.files();
        let dir = f.ca_crt.parent().ok_or("the CA has no folder")?;
        if !f.ca_crt.exists() || !f.ca_key.exists() {
            return Err(format!("{}: no CA certificate and key", dir.display()));
        }
        let ca = Ca::load_or_create(dir).map_err(|e| format!("the cluster CA: {e}"))?;
        Ok(Minter { ca })
    }
}

/// Start the floor for node `name` in `dir`, reaching the API server at `server` (the
/// relay): its certificate and key, the CA, the URL and the Lease name in `dir/floor/`, its
/// output in `dir/logs/floor.log`; a renewal every `interval`.
pub fn spawn(
    bin: &Path,
    minter: &Minter,
    ca_pem: &str,
    server: &str,
    dir: &Path,
    name: &str,
    interval: Duration,
) -> Result<Proc, String> {
    if !bin.exists() {
        return Err(format!(
            "{}: no such file (cargo build --release -p bootlet-bench --bin floor)",
            bin.display()
        ));
    }
    let (cert, key) = minter
        .ca
        .client(&format!("system:node:{name}"), &["system:nodes"])
        .map_err(|e| format!("{name}: a client certificate: {e}"))?;
    let child = dir.join("floor");
    std::fs::create_dir_all(&child).map_err(|e| format!("{}: {e}", child.display()))?;
    for (file, text) in [
        ("url", server),
        ("ca.pem", ca_pem),
        ("cert.pem", &cert),
        ("key.pem", &key),
        ("name", name),
    ] {
        let path = child.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let (interval, rounds) = (interval.as_millis().to_string(), ROUNDS.to_string());
    // `Proc` runs `BIN NAME`: the floor ignores its arguments and reads its environment.
    Proc::spawn_env(
        bin,
        dir,
        "floor",
        vec![],
        &[
            ("FLOOR_CHILD", &child.to_string_lossy()),
            ("FLOOR_CHILD_HTTP", "2"),
            ("FLOOR_INTERVAL_MS", &interval),
            ("FLOOR_ROUNDS", &rounds),
        ],
    )
    .map_err(|e| format!("start {name}: {e}"))
}
