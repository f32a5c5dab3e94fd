//! The Lease on the wire as protobuf (issue 22), against the testplane: protobuf by
//! default for the create, the PUTs and the re-read after a 409; one 415 from a server
//! that refuses protobuf, then JSON for good; `--test-lease-content-type json` and
//! `--test-lease-http1`. And the figures bench/proto.sh prints (`bytes_and_cpu_per_renewal`:
//! protobuf fewer bytes than JSON both ways, HTTP/2 fewer than HTTP/1.1).

use crate::support;

use std::time::Duration;

use support::{lease_requests, lease_writes, plane, wait_event, Agent, NodeDir};
use testplane::{AcceptMode, Event, RequestRecord};

const HOUR: Duration = Duration::from_secs(3600);
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const FALLBACK: &str = "the API server refuses protobuf";

fn args(node: &NodeDir, name: &str, interval: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.push("--test-short-lease-interval".into());
    a.extend(
        [
            "--lease-renew-interval",
            interval,
            "--lease-duration",
            "40s",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    a
}

fn is_write(r: &RequestRecord) -> bool {
    r.method == "PUT" || r.method == "POST"
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn protobuf_is_what_goes_on_the_wire_by_default() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "pb", "200ms", &[]));
    lease_writes(&mut events, "pb", 3).await;
    // A 409 (answered as a protobuf Status): bootlet re-reads the Lease and writes again.
    tp.faults().lease_conflict_once();
    lease_writes(&mut events, "pb", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");

    let requests = lease_requests(&tp, "pb");
    let written: Vec<_> = requests.iter().filter(|r| is_write(r)).collect();
    assert!(written.len() >= 6, "{requests:#?}");
    assert_eq!(written[0].method, "POST", "the create comes first");
    for r in &written {
        assert_eq!(r.content_type, PROTOBUF, "{r:?}");
    }
    // Every answer, the 404 of the first read, the 409 and the re-read included, was
    // protobuf: bootlet's Accept puts it first.
    for r in &requests {
        assert_eq!(r.response_type, PROTOBUF, "{r:?}");
    }
    assert!(requests.iter().any(|r| r.status == 409), "{requests:#?}");
    let reread = requests
        .iter()
        .skip_while(|r| r.status != 409)
        .nth(1)
        .expect("a request after the 409");
    assert_eq!((reread.method.as_str(), reread.status), ("GET", 200));
    assert!(!log.contains(FALLBACK), "{log}");
    assert!(!log.contains("Lease renewal failed"), "{log}");
    assert!(!log.contains("another writer"), "{log}");

    // What the testplane stored is the Lease bootlet meant, renewTime at microseconds.
    let lease = tp.lease("kube-node-lease", "pb").expect("the Lease");
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pb"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert!(spec.renew_time.is_some());
    assert!(tp.unexpected_requests().is_empty());
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_deleted_lease_comes_back_through_protobuf_errors() {
    // The PUT of a Lease that is gone fails its UID precondition (409, a protobuf Status);
    // the re-read is a protobuf 404; the create goes as protobuf again.
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "gone", "200ms", &[]));
    lease_writes(&mut events, "gone", 3).await;
    tp.delete_lease("kube-node-lease", "gone").unwrap();
    wait_event(&mut events, |e| match e {
        Event::LeaseCreated { name, .. } if name == "gone" => Some(()),
        _ => None,
    })
    .await;
    lease_writes(&mut events, "gone", 2).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let requests = lease_requests(&tp, "gone");
    let at = requests
        .iter()
        .position(|r| r.status == 409)
        .unwrap_or_else(|| panic!("a 409 after the delete: {requests:#?}"));
    let seen: Vec<_> = requests[at..at + 3]
        .iter()
        .map(|r| (r.method.as_str(), r.status, r.response_type.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("PUT", 409, PROTOBUF),
            ("GET", 404, PROTOBUF),
            ("POST", 201, PROTOBUF)
        ],
        "{requests:#?}"
    );
    assert_eq!(requests[at + 2].content_type, PROTOBUF);
    assert!(!log.contains("Lease renewal failed"), "{log}");
    assert!(!log.contains(FALLBACK), "{log}");
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn a_server_that_refuses_protobuf_gets_one_refused_request_then_json() {
    let tp = plane(HOUR).await;
    tp.faults().refuse_protobuf(true);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let mut a = args(&node, "refused", "200ms", &[]);
    let at = a
        .iter()
        .position(|s| s == "--metrics-bind-address")
        .unwrap();
    a[at + 1] = "127.0.0.1:0".into();
    let agent = Agent::spawn(&a);
    lease_writes(&mut events, "refused", 5).await;
    let addr = support::metrics_address(&agent).await;
    let (_, metrics) = support::http(addr, "GET", "/metrics").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");

    let requests = lease_requests(&tp, "refused");
    let refused: Vec<_> = requests.iter().filter(|r| r.status == 415).collect();
    assert_eq!(
        refused.len(),
        1,
        "exactly one refused request: {requests:#?}"
    );
    assert_eq!(refused[0].content_type, PROTOBUF);
    // The refused write is sent again in JSON at once, on the same connection, and every
    // write after it is JSON.
    let i = requests.iter().position(|r| r.status == 415).unwrap();
    let retry = &requests[i + 1];
    assert_eq!(retry.method, refused[0].method);
    assert_eq!(retry.conn, refused[0].conn);
    assert!(retry.status < 300, "{retry:?}");
    let after = &requests[i + 1..];
    assert!(after.len() >= 5, "{requests:#?}");
    for r in after.iter().filter(|r| is_write(r)) {
        assert_eq!(r.content_type, "application/json", "{r:?}");
    }
    assert_eq!(log.matches(FALLBACK).count(), 1, "one log line:\n{log}");
    assert!(!log.contains("Lease renewal failed"), "{log}");
    assert!(
        metrics.contains("\nbootlet_lease_protobuf 0\n"),
        "{metrics}"
    );
    assert!(tp.unexpected_requests().is_empty());
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn the_fallback_outlives_a_lease_loop_restarted_by_a_reload() {
    let tp = plane(HOUR).await;
    tp.faults().refuse_protobuf(true);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let config = node.tmp.path().join("bootlet.yaml");
    std::fs::write(&config, "leaseRenewInterval: 300ms\nleaseDuration: 40s\n").unwrap();
    let mut a = node.args("reloaded");
    a.extend(["--config".into(), support::path(&config)]);
    a.push("--test-short-lease-interval".into());
    let mut events = tp.events();
    let agent = Agent::spawn(&a);
    lease_writes(&mut events, "reloaded", 3).await;
    // A new cadence restarts the Lease loop; the server still refuses protobuf.
    std::fs::write(&config, "leaseRenewInterval: 200ms\nleaseDuration: 40s\n").unwrap();
    support::signal(agent.pid(), "HUP");
    let line = agent.wait_for_log("configuration reloaded").await;
    assert!(line.contains("leaseRenewInterval=200ms"), "{line}");
    lease_writes(&mut events, "reloaded", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let requests = lease_requests(&tp, "reloaded");
    assert_eq!(
        requests.iter().filter(|r| r.status == 415).count(),
        1,
        "{requests:#?}"
    );
    assert_eq!(log.matches(FALLBACK).count(), 1, "{log}");
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn the_json_flag_sends_json() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let a = args(&node, "js", "200ms", &["--test-lease-content-type", "json"]);
    let agent = Agent::spawn(&a);
    lease_writes(&mut events, "js", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let requests = lease_requests(&tp, "js");
    assert!(requests.iter().filter(|r| is_write(r)).count() >= 3);
    for r in &requests {
        if is_write(r) {
            assert_eq!(r.content_type, "application/json", "{r:?}");
        }
        assert!(r.response_type.starts_with("application/json"), "{r:?}");
    }
    assert!(!log.contains(FALLBACK), "{log}");
}

/// `--test-lease-http1` (the bench's way to compare the two on one server): the Lease goes
/// over HTTP/1.1 though the server offers HTTP/2, protobuf still.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn the_http1_flag_offers_only_http1() {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "h1", "200ms", &["--test-lease-http1"]));
    lease_writes(&mut events, "h1", 3).await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let writes: Vec<_> = lease_requests(&tp, "h1")
        .into_iter()
        .filter(is_write)
        .collect();
    assert!(writes.len() >= 3, "{writes:?}");
    for r in &writes {
        assert_eq!(r.version, "HTTP/1.1", "{r:?}");
        assert_eq!(r.content_type, PROTOBUF, "{r:?}");
    }
}

/// CPU time of every thread of `pid` so far (`/proc/PID/task/*/schedstat`), nanoseconds.
fn cpu_ns(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// Per renewal over `n` steady renewals at `interval`: (request bytes, response bytes, CPU
/// µs), counted on the Lease connection at the testplane's TCP stream (TLS records
/// included), sampled half an interval after a renewal, while bootlet sleeps. The node is
/// bench/agent.sh's: `bench-node`, registered, so the Lease carries its owner reference.
/// `http1` makes the testplane offer only HTTP/1.1 by ALPN.
async fn per_renewal(wire: &str, http1: bool, n: usize, interval: Duration) -> (f64, f64, f64) {
    const NODE: &str = "bench-node";
    let tp = plane(HOUR).await;
    if http1 {
        tp.faults().set_accept_mode(AcceptMode::Http1Only).await;
    }
    tp.create_node(NODE);
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let ms = format!("{}ms", interval.as_millis());
    let agent = Agent::spawn(&args(
        &node,
        NODE,
        &ms,
        &["--test-lease-content-type", wire],
    ));
    lease_writes(&mut events, NODE, 4).await;
    let last = lease_requests(&tp, NODE).last().unwrap().clone();
    let version = if http1 { "HTTP/1.1" } else { "HTTP/2.0" };
    assert_eq!(last.version, version);
    let conn = last.conn;
    tokio::time::sleep(interval / 2).await;
    let (b0, c0) = (tp.wire_bytes(conn).unwrap(), cpu_ns(agent.pid()));
    lease_writes(&mut events, NODE, n).await;
    tokio::time::sleep(interval / 2).await;
    let (b1, c1) = (tp.wire_bytes(conn).unwrap(), cpu_ns(agent.pid()));
    let same = lease_requests(&tp, NODE)
        .iter()
        .rev()
        .take(n)
        .all(|r| r.conn == conn);
    assert!(same, "the renewals stayed on one connection");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let n = n as f64;
    (
        (b1.from_client - b0.from_client) as f64 / n,
        (b1.to_client - b0.to_client) as f64 / n,
        (c1 - c0) as f64 / 1000.0 / n,
    )
}

/// Protobuf takes fewer bytes than JSON both ways, over either HTTP version, and HTTP/2
/// (the default wherever the server offers it) fewer than HTTP/1.1 both ways: HPACK sends
/// the headers that do not change as table indexes. `bash bench/proto.sh` runs this with
/// `PROTO_RENEWALS=50` in a release build for docs/performance.md's figures; the suite's 8 renewals
/// are enough for the bytes (the same every renewal), not for the CPU.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn bytes_and_cpu_per_renewal() {
    let n: usize = std::env::var("PROTO_RENEWALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let interval = Duration::from_millis(200);
    println!("| wire | HTTP | request B/renewal | response B/renewal | CPU µs/renewal |");
    println!("|---|---|---|---|---|");
    let mut bytes = std::collections::BTreeMap::new();
    for http1 in [true, false] {
        for wire in ["json", "protobuf"] {
            let (req, resp, cpu) = per_renewal(wire, http1, n, interval).await;
            let http = if http1 { "1.1" } else { "2" };
            println!("| {wire} | {http} | {req:.0} | {resp:.0} | {cpu:.0} |");
            bytes.insert((wire, http1), (req, resp));
        }
    }
    for http1 in [true, false] {
        let (json, pb) = (bytes[&("json", http1)], bytes[&("protobuf", http1)]);
        assert!(
            pb.0 < json.0 && pb.1 < json.1,
            "HTTP/1.1 only: {http1}: json {json:?}, protobuf {pb:?}"
        );
    }
    for wire in ["json", "protobuf"] {
        let (h1, h2) = (bytes[&(wire, true)], bytes[&(wire, false)]);
        assert!(
            h2.0 < h1.0 && h2.1 < h1.1,
            "{wire}: HTTP/1.1 {h1:?}, HTTP/2 {h2:?}"
        );
    }
}
