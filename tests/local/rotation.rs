//! Client certificate rotation with short signer lifetimes (seconds), against the testplane.

use crate::support;

use std::time::{Duration, SystemTime};

use support::{wait_event, Agent, NodeDir};
use testplane::{Approval, Event, TestPlane};

async fn plane(ttl_secs: u64) -> TestPlane {
    TestPlane::builder()
        .cert_ttl(Duration::from_secs(ttl_secs))
        .allow_short_expiration(true)
        .start()
        .await
        .expect("start testplane")
}

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    // A 250 ms Lease cadence is under the 1 s floor: the test switch allows it.
    a.push("--test-short-lease-interval".into());
    a.extend(
        ["--lease-renew-interval", "250ms", "--lease-duration", "1s"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    a
}

/// The next CSR created, with its requester and when it arrived.
async fn next_csr(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
) -> (String, String, SystemTime) {
    wait_event(events, |e| match e {
        Event::CsrCreated { name, user, .. } => {
            Some((name.clone(), user.clone(), testplane::wall_now()))
        }
        _ => None,
    })
    .await
}

async fn next_issued(events: &mut tokio::sync::broadcast::Receiver<Event>) -> SystemTime {
    wait_event(events, |e| match e {
        Event::CsrIssued { not_after, .. } => Some(*not_after),
        _ => None,
    })
    .await
}

/// The validity window of the certificate bootlet has installed now.
fn window(node: &NodeDir) -> (SystemTime, SystemTime) {
    let pem = std::fs::read_to_string(node.current()).unwrap();
    let chain = bootlet::pki::parse_cert_chain(&pem).unwrap();
    (chain[0].0.not_before, chain[0].0.not_after)
}

/// Where `t` falls in the window, as a fraction of notBefore..notAfter (the contract's
/// definition of the lifetime).
fn fraction_at((not_before, not_after): (SystemTime, SystemTime), t: SystemTime) -> f64 {
    let lifetime = not_after.duration_since(not_before).unwrap().as_secs_f64();
    t.duration_since(not_before).unwrap().as_secs_f64() / lifetime
}

fn spki_of(path: &std::path::Path) -> Vec<u8> {
    let pem = std::fs::read_to_string(path).unwrap();
    let chain = bootlet::pki::parse_cert_chain(&pem).unwrap();
    chain[0].0.spki_der.clone()
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn rotates_at_75_percent_through_the_client_certificate_with_a_new_key() {
    let tp = plane(8).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "rot", &["--rotation-jitter", "0"]));
    let (_, first_user, _) = next_csr(&mut events).await;
    assert!(first_user.starts_with("system:bootstrap:"), "{first_user}");
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate installed").await;
    let first = window(&node);
    let old_key = spki_of(&node.current());
    let kc = support::path(&node.kubeconfig);
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok, "before: {out}");

    let (_, user, at) = next_csr(&mut events).await;
    assert_eq!(
        user, "system:node:rot",
        "the rotation CSR is authenticated by the client certificate"
    );
    let f = fraction_at(first, at);
    let lifetime = first.1.duration_since(first.0).unwrap().as_secs_f64();
    assert!(
        (f - 0.75).abs() * lifetime <= 1.0,
        "rotated at {f:.3} of the lifetime\n{}",
        agent.log()
    );
    // kubectl keeps working while the new certificate is issued and installed.
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok, "during: {out}");
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate rotated").await;
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok, "after: {out}");
    assert_ne!(spki_of(&node.current()), old_key, "a new key");

    // The Lease never missed an interval across the rotation.
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let renewals: Vec<SystemTime> = tp
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.ends_with("/leases/rot") && r.status == 200)
        .map(|r| r.at)
        .collect();
    assert!(renewals.len() >= 10, "{} renewals\n{log}", renewals.len());
    for w in renewals.windows(2) {
        let gap = w[1].duration_since(w[0]).unwrap();
        assert!(gap < Duration::from_millis(250 + 250), "lease gap {gap:?}");
    }
    // The previous certificate file is still there.
    let files = pem_files(&node);
    assert_eq!(files.len(), 2, "{files:?}");
}

fn pem_files(node: &NodeDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&node.cert_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kubelet-client-2"))
        .collect();
    v.sort();
    v
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn default_jitter_rotates_between_70_and_80_percent() {
    let tp = plane(10).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "jit", &[]));
    next_csr(&mut events).await;
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate installed").await;
    let first = window(&node);
    let (_, _, at) = next_csr(&mut events).await;
    let f = fraction_at(first, at);
    assert!(
        (0.70..=0.81).contains(&f),
        "rotated at {f:.3}\n{}",
        agent.log()
    );
    let line = agent.wait_for_log("rotation scheduled").await;
    assert!(line.contains("rotate_at"), "{line}");
    agent.terminate().await;
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_restart_in_the_middle_of_a_rotation_finds_the_same_csr() {
    let tp = plane(6).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "crash", &[]));
    next_csr(&mut events).await;
    next_issued(&mut events).await;
    tp.set_approval(Approval::Manual);
    let (name, user, _) = next_csr(&mut events).await;
    assert_eq!(user, "system:node:crash");
    agent.kill().await;

    let agent = Agent::spawn(&args(&node, "crash", &[]));
    agent.wait_for_log("adopted the CSR").await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate rotated").await;
    agent.terminate().await;
    assert_eq!(
        tp.csrs().len(),
        2,
        "bootstrap CSR + one rotation CSR, never a second"
    );
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn an_expired_certificate_falls_back_to_bootstrap() {
    let tp = plane(4).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "expiry", &["--csr-timeout", "10m"]));
    next_csr(&mut events).await;
    next_issued(&mut events).await;
    // The rotation CSR is never approved; the certificate runs out.
    tp.set_approval(Approval::Manual);
    let (_, user, _) = next_csr(&mut events).await;
    assert_eq!(user, "system:node:expiry");
    agent
        .wait_for_log("falling back to the bootstrap kubeconfig")
        .await;
    let (name, user, _) = next_csr(&mut events).await;
    assert!(
        user.starts_with("system:bootstrap:"),
        "fallback CSR by the token: {user}"
    );
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate rotated").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("falling back")),
        "{log}"
    );
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_denied_rotation_keeps_the_current_certificate_in_use() {
    let tp = plane(8).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "denied", &[]));
    next_csr(&mut events).await;
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate installed").await;
    let before = std::fs::read_link(node.current()).unwrap();
    tp.set_approval(Approval::Deny {
        reason: "NoRotation".into(),
    });
    next_csr(&mut events).await;
    agent
        .wait_for_log("rotation failed; the current certificate stays in use")
        .await;
    // The Lease goes on with the old certificate.
    let renewed_after = testplane::wall_now();
    wait_event(&mut events, |e| {
        matches!(e, Event::LeaseRenewed { name, .. } if name == "denied").then_some(())
    })
    .await;
    assert!(testplane::wall_now() >= renewed_after);
    assert_eq!(std::fs::read_link(node.current()).unwrap(), before);
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(
        tp.csrs().len() <= 4,
        "backed off, no tight loop: {}",
        tp.csrs().len()
    );
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn an_outside_replacement_is_adopted() {
    // 40 s certificates: bootlet looks for outside changes every 2 s (a twentieth).
    let tp = plane(40).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "outside", &[]));
    agent.wait_for_log("client certificate installed").await;

    // An admin drops in a certificate of their own (valid, same node) and repoints the link.
    let (cert, key) = tp
        .client_cert("system:node:outside", &["system:nodes"])
        .unwrap();
    let file = node.cert_dir.join("kubelet-client-admin.pem");
    std::fs::write(&file, format!("{cert}{key}")).unwrap();
    let tmp = node.cert_dir.join("current.tmp");
    std::os::unix::fs::symlink(&file, &tmp).unwrap();
    std::fs::rename(&tmp, node.current()).unwrap();
    agent
        .wait_for_log("adopting a client certificate installed outside bootlet")
        .await;
    agent.terminate().await;
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn old_certificate_files_are_pruned_beyond_keep_certificates() {
    let tp = plane(2).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "prune",
        &["--keep-certificates", "2", "--rotation-jitter", "0"],
    ));
    agent
        .wait_for_log_count("client certificate rotated", 3)
        .await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let files = pem_files(&node);
    assert_eq!(files.len(), 2, "{files:?}");
    let current = std::fs::read_link(node.current()).unwrap();
    assert!(
        files.iter().any(|f| current.ends_with(f)),
        "the current file is kept"
    );
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_server_clock_far_from_ours_is_reported_once() {
    let tp = plane(3600).await;
    tp.faults().skew_date(600);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "skewed", &[]));
    let line = agent.wait_for_log("clock is").await;
    assert!(
        line.contains("ahead of this node's") && line.contains("timedatectl"),
        "{line}"
    );
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    // Once per client (the bootstrap client and then the certificate's client), not per request.
    assert!(log.matches("ahead of this node's").count() <= 3, "{log}");
}

/// Regression: once the certificate expired with rotation denied and the token dead, the
/// fallback ran every second (`max(remaining/10, 1 s)` is 1 s at zero): measured 29 CSR
/// requests and 61 warning-or-error lines in the 30 s after expiry. Now the contract's
/// back-off (at least 1 min) applies after any refusal and after expiry.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn after_expiry_with_rotation_denied_and_a_dead_token_the_agent_backs_off() {
    let tp = plane(6).await;
    let token = tp.create_token(Some(Duration::from_secs(3600)));
    let node = NodeDir::new(&tp.kubeconfig_for_token(&token));
    let mut events = tp.events();
    let mut a = node.args("expired-denied");
    a.extend(["--lease-renew-interval", "10s"].map(String::from));
    let agent = Agent::spawn(&a);
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate installed").await;
    let (_, not_after) = window(&node);
    tp.set_approval(Approval::Deny {
        reason: "NoRenewals".into(),
    });
    tp.delete_token(token.split('.').next().unwrap()).unwrap();
    agent
        .wait_for_log("rotation failed; the current certificate stays in use")
        .await;

    // The window: the 30 s after expiry.
    let until_expiry = not_after
        .duration_since(testplane::wall_now())
        .unwrap_or_default();
    tokio::time::sleep(until_expiry).await;
    let (requests, lines) = (tp.requests().len(), agent.log().lines().count());
    agent
        .wait_for_log("falling back to the bootstrap kubeconfig")
        .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let window: Vec<_> = tp.requests().into_iter().skip(requests).collect();
    let is_csr = |r: &&testplane::RequestRecord| r.path.contains("certificatesigningrequests");
    let csr_posts = window
        .iter()
        .filter(is_csr)
        .filter(|r| r.method == "POST")
        .count();
    let other = window
        .iter()
        .filter(|r| !r.path.contains("/leases/") && !r.path.contains("/leases?"))
        .count();
    let leases = window.len() - other;
    let log = agent.log();
    let loud: Vec<&str> = log
        .lines()
        .skip(lines)
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        csr_posts <= 1,
        "{csr_posts} CSR requests in 30 s:\n{window:#?}"
    );
    assert!(
        other <= 2,
        "{other} non-Lease requests in 30 s:\n{window:#?}"
    );
    assert!(leases <= 4, "{leases} Lease requests at a 10 s interval");
    assert!(
        loud.len() <= 4,
        "{} warning/error lines in 30 s:\n{}",
        loud.len(),
        loud.join("\n")
    );
    eprintln!(
        "30 s after expiry: {csr_posts} CSR POSTs, {other} non-Lease requests, {leases} Lease requests, {} warning/error lines",
        loud.len()
    );
    let retry = log
        .lines()
        .rev()
        .find(|l| l.contains("no usable identity"))
        .expect("the failed fallback is reported");
    let retry_in = retry
        .split("retry_in=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or_default();
    assert!(
        retry_in.contains('m') || retry_in.contains('h'),
        "the next attempt is minutes away, not seconds: {retry}"
    );
    assert_eq!(
        tp.csrs().len(),
        2,
        "the bootstrap CSR and one denied rotation CSR"
    );
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

/// Regression: a rotation that timed out waiting for approval threw its key away, so every
/// retry filed another CSR. Now the key stays and the next attempt adopts the same CSR.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_rotation_that_times_out_keeps_its_key_and_adopts_the_same_csr() {
    // 20 s: the retry after the 1 s timeout comes ~1 s later, well before expiry (at 8 s a
    // loaded machine could push it past expiry, where the bootstrap fallback takes over).
    let tp = plane(20).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "timeout", &["--csr-timeout", "1s"]));
    next_csr(&mut events).await;
    next_issued(&mut events).await;
    tp.set_approval(Approval::Manual);
    let (name, user, _) = next_csr(&mut events).await;
    assert_eq!(user, "system:node:timeout");
    agent.wait_for_log("was not approved within").await;
    agent.wait_for_log("adopted the CSR filed earlier").await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate rotated").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(
        tp.csrs().len(),
        2,
        "bootstrap CSR + one rotation CSR, adopted after its timeout"
    );
}

/// M5: the clock jumps a day ahead (past the certificate's expiry) and is corrected. The
/// fallback to bootstrap fails (the token is gone, as kubeadm's are after a day). Before,
/// its retry was a wall-clock time a day ahead and `fell_back` never cleared: after the
/// correction neither the rotation nor the expiry fallback came for a day, and the
/// certificate expired with nothing happening. Now the retry is monotonic, `fell_back`
/// clears while the certificate is valid, and the rotation comes at its deadline.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_clock_step_past_expiry_and_back_postpones_nothing() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(20))
        .allow_short_expiration(true)
        .backdate(Duration::ZERO)
        .start()
        .await
        .expect("start testplane");
    let token = tp.create_token(Some(Duration::from_secs(3600)));
    let node = NodeDir::new(&tp.kubeconfig_for_token(&token));
    let offset = node.tmp.path().join("clock-offset");
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "stepped",
        &[
            "--rotation-jitter",
            "0",
            "--csr-backoff-min",
            "2s",
            "--csr-backoff-max",
            "4s",
            "--test-clock-offset-file",
            offset.to_str().unwrap(),
        ],
    ));
    next_issued(&mut events).await;
    agent
        .wait_for_log("client certificate rotation scheduled")
        .await;
    let first = window(&node);
    tp.delete_token(token.split('.').next().unwrap()).unwrap();

    // A day ahead: expired by the clock, the fallback to bootstrap fails.
    std::fs::write(&offset, "86400").unwrap();
    agent.wait_for_log("expired before it was rotated").await;
    agent.wait_for_log("no usable identity").await;
    // Corrected.
    std::fs::write(&offset, "0").unwrap();
    agent.wait_for_log("is valid again").await;

    // The rotation, through the certificate, at its deadline (75 % = 15 s), before expiry.
    let (_, user, at) = next_csr(&mut events).await;
    assert_eq!(user, "system:node:stepped", "{}", agent.log());
    let f = fraction_at(first, at);
    assert!(
        (0.70..1.0).contains(&f),
        "rotated at {f:.2} of the lifetime\n{}",
        agent.log()
    );
    next_issued(&mut events).await;
    agent.wait_for_log("client certificate rotated").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}
