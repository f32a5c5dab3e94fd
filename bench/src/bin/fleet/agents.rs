//! The fleet's processes: N real `bootlet run` processes, each with its own directory
//! (bootstrap kubeconfig in, cert dir, kubeconfig, log and notify socket out), started as
//! fast as the machine spawns them, READY=1 timed on each one's notify socket, RSS read
//! from /proc, and SIGTERM for all at the end. Only processes started here are touched.

use std::path::PathBuf;
use std::time::Duration;

use bootlet_bench::node::{bootlet_run, write_bootstrap, Notify};
use bootlet_bench::procfs::status_kib;
use tokio::process::Child;
use tokio::time::Instant;

use crate::Cfg;

/// One agent of the fleet.
pub struct Agent {
    pub name: String,
    pub child: Child,
    pub pid: u32,
    pub spawned: Instant,
    /// Its notify socket, which times READY=1.
    pub notify: Notify,
    pub dir: PathBuf,
}

/// Every agent and the temp dir holding their directories.
pub struct Fleet {
    _tmp: tempfile::TempDir,
    pub agents: Vec<Agent>,
    pub first_spawn: Instant,
}

pub fn node_name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// Starts `cfg.n` agents, all with the same bootstrap kubeconfig (one join token for the
/// fleet, as `kubeadm join` hands out).
pub async fn start(cfg: &Cfg, bootstrap_kubeconfig: &str) -> Result<Fleet, String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let interval = format!("{}ms", cfg.interval.as_millis());
    let duration = format!("{}ms", (cfg.interval * 4).as_millis());
    let mut agents = Vec::with_capacity(cfg.n);
    let first_spawn = Instant::now();
    for i in 0..cfg.n {
        let name = node_name(i);
        let dir = tmp.path().join(&name);
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write_bootstrap(&dir, bootstrap_kubeconfig)?;
        let notify = Notify::bind(dir.join("notify"))?;
        let log = std::fs::File::create(dir.join("bootlet.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cmd = bootlet_run(&cfg.bootlet, &dir, &name, "off");
        cmd.args(["--lease-renew-interval", &interval])
            .args(["--lease-duration", &duration]);
        if cfg.interval < Duration::from_secs(1) {
            cmd.arg("--test-short-lease-interval");
        }
        let spawned = Instant::now();
        let child = cmd
            .env("NOTIFY_SOCKET", &notify.path)
            .env_remove("WATCHDOG_USEC")
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!(
                    "{}: {e} (build it with bench/fleet.sh)",
                    cfg.bootlet.display()
                )
            })?;
        let pid = child.id().ok_or_else(|| format!("{name} exited at once"))?;
        agents.push(Agent {
            name,
            child,
            pid,
            spawned,
            notify,
            dir,
        });
    }
    Ok(Fleet {
        _tmp: tmp,
        agents,
        first_spawn,
    })
}

// === impl Fleet ===

impl Fleet {
    /// Waits until every agent has sent READY=1 (bounded); fails naming a dead one.
    pub async fn all_ready(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            let waiting = self
                .agents
                .iter()
                .filter(|a| a.ready_at().is_none())
                .count();
            if waiting == 0 {
                return Ok(());
            }
            if let Some(dead) = self.dead() {
                return Err(dead);
            }
            if Instant::now() > deadline {
                return Err(format!("{waiting} agents not READY after {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first agent that has exited, with the end of its log.
    pub fn dead(&mut self) -> Option<String> {
        for a in &mut self.agents {
            if let Ok(Some(status)) = a.child.try_wait() {
                let log = std::fs::read_to_string(a.dir.join("bootlet.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Some(format!("{} exited ({status}): {tail:?}", a.name));
            }
        }
        None
    }

    /// Each agent's start → READY=1, in seconds.
    pub fn bootstrap_secs(&self) -> Vec<f64> {
        self.agents
            .iter()
            .filter_map(|a| a.ready_at().map(|r| (r - a.spawned).as_secs_f64()))
            .collect()
    }

    /// The fleet's first spawn → each agent's READY=1, in seconds.
    pub fn ready_since_first_spawn(&self) -> Vec<f64> {
        self.agents
            .iter()
            .filter_map(|a| a.ready_at().map(|r| (r - self.first_spawn).as_secs_f64()))
            .collect()
    }

    /// Each agent's VmRSS (KiB) now.
    pub fn rss_kib(&self) -> Vec<u64> {
        self.agents
            .iter()
            .filter_map(|a| status_kib(a.pid, "VmRSS:"))
            .collect()
    }

    /// Each agent's peak RSS (VmHWM, KiB).
    pub fn hwm_kib(&self) -> Vec<u64> {
        self.agents
            .iter()
            .filter_map(|a| status_kib(a.pid, "VmHWM:"))
            .collect()
    }

    /// SIGTERM to every agent, then wait for each (killed if it outlives the grace).
    pub async fn stop(mut self) -> usize {
        for a in &self.agents {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &a.pid.to_string()])
                .status();
        }
        let mut clean = 0;
        for a in &mut self.agents {
            match tokio::time::timeout(Duration::from_secs(10), a.child.wait()).await {
                Ok(Ok(s)) if s.success() => clean += 1,
                Ok(_) => {}
                Err(_) => {
                    let _ = a.child.kill().await;
                }
            }
        }
        clean
    }
}

impl Agent {
    pub fn ready_at(&self) -> Option<Instant> {
        self.notify.ready_at()
    }
}
