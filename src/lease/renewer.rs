//! The Lease loop's state between renewals and its IO steps: one renewal (PUT, create on
//! 404, re-read on 409, quick retries inside the period), the Node lookup for the owner
//! reference, the health probe gate, and the reads while another writer renews the Lease.
//! The schedule and the decisions are the loop's (lease.rs) and the pure files'.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use tokio::time::Instant;

use super::body::{body, next_renew_time};
use super::owner::Owner;
use super::probe::probe;
use super::writers::{ours, Bystander, Verdict};
use super::{
    quick_retry_wait, retry_in_period, LeaseLoop, RenewError, FOREIGN_STREAK, NAMESPACE,
    RETRIES_PER_PERIOD,
};
use crate::api::conn::Connection;
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;
use crate::runtime::health::{Health, PauseReason, Paused};
use crate::runtime::report;

/// Why the loop does not write while another writer renews the Lease (`STATUS=`).
pub(super) const OTHER_WRITER: &str =
    "another writer renews the Lease; bootlet stopped renewing it (use --renew-lease=false)";

/// Paused for another writer, saying `why`.
pub(super) fn other_writer(why: &str) -> Paused {
    Paused {
        reason: PauseReason::OtherWriter,
        why: why.to_string(),
    }
}

/// How often the Lease is read once another writer renews it: every half lease duration,
/// never more often than the renewal interval (pure).
pub(super) fn bystander_reads(interval: Duration, duration: Duration) -> Duration {
    (duration / 2).max(interval)
}

/// Mutable state of the loop between renewals.
pub(super) struct Renewer {
    pub(super) cfg: LeaseLoop,
    cached: Option<Lease>,
    /// The newest renewTime this process sent, answered or not (an exchange abandoned, cut
    /// or answered with garbage may still have been applied): every renewTime bootlet
    /// writes is after it, and a marked one found in the Lease that is not newer is ours
    /// ([`ours`]).
    sent: Option<jiff::Timestamp>,
    /// Whether the Lease found before this process's first write was judged: one another
    /// writer renewed last (no mark) makes bootlet stand aside before it writes at all.
    judged_first: bool,
    owner: Owner,
    foreign: u32,
}

// === impl Renewer ===

impl Renewer {
    pub(super) fn new(cfg: LeaseLoop) -> Self {
        Self {
            owner: Owner::new(&cfg.node, cfg.owner_lookup, Instant::now()),
            cfg,
            cached: None,
            sent: None,
            judged_first: false,
            foreign: 0,
        }
    }

    /// One read of the Lease while another writer renews it; `None` when it is gone.
    pub(super) async fn read(
        &mut self,
        conn: &mut Connection,
    ) -> Result<Option<Lease>, RenewError> {
        match conn.get_lease(&self.cfg.path()).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(source) => Err(RenewError::Api {
                node: self.cfg.node.clone(),
                source,
            }),
        }
    }

    /// What one read while another writer renews the Lease means; logs the changes. Returns
    /// true to take the Lease over: only when the other writer has stopped and a health
    /// probe is configured (the loop only gets here while it answers 2xx). Without a probe
    /// bootlet never writes again on its own: it says once that the node will go NotReady.
    pub(super) fn stand_aside(
        &mut self,
        by: &mut Bystander,
        read: Result<Option<Lease>, RenewError>,
        conn: &mut Connection,
        health: &Health,
    ) -> bool {
        let now = Instant::now();
        let lease = match read {
            Ok(lease) => lease,
            Err(e) => {
                by.read_failed(now);
                tracing::debug!(error = %report(&e), "lease: reading the Lease another writer renews failed");
                if e.is_no_answer() {
                    conn.reset();
                }
                return false;
            }
        };
        let declared = lease
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.cfg.duration, Duration::from_secs);
        let version = lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let verdict = by.observe(now, version.as_deref(), declared);
        if let Some(lease) = &lease {
            self.observe_owner(lease);
        }
        self.cached = lease;
        self.follow(verdict, health)
    }

    /// What bootlet does about the other writer's `verdict`: nothing while it renews, says
    /// when it resumes, and when it stops takes over (true) with a probe, or else says once
    /// that the node will go NotReady.
    fn follow(&mut self, verdict: Verdict, health: &Health) -> bool {
        let node = &self.cfg.node;
        match verdict {
            Verdict::Renewing => false,
            Verdict::Resumed => {
                tracing::info!(%node, "lease: the other writer renews the Lease again");
                health.update(|s| s.lease.paused = Some(other_writer(OTHER_WRITER)));
                false
            }
            Verdict::Stopped { idle, first } => match &self.cfg.probe {
                Some(url) => {
                    tracing::error!(%node, idle = ?idle, probe = %url, "lease: the other writer has not renewed Lease {NAMESPACE}/{node} for {idle:?} and the health probe answers: bootlet takes over renewing it");
                    self.foreign = 0;
                    true
                }
                None => {
                    if first {
                        tracing::error!(%node, idle = ?idle, "lease: the other writer has not renewed Lease {NAMESPACE}/{node} for {idle:?}; bootlet does not take over, since a writer that stops is what a dead kubelet looks like: the node controller will mark this node NotReady (set --lease-health-probe to let bootlet take over while the node agent answers, or delete the Lease (kubectl -n kube-node-lease delete lease {node}) and restart bootlet to make it the writer again)");
                        health.update(|s| {
                            s.lease.paused = Some(Paused {
                                reason: PauseReason::OtherWriterStopped,
                                why: "the other Lease writer stopped; bootlet does not take over (the node goes NotReady)".into(),
                            })
                        });
                    }
                    false
                }
            },
        }
    }

    /// A Lease read from the server may name our Node by another UID: its reference stays,
    /// and ours is looked up again (when the lookup interval allows).
    fn observe_owner(&mut self, lease: &Lease) {
        if self.owner.observe(lease) {
            tracing::info!(node = %self.cfg.node, "the Lease names the Node by another UID than bootlet knew: keeping the Lease's owner reference; the Node is looked up again");
        }
    }

    /// Whether the health probe (if any) allows renewing this period; logs transitions.
    pub(super) async fn probe_allows(&mut self, last: &mut Option<bool>, health: &Health) -> bool {
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
            health.update(|s| {
                s.lease.paused = Some(Paused {
                    reason: PauseReason::HealthProbe,
                    why: format!("health probe {url} fails"),
                })
            });
        }
        ok
    }

    /// One renewal with quick retries, all before `deadline` (the next period).
    pub(super) async fn renew_in_period(
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
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    let hint = source.retry_after();
                    let Some(wait) =
                        quick_retry_wait(&mut quick, hint, self.cfg.interval, remaining)
                    else {
                        return Err(RenewError::Api { node, source });
                    };
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
        if self.cached.is_none() {
            self.read_first(conn, &path).await?;
        }
        // Someone else renewed since our last write: counted once per renewal, and not
        // forgotten when our retry then wins (a writer at a faster cadence makes every
        // first PUT conflict and every second one succeed: still a write war).
        let mut saw_foreign = false;
        for _ in 0..2 {
            match self.write(conn, &path).await {
                Ok(written) => {
                    self.observe_owner(&written);
                    self.cached = Some(written);
                    if !saw_foreign {
                        self.foreign = 0;
                    }
                    return Ok(());
                }
                // Gone: deleted by hand, or by the garbage collector because its Node was
                // deleted. The Node we knew may be gone too: look it up before the create.
                Err(e) if e.is_not_found() => self.gone(conn).await,
                Err(e) if e.code() == Some(409) => {
                    self.after_conflict(conn, &path, &mut saw_foreign).await?
                }
                Err(e) => return Err(self.api(e)),
            }
        }
        Err(RenewError::Conflict {
            node: self.cfg.node.clone(),
        })
    }

    fn api(&self, source: crate::api::Error) -> RenewError {
        RenewError::Api {
            node: self.cfg.node.clone(),
            source,
        }
    }

    /// The Lease as it is before this process writes it (none: it will be created). One
    /// that another writer renewed last makes bootlet stand aside before its first write.
    async fn read_first(&mut self, conn: &mut Connection, path: &str) -> Result<(), RenewError> {
        let node = self.cfg.node.clone();
        match conn.get_lease(path).await {
            Ok(lease) => {
                self.observe_owner(&lease);
                let first = !std::mem::replace(&mut self.judged_first, true);
                let by_another = first && self.renewed_by_someone_else(&lease);
                self.cached = Some(lease);
                if by_another {
                    // A restart does not forget the other writer: its renewTime has no
                    // mark of ours, so someone else renewed the Lease last (the
                    // kubelet, before or after it stopped), and writing now would hide it.
                    tracing::info!(%node, "lease: before its first write bootlet found the Lease last renewed by another writer (a renewTime without bootlet's mark)");
                    return Err(RenewError::OtherWriter { node });
                }
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.judged_first = true;
                Ok(())
            }
            Err(e) => Err(self.api(e)),
        }
    }

    /// One PUT of the cached Lease with a new renewTime (a POST when there is none).
    async fn write(
        &mut self,
        conn: &mut Connection,
        path: &str,
    ) -> Result<Lease, crate::api::Error> {
        let renew = next_renew_time(clock::now(), self.sent);
        let want = body(
            self.cached.as_ref(),
            &self.cfg.node,
            self.cfg.duration,
            renew,
            self.owner.belief(),
        );
        // Ours from now on, answered or not: an exchange that is abandoned, cut or
        // answered with garbage may still have been applied.
        self.sent = Some(renew);
        match &self.cached {
            Some(_) => conn.replace_lease(path, &want).await,
            None => {
                let list = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
                conn.create_lease(&list, &want).await
            }
        }
    }

    /// The Lease is gone: forget it and its owner, and look the Node up again.
    async fn gone(&mut self, conn: &mut Connection) {
        self.cached = None;
        self.owner.forget();
        self.lookup_owner(conn).await;
    }

    /// A 409 on the write: re-read the Lease for the retry, and count a renewal by another
    /// writer (once per renewal); the streak's end is [`RenewError::OtherWriter`].
    /// kube-apiserver answers a PUT of a Lease that is gone with 409 (the UID in our body
    /// is a precondition the missing object fails), not 404.
    async fn after_conflict(
        &mut self,
        conn: &mut Connection,
        path: &str,
        saw_foreign: &mut bool,
    ) -> Result<(), RenewError> {
        let current = match conn.get_lease(path).await {
            Ok(current) => current,
            Err(e) if e.is_not_found() => {
                self.gone(conn).await;
                return Ok(());
            }
            Err(e) => return Err(self.api(e)),
        };
        self.observe_owner(&current);
        if !*saw_foreign && self.renewed_by_someone_else(&current) {
            *saw_foreign = true;
            self.foreign += 1;
            if self.foreign >= FOREIGN_STREAK {
                self.cached = Some(current);
                return Err(RenewError::OtherWriter {
                    node: self.cfg.node.clone(),
                });
            }
        }
        self.cached = Some(current);
        Ok(())
    }

    /// The Lease's renewTime is not one bootlet wrote ([`ours`]): someone else renewed it.
    /// A Lease without a renewTime was renewed by no one.
    fn renewed_by_someone_else(&self, current: &Lease) -> bool {
        current
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .is_some_and(|t| !ours(t.0, self.sent))
    }

    /// Look the Node up now and then (at most every `owner_lookup`, never on every
    /// renewal) while its UID is not known.
    async fn lookup_owner(&mut self, conn: &mut Connection) {
        let now = Instant::now();
        if !self.owner.lookup_due(now) {
            return;
        }
        self.owner.looking_up(now);
        match conn
            .get::<Node>(&format!("/api/v1/nodes/{}", self.cfg.node))
            .await
        {
            Ok(node) => {
                if let Some(uid) = node.metadata.uid {
                    tracing::info!(node = %self.cfg.node, %uid, "Node exists; a Lease without a Node owner reference gets this one");
                    self.owner.found(uid);
                }
            }
            Err(e) if e.is_not_found() => {
                tracing::debug!(node = %self.cfg.node, "Node not registered yet")
            }
            Err(e) => tracing::debug!(error = %report(&e), "Node lookup failed"),
        }
    }
}
