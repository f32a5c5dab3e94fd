//! The baseline on the real cluster: bench/baseline.sh (bash + openssl + kubectl, what
//! operators write by hand), one shell per node, in a process group of its own under GNU
//! time when `/usr/bin/time` exists (for the peak RSS of its largest process). Its CPU is
//! the shell's and every descendant's: bash's utime + stime + cutime + cstime from
//! /proc/PID/stat (its own time and that of every child it has waited for, tick resolution)
//! plus the same four of each descendant still running, so a kubectl that is mid-renewal at
//! a mark is not lost. Only processes started here are signalled, by id or by their group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bootlet_bench::procfs::status_kib;
use bootlet_bench::procfs::{children, read_maxrss, with_reaped_children_ns};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The files and programs a baseline shell runs with.
pub struct Script<'a> {
    pub script: &'a Path,
    pub kubectl: &'a Path,
    /// GNU time, when present.
    pub time: Option<&'a Path>,
    /// `INTERVAL`: seconds between renewals.
    pub interval: Duration,
}

/// One running baseline shell.
pub struct Shell {
    /// GNU time (the group's leader), or bash itself without it.
    wrapper: Child,
    /// The shell.
    pub bash: u32,
    /// Its process group: the wrapper's pid (`process_group(0)`).
    group: u32,
    terminated: bool,
    pub log: PathBuf,
    /// GNU time's `-o` file: the peak RSS (KiB) of the largest process of the tree.
    time_out: Option<PathBuf>,
}

/// Memory over a shell and its live descendants, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mem {
    pub rss: u64,
    pub anon: u64,
    /// The shell's own VmHWM (its children's peaks come from GNU time at the end).
    pub hwm: u64,
}

// === impl Shell ===

impl Shell {
    /// Start `bash SCRIPT` for node `name` in `dir`: bootstrap kubeconfig `bootstrap`, its
    /// files in `dir/pki` and `dir/kubelet.conf`, a fresh `HOME` (kubectl's discovery cache
    /// starts cold, as on a new node), output in `dir/logs/baseline.log`.
    pub async fn spawn(
        s: &Script<'_>,
        dir: &Path,
        name: &str,
        bootstrap: &Path,
    ) -> Result<Shell, String> {
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |e: std::io::Error| format!("{p}: {e}")
        };
        let (home, logs) = (dir.join("home"), dir.join("logs"));
        std::fs::create_dir_all(&home).map_err(io(&home))?;
        std::fs::create_dir_all(&logs).map_err(io(&logs))?;
        let log = logs.join("baseline.log");
        let out = std::fs::File::create(&log).map_err(io(&log))?;
        let err = out.try_clone().map_err(io(&log))?;
        let time_out = s.time.map(|_| dir.join("time.out"));
        let mut cmd = match (s.time, &time_out) {
            (Some(time), Some(to)) => {
                let mut c = Command::new(time);
                c.arg("-f").arg("%M").arg("-o").arg(to).arg("bash");
                c
            }
            _ => Command::new("bash"),
        };
        let mut wrapper = cmd
            .arg(s.script)
            .env("NODE_NAME", name)
            .env("BOOTSTRAP_KUBECONFIG", bootstrap)
            .env("KUBECONFIG_OUT", dir.join("kubelet.conf"))
            .env("CERT_DIR", dir.join("pki"))
            .env("INTERVAL", s.interval.as_secs().to_string())
            .env("KUBECTL", s.kubectl)
            .env("HOME", &home)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(s.script))?;
        let pid = wrapper.id().ok_or("the baseline exited at once")?;
        let bash = if s.time.is_some() {
            let until = Instant::now() + Duration::from_secs(5);
            loop {
                if let Some(&b) = children(pid).first() {
                    break b;
                }
                if wrapper.try_wait().ok().flatten().is_some() || Instant::now() > until {
                    return Err(format!(
                        "{name}: no shell under GNU time:\n{}",
                        testplane::kube::procs::tail(&log, 20)
                    ));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        } else {
            pid
        };
        Ok(Shell {
            wrapper,
            bash,
            group: pid,
            terminated: false,
            log,
            time_out,
        })
    }

    /// The exit status if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.wrapper.try_wait().ok().flatten()
    }

    /// CPU so far of the shell and all its descendants, reaped or running, in ns.
    pub fn cpu_ns(&self) -> u64 {
        // The shell first: a child reaped between the two reads is missed once (it is in the
        // next read's cutime), never counted twice.
        let Some(own) = with_reaped_children_ns(self.bash) else {
            return 0;
        };
        own + descendants(self.bash)
            .into_iter()
            .filter_map(with_reaped_children_ns)
            .sum::<u64>()
    }

    /// RSS and RssAnon of the shell and its live descendants; the shell's VmHWM.
    pub fn mem(&self) -> Option<Mem> {
        let rss = status_kib(self.bash, "VmRSS:")?;
        let mut m = Mem {
            rss,
            anon: status_kib(self.bash, "RssAnon:").unwrap_or(0),
            hwm: status_kib(self.bash, "VmHWM:").unwrap_or(0),
        };
        for d in descendants(self.bash) {
            m.rss += status_kib(d, "VmRSS:").unwrap_or(0);
            m.anon += status_kib(d, "RssAnon:").unwrap_or(0);
        }
        Some(m)
    }

    /// SIGTERM to the shell (bash, non-interactive, has no handler: it ends at once), once:
    /// its pid is not signalled again after it may have been reaped.
    pub fn terminate(&mut self) {
        if !self.terminated {
            self.terminated = true;
            kill(&["-TERM", &self.bash.to_string()]);
        }
    }

    /// End the shell, let GNU time report, then end what the shell left in its group (the
    /// `sleep` it waited on, a kubectl mid-call). Returns GNU time's peak RSS in KiB: the
    /// largest process the shell ever waited for (a kubectl) or the shell itself.
    pub async fn stop(mut self) -> Option<u64> {
        self.terminate();
        if tokio::time::timeout(Duration::from_secs(10), self.wrapper.wait())
            .await
            .is_err()
        {
            let _ = self.wrapper.kill().await;
        }
        kill(&["-TERM", "--", &format!("-{}", self.group)]);
        self.time_out.as_deref().and_then(read_maxrss)
    }
}

/// Every live descendant of `pid` (children of each process's main thread, depth first).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = children(pid);
    while let Some(p) = todo.pop() {
        todo.extend(children(p));
        out.push(p);
    }
    out
}

/// kill(1) with these arguments, not waited on beyond its own exit.
fn kill(args: &[&str]) {
    let _ = std::process::Command::new("kill")
        .args(args)
        .stderr(Stdio::null())
        .status();
}
