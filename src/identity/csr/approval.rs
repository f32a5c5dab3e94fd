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
/// watch from there; resume on a dropped watch, relist on 410, back off on 5xx/429. The
/// state is a [`Wait`]; what follows a stream is its pure [`Wait::after`].
pub(super) async fn watch_until_decided(
    client: &ApiClient,
    name: &str,
    opts: &WaitOptions,
    retry: &mut Backoff,
    on_pending: &mut (dyn FnMut(Pending) + Send),
) -> Result<Verdict, CsrError> {
    let mut w = Wait::new(name, opts);
    on_pending(Pending::AwaitingApproval);
    // `None`: list first (at start and after a 410); `Some(rv)`: watch from rv.
    let mut version: Option<String> = None;
    loop {
        let Some(rv) = version.take() else {
            match w.list(client, retry, on_pending).await? {
                Listed::Decided(v) => return Ok(v),
                Listed::At(rv) => version = Some(rv),
            }
            continue;
        };
        let watched = w.watch(client, rv, opts, on_pending).await;
        match w.after(watched, retry, on_pending) {
            After::Done(result) => return result,
            After::Again { wait, from } => {
                tokio::time::sleep(wait).await;
                version = from;
            }
        }
    }
}

/// What a list found: the verdict, or where to watch from.
enum Listed {
    Decided(Verdict),
    At(String),
}

/// How one watch went: its step, the last resourceVersion seen, and whether the server
/// answered the watch request (a stream that breaks later says nothing about
/// reachability: the re-watch does).
struct Watch {
    step: Result<Step, api::Error>,
    last: String,
    opened: bool,
}

/// What the loop does after a stream: end, or wait and go on (from a resourceVersion, or
/// with a list).
#[derive(Debug)]
enum After {
    Done(Result<Verdict, CsrError>),
    Again {
        wait: Duration,
        from: Option<String>,
    },
}

/// What one wait for a CSR carries from one stream to the next.
struct Wait<'a> {
    name: &'a str,
    selector: String,
    tracker: ApprovalTracker,
    reach: Reachability,
    /// The floor between re-watches and relists.
    rewatch: Backoff,
    /// Streams in a row that ended without an event.
    empty_streams: u32,
    /// The object we wait on, by uid, from the first time we see it.
    uid: Option<String>,
    warned_foreign: bool,
}

// === impl Wait ===

impl<'a> Wait<'a> {
    fn new(name: &'a str, opts: &WaitOptions) -> Self {
        Wait {
            name,
            selector: format!("fieldSelector=metadata.name%3D{name}"),
            tracker: ApprovalTracker::new(opts.not_issued_warning),
            reach: Reachability::default(),
            rewatch: Backoff::new(REWATCH_MIN, REWATCH_MAX, 0.2).expect("constant bounds"),
            empty_streams: 0,
            uid: None,
            warned_foreign: false,
        }
    }

    /// List ours for its current state and a resourceVersion, retrying what may pass.
    async fn list(
        &mut self,
        client: &ApiClient,
        retry: &mut Backoff,
        on_pending: &mut (dyn FnMut(Pending) + Send),
    ) -> Result<Listed, CsrError> {
        let name = self.name;
        let path = format!("{CSR_PATH}?{}", self.selector);
        // Not `api::retrying`: that warns on every retry, and an outage here is one
        // warning (see `Reachability`).
        let list: k8s_openapi::List<CertificateSigningRequest> = loop {
            match client.get(&path).await {
                Ok(list) => {
                    retry.reset();
                    self.reach
                        .answered(name, self.tracker.pending(), on_pending);
                    break list;
                }
                Err(e) if e.is_retryable() => {
                    self.reach.failed(name, &e, on_pending);
                    tokio::time::sleep(retry.with_retry_after(e.retry_after())).await;
                }
                Err(e) => return Err(CsrError::from_api(name, e)),
            }
        };
        // By name, not position: a server (or proxy) that ignores the selector is no
        // reason to judge another CSR.
        let Some(csr) = list.items.iter().find(|c| ours(name, c)) else {
            return Err(CsrError::Deleted { name: name.into() });
        };
        same_object(name, &mut self.uid, csr)?;
        if let Some(v) = self.tracker.observe(csr, on_pending) {
            return Ok(Listed::Decided(v));
        }
        Ok(Listed::At(
            list.metadata.resource_version.unwrap_or_default(),
        ))
    }

    /// One watch stream from `rv`, followed until it ends.
    async fn watch(
        &mut self,
        client: &ApiClient,
        rv: String,
        opts: &WaitOptions,
        on_pending: &mut (dyn FnMut(Pending) + Send),
    ) -> Watch {
        let path = format!(
            "{CSR_PATH}?{}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}",
            self.selector
        );
        let mut last = rv;
        let mut opened = false;
        let step = match EventStream::open(client, path, WATCH_TIMEOUT, WATCH_IDLE).await {
            Ok(mut stream) => {
                opened = true;
                self.reach
                    .answered(self.name, self.tracker.pending(), on_pending);
                let mut watched = Watched {
                    name: self.name,
                    uid: &mut self.uid,
                    last: &mut last,
                    tracker: &mut self.tracker,
                };
                follow(&mut stream, &mut watched, opts, on_pending).await
            }
            Err(e) => Err(e),
        };
        Watch { step, last, opened }
    }

    /// The step after a stream (no IO but logs and STATUS=): the verdict, or the wait
    /// before going on and from where.
    fn after(
        &mut self,
        watched: Watch,
        retry: &mut Backoff,
        on_pending: &mut (dyn FnMut(Pending) + Send),
    ) -> After {
        let name = self.name;
        let Watch { step, last, opened } = watched;
        match step {
            Ok(Step::Decided(v)) => After::Done(Ok(v)),
            Ok(Step::Deleted) => After::Done(Err(CsrError::Deleted { name: name.into() })),
            Ok(Step::Replaced(e)) => After::Done(Err(e)),
            // An answer about another object on a watch of ours by name: the server (or a
            // proxy) ignores the field selector or garbles what it sends. Nothing in this
            // stream can be trusted to be about our CSR, and it may have carried our
            // verdict under the wrong name: list ours again, after the re-watch floor.
            Ok(Step::Foreign { other }) => self.after_foreign(&other),
            Ok(Step::Ended { delivered }) => self.after_ended(delivered, last),
            Err(e) if e.is_gone() => {
                tracing::debug!(csr = %name, "watch history expired (410); relisting");
                let wait = self.rewatch.next_delay();
                After::Again { wait, from: None }
            }
            Err(e) if e.is_retryable() => {
                if !opened {
                    self.reach.failed(name, &e, on_pending);
                }
                let wait = retry.with_retry_after(e.retry_after());
                After::Again {
                    wait,
                    from: Some(last),
                }
            }
            Err(e) => After::Done(Err(CsrError::from_api(name, e))),
        }
    }

    /// A foreign object on the stream: warned once, listed again after the re-watch floor.
    fn after_foreign(&mut self, other: &str) -> After {
        let name = self.name;
        let message = "a CSR watch reported another object; ignoring it and listing the CSR again (the API server or a proxy ignores the field selector or garbles answers)";
        if !std::mem::replace(&mut self.warned_foreign, true) {
            tracing::warn!(csr = %name, other = %clip(other), "{message}");
        } else {
            tracing::debug!(csr = %name, other = %clip(other), "{message}");
        }
        self.empty_streams = 0;
        let wait = self.rewatch.next_delay();
        After::Again { wait, from: None }
    }

    /// A stream resumes from the last version seen. Two empty streams in a row told us
    /// nothing (a proxy cutting every watch at once would leave us blind until
    /// --csr-timeout): list again for the current state.
    fn after_ended(&mut self, delivered: bool, last: String) -> After {
        if delivered {
            self.rewatch.reset();
            self.empty_streams = 0;
        } else {
            self.empty_streams += 1;
        }
        let wait = self.rewatch.next_delay();
        let from = (self.empty_streams < 2).then_some(last);
        if from.is_none() {
            self.empty_streams = 0;
        }
        After::Again { wait, from }
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

#[cfg(test)]
mod after_tests {
    use super::*;

    fn watched(step: Step, last: &str) -> Watch {
        Watch {
            step: Ok(step),
            last: last.into(),
            opened: true,
        }
    }

    /// The step after a stream, without timers or a server: resume from the last version
    /// after a stream with events, relist after two empty ones in a row or a foreign
    /// object (warned about once), end on a verdict or a deletion; the waits are the
    /// re-watch floor's, at least 1 s.
    #[test]
    fn after_resumes_relists_and_ends_as_the_stream_says() {
        let opts = WaitOptions {
            timeout: Duration::from_secs(60),
            not_issued_warning: Duration::from_secs(60),
        };
        let mut retry = Backoff::new(REWATCH_MIN, REWATCH_MAX, 0.2).unwrap();
        let mut states = Vec::new();
        let mut on_pending = |p: Pending| states.push(format!("{p:?}"));
        let mut w = Wait::new("node-csr-a", &opts);
        let mut after =
            |w: &mut Wait, step, last| w.after(watched(step, last), &mut retry, &mut on_pending);

        let again = |a: After| match a {
            After::Again { wait, from } => {
                assert!(wait >= Duration::from_millis(800), "{wait:?}");
                from
            }
            After::Done(r) => panic!("ended: {r:?}"),
        };
        let delivered = Step::Ended { delivered: true };
        assert_eq!(again(after(&mut w, delivered, "7")), Some("7".into()));
        let empty = || Step::Ended { delivered: false };
        assert_eq!(again(after(&mut w, empty(), "8")), Some("8".into()));
        assert_eq!(
            again(after(&mut w, empty(), "8")),
            None,
            "two empty streams: relist"
        );
        assert_eq!(
            again(after(&mut w, empty(), "9")),
            Some("9".into()),
            "the count starts over"
        );

        let foreign = || Step::Foreign {
            other: "node-csr-b".into(),
        };
        assert_eq!(again(after(&mut w, foreign(), "9")), None);
        assert!(w.warned_foreign);
        assert_eq!(again(after(&mut w, foreign(), "9")), None);

        assert!(matches!(
            after(&mut w, Step::Deleted, "9"),
            After::Done(Err(CsrError::Deleted { .. }))
        ));
    }
}
