//! Owns CertificateSigningRequests: the object bootlet files (named from key + request, so a
//! restarted agent finds its own), adopting it after a restart, and the bounded list+watch
//! wait until it is issued, denied or failed (`approval`). Keys, files and
//! retries-with-new-keys live elsewhere.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use crate::api::{self, retrying, ApiClient};
use crate::pki::{self, CertProfile, NodeKey};
use crate::runtime::backoff::Backoff;

/// The CSR collection (doctor reads it too; only this module writes it).
pub const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// Why waiting on a CSR ended without a certificate.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("CSR {name}: request failed")]
    Api {
        name: String,
        #[source]
        source: api::Error,
    },
    #[error("CSR {name} exists but is not ours (other key, subject or signer); delete it with `kubectl delete csr {name}`")]
    NameTaken { name: String },
    #[error("CSR {name} was not approved within {after:?}; approve it with `kubectl certificate approve {name}`, or check the approver (kube-controller-manager csrapproving and the ClusterRoleBinding kubeadm:node-autoapprove-bootstrap)")]
    Timeout { name: String, after: Duration },
    #[error("CSR {name} was deleted while bootlet waited for it")]
    Deleted { name: String },
    #[error("CSR {name}: the API server's answer about it cannot be used; not trusting this CSR, starting over with a fresh key")]
    Unreadable {
        name: String,
        #[source]
        source: api::Error,
    },
    #[error("CSR {name} was replaced under the watch (uid {was} is now {now}): its verdict is not about the request bootlet filed; starting over with a fresh key")]
    Replaced {
        name: String,
        was: String,
        now: String,
    },
    #[error("building the CSR")]
    Build(#[source] pki::PkiError),
}

/// How a CSR ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Approved and signed: the PEM chain from `status.certificate`.
    Issued {
        chain_pem: String,
    },
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// Where a pending CSR stands, for STATUS= and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    AwaitingApproval,
    /// Approved for longer than the warning threshold with no certificate.
    ApprovedNotIssued,
    /// The API server has not answered the wait since `since`; `reason` is the first
    /// error, one short line. Cleared by the next state once it answers again.
    Unreachable {
        since: SystemTime,
        reason: String,
    },
}

// === impl CsrError ===

impl CsrError {
    /// This CSR cannot lead to a certificate: the server's answers about it are unusable
    /// (over the body cap, not the expected JSON) or it is another object now. The pending
    /// key goes with it, like after a refusal: adopting the same CSR again would get the
    /// same answer.
    pub fn is_poisoned(&self) -> bool {
        matches!(
            self,
            CsrError::NameTaken { .. } | CsrError::Unreadable { .. } | CsrError::Replaced { .. }
        )
    }

    /// An API error about CSR `name`: unusable answers poison it, the rest are failures.
    fn from_api(name: &str, source: api::Error) -> CsrError {
        let name = name.to_string();
        if source.is_unusable_answer() {
            CsrError::Unreadable { name, source }
        } else {
            CsrError::Api { name, source }
        }
    }
}

/// A CSR on the server that is ours: filed now, or adopted from an earlier attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filed {
    pub name: String,
    /// Its `metadata.creationTimestamp` (the server's clock), when the server sent one:
    /// how long it has waited, across re-adoptions and restarts.
    pub created: Option<SystemTime>,
}

/// Bounds on one wait.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// `--csr-timeout`: how long one approval wait lasts; the caller then adopts the same CSR again.
    pub timeout: Duration,
    /// Say "approved but not issued" after this long approved without a certificate.
    pub not_issued_warning: Duration,
}

/// The CSR object for `key` and `profile` (pure).
pub fn build(
    key: &NodeKey,
    profile: &CertProfile,
) -> Result<CertificateSigningRequest, pki::PkiError> {
    let request = pki::csr_pem(key, profile)?;
    Ok(CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(pki::csr_name(key, profile)),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: profile.signer().to_string(),
            usages: Some(profile.usages().iter().map(|u| u.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    })
}

/// File the CSR for `key`, or adopt the one a previous run (or attempt) filed.
pub async fn file(
    client: &ApiClient,
    key: &NodeKey,
    profile: &CertProfile,
    retry: &mut Backoff,
) -> Result<Filed, CsrError> {
    let csr = build(key, profile).map_err(CsrError::Build)?;
    let name = csr.metadata.name.clone().unwrap_or_default();
    let api = |source| CsrError::from_api(&name, source);
    let created = retrying("creating the CSR", retry, || {
        client.create::<_, CertificateSigningRequest>(CSR_PATH, &csr)
    })
    .await;
    match created {
        Ok(created) => {
            tracing::info!(csr = %name, "filed CSR");
            Ok(Filed {
                created: created_at(&created),
                name,
            })
        }
        Err(e) if e.is_already_exists() => {
            let path = format!("{CSR_PATH}/{name}");
            let existing: CertificateSigningRequest =
                retrying("reading the existing CSR", retry, || client.get(&path))
                    .await
                    .map_err(api)?;
            if existing.spec.signer_name == profile.signer()
                && pki::csr_matches_key(&existing.spec.request.0, key, profile)
            {
                tracing::info!(csr = %name, "adopted the CSR filed earlier for this key");
                Ok(Filed {
                    created: created_at(&existing),
                    name,
                })
            } else {
                Err(CsrError::NameTaken { name })
            }
        }
        Err(e) => Err(api(e)),
    }
}

/// `metadata.creationTimestamp` as a `SystemTime` (pure).
fn created_at(csr: &CertificateSigningRequest) -> Option<SystemTime> {
    let at = csr.metadata.creation_timestamp.as_ref()?;
    Some(SystemTime::from(at.0))
}

/// Where `csr` stands (pure): `Some(verdict)` once it is decided.
pub fn verdict(csr: &CertificateSigningRequest) -> (Option<Verdict>, bool) {
    let status = csr.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let mut approved = false;
    for c in conditions.iter().filter(|c| c.status == "True") {
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => return (Some(Verdict::Denied { reason, message }), false),
            "Failed" => return (Some(Verdict::Failed { reason, message }), approved),
            "Approved" => approved = true,
            _ => {}
        }
    }
    let cert = status.and_then(|s| s.certificate.as_ref()).map(|c| &c.0);
    match cert {
        Some(bytes) if approved && !bytes.is_empty() => {
            let chain_pem = String::from_utf8_lossy(bytes).into_owned();
            (Some(Verdict::Issued { chain_pem }), true)
        }
        _ => (None, approved),
    }
}

/// Wait until CSR `name` is decided, at most `opts.timeout`. `on_pending` hears each
/// change of the pending state (for STATUS=). Retryable API errors are retried inside.
pub async fn wait(
    client: &ApiClient,
    name: &str,
    opts: &WaitOptions,
    retry: &mut Backoff,
    on_pending: &mut (dyn FnMut(Pending) + Send),
) -> Result<Verdict, CsrError> {
    tokio::time::timeout(
        opts.timeout,
        approval::watch_until_decided(client, name, opts, retry, on_pending),
    )
    .await
    .unwrap_or_else(|_| {
        Err(CsrError::Timeout {
            name: name.to_string(),
            after: opts.timeout,
        })
    })
}

mod approval;

#[cfg(test)]
mod tests;
