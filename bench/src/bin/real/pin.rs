//! `real bench`'s CPU split (`REAL_PIN`, on unless `0`, on a machine of two CPUs or more):
//! the control plane (etcd, kube-apiserver, kube-controller-manager) on the last CPU, the
//! agents, the relay and the driver on the others, as a cluster's nodes never share its API
//! server's cores. Without it, kube-apiserver's CPU per request depends on how busy the
//! agents keep the shared cores: the idler they leave them, the more CPU time each request
//! costs (measured, docs/performance.md "Beside the kubelet's own code"; a core woken from
//! idle, cold caches or the Go scheduler waking threads, which of them is not), charging
//! the lightest agent for being light.
//!
//! `real bench` and `real rotation` run this way; `real fleet` does not (it starts
//! kube-apiserver again from the driver). The processes are placed with `taskset`
//! (util-linux): the driver moves itself (every thread) to the control plane's CPU before
//! it starts the cluster, so the components start there (and size their Go runtimes to
//! it), then to the nodes' CPUs.

use std::process::Command;

use testplane::kube::{Cluster, Options};

/// Which CPUs each side runs on (`taskset -c` lists).
pub struct Split {
    pub plane: String,
    pub nodes: String,
}

impl Split {
    /// The split for this machine, or None (`REAL_PIN=0`, or a single CPU).
    pub fn from_env() -> Option<Split> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Split::of(cpus, std::env::var("REAL_PIN").ok().as_deref())
    }

    /// The split of `cpus` CPUs, `pin` being `REAL_PIN`'s value (pure).
    fn of(cpus: usize, pin: Option<&str>) -> Option<Split> {
        if pin.is_some_and(|v| v.trim() == "0") || cpus < 2 {
            return None;
        }
        Some(Split {
            plane: (cpus - 1).to_string(),
            nodes: if cpus == 2 {
                "0".to_string()
            } else {
                format!("0-{}", cpus - 2)
            },
        })
    }
}

/// Starts the cluster on the control plane's CPU, then moves this process (the driver, and
/// so the relay and every agent it starts) to the nodes' CPUs; without a split, as is.
pub async fn cluster(
    opts: Options,
    split: Option<Split>,
) -> Result<(Cluster, Option<Split>), String> {
    if let Some(s) = &split {
        this_process(&s.plane)?;
    }
    let c = Cluster::start(opts)
        .await
        .map_err(|e| format!("start the cluster: {e}"))?;
    if let Some(s) = &split {
        if let Err(e) = this_process(&s.nodes) {
            c.shutdown().await;
            return Err(e);
        }
    }
    Ok((c, split))
}

/// How the CPUs were used, for a report's notes.
pub fn describe(split: Option<&Split>) -> String {
    match split {
        Some(s) => format!(
            "the control plane on CPU {}, the agents, the relay and the driver on CPU {} \
             (REAL_PIN=0 shares them)",
            s.plane, s.nodes
        ),
        None => "every CPU shared by the control plane, the agents and the driver".to_string(),
    }
}

/// Every thread of this process (and so every child it starts from now on) onto `cpus`.
pub fn this_process(cpus: &str) -> Result<(), String> {
    let pid = std::process::id().to_string();
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid])
        .output()
        .map_err(|e| format!("taskset: {e} (util-linux; REAL_PIN=0 runs without it)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "taskset -a -p -c {cpus} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Split;

    #[test]
    fn the_last_cpu_is_the_control_planes() {
        let two = Split::of(2, None).expect("two CPUs split");
        assert_eq!((two.plane.as_str(), two.nodes.as_str()), ("1", "0"));
        let eight = Split::of(8, Some("1")).expect("eight CPUs split");
        assert_eq!((eight.plane.as_str(), eight.nodes.as_str()), ("7", "0-6"));
        assert!(Split::of(1, None).is_none(), "one CPU cannot be split");
        assert!(Split::of(8, Some(" 0 ")).is_none(), "REAL_PIN=0 shares");
    }
}
