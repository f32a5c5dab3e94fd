//! The node Lease heartbeat, measured from the testplane's request log and events.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bootlet::api::kubeconfig::Credential;
use bootlet::api::ApiClient;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
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

/// Wait for `n` successful renewals of `node`'s Lease by bootlet (the node's identity);
/// returns their renewTimes.
async fn renewals(
    tp: &TestPlane,
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    node: &str,
    n: usize,
) -> Vec<jiff::Timestamp> {
    let ours = format!("system:node:{node}");
    let mut times = Vec::new();
    while times.len() < n {
        let t = wait_event(events, |e| match e {
            Event::LeaseRenewed {
                name,
                renew_time,
                user,
                ..
            } if name == node && *user == ours => Some(*renew_time),
            Event::LeaseCreated { name, user, .. } if name == node && *user == ours => Some(None),
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

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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
    // Over the Lease loop's own connection, HTTP/2 as the testplane offers it (one write
    // per request, no timers).
    assert!(
        writes.iter().all(|r| r.version == "HTTP/2.0"),
        "{:?}",
        writes.iter().map(|r| &r.version).collect::<Vec<_>>()
    );
}

/// The Lease connection has no PING timer (its renewals are its liveness check), so
/// its quiet stretches are covered by TCP keepalive in the kernel, well under the grace
/// period: `ss` shows a keepalive timer of at most 15 s on every socket bootlet holds to
/// the API server between renewals.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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
    let back = testplane::wall_now();
    renewals(&tp, &mut events, "outage", 1).await;
    let after = testplane::wall_now().duration_since(back).unwrap();
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
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

/// The cluster admin's client, for what a kubelet or an operator does to the objects.
fn admin(tp: &TestPlane) -> ApiClient {
    let (cert, key) = tp.admin_credentials();
    ApiClient::new(
        &tp.url(),
        tp.ca_pem().as_bytes(),
        &Credential::ClientCert {
            chain_pem: cert,
            key: bootlet::pki::PrivateKeyPem::new(key),
        },
        Default::default(),
    )
    .unwrap()
}

fn lease_path(node: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
}

/// Another writer of `node`'s Lease, as a kubelet renewing its own: every 50 ms it reads
/// the Lease and writes it back with a fresh renewTime, as the cluster admin (so its
/// requests are told apart from bootlet's by user).
struct OtherWriter {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl OtherWriter {
    fn start(tp: &TestPlane, node: &str) -> Self {
        let client = admin(tp);
        let path = lease_path(node);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            while !flag.load(Ordering::Relaxed) {
                if let Ok(mut lease) = client.get::<Lease>(&path).await {
                    let t = kubelet_renew_time();
                    lease.spec.as_mut().unwrap().renew_time = Some(MicroTime(t));
                    let _ = client.replace::<_, Lease>(&path, &lease).await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { stop, task }
    }

    /// Stops writing; returns once its last write is answered.
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// A renewTime as the kubelet writes it: now at microseconds, never with bootlet's mark.
fn kubelet_renew_time() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    let t = jiff::Timestamp::from_microsecond(now.as_microsecond()).unwrap();
    match bootlet::lease::is_marked(t) {
        true => t + jiff::SignedDuration::from_micros(1),
        false => t,
    }
}

/// Lease writes by bootlet (the node's identity) at or after `since`.
fn writes_since(tp: &TestPlane, node: &str, since: SystemTime) -> usize {
    lease_writes(tp, node)
        .iter()
        .filter(|r| r.at >= since)
        .count()
}

/// Before: bootlet backed off from the other writer (the kubelet) and, when that writer
/// stopped, its next PUT succeeded and it renewed from then on, keeping the node Ready with
/// no kubelet. Now it stops writing once it has seen another writer, and when that writer
/// stops it says so once, at error level, and still writes nothing.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_second_writer_that_stops_is_never_replaced() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    // 200 ms renewals, a 2 s Lease: bootlet reads it every second once it stands aside.
    let agent = Agent::spawn(&args(&node, "twice", "200ms", &[]));
    renewals(&tp, &mut events, "twice", 2).await;
    let writer = OtherWriter::start(&tp, "twice");
    let warning = agent.wait_for_log("--renew-lease=false").await;
    let warned = testplane::wall_now();
    assert!(warning.contains("renewed by another writer"), "{warning}");
    // Ten periods of the other writer renewing: bootlet writes nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.stop().await;
    let stopped = testplane::wall_now();
    let line = agent.wait_for_log("does not take over").await;
    assert!(line.contains("ERROR"), "{line}");
    // Ten more periods after bootlet noticed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("renewed by another writer").count(), 1, "{log}");
    assert_eq!(log.matches("does not take over").count(), 1, "{log}");
    assert!(!log.contains("takes over renewing"), "{log}");
    assert_eq!(
        writes_since(&tp, "twice", warned),
        0,
        "bootlet wrote while the other writer renewed"
    );
    assert_eq!(
        writes_since(&tp, "twice", stopped),
        0,
        "bootlet resumed after the other writer stopped"
    );
    // It only read the Lease, once a second (the 2 s Lease's half): a few GETs, no more.
    let reads = tp
        .requests()
        .iter()
        .filter(|r| r.user == "system:node:twice" && r.method == "GET" && r.at > warned)
        .count();
    assert!((3..=8).contains(&reads), "{reads} reads in about 5 s");
}

/// Before: a renewal the server applied and then left unanswered (its connection reset: an
/// API server killed between the etcd commit and the answer, a VIP failover) was sent once
/// more on a fresh connection; the replay got 409, the loop forgot the renewTime it had
/// just sent, re-read the Lease, took its own renewTime for another writer's and stopped
/// renewing for good. Now a write is never replayed, and every renewTime bootlet wrote is
/// recognised as its own: the renewals go on.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_renewal_applied_and_left_unanswered_is_taken_for_its_own() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "unanswered", "200ms", &[]));
    // Two renewals: the next one goes over a connection that served earlier ones.
    renewals(&tp, &mut events, "unanswered", 2).await;
    tp.faults().apply_then_reset_next(1);
    // The applied write, then renewals after it.
    let times = renewals(&tp, &mut events, "unanswered", 6).await;
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains("renewed by another writer"), "{log}");
    let requests = tp.requests();
    let writes = requests
        .iter()
        .filter(|r| r.user == "system:node:unanswered" && r.method == "PUT")
        .count();
    assert!(writes >= 7, "{writes} PUTs");
}

/// Before: standing aside for another writer lasted one process: after a restart
/// bootlet's first write could not be judged, it succeeded, and a dead kubelet was hidden
/// again. Now a Lease whose renewTime does not carry bootlet's mark was renewed last by
/// someone else, and the restarted bootlet stands aside before its first write, while a
/// restart after its own renewals (marked) goes on renewing.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_restart_does_not_forget_the_other_writer() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let a = args(&node, "restarted", "200ms", &[]);
    // A restart after bootlet's own renewals: its predecessor's renewTime is its own.
    let agent = Agent::spawn(&a);
    renewals(&tp, &mut events, "restarted", 2).await;
    agent.terminate().await;
    let agent = Agent::spawn(&a);
    renewals(&tp, &mut events, "restarted", 2).await;
    // Another writer: bootlet stands aside; the writer stops; bootlet is restarted.
    let writer = OtherWriter::start(&tp, "restarted");
    agent.wait_for_log("--renew-lease=false").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    writer.stop().await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let stopped = testplane::wall_now();
    let agent = Agent::spawn(&a);
    let line = agent.wait_for_log("before its first write").await;
    assert!(line.contains("another writer"), "{line}");
    // The Lease stays as the other writer left it: the node goes NotReady.
    let line = agent.wait_for_log("does not take over").await;
    assert!(line.contains("ERROR"), "{line}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(
        writes_since(&tp, "restarted", stopped),
        0,
        "the restarted bootlet wrote the Lease the other writer renewed last"
    );
}

/// Before: a reload that changed a Lease key restarted the Lease loop from the new file,
/// restart-only keys included: a new `nodeName` made bootlet renew another node's Lease
/// with the old certificate (403 on every renewal, the real node NotReady) while the log
/// said nodeName needed a restart. Now the loop is built from the running settings plus the
/// reloadable keys: the new cadence applies, the node stays the one it runs as.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_reload_restarts_the_lease_loop_without_its_restart_only_keys() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let config = node.tmp.path().join("bootlet.yaml");
    std::fs::write(
        &config,
        "nodeName: kept\nleaseRenewInterval: 300ms\nleaseDuration: 2s\n",
    )
    .unwrap();
    // The node name comes from the file alone (no --node-name flag over it).
    let mut a: Vec<String> = node
        .args("kept")
        .into_iter()
        .filter(|a| a != "--node-name" && a != "kept")
        .collect();
    a.extend(["--config".into(), support::path(&config)]);
    a.push("--test-short-lease-interval".into());
    let mut events = tp.events();
    let agent = Agent::spawn(&a);
    renewals(&tp, &mut events, "kept", 2).await;
    std::fs::write(
        &config,
        "nodeName: other\nleaseRenewInterval: 200ms\nleaseDuration: 2s\n",
    )
    .unwrap();
    support::signal(agent.pid(), "HUP");
    let line = agent.wait_for_log("configuration reloaded").await;
    assert!(line.contains("leaseRenewInterval=200ms"), "{line}");
    let reloaded = testplane::wall_now();
    renewals(&tp, &mut events, "kept", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(log.contains("only applied after a restart"), "{log}");
    assert!(
        tp.requests()
            .iter()
            .all(|r| !r.path.contains("/leases/other") && !r.path.ends_with("/nodes/other")),
        "bootlet touched the Lease of the node in the new file"
    );
    assert!(writes_since(&tp, "kept", reloaded) >= 3);
}

/// With a health probe that answers, a writer that stopped may be replaced, and the
/// takeover is an error-level line; while the other writer renews, bootlet still stays out.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn with_an_answering_probe_bootlet_takes_over_from_a_writer_that_stopped() {
    let (url, _healthy) = healthz(true).await;
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "takeover",
        "200ms",
        &["--lease-health-probe", &url],
    ));
    renewals(&tp, &mut events, "takeover", 2).await;
    let writer = OtherWriter::start(&tp, "takeover");
    let warning = agent.wait_for_log("--renew-lease=false").await;
    let warned = testplane::wall_now();
    assert!(warning.contains("only if that writer stops"), "{warning}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.stop().await;
    assert_eq!(
        writes_since(&tp, "takeover", warned),
        0,
        "bootlet wrote while the other writer renewed"
    );
    let line = agent.wait_for_log("takes over renewing").await;
    assert!(line.contains("ERROR"), "{line}");
    let times = renewals(&tp, &mut events, "takeover", 3).await;
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("takes over renewing").count(), 1, "{log}");
}

/// Before: the Lease's owner reference was looked up once and kept: after `kubectl delete
/// node` and re-registration, the garbage collector deleted the Lease, and bootlet created
/// it again with the dead Node's UID (to be collected again, every period). Now a Lease
/// that is gone makes bootlet look the Node up again before it creates one, still without
/// a Node lookup per renewal.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_re_registered_node_gets_its_new_uid_in_the_recreated_lease() {
    let tp = plane(HOUR).await;
    let old_uid = tp.create_node("rereg");
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "rereg",
        "200ms",
        &["--lease-owner-lookup-interval", "1s"],
    ));
    let owner_uid = |tp: &TestPlane| {
        tp.lease("kube-node-lease", "rereg")
            .and_then(|l| l.metadata.owner_references)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.uid)
            .collect::<Vec<_>>()
    };
    let node_gets = |tp: &TestPlane| {
        tp.requests()
            .iter()
            .filter(|r| r.user == "system:node:rereg" && r.path == "/api/v1/nodes/rereg")
            .count()
    };
    renewals(&tp, &mut events, "rereg", 2).await;
    assert_eq!(owner_uid(&tp), vec![old_uid.clone()]);
    // Ten renewals over 2 s, twice the lookup interval: the one lookup at start.
    renewals(&tp, &mut events, "rereg", 10).await;
    assert_eq!(node_gets(&tp), 1);

    // kubectl delete node; the kubelet registers it again (a new UID); the garbage
    // collector deletes the Lease the old Node owned.
    let admin = admin(&tp);
    let delete = |path: String| {
        let admin = admin.clone();
        async move {
            admin
                .call::<(), serde_json::Value>(reqwest::Method::DELETE, &path, None)
                .await
                .unwrap()
        }
    };
    delete("/api/v1/nodes/rereg".into()).await;
    let new_uid = tp.create_node("rereg");
    assert_ne!(new_uid, old_uid);
    delete(lease_path("rereg")).await;
    wait_event(&mut events, |e| match e {
        Event::LeaseCreated { name, user, .. }
            if name == "rereg" && user == "system:node:rereg" =>
        {
            Some(())
        }
        _ => None,
    })
    .await;
    assert_eq!(owner_uid(&tp), vec![new_uid.clone()]);
    renewals(&tp, &mut events, "rereg", 10).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(owner_uid(&tp), vec![new_uid]);
    // One lookup at start, one before the create: none per renewal.
    assert_eq!(node_gets(&tp), 2);
    assert!(lease_writes(&tp, "rereg").len() >= 22);
}

/// Before: `Retry-After: 18446744073709551615` on a Lease answer overflowed `Instant +
/// Duration` and panicked the Lease task: no renewal ever again. Now a hint longer than
/// the interval ends that period's retries and the next slot renews as usual.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_huge_retry_after_does_not_stop_the_renewals() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "huge", "200ms", &[]));
    renewals(&tp, &mut events, "huge", 2).await;
    tp.faults().throttle_next(1, Duration::from_secs(u64::MAX));
    renewals(&tp, &mut events, "huge", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let codes: Vec<u16> = lease_writes(&tp, "huge").iter().map(|r| r.status).collect();
    assert!(codes.contains(&429), "{codes:?}");
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
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

/// A local `/healthz` answering 200 while the flag is true, 500 otherwise; its URL.
async fn healthz(healthy: bool) -> (String, Arc<AtomicBool>) {
    let healthy = Arc::new(AtomicBool::new(healthy));
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
    (url, healthy)
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn the_health_probe_gates_renewals() {
    let (url, healthy) = healthz(true).await;
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
