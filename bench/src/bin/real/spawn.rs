//! How each subject's process starts on one node, and the handle its group keeps: bootlet
//! and the peer with the kubelet's flags, the floor with a certificate minted for it
//! (`floor.rs`), the baseline's shell (`baseline.rs`).

use std::path::{Path, PathBuf};

use testplane::kube::{procs::Proc, Cluster};

use crate::baseline::{Script, Shell};
use crate::floor::Minter;
use crate::subject::{Subject, INTERVAL};

/// The binaries the agents run.
pub struct Bins {
    pub bootlet: PathBuf,
    pub kube: PathBuf,
    /// src/bin/floor.rs built (`FLOOR_BIN`, target/release/floor).
    pub floor: PathBuf,
    /// bench/baseline.sh (`BASELINE_SCRIPT`).
    pub baseline: PathBuf,
    /// The pinned release's kubectl, for the baseline.
    pub kubectl: PathBuf,
    /// GNU time (/usr/bin/time) when present: the baseline's peak RSS.
    pub time: Option<PathBuf>,
}

/// What one group's processes start with.
pub struct Launch<'a> {
    who: Subject,
    bins: &'a Bins,
    c: &'a Cluster,
    /// The relay's URL: the API server as every subject knows it.
    server: String,
    /// The cluster's CA, for the floor.
    minter: Option<Minter>,
}

/// An agent's process: a component-style process, or the baseline's shell.
pub enum Handle {
    Proc(Proc),
    Shell(Shell),
}

// === impl Launch ===

impl<'a> Launch<'a> {
    pub fn new(
        who: Subject,
        bins: &'a Bins,
        c: &'a Cluster,
        server: String,
    ) -> Result<Launch<'a>, String> {
        let minter = match who {
            Subject::Floor => Some(Minter::new(c)?),
            _ => None,
        };
        Ok(Launch {
            who,
            bins,
            c,
            server,
            minter,
        })
    }

    /// Start node `name`'s process in `dir`, which holds its `bootstrap-kubelet.conf`; its
    /// certificates go to `dir/pki`, its kubeconfig to `dir/kubelet.conf`.
    pub async fn spawn(&self, dir: &Path, name: &str) -> Result<Handle, String> {
        let bins = self.bins;
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            "--bootstrap-kubeconfig",
            &p("bootstrap-kubelet.conf"),
            "--kubeconfig",
            &p("kubelet.conf"),
            "--cert-dir",
            &p("pki"),
            "--node-name",
            name,
            "--metrics-bind-address",
            "off",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if matches!(self.who, Subject::Bootlet | Subject::BootletHttp1) {
            let extra = std::env::var("REAL_BOOTLET_ARGS").unwrap_or_default();
            args.extend(extra.split_whitespace().map(String::from));
        }
        if self.who == Subject::BootletHttp1 {
            args.push("--test-lease-http1".into());
        }
        let start = |e| format!("start {name}: {e}");
        Ok(match self.who {
            Subject::Bootlet | Subject::BootletHttp1 => Handle::Proc(
                Proc::spawn_env(&bins.bootlet, dir, "run", args, &[("RUST_LOG", "warn")])
                    .map_err(start)?,
            ),
            Subject::Peer => {
                Handle::Proc(Proc::spawn(&bins.kube, dir, "kubelet-identity", args).map_err(start)?)
            }
            Subject::Floor => Handle::Proc(crate::floor::spawn(
                &bins.floor,
                self.minter.as_ref().ok_or("no CA to mint with")?,
                self.c.ca_pem(),
                &self.server,
                dir,
                name,
                INTERVAL,
            )?),
            Subject::Baseline => {
                let script = Script {
                    script: &bins.baseline,
                    kubectl: &bins.kubectl,
                    time: bins.time.as_deref(),
                    interval: INTERVAL,
                };
                let boot = dir.join("bootstrap-kubelet.conf");
                Handle::Shell(Shell::spawn(&script, dir, name, &boot).await?)
            }
        })
    }
}

// === impl Handle ===

impl Handle {
    /// The process measured: the agent's, or the baseline's shell.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Handle::Proc(p) => p.pid(),
            Handle::Shell(s) => Some(s.bash),
        }
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        match self {
            Handle::Proc(p) => p.exited(),
            Handle::Shell(s) => s.exited(),
        }
    }

    pub fn log(&self) -> &Path {
        match self {
            Handle::Proc(p) => &p.log,
            Handle::Shell(s) => &s.log,
        }
    }

    /// SIGTERM, not waited for.
    pub fn terminate(&mut self) {
        match self {
            Handle::Proc(p) => p.signal("TERM"),
            Handle::Shell(s) => s.terminate(),
        }
    }

    /// Until it is gone (bounded, then SIGKILL). The baseline's shell returns the peak RSS
    /// GNU time reported (KiB).
    pub async fn stop(self) -> Option<u64> {
        match self {
            Handle::Proc(p) => {
                p.stop().await;
                None
            }
            Handle::Shell(s) => s.stop().await,
        }
    }
}
