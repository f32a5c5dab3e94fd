//! Owns CertificateSigningRequests: the object bootlet files (named from key + request, so a
//! restarted agent finds its own), adopting it after a restart, and the bounded list+watch
//! wait until it is issued, denied or failed. Keys, files and retries-with-new-keys live elsewhere.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, WatchEvent};
use k8s_openapi::ByteString;
use tokio::time::Instant;

use crate::api::watch::EventStream;
use crate::api::{self, retrying, ApiClient};
use crate::pki::{self, CertProfile, NodeKey};
use crate::runtime::backoff::Backoff;

/// The CSR collection (doctor reads it too; only this module writes it).
pub const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
/// Server-side bound of one watch request; client-go picks 5-10 minutes.
const WATCH_SECONDS: u64 = 300;
const WATCH_TIMEOUT: Duration = Duration::from_secs(WATCH_SECONDS);
/// A watch silent for longer than its own timeout plus a margin is dead: re-watch.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_SECONDS + 30);
/// Every re-watch and relist waits at least this long (jittered, doubling while streams end
/// without an event, up to `REWATCH_MAX`): a watch the server or a proxy closes at once, or
/// a 410 on every watch, must not become a request loop.
const REWATCH_MIN: Duration = Duration::from_secs(1);
const REWATCH_MAX: Duration = Duration::from_secs(30);

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    AwaitingApproval,
    /// Approved for longer than the warning threshold with no certificate.
    ApprovedNotIssued,
}

/// Longest piece of an object's name or uid from the server that goes into a log line.
const MAX_SERVER_TEXT: usize = 100;

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

/// Server text for a log line: at most [`MAX_SERVER_TEXT`] characters.
fn clip(text: &str) -> String {
    text.chars().take(MAX_SERVER_TEXT).collect()
}

/// Bounds on one wait.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// `--csr-timeout`: give up on this CSR after this long.
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

/// File the CSR for `key`, or adopt the one a previous run filed. Returns its name.
pub async fn file(
    client: &ApiClient,
    key: &NodeKey,
    profile: &CertProfile,
    retry: &mut Backoff,
) -> Result<String, CsrError> {
    let csr = build(key, profile).map_err(CsrError::Build)?;
    let name = csr.metadata.name.clone().unwrap_or_default();
    let api = |source| CsrError::from_api(&name, source);
    let created = retrying("creating the CSR", retry, || {
        client.create::<_, CertificateSigningRequest>(CSR_PATH, &csr)
    })
    .await;
    match created {
        Ok(_) => {
            tracing::info!(csr = %name, "filed CSR");
            Ok(name)
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
                Ok(name)
            } else {
                Err(CsrError::NameTaken { name })
            }
        }
        Err(e) => Err(api(e)),
    }
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
        watch_until_decided(client, name, opts, retry, on_pending),
    )
    .await
    .unwrap_or_else(|_| {
        Err(CsrError::Timeout {
            name: name.to_string(),
            after: opts.timeout,
        })
    })
}

/// The list+watch loop: list once for the current state and a resourceVersion, then
/// watch from there; resume on a dropped watch, relist on 410, back off on 5xx/429.
async fn watch_until_decided(
    client: &ApiClient,
    name: &str,
    opts: &WaitOptions,
    retry: &mut Backoff,
    on_pending: &mut (dyn FnMut(Pending) + Send),
) -> Result<Verdict, CsrError> {
    let api = |source| CsrError::from_api(name, source);
    let selector = format!("fieldSelector=metadata.name%3D{name}");
    let mut tracker = ApprovalTracker::new(opts.not_issued_warning);
    on_pending(Pending::AwaitingApproval);
    let mut rewatch = Backoff::new(REWATCH_MIN, REWATCH_MAX, 0.2).expect("constant bounds");
    let mut empty_streams = 0u32;
    // The object we wait on, by uid, from the first time we see it.
    let mut uid: Option<String> = None;
    let mut warned_foreign = false;
    // `None`: list first (at start and after a 410); `Some(rv)`: watch from rv.
    let mut version: Option<String> = None;
    loop {
        let Some(rv) = version.take() else {
            let path = format!("{CSR_PATH}?{selector}");
            let list: k8s_openapi::List<CertificateSigningRequest> =
                retrying("listing the CSR", retry, || client.get(&path))
                    .await
                    .map_err(api)?;
            // By name, not position: a server (or proxy) that ignores the selector is no
            // reason to judge another CSR.
            let Some(csr) = list.items.iter().find(|c| ours(name, c)) else {
                return Err(CsrError::Deleted { name: name.into() });
            };
            same_object(name, &mut uid, csr)?;
            if let Some(v) = tracker.observe(csr, on_pending) {
                return Ok(v);
            }
            version = Some(list.metadata.resource_version.unwrap_or_default());
            continue;
        };
        let path = format!(
            "{CSR_PATH}?{selector}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}"
        );
        let mut last = rv;
        let step = match EventStream::open(client, path, WATCH_TIMEOUT, WATCH_IDLE).await {
            Ok(mut stream) => {
                let mut watched = Watched {
                    name,
                    uid: &mut uid,
                    last: &mut last,
                    tracker: &mut tracker,
                };
                follow(&mut stream, &mut watched, opts, on_pending).await
            }
            Err(e) => Err(e),
        };
        match step {
            Ok(Step::Decided(v)) => return Ok(v),
            Ok(Step::Deleted) => return Err(CsrError::Deleted { name: name.into() }),
            Ok(Step::Replaced(e)) => return Err(e),
            // An answer about another object on a watch of ours by name: the server (or a
            // proxy) ignores the field selector or garbles what it sends. Nothing in this
            // stream can be trusted to be about our CSR, and it may have carried our
            // verdict under the wrong name: list ours again, after the re-watch floor.
            Ok(Step::Foreign { other }) => {
                let message = "a CSR watch reported another object; ignoring it and listing the CSR again (the API server or a proxy ignores the field selector or garbles answers)";
                if !std::mem::replace(&mut warned_foreign, true) {
                    tracing::warn!(csr = %name, other = %clip(&other), "{message}");
                } else {
                    tracing::debug!(csr = %name, other = %clip(&other), "{message}");
                }
                tokio::time::sleep(rewatch.next_delay()).await;
                version = None;
                empty_streams = 0;
            }
            // A stream resumes from the last version seen. Two empty streams in a row told
            // us nothing (a proxy cutting every watch at once would leave us blind until
            // --csr-timeout): list again for the current state.
            Ok(Step::Ended { delivered }) => {
                if delivered {
                    rewatch.reset();
                    empty_streams = 0;
                } else {
                    empty_streams += 1;
                }
                tokio::time::sleep(rewatch.next_delay()).await;
                version = (empty_streams < 2).then_some(last);
                if version.is_none() {
                    empty_streams = 0;
                }
            }
            Err(e) if e.is_gone() => {
                tracing::debug!(csr = %name, "watch history expired (410); relisting");
                tokio::time::sleep(rewatch.next_delay()).await;
                version = None;
            }
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(retry.with_retry_after(e.retry_after())).await;
                version = Some(last);
            }
            Err(e) => return Err(api(e)),
        }
    }
}

/// How one watch stream ended.
enum Step {
    Decided(Verdict),
    Deleted,
    /// Our name, another uid: not the object we filed.
    Replaced(CsrError),
    /// An event about another object (its name).
    Foreign {
        other: String,
    },
    /// The server closed the stream or it went idle: resume from the last version.
    /// `delivered`: the stream carried at least one event before it ended.
    Ended {
        delivered: bool,
    },
}

/// Whether `csr` is the one we wait for: events about any other object are ignored.
fn ours(name: &str, csr: &CertificateSigningRequest) -> bool {
    csr.metadata.name.as_deref() == Some(name)
}

/// What a watch stream updates: the CSR it is about (name and, once seen, uid), the newest
/// resourceVersion seen, and the approval state.
struct Watched<'a> {
    name: &'a str,
    uid: &'a mut Option<String>,
    last: &'a mut String,
    tracker: &'a mut ApprovalTracker,
}

/// The first uid seen for `name` is the object we wait on; another one later means it was
/// replaced behind our back (deleted and created again by someone else).
fn same_object(
    name: &str,
    uid: &mut Option<String>,
    csr: &CertificateSigningRequest,
) -> Result<(), CsrError> {
    let Some(now) = csr.metadata.uid.as_deref() else {
        return Ok(());
    };
    match uid.as_deref() {
        None => {
            *uid = Some(now.to_string());
            Ok(())
        }
        Some(was) if was == now => Ok(()),
        Some(was) => Err(CsrError::Replaced {
            name: name.to_string(),
            was: clip(was),
            now: clip(now),
        }),
    }
}

/// Read one watch stream until the CSR is decided or the stream ends, keeping `w.last`
/// at the newest resourceVersion seen.
async fn follow(
    stream: &mut EventStream<CertificateSigningRequest>,
    w: &mut Watched<'_>,
    opts: &WaitOptions,
    on_pending: &mut (dyn FnMut(Pending) + Send),
) -> Result<Step, api::Error> {
    let name = w.name;
    let mut delivered = false;
    loop {
        let event = tokio::select! {
            event = stream.next() => event?,
            () = w.tracker.warning_due() => {
                tracing::warn!(csr = %name, "CSR approved but not issued after {}: is a signer running (kube-controller-manager --cluster-signing-*)?", crate::runtime::health::human(opts.not_issued_warning));
                on_pending(Pending::ApprovedNotIssued);
                continue;
            }
        };
        match event {
            Some(WatchEvent::Added(csr) | WatchEvent::Modified(csr)) => {
                if !ours(name, &csr) {
                    return Ok(Step::Foreign {
                        other: csr.metadata.name.unwrap_or_default(),
                    });
                }
                if let Err(e) = same_object(name, w.uid, &csr) {
                    return Ok(Step::Replaced(e));
                }
                if let Some(rv) = &csr.metadata.resource_version {
                    w.last.clone_from(rv);
                }
                delivered = true;
                if let Some(v) = w.tracker.observe(&csr, on_pending) {
                    return Ok(Step::Decided(v));
                }
            }
            Some(WatchEvent::Deleted(csr)) if ours(name, &csr) => return Ok(Step::Deleted),
            Some(WatchEvent::Deleted(csr)) => {
                return Ok(Step::Foreign {
                    other: csr.metadata.name.unwrap_or_default(),
                })
            }
            Some(WatchEvent::Bookmark {
                resource_version, ..
            }) => {
                delivered = true;
                *w.last = resource_version;
            }
            Some(_) => delivered = true,
            None => return Ok(Step::Ended { delivered }),
        }
    }
}

/// Remembers when the CSR was first seen approved, to say "approved but not issued" once.
struct ApprovalTracker {
    threshold: Duration,
    approved_at: Option<Instant>,
    warned: bool,
}

// === impl ApprovalTracker ===

impl ApprovalTracker {
    fn new(threshold: Duration) -> Self {
        Self {
            threshold,
            approved_at: None,
            warned: false,
        }
    }

    fn observe(
        &mut self,
        csr: &CertificateSigningRequest,
        on_pending: &mut (dyn FnMut(Pending) + Send),
    ) -> Option<Verdict> {
        let (verdict, approved) = verdict(csr);
        if approved && self.approved_at.is_none() {
            tracing::info!(
                csr = csr.metadata.name.as_deref().unwrap_or(""),
                "CSR approved"
            );
            self.approved_at = Some(Instant::now());
        }
        if verdict.is_none() && !approved {
            on_pending(Pending::AwaitingApproval);
        }
        verdict
    }

    /// Resolves once, when the approved-without-certificate threshold passes.
    async fn warning_due(&mut self) {
        match self.approved_at {
            Some(at) if !self.warned => {
                tokio::time::sleep_until(at + self.threshold).await;
                self.warned = true;
            }
            _ => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests;
