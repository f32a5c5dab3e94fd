//! `--metrics-bind-address`: /metrics, /healthz and /readyz on the real binary against the
//! testplane, `promtool check metrics` on a live scrape, a taken port, a wedged loop, and
//! the connections an identity leaves behind once it is no longer used.

use crate::support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use support::{http, metrics_address, run, wait_event, Agent, NodeDir, WAIT};
use testplane::{Approval, Event, TestPlane};

/// The node's flags with the metrics listener at `metrics` (instead of `off`), a 1 s Lease.
fn args(node: &NodeDir, name: &str, metrics: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    let at = a
        .iter()
        .position(|s| s == "--metrics-bind-address")
        .unwrap();
    a[at + 1] = metrics.to_string();
    a.extend(
        ["--lease-renew-interval", "1s", "--lease-duration", "5s"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    a
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path).await
}

/// The value of the series `series` (name and labels exactly) in an exposition.
fn value(text: &str, series: &str) -> f64 {
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"));
    v.parse()
        .unwrap_or_else(|e| panic!("{series} = {v:?}: {e}"))
}

#[tokio::test]
async fn the_endpoints_follow_the_join_and_the_lease() {
    let tp = TestPlane::builder()
        .approval(Approval::Manual)
        .cert_ttl(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "n-metrics", "127.0.0.1:0", &[]));
    let addr = metrics_address(&agent).await;
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("waiting for approval").await;

    // Pending: not ready, and /readyz says what it waits for.
    let (code, body) = get(addr, "/readyz").await;
    assert_eq!(code, 500, "{body}");
    assert!(
        body.starts_with(&format!(
            "readyz check failed: waiting for approval of CSR {csr}"
        )),
        "{body}"
    );
    let (_, verbose) = get(addr, "/readyz?verbose").await;
    assert!(
        verbose.contains("[-]client-certificate failed: waiting for approval"),
        "{verbose}"
    );
    assert!(verbose.ends_with("readyz check failed\n"), "{verbose}");
    assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_string()));
    let (_, text) = get(addr, "/metrics").await;
    assert_eq!(
        value(&text, r#"bootlet_csr_pending{profile="client"}"#),
        1.0
    );
    assert_eq!(
        value(&text, "kubelet_certificate_manager_client_ttl_seconds"),
        f64::INFINITY
    );

    // Approved: ready, the TTL counts down from the signer's hour, and the Lease renews.
    tp.approve(&csr).unwrap();
    agent
        .wait_for_log("ready: client certificate and kubeconfig in place")
        .await;
    for _ in 0..2 {
        wait_event(&mut events, |e| match e {
            Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. }
                if name == "n-metrics" =>
            {
                Some(())
            }
            _ => None,
        })
        .await;
    }
    assert_eq!(get(addr, "/readyz").await, (200, "ok\n".to_string()));
    let (_, verbose) = get(addr, "/readyz?verbose").await;
    assert!(
        verbose.contains("[+]client-certificate ok: valid until "),
        "{verbose}"
    );
    assert!(verbose.contains("[+]lease ok: renewed "), "{verbose}");
    assert!(verbose.ends_with("readyz check passed\n"), "{verbose}");
    let (code, text) = get(addr, "/metrics").await;
    assert_eq!(code, 200);
    let ttl = value(&text, "kubelet_certificate_manager_client_ttl_seconds");
    assert!((3500.0..3600.0).contains(&ttl), "ttl {ttl}");
    let not_after = value(&text, "bootlet_client_cert_not_after_timestamp_seconds");
    let now = testplane::wall_now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (not_after - now - ttl).abs() <= 2.0,
        "{not_after} {now} {ttl}"
    );
    assert_eq!(
        value(
            &text,
            r#"bootlet_rotations_total{profile="client",result="success"}"#
        ),
        1.0
    );
    assert_eq!(
        value(&text, r#"bootlet_csr_pending{profile="client"}"#),
        0.0
    );
    assert_eq!(
        value(&text, r#"bootlet_csr_wait_seconds_count{profile="client"}"#),
        1.0
    );
    assert!(value(&text, r#"bootlet_lease_renewals_total{result="success"}"#) >= 2.0);
    assert_eq!(
        value(&text, r#"bootlet_lease_renewals_total{result="failure"}"#),
        0.0
    );
    assert!(value(&text, "bootlet_lease_renew_duration_seconds_count") >= 2.0);
    let last = value(&text, "bootlet_lease_last_renew_timestamp_seconds");
    assert!((now - last).abs() < 5.0, "last renewal {last}, now {now}");
    assert_eq!(value(&text, "bootlet_lease_duration_seconds"), 5.0);
    assert!(
        value(
            &text,
            r#"bootlet_api_requests_total{code="201",verb="POST"}"#
        ) >= 1.0
    );
    assert!(
        value(
            &text,
            r#"bootlet_api_requests_total{code="200",verb="PUT"}"#
        ) >= 1.0
    );
    assert_eq!(
        value(
            &text,
            &format!(
                "bootlet_build_info{{build_date=\"{}\",git_commit=\"{}\",version=\"{}\"}}",
                bootlet::version::BUILD_DATE,
                bootlet::version::GIT_COMMIT,
                bootlet::version::VERSION
            )
        ),
        1.0
    );
    assert!(value(&text, "process_resident_memory_bytes") > 1e6);
    assert!(value(&text, "process_open_fds") >= 3.0);
    assert!(!text.contains("kubelet_certificate_manager_server_"));

    // Anything else: 404; another method: 405.
    assert_eq!(get(addr, "/debug").await.0, 404);
    assert_eq!(http(addr, "POST", "/metrics").await.0, 405);
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

#[tokio::test]
async fn promtool_check_metrics_finds_only_the_kubelets_legacy_counter_names() {
    let tp = TestPlane::builder()
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "n-promtool",
        "127.0.0.1:0",
        &[
            "--rotate-server-certificates",
            "true",
            "--node-ip",
            "127.0.0.1",
        ],
    ));
    let addr = metrics_address(&agent).await;
    agent.wait_for_log("serving certificate installed").await;
    let (_, text) = get(addr, "/metrics").await;
    // Every family of both profiles is in this scrape.
    for name in [
        "kubelet_certificate_manager_server_ttl_seconds",
        "kubelet_server_expiration_renew_errors",
        "kubelet_certificate_manager_server_rotation_seconds",
        r#"bootlet_rotations_total{profile="serving",result="success"}"#,
    ] {
        assert!(text.contains(name), "{name} in:\n{text}");
    }
    let ttl = value(&text, "kubelet_certificate_manager_server_ttl_seconds");
    assert!(ttl > 0.0 && ttl.is_finite(), "{ttl}");
    let file = node.tmp.path().join("scrape.txt");
    std::fs::write(&file, &text).unwrap();
    let (_, out) = run(
        "sh",
        &[
            "-c",
            &format!("promtool check metrics < {}", file.display()),
        ],
    )
    .await;
    assert!(
        !out.contains("not found"),
        "promtool is missing: install Debian's `prometheus` package (.ci/run does)\n{out}"
    );
    let lints: BTreeSet<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let allowed: BTreeSet<&str> = [
        "kubelet_certificate_manager_client_expiration_renew_errors counter metrics should have \"_total\" suffix",
        "kubelet_server_expiration_renew_errors counter metrics should have \"_total\" suffix",
    ]
    .into();
    assert_eq!(
        lints, allowed,
        "promtool check metrics reports only the kubelet's own legacy names"
    );
    let _ = agent.terminate().await;
}

#[tokio::test]
async fn a_taken_port_is_one_error_line_and_the_agent_runs_on() {
    let tp = support::plane(Duration::from_secs(3600)).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let agent = Agent::spawn(&args(&node, "n-taken", &addr, &[]));
    agent
        .wait_for_log("ready: client certificate and kubeconfig in place")
        .await;
    agent.wait_for_log_count("lease renewed", 1).await;
    let log = agent.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot listen for /metrics"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&addr) && lines[0].contains("ERROR"),
        "{}",
        lines[0]
    );
    assert!(node.current().exists());
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_wedged_loop_turns_healthz_500() {
    let tp = support::plane(Duration::from_secs(3600)).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(
        &node,
        "n-wedge",
        "127.0.0.1:0",
        &["--test-wedge-lease-after", "2s"],
    ));
    let addr = metrics_address(&agent).await;
    agent
        .wait_for_log("ready: client certificate and kubeconfig in place")
        .await;
    assert_eq!(get(addr, "/healthz").await.0, 200);
    agent.wait_for_log("--test-wedge-lease-after reached").await;
    // The loop promised its next beat within a renewal interval plus slack: poll until
    // that promise is broken (bounded by WAIT).
    let body = tokio::time::timeout(WAIT, async {
        loop {
            let (code, body) = get(addr, "/healthz").await;
            if code == 500 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("/healthz turns 500 once the Lease loop misses its heartbeat");
    assert!(body.starts_with("the lease loop is "), "{body}");
    // Readiness is the certificate: still ready.
    assert_eq!(get(addr, "/readyz").await.0, 200);
    let _ = agent.terminate().await;
}

/// Connections the testplane saw: (id, the client's CN, closed?).
type Seen = Vec<(u64, Option<String>, bool)>;

/// Record connections until `n` more Lease renewals have arrived (bounded by WAIT).
async fn record_until_renewals(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    seen: &mut Seen,
    n: usize,
) {
    let mut renewals = 0;
    tokio::time::timeout(WAIT, async {
        while renewals < n {
            match events.recv().await.expect("testplane events") {
                Event::TlsHandshake {
                    conn, client_cn, ..
                } => seen.push((conn, client_cn, false)),
                Event::ConnectionClosed { conn } => {
                    if let Some(c) = seen.iter_mut().find(|c| c.0 == conn) {
                        c.2 = true;
                    }
                }
                Event::LeaseRenewed { .. } => renewals += 1,
                _ => {}
            }
        }
    })
    .await
    .expect("Lease renewals in time");
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn an_identity_no_longer_used_leaves_no_connection_open() {
    // Certificates of 8 s rotate at 75 %: a rotation every ~6 s.
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(8))
        .allow_short_expiration(true)
        .start()
        .await
        .unwrap();
    let mut events = tp.events();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut a = args(&node, "n-idle", "off", &["--test-short-lease-interval"]);
    let at = a.iter().position(|s| s == "1s").unwrap();
    a[at] = "250ms".into();
    let agent = Agent::spawn(&a);
    let mut seen = Seen::new();
    // Two renewals after the first: by then the bootstrap token's connection must be gone.
    record_until_renewals(&mut events, &mut seen, 3).await;
    let token: Vec<_> = seen.iter().filter(|c| c.1.is_none()).collect();
    assert!(
        !token.is_empty(),
        "the bootstrap token's connection: {seen:?}"
    );
    assert!(
        token.iter().all(|c| c.2),
        "the bootstrap token's connections are closed once the certificate is installed: {seen:?}"
    );
    // After a rotation, the previous certificate's connections close too: the Lease loop
    // switches at its next renewal, and the client that filed the rotation's CSR is dropped.
    agent
        .wait_for_log_count("client certificate installed", 2)
        .await;
    record_until_renewals(&mut events, &mut seen, 3).await;
    let open: Vec<_> = seen.iter().filter(|c| !c.2).collect();
    assert_eq!(
        open.len(),
        1,
        "only the Lease loop's connection stays open after a rotation: {seen:?}"
    );
    let _ = agent.terminate().await;
}

/// A local client that pipelines requests and never reads: its answers fill both socket
/// buffers, hyper blocks writing, and the connection would hold its permit forever (before
/// the fix the 17th scrape was never answered). Sixteen of them hold every permit. The
/// per-connection deadline (no byte in or out for `IDLE_TIMEOUT`) closes them, so a 17th
/// scrape is answered after that deadline plus the time the hogs take to fill the buffers
/// (megabytes of answers, each a fresh render: 1-4 s here, up to ~10 s on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_clients_that_never_read_do_not_block_scrapes_past_the_deadline() {
    use bootlet::metrics::server::{IDLE_TIMEOUT, MAX_CONNECTIONS};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    /// The fill time allowed on top of the deadline.
    const FILL: Duration = Duration::from_secs(20);

    let tp = support::plane(Duration::from_secs(3600)).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "n-pipeline", "127.0.0.1:0", &[]));
    let addr = metrics_address(&agent).await;
    agent
        .wait_for_log("ready: client certificate and kubeconfig in place")
        .await;
    assert_eq!(get(addr, "/metrics").await.0, 200);

    // Each writes requests without end and reads nothing (a small receive buffer fills
    // sooner); when the server closes it, it reports when.
    let start = Instant::now();
    let batch = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let mut hogs = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        let batch = batch.clone();
        hogs.push(tokio::spawn(async move {
            while stream.write_all(batch.as_bytes()).await.is_ok() {}
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest).await;
            Instant::now()
        }));
    }
    // Every permit is held: a scrape gets no answer at first...
    let scrape = tokio::spawn(async move {
        let answer = support::http_within(addr, "GET", "/healthz", IDLE_TIMEOUT + FILL).await;
        (answer, Instant::now())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !scrape.is_finished(),
        "the 17th scrape was answered while {MAX_CONNECTIONS} connections held every permit"
    );
    // ...and is answered once the idle deadline closed them: not before it, not much after.
    let ((code, body), answered) = tokio::time::timeout(IDLE_TIMEOUT + FILL, scrape)
        .await
        .expect("the 17th scrape is answered after the per-connection deadline")
        .unwrap();
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let waited = answered - start;
    eprintln!("17th scrape answered after {waited:?} (idle deadline {IDLE_TIMEOUT:?})");
    assert!(
        waited >= IDLE_TIMEOUT && waited <= IDLE_TIMEOUT + FILL,
        "answered after {waited:?}"
    );
    for hog in hogs {
        let closed = tokio::time::timeout(FILL, hog)
            .await
            .expect("every hog is closed by the server")
            .unwrap()
            - start;
        assert!(
            closed >= IDLE_TIMEOUT && closed <= IDLE_TIMEOUT + FILL,
            "closed after {closed:?}"
        );
    }
    // The agent serves on.
    assert_eq!(get(addr, "/readyz").await.0, 200);
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}
