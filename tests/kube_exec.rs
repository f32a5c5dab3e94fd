//! A real cluster and a bootstrap kubeconfig whose user is an exec credential plugin (as
//! GKE's gke-exec-auth-plugin or EKS on Outposts configure the kubelet): the plugin hands
//! out a bootstrap token made with the cluster's helper, and bootlet joins with it —
//! kube-controller-manager approves the CSR, signs it, and kubelet.conf names the files.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::Value;
use support::kube::{block_on, bootlet, bootstrap_user, csrs_of, kubectl_as};
use support::NodeDir;
use testplane::kube::Cluster;

async fn cluster() -> &'static Cluster {
    support::kube::cluster("exec", |_| {}).await
}

fn condition<'a>(csr: &'a Value, kind: &str) -> Option<&'a Value> {
    csr["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn a_plugin_that_hands_out_a_bootstrap_token_joins_the_node() {
    block_on(async {
        let c = cluster().await;
        let token = c
            .create_token(testplane::kube::TOKEN_TTL)
            .await
            .expect("a bootstrap token");
        let node = "real-exec";
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        let plugin = dir.path().join("exec-auth-plugin");
        std::fs::write(
            &plugin,
            format!(
                "#!/bin/sh\nset -eu\necho x >> '{}'\n\
                 echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"}}}}'\n",
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(c.ca_pem());
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: kubernetes\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
             contexts:\n- name: boot\n  context: {{cluster: kubernetes, user: kubelet-bootstrap}}\n\
             current-context: boot\n\
             users:\n- name: kubelet-bootstrap\n  user:\n    exec:\n      \
             apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      \
             interactiveMode: Never\n      provideClusterInfo: true\n      \
             installHint: the test writes it\n",
            c.url(),
            plugin.display()
        );
        let node_dir = NodeDir::new(&kubeconfig);
        let agent = bootlet(&node_dir, node, &["--renew-lease", "false"]);
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;

        // One CSR, filed as the token's user, approved by kube-controller-manager, issued.
        let csrs = csrs_of(c, &[&bootstrap_user(&token)]).await;
        assert_eq!(csrs.len(), 1, "one CSR: {csrs:#?}");
        let approved = condition(&csrs[0], "Approved").expect("an Approved condition");
        assert_eq!(approved["reason"], "AutoApproved");
        assert!(csrs[0]["status"]["certificate"].is_string(), "issued");

        // kubelet.conf names the certificate files and authenticates as the node.
        let written = std::fs::read_to_string(&node_dir.kubeconfig).unwrap();
        assert!(written.contains("kubelet-client-current.pem"), "{written}");
        assert!(!written.contains("exec"), "{written}");
        let (ok, who) = kubectl_as(
            c,
            &node_dir.kubeconfig,
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
        let runs = std::fs::read_to_string(&calls).unwrap().lines().count();
        assert_eq!(runs, 1, "one plugin run for the join");
        assert!(
            !agent.log().contains(&token[7..]),
            "the token's secret was logged"
        );
        let (status, log) = tokio::time::timeout(Duration::from_secs(30), agent.terminate())
            .await
            .expect("bootlet stops");
        assert!(status.success(), "{log}");
    })
}
