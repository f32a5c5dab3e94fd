//! A kubelet-client signer with its own CA (kube-controller-manager's
//! `--cluster-signing-kubelet-client-{cert,key}-file`: k3s, RKE2, Gardener, a CA rotation):
//! a client certificate that does not chain to the kubeconfig's CA is installed once a
//! SelfSubjectReview over a fresh connection with it answers `system:node:NAME`, and
//! refused (back-off, nothing written) when the API server does not accept it. The serving
//! certificate still has to chain to the cluster CA.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use bootlet::pki::{parse_cert_chain, split_pem};
use support::{plane, wait_event, Agent, NodeDir};
use testplane::{Approval, Event, RequestRecord, Signer, TestPlane};

const HOUR: Duration = Duration::from_secs(3600);
const REVIEW: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(
        ["--lease-renew-interval", "1s", "--lease-duration", "5s"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    a
}

/// Every TLS handshake's client certificate serial, by connection, from now on.
fn record_handshakes(tp: &TestPlane) -> std::sync::Arc<std::sync::Mutex<HashMap<u64, String>>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashMap::new()));
    let mut events = tp.events();
    let store = seen.clone();
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            if let Event::TlsHandshake {
                conn,
                client_serial: Some(serial),
                ..
            } = e
            {
                store.lock().unwrap().insert(conn, serial);
            }
        }
    });
    seen
}

fn reviews(tp: &TestPlane) -> Vec<RequestRecord> {
    tp.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == REVIEW)
        .collect()
}

/// The installed kubelet-client file: (serials of its chain, issuer DNs, has a key after).
fn installed(node: &NodeDir) -> (Vec<String>, Vec<String>, String) {
    let text = std::fs::read_to_string(node.current()).unwrap();
    let (chain, key) = split_pem(&text);
    assert!(key.is_some(), "the file holds the key");
    let key_at = text.find("PRIVATE KEY").unwrap();
    let last_cert = text.rfind("END CERTIFICATE").unwrap();
    assert!(last_cert < key_at, "chain first, then the key");
    let certs = parse_cert_chain(&chain).unwrap();
    (
        certs.iter().map(|(i, _)| i.serial.clone()).collect(),
        certs.iter().map(|(i, _)| i.issuer.clone()).collect(),
        chain,
    )
}

#[tokio::test]
async fn a_client_certificate_from_a_second_ca_the_server_trusts_is_installed_after_a_self_subject_review(
) {
    for chain in [false, true] {
        let tp = plane(HOUR).await;
        tp.set_signer(Signer::SecondCa { chain });
        let handshakes = record_handshakes(&tp);
        let mut events = tp.events();
        let node = NodeDir::new(&tp.bootstrap_kubeconfig());
        let agent = Agent::spawn(&args(&node, "node-k3s", &[]));
        let line = agent.wait_for_log("client certificate installed").await;
        let (serials, issuers, chain_pem) = installed(&node);
        assert!(line.contains(&serials[0]), "{line}");
        assert_eq!(issuers[0], "CN=kubelet-client-ca", "chain {chain}");
        // What is written is the leaf and, when the signer sent it, the CA that signed it:
        // the chain then the key, nothing else.
        assert_eq!(serials.len(), if chain { 2 } else { 1 }, "chain {chain}");
        if chain {
            let written = parse_cert_chain(&chain_pem).unwrap();
            let second = parse_cert_chain(&tp.second_ca_pem()).unwrap();
            assert_eq!(written[1].1, second[0].1, "the signer's CA after the leaf");
        }
        // The proof: one SelfSubjectReview, answered for the node, on a connection whose
        // handshake presented the new certificate, before the file was written.
        let proofs = reviews(&tp);
        assert_eq!(proofs.len(), 1, "{proofs:#?}\n{}", agent.log());
        let proof = &proofs[0];
        assert_eq!(
            (proof.user.as_str(), proof.status),
            ("system:node:node-k3s", 201)
        );
        assert_eq!(
            handshakes.lock().unwrap().get(&proof.conn),
            Some(&serials[0]),
            "the review used a fresh handshake with the new certificate"
        );
        let accepted = agent.wait_for_log("the API server accepts it").await;
        assert!(accepted.contains("CN=kubelet-client-ca"), "{accepted}");
        let log = agent.log();
        let at = |needle: &str| log.lines().position(|l| l.contains(needle)).unwrap();
        assert!(
            at("the API server accepts it") < at("client certificate installed"),
            "proved before installing:\n{log}"
        );
        // The kubeconfig still trusts only the cluster CA for the server.
        let access = bootlet::api::kubeconfig::read(&node.kubeconfig, false).unwrap();
        assert_eq!(
            access.ca_pem,
            tp.ca_pem().into_bytes(),
            "the second CA is never a server trust anchor"
        );
        // And it works: the Lease is renewed with it.
        wait_event(&mut events, |e| match e {
            Event::LeaseRenewed { user, .. } | Event::LeaseCreated { user, .. }
                if user == "system:node:node-k3s" =>
            {
                Some(())
            }
            _ => None,
        })
        .await;
        let (status, log) = agent.terminate().await;
        assert!(status.success());
        assert!(!log.contains("refused the certificate"), "{log}");

        // A restart reuses it (proved again, no CSR).
        let agent = Agent::spawn(&args(&node, "node-k3s", &[]));
        agent
            .wait_for_log("reusing the valid client certificate")
            .await;
        let (status, _) = agent.terminate().await;
        assert!(status.success());
        assert_eq!(tp.csrs().len(), 1, "no second CSR");
        assert_eq!(reviews(&tp).len(), 2, "the restart proved it once");
        assert!(tp.unexpected_requests().is_empty());
    }
}

#[tokio::test]
async fn a_rotation_to_a_second_ca_certificate_is_proved_with_the_new_one() {
    let tp = plane(Duration::from_secs(12)).await;
    tp.set_signer(Signer::SecondCa { chain: false });
    let handshakes = record_handshakes(&tp);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "node-rot", &["--rotation-jitter", "0"]));
    agent.wait_for_log("client certificate installed").await;
    let first = installed(&node).0[0].clone();
    let line = agent.wait_for_log("client certificate rotated").await;
    let second = installed(&node).0[0].clone();
    assert!(line.contains(&second) && second != first, "{line}");
    let proofs = reviews(&tp);
    assert_eq!(proofs.len(), 2, "{proofs:#?}");
    let serial_of = |r: &RequestRecord| handshakes.lock().unwrap().get(&r.conn).cloned();
    assert_eq!(serial_of(&proofs[0]), Some(first));
    assert_eq!(
        serial_of(&proofs[1]),
        Some(second),
        "the rotation proved the new certificate, not the one in use"
    );
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 2);
}

#[tokio::test]
async fn a_client_certificate_from_a_ca_the_server_does_not_trust_is_still_refused_with_the_back_off(
) {
    let tp = plane(HOUR).await;
    tp.set_signer(Signer::WrongCa);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-rogue",
        &["--csr-backoff-min", "1s", "--csr-backoff-max", "2s"],
    ));
    let line = agent
        .wait_for_log("refused the certificate issued for CSR")
        .await;
    assert!(
        line.contains("CN=rogue-ca")
            && line.contains("does not chain to the kubeconfig CA")
            && line.contains("HTTP 401"),
        "a clear reason: {line}"
    );
    // A window under the persistent fault: the contract back-off (here 1 s doubling to
    // 2 s), not a loop.
    let (csrs, proofs) = (tp.csrs().len(), reviews(&tp).len());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (csrs, proofs) = (tp.csrs().len() - csrs, reviews(&tp).len() - proofs);
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert!(
        (1..=4).contains(&csrs) && proofs <= csrs + 1,
        "{csrs} CSRs and {proofs} reviews in 6 s:\n{log}"
    );
    assert!(reviews(&tp).iter().all(|r| r.status == 401));
    assert!(!node.current().exists(), "nothing written");
    assert!(!node.kubeconfig.exists());
    let refusals = log
        .lines()
        .filter(|l| l.contains("refused the certificate"))
        .count();
    assert!(
        refusals <= csrs + 1,
        "{refusals} refusal lines for {csrs} CSRs"
    );
}

#[tokio::test]
async fn a_serving_certificate_from_another_ca_is_refused() {
    let tp = TestPlane::builder()
        .cert_ttl(HOUR)
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    tp.set_signer(Signer::SecondCa { chain: false });
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-srv",
        &[
            "--rotate-server-certificates",
            "true",
            "--node-ip",
            "127.0.0.1",
            "--csr-backoff-min",
            "30s",
        ],
    ));
    agent.wait_for_log("client certificate installed").await;
    let line = agent
        .wait_for_log("refused the certificate issued for CSR")
        .await;
    assert!(
        line.contains("serving") || line.contains("kubelet-serving"),
        "{line}"
    );
    assert!(
        line.contains("does not chain to the kubeconfig CA"),
        "{line}"
    );
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    let serving = node.cert_dir.join("kubelet-server-current.pem");
    if let Ok(text) = std::fs::read_to_string(&serving) {
        let (chain, _) = split_pem(&text);
        let leaf = &parse_cert_chain(&chain).unwrap()[0].0;
        assert_ne!(leaf.issuer, "CN=kubelet-client-ca", "not installed");
    }
}

/// The API server cannot answer the proof (503s): nothing is written, the pending key and
/// its CSR are kept, and once it answers the same CSR is adopted and proved.
#[tokio::test]
async fn a_proof_the_server_cannot_answer_keeps_the_csr_for_the_next_attempt() {
    let tp = support::plane_approving(HOUR, Approval::Manual).await;
    tp.set_signer(Signer::SecondCa { chain: false });
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-wait",
        &[
            "--csr-timeout",
            "3s",
            "--csr-backoff-min",
            "1s",
            "--csr-backoff-max",
            "2s",
        ],
    ));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    // Once the agent watches its CSR, every new request fails; the open watch still
    // carries the approval and the certificate.
    let watching = || {
        tp.requests().iter().any(|r| {
            r.path.contains("certificatesigningrequests?") && r.path.contains("watch=true")
        })
    };
    tokio::time::timeout(support::WAIT, async {
        while !watching() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the agent watches its CSR");
    tp.faults().fail_always(Some(503));
    tp.approve(&name).unwrap();
    let line = agent.wait_for_log("could not be asked").await;
    assert!(
        line.contains(&name) && line.contains("CN=kubelet-client-ca"),
        "{line}"
    );
    assert!(!node.current().exists(), "nothing written");
    assert!(
        node.cert_dir.join("kubelet-client.key.tmp").exists(),
        "the pending key stays for the next attempt"
    );
    tp.faults().fail_always(None);
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 1, "the same CSR, adopted again:\n{log}");
    let proofs = reviews(&tp);
    assert!(
        proofs.iter().any(|r| r.status == 503) && proofs.last().map(|r| r.status) == Some(201),
        "{proofs:#?}"
    );
    assert!(log.contains("adopted the CSR filed earlier"), "{log}");
}

/// A restart proves an installed certificate from another CA again, with one request: no
/// answer (an outage at boot) → used all the same, without waiting; the API server
/// refuses it → not reused, bootstrap files a CSR.
#[tokio::test]
async fn a_restart_reuses_a_second_ca_certificate_through_an_outage_and_drops_one_the_server_refuses(
) {
    let tp = plane(HOUR).await;
    tp.set_signer(Signer::SecondCa { chain: false });
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "node-boot", &[]));
    agent.wait_for_log("client certificate installed").await;
    agent.terminate().await;
    tp.faults().fail_always(Some(503));
    let started = tokio::time::Instant::now();
    let agent = Agent::spawn(&args(&node, "node-boot", &[]));
    let line = agent.wait_for_log("cannot be asked now; using it").await;
    assert!(line.contains("CN=kubelet-client-ca"), "{line}");
    agent
        .wait_for_log("reusing the valid client certificate")
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "an outage at boot does not hold the certificate back: {:?}",
        started.elapsed()
    );
    agent.terminate().await;
    tp.faults().fail_always(None);
    assert_eq!(tp.csrs().len(), 1);

    // A certificate from a CA the server does not trust, left on disk.
    tp.set_signer(Signer::Normal);
    let stale = NodeDir::new(&tp.bootstrap_kubeconfig());
    let key = bootlet::pki::NodeKey::generate().unwrap();
    let now = testplane::wall_now();
    let pem = tp
        .sign_client_cert(
            &key.public_key_der(),
            "system:node:node-stale",
            &["system:nodes"],
            now - HOUR,
            now + HOUR,
            true,
        )
        .unwrap();
    bootlet::pki::files::CertDir::open(&stale.cert_dir)
        .unwrap()
        .install(&pem, &key.to_pem(), now)
        .unwrap();
    let agent = Agent::spawn(&args(&stale, "node-stale", &[]));
    let line = agent
        .wait_for_log("the current client certificate cannot be reused")
        .await;
    assert!(
        line.contains("CN=rogue-ca") && line.contains("HTTP 401"),
        "{line}"
    );
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 2);
    let (_, issuers, _) = installed(&stale);
    assert_eq!(issuers[0], "CN=kubernetes");
}

/// Only a 401 refuses a certificate: a SelfSubjectReview answered 403 (its authorization
/// trimmed: the server authenticated the certificate first) or 404 (no review API: a server
/// before 1.28, or turned off; bootlet then asks a SelfSubjectAccessReview, open to every
/// authenticated user) keeps a working certificate from another CA, at issuance and at
/// every restart, and `bootlet doctor` passes it.
#[tokio::test]
async fn a_review_answered_403_or_404_does_not_throw_away_a_working_certificate() {
    const ACCESS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    for (case, status) in [("forbidden", 403), ("absent", 404)] {
        let tp = plane(HOUR).await;
        tp.set_signer(Signer::SecondCa { chain: false });
        match status {
            403 => tp.delete_cluster_role_binding("system:basic-user").unwrap(),
            _ => tp.faults().unserve(REVIEW),
        }
        let name = format!("node-review-{case}");
        let node = NodeDir::new(&tp.bootstrap_kubeconfig());
        let agent = Agent::spawn(&args(&node, &name, &[]));
        agent.wait_for_log("client certificate installed").await;
        let (_, issuers, _) = installed(&node);
        assert_eq!(issuers[0], "CN=kubelet-client-ca", "{case}");
        let (exit, log) = agent.terminate().await;
        assert!(exit.success(), "{case}: {log}");
        assert!(log.contains("the API server accepts it: "), "{case}: {log}");

        let agent = Agent::spawn(&args(&node, &name, &[]));
        agent
            .wait_for_log("reusing the valid client certificate")
            .await;
        let (exit, log) = agent.terminate().await;
        assert!(exit.success(), "{case}: {log}");
        assert!(!log.contains("cannot be reused"), "{case}: {log}");
        assert_eq!(tp.csrs().len(), 1, "{case}: no second CSR");
        let user = format!("system:node:{name}");
        let proofs = reviews(&tp);
        assert_eq!(proofs.len(), 2, "{case}: {proofs:#?}");
        assert!(
            proofs.iter().all(|r| r.status == status && r.user == user),
            "{case}: {proofs:#?}"
        );
        let access: Vec<_> = tp
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == ACCESS)
            .collect();
        let fallback = if status == 404 { 2 } else { 0 };
        assert_eq!(access.len(), fallback, "{case}: {access:#?}");
        assert!(
            access.iter().all(|r| r.status == 201 && r.user == user),
            "{case}: {access:#?}"
        );

        // doctor proves it the same way (its flags: `run`'s without the subcommand), and
        // tests the client certificate, not the bootstrap token, as the daemon would use it.
        let run = support::doctor::doctor_json(&node.args(&name)[1..]).await;
        assert!(
            run.summary("authentication")
                .contains("the client certificate"),
            "{case}: {}",
            run.json
        );
        assert!(
            !run.json.to_string().contains("does not vouch"),
            "{case}: {}",
            run.json
        );
        if status == 404 {
            // With system:basic-user trimmed (403), authorization fails before it.
            assert_eq!(
                run.check("client-certificate")["status"],
                "pass",
                "{case}: {}",
                run.json
            );
            assert!(
                run.summary("client-certificate")
                    .contains("a SelfSubjectAccessReview with it is answered (201)"),
                "{case}: {}",
                run.json
            );
        }
        assert!(tp.unexpected_requests().is_empty(), "{case}");
    }
}
