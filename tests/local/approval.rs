//! The bootstrap approval wait over long faults: an approval timeout adopts the same CSR
//! again (not the refusal back-off), and an API outage during the wait is said once, in
//! the log and in STATUS=.

use crate::support;

use std::time::Duration;

use support::{http, metrics_address, plane_approving, wait_event, Agent, NodeDir};
use testplane::{Approval, Event, RequestRecord};
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);

/// The bootlet flags for a node that does not renew a Lease (bootstrap only).
fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(["--renew-lease".into(), "false".into()]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn is_csr_request(r: &RequestRecord) -> bool {
    r.path.starts_with("/apis/certificates.k8s.io/")
}

async fn first_csr(events: &mut tokio::sync::broadcast::Receiver<Event>) -> String {
    wait_event(events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await
}

/// M7: with `--csr-timeout 1s` and a refusal back-off of 30 s, three approval timeouts in
/// a row must not push the next look at the CSR out by the back-off: each timeout adopts
/// the same CSR again after a short fixed delay, so an approval after them lands in
/// seconds, on the one CSR.
#[tokio::test]
async fn an_approval_after_several_timeouts_lands_within_seconds_on_the_same_csr() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(
        &node,
        "node-late",
        &[
            "--csr-timeout",
            "1s",
            "--csr-backoff-min",
            "30s",
            "--csr-backoff-max",
            "1h",
        ],
    ));
    let name = first_csr(&mut events).await;
    agent.wait_for_log_count("was not approved within", 3).await;

    // A window while the CSR stays pending: the requests it costs.
    let before = tp.requests().iter().filter(|r| is_csr_request(r)).count();
    let lines_before = agent.log().lines().count();
    let window = Duration::from_secs(4);
    tokio::time::sleep(window).await;
    let requests: Vec<_> = tp
        .requests()
        .into_iter()
        .filter(is_csr_request)
        .skip(before)
        .collect();
    let lines = agent.log().lines().count() - lines_before;
    let warnings = agent
        .log()
        .lines()
        .skip(lines_before)
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    // One pass is a create (409), a get, a list and a watch, at most every 1 s wait + 1 s
    // delay: 2-3 passes in 4 s.
    assert!(
        (2..=14).contains(&requests.len()),
        "{} CSR requests in {window:?}: {requests:#?}",
        requests.len()
    );
    assert!(
        warnings <= 3 && lines <= 20,
        "{warnings} warnings, {lines} lines in {window:?}:\n{}",
        agent.log()
    );

    let approved = Instant::now();
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let took = approved.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "installed {took:?} after the approval"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 1, "still the one CSR:\n{log}");
    assert!(node.current().exists());
    assert!(
        !log.contains("retry_in=30s") && !log.contains("retrying in 30"),
        "a timeout used the refusal back-off:\n{log}"
    );
    assert!(tp.unexpected_requests().is_empty());
}

/// L8: an API outage while the CSR waits for approval is one warning per outage (not one
/// per retry), named in STATUS= (here read from `/readyz?verbose`, which carries the same
/// line), and one line when the server answers again; the approval is still seen.
#[tokio::test]
async fn an_outage_during_the_approval_wait_is_said_once_and_in_status() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let mut a = args(&node, "node-dark", &[]);
    let metrics = a.iter().position(|s| s == "off").unwrap();
    a[metrics] = "127.0.0.1:0".into();
    let agent = Agent::spawn(&a);
    let addr = metrics_address(&agent).await;
    let name = first_csr(&mut events).await;
    agent.wait_for_log("waiting for approval").await;

    for round in 1..=2 {
        let lines_before = agent.log().lines().count();
        let outage = Duration::from_secs(4);
        tp.faults().outage(outage).await;
        let started = Instant::now();
        // STATUS= says so while the server is away.
        let mut status = String::new();
        while started.elapsed() < outage {
            let (_, body) = http(addr, "GET", "/readyz?verbose").await;
            if body.contains("API server") {
                status = body;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            status.contains(&format!("waiting for approval of CSR {name}"))
                && status.contains("API server unreachable"),
            "round {round}: STATUS during the outage: {status:?}\n{}",
            agent.log()
        );
        wait_event(&mut events, |e| {
            matches!(e, Event::OutageEnded).then_some(())
        })
        .await;
        agent
            .wait_for_log_count("the API server answers again", round)
            .await;
        let window: Vec<String> = agent
            .log()
            .lines()
            .skip(lines_before)
            .map(str::to_string)
            .collect();
        let unreachable = window
            .iter()
            .filter(|l| l.contains("the API server is unreachable"))
            .count();
        let warnings = window.iter().filter(|l| l.contains("WARN")).count();
        assert_eq!(
            unreachable,
            1,
            "round {round}: one unreachable line per outage:\n{}",
            window.join("\n")
        );
        assert!(
            warnings <= 1,
            "round {round}: {warnings} warnings in the outage window:\n{}",
            window.join("\n")
        );
        let (_, body) = http(addr, "GET", "/readyz?verbose").await;
        assert!(
            body.contains(&format!("waiting for approval of CSR {name}"))
                && !body.contains("unreachable"),
            "round {round}: STATUS after the outage: {body:?}"
        );
    }
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    assert_eq!(tp.csrs().len(), 1);
}
