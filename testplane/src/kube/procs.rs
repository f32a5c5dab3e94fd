//! The component processes: one per component, started from the multi-call binary with its
//! output in `DIR/logs/NAME.log`, told our PID (`BOOTLET_KUBE_PARENT`) so that it stops by
//! itself if we die without stopping it, and stopped with SIGTERM, then SIGKILL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::KubeError;

/// How long a component may take to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// One running component.
pub struct Proc {
    pub name: String,
    pub args: Vec<String>,
    pub log: PathBuf,
    child: Child,
}

// === impl Proc ===

impl Proc {
    /// Start `bin NAME ARGS...`, appending its output to `logs/NAME.log` under `dir`.
    pub fn spawn(bin: &Path, dir: &Path, name: &str, args: Vec<String>) -> Result<Proc, KubeError> {
        Self::spawn_env(bin, dir, name, args, &[])
    }

    pub fn spawn_env(
        bin: &Path,
        dir: &Path,
        name: &str,
        args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Result<Proc, KubeError> {
        let logs = dir.join("logs");
        let io = |p: &Path| {
            let path = p.display().to_string();
            move |source| KubeError::Io { path, source }
        };
        std::fs::create_dir_all(&logs).map_err(io(&logs))?;
        let log = logs.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io(&log))?;
        let err = out.try_clone().map_err(io(&log))?;
        let mut cmd = Command::new(bin);
        cmd.arg(name)
            .args(&args)
            .env("BOOTLET_KUBE_PARENT", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(io(bin))?;
        Ok(Proc {
            name: name.to_string(),
            args,
            log,
            child,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit status if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `n` lines of its log (for an error that says why it did not start).
    pub fn tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// Send `sig` (TERM, KILL, STOP, CONT) to it.
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// SIGTERM, wait up to `STOP_GRACE`, then SIGKILL; returns once it is gone.
    pub async fn stop(mut self) {
        if self.exited().is_some() {
            return;
        }
        self.signal("TERM");
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// SIGKILL (a crash, or a machine losing power) and reap it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A port for a component to listen on (etcd, kube-apiserver, a hollow kubelet): free now,
/// and reserved for the life of this process.
///
/// Handing a component a port means checking it is free and letting the component bind it
/// later: in between, another process may take it (parallel test binaries each start
/// clusters and testplanes). Two guards close that window. The port is drawn below the
/// kernel's ephemeral range (`ip_local_port_range`), so no `bind(127.0.0.1:0)` and no
/// outgoing connection is ever given it; and it is reserved by an exclusive lock on
/// `TMPDIR/bootlet-testplane-ports/PORT.lock`, held until this process exits, so no other
/// caller of this function hands it out too.
pub fn free_port() -> Result<u16, KubeError> {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("bootlet-testplane-ports");
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| KubeError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let (lo, hi) = reserved_range(&std::fs::read_to_string(EPHEMERAL).unwrap_or_default());
    let span = hi - lo;
    let first = rand::random_range(0..span);
    for i in 0..span {
        let port = lo + (first + i) % span;
        let path = dir.join(format!("{port}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        // Reserved; free too? (Something outside these reservations may hold it.)
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
            return Ok(port);
        }
    }
    Err(KubeError::Io {
        path: dir.display().to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("no free port in {lo}..{hi}"),
        ),
    })
}

const EPHEMERAL: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The ports [`free_port`] draws from, given `ip_local_port_range` ("32768\t60999"): up
/// to 10,000 just below the ephemeral range (22768..32768 by default), or, when that
/// range leaves no room below it, every unprivileged port.
fn reserved_range(ephemeral: &str) -> (u16, u16) {
    let low = ephemeral
        .split_whitespace()
        .next()
        .and_then(|l| l.parse::<u16>().ok())
        .unwrap_or(32768);
    let lo = low.saturating_sub(10_000).max(1025);
    if low >= lo + 1000 {
        (lo, low)
    } else {
        (1025, u16::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_outside_the_ephemeral_range_and_reserved() {
        let ephemeral = std::fs::read_to_string(EPHEMERAL).unwrap_or_default();
        let (lo, hi) = reserved_range(&ephemeral);
        let ports: Vec<u16> = (0..3).map(|_| free_port().unwrap()).collect();
        for &port in &ports {
            assert!((lo..hi).contains(&port), "{port} not in {lo}..{hi}");
            // Another caller (another test binary) cannot reserve it while we live.
            let lock = std::env::temp_dir()
                .join("bootlet-testplane-ports")
                .join(format!("{port}.lock"));
            let other = std::fs::File::open(&lock).expect("a reservation file");
            assert!(
                matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
                "{port} is not reserved"
            );
        }
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }

    #[test]
    fn ports_are_drawn_below_the_ephemeral_range() {
        assert_eq!(reserved_range("32768\t60999\n"), (22768, 32768));
        assert_eq!(reserved_range("10000 60999"), (1025, 10000));
        assert_eq!(reserved_range("1024 65535"), (1025, u16::MAX));
        assert_eq!(reserved_range(""), (22768, 32768));
    }
}
