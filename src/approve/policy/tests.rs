//! One test per rule: a CSR as the kubelet files it is approved, and each way it can go
//! wrong is denied by the rule that names it.

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use super::*;

fn policy() -> Policy {
    Policy {
        allow_node_name_dns: true,
        dns_pattern: None,
        max_expiration_seconds: 86400 * 365,
    }
}

/// A PEM request with subject `cn`/`orgs` and `sans` (an IP if it parses, `mail:X` an
/// email, else a DNS name), signed by a fresh P-256 key.
fn request(cn: &str, orgs: &[&str], sans: &[&str]) -> String {
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    for s in sans {
        let san = match (s.parse::<IpAddr>(), s.strip_prefix("mail:")) {
            (Ok(ip), _) => SanType::IpAddress(ip),
            (_, Some(mail)) => SanType::Rfc822Name(mail.to_string().try_into().unwrap()),
            _ => SanType::DnsName(s.to_string().try_into().unwrap()),
        };
        params.subject_alt_names.push(san);
    }
    let key = KeyPair::generate().unwrap();
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(user: &str, groups: &[&str], usages: &[&str], pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some("csr-1".into()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            signer_name: SIGNER.into(),
            username: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            request: ByteString(pem.as_bytes().to_vec()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

const USAGES: &[&str] = &["digital signature", "server auth"];
const GROUPS: &[&str] = &["system:nodes", "system:authenticated"];

/// The kubelet's serving CSR for node `n1` with `sans`.
fn kubelet(sans: &[&str]) -> CertificateSigningRequest {
    let pem = request("system:node:n1", &["system:nodes"], sans);
    csr("system:node:n1", GROUPS, USAGES, &pem)
}

fn node(name: &str, addrs: &[(&str, &str)]) -> NodeAddrs {
    NodeAddrs::from_node(&Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(
                addrs
                    .iter()
                    .map(|(t, a)| NodeAddress {
                        type_: t.to_string(),
                        address: a.to_string(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
        ..Node::default()
    })
}

fn cluster() -> Vec<NodeAddrs> {
    vec![
        node(
            "n1",
            &[
                ("InternalIP", "10.0.0.1"),
                ("InternalIP", "fd00::1"),
                ("Hostname", "n1"),
                ("InternalDNS", "n1.internal.example"),
            ],
        ),
        node("n2", &[("InternalIP", "10.0.0.2"), ("Hostname", "n2")]),
    ]
}

fn denied(d: Decision) -> (Rule, String) {
    match d {
        Decision::Deny(r) => (r.rule, r.detail),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn the_kubelets_request_matching_its_node_is_approved() {
    let c = kubelet(&["n1", "N1.internal.example", "10.0.0.1", "fd00::1"]);
    assert_eq!(
        decide(&c, &cluster(), &policy()),
        Decision::Approve { node: "n1".into() }
    );
}

#[test]
fn other_signers_and_decided_csrs_are_ignored() {
    let mut c = kubelet(&["10.0.0.1"]);
    c.spec.signer_name = "kubernetes.io/kube-apiserver-client-kubelet".into();
    assert_eq!(decide(&c, &cluster(), &policy()), Decision::Ignore);
    for kind in ["Approved", "Denied", "Failed"] {
        let mut c = kubelet(&["10.0.0.1"]);
        c.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: kind.into(),
                status: "True".into(),
                ..CertificateSigningRequestCondition::default()
            }]),
            certificate: None,
        });
        assert_eq!(
            decide(&c, &cluster(), &policy()),
            Decision::Ignore,
            "{kind}"
        );
    }
}

#[test]
fn a_requester_that_is_not_a_node_is_denied() {
    let pem = request("system:node:n1", &["system:nodes"], &["10.0.0.1"]);
    for user in [
        "alice",
        "system:node:",
        "system:serviceaccount:kube-system:x",
    ] {
        let c = csr(user, GROUPS, USAGES, &pem);
        let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
        assert_eq!(rule, Rule::RequesterNotNode, "{user}");
        assert!(detail.contains(&format!("{user:?}")), "{detail}");
    }
    let c = csr("system:node:n1", &["system:authenticated"], USAGES, &pem);
    assert_eq!(
        denied(decide(&c, &cluster(), &policy())).0,
        Rule::RequesterNotInNodesGroup
    );
}

#[test]
fn a_request_that_does_not_parse_or_is_not_self_signed_is_denied() {
    let c = csr("system:node:n1", GROUPS, USAGES, "not a PEM\n");
    assert_eq!(
        denied(decide(&c, &cluster(), &policy())).0,
        Rule::RequestUnparseable
    );
    // A certificate is not a request.
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["n1".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem();
    let c = csr("system:node:n1", GROUPS, USAGES, &cert);
    assert_eq!(
        denied(decide(&c, &cluster(), &policy())).0,
        Rule::RequestUnparseable
    );
}

#[test]
fn a_subject_other_than_the_requester_is_denied() {
    let pem = request("system:node:n2", &["system:nodes"], &["10.0.0.1"]);
    let c = csr("system:node:n1", GROUPS, USAGES, &pem);
    let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
    assert_eq!(rule, Rule::SubjectMismatch);
    assert!(detail.contains("system:node:n2"), "{detail}");
    for orgs in [&[][..], &["system:masters"], &["system:nodes", "extra"]] {
        let pem = request("system:node:n1", orgs, &["10.0.0.1"]);
        let c = csr("system:node:n1", GROUPS, USAGES, &pem);
        assert_eq!(
            denied(decide(&c, &cluster(), &policy())).0,
            Rule::OrganizationMismatch,
            "{orgs:?}"
        );
    }
}

#[test]
fn usages_must_be_exactly_the_serving_ones_for_the_key_type() {
    let pem = request("system:node:n1", &["system:nodes"], &["10.0.0.1"]);
    for usages in [
        &["digital signature", "client auth"][..],
        &["digital signature", "server auth", "client auth"],
        &["server auth"],
        &["digital signature", "server auth", "key encipherment"],
        &["digital signature", "server auth", "server auth"],
    ] {
        let c = csr("system:node:n1", GROUPS, usages, &pem);
        let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
        assert_eq!(rule, Rule::UsagesMismatch, "{usages:?}");
        assert!(detail.contains("a non-RSA key"), "{detail}");
    }
    // Key encipherment is an RSA key's (the pure check, as rcgen's ring cannot make one).
    let ke: Vec<String> = ["key encipherment", "digital signature", "server auth"]
        .map(String::from)
        .to_vec();
    assert!(check_usages(&ke, true).is_ok());
    assert!(check_usages(&ke[1..], true).is_ok());
    assert!(check_usages(&ke, false).is_err());
}

#[test]
fn an_expiration_above_the_maximum_is_denied() {
    let mut c = kubelet(&["10.0.0.1"]);
    c.spec.expiration_seconds = Some(3600);
    let mut p = policy();
    p.max_expiration_seconds = 3600;
    assert!(matches!(
        decide(&c, &cluster(), &p),
        Decision::Approve { .. }
    ));
    c.spec.expiration_seconds = Some(3601);
    let (rule, detail) = denied(decide(&c, &cluster(), &p));
    assert_eq!(rule, Rule::ExpirationTooLong);
    assert_eq!(detail, "expirationSeconds 3601 is above the maximum 3600");
}

#[test]
fn sans_must_be_dns_or_ip_and_present() {
    let c = kubelet(&[]);
    assert_eq!(
        denied(decide(&c, &cluster(), &policy())).0,
        Rule::NoSubjectAltName
    );
    let c = kubelet(&["10.0.0.1", "mail:root@n1"]);
    assert_eq!(
        denied(decide(&c, &cluster(), &policy())).0,
        Rule::UnsupportedSubjectAltName
    );
}

#[test]
fn a_san_of_another_node_is_denied_naming_it() {
    for san in ["10.0.0.2", "n2"] {
        let c = kubelet(&["10.0.0.1", san]);
        let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
        assert_eq!(rule, Rule::SanOfAnotherNode, "{san}");
        assert!(
            detail.contains(san) && detail.contains("\"n2\""),
            "{detail}"
        );
    }
}

#[test]
fn an_ip_or_dns_name_the_node_does_not_report_is_denied() {
    let c = kubelet(&["10.0.0.1", "192.0.2.7"]);
    let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
    assert_eq!(rule, Rule::IpNotOfNode);
    assert_eq!(detail, "IP SAN 192.0.2.7 is not an address of Node \"n1\"");
    let c = kubelet(&["10.0.0.1", "evil.example"]);
    let (rule, detail) = denied(decide(&c, &cluster(), &policy()));
    assert_eq!(rule, Rule::DnsNotOfNode);
    assert!(detail.contains("\"evil.example\""), "{detail}");
}

#[test]
fn the_node_name_and_the_pattern_widen_what_dns_names_pass() {
    // A Node whose Hostname differs from its name.
    let nodes = vec![node(
        "n1",
        &[("InternalIP", "10.0.0.1"), ("Hostname", "host-a")],
    )];
    let c = kubelet(&["n1", "10.0.0.1"]);
    assert!(matches!(
        decide(&c, &nodes, &policy()),
        Decision::Approve { .. }
    ));
    let mut p = policy();
    p.allow_node_name_dns = false;
    assert_eq!(denied(decide(&c, &nodes, &p)).0, Rule::DnsNotOfNode);

    p.dns_pattern = Some(DnsPattern::new(r"[a-z0-9-]+\.nodes\.example").unwrap());
    let c = kubelet(&["n1.nodes.example", "10.0.0.1"]);
    assert!(matches!(decide(&c, &nodes, &p), Decision::Approve { .. }));
    // Anchored: a suffix match is not enough.
    let c = kubelet(&["n1.nodes.example.evil", "10.0.0.1"]);
    assert_eq!(denied(decide(&c, &nodes, &p)).0, Rule::DnsNotOfNode);
    assert!(DnsPattern::new("(").is_err());
}

#[test]
fn a_missing_node_is_looked_up_again_not_denied() {
    let nodes = vec![node("n2", &[("InternalIP", "10.0.0.2")])];
    let c = kubelet(&["10.0.0.1"]);
    assert_eq!(
        decide(&c, &nodes, &policy()),
        Decision::NodeMissing { node: "n1".into() }
    );
}

#[test]
fn hostile_values_reach_the_message_one_line_and_bounded() {
    let user = format!("evil\n\u{1b}[2J{}", "x".repeat(10_000));
    let pem = request("system:node:n1", &["system:nodes"], &["10.0.0.1"]);
    let c = csr(&user, GROUPS, USAGES, &pem);
    let (_, detail) = denied(decide(&c, &cluster(), &policy()));
    assert!(!detail.chars().any(char::is_control), "{detail}");
    assert!(detail.chars().count() < 300, "{} chars", detail.len());
}

#[test]
fn every_rule_has_a_distinct_reason() {
    let reasons: BTreeSet<_> = Rule::ALL.iter().map(|r| r.reason()).collect();
    assert_eq!(reasons.len(), Rule::ALL.len());
    for r in Rule::ALL {
        assert!(r.reason().chars().all(|c| c.is_ascii_alphanumeric()), "{r}");
    }
}
