use std::time::{Duration, SystemTime};

use http::StatusCode;

use super::server::readiness;
use super::*;
use crate::runtime::health::{CertSummary, Health, LeaseState, PauseReason, Paused, State};

fn snapshot(cert: Option<SystemTime>, last_renewed: Option<SystemTime>) -> Snapshot {
    let mut snap = Health::new(true).snapshot();
    snap.cert = cert.map(|not_after| CertSummary {
        serial: "01".into(),
        not_after,
        rotate_at: None,
    });
    snap.lease = LeaseState {
        enabled: true,
        last_renewed,
        ..LeaseState::default()
    };
    snap
}

/// The value of the sample line that starts with `series ` (exactly that name and labels).
fn sample(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string)
}

#[test]
fn ttl_is_whole_seconds_negative_once_expired_and_infinite_without_a_certificate() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    assert_eq!(
        ttl_seconds(Some(now + Duration::from_millis(90_900)), now),
        90.0
    );
    assert_eq!(
        ttl_seconds(Some(now - Duration::from_millis(5_500)), now),
        -5.0
    );
    assert_eq!(ttl_seconds(None, now), f64::INFINITY);
}

#[test]
fn the_exposition_carries_the_kubelet_names_with_their_types() {
    let m = Metrics::new();
    let now = crate::runtime::clock::now();
    let text = String::from_utf8(m.render(
        &snapshot(Some(now + Duration::from_secs(3600)), Some(now)),
        now,
        false,
    ))
    .unwrap();
    for (name, kind) in [
        ("kubelet_certificate_manager_client_ttl_seconds", "gauge"),
        (
            "kubelet_certificate_manager_client_expiration_renew_errors",
            "counter",
        ),
        ("bootlet_client_cert_not_after_timestamp_seconds", "gauge"),
        ("bootlet_rotations_total", "counter"),
        ("bootlet_csr_wait_seconds", "histogram"),
        ("bootlet_csr_pending", "gauge"),
        ("bootlet_lease_renewals_total", "counter"),
        ("bootlet_lease_renew_duration_seconds", "histogram"),
        ("bootlet_lease_last_renew_timestamp_seconds", "gauge"),
        ("bootlet_lease_duration_seconds", "gauge"),
        ("bootlet_lease_protobuf", "gauge"),
        ("bootlet_lease_paused", "gauge"),
        ("bootlet_build_info", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds_total", "counter"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} as a {kind} in:\n{text}"
        );
        assert_eq!(
            text.matches(&format!("# TYPE {name} ")).count(),
            1,
            "{name} once"
        );
    }
    let ttl = sample(&text, "kubelet_certificate_manager_client_ttl_seconds").unwrap();
    let ttl: f64 = ttl.parse().unwrap();
    assert!((3598.0..=3600.0).contains(&ttl), "{ttl}");
    // bootlet_api_requests_total has a series per (verb, code) seen: none before a request.
    // Series exist at zero before the first event, so increase() sees the first one.
    assert_eq!(
        sample(
            &text,
            r#"bootlet_rotations_total{profile="client",result="failure"}"#
        )
        .as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, r#"bootlet_csr_pending{profile="client"}"#).as_deref(),
        Some("0")
    );
    assert!(
        !text.contains("kubelet_certificate_manager_server_")
            && !text.contains("profile=\"serving\""),
        "no serving families unless bootlet obtains the serving certificate"
    );
}

/// Before: while bootlet stood aside for a healthy kubelet the last-renewal gauge froze
/// and nothing said why (the critical Lease alert paged on a Ready node). Now the reason
/// the Lease is not written is a gauge per reason, every reason always present.
#[test]
fn why_the_lease_is_not_written_is_a_gauge_per_reason() {
    let m = Metrics::new();
    let now = crate::runtime::clock::now();
    let mut snap = snapshot(None, Some(now));
    let paused = |text: &str, reason: &str| {
        sample(
            text,
            &format!(r#"bootlet_lease_paused{{reason="{reason}"}}"#),
        )
    };
    let text = String::from_utf8(m.render(&snap, now, false)).unwrap();
    for reason in ["other_writer", "other_writer_stopped", "health_probe"] {
        assert_eq!(paused(&text, reason).as_deref(), Some("0"), "{text}");
    }
    for (reason, label) in [
        (PauseReason::OtherWriter, "other_writer"),
        (PauseReason::OtherWriterStopped, "other_writer_stopped"),
        (PauseReason::HealthProbe, "health_probe"),
    ] {
        snap.lease.paused = Some(Paused {
            reason,
            why: "why".into(),
        });
        let text = String::from_utf8(m.render(&snap, now, false)).unwrap();
        for other in ["other_writer", "other_writer_stopped", "health_probe"] {
            let want = if other == label { "1" } else { "0" };
            assert_eq!(paused(&text, other).as_deref(), Some(want), "{text}");
        }
    }
}

#[test]
fn without_a_certificate_the_ttl_is_plus_infinity_and_the_expiry_zero() {
    let m = Metrics::new();
    let now = crate::runtime::clock::now();
    let text = String::from_utf8(m.render(&snapshot(None, None), now, false)).unwrap();
    let ttl = sample(&text, "kubelet_certificate_manager_client_ttl_seconds").unwrap();
    // Go's ParseFloat (Prometheus' parser) reads "inf" case-insensitively.
    assert!(ttl.eq_ignore_ascii_case("inf") || ttl == "+Inf", "{ttl}");
    assert_eq!(
        sample(&text, "bootlet_client_cert_not_after_timestamp_seconds").as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(&text, "bootlet_lease_last_renew_timestamp_seconds").as_deref(),
        Some("0")
    );
}

#[test]
fn outcomes_count_into_both_names_and_the_pending_gauge_follows_the_csr() {
    let m = Metrics::new();
    m.issued(Purpose::Client, true);
    m.issued(Purpose::Client, false);
    m.issued(Purpose::Client, false);
    m.issued(Purpose::Serving, false);
    m.csr_filed(Purpose::Serving);
    m.serving_rotated(Duration::from_secs(7200));
    m.lease_renewal(true, Duration::from_millis(2));
    m.lease_renewal(false, Duration::from_secs(1));
    m.api_request("PUT", Some(StatusCode::OK));
    m.api_request("GET", None);
    let now = crate::runtime::clock::now();
    let mut snap = snapshot(Some(now + Duration::from_secs(60)), Some(now));
    snap.serving_cert = Some(CertSummary {
        serial: "02".into(),
        not_after: now - Duration::from_secs(30),
        rotate_at: None,
    });
    let text = String::from_utf8(m.render(&snap, now, true)).unwrap();
    let at = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series}"));
    assert_eq!(
        at(r#"bootlet_rotations_total{profile="client",result="success"}"#),
        "1"
    );
    assert_eq!(
        at(r#"bootlet_rotations_total{profile="client",result="failure"}"#),
        "2"
    );
    assert_eq!(
        at("kubelet_certificate_manager_client_expiration_renew_errors"),
        "2"
    );
    assert_eq!(at("kubelet_server_expiration_renew_errors"), "1");
    assert_eq!(at(r#"bootlet_csr_pending{profile="serving"}"#), "1");
    assert_eq!(at("kubelet_certificate_manager_server_ttl_seconds"), "-30");
    assert_eq!(
        at(r#"kubelet_certificate_manager_server_rotation_seconds_bucket{le="14400"}"#),
        "1"
    );
    assert_eq!(
        at(r#"kubelet_certificate_manager_server_rotation_seconds_bucket{le="3600"}"#),
        "0"
    );
    assert_eq!(at(r#"bootlet_lease_renewals_total{result="success"}"#), "1");
    assert_eq!(at(r#"bootlet_lease_renewals_total{result="failure"}"#), "1");
    assert_eq!(at("bootlet_lease_renew_duration_seconds_count"), "2");
    assert_eq!(
        at(r#"bootlet_api_requests_total{code="200",verb="PUT"}"#),
        "1"
    );
    assert_eq!(
        at(r#"bootlet_api_requests_total{code="<error>",verb="GET"}"#),
        "1"
    );
    m.csr_answered(Purpose::Serving, Duration::from_secs(3));
    let text = String::from_utf8(m.render(&snap, now, true)).unwrap();
    assert_eq!(
        sample(&text, r#"bootlet_csr_pending{profile="serving"}"#).as_deref(),
        Some("0")
    );
    assert_eq!(
        sample(
            &text,
            r#"bootlet_csr_wait_seconds_count{profile="serving"}"#
        )
        .as_deref(),
        Some("1")
    );
}

/// The certificate stays in the snapshot once expired: `/readyz` compares it with the clock
/// at the request and names the expiry.
#[test]
fn readyz_fails_once_the_certificate_expired() {
    let not_after = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let lease = Duration::from_secs(40);
    let mut snap = snapshot(Some(not_after), Some(not_after - Duration::from_secs(2)));
    snap.bootstrap = State::WaitingApproval {
        csr: "node-csr-fallback".into(),
        since: not_after,
    };
    let before = not_after - Duration::from_secs(1);
    assert_eq!(readiness(&snap, before, false, lease).0, StatusCode::OK);
    let after = not_after + Duration::from_secs(1);
    let (code, body) = readiness(&snap, after, false, lease);
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body.starts_with("readyz check failed: client cert expired at 2027-01-15T08:00:00Z; waiting for approval of CSR node-csr-fallback"),
        "{body}"
    );
    let (code, body) = readiness(&snap, after, true, lease);
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    let lines: Vec<&str> = body.lines().collect();
    assert!(
        lines[0].starts_with("[-]client-certificate failed: expired at 2027-01-15T08:00:00Z; waiting for approval of CSR node-csr-fallback"),
        "{body}"
    );
    assert_eq!(lines[1], "[+]kubeconfig ok");
    assert_eq!(lines.last(), Some(&"readyz check failed"));
}

#[test]
fn readyz_is_the_certificate_and_verbose_lists_the_lease_without_gating_on_it() {
    let now = crate::runtime::clock::now();
    let lease = Duration::from_secs(40);
    let stale = snapshot(
        Some(now + Duration::from_secs(3600)),
        Some(now - Duration::from_secs(300)),
    );
    let (code, body) = readiness(&stale, now, false, lease);
    assert_eq!((code, body.as_str()), (StatusCode::OK, "ok\n"));
    let (code, body) = readiness(&stale, now, true, lease);
    assert_eq!(code, StatusCode::OK);
    let lines: Vec<&str> = body.lines().collect();
    assert!(lines[0].starts_with("[+]client-certificate ok: valid until "));
    assert_eq!(lines[1], "[+]kubeconfig ok");
    assert!(
        lines[2].starts_with(
            "[-]lease stale: last renewed 5m0s ago, longer than the lease duration (40s)"
        ),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "readyz check passed");

    let fresh = snapshot(
        Some(now + Duration::from_secs(3600)),
        Some(now - Duration::from_secs(3)),
    );
    let (_, body) = readiness(&fresh, now, true, lease);
    assert!(body.contains("[+]lease ok: renewed 3s ago\n"), "{body}");

    let mut none = snapshot(None, None);
    none.bootstrap = State::WaitingApproval {
        csr: "node-csr-x".into(),
        since: now,
    };
    let (code, body) = readiness(&none, now, false, lease);
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        body.starts_with("readyz check failed: waiting for approval of CSR node-csr-x"),
        "{body}"
    );
    let (_, body) = readiness(&none, now, true, lease);
    assert!(body.contains("[-]client-certificate failed: waiting for approval"));
    assert!(body.contains("[-]lease not renewed yet"));
    assert!(body.ends_with("readyz check failed\n"));
}

#[test]
fn readyz_escapes_server_text() {
    let now = crate::runtime::clock::now();
    let mut snap = snapshot(None, None);
    snap.bootstrap = State::BackingOff {
        until: now,
        reason: "denied: no\nREADY=1".into(),
        check: crate::checkid::CheckId::Csr,
    };
    let (_, body) = readiness(&snap, now, true, Duration::from_secs(40));
    assert!(!body.contains("\nREADY=1"), "{body}");
}

#[test]
fn without_the_lease_loop_no_lease_family_is_exported() {
    let m = Metrics::new();
    let now = crate::runtime::clock::now();
    let mut snap = snapshot(Some(now + Duration::from_secs(60)), None);
    snap.lease.enabled = false;
    let text = String::from_utf8(m.render(&snap, now, false)).unwrap();
    assert!(!text.contains("bootlet_lease_"), "{text}");
    assert!(text.contains("kubelet_certificate_manager_client_ttl_seconds "));
}

mod deadlines {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use crate::metrics::deadline::{Deadlines, Progress, Verdict};
    use crate::metrics::server::{serve_with, Endpoints};
    use crate::runtime::health::Health;
    use crate::runtime::shutdown;

    const D: Deadlines = Deadlines {
        idle: Duration::from_secs(10),
        lifetime: Duration::from_secs(60),
        grace: Duration::from_secs(5),
    };

    #[tokio::test(start_paused = true)]
    async fn idle_closes_at_once_lifetime_finishes_then_closes() {
        let p = Progress::new();
        let born = p.born();
        let s = Duration::from_secs;
        assert_eq!(D.check(&p, None, born), Verdict::Wait(born + s(10)));
        assert_eq!(
            D.check(&p, None, born + s(10)),
            Verdict::Close,
            "idle since birth"
        );
        // Bytes keep moving: never idle, but the lifetime ends it.
        let mut closing = None;
        for t in (5..=60).step_by(5) {
            tokio::time::advance(s(5)).await;
            let mut io = crate::metrics::deadline::Tracked::new(tokio::io::empty(), p.clone());
            let mut byte = [0u8; 1];
            // An empty reader moves nothing: progress is bytes, not calls.
            let before = p.last();
            let _ = io.read(&mut byte).await;
            assert_eq!(p.last(), before, "no byte, no progress");
            let mut sink = crate::metrics::deadline::Tracked::new(tokio::io::sink(), p.clone());
            sink.write_all(b"x").await.unwrap();
            assert_eq!(p.last(), born + s(t));
            match D.check(&p, closing, Instant::now()) {
                Verdict::Wait(at) if t < 60 => {
                    assert_eq!(at, (born + s(t) + s(10)).min(born + s(60)))
                }
                Verdict::Finish(hard) if t == 60 => {
                    assert_eq!(hard, born + s(65));
                    closing = Some(hard);
                }
                v => panic!("at {t}s: {v:?}"),
            }
        }
        assert_eq!(
            D.check(&p, closing, born + s(62)),
            Verdict::Wait(born + s(65))
        );
        assert_eq!(D.check(&p, closing, born + s(65)), Verdict::Close);
    }

    /// A client that asks and reads every 100 ms is never idle, yet its connection ends at
    /// the lifetime, after an answer completes (graceful), and a new one is served.
    #[tokio::test]
    async fn a_busy_keep_alive_connection_ends_at_its_lifetime() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (trigger, stop) = shutdown::channel();
        let short = Deadlines {
            idle: Duration::from_millis(500),
            lifetime: Duration::from_millis(1200),
            grace: Duration::from_millis(500),
        };
        let endpoints = Endpoints {
            health: Health::new(true),
            serving: false,
            approver: false,
        };
        let server = tokio::spawn(serve_with(listener, endpoints, stop, short));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let start = Instant::now();
        let mut answers = 0;
        let mut buf = vec![0u8; 4096];
        let ended = loop {
            if conn
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .is_err()
            {
                break start.elapsed();
            }
            match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break start.elapsed(),
                Ok(Ok(n)) => {
                    assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
                    answers += 1;
                }
                Err(_) => panic!("no answer and no close within 5s"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(answers >= 5, "{answers} answers before the close");
        assert!(
            ended >= Duration::from_millis(1200) && ended < Duration::from_millis(2500),
            "closed after {ended:?}"
        );
        // An idle one is closed after `idle`.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let start = Instant::now();
        let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
            .await
            .expect("closed by the idle deadline")
            .unwrap();
        assert_eq!(n, 0);
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(450) && waited < Duration::from_millis(1500),
            "{waited:?}"
        );
        trigger.fire();
        server.await.unwrap();
    }
}
