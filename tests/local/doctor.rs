//! `bootlet doctor` against the testplane: one scenario per root cause of issue #11, each
//! asserting rootCause, every check's status, the summary and the remediation; kubectl
//! remediations are run with the real kubectl and doctor must then pass; the run is bounded
//! against a server that never answers; the JSON shape has a snapshot.

use crate::support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bootlet::api::kubeconfig::{BootstrapToken, Credential};
use bootlet::api::{ApiClient, ClientOptions};
use bootlet::pki::files::CertDir;
use bootlet::pki::NodeKey;
use bootlet::runtime::backoff::Backoff;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde_json::Value;
use support::doctor::{doctor, doctor_json, openssl_pin, Run};
use support::{path, snapshot, NodeDir};
use testplane::{Approval, Signer, TestPlane};

const NODE: &str = "node-1";
const HOUR: Duration = Duration::from_secs(3600);

/// A kubeconfig like kubeadm's bootstrap-kubelet.conf; `None` leaves the field out.
fn kubeconfig(server: Option<&str>, ca_pem: &str, token: Option<&str>) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let server = server.map_or(String::new(), |s| format!("\n    server: {s}"));
    let user = token.map_or("{}".to_string(), |t| format!("\n    token: {t}"));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    certificate-authority-data: {b64}{server}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user: {user}\n"
    )
}

/// The node's flags (as for `run`, minus the subcommand).
fn flags(dir: &NodeDir) -> Vec<String> {
    dir.args(NODE)[1..].to_vec()
}

/// File our CSR with the bootstrap token the way the daemon does (pending key kept in the
/// cert dir, so doctor finds the CSR by the daemon's own name for it). Returns its name.
async fn file_csr(tp: &TestPlane, dir: &NodeDir, token: &str) -> String {
    let key = NodeKey::generate().unwrap();
    CertDir::open(&dir.cert_dir)
        .unwrap()
        .store_pending_key(&key.to_pem())
        .unwrap();
    let client = token_client(tp, token);
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1), 0.1).unwrap();
    bootlet::identity::csr::file(
        &client,
        &key,
        &bootlet::pki::CertProfile::client(NODE),
        &mut backoff,
    )
    .await
    .unwrap();
    bootlet::pki::csr_name(&key, &bootlet::pki::CertProfile::client(NODE))
}

fn token_client(tp: &TestPlane, token: &str) -> ApiClient {
    let credential = Credential::Token(BootstrapToken::new(token));
    ApiClient::new(
        &tp.url(),
        tp.ca_pem().as_bytes(),
        &credential,
        ClientOptions::default(),
    )
    .unwrap()
}

/// Wait until CSR `name` has a condition of type `cond`.
async fn csr_condition(tp: &TestPlane, name: &str, cond: &str) {
    let mut events = tp.events();
    let has = |tp: &TestPlane| {
        tp.csr(name)
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == cond))
    };
    tokio::time::timeout(support::WAIT, async {
        while !has(tp) {
            let _ = events.recv().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("CSR {name} never got {cond}"));
}

/// Install a client certificate for `cn` valid from `nb` to `na` into the cert dir, the way
/// bootlet installs one (timestamped file + current symlink, key included).
fn install_cert(
    tp: &TestPlane,
    dir: &NodeDir,
    cn: &str,
    nb: SystemTime,
    na: SystemTime,
    rogue: bool,
) {
    let key = NodeKey::generate().unwrap();
    let pem = tp
        .sign_client_cert(&key.public_key_der(), cn, &["system:nodes"], nb, na, rogue)
        .unwrap();
    CertDir::open(&dir.cert_dir)
        .unwrap()
        .install(&pem, &key.to_pem(), testplane::wall_now())
        .unwrap();
}

fn valid_cert(tp: &TestPlane, dir: &NodeDir) {
    let now = testplane::wall_now();
    install_cert(
        tp,
        dir,
        &format!("system:node:{NODE}"),
        now - HOUR,
        now + 24 * HOUR,
        false,
    );
}

fn token_id(token: &str) -> &str {
    &token[..6]
}

fn node(
    ready: &str,
    net_unavailable: bool,
    pod_cidr: Option<&str>,
    cloud: bool,
    machine_id: &str,
) -> Node {
    let cond = |t: &str, s: &str, reason: &str| NodeCondition {
        type_: t.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(format!("{t} is {s}")),
        ..Default::default()
    };
    let mut conditions = vec![cond("Ready", ready, "KubeletReady")];
    if net_unavailable {
        conditions.push(cond("NetworkUnavailable", "True", "NoRouteCreated"));
    }
    let labels = cloud.then(|| {
        [
            ("topology.kubernetes.io/zone", "zone-a"),
            ("node.kubernetes.io/instance-type", "m5.large"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    });
    let taints = (!cloud).then(|| {
        vec![Taint {
            key: "node.cloudprovider.kubernetes.io/uninitialized".into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]
    });
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            labels,
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: pod_cidr.map(str::to_string),
            taints,
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(conditions),
            node_info: Some(NodeSystemInfo {
                machine_id: machine_id.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

fn lease(holder: &str, renewed_ago: Duration) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            namespace: Some("kube-node-lease".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(
                jiff::Timestamp::try_from(testplane::wall_now() - renewed_ago).unwrap(),
            )),
            ..Default::default()
        }),
    }
}

fn machine_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Run a printed remediation with the real kubectl as the cluster admin.
fn run_remediation(tp: &TestPlane, dir: &Path, fix: &str) {
    let admin = dir.join("admin.conf");
    std::fs::write(&admin, tp.admin_kubeconfig()).unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", fix])
        .env("KUBECONFIG", &admin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{fix}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One scenario: what to set up, and what doctor must say.
struct Case {
    name: &'static str,
    /// P W F S per check, in contract order.
    statuses: &'static str,
    root: Option<&'static str>,
    /// Substrings of the root cause's (or, without one, the first warning's) summary.
    summary: &'static [&'static str],
    /// Substring of its remediation.
    fix: &'static str,
}

/// Build scenario `name` on a fresh testplane; returns the plane, the node dir, extra
/// flags, and `{token}`/`{csr}`/pins to substitute into the expectations.
async fn setup(name: &str) -> (TestPlane, NodeDir, Vec<String>, Vec<(String, String)>) {
    let tp = TestPlane::builder().start().await.unwrap();
    let token = tp.create_token(Some(HOUR));
    let good = kubeconfig(Some(&tp.url()), &tp.ca_pem(), Some(&token));
    let dir = NodeDir::new(&good);
    let mut extra = vec![];
    let mut subst = vec![("{token}".to_string(), token_id(&token).to_string())];
    let write = |text: &str| std::fs::write(&dir.bootstrap, text).unwrap();
    let now = testplane::wall_now();
    match name {
        "1 kubeconfig missing" => std::fs::remove_file(&dir.bootstrap).unwrap(),
        "1 kubeconfig unreadable" => {
            // A directory where the file should be: read(2) fails (EISDIR) even for root.
            std::fs::remove_file(&dir.bootstrap).unwrap();
            std::fs::create_dir(&dir.bootstrap).unwrap();
        }
        "1 kubeconfig not yaml" => write(": [ not yaml"),
        "1 kubeconfig without server" => write(&kubeconfig(None, &tp.ca_pem(), Some(&token))),
        "1 kubeconfig without token" => write(&kubeconfig(Some(&tp.url()), &tp.ca_pem(), None)),
        "1 config file does not parse" => {
            let cfg = dir.tmp.path().join("bootlet.yaml");
            std::fs::write(&cfg, "nodeName: [unterminated\n").unwrap();
            extra = vec!["--config".into(), path(&cfg)];
        }
        "2 token malformed" => write(&kubeconfig(
            Some(&tp.url()),
            &tp.ca_pem(),
            Some("Not-A.Bootstrap-Token"),
        )),
        "3 connection refused" => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("https://{}", l.local_addr().unwrap());
            drop(l);
            write(&kubeconfig(Some(&url), &tp.ca_pem(), Some(&token)));
        }
        "3 unresolvable" => write(&kubeconfig(
            Some("https://no-such-host.invalid:6443"),
            &tp.ca_pem(),
            Some(&token),
        )),
        "4 ca mismatch" => {
            let other = testplane::pki::Ca::generate("other-cluster").unwrap();
            write(&kubeconfig(Some(&tp.url()), other.cert_pem(), Some(&token)));
            subst.push(("{ours}".into(), openssl_pin(other.cert_pem())));
            subst.push(("{theirs}".into(), openssl_pin(&tp.ca_pem())));
        }
        "5 clock skew fail" => tp.faults().skew_date(600),
        "5 clock skew warn" => tp.faults().skew_date(-90),
        "5 cert not yet valid" => install_cert(
            &tp,
            &dir,
            &format!("system:node:{NODE}"),
            now + HOUR,
            now + 2 * HOUR,
            false,
        ),
        "6 token expired" => tp.expire_token(token_id(&token)).unwrap(),
        "6 token deleted" => tp.delete_token(token_id(&token)).unwrap(),
        "7 unexpected identity" => {
            let t = "abcdef.0123456789abcdef";
            tp.add_static_token(t, "kubelet", &["system:nodes"]);
            write(&kubeconfig(Some(&tp.url()), &tp.ca_pem(), Some(t)));
        }
        "8 bootstrap binding deleted" => tp
            .delete_cluster_role_binding("kubeadm:kubelet-bootstrap")
            .unwrap(),
        "9 csr pending, no approver" => {
            tp.delete_cluster_role_binding("kubeadm:node-autoapprove-bootstrap")
                .unwrap();
            let name = file_csr(&tp, &dir, &token).await;
            subst.push(("{csr}".into(), name));
        }
        "10 csr denied" => {
            tp.set_approval(Approval::Manual);
            let name = file_csr(&tp, &dir, &token).await;
            tp.deny(&name, "Policy\u{1b}[2J\nRejected").unwrap();
            csr_condition(&tp, &name, "Denied").await;
            subst.push(("{csr}".into(), name));
        }
        "10 csr failed" => {
            tp.set_approval(Approval::Manual);
            // Approved by hand although the signer will refuse it (no client auth usage).
            let key = NodeKey::generate().unwrap();
            let mut csr =
                bootlet::identity::csr::build(&key, &bootlet::pki::CertProfile::client(NODE))
                    .unwrap();
            csr.spec.usages = Some(vec!["digital signature".into()]);
            let client = token_client(&tp, &token);
            let _: Value = client
                .create(
                    "/apis/certificates.k8s.io/v1/certificatesigningrequests",
                    &csr,
                )
                .await
                .unwrap();
            let name = csr.metadata.name.clone().unwrap();
            tp.approve(&name).unwrap();
            csr_condition(&tp, &name, "Failed").await;
            subst.push(("{csr}".into(), name));
        }
        "11 approved, never issued" => {
            tp.set_signer(Signer::None);
            let name = file_csr(&tp, &dir, &token).await;
            csr_condition(&tp, &name, "Approved").await;
            subst.push(("{csr}".into(), name));
        }
        "12 cert for another node name" => install_cert(
            &tp,
            &dir,
            "system:node:old-name",
            now - HOUR,
            now + HOUR,
            false,
        ),
        "13 cert expired" => install_cert(
            &tp,
            &dir,
            &format!("system:node:{NODE}"),
            now - 2 * HOUR,
            now - HOUR,
            false,
        ),
        "13 rotation off, near expiry" => {
            install_cert(
                &tp,
                &dir,
                &format!("system:node:{NODE}"),
                now - 9 * HOUR,
                now + HOUR,
                false,
            );
            extra = vec!["--rotate-certificates=false".into()];
        }
        "14 cert from another CA" => install_cert(
            &tp,
            &dir,
            &format!("system:node:{NODE}"),
            now - HOUR,
            now + HOUR,
            true,
        ),
        "15 stale node from a reinstall" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "True",
                false,
                Some("10.244.1.0/24"),
                true,
                "0123456789abcdef0123456789abcdef",
            ));
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "16 node NotReady" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "False",
                false,
                Some("10.244.1.0/24"),
                true,
                &machine_id(),
            ));
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "16 node NetworkUnavailable" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "True",
                true,
                Some("10.244.1.0/24"),
                true,
                &machine_id(),
            ));
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "16 node uninitialised" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node("True", false, None, false, &machine_id()));
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "16 node missing" => {
            valid_cert(&tp, &dir);
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "16 healthy node" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "True",
                false,
                Some("10.244.1.0/24"),
                true,
                &machine_id(),
            ));
            tp.put_lease(&lease(NODE, Duration::from_secs(1)));
        }
        "17 lease stale" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "True",
                false,
                Some("10.244.1.0/24"),
                true,
                &machine_id(),
            ));
            tp.put_lease(&lease(NODE, Duration::from_secs(300)));
        }
        "17 lease held by another" => {
            valid_cert(&tp, &dir);
            tp.put_node(&node(
                "True",
                false,
                Some("10.244.1.0/24"),
                true,
                &machine_id(),
            ));
            tp.put_lease(&lease("node-9", Duration::from_secs(1)));
        }
        other => panic!("no scenario {other}"),
    }
    (tp, dir, extra, subst)
}

const CASES: &[Case] = &[
    Case { name: "1 kubeconfig missing", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["has not been given a bootstrap credential yet", "bootstrap-kubelet.conf and no client certificate"], fix: "kubeadm token create --print-join-command" },
    Case { name: "1 kubeconfig unreadable", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["bootstrap-kubelet.conf: cannot read: is a directory, not a regular file"], fix: "kubeadm token create --print-join-command" },
    Case { name: "1 kubeconfig not yaml", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["not a kubeconfig"], fix: "kubeadm token create --print-join-command" },
    Case { name: "1 kubeconfig without server", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["has no server"], fix: "kubeadm token create --print-join-command" },
    Case { name: "1 kubeconfig without token", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["has no token"], fix: "kubeadm token create --print-join-command" },
    Case { name: "1 config file does not parse", statuses: "FSSSSSSSSSSS", root: Some("config"), summary: &["bootlet.yaml"], fix: "bootlet doctor" },
    Case { name: "2 token malformed", statuses: "PFSSSSSSSSSS", root: Some("bootstrap-kubeconfig"), summary: &["not a bootstrap token", "[a-z0-9]{6}.[a-z0-9]{16}"], fix: "kubeadm token create --print-join-command" },
    Case { name: "3 connection refused", statuses: "PPFSSSSSSSSS", root: Some("server-reachable"), summary: &["refused"], fix: "curl -sk https://127.0.0.1:" },
    Case { name: "3 unresolvable", statuses: "PPFSSSSSSSSS", root: Some("server-reachable"), summary: &["cannot resolve no-such-host.invalid"], fix: "curl -sk https://no-such-host.invalid:6443/healthz" },
    Case { name: "4 ca mismatch", statuses: "PPPFSSSSSSSS", root: Some("ca-trust"), summary: &["x509: certificate signed by unknown authority", "presents CA {theirs} (information only", "trusts CA {ours}"], fix: "kubeadm token create --print-join-command  # on a control-plane node" },
    Case { name: "5 clock skew fail", statuses: "PPPPFSSSSSSS", root: Some("clock-skew"), summary: &["s ahead of this node's clock", "more than 5 minutes"], fix: "timedatectl set-ntp true" },
    Case { name: "5 clock skew warn", statuses: "PPPPWPPPWSSS", root: None, summary: &["s behind this node's clock", "more than 30 s"], fix: "timedatectl set-ntp true" },
    Case { name: "5 cert not yet valid", statuses: "PPPPFSSSSSSS", root: Some("clock-skew"), summary: &["kubelet-client-current.pem is not valid before", "the clock is behind"], fix: "timedatectl set-ntp true" },
    Case { name: "6 token expired", statuses: "PPPPPFSSSSSS", root: Some("authentication"), summary: &["bootstrap token {token} is expired or deleted (401)"], fix: "kubeadm token create --print-join-command" },
    Case { name: "6 token deleted", statuses: "PPPPPFSSSSSS", root: Some("authentication"), summary: &["bootstrap token {token} is expired or deleted (401)"], fix: "kubeadm token create --print-join-command" },
    Case { name: "7 unexpected identity", statuses: "PPPPPFSSSSSS", root: Some("authentication"), summary: &["authenticates as \"kubelet\"", "not system:bootstrap:abcdef"], fix: "kubeadm token create --print-join-command" },
    Case { name: "8 bootstrap binding deleted", statuses: "PPPPPPFSSSSS", root: Some("authorization"), summary: &["system:bootstrap:{token} may not create CertificateSigningRequests", "ClusterRoleBinding kubeadm:kubelet-bootstrap"], fix: "kubectl create clusterrolebinding kubeadm:kubelet-bootstrap --clusterrole=system:node-bootstrapper --group=system:bootstrappers:kubeadm:default-node-token" },
    Case { name: "9 csr pending, no approver", statuses: "PPPPPPPFSSSS", root: Some("csr"), summary: &["CSR {csr} has been pending for", "ClusterRoleBinding kubeadm:node-autoapprove-bootstrap"], fix: "kubectl certificate approve {csr}" },
    Case { name: "10 csr denied", statuses: "PPPPPPPFSSSS", root: Some("csr"), summary: &["CSR {csr} was denied: Policy [2J Rejected: denied by the test"], fix: "kubectl describe csr {csr}" },
    Case { name: "10 csr failed", statuses: "PPPPPPPFSSSS", root: Some("csr"), summary: &["CSR {csr} failed: SignerValidationFailure", "the signer refused it"], fix: "kubectl describe csr {csr}" },
    Case { name: "11 approved, never issued", statuses: "PPPPPPPFSSSS", root: Some("csr"), summary: &["CSR {csr} is approved but no certificate was issued"], fix: "component=kube-controller-manager" },
    Case { name: "12 cert for another node name", statuses: "PPPPPPPPFSSS", root: Some("client-certificate"), summary: &["is for CN=system:node:old-name, O=system:nodes", "this node is CN=system:node:node-1", "--node-name old-name"], fix: "kubelet-client-current.pem && systemctl restart bootlet" },
    Case { name: "13 cert expired", statuses: "PPPPPPPPFSSS", root: Some("client-certificate"), summary: &["kubelet-client-current.pem expired at"], fix: "kubelet-client-current.pem && systemctl restart bootlet" },
    Case { name: "13 rotation off, near expiry", statuses: "PPPPPPPPWWWP", root: None, summary: &["past 90 % of its lifetime and rotation is off"], fix: "--rotate-certificates=true" },
    Case { name: "14 cert from another CA", statuses: "PPPPPPPPFSSS", root: Some("client-certificate"), summary: &["was issued by \"CN=rogue-ca\", not by the cluster CA, and the API server does not vouch for it (the API server does not accept it: ", "401"], fix: "kubelet-client-current.pem && systemctl restart bootlet" },
    Case { name: "15 stale node from a reinstall", statuses: "PPPPPPPPPFPP", root: Some("node"), summary: &["registered by another machine (machineID 0123456789abcdef0123456789abcdef", "stale Node"], fix: "kubectl delete node node-1" },
    Case { name: "16 node NotReady", statuses: "PPPPPPPPPFPP", root: Some("node"), summary: &["Node node-1 is NotReady (KubeletReady: Ready is False)"], fix: "journalctl -u kubelet" },
    Case { name: "16 node NetworkUnavailable", statuses: "PPPPPPPPPFPP", root: Some("node"), summary: &["NetworkUnavailable=True (NoRouteCreated)", "CNI"], fix: "--field-selector spec.nodeName=node-1" },
    Case { name: "16 node uninitialised", statuses: "PPPPPPPPPWPP", root: None, summary: &["node.cloudprovider.kubernetes.io/uninitialized", "no spec.podCIDR", "topology.kubernetes.io/zone, node.kubernetes.io/instance-type missing"], fix: "cloud-controller-manager" },
    Case { name: "16 node missing", statuses: "PPPPPPPPPWPP", root: None, summary: &["Node node-1 is not registered: the kubelet registers its Node only when it starts"], fix: "systemctl restart kubelet" },
    Case { name: "16 healthy node", statuses: "PPPPPPPPPPPP", root: None, summary: &[], fix: "" },
    Case { name: "17 lease stale", statuses: "PPPPPPPPPPFP", root: Some("lease"), summary: &["last renewed 5m", "longer than its 40s duration"], fix: "systemctl restart bootlet" },
    Case { name: "17 lease held by another", statuses: "PPPPPPPPPPFP", root: Some("lease"), summary: &["held by \"node-9\", not node-1"], fix: "kubectl -n kube-node-lease delete lease node-1" },
];

fn subst(text: &str, vars: &[(String, String)]) -> String {
    vars.iter()
        .fold(text.to_string(), |t, (k, v)| t.replace(k, v))
}

/// Where the case's summary and fix are: the root cause, else the first warning.
fn focus<'a>(run: &'a Run, case: &Case) -> Option<&'a Value> {
    match case.root {
        Some(id) => Some(run.check(id)),
        None => run.checks().iter().find(|c| c["status"] == "warn"),
    }
}

fn assert_case(case: &Case, run: &Run, vars: &[(String, String)]) {
    let ctx = format!("scenario {:?}: {:#}", case.name, run.json);
    assert_eq!(run.statuses(), case.statuses, "{ctx}");
    assert_eq!(run.root(), case.root, "{ctx}");
    assert_eq!(run.json["ok"], case.root.is_none(), "{ctx}");
    assert_eq!(
        run.code,
        Some(if case.root.is_some() { 1 } else { 0 }),
        "{ctx}"
    );
    let ids: Vec<&str> = run
        .checks()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 12, "{ctx}");
    if let Some(c) = focus(run, case) {
        let summary = c["summary"].as_str().unwrap();
        for needle in case.summary {
            let needle = subst(needle, vars);
            assert!(summary.contains(&needle), "summary lacks {needle:?}; {ctx}");
        }
        let fix = c["remediation"].as_str().unwrap_or("");
        assert!(
            fix.contains(&subst(case.fix, vars)),
            "remediation lacks {:?}; {ctx}",
            case.fix
        );
        // A pin the (unverified) server presented is never part of a fix.
        if let Some((_, theirs)) = vars.iter().find(|(k, _)| k == "{theirs}") {
            assert!(
                !fix.contains(theirs.as_str()),
                "the fix pins {theirs}; {ctx}"
            );
        }
    }
    for c in run.checks() {
        let text = format!("{}{}", c["summary"], c["remediation"]);
        assert!(
            !text.contains('\u{1b}') && !c["summary"].as_str().unwrap().contains('\n'),
            "control characters; {ctx}"
        );
    }
    assert!(
        run.took < Duration::from_secs(10),
        "took {:?}; {ctx}",
        run.took
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_root_cause_is_named_with_its_fix() {
    for case in CASES {
        let (tp, dir, extra, vars) = setup(case.name).await;
        let mut args = flags(&dir);
        args.extend(extra);
        let before = tp.requests().len();
        let run = doctor_json(&args).await;
        assert_case(case, &run, &vars);
        assert!(
            tp.unexpected_requests().is_empty(),
            "{}: {:?}",
            case.name,
            tp.unexpected_requests()
        );
        // Read-only against the cluster except the two reviews.
        for r in &tp.requests()[before..] {
            let write = !matches!(r.verb.as_str(), "get" | "list" | "watch")
                && !r.path.contains("selfsubject");
            assert!(
                !write,
                "{}: doctor wrote {} {}",
                case.name, r.method, r.path
            );
        }
        tp.shutdown().await;
    }
}

fn case(name: &str) -> &'static Case {
    CASES.iter().find(|c| c.name == name).unwrap()
}

/// Scenario `name`: doctor names its root cause; the printed kubectl remediation is run as
/// the cluster admin with the real kubectl; doctor runs again. Returns the plane, the node
/// dir, the flags and the second run.
async fn remediate(name: &str) -> (TestPlane, NodeDir, Vec<String>, Run) {
    let c = case(name);
    let (tp, dir, extra, vars) = setup(name).await;
    let mut args = flags(&dir);
    args.extend(extra);
    let run = doctor_json(&args).await;
    assert_case(c, &run, &vars);
    let fix = run.check(c.root.unwrap())["remediation"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(fix.starts_with("kubectl "), "{name}: {fix}");
    run_remediation(&tp, dir.tmp.path(), &fix);
    let again = doctor_json(&args).await;
    (tp, dir, args, again)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_restores_the_bootstrap_binding() {
    let (tp, _dir, _, again) = remediate("8 bootstrap binding deleted").await;
    assert_eq!(
        again.check("authorization")["status"],
        "pass",
        "{:#}",
        again.json
    );
    assert_eq!(again.root(), None, "{:#}", again.json);
    assert_eq!(again.code, Some(0));
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_approves_the_pending_csr() {
    let name = "9 csr pending, no approver";
    let (tp, _dir, args, _) = remediate(name).await;
    // The signer issues the approved CSR; then doctor sees it issued.
    let csr = tp.csrs().into_iter().next().unwrap();
    let csr_name = csr.metadata.name.clone().unwrap();
    let mut events = tp.events();
    let issued = |tp: &TestPlane| {
        tp.csr(&csr_name)
            .and_then(|c| c.status)
            .is_some_and(|s| s.certificate.is_some())
    };
    tokio::time::timeout(support::WAIT, async {
        while !issued(&tp) {
            let _ = events.recv().await;
        }
    })
    .await
    .expect("the approved CSR is issued");
    let again = doctor_json(&args).await;
    assert_eq!(again.check("csr")["status"], "pass", "{:#}", again.json);
    assert_eq!(again.root(), None, "{:#}", again.json);
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deletes_the_stale_node() {
    let (tp, _dir, args, again) = remediate("15 stale node from a reinstall").await;
    // The stale object is gone: no failure left, the Node waits for the kubelet.
    assert_eq!(again.root(), None, "{:#}", again.json);
    assert_eq!(again.check("node")["status"], "warn", "{:#}", again.json);
    assert!(tp.node(NODE).is_none());
    // The kubelet registers the node again, from this machine: node passes.
    tp.put_node(&node(
        "True",
        false,
        Some("10.244.1.0/24"),
        true,
        &machine_id(),
    ));
    let after = doctor_json(&args).await;
    assert_eq!(after.check("node")["status"], "pass", "{:#}", after.json);
    assert_eq!(after.code, Some(0));
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deletes_the_foreign_lease_and_bootlet_takes_it() {
    let (tp, dir, args, again) = remediate("17 lease held by another").await;
    assert_eq!(again.root(), None, "{:#}", again.json);
    assert_eq!(again.check("lease")["status"], "warn", "{:#}", again.json);
    // bootlet run (reusing the installed certificate) creates and renews the Lease.
    let mut events = tp.events();
    let agent = support::Agent::spawn(&dir.args(NODE));
    testplane::wait_for(&mut events, support::WAIT, |e| {
        matches!(e, testplane::Event::LeaseRenewed { name, .. } | testplane::Event::LeaseCreated { name, .. } if name == NODE)
            .then_some(())
    })
    .await
    .expect("bootlet writes the Lease");
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    let after = doctor_json(&args).await;
    assert_eq!(after.check("lease")["status"], "pass", "{:#}", after.json);
    assert_eq!(after.code, Some(0), "{:#}", after.json);
    tp.shutdown().await;
}

/// issue 21 M4: bootlet installs a client certificate signed by a kubelet-client CA other
/// than the kubeconfig's once a SelfSubjectReview with it answers the node; doctor checks it
/// through the same proof, tests that certificate (not the token), and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_a_second_ca_the_server_accepts_passes_through_the_daemons_proof() {
    let tp = TestPlane::builder().start().await.unwrap();
    tp.set_signer(Signer::SecondCa { chain: false });
    let token = tp.create_token(Some(HOUR));
    let dir = NodeDir::new(&tp.kubeconfig_for_token(&token));
    let mut events = tp.events();
    let agent = support::Agent::spawn(&dir.args(NODE));
    agent.wait_for_log("the API server accepts it").await;
    testplane::wait_for(&mut events, support::WAIT, |e| {
        matches!(e, testplane::Event::LeaseRenewed { name, .. } | testplane::Event::LeaseCreated { name, .. } if name == NODE)
            .then_some(())
    })
    .await
    .expect("bootlet writes the Lease with it");
    let (status, _) = agent.terminate().await;
    assert!(status.success());

    let before = tp.requests().len();
    let run = doctor_json(&flags(&dir)).await;
    let ctx = format!("{:#}", run.json);
    assert_eq!(run.code, Some(0), "{ctx}");
    assert_eq!(run.root(), None, "{ctx}");
    // The Node is not registered (no kubelet here): a warning, nothing else.
    assert_eq!(run.statuses(), "PPPPPPPPPWPP", "{ctx}");
    let cert = run.summary("client-certificate");
    assert!(
        cert.contains("issued by \"CN=kubelet-client-ca\" (not the kubeconfig's CA) and accepted by the API server: a SelfSubjectReview with it answers system:node:node-1 in system:nodes"),
        "{ctx}"
    );
    assert!(
        run.summary("authentication")
            .starts_with("the client certificate system:node:node-1"),
        "doctor tests the certificate the daemon uses: {ctx}"
    );
    // The proof first, then authentication's reviews: the certificate's, and the token's
    // (only ever a warning while the certificate is valid). Nothing else with the token.
    let asked = &tp.requests()[before..];
    let reviews: Vec<&str> = asked
        .iter()
        .filter(|r| r.path == "/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .map(|r| r.user.as_str())
        .collect();
    let token_user = format!("system:bootstrap:{}", token_id(&token));
    assert_eq!(reviews.len(), 3, "{reviews:?}");
    assert_eq!(
        reviews[0], "system:node:node-1",
        "the proof first: {reviews:?}"
    );
    assert_eq!(
        reviews.iter().filter(|u| **u == token_user).count(),
        1,
        "{reviews:?}"
    );
    assert!(
        asked
            .iter()
            .filter(|r| r.user == token_user)
            .all(|r| r.path.ends_with("/selfsubjectreviews")),
        "{ctx}"
    );
    tp.shutdown().await;
}

/// A server that accepts connections and never says a word.
async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_ends_the_run_within_10s() {
    let tp = TestPlane::builder().start().await.unwrap();
    let token = tp.create_token(Some(HOUR));
    let (url, task) = silent_server().await;
    let dir = NodeDir::new(&kubeconfig(Some(&url), &tp.ca_pem(), Some(&token)));
    let run = doctor_json(&flags(&dir)).await;
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    assert_eq!(run.statuses(), "PPFSSSSSSSSS", "{:#}", run.json);
    assert_eq!(run.root(), Some("server-reachable"));
    let summary = run.check("server-reachable")["summary"].as_str().unwrap();
    assert!(
        summary.contains("accepts TCP connections but did not answer the TLS handshake"),
        "{summary}"
    );
    eprintln!("silent server: doctor took {:?}", run.took);
    task.abort();
    tp.shutdown().await;
}

/// TCP and TLS complete, then no HTTP answer (every request is held for a minute): the
/// root cause is reachability, named by server-reachable's own round trip, not a
/// clock-skew failure with a reachability fix; nothing after it is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_after_tls_ends_the_run_within_10s() {
    let tp = TestPlane::builder().start().await.unwrap();
    let dir = NodeDir::new(&tp.bootstrap_kubeconfig());
    tp.faults().delay(Duration::from_secs(60));
    let before = tp.requests().len();
    let run = doctor_json(&flags(&dir)).await;
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    assert_eq!(run.statuses(), "PPFSSSSSSSSS", "{:#}", run.json);
    assert_eq!(run.root(), Some("server-reachable"));
    let check = run.check("server-reachable");
    let summary = check["summary"].as_str().unwrap();
    assert!(
        summary.contains("completes TCP and TLS but did not answer GET /livez within 1.5s"),
        "{summary}"
    );
    let fix = check["remediation"].as_str().unwrap();
    assert!(fix.starts_with("curl -sk https://127.0.0.1:"), "{fix}");
    // One round trip, then nothing: the API requests would only hang too.
    let asked: Vec<String> = tp.requests()[before..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(asked.len() <= 1, "{asked:?}");
    eprintln!("hanging HTTP: doctor took {:?}", run.took);
    tp.faults().clear();
    tp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_shape_snapshot() {
    let (tp, dir, _, vars) = setup("6 token expired").await;
    let (code, out, _) = doctor(&flags(&dir), "json").await;
    assert_eq!(code, Some(1));
    let normalized = out
        .replace(&tp.url(), "https://SERVER")
        .replace(&path(dir.tmp.path()), "/NODE")
        .replace(&vars[0].1, "TOKENID");
    // The skew is read from a Date header of whole seconds: a loaded machine may see 1s.
    let normalized = normalize_skew(&normalized);
    snapshot("doctor-token-expired.json", &normalized);
    tp.shutdown().await;
}

/// `within Ns of the server's Date` → `within 0s …`: only the shape is snapshotted.
fn normalize_skew(json: &str) -> String {
    const TAIL: &str = "s of the server's Date";
    json.lines()
        .map(|line| match (line.find("\"within "), line.find(TAIL)) {
            (Some(at), Some(end)) if at < end => {
                let digits = &line[at + "\"within ".len()..end];
                if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
                    format!("{}\"within 0{}", &line[..at], &line[end..])
                } else {
                    line.to_string()
                }
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + if json.ends_with('\n') { "\n" } else { "" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_output_marks_each_check_and_prints_the_fix() {
    let (tp, dir, _, vars) = setup("6 token expired").await;
    let (code, out, _) = doctor(&flags(&dir), "text").await;
    assert_eq!(code, Some(1));
    let id = &vars[0].1;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 15, "{out}");
    assert!(lines[0].starts_with("✓ config "), "{out}");
    assert_eq!(
        lines[5],
        format!("✗ authentication        bootstrap token {id} is expired or deleted (401)")
    );
    assert_eq!(
        lines[6],
        "                        fix: kubeadm token create --print-join-command"
    );
    assert!(
        lines[7].starts_with("- authorization         skipped: needs authentication to pass"),
        "{out}"
    );
    assert_eq!(
        lines[14],
        format!(
            "✗ authentication is the root cause: bootstrap token {id} is expired or deleted (401)"
        )
    );
    assert!(
        !out.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );
    tp.shutdown().await;
}

/// A rotation CSR waiting with nothing to approve it (the rotation binding deleted): doctor
/// says what the daemon's STATUS= says — which CSR, for how long, the line that approves it
/// — besides the missing binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_rotation_csr_is_named_with_its_wait_and_the_approve_line() {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(30))
        .allow_short_expiration(true)
        .start()
        .await
        .unwrap();
    tp.delete_cluster_role_binding("kubeadm:node-autoapprove-certificate-rotation")
        .unwrap();
    let token = tp.create_token(Some(HOUR));
    let dir = NodeDir::new(&tp.kubeconfig_for_token(&token));
    let mut events = tp.events();
    let mut args = dir.args(NODE);
    // Rotate 3 s into the 30 s certificate.
    args.extend(["--rotation-fraction", "0.1", "--rotation-jitter", "0"].map(String::from));
    let agent = support::Agent::spawn(&args);
    let mut filed = Vec::new();
    while filed.len() < 2 {
        filed.push(
            support::wait_event(&mut events, |e| match e {
                testplane::Event::CsrCreated { name, .. } => Some(name.clone()),
                _ => None,
            })
            .await,
        );
    }
    let rotation = &filed[1];
    agent
        .wait_for_log(&format!("kubectl certificate approve {rotation}"))
        .await;
    // The pending key stays in the cert dir across a stop: doctor finds the CSR by it.
    let (status, _) = agent.terminate().await;
    assert!(status.success());

    let run = doctor_json(&flags(&dir)).await;
    let ctx = format!("{:#}", run.json);
    let csr = run.summary("csr");
    assert!(
        csr.contains(&format!(
            "rotation CSR {rotation} has been waiting for approval for "
        )),
        "{ctx}"
    );
    assert!(
        csr.contains("ClusterRoleBinding kubeadm:node-autoapprove-certificate-rotation is missing"),
        "{ctx}"
    );
    assert_eq!(
        run.fix("csr"),
        format!("kubectl certificate approve {rotation}"),
        "{ctx}"
    );
    tp.shutdown().await;
}
