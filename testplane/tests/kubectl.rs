//! The real kubectl (/usr/bin/kubectl) against the testplane with the written admin.conf and
//! bootstrap-kubelet.conf: every command behaves and prints like a real cluster.

mod support;

use support::*;
use testplane::{Approval, Event, TestPlane};

fn manifest(name: &str, csr_pem: &str) -> String {
    use base64::Engine;
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\nspec:\n  request: {}\n  signerName: {SIGNER}\n  usages: [\"digital signature\", \"client auth\"]\n",
        base64::engine::general_purpose::STANDARD.encode(csr_pem)
    )
}

fn header(out: &str) -> Vec<&str> {
    out.lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

fn row<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{out}"))
        .split_whitespace()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl() {
    if which("kubectl").is_none() {
        eprintln!("kubectl not on PATH; skipping");
        return;
    }
    let tp = TestPlane::builder()
        .approval(Approval::Manual)
        .start()
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    tp.write_state(h).unwrap();
    let mut ev = tp.events();

    let (ok, out) = kubectl(h, "admin.conf", &["get", "--raw", "/version"]).await;
    assert!(ok, "{out}");
    assert!(
        out.contains("\"gitVersion\":\"v1.33.0-testplane\""),
        "{out}"
    );

    let (ok, out) = kubectl(h, "admin.conf", &["get", "csr"]).await;
    assert!(ok && out.contains("No resources found"), "{out}");

    let (_, pem) = node_csr("system:node:k1", &["system:nodes"]);
    std::fs::write(h.join("k1.yaml"), manifest("node-csr-k1", &pem)).unwrap();
    std::fs::write(h.join("k2.yaml"), manifest("node-csr-k2", &pem)).unwrap();
    let (ok, out) = kubectl(h, "admin.conf", &["create", "-f", "k1.yaml"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "certificatesigningrequest.certificates.k8s.io/node-csr-k1 created"
    );
    let (ok, out) = kubectl(h, "admin.conf", &["create", "-f", "k1.yaml"]).await;
    assert!(
        !ok && out.contains("Error from server (AlreadyExists)"),
        "{out}"
    );

    let (ok, out) = kubectl(h, "admin.conf", &["get", "csr"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        header(&out),
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]
    );
    let r = row(&out, "node-csr-k1");
    assert_eq!(r[2..], [SIGNER, "kubernetes-admin", "<none>", "Pending"]);

    let (ok, out) = kubectl(h, "admin.conf", &["certificate", "approve", "node-csr-k1"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "certificatesigningrequest.certificates.k8s.io/node-csr-k1 approved"
    );
    wait(&mut ev, "issued", |e| {
        matches!(e, Event::CsrIssued { name, .. } if name == "node-csr-k1").then_some(())
    })
    .await;
    let (_, out) = kubectl(h, "admin.conf", &["get", "csr", "node-csr-k1"]).await;
    assert_eq!(row(&out, "node-csr-k1")[5], "Approved,Issued", "{out}");
    // A watch prints Table rows too (headers once).
    let args = ["get", "csr", "node-csr-k1", "-w", "--request-timeout=1s"];
    let (ok, out) = kubectl(h, "admin.conf", &args).await;
    assert!(ok, "{out}");
    assert_eq!(header(&out)[5], "CONDITION", "{out}");
    assert_eq!(row(&out, "node-csr-k1")[5], "Approved,Issued", "{out}");
    let c = tp
        .csr("node-csr-k1")
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    assert_eq!(c[0].reason.as_deref(), Some("KubectlApprove"));
    assert!(c[0]
        .last_transition_time
        .as_ref()
        .is_some_and(|t| t.0.as_second() > 0));

    let (ok, out) = kubectl(h, "admin.conf", &["create", "-f", "k2.yaml"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(h, "admin.conf", &["certificate", "deny", "node-csr-k2"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "certificatesigningrequest.certificates.k8s.io/node-csr-k2 denied"
    );
    let (_, out) = kubectl(h, "admin.conf", &["get", "csr"]).await;
    assert_eq!(row(&out, "node-csr-k2")[5], "Denied", "{out}");

    // Leases, nodes, secrets.
    let admin = Api::admin(&tp);
    assert_eq!(
        admin
            .post(&lease_path("kube-node-lease", ""), &lease_body("k1", None))
            .await
            .0,
        201
    );
    let (ok, out) = kubectl(h, "admin.conf", &["get", "lease", "-n", "kube-node-lease"]).await;
    assert!(ok, "{out}");
    assert_eq!(header(&out), ["NAME", "HOLDER", "AGE"]);
    assert_eq!(row(&out, "k1")[..2], ["k1", "k1"]);
    tp.create_node("k1");
    let (ok, out) = kubectl(h, "admin.conf", &["get", "nodes"]).await;
    assert!(ok, "{out}");
    assert_eq!(header(&out), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(row(&out, "k1")[0], "k1");
    let (ok, out) = kubectl(h, "admin.conf", &["get", "secrets", "-n", "kube-system"]).await;
    assert!(ok, "{out}");
    assert_eq!(header(&out), ["NAME", "TYPE", "DATA", "AGE"]);
    let secret = out.lines().nth(1).unwrap();
    assert!(
        secret.starts_with("bootstrap-token-") && secret.contains("bootstrap.kubernetes.io/token"),
        "{out}"
    );

    // The bootstrap kubeconfig may file a CSR until the kubeadm binding is deleted.
    let (_, pem3) = node_csr("system:node:k3", &["system:nodes"]);
    std::fs::write(h.join("k3.yaml"), manifest("node-csr-k3", &pem3)).unwrap();
    std::fs::write(h.join("k4.yaml"), manifest("node-csr-k4", &pem3)).unwrap();
    let (ok, out) = kubectl(
        h,
        "bootstrap-kubelet.conf",
        &["auth", "can-i", "create", "csr"],
    )
    .await;
    assert!(ok && out.starts_with("yes"), "{out}");
    let (ok, out) = kubectl(
        h,
        "bootstrap-kubelet.conf",
        &["auth", "can-i", "get", "lease", "-n", "kube-node-lease"],
    )
    .await;
    assert!(!ok && out.starts_with("no"), "{out}");
    let (ok, out) = kubectl(h, "bootstrap-kubelet.conf", &["create", "-f", "k3.yaml"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        h,
        "admin.conf",
        &["delete", "clusterrolebinding", "kubeadm:kubelet-bootstrap"],
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "clusterrolebinding.rbac.authorization.k8s.io \"kubeadm:kubelet-bootstrap\" deleted"
    );
    let (ok, out) = kubectl(h, "bootstrap-kubelet.conf", &["create", "-f", "k4.yaml"]).await;
    assert!(!ok, "{out}");
    assert!(out.contains("Error from server (Forbidden)") && out.contains("cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope"), "{out}");
    tp.shutdown().await;
}
