//! The sd_notify protocol as systemd sees it: the real binary, NOTIFY_SOCKET pointed at a
//! datagram socket we own, an in-process testplane. READY timing, STATUS text, WATCHDOG
//! period and withholding, RELOADING/READY on SIGHUP, STOPPING and exit 0 on SIGTERM.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use support::{plane_approving, signal, wait_event, Agent, NodeDir, WAIT};
use testplane::{Approval, Event, TestPlane};
use tokio::net::UnixDatagram;
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);

/// A NOTIFY_SOCKET: every datagram received, with its arrival time.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: PathBuf,
    sock: UnixDatagram,
    seen: Vec<(Instant, String)>,
}

impl NotifySocket {
    fn bind() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        Self {
            _dir: dir,
            path,
            sock,
            seen: Vec::new(),
        }
    }

    fn env(&self) -> String {
        self.path.to_str().unwrap().to_string()
    }

    /// Receive until a datagram has a line for which `pick` is true; returns that datagram.
    async fn until(&mut self, what: &str, pick: impl Fn(&str) -> bool) -> (Instant, String) {
        let found = tokio::time::timeout(WAIT, async {
            let mut buf = vec![0u8; 4096];
            loop {
                let n = self.sock.recv(&mut buf).await.unwrap();
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let at = Instant::now();
                self.seen.push((at, msg.clone()));
                if msg.lines().any(&pick) {
                    return (at, msg);
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no notify message with {what}; got {:#?}", self.seen))
    }

    /// Forget what is queued (sent before now), so later waits see only new datagrams.
    fn drain(&mut self) {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = self.sock.try_recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            self.seen.push((Instant::now(), msg));
        }
    }

    fn any_seen(&self, line: &str) -> bool {
        self.seen.iter().any(|(_, m)| m.lines().any(|l| l == line))
    }
}

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

#[tokio::test]
async fn ready_waits_for_the_certificate_then_stopping_exits_0() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut notify = NotifySocket::bind();
    let agent = Agent::spawn_env(
        &args(&node, "n-ready", &[]),
        &[("NOTIFY_SOCKET", &notify.env())],
    );

    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    let (_, waiting) = notify
        .until("the approval STATUS", |l| {
            l.starts_with("STATUS=waiting for approval of CSR")
        })
        .await;
    assert!(
        waiting.contains(&format!("STATUS=waiting for approval of CSR {csr} for "))
            && waiting.contains(&format!("approve with: kubectl certificate approve {csr}")),
        "{waiting}"
    );
    assert!(!notify.any_seen("READY=1"), "READY before approval");
    assert!(!node.current().exists());

    tp.approve(&csr).unwrap();
    notify.until("READY=1", |l| l == "READY=1").await;
    assert!(node.current().exists(), "READY=1 before the certificate");
    assert!(node.kubeconfig.exists(), "READY=1 before the kubeconfig");
    // The Lease does not gate READY; its state follows in STATUS=.
    let running = |l: &str| l.starts_with("STATUS=") && l.contains("lease renewed");
    let status = match notify.seen.iter().find(|(_, m)| m.lines().any(running)) {
        Some((_, m)) => m.clone(),
        None => notify.until("the running STATUS", running).await.1,
    };
    assert!(
        status.contains("STATUS=client cert valid until ") && status.contains(", rotates at "),
        "{status}"
    );

    let cert_before = std::fs::read(node.current()).unwrap();
    let started = Instant::now();
    signal(agent.pid(), "TERM");
    notify.until("STOPPING=1", |l| l == "STOPPING=1").await;
    let (status, log) = agent.exit().await;
    assert!(status.success(), "exit {status:?}; log:\n{log}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped in {:?}",
        started.elapsed()
    );
    assert_eq!(std::fs::read(node.current()).unwrap(), cert_before);
    assert!(
        tp.lease("kube-node-lease", "n-ready").is_some(),
        "Lease left alone"
    );
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn watchdog_pings_within_half_the_period_and_stop_when_the_lease_loop_wedges() {
    let tp = plane_approving(HOUR, Approval::Auto).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut notify = NotifySocket::bind();
    let agent = Agent::spawn_env(
        &args(&node, "n-dog", &["--test-wedge-lease-after", "3s"]),
        &[
            ("NOTIFY_SOCKET", &notify.env()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    notify.until("READY=1", |l| l == "READY=1").await;
    // Five pings while both loops make progress: at most WATCHDOG_USEC/2 = 500 ms apart
    // (the fallback timer), and no closer than half that (pings that ride on a renewal).
    let mut pings = Vec::new();
    while pings.len() < 5 {
        pings.push(notify.until("WATCHDOG=1", |l| l == "WATCHDOG=1").await.0);
    }
    for gap in pings.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            gap >= Duration::from_millis(200) && gap <= Duration::from_millis(750),
            "ping gap {gap:?}; pings every 250-500ms expected"
        );
    }
    // The wedge: pings stop, and the agent says why.
    agent
        .wait_for_log("withholding watchdog pings so systemd restarts the agent")
        .await;
    notify.drain();
    let quiet = tokio::time::timeout(
        Duration::from_secs(2),
        notify.until("WATCHDOG=1", |l| l == "WATCHDOG=1"),
    )
    .await;
    assert!(quiet.is_err(), "a wedged agent still pings the watchdog");
    assert!(agent.log().contains("task=\"lease\""), "{}", agent.log());
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn sighup_reloads_the_config_live_and_keeps_running_on_a_bad_file() {
    let tp = plane_approving(HOUR, Approval::Auto).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let config = node.tmp.path().join("bootlet.yaml");
    std::fs::write(&config, "leaseRenewInterval: 1s\nleaseDuration: 5s\n").unwrap();
    let mut a = node.args("n-reload");
    a.extend(["--config".into(), support::path(&config)]);
    // The reload below switches to a 500 ms cadence, under the 1 s floor.
    a.push("--test-short-lease-interval".into());
    let mut notify = NotifySocket::bind();
    // No RUST_LOG, so the file's verbosity sets the level.
    let agent = Agent::spawn_env(&a, &[("NOTIFY_SOCKET", &notify.env()), ("RUST_LOG", "")]);
    notify.until("READY=1", |l| l == "READY=1").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !agent.log().contains("lease renewed"),
        "debug lines at info level"
    );

    std::fs::write(
        &config,
        "leaseRenewInterval: 500ms\nleaseDuration: 5s\nverbosity: 1\nrotationFraction: 0.5\n",
    )
    .unwrap();
    signal(agent.pid(), "HUP");
    let (_, reloading) = notify.until("RELOADING=1", |l| l == "RELOADING=1").await;
    assert!(
        reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{reloading}"
    );
    notify
        .until("READY=1 after the reload", |l| l == "READY=1")
        .await;
    let line = agent.wait_for_log("configuration reloaded").await;
    assert!(
        line.contains("verbosity=1") && line.contains("leaseRenewInterval=500ms"),
        "{line}"
    );
    let warn = agent.wait_for_log("only applied after a restart").await;
    assert!(warn.contains("rotationFraction"), "{warn}");
    // The new level and the new cadence are live: debug renewals, two a second.
    let mut events = tp.events();
    agent.wait_for_log("lease renewed").await;
    let started = Instant::now();
    for _ in 0..4 {
        wait_event(&mut events, |e| {
            matches!(e, Event::LeaseRenewed { name, .. } if name == "n-reload").then_some(())
        })
        .await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "4 renewals took {:?} at a 500ms interval",
        started.elapsed()
    );

    // An invalid file is refused; the agent keeps running on the settings it has.
    std::fs::write(&config, "leaseRenewInterval: banana\n").unwrap();
    signal(agent.pid(), "HUP");
    notify.until("RELOADING=1", |l| l == "RELOADING=1").await;
    notify
        .until("READY=1 after the refused reload", |l| l == "READY=1")
        .await;
    let refused = agent
        .wait_for_log("reload failed; keeping the running configuration")
        .await;
    assert!(
        refused.contains("bootlet.yaml"),
        "names the file: {refused}"
    );
    let renewed = agent.log().matches("lease renewed").count();
    agent.wait_for_log_count("lease renewed", renewed + 2).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn a_deny_message_cannot_inject_notify_assignments() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut notify = NotifySocket::bind();
    let agent = Agent::spawn_env(
        &args(&node, "n-inject", &[]),
        &[("NOTIFY_SOCKET", &notify.env())],
    );
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    tp.deny_with_message(
        &csr,
        "Policy",
        "policy says no\nREADY=1\nMAINPID=1\nWATCHDOG_USEC=1",
    )
    .unwrap();
    let (_, msg) = notify
        .until("the back-off STATUS", |l| {
            l.starts_with("STATUS=") && l.contains("policy says no")
        })
        .await;
    // One STATUS= line, the message escaped inside it; the only other assignment a
    // datagram may carry is bootlet's own READY=1 (a back-off after a refusal waits on
    // others, so the start job ends: see `State::waits_on_others`), never MAINPID= or
    // WATCHDOG_USEC= from the message.
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("STATUS=")).count(),
        1,
        "one well-formed STATUS line: {msg:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("STATUS=") || *l == "READY=1"),
        "an assignment from the message: {msg:?}"
    );
    assert!(
        msg.contains("policy says no\\nREADY=1\\nMAINPID=1\\nWATCHDOG_USEC=1"),
        "the message is shown, escaped: {msg:?}"
    );
    assert!(
        msg.contains("(doctor check csr: run 'bootlet doctor'"),
        "{msg:?}"
    );
    agent.wait_for_log("bootstrap attempt failed").await;
    notify.drain();
    // READY=1 is bootlet's own here (the back-off ends the start job); the message's
    // copy of it is escaped inside STATUS= above.
    let injected = |l: &str| l.starts_with("MAINPID=") || l.starts_with("WATCHDOG_USEC=");
    assert!(
        !notify.seen.iter().any(|(_, m)| m.lines().any(injected)),
        "injected assignments reached the notify socket: {:#?}",
        notify.seen
    );
    assert!(
        !agent.log().lines().any(injected),
        "a log line of the server's making:\n{}",
        agent.log()
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn ready_with_a_valid_certificate_while_the_server_is_down_then_the_lease_resumes() {
    let state = tempfile::tempdir().unwrap();
    let start = |addr| {
        TestPlane::builder()
            .cert_ttl(HOUR)
            .state_dir(Some(state.path().to_path_buf()))
            .listen(addr)
            .start()
    };
    let tp = start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = tp.addr();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "n-outage", &[]));
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    tp.shutdown().await;

    // A node booting during an API outage, with a valid certificate on disk.
    let mut notify = NotifySocket::bind();
    let started = Instant::now();
    let agent = Agent::spawn_env(
        &args(&node, "n-outage", &[]),
        &[("NOTIFY_SOCKET", &notify.env())],
    );
    let (ready_at, _) = notify.until("READY=1", |l| l == "READY=1").await;
    assert!(
        ready_at - started < Duration::from_secs(5),
        "READY after {:?} with the server down",
        ready_at - started
    );
    notify
        .until("the Lease state in STATUS", |l| {
            l.starts_with("STATUS=client cert valid until")
                && (l.contains("lease renewal failing")
                    || l.contains("waiting for the first lease"))
        })
        .await;

    // The server returns on the same address (same CA): a renewal within one interval (1s),
    // plus a margin for the TLS handshake and the phase jitter.
    let tp = start(addr).await.unwrap();
    let back = Instant::now();
    let mut events = tp.events();
    wait_event(&mut events, |e| match e {
        Event::LeaseCreated { name, .. } | Event::LeaseRenewed { name, .. } => {
            (name == "n-outage").then_some(())
        }
        _ => None,
    })
    .await;
    assert!(
        back.elapsed() < Duration::from_millis(1500),
        "first Lease write {:?} after the server's return",
        back.elapsed()
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// Under systemd a bootstrap kubeconfig that cloud-init writes late is waited for with a
/// STATUS= line (exiting would use up the restart limit and leave the unit `failed`), and
/// READY=1 goes out while it waits: the file comes only after the boot (cloud-init's
/// `kubeadm join` runs after multi-user.target), so holding READY would hold the boot.
#[tokio::test]
async fn under_systemd_a_late_bootstrap_kubeconfig_is_waited_for() {
    let tp = plane_approving(HOUR, Approval::Auto).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    std::fs::remove_file(&node.bootstrap).unwrap();
    let mut notify = NotifySocket::bind();
    let agent = Agent::spawn_env(
        &args(&node, "n-late", &[]),
        &[("NOTIFY_SOCKET", &notify.env())],
    );
    let (_, status) = notify
        .until("the waiting STATUS", |l| {
            l.starts_with("STATUS=") && l.contains("waiting for the bootstrap kubeconfig")
        })
        .await;
    assert!(status.contains("bootstrap-kubelet.conf"), "{status}");
    agent
        .wait_for_log("no bootstrap kubeconfig yet; waiting for the file")
        .await;
    // READY=1 may ride in the datagram of the waiting STATUS= line.
    if !notify.any_seen("READY=1") {
        notify.until("READY=1", |l| l == "READY=1").await;
    }
    assert!(!node.current().exists(), "READY=1 came with a certificate");
    std::fs::write(&node.bootstrap, tp.bootstrap_kubeconfig()).unwrap();
    agent.wait_for_log("client certificate installed").await;
    assert!(node.current().exists());
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(
        log.matches("waiting for the file").count(),
        1,
        "one line while waiting, not one per poll:\n{log}"
    );
}

/// A 6 s certificate whose rotation cannot happen (the approver is a human who never comes
/// back): once it expired, STATUS= says so (sent when the certificate expires, not on some
/// later wake-up) and `/readyz` turns 500 naming the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_not_ready_and_status_says_expired() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(6))
        .backdate(Duration::ZERO)
        .approval(Approval::Manual)
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut notify = NotifySocket::bind();
    let mut a = args(&node, "n-expiry", &["--renew-lease=false"]);
    let at = a
        .iter()
        .position(|s| s == "--metrics-bind-address")
        .unwrap();
    a[at + 1] = "127.0.0.1:0".into();
    let agent = Agent::spawn_env(&a, &[("NOTIFY_SOCKET", &notify.env())]);
    let metrics = support::metrics_address(&agent).await;
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    tp.approve(&csr).unwrap();
    let (ready_at, _) = notify.until("READY=1", |l| l == "READY=1").await;
    // Issued (notBefore, not backdated) just before READY=1: it expires within 6 s of it.
    let not_after = testplane::wall_now() + Duration::from_secs(6);
    assert_eq!(support::http(metrics, "GET", "/readyz").await.0, 200);

    // Nothing approves the rotation CSR (or the fallback's): the certificate expires.
    let (seen, msg) = notify
        .until("an expired STATUS", |l| {
            l.starts_with("STATUS=client cert expired at ")
        })
        .await;
    let status = msg
        .lines()
        .find(|l| l.starts_with("STATUS="))
        .unwrap()
        .to_string();
    assert!(!status.contains("valid until"), "{status}");
    assert!(
        testplane::wall_now() + Duration::from_secs(1) >= not_after,
        "expired STATUS before the expiry: {status}"
    );
    // Sent at the expiry (bootlet wakes for it), not at some later wake-up.
    let late = seen - ready_at;
    assert!(
        late <= Duration::from_millis(7500),
        "expired STATUS {late:?} after READY=1"
    );
    eprintln!("expired STATUS {late:?} after READY=1 (6 s certificate)");
    let (code, body) = support::http(metrics, "GET", "/readyz").await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.starts_with("readyz check failed: client cert expired at "),
        "{body}"
    );
    let (code, verbose) = support::http(metrics, "GET", "/readyz?verbose").await;
    assert_eq!(code, 500, "{verbose}");
    assert!(
        verbose.contains("[-]client-certificate failed: expired at "),
        "{verbose}"
    );
    assert!(verbose.ends_with("readyz check failed\n"), "{verbose}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn a_huge_deny_message_is_clipped_in_status_and_the_watchdog_keeps_pinging() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut notify = NotifySocket::bind();
    let agent = Agent::spawn_env(
        &args(&node, "n-huge-deny", &[]),
        &[
            ("NOTIFY_SOCKET", &notify.env()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    // Larger than a datagram may be (net.core.wmem_default, ~208 KiB): sent whole in
    // STATUS=, it would fail, and the watchdog ping with it.
    let message = format!("policy says no {}", "x".repeat(300 * 1024));
    tp.deny_with_message(&csr, "Policy", &message).unwrap();
    agent.wait_for_log("bootstrap attempt failed").await;
    let (_, msg) = notify
        .until("the back-off STATUS", |l| {
            l.starts_with("STATUS=retrying in ") && l.contains("policy says no xxx")
        })
        .await;
    let status = msg.lines().find(|l| l.starts_with("STATUS=")).unwrap();
    assert!(
        status.len() < 2048 && status.ends_with("run 'bootlet doctor' for the full chain)"),
        "STATUS= is clipped and keeps its doctor hint ({} bytes): {}",
        status.len(),
        &status[..status.len().min(300)]
    );
    // The back-off line ages every second, so a status rides with nearly every ping: none
    // may be lost (systemd kills the agent when two are more than WATCHDOG_USEC apart).
    notify.drain();
    let mut pings = vec![Instant::now()];
    while pings.len() < 5 {
        pings.push(notify.until("WATCHDOG=1", |l| l == "WATCHDOG=1").await.0);
    }
    for gap in pings.windows(2).map(|w| w[1] - w[0]) {
        assert!(gap < Duration::from_millis(900), "ping gap {gap:?}");
    }
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}
