//! The `kubernetes.io/kubelet-serving` signer: never auto-approved by csrapproving, issued
//! after approval with the requested SANs and serverAuth (checked by x509-parser and openssl),
//! each of upstream's validation rules, the requester rules (NodeRestriction 403, the strict
//! signer, the kubelet-csr-approver model), and approving them (the real `kubectl
//! certificate approve` is proven on Kubernetes itself, in tests/kube/join.rs).

use crate::support;

use std::net::IpAddr;
use std::time::Duration;

use rcgen::SanType;
use serde_json::Value;
use support::*;
use testplane::{Approval, Event, TestPlane, KUBELET_SERVING_SIGNER};
use x509_parser::extensions::GeneralName;

const SERVING_USAGES: &[&str] = &["digital signature", "key encipherment", "server auth"];

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.try_into().unwrap())
}

fn ip(s: &str) -> SanType {
    SanType::IpAddress(s.parse().unwrap())
}

/// A PEM CSR with the given CN, O and SANs (fresh P-256 key).
fn serving_csr(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    for o in orgs {
        dn.push(rcgen::DnType::OrganizationName, *o);
    }
    dn.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name = dn;
    p.subject_alt_names = sans;
    p.serialize_request(&key).unwrap().pem().unwrap()
}

fn serving_body(name: &str, pem: &str, usages: &[&str], expiration: Option<i64>) -> Value {
    csr_body_for(KUBELET_SERVING_SIGNER, name, pem, usages, expiration)
}

/// An API client authenticated as node `node` (client cert from the cluster CA).
fn node_api(tp: &TestPlane, node: &str) -> Api {
    let (c, k) = tp
        .client_cert(&format!("system:node:{node}"), &["system:nodes"])
        .unwrap();
    Api::new(tp, Who::Cert(&c, &k))
}

/// The valid request node `node` files for its serving certificate.
fn good_csr(node: &str) -> String {
    serving_csr(
        &format!("system:node:{node}"),
        &["system:nodes"],
        vec![
            dns(&format!("{node}.example")),
            ip("10.0.0.7"),
            ip("fd00::7"),
        ],
    )
}

fn conditions(tp: &TestPlane, name: &str) -> Vec<(String, String)> {
    tp.csr(name)
        .and_then(|c| c.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
        .collect()
}

/// File a kubelet-client CSR as a barrier: the controllers handle store changes in order, so
/// once this one reaches `want` (its approval mode's outcome), every earlier CSR has been
/// reconciled too. Waits on events, no sleeping.
async fn barrier(tp: &TestPlane, node: &str, want: fn(&Event, &str) -> bool) {
    let mut ev = tp.events();
    let token = tp.create_token(None);
    let (_, pem) = node_csr(&format!("system:node:{node}"), &["system:nodes"]);
    let name = format!("barrier-{node}");
    let body = csr_body(&name, &pem, &["digital signature", "client auth"], None);
    let (code, b) = Api::new(tp, Who::Token(&token)).post(CSRS, &body).await;
    assert_eq!(code, 201, "{b}");
    wait(&mut ev, "barrier CSR outcome", |e| {
        want(e, &name).then_some(())
    })
    .await;
}

fn issued(e: &Event, name: &str) -> bool {
    matches!(e, Event::CsrIssued { name: n, .. } if n == name)
}

fn denied(e: &Event, name: &str) -> bool {
    matches!(e, Event::CsrDenied { name: n, .. } if n == name)
}

fn cert_pem(tp: &TestPlane, name: &str) -> String {
    let c = tp.csr(name).unwrap().status.unwrap().certificate.unwrap().0;
    String::from_utf8(c).unwrap()
}

fn openssl(args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "openssl {args:?}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_csr_is_never_auto_approved_and_issues_after_approve() {
    let tp = TestPlane::builder()
        .backdate(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let mut ev = tp.events();
    let n1 = node_api(&tp, "n1");
    let body = serving_body("serving-n1", &good_csr("n1"), SERVING_USAGES, Some(3600));
    let (code, b) = n1.post(CSRS, &body).await;
    assert_eq!(code, 201, "{b}");
    assert_eq!(b["spec"]["username"], "system:node:n1");
    let created = wait(&mut ev, "CsrCreated", |e| match e {
        Event::CsrCreated { name, user, signer } if name == "serving-n1" => {
            Some((user.clone(), signer.clone()))
        }
        _ => None,
    })
    .await;
    assert_eq!(
        created,
        ("system:node:n1".into(), KUBELET_SERVING_SIGNER.into())
    );

    // Approval::Auto (the default) issues a later kubelet-client CSR but leaves this Pending.
    barrier(&tp, "b1", issued).await;
    assert_eq!(conditions(&tp, "serving-n1"), []);
    // Approval::Deny denies kubelet-client CSRs only; the serving CSR is still Pending.
    tp.set_approval(Approval::Deny {
        reason: "NoJoin".into(),
    });
    barrier(&tp, "b2", denied).await;
    assert_eq!(conditions(&tp, "serving-n1"), []);
    let status = tp.csr("serving-n1").unwrap().status;
    assert!(status.and_then(|s| s.certificate).is_none());

    tp.approve("serving-n1").unwrap();
    let not_after = wait(&mut ev, "CsrIssued", |e| match e {
        Event::CsrIssued { name, not_after } if name == "serving-n1" => Some(*not_after),
        _ => None,
    })
    .await;
    let pem = cert_pem(&tp, "serving-n1");
    let der = testplane::pki::pem_blocks(pem.as_bytes(), "CERTIFICATE").remove(0);
    let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(
        testplane::pki::cert_subject(&der).unwrap(),
        ("system:node:n1".into(), vec!["system:nodes".into()])
    );
    let ca_der = testplane::pki::pem_blocks(tp.ca_pem().as_bytes(), "CERTIFICATE").remove(0);
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert_eq!(x.issuer(), ca.subject(), "signed by the cluster CA");
    x.verify_signature(Some(ca.public_key())).unwrap();
    let san = x.subject_alternative_name().unwrap().unwrap().value;
    let names: Vec<String> = san
        .general_names
        .iter()
        .map(|g| match g {
            GeneralName::DNSName(d) => format!("DNS:{d}"),
            GeneralName::IPAddress(b) if b.len() == 4 => {
                format!("IP:{}", IpAddr::from(<[u8; 4]>::try_from(*b).unwrap()))
            }
            GeneralName::IPAddress(b) => {
                format!("IP:{}", IpAddr::from(<[u8; 16]>::try_from(*b).unwrap()))
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["DNS:n1.example", "IP:10.0.0.7", "IP:fd00::7"]);
    let eku = x.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth, "{eku:?}");
    let ku = x.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && ku.key_encipherment(), "{ku:?}");
    assert!(!ku.key_cert_sign());
    let bc = x.basic_constraints().unwrap().unwrap().value;
    assert!(!bc.ca, "CA:FALSE");
    // expirationSeconds is honoured like for client certs (backdate 0: the window is exact).
    let (nb, na) = (
        x.validity().not_before.timestamp(),
        x.validity().not_after.timestamp(),
    );
    assert_eq!(na - nb, 3600);
    assert_eq!(
        not_after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
        na as u64
    );

    // openssl, an independent parser, agrees, and verifies it for TLS server use.
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, ca_path) = (dir.path().join("serving.crt"), dir.path().join("ca.crt"));
    std::fs::write(&cert_path, &pem).unwrap();
    std::fs::write(&ca_path, tp.ca_pem()).unwrap();
    let cert_s = cert_path.to_str().unwrap();
    let text = openssl(&["x509", "-noout", "-text", "-in", cert_s]);
    for want in [
        "TLS Web Server Authentication",
        "DNS:n1.example",
        "IP Address:10.0.0.7",
        "IP Address:FD00:",
        "CA:FALSE",
        "Digital Signature, Key Encipherment",
        "Subject: O = system:nodes, CN = system:node:n1",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("TLS Web Client Authentication"), "{text}");
    let ca_s = ca_path.to_str().unwrap();
    let out = openssl(&["verify", "-CAfile", ca_s, "-purpose", "sslserver", cert_s]);
    assert!(out.trim().ends_with("OK"), "{out}");
    assert!(tp.unexpected_requests().is_empty());
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_serving_rule_fails_the_approved_csr() {
    let tp = TestPlane::builder().start().await.unwrap();
    let n1 = node_api(&tp, "n1");
    let cn = "system:node:n1";
    let ok_sans = || vec![dns("n1.example")];
    let cases: Vec<(&str, String, &[&str], &str)> = vec![
        (
            "wrong-o",
            serving_csr(cn, &["system:masters"], ok_sans()),
            SERVING_USAGES,
            "subject organization is not system:nodes",
        ),
        (
            "no-server-auth",
            serving_csr(cn, &["system:nodes"], ok_sans()),
            &["digital signature", "key encipherment"],
            "usages did not match [digital signature key encipherment server auth]",
        ),
        (
            "extra-client-auth",
            serving_csr(cn, &["system:nodes"], ok_sans()),
            &["digital signature", "server auth", "client auth"],
            "usages did not match [digital signature key encipherment server auth]",
        ),
        (
            "no-sans",
            serving_csr(cn, &["system:nodes"], vec![]),
            SERVING_USAGES,
            "DNS or IP subjectAltName is required",
        ),
        (
            "email-san",
            serving_csr(
                cn,
                &["system:nodes"],
                vec![
                    dns("n1.example"),
                    SanType::Rfc822Name("n1@example.com".try_into().unwrap()),
                ],
            ),
            SERVING_USAGES,
            "Email subjectAltNames are not allowed",
        ),
        (
            "uri-san",
            serving_csr(
                cn,
                &["system:nodes"],
                vec![
                    dns("n1.example"),
                    SanType::URI("spiffe://cluster/n1".try_into().unwrap()),
                ],
            ),
            SERVING_USAGES,
            "URI subjectAltNames are not allowed",
        ),
    ];
    for (name, pem, usages, want) in cases {
        let mut ev = tp.events();
        let (code, b) = n1.post(CSRS, &serving_body(name, &pem, usages, None)).await;
        assert_eq!(code, 201, "{name}: accepted at the API like upstream: {b}");
        tp.approve(name).unwrap();
        let (reason, message) = wait(&mut ev, name, |e| match e {
            Event::CsrFailed {
                name: n,
                reason,
                message,
            } if n == name => Some((reason.clone(), message.clone())),
            _ => None,
        })
        .await;
        assert_eq!(reason, "SignerValidationFailure", "{name}");
        assert_eq!(message, want, "{name}");
        assert!(tp.csr(name).unwrap().status.unwrap().certificate.is_none());
    }

    // Filed with the bootstrap token: accepted (not a node identity, so NodeRestriction does
    // not apply, as upstream), but the strict serving signer fails it even when approved.
    let mut ev = tp.events();
    let token = tp.create_token(None);
    let by_token = Api::new(&tp, Who::Token(&token));
    let body = serving_body("by-token", &good_csr("n1"), SERVING_USAGES, None);
    let (code, b) = by_token.post(CSRS, &body).await;
    assert_eq!(code, 201, "{b}");
    assert!(b["spec"]["username"]
        .as_str()
        .unwrap()
        .starts_with("system:bootstrap:"));
    tp.approve("by-token").unwrap();
    let message = wait(&mut ev, "by-token Failed", |e| match e {
        Event::CsrFailed { name, message, .. } if name == "by-token" => Some(message.clone()),
        _ => None,
    })
    .await;
    assert!(
        message.contains("system:bootstrap:")
            && message.contains("must be requested by the node itself"),
        "{message}"
    );

    // Filed by another node: NodeRestriction forbids it at creation, with upstream's text.
    let n2 = node_api(&tp, "n2");
    let body = serving_body("by-other-node", &good_csr("n1"), SERVING_USAGES, None);
    let (code, b) = n2.post(CSRS, &body).await;
    assert_eq!(code, 403, "{b}");
    assert_eq!(b["reason"], "Forbidden");
    assert_eq!(
        b["message"],
        "certificatesigningrequests.certificates.k8s.io \"by-other-node\" is forbidden: can only create a node CSR with CN=system:node:n2"
    );
    assert!(tp.csr("by-other-node").is_none());
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_approver_mode_approves_the_node_and_denies_others() {
    let tp = TestPlane::builder()
        .serving_approval(Approval::Auto)
        .start()
        .await
        .unwrap();
    let mut ev = tp.events();
    let body = serving_body("own", &good_csr("n1"), SERVING_USAGES, None);
    assert_eq!(node_api(&tp, "n1").post(CSRS, &body).await.0, 201);
    wait(&mut ev, "own issued", |e| issued(e, "own").then_some(())).await;
    assert_eq!(
        conditions(&tp, "own"),
        [("Approved".into(), "kubelet-serving cert validated".into())]
    );

    let token = tp.create_token(None);
    let body = serving_body("by-token", &good_csr("n1"), SERVING_USAGES, None);
    let (code, b) = Api::new(&tp, Who::Token(&token)).post(CSRS, &body).await;
    assert_eq!(code, 201, "{b}");
    let reason = wait(&mut ev, "by-token denied", |e| match e {
        Event::CsrDenied { name, reason } if name == "by-token" => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(reason, "kubelet-serving cert denied");

    // Switching the serving approver off leaves new serving CSRs Pending again.
    tp.set_serving_approval(Approval::Manual);
    let body = serving_body("later", &good_csr("n1"), SERVING_USAGES, None);
    assert_eq!(node_api(&tp, "n1").post(CSRS, &body).await.0, 201);
    barrier(&tp, "b1", issued).await;
    assert_eq!(conditions(&tp, "later"), []);
    tp.shutdown().await;
}
