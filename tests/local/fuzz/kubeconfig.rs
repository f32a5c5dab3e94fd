//! Fuzz target: kubeconfigs, `kubeconfig::parse` (files it names read from a temp dir),
//! then the kubelet kubeconfig rendered from what it accepted, read back. Errors are one
//! clean line starting with the path and never show the token secret or key material.

use std::path::PathBuf;
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bootlet::api::kubeconfig::{self, Credential};
use bootlet::pki::parse_cert_chain;
use bootlet::runtime::report;

use super::cluster::pki;
use super::engine::{one_clean_line, outcome, Target, Verdict};

/// The token every seed carries; its secret half must never reach a message.
const TOKEN: &str = "07401b.f395accd246ae52d";
const TOKEN_SECRET: &str = "f395accd246ae52d";

/// A directory with the files kubeconfig seeds reference, and the cert+key file the
/// rendered kubelet kubeconfig names.
struct KubeconfigFiles {
    dir: PathBuf,
    current: PathBuf,
    ca_b64: String,
    cert_b64: String,
    key_b64: String,
}

fn kubeconfig_files() -> &'static KubeconfigFiles {
    static FILES: OnceLock<KubeconfigFiles> = OnceLock::new();
    FILES.get_or_init(|| {
        let p = pki();
        let dir = tempfile::tempdir().unwrap().keep();
        let cert = p.seeds[0].clone();
        let key = p.node_key_pem.clone();
        std::fs::write(dir.join("ca.crt"), &p.ca_pem).unwrap();
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
        std::fs::write(dir.join("client.crt"), &cert).unwrap();
        std::fs::write(dir.join("client.key"), &key).unwrap();
        let current = dir.join("kubelet-client-current.pem");
        std::fs::write(&current, format!("{cert}{key}")).unwrap();
        KubeconfigFiles {
            current,
            ca_b64: STANDARD.encode(&p.ca_pem),
            cert_b64: STANDARD.encode(&cert),
            key_b64: STANDARD.encode(&key),
            dir,
        }
    })
}

/// Whether every line of `input` holding `secret` is a `key:` line (YAML or JSON): only
/// then does the secret showing up elsewhere mean bootlet copied it.
fn secret_only_under(input: &str, secret: &str, key: &str) -> bool {
    input.lines().filter(|l| l.contains(secret)).all(|l| {
        let l = l.trim_start().trim_start_matches(['-', ' ', '{', ',']);
        l.starts_with(&format!("{key}:")) || l.starts_with(&format!("\"{key}\":"))
    })
}

fn leaks(text: &str, input: &str, f: &KubeconfigFiles) -> Option<&'static str> {
    if text.contains(TOKEN_SECRET) && secret_only_under(input, TOKEN_SECRET, "token") {
        return Some("the token secret");
    }
    if text.contains("PRIVATE KEY") {
        return Some("a PRIVATE KEY block");
    }
    let key40 = &f.key_b64[20..60];
    if text.contains(key40) && secret_only_under(input, key40, "client-key-data") {
        return Some("client-key-data");
    }
    None
}

fn kubeconfig_case(input: &[u8]) -> Verdict {
    let f = kubeconfig_files();
    let text = String::from_utf8_lossy(input);
    let path = f.dir.join("bootstrap-kubelet.conf");
    let shown = path.display().to_string();
    let first = kubeconfig::parse(&path, &text, false);
    let result = match first {
        Err(kubeconfig::KubeconfigError::InsecureRefused { .. }) => {
            kubeconfig::parse(&path, &text, true)
        }
        other => other,
    };
    let access = match result {
        Err(e) => {
            let line = report(&e);
            if !one_clean_line(&line) || !line.starts_with(&shown) {
                return Err(format!(
                    "error is not one clean line naming the file: {line}"
                ));
            }
            if let Some(what) = leaks(&line, &text, f) {
                return Err(format!("error message shows {what}: {line}"));
            }
            return Ok(outcome("err", &line[shown.len()..]));
        }
        Ok(access) => access,
    };
    let debug = format!("{access:?}");
    if let Some(what) = leaks(&debug, &text, f) {
        return Err(format!("Debug of the access shows {what}"));
    }
    if !access.server.url.starts_with("https://") {
        return Err(format!(
            "accepted a non-https server {:?}",
            access.server.url
        ));
    }
    if parse_cert_chain(&String::from_utf8_lossy(&access.ca_pem)).is_err() {
        return Err("accepted a CA bundle without a certificate".into());
    }
    // What bootlet writes for the kubelet must read back as the same cluster.
    let yaml = kubeconfig::render_kubelet(&access.server, &access.ca_pem, &f.current)
        .map_err(|e| format!("cannot render the kubelet kubeconfig: {}", report(&e)))?;
    if yaml.contains(TOKEN_SECRET) && secret_only_under(&text, TOKEN_SECRET, "token") {
        return Err("the kubelet kubeconfig holds the bootstrap token".into());
    }
    let back = kubeconfig::parse(&f.dir.join("kubelet.conf"), &yaml, false).map_err(|e| {
        format!(
            "the kubelet kubeconfig bootlet renders does not read back: {}",
            report(&e)
        )
    })?;
    if back.server != access.server || back.ca_pem != access.ca_pem {
        return Err(format!(
            "the kubelet kubeconfig reads back as another cluster: {:?} -> {:?}",
            access.server, back.server
        ));
    }
    if !matches!(back.credential, Credential::ClientCert { .. }) {
        return Err("the kubelet kubeconfig does not name the client certificate".into());
    }
    let cred = match access.credential {
        Credential::Token(_) => "token",
        Credential::ClientCert { .. } => "cert",
        Credential::Exec(_) => "exec",
        Credential::None => "none",
    };
    Ok(format!(
        "ok:{cred}:tsn={}:proxy={}:insecure={}",
        access.server.tls_server_name.is_some(),
        access.server.proxy.is_some(),
        access.insecure
    ))
}

fn kubeconfig_seeds() -> Vec<Vec<u8>> {
    let f = kubeconfig_files();
    let token = |cluster: &str| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n{cluster}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context:\n    cluster: default-cluster\n    user: tls-bootstrap-token-user\ncurrent-context: tls-bootstrap-token-user@kubernetes\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {TOKEN}\n"
        )
    };
    let ca = format!(
        "    certificate-authority-data: {}\n    server: https://10.0.0.1:6443",
        f.ca_b64
    );
    let seeds = vec![
        token(&ca),
        token("    certificate-authority: ca.crt\n    server: https://api.example:6443"),
        token(&format!("{ca}\n    tls-server-name: kubernetes.default.svc")),
        token(&format!("{ca}\n    proxy-url: http://user:pw@proxy.example:3128")),
        token(&format!("{ca}\n    insecure-skip-tls-verify: true")),
        token("    certificate-authority: /nonexistent/ca.crt\n    server: http://10.0.0.1"),
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://[fd00::1]:6443\n  name: c\ncontexts:\n- context:\n    cluster: c\n    user: u\n  name: ctx\ncurrent-context: ctx\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            f.ca_b64, f.cert_b64, f.key_b64
        ),
        format!(
            "clusters:\n- cluster: {{certificate-authority: ca.crt, server: 'https://h:1'}}\n  name: c\ncontexts:\n- context: {{cluster: c, user: u}}\n  name: a\n- context: {{cluster: c, user: v}}\n  name: b\ncurrent-context: b\nusers:\n- name: u\n  user: {{tokenFile: token}}\n- name: v\n  user: {{client-certificate: client.crt, client-key: client.key}}\n"
        ),
        format!(
            "{{\"apiVersion\":\"v1\",\"clusters\":[{{\"name\":\"c\",\"cluster\":{{\"server\":\"https://h\",\"certificate-authority-data\":\"{}\"}}}}],\"contexts\":[{{\"name\":\"x\",\"context\":{{\"cluster\":\"c\",\"user\":\"u\"}}}}],\"users\":[{{\"name\":\"u\",\"user\":{{\"token\":\"{TOKEN}\"}}}}]}}",
            f.ca_b64
        ),
        token(&format!("{ca}\n    extensions:\n    - name: x\n      extension: {{a: b}}")),
        format!("{}    exec:\n      command: aws\n", token(&ca)),
    ];
    seeds.into_iter().map(String::into_bytes).collect()
}

fn kubeconfig_dict() -> Vec<Vec<u8>> {
    let words = [
        "apiVersion: v1\n",
        "kind: Config\n",
        "clusters:\n",
        "contexts:\n",
        "users:\n",
        "- name: ",
        "cluster:\n",
        "context:\n",
        "user:\n",
        "current-context: ",
        "server: ",
        "https://",
        "http://",
        "certificate-authority: ",
        "certificate-authority-data: ",
        "tls-server-name: ",
        "proxy-url: ",
        "insecure-skip-tls-verify: true",
        "token: ",
        "tokenFile: ",
        "client-certificate: ",
        "client-key: ",
        "client-certificate-data: ",
        "client-key-data: ",
        "username: ",
        "password: ",
        "as: ",
        "as-groups: [a]",
        "exec: {}",
        "auth-provider: {}",
        "extensions: []",
        "namespace: ",
        "ca.crt",
        "token",
        "client.crt",
        "client.key",
        "/dev/zero",
        "/proc/self/mem",
        ".",
        "..",
        "~",
        "null",
        "[]",
        "{}",
        "&a ",
        "*a",
        "'",
        "\"",
        "#",
        "%",
        "@",
        "[::1]",
        "socks5://p:1",
        "http://u:p@p:1",
        "1.2.3.4",
        "\u{1b}[31m",
        "\"\\n\"",
        "==",
        "AAAA",
        "!!binary ",
        "<<: *a",
    ];
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// Runs the target within the budget from the environment.
pub fn run() {
    let run = kubeconfig_case;
    super::run_target(&Target {
        name: "kubeconfig",
        seeds: kubeconfig_seeds(),
        dict: kubeconfig_dict(),
        structured: None,
        run: &run,
    });
}
