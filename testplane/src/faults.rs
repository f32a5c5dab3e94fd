//! Scripted faults (outage, 500s and 429s once or persistent, delay, skewed Date, one-off
//! Lease conflict, writes applied and then left unanswered, dropped or reset watches, a listener that accepts and never answers or
//! stalls the TLS handshake, rewritten answers, token expiry/deletion), driven from Rust
//! (`Faults`) or from the admin-only `POST /testplane/faults` (`FaultRequest`). Also the
//! bootstrap-token Secret helpers (`tokens`). The rewriting of answers is `answers`'.

mod answers;
mod tokens;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::types::Command;
use crate::{Error, Shared};

pub use answers::{Answer, AnswerRule};
pub use tokens::{
    add_static_token, create_token, delete_token, expire_token, random_token, token_secret,
};

/// What the listener does with a connection it accepts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AcceptMode {
    /// TLS, HTTP, the API.
    #[default]
    Serve,
    /// Accept TCP and never send a byte (what the client sends is read and dropped), until
    /// the client gives up or the connection is dropped: a hung server process.
    Silent,
    /// Read the ClientHello, send the first record of the server's flight (the ServerHello)
    /// and then nothing: a handshake that stalls half-way.
    StallHandshake,
    /// TLS offering only `http/1.1` by ALPN, then the API as usual: a TLS-terminating load
    /// balancer or proxy that speaks no HTTP/2.
    Http1Only,
}

#[derive(Default, Debug, Clone)]
struct Inner {
    fail_next: u32,
    fail_status: u16,
    /// Every API request fails with this status until turned off (a 5xx storm).
    fail_always: Option<u16>,
    throttle_next: u32,
    retry_after: u64,
    /// Every API request gets 429 with this `Retry-After` (seconds) until turned off.
    throttle_always: Option<u64>,
    delay: Duration,
    skew_secs: i64,
    lease_conflict_once: bool,
    watch_drop_after: Option<usize>,
    close_watches: bool,
    watch_ignores_selectors: bool,
    /// Reset (TCP RST) every connection this long after it starts answering a watch.
    reset_watches_after: Option<Duration>,
    accept_mode: AcceptMode,
    answers: Vec<AnswerRule>,
    /// API paths answered 404, as by a server that does not serve them.
    unserved: Vec<String>,
    /// Every protobuf request body gets 415 (a server without protobuf for the type).
    refuse_protobuf: bool,
    /// The next this many API requests reset their connection unanswered and unapplied.
    reset_next: u32,
    /// The next this many API writes are applied, then reset their connection unanswered.
    apply_then_reset_next: u32,
}

/// The live fault switches, read by every request.
#[derive(Default)]
pub struct FaultState {
    inner: Mutex<Inner>,
    cmds: Mutex<Option<mpsc::Sender<Command>>>,
}

/// An injected failure for one request.
pub enum Injected {
    Fail(u16),
    Throttle(u64),
}

// === impl FaultState ===

impl FaultState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_commands(&self, tx: mpsc::Sender<Command>) {
        *self.cmds.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    pub fn delay(&self) -> Duration {
        self.lock().delay
    }

    pub fn skew_secs(&self) -> i64 {
        self.lock().skew_secs
    }

    /// Consume one scripted 500 or 429, if any is pending, or the persistent one.
    pub fn take_injected(&self) -> Option<Injected> {
        let mut g = self.lock();
        if g.fail_next > 0 {
            g.fail_next -= 1;
            return Some(Injected::Fail(g.fail_status));
        }
        if let Some(status) = g.fail_always {
            return Some(Injected::Fail(status));
        }
        if g.throttle_next > 0 {
            g.throttle_next -= 1;
            return Some(Injected::Throttle(g.retry_after));
        }
        g.throttle_always.map(Injected::Throttle)
    }

    pub fn accept_mode(&self) -> AcceptMode {
        self.lock().accept_mode
    }

    /// Consume one scripted connection reset, if any is pending.
    pub fn take_reset(&self) -> bool {
        let mut g = self.lock();
        let hit = g.reset_next > 0;
        g.reset_next = g.reset_next.saturating_sub(1);
        hit
    }

    /// Consume one scripted "applied, then reset unanswered", if any is pending and
    /// `method` writes (POST, PUT, PATCH, DELETE).
    pub fn take_apply_then_reset(&self, method: &str) -> bool {
        if !matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
            return false;
        }
        let mut g = self.lock();
        let hit = g.apply_then_reset_next > 0;
        g.apply_then_reset_next = g.apply_then_reset_next.saturating_sub(1);
        hit
    }

    pub fn reset_watches_after(&self) -> Option<Duration> {
        self.lock().reset_watches_after
    }

    /// The rewriting rule for this answer, if one applies (the first that matches).
    pub fn answer_for(&self, method: &str, path: &str, watch: bool) -> Option<Answer> {
        self.lock()
            .answers
            .iter()
            .find(|r| r.matches(method, path, watch))
            .map(|r| r.answer.clone())
    }

    /// Whether `path` is one the server pretends not to serve ([`Faults::unserve`]).
    pub fn unserves(&self, path: &str) -> bool {
        self.lock().unserved.iter().any(|p| p == path)
    }

    pub fn refuses_protobuf(&self) -> bool {
        self.lock().refuse_protobuf
    }

    pub fn take_lease_conflict(&self) -> bool {
        std::mem::take(&mut self.lock().lease_conflict_once)
    }

    /// The event budget of the next watch, consumed (zero for every watch while
    /// `close_watches` is on).
    pub fn take_watch_drop(&self) -> Option<usize> {
        let mut g = self.lock();
        if g.close_watches {
            return Some(0);
        }
        g.watch_drop_after.take()
    }

    pub fn watch_ignores_selectors(&self) -> bool {
        self.lock().watch_ignores_selectors
    }
}

/// Fault switches, as one JSON object for `POST /testplane/faults` (all fields optional,
/// camelCase): `{"outageSeconds": 2}`, `{"failNext": 3, "failStatus": 500}`,
/// `{"resetNext": 1}`, `{"applyThenResetNext": 1}`, `{"goAway": true}`, `{"failAlways": 503}` (`0` turns it off),
/// `{"throttleNext": 2, "retryAfterSeconds": 1}`,
/// `{"throttleAlways": true, "retryAfterSeconds": 5}`, `{"delayMs": 200}`,
/// `{"skewDateSeconds": 3600}`, `{"leaseConflictOnce": true}`, `{"refuseProtobuf": true}`, `{"watchDropAfter": 1}`,
/// `{"closeWatches": true}`, `{"resetWatchesAfterMs": 100}` (`0` turns it off),
/// `{"acceptMode": "silent"}` (`serve`, `silent`, `stallHandshake`, `http1Only`; open
/// connections are dropped), `{"expireToken": "abcdef"}`, `{"deleteToken": "abcdef"}`, `{"compact": true}`,
/// `{"clear": true}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    pub clear: Option<bool>,
    pub outage_seconds: Option<f64>,
    pub fail_next: Option<u32>,
    pub reset_next: Option<u32>,
    pub apply_then_reset_next: Option<u32>,
    pub go_away: Option<bool>,
    pub fail_status: Option<u16>,
    pub fail_always: Option<u16>,
    pub throttle_next: Option<u32>,
    pub throttle_always: Option<bool>,
    pub retry_after_seconds: Option<u64>,
    pub delay_ms: Option<u64>,
    pub skew_date_seconds: Option<i64>,
    pub lease_conflict_once: Option<bool>,
    pub refuse_protobuf: Option<bool>,
    pub watch_drop_after: Option<usize>,
    pub close_watches: Option<bool>,
    pub reset_watches_after_ms: Option<u64>,
    pub accept_mode: Option<AcceptMode>,
    pub expire_token: Option<String>,
    pub delete_token: Option<String>,
    pub compact: Option<bool>,
}

/// Handle for scripting faults from a test.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

// === impl Faults ===

impl Faults {
    pub(crate) fn new(shared: Arc<Shared>) -> Faults {
        Faults { shared }
    }

    fn with(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.shared.faults.lock());
    }

    /// Send a command to the accept loop and wait for its ack.
    async fn command(&self, cmd: impl FnOnce(oneshot::Sender<()>) -> Command) {
        let tx = self
            .shared
            .faults
            .cmds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(tx) = tx {
            let (ack, done) = oneshot::channel();
            if tx.send(cmd(ack)).await.is_ok() {
                let _ = done.await;
            }
        }
    }

    /// Stop accepting and drop every open connection; returns once that is done. The
    /// listener comes back on the same port after `dur` (`Event::OutageEnded`).
    pub async fn outage(&self, dur: Duration) {
        self.command(|ack| Command::Outage(dur, ack)).await;
    }

    /// Drop every open connection (the listener stays), e.g. so that clients reconnect
    /// into a new [`AcceptMode`]; returns once that is done.
    pub async fn drop_connections(&self) {
        self.command(Command::DropConnections).await;
    }

    /// Close every open connection gracefully, as a server shutting down or balancing
    /// its clients does (kube-apiserver's `--goaway-chance`): HTTP/2 connections get a
    /// GOAWAY and close once their streams are answered, HTTP/1.1 ones close when idle.
    /// The listener stays. Returns once the GOAWAYs are on their way.
    pub async fn go_away(&self) {
        self.command(Command::GoAway).await;
    }

    /// How new connections are treated from now on; every open connection is dropped
    /// first, so clients meet the new mode when they reconnect. Connections held by
    /// `Silent` or `StallHandshake` stay held after the mode changes back (they are dead
    /// to their clients, as with a real hung server) until the client gives up.
    pub async fn set_accept_mode(&self, mode: AcceptMode) {
        self.with(|i| i.accept_mode = mode);
        self.drop_connections().await;
    }

    /// The next `n` API requests reset their connection (TCP RST) before the server
    /// reads them: unanswered and unapplied, as when a connection dies while a request
    /// is on its way. Not in the request log.
    pub fn reset_next(&self, n: u32) {
        self.with(|i| i.reset_next = n);
    }

    /// The next `n` API writes (POST, PUT, PATCH, DELETE) are applied as usual (stored,
    /// logged, their events sent) and then reset their connection (TCP RST) instead of
    /// answering: an API server killed between the etcd commit and the answer, a VIP
    /// failover or a middlebox RST. Reads pass untouched.
    pub fn apply_then_reset_next(&self, n: u32) {
        self.with(|i| i.apply_then_reset_next = n);
    }

    /// The next `n` requests get `status` (e.g. 500) with an InternalError Status.
    pub fn fail_next(&self, n: u32, status: u16) {
        self.with(|i| {
            i.fail_next = n;
            i.fail_status = status;
        });
    }

    /// Every API request (not the admin path) gets `status` (e.g. 500) with an
    /// InternalError Status while this is `Some`: a persistent 5xx storm.
    pub fn fail_always(&self, status: Option<u16>) {
        self.with(|i| i.fail_always = status);
    }

    /// The next `n` requests get 429 TooManyRequests with `Retry-After` (whole seconds).
    pub fn throttle_next(&self, n: u32, retry_after: Duration) {
        self.with(|i| {
            i.throttle_next = n;
            i.retry_after = retry_after.as_secs().max(1);
        });
    }

    /// Every API request gets 429 TooManyRequests with `Retry-After` (whole seconds, at
    /// least 1) while this is `Some`: a server shedding load.
    pub fn throttle_always(&self, retry_after: Option<Duration>) {
        self.with(|i| i.throttle_always = retry_after.map(|d| d.as_secs().max(1)));
    }

    /// Every request waits `d` before it is handled (zero turns it off).
    pub fn delay(&self, d: Duration) {
        self.with(|i| i.delay = d);
    }

    /// Every `Date` header is off by `secs` (positive: server clock ahead).
    pub fn skew_date(&self, secs: i64) {
        self.with(|i| i.skew_secs = secs);
    }

    /// The next Lease update gets 409 Conflict even with a fresh resourceVersion.
    pub fn lease_conflict_once(&self) {
        self.with(|i| i.lease_conflict_once = true);
    }

    /// While on, every request with a protobuf body (a Lease PUT or POST from the kubelet
    /// or bootlet) gets 415 UnsupportedMediaType, as from a server that has no protobuf for
    /// the type; JSON is served as usual.
    pub fn refuse_protobuf(&self, on: bool) {
        self.with(|i| i.refuse_protobuf = on);
    }

    /// The next watch closes its stream after sending `n` events.
    pub fn watch_drop_after(&self, n: usize) {
        self.with(|i| i.watch_drop_after = Some(n));
    }

    /// While on, every watch ends as soon as it opens, before any event (a proxy that
    /// cuts long requests).
    pub fn close_watches(&self, on: bool) {
        self.with(|i| i.close_watches = on);
    }

    /// While on, watches send every object of their kind, whatever their field selector
    /// asked for (a server or proxy that drops the selector).
    pub fn watch_ignores_selectors(&self, on: bool) {
        self.with(|i| i.watch_ignores_selectors = on);
    }

    /// While `Some(after)`, a connection that answers a watch is reset (TCP RST, no HTTP or
    /// TLS goodbye) `after` it sent the watch's response head, with every other stream it
    /// carries (`Event::WatchDropped`): a load balancer or a crashing server in the middle
    /// of a watch.
    pub fn reset_watches_after(&self, after: Option<Duration>) {
        self.with(|i| i.reset_watches_after = after);
    }

    /// Rewrite the answers `rule` matches (its body only; status and the request's effect
    /// stay), until `clear_answers` or `clear`. The first matching rule wins.
    pub fn answer(&self, rule: AnswerRule) {
        self.with(|i| i.answers.push(rule));
    }

    /// Stop rewriting answers.
    pub fn clear_answers(&self) {
        self.with(|i| i.answers.clear());
    }

    /// Answer `path` (exactly, without the query) with 404 NotFound after authentication
    /// and authorization, as a server that does not serve it: an API group version from a
    /// later release (a server before 1.28 has no SelfSubjectReview) or one turned off by
    /// `--runtime-config`. Until `clear`.
    pub fn unserve(&self, path: &str) {
        self.with(|i| i.unserved.push(path.to_string()));
    }

    pub fn expire_token(&self, id: &str) -> Result<(), Error> {
        expire_token(&self.shared.store, id)
    }

    pub fn delete_token(&self, id: &str) -> Result<(), Error> {
        delete_token(&self.shared.store, id)
    }

    /// Turn every switch off (connections already held by an [`AcceptMode`] stay held).
    pub fn clear(&self) {
        self.with(|i| *i = Inner::default());
    }

    /// Apply a JSON fault request (the admin HTTP path uses this).
    pub async fn apply(&self, r: FaultRequest) -> Result<(), Error> {
        if r.clear == Some(true) {
            self.clear();
        }
        if let Some(n) = r.fail_next {
            self.fail_next(n, r.fail_status.unwrap_or(500));
        }
        if let Some(n) = r.reset_next {
            self.reset_next(n);
        }
        if let Some(n) = r.apply_then_reset_next {
            self.apply_then_reset_next(n);
        }
        if r.go_away == Some(true) {
            // Answer the request first: the GOAWAY closes this connection too.
            let me = self.clone();
            tokio::spawn(async move { me.go_away().await });
        }
        if let Some(status) = r.fail_always {
            self.fail_always((status != 0).then_some(status));
        }
        let retry_after = Duration::from_secs(r.retry_after_seconds.unwrap_or(1));
        if let Some(n) = r.throttle_next {
            self.throttle_next(n, retry_after);
        }
        if let Some(on) = r.throttle_always {
            self.throttle_always(on.then_some(retry_after));
        }
        if let Some(ms) = r.delay_ms {
            self.delay(Duration::from_millis(ms));
        }
        if let Some(s) = r.skew_date_seconds {
            self.skew_date(s);
        }
        if r.lease_conflict_once == Some(true) {
            self.lease_conflict_once();
        }
        if let Some(on) = r.refuse_protobuf {
            self.refuse_protobuf(on);
        }
        if let Some(n) = r.watch_drop_after {
            self.watch_drop_after(n);
        }
        if let Some(on) = r.close_watches {
            self.close_watches(on);
        }
        if let Some(ms) = r.reset_watches_after_ms {
            self.reset_watches_after((ms != 0).then(|| Duration::from_millis(ms)));
        }
        if let Some(mode) = r.accept_mode {
            // Answer the request first: the mode change drops this connection too.
            self.with(|i| i.accept_mode = mode);
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                me.drop_connections().await;
            });
        }
        if let Some(id) = &r.expire_token {
            self.expire_token(id)?;
        }
        if let Some(id) = &r.delete_token {
            self.delete_token(id)?;
        }
        if r.compact == Some(true) {
            self.shared.store.compact();
        }
        if let Some(s) = r.outage_seconds {
            // Answer the request first; the outage then drops this connection too.
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                me.outage(Duration::from_secs_f64(s.max(0.0))).await;
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_request_names_every_switch() {
        let r: FaultRequest = serde_json::from_str(
            r#"{"failAlways": 503, "throttleAlways": true, "retryAfterSeconds": 5,
                "closeWatches": true, "resetWatchesAfterMs": 100, "acceptMode": "http1Only",
                "resetNext": 2, "applyThenResetNext": 1, "goAway": true}"#,
        )
        .unwrap();
        assert_eq!(r.fail_always, Some(503));
        assert_eq!(r.throttle_always, Some(true));
        assert_eq!(r.accept_mode, Some(AcceptMode::Http1Only));
        assert_eq!(r.reset_watches_after_ms, Some(100));
        assert_eq!((r.reset_next, r.go_away), (Some(2), Some(true)));
        assert_eq!(r.apply_then_reset_next, Some(1));
        assert!(serde_json::from_str::<FaultRequest>(r#"{"acceptMode": "hang"}"#).is_err());
    }

    #[test]
    fn apply_then_reset_takes_writes_only_and_counts_down() {
        let state = FaultState::default();
        state.lock().apply_then_reset_next = 2;
        assert!(!state.take_apply_then_reset("GET"));
        assert!(state.take_apply_then_reset("PUT"));
        assert!(state.take_apply_then_reset("POST"));
        assert!(!state.take_apply_then_reset("PUT"));
    }

    #[test]
    fn persistent_failures_outlast_the_counted_ones_and_stop_when_turned_off() {
        let state = FaultState::default();
        {
            let mut g = state.lock();
            g.fail_next = 1;
            g.fail_status = 500;
            g.fail_always = Some(503);
        }
        assert!(matches!(state.take_injected(), Some(Injected::Fail(500))));
        for _ in 0..3 {
            assert!(matches!(state.take_injected(), Some(Injected::Fail(503))));
        }
        state.lock().fail_always = None;
        state.lock().throttle_always = Some(7);
        assert!(matches!(state.take_injected(), Some(Injected::Throttle(7))));
        state.lock().throttle_always = None;
        assert!(state.take_injected().is_none());
    }
}
