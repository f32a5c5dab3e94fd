//! `bootlet-testplane serve`: the standalone control plane for kubectl and manual doctor runs.
//! Writes DIR/admin.conf and DIR/bootstrap-kubelet.conf before serving, prints the URL, and runs
//! until SIGTERM/SIGINT. `bootlet-testplane kube`: the same shape with the real etcd,
//! kube-apiserver and kube-controller-manager (`testplane::kube`; with `--kubeadm`, prepared
//! by kubeadm itself and with kube-scheduler; with `--release oldest`, those of the oldest
//! supported minor); `kube-build` only builds them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use testplane::kube::{self, Approve, ClientSigner, Cluster};
use testplane::{Approval, TestPlane};

#[derive(Parser)]
#[command(
    name = "bootlet-testplane",
    about = "A kube-apiserver subset for testing bootlet"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve until SIGTERM/SIGINT.
    Serve {
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// CA, admin.conf and bootstrap-kubelet.conf live here.
        #[arg(long)]
        state_dir: PathBuf,
        /// Signer lifetime (Go-style: 30s, 10m, 1h, 24h).
        #[arg(long, default_value = "8760h", value_parser = parse_duration)]
        cert_ttl: Duration,
        /// Who approves kubelet-client CSRs (auto: csrapproving).
        #[arg(long, value_enum, default_value = "auto")]
        approve: Mode,
        /// Who approves kubelet-serving CSRs (manual: nothing does, as in a stock cluster;
        /// auto: an approver like kubelet-csr-approver is installed).
        #[arg(long, value_enum, default_value = "manual")]
        approve_serving: Mode,
        /// Accept expirationSeconds below 600.
        #[arg(long)]
        allow_short_expiration: bool,
    },
    /// A real control plane (etcd, kube-apiserver, kube-controller-manager built from
    /// upstream; built first if needed) until SIGTERM/SIGINT.
    Kube {
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// CA, admin.conf, bootstrap-kubelet.conf, etcd's data and the components' logs
        /// (logs/NAME.log); written fresh at each start.
        #[arg(long)]
        state_dir: PathBuf,
        /// kube-controller-manager's --cluster-signing-duration (Go-style).
        #[arg(long, default_value = "8760h", value_parser = parse_duration)]
        cert_ttl: Duration,
        /// auto: kubeadm's two auto-approve bindings exist; manual: they do not.
        #[arg(long, value_enum, default_value = "auto")]
        approve: KubeApprove,
        /// separate: sign kubelet client certificates with a CA of their own.
        #[arg(long, value_enum, default_value = "cluster-ca")]
        client_signer: KubeSigner,
        /// kube-controller-manager's --node-monitor-grace-period (its default if unset).
        #[arg(long, value_parser = parse_duration)]
        node_monitor_grace_period: Option<Duration>,
        /// More kube-apiserver flags, e.g. --apiserver-arg=--max-requests-inflight=20.
        #[arg(long = "apiserver-arg", allow_hyphen_values = true)]
        apiserver_args: Vec<String>,
        /// Prepare the cluster for `kubeadm join` by kubeadm itself and run kube-scheduler;
        /// kube-controller-manager and kube-scheduler serve on kubeadm's ports (kubeadm:
        /// 10257, 10259) or free ones. Prints a join command (`kubeadm token create`).
        #[arg(long, value_enum)]
        kubeadm: Option<KubeadmPorts>,
        /// Which end of the supported range: newest (testplane/kube, every component) or
        /// oldest (testplane/kube-oldest, the core set: no --kubeadm).
        #[arg(long, value_enum, default_value = "newest")]
        release: KubeRelease,
    },
    /// Build the real components if needed and print the binary's path.
    KubeBuild {
        /// newest: testplane/kube into target/kube/kube; oldest: testplane/kube-oldest into
        /// target/kube-oldest/kube.
        #[arg(long, value_enum, default_value = "newest")]
        release: KubeRelease,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum KubeRelease {
    Newest,
    Oldest,
}

impl From<KubeRelease> for kube::build::Module {
    fn from(r: KubeRelease) -> Self {
        match r {
            KubeRelease::Newest => kube::build::Module::Newest,
            KubeRelease::Oldest => kube::build::Module::Oldest,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum KubeadmPorts {
    Kubeadm,
    Free,
}

#[derive(Clone, Copy, ValueEnum)]
enum KubeApprove {
    Auto,
    Manual,
}

#[derive(Clone, Copy, ValueEnum)]
enum KubeSigner {
    ClusterCa,
    Separate,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Auto,
    Manual,
    Deny,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut rest = s;
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let c = rest.chars().next().unwrap_or_default();
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            rest = &rest[1..];
            continue;
        }
        let (unit, mult) = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]
            .into_iter()
            .find(|(u, _)| rest.starts_with(u))
            .ok_or_else(|| format!("invalid duration {s:?}"))?;
        let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
        total += n * mult;
        num.clear();
        rest = &rest[unit.len()..];
    }
    if !num.is_empty() {
        return Err(format!("invalid duration {s:?}: missing unit"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let (listen, state_dir, cert_ttl, approve, approve_serving, allow_short_expiration) =
        match Cli::parse().cmd {
            Cmd::Serve {
                listen,
                state_dir,
                cert_ttl,
                approve,
                approve_serving,
                allow_short_expiration,
            } => (
                listen,
                state_dir,
                cert_ttl,
                approve,
                approve_serving,
                allow_short_expiration,
            ),
            Cmd::Kube {
                listen,
                state_dir,
                cert_ttl,
                approve,
                client_signer,
                node_monitor_grace_period,
                apiserver_args,
                kubeadm,
                release,
            } => {
                let mut opts = kube::Options::new(state_dir);
                opts.listen = listen;
                opts.cert_ttl = cert_ttl;
                opts.approve = match approve {
                    KubeApprove::Auto => Approve::Auto,
                    KubeApprove::Manual => Approve::Manual,
                };
                opts.client_signer = match client_signer {
                    KubeSigner::ClusterCa => ClientSigner::ClusterCa,
                    KubeSigner::Separate => ClientSigner::Separate,
                };
                opts.node_monitor_grace_period = node_monitor_grace_period;
                opts.apiserver_args = apiserver_args;
                opts.kubeadm = kubeadm.map(|p| {
                    kube::Kubeadm::new(match p {
                        KubeadmPorts::Kubeadm => kube::ComponentPorts::Kubeadm,
                        KubeadmPorts::Free => kube::ComponentPorts::Free,
                    })
                });
                opts.module = release.into();
                std::process::exit(run_kube(opts).await)
            }
            Cmd::KubeBuild { release } => match kube::build::Module::from(release).binary() {
                Ok(bin) => {
                    println!("{}", bin.display());
                    return;
                }
                Err(e) => {
                    eprintln!("bootlet-testplane: {e}");
                    std::process::exit(1);
                }
            },
        };
    let approval = |m| match m {
        Mode::Auto => Approval::Auto,
        Mode::Manual => Approval::Manual,
        Mode::Deny => Approval::Deny {
            reason: "DeniedByTestplane".into(),
        },
    };
    // start() binds before anything is written, but accepts nothing useful until the files
    // exist: the kubeconfigs are written before the URL is printed.
    let tp = match TestPlane::builder()
        .listen(listen)
        .state_dir(Some(state_dir.clone()))
        .cert_ttl(cert_ttl)
        .approval(approval(approve))
        .serving_approval(approval(approve_serving))
        .allow_short_expiration(allow_short_expiration)
        .start()
        .await
    {
        Ok(tp) => tp,
        Err(e) => {
            eprintln!("bootlet-testplane: {e}");
            std::process::exit(1);
        }
    };
    // Installed before the state files appear: a caller that sees them may SIGTERM at once.
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bootlet-testplane: SIGTERM handler: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = tp.write_state(&state_dir) {
        eprintln!("bootlet-testplane: {e}");
        std::process::exit(1);
    }
    println!("{}", tp.url());
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tp.shutdown().await;
}

/// `kube`: start the cluster, print its URL, run until SIGTERM/SIGINT, stop every process.
async fn run_kube(opts: kube::Options) -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("bootlet-testplane: cannot install signal handlers");
            return 1;
        }
    };
    let dir = opts.state_dir.clone();
    let cluster = tokio::select! {
        c = Cluster::start(opts) => c,
        _ = term.recv() => return 0,
        _ = int.recv() => return 0,
    };
    let cluster = match cluster {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bootlet-testplane: {e}");
            return 1;
        }
    };
    eprintln!(
        "bootlet-testplane: Kubernetes {} ready: kubectl --kubeconfig {} get nodes,csr; logs in {}",
        cluster.release(),
        cluster.admin_kubeconfig().display(),
        dir.join("logs").display()
    );
    println!("{}", cluster.url());
    if cluster.options().kubeadm.is_some() {
        match cluster.join_command(kube::TOKEN_TTL).await {
            Ok(join) => eprintln!("bootlet-testplane: join with: {}", join.line),
            Err(e) => {
                eprintln!("bootlet-testplane: {e}");
                cluster.shutdown().await;
                return 1;
            }
        }
    }
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    cluster.shutdown().await;
    0
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(
            super::parse_duration("1h30m"),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(
            super::parse_duration("500ms"),
            Ok(Duration::from_millis(500))
        );
        assert!(super::parse_duration("10").is_err());
    }
}
