//! bootlet against the real Kubernetes (etcd, kube-apiserver, kube-controller-manager and
//! the kubelet built from upstream, `testplane::kube`): the join, rotation, the Lease as the
//! node lifecycle controller sees it, the real kubelet on bootlet's identity and the other
//! way round, the serving certificate, and two Lease writers. One cluster for the binary;
//! each test has its own node name and bootstrap token. Checked with the real kubectl (of
//! the same release) and openssl.
//!
//! The cluster signs 3-minute certificates (`--cluster-signing-duration=3m`; below 10
//! minutes only the flag can go, `expirationSeconds` cannot). The real signer backdates
//! notBefore by 5 minutes and, for certificates under 8 hours, does not take it off
//! notAfter: a lifetime of 8 minutes of which 3 are ahead, so the default 75 % ± 5 % rotates
//! 36-84 s after issuance.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::Value;
use support::kube::{
    block_on, bootlet, bootstrap_user, csrs_of, eventually, kubectl_as, lease, node_dir, openssl,
    REAL_WAIT,
};
use support::path;
use testplane::kube::Cluster;

const CERT_TTL: Duration = Duration::from_secs(180);

async fn cluster() -> &'static Cluster {
    support::kube::cluster("join", |o| o.cert_ttl = CERT_TTL).await
}

fn condition<'a>(csr: &'a Value, kind: &str) -> Option<&'a Value> {
    csr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

async fn whoami(c: &Cluster, conf: &std::path::Path) -> String {
    let (ok, out) = kubectl_as(
        c,
        conf,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
    .await;
    assert!(ok, "kubectl auth whoami: {out}");
    out.trim().to_string()
}

#[test]
fn bootstrap_is_approved_by_kube_controller_manager_and_the_node_authenticates() {
    block_on(async {
        let c = cluster().await;
        let (dir, token) = node_dir(c).await;
        let node = "real-join";
        let agent = bootlet(&dir, node, &[]);
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;

        // One CSR, approved by kube-controller-manager's csrapproving controller, issued.
        let csrs = csrs_of(c, &[&bootstrap_user(&token)]).await;
        assert_eq!(csrs.len(), 1, "one CSR for the bootstrap: {csrs:#?}");
        let csr = &csrs[0];
        assert_eq!(
            csr["spec"]["signerName"],
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        let approved = condition(csr, "Approved").expect("an Approved condition");
        assert_eq!(approved["reason"], "AutoApproved");
        assert_eq!(
            approved["message"],
            "Auto approving kubelet client certificate after SubjectAccessReview."
        );
        assert!(csr["status"]["certificate"].is_string(), "issued: {csr:#}");

        // The files, in the kubelet's layout and modes, signed by the cluster CA.
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.cert_dir), 0o700);
        let current = dir.current();
        assert!(std::fs::symlink_metadata(&current)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(mode(&std::fs::canonicalize(&current).unwrap()), 0o600);
        assert_eq!(mode(&dir.kubeconfig), 0o600);
        let ca = c.state_dir().join("ca.crt");
        let (ok, out) = openssl(&["verify", "-CAfile", &path(&ca), &path(&current)]).await;
        assert!(ok && out.contains(": OK"), "openssl verify: {out}");
        let (_, subject) = openssl(&["x509", "-noout", "-subject", "-in", &path(&current)]).await;
        let subject = subject.replace(" = ", "=");
        assert!(
            subject.contains("O=system:nodes")
                && subject.contains(&format!("CN=system:node:{node}")),
            "{subject}"
        );

        // kubelet.conf authenticates as the node and may read its own Lease.
        assert_eq!(
            whoami(c, &dir.kubeconfig).await,
            format!("system:node:{node}")
        );
        let lease = eventually(REAL_WAIT, "the Lease exists", || async {
            lease(c, node).await
        })
        .await;
        assert_eq!(lease["spec"]["holderIdentity"], node);
        let (ok, out) = kubectl_as(
            c,
            &dir.kubeconfig,
            &["get", "lease", "-n", "kube-node-lease", node, "-o", "name"],
        )
        .await;
        assert!(
            ok && out.contains(&format!("lease.coordination.k8s.io/{node}")),
            "{out}"
        );
        // ...and nobody else's (the Node authorizer).
        let (ok, out) = kubectl_as(
            c,
            &dir.kubeconfig,
            &["get", "lease", "-n", "kube-node-lease", "real-other"],
        )
        .await;
        assert!(!ok && out.contains("Forbidden"), "{out}");
        agent.terminate().await;
    })
}

#[test]
fn rotation_is_approved_as_selfnodeclient_one_csr_per_issuance_and_the_lease_has_no_gap() {
    block_on(async {
        let c = cluster().await;
        let (dir, token) = node_dir(c).await;
        let node = "real-rotate";
        let agent = bootlet(&dir, node, &[]);
        let first = agent.wait_for_log("client certificate installed").await;
        // Sample the Lease's renewTime every second through the rotation.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let samples = seen.clone();
        let sampler = tokio::spawn(async move {
            loop {
                if let Some(l) = lease(c, node).await {
                    let t = l["spec"]["renewTime"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let mut seen = samples.lock().unwrap();
                    if seen.last() != Some(&t) {
                        seen.push(t);
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let second = agent
            .wait_for_log_within("client certificate installed", 2, Duration::from_secs(120))
            .await;
        assert!(second != first);
        agent.wait_for_log("client certificate rotated").await;
        // Renewals go on for a few intervals with the new certificate.
        tokio::time::sleep(Duration::from_secs(25)).await;
        sampler.abort();
        let times: Vec<jiff::Timestamp> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        assert!(times.len() >= 6, "renewals seen: {times:?}");
        let gaps: Vec<f64> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).total(jiff::Unit::Second).unwrap())
            .collect();
        let worst = gaps.iter().cloned().fold(0.0, f64::max);
        assert!(
            worst <= 12.0,
            "a gap of {worst:.1} s in the Lease's renewals across the rotation: {gaps:?}"
        );

        let node_user = format!("system:node:{node}");
        let csrs = csrs_of(c, &[&bootstrap_user(&token), &node_user]).await;
        assert_eq!(csrs.len(), 2, "one CSR per issuance: {csrs:#?}");
        assert_eq!(
            csrs[1]["spec"]["username"],
            node_user.as_str(),
            "filed with the current certificate"
        );
        let approved = condition(&csrs[1], "Approved").expect("approved");
        assert_eq!(approved["reason"], "AutoApproved");
        assert_eq!(
            approved["message"],
            "Auto approving self kubelet client certificate after SubjectAccessReview.",
            "approved as selfnodeclient"
        );
        assert_eq!(whoami(c, &dir.kubeconfig).await, node_user);
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{log}");
    })
}
