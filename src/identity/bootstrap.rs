//! TLS bootstrap: reuse a still-valid client certificate, or turn the bootstrap kubeconfig
//! into one (pending key → CSR → approval → verification → files → kubeconfig). Its `State`
//! feeds STATUS=. Rotation and the Lease are other modules' business.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::api::kubeconfig::{self, Credential, KubeconfigError};
use crate::api::{self, ApiClient, ClientOptions};
use crate::checkid::CheckId;
use crate::config::Settings;
use crate::identity::csr::{self, CsrError, Pending, Verdict, WaitOptions};
use crate::pki::files::{CertDir, FilesError};
use crate::pki::verify::{self, VerifyError};
use crate::pki::{CertInfo, NodeKey, PkiError, PrivateKeyPem};
use crate::runtime::backoff::Backoff;
use crate::runtime::health::{self, Health};
pub use crate::runtime::health::{doctor_hint, State};
use crate::runtime::report;

/// A working identity: the client for the installed certificate and what it came from.
#[derive(Clone)]
pub struct Credentials {
    pub client: ApiClient,
    pub cert: CertInfo,
    pub server: kubeconfig::Server,
    pub ca_pem: Vec<u8>,
    /// Issued by this process just now (not found on disk).
    pub fresh: bool,
}

/// Why bootstrap could not produce an identity.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("no valid client certificate in {cert_dir}, and the bootstrap kubeconfig is unusable")]
    NoBootstrap {
        cert_dir: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("the private key")]
    Key(#[from] PkiError),
    #[error("CSR {csr} was denied ({reason}: {message}); check the approver policy, e.g. `kubectl get clusterrolebinding kubeadm:node-autoapprove-bootstrap -o yaml`")]
    Denied {
        csr: String,
        reason: String,
        message: String,
    },
    #[error("CSR {csr} failed ({reason}: {message}); the signer refused it")]
    Failed {
        csr: String,
        reason: String,
        message: String,
    },
    #[error("refused the certificate issued for CSR {csr}; nothing was written")]
    Refused {
        csr: String,
        #[source]
        source: VerifyError,
    },
}

// === impl BootstrapError ===

impl BootstrapError {
    /// The signer's side said no to this CSR (Denied, Failed, a certificate we refused, a
    /// name held by another request): retrying at once changes nothing, so the contract's
    /// back-off applies (at least 1 min, doubling, capped at 1 h, jittered).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            BootstrapError::Denied { .. }
                | BootstrapError::Failed { .. }
                | BootstrapError::Refused { .. }
                | BootstrapError::Csr(CsrError::NameTaken { .. })
        )
    }

    /// The doctor check (the contract's ids) this failure belongs to: the back-off log line
    /// and STATUS= name it, so an operator knows which link of the join chain broke and
    /// that `bootlet doctor` walks the whole chain.
    pub fn check(&self) -> CheckId {
        match self {
            BootstrapError::NoBootstrap { .. } | BootstrapError::Kubeconfig(_) => {
                CheckId::BootstrapKubeconfig
            }
            BootstrapError::Files(_) | BootstrapError::Key(_) => CheckId::Config,
            BootstrapError::Csr(CsrError::Build(_)) => CheckId::Config,
            BootstrapError::Api(e) | BootstrapError::Csr(CsrError::Api { source: e, .. }) => {
                api_check(e)
            }
            BootstrapError::Csr(_)
            | BootstrapError::Denied { .. }
            | BootstrapError::Failed { .. } => CheckId::Csr,
            BootstrapError::Refused { source, .. } => match source {
                VerifyError::NotYetValid { .. } => CheckId::ClockSkew,
                VerifyError::UntrustedIssuer { .. } => CheckId::CaTrust,
                _ => CheckId::ClientCertificate,
            },
        }
    }

    /// Waiting for approval ran out of time; the pending key (and its CSR) stay for the
    /// next attempt to adopt.
    pub fn is_approval_timeout(&self) -> bool {
        matches!(self, BootstrapError::Csr(CsrError::Timeout { .. }))
    }
}

/// Which link an API failure breaks: 401 the credential, 403 RBAC, a TLS handshake that
/// rejected the server's certificate the CA, anything else the server's reachability.
fn api_check(e: &api::Error) -> CheckId {
    if e.is_unauthorized() {
        CheckId::Authentication
    } else if e.is_forbidden() {
        CheckId::Authorization
    } else if e.is_transport() && report(e).contains("invalid peer certificate") {
        CheckId::CaTrust
    } else {
        CheckId::ServerReachable
    }
}

/// A certificate and key from `kubelet-client-current.pem` that passed `check_installed`.
pub(crate) struct Installed {
    pub chain_pem: String,
    pub key_pem: PrivateKeyPem,
    pub info: CertInfo,
}

/// Why an installed certificate cannot be reused; doctor maps each to a check.
#[derive(Debug, thiserror::Error)]
pub enum InstalledError {
    #[error("the current certificate file holds no usable key")]
    Key(#[source] PkiError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

/// Whether an installed certificate is usable now: its key parses and the certificate
/// verifies for `node` against `ca_pem` (the same rules as a freshly issued one).
/// `Err` says why not, typed, so the log and `bootlet doctor` agree.
pub(crate) fn check_installed(
    chain_pem: String,
    key_pem: PrivateKeyPem,
    node: &str,
    ca_pem: &[u8],
) -> Result<Installed, InstalledError> {
    let key = NodeKey::from_pem(&key_pem).map_err(InstalledError::Key)?;
    let info = verify::verify_issued(&chain_pem, &key, node, ca_pem, SystemTime::now())?;
    Ok(Installed {
        chain_pem,
        key_pem,
        info,
    })
}

/// How often a missing bootstrap kubeconfig is looked for (one `stat`).
const BOOTSTRAP_KUBECONFIG_POLL: Duration = Duration::from_secs(2);

/// Runs bootstrap with the settings it needs.
pub struct Bootstrap<'a> {
    settings: &'a Settings,
    health: Health,
    api: ClientOptions,
    /// Wait for a missing bootstrap kubeconfig instead of failing (see [`Bootstrap::wait_for_bootstrap_kubeconfig`]).
    wait_for_file: bool,
}

// === impl Bootstrap ===

impl<'a> Bootstrap<'a> {
    pub fn new(settings: &'a Settings, health: Health, api: ClientOptions) -> Self {
        Self {
            settings,
            health,
            api,
            wait_for_file: false,
        }
    }

    /// With no valid certificate and no bootstrap kubeconfig *file* yet, wait for it (with
    /// a STATUS= line saying so) instead of exiting. The agent turns this on under systemd:
    /// a file that cloud-init writes late would otherwise use up the unit's restart limit
    /// and leave it `failed` (systemd 252 has no `RestartSteps=`). A file that is there but
    /// unusable still fails at once.
    #[must_use]
    pub fn wait_for_bootstrap_kubeconfig(mut self, yes: bool) -> Self {
        self.wait_for_file = yes;
        self
    }

    /// Reuse a valid certificate or bootstrap until one is installed. Fails only when it
    /// cannot start: no valid certificate and an unreadable bootstrap kubeconfig (the first
    /// time), or an unusable cert dir. Later failures are logged and retried with backoff.
    pub async fn run(&self) -> Result<Credentials, BootstrapError> {
        let dir = CertDir::open(&self.settings.cert_dir)?;
        if let Some(creds) = self.reuse(&dir)? {
            return Ok(creds);
        }
        let mut attempts = self.settings.csr_backoff();
        let mut first = true;
        loop {
            match self.attempt(&dir).await {
                Ok(creds) => return Ok(creds),
                Err(BootstrapError::NoBootstrap {
                    source: KubeconfigError::Missing { path },
                    ..
                }) if first && self.wait_for_file => {
                    self.await_file(path).await;
                    continue;
                }
                Err(e @ BootstrapError::NoBootstrap { .. }) if first => return Err(e),
                Err(e) => {
                    let delay = attempts.next_delay();
                    let check = e.check();
                    tracing::error!(error = %report(&e), retry_in = %health::human(delay), %check, "bootstrap attempt failed ({})", doctor_hint(check));
                    self.health.set_bootstrap(State::BackingOff {
                        until: SystemTime::now() + delay,
                        reason: report(&e),
                        check,
                    });
                    tokio::time::sleep(delay).await;
                }
            }
            first = false;
        }
    }

    /// Until `path` exists: one warning, the reason in STATUS=, a `stat` every 2 s.
    async fn await_file(&self, path: PathBuf) {
        tracing::warn!(path = %path.display(), "no valid client certificate and no bootstrap kubeconfig yet; waiting for the file");
        self.health
            .set_bootstrap(State::AwaitingBootstrapKubeconfig { path: path.clone() });
        while !path.exists() {
            tokio::time::sleep(BOOTSTRAP_KUBECONFIG_POLL).await;
        }
        tracing::info!(path = %path.display(), "the bootstrap kubeconfig appeared");
    }

    /// The installed certificate, if it is valid for this node, key and cluster.
    fn reuse(&self, dir: &CertDir) -> Result<Option<Credentials>, BootstrapError> {
        let s = self.settings;
        let Some((chain_pem, key_pem)) = dir.read_current()? else {
            return Ok(None);
        };
        // The cluster: from our kubeconfig when it reads, else from the bootstrap one.
        let (access, rewrite) = match kubeconfig::read(&s.kubeconfig, s.allow_insecure_kubeconfig) {
            Ok(access) => (access, false),
            Err(e) => {
                tracing::info!(error = %report(&e), "kubeconfig unusable; trying the bootstrap kubeconfig's cluster");
                match kubeconfig::read(&s.bootstrap_kubeconfig, s.allow_insecure_kubeconfig) {
                    Ok(access) => (access, true),
                    Err(_) => return Ok(None),
                }
            }
        };
        match check_installed(chain_pem, key_pem, &s.node_name, &access.ca_pem) {
            Ok(Installed {
                chain_pem,
                key_pem,
                info,
            }) => {
                if rewrite {
                    kubeconfig::write_kubelet(
                        &s.kubeconfig,
                        &access.server,
                        &access.ca_pem,
                        &dir.current_path(),
                    )?;
                }
                tracing::info!(serial = %info.serial, not_after = %health::rfc3339(info.not_after), "reusing the valid client certificate; no CSR needed");
                let creds =
                    self.credentials(&access.server, &access.ca_pem, chain_pem, key_pem, info)?;
                self.installed(&creds);
                Ok(Some(creds))
            }
            Err(e) => {
                let reason = report(&e);
                tracing::info!(%reason, "the current client certificate cannot be reused; bootstrapping");
                Ok(None)
            }
        }
    }

    /// One bootstrap attempt, from reading the bootstrap kubeconfig to installed files.
    pub(crate) async fn attempt(&self, dir: &CertDir) -> Result<Credentials, BootstrapError> {
        let s = self.settings;
        let access = kubeconfig::read(&s.bootstrap_kubeconfig, s.allow_insecure_kubeconfig)
            .map_err(|source| BootstrapError::NoBootstrap {
                cert_dir: s.cert_dir.clone(),
                source,
            })?;
        let client = ApiClient::new(
            &access.server,
            &access.ca_pem,
            &access.credential,
            self.api.clone(),
        )?;
        self.obtain(dir, &client, &access.server, &access.ca_pem, s.csr_timeout)
            .await
    }

    /// Get a certificate through `client` (the bootstrap token, or the current certificate
    /// when rotating): pending key → CSR → approval → verification → files → kubeconfig.
    pub(crate) async fn obtain(
        &self,
        dir: &CertDir,
        client: &ApiClient,
        server: &kubeconfig::Server,
        ca_pem: &[u8],
        wait_limit: Duration,
    ) -> Result<Credentials, BootstrapError> {
        let s = self.settings;
        let key = self.pending_key(dir)?;
        let mut retry = Backoff::new(Duration::from_millis(500), Duration::from_secs(30), 0.2)
            .expect("constant backoff bounds are valid");
        let name = crate::pki::csr_name(&key, &s.node_name);
        self.health
            .set_bootstrap(State::Filing { csr: name.clone() });
        tracing::info!(csr = %name, identity = %client.identity(), "requesting a client certificate");
        if let Err(e) = csr::file(client, &key, &s.node_name, &mut retry).await {
            if matches!(e, CsrError::NameTaken { .. }) {
                // The same key would name the same foreign CSR again: start over with a new one.
                dir.remove_pending_key()?;
            }
            return Err(e.into());
        }
        tracing::info!(csr = %name, timeout = %health::human(wait_limit), "waiting for approval (approve with: kubectl certificate approve {name})");
        let since = SystemTime::now();
        let health = self.health.clone();
        let csr_name = name.clone();
        let mut on_pending = move |p: Pending| {
            health.set_bootstrap(match p {
                Pending::AwaitingApproval => State::WaitingApproval {
                    csr: csr_name.clone(),
                    since,
                },
                Pending::ApprovedNotIssued => State::ApprovedNotIssued {
                    csr: csr_name.clone(),
                    since,
                },
            })
        };
        let opts = WaitOptions {
            timeout: wait_limit,
            not_issued_warning: s.csr_not_issued_warning,
        };
        let verdict = csr::wait(client, &name, &opts, &mut retry, &mut on_pending).await;
        let chain_pem = match verdict {
            Ok(Verdict::Issued { chain_pem }) => chain_pem,
            Ok(Verdict::Denied { reason, message }) => {
                dir.remove_pending_key()?;
                return Err(BootstrapError::Denied {
                    csr: name,
                    reason,
                    message,
                });
            }
            Ok(Verdict::Failed { reason, message }) => {
                dir.remove_pending_key()?;
                return Err(BootstrapError::Failed {
                    csr: name,
                    reason,
                    message,
                });
            }
            // A timeout keeps the pending key: the next attempt adopts the same CSR (an
            // approval may still come) instead of filing another.
            Err(e) => return Err(e.into()),
        };
        let info = match verify::verify_issued(
            &chain_pem,
            &key,
            &s.node_name,
            ca_pem,
            SystemTime::now(),
        ) {
            Ok(info) => info,
            Err(source) => {
                // The same key would adopt the same bad CSR again: start over with a new one.
                dir.remove_pending_key()?;
                return Err(BootstrapError::Refused { csr: name, source });
            }
        };
        let key_pem = key.to_pem();
        let written = dir.install(&chain_pem, &key_pem, SystemTime::now())?;
        kubeconfig::write_kubelet(&s.kubeconfig, server, ca_pem, &dir.current_path())?;
        dir.remove_pending_key()?;
        tracing::info!(
            serial = %info.serial,
            not_after = %health::rfc3339(info.not_after),
            file = %written.display(),
            kubeconfig = %s.kubeconfig.display(),
            "client certificate installed"
        );
        let mut creds = self.credentials(server, ca_pem, chain_pem, key_pem, info)?;
        creds.fresh = true;
        self.installed(&creds);
        Ok(creds)
    }

    /// The key of the CSR in flight: the persisted pending key, or a new one saved first.
    fn pending_key(&self, dir: &CertDir) -> Result<NodeKey, BootstrapError> {
        if let Some(pem) = dir.load_pending_key()? {
            match NodeKey::from_pem(&pem) {
                Ok(key) => return Ok(key),
                Err(e) => {
                    tracing::warn!(error = %report(&e), "discarding an unreadable pending key")
                }
            }
        }
        let key = NodeKey::generate()?;
        dir.store_pending_key(&key.to_pem())?;
        Ok(key)
    }

    pub(crate) fn credentials(
        &self,
        server: &kubeconfig::Server,
        ca_pem: &[u8],
        chain_pem: String,
        key: PrivateKeyPem,
        cert: CertInfo,
    ) -> Result<Credentials, BootstrapError> {
        let credential = Credential::ClientCert { chain_pem, key };
        let client = ApiClient::new(server, ca_pem, &credential, self.api.clone())?;
        Ok(Credentials {
            client,
            cert,
            server: server.clone(),
            ca_pem: ca_pem.to_vec(),
            fresh: false,
        })
    }

    fn installed(&self, creds: &Credentials) {
        let summary = health::CertSummary {
            serial: creds.cert.serial.clone(),
            not_after: creds.cert.not_after,
            rotate_at: None,
        };
        self.health.update(|s| {
            s.bootstrap = State::Installed;
            s.cert = Some(summary);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_names_the_doctor_check_it_breaks() {
        let denied = BootstrapError::Denied {
            csr: "c".into(),
            reason: "r".into(),
            message: "m".into(),
        };
        assert_eq!(denied.check(), CheckId::Csr);
        let missing = BootstrapError::NoBootstrap {
            cert_dir: "/d".into(),
            source: KubeconfigError::Missing { path: "/b".into() },
        };
        assert_eq!(missing.check(), CheckId::BootstrapKubeconfig);
        let early = BootstrapError::Refused {
            csr: "c".into(),
            source: VerifyError::NotYetValid {
                not_before: SystemTime::UNIX_EPOCH,
            },
        };
        assert_eq!(early.check(), CheckId::ClockSkew);
        let timeout = BootstrapError::Csr(CsrError::Timeout {
            name: "c".into(),
            after: Duration::from_secs(1),
        });
        assert_eq!(timeout.check(), CheckId::Csr);
        assert!(timeout.is_approval_timeout() && !timeout.is_refusal());
        assert!(denied.is_refusal());
    }
}
