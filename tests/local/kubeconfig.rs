//! Kubeconfig features, supported or refused by name (issue #10 §4): `bootlet run` with a
//! bootstrap kubeconfig bootlet cannot honour exits 1 with one line naming the file and the
//! key; `tls-server-name` is honoured by every client and kept in the written kubelet.conf.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use bootlet::api::conn::Connection;
use bootlet::api::kubeconfig::{Credential, Server};
use bootlet::api::{ApiClient, ClientOptions};
use k8s_openapi::apimachinery::pkg::version::Info;
use support::{Agent, NodeDir};
use testplane::TestPlane;

const HOUR: Duration = Duration::from_secs(3600);

/// A kubeconfig with the testplane-style cluster and `user` lines (already indented).
fn kubeconfig(server: &str, ca_pem: &str, cluster: &str, user: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: boot\n\
         clusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n{cluster}\
         users:\n- name: u\n  user:\n{user}\n\
         contexts:\n- name: boot\n  context: {{cluster: c, user: u}}\n"
    )
}

/// Before: each of these became an anonymous bootstrap that retried for ever and failed
/// with a 401 or 403 naming nothing the operator wrote. Now `bootlet run` stops at once,
/// exit 1, and its last line names the file and the key.
#[tokio::test]
async fn run_refuses_credentials_it_cannot_use_naming_file_and_key() {
    let ca = testplane::pki::Ca::generate("kubernetes").unwrap();
    let cases = [
        (
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1alpha1\n      command: aws\n",
            "users[0].user.exec.apiVersion is not supported: \"client.authentication.k8s.io/v1alpha1\" is not one of client.authentication.k8s.io/v1, client.authentication.k8s.io/v1beta1 (bootlet speaks what the kubelet speaks)",
        ),
        (
            "    auth-provider:\n      name: oidc\n      config: {client-id: kubelet}\n",
            "users[0].user.auth-provider is not supported: bootlet needs a bootstrap token, a client certificate or an exec plugin",
        ),
        (
            "    username: kubelet\n    password: hunter2\n",
            "users[0].user.username is not supported: bootlet needs a bootstrap token, a client certificate or an exec plugin",
        ),
    ];
    for (user, want) in cases {
        let node = NodeDir::new(&kubeconfig("https://127.0.0.1:1", ca.cert_pem(), "", user));
        // Bounded: the unfixed agent never exits (it retries its anonymous requests).
        let (status, log) = Agent::spawn(&node.args("refused")).exit().await;
        assert_eq!(status.code(), Some(1), "{log}");
        let last = log.trim_end().lines().last().unwrap_or_default();
        let file = node.bootstrap.display().to_string();
        assert!(last.starts_with("bootlet: "), "{last}");
        assert!(last.ends_with(&format!("{file}: {want}")), "{last}");
        assert!(!log.contains("hunter2"), "{log}");
        assert!(!node.kubeconfig.exists());
    }
}

/// A testplane on 127.0.0.2: its serving certificate names 127.0.0.1, ::1, localhost,
/// kubernetes and kubernetes.default.svc, but not 127.0.0.2.
async fn plane_on_127_0_0_2() -> TestPlane {
    TestPlane::builder()
        .cert_ttl(HOUR)
        .listen(SocketAddr::from(([127, 0, 0, 2], 0)))
        .start()
        .await
        .expect("start testplane on 127.0.0.2")
}

fn client(tp: &TestPlane, server: Server) -> ApiClient {
    let token = tp.create_token(None);
    let credential = Credential::Token(bootlet::api::kubeconfig::BootstrapToken::new(&token));
    ApiClient::new(
        &server,
        tp.ca_pem().as_bytes(),
        &credential,
        ClientOptions::default(),
    )
    .unwrap()
}

/// Before: `tls-server-name` was dropped, so a server URL whose host the certificate does
/// not name failed TLS on every client. Now both the shared client and the Lease loop's
/// connection verify the name it gives, and still refuse the mismatch without it.
#[tokio::test]
async fn tls_server_name_is_what_the_certificate_is_checked_against() {
    let tp = plane_on_127_0_0_2().await;
    let url = format!("https://127.0.0.2:{}", tp.addr().port());

    let plain = client(&tp, Server::new(url.as_str()));
    let err = plain.get::<Info>("/version").await.unwrap_err();
    assert!(err.is_transport(), "{err}");
    let chain = bootlet::runtime::report(&err);
    assert!(chain.contains("certificate"), "{chain}");

    let named = Server {
        tls_server_name: Some("kubernetes".into()),
        ..Server::new(url.as_str())
    };
    let info: Info = client(&tp, named.clone()).get("/version").await.unwrap();
    assert!(!info.git_version.is_empty());
    let mut conn = Connection::new(&client(&tp, named));
    let info: Info = conn.get("/version").await.unwrap();
    assert!(!info.git_version.is_empty());

    // A name the certificate does not carry is refused as before.
    let wrong = Server {
        tls_server_name: Some("kubernetes.example".into()),
        ..Server::new(url.as_str())
    };
    let err = client(&tp, wrong)
        .get::<Info>("/version")
        .await
        .unwrap_err();
    assert!(err.is_transport(), "{err}");
}

/// The whole join with `tls-server-name`: bootstrap, the Lease, and the kubelet.conf it
/// writes, which keeps the name so the real kubectl (and the kubelet) connect too.
#[tokio::test]
async fn bootstrap_with_tls_server_name_writes_a_kubeconfig_kubectl_can_use() {
    let tp = plane_on_127_0_0_2().await;
    let token = tp.create_token(None);
    let url = format!("https://127.0.0.2:{}", tp.addr().port());
    let node = NodeDir::new(&kubeconfig(
        &url,
        &tp.ca_pem(),
        "    tls-server-name: kubernetes\n",
        &format!("    token: {token}"),
    ));
    let mut events = tp.events();
    let mut args = node.args("named");
    args.extend(
        ["--lease-renew-interval", "1s", "--lease-duration", "3s"]
            .iter()
            .map(|s| s.to_string()),
    );
    let agent = Agent::spawn(&args);
    agent.wait_for_log("client certificate installed").await;
    support::wait_event(&mut events, |e| match e {
        testplane::Event::LeaseRenewed { name, .. } if name == "named" => Some(()),
        _ => None,
    })
    .await;

    let written = std::fs::read_to_string(&node.kubeconfig).unwrap();
    assert!(written.contains("tls-server-name: kubernetes"), "{written}");
    let kc = support::path(&node.kubeconfig);
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok && out.contains("gitVersion"), "kubectl: {out}");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}
