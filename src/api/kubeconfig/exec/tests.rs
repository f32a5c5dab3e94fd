//! The exec protocol: the spec from a kubeconfig, `KUBERNETES_EXEC_INFO`, the answer's
//! parsing (pure), and small shell plugins run for real: env, stdin, failures, the
//! timeout, the cache.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::*;

const V1: &str = "client.authentication.k8s.io/v1";
const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";
const CA: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn config(command: &str, api_version: &str, mode: Option<ExecInteractiveMode>) -> ExecConfig {
    ExecConfig {
        api_version: Some(api_version.into()),
        command: Some(command.into()),
        args: Some(vec!["--node".into(), "a".into()]),
        env: Some(vec![HashMap::from([
            ("name".to_string(), "REGION".to_string()),
            ("value".to_string(), "eu-1".to_string()),
        ])]),
        drop_env: None,
        install_hint: Some("apt-get install x-auth".into()),
        interactive_mode: mode,
        provide_cluster_info: false,
        cluster: None,
        other: BTreeMap::new(),
    }
}

fn cluster() -> ClusterInfo<'static> {
    ClusterInfo {
        server: "https://10.0.0.1:6443",
        ca_pem: CA,
        tls_server_name: Some("kubernetes"),
        insecure_skip_tls_verify: false,
        proxy_url: None,
        config: Some(serde_json::json!({"audience": "node"})),
    }
}

fn never() -> Option<ExecInteractiveMode> {
    Some(ExecInteractiveMode::Never)
}

#[test]
fn a_command_with_a_slash_resolves_against_the_kubeconfig_and_a_bare_one_uses_path() {
    let kc = Path::new("/etc/kubernetes/bootstrap-kubelet.conf");
    let s = spec(&config("bin/x-auth", V1, never()), kc, &cluster()).unwrap();
    assert_eq!(s.program, Path::new("/etc/kubernetes/bin/x-auth"));
    assert_eq!(s.command, "bin/x-auth");
    let s = spec(&config("/usr/bin/x-auth", V1, never()), kc, &cluster()).unwrap();
    assert_eq!(s.program, Path::new("/usr/bin/x-auth"));
    let s = spec(&config("x-auth", V1, never()), kc, &cluster()).unwrap();
    assert_eq!(s.program, Path::new("x-auth"));
    assert_eq!(s.args, ["--node", "a"]);
    assert_eq!(s.env, [("REGION".to_string(), "eu-1".to_string())]);
    assert_eq!(s.install_hint.as_deref(), Some("apt-get install x-auth"));
    // Debug names env keys, never their values.
    assert!(!format!("{s:?}").contains("eu-1"), "{s:?}");
}

#[test]
fn versions_and_interactive_modes_are_checked_as_client_go_does() {
    let kc = Path::new("/k.conf");
    let err = |c: ExecConfig| spec(&c, kc, &cluster()).unwrap_err();
    let e = err(config(
        "x",
        "client.authentication.k8s.io/v1alpha1",
        never(),
    ));
    assert_eq!((e.key, e.unsupported), ("apiVersion", true));
    assert!(
        e.reason.contains("v1alpha1") && e.reason.contains(V1BETA1),
        "{}",
        e.reason
    );
    let e = err(config("x", V1, Some(ExecInteractiveMode::Always)));
    assert_eq!((e.key, e.unsupported), ("interactiveMode", true));
    assert!(e.reason.contains("terminal"), "{}", e.reason);
    let e = err(config("x", V1, None));
    assert_eq!((e.key, e.unsupported), ("interactiveMode", false));
    // v1beta1 defaults to IfAvailable; IfAvailable runs without stdin.
    assert!(spec(&config("x", V1BETA1, None), kc, &cluster()).is_ok());
    let if_available = Some(ExecInteractiveMode::IfAvailable);
    assert!(spec(&config("x", V1, if_available), kc, &cluster()).is_ok());
    assert_eq!(err(config(" ", V1, never())).key, "command");
    let mut c = config("x", V1, never());
    c.env = Some(vec![HashMap::from([("name".to_string(), "A".to_string())])]);
    assert_eq!(err(c).key, "env");
}

#[test]
fn exec_info_carries_the_cluster_only_when_asked() {
    let info: serde_json::Value = serde_json::from_str(&exec_info(V1, None)).unwrap();
    assert_eq!(
        info,
        serde_json::json!({"apiVersion": V1, "kind": "ExecCredential",
                           "spec": {"interactive": false}})
    );
    let info: serde_json::Value =
        serde_json::from_str(&exec_info(V1BETA1, Some(&cluster()))).unwrap();
    let c = &info["spec"]["cluster"];
    assert_eq!(info["apiVersion"], V1BETA1);
    assert_eq!(c["server"], "https://10.0.0.1:6443");
    assert_eq!(c["tls-server-name"], "kubernetes");
    assert_eq!(c["config"]["audience"], "node");
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(CA);
    assert_eq!(c["certificate-authority-data"], ca.as_str());
    assert!(c.get("insecure-skip-tls-verify").is_none() && c.get("proxy-url").is_none());

    let mut with = config("x", V1, never());
    with.provide_cluster_info = true;
    let s = spec(&with, Path::new("/k"), &cluster()).unwrap();
    assert!(s.exec_info.contains("tls-server-name"));
    let s = spec(&config("x", V1, never()), Path::new("/k"), &cluster()).unwrap();
    assert!(!s.exec_info.contains("server"), "{}", s.exec_info);
}

fn answer(status: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(
        &serde_json::json!({"apiVersion": V1, "kind": "ExecCredential",
                                            "status": status}),
    )
    .unwrap()
}

#[test]
fn the_answer_is_a_token_or_a_certificate_and_key_never_both_or_half() {
    let (issued, expiry) = parse_answer(
        V1,
        &answer(serde_json::json!({"token": "abcdef.0123456789abcdef",
                                   "expirationTimestamp": "2030-01-02T03:04:05Z"})),
    )
    .unwrap();
    assert_eq!(
        issued,
        Issued::Token(BootstrapToken::new("abcdef.0123456789abcdef"))
    );
    let at: jiff::Timestamp = "2030-01-02T03:04:05Z".parse().unwrap();
    assert_eq!(expiry, Some(SystemTime::from(at)));
    assert!(!format!("{issued:?}").contains("0123456789abcdef"));

    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
    let (issued, expiry) = parse_answer(
        V1,
        &answer(serde_json::json!({"clientCertificateData": cert, "clientKeyData": key})),
    )
    .unwrap();
    assert!(matches!(issued, Issued::ClientCert { .. }), "{issued:?}");
    assert_eq!(expiry, None);

    let refused = |status| parse_answer(V1, &answer(status)).unwrap_err();
    assert!(refused(serde_json::json!({})).contains("no token or client certificate"));
    assert!(refused(serde_json::json!({"clientCertificateData": cert})).contains("only one"));
    assert!(refused(serde_json::json!({"clientKeyData": key})).contains("only one"));
    let both =
        serde_json::json!({"token": "t", "clientCertificateData": cert, "clientKeyData": key});
    assert!(refused(both).contains("exactly one"));
    let no_pem = serde_json::json!({"clientCertificateData": "x", "clientKeyData": key});
    assert!(refused(no_pem).contains("no PEM certificate"));
    let bad_time = serde_json::json!({"token": "t", "expirationTimestamp": "tomorrow"});
    assert!(refused(bad_time).contains("RFC 3339"));
}

#[test]
fn garbage_another_version_or_no_status_is_named() {
    let e = parse_answer(V1, b"Please log in:\x1b[31m\n").unwrap_err();
    assert!(e.starts_with("output that is not an ExecCredential"), "{e}");
    assert!(!e.contains('\x1b') && !e.contains('\n'), "{e}");
    let other = br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#;
    assert!(parse_answer(V1, other).unwrap_err().contains("asked for"));
    let kind = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"Status"}"#;
    assert!(parse_answer(V1, kind)
        .unwrap_err()
        .contains("not ExecCredential"));
    let none = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#;
    assert_eq!(parse_answer(V1, none).unwrap_err(), "no status");
}

// === plugins run for real ===

/// A shell plugin in `dir` named `name`; its body runs under `sh -eu`.
fn plugin(dir: &Path, name: &str, body: &str) -> ExecSpec {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -eu\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kc = dir.join("kubeconfig");
    let mut c = config(&format!("./{name}"), V1, never());
    c.provide_cluster_info = true;
    spec(&c, &kc, &cluster()).unwrap()
}

fn token_json(token: &str, expiry: &str) -> String {
    format!(
        r#"echo '{{"apiVersion":"{V1}","kind":"ExecCredential","status":{{"token":"{token}"{expiry}}}}}'"#
    )
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn the_plugin_gets_its_args_env_exec_info_and_no_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let body = format!(
        "printf '%s\\n' \"$*\" \"$REGION\" \"$KUBERNETES_EXEC_INFO\" > {seen}\n\
         if read -r line; then echo stdin >> {seen}; fi\n{}",
        token_json("abcdef.0123456789abcdef", ""),
        seen = seen.display()
    );
    let p = ExecPlugin::new(plugin(dir.path(), "env-plugin", &body));
    let fresh = p.credential(10 * SECOND).await.unwrap();
    assert!(matches!(fresh.issued, Issued::Token(ref t) if t.id() == "abcdef"));
    let seen = std::fs::read_to_string(seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], "--node a");
    assert_eq!(lines[1], "eu-1");
    let info: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], "https://10.0.0.1:6443");
    assert_eq!(lines.len(), 3, "the plugin read stdin: {seen}");
}

#[tokio::test]
async fn failures_name_the_plugin_its_status_and_its_sanitized_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(2000);
    let body = format!("printf 'no metadata server\\033[0m\\n{long}' >&2\nexit 3");
    let p = ExecPlugin::new(plugin(dir.path(), "failing", &body));
    let e = p.credential(10 * SECOND).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ExecError::Failed { .. }), "{e:?}");
    assert!(
        text.contains("failing failed: exit status 3: stderr: no metadata server"),
        "{text}"
    );
    assert!(!text.contains('\x1b') && !text.contains('\n'), "{text}");
    assert!(text.len() < 1000, "{}", text.len());

    let mut missing = plugin(dir.path(), "unused", "true");
    missing.program = dir.path().join("not-installed");
    let e = ExecPlugin::new(missing)
        .credential(SECOND)
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::NotFound { .. }), "{e:?}");
    assert!(
        e.to_string().ends_with("not found: apt-get install x-auth"),
        "{e}"
    );

    let p = ExecPlugin::new(plugin(dir.path(), "garbage", "echo 'Please log in'"));
    let e = p.credential(10 * SECOND).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("returned output that is not an ExecCredential"),
        "{e}"
    );
}

#[tokio::test]
async fn a_hanging_plugin_is_killed_at_the_timeout_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let body = format!(
        "echo waiting for the TPM >&2\nsleep 30 &\necho $! > {}\nwait",
        pid.display()
    );
    let p = ExecPlugin::new(plugin(dir.path(), "hanging", &body));
    let started = tokio::time::Instant::now();
    let e = p.credential(Duration::from_millis(500)).await.unwrap_err();
    assert!(started.elapsed() < 5 * SECOND, "{:?}", started.elapsed());
    let text = e.to_string();
    assert!(
        text.contains("did not answer within 0.5s and was killed: stderr: waiting for the TPM"),
        "{text}"
    );
    // The plugin's own child went with it (its process group was killed).
    let child: i32 = std::fs::read_to_string(pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = async {
        while Path::new(&format!("/proc/{child}")).exists()
            && !std::fs::read_to_string(format!("/proc/{child}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(5 * SECOND, gone)
        .await
        .expect("the plugin's child survived the timeout");
}

#[tokio::test]
async fn the_credential_is_cached_until_it_expires_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    // No expiry: cached until invalidated.
    let body = format!(
        "echo x >> {}\n{}",
        calls.display(),
        token_json("abcdef.0123456789abcdef", "")
    );
    let p = ExecPlugin::new(plugin(dir.path(), "counting", &body));
    let count = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let first = p.credential(10 * SECOND).await.unwrap();
    let again = p.credential(10 * SECOND).await.unwrap();
    assert_eq!((count(), first.generation, again.generation), (1, 1, 1));
    // Another plugin value with the same spec shares the cache (a re-read kubeconfig).
    let same = ExecPlugin::new(p.spec().clone());
    assert_eq!(same.credential(10 * SECOND).await.unwrap().generation, 1);
    assert_eq!(count(), 1);
    // A refusal of an older run does not throw away a newer credential.
    p.invalidate(0).await;
    p.credential(10 * SECOND).await.unwrap();
    assert_eq!(count(), 1);
    p.invalidate(1).await;
    assert_eq!(p.credential(10 * SECOND).await.unwrap().generation, 2);
    assert_eq!(count(), 2);

    // Already expired: every request calls the plugin.
    let body = format!(
        "echo x >> {}\n{}",
        calls.display(),
        token_json(
            "abcdef.0123456789abcdef",
            r#","expirationTimestamp":"2001-01-01T00:00:00Z""#
        )
    );
    let p = ExecPlugin::new(plugin(dir.path(), "expired", &body));
    p.credential(10 * SECOND).await.unwrap();
    p.credential(10 * SECOND).await.unwrap();
    assert_eq!(count(), 4);
}
