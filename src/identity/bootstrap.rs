//! TLS bootstrap: reuse a still-valid client certificate, or turn the bootstrap kubeconfig
//! into one (pending key → CSR → approval → verification → files → kubeconfig). Its `State`
//! feeds STATUS=. Rotation and the Lease are other modules' business.

use std::time::Duration;

use crate::api::kubeconfig;
use crate::api::{ApiClient, ClientOptions};
use crate::config::Settings;
use crate::identity::client::ClientIdentity;
pub use crate::identity::client::{BootstrapError, Credentials};
use crate::identity::issue::proof::{self, Cluster};
use crate::pki::files::CertDir;
use crate::pki::verify::{self, Anchor, VerifyError};
use crate::pki::{CertInfo, CertProfile, NodeKey, PkiError, PrivateKeyPem};
use crate::runtime::clock;
use crate::runtime::health::{self, Health};
pub use crate::runtime::health::{doctor_hint, State};
use crate::runtime::report;

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
    #[error("the certificate's issuer {issuer:?} does not chain to the kubeconfig CA, and the API server does not vouch for it")]
    Unaccepted {
        issuer: String,
        #[source]
        source: proof::ProofError,
    },
}

/// Whether an installed certificate is usable now: its key parses and the certificate
/// verifies for `node` against `ca_pem` (the same rules as a freshly issued one), chaining
/// to `ca_pem`. `Err` says why not, typed, so the log and `bootlet doctor` agree.
pub(crate) fn check_installed(
    chain_pem: String,
    key_pem: PrivateKeyPem,
    node: &str,
    ca_pem: &[u8],
) -> Result<Installed, InstalledError> {
    match check_installed_offline(chain_pem, key_pem, node, ca_pem)? {
        (installed, Anchor::ClusterCa) => Ok(installed),
        (_, Anchor::Other { issuer }) => {
            Err(InstalledError::Verify(VerifyError::UntrustedIssuer {
                issuer,
            }))
        }
    }
}

/// [`check_installed`] up to the CA: which one the chain leads to, for the caller to
/// judge (a certificate from another CA is usable once the API server vouches for it:
/// [`proof::prove`], as `reuse` here and `bootlet doctor` ask it).
pub(crate) fn check_installed_offline(
    chain_pem: String,
    key_pem: PrivateKeyPem,
    node: &str,
    ca_pem: &[u8],
) -> Result<(Installed, Anchor), InstalledError> {
    let key = NodeKey::from_pem(&key_pem).map_err(InstalledError::Key)?;
    let profile = CertProfile::client(node);
    let checked = verify::check_issued(&chain_pem, &key, &profile, ca_pem, clock::now())?;
    let installed = Installed {
        chain_pem,
        key_pem,
        info: checked.info,
    };
    Ok((installed, checked.anchor))
}

/// How long a restart waits for the API server to vouch for an installed certificate from
/// another CA before it uses the certificate anyway (an outage at boot must not keep the
/// kubelet from starting): one request, no retries.
const PROOF_AT_START: proof::Patience = proof::Patience::Once(Duration::from_secs(10));

/// After an approval timeout, the pause before the same CSR is adopted again: short, so an
/// approval is seen within about a second of the next pass; a floor, so a tiny
/// `--csr-timeout` cannot make the passes a request loop.
const READOPT_DELAY: Duration = Duration::from_secs(1);

/// Runs bootstrap with the settings it needs.
pub struct Bootstrap<'a> {
    settings: &'a Settings,
    health: Health,
    /// Where obtained certificates go (shared with rotation).
    pub client: ClientIdentity<'a>,
}

// === impl Bootstrap ===

impl<'a> Bootstrap<'a> {
    pub fn new(settings: &'a Settings, health: Health, api: ClientOptions) -> Self {
        Self {
            settings,
            client: ClientIdentity {
                settings,
                health: health.clone(),
                api,
            },
            health,
        }
    }

    /// Reuse a valid certificate or bootstrap until one is installed. Fails only when it
    /// cannot start: no valid certificate and an unreadable bootstrap kubeconfig (the first
    /// time), or an unusable cert dir. Later failures are logged and retried with backoff.
    pub async fn run(&self) -> Result<Credentials, BootstrapError> {
        let dir = CertDir::open(&self.settings.cert_dir)?;
        // The kubeconfig's directory is not the cert dir: its crash leftovers go here.
        if let Err(e) = crate::pki::files::sweep_temps_of(&self.settings.kubeconfig) {
            tracing::warn!(error = %report(&e), "cannot remove temp files beside the kubeconfig");
        }
        if let Some(creds) = self.reuse(&dir).await? {
            return Ok(creds);
        }
        let mut attempts = self.settings.csr_backoff();
        let mut first = true;
        loop {
            // A retry first looks for a certificate an earlier attempt installed before it
            // failed (writing the kubeconfig, say): publishing that one again beats filing
            // a new CSR for a new key on every retry.
            let result = if first {
                self.attempt(&dir).await
            } else {
                match self.reuse(&dir).await {
                    Ok(Some(creds)) => Ok(creds),
                    Ok(None) => self.attempt(&dir).await,
                    Err(e) => Err(e),
                }
            };
            match result {
                Ok(creds) => return Ok(creds),
                Err(e @ BootstrapError::NoBootstrap { .. }) if first => return Err(e),
                // Not a refusal: the CSR still waits and an approval may come at any
                // moment, so the same CSR is adopted again after a short fixed pause (the
                // wait itself, `--csr-timeout`, paces the passes). The refusal back-off
                // would leave an approval unseen for up to an hour while STATUS= asks for it.
                Err(e) if e.is_approval_timeout() => {
                    tracing::warn!(error = %report(&e), again_in = %health::human(READOPT_DELAY), "still no approval; waiting on the same CSR again");
                    tokio::time::sleep(READOPT_DELAY).await;
                }
                Err(e) => {
                    let delay = attempts.next_delay();
                    let check = e.check();
                    tracing::error!(error = %report(&e), retry_in = %health::human(delay), %check, "bootstrap attempt failed ({})", doctor_hint(check));
                    self.health.set_bootstrap(State::BackingOff {
                        until: clock::now() + delay,
                        reason: report(&e),
                        check,
                    });
                    tokio::time::sleep(delay).await;
                }
            }
            first = false;
        }
    }

    /// The installed certificate, if it is valid for this node, key and cluster.
    async fn reuse(&self, dir: &CertDir) -> Result<Option<Credentials>, BootstrapError> {
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
        let checked = check_installed_offline(chain_pem, key_pem, &s.node_name, &access.ca_pem);
        let checked = match checked {
            Ok((installed, Anchor::Other { issuer })) => {
                let cluster = Cluster {
                    server: &access.server,
                    ca_pem: &access.ca_pem,
                    api: &self.client.api,
                };
                self.vouched(&cluster, installed, &issuer).await
            }
            other => other.map(|(installed, _)| installed),
        };
        match checked {
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
                let creds = self.client.credentials(
                    &access.server,
                    &access.ca_pem,
                    chain_pem,
                    key_pem,
                    info,
                )?;
                self.client.installed(&creds);
                Ok(Some(creds))
            }
            Err(e) => {
                let reason = report(&e);
                tracing::info!(%reason, "the current client certificate cannot be reused; bootstrapping");
                Ok(None)
            }
        }
    }

    /// An installed certificate from another CA than the kubeconfig's, if the API server
    /// still vouches for it (a SelfSubjectReview with it answers this node). Refused: not
    /// reusable. Unanswered (one request, [`PROOF_AT_START`]): reused all the same, since it passed
    /// every offline check and only bootlet writes the cert dir; were it not accepted, the
    /// Lease and rotation would say so (401).
    async fn vouched(
        &self,
        cluster: &Cluster<'_>,
        installed: Installed,
        issuer: &str,
    ) -> Result<Installed, InstalledError> {
        let profile = CertProfile::client(&self.settings.node_name);
        let serial = installed.info.serial.clone();
        match proof::prove(
            cluster,
            &installed.chain_pem,
            &installed.key_pem,
            &profile,
            PROOF_AT_START,
        )
        .await
        {
            Ok(vouched) => {
                let evidence = vouched.evidence(&profile);
                tracing::info!(%serial, %issuer, "the current client certificate is signed by another CA than the kubeconfig's, and the API server accepts it: {evidence}");
                Ok(installed)
            }
            Err(e) if e.is_refusal() => Err(InstalledError::Unaccepted {
                issuer: issuer.to_string(),
                source: e,
            }),
            Err(e) => {
                tracing::warn!(%serial, %issuer, error = %report(&e), "the current client certificate is signed by another CA than the kubeconfig's and the API server cannot be asked now; using it (a 401 later means it is not accepted)");
                Ok(installed)
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
            self.client.api.clone(),
        )?;
        self.client
            .obtain(dir, &client, &access.server, &access.ca_pem, s.csr_timeout)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkid::CheckId;
    use crate::identity::csr::CsrError;
    use crate::identity::issue::IssueError;
    use crate::pki::verify::VerifyError;

    #[test]
    fn each_failure_names_the_doctor_check_it_breaks() {
        let denied = BootstrapError::Issue(IssueError::Denied {
            csr: "c".into(),
            reason: "r".into(),
            message: "m".into(),
        });
        assert_eq!(denied.check(), CheckId::Csr);
        let missing = BootstrapError::NoBootstrap {
            cert_dir: "/d".into(),
            source: crate::api::kubeconfig::KubeconfigError::Missing { path: "/b".into() },
        };
        assert_eq!(missing.check(), CheckId::BootstrapKubeconfig);
        let early = BootstrapError::Issue(IssueError::Refused {
            csr: "c".into(),
            source: VerifyError::NotYetValid {
                not_before: std::time::SystemTime::UNIX_EPOCH,
            },
        });
        assert_eq!(early.check(), CheckId::ClockSkew);
        let timeout = BootstrapError::Issue(IssueError::Csr(CsrError::Timeout {
            name: "c".into(),
            after: Duration::from_secs(1),
        }));
        assert_eq!(timeout.check(), CheckId::Csr);
        assert!(timeout.is_approval_timeout() && !timeout.is_refusal());
        assert!(denied.is_refusal());
    }
}
