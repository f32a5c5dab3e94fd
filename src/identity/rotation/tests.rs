use super::*;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

#[test]
fn deadline_table() {
    // (not_before, not_after, fraction, jitter, draw) -> seconds after not_before
    let cases = [
        (0, 1000, 0.75, 0.0, 0.3, 750),
        (0, 1000, 0.75, 0.05, 0.0, 700),
        (0, 1000, 0.75, 0.05, 0.5, 750),
        (0, 1000, 0.75, 0.05, 1.0, 800),
        (100, 3700, 0.5, 0.0, 0.9, 1800),
        // A certificate whose notAfter precedes notBefore has no lifetime: rotate at once.
        (1000, 0, 0.75, 0.05, 0.5, 0),
    ];
    for (nb, na, f, j, draw, want) in cases {
        let got = deadline(t(nb), t(na), f, j, draw);
        assert_eq!(
            got,
            t(nb + want),
            "case nb={nb} na={na} f={f} j={j} draw={draw}"
        );
    }
}

#[test]
fn a_deadline_in_the_past_is_simply_in_the_past() {
    // The loop rotates at once when now > deadline; the function does not consult the clock.
    let at = deadline(t(0), t(100), 0.75, 0.0, 0.5);
    assert!(at < t(1000));
}

#[test]
fn the_draw_is_stable_per_certificate_and_in_range() {
    assert_eq!(draw_for("0a1b"), draw_for("0a1b"));
    assert_ne!(draw_for("0a1b"), draw_for("0a1c"));
    for i in 0..1000 {
        let d = draw_for(&format!("{i:x}"));
        assert!((0.0..1.0).contains(&d));
    }
}

#[test]
fn ten_thousand_deadlines_spread_uniformly_over_the_jitter_window() {
    let (f, j) = (0.75, 0.05);
    let mut buckets = [0u32; 10];
    for i in 0..10_000u32 {
        let serial = format!("{:032x}", u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let at = deadline(t(0), t(1_000_000), f, j, draw_for(&serial));
        let frac = at.duration_since(t(0)).unwrap().as_secs_f64() / 1_000_000.0;
        assert!((f - j - 1e-9..=f + j + 1e-9).contains(&frac), "{frac}");
        let b = (((frac - (f - j)) / (2.0 * j)) * 10.0)
            .floor()
            .clamp(0.0, 9.0) as usize;
        buckets[b] += 1;
    }
    // Chi-square with 9 degrees of freedom: 27.88 is the 0.1 % critical value.
    let chi2: f64 = buckets
        .iter()
        .map(|&n| (f64::from(n) - 1000.0).powi(2) / 1000.0)
        .sum();
    assert!(chi2 < 27.88, "not uniform: {buckets:?} chi2={chi2}");
}

/// The loop's step after a wake-up, without timers: nothing before the deadline, a
/// rotation at it, the bootstrap fallback past expiry; with rotation off, never a pass.
#[tokio::test]
async fn due_names_the_pass_the_deadline_and_the_expiry_call_for() {
    use crate::api::ClientOptions;
    use crate::identity::outage_tests::{settings_in, Lines};
    // A subscriber of its own: tracing caches a callsite's interest when first hit.
    let (_lines, _guard) = Lines::capture();
    let tp = testplane::TestPlane::builder()
        .cert_ttl(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let settings = settings_in(tmp.path(), "rot-due");
    std::fs::write(&settings.bootstrap_kubeconfig, tp.bootstrap_kubeconfig()).unwrap();
    let health = Health::new(false);
    let bootstrap = Bootstrap::new(&settings, health.clone(), ClientOptions::default());
    let creds = bootstrap.run().await.unwrap();
    let dir = CertDir::open(&settings.cert_dir).unwrap();
    let (clients, _rx) = watch::channel(creds.client.clone());
    let rotation = Rotation {
        settings: &settings,
        bootstrap: &bootstrap,
        health: health.clone(),
        clients,
    };
    let at = rotation.schedule(&creds).expect("rotation is on");
    let not_after = creds.cert.not_after;
    let mut state = Progress {
        plan: Schedule::new(Some(at), not_after),
        creds,
        retries: Retries::new(&settings),
        rotation_key_left: false,
        warned: false,
        seen: None,
    };
    // The first look records the file as seen: no outside change.
    assert_eq!(
        rotation.due(&mut state, &dir, at - Duration::from_secs(1)),
        None
    );
    assert_eq!(rotation.due(&mut state, &dir, at), Some(Pass::Rotate));
    assert_eq!(
        rotation.due(&mut state, &dir, not_after),
        Some(Pass::FallBack)
    );

    // Rotation off: a warning near expiry at most, never a pass.
    let off = Settings {
        rotate_certificates: false,
        ..settings.clone()
    };
    let rotation = Rotation {
        settings: &off,
        ..rotation
    };
    state.plan = Schedule::new(rotation.schedule(&state.creds), not_after);
    assert_eq!(state.plan.at, None);
    assert_eq!(rotation.due(&mut state, &dir, at), None);
    let near_expiry = not_after - Duration::from_secs(60);
    assert_eq!(rotation.due(&mut state, &dir, near_expiry), None);
    assert!(state.warned, "the 90 % warning");
    assert_eq!(rotation.due(&mut state, &dir, not_after), None);
}
