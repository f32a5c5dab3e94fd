//! The verdicts, table-tested over hand-made observations: no server, no clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    MicroTime, ObjectMeta, Status as ApiStatus, Time,
};
use reqwest::Method;

use super::*;
use crate::api::kubeconfig::exec::ExecError;
use crate::api::kubeconfig::{BootstrapToken, ClusterAccess};
use crate::api::{Error, Identity};
use crate::cli::Flags;
use crate::doctor::observe::KubeletObs;
use crate::doctor::observe::{CsrObs, Net, OtherCa, Proof, Sar};
use crate::doctor::{evaluate, Status};
use crate::identity::issue::proof::Vouched;
use crate::pki::CertInfo;

const NOW: u64 = 1_800_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn ts(t: SystemTime) -> jiff::Timestamp {
    jiff::Timestamp::try_from(t).unwrap()
}

fn settings(rotate: bool) -> Settings {
    let flags = Flags {
        node_name: Some("n1".into()),
        rotate_certificates: Some(rotate),
        ..Flags::default()
    };
    Settings::load(&flags).unwrap()
}

fn api(code: u16, message: &str) -> Error {
    Error::Api {
        method: Method::GET,
        path: "/x".into(),
        code,
        identity: Identity::Anonymous,
        status: Box::new(ApiStatus {
            message: Some(message.into()),
            ..ApiStatus::default()
        }),
        retry_after: None,
    }
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        username: Some(name.into()),
        groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        ..UserInfo::default()
    }
}

fn sar(allowed: bool) -> Option<Result<Sar, Error>> {
    Some(Ok(Sar {
        allowed,
        reason: String::new(),
    }))
}

/// A fresh node about to join with bootstrap token `abcdef`: everything answers well.
fn joining() -> Observations {
    let access = ClusterAccess {
        path: "/etc/kubernetes/bootstrap-kubelet.conf".into(),
        server: "https://10.0.0.1:6443".into(),
        ca_pem: vec![],
        credential: Credential::Token(BootstrapToken::new("abcdef.0123456789abcdef")),
        insecure: false,
    };
    Observations {
        settings: Some(Ok(settings(true))),
        bootstrap: Some(Ok(access.clone())),
        cert: CertObs::Absent,
        using: Using::BootstrapToken {
            id: "abcdef".into(),
            file: access.path.clone(),
        },
        cluster: Some(access),
        kubelet: None,
        machine_id: Some("m1".into()),
        exec: None,
        net: Net {
            tcp: Some(Ok(())),
            tls: Some(Ok(())),
            http: Some(Ok(200)),
            skew: Some(Ok(0)),
            review: Some(Ok(user(
                "system:bootstrap:abcdef",
                &[
                    "system:bootstrappers",
                    "system:bootstrappers:kubeadm:default-node-token",
                ],
            ))),
            can_create_csr: sar(true),
            can_autoapprove: sar(true),
            csr: Some(Ok(CsrObs::None)),
            ..Net::default()
        },
    }
}

/// A joined node using its certificate `system:node:n1`, with a fresh Lease and a Ready Node.
fn joined() -> Observations {
    let mut o = joining();
    o.using = Using::ClientCert {
        subject: "system:node:n1".into(),
        serial: "01".into(),
    };
    o.cert = CertObs::Checked {
        path: "/var/lib/kubelet/pki/kubelet-client-current.pem".into(),
        info: Some(Box::new(cert_info(
            now() - Duration::from_secs(3600),
            now() + Duration::from_secs(3600),
        ))),
        verdict: Ok(()),
        other_ca: None,
    };
    o.net.review = Some(Ok(user("system:node:n1", &["system:nodes"])));
    o.net.node = Some(Ok(ready_node()));
    o.net.lease = Some(Ok(lease("n1", 5)));
    o.net.serving_csrs = Some(Ok(vec![]));
    o
}

/// A kubelet-serving CSR `name` by `system:node:NODE`, filed `age` seconds ago, with an
/// optional decision (type, reason, message, seconds ago) and certificate.
fn serving(
    name: &str,
    node: &str,
    age: u64,
    decided: Option<(&str, &str, &str, u64)>,
    cert: bool,
) -> CertificateSigningRequest {
    let at = |secs: u64| Time(ts(now() - Duration::from_secs(secs)));
    CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(at(age)),
            ..ObjectMeta::default()
        },
        spec: k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec {
            signer_name: "kubernetes.io/kubelet-serving".into(),
            username: Some(format!("system:node:{node}")),
            ..Default::default()
        },
        status: Some(CertificateSigningRequestStatus {
            conditions: decided.map(|(t, r, m, ago)| {
                vec![CertificateSigningRequestCondition {
                    type_: t.into(),
                    status: "True".into(),
                    reason: Some(r.into()),
                    message: Some(m.into()),
                    last_update_time: Some(at(ago)),
                    ..CertificateSigningRequestCondition::default()
                }]
            }),
            certificate: cert.then(|| k8s_openapi::ByteString(b"x".to_vec())),
        }),
    }
}

fn cert_info(nb: SystemTime, na: SystemTime) -> CertInfo {
    CertInfo {
        serial: "01".into(),
        subject_cn: "system:node:n1".into(),
        subject_o: vec!["system:nodes".into()],
        issuer: "CN=kubernetes".into(),
        not_before: nb,
        not_after: na,
        spki_der: vec![],
        client_auth: true,
        server_auth: false,
        sans: Default::default(),
    }
}

fn ready_node() -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some(
                [
                    ("topology.kubernetes.io/zone", "z"),
                    ("node.kubernetes.io/instance-type", "t"),
                ]
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some("10.244.0.0/24".into()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..NodeCondition::default()
            }]),
            node_info: Some(NodeSystemInfo {
                machine_id: "m1".into(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

fn lease(holder: &str, age_secs: u64) -> Lease {
    Lease {
        metadata: ObjectMeta::default(),
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(ts(now() - Duration::from_secs(age_secs)))),
            ..LeaseSpec::default()
        }),
    }
}

fn csr_with(conditions: &[(&str, &str, &str)], cert: bool) -> Option<Result<CsrObs, Error>> {
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some("node-csr-x".into()),
            creation_timestamp: Some(Time(ts(now() - Duration::from_secs(180)))),
            ..ObjectMeta::default()
        },
        status: Some(CertificateSigningRequestStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, reason, message)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".into(),
                        reason: Some(reason.to_string()),
                        message: Some(message.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            certificate: cert.then(|| k8s_openapi::ByteString(b"PEM".to_vec())),
        }),
        ..CertificateSigningRequest::default()
    };
    Some(Ok(CsrObs::Found(Box::new(csr))))
}

/// (name, change, check, status, summary needle, remediation needle)
type Row = (
    &'static str,
    fn(&mut Observations),
    CheckId,
    Status,
    &'static str,
    &'static str,
);

const ROWS: &[Row] = &[
    ("healthy join", |_| {}, CheckId::Csr, Status::Pass, "no CSR filed yet", ""),
    ("skew 30s passes", |o| o.net.skew = Some(Ok(30)), CheckId::ClockSkew, Status::Pass, "within 30s", ""),
    ("skew 31s warns", |o| o.net.skew = Some(Ok(31)), CheckId::ClockSkew, Status::Warn, "31s ahead of", "timedatectl"),
    ("skew 300s warns", |o| o.net.skew = Some(Ok(-300)), CheckId::ClockSkew, Status::Warn, "300s behind", "timedatectl"),
    ("skew 301s fails", |o| o.net.skew = Some(Ok(-301)), CheckId::ClockSkew, Status::Fail, "301s behind", "timedatectl set-ntp true"),
    ("not-yet-valid cert is the clock", |o| o.cert = CertObs::Checked { path: "/p".into(), info: None, verdict: Err(InstalledError::Verify(VerifyError::NotYetValid { not_before: now() + Duration::from_secs(3600) })), other_ca: None }, CheckId::ClockSkew, Status::Fail, "1h0m0s ahead", "timedatectl"),
    ("token 401", |o| o.net.review = Some(Err(api(401, "Unauthorized"))), CheckId::Authentication, Status::Fail, "bootstrap token abcdef is expired or deleted (401)", "kubeadm token create --print-join-command"),
    ("wrong identity", |o| o.net.review = Some(Ok(user("kubelet", &["system:nodes"]))), CheckId::Authentication, Status::Fail, "authenticates as \"kubelet\" (groups system:nodes), not system:bootstrap:abcdef", "kubeadm token create"),
    ("SSR unavailable warns", |o| o.net.review = Some(Err(api(404, "not found"))), CheckId::Authentication, Status::Warn, "HTTP 404", ""),
    ("binding lost", |o| o.net.can_create_csr = sar(false), CheckId::Authorization, Status::Fail, "ClusterRoleBinding kubeadm:kubelet-bootstrap", "--clusterrole=system:node-bootstrapper --group=system:bootstrappers:kubeadm:default-node-token"),
    ("no approver yet", |o| o.net.can_autoapprove = sar(false), CheckId::Csr, Status::Warn, "none would be auto-approved", "kubectl create clusterrolebinding kubeadm:node-autoapprove-bootstrap"),
    ("pending, no approver", |o| { o.net.csr = csr_with(&[], false); o.net.can_autoapprove = sar(false) }, CheckId::Csr, Status::Fail, "pending for 3m0s and nothing approves it", "kubectl certificate approve node-csr-x"),
    ("pending, approver present", |o| o.net.csr = csr_with(&[], false), CheckId::Csr, Status::Fail, "csrapproving controller running?", "kubectl certificate approve node-csr-x"),
    ("denied, control characters stripped", |o| o.net.csr = csr_with(&[("Denied", "Bad\x1b[2J", "no\nway")], false), CheckId::Csr, Status::Fail, "denied: Bad [2J: no way", "kubectl describe csr node-csr-x"),
    ("failed", |o| o.net.csr = csr_with(&[("Approved", "A", ""), ("Failed", "SignerValidationFailure", "usages")], false), CheckId::Csr, Status::Fail, "failed: SignerValidationFailure: usages", "kubectl describe csr"),
    ("approved, not issued", |o| o.net.csr = csr_with(&[("Approved", "A", "")], false), CheckId::Csr, Status::Fail, "approved but no certificate", "kube-controller-manager"),
    ("issued", |o| o.net.csr = csr_with(&[("Approved", "A", "")], true), CheckId::Csr, Status::Pass, "approved and issued", ""),
    ("pending key's CSR gone", |o| o.net.csr = Some(Ok(CsrObs::Missing { name: "node-csr-y".into() })), CheckId::Csr, Status::Warn, "node-csr-y", ""),
    ("wrong CN", |o| o.cert = CertObs::Checked { path: "/p".into(), info: None, verdict: Err(InstalledError::Verify(VerifyError::WrongSubject { expected: "CN=system:node:n1, O=system:nodes".into(), got: "CN=system:node:old, O=system:nodes".into() })), other_ca: None }, CheckId::ClientCertificate, Status::Fail, "--node-name old", "rm /p && systemctl restart bootlet"),
    ("kubelet would bootstrap too", |o| o.kubelet = Some(KubeletObs { argv: ["/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf"].map(String::from).to_vec(), rotate_in_config: Some(true) }), CheckId::Config, Status::Warn, "the kubelet would bootstrap too", "ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf"),
    ("kubelet would rotate too", |o| o.kubelet = Some(KubeletObs { argv: ["/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf"].map(String::from).to_vec(), rotate_in_config: Some(true) }), CheckId::Config, Status::Warn, "two rotators", "20-bootlet.conf"),
    ("the drop-in in effect", |o| o.kubelet = Some(KubeletObs { argv: ["/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf", "--rotate-certificates=false"].map(String::from).to_vec(), rotate_in_config: Some(true) }), CheckId::Config, Status::Pass, "node n1", ""),
    ("stale CA", |o| o.cert = CertObs::Checked { path: "/p".into(), info: None, verdict: Err(InstalledError::Verify(VerifyError::UntrustedIssuer { issuer: "CN=old-ca".into() })), other_ca: None }, CheckId::ClientCertificate, Status::Fail, "CN=old-ca", "rm /p"),
];

const JOINED_ROWS: &[Row] = &[
    ("no serving CSR", |_| {}, CheckId::ServingCsr, Status::Pass, "no kubelet-serving CSR names this node", ""),
    ("serving CSR pending a moment", |o| o.net.serving_csrs = Some(Ok(vec![serving("s1", "n1", 30, None, false)])), CheckId::ServingCsr, Status::Pass, "s1 is pending for 30s", ""),
    ("no approver acts", |o| o.net.serving_csrs = Some(Ok(vec![serving("s0", "n1", 900, Some(("Approved", "AutoApproved", "", 880)), true), serving("s1", "n1", 300, None, false), serving("o1", "n2", 600, Some(("Approved", "AutoApproved", "", 590)), true)])), CheckId::ServingCsr, Status::Fail, "no approver is acting: serving CSR s1 has been pending for 5m", "kubectl apply -k config/approver"),
    ("the approver leaves it alone", |o| o.net.serving_csrs = Some(Ok(vec![serving("s1", "n1", 300, None, false), serving("o1", "n2", 100, Some(("Approved", "AutoApproved", "", 99)), true)])), CheckId::ServingCsr, Status::Fail, "while other kubelet-serving CSRs were decided", "logs deploy/bootlet-approver | grep s1"),
    ("serving CSR denied", |o| o.net.serving_csrs = Some(Ok(vec![serving("s1", "n1", 300, Some(("Denied", "DnsNotOfNode", "bootlet approve: rule DnsNotOfNode failed: DNS SAN \"x\nEVIL\" is not an address of Node \"n1\"", 299)), false)])), CheckId::ServingCsr, Status::Fail, "s1 was denied: DnsNotOfNode: bootlet approve: rule DnsNotOfNode failed: DNS SAN \"x\\nEVIL\"", "kubectl describe csr s1"),
    ("serving CSR issued", |o| o.net.serving_csrs = Some(Ok(vec![serving("s1", "n1", 300, Some(("Approved", "AutoApproved", "", 299)), true)])), CheckId::ServingCsr, Status::Pass, "s1 is approved and issued", ""),
    (
        "joined",
        |_| {},
        CheckId::Lease,
        Status::Pass,
        "renewed 5s ago by n1",
        "",
    ),
    (
        "dead token only warns",
        |o| o.net.token_review = Some(Err(api(401, "Unauthorized"))),
        CheckId::Authentication,
        Status::Warn,
        "needed only to re-join",
        "kubeadm token create",
    ),
    (
        "dead bootstrap kubeconfig only warns",
        |o| {
            o.bootstrap = Some(Err(crate::api::kubeconfig::KubeconfigError::Missing {
                path: "/b".into(),
            }))
        },
        CheckId::BootstrapKubeconfig,
        Status::Warn,
        "/b: no such file; not needed",
        "kubeadm token create",
    ),
    (
        "no rotation approver",
        |o| o.net.can_autoapprove = sar(false),
        CheckId::Csr,
        Status::Warn,
        "kubeadm:node-autoapprove-certificate-rotation",
        "--group=system:nodes",
    ),
    (
        "rotation CSR pending, no approver",
        |o| {
            o.net.csr = csr_with(&[], false);
            o.net.can_autoapprove = sar(false)
        },
        CheckId::Csr,
        Status::Warn,
        "rotation CSR node-csr-x has been waiting for approval for 3m0s, and nothing approves it: ClusterRoleBinding kubeadm:node-autoapprove-certificate-rotation is missing",
        "kubectl certificate approve node-csr-x",
    ),
    (
        "rotation CSR pending, approver present",
        |o| o.net.csr = csr_with(&[], false),
        CheckId::Csr,
        Status::Warn,
        "rotation CSR node-csr-x has been waiting for approval for 3m0s, although system:nodes may be auto-approved",
        "kubectl certificate approve node-csr-x",
    ),
    (
        "stale Node",
        |o| {
            if let Some(Ok(n)) = &mut o.net.node {
                n.status
                    .as_mut()
                    .unwrap()
                    .node_info
                    .as_mut()
                    .unwrap()
                    .machine_id = "m0".into()
            }
        },
        CheckId::Node,
        Status::Fail,
        "machineID m0, this host m1",
        "kubectl delete node n1",
    ),
    (
        "Node authorizer refuses",
        |o| o.net.node = Some(Err(api(403, "node 'x' cannot get node 'n1'"))),
        CheckId::Node,
        Status::Fail,
        "node 'x' cannot get node 'n1'",
        "--authorization-mode=Node,RBAC",
    ),
    (
        "Lease refused counts as node",
        |o| o.net.lease = Some(Err(api(403, "can only access node lease"))),
        CheckId::Node,
        Status::Fail,
        "can only access node lease",
        "kubectl auth can-i",
    ),
    (
        "Node missing warns",
        |o| o.net.node = Some(Err(api(404, "not found"))),
        CheckId::Node,
        Status::Warn,
        "not registered: the kubelet registers its Node only when it starts",
        "systemctl restart kubelet",
    ),
    (
        "no Node, so no kubelet Lease either",
        |o| {
            if let Some(Ok(s)) = &mut o.settings {
                s.renew_lease = false;
            }
            o.net.node = Some(Err(api(404, "not found")));
            o.net.lease = Some(Err(api(404, "not found")));
        },
        CheckId::Lease,
        Status::Warn,
        "the kubelet writes it only while its Node exists",
        "systemctl restart kubelet",
    ),
    (
        "NotReady fails",
        |o| {
            if let Some(Ok(n)) = &mut o.net.node {
                n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into()
            }
        },
        CheckId::Node,
        Status::Fail,
        "NotReady",
        "journalctl -u kubelet",
    ),
    (
        "no podCIDR warns",
        |o| {
            if let Some(Ok(n)) = &mut o.net.node {
                n.spec.as_mut().unwrap().pod_cidr = None
            }
        },
        CheckId::Node,
        Status::Warn,
        "no spec.podCIDR",
        "allocate-node-cidrs",
    ),
    (
        "Lease 41s old fails",
        |o| o.net.lease = Some(Ok(lease("n1", 41))),
        CheckId::Lease,
        Status::Fail,
        "longer than its 40s duration",
        "systemctl restart bootlet",
    ),
    (
        "Lease 40s old passes",
        |o| o.net.lease = Some(Ok(lease("n1", 40))),
        CheckId::Lease,
        Status::Pass,
        "renewed 40s ago",
        "",
    ),
    (
        "Lease of another holder",
        |o| o.net.lease = Some(Ok(lease("n2", 1))),
        CheckId::Lease,
        Status::Fail,
        "held by \"n2\"",
        "kubectl -n kube-node-lease delete lease n1",
    ),
    (
        "another CA, accepted by the API server",
        |o| from_other_ca(o, Some(Proof::Accepted(Vouched::Reviewed))),
        CheckId::ClientCertificate,
        Status::Pass,
        "issued by \"CN=kubelet-client-ca\" (not the kubeconfig's CA) and accepted by the API server: a SelfSubjectReview with it answers system:node:n1 in system:nodes, rotation on",
        "",
    ),
    (
        "another CA, the review forbidden (403)",
        |o| from_other_ca(o, Some(Proof::Accepted(Vouched::ReviewForbidden))),
        CheckId::ClientCertificate,
        Status::Pass,
        "accepted by the API server: a SelfSubjectReview with it is forbidden (403), an answer only an authenticated request gets",
        "",
    ),
    (
        "another CA, no review API (404)",
        |o| from_other_ca(o, Some(Proof::Accepted(Vouched::AccessReviewed { status: 201 }))),
        CheckId::ClientCertificate,
        Status::Pass,
        "accepted by the API server: the server has no SelfSubjectReview (404), and a SelfSubjectAccessReview with it is answered (201)",
        "",
    ),
    (
        "another CA, the API server not answering",
        |o| from_other_ca(o, Some(Proof::Unanswered { reason: "no answer within 2.5s".into() })),
        CheckId::ClientCertificate,
        Status::Warn,
        "could not be asked whether it accepts it (no answer within 2.5s); bootlet uses it all the same",
        "curl -sk https://10.0.0.1:6443/healthz",
    ),
    (
        "another CA, refused by the API server",
        |o| from_other_ca(o, None),
        CheckId::ClientCertificate,
        Status::Fail,
        "issued by \"CN=kubelet-client-ca\", not by the cluster CA, and the API server does not vouch for it (the API server does not accept it: ",
        "rm /var/lib/kubelet/pki/kubelet-client-current.pem && systemctl restart bootlet",
    ),
    (
        "Lease missing warns",
        |o| o.net.lease = Some(Err(api(404, "not found"))),
        CheckId::Lease,
        Status::Warn,
        "no Lease kube-node-lease/n1 yet",
        "systemctl start bootlet",
    ),
];

/// The installed certificate chains to another CA than the kubeconfig's: the proof said
/// `proof`, or (None) refused it with a 401.
fn from_other_ca(o: &mut Observations, proof: Option<Proof>) {
    use crate::identity::issue::proof::ProofError;
    let CertObs::Checked {
        verdict, other_ca, ..
    } = &mut o.cert
    else {
        panic!("joined() has a certificate")
    };
    let issuer = "CN=kubelet-client-ca".to_string();
    match proof {
        Some(proof) => *other_ca = Some(OtherCa { issuer, proof }),
        None => {
            *verdict = Err(InstalledError::Unaccepted {
                issuer,
                source: ProofError::Rejected(api(401, "Unauthorized")),
            })
        }
    }
}

fn run_rows(base: fn() -> Observations, rows: &[Row]) {
    for (name, change, id, status, summary, fix) in rows {
        let mut obs = base();
        change(&mut obs);
        let report = evaluate(&obs, now());
        let o = report.get(*id);
        assert_eq!(o.status, *status, "{name}: {o:?}");
        assert!(
            o.summary.contains(summary),
            "{name}: {:?} lacks {summary:?}",
            o.summary
        );
        let r = o.remediation.as_deref().unwrap_or("");
        assert!(r.contains(fix), "{name}: {r:?} lacks {fix:?}");
        // A failure names the first failing check as the root cause; earlier ones pass.
        if *status == Status::Fail {
            assert_eq!(report.root_cause().map(|(i, _)| i), Some(*id), "{name}");
            assert_eq!(report.exit_code(), 1);
        }
    }
}

#[test]
fn joining_verdicts() {
    run_rows(joining, ROWS);
}

#[test]
fn joined_verdicts() {
    run_rows(joined, JOINED_ROWS);
}

#[test]
fn rotation_off_warns_from_90_percent_of_the_lifetime() {
    for (elapsed, status) in [(89, Status::Pass), (90, Status::Warn), (99, Status::Warn)] {
        let mut obs = joined();
        let nb = now() - Duration::from_secs(elapsed * 100);
        obs.cert = CertObs::Checked {
            path: "/p".into(),
            info: Some(Box::new(cert_info(nb, nb + Duration::from_secs(10_000)))),
            verdict: Ok(()),
            other_ca: None,
        };
        obs.settings = Some(Ok(settings(false)));
        let o = evaluate(&obs, now())
            .get(CheckId::ClientCertificate)
            .clone();
        assert_eq!(o.status, status, "{elapsed}%: {o:?}");
        obs.settings = Some(Ok(settings(true)));
        let on = evaluate(&obs, now())
            .get(CheckId::ClientCertificate)
            .clone();
        assert_eq!(on.status, Status::Pass, "rotation on: {on:?}");
    }
}

#[test]
fn a_failure_skips_its_dependents_but_not_independent_checks() {
    let mut obs = joined();
    obs.net.node = Some(Err(api(404, "not found")));
    obs.net.lease = Some(Ok(lease("n1", 100)));
    let report = evaluate(&obs, now());
    assert_eq!(report.get(CheckId::Node).status, Status::Warn);
    assert_eq!(report.get(CheckId::Lease).status, Status::Fail);

    let mut obs = joining();
    obs.net.tcp = Some(Err("connection to 10.0.0.1:6443 refused".into()));
    let report = evaluate(&obs, now());
    let statuses: Vec<Status> = report.checks.iter().map(|(_, o)| o.status).collect();
    assert_eq!(&statuses[..3], [Status::Pass, Status::Pass, Status::Fail]);
    assert!(statuses[3..].iter().all(|s| *s == Status::Skip));
    assert!(report
        .get(CheckId::CaTrust)
        .summary
        .contains("needs server-reachable"));
}

#[test]
fn ca_mismatch_shows_both_pins() {
    let mut obs = joining();
    obs.net.tls = Some(Err(TlsFailure::UnknownCa {
        kubeconfig_pins: vec!["sha256:aa".into()],
        kubeconfig_cas: vec!["CN=kubernetes, key id AA:01".into()],
        server_ca_pins: vec!["sha256:bb".into()],
        server_issuer: "CN=kubernetes".into(),
        server_issuer_key_id: Some("BB:02".into()),
    }));
    let o = evaluate(&obs, now()).get(CheckId::CaTrust).clone();
    assert_eq!(o.status, Status::Fail);
    assert!(o.summary.contains("presents CA sha256:bb"), "{o:?}");
    assert!(
        o.summary
            .contains("trusts CA sha256:aa (CN=kubernetes, key id AA:01)"),
        "{o:?}"
    );
    // What an unverified endpoint presents is information, never the fix: pinning it would
    // trust whoever answered. The fix comes from the control plane.
    let fix = o.remediation.clone().unwrap();
    assert!(!fix.contains("sha256:bb"), "{fix}");
    assert!(
        fix.starts_with("kubeadm token create --print-join-command  # on a control-plane node"),
        "{fix}"
    );
    assert!(o.summary.contains("information only"), "{o:?}");
}

#[test]
fn ca_mismatch_without_a_server_ca_never_suggests_a_pin() {
    let mut obs = joining();
    obs.net.tls = Some(Err(TlsFailure::UnknownCa {
        kubeconfig_pins: vec!["sha256:aa".into()],
        kubeconfig_cas: vec!["CN=kubernetes, key id AA:01".into()],
        server_ca_pins: vec![],
        server_issuer: "CN=kubernetes".into(),
        server_issuer_key_id: Some("BB:02".into()),
    }));
    let o = evaluate(&obs, now()).get(CheckId::CaTrust).clone();
    assert!(
        o.summary.contains(
            "issued by CN=kubernetes, key id BB:02 (the server sent no CA certificate), but"
        ),
        "{o:?}"
    );
    let fix = o.remediation.unwrap();
    assert!(!fix.contains("sha256:"), "{fix}");
    assert!(fix.contains("on a control-plane node"), "{fix}");
}

#[test]
fn a_silent_server_fails_reachability() {
    let mut obs = joining();
    obs.net.tls = Some(Err(TlsFailure::Timeout {
        after: Duration::from_secs(2),
    }));
    let o = evaluate(&obs, now()).get(CheckId::ServerReachable).clone();
    assert_eq!(o.status, Status::Fail);
    assert!(
        o.summary
            .contains("did not answer the TLS handshake within 2s"),
        "{o:?}"
    );
}

/// TCP and TLS complete, then no HTTP answer: server-reachable fails with the reachability
/// fix, and clock-skew (whose GET /version would only have hung too) is skipped.
#[test]
fn a_server_silent_after_tls_fails_reachability_not_clock_skew() {
    let mut obs = joining();
    obs.net.http = Some(Err(HttpFailure::Timeout {
        after: Duration::from_millis(1500),
    }));
    obs.net.skew = None;
    let report = evaluate(&obs, now());
    let (root, o) = report.root_cause().unwrap();
    assert_eq!(root, CheckId::ServerReachable, "{report:?}");
    assert!(
        o.summary
            .contains("completes TCP and TLS but did not answer GET /livez within 1.5s"),
        "{o:?}"
    );
    assert!(o
        .remediation
        .as_ref()
        .unwrap()
        .starts_with("curl -sk https://10.0.0.1:6443/healthz"));
    assert_eq!(report.get(CheckId::ClockSkew).status, Status::Skip);
}

#[test]
fn any_http_answer_is_reachable_and_a_5xx_livez_warns() {
    for (code, status) in [
        (200, Status::Pass),
        (401, Status::Pass),
        (403, Status::Pass),
        (503, Status::Warn),
    ] {
        let mut obs = joining();
        obs.net.http = Some(Ok(code));
        let o = evaluate(&obs, now()).get(CheckId::ServerReachable).clone();
        assert_eq!(o.status, status, "{code}: {o:?}");
        assert!(o.summary.contains(&code.to_string()), "{o:?}");
    }
    let mut obs = joining();
    obs.net.http = Some(Err(HttpFailure::Failed {
        detail: "connection closed before message completed".into(),
    }));
    let o = evaluate(&obs, now()).get(CheckId::ServerReachable).clone();
    assert_eq!(o.status, Status::Fail);
    assert!(
        o.summary.contains("gave no HTTP answer to GET /livez"),
        "{o:?}"
    );
}

/// [`joining`] with an exec plugin as the bootstrap credential, and what running it gave.
fn joining_by_exec(ran: Option<Result<ExecIssued, ExecError>>) -> Observations {
    use crate::api::kubeconfig::exec::{ExecPlugin, ExecSpec};
    let mut obs = joining();
    let spec = ExecSpec {
        command: "/usr/bin/x-auth".into(),
        program: "/usr/bin/x-auth".into(),
        args: vec![],
        env: vec![],
        api_version: "client.authentication.k8s.io/v1".into(),
        install_hint: Some("apt-get install x-auth".into()),
        exec_info: String::new(),
    };
    if let Some(Ok(b)) = &mut obs.bootstrap {
        b.credential = Credential::Exec(ExecPlugin::new(spec));
    }
    obs.using = Using::BootstrapExec {
        command: "/usr/bin/x-auth".into(),
        file: "/etc/kubernetes/bootstrap-kubelet.conf".into(),
    };
    obs.exec = ran;
    obs
}

#[test]
fn an_exec_plugin_is_named_with_what_it_handed_out_or_why_not() {
    let token = Ok(ExecIssued::Token {
        id: "abcdef".into(),
    });
    let report = evaluate(&joining_by_exec(Some(token)), now());
    let o = report.get(CheckId::BootstrapKubeconfig);
    assert_eq!(o.status, Status::Pass, "{o:?}");
    assert!(
        o.summary
            .ends_with("exec plugin /usr/bin/x-auth handed out bootstrap token abcdef"),
        "{o:?}"
    );
    assert_eq!(report.get(CheckId::Authentication).status, Status::Pass);

    let missing = ExecError::NotFound {
        command: "/usr/bin/x-auth".into(),
        install_hint: Some("apt-get install x-auth".into()),
    };
    let report = evaluate(&joining_by_exec(Some(Err(missing))), now());
    let o = report.get(CheckId::BootstrapKubeconfig);
    assert_eq!(o.status, Status::Fail, "{o:?}");
    assert_eq!(
        o.summary,
        "/etc/kubernetes/bootstrap-kubelet.conf: bootstrap credential: exec plugin \
         /usr/bin/x-auth not found: apt-get install x-auth"
    );
    assert_eq!(o.remediation.as_deref(), Some("apt-get install x-auth"));
    assert_eq!(
        report.root_cause().map(|(id, _)| id),
        Some(CheckId::BootstrapKubeconfig)
    );

    let failed = ExecError::Failed {
        command: "/usr/bin/x-auth".into(),
        status: "exit status 1".into(),
        stderr: "no metadata server".into(),
    };
    let o = evaluate(&joining_by_exec(Some(Err(failed))), now())
        .get(CheckId::BootstrapKubeconfig)
        .clone();
    assert_eq!(o.status, Status::Fail, "{o:?}");
    assert!(
        o.summary.ends_with(
            "exec plugin /usr/bin/x-auth failed: exit status 1: stderr: no metadata server"
        ),
        "{o:?}"
    );
    assert!(o
        .remediation
        .unwrap()
        .starts_with("/usr/bin/x-auth  # run the plugin by hand"));

    let cert = Ok(ExecIssued::ClientCert {
        subject: "kubelet-bootstrap".into(),
    });
    let mut obs = joining_by_exec(Some(cert));
    obs.net.review = Some(Ok(user("kubelet-bootstrap", &["system:bootstrappers"])));
    let report = evaluate(&obs, now());
    assert!(report
        .get(CheckId::BootstrapKubeconfig)
        .summary
        .ends_with("handed out a client certificate for kubelet-bootstrap"));
    let o = report.get(CheckId::Authentication);
    assert_eq!(o.status, Status::Pass, "{o:?}");
}
