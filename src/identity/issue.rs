//! The one issuing pipeline every node certificate goes through: pending key → CSR named
//! from key + request → file or adopt → wait for approval (watch, bounded) → verify →
//! atomic install → publish. A `CertProfile` says what differs (signer, usages, SANs,
//! extended key usage, file prefix); bootstrap, client rotation and the serving
//! certificate are its users, with the credential they file the CSR with.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::api::kubeconfig::{self, KubeconfigError};
use crate::api::{ApiClient, ClientOptions};
use crate::checkid::CheckId;
use crate::identity::csr::{self, CsrError, Pending, Verdict, WaitOptions};
use crate::metrics::METRICS;
use crate::pki::files::{CertDir, FilesError};
use crate::pki::verify::{self, Anchor, Checked, VerifyError};
use crate::pki::{CertInfo, CertProfile, NodeKey, PkiError, PrivateKeyPem, Purpose};
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;
use crate::runtime::health::{self, Health, State};
use crate::runtime::report;

pub mod proof;
use proof::ProofError;

/// Why one pass through the pipeline produced no certificate.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
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
    #[error("refused the certificate issued for CSR {csr}; nothing was written: its issuer {issuer:?} does not chain to the kubeconfig CA, and the API server did not vouch for it in a SelfSubjectReview")]
    Unaccepted {
        csr: String,
        issuer: String,
        #[source]
        source: ProofError,
    },
    #[error("the certificate issued for CSR {csr}: its issuer {issuer:?} does not chain to the kubeconfig CA, and the API server could not be asked whether it accepts it; nothing was written (the next attempt adopts the same CSR and asks again)")]
    Unproven {
        csr: String,
        issuer: String,
        #[source]
        source: ProofError,
    },
}

/// How long the proof of a certificate from another CA may take at issuance (retries of
/// transport errors, 5xx and 429 included), and never longer than the request's wait limit.
pub const PROOF_LIMIT: Duration = Duration::from_secs(30);

/// Where a verified, installed certificate is published besides its files.
pub enum Publish<'a> {
    /// The client certificate: the kubelet kubeconfig at `path` names it, with this cluster
    /// (`api`: the transport options for proving a certificate from another CA with it).
    Kubeconfig {
        path: &'a Path,
        server: &'a kubeconfig::Server,
        ca_pem: &'a [u8],
        api: &'a ClientOptions,
    },
    /// Its files alone (the serving certificate: the kubelet re-reads the file).
    Files,
}

/// A certificate the pipeline verified and installed.
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: PrivateKeyPem,
    pub info: CertInfo,
    /// The timestamped file now named by the `-current.pem` symlink.
    pub file: PathBuf,
}

/// One request through the pipeline: what to ask for and how long to wait.
pub struct Request<'a> {
    pub profile: &'a CertProfile,
    /// The credential that files the CSR (the bootstrap token, or the current certificate).
    pub client: &'a ApiClient,
    /// The cluster CA the issued certificate must chain to.
    pub ca_pem: &'a [u8],
    /// `--csr-timeout`, or less (a rotation never waits past the current certificate).
    pub wait_limit: Duration,
    /// After this long approved without a certificate, say so.
    pub not_issued_warning: Duration,
    pub publish: Publish<'a>,
}

// === impl IssueError ===

impl IssueError {
    /// The signer's side said no to this CSR (Denied, Failed, a certificate we refused, a
    /// name held by another request): retrying at once changes nothing, so the contract's
    /// back-off applies (at least 1 min, doubling, capped at 1 h, jittered).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            IssueError::Denied { .. }
                | IssueError::Failed { .. }
                | IssueError::Refused { .. }
                | IssueError::Unaccepted { .. }
        ) || matches!(self, IssueError::Csr(e) if e.is_poisoned())
    }

    /// Waiting for approval ran out of time; the pending key (and its CSR) stay for the
    /// next attempt to adopt.
    pub fn is_approval_timeout(&self) -> bool {
        matches!(self, IssueError::Csr(CsrError::Timeout { .. }))
    }

    /// The doctor check (the contract's ids) this failure belongs to.
    pub fn check(&self) -> CheckId {
        match self {
            IssueError::Kubeconfig(_) | IssueError::Files(_) | IssueError::Key(_) => {
                CheckId::Config
            }
            IssueError::Csr(CsrError::Build(_)) => CheckId::Config,
            IssueError::Csr(CsrError::Api { source, .. }) => api_check(source),
            IssueError::Csr(_) | IssueError::Denied { .. } | IssueError::Failed { .. } => {
                CheckId::Csr
            }
            IssueError::Refused { source, .. } => match source {
                VerifyError::NotYetValid { .. } => CheckId::ClockSkew,
                VerifyError::UntrustedIssuer { .. } => CheckId::CaTrust,
                _ => CheckId::ClientCertificate,
            },
            IssueError::Unaccepted { .. } => CheckId::CaTrust,
            IssueError::Unproven { .. } => CheckId::ServerReachable,
        }
    }
}

/// Which link an API failure breaks: 401 the credential, 403 RBAC, a TLS handshake that
/// rejected the server's certificate the CA, anything else the server's reachability.
pub fn api_check(e: &crate::api::Error) -> CheckId {
    if matches!(e, crate::api::Error::Exec { .. }) {
        // The bootstrap kubeconfig's exec plugin handed out nothing: doctor's
        // bootstrap-kubeconfig check runs it and names why.
        CheckId::BootstrapKubeconfig
    } else if e.is_unauthorized() {
        CheckId::Authentication
    } else if e.is_forbidden() {
        CheckId::Authorization
    } else if e.is_transport() && report(e).contains("invalid peer certificate") {
        CheckId::CaTrust
    } else {
        CheckId::ServerReachable
    }
}

/// Runs requests through the pipeline, reporting each step to the health snapshot.
#[derive(Clone)]
pub struct Issuer {
    pub health: Health,
}

// === impl Issuer ===

impl Issuer {
    /// Pending key → CSR → approval → verification → files → publish, for `req.profile`.
    /// The pending key survives a timeout (the next attempt adopts the same CSR) and is
    /// dropped after a refusal (the next attempt files a new CSR with a fresh key).
    /// Each pass is counted in the metrics by profile and outcome.
    pub async fn issue(&self, dir: &CertDir, req: Request<'_>) -> Result<Issued, IssueError> {
        let profile = req.profile.purpose;
        let result = self.pipeline(dir, req).await;
        METRICS.issued(profile, result.is_ok());
        result
    }

    async fn pipeline(&self, dir: &CertDir, req: Request<'_>) -> Result<Issued, IssueError> {
        let profile = req.profile;
        let dir = dir.for_profile(profile);
        let key = pending_key(&dir)?;
        let mut retry = Backoff::new(Duration::from_millis(500), Duration::from_secs(30), 0.2)
            .expect("constant backoff bounds are valid");
        let name = crate::pki::csr_name(&key, profile);
        self.report(profile, State::Filing { csr: name.clone() });
        tracing::info!(csr = %name, identity = %req.client.identity(), "requesting a {}", profile.describe());
        let filed = match csr::file(req.client, &key, profile, &mut retry).await {
            Ok(filed) => filed,
            Err(e) => {
                if e.is_poisoned() {
                    // The same key would name the same CSR again: start over with a new one.
                    dir.remove_pending_key()?;
                }
                return Err(e.into());
            }
        };
        let chain_pem = self.answer(&dir, &req, &name, filed, &mut retry).await?;
        let key_pem = key.to_pem();
        let checked =
            match verify::check_issued(&chain_pem, &key, profile, req.ca_pem, clock::now()) {
                Ok(checked) => checked,
                Err(source) => {
                    // The same key would adopt the same bad CSR again: start over.
                    dir.remove_pending_key()?;
                    return Err(IssueError::Refused { csr: name, source });
                }
            };
        self.vouch(&dir, &name, &checked, &key_pem, &req).await?;
        self.install(&dir, &req, &checked, key_pem)
    }

    /// The wait for the CSR's answer (its state in STATUS= meanwhile) and what it means:
    /// the issued chain, or the error that ends this attempt. A denied, failed, unusable
    /// or replaced CSR goes with its key (adopting it again gets the same answer); a
    /// timeout keeps the pending key, so the next attempt adopts the same CSR (an approval
    /// may still come) instead of filing another.
    async fn answer(
        &self,
        dir: &CertDir,
        req: &Request<'_>,
        name: &str,
        filed: csr::Filed,
        retry: &mut Backoff,
    ) -> Result<String, IssueError> {
        let profile = req.profile;
        tracing::info!(csr = %name, timeout = %health::human(req.wait_limit), "waiting for approval (approve with: kubectl certificate approve {name})");
        // How long it has waited counts from its creation (an adopted CSR has waited
        // through earlier attempts), never from the future of a server clock ahead of ours.
        let now = clock::now();
        let since = filed.created.map_or(now, |created| created.min(now));
        METRICS.csr_filed(profile.purpose);
        let (issuer, csr_name) = (self.clone(), name.to_string());
        let mut on_pending =
            move |p: Pending| issuer.report(profile, pending_state(csr_name.clone(), since, p));
        let opts = WaitOptions {
            timeout: req.wait_limit,
            not_issued_warning: req.not_issued_warning,
        };
        let verdict = csr::wait(req.client, name, &opts, retry, &mut on_pending).await;
        if verdict.is_ok() {
            let waited = clock::now().duration_since(since).unwrap_or_default();
            METRICS.csr_answered(profile.purpose, waited);
        }
        let csr = name.to_string();
        match verdict {
            Ok(Verdict::Issued { chain_pem }) => Ok(chain_pem),
            Ok(Verdict::Denied { reason, message }) => {
                dir.remove_pending_key()?;
                Err(IssueError::Denied {
                    csr,
                    reason,
                    message,
                })
            }
            Ok(Verdict::Failed { reason, message }) => {
                dir.remove_pending_key()?;
                Err(IssueError::Failed {
                    csr,
                    reason,
                    message,
                })
            }
            Err(e) => {
                if e.is_poisoned() {
                    dir.remove_pending_key()?;
                }
                Err(e.into())
            }
        }
    }

    /// Install what was verified, re-encoded (the leaf and its issuer path, not the
    /// server's text around it), the kubeconfig when the request publishes one, and drop
    /// the pending key.
    fn install(
        &self,
        dir: &CertDir,
        req: &Request<'_>,
        checked: &verify::Checked,
        key_pem: PrivateKeyPem,
    ) -> Result<Issued, IssueError> {
        let (info, chain_pem) = (checked.info.clone(), checked.chain_pem());
        let file = dir.install(&chain_pem, &key_pem, clock::now())?;
        if let Publish::Kubeconfig {
            path,
            server,
            ca_pem,
            ..
        } = req.publish
        {
            kubeconfig::write_kubelet(path, server, ca_pem, &dir.current_path())?;
        }
        dir.remove_pending_key()?;
        tracing::info!(
            serial = %info.serial,
            not_after = %health::rfc3339(info.not_after),
            file = %file.display(),
            "{} installed",
            req.profile.describe()
        );
        Ok(Issued {
            chain_pem,
            key_pem,
            info,
            file,
        })
    }

    /// Whether `checked` may be installed as far as its CA goes. One that chains to the
    /// kubeconfig CA may. A client certificate from another CA (a kubelet-client signer
    /// with its own CA, a CA rotation in progress) may once the API server vouches for it:
    /// a SelfSubjectReview with it over a fresh connection answers this node. A serving
    /// certificate from another CA may not: its verifiers (the API server's
    /// `--kubelet-certificate-authority`, metrics-server, Prometheus) are not ours to ask.
    /// A refusal drops the pending key (the same key would adopt the same answer); an
    /// unanswered review keeps it, so the next attempt adopts the issued CSR and asks again.
    async fn vouch(
        &self,
        dir: &CertDir,
        csr: &str,
        checked: &Checked,
        key_pem: &PrivateKeyPem,
        req: &Request<'_>,
    ) -> Result<(), IssueError> {
        let Anchor::Other { issuer } = &checked.anchor else {
            return Ok(());
        };
        let (csr, issuer) = (csr.to_string(), issuer.clone());
        let Publish::Kubeconfig {
            server,
            ca_pem,
            api,
            ..
        } = req.publish
        else {
            dir.remove_pending_key()?;
            let source = VerifyError::UntrustedIssuer { issuer };
            return Err(IssueError::Refused { csr, source });
        };
        tracing::info!(%csr, %issuer, serial = %checked.info.serial, "the certificate is signed by another CA than the kubeconfig's; asking the API server whether it accepts it (SelfSubjectReview)");
        let cluster = proof::Cluster {
            server,
            ca_pem,
            api,
        };
        let chain_pem = checked.chain_pem();
        let patience = proof::Patience::Retry(PROOF_LIMIT.min(req.wait_limit));
        match proof::prove(&cluster, &chain_pem, key_pem, req.profile, patience).await {
            Ok(vouched) => {
                let evidence = vouched.evidence(req.profile);
                tracing::info!(%csr, %issuer, serial = %checked.info.serial, "the API server accepts it: {evidence}");
                Ok(())
            }
            Err(source) if source.is_refusal() => {
                dir.remove_pending_key()?;
                Err(IssueError::Unaccepted {
                    csr,
                    issuer,
                    source,
                })
            }
            Err(source) => Err(IssueError::Unproven {
                csr,
                issuer,
                source,
            }),
        }
    }

    /// Where `profile`'s issuance stands, into the health snapshot (STATUS=).
    fn report(&self, profile: &CertProfile, state: State) {
        match profile.purpose {
            Purpose::Client => self.health.set_bootstrap(state),
            Purpose::Serving => self.health.update(|s| s.serving = Some(state)),
        }
    }
}

/// What a CSR waiting since `since` says in STATUS= while it is `p`.
fn pending_state(csr: String, since: SystemTime, p: Pending) -> State {
    match p {
        Pending::AwaitingApproval => State::WaitingApproval { csr, since },
        Pending::ApprovedNotIssued => State::ApprovedNotIssued { csr, since },
        Pending::Unreachable {
            since: down_since,
            reason,
        } => State::Unreachable {
            csr,
            since,
            down_since,
            reason,
        },
    }
}

/// The key of the CSR in flight: the persisted pending key, or a new one saved first.
fn pending_key(dir: &CertDir) -> Result<NodeKey, IssueError> {
    if let Some(pem) = dir.load_pending_key()? {
        match NodeKey::from_pem(&pem) {
            Ok(key) => return Ok(key),
            Err(e) => tracing::warn!(error = %report(&e), "discarding an unreadable pending key"),
        }
    }
    let key = NodeKey::generate()?;
    dir.store_pending_key(&key.to_pem())?;
    Ok(key)
}
