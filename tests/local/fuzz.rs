//! Fuzz harnesses for the parsers that read untrusted input, on the stable toolchain
//! (engine: tests/local/fuzz/engine.rs; one module per target): the config file, kubeconfigs,
//! PEM chains and their verification, and the watch stream decoder. `cargo test` runs a
//! few thousand cases per target from a fixed seed; `bench/fuzz.sh` runs each for minutes
//! (`FUZZ_SECONDS`, `FUZZ_SEED`). Each target checks invariants, not just "no panic":
//! errors are one clean line naming the file, nothing secret reaches a message, what is
//! accepted is sound. Findings that need the whole agent are regression-tested below.

pub mod cluster;
pub mod config;
pub mod engine;
pub mod kubeconfig;
pub mod pem;
pub mod watch;
use crate::support;

use std::time::Duration;

use bootlet::pki::{canonical_chain_pem, split_pem};
use engine::{fuzz, seed_from_env, Budget, Target};
use k8s_openapi::ByteString;
use x509_parser::prelude::{FromDer as _, X509CertificationRequest};

/// Cases per target in `cargo test` (debug build): all four in about 2 s.
const TEST_CASES: u64 = 3000;
/// The seed `cargo test` uses, so a failure there reproduces.
const TEST_SEED: u64 = 0x0b00_7137;

fn run_target(t: &Target<'_>) {
    let report = fuzz(t, Budget::from_env(TEST_CASES), seed_from_env(TEST_SEED));
    report.assert_clean();
}

#[test]
fn fuzz_config_parser() {
    config::run();
}

#[test]
fn fuzz_kubeconfig_parser() {
    kubeconfig::run();
}

#[test]
fn fuzz_pem_and_verification() {
    pem::run();
}

#[test]
fn fuzz_watch_stream_decoder() {
    watch::run();
}

// === regressions of findings that need the whole agent ===

/// Found by `fuzz_pem_and_verification`: the chain was verified as x509-parser reads it,
/// but the server's whole text was installed, and read back on restart by `split_pem`,
/// which reads PEM differently: here an unterminated block (mid-line: x509-parser skips
/// it) after the certificate hid the
/// key, so every restart failed ("holds no PRIVATE KEY block"). Now the verified
/// certificates are installed, re-encoded, and nothing else.
#[tokio::test]
async fn an_issued_chain_with_text_around_it_is_installed_as_verified() {
    use support::{wait_event, Agent, NodeDir};
    use testplane::{Event, Signer, TestPlane};

    let tp = TestPlane::builder()
        .signer(Signer::None)
        .start()
        .await
        .expect("start testplane");
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&node.args("junk-chain"));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    wait_event(&mut events, |e| {
        matches!(e, Event::CsrApproved { name: n } if *n == name).then_some(())
    })
    .await;

    // Sign by hand, as an outside signer would, and put text around the certificate.
    let mut csr = tp.csr(&name).unwrap();
    let request = x509_parser::pem::Pem::iter_from_buffer(&csr.spec.request.0)
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let (_, req) = X509CertificationRequest::from_der(&request).unwrap();
    let spki = req.certification_request_info.subject_pki.raw;
    let now = testplane::wall_now();
    let cert = tp
        .sign_client_cert(
            spki,
            "system:node:junk-chain",
            &["system:nodes"],
            now - Duration::from_secs(60),
            now + Duration::from_secs(3600),
            false,
        )
        .unwrap();
    let served = format!("signed by hand\n{cert}see -----BEGIN SIGNATURE----- below\n");
    csr.status.get_or_insert_with(Default::default).certificate =
        Some(ByteString(served.into_bytes()));
    let admin = node.tmp.path().join("admin.conf");
    std::fs::write(&admin, tp.admin_kubeconfig()).unwrap();
    let body = node.tmp.path().join("status.json");
    std::fs::write(&body, serde_json::to_vec(&csr).unwrap()).unwrap();
    let status_path =
        format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status");
    let (ok, out) = support::run(
        "kubectl",
        &[
            "--kubeconfig",
            &support::path(&admin),
            "replace",
            "--raw",
            &status_path,
            "-f",
            &support::path(&body),
        ],
    )
    .await;
    assert!(ok, "kubectl replace --raw: {out}");

    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    // A restart reuses it; the kubelet's view (Go, through kubectl) reads it too.
    let agent = Agent::spawn(&node.args("junk-chain"));
    agent.wait_for_log("no CSR needed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let installed = std::fs::read_to_string(node.current()).unwrap();
    let (chain, key) = split_pem(&installed);
    assert_eq!(
        chain,
        canonical_chain_pem(&cert).unwrap(),
        "only the verified certificate"
    );
    assert!(
        key.is_some() && !installed.contains("signed by hand"),
        "{installed}"
    );

    let (ok, out) = support::run(
        "kubectl",
        &[
            "--kubeconfig",
            &support::path(&node.kubeconfig),
            "get",
            "--raw",
            "/version",
        ],
    )
    .await;
    assert!(ok, "kubectl with the kubelet kubeconfig: {out}");
}
