use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::time::SystemTime;

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

#[test]
fn body_sets_holder_duration_and_renew_time() {
    let lease = body(
        None,
        "node-a",
        Duration::from_secs(40),
        ts("2026-11-30T21:00:00.123456Z"),
        None,
    );
    assert_eq!(lease.metadata.name.as_deref(), Some("node-a"));
    assert_eq!(lease.metadata.namespace.as_deref(), Some(NAMESPACE));
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let json = serde_json::to_value(spec.renew_time.unwrap()).unwrap();
    assert_eq!(json, "2026-11-30T21:00:00.123456Z");
}

#[test]
fn body_keeps_the_cached_object_and_adds_the_owner_once() {
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "node-a".into(),
        uid: "uid-1".into(),
        ..OwnerReference::default()
    };
    let mut first = body(
        None,
        "node-a",
        Duration::from_secs(40),
        ts("2026-11-30T21:00:00Z"),
        Some(&owner),
    );
    first.metadata.resource_version = Some("7".into());
    let second = body(
        Some(&first),
        "node-a",
        Duration::from_secs(40),
        ts("2026-11-30T21:00:10Z"),
        Some(&owner),
    );
    assert_eq!(second.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(second.metadata.owner_references.as_ref().unwrap().len(), 1);
}

#[test]
fn renew_time_is_strictly_increasing_even_when_the_clock_steps_back() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let a = next_renew_time(t0, None);
    let b = next_renew_time(t0 - Duration::from_secs(30), Some(a));
    assert!(b > a);
    let c = next_renew_time(t0 + Duration::from_nanos(1), Some(b));
    assert!(c > b);
    // Microsecond precision: MicroTime drops anything finer.
    assert_eq!(a.subsec_nanosecond() % 1000, 0);
    // Every one carries the mark, the bumped ones too, within a millisecond of now.
    assert!([a, b, c].iter().all(|t| is_marked(*t)), "{a} {b} {c}");
    let now = jiff::Timestamp::try_from(t0).unwrap();
    assert!(a.duration_since(now).abs() < jiff::SignedDuration::from_millis(1));
    assert_eq!(c, b + jiff::SignedDuration::from_millis(1));
}

#[tokio::test(start_paused = true)]
async fn the_first_renewal_is_at_once_and_then_every_interval_exactly() {
    let start = Instant::now();
    let interval = Duration::from_secs(10);
    for draw in [0.0, 0.25, 0.5, 0.999_999_9] {
        assert_eq!(due(start, 0, interval, draw), start);
        // The second renewal: between half and one and a half intervals after the first.
        let second = due(start, 1, interval, draw) - start;
        assert!(second >= interval / 2, "{second:?}");
        assert!(second < interval * 3 / 2, "{second:?}");
        for n in 2..1000 {
            // Every period after is exactly the interval, whatever the phase: no drift.
            assert_eq!(
                due(start, n, interval, draw) - due(start, n - 1, interval, draw),
                interval
            );
            assert_eq!(
                due(start, n, interval, draw),
                start + second + interval * (n - 1)
            );
        }
    }
}

/// The old phase spanned 4 % of the interval, so 20 nodes started together renewed in the
/// same second forever. Now the draw covers the whole interval: evenly spaced draws put the
/// renewals evenly over it (one per tenth for ten draws), so uniform draws spread a fleet.
#[tokio::test(start_paused = true)]
async fn the_phase_spans_the_whole_interval() {
    let start = Instant::now();
    let interval = Duration::from_secs(10);
    let mut tenths = [0usize; 10];
    for i in 0..10 {
        let draw = (i as f64 + 0.5) / 10.0;
        let offset = (due(start, 5, interval, draw) - start).as_nanos() % interval.as_nanos();
        tenths[(offset * 10 / interval.as_nanos()) as usize] += 1;
    }
    assert_eq!(tenths, [1; 10]);
    // The extremes of the draw are a whole interval apart, less nothing.
    let lo = due(start, 1, interval, 0.0);
    let hi = due(start, 1, interval, 0.999_999);
    assert!(hi - lo > interval.mul_f64(0.999), "{:?}", hi - lo);
}

#[tokio::test(start_paused = true)]
async fn the_next_slot_is_strictly_after_now_and_skips_missed_ones() {
    let start = Instant::now();
    let interval = Duration::from_secs(10);
    let draw = 0.3; // renewal 1 at 8 s, then 18 s, 28 s, ...
    let at = |secs: f64| start + Duration::from_secs_f64(secs);
    assert_eq!(next_slot(start, start, interval, draw), 1);
    assert_eq!(next_slot(start, at(7.9), interval, draw), 1);
    assert_eq!(next_slot(start, at(8.0), interval, draw), 2);
    assert_eq!(next_slot(start, at(17.99), interval, draw), 2);
    // A renewal that took until 40 s (an outage) retries at its own slot, 48 s: no burst.
    let n = next_slot(start, at(40.0), interval, draw);
    assert_eq!(due(start, n, interval, draw), at(48.0));
    for secs in [0.0, 3.0, 8.0, 12.5, 18.0, 99.9, 1e6] {
        let now = at(secs);
        let n = next_slot(start, now, interval, draw);
        assert!(due(start, n, interval, draw) > now, "{secs}");
        assert!(n == 0 || due(start, n - 1, interval, draw) <= now, "{secs}");
    }
}

#[test]
fn only_answers_the_server_gave_are_retried_inside_the_period() {
    use http::Method;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
    let identity = crate::api::Identity::Anonymous;
    let answered = |code: u16| api::Error::Api {
        method: Method::PUT,
        path: "/l".into(),
        code,
        identity: identity.clone(),
        status: Box::new(Status::default()),
        retry_after: None,
    };
    assert!(retry_in_period(&answered(500)));
    assert!(retry_in_period(&answered(429)));
    assert!(!retry_in_period(&answered(403)));
    // A refused connection is an outage: the next attempt is the process's next slot.
    let refused = api::Error::Transport {
        method: Method::PUT,
        path: "/l".into(),
        identity,
        source: "connection refused".into(),
    };
    assert!(!retry_in_period(&refused));
}

#[test]
fn a_renewal_is_abandoned_just_before_the_next_slot() {
    let request = crate::api::DEFAULT_REQUEST_TIMEOUT;
    let budget = |ms| attempt_budget(Duration::from_millis(ms), request);
    assert_eq!(budget(10_000), Duration::from_millis(9500));
    assert_eq!(budget(1000), Duration::from_millis(950));
    assert_eq!(budget(200), Duration::from_millis(190));
    // A long interval still bounds every request by the request timeout.
    assert_eq!(budget(60_000), request);
    assert_eq!(
        attempt_budget(Duration::from_secs(60), Duration::from_secs(3)),
        Duration::from_secs(3)
    );
}

fn node_ref(uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "node-a".into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// Before: a Lease naming the Node by another UID (written by someone who knows the
/// re-registered Node) had that reference replaced by our stale one.
#[test]
fn body_never_replaces_a_node_reference_already_there() {
    let at = ts("2026-11-30T21:00:00Z");
    let d = Duration::from_secs(40);
    let mut theirs = body(None, "node-a", d, at, Some(&node_ref("uid-new")));
    let other = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: "x".into(),
        uid: "uid-ds".into(),
        ..OwnerReference::default()
    };
    theirs
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .push(other.clone());
    let ours = body(Some(&theirs), "node-a", d, at, Some(&node_ref("uid-old")));
    assert_eq!(
        ours.metadata.owner_references.unwrap(),
        vec![node_ref("uid-new"), other]
    );
    // A Lease without a Node reference gets ours.
    let bare = body(None, "node-a", d, at, None);
    let owned = body(Some(&bare), "node-a", d, at, Some(&node_ref("uid-1")));
    assert_eq!(
        owned.metadata.owner_references.unwrap(),
        vec![node_ref("uid-1")]
    );
}

#[tokio::test(start_paused = true)]
async fn the_owner_is_forgotten_when_the_lease_is_gone_or_names_another_uid() {
    let every = Duration::from_secs(60);
    let t0 = Instant::now();
    let mut owner = owner::Owner::new("node-a", every, t0);
    assert!(owner.lookup_due(t0));
    owner.looking_up(t0);
    owner.found("uid-1".into());
    assert_eq!(owner.belief().unwrap().uid, "uid-1");
    // Known: no lookups, however much time passes.
    assert!(!owner.lookup_due(t0 + every * 10));

    let d = Duration::from_secs(40);
    let at = ts("2026-11-30T21:00:00Z");
    let same = body(None, "node-a", d, at, Some(&node_ref("uid-1")));
    assert!(!owner.observe(&same));
    assert!(!owner.observe(&body(None, "node-a", d, at, None)));
    let other = body(None, "node-a", d, at, Some(&node_ref("uid-2")));
    assert!(owner.observe(&other));
    assert!(owner.belief().is_none());
    assert!(owner.lookup_due(t0 + every * 10));

    // Gone: forgotten; looked up again only once the interval since the last lookup passed.
    owner.looking_up(t0 + every * 10);
    owner.found("uid-2".into());
    owner.forget();
    assert!(owner.belief().is_none());
    assert!(!owner.lookup_due(t0 + every * 10 + every / 2));
    assert!(owner.lookup_due(t0 + every * 11));
}

/// Before: a `Retry-After: 18446744073709551615` on a Lease answer was added to an
/// `Instant` and panicked the Lease task.
#[test]
fn a_huge_retry_after_ends_the_period_instead_of_overflowing() {
    let interval = Duration::from_secs(10);
    let mut quick = Backoff::new(Duration::from_millis(100), interval / 4, 0.2).unwrap();
    let huge = Some(Duration::from_secs(u64::MAX));
    assert_eq!(
        quick_retry_wait(&mut quick, huge, interval, Duration::from_secs(9)),
        None
    );
    // Even with a whole period left (or more), a hint is honoured up to one interval.
    assert_eq!(
        quick_retry_wait(&mut quick, huge, interval, Duration::MAX),
        Some(interval)
    );
    // A hint that fits is honoured; none gives the backoff's own delay, under its cap.
    assert_eq!(
        quick_retry_wait(
            &mut quick,
            Some(Duration::from_secs(2)),
            interval,
            Duration::from_secs(9)
        ),
        Some(Duration::from_secs(2))
    );
    let own = quick_retry_wait(&mut quick, None, interval, Duration::from_secs(9)).unwrap();
    assert!(own <= interval / 4, "{own:?}");
    assert_eq!(
        quick_retry_wait(
            &mut quick,
            Some(Duration::from_secs(3)),
            interval,
            Duration::from_secs(3)
        ),
        None
    );
}

#[test]
fn a_bystander_reads_every_half_lease_duration_at_most_once_per_interval() {
    let s = Duration::from_secs;
    assert_eq!(bystander_reads(s(10), s(40)), s(20));
    assert_eq!(bystander_reads(s(10), s(11)), s(10));
}

/// The loop's step after a period, without timers: a failure the server answered counts
/// and marks since when the Lease fails; a success clears both and records the renewal;
/// another writer makes bootlet a bystander, paused in the health snapshot.
#[tokio::test]
async fn settle_counts_failures_clears_them_and_stands_aside_for_another_writer() {
    use crate::identity::outage_tests::{node_client, Lines};
    // A subscriber of its own: tracing caches a callsite's interest when first hit.
    let (_lines, _guard) = Lines::capture();
    let tp = testplane::TestPlane::builder().start().await.unwrap();
    let (_tx, mut clients) = watch::channel(node_client(&tp, "settle"));
    let health = Health::new(false);
    let cfg = LeaseLoop::new("settle", Duration::from_secs(10), Duration::from_secs(40));
    let mut p = Progress::open(&cfg, &mut clients, &health);
    let read_every = Duration::from_secs(30);
    let conflict = || RenewError::Conflict {
        node: "settle".into(),
    };

    p.settle(&cfg, Err(conflict()), &health, read_every);
    assert_eq!(p.failed_periods, 1);
    assert!(health.snapshot().lease.failing_since.is_some());
    p.settle(&cfg, Err(conflict()), &health, read_every);
    assert_eq!(p.failed_periods, 2);

    p.settle(&cfg, Ok(()), &health, read_every);
    assert_eq!(p.failed_periods, 0);
    let lease = health.snapshot().lease;
    assert!(lease.failing_since.is_none() && lease.last_renewed.is_some());
    assert!(p.bystander.is_none());

    let other = RenewError::OtherWriter {
        node: "settle".into(),
    };
    p.settle(&cfg, Err(other), &health, read_every);
    assert!(p.bystander.is_some());
    assert!(health.snapshot().lease.paused.is_some());
    assert_eq!(p.failed_periods, 0, "another writer is no failure");
}
