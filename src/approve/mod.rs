//! `bootlet approve`: the kubelet-serving CSR approver kube-controller-manager does not have.
//! [`policy`] is the judgement (pure), [`controller`] the list+watch loop that writes it,
//! [`leader`] the Lease election that lets two replicas run with one acting. This file turns
//! the flags into [`Settings`], finds the credential (a kubeconfig, or the pod's service
//! account, re-read as the kubelet rotates its token) and wires the pieces together.

pub mod controller;
pub mod leader;
pub mod policy;

#[cfg(test)]
mod outage_tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use crate::api::kubeconfig::{self, BootstrapToken, ClusterAccess, Credential, Server};
use crate::api::{ApiClient, ClientOptions};
use crate::cli::approve::{ApproveFlags, OnMismatch as FlagMismatch};
use crate::defaults::*;
use crate::metrics::server;
use crate::runtime::health::Health;
use crate::runtime::report;
use crate::runtime::shutdown;
use crate::runtime::telemetry::LogFormat;

use controller::{Controller, OnMismatch};
use leader::Election;
use policy::{DnsPattern, Policy};

/// The in-cluster service account's files (what client-go's `rest.InClusterConfig` reads).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How often the in-cluster token file is read again: the kubelet refreshes a projected
/// token at 80 % of its (at least 10 min) lifetime, so a minute is always in time.
const TOKEN_REREAD: Duration = Duration::from_secs(60);

/// Why `bootlet approve` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error("in-cluster config: {what}")]
    InCluster { what: String },
    #[error("{path}: cannot read", path = .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Client(#[from] crate::api::Error),
    #[error("cannot start the runtime")]
    Runtime(#[source] std::io::Error),
}

/// Where the approver's credential comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Kubeconfig(PathBuf),
    /// The pod's service account files in `dir`; `service` is `KUBERNETES_SERVICE_HOST`
    /// and `_PORT` (None when either is unset: not in a pod).
    InCluster {
        dir: PathBuf,
        service: Option<(String, String)>,
    },
}

/// `bootlet approve`'s validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub source: Source,
    pub policy: Policy,
    pub on_mismatch: OnMismatch,
    /// None: no election (a single instance acts at once).
    pub election: Option<Election>,
    pub identity: String,
    pub metrics_bind_address: Option<SocketAddr>,
    pub log_format: LogFormat,
    pub verbosity: u8,
}

impl Settings {
    /// Flags over the `DEFAULT_APPROVE_*` consts; `sa_dir` is where the service account's
    /// files are (its `namespace` names the Lease's namespace when not given), `env` reads
    /// the environment (`KUBERNETES_SERVICE_HOST`/`_PORT`).
    pub fn from_flags(
        f: &ApproveFlags,
        sa_dir: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ApproveError> {
        let bad = |flag: &'static str, reason: String| ApproveError::Flag { flag, reason };
        let dns_pattern = match &f.allowed_dns_pattern {
            Some(p) => Some(DnsPattern::new(p).map_err(|e| bad("allowed-dns-pattern", e))?),
            None => None,
        };
        let max = f.max_expiration.unwrap_or(DEFAULT_APPROVE_MAX_EXPIRATION);
        // The API's own floor for expirationSeconds is 10 minutes.
        if max < Duration::from_secs(600) {
            return Err(bad(
                "max-expiration",
                format!("{max:?} is below the API's 10m minimum"),
            ));
        }
        let lease_duration = f
            .leader_elect_lease_duration
            .unwrap_or(DEFAULT_APPROVE_LEASE_DURATION);
        let renew_deadline = f
            .leader_elect_renew_deadline
            .unwrap_or(DEFAULT_APPROVE_RENEW_DEADLINE);
        let retry_period = f
            .leader_elect_retry_period
            .unwrap_or(DEFAULT_APPROVE_RETRY_PERIOD);
        // client-go's checks: duration > deadline > retry period × 1.2.
        if lease_duration <= renew_deadline {
            return Err(bad(
                "leader-elect-lease-duration",
                format!("{lease_duration:?} must be above the renew deadline {renew_deadline:?}"),
            ));
        }
        if renew_deadline <= retry_period.mul_f64(1.2) || retry_period < Duration::from_millis(100)
        {
            return Err(bad("leader-elect-renew-deadline", format!("{renew_deadline:?} must be above 1.2 × the retry period {retry_period:?} (itself at least 100ms)")));
        }
        if lease_duration.as_secs() < 1 {
            return Err(bad(
                "leader-elect-lease-duration",
                "at least 1s (the Lease counts whole seconds)".into(),
            ));
        }
        let identity = f.identity.clone().unwrap_or_else(default_identity);
        let namespace = f.leader_elect_namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string(sa_dir.join("namespace"))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_APPROVE_NAMESPACE.to_string())
        });
        let election = f
            .leader_elect
            .unwrap_or(DEFAULT_APPROVE_LEADER_ELECT)
            .then(|| Election {
                namespace,
                name: f
                    .leader_elect_name
                    .clone()
                    .unwrap_or_else(|| DEFAULT_APPROVE_LEASE_NAME.into()),
                identity: identity.clone(),
                lease_duration,
                renew_deadline,
                retry_period,
            });
        let metrics = f
            .metrics_bind_address
            .clone()
            .unwrap_or_else(|| DEFAULT_APPROVE_METRICS_BIND_ADDRESS.into());
        let metrics_bind_address = if metrics == "off" {
            None
        } else {
            Some(
                metrics
                    .parse()
                    .map_err(|e| bad("metrics-bind-address", format!("{metrics:?}: {e}")))?,
            )
        };
        Ok(Settings {
            source: match &f.kubeconfig {
                Some(p) => Source::Kubeconfig(p.clone()),
                None => Source::InCluster {
                    dir: sa_dir.to_path_buf(),
                    service: env("KUBERNETES_SERVICE_HOST")
                        .zip(env("KUBERNETES_SERVICE_PORT"))
                        .filter(|(h, p)| !h.is_empty() && !p.is_empty()),
                },
            },
            policy: Policy {
                allow_node_name_dns: f
                    .allow_node_name_dns
                    .unwrap_or(DEFAULT_APPROVE_ALLOW_NODE_NAME_DNS),
                dns_pattern,
                max_expiration_seconds: i32::try_from(max.as_secs()).unwrap_or(i32::MAX),
            },
            on_mismatch: match f.on_mismatch {
                Some(FlagMismatch::Ignore) => OnMismatch::Ignore,
                Some(FlagMismatch::Deny) | None => OnMismatch::Deny,
            },
            election,
            identity,
            metrics_bind_address,
            log_format: f.log_format.unwrap_or(DEFAULT_LOG_FORMAT),
            verbosity: f.verbose,
        })
    }
}

/// client-go's habit: the host (a pod's name) and a random suffix, so a restarted pod with
/// the same name is a new candidate.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "bootlet-approve".into()
    } else {
        host
    };
    format!("{host}_{:08x}", rand::random::<u32>())
}

/// The cluster access for `source`: the kubeconfig, or the service account's token and CA
/// with `KUBERNETES_SERVICE_HOST`/`_PORT`.
pub fn access(source: &Source) -> Result<ClusterAccess, ApproveError> {
    match source {
        Source::Kubeconfig(path) => Ok(kubeconfig::read(path, false)?),
        Source::InCluster { dir, service } => {
            let Some((host, port)) = service.clone() else {
                return Err(ApproveError::InCluster {
                    what: "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod; pass --kubeconfig".into(),
                });
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path).map_err(|source| ApproveError::Read { path, source })
            };
            let token = String::from_utf8_lossy(&read("token")?).into_owned();
            Ok(ClusterAccess {
                path: dir.join("token"),
                server: Server::new(format!("https://{host}:{port}")),
                ca_pem: read("ca.crt")?,
                credential: Credential::Token(BootstrapToken::new(&token)),
                insecure: false,
            })
        }
    }
}

fn client_for(a: &ClusterAccess) -> Result<ApiClient, crate::api::Error> {
    ApiClient::new(
        &a.server,
        &a.ca_pem,
        &a.credential,
        ClientOptions::default(),
    )
}

/// Re-read the service account's token now and then; publish a new client when it changed.
async fn refresh_token(source: Source, current: ClusterAccess, tx: watch::Sender<ApiClient>) {
    let mut last = current.credential;
    loop {
        tokio::time::sleep(TOKEN_REREAD).await;
        match access(&source) {
            Ok(a) if a.credential != last => match client_for(&a) {
                Ok(c) => {
                    tracing::debug!("service account token changed; using the new one");
                    last = a.credential;
                    if tx.send(c).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %report(&e), "cannot use the new service account token")
                }
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %report(&e), "cannot read the service account token again")
            }
        }
    }
}

/// Runs the approver until SIGTERM/SIGINT; releases the leader Lease on the way out.
pub async fn run(settings: Settings) -> Result<(), ApproveError> {
    let access = access(&settings.source)?;
    let client = client_for(&access)?;
    tracing::info!(server = %client.server(), identity = %client.identity(), replica = %settings.identity, "bootlet approve starting");
    let (client_tx, client_rx) = watch::channel(client);
    if matches!(settings.source, Source::InCluster { .. }) {
        tokio::spawn(refresh_token(settings.source.clone(), access, client_tx));
    } else {
        // Keep the sender alive: the receivers see the one client.
        std::mem::forget(client_tx);
    }
    let (trigger, shutdown) = shutdown::channel();
    let health = Health::new(false);
    if let Some(listener) = settings.metrics_bind_address.and_then(server::bind) {
        let endpoints = server::Endpoints {
            health,
            serving: false,
            approver: true,
        };
        tokio::spawn(server::serve(listener, endpoints, shutdown.clone()));
    }
    crate::metrics::METRICS.approver_series(policy::Rule::ALL.map(policy::Rule::reason));
    let (leading_tx, leading_rx) = watch::channel(settings.election.is_none());
    crate::metrics::METRICS.approver_leader(settings.election.is_none());
    // Without an election the sender stays here, so `leading` stays true until the end.
    let (elector, _single) = match settings.election.clone() {
        Some(e) => {
            let rx = client_rx.clone();
            let shutdown = shutdown.clone();
            let task = tokio::spawn(leader::run(rx, e, leading_tx, shutdown));
            (Some(task), None)
        }
        None => (None, Some(leading_tx)),
    };
    let controller = Controller {
        policy: settings.policy.clone(),
        on_mismatch: settings.on_mismatch,
        identity: settings.identity.clone(),
    };
    let mut signals = shutdown::stop_signals();
    tokio::select! {
        () = controller.run(client_rx, leading_rx) => {}
        why = signals.recv() => tracing::info!(signal = why, "stopping"),
    }
    trigger.fire();
    if let Some(task) = elector {
        // The release is one GET and one PUT; never wait longer than a request bound.
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let dir = tempfile::tempdir().unwrap();
        let s = Settings::from_flags(&ApproveFlags::default(), dir.path(), env(&[])).unwrap();
        let e = s.election.unwrap();
        assert_eq!(
            (e.lease_duration, e.renew_deadline, e.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(
            (e.namespace.as_str(), e.name.as_str()),
            ("bootlet-approver", "bootlet-approver")
        );
        assert_eq!(
            s.metrics_bind_address,
            Some("0.0.0.0:10272".parse().unwrap())
        );
        assert_eq!(s.on_mismatch, OnMismatch::Deny);
        assert!(s.policy.allow_node_name_dns);
        assert_eq!(s.policy.max_expiration_seconds, 365 * 24 * 3600);
        assert_eq!(
            s.source,
            Source::InCluster {
                dir: dir.path().to_path_buf(),
                service: None
            }
        );
    }

    #[test]
    fn the_service_accounts_namespace_holds_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("namespace"), "kube-system\n").unwrap();
        let s = Settings::from_flags(&ApproveFlags::default(), dir.path(), env(&[])).unwrap();
        assert_eq!(s.election.unwrap().namespace, "kube-system");
    }

    #[test]
    fn inconsistent_timings_and_bad_values_name_their_flag() {
        let dir = tempfile::tempdir().unwrap();
        let load = |f: ApproveFlags| {
            Settings::from_flags(&f, dir.path(), env(&[]))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let secs = |n| Some(Duration::from_secs(n));
        let cases = [
            (
                ApproveFlags {
                    leader_elect_lease_duration: secs(10),
                    ..Default::default()
                },
                "--leader-elect-lease-duration",
            ),
            (
                ApproveFlags {
                    leader_elect_retry_period: secs(9),
                    ..Default::default()
                },
                "--leader-elect-renew-deadline",
            ),
            (
                ApproveFlags {
                    max_expiration: secs(60),
                    ..Default::default()
                },
                "--max-expiration",
            ),
            (
                ApproveFlags {
                    allowed_dns_pattern: Some("(".into()),
                    ..Default::default()
                },
                "--allowed-dns-pattern",
            ),
            (
                ApproveFlags {
                    metrics_bind_address: Some("nowhere".into()),
                    ..Default::default()
                },
                "--metrics-bind-address",
            ),
        ];
        for (flags, flag) in cases {
            let err = load(flags).unwrap_err();
            assert!(err.starts_with(flag), "{err}");
        }
        let off = ApproveFlags {
            metrics_bind_address: Some("off".into()),
            leader_elect: Some(false),
            ..Default::default()
        };
        let s = Settings::from_flags(&off, dir.path(), env(&[])).unwrap();
        assert!(s.metrics_bind_address.is_none() && s.election.is_none());
    }

    #[test]
    fn in_cluster_reads_the_service_account_and_the_service_address() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "eyJhbGciOi.payload.sig\n").unwrap();
        std::fs::write(dir.path().join("ca.crt"), "CA").unwrap();
        let s = Settings::from_flags(
            &ApproveFlags::default(),
            dir.path(),
            env(&[
                ("KUBERNETES_SERVICE_HOST", "fd00::1"),
                ("KUBERNETES_SERVICE_PORT", "443"),
            ]),
        )
        .unwrap();
        let a = access(&s.source).unwrap();
        assert_eq!(a.server.url, "https://[fd00::1]:443");
        assert_eq!(a.ca_pem, b"CA");
        assert_eq!(
            a.credential,
            Credential::Token(BootstrapToken::new("eyJhbGciOi.payload.sig"))
        );
        // Debug never shows the token.
        assert!(!format!("{a:?}").contains("payload"), "{a:?}");
        // Outside a pod: one line that says what to do.
        let s = Settings::from_flags(&ApproveFlags::default(), dir.path(), env(&[])).unwrap();
        let err = access(&s.source).unwrap_err().to_string();
        assert!(err.contains("pass --kubeconfig"), "{err}");
    }
}
