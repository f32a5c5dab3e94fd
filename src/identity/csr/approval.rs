//! The approval wait on one CSR: list it, then watch it from that version; resume a
//! dropped watch, relist on 410 or after two empty streams, all after a jittered floor;
//! trust only events about the object listed (its name and uid); say once per outage that
//! the API server does not answer (log and STATUS=). Filing is `csr`'s.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::WatchEvent;
use tokio::time::Instant;

use super::{verdict, CsrError, Pending, Verdict, WaitOptions, CSR_PATH};
use crate::api::watch::EventStream;
use crate::api::{self, ApiClient};
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;
use crate::runtime::health;
use crate::runtime::report;

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
/// Longest piece of an object's name or uid from the server that goes into a log line.
const MAX_SERVER_TEXT: usize = 100;

/// Server text for a log line: at most [`MAX_SERVER_TEXT`] characters.
fn clip(text: &str) -> String {
    text.chars().take(MAX_SERVER_TEXT).collect()
}

/// The list+watch loop: list once for the current state and a resourceVersion, then
/// watch from there; resume on a dropped watch, relist on 410, back off on 5xx/429.
pub(super) async fn watch_until_decided(
    client: &ApiClient,
    name: &str,
    opts: &WaitOptions,
    retry: &mut Backoff,
    on_pending: &mut (dyn FnMut(Pending) + Send),
) -> Result<Verdict, CsrError> {
    let api = |source| CsrError::from_api(name, source);
    let selector = format!("fieldSelector=metadata.name%3D{name}");
    let mut tracker = ApprovalTracker::new(opts.not_issued_warning);
    let mut reach = Reachability::default();
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
            // Not `api::retrying`: that warns on every retry, and an outage here is one
            // warning (see `Reachability`).
            let list: k8s_openapi::List<CertificateSigningRequest> = loop {
                match client.get(&path).await {
                    Ok(list) => {
                        retry.reset();
                        reach.answered(name, tracker.pending(), on_pending);
                        break list;
                    }
                    Err(e) if e.is_retryable() => {
                        reach.failed(name, &e, on_pending);
                        tokio::time::sleep(retry.with_retry_after(e.retry_after())).await;
                    }
                    Err(e) => return Err(api(e)),
                }
            };
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
        // Whether the server answered the watch request (a stream that breaks later says
        // nothing about reachability: the re-watch does).
        let mut opened = false;
        let step = match EventStream::open(client, path, WATCH_TIMEOUT, WATCH_IDLE).await {
            Ok(mut stream) => {
                opened = true;
                reach.answered(name, tracker.pending(), on_pending);
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
                if !opened {
                    reach.failed(name, &e, on_pending);
                }
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

/// Whether the API server answers the wait's requests (lists and watch opens). An outage is
/// one warning when the first request fails and one info line when a request succeeds
/// again, not a line per retry; in between STATUS= says the approval cannot be seen.
#[derive(Default)]
struct Reachability {
    /// Since when requests fail (wall clock, for STATUS= and the recovery line).
    down_since: Option<SystemTime>,
}

// === impl Reachability ===

impl Reachability {
    fn failed(&mut self, name: &str, e: &api::Error, on_pending: &mut (dyn FnMut(Pending) + Send)) {
        let reason = report(e);
        if self.down_since.is_some() {
            tracing::debug!(csr = %name, error = %reason, "the API server still does not answer");
            return;
        }
        let since = clock::now();
        self.down_since = Some(since);
        tracing::warn!(csr = %name, error = %reason, "the API server is unreachable: an approval of this CSR is not seen until it answers again; retrying (said once per outage)");
        on_pending(Pending::Unreachable {
            since,
            reason: short_reason(e),
        });
    }

    /// A request got an answer; `now` is the wait's state to show again.
    fn answered(&mut self, name: &str, now: Pending, on_pending: &mut (dyn FnMut(Pending) + Send)) {
        let Some(since) = self.down_since.take() else {
            return;
        };
        let down = clock::now().duration_since(since).unwrap_or_default();
        tracing::info!(csr = %name, "the API server answers again after {}; still waiting for approval", health::human(down));
        on_pending(now);
    }
}

/// What STATUS= says about a failed request, short: the HTTP status the server (or a proxy)
/// answered, or the deepest cause of a transport failure ("Connection refused (os error
/// 111)"), controls escaped and clipped.
fn short_reason(e: &api::Error) -> String {
    if let Some(code) = e.code() {
        return format!("HTTP {code}");
    }
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    clip(&crate::runtime::text::one_line(&cause.to_string()))
}

/// Remembers when the CSR was first seen approved, to say "approved but not issued" once.
pub(super) struct ApprovalTracker {
    threshold: Duration,
    approved_at: Option<Instant>,
    warned: bool,
}

// === impl ApprovalTracker ===

impl ApprovalTracker {
    pub(super) fn new(threshold: Duration) -> Self {
        Self {
            threshold,
            approved_at: None,
            warned: false,
        }
    }

    pub(super) fn observe(
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

    /// Where the wait stands now, for STATUS= after an outage.
    fn pending(&self) -> Pending {
        if self.warned {
            Pending::ApprovedNotIssued
        } else {
            Pending::AwaitingApproval
        }
    }

    /// Resolves once, when the approved-without-certificate threshold passes.
    pub(super) async fn warning_due(&mut self) {
        match self.approved_at {
            Some(at) if !self.warned => {
                tokio::time::sleep_until(at + self.threshold).await;
                self.warned = true;
            }
            _ => std::future::pending().await,
        }
    }
}
