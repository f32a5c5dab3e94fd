//! One bootlet node on this machine: its directory (the bootstrap kubeconfig in; the
//! kubeconfig and cert dir out), the `bootlet run` command line every driver starts it
//! with, and a stand-in for systemd's notify socket. Starting the process, and what is
//! measured on it, belong to the driver.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::net::UnixDatagram;
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A node's directory in a temp dir of its own, removed on drop.
pub struct NodeDir {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

// === impl NodeDir ===

impl NodeDir {
    /// A fresh directory holding `bootstrap.conf`.
    pub fn new(bootstrap_kubeconfig: &str) -> Result<NodeDir, String> {
        let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let dir = tmp.path().to_path_buf();
        write_bootstrap(&dir, bootstrap_kubeconfig)?;
        Ok(NodeDir { _tmp: tmp, dir })
    }

    /// `f` inside the directory, as an argument.
    pub fn path(&self, f: &str) -> String {
        arg(&self.dir, f)
    }

    /// `bootlet run` for this node (see `bootlet_run`).
    pub fn command(&self, bin: &Path, name: &str, metrics: &str) -> Command {
        bootlet_run(bin, &self.dir, name, metrics)
    }
}

/// Writes `dir/bootstrap.conf`.
pub fn write_bootstrap(dir: &Path, bootstrap_kubeconfig: &str) -> Result<(), String> {
    let boot = dir.join("bootstrap.conf");
    std::fs::write(&boot, bootstrap_kubeconfig).map_err(|e| format!("{}: {e}", boot.display()))
}

fn arg(dir: &Path, f: &str) -> String {
    dir.join(f).to_string_lossy().into_owned()
}

/// `bin run` as node `name` in `dir` (`bootstrap.conf` in, `kubelet.conf` and `pki/` out),
/// `/metrics` on `metrics` (`off` for none), `RUST_LOG=warn`, stdin and stdout closed,
/// killed when the handle drops. The caller adds its flags, environment and stderr.
pub fn bootlet_run(bin: &Path, dir: &Path, name: &str, metrics: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .args(["--bootstrap-kubeconfig", &arg(dir, "bootstrap.conf")])
        .args(["--kubeconfig", &arg(dir, "kubelet.conf")])
        .args(["--cert-dir", &arg(dir, "pki")])
        .args(["--node-name", name, "--metrics-bind-address", metrics])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// What arrived on a notify socket so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    pub datagrams: u64,
    /// `STATUS=` lines.
    pub status: u64,
    /// `WATCHDOG=1` lines.
    pub watchdog: u64,
    /// When the first `READY=1` arrived.
    pub ready: Option<Instant>,
}

impl Sent {
    /// Counts one datagram that arrived at `now`.
    fn add(&mut self, datagram: &str, now: Instant) {
        self.datagrams += 1;
        for line in datagram.lines() {
            self.status += u64::from(line.starts_with("STATUS="));
            self.watchdog += u64::from(line == "WATCHDOG=1");
            if line == "READY=1" && self.ready.is_none() {
                self.ready = Some(now);
            }
        }
    }
}

/// A stand-in for systemd's notify socket: a datagram socket read by a task that counts
/// what arrives (so the agent's sends never back up). The task ends on drop.
pub struct Notify {
    pub path: PathBuf,
    sent: Arc<Mutex<Sent>>,
    task: JoinHandle<()>,
}

// === impl Notify ===

impl Notify {
    /// Binds `path` (which must not exist) and starts reading it.
    pub fn bind(path: PathBuf) -> Result<Notify, String> {
        let socket = UnixDatagram::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let sent = Arc::new(Mutex::new(Sent::default()));
        let tally = sent.clone();
        let task = tokio::spawn(async move {
            // sd_notify messages are a few lines; a longer datagram still counts as one,
            // its tail cut. 4 KiB a socket keeps a fleet of a thousand at 4 MiB.
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf).await {
                let text = String::from_utf8_lossy(&buf[..n]);
                let mut s = tally.lock().unwrap_or_else(|e| e.into_inner());
                s.add(&text, Instant::now());
            }
        });
        Ok(Notify { path, sent, task })
    }

    pub fn sent(&self) -> Sent {
        *self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn ready_at(&self) -> Option<Instant> {
        self.sent().ready
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_lines_and_keeps_the_first_ready() {
        let (t0, t1) = (Instant::now(), Instant::now() + Duration::from_secs(1));
        let mut s = Sent::default();
        s.add("STATUS=bootstrapping", t0);
        s.add("READY=1\nSTATUS=renewing", t0);
        s.add("WATCHDOG=1", t1);
        s.add("READY=1\nWATCHDOG=1", t1);
        assert_eq!(
            s,
            Sent {
                datagrams: 4,
                status: 2,
                watchdog: 2,
                ready: Some(t0),
            }
        );
    }

    #[tokio::test]
    async fn a_datagram_sent_to_the_socket_is_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let notify = Notify::bind(dir.path().join("notify.sock")).expect("bind");
        let client = UnixDatagram::unbound().expect("socket");
        client
            .send_to(b"READY=1\nSTATUS=up", &notify.path)
            .await
            .expect("send");
        let deadline = Instant::now() + Duration::from_secs(5);
        while notify.sent().datagrams == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sent = notify.sent();
        assert_eq!((sent.datagrams, sent.status), (1, 1));
        assert!(sent.ready.is_some());
    }
}
