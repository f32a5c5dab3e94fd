use super::*;

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
}

#[tokio::test(start_paused = true)]
async fn schedule_does_not_drift_and_the_phase_stays_inside_four_percent() {
    let start = Instant::now();
    let interval = Duration::from_secs(10);
    for draw in [0.0, 0.25, 0.999_999_9] {
        let phase = due(start, 0, interval, draw) - start;
        assert!(phase < Duration::from_millis(400), "{phase:?}");
        for n in 1..1000 {
            // Every period is exactly the interval, whatever the phase.
            assert_eq!(
                due(start, n, interval, draw) - due(start, n - 1, interval, draw),
                interval
            );
            assert_eq!(due(start, n, interval, draw), start + phase + interval * n);
        }
    }
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
