//! TLS bootstrap end to end: the real binary against the testplane over real TLS.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use support::{plane, plane_approving, wait_event, Agent, NodeDir};
use testplane::{Approval, Event, Signer};

const HOUR: Duration = Duration::from_secs(3600);

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The bootlet flags for a node that does not renew a Lease (bootstrap only).
fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(["--renew-lease".into(), "false".into()]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[tokio::test]
async fn fresh_bootstrap_writes_kubelet_files_that_real_peers_accept() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "node-a", &[]));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    assert!(name.starts_with("node-csr-"), "{name}");
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "exit {status:?}\n{log}");

    // Kubelet layout and modes.
    assert_eq!(mode(&node.cert_dir), 0o700);
    let target = std::fs::read_link(node.current()).unwrap();
    assert!(target.is_absolute(), "{target:?}");
    let file_name = target.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        file_name.starts_with("kubelet-client-20") && file_name.ends_with(".pem"),
        "{file_name}"
    );
    assert_eq!(mode(&target), 0o600);
    assert_eq!(mode(&node.kubeconfig), 0o600);
    assert!(!node.cert_dir.join("kubelet-client.key.tmp").exists());
    let pem = std::fs::read_to_string(node.current()).unwrap();
    assert!(pem.contains("BEGIN CERTIFICATE") && pem.contains("PRIVATE KEY"));

    // The written kubeconfig works with the real kubectl.
    let kc = support::path(&node.kubeconfig);
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok, "kubectl: {out}");
    assert!(out.contains("gitVersion"), "{out}");

    // openssl agrees on the subject and the chain.
    let cur = support::path(&node.current());
    let (ok, subject) = support::run("openssl", &["x509", "-noout", "-subject", "-in", &cur]).await;
    assert!(ok, "{subject}");
    assert!(
        subject.contains("system:nodes") && subject.contains("system:node:node-a"),
        "{subject}"
    );
    let ca = node.tmp.path().join("ca.crt");
    std::fs::write(&ca, tp.ca_pem()).unwrap();
    let (ok, out) =
        support::run("openssl", &["verify", "-CAfile", &support::path(&ca), &cur]).await;
    assert!(ok && out.contains("OK"), "{out}");

    // No secret in the log.
    let token = token_of(&tp.bootstrap_kubeconfig());
    assert!(!log.contains(token.split('.').nth(1).unwrap()));
    assert!(!log.contains("PRIVATE KEY") && !log.contains("BEGIN CERTIFICATE"));
}

fn token_of(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .expect("token in kubeconfig")
}

#[tokio::test]
async fn a_valid_certificate_is_reused_without_a_csr_even_with_a_dead_token() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "node-b", &[]));
    agent.wait_for_log("client certificate installed").await;
    agent.terminate().await;
    let before = std::fs::read_link(node.current()).unwrap();

    let token = token_of(&std::fs::read_to_string(&node.bootstrap).unwrap());
    tp.expire_token(token.split('.').next().unwrap()).unwrap();
    let csrs = tp.csrs().len();
    let agent = Agent::spawn(&args(&node, "node-b", &[]));
    agent.wait_for_log("no CSR needed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), csrs, "no new CSR");
    assert_eq!(std::fs::read_link(node.current()).unwrap(), before);
}

/// Regression: the SIGTERM handler used to be installed on the first poll of the signal
/// future, so a stop that arrived while bootstrap was finishing (reuse completes without
/// yielding) hit the default action and killed the process. Stop at the first log line,
/// several times: every run must exit 0.
#[tokio::test]
async fn a_stop_request_during_startup_exits_cleanly() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "node-s", &[]));
    agent.wait_for_log("client certificate installed").await;
    agent.terminate().await;
    for round in 0..8 {
        let agent = Agent::spawn(&args(&node, "node-s", &[]));
        agent.wait_for_log("no CSR needed").await;
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "round {round}: {status:?}\n{log}");
        assert!(
            log.contains("received SIGTERM; stopping"),
            "round {round}:\n{log}"
        );
    }
}

#[tokio::test]
async fn a_restart_while_pending_adopts_the_same_csr() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "node-c", &[]));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("waiting for approval").await;
    agent.kill().await;
    assert!(node.cert_dir.join("kubelet-client.key.tmp").exists());

    let agent = Agent::spawn(&args(&node, "node-c", &[]));
    agent.wait_for_log("adopted the CSR").await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 1, "exactly one CSR on the server");
}

#[tokio::test]
async fn a_denied_csr_backs_off_and_retries_with_a_fresh_key() {
    let tp = plane(HOUR).await;
    tp.set_approval(Approval::Deny {
        reason: "NotAllowed".into(),
    });
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-d",
        &["--csr-backoff-min", "1s", "--csr-backoff-max", "2s"],
    ));
    let line = agent.wait_for_log("was denied").await;
    assert!(
        line.contains("node-csr-") && line.contains("NotAllowed"),
        "{line}"
    );
    let start = tokio::time::Instant::now();
    // The next attempt files a CSR with a new key, so under a new name.
    tokio::time::timeout(support::WAIT, async {
        while tp.csrs().len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a second CSR after the back-off");
    assert!(
        start.elapsed() >= Duration::from_millis(700),
        "backed off before retrying"
    );
    let names: std::collections::BTreeSet<_> = tp
        .csrs()
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "fresh key, fresh name");
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert!(
        tp.csrs().len() <= 4,
        "no tight loop: {} CSRs\n{log}",
        tp.csrs().len()
    );
    assert!(!node.current().exists());
}

#[tokio::test]
async fn an_approval_that_never_comes_hits_the_csr_timeout() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-e",
        &["--csr-timeout", "1s", "--csr-backoff-min", "30s"],
    ));
    let line = agent.wait_for_log("was not approved within").await;
    assert!(
        line.contains("kubectl certificate approve node-csr-"),
        "{line}"
    );
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert!(!node.current().exists());
}

#[tokio::test]
async fn approved_but_not_issued_is_named() {
    let tp = plane(HOUR).await;
    tp.set_signer(Signer::None);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "node-f",
        &["--csr-not-issued-warning", "500ms"],
    ));
    agent.wait_for_log("approved but not issued").await;
    agent.terminate().await;
    assert!(!node.current().exists());
}

#[tokio::test]
async fn certificates_for_another_key_node_or_ca_are_refused() {
    for signer in [Signer::WrongKey, Signer::WrongNode, Signer::WrongCa] {
        let tp = plane(HOUR).await;
        tp.set_signer(signer);
        let node = NodeDir::new(&tp.bootstrap_kubeconfig());
        let agent = Agent::spawn(&args(&node, "node-g", &["--csr-backoff-min", "30s"]));
        let line = agent.wait_for_log("refused the certificate").await;
        agent.terminate().await;
        assert!(
            !node.current().exists(),
            "{signer:?}: nothing written ({line})"
        );
        assert!(!node.kubeconfig.exists(), "{signer:?}");
        let leftovers: Vec<_> = std::fs::read_dir(&node.cert_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with("kubelet-client-2"))
            .collect();
        assert!(leftovers.is_empty(), "{signer:?}: {leftovers:?}");
    }
}

#[tokio::test]
async fn a_dead_token_gives_one_clear_401_line_without_the_secret() {
    let tp = plane(HOUR).await;
    let kubeconfig = tp.bootstrap_kubeconfig();
    let token = token_of(&kubeconfig);
    let (id, secret) = token.split_once('.').unwrap();
    tp.expire_token(id).unwrap();
    let node = NodeDir::new(&kubeconfig);
    let agent = Agent::spawn(&args(&node, "node-h", &["--csr-backoff-min", "30s"]));
    // "HTTP 401", not "401": a random token id or a timestamp may hold those digits.
    let line = agent.wait_for_log("HTTP 401").await;
    assert!(line.contains(&format!("bootstrap token {id}")), "{line}");
    assert!(
        line.contains("doctor check authentication: run 'bootlet doctor' for the full chain"),
        "the back-off names the doctor check: {line}"
    );
    let (_, log) = agent.terminate().await;
    assert!(!log.contains(secret), "the token secret leaked:\n{log}");

    let unknown = kubeconfig.replace(id, "zzzzzz");
    let node = NodeDir::new(&unknown);
    let agent = Agent::spawn(&args(&node, "node-h", &["--csr-backoff-min", "30s"]));
    let line = agent.wait_for_log("HTTP 401").await;
    assert!(line.contains("bootstrap token zzzzzz"), "{line}");
    agent.terminate().await;
}

#[tokio::test]
async fn a_missing_or_broken_bootstrap_kubeconfig_stops_with_one_line_naming_the_file() {
    let node = NodeDir::new("this: [is not a kubeconfig");
    std::fs::remove_file(&node.bootstrap).unwrap();
    let (status, log) = Agent::spawn(&args(&node, "node-i", &[])).exit().await;
    assert!(!status.success());
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains(&support::path(&node.bootstrap)), "{log}");

    let broken = NodeDir::new("this: [is not a kubeconfig");
    let (status, log) = Agent::spawn(&args(&broken, "node-i", &[])).exit().await;
    assert!(!status.success());
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains(&support::path(&broken.bootstrap)), "{log}");
}

#[tokio::test]
async fn the_approval_wait_resumes_dropped_watches_and_relists_after_410() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "node-w", &[]));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("waiting for approval").await;
    wait_until(|| csr_requests(&tp, true) >= 1).await;
    // Move the store on and forget its history, then drop every connection: the agent's
    // next watch starts from a version the server no longer has (410) and must relist.
    tp.create_node("unrelated");
    tp.compact();
    tp.faults().outage(Duration::from_millis(300)).await;
    support::wait_event(&mut events, |e| {
        matches!(e, Event::OutageEnded).then_some(())
    })
    .await;
    wait_until(|| csr_requests(&tp, false) >= 2).await;
    wait_until(|| csr_requests(&tp, true) >= 3).await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 1);
}

#[tokio::test]
async fn a_watch_closed_at_once_is_retried_after_a_floor_and_the_approval_still_arrives() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    tp.faults().close_watches(true);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "node-closed", &[]));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("waiting for approval").await;
    // A 5 s window under the persistent fault: re-watches wait a jittered 1 s, doubling,
    // so at most 1 + 2 + 4 s fit (before the fix: a request loop, thousands).
    let (lists, watches) = (csr_requests(&tp, false), csr_requests(&tp, true));
    let log_lines = agent.log().lines().count();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (lists, watches) = (
        csr_requests(&tp, false) - lists,
        csr_requests(&tp, true) - watches,
    );
    assert!(
        (1..=4).contains(&watches) && lists <= 4,
        "{watches} watches and {lists} lists in 5 s"
    );
    let noisy = agent
        .log()
        .lines()
        .skip(log_lines)
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains(" INFO "))
        .count();
    assert!(
        noisy <= 1,
        "{noisy} info-or-louder lines in 5 s:\n{}",
        agent.log()
    );
    // An empty stream tells nothing: the agent lists again, so it still sees the approval.
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

#[tokio::test]
async fn watch_events_about_another_csr_are_ignored() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    // A server (or proxy) that drops the field selector: each agent sees every CSR.
    tp.faults().watch_ignores_selectors(true);
    let mut events = tp.events();
    let other = NodeDir::new(&tp.bootstrap_kubeconfig());
    let other_agent = Agent::spawn(&args(&other, "node-other", &[]));
    let other_csr = next_csr(&mut events).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "node-mine", &[]));
    let mine = next_csr(&mut events).await;
    agent.wait_for_log("waiting for approval").await;
    wait_until(|| csr_requests(&tp, true) >= 2).await;
    tp.deny(&other_csr, "NotThisOne").unwrap();
    other_agent.wait_for_log("was denied").await;
    tp.approve(&mine).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert!(
        !log.contains("denied") && !log.contains("NotThisOne"),
        "judged by another CSR's verdict:\n{log}"
    );
    other_agent.terminate().await;
}

async fn next_csr(events: &mut tokio::sync::broadcast::Receiver<Event>) -> String {
    wait_event(events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await
}

/// Poll the testplane's request log (it has no event for "a watch was opened").
async fn wait_until(mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(support::WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("condition within the wait bound");
}

/// CSR list (`watch == false`) or watch requests the agent made, by count.
fn csr_requests(tp: &testplane::TestPlane, watch: bool) -> usize {
    tp.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("certificatesigningrequests?"))
        .filter(|r| r.path.contains("watch=true") == watch)
        .count()
}

/// `kubeadm reset` on a running node: it stops the kubelet and deletes kubelet.conf, the
/// bootstrap kubeconfig and /var/lib/kubelet. bootlet drops the identity and writes nothing
/// back from memory (no kubelet.conf, no rotation CSR, even past the moment the old
/// certificate was due to rotate), ignores a bootstrap kubeconfig older than the reset,
/// and joins again once `kubeadm join` writes a new one.
#[tokio::test]
async fn after_kubeadm_reset_nothing_is_written_back_until_a_new_join() {
    // 8 s certificates: the old one is due to rotate about 6 s after its issuance.
    let tp = plane(Duration::from_secs(8)).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "node-reset", &[]));
    agent.wait_for_log("node identity in place").await;
    next_csr(&mut events).await;

    // The reset, as kubeadm does it (the bootstrap kubeconfig left behind here: a
    // hand-written one that survives must not be taken for a new join).
    std::fs::remove_file(&node.kubeconfig).unwrap();
    std::fs::remove_dir_all(&node.cert_dir).unwrap();
    agent
        .wait_for_log("the kubeconfig was removed (kubeadm reset?)")
        .await;
    let quiet = tokio::time::timeout(Duration::from_secs(10), next_csr(&mut events)).await;
    assert!(quiet.is_err(), "a CSR after the reset: {quiet:?}");
    assert!(!node.kubeconfig.exists(), "kubelet.conf written back");
    assert!(!node.current().exists(), "a certificate written back");

    // The next join writes a new bootstrap kubeconfig: a new CSR, certificate, kubeconfig.
    std::fs::write(&node.bootstrap, tp.bootstrap_kubeconfig()).unwrap();
    next_csr(&mut events).await;
    agent.wait_for_log_count("node identity in place", 2).await;
    assert!(node.kubeconfig.exists() && node.current().exists());
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(
        log.contains("waiting for a bootstrap kubeconfig written after the reset")
            && log.contains("the bootstrap kubeconfig appeared"),
        "{log}"
    );
}

/// The node's flags without `run`, for the one-shot commands (doctor, check-identity,
/// rejoin).
fn node_flags(node: &NodeDir, name: &str) -> Vec<String> {
    args(node, name, &[]).into_iter().skip(1).collect()
}

/// `bootlet SUBCOMMAND FLAGS...`: (exit code, stdout + stderr).
async fn bootlet(sub: &[&str], flags: &[String]) -> (Option<i32>, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_bootlet"))
            .args(sub)
            .args(flags)
            .env("NO_COLOR", "1")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("bootlet did not finish within 60 s")
    .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// Back after a long downtime (kubernetes/kubeadm#2054): the certificate expired while the
/// node was off and kubeadm long deleted the bootstrap kubeconfig. doctor names exactly
/// that and the one fix; `bootlet rejoin` with a fresh token and the CA's pin writes a
/// bootstrap kubeconfig from kubelet.conf's cluster and ends once the node has a new
/// certificate from exactly one new CSR; a wrong pin writes nothing.
#[tokio::test]
async fn an_expired_node_without_a_bootstrap_kubeconfig_comes_back_with_rejoin() {
    let tp = plane(Duration::from_secs(3)).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let flags = node_flags(&node, "node-back");
    let agent = Agent::spawn(&args(
        &node,
        "node-back",
        &["--rotate-certificates", "false"],
    ));
    agent.wait_for_log("node identity in place").await;
    next_csr(&mut events).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    std::fs::remove_file(&node.bootstrap).unwrap();
    let expired = async {
        loop {
            let (code, out) = bootlet(&["check-identity"], &flags).await;
            if code == Some(1) && out.contains("expired") {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let out = tokio::time::timeout(Duration::from_secs(20), expired)
        .await
        .expect("the certificate did not expire");
    assert!(
        out.contains("the kubelet waits for the identity of node node-back"),
        "{out}"
    );

    let (code, out) = bootlet(&["doctor"], &flags).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("✗ bootstrap-kubeconfig")
            && out.contains("the client certificate expired at")
            && out.contains("no bootstrap credential")
            && out.contains("fix: bootlet rejoin --token TOKEN --discovery-token-ca-cert-hash"),
        "{out}"
    );

    // The CA's pin as kubeadm documents it, computed by openssl.
    let ca = node.tmp.path().join("ca.crt");
    std::fs::write(&ca, tp.ca_pem()).unwrap();
    let (ok, digest) = support::run(
        "sh",
        &["-c", &format!("openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex | sed 's/^.* //'", support::path(&ca))],
    )
    .await;
    assert!(ok, "{digest}");
    let pin = format!("sha256:{}", digest.trim());
    let token = tp.create_token(Some(HOUR));

    let wrong = format!("sha256:{}", "0".repeat(64));
    let mut rejoin_flags = flags.clone();
    rejoin_flags.extend([
        "--token".into(),
        token.clone(),
        "--timeout".into(),
        "30s".into(),
    ]);
    let mut bad = rejoin_flags.clone();
    bad.extend(["--discovery-token-ca-cert-hash".into(), wrong]);
    let (code, out) = bootlet(&["rejoin"], &bad).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("refusing to trust it") && out.contains(&pin),
        "{out}"
    );
    assert!(
        !node.bootstrap.exists(),
        "a bootstrap kubeconfig after a wrong pin"
    );
    assert!(!out.contains(&token), "the token in the output: {out}");

    // The right pin: rejoin writes the file at once and waits; the agent (as systemd starts
    // it again) bootstraps with it.
    rejoin_flags.extend(["--discovery-token-ca-cert-hash".into(), pin]);
    let rejoin = tokio::spawn(async move { bootlet(&["rejoin"], &rejoin_flags).await });
    let written = async {
        while !node.bootstrap.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), written)
        .await
        .expect("no bootstrap kubeconfig from rejoin");
    let agent = Agent::spawn(&args(
        &node,
        "node-back",
        &["--rotate-certificates", "false"],
    ));
    next_csr(&mut events).await;
    let (code, out) = rejoin.await.unwrap();
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("node node-back rejoined: client certificate"),
        "{out}"
    );
    assert!(!out.contains(&token), "the token in the output: {out}");
    let (code, out) = bootlet(&["check-identity"], &flags).await;
    assert_eq!(code, Some(0), "{out}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(
        tp.csrs().len(),
        2,
        "one CSR at the join, one at the rejoin: {:?}",
        tp.csrs()
            .iter()
            .map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}
