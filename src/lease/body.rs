//! The pure core of the Lease loop: the object we write, its renewTime and the schedule.
//! No IO and no clock of its own: time comes in as arguments.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use tokio::time::Instant;

use super::{JITTER, NAMESPACE};

/// The Lease we want, built from the last one we saw (pure).
pub fn body(
    base: Option<&Lease>,
    node: &str,
    duration: Duration,
    renew_time: jiff::Timestamp,
    owner: Option<&OwnerReference>,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(node.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec::default()),
    });
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(node.to_string());
    spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(renew_time));
    if let Some(owner) = owner {
        let refs = lease.metadata.owner_references.get_or_insert_with(Vec::new);
        if !refs.iter().any(|r| r.uid == owner.uid) {
            refs.retain(|r| r.kind != "Node");
            refs.push(owner.clone());
        }
    }
    lease
}

/// The next renewTime: now at microsecond precision, but always after `last` so that
/// renewals stay strictly increasing when the wall clock steps back (pure).
pub fn next_renew_time(now: SystemTime, last: Option<jiff::Timestamp>) -> jiff::Timestamp {
    let now = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let now = now
        .round(
            jiff::TimestampRound::new()
                .smallest(jiff::Unit::Microsecond)
                .mode(jiff::RoundMode::Trunc),
        )
        .unwrap_or(now);
    match last {
        Some(last) if now <= last => last + jiff::SignedDuration::from_micros(1),
        _ => now,
    }
}

/// When renewal `n` is due: `start + phase + n × interval`, with the phase drawn once per
/// process in `[0, JITTER × interval)` (pure). A fleet started together is spread over the
/// jitter window, yet each node renews at exactly `interval` and never drifts, because
/// the time is computed from the start, never from the last renewal.
pub fn due(start: Instant, n: u32, interval: Duration, phase_draw: f64) -> Instant {
    start + interval.mul_f64(JITTER * phase_draw.clamp(0.0, 0.999_999)) + interval * n
}
