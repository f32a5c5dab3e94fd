//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime`,
//! `leaseTransitions`; a candidate takes the Lease only when the record it last saw has not
//! changed for a whole lease duration on its own monotonic clock (so clock skew between
//! replicas cannot hand the Lease over early); every write carries the resourceVersion read
//! (a 409 means another replica wrote first). The leader renews every retry period and
//! stops leading when it could not renew within the renew deadline; on SIGTERM it releases
//! the Lease (holder emptied, duration 1 s) so the other replica takes over at once.
//!
//! The node Lease (`crate::lease`) is another object with other rules (one writer, no
//! election); nothing here touches it.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::{self, ApiClient};
use crate::metrics::METRICS;
use crate::runtime::clock;
use crate::runtime::report;
use crate::runtime::shutdown::Shutdown;

/// The election's knobs (client-go's names and defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// What the candidate last saw of the Lease, and when (monotonic).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    record: Option<Record>,
    at: Option<Instant>,
}

/// The part of a Lease that says who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    duration_secs: i32,
    renew: Option<jiff::Timestamp>,
    acquire: Option<jiff::Timestamp>,
    transitions: i32,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration_secs: spec.lease_duration_seconds.unwrap_or(0),
            renew: spec.renew_time.map(|t| t.0),
            acquire: spec.acquire_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

/// What one attempt decided, before any write (pure).
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Another identity holds a Lease that has not expired (as we observed it).
    Wait { holder: String },
    /// Write this spec (create when there was no Lease).
    Write(LeaseSpec),
}

impl Election {
    fn path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
            self.namespace, self.name
        )
    }

    /// The plan for the Lease as read (`None`: it does not exist), updating what was
    /// observed (pure but for the arguments).
    pub fn plan(
        &self,
        current: Option<&Lease>,
        observed: &mut Observed,
        now: Instant,
        wall: SystemTime,
    ) -> Plan {
        let wall = jiff::Timestamp::try_from(wall).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let record = current.map(Record::of);
        if record != observed.record {
            observed.record = record.clone();
            observed.at = Some(now);
        }
        let duration_secs = i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let mut spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(duration_secs),
            renew_time: Some(MicroTime(wall)),
            acquire_time: Some(MicroTime(wall)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        };
        let Some(r) = record else {
            return Plan::Write(spec);
        };
        if r.holder == self.identity {
            spec.acquire_time = r.acquire.map(MicroTime).or(spec.acquire_time);
            spec.lease_transitions = Some(r.transitions);
            return Plan::Write(spec);
        }
        // The record's own duration, as client-go reads it; a released Lease (empty holder)
        // is free at once.
        let held_for = Duration::from_secs(u64::try_from(r.duration_secs.max(0)).unwrap_or(0));
        let since = observed
            .at
            .map_or(Duration::MAX, |at| now.saturating_duration_since(at));
        if !r.holder.is_empty() && since < held_for {
            return Plan::Wait { holder: r.holder };
        }
        spec.lease_transitions = Some(r.transitions.saturating_add(1));
        Plan::Write(spec)
    }
}

/// Runs the election until shutdown, publishing whether this replica leads on `leading`.
/// Returns after releasing the Lease (when it held it).
pub async fn run(
    clients: watch::Receiver<ApiClient>,
    e: Election,
    leading: watch::Sender<bool>,
    mut shutdown: Shutdown,
) {
    let mut observed = Observed::default();
    let mut version: Option<String> = None;
    let mut standing = Standing::default();
    loop {
        let client = clients.borrow().clone();
        let outcome = attempt(&client, &e, &mut observed, &mut version).await;
        standing.after(outcome, Instant::now(), &e, &leading);
        tokio::select! {
            () = tokio::time::sleep(e.retry_period) => {}
            () = shutdown.requested() => break,
        }
    }
    if standing.last_renew.is_some() {
        set(&leading, false);
        let client = clients.borrow().clone();
        release(&client, &e, version).await;
    }
}

/// What the election carries from one try to the next.
#[derive(Default)]
struct Standing {
    /// When this replica last held the Lease, while it leads.
    last_renew: Option<Instant>,
    /// A failed read or write was said (once while following).
    warned: bool,
}

impl Standing {
    /// One try's outcome at `now`: whether this replica leads, published on `leading`.
    fn after(
        &mut self,
        outcome: Result<Tried, api::Error>,
        now: Instant,
        e: &Election,
        leading: &watch::Sender<bool>,
    ) {
        match outcome {
            Ok(Tried::Held) => {
                self.warned = false;
                if self.last_renew.is_none() {
                    tracing::info!(lease = %format!("{}/{}", e.namespace, e.name), identity = %e.identity, "became the leader: approving kubelet-serving CSRs");
                }
                self.last_renew = Some(now);
                set(leading, true);
            }
            Ok(Tried::Conflict) => {
                // Another write came first (client-go: a failed try): a leader keeps
                // acting until its renew deadline, as after any failed renewal.
                if self.past_deadline(now, e) {
                    tracing::warn!(identity = %e.identity, "the Lease changed under us past the renew deadline: no longer the leader");
                    self.last_renew = None;
                    set(leading, false);
                }
            }
            Ok(Tried::Waiting) => {
                if let Some(t) = self.last_renew.take() {
                    tracing::warn!(identity = %e.identity, since = ?now - t, "another replica holds the Lease: no longer the leader");
                }
                set(leading, false);
            }
            Err(err) => {
                if !self.warned || self.last_renew.is_some() {
                    tracing::warn!(error = %report(&err), "leader election: the Lease could not be read or written");
                    self.warned = true;
                }
                if self.past_deadline(now, e) {
                    tracing::warn!(identity = %e.identity, deadline = ?e.renew_deadline, "could not renew the Lease within the renew deadline: no longer the leader");
                    self.last_renew = None;
                    set(leading, false);
                }
            }
        }
    }

    /// Leading, and the renew deadline has passed since the last renewal.
    fn past_deadline(&self, now: Instant, e: &Election) -> bool {
        self.last_renew
            .is_some_and(|t| now.saturating_duration_since(t) >= e.renew_deadline)
    }
}

fn set(leading: &watch::Sender<bool>, on: bool) {
    METRICS.approver_leader(on);
    leading.send_if_modified(|v| std::mem::replace(v, on) != on);
}

/// How one try went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tried {
    /// We hold the Lease now.
    Held,
    /// Another identity holds it and it has not expired.
    Waiting,
    /// Our write lost a race (409).
    Conflict,
}

/// One try: read, plan, write.
async fn attempt(
    client: &ApiClient,
    e: &Election,
    observed: &mut Observed,
    version: &mut Option<String>,
) -> Result<Tried, api::Error> {
    let path = e.path();
    let current = match client.get::<Lease>(&path).await {
        Ok(l) => Some(l),
        Err(err) if err.is_not_found() => None,
        Err(err) => return Err(err),
    };
    let plan = e.plan(current.as_ref(), observed, Instant::now(), clock::now());
    let spec = match plan {
        Plan::Wait { .. } => return Ok(Tried::Waiting),
        Plan::Write(spec) => spec,
    };
    let written: Result<Lease, api::Error> = match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(e.name.clone()),
                    namespace: Some(e.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            let collection = format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
                e.namespace
            );
            client.create(&collection, &lease).await
        }
        Some(mut lease) => {
            lease.spec = Some(spec);
            client.replace(&path, &lease).await
        }
    };
    match written {
        Ok(lease) => {
            *version = lease.metadata.resource_version.clone();
            observed.record = Some(Record::of(&lease));
            observed.at = Some(Instant::now());
            Ok(Tried::Held)
        }
        // Another replica wrote first: not ours this round.
        Err(err) if err.is_conflict() || err.is_already_exists() => Ok(Tried::Conflict),
        Err(err) => Err(err),
    }
}

/// Hand the Lease back (client-go's ReleaseOnCancel): holder emptied, duration 1 s.
async fn release(client: &ApiClient, e: &Election, version: Option<String>) {
    let path = e.path();
    let Ok(mut lease) = client.get::<Lease>(&path).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(e.identity.as_str()) {
        return;
    }
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    if version.is_some() {
        lease.metadata.resource_version = version.or(lease.metadata.resource_version);
    }
    match client.replace::<_, Lease>(&path, &lease).await {
        Ok(_) => tracing::info!(identity = %e.identity, "released the leader Lease"),
        Err(err) => {
            tracing::warn!(error = %report(&err), "could not release the leader Lease; the other replica takes over when it expires")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn election(id: &str) -> Election {
        Election {
            namespace: "ns".into(),
            name: "bootlet-approver".into(),
            identity: id.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn held_by(id: &str, transitions: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(id.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
                acquire_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    fn wall() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    #[test]
    fn no_lease_is_created_with_us_as_holder() {
        let e = election("a");
        let t0 = Instant::now();
        let Plan::Write(spec) = e.plan(None, &mut Observed::default(), t0, wall()) else {
            panic!("create");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, spec.renew_time);
    }

    #[test]
    fn another_holder_is_waited_out_for_a_lease_duration_on_our_clock() {
        let e = election("b");
        let mut seen = Observed::default();
        let t0 = Instant::now();
        let lease = held_by("a", 3);
        // The renewTime is decades old, but what counts is how long *we* saw no change.
        assert_eq!(
            e.plan(Some(&lease), &mut seen, t0, wall()),
            Plan::Wait { holder: "a".into() }
        );
        let t1 = t0 + Duration::from_secs(14);
        assert!(matches!(
            e.plan(Some(&lease), &mut seen, t1, wall()),
            Plan::Wait { .. }
        ));
        // A renewal by the holder restarts the wait.
        let mut renewed = lease.clone();
        renewed.spec.as_mut().unwrap().renew_time =
            Some(MicroTime(jiff::Timestamp::from_second(5).unwrap()));
        assert!(matches!(
            e.plan(Some(&renewed), &mut seen, t1, wall()),
            Plan::Wait { .. }
        ));
        let t2 = t1 + Duration::from_secs(15);
        let Plan::Write(spec) = e.plan(Some(&renewed), &mut seen, t2, wall()) else {
            panic!("take over");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(4), "a transition is counted");
    }

    #[test]
    fn our_own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let e = election("a");
        let lease = held_by("a", 7);
        let Plan::Write(spec) = e.plan(
            Some(&lease),
            &mut Observed::default(),
            Instant::now(),
            wall(),
        ) else {
            panic!("renew");
        };
        assert_eq!(spec.lease_transitions, Some(7));
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(jiff::Timestamp::UNIX_EPOCH))
        );
        assert_ne!(spec.renew_time, spec.acquire_time);
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let e = election("b");
        let lease = held_by("", 2);
        assert!(matches!(
            e.plan(
                Some(&lease),
                &mut Observed::default(),
                Instant::now(),
                wall()
            ),
            Plan::Write(_)
        ));
    }
}
