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
