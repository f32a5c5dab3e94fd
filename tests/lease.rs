//! The node Lease heartbeat, measured from the testplane's request log and events.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use support::{plane, wait_event, Agent, NodeDir};
use testplane::{Event, RequestRecord, TestPlane};

const HOUR: Duration = Duration::from_secs(3600);

fn args(node: &NodeDir, name: &str, interval: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    // Sub-second intervals see many renewals quickly; below 1 s needs this test switch.
    a.push("--test-short-lease-interval".into());
    a.extend(
        ["--lease-renew-interval", interval]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    if !extra.contains(&"--lease-duration") {
        a.extend(["--lease-duration".to_string(), "2s".to_string()]);
    }
    a
}

/// Lease writes (create or update) by `node`, in order.
fn lease_writes(tp: &TestPlane, node: &str) -> Vec<RequestRecord> {
    let user = format!("system:node:{node}");
    tp.requests()
        .into_iter()
        .filter(|r| {
            r.user == user
                && r.path.contains("/leases")
                && (r.method == "PUT" || r.method == "POST")
        })
        .collect()
}

/// Wait for `n` successful renewals of `node`'s Lease; returns their renewTimes.
async fn renewals(
    tp: &TestPlane,
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    node: &str,
    n: usize,
) -> Vec<jiff::Timestamp> {
    let mut times = Vec::new();
    while times.len() < n {
        let t = wait_event(events, |e| match e {
            Event::LeaseRenewed {
                name, renew_time, ..
            } if name == node => Some(*renew_time),
            Event::LeaseCreated { name, .. } if name == node => Some(None),
            _ => None,
        })
        .await;
        times.push(
            t.or_else(|| lease_renew_time(tp, node))
                .expect("renewTime set"),
        );
    }
    times
}

fn lease_renew_time(tp: &TestPlane, node: &str) -> Option<jiff::Timestamp> {
    tp.lease("kube-node-lease", node)?
        .spec?
        .renew_time
        .map(|t| t.0)
}

#[tokio::test]
async fn cadence_is_exact_with_one_request_per_renewal_over_one_connection() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let interval = Duration::from_millis(200);
    let agent = Agent::spawn(&args(&node, "cadence", "200ms", &[]));
    let times = renewals(&tp, &mut events, "cadence", 22).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");

    // renewTime strictly increasing.
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");

    // Cadence from the server's own log: every gap within ±(jitter + 50 ms), no drift.
    let writes = lease_writes(&tp, "cadence");
    let at: Vec<SystemTime> = writes.iter().map(|r| r.at).collect();
    let tolerance = interval.mul_f64(0.04) + Duration::from_millis(50);
    for (i, w) in at.windows(2).enumerate().skip(1) {
        let gap = w[1].duration_since(w[0]).unwrap();
        let off = gap.abs_diff(interval);
        assert!(off <= tolerance, "renewal {i}: gap {gap:?}");
    }
    let n = at.len() - 2;
    let span = at[at.len() - 1].duration_since(at[1]).unwrap();
    let drift = span.abs_diff(interval * n as u32);
    assert!(drift <= tolerance, "drift {drift:?} over {n} renewals");

    // Exactly one request per renewal: everything the node sent after the first write is a
    // Lease PUT, apart from the rare Node lookup.
    let user = "system:node:cadence";
    let first = writes[0].at;
    let other: Vec<_> = tp
        .requests()
        .into_iter()
        .filter(|r| {
            r.user == user && r.at > first && !(r.method == "PUT" && r.path.contains("/leases/"))
        })
        .filter(|r| !r.path.starts_with("/api/v1/nodes/"))
        .collect();
    assert!(other.is_empty(), "extra requests: {other:?}");
    // One TLS connection for the node identity over the whole run.
    let conns: std::collections::BTreeSet<u64> = tp
        .requests()
        .iter()
        .filter(|r| r.user == user)
        .map(|r| r.conn)
        .collect();
    assert_eq!(conns.len(), 1, "{conns:?}");
    // Over the Lease loop's own HTTP/1.1 connection (one write per request, no timers).
    assert!(
        writes.iter().all(|r| r.version == "HTTP/1.1"),
        "{:?}",
        writes.iter().map(|r| &r.version).collect::<Vec<_>>()
    );
}

/// The Lease connection has no PING timer (its renewals are its liveness check), so
/// its quiet stretches are covered by TCP keepalive in the kernel, well under the grace
/// period: `ss` shows a keepalive timer of at most 15 s on every socket bootlet holds to
/// the API server between renewals.
#[tokio::test]
async fn the_kernel_keeps_the_idle_lease_connection_alive() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "tcpka", "1s", &["--lease-duration", "40s"]));
    renewals(&tp, &mut events, "tcpka", 2).await;
    let port = tp.addr().port();
    let ours = format!("pid={},", agent.pid());
    let mut last = String::new();
    // Sample between renewals: a socket with a request in flight shows its retransmit timer.
    for _ in 0..20 {
        let filter = format!("dport = :{port}");
        let (ok, out) = support::run("ss", &["-tnopH", "state", "established", &filter]).await;
        assert!(ok, "{out}");
        let sockets: Vec<&str> = out.lines().filter(|l| l.contains(&ours)).collect();
        let keepalive_secs: Vec<Option<f64>> = sockets.iter().map(|l| keepalive(l)).collect();
        if !sockets.is_empty() && keepalive_secs.iter().all(|s| s.is_some_and(|s| s <= 15.0)) {
            let (status, log) = agent.terminate().await;
            assert!(status.success(), "{log}");
            return;
        }
        last = out;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("no keepalive timer of at most 15 s on bootlet's sockets: {last}");
}

/// The remaining time of `timer:(keepalive,14sec,0)` (or `…,980ms,0`) in an `ss -o` line.
fn keepalive(line: &str) -> Option<f64> {
    let rest = line.split("timer:(keepalive,").nth(1)?;
    let time = rest.split(',').next()?;
    let (num, scale) = match time.strip_suffix("ms") {
        Some(ms) => (ms, 0.001),
        None => (time.strip_suffix("sec")?, 1.0),
    };
    Some(num.parse::<f64>().ok()? * scale)
}

#[tokio::test]
async fn recovers_from_conflict_500s_and_429() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "faulty", "300ms", &[]));
    renewals(&tp, &mut events, "faulty", 2).await;

    tp.faults().lease_conflict_once();
    renewals(&tp, &mut events, "faulty", 2).await;
    tp.faults().fail_next(3, 500);
    renewals(&tp, &mut events, "faulty", 2).await;
    tp.faults().throttle_next(1, Duration::from_secs(1));
    renewals(&tp, &mut events, "faulty", 2).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let codes: Vec<u16> = lease_writes(&tp, "faulty")
        .iter()
        .map(|r| r.status)
        .collect();
    assert!(
        codes.contains(&409) && codes.contains(&500) && codes.contains(&429),
        "{codes:?}"
    );
}

#[tokio::test]
async fn the_first_renewal_after_an_outage_comes_within_one_interval() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "outage", "1s", &["--lease-duration", "40s"]));
    renewals(&tp, &mut events, "outage", 2).await;
    tp.faults().outage(Duration::from_secs(30)).await;
    let ended = testplane::wait_for(&mut events, Duration::from_secs(40), |e| {
        matches!(e, Event::OutageEnded).then_some(())
    })
    .await;
    assert!(ended.is_some(), "the outage ended");
    let back = SystemTime::now();
    renewals(&tp, &mut events, "outage", 1).await;
    let after = SystemTime::now().duration_since(back).unwrap();
    assert!(
        after <= Duration::from_millis(1100),
        "first renewal {after:?} after the server returned"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// A renewal that gets no answer is abandoned just before the next one is due (never
/// costing the next slot), and since no answer at all is what a dead connection looks
/// like, the next renewal goes over a fresh connection. Here the server is only slow (its
/// TCP stack still acknowledges), so the kernel's keepalive would have kept the old
/// connection: the switch is bootlet's own decision.
#[tokio::test]
async fn a_renewal_without_an_answer_is_abandoned_and_moves_to_a_fresh_connection() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "mute", "1s", &["--lease-duration", "40s"]));
    renewals(&tp, &mut events, "mute", 2).await;
    tp.faults().delay(Duration::from_secs(5));
    agent.wait_for_log("no answer within 950ms").await;
    tp.faults().delay(Duration::ZERO);
    // Three more: the late answer to the abandoned request may still be logged among them.
    renewals(&tp, &mut events, "mute", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");

    let writes = lease_writes(&tp, "mute");
    let ok: Vec<u64> = writes
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.conn)
        .collect();
    let (first, last) = (ok[0], ok[ok.len() - 1]);
    assert_ne!(first, last, "still on the connection that went quiet");
    // Renewals stayed one period apart: the abandoned one did not push the next slot out.
    let at: Vec<SystemTime> = writes
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.at)
        .collect();
    let last_gap = at[at.len() - 1].duration_since(at[at.len() - 2]).unwrap();
    assert!(last_gap < Duration::from_millis(1300), "{last_gap:?}");
}

#[tokio::test]
async fn a_slow_server_never_gets_concurrent_renewals() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "slow", "200ms", &[]));
    renewals(&tp, &mut events, "slow", 2).await;
    // Slower than the interval: each renewal is abandoned before the next is due.
    tp.faults().delay(Duration::from_millis(700));
    agent.wait_for_log_count("no answer within 190ms", 3).await;
    tp.faults().delay(Duration::ZERO);
    renewals(&tp, &mut events, "slow", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    // Requests are logged when answered: with one renewal in flight at a time, answers to
    // the node never come closer together than the injected delay while it was active.
    let writes = lease_writes(&tp, "slow");
    let ok = writes.iter().filter(|r| r.status / 100 == 2).count();
    assert!(ok >= 5, "{writes:?}");
    let overlapping = writes
        .windows(2)
        .filter(|w| {
            w[1].at.duration_since(w[0].at).unwrap_or_default() < Duration::from_millis(100)
        })
        .count();
    assert!(overlapping <= 1, "renewals piled up: {writes:?}");
}

#[tokio::test]
async fn the_owner_reference_appears_once_the_node_exists() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "owned",
        "200ms",
        &["--lease-owner-lookup-interval", "300ms"],
    ));
    renewals(&tp, &mut events, "owned", 2).await;
    let lease = tp.lease("kube-node-lease", "owned").unwrap();
    assert!(lease
        .metadata
        .owner_references
        .unwrap_or_default()
        .is_empty());
    let uid = tp.create_node("owned");
    let found = tokio::time::timeout(support::WAIT, async {
        loop {
            renewals(&tp, &mut events, "owned", 1).await;
            let refs = tp
                .lease("kube-node-lease", "owned")
                .unwrap()
                .metadata
                .owner_references
                .unwrap_or_default();
            if let Some(r) = refs.first() {
                return r.clone();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (found.kind.as_str(), found.name.as_str(), found.uid.as_str()),
        ("Node", "owned", uid.as_str())
    );
    agent.terminate().await;
    // The Node was looked up rarely, not on every renewal.
    let lookups = tp
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes/owned")
        .count();
    let writes = lease_writes(&tp, "owned").len();
    assert!(lookups < writes, "{lookups} lookups for {writes} renewals");
}

#[tokio::test]
async fn a_second_writer_gets_one_warning_and_no_write_war() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "twice", "200ms", &[]));
    renewals(&tp, &mut events, "twice", 2).await;
    let agent_conns: Vec<u64> = lease_writes(&tp, "twice").iter().map(|r| r.conn).collect();

    // Another client with the node's identity renews the same Lease every 50 ms.
    let (cert, key) = tp
        .client_cert("system:node:twice", &["system:nodes"])
        .unwrap();
    let other = bootlet::api::ApiClient::new(
        &tp.url(),
        tp.ca_pem().as_bytes(),
        &bootlet::api::kubeconfig::Credential::ClientCert {
            chain_pem: cert,
            key: bootlet::pki::PrivateKeyPem::new(key),
        },
        Default::default(),
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let writer = tokio::spawn(async move {
        let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/twice";
        let mut last = None;
        while !flag.load(Ordering::Relaxed) {
            if let Ok(mut lease) = other
                .get::<k8s_openapi::api::coordination::v1::Lease>(path)
                .await
            {
                let t = bootlet::lease::next_renew_time(SystemTime::now(), last);
                last = Some(t);
                lease.spec.as_mut().unwrap().renew_time =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(t));
                let _ = other
                    .replace::<_, k8s_openapi::api::coordination::v1::Lease>(path, &lease)
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    agent.wait_for_log("--renew-lease=false").await;
    let warned = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(log.matches("renewed by another writer").count(), 1, "{log}");
    // Backed off: bootlet's own connection (the one its first renewals used) made only a
    // few write attempts in 2 s, not one 409 per 200 ms period.
    let ours = agent_conns[0];
    let attempts = lease_writes(&tp, "twice")
        .iter()
        .filter(|r| r.conn == ours && r.at > warned)
        .count();
    assert!(
        attempts <= 5,
        "kept writing: {attempts} attempts in 2 s after the warning"
    );
}

#[tokio::test]
async fn renew_lease_false_leaves_the_lease_alone() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "nolease", "100ms", &["--renew-lease=false"]));
    agent.wait_for_log("left to the kubelet").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    agent.terminate().await;
    assert!(tp.lease("kube-node-lease", "nolease").is_none());
    assert!(lease_writes(&tp, "nolease").is_empty());
}

#[tokio::test]
async fn the_health_probe_gates_renewals() {
    let healthy = Arc::new(AtomicBool::new(true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/healthz", listener.local_addr().unwrap());
    let flag = healthy.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            let status = if flag.load(Ordering::Relaxed) {
                "200 OK"
            } else {
                "500 Internal Server Error"
            };
            let _ = sock
                .write_all(
                    format!(
                        "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                    )
                    .as_bytes(),
                )
                .await;
        }
    });
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "probed",
        "200ms",
        &["--lease-health-probe", &url],
    ));
    renewals(&tp, &mut events, "probed", 2).await;
    healthy.store(false, Ordering::Relaxed);
    agent.wait_for_log("health probe fails").await;
    let stopped_at = lease_writes(&tp, "probed").len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        lease_writes(&tp, "probed").len() <= stopped_at + 1,
        "renewed while the probe failed"
    );
    healthy.store(true, Ordering::Relaxed);
    agent
        .wait_for_log_count("health probe answers; renewing", 2)
        .await;
    renewals(&tp, &mut events, "probed", 2).await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}
