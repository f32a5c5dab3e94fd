//! Owns the node Lease `kube-node-lease/NODE`: the body (pure), the renewal loop on a
//! drift-free monotonic schedule whose phase is drawn over the whole interval (so a fleet
//! never renews in lockstep), one PUT per renewal, owner reference once the Node exists, the
//! health-probe gate, and standing aside for good once another writer is seen (a writer
//! that stops is what a dead kubelet looks like), across restarts too: bootlet's renewTimes
//! carry a mark (`writers::ours`). Credentials come in by watch.

use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::conn::Connection;
use crate::api::protobuf::LeaseWire;
use crate::api::{self, ApiClient};
use crate::config::Settings;
use crate::metrics::METRICS;
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;
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
/// 409s caused by someone else's renewal before we stand aside. One: only the kubelet (or a
/// second agent) renews a node's Lease with a renewTime we did not write, and the real
/// kubelet, registered a few seconds after bootlet started, dying before a third such
/// conflict was a dead kubelet hidden for good (tests/kube/join.rs).
const FOREIGN_STREAK: u32 = 1;
/// The heartbeat name the watchdog reports (health.rs `beat`).
pub const TASK: &str = "lease";
/// Slack on top of the sleep before a renewal, for a busy runtime.
const BEAT_SLACK: Duration = Duration::from_secs(1);
/// The watchdog promise for one period's work: the owner lookup (one at most, at the start
/// or after a 404), a GET and two PUT/GET rounds, each bounded by the API client's request
/// timeout. Loose on purpose: the attempt itself is abandoned before the next slot
/// ([`attempt_budget`]).
const ATTEMPT_BOUND: Duration = Duration::from_secs(5 * api::DEFAULT_REQUEST_TIMEOUT.as_secs() + 5);

/// The Lease loop's configuration.
#[derive(Clone, Debug)]
pub struct LeaseLoop {
    pub node: String,
    pub interval: Duration,
    pub duration: Duration,
    pub owner_lookup: Duration,
    pub probe: Option<String>,
    /// The test switches (`test-hooks` feature only, set by `agent::TestHooks`).
    #[cfg(feature = "test-hooks")]
    pub hooks: Hooks,
}

impl From<&Settings> for LeaseLoop {
    fn from(s: &Settings) -> Self {
        let mut lease = Self::new(&s.node_name, s.lease_renew_interval, s.lease_duration);
        lease.owner_lookup = s.lease_owner_lookup_interval;
        lease.probe = s.lease_health_probe.clone();
        lease
    }
}

impl LeaseLoop {
    /// A loop for `node` as shipped: the default owner lookup, no health probe, no test
    /// switch (whichever way the crate is built: the benches use this).
    pub fn new(node: &str, interval: Duration, duration: Duration) -> Self {
        Self {
            node: node.to_string(),
            interval,
            duration,
            owner_lookup: crate::defaults::DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL,
            probe: None,
            #[cfg(feature = "test-hooks")]
            hooks: Hooks::default(),
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

// === impl LeaseLoop ===

impl LeaseLoop {
    fn path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{}",
            self.node
        )
    }

    /// The wire format a new loop starts with: protobuf, as the kubelet sends it.
    #[cfg(not(feature = "test-hooks"))]
    fn first_wire(&self) -> LeaseWire {
        LeaseWire::Protobuf
    }

    /// The wire format a new loop starts with: protobuf unless a test switch says JSON.
    #[cfg(feature = "test-hooks")]
    fn first_wire(&self) -> LeaseWire {
        self.hooks.wire
    }

    /// A connection of the loop's own, for `client`, sending Leases as `wire`.
    fn connection(&self, client: &ApiClient, wire: LeaseWire) -> Connection {
        let conn = Connection::new(client).with_lease_wire(wire);
        #[cfg(feature = "test-hooks")]
        let conn = self.hooks.connection(conn);
        conn
    }

    /// Renew until shutdown, always with the newest client from `clients`: one period
    /// at a time, each ending in `Progress::settle`.
    pub async fn run(
        self,
        mut clients: watch::Receiver<ApiClient>,
        health: Health,
        mut shutdown: Shutdown,
    ) {
        let interval = self.interval;
        let read_every = bystander_reads(interval, self.duration);
        let mut r = Renewer::new(self);
        let start = Instant::now();
        let mut state = Progress::open(&r.cfg, &mut clients, &health);
        let phase: f64 = rand::rng().random();
        let mut ticker = Ticker::new();
        loop {
            let at = due(start, state.n, interval, phase);
            let wait = at.saturating_duration_since(Instant::now());
            health.beat(TASK, wait + BEAT_SLACK + interval / 2);
            tokio::select! {
                () = ticker.sleep_until(at) => {}
                () = shutdown.requested() => return,
            }
            #[cfg(feature = "test-hooks")]
            if r.cfg.hooks.wedged(start) {
                shutdown.requested().await;
                return;
            }
            health.beat(TASK, ATTEMPT_BOUND + interval);
            if clients.has_changed().unwrap_or(false) {
                // What the old connection learned (a server that refused protobuf) stays.
                let wire = state.conn.lease_wire();
                state.conn = r.cfg.connection(&clients.borrow_and_update(), wire);
                tracing::info!(identity = %state.conn.identity(), "lease: switched to the new credentials");
            }
            // The next slot after now: slots missed by a slow renewal are skipped, not burst,
            // and a failed renewal is retried there, on this process's own phase.
            state.n = next_slot(start, Instant::now(), interval, phase);
            if !r.probe_allows(&mut state.probe_ok, &health).await {
                continue;
            }
            // Bounded on the loop's own timerfd (re-armed for the next slot right after), so
            // a renewal arms no timer in the runtime.
            let end = at + attempt_budget(interval, state.conn.request_timeout());
            if !state.may_write(&mut r, &mut ticker, end, &health).await {
                continue;
            }
            let started = Instant::now();
            let wire_before = state.conn.lease_wire();
            let result = tokio::select! {
                result = r.renew_in_period(&mut state.conn, at + interval) => result,
                () = ticker.sleep_until(end) => Err(no_answer(&r.cfg.node, end - at)),
            };
            METRICS.lease_renewal(result.is_ok(), started.elapsed());
            if state.conn.lease_wire() != wire_before {
                // The connection fell back to JSON (it logged why): for good.
                health.update(|s| s.lease.json = true);
            }
            state.settle(&r.cfg, result, &health, read_every);
        }
    }
}

/// A renewal abandoned at the end of its `budget`.
fn no_answer(node: &str, budget: Duration) -> RenewError {
    RenewError::NoAnswer {
        node: node.to_string(),
        within: budget,
    }
}

/// What the Lease loop carries from one period to the next.
struct Progress {
    /// The slot of the next renewal.
    n: u32,
    /// Periods in a row whose renewal failed.
    failed_periods: u32,
    /// The health probe's last answer (`--lease-health-probe`).
    probe_ok: Option<bool>,
    /// Set once another writer has been seen: from then on bootlet only reads the Lease.
    bystander: Option<Bystander>,
    /// A connection of its own ([`Connection`]: HTTP/2 or 1.1, no pool, no timers). Its
    /// renewals are its liveness check: each is bounded by [`attempt_budget`], and an
    /// exchange that does not complete leaves no connection behind, so the next renewal
    /// opens a fresh one at once. Quiet stretches are covered by TCP keepalive in the
    /// kernel.
    conn: Connection,
}

// === impl Progress ===

impl Progress {
    /// The start: JSON once this process has seen the server refuse protobuf, by an
    /// earlier loop too; else the loop's first wire format (protobuf).
    fn open(cfg: &LeaseLoop, clients: &mut watch::Receiver<ApiClient>, health: &Health) -> Self {
        let wire = if health.snapshot().lease.json {
            LeaseWire::Json
        } else {
            cfg.first_wire()
        };
        let conn = cfg.connection(&clients.borrow_and_update(), wire);
        METRICS.lease_protobuf(wire == LeaseWire::Protobuf);
        health.update(|s| s.lease.json = wire == LeaseWire::Json);
        Progress {
            n: 0,
            failed_periods: 0,
            probe_ok: None,
            bystander: None,
            conn,
        }
    }

    /// Whether this period may write the Lease: always, unless another writer was seen;
    /// then only once a read (when one is due) shows it stopped while the health probe
    /// answers, and bootlet takes over.
    async fn may_write(
        &mut self,
        r: &mut Renewer,
        ticker: &mut Ticker,
        end: Instant,
        health: &Health,
    ) -> bool {
        let Some(by) = self.bystander.as_mut() else {
            return true;
        };
        let now = Instant::now();
        if !by.read_due(now) {
            return false;
        }
        let read = tokio::select! {
            read = r.read(&mut self.conn) => read,
            () = ticker.sleep_until(end) => Err(no_answer(&r.cfg.node, end.saturating_duration_since(now))),
        };
        if !r.stand_aside(by, read, &mut self.conn, health) {
            return false;
        }
        self.bystander = None;
        true
    }

    /// The step after one period's renewal (no IO but logs, the health snapshot and
    /// dropping a dead connection): a success clears the failure streak; another writer
    /// makes bootlet a bystander; a failure is logged (an error once it outlasts the lease
    /// duration) and, with no answer at all or a second failed period, drops the
    /// connection, as the kubelet closes its connections after a failed heartbeat.
    fn settle(
        &mut self,
        cfg: &LeaseLoop,
        result: Result<(), RenewError>,
        health: &Health,
        read_every: Duration,
    ) {
        let node = &cfg.node;
        let e = match result {
            Ok(()) => {
                self.failed_periods = 0;
                let now = clock::now();
                health.update(|s| {
                    s.lease.last_renewed = Some(now);
                    s.lease.failing_since = None;
                    s.lease.paused = None;
                });
                tracing::debug!(%node, "lease renewed");
                return;
            }
            Err(RenewError::OtherWriter { .. }) => {
                let resume = match &cfg.probe {
                    Some(url) => format!(" (it takes over only if that writer stops while the health probe {url} answers)"),
                    None => String::new(),
                };
                tracing::warn!(%node, "Lease {NAMESPACE}/{node} is renewed by another writer (the kubelet?): two writers hide a dead kubelet, so bootlet stops renewing it and does not resume on its own{resume}; run bootlet with --renew-lease=false when the kubelet renews its own Lease");
                self.bystander = Some(Bystander::new(Instant::now(), read_every));
                health.update(|s| s.lease.paused = Some(other_writer(OTHER_WRITER)));
                return;
            }
            Err(e) => e,
        };
        self.failed_periods += 1;
        let now = clock::now();
        let mut since = now;
        health.update(|s| since = *s.lease.failing_since.get_or_insert(now));
        let failing = now.duration_since(since).unwrap_or_default();
        if failing > cfg.duration {
            tracing::error!(%node, error = %report(&e), failing_for = ?failing, "Lease renewal has failed for longer than the lease duration: the node controller will mark this node NotReady");
        } else {
            tracing::warn!(%node, error = %report(&e), "Lease renewal failed");
        }
        // Errors the server answered get a second period.
        if e.is_no_answer() || self.failed_periods >= RECONNECT_AFTER {
            self.conn.reset();
        }
    }
}

/// The wait before a quick retry inside the period (pure): the backoff's next delay, never
/// sooner than the server's `Retry-After`; `None` when that does not fit in `remaining`
/// (the time left until the next slot), which ends the period's retries, the next slot
/// trying as usual. `Retry-After` is honoured up to one `interval`: a longer one (up to
/// u64::MAX seconds) says "not this period", and the next slot comes as always, because
/// skipping slots for it would let the Lease expire on the server's word; no deadline is
/// ever computed from it.
fn quick_retry_wait(
    quick: &mut Backoff,
    retry_after: Option<Duration>,
    interval: Duration,
    remaining: Duration,
) -> Option<Duration> {
    let hint = retry_after.map(|d| d.min(interval));
    let wait = quick.with_retry_after(hint).max(hint.unwrap_or_default());
    (wait < remaining).then_some(wait)
}

mod body;
#[cfg(feature = "test-hooks")]
mod hooks;
mod owner;
mod probe;
mod renewer;
mod writers;

pub use body::{body, due, is_marked, next_renew_time, next_slot};
#[cfg(feature = "test-hooks")]
pub use hooks::Hooks;
use renewer::{bystander_reads, other_writer, Renewer, OTHER_WRITER};
use writers::Bystander;

#[cfg(test)]
mod tests;
