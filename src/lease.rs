//! Owns the node Lease `kube-node-lease/NODE`: the body (pure), the renewal loop on a
//! drift-free monotonic schedule whose phase is drawn over the whole interval (so a fleet
//! never renews in lockstep), one PUT per renewal, owner reference once the Node exists, the
//! health-probe gate and the two-writer back-off. Credentials come in by watch.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::conn::Connection;
use crate::api::{self, ApiClient};
use crate::config::Settings;
use crate::metrics::METRICS;
use crate::runtime::backoff::Backoff;
use crate::runtime::health::Health;
use crate::runtime::report;
use crate::runtime::shutdown::Shutdown;
use crate::runtime::ticker::Ticker;

pub const NAMESPACE: &str = "kube-node-lease";
/// Quick retries inside one period for errors the server answered (5xx, 429), as the
/// kubelet does. No answer at all (refused, reset, timed out) waits for the next slot.
const RETRIES_PER_PERIOD: u32 = 5;
/// Failed periods in a row after which the connection pool is rebuilt.
const RECONNECT_AFTER: u32 = 2;
/// A renewal is abandoned this long before the next slot at the latest (5 % of the
/// interval, at most 500 ms), so a renewal that gets no answer never costs the next one.
const ABANDON_BEFORE_NEXT: Duration = Duration::from_millis(500);
/// 409s caused by someone else's renewal before we call it a write war.
const FOREIGN_STREAK: u32 = 3;
/// Unconfirmed writes remembered between two confirmed ones (a few periods' worth).
const MAX_UNCONFIRMED: usize = 4 * RETRIES_PER_PERIOD as usize;
/// Longest pause between write attempts while another writer owns the Lease.
const MAX_WAR_BACKOFF: Duration = Duration::from_secs(300);
/// The heartbeat name the watchdog reports (health.rs `beat`).
pub const TASK: &str = "lease";
/// Slack on top of the sleep before a renewal, for a busy runtime.
const BEAT_SLACK: Duration = Duration::from_secs(1);
/// The watchdog promise for one period's work: the owner lookup, a GET and two PUT/GET
/// rounds, each bounded by the API client's request timeout. Loose on purpose: the attempt
/// itself is abandoned before the next slot ([`attempt_budget`]).
const ATTEMPT_BOUND: Duration = Duration::from_secs(5 * api::DEFAULT_REQUEST_TIMEOUT.as_secs() + 5);

/// The Lease loop's configuration.
#[derive(Clone, Debug)]
pub struct LeaseLoop {
    pub node: String,
    pub interval: Duration,
    pub duration: Duration,
    pub owner_lookup: Duration,
    pub probe: Option<String>,
    /// Test-only (`--test-wedge-lease-after`, set by the agent from `TestHooks`, never from
    /// `Settings`): stop making progress after this long, to prove the watchdog restarts a
    /// wedged agent.
    pub wedge_after: Option<Duration>,
}

impl From<&Settings> for LeaseLoop {
    fn from(s: &Settings) -> Self {
        Self {
            node: s.node_name.clone(),
            interval: s.lease_renew_interval,
            duration: s.lease_duration,
            owner_lookup: s.lease_owner_lookup_interval,
            probe: s.lease_health_probe.clone(),
            wedge_after: None,
        }
    }
}

/// Why one renewal failed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("renewing Lease {NAMESPACE}/{node}")]
    Api {
        node: String,
        #[source]
        source: api::Error,
    },
    #[error("Lease {NAMESPACE}/{node}: still conflicting after a re-read")]
    Conflict { node: String },
    #[error("Lease {NAMESPACE}/{node} is being renewed by another writer")]
    OtherWriter { node: String },
    #[error("renewing Lease {NAMESPACE}/{node}: no answer within {within:?}; abandoned before the next renewal is due")]
    NoAnswer { node: String, within: Duration },
}

// === impl RenewError ===

impl RenewError {
    /// The exchange got no answer at all (abandoned, timed out, reset): what a dead
    /// connection looks like, as opposed to an error the server sent.
    fn is_no_answer(&self) -> bool {
        match self {
            RenewError::NoAnswer { .. } => true,
            RenewError::Api { source, .. } => source.is_transport(),
            _ => false,
        }
    }
}

/// How long one period's renewal may take: until just before the next slot, and never
/// longer than the API client's request timeout (10 s), which no request may outlive.
fn attempt_budget(interval: Duration, request_timeout: Duration) -> Duration {
    (interval - (interval / 20).min(ABANDON_BEFORE_NEXT)).min(request_timeout)
}

/// Whether a failed attempt is worth a quick retry inside its period: only an answer the
/// server gave (5xx, 429, honouring `Retry-After`). No answer at all (connection refused,
/// reset, timed out) is what an outage looks like: the next attempt is this process's next
/// slot. Quick retries there would pile every node whose slot fell in the last second of an
/// outage onto the first second after it, and a dead connection's replacement is opened at
/// that next slot anyway.
fn retry_in_period(e: &api::Error) -> bool {
    e.is_retryable() && !e.is_transport()
}

/// Mutable state of the loop between renewals.
struct Renewer {
    cfg: LeaseLoop,
    cached: Option<Lease>,
    last_renew: Option<jiff::Timestamp>,
    owner: Option<OwnerReference>,
    next_owner_lookup: Instant,
    foreign: u32,
    /// renewTimes of writes the server may have applied without our seeing its answer (an
    /// exchange abandoned, cut, or answered with garbage), since the last confirmed one:
    /// finding one of them in the Lease is our own write, not another writer's.
    unconfirmed: Vec<jiff::Timestamp>,
}

// === impl LeaseLoop ===

impl LeaseLoop {
    fn path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{}",
            self.node
        )
    }

    /// Renew until shutdown, always with the newest client from `clients`.
    pub async fn run(
        self,
        mut clients: watch::Receiver<ApiClient>,
        health: Health,
        mut shutdown: Shutdown,
    ) {
        let interval = self.interval;
        let mut r = Renewer {
            cfg: self,
            cached: None,
            last_renew: None,
            owner: None,
            next_owner_lookup: Instant::now(),
            foreign: 0,
            unconfirmed: Vec::new(),
        };
        let start = Instant::now();
        let mut n: u32 = 0;
        let mut failed_periods = 0u32;
        let mut probe_ok: Option<bool> = None;
        let mut war = Backoff::new(interval, MAX_WAR_BACKOFF.max(interval), 0.2)
            .expect("interval is positive and below the cap");
        let mut war_until: Option<Instant> = None;
        // A connection of its own ([`Connection`]: HTTP/1.1, no pool, no timers). Its renewals
        // are its liveness check: each is bounded by [`attempt_budget`], and an exchange
        // that does not complete leaves no connection behind, so the next renewal opens a
        // fresh one at once. Quiet stretches are covered by TCP keepalive in the kernel.
        let mut conn = Connection::new(&clients.borrow_and_update());
        let phase: f64 = rand::rng().random();
        let mut ticker = Ticker::new();
        loop {
            let at = due(start, n, interval, phase);
            let wait = at.saturating_duration_since(Instant::now());
            health.beat(TASK, wait + BEAT_SLACK + interval / 2);
            tokio::select! {
                () = ticker.sleep_until(at) => {}
                () = shutdown.requested() => return,
            }
            if r.cfg.wedge_after.is_some_and(|d| start.elapsed() >= d) {
                tracing::warn!(
                    "lease: --test-wedge-lease-after reached; the loop stops making progress"
                );
                shutdown.requested().await;
                return;
            }
            health.beat(TASK, ATTEMPT_BOUND + interval);
            if clients.has_changed().unwrap_or(false) {
                conn = Connection::new(&clients.borrow_and_update());
                tracing::info!(identity = %conn.identity(), "lease: switched to the new credentials");
            }
            // The next slot after now: slots missed by a slow renewal are skipped, not burst,
            // and a failed renewal is retried there, on this process's own phase.
            n = next_slot(start, Instant::now(), interval, phase);

            if !r.probe_allows(&mut probe_ok, &health).await {
                continue;
            }
            if war_until.is_some_and(|until| Instant::now() < until) {
                continue;
            }
            // Bounded on the loop's own timerfd (re-armed for the next slot right after), so
            // a renewal arms no timer in the runtime.
            let budget = attempt_budget(interval, conn.request_timeout());
            let started = Instant::now();
            let result = tokio::select! {
                result = r.renew_in_period(&mut conn, at + interval) => result,
                () = ticker.sleep_until(at + budget) => Err(RenewError::NoAnswer {
                    node: r.cfg.node.clone(),
                    within: budget,
                }),
            };
            METRICS.lease_renewal(result.is_ok(), started.elapsed());
            match result {
                Ok(()) => {
                    if war_until.take().is_some() {
                        tracing::info!(node = %r.cfg.node, "lease: the other writer stopped; renewing again");
                        war.reset();
                    }
                    failed_periods = 0;
                    let now = SystemTime::now();
                    health.update(|s| {
                        s.lease.last_renewed = Some(now);
                        s.lease.failing_since = None;
                        s.lease.paused = None;
                    });
                    tracing::debug!(node = %r.cfg.node, "lease renewed");
                }
                Err(RenewError::OtherWriter { .. }) => {
                    let wait = war.next_delay();
                    if war_until.is_none() {
                        tracing::warn!(node = %r.cfg.node, "Lease {NAMESPACE}/{} is renewed by another writer (the kubelet?): two writers hide a dead kubelet; run bootlet with --renew-lease=false (or --lease-health-probe) when the kubelet renews its own Lease. Backing off.", r.cfg.node);
                    }
                    war_until = Some(Instant::now() + wait);
                    health.update(|s| {
                        s.lease.paused =
                            Some("another writer renews the Lease (use --renew-lease=false)".into())
                    });
                }
                Err(e) => {
                    failed_periods += 1;
                    let now = SystemTime::now();
                    let mut since = now;
                    health.update(|s| since = *s.lease.failing_since.get_or_insert(now));
                    let failing = now.duration_since(since).unwrap_or_default();
                    if failing > r.cfg.duration {
                        tracing::error!(node = %r.cfg.node, error = %report(&e), failing_for = ?failing, "Lease renewal has failed for longer than the lease duration: the node controller will mark this node NotReady");
                    } else {
                        tracing::warn!(node = %r.cfg.node, error = %report(&e), "Lease renewal failed");
                    }
                    // No answer at all (a timeout, a reset) is what a dead connection
                    // looks like: drop it now, as the kubelet closes its connections after
                    // a failed heartbeat. Errors the server answered get a second period.
                    if e.is_no_answer() || failed_periods >= RECONNECT_AFTER {
                        conn.reset();
                    }
                }
            }
        }
    }
}

// === impl Renewer ===

impl Renewer {
    /// Whether the health probe (if any) allows renewing this period; logs transitions.
    async fn probe_allows(&mut self, last: &mut Option<bool>, health: &Health) -> bool {
        let Some(url) = self.cfg.probe.as_ref() else {
            return true;
        };
        let ok = probe(url).await;
        if *last != Some(ok) {
            if ok {
                tracing::info!(probe = %url, "lease health probe answers; renewing the Lease");
            } else {
                tracing::warn!(probe = %url, "lease health probe fails; not renewing the Lease so the node shows NotReady");
            }
            *last = Some(ok);
        }
        if !ok {
            health.update(|s| s.lease.paused = Some(format!("health probe {url} fails")));
        }
        ok
    }

    /// One renewal with quick retries, all before `deadline` (the next period).
    async fn renew_in_period(
        &mut self,
        conn: &mut Connection,
        deadline: Instant,
    ) -> Result<(), RenewError> {
        // Retries stay well inside one period: from interval/20 (at most 100 ms) up to interval/4.
        let min =
            (self.cfg.interval / 20).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let mut quick = Backoff::new(min, (self.cfg.interval / 4).max(min), 0.2)
            .expect("bounds derived from a positive interval");
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.renew(conn).await {
                Ok(()) => return Ok(()),
                Err(RenewError::Api { source, node })
                    if retry_in_period(&source) && attempt < RETRIES_PER_PERIOD =>
                {
                    // Never sooner than the server's Retry-After; one that does not fit
                    // before the next slot ends this period's retries.
                    let wait = quick
                        .with_retry_after(source.retry_after())
                        .max(source.retry_after().unwrap_or_default());
                    if Instant::now() + wait >= deadline {
                        return Err(RenewError::Api { node, source });
                    }
                    tracing::debug!(error = %report(&source), retry_in = ?wait, "lease: retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One renewal: PUT the cached Lease; create on 404; re-read and retry once on 409.
    async fn renew(&mut self, conn: &mut Connection) -> Result<(), RenewError> {
        self.lookup_owner(conn).await;
        let path = self.cfg.path();
        let api = |source| RenewError::Api {
            node: self.cfg.node.clone(),
            source,
        };
        if self.cached.is_none() {
            match conn.get::<Lease>(&path).await {
                Ok(lease) => self.cached = Some(lease),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(api(e)),
            }
        }
        // Someone else renewed since our last write: counted once per renewal, and not
        // forgotten when our retry then wins (a writer at a faster cadence makes every
        // first PUT conflict and every second one succeed: still a write war).
        let mut saw_foreign = false;
        for _ in 0..2 {
            let renew = next_renew_time(SystemTime::now(), self.last_renew);
            let want = body(
                self.cached.as_ref(),
                &self.cfg.node,
                self.cfg.duration,
                renew,
                self.owner.as_ref(),
            );
            // Unconfirmed until the server answers: an exchange that is abandoned, cut or
            // answered with garbage may still have been applied.
            if self.unconfirmed.len() >= MAX_UNCONFIRMED {
                self.unconfirmed.remove(0);
            }
            self.unconfirmed.push(renew);
            let result = match &self.cached {
                Some(_) => conn.replace::<_, Lease>(&path, &want).await,
                None => {
                    let list =
                        format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
                    conn.create::<_, Lease>(&list, &want).await
                }
            };
            let refused = result.as_ref().err().and_then(api::Error::code);
            if refused.is_some_and(|c| (400..500).contains(&c)) {
                // A 4xx (a stale version, no Lease, throttled) was not applied.
                self.unconfirmed.pop();
            }
            match result {
                Ok(written) => {
                    self.cached = Some(written);
                    self.last_renew = Some(renew);
                    self.unconfirmed.clear();
                    if !saw_foreign {
                        self.foreign = 0;
                    }
                    return Ok(());
                }
                Err(e) if e.is_not_found() => self.cached = None,
                Err(e) if e.code() == Some(409) => {
                    let current: Lease = conn.get(&path).await.map_err(api)?;
                    if !saw_foreign && self.renewed_by_someone_else(&current) {
                        saw_foreign = true;
                        self.foreign += 1;
                        if self.foreign >= FOREIGN_STREAK {
                            self.cached = Some(current);
                            return Err(RenewError::OtherWriter {
                                node: self.cfg.node.clone(),
                            });
                        }
                    }
                    self.cached = Some(current);
                }
                Err(e) => return Err(api(e)),
            }
        }
        Err(RenewError::Conflict {
            node: self.cfg.node.clone(),
        })
    }

    /// The Lease moved since our last write and not by our hand.
    fn renewed_by_someone_else(&self, current: &Lease) -> bool {
        let theirs = current
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0);
        matches!((theirs, self.last_renew), (Some(theirs), Some(ours))
            if theirs != ours && !self.unconfirmed.contains(&theirs))
    }

    /// Look the Node up now and then (never on every renewal) until it exists.
    async fn lookup_owner(&mut self, conn: &mut Connection) {
        if self.owner.is_some() || Instant::now() < self.next_owner_lookup {
            return;
        }
        self.next_owner_lookup = Instant::now() + self.cfg.owner_lookup;
        match conn
            .get::<Node>(&format!("/api/v1/nodes/{}", self.cfg.node))
            .await
        {
            Ok(node) => {
                if let Some(uid) = node.metadata.uid {
                    tracing::info!(node = %self.cfg.node, %uid, "Node exists; the Lease gets its owner reference");
                    self.owner = Some(OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.cfg.node.clone(),
                        uid,
                        ..OwnerReference::default()
                    });
                }
            }
            Err(e) if e.is_not_found() => {
                tracing::debug!(node = %self.cfg.node, "Node not registered yet")
            }
            Err(e) => tracing::debug!(error = %report(&e), "Node lookup failed"),
        }
    }
}

mod body;
mod probe;

pub use body::{body, due, next_renew_time, next_slot};
use probe::probe;

#[cfg(test)]
mod tests;
