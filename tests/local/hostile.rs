//! Hostile or broken answers from the API server (issue #14): certificates for another key
//! or node, expired, not yet valid, without clientAuth, from another CA, a 10,000-certificate
//! chain (over the body cap) and a 3,000-certificate one (under it), a truncated PEM, `status.certificate` that is not base64, answers over the body
//! cap, a CSR whose name or UID changes under the watch, a Lease answer that is not JSON.
//! Each is refused with a line that says what was wrong, nothing is written (the cert dir
//! and the kubeconfig stay byte for byte), the process stays up, and it recovers once the
//! server behaves. Another key, node or CA at bootstrap are also in `tests/local/bootstrap.rs`
//! (`certificates_for_another_key_node_or_ca_are_refused`).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use bootlet::pki::files::CertDir;
use bootlet::pki::NodeKey;
use support::{plane_approving, wait_event, Agent, NodeDir};
use testplane::{Answer, AnswerRule, Approval, Event, Signer, TestPlane};

const HOUR: Duration = Duration::from_secs(3600);
/// The API client's body cap (4 MiB), as its errors name it.
const CAP: usize = 4 << 20;
const CSRS: &str = "certificatesigningrequests";

/// The flags: refusals retried after 200 ms (the contract's minute, shortened).
fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(
        [
            "--renew-lease",
            "false",
            "--csr-backoff-min",
            "200ms",
            "--csr-backoff-max",
            "200ms",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    a
}

/// What bootlet has written: every file in the cert dir except the pending key (symlinks
/// as their target, temp files included), and the kubeconfig, by name.
fn written(node: &NodeDir) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(&node.cert_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // The pending key, and its temp file while it is being written.
            if name.starts_with("kubelet-client.key.tmp")
                || name.starts_with(".kubelet-client.key.tmp.tmp-")
            {
                continue;
            }
            let body = match std::fs::read_link(e.path()) {
                Ok(target) => target.to_string_lossy().into_owned().into_bytes(),
                Err(_) => std::fs::read(e.path()).unwrap_or_default(),
            };
            out.insert(name, body);
        }
    }
    if let Ok(body) = std::fs::read(&node.kubeconfig) {
        out.insert("kubelet.conf".into(), body);
    }
    out
}

/// One hostile answer to a CSR: how the plane gives it, and what the refusal says.
struct Hostile {
    what: &'static str,
    /// What the plane answers from now on; then the CSR is approved, or (`cut`) its watch
    /// is cut so that the agent asks again and gets the new answer.
    give: fn(&TestPlane),
    cut: bool,
    says: &'static str,
}

fn signer(tp: &TestPlane, s: Signer) {
    tp.set_signer(s);
}

/// Every broken certificate answer, in an order that needs recovery between each.
fn hostiles() -> Vec<Hostile> {
    vec![
        Hostile {
            what: "a certificate for another key",
            cut: false,
            give: |tp| signer(tp, Signer::WrongKey),
            says: "is for another public key than our pending key",
        },
        Hostile {
            what: "a 10,000-certificate chain",
            cut: false,
            give: |tp| signer(tp, Signer::LongChain(10_000)),
            says: "response larger than 4194304 bytes",
        },
        Hostile {
            what: "a 3,000-certificate chain under the body cap",
            give: |tp| signer(tp, Signer::LongChain(3_000)),
            cut: false,
            says: "issued chain holds 3000 certificates",
        },
        Hostile {
            what: "a certificate for another node",
            cut: false,
            give: |tp| signer(tp, Signer::WrongNode),
            says: "certificate subject is CN=system:node:wrong-node",
        },
        Hostile {
            what: "status.certificate that is not base64",
            cut: false,
            give: |tp| {
                tp.faults().answer(AnswerRule::new(
                    CSRS,
                    Answer::csr_certificate("%%% not base64 %%%"),
                ))
            },
            says: "response is not the expected JSON",
        },
        Hostile {
            what: "an expired certificate",
            cut: false,
            give: |tp| signer(tp, Signer::Expired),
            says: "certificate expired at",
        },
        Hostile {
            what: "a certificate that is not valid yet",
            cut: false,
            give: |tp| signer(tp, Signer::NotYetValid),
            says: "more than 5 minutes ahead of this node's clock",
        },
        Hostile {
            what: "a certificate without clientAuth",
            cut: false,
            give: |tp| signer(tp, Signer::WrongUsage),
            says: "lacks the clientAuth extended key usage",
        },
        Hostile {
            what: "an answer over the body cap",
            cut: true,
            give: |tp| {
                tp.faults()
                    .answer(AnswerRule::new(CSRS, Answer::pad(CAP + 1)))
            },
            says: "response larger than 4194304 bytes",
        },
        Hostile {
            what: "a certificate from another CA",
            cut: false,
            give: |tp| signer(tp, Signer::WrongCa),
            says: "does not chain to the kubeconfig CA",
        },
        Hostile {
            what: "a truncated PEM",
            cut: false,
            give: |tp| signer(tp, Signer::TruncatedPem),
            says: "issued certificate chain does not parse",
        },
    ]
}

/// The server behaves again.
fn behave(tp: &TestPlane) {
    tp.faults().clear_answers();
    tp.set_signer(Signer::Normal);
}

async fn next_csr(events: &mut tokio::sync::broadcast::Receiver<Event>) -> String {
    wait_event(events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await
}

/// Feed every hostile answer to the CSRs `agent` files, one CSR each; after each, the
/// refusal (the `refused`-th line containing `refused`) names the CSR and the reason, and
/// `written` is what `check` expects.
async fn refuse_all(
    tp: &TestPlane,
    agent: &Agent,
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    refused: &str,
    check: &dyn Fn(&str),
) {
    for (i, h) in hostiles().into_iter().enumerate() {
        let name = next_csr(events).await;
        (h.give)(tp);
        if h.cut {
            tp.faults().drop_connections().await;
        } else {
            tp.approve(&name).unwrap();
        }
        let line = agent.wait_for_log_count(refused, i + 1).await;
        assert!(
            line.contains(h.says) && line.contains(&name),
            "{}: {line}",
            h.what
        );
        check(h.what);
        behave(tp);
    }
}

#[tokio::test]
async fn broken_certificates_at_bootstrap_are_refused_nothing_is_written_and_it_recovers() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "hostile-boot", &[]));
    let nothing = |what: &str| {
        let files = written(&node);
        assert!(files.is_empty(), "{what}: wrote {:?}", files.keys());
    };
    refuse_all(
        &tp,
        &agent,
        &mut events,
        "bootstrap attempt failed",
        &nothing,
    )
    .await;
    let name = next_csr(&mut events).await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(node.current().exists());
    // One CSR per hostile answer and one that worked: each refusal started over with a
    // fresh key instead of adopting the broken CSR again.
    assert_eq!(tp.csrs().len(), hostiles().len() + 1);
}

#[tokio::test]
async fn broken_certificates_in_a_rotation_leave_the_current_one_untouched_and_it_recovers() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    // A certificate 5/6 through its life: past any rotation deadline, so it rotates at once.
    let key = NodeKey::generate().unwrap();
    let now = testplane::wall_now();
    let pem = tp
        .sign_client_cert(
            &key.public_key_der(),
            "system:node:hostile-rot",
            &["system:nodes"],
            now - 50 * 60 * Duration::from_secs(1),
            now + 10 * 60 * Duration::from_secs(1),
            false,
        )
        .unwrap();
    CertDir::open(&node.cert_dir)
        .unwrap()
        .install(&pem, &key.to_pem(), now)
        .unwrap();
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "hostile-rot", &[]));
    agent
        .wait_for_log("reusing the valid client certificate")
        .await;
    agent.wait_for_log("rotating the client certificate").await;
    let before = written(&node);
    assert!(before.contains_key("kubelet.conf"), "{:?}", before.keys());
    let unchanged = |what: &str| assert!(written(&node) == before, "{what}: the files changed");
    refuse_all(
        &tp,
        &agent,
        &mut events,
        "rotation failed; the current certificate stays in use",
        &unchanged,
    )
    .await;
    let name = next_csr(&mut events).await;
    tp.approve(&name).unwrap();
    agent.wait_for_log("client certificate rotated").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_ne!(
        written(&node),
        before,
        "the rotation installed a new certificate"
    );
}

/// Until the agent watches CSR `name` (its approval then comes as a watch event, not in
/// the list before it). The request log has no event for an open watch: polled.
async fn watching(tp: &TestPlane, name: &str) {
    let selector = format!("metadata.name%3D{name}");
    tokio::time::timeout(support::WAIT, async {
        while !tp
            .requests()
            .iter()
            .any(|r| r.path.contains(&selector) && r.path.contains("watch=true"))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the agent watches its CSR");
}

/// The list says the CSR is ours; the watch then reports it with another UID: the object
/// we filed was replaced behind our back, and its verdict and certificate are not ours.
#[tokio::test]
async fn a_csr_whose_uid_changes_under_the_watch_is_given_up_for_a_fresh_one() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "replaced", &[]));
    tp.faults()
        .answer(AnswerRule::new(CSRS, Answer::new_uid()).watch(true));
    let first = next_csr(&mut events).await;
    watching(&tp, &first).await;
    tp.approve(&first).unwrap();
    let line = agent.wait_for_log("bootstrap attempt failed").await;
    assert!(
        line.contains(&first) && line.contains("was replaced"),
        "{line}"
    );
    assert!(written(&node).is_empty(), "{:?}", written(&node).keys());
    tp.faults().clear_answers();
    let second = next_csr(&mut events).await;
    assert_ne!(first, second, "a fresh key after the replaced CSR");
    tp.approve(&second).unwrap();
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// The watch reports our CSR under another name (a server or proxy that ignores the
/// selector, or garbles what it sends): ignored with one warning, and the CSR is listed
/// again, so its approval is seen although the watch only ever carried it misnamed.
#[tokio::test]
async fn a_csr_renamed_under_the_watch_is_ignored_and_listed_again() {
    let tp = plane_approving(HOUR, Approval::Manual).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&args(&node, "renamed", &[]));
    tp.faults()
        .answer(AnswerRule::new(CSRS, Answer::rename("node-csr-someone-else")).watch(true));
    let name = next_csr(&mut events).await;
    watching(&tp, &name).await;
    tp.approve(&name).unwrap();
    let line = agent.wait_for_log("node-csr-someone-else").await;
    assert!(line.contains("WARN") && line.contains(&name), "{line}");
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let warnings = log
        .lines()
        .filter(|l| l.contains("node-csr-someone-else"))
        .count();
    assert_eq!(warnings, 1, "{log}");
    assert_eq!(tp.csrs().len(), 1, "the same CSR throughout");
}

/// Lease answers that are not JSON, or larger than the cap: each renewal fails with a line
/// naming why, and the next renewal after the server behaves succeeds.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn lease_answers_that_are_not_json_or_over_the_cap_fail_the_renewal_and_it_recovers() {
    let tp = support::plane(HOUR).await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let mut a = node.args("garbled");
    a.extend(
        [
            "--test-short-lease-interval",
            "--lease-renew-interval",
            "300ms",
            "--lease-duration",
            "40s",
        ]
        .map(String::from),
    );
    let agent = Agent::spawn(&a);
    let renewed = |events: &mut tokio::sync::broadcast::Receiver<Event>| {
        let mut events = events.resubscribe();
        async move {
            wait_event(&mut events, |e| match e {
                Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. }
                    if name == "garbled" =>
                {
                    Some(())
                }
                _ => None,
            })
            .await
        }
    };
    renewed(&mut events).await;
    let cases = [
        (
            "not JSON",
            AnswerRule::new("/leases", Answer::not_json("<html>502 Bad Gateway</html>")),
            "response is not the expected JSON",
        ),
        (
            "over the cap",
            AnswerRule::new("/leases", Answer::pad(CAP + 1)),
            "response larger than 4194304 bytes",
        ),
        // Only the writes: the server applies each renewal and garbles the answer, so the
        // Lease holds renewals bootlet could not read back. They are its own, not another
        // writer's.
        (
            "writes not JSON",
            AnswerRule::new("/leases", Answer::not_json("")).method("PUT"),
            "response is not the expected JSON",
        ),
    ];
    for (i, (what, rule, says)) in cases.into_iter().enumerate() {
        tp.faults().answer(rule);
        let line = agent
            .wait_for_log_count("Lease renewal failed", 4 * i + 4)
            .await;
        assert!(line.contains(says), "{what}: {line}");
        let waiting = renewed(&mut events);
        tp.faults().clear_answers();
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .unwrap_or_else(|_| panic!("{what}: no renewal after the server behaved"));
    }
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(
        !log.contains("another writer"),
        "its own garbled writes taken for another writer:\n{log}"
    );
}
