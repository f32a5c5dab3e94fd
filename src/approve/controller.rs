//! The approver's loop, while this replica leads: list the kubelet-serving CSRs, act on each
//! undecided one, then watch from the list's resourceVersion; resume a dropped watch, relist
//! on 410, and wait a floored, capped, jittered delay before every retry (an API server
//! that is down or refuses every request sees at most one request per delay).
//!
//! Each CSR is acted on once: a decided CSR (Approved, Denied or Failed) is never touched;
//! the decision is written with the resourceVersion it was judged at, so if another writer
//! (a human, a second replica during a hand-over) decided it first the write fails with 409
//! and nothing is written twice; a restart re-lists and finds only the undecided ones.
//!
//! A CSR whose Node does not exist yet stays Pending and is judged again after a floored,
//! doubling, capped delay (1 s … 30 s), [`NODE_MISSING_TRIES`] times; then it is left
//! Pending with a warning (the kubelet registers its Node before it files its serving
//! CSR, so a missing Node is a race or a forgery, and either way a later relist, e.g. a
//! restart, judges it again).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Time, WatchEvent};
use k8s_openapi::List;
use tokio::sync::watch;
use tokio::time::Instant;

use super::policy::{self, Decision, NodeAddrs, Policy, Refusal};
use crate::api::watch::EventStream;
use crate::api::{self, ApiClient};
use crate::identity::csr::CSR_PATH;
use crate::metrics::METRICS;
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;
use crate::runtime::report;
use crate::runtime::text::{clip, one_line};

/// Server-side bound of one watch request.
const WATCH_SECONDS: u64 = 300;
/// A watch silent for longer than its own timeout plus a margin is dead.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_SECONDS + 30);
/// Every retry (list, watch, decision write) waits at least this long, doubling to
/// [`RETRY_MAX`], jittered ±20 %.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// How many times a CSR whose Node is missing is judged before it is left Pending.
pub const NODE_MISSING_TRIES: u32 = 8;
/// The longest server text in one log line.
const MAX_LOGGED: usize = 300;
/// The Approved condition's reason.
pub const APPROVED_REASON: &str = "AutoApproved";

/// What to do with a CSR that fails a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMismatch {
    /// Write a Denied condition naming the rule.
    Deny,
    /// Leave it Pending (a human decides); log and count it.
    Ignore,
}

/// The loop's configuration.
#[derive(Debug, Clone)]
pub struct Controller {
    pub policy: Policy,
    pub on_mismatch: OnMismatch,
    pub identity: String,
}

/// A CSR waiting for its Node.
#[derive(Debug, Clone)]
struct Later {
    tries: u32,
    backoff: Backoff,
    due: Instant,
}

/// What one pass over one CSR did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    Skipped,
    Approved,
    Denied,
    LeftPending,
    NodeMissing,
    /// The write failed in a way a retry may fix; judged again at the next relist.
    Failed,
}

/// `s` made safe for one log line: escaped and bounded.
fn safe(s: &str) -> String {
    clip(&one_line(s), MAX_LOGGED).into_owned()
}

/// What the list-and-watch loop carries from one stream to the next.
struct Progress {
    retry: Backoff,
    /// CSRs whose Node is not there yet, by name: when to judge them again.
    later: BTreeMap<String, Later>,
    /// The uids acted on, so a CSR is decided once.
    done: HashSet<String>,
    /// An outage was said (once).
    outage: bool,
}

fn retry_backoff() -> Backoff {
    Backoff::new(RETRY_MIN, RETRY_MAX, 0.2).expect("constant bounds")
}

impl Controller {
    /// Runs while `leading` says so; stops at once when leadership is lost and starts
    /// again (with a fresh list) when it comes back. Returns when `leading` is closed.
    pub async fn run(
        self,
        clients: watch::Receiver<ApiClient>,
        mut leading: watch::Receiver<bool>,
    ) {
        loop {
            if leading.wait_for(|l| *l).await.is_err() {
                return;
            }
            tokio::select! {
                () = self.serve(&clients) => {}
                r = leading.wait_for(|l| !*l) => {
                    if r.is_err() {
                        return;
                    }
                    tracing::info!("not the leader: stopped acting on CSRs");
                }
            }
        }
    }

    /// List, act, watch, forever.
    pub async fn serve(&self, clients: &watch::Receiver<ApiClient>) {
        let mut p = Progress {
            retry: retry_backoff(),
            later: BTreeMap::new(),
            done: HashSet::new(),
            outage: false,
        };
        let path = format!(
            "{CSR_PATH}?fieldSelector=spec.signerName%3D{}",
            policy::SIGNER
        );
        loop {
            // The newest credential (the service account token is re-read) at every list.
            let client = &clients.borrow().clone();
            let Some(rv) = self.list_all(client, &path, &mut p).await else {
                continue;
            };
            self.watch_from(client, &path, rv, &mut p).await;
            tokio::time::sleep(p.retry.next_delay()).await;
        }
    }

    /// One list, every CSR in it acted on: the resourceVersion to watch from, or `None`
    /// after a failure and its delay.
    async fn list_all(&self, client: &ApiClient, path: &str, p: &mut Progress) -> Option<String> {
        let list: List<CertificateSigningRequest> = match client.get(path).await {
            Ok(list) => list,
            Err(e) => {
                self.failed(&mut p.outage, "list CertificateSigningRequests", &e);
                tokio::time::sleep(p.retry.with_retry_after(e.retry_after())).await;
                return None;
            }
        };
        if std::mem::take(&mut p.outage) {
            tracing::info!("the API server answers again");
        }
        p.retry.reset();
        tracing::debug!(count = list.items.len(), "listed kubelet-serving CSRs");
        for csr in &list.items {
            self.handle(client, csr, &mut p.later, &mut p.done).await;
        }
        Some(list.metadata.resource_version.unwrap_or_default())
    }

    /// Watch from `rv` until a 410 (relist) or an error (relist after a delay); a stream
    /// that ended normally is opened again from the last version after the floor.
    async fn watch_from(&self, client: &ApiClient, path: &str, mut rv: String, p: &mut Progress) {
        loop {
            let watch = format!(
                "{path}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={WATCH_SECONDS}"
            );
            let opened = EventStream::<CertificateSigningRequest>::open(
                client,
                watch,
                Duration::from_secs(WATCH_SECONDS),
                WATCH_IDLE,
            )
            .await;
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) => {
                    if !e.is_gone() {
                        self.failed(&mut p.outage, "watch CertificateSigningRequests", &e);
                    }
                    return;
                }
            };
            if !self.follow(client, &mut stream, &mut rv, p).await {
                return;
            }
            tokio::time::sleep(RETRY_MIN).await;
        }
    }

    /// One watch stream, each event acted on, the CSRs waiting for their Node retried when
    /// due: true when it ended normally, false when a relist is needed.
    async fn follow(
        &self,
        client: &ApiClient,
        stream: &mut EventStream<CertificateSigningRequest>,
        rv: &mut String,
        p: &mut Progress,
    ) -> bool {
        loop {
            let due = later_due(&p.later);
            let event = tokio::select! {
                ev = stream.next() => ev,
                () = sleep_until(due) => {
                    self.retry_missing(client, &mut p.later, &mut p.done).await;
                    continue;
                }
            };
            match event {
                Ok(Some(event)) => {
                    if !self.on_event(client, event, rv, p).await {
                        return false;
                    }
                }
                Ok(None) => return true,
                Err(e) => {
                    if !e.is_gone() {
                        self.failed(&mut p.outage, "watch CertificateSigningRequests", &e);
                    }
                    return false;
                }
            }
        }
    }

    /// One watch event: acted on, forgotten (deleted) or a new version; false for an error
    /// event, which ends the stream.
    async fn on_event(
        &self,
        client: &ApiClient,
        event: WatchEvent<CertificateSigningRequest>,
        rv: &mut String,
        p: &mut Progress,
    ) -> bool {
        match event {
            WatchEvent::Added(csr) | WatchEvent::Modified(csr) => {
                if let Some(v) = &csr.metadata.resource_version {
                    rv.clone_from(v);
                }
                self.handle(client, &csr, &mut p.later, &mut p.done).await;
            }
            WatchEvent::Deleted(csr) => {
                if let Some(v) = &csr.metadata.resource_version {
                    rv.clone_from(v);
                }
                if let Some(name) = &csr.metadata.name {
                    p.later.remove(name);
                }
                if let Some(uid) = &csr.metadata.uid {
                    p.done.remove(uid);
                }
            }
            WatchEvent::Bookmark {
                resource_version, ..
            } => *rv = resource_version,
            WatchEvent::ErrorStatus(_) | WatchEvent::ErrorOther(_) => return false,
        }
        true
    }

    /// Say once per outage that the API server does not answer; a refusal (403) every time.
    fn failed(&self, outage: &mut bool, what: &str, e: &api::Error) {
        if e.is_forbidden() {
            tracing::warn!(error = %safe(&report(e)), "{what}: forbidden; the approver's RBAC (config/approver/rbac.yaml) is missing or changed");
        } else if !std::mem::replace(outage, true) {
            tracing::warn!(error = %safe(&report(e)), "{what} failed; retrying with a floored, capped delay");
        }
    }

    /// Judge one CSR and write the decision, unless it is decided or already done here.
    async fn handle(
        &self,
        client: &ApiClient,
        csr: &CertificateSigningRequest,
        later: &mut BTreeMap<String, Later>,
        done: &mut HashSet<String>,
    ) -> Acted {
        let uid = csr.metadata.uid.clone().unwrap_or_default();
        let name = csr.metadata.name.clone().unwrap_or_default();
        if csr.spec.signer_name != policy::SIGNER || policy::is_decided(csr) || done.contains(&uid)
        {
            return Acted::Skipped;
        }
        let nodes = match list_nodes(client).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(csr = %safe(&name), error = %safe(&report(&e)), "cannot list Nodes; the CSR is judged again later");
                self.defer(later, &name);
                return Acted::Failed;
            }
        };
        let acted = match policy::decide(csr, &nodes, &self.policy) {
            Decision::Ignore => Acted::Skipped,
            Decision::Approve { node } => {
                let message = format!(
                    "bootlet approve ({}): requester system:node:{node} in system:nodes, usages and every SAN match Node {node}",
                    self.identity
                );
                self.write(client, csr, "Approved", APPROVED_REASON, &message)
                    .await
            }
            Decision::Deny(refusal) => self.refuse(client, csr, &refusal).await,
            Decision::NodeMissing { node } => {
                let tries = later.get(&name).map_or(0, |l| l.tries) + 1;
                if tries > NODE_MISSING_TRIES {
                    tracing::warn!(csr = %safe(&name), node = %safe(&node), tries = NODE_MISSING_TRIES, "Node does not exist; CSR left Pending (judged again at the next relist)");
                    later.remove(&name);
                    done.insert(uid.clone());
                    return Acted::LeftPending;
                }
                tracing::info!(csr = %safe(&name), node = %safe(&node), "Node does not exist yet; judging the CSR again later");
                self.defer(later, &name);
                return Acted::NodeMissing;
            }
        };
        if matches!(
            acted,
            Acted::Approved | Acted::Denied | Acted::LeftPending | Acted::Skipped
        ) {
            later.remove(&name);
            done.insert(uid);
        }
        acted
    }

    fn defer(&self, later: &mut BTreeMap<String, Later>, name: &str) {
        let entry = later.entry(name.to_string()).or_insert_with(|| Later {
            tries: 0,
            backoff: retry_backoff(),
            due: Instant::now(),
        });
        entry.tries += 1;
        entry.due = Instant::now() + entry.backoff.next_delay();
    }

    /// Judge again every deferred CSR whose time has come (a fresh GET: it may be decided).
    async fn retry_missing(
        &self,
        client: &ApiClient,
        later: &mut BTreeMap<String, Later>,
        done: &mut HashSet<String>,
    ) {
        let now = Instant::now();
        let due: Vec<String> = later
            .iter()
            .filter(|(_, l)| l.due <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            match client
                .get::<CertificateSigningRequest>(&format!("{CSR_PATH}/{name}"))
                .await
            {
                Ok(csr) => {
                    self.handle(client, &csr, later, done).await;
                }
                Err(e) if e.is_not_found() => {
                    later.remove(&name);
                }
                Err(e) => {
                    tracing::debug!(csr = %safe(&name), error = %safe(&report(&e)), "cannot read the CSR; later");
                    self.defer(later, &name);
                }
            }
        }
    }

    async fn refuse(
        &self,
        client: &ApiClient,
        csr: &CertificateSigningRequest,
        r: &Refusal,
    ) -> Acted {
        let name = csr.metadata.name.as_deref().unwrap_or_default();
        let message = format!("bootlet approve: rule {} failed: {}", r.rule, r.detail);
        match self.on_mismatch {
            OnMismatch::Deny => {
                let acted = self
                    .write(client, csr, "Denied", r.rule.reason(), &message)
                    .await;
                if acted == Acted::Denied {
                    METRICS.approver_denied(r.rule.reason(), latency(csr));
                }
                acted
            }
            OnMismatch::Ignore => {
                tracing::warn!(csr = %safe(name), rule = r.rule.reason(), detail = %r.detail, "CSR fails a rule; left Pending (--on-mismatch ignore)");
                METRICS.approver_ignored(r.rule.reason());
                Acted::LeftPending
            }
        }
    }

    /// PUT the condition to `/approval`, at the resourceVersion the CSR was judged at.
    async fn write(
        &self,
        client: &ApiClient,
        csr: &CertificateSigningRequest,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Acted {
        let name = csr.metadata.name.clone().unwrap_or_default();
        let mut body = csr.clone();
        let status = body.status.get_or_insert_with(Default::default);
        let now = jiff::Timestamp::try_from(clock::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: kind.to_string(),
                status: "True".into(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_update_time: Some(Time(now)),
                last_transition_time: None,
            });
        let path = format!("{CSR_PATH}/{name}/approval");
        match client
            .replace::<_, CertificateSigningRequest>(&path, &body)
            .await
        {
            Ok(_) => {
                let waited = latency(csr);
                let user = csr.spec.username.as_deref().unwrap_or_default();
                if kind == "Approved" {
                    METRICS.approver_approved(waited);
                    tracing::info!(csr = %safe(&name), requester = %safe(user), latency = ?waited, "approved kubelet-serving CSR");
                    Acted::Approved
                } else {
                    tracing::warn!(csr = %safe(&name), requester = %safe(user), rule = reason, message = %message, "denied kubelet-serving CSR");
                    Acted::Denied
                }
            }
            Err(e) if e.is_conflict() || e.is_not_found() => {
                // Someone else decided (or deleted) it first: nothing more to do here.
                tracing::info!(csr = %safe(&name), "the CSR changed before the decision was written; not acting on it twice");
                Acted::Skipped
            }
            Err(e) => {
                tracing::warn!(csr = %safe(&name), error = %safe(&report(&e)), "cannot write the decision; the CSR is judged again at the next relist");
                Acted::Failed
            }
        }
    }
}

fn later_due(later: &BTreeMap<String, Later>) -> Option<Instant> {
    later.values().map(|l| l.due).min()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// CSR creationTimestamp (whole seconds) to now.
fn latency(csr: &CertificateSigningRequest) -> Duration {
    let Some(created) = csr.metadata.creation_timestamp.as_ref() else {
        return Duration::ZERO;
    };
    let now = jiff::Timestamp::try_from(clock::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    now.duration_since(created.0)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

/// Every Node's addresses.
async fn list_nodes(client: &ApiClient) -> Result<Vec<NodeAddrs>, api::Error> {
    let list: List<Node> = client.get("/api/v1/nodes").await?;
    Ok(list.items.iter().map(NodeAddrs::from_node).collect())
}
