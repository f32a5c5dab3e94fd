use std::time::Duration;

use testplane::{Approval, TestPlane};

use super::*;
use crate::identity::outage_tests::{
    ip, metronome, node_client, node_with, settings_in, until, Lines, MINUTE,
};
use crate::runtime::shutdown;

const NODE: &str = "srv-a";

fn serving_csrs(tp: &TestPlane) -> usize {
    tp.csrs()
        .iter()
        .filter(|c| c.spec.signer_name == testplane::KUBELET_SERVING_SIGNER)
        .count()
}

fn node_reads(tp: &TestPlane) -> Vec<testplane::RequestRecord> {
    tp.requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.starts_with(&format!("/api/v1/nodes/{NODE}")))
        .collect()
}

/// (a) and L9. The Node says 127.0.0.2, `--node-ip` says 127.0.0.1. Before, any failed Node
/// read (a 5xx, a 429, a 401, a timeout) fell back to the settings: a CSR for 127.0.0.1,
/// approved by the approver, then one for 127.0.0.2 again a minute later — two serving
/// certificates per API blip, one of them without the Node's address. Now only a Node that
/// does not exist falls back; a failed read keeps what is served, or waits while nothing is.
/// And every Node read is answered from the watch cache (`resourceVersion=0`), not etcd.
#[tokio::test(start_paused = true)]
async fn a_failed_node_read_never_changes_the_serving_sans() {
    clock::step_for_tests(0);
    let (lines, _guard) = Lines::capture();
    let _tick = metronome();
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(3600))
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    tp.put_node(&node_with(NODE, &["127.0.0.2"]));
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings_in(dir.path(), NODE);
    settings.rotate_server_certificates = true;
    settings.node_ips = vec![ip("127.0.0.1")];
    let health = Health::new(false);
    // The client identity is in place (as the agent has it before this loop starts).
    health.update(|h| {
        h.bootstrap = State::Installed;
        h.cert = Some(CertSummary {
            serial: "01".into(),
            not_after: clock::now() + Duration::from_secs(3600),
            rotate_at: None,
        })
    });
    let (_clients_tx, clients) = watch::channel(node_client(&tp, NODE));
    let (trigger, shutdown) = shutdown::channel();

    // The API fails from the start: no serving certificate yet, and no CSR for the
    // settings' SANs either; STATUS= says what it waits for.
    tp.faults().fail_always(Some(503));
    let serving = tokio::spawn(
        Serving {
            settings,
            health: health.clone(),
            clients,
            ca_pem: tp.ca_pem().into_bytes(),
            detected: Vec::new(),
        }
        .run(shutdown),
    );
    tokio::time::sleep(5 * MINUTE).await;
    let posts = tp.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 0, "a CSR filed without the Node's addresses");
    let status = health.snapshot().status_line(clock::now());
    assert!(
        status.contains("serving cert: retrying in ")
            && status.contains("cannot read Node srv-a for its addresses"),
        "{status}"
    );
    tp.faults().fail_always(None);
    until(5 * MINUTE, "the first serving certificate", || {
        health.snapshot().serving_cert.is_some()
    })
    .await;
    let first = health.snapshot().serving_cert.unwrap().serial;
    assert_eq!(serving_csrs(&tp), 1);

    // One failed Node read each: a 5xx, a 401, a 429, a timeout.
    let failed_reads = |lines: &Lines| {
        lines
            .all()
            .iter()
            .filter(|l| l.contains("Node lookup for the serving certificate's addresses failed"))
            .count()
    };
    for blip in ["503", "401", "429", "timeout"] {
        let before = failed_reads(&lines);
        match blip {
            "503" => tp.faults().fail_next(1, 503),
            "401" => tp.faults().fail_next(1, 401),
            "429" => tp.faults().throttle_next(1, Duration::from_secs(1)),
            _ => tp.faults().delay(Duration::from_secs(15)),
        }
        until(2 * MINUTE, "the failed Node read", || {
            failed_reads(&lines) > before
        })
        .await;
        tp.faults().delay(Duration::ZERO);
        tokio::time::sleep(3 * MINUTE).await;
        assert_eq!(
            serving_csrs(&tp),
            1,
            "a serving CSR after a Node read that failed with {blip}"
        );
        let now = health.snapshot().serving_cert.unwrap().serial;
        assert_eq!(now, first, "the serving certificate changed after a {blip}");
    }
    assert!(
        !lines.all().iter().any(|l| l.contains("addresses changed")),
        "{:#?}",
        lines.all()
    );

    // L9: every read of the Node named the watch cache.
    let reads = node_reads(&tp);
    assert!(reads.len() >= 10, "{} Node reads", reads.len());
    for r in &reads {
        assert!(
            r.path.ends_with("?resourceVersion=0"),
            "a Node read from etcd: {}",
            r.path
        );
    }
    trigger.fire();
    serving.await.unwrap();
}

/// The loop's step before a pass, without timers or a server round trip: a Node read in,
/// what to do out — file a CSR for the Node's addresses, wait out a back-off, sleep until
/// the rotation deadline, or wait for the next address check after a failed read.
#[tokio::test]
async fn plan_decides_from_the_node_read_the_certificate_and_the_back_off() {
    // A subscriber of its own: tracing caches a callsite's interest when it is first hit,
    // and the other tests here wait for these very log lines.
    let (lines, _guard) = Lines::capture();
    let tp = TestPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings_in(dir.path(), NODE);
    settings.rotate_server_certificates = true;
    let (_tx, clients) = watch::channel(node_client(&tp, NODE));
    let serving = Serving {
        settings: settings.clone(),
        health: Health::new(false),
        clients,
        ca_pem: tp.ca_pem().into_bytes(),
        detected: vec![],
    };
    let now = clock::now();
    let mono = Instant::now();
    let mut state = Progress {
        current: None,
        retries: Retries::new(&settings),
        not_before: mono,
        pending_since: None,
        node_failing: false,
    };
    let node = || Ok(Some(node_with(NODE, &["10.0.0.7"])));

    // No certificate: a CSR for what the Node says, now.
    let Next::Issue(sans) = serving.plan(&mut state, node(), now, mono) else {
        panic!("no CSR without a certificate");
    };
    assert_eq!(sans.ips, [ip("10.0.0.7")]);

    // A back-off in force: sleep until it ends.
    state.not_before = mono + Duration::from_secs(30);
    assert_eq!(
        serving.plan(&mut state, node(), now, mono),
        Next::Sleep(Duration::from_secs(30))
    );
    state.not_before = mono;

    // A certificate for those SANs: sleep until its deadline (at most the address check),
    // and a CSR once the deadline has passed.
    let info = |sans: Sans| CertInfo {
        serial: "0a".into(),
        subject_cn: format!("system:node:{NODE}"),
        subject_o: vec!["system:nodes".into()],
        issuer: "CN=kubernetes".into(),
        not_before: now - Duration::from_secs(60),
        not_after: now + Duration::from_secs(3600),
        spki_der: vec![],
        client_auth: false,
        server_auth: true,
        sans,
    };
    state.current = Some(Current {
        info: info(sans.clone()),
        rotate_at: now + Duration::from_secs(20),
    });
    assert_eq!(
        serving.plan(&mut state, node(), now, mono),
        Next::Sleep(Duration::from_secs(20))
    );
    assert_eq!(
        serving.plan(&mut state, node(), now + Duration::from_secs(20), mono),
        Next::Issue(sans.clone())
    );

    // The Node's address changed: a new CSR at once, whatever the deadline.
    let moved = || Ok(Some(node_with(NODE, &["10.0.0.8"])));
    assert!(matches!(
        serving.plan(&mut state, moved(), now, mono),
        Next::Issue(s) if s.ips == [ip("10.0.0.8")]
    ));

    // A failed read keeps the certificate's SANs (its deadline still holds) and marks the
    // streak, so the warning is logged once.
    let failed = || {
        Err(ReadFailed {
            reason: "500".into(),
            check: CheckId::ServerReachable,
        })
    };
    assert_eq!(
        serving.plan(&mut state, failed(), now, mono),
        Next::Sleep(Duration::from_secs(20))
    );
    assert!(state.node_failing);
    assert_eq!(
        lines
            .all()
            .iter()
            .filter(|l| l.contains("cannot read Node"))
            .count(),
        1,
        "{:?}",
        lines.all()
    );

    // With no certificate, a failed read files nothing: the next address check.
    state.current = None;
    assert_eq!(
        serving.plan(&mut state, failed(), now, mono),
        Next::Sleep(ADDRESS_CHECK)
    );
}
