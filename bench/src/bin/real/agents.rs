//! N agents of one subject started together, each a fresh node: its own directory
//! (bootstrap kubeconfig in, cert dir and kubeconfig out, its log), its Node object created
//! first as the kubelet's registration would have, start → certificate on disk timed, CPU
//! (every thread; the baseline's shell with its children) and memory read from /proc,
//! SIGTERM for all at the end. Only processes started here are touched.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bootlet_bench::procfs::status_kib;
use bootlet_bench::procfs::ThreadLedger;
use futures_util::StreamExt;
use serde_json::json;
use testplane::kube::Cluster;
use tokio::time::Instant;

use crate::relay::Relay;
use crate::spawn::{Bins, Handle, Launch};
pub use crate::subject::Kind;
use crate::subject::{Subject, INTERVAL};

pub struct Agent {
    pub name: String,
    proc: Option<Handle>,
    pid: u32,
    spawned: Instant,
    dir: PathBuf,
    /// Process start → `kubelet-client-current.pem` in its cert dir.
    pub cert_after: Option<Duration>,
    /// Every thread's CPU (None for the baseline: its shell is read with its children).
    ledger: Option<ThreadLedger>,
}

/// CPU and memory over a group of agents at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub cpu_ns: u64,
    pub wakeups: u64,
    pub rss_kib_sum: u64,
    pub rss_kib_max: u64,
    pub hwm_kib_sum: u64,
    pub hwm_kib_max: u64,
    /// Private memory (RssAnon: heap, stacks; not the binary's shared file pages).
    pub anon_kib_sum: u64,
    pub alive: usize,
}

pub struct Agents {
    pub subject: Subject,
    pub agents: Vec<Agent>,
}

/// Where a group of agents runs: the cluster, the binaries, the relay they reach the API
/// server through, and the folder their nodes live in.
#[derive(Clone, Copy)]
pub struct Stage<'a> {
    pub c: &'a Cluster,
    pub bins: &'a Bins,
    pub relay: &'a Relay,
    pub root: &'a Path,
}

/// What a `Stage` borrows, owned: every measurement (`bench`, `rotation`, `fleet`) starts
/// by setting it up on its cluster.
pub struct Set {
    bins: Bins,
    pub relay: Relay,
    root: tempfile::TempDir,
}

// === impl Set ===

impl Set {
    /// The binaries (bootlet must exist), a counting relay in front of `c`'s API server and
    /// a temp dir for the nodes.
    pub async fn up(c: &Cluster) -> Result<Set, String> {
        let bins = crate::setup::bins(c)?;
        let relay = Relay::start(c.addr())
            .await
            .map_err(|e| format!("relay: {e}"))?;
        let root = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        Ok(Set { bins, relay, root })
    }

    pub fn stage<'a>(&'a self, c: &'a Cluster) -> Stage<'a> {
        Stage {
            c,
            bins: &self.bins,
            relay: &self.relay,
            root: self.root.path(),
        }
    }
}

// === impl Agents ===

impl Agents {
    /// A fresh bootstrap token, its kubeconfig pointing at the stage's relay, and `n`
    /// agents of `who` joining with it under the stage's root (the floor takes no token: the
    /// driver mints its certificates).
    pub async fn join(
        stage: Stage<'_>,
        who: impl Into<Subject>,
        n: usize,
        prefix: &str,
    ) -> Result<Agents, String> {
        let who = who.into();
        let boot = if who == Subject::Floor {
            String::new()
        } else {
            let token = stage
                .c
                .create_token(testplane::kube::TOKEN_TTL)
                .await
                .map_err(|e| format!("a bootstrap token: {e}"))?;
            stage.c.kubeconfig_for_token_at(&stage.relay_url(), &token)
        };
        Agents::start(stage, who, n, prefix, &boot).await
    }

    /// Create `n` Node objects (label `bench=PREFIX`), then start `n` agents of `who`
    /// under the stage's root, all with `bootstrap` as their bootstrap kubeconfig (none for
    /// the floor). The floor's starts are spread over one interval: it has no join, whose
    /// queue spreads the others' renewals, and N processes renewing in the same instant
    /// would measure the burst, not the floor.
    async fn start(
        stage: Stage<'_>,
        who: Subject,
        n: usize,
        prefix: &str,
        bootstrap: &str,
    ) -> Result<Agents, String> {
        let Stage { c, bins, root, .. } = stage;
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:04}")).collect();
        create_nodes(c, &names, prefix).await?;
        let launch = Launch::new(who, bins, c, stage.relay_url())?;
        let mut agents = Vec::with_capacity(n);
        for (i, name) in names.into_iter().enumerate() {
            if who == Subject::Floor && i > 0 {
                tokio::time::sleep(INTERVAL / n as u32).await;
            }
            let dir = root.join(&name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if !bootstrap.is_empty() {
                let boot = dir.join("bootstrap-kubelet.conf");
                std::fs::write(&boot, bootstrap).map_err(|e| format!("{}: {e}", boot.display()))?;
            }
            let spawned = Instant::now();
            let handle = launch.spawn(&dir, &name).await?;
            let pid = handle.pid().ok_or_else(|| format!("{name}: no pid"))?;
            let ledger = match handle {
                Handle::Proc(_) => Some(ThreadLedger::new(pid)),
                Handle::Shell(_) => None,
            };
            agents.push(Agent {
                name,
                proc: Some(handle),
                pid,
                spawned,
                dir,
                cert_after: None,
                ledger,
            });
        }
        Ok(Agents {
            subject: who,
            agents,
        })
    }

    /// Until every agent has its certificate on disk, bounded by `limit`.
    /// The floor's were minted before it started: it has none to wait for.
    pub async fn wait_certs(&mut self, limit: Duration) -> Result<(), String> {
        if self.subject == Subject::Floor {
            return self.check_alive();
        }
        let until = Instant::now() + limit;
        loop {
            let mut missing = 0;
            for a in self.agents.iter_mut().filter(|a| a.cert_after.is_none()) {
                if a.dir.join("pki/kubelet-client-current.pem").exists() {
                    a.cert_after = Some(a.spawned.elapsed());
                } else {
                    missing += 1;
                }
            }
            if missing == 0 {
                return Ok(());
            }
            self.check_alive()?;
            if Instant::now() >= until {
                return Err(format!(
                    "{missing} of {} {} agents have no certificate after {limit:?}",
                    self.agents.len(),
                    self.subject.label()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each agent's current client certificate file (empty when unreadable).
    pub fn cert_pems(&self) -> Vec<Vec<u8>> {
        self.agents
            .iter()
            .map(|a| {
                std::fs::read(a.dir.join("pki/kubelet-client-current.pem")).unwrap_or_default()
            })
            .collect()
    }

    /// An agent that exited, as an error with its log's tail.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for a in &mut self.agents {
            if let Some(p) = a.proc.as_mut() {
                if let Some(status) = p.exited() {
                    let tail = testplane::kube::procs::tail(p.log(), 20);
                    return Err(format!("{} exited ({status}):\n{tail}", a.name));
                }
            }
        }
        Ok(())
    }

    /// Read every agent's threads (call every few seconds so exiting threads keep their
    /// time) and memory. The baseline: its shell with its children (CPU), and with its live
    /// descendants (RSS, RssAnon); no wake-ups.
    pub fn sample(&mut self) -> Sample {
        let mut s = Sample::default();
        for a in &mut self.agents {
            let (rss, hwm, anon) = match (&mut a.ledger, &a.proc) {
                (Some(ledger), _) => {
                    let cpu = ledger.refresh();
                    s.cpu_ns += cpu.ns;
                    s.wakeups += cpu.wakeups;
                    (
                        status_kib(a.pid, "VmRSS:"),
                        status_kib(a.pid, "VmHWM:").unwrap_or(0),
                        status_kib(a.pid, "RssAnon:").unwrap_or(0),
                    )
                }
                (None, Some(Handle::Shell(shell))) => {
                    s.cpu_ns += shell.cpu_ns();
                    let m = shell.mem();
                    (
                        m.map(|m| m.rss),
                        m.map_or(0, |m| m.hwm),
                        m.map_or(0, |m| m.anon),
                    )
                }
                (None, _) => (None, 0, 0),
            };
            s.anon_kib_sum += anon;
            if rss.is_some() {
                s.alive += 1;
            }
            let rss = rss.unwrap_or(0);
            s.rss_kib_sum += rss;
            s.rss_kib_max = s.rss_kib_max.max(rss);
            s.hwm_kib_sum += hwm;
            s.hwm_kib_max = s.hwm_kib_max.max(hwm);
        }
        s
    }

    /// Sample every `every` for `dur`; returns the last sample (an agent that dies fails).
    pub async fn hold(&mut self, dur: Duration, every: Duration) -> Result<Sample, String> {
        let until = Instant::now() + dur;
        loop {
            let now = Instant::now();
            if now >= until {
                return Ok(self.sample());
            }
            tokio::time::sleep((until - now).min(every)).await;
            self.check_alive()?;
            self.sample();
        }
    }

    /// Lines of every agent's log containing `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        self.agents
            .iter()
            .filter_map(|a| a.proc.as_ref())
            .map(|p| {
                std::fs::read_to_string(p.log())
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains(needle))
                    .count()
            })
            .sum()
    }

    /// Every log line of every agent.
    pub fn log_total(&self) -> usize {
        self.log_lines("")
    }

    /// SIGTERM to all at once, then reap each (bounded, then SIGKILL). Returns the peak
    /// RSS (KiB) GNU time reported for each baseline shell (empty for the other subjects).
    pub async fn stop(mut self) -> Vec<u64> {
        for p in self.agents.iter_mut().filter_map(|a| a.proc.as_mut()) {
            p.terminate();
        }
        let mut peaks = Vec::new();
        for a in &mut self.agents {
            if let Some(p) = a.proc.take() {
                peaks.extend(p.stop().await);
            }
        }
        peaks
    }
}

// === impl Stage ===

impl Stage<'_> {
    /// The relay's URL: what every subject's kubeconfig names as the API server.
    pub fn relay_url(&self) -> String {
        format!("https://{}", self.relay.addr)
    }
}

/// POST a Node per name (labelled `bench=LABEL`), eight at a time.
async fn create_nodes(c: &Cluster, names: &[String], label: &str) -> Result<(), String> {
    let results: Vec<Result<(), String>> = futures_util::stream::iter(names)
        .map(|name| async move {
            let body = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"bench": label}}});
            match c.api("POST", "/api/v1/nodes", Some(&body)).await {
                Ok((201 | 409, _)) => Ok(()),
                Ok((code, text)) => Err(format!("POST Node {name}: HTTP {code}: {text:.200}")),
                Err(e) => Err(format!("POST Node {name}: {e}")),
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Delete the Nodes labelled `bench=LABEL` and every node Lease (kube-node-lease holds only
/// the bench's), so the next group starts on a cluster as empty as the first.
pub async fn delete_nodes(c: &Cluster, label: &str) -> Result<(), String> {
    let paths = [
        format!("/api/v1/nodes?labelSelector=bench%3D{label}"),
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases".to_string(),
    ];
    for path in paths {
        match c.api("DELETE", &path, None).await {
            Ok((200, _)) => {}
            Ok((code, text)) => return Err(format!("DELETE {path}: HTTP {code}: {text:.200}")),
            Err(e) => return Err(format!("DELETE {path}: {e}")),
        }
    }
    Ok(())
}
