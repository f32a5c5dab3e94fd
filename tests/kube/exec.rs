//! A real cluster and a bootstrap kubeconfig whose user is an exec credential plugin (as
//! GKE's gke-exec-auth-plugin or EKS on Outposts configure the kubelet): the plugin hands
//! out a bootstrap token made with the cluster's helper, and bootlet joins with it —
//! kube-controller-manager approves the CSR, signs it, and kubelet.conf names the files.

use crate::support;

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::Value;
use support::doctor::doctor_json;
use support::kube::{block_on, bootlet, bootstrap_user, csrs_of, kubectl_as, openssl};
use support::{path, NodeDir};
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

/// A bootstrap kubeconfig for `c` whose user runs `plugin`.
fn exec_kubeconfig(c: &Cluster, plugin: &std::path::Path) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(c.ca_pem());
    format!(
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
    )
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn a_plugin_that_hands_out_a_client_certificate_joins_the_node() {
    block_on(async {
        let c = cluster().await;
        let node = "real-exec-cert";
        let dir = tempfile::tempdir().unwrap();
        let file = |n: &str| path(&dir.path().join(n));
        // A TPM-attested-style identity: a client certificate from the cluster CA in the
        // kubeadm bootstrap group (what GKE's plugin hands out), minted with openssl.
        let subject =
            "/O=system:bootstrappers:kubeadm:default-node-token/CN=system:bootstrap:tpm001";
        let (ok, out) = openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &file("key.pem"),
            "-out",
            &file("req.csr"),
            "-subj",
            subject,
        ])
        .await;
        assert!(ok, "{out}");
        std::fs::write(dir.path().join("ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        let files = c.files();
        let (ok, out) = openssl(&[
            "x509",
            "-req",
            "-in",
            &file("req.csr"),
            "-CA",
            &path(&files.ca_crt),
            "-CAkey",
            &path(&files.ca_key),
            "-CAcreateserial",
            "-CAserial",
            &file("ca.srl"),
            "-days",
            "1",
            "-extfile",
            &file("ext"),
            "-out",
            &file("cert.pem"),
        ])
        .await;
        assert!(ok, "{out}");
        let answer = serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
            "status": {
                "clientCertificateData": std::fs::read_to_string(dir.path().join("cert.pem")).unwrap(),
                "clientKeyData": std::fs::read_to_string(dir.path().join("key.pem")).unwrap(),
            }
        });
        std::fs::write(dir.path().join("answer.json"), answer.to_string()).unwrap();
        let plugin = dir.path().join("tpm-plugin");
        std::fs::write(
            &plugin,
            format!("#!/bin/sh\ncat '{}'\n", file("answer.json")),
        )
        .unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let node_dir = NodeDir::new(&exec_kubeconfig(c, &plugin));

        // doctor runs the plugin and the real API server accepts what it handed out.
        let run = doctor_json(&node_dir.args(node)[1..]).await;
        assert!(
            run.summary("bootstrap-kubeconfig")
                .ends_with("handed out a client certificate for system:bootstrap:tpm001"),
            "{}",
            run.json
        );
        assert_eq!(
            run.check("authentication")["status"],
            "pass",
            "{}",
            run.json
        );
        assert_eq!(run.check("authorization")["status"], "pass", "{}", run.json);

        let agent = bootlet(&node_dir, node, &["--renew-lease", "false"]);
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;
        let csrs = csrs_of(c, &["system:bootstrap:tpm001"]).await;
        assert_eq!(csrs.len(), 1, "one CSR: {csrs:#?}");
        let approved = condition(&csrs[0], "Approved").expect("an Approved condition");
        assert_eq!(approved["reason"], "AutoApproved");
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
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{log}");
        assert!(!log.contains("PRIVATE KEY"), "{log}");
    })
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
        let node_dir = NodeDir::new(&exec_kubeconfig(c, &plugin));
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
