//! A real cluster whose kube-controller-manager signs kubelet client certificates with a CA
//! of its own (`--cluster-signing-kubelet-client-{cert,key}-file`), not the CA that signed
//! the API server's serving certificate; the API server trusts both for client
//! certificates (`--client-ca-file`). k3s, RKE2 and Gardener run this way. bootlet joins,
//! proves each new certificate with a SelfSubjectReview before installing it, and rotates.

use crate::support;

use std::time::Duration;

use support::kube::{
    block_on, bootlet, eventually, kubectl_as, lease, node_dir, openssl, REAL_WAIT,
};
use support::path;
use testplane::kube::{ClientSigner, Cluster};

async fn cluster() -> &'static Cluster {
    support::kube::cluster("signer", |o| {
        o.client_signer = ClientSigner::Separate;
        o.cert_ttl = Duration::from_secs(180);
    })
    .await
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn bootlet_joins_and_rotates_when_the_kubelet_client_signer_is_a_ca_of_its_own() {
    block_on(async {
        let c = cluster().await;
        let node = "real-k3s-style";
        let (dir, _) = node_dir(c).await;
        let agent = bootlet(&dir, node, &[]);
        agent
            .wait_for_log("the certificate is signed by another CA than the kubeconfig's")
            .await;
        agent
            .wait_for_log(&format!(
                "a SelfSubjectReview with it answers system:node:{node} in system:nodes"
            ))
            .await;
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;

        // Signed by the kubelet-client signer, not by the CA in the kubeconfig.
        let current = dir.current();
        let signer = c.files().kubelet_signer_crt.clone();
        let (ok, out) = openssl(&["verify", "-CAfile", &path(&signer), &path(&current)]).await;
        assert!(ok, "openssl verify with the signer CA: {out}");
        let ca = c.state_dir().join("ca.crt");
        let (ok, out) = openssl(&["verify", "-CAfile", &path(&ca), &path(&current)]).await;
        assert!(!ok, "the cluster CA did not sign it: {out}");
        // kubelet.conf still trusts only the cluster CA for the server, and authenticates.
        let (ok, who) = kubectl_as(
            c,
            &dir.kubeconfig,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        )
        .await;
        assert!(ok, "{who}");
        assert_eq!(who.trim(), format!("system:node:{node}"));
        eventually(REAL_WAIT, "the Lease", || async { lease(c, node).await }).await;

        // A rotation proves the new certificate the same way, with the one in use.
        agent
            .wait_for_log_within("client certificate rotated", 1, Duration::from_secs(120))
            .await;
        let proofs = agent
            .log()
            .matches("a SelfSubjectReview with it answers")
            .count();
        assert_eq!(proofs, 2, "one proof per issuance: {}", agent.log());
        assert!(!agent.log().contains("refused"), "{}", agent.log());
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{log}");
    })
}
