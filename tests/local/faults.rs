//! The API server misbehaving for a while (issue #14): a storm of 500s, 429s with
//! `Retry-After`, an outage, a server that accepts TCP and never answers, one that stalls
//! the TLS handshake, watches reset in the middle. Under each persistent fault bootlet stays
//! up, and the requests and log lines it makes in a window stay within the floors and caps
//! of its back-offs (counted from the testplane's request log and events and from its
//! stderr); once the server behaves it renews within one lease interval. The long version
//! of the outage (5 minutes at the real 10 s interval, CPU per 60 s) is `bench/outage.sh`.
//! A server that closes every watch at once is `tests/local/bootstrap.rs`'s
//! `a_watch_closed_at_once_is_retried_after_a_floor_and_the_approval_still_arrives`.

use crate::support;

use std::time::Duration;

use support::{lease_requests, lease_writes, plane, wait_event, Agent, NodeDir};
use testplane::{AcceptMode, Approval, Event, RequestRecord, TestPlane};
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);
/// The Lease interval of these tests (the contract's floor).
const INTERVAL: Duration = Duration::from_secs(1);
/// A counting window: three periods.
const WINDOW: Duration = Duration::from_secs(3);
/// What "within one lease interval" may add for the new connection and a loaded machine.
const SLACK: Duration = Duration::from_millis(250);
/// The kubelet's (and bootlet's) most attempts at one renewal.
const ATTEMPTS_PER_PERIOD: usize = 5;

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(
        ["--lease-renew-interval", "1s", "--lease-duration", "40s"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    a
}

/// CSR requests of any kind (create, get, list, watch).
fn csr_requests(tp: &TestPlane) -> Vec<RequestRecord> {
    tp.requests()
        .into_iter()
        .filter(|r| r.path.contains("certificatesigningrequests"))
        .collect()
}

/// Lines at warning level or louder among `lines`.
fn loud(lines: &[String]) -> usize {
    lines
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count()
}

/// Every log line after the first `from`.
fn lines_since(agent: &Agent, from: usize) -> Vec<String> {
    agent.log().lines().skip(from).map(str::to_string).collect()
}

fn log_len(agent: &Agent) -> usize {
    agent.log().lines().count()
}

/// How long after now the next renewal of `node` lands.
async fn next_renewal(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    node: &str,
) -> Duration {
    let back = Instant::now();
    lease_writes(events, node, 1).await;
    back.elapsed()
}

/// The CPU time (all threads) of process `pid` so far.
fn cpu(pid: u32) -> Duration {
    let mut ns = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns += testplane::sched::schedstat(&text).0;
    }
    Duration::from_nanos(ns)
}

/// The smallest gap between consecutive requests.
fn min_gap(requests: &[RequestRecord]) -> Duration {
    requests
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at).unwrap_or_default())
        .min()
        .unwrap_or(Duration::MAX)
}

/// A node with its Lease renewed twice, to break.
async fn renewing(
    name: &str,
) -> (
    TestPlane,
    NodeDir,
    Agent,
    tokio::sync::broadcast::Receiver<Event>,
) {
    let tp = plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, name, &[]));
    lease_writes(&mut events, name, 2).await;
    (tp, node, agent, events)
}

#[tokio::test]
async fn a_storm_of_500s_is_retried_within_floor_and_cap_and_the_lease_returns_within_one_interval()
{
    let (tp, _node, agent, _events) = renewing("storm").await;
    let (before, lines) = (lease_requests(&tp, "storm").len(), log_len(&agent));
    tp.faults().fail_always(Some(500));
    tokio::time::sleep(WINDOW).await;
    let window = lease_requests(&tp, "storm")[before..].to_vec();
    let log = lines_since(&agent, lines);
    let mut events = tp.events();
    tp.faults().fail_always(None);
    let back = next_renewal(&mut events, "storm").await;

    let periods = (WINDOW.as_secs_f64() / INTERVAL.as_secs_f64()) as usize;
    assert!(
        window.iter().all(|r| r.status == 500),
        "only failures in the window: {window:?}"
    );
    // The cap: at most the kubelet's five attempts per period; the floor: it keeps trying
    // every period, and retries are never closer than a twentieth of the interval, jittered.
    assert!(
        (periods..=(periods + 1) * ATTEMPTS_PER_PERIOD).contains(&window.len()),
        "{} Lease requests in {WINDOW:?} of 500s",
        window.len()
    );
    assert!(
        min_gap(&window) >= INTERVAL / 40,
        "retries {:?} apart",
        min_gap(&window)
    );
    assert!(
        loud(&log) <= periods + 1,
        "{} warnings in {WINDOW:?}:\n{}",
        loud(&log),
        log.join("\n")
    );
    assert!(back <= INTERVAL + SLACK, "renewed {back:?} after the storm");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// A 429 tells the client when to come back: no retry of the renewal before then (the next
/// period's renewal is a new request and keeps the heartbeat).
#[tokio::test]
async fn persistent_429s_are_not_retried_before_retry_after() {
    let (tp, _node, agent, _events) = renewing("throttled").await;
    let (before, lines) = (lease_requests(&tp, "throttled").len(), log_len(&agent));
    tp.faults().throttle_always(Some(Duration::from_secs(2)));
    tokio::time::sleep(WINDOW).await;
    let window = lease_requests(&tp, "throttled")[before..].to_vec();
    let log = lines_since(&agent, lines);
    let mut events = tp.events();
    tp.faults().throttle_always(None);
    let back = next_renewal(&mut events, "throttled").await;

    let periods = (WINDOW.as_secs_f64() / INTERVAL.as_secs_f64()) as usize;
    assert!(window.iter().all(|r| r.status == 429), "{window:?}");
    // At most one renewal per slot (the window's edges may add one), no retry in between;
    // at least one: a loaded machine may skip a slot (skipped slots are never made up in a
    // burst: lease::next_slot), and the heartbeat after the 429s is checked below.
    assert!(
        (1..=periods + 1).contains(&window.len()),
        "{} Lease requests in {WINDOW:?} of 429s with Retry-After 2 s: {:?}",
        window.len(),
        window.iter().map(|r| r.at).collect::<Vec<_>>()
    );
    assert!(
        min_gap(&window) >= INTERVAL * 9 / 10,
        "retried {:?} after a 429",
        min_gap(&window)
    );
    assert!(loud(&log) <= periods + 1, "{}", log.join("\n"));
    assert!(back <= INTERVAL + SLACK, "renewed {back:?} after the 429s");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn bootstrap_backs_off_through_a_storm_of_500s_and_completes_when_it_ends() {
    let tp = plane(HOUR).await;
    tp.faults().fail_always(Some(503));
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "boot-storm", &["--renew-lease", "false"]));
    let start = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let window = csr_requests(&tp);
    let log = agent.log();
    tp.faults().fail_always(None);
    agent.wait_for_log("client certificate installed").await;

    // Jittered 0.5 s doubling: about 0, 0.5, 1.5 s, and 3.5 s just after the window.
    assert!(
        (2..=4).contains(&window.len()),
        "{} CSR requests in {WINDOW:?} of 503s",
        window.len()
    );
    assert!(min_gap(&window) >= Duration::from_millis(400), "{window:?}");
    let retries = log
        .lines()
        .filter(|l| l.contains("failed; retrying"))
        .count();
    assert!(retries <= window.len(), "one line per retry:\n{log}");
    // The next attempt after the storm is at most one back-off step away.
    assert!(start.elapsed() < WINDOW + Duration::from_secs(5));
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn bootstrap_waits_retry_after_through_persistent_429s() {
    let tp = plane(HOUR).await;
    tp.faults().throttle_always(Some(Duration::from_secs(2)));
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let agent = Agent::spawn(&args(&node, "boot-429", &["--renew-lease", "false"]));
    tokio::time::sleep(WINDOW).await;
    let window = csr_requests(&tp);
    tp.faults().throttle_always(None);
    agent.wait_for_log("client certificate installed").await;
    assert!(
        (1..=2).contains(&window.len()),
        "{} CSR requests in {WINDOW:?} of 429s with Retry-After 2 s",
        window.len()
    );
    assert!(
        min_gap(&window) >= Duration::from_millis(1900),
        "{window:?}"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

#[tokio::test]
async fn an_outage_costs_under_one_percent_of_a_core_and_the_lease_returns_within_one_interval() {
    let (tp, _node, agent, mut events) = renewing("outage").await;
    let lines = log_len(&agent);
    let cpu_before = cpu(agent.pid());
    let started = Instant::now();
    tp.faults().outage(WINDOW).await;
    wait_event(&mut events, |e| (*e == Event::OutageEnded).then_some(())).await;
    let (spent, lasted) = (cpu(agent.pid()) - cpu_before, started.elapsed());
    let log = lines_since(&agent, lines);
    let back = next_renewal(&mut events, "outage").await;

    let periods = (lasted.as_secs_f64() / INTERVAL.as_secs_f64()).ceil() as usize;
    eprintln!(
        "outage of {lasted:?}: {spent:?} of CPU, {} warning lines",
        loud(&log)
    );
    assert!(
        spent <= lasted / 100,
        "{spent:?} of CPU in a {lasted:?} outage"
    );
    assert!(loud(&log) <= periods + 1, "{}", log.join("\n"));
    assert!(
        back <= INTERVAL + SLACK,
        "renewed {back:?} after the outage"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// Connections opened while `mode` holds, and the renewal after the server behaves again.
async fn unanswered(tp: &TestPlane, agent: &Agent, mode: AcceptMode, node: &str) {
    let mut events = tp.events();
    let lines = log_len(agent);
    tp.faults().set_accept_mode(mode).await;
    let mut opened = 0;
    let _ = tokio::time::timeout(WINDOW, async {
        loop {
            if let Ok(Event::ConnectionOpened { .. }) = events.recv().await {
                opened += 1;
            }
        }
    })
    .await;
    let log = lines_since(agent, lines);
    let mut events = tp.events();
    tp.faults().set_accept_mode(AcceptMode::Serve).await;
    let back = next_renewal(&mut events, node).await;

    let periods = (WINDOW.as_secs_f64() / INTERVAL.as_secs_f64()) as usize;
    // Each renewal gives up on its connection before the next is due, and the next one
    // opens one fresh connection: one per period, never a connect loop.
    assert!(
        (periods - 1..=periods + 1).contains(&opened),
        "{mode:?}: {opened} connections in {WINDOW:?}"
    );
    assert!(
        loud(&log) <= periods + 1,
        "{mode:?}: {} warnings:\n{}",
        loud(&log),
        log.join("\n")
    );
    assert!(
        log.iter().any(|l| l.contains("no answer within")),
        "{mode:?}:\n{}",
        log.join("\n")
    );
    assert!(back <= INTERVAL + SLACK, "{mode:?}: renewed {back:?} after");
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_or_stalls_the_handshake_is_given_up_on_each_period(
) {
    // Two nodes, each against its own plane, side by side (they mostly wait).
    let run = |mode: AcceptMode, node: &'static str| async move {
        let (tp, _node, agent, _events) = renewing(node).await;
        unanswered(&tp, &agent, mode, node).await;
        agent.terminate().await
    };
    let (silent, stalled) = tokio::join!(
        run(AcceptMode::Silent, "mute"),
        run(AcceptMode::StallHandshake, "stalled")
    );
    for (status, log) in [silent, stalled] {
        assert!(status.success(), "{log}");
    }
}

#[tokio::test]
async fn watches_reset_mid_stream_are_resumed_after_a_floor_and_the_approval_still_arrives() {
    let tp = TestPlane::builder()
        .cert_ttl(HOUR)
        .approval(Approval::Manual)
        .start()
        .await
        .unwrap();
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "reset", &["--renew-lease", "false"]));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("waiting for approval").await;
    let (before, lines) = (csr_requests(&tp).len(), log_len(&agent));
    tp.faults()
        .reset_watches_after(Some(Duration::from_millis(200)));
    let mut resets = 0;
    let _ = tokio::time::timeout(WINDOW, async {
        loop {
            if let Ok(Event::WatchDropped { .. }) = events.recv().await {
                resets += 1;
            }
        }
    })
    .await;
    let window = csr_requests(&tp)[before..].to_vec();
    let log = lines_since(&agent, lines);
    tp.faults().reset_watches_after(None);
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;

    let watches = window
        .iter()
        .filter(|r| r.path.contains("watch=true"))
        .count();
    assert!(resets >= 1, "no watch was reset");
    // Re-watches wait a jittered 1 s, doubling: at most 1 + 2 s fit, and every second
    // empty stream lists again.
    assert!(
        (1..=3).contains(&watches) && window.len() - watches <= 2,
        "{watches} watches, {} lists in {WINDOW:?}",
        window.len() - watches
    );
    assert!(loud(&log) <= 1, "{}", log.join("\n"));
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(tp.csrs().len(), 1, "the same CSR throughout");
}
