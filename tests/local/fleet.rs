//! A fleet on one API server: 20 real agents released together (their CSRs approved in one
//! go, as when an approver comes back) spread their Lease renewals over the whole interval
//! from their second renewal on, try once per slot through an outage, and come back from it
//! spread the same way. Bounds come from the binomial distribution of uniform phases, so a
//! spread fleet fails them about once in ten thousand runs and a fleet in lockstep always.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use support::{wait_event, Agent, NodeDir};
use testplane::stats::{gap_false_alarm, histogram, largest_gap, slice_bound, slices};
use testplane::{Approval, Event, RequestRecord, TestPlane, KUBELET_CLIENT_SIGNER};

const AGENTS: usize = 20;
const INTERVAL: Duration = Duration::from_secs(1);
const SLICES: usize = 10;
/// Long enough that every agent has at least two slots inside it.
const OUTAGE: Duration = Duration::from_millis(2500);
/// Chance that a spread fleet fails one slice bound by bad luck.
const FALSE_ALARM: f64 = 1e-4;
/// Lease writes per agent before the spread is measured: the first (at once), the second
/// (on its phase) and two more at exactly the interval.
const WRITES: usize = 4;

fn node_name(i: usize) -> String {
    format!("fleet-{i:02}")
}

fn args(node: &NodeDir, name: &str) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(
        [
            "--lease-renew-interval",
            "1s",
            "--lease-duration",
            "10s",
            "--test-short-lease-interval",
        ]
        .map(String::from),
    );
    a
}

/// Successful Lease writes (create or update) per node, in order, from the server's log.
fn lease_writes(requests: &[RequestRecord]) -> BTreeMap<String, Vec<SystemTime>> {
    let mut by_node: BTreeMap<String, Vec<SystemTime>> = BTreeMap::new();
    for r in requests {
        let Some(node) = r.user.strip_prefix("system:node:") else {
            continue;
        };
        let write = matches!(r.method.as_str(), "PUT" | "POST") && r.path.contains("/leases");
        if write && r.status / 100 == 2 {
            by_node.entry(node.to_string()).or_default().push(r.at);
        }
    }
    by_node
}

/// Wait until every node has `n` Lease writes (events), counting from `counts`.
async fn until_each_writes(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    counts: &mut BTreeMap<String, usize>,
    n: usize,
) {
    while counts.values().any(|&c| c < n) {
        let name = wait_event(events, |e| match e {
            Event::LeaseCreated { name, .. } | Event::LeaseRenewed { name, .. } => {
                Some(name.clone())
            }
            _ => None,
        })
        .await;
        if let Some(c) = counts.get_mut(&name) {
            *c += 1;
        }
    }
}

fn since(t: SystemTime, origin: SystemTime) -> Duration {
    t.duration_since(origin).unwrap_or_default()
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn twenty_agents_started_together_renew_spread_and_come_back_spread_after_an_outage() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(3600))
        .approval(Approval::Manual)
        .start()
        .await
        .expect("start testplane");
    let mut events = tp.events();
    let dirs: Vec<NodeDir> = (0..AGENTS)
        .map(|_| NodeDir::new(&tp.bootstrap_kubeconfig()))
        .collect();
    let agents: Vec<Agent> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| Agent::spawn(&args(d, &node_name(i))))
        .collect();

    // Every agent files its CSR and waits; one approver pass releases them all at once.
    let mut csrs = Vec::new();
    while csrs.len() < AGENTS {
        let name = wait_event(&mut events, |e| match e {
            Event::CsrCreated { name, signer, .. } if signer == KUBELET_CLIENT_SIGNER => {
                Some(name.clone())
            }
            _ => None,
        })
        .await;
        csrs.push(name);
    }
    let released = testplane::wall_now();
    for name in &csrs {
        tp.approve(name).expect("approve");
    }
    let mut counts: BTreeMap<String, usize> = (0..AGENTS).map(|i| (node_name(i), 0)).collect();
    until_each_writes(&mut events, &mut counts, WRITES).await;

    // Steady state: where in the interval each agent's WRITES-th write fell.
    let writes = lease_writes(&tp.requests());
    assert_eq!(writes.len(), AGENTS, "{:?}", writes.keys());
    let firsts: Vec<Duration> = writes.values().map(|w| since(w[0], released)).collect();
    let start_spread = firsts
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*firsts.iter().min().unwrap());
    let phases: Vec<Duration> = writes
        .values()
        .map(|w| since(w[WRITES - 1], released))
        .collect();
    let occupancy = slices(&phases, INTERVAL, SLICES);
    let bound = slice_bound(AGENTS, SLICES, FALSE_ALARM);
    let gap = largest_gap(&phases, INTERVAL);
    eprintln!(
        "fleet: first writes within {start_spread:?} of each other; renewals per tenth of the interval {occupancy:?} (bound {bound}); largest empty stretch {gap:?}"
    );
    assert!(
        occupancy.iter().all(|&c| c <= bound),
        "renewals bunch up: {occupancy:?} per tenth of the interval (at most {bound} by chance)"
    );
    // A spread fleet leaves half the interval empty with a chance below 4e-5.
    assert!(gap_false_alarm(AGENTS, 0.5) < FALSE_ALARM);
    assert!(
        gap < INTERVAL / 2,
        "all renewals inside {:?} of every {INTERVAL:?}",
        INTERVAL - gap
    );

    // An outage: every agent tries once per slot while the server is away...
    tp.faults().outage(OUTAGE).await;
    // Every connection is down now: any request logged from here on came after the return,
    // and every event from here on too.
    let cut = testplane::wall_now();
    let mut events = tp.events();
    let ended = testplane::wait_for(&mut events, OUTAGE + support::WAIT, |e| {
        matches!(e, Event::OutageEnded).then_some(())
    })
    .await;
    assert!(ended.is_some(), "the outage ended");
    let back = testplane::wall_now();
    let mut counts: BTreeMap<String, usize> = (0..AGENTS).map(|i| (node_name(i), 0)).collect();
    until_each_writes(&mut events, &mut counts, 1).await;

    // ...and comes back on its own slot: the first request of each after the return.
    let mut returns: BTreeMap<String, Duration> = BTreeMap::new();
    for r in tp.requests().iter().filter(|r| r.at > cut) {
        if let Some(node) = r.user.strip_prefix("system:node:") {
            returns
                .entry(node.to_string())
                .or_insert_with(|| since(r.at, back));
        }
    }
    assert_eq!(returns.len(), AGENTS, "{returns:?}");
    let back_at: Vec<Duration> = returns.values().copied().collect();
    let per_tenth = histogram(&back_at, INTERVAL / SLICES as u32, SLICES);
    let first = *back_at.iter().min().unwrap();
    let last = *back_at.iter().max().unwrap();
    eprintln!(
        "fleet: after the outage, first requests per tenth of the interval {per_tenth:?} (bound {bound}), from {first:?} to {last:?} after the return"
    );
    assert!(
        per_tenth.iter().all(|&c| c <= bound),
        "the fleet came back in a burst: {per_tenth:?} per tenth of the interval"
    );
    // Each on its next slot: all within one interval (plus a handshake), spread over more than
    // half of it (20 uniform returns span less with a chance below 4e-5).
    assert!(last < INTERVAL + INTERVAL / 2, "{last:?}");
    assert!(
        last - first > INTERVAL / 2,
        "all back within {:?}",
        last - first
    );

    let mut failed = Vec::new();
    for (i, agent) in agents.into_iter().enumerate() {
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{}: {log}", node_name(i));
        // One attempt per slot through the outage: no quick retries of a refused connection.
        let retries = log.matches("lease: retrying").count();
        let failures = log.matches("Lease renewal failed").count();
        failed.push(failures);
        assert_eq!(
            retries,
            0,
            "{} retried inside its periods:\n{log}",
            node_name(i)
        );
        let slots = OUTAGE.as_millis().div_ceil(INTERVAL.as_millis()) as usize;
        assert!(
            (2..=slots + 1).contains(&failures),
            "{}: {failures} failed renewals in a {OUTAGE:?} outage at {INTERVAL:?}:\n{log}",
            node_name(i)
        );
    }
    eprintln!("fleet: failed renewals per agent during the outage {failed:?}");
    drop(dirs);
}
