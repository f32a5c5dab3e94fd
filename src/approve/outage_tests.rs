//! `bootlet approve` through a persistent fault: every request answered 503 for half an
//! hour, against the in-process testplane on tokio's paused clock. Each loop retries with a
//! floored, capped delay (the CSR list from 1 s doubling to 30 s; the election every retry
//! period), says so once, and is back at the first request after the fault ends.

use std::time::Duration;

use testplane::{RequestRecord, TestPlane};
use tokio::sync::watch;

use super::controller::{Controller, OnMismatch, RETRY_MAX, RETRY_MIN};
use super::leader::{self, Election};
use super::policy::Policy;
use crate::identity::outage_tests::{metronome, node_client, until, watch_window, Lines, MINUTE};
use crate::runtime::clock;
use crate::runtime::health::Health;

fn is_csr(r: &RequestRecord) -> bool {
    r.path.contains("certificatesigningrequests")
}

fn is_lease(r: &RequestRecord) -> bool {
    r.path.contains("/leases/")
}

#[tokio::test(start_paused = true)]
async fn a_persistent_fault_costs_one_request_per_floored_capped_delay_and_one_warning() {
    clock::step_for_tests(0);
    let (lines, _guard) = Lines::capture();
    let _tick = metronome();
    let tp = TestPlane::builder().start().await.unwrap();
    tp.faults().fail_always(Some(503));
    let (_clients_tx, clients) = watch::channel(node_client(&tp, "approver"));
    let (_leading_tx, leading) = watch::channel(true);
    let controller = Controller {
        policy: Policy {
            allow_node_name_dns: true,
            dns_pattern: None,
            max_expiration_seconds: 86400,
        },
        on_mismatch: OnMismatch::Deny,
        identity: "t".into(),
    };
    let ctl = tokio::spawn(controller.run(clients.clone(), leading));
    let election = Election {
        namespace: "bootlet-approver".into(),
        name: "bootlet-approver".into(),
        identity: "t".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let (trigger, shutdown) = crate::runtime::shutdown::channel();
    let (elected_tx, _elected) = watch::channel(false);
    let elector = tokio::spawn(leader::run(clients, election, elected_tx, shutdown));

    let health = Health::new(false);
    let csrs = watch_window(&tp, &health, 30 * MINUTE, is_csr).await;
    let all = tp.requests();
    let leases = all.iter().filter(|r| is_lease(r)).count();
    let loud = lines.loud_since(0);
    eprintln!(
        "30 min of 503: CSR requests per minute {:?} (longest quiet {:?}); {leases} Lease requests; {} warning lines",
        csrs.per_minute,
        csrs.longest_quiet,
        loud.len()
    );
    // The floor: 1 s doubling (±20 %) puts at most 7 requests in the first minute; the cap
    // (30 s ± 20 %) at most 3 a minute after it, and never a minute without one.
    assert!(csrs.per_minute[0] <= 7, "{:?}", csrs.per_minute);
    // (The window's last sample can open a 31st minute of a few milliseconds.)
    for (m, n) in csrs.per_minute.iter().enumerate().take(30).skip(2) {
        assert!((1..=3).contains(n), "minute {m}: {n} CSR requests");
    }
    assert!(csrs.longest_quiet <= RETRY_MAX.mul_f64(1.2) + Duration::from_secs(1));
    // The election reads the Lease once a retry period: 15 a minute, never more.
    assert!(leases <= 30 * 30 + 1, "{leases} Lease requests in 30 min");
    // One warning per loop for the whole outage, not one per attempt.
    assert!(loud.len() <= 2, "{loud:#?}");
    assert!(RETRY_MIN >= Duration::from_secs(1));

    // The fault ends: the next list succeeds and says so.
    tp.faults().fail_always(None);
    until(RETRY_MAX * 2, "the API answers again", || {
        lines
            .all()
            .iter()
            .any(|l| l.contains("the API server answers again"))
    })
    .await;
    trigger.fire();
    elector.await.unwrap();
    ctl.abort();
}

/// An API client for an admin (`system:masters`) of the testplane.
fn admin(tp: &TestPlane) -> crate::api::ApiClient {
    let (chain_pem, key) = tp
        .client_cert("approver-admin", &["system:masters"])
        .unwrap();
    let credential = crate::api::kubeconfig::Credential::ClientCert {
        chain_pem,
        key: crate::pki::PrivateKeyPem::new(key),
    };
    crate::api::ApiClient::new(
        &tp.url(),
        tp.ca_pem().as_bytes(),
        &credential,
        crate::api::ClientOptions::default(),
    )
    .unwrap()
}

/// Node `node` files a serving CSR for itself with `sans`; returns its name.
async fn file(tp: &TestPlane, node: &str, sans: &[&str]) -> String {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec,
    };
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = dn;
    for s in sans {
        params.subject_alt_names.push(match s.parse() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(s.to_string().try_into().unwrap()),
        });
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let csr = CertificateSigningRequest {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("serving-{node}-{}", sans.len())),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            signer_name: super::policy::SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            request: k8s_openapi::ByteString(pem.into_bytes()),
            ..Default::default()
        },
        status: None,
    };
    let created: CertificateSigningRequest = node_client(tp, node)
        .create(crate::identity::csr::CSR_PATH, &csr)
        .await
        .unwrap();
    created.metadata.name.unwrap()
}

/// The decision condition's (type, reason) of CSR `name`, once it has one.
fn decision(tp: &TestPlane, name: &str) -> Option<(String, String)> {
    let csr = tp.csr(name)?;
    let conds = csr.status?.conditions?;
    conds
        .into_iter()
        .find(|c| c.type_ == "Approved" || c.type_ == "Denied")
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
}

/// The loop end to end on the testplane: the list finds a CSR filed before it started, the
/// watch one filed after; each is decided once, by the policy's rule.
#[tokio::test(start_paused = true)]
async fn the_loop_decides_listed_and_watched_csrs_once() {
    use crate::identity::outage_tests::node_with;
    clock::step_for_tests(0);
    let (lines, _guard) = Lines::capture();
    let _tick = metronome();
    let tp = TestPlane::builder().start().await.unwrap();
    tp.put_node(&node_with("w1", &["10.0.0.1"]));
    tp.put_node(&node_with("w2", &["10.0.0.2"]));
    let before = file(&tp, "w1", &["10.0.0.1"]).await;
    let (_clients_tx, clients) = watch::channel(admin(&tp));
    let (_leading_tx, leading) = watch::channel(true);
    let controller = Controller {
        policy: Policy {
            allow_node_name_dns: true,
            dns_pattern: None,
            max_expiration_seconds: 86400,
        },
        on_mismatch: OnMismatch::Deny,
        identity: "t".into(),
    };
    let ctl = tokio::spawn(controller.run(clients, leading));
    until(MINUTE, "the listed CSR approved", || {
        decision(&tp, &before).is_some()
    })
    .await;
    let good = file(&tp, "w2", &["w2", "10.0.0.2"]).await;
    let bad = file(&tp, "w2", &["10.0.0.2", "10.0.0.1", "x"]).await;
    until(MINUTE, "the watched CSRs decided", || {
        decision(&tp, &good).is_some() && decision(&tp, &bad).is_some()
    })
    .await;
    let approved = ("Approved".to_string(), "AutoApproved".to_string());
    assert_eq!(decision(&tp, &before), Some(approved.clone()));
    assert_eq!(decision(&tp, &good), Some(approved));
    assert_eq!(
        decision(&tp, &bad),
        Some(("Denied".into(), "SanOfAnotherNode".into()))
    );
    // Decided once: a minute of watch events later, still one condition each.
    tokio::time::sleep(MINUTE).await;
    for name in [&before, &good, &bad] {
        let csr = tp.csr(name).unwrap();
        assert_eq!(csr.status.unwrap().conditions.unwrap().len(), 1, "{name}");
    }
    let log = lines.all().join("\n");
    assert_eq!(
        log.matches("approved kubelet-serving CSR").count(),
        2,
        "{log}"
    );
    assert_eq!(
        log.matches("denied kubelet-serving CSR").count(),
        1,
        "{log}"
    );
    ctl.abort();
}
