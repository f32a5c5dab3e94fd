//! The kubelet's serving certificate (`--rotate-server-certificates`) against the
//! testplane's `kubernetes.io/kubelet-serving` signer: the CSR's content and requester,
//! READY never waiting for it, manual approval, a real TLS peer (openssl) verifying the
//! node IP, rotation at 75 %, a restart adopting the pending CSR, and a new address.

use crate::support;

use std::time::Duration;

use support::{run, wait_event, Agent, NodeDir};
use testplane::{Approval, Event, TestPlane};

const SERVING: &str = "kubernetes.io/kubelet-serving";
const HOUR: Duration = Duration::from_secs(3600);

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(
        [
            "--rotate-server-certificates",
            "true",
            "--lease-renew-interval",
            "1s",
            "--lease-duration",
            "5s",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    a
}

/// The next serving CSR created: (name, requester).
async fn next_serving_csr(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
) -> (String, String) {
    wait_event(events, |e| match e {
        Event::CsrCreated { name, user, signer } if signer == SERVING => {
            Some((name.clone(), user.clone()))
        }
        _ => None,
    })
    .await
}

fn serving_current(node: &NodeDir) -> std::path::PathBuf {
    node.cert_dir.join("kubelet-server-current.pem")
}

/// `openssl req -noout -text` of a CSR object's request.
async fn request_text(tp: &TestPlane, name: &str) -> String {
    let csr = tp.csr(name).expect("the CSR exists");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("req.pem");
    std::fs::write(&path, &csr.spec.request.0).unwrap();
    let (ok, text) = run(
        "openssl",
        &["req", "-noout", "-text", "-in", path.to_str().unwrap()],
    )
    .await;
    assert!(ok, "{text}");
    text
}

#[tokio::test]
async fn the_serving_csr_is_the_nodes_own_and_never_blocks_ready() {
    let tp = TestPlane::builder().cert_ttl(HOUR).start().await.unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "srv-1",
        &[
            "--node-ip",
            "127.0.0.1",
            "--tls-san",
            "srv-1.example.test",
            "--csr-timeout",
            "6s",
        ],
    ));
    let (name, user) = next_serving_csr(&mut events).await;
    assert_eq!(
        user, "system:node:srv-1",
        "filed with the client certificate, never the token"
    );
    // The client identity is in place and the kubelet could start: nothing waits for it.
    assert!(node.current().exists() && node.kubeconfig.exists());
    let csr = tp.csr(&name).unwrap();
    assert_eq!(csr.spec.signer_name, SERVING);
    assert_eq!(
        csr.spec.usages.clone().unwrap_or_default(),
        ["digital signature", "server auth"]
    );
    let text = request_text(&tp, &name).await;
    for want in [
        "CN = system:node:srv-1",
        "O = system:nodes",
        "IP Address:127.0.0.1",
        "DNS:srv-1.example.test",
        "DNS:srv-1",
    ] {
        assert!(text.contains(want), "request lacks {want}:\n{text}");
    }
    // Pending: the reminder names the command and the approver (every half --csr-timeout here).
    let warn = agent.wait_for_log("is still waiting for approval").await;
    assert!(
        warn.contains(&format!("kubectl certificate approve {name}")),
        "{warn}"
    );
    assert!(warn.contains("kubelet-csr-approver"), "{warn}");
    // Meanwhile the kubelet has a file to start with: a self-signed placeholder.
    let pem = std::fs::read_to_string(serving_current(&node)).expect("a placeholder serving cert");
    let leaf = bootlet::pki::parse_cert_chain(&pem).unwrap()[0].0.clone();
    assert!(
        leaf.issuer.contains("CN=system:node:srv-1") && !leaf.issuer.contains("kubernetes"),
        "self-signed, not from the cluster CA: {}",
        leaf.issuer
    );
    assert!(
        leaf.server_auth && leaf.sans.ips.contains(&"127.0.0.1".parse().unwrap()),
        "{leaf:?}"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn pending_shows_in_status_while_ready_was_already_sent() {
    let tp = TestPlane::builder().cert_ttl(HOUR).start().await.unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify.sock");
    let sock = tokio::net::UnixDatagram::bind(&sock_path).unwrap();
    let agent = Agent::spawn_env(
        &args(&node, "srv-2", &["--node-ip", "127.0.0.1"]),
        &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())],
    );
    let (name, _) = next_serving_csr(&mut events).await;
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    let found = tokio::time::timeout(support::WAIT, async {
        loop {
            let n = sock.recv(&mut buf).await.unwrap();
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let hit = msg.lines().any(|l| {
                l.starts_with("STATUS=")
                    && l.contains(&format!("serving cert: waiting for approval of CSR {name}"))
            });
            seen.push(msg);
            if hit {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no serving STATUS; got {seen:#?}");
    assert!(
        seen.iter().any(|m| m.lines().any(|l| l == "READY=1")),
        "READY=1 must come before the serving certificate exists: {seen:#?}"
    );
    agent.terminate().await;
}

#[tokio::test]
async fn an_approved_serving_certificate_verifies_for_the_node_ip_with_openssl() {
    let tp = TestPlane::builder().cert_ttl(HOUR).start().await.unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "srv-3", &["--node-ip", "127.0.0.1"]));
    let (name, _) = next_serving_csr(&mut events).await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("serving certificate installed").await;
    let current = serving_current(&node);
    let meta = std::fs::metadata(&current).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_link(&current)
        .unwrap()
        .to_string_lossy()
        .contains("kubelet-server-"));

    // A real TLS server with the installed pair; a real client verifying the node IP.
    let ca = node.tmp.path().join("ca.crt");
    std::fs::write(&ca, tp.ca_pem()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pem = current.to_str().unwrap().to_string();
    let mut server = tokio::process::Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-cert",
            &pem,
            "-key",
            &pem,
            "-accept",
            &port.to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let connect = format!("127.0.0.1:{port}");
    let mut verdict = String::new();
    for _ in 0..50 {
        let out = tokio::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &connect,
                "-CAfile",
                ca.to_str().unwrap(),
                "-verify_ip",
                "127.0.0.1",
                "-verify_return_error",
                "-brief",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        verdict = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !verdict.contains("Connection refused") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = server.kill().await;
    assert!(
        verdict.contains("Verification: OK"),
        "openssl s_client:\n{verdict}"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn the_serving_certificate_rotates_at_75_percent() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(8))
        .allow_short_expiration(true)
        .backdate(Duration::ZERO)
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "srv-4", &["--node-ip", "127.0.0.1"]));
    next_serving_csr(&mut events).await;
    agent.wait_for_log("serving certificate installed").await;
    let pem = std::fs::read_to_string(serving_current(&node)).unwrap();
    let first = bootlet::pki::parse_cert_chain(&pem).unwrap()[0].0.clone();
    next_serving_csr(&mut events).await;
    let at = testplane::wall_now();
    let lifetime = first
        .not_after
        .duration_since(first.not_before)
        .unwrap()
        .as_secs_f64();
    let fraction = at.duration_since(first.not_before).unwrap().as_secs_f64() / lifetime;
    assert!(
        (0.65..=0.85).contains(&fraction),
        "rotated at {fraction:.2} of the lifetime"
    );
    agent
        .wait_for_log_count("serving certificate installed", 2)
        .await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn a_restart_while_pending_adopts_the_same_serving_csr() {
    let tp = TestPlane::builder().cert_ttl(HOUR).start().await.unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "srv-5", &["--node-ip", "127.0.0.1"]));
    let (name, _) = next_serving_csr(&mut events).await;
    agent.kill().await;
    let agent = Agent::spawn(&args(&node, "srv-5", &["--node-ip", "127.0.0.1"]));
    agent.wait_for_log("adopted the CSR filed earlier").await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("serving certificate installed").await;
    agent.terminate().await;
    let serving: Vec<_> = tp
        .csrs()
        .into_iter()
        .filter(|c| c.spec.signer_name == SERVING)
        .collect();
    assert_eq!(
        serving.len(),
        1,
        "one serving CSR, adopted after the restart"
    );
}

#[tokio::test]
async fn a_new_node_ip_files_a_new_serving_csr() {
    let tp = TestPlane::builder()
        .cert_ttl(HOUR)
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "srv-6", &["--node-ip", "127.0.0.1"]));
    next_serving_csr(&mut events).await;
    agent.wait_for_log("serving certificate installed").await;
    agent.terminate().await;

    let agent = Agent::spawn(&args(&node, "srv-6", &["--node-ip", "127.0.0.1,127.0.0.2"]));
    let (name, _) = next_serving_csr(&mut events).await;
    agent.wait_for_log("node's addresses changed").await;
    let text = request_text(&tp, &name).await;
    assert!(text.contains("IP Address:127.0.0.2"), "{text}");
    agent.wait_for_log("serving certificate installed").await;
    let pem = std::fs::read_to_string(serving_current(&node)).unwrap();
    let leaf = bootlet::pki::parse_cert_chain(&pem).unwrap()[0].0.clone();
    assert_eq!(leaf.sans.ips.len(), 2, "{:?}", leaf.sans);
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// A persistent refusal (every serving CSR denied) backs off by the contract's CSR back-off
/// (at least 1 min): counted in a 10 s window, not a CSR per second.
#[tokio::test]
async fn denied_serving_csrs_back_off_instead_of_looping() {
    let tp = TestPlane::builder()
        .cert_ttl(HOUR)
        .serving_approval(Approval::Deny {
            reason: "NotThisNode".into(),
        })
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "srv-7", &["--node-ip", "127.0.0.1"]));
    next_serving_csr(&mut events).await;
    let line = agent
        .wait_for_log("the serving certificate was not issued")
        .await;
    assert!(
        line.contains("NotThisNode") && line.contains("retry_in=1m"),
        "{line}"
    );
    let (requests, lines) = (tp.requests().len(), agent.log().lines().count());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let csr_posts = tp
        .requests()
        .iter()
        .skip(requests)
        .filter(|r| r.method == "POST" && r.path.contains("certificatesigningrequests"))
        .count();
    let log = agent.log();
    let loud = log
        .lines()
        .skip(lines)
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    assert_eq!(csr_posts, 0, "a new serving CSR within 10 s of a denial");
    assert_eq!(loud, 0, "warnings in the 10 s after the denial:\n{log}");
    let serving = tp
        .csrs()
        .into_iter()
        .filter(|c| c.spec.signer_name == SERVING)
        .count();
    assert_eq!(serving, 1);
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}
