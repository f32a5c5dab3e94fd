//! The pure core of the Lease loop: the object we write, its renewTime and the schedule.
//! No IO and no clock of its own: time comes in as arguments.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use tokio::time::Instant;

use super::NAMESPACE;

/// The Lease we want, built from the last one we saw (pure): holder, duration and
/// renewTime set, everything else kept, and `owner` added only to a Lease that has no Node
/// owner reference.
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
    // Ours only where the Lease names no Node: a Node reference already there (ours from
    // before, or one someone else wrote, perhaps knowing a UID we do not) is never replaced.
    if let Some(owner) = owner {
        let refs = lease.metadata.owner_references.get_or_insert_with(Vec::new);
        if !refs.iter().any(|r| r.kind == "Node") {
            refs.push(owner.clone());
        }
    }
    lease
}

/// The sub-millisecond part (in microseconds, of 0..1000) of every renewTime bootlet
/// writes: its mark, by which a renewTime bootlet wrote is recognised as its own even when
/// this process did not write it (a process before a restart) or wrote it long ago (a Lease
/// an etcd restore took back in time). The kubelet's renewTimes are its clock at
/// microseconds, so one in a thousand carries it by chance ([`super::writers::ours`] says
/// what that costs). Not 0: a writer with millisecond (or second) precision writes 0 there.
pub const MARK_MICROS: i64 = 271;

/// Whether `t` carries bootlet's mark (`MARK_MICROS`) (pure).
pub fn is_marked(t: jiff::Timestamp) -> bool {
    t.as_microsecond().rem_euclid(1000) == MARK_MICROS
}

/// The next renewTime: now, within the millisecond, carrying bootlet's mark
/// (`MARK_MICROS`), and always after `last` so that renewals stay strictly increasing
/// when the wall clock steps back (pure).
pub fn next_renew_time(now: SystemTime, last: Option<jiff::Timestamp>) -> jiff::Timestamp {
    let now = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let now = marked(now);
    match last {
        Some(last) if now <= last => {
            let next = marked(last);
            if next <= last {
                next + jiff::SignedDuration::from_millis(1)
            } else {
                next
            }
        }
        _ => now,
    }
}

/// `t` truncated to its millisecond, with the mark as its microseconds (pure).
fn marked(t: jiff::Timestamp) -> jiff::Timestamp {
    let ms = t
        .round(
            jiff::TimestampRound::new()
                .smallest(jiff::Unit::Millisecond)
                .mode(jiff::RoundMode::Floor),
        )
        .unwrap_or(t);
    ms + jiff::SignedDuration::from_micros(MARK_MICROS)
}

/// When renewal `n` is due (pure). Renewal 0 is at `start`, at once (a node that just got
/// its identity says so without delay). Renewal `n ≥ 1` is at
/// `start + (½ + phase_draw) × interval + (n − 1) × interval`, with `phase_draw` drawn once
/// per process, uniform in [0, 1): the processes of a fleet started together land evenly over
/// the whole interval from their second renewal on, and each renews at exactly `interval`
/// after that, computed from the start, never from the last renewal, so it never drifts.
/// The gap between the first two renewals is between ½ and 1½ intervals: never two writes
/// back to back, never a Lease older than 1½ intervals.
pub fn due(start: Instant, n: u32, interval: Duration, phase_draw: f64) -> Instant {
    match n {
        0 => start,
        n => start + interval.mul_f64(0.5 + phase_draw.clamp(0.0, 0.999_999)) + interval * (n - 1),
    }
}

/// The first renewal due strictly after `now` (pure): slots a slow or failed renewal missed
/// are skipped, never made up in a burst, and a failure is retried on the process's own next
/// slot, so a fleet stays as spread after an outage as before it.
pub fn next_slot(start: Instant, now: Instant, interval: Duration, phase_draw: f64) -> u32 {
    let first = due(start, 1, interval, phase_draw);
    if now < start {
        return 0;
    }
    if now < first {
        return 1;
    }
    let behind = now.duration_since(first).as_nanos() / interval.as_nanos().max(1);
    u32::try_from(behind)
        .unwrap_or(u32::MAX - 2)
        .saturating_add(2)
}
