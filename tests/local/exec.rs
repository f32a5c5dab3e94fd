//! A bootstrap kubeconfig whose user is an exec credential plugin: small shell plugins
//! written by each test, the real binary (or the library's API client) against the
//! testplane. Token and client certificate joins, the expiry cache, a 401 then a fresh
//! credential, and what a missing, hanging or garbage-printing plugin looks like.

use crate::support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bootlet::api::kubeconfig;
use bootlet::api::{ApiClient, ClientOptions};
use support::doctor::doctor_json;
use support::{plane, wait_event, Agent, NodeDir};
use testplane::{Event, TestPlane};

const HOUR: Duration = Duration::from_secs(3600);
const V1: &str = "client.authentication.k8s.io/v1";

/// A bootstrap kubeconfig for `tp` whose user runs `command` (exec, apiVersion v1).
fn exec_kubeconfig(tp: &TestPlane, command: &Path, extra: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(tp.ca_pem());
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
         contexts:\n- name: boot\n  context: {{cluster: c, user: u}}\ncurrent-context: boot\n\
         users:\n- name: u\n  user:\n    exec:\n      apiVersion: {V1}\n      command: {}\n      \
         interactiveMode: Never\n      provideClusterInfo: true\n{extra}",
        tp.url(),
        command.display()
    )
}

/// A shell plugin at `dir/name` that counts its runs in `dir/calls`, then runs `body`.
fn plugin(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let calls = dir.join("calls");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nset -eu\necho x >> '{}'\n{body}\n",
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// An ExecCredential with `status` (JSON) for the plugin to print, in a file beside it.
fn credential_file(dir: &Path, name: &str, status: serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    let answer = serde_json::json!({"apiVersion": V1, "kind": "ExecCredential", "status": status});
    std::fs::write(&path, answer.to_string()).unwrap();
    path
}

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    a.extend(["--renew-lease".into(), "false".into()]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The node joins: one CSR, filed by the plugin's identity; a certificate and kubelet.conf.
async fn joins(tp: &TestPlane, node: &NodeDir, name: &str) -> String {
    let mut events = tp.events();
    let service_env = [("JOURNAL_STREAM", "0:0"), ("WATCHDOG_USEC", "600000000")];
    let agent = Agent::spawn_env(&args(node, name, &[]), &service_env);
    let csr = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(node.current().exists() && node.kubeconfig.exists(), "{log}");
    // kubelet.conf names the certificate files, never the plugin.
    let kc = std::fs::read_to_string(&node.kubeconfig).unwrap();
    assert!(
        kc.contains("kubelet-client-current.pem") && !kc.contains("exec"),
        "{kc}"
    );
    let filed_by = tp
        .requests()
        .into_iter()
        .find(|r| r.verb == "create" && r.path.contains("certificatesigningrequests"))
        .map(|r| r.user)
        .unwrap();
    assert!(tp.csr(&csr).is_some());
    filed_by
}

#[tokio::test]
async fn a_plugin_that_hands_out_a_bootstrap_token_joins_the_node() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let token = tp.create_token(Some(HOUR));
    let answer = credential_file(
        dir.path(),
        "answer.json",
        serde_json::json!({"token": token}),
    );
    // The plugin sees the cluster it is asked for (provideClusterInfo).
    let body = format!(
        "case \"$KUBERNETES_EXEC_INFO\" in *'\"server\":\"{}\"'*) ;; *) echo no cluster >&2; exit 1;; esac\ncat '{}'",
        tp.url(),
        answer.display()
    );
    let body = format!(
        "{body}\necho \"${{JOURNAL_STREAM:-unset}} ${{WATCHDOG_USEC:-unset}} $PATH\" > '{}'",
        dir.path().join("env").display()
    );
    let cmd = plugin(dir.path(), "token-plugin", &body);
    let node = NodeDir::new(&exec_kubeconfig(&tp, &cmd, ""));
    let user = joins(&tp, &node, "exec-token").await;
    // systemd's variables for bootlet itself are not the plugin's; the rest is.
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    assert!(env.starts_with("unset unset /"), "{env}");
    assert_eq!(user, format!("system:bootstrap:{}", &token[..6]));
    // No expirationTimestamp: one run serves every request of the join.
    assert_eq!(calls(dir.path()), 1);

    // The bootstrap kubeconfig deleted after the join (as kubeadm does with its own): a
    // restart reuses the certificate and never needs the plugin.
    std::fs::remove_file(&node.bootstrap).unwrap();
    let agent = Agent::spawn(&args(&node, "exec-token", &[]));
    agent
        .wait_for_log("reusing the valid client certificate; no CSR needed")
        .await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert_eq!(calls(dir.path()), 1, "{log}");
    assert!(!log.contains(&token[7..]), "the token's secret was logged");
    tp.shutdown().await;
}

#[tokio::test]
async fn a_plugin_that_hands_out_a_client_certificate_joins_the_node() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = tp
        .client_cert(
            "system:bootstrap:tpm001",
            &[
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
            ],
        )
        .unwrap();
    let answer = credential_file(
        dir.path(),
        "answer.json",
        serde_json::json!({"clientCertificateData": cert, "clientKeyData": key}),
    );
    let cmd = plugin(
        dir.path(),
        "cert-plugin",
        &format!("cat '{}'", answer.display()),
    );
    let node = NodeDir::new(&exec_kubeconfig(&tp, &cmd, ""));
    let user = joins(&tp, &node, "exec-cert").await;
    assert_eq!(user, "system:bootstrap:tpm001");
    assert_eq!(calls(dir.path()), 1);
    tp.shutdown().await;
}

/// The library's client over an exec kubeconfig, and one authenticated request.
async fn review(client: &ApiClient) -> Result<serde_json::Value, bootlet::api::Error> {
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1",
                                  "kind": "SelfSubjectReview"});
    client
        .create("/apis/authentication.k8s.io/v1/selfsubjectreviews", &body)
        .await
}

fn client_for(path: &Path) -> ApiClient {
    let access = kubeconfig::read(path, false).unwrap();
    ApiClient::new(
        &access.server,
        &access.ca_pem,
        &access.credential,
        ClientOptions::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn the_credential_is_reused_until_its_expiration_and_fetched_again_after() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let token = tp.create_token(Some(HOUR));
    // Valid for 2 s from each run.
    let body = format!(
        "at=$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%SZ)\n\
         printf '{{\"apiVersion\":\"{V1}\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\",\"expirationTimestamp\":\"%s\"}}}}' \"$at\""
    );
    let cmd = plugin(dir.path(), "expiring", &body);
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, exec_kubeconfig(&tp, &cmd, "")).unwrap();
    let client = client_for(&kc);
    review(&client).await.unwrap();
    review(&client).await.unwrap();
    assert_eq!(calls(dir.path()), 1, "called again before the expiry");
    // A client from the kubeconfig read again shares the cached credential.
    review(&client_for(&kc)).await.unwrap();
    assert_eq!(calls(dir.path()), 1);
    // Past the expirationTimestamp (whole seconds: up to 3 s away).
    tokio::time::sleep(Duration::from_millis(3100)).await;
    review(&client).await.unwrap();
    assert_eq!(calls(dir.path()), 2, "not called again after the expiry");
    tp.shutdown().await;
}

#[tokio::test]
async fn a_refused_credential_is_fetched_again_once_and_the_request_resent() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let good = tp.create_token(Some(HOUR));
    let stale = credential_file(
        dir.path(),
        "stale.json",
        serde_json::json!({"token": "zzzzzz.0000000000000000"}),
    );
    let fresh = credential_file(dir.path(), "fresh.json", serde_json::json!({"token": good}));
    // First run: a token the API server does not know; every later run: a good one.
    let body = format!(
        "if [ \"$(wc -l < '{calls}')\" -eq 1 ]; then cat '{}'; else cat '{}'; fi",
        stale.display(),
        fresh.display(),
        calls = dir.path().join("calls").display()
    );
    let cmd = plugin(dir.path(), "rotating", &body);
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, exec_kubeconfig(&tp, &cmd, "")).unwrap();
    let answer = review(&client_for(&kc)).await.unwrap();
    assert_eq!(
        answer["status"]["userInfo"]["username"],
        format!("system:bootstrap:{}", &good[..6])
    );
    assert_eq!(calls(dir.path()), 2);
    let reviews: Vec<u16> = tp
        .requests()
        .iter()
        .filter(|r| r.path.contains("selfsubjectreviews"))
        .map(|r| r.status)
        .collect();
    assert_eq!(reviews.first(), Some(&401), "{reviews:?}");
    assert_eq!(reviews.last().map(|s| s / 100), Some(2), "{reviews:?}");

    // A plugin that only ever hands out refused tokens: one more run, then the 401 stands.
    let dir = tempfile::tempdir().unwrap();
    let cmd = plugin(dir.path(), "refused", &format!("cat '{}'", stale.display()));
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, exec_kubeconfig(&tp, &cmd, "")).unwrap();
    let e = review(&client_for(&kc)).await.unwrap_err();
    assert!(e.is_unauthorized(), "{e}");
    assert!(e.to_string().contains("exec plugin"), "{e}");
    assert_eq!(calls(dir.path()), 2);
    tp.shutdown().await;
}

#[tokio::test]
async fn doctor_names_a_missing_plugin_by_its_install_hint() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("gke-exec-auth-plugin");
    let hint = "      installHint: apt-get install gke-exec-auth-plugin\n";
    let node = NodeDir::new(&exec_kubeconfig(&tp, &missing, hint));
    let run = doctor_json(&node.args("exec-missing")[1..]).await;
    assert_eq!(run.code, Some(1));
    assert_eq!(run.root(), Some("bootstrap-kubeconfig"), "{}", run.json);
    let summary = run.summary("bootstrap-kubeconfig");
    assert!(
        summary.ends_with(&format!(
            "bootstrap credential: exec plugin {} not found: apt-get install gke-exec-auth-plugin",
            missing.display()
        )),
        "{summary}"
    );
    assert_eq!(
        run.fix("bootstrap-kubeconfig"),
        "apt-get install gke-exec-auth-plugin"
    );
    assert_eq!(run.check("authentication")["status"], "skip");

    // The daemon says the same, and keeps retrying rather than exiting.
    let agent = Agent::spawn(&args(&node, "exec-missing", &[]));
    let line = agent
        .wait_for_log("not found: apt-get install gke-exec-auth-plugin")
        .await;
    assert!(line.contains(&missing.display().to_string()), "{line}");
    let (status, _) = agent.terminate().await;
    assert!(status.success());
    tp.shutdown().await;
}

#[tokio::test]
async fn a_hanging_plugin_is_killed_at_the_timeout_and_garbage_is_named() {
    let tp = plane(HOUR).await;
    let dir = tempfile::tempdir().unwrap();
    let cmd = plugin(
        dir.path(),
        "hanging",
        "echo asking the TPM >&2\nexec sleep 600",
    );
    let node = NodeDir::new(&exec_kubeconfig(&tp, &cmd, ""));
    let agent = Agent::spawn(&args(&node, "exec-hang", &["--exec-plugin-timeout", "1s"]));
    let line = agent
        .wait_for_log("did not answer within 1s and was killed")
        .await;
    assert!(
        line.contains("hanging") && line.contains("asking the TPM"),
        "{line}"
    );
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    // Killed: no `sleep 600` of this plugin is left.
    let (_, ps) = support::run("ps", &["-eo", "args"]).await;
    assert!(!ps.lines().any(|l| l.trim() == "sleep 600"), "{ps}");

    // doctor gives a plugin at most 5 s, and names it.
    let run = doctor_json(&node.args("exec-hang")[1..]).await;
    assert_eq!(run.root(), Some("bootstrap-kubeconfig"), "{}", run.json);
    assert!(run
        .summary("bootstrap-kubeconfig")
        .contains("did not answer within 5s"));
    assert!(run.took < Duration::from_secs(10), "{:?}", run.took);

    let garbage = plugin(
        dir.path(),
        "garbage",
        "echo 'Please log in at https://example'",
    );
    let node = NodeDir::new(&exec_kubeconfig(&tp, &garbage, ""));
    let run = doctor_json(&node.args("exec-garbage")[1..]).await;
    let summary = run.summary("bootstrap-kubeconfig");
    assert!(
        summary.contains("garbage returned output that is not an ExecCredential"),
        "{summary}"
    );
    assert!(run
        .fix("bootstrap-kubeconfig")
        .contains("run the plugin by hand"));
    tp.shutdown().await;
}
