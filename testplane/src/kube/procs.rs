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

/// A port nobody listens on now (bound to 127.0.0.1:0 and released).
pub fn free_port() -> Result<u16, KubeError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| KubeError::Io {
        path: "127.0.0.1:0".into(),
        source,
    })?;
    Ok(l.local_addr()
        .map_err(|source| KubeError::Io {
            path: "127.0.0.1:0".into(),
            source,
        })?
        .port())
}
