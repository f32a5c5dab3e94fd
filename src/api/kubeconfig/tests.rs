use super::*;
use crate::pki::files::CertDir;
use crate::pki::tests::FIXED_KEY;
use crate::pki::verify::tests::{at, TestCa};
#[allow(unused_imports)]
use crate::pki::CertProfile;
use crate::pki::{csr_pem, NodeKey, PrivateKeyPem};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

const TOKEN: &str = "abcdef.0123456789abcdef";

struct Fixture {
    dir: tempfile::TempDir,
    ca: String,
}

impl Fixture {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            ca: TestCa::new("kubernetes").pem,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca_data(&self) -> String {
        STANDARD.encode(&self.ca)
    }

    /// Writes `kc.yaml` and returns its path.
    fn write(&self, yaml: &str) -> PathBuf {
        let p = self.path("kc.yaml");
        fs::write(&p, yaml).unwrap();
        p
    }

    fn bootstrap(&self, cluster: &str, user: &str) -> PathBuf {
        self.write(&format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: boot\n\
             contexts:\n- name: boot\n  context: {{cluster: c, user: u}}\n\
             clusters:\n- name: c\n  cluster:\n{cluster}\n\
             users:\n- name: u\n  user:\n{user}\n"
        ))
    }

    fn good_cluster(&self) -> String {
        format!(
            "    server: https://10.0.0.1:6443\n    certificate-authority-data: {}",
            self.ca_data()
        )
    }

    fn err(&self, cluster: &str, user: &str) -> String {
        let p = self.bootstrap(cluster, user);
        read(&p, false).unwrap_err().to_string()
    }
}

#[test]
fn reads_a_bootstrap_kubeconfig_with_token() {
    let f = Fixture::new();
    let p = f.bootstrap(&f.good_cluster(), &format!("    token: {TOKEN}"));
    let access = read(&p, false).unwrap();
    assert_eq!(access.server, Server::new("https://10.0.0.1:6443"));
    assert_eq!(access.ca_pem, f.ca.as_bytes());
    assert!(!access.insecure);
    let Credential::Token(token) = access.credential else {
        panic!("expected a token");
    };
    assert_eq!(token.id(), "abcdef");
    assert_eq!(token.secret_header(), format!("Bearer {TOKEN}"));
}

#[test]
fn token_debug_shows_only_the_id() {
    let token = BootstrapToken::new(TOKEN);
    let shown = format!("{token:?} {:?}", Credential::Token(token.clone()));
    assert!(!shown.contains("0123456789abcdef"), "{shown}");
    assert_eq!(format!("{token:?}"), "BootstrapToken(abcdef.<redacted>)");
    let opaque = BootstrapToken::new("eyJhbGciOiJSUzI1NiJ9.payload.sig");
    assert!(!opaque.is_bootstrap_token());
    assert_eq!(opaque.id(), "<opaque>");
    assert!(!format!("{opaque:?}").contains("payload"));
    assert!(!BootstrapToken::new("ABCDEF.0123456789abcdef").is_bootstrap_token());
    assert!(!BootstrapToken::new("abcdef.0123456789abcde").is_bootstrap_token());
}

#[test]
fn relative_ca_and_token_file_resolve_against_the_kubeconfig_dir() {
    let f = Fixture::new();
    fs::create_dir(f.path("sub")).unwrap();
    fs::write(f.path("sub/ca.crt"), &f.ca).unwrap();
    fs::write(f.path("sub/token"), format!("{TOKEN}\n")).unwrap();
    let p = f.bootstrap(
        "    server: https://h:6443\n    certificate-authority: sub/ca.crt",
        "    tokenFile: sub/token",
    );
    let access = read(&p, false).unwrap();
    assert_eq!(access.ca_pem, f.ca.as_bytes());
    assert_eq!(
        access.credential,
        Credential::Token(BootstrapToken::new(TOKEN))
    );
}

#[test]
fn the_only_context_is_used_without_current_context() {
    let f = Fixture::new();
    let p = f.write(&format!(
        "contexts:\n- name: only\n  context: {{cluster: c}}\n\
         clusters:\n- name: c\n  cluster:\n{}\n",
        f.good_cluster()
    ));
    let access = read(&p, false).unwrap();
    assert_eq!(access.credential, Credential::None);
}

#[test]
fn render_then_read_round_trips_to_a_client_cert_credential() {
    let f = Fixture::new();
    let key = NodeKey::from_pem(&PrivateKeyPem::new(FIXED_KEY.into())).unwrap();
    let ca = TestCa::new("kubernetes");
    let chain = ca.sign(&csr_pem(&key, &CertProfile::client("n1")).unwrap(), |_| {});
    let cd = CertDir::open(&f.path("pki")).unwrap();
    cd.install(&chain, &key.to_pem(), at("2030-01-01T00:00:00Z"))
        .unwrap();
    let kc = f.path("kubelet.conf");
    write_kubelet(
        &kc,
        &Server::new("https://10.0.0.1:6443"),
        ca.pem.as_bytes(),
        &cd.current_path(),
    )
    .unwrap();
    assert_eq!(
        fs::metadata(&kc).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let yaml = fs::read_to_string(&kc).unwrap();
    let current = cd.current_path().display().to_string();
    assert!(
        yaml.contains(&format!("client-certificate: {current}")),
        "{yaml}"
    );
    assert!(yaml.contains(&format!("client-key: {current}")), "{yaml}");
    for name in ["default-cluster", "default-auth", "default-context"] {
        assert!(yaml.contains(name), "{yaml}");
    }
    let access = read(&kc, false).unwrap();
    assert_eq!(access.server, Server::new("https://10.0.0.1:6443"));
    assert_eq!(access.ca_pem, ca.pem.as_bytes());
    assert_eq!(
        access.credential,
        Credential::ClientCert {
            chain_pem: chain,
            key: key.to_pem(),
        }
    );
}

#[test]
fn client_cert_data_is_read_inline() {
    let f = Fixture::new();
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        f.ca_data(),
        STANDARD.encode(FIXED_KEY)
    );
    let p = f.bootstrap(&f.good_cluster(), &user);
    let Credential::ClientCert { key, .. } = read(&p, false).unwrap().credential else {
        panic!("expected a client cert");
    };
    assert_eq!(key.as_str(), FIXED_KEY);
}

#[test]
fn insecure_is_refused_unless_allowed() {
    let f = Fixture::new();
    let p = f.bootstrap(
        "    server: https://h:6443\n    insecure-skip-tls-verify: true",
        "    token: x",
    );
    let err = read(&p, false).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: cluster \"c\" sets insecure-skip-tls-verify, which bootlet refuses",
            p.display()
        )
    );
    // Allowed, but without a CA there is nothing to verify the server or the issued
    // certificates against: still refused, naming the missing CA.
    let err = read(&p, true).unwrap_err().to_string();
    assert!(err.contains("neither certificate-authority"), "{err}");
    // With a CA and the flag, it is read, and the CA is kept and enforced.
    let with_ca = f.bootstrap(
        &format!(
            "{}
    insecure-skip-tls-verify: true",
            f.good_cluster()
        ),
        "    token: x",
    );
    let access = read(&with_ca, true).unwrap();
    assert!(access.insecure && !access.ca_pem.is_empty());
}

#[test]
fn each_error_names_the_file_and_the_problem_in_one_line() {
    let f = Fixture::new();
    let kc = f.path("kc.yaml").display().to_string();
    let user = &format!("    token: {TOKEN}");
    let cases: Vec<(String, String)> = vec![
        (f.err("    certificate-authority-data: x", user), format!("{kc}: cluster \"c\" has no server")),
        (
            f.err(&format!("    server: http://h\n    certificate-authority-data: {}", f.ca_data()), user),
            format!("{kc}: server \"http://h\" is not an https:// URL"),
        ),
        (
            f.err("    server: https://h", user),
            format!("{kc}: cluster \"c\" has neither certificate-authority nor certificate-authority-data"),
        ),
        (
            f.err("    server: https://h\n    certificate-authority: nope.crt", user),
            format!("{kc}: cannot read certificate-authority file {}", f.path("nope.crt").display()),
        ),
        (
            f.err("    server: https://h\n    certificate-authority-data: '%%%'", user),
            format!("{kc}: certificate-authority-data is not valid base64"),
        ),
        (
            f.err("    server: https://h\n    certificate-authority-data: aGVsbG8=", user),
            format!("{kc}: certificate-authority-data holds no PEM certificate"),
        ),
        (
            f.err(&f.good_cluster(), "    tokenFile: /nonexistent/token"),
            format!("{kc}: cannot read tokenFile file /nonexistent/token"),
        ),
        (
            f.err(&f.good_cluster(), "    client-certificate: /nonexistent/c.pem\n    client-key: /k"),
            format!("{kc}: cannot read client-certificate file /nonexistent/c.pem"),
        ),
        (
            f.err(&f.good_cluster(), "    client-certificate: /nonexistent/c.pem"),
            format!("{kc}: user \"u\" has client-certificate but not client-key"),
        ),
        (f.err(&f.good_cluster(), "    token: ' '"), format!("{kc}: user \"u\" has an empty token")),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }

    let missing = f.path("missing.conf");
    assert_eq!(
        read(&missing, false).unwrap_err().to_string(),
        format!("{}: no such file", missing.display())
    );
    let one = |yaml: &str| read(&f.write(yaml), false).unwrap_err().to_string();
    let parse = one("clusters: [unclosed\n  - :");
    assert!(
        parse.starts_with(&format!("{kc}: not a kubeconfig: ")),
        "{parse}"
    );
    assert!(!parse.contains('\n'), "{parse}");
    assert_eq!(
        one("contexts: []\n"),
        format!("{kc}: no current-context and 0 contexts to choose from")
    );
    assert_eq!(
        one("current-context: x\ncontexts: []\n"),
        format!("{kc}: context \"x\" not found")
    );
    assert_eq!(
        one("contexts:\n- name: a\n  context: {cluster: gone}\n"),
        format!("{kc}: cluster \"gone\" not found")
    );
    let no_user = format!(
        "contexts:\n- name: a\n  context: {{cluster: c, user: ghost}}\n\
         clusters:\n- name: c\n  cluster:\n{}\n",
        f.good_cluster()
    );
    assert_eq!(one(&no_user), format!("{kc}: user \"ghost\" not found"));
}

/// STYLE rule 19: kubectl reads the kubeconfig we write the same way we do.
#[test]
fn kubectl_reads_the_written_kubelet_kubeconfig() {
    let f = Fixture::new();
    let kc = f.path("kubelet.conf");
    let cert = f.path("pki/kubelet-client-current.pem");
    write_kubelet(&kc, &"https://10.0.0.1:6443".into(), f.ca.as_bytes(), &cert).unwrap();
    let jsonpath = "{.current-context} {.clusters[0].cluster.server} \
                    {.users[0].user.client-certificate} {.users[0].user.client-key} \
                    {.clusters[0].cluster.certificate-authority-data}";
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["config", "view", "--raw", "--minify", "-o"])
        .arg(format!("jsonpath={jsonpath}"))
        .output()
        .expect("kubectl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<&str> = text.split_whitespace().collect();
    let cert = cert.display().to_string();
    let ca = f.ca_data();
    assert_eq!(
        fields,
        [
            "default-context",
            "https://10.0.0.1:6443",
            &cert,
            &cert,
            &ca
        ]
    );
}

/// Issue #10 §4: exec, auth-provider, basic auth (and impersonation, unknown keys, a second
/// identity) used to be dropped silently, turning bootstrap into anonymous requests.
#[test]
fn user_entries_bootlet_cannot_honour_are_refused_by_key() {
    let f = Fixture::new();
    let kc = f.path("kc.yaml").display().to_string();
    let needs = "bootlet needs a bootstrap token, a client certificate or an exec plugin";
    let versions = "client.authentication.k8s.io/v1, client.authentication.k8s.io/v1beta1";
    let no_as = "bootlet acts as the node itself and never impersonates another user";
    let cert = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        f.ca_data(),
        STANDARD.encode(FIXED_KEY)
    );
    let cases: Vec<(String, String)> = vec![
        (
            "    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, interactiveMode: Always}".into(),
            format!(
                "{kc}: users[0].user.exec.interactiveMode is not supported: Always needs a \
                 terminal, and bootlet runs as a service without one (client-go refuses it \
                 the same way); use Never or IfAvailable"
            ),
        ),
        (
            "    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}".into(),
            format!(
                "{kc}: users[0].user.exec.interactiveMode must be set with \
                 client.authentication.k8s.io/v1 (Never or IfAvailable), as client-go requires"
            ),
        ),
        (
            format!("    token: {TOKEN}\n    exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: aws}}"),
            format!(
                "{kc}: users[0].user.token is not supported: the user also has an exec \
                 plugin, and bootlet presents exactly one identity: keep the plugin or the \
                 static credential"
            ),
        ),
        (
            "    auth-provider: {name: oidc, config: {client-id: x}}".into(),
            format!("{kc}: users[0].user.auth-provider is not supported: {needs}"),
        ),
        (
            "    username: admin\n    password: secret".into(),
            format!("{kc}: users[0].user.username is not supported: {needs}"),
        ),
        (
            "    password: secret".into(),
            format!("{kc}: users[0].user.password is not supported: {needs}"),
        ),
        (
            format!("    token: {TOKEN}\n    as: system:admin"),
            format!("{kc}: users[0].user.as is not supported: {no_as}"),
        ),
        (
            format!("    token: {TOKEN}\n    as-groups: [system:masters]"),
            format!("{kc}: users[0].user.as-groups is not supported: {no_as}"),
        ),
        (
            "    tokenfile: /etc/token".into(),
            format!(
                "{kc}: users[0].user.tokenfile is not supported: it is not a kubeconfig user \
                 field (bootlet reads token, tokenFile, client-certificate[-data] and \
                 client-key[-data])"
            ),
        ),
        (
            format!("    token: {TOKEN}\n{cert}"),
            format!(
                "{kc}: users[0].user.client-certificate-data is not supported: the user also \
                 has a token, and bootlet presents exactly one identity: keep the token or the \
                 client certificate"
            ),
        ),
    ];
    for (user, want) in cases {
        let got = f.err(&f.good_cluster(), &user);
        assert_eq!(got, want, "user entry:\n{user}");
        assert!(!got.contains("secret") && !got.contains(TOKEN), "{got}");
    }
    // The key names the entry actually used, not always users[0].
    let p = f.write(&format!(
        "current-context: b\ncontexts:\n- name: b\n  context: {{cluster: c, user: second}}\n\
         clusters:\n- name: c\n  cluster:\n{}\n\
         users:\n- name: first\n  user: {{token: {TOKEN}}}\n\
         - name: second\n  user: {{exec: {{command: gke-gcloud-auth-plugin, apiVersion: client.authentication.k8s.io/v1alpha1}}}}\n",
        f.good_cluster()
    ));
    let err = read(&p, false).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{kc}: users[1].user.exec.apiVersion is not supported: \
             \"client.authentication.k8s.io/v1alpha1\" is not one of {versions} (bootlet speaks \
             what the kubelet speaks)"
        )
    );
    // `extensions` is metadata for other tools: allowed beside a token.
    let p = f.bootstrap(
        &f.good_cluster(),
        &format!("    token: {TOKEN}\n    extensions: [{{name: x, extension: {{a: 1}}}}]"),
    );
    assert!(matches!(
        read(&p, false).unwrap().credential,
        Credential::Token(_)
    ));
}

#[test]
fn tls_server_name_and_proxy_url_are_read() {
    let f = Fixture::new();
    let p = f.bootstrap(
        &format!(
            "{}\n    tls-server-name: kubernetes.default.svc\n    proxy-url: http://u:p%40ss@proxy.corp:3128",
            f.good_cluster()
        ),
        &format!("    token: {TOKEN}"),
    );
    let access = read(&p, false).unwrap();
    assert_eq!(access.server.url, "https://10.0.0.1:6443");
    assert_eq!(
        access.server.tls_server_name.as_deref(),
        Some("kubernetes.default.svc")
    );
    let proxy = access.server.proxy.as_ref().unwrap();
    assert_eq!((proxy.host(), proxy.port()), ("proxy.corp", 3128));
    assert_eq!(proxy.with_credentials(), "http://u:p%40ss@proxy.corp:3128");
    // Debug of the whole access struct shows neither the proxy password nor the token.
    let debug = format!("{access:?}");
    assert!(
        !debug.contains("p%40ss") && !debug.contains("0123456789abcdef"),
        "{debug}"
    );
}

#[test]
fn proxy_url_and_tls_server_name_errors_name_the_key() {
    let f = Fixture::new();
    let kc = f.path("kc.yaml").display().to_string();
    let user = &format!("    token: {TOKEN}");
    let with = |extra: &str| f.err(&format!("{}\n{extra}", f.good_cluster()), user);
    assert_eq!(
        with("    proxy-url: socks5://user:pw@proxy:1080"),
        format!(
            "{kc}: clusters[0].cluster.proxy-url is not supported: bootlet tunnels \
             through http:// proxies (HTTP CONNECT) only, not socks5://"
        )
    );
    assert_eq!(
        with("    proxy-url: https://proxy:443"),
        format!(
            "{kc}: clusters[0].cluster.proxy-url is not supported: bootlet tunnels \
             through http:// proxies (HTTP CONNECT) only, not https://"
        )
    );
    assert_eq!(
        with("    proxy-url: proxy.corp:3128"),
        format!(
            "{kc}: clusters[0].cluster.proxy-url is not a proxy URL of the form \
             http://[user:password@]host[:port]"
        )
    );
    assert_eq!(
        with("    tls-server-name: 'not a name'"),
        format!(
            "{kc}: clusters[0].cluster.tls-server-name (a value of 10 characters with \
             whitespace or line breaks: a quote left open?) is neither a DNS name nor an IP \
             address"
        )
    );
}

/// Issue #10 §4: the kubelet must reach the server the way bootlet did.
#[test]
fn the_kubelet_kubeconfig_keeps_tls_server_name_and_proxy_url() {
    let f = Fixture::new();
    let server = Server {
        url: "https://10.0.0.1:6443".into(),
        tls_server_name: Some("kubernetes".into()),
        proxy: Some(ProxyUrl::parse("http://u:pw@proxy.corp:3128", false).unwrap()),
    };
    let kc = f.path("kubelet.conf");
    let cert = f.path("pki/kubelet-client-current.pem");
    write_kubelet(&kc, &server, f.ca.as_bytes(), &cert).unwrap();
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["config", "view", "--raw", "--minify", "-o"])
        .arg("jsonpath={.clusters[0].cluster.tls-server-name} {.clusters[0].cluster.proxy-url}")
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kubernetes http://u:pw@proxy.corp:3128"
    );
    // And bootlet reads back what it wrote (the reuse path after a restart).
    fs::create_dir_all(f.path("pki")).unwrap();
    fs::write(&cert, format!("{}{FIXED_KEY}", f.ca)).unwrap();
    let access = read(&kc, false).unwrap();
    assert_eq!(access.server, server);
}

/// Issue #10 §5: `--kubeconfig /etc/kubernetes/kubelet.conf` on a node without
/// /etc/kubernetes must not fail the install.
#[test]
fn writing_the_kubelet_kubeconfig_creates_missing_parents_0755() {
    let f = Fixture::new();
    let kc = f.path("etc/kubernetes/kubelet.conf");
    write_kubelet(
        &kc,
        &"https://10.0.0.1:6443".into(),
        f.ca.as_bytes(),
        &f.path("pki/kubelet-client-current.pem"),
    )
    .unwrap();
    for dir in [f.path("etc"), f.path("etc/kubernetes")] {
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{}", dir.display());
    }
    assert_eq!(
        fs::metadata(&kc).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // An existing parent keeps its mode.
    fs::set_permissions(f.path("etc"), fs::Permissions::from_mode(0o700)).unwrap();
    let again = f.path("etc/other/kubelet.conf");
    write_kubelet(
        &again,
        &"https://10.0.0.1:6443".into(),
        f.ca.as_bytes(),
        &f.path("pki/kubelet-client-current.pem"),
    )
    .unwrap();
    let mode = |p: PathBuf| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(f.path("etc")), 0o700);
    assert_eq!(mode(f.path("etc/other")), 0o755);
}

/// STYLE rule 14: Debug of anything holding a CA or certificate shows its size and
/// fingerprint, never the PEM body, the key or the token.
#[test]
fn debug_shows_sizes_and_fingerprints_not_bodies() {
    let f = Fixture::new();
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        f.ca_data(),
        STANDARD.encode(FIXED_KEY)
    );
    let access = read(&f.bootstrap(&f.good_cluster(), &user), false).unwrap();
    let debug = format!("{access:?}");
    let body_line = f.ca.lines().nth(1).unwrap();
    assert!(!debug.contains(body_line), "{debug}");
    assert!(!debug.contains("BEGIN"), "{debug}");
    let key_line = FIXED_KEY.lines().nth(1).unwrap();
    assert!(!debug.contains(key_line), "{debug}");
    let der = &crate::pki::parse_cert_chain(&f.ca).unwrap()[0].1;
    let fingerprint: String = Sha256::digest(der)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let summary = format!("PEM({} bytes, 1 certs, sha256:{fingerprint}…)", f.ca.len());
    assert_eq!(debug.matches(&summary).count(), 2, "{debug}");
    assert!(debug.contains("PrivateKeyPem(<redacted>)"), "{debug}");
}

/// Regression: a kubeconfig, or a file it names, was read whole whatever its size, and a
/// FIFO at either path blocked the agent forever.
#[test]
fn oversized_or_special_files_are_refused_naming_the_field_and_cap() {
    let f = Fixture::new();
    let token_file = |name: &str| format!("    tokenFile: {name}");
    std::fs::write(
        f.path("big-token"),
        vec![b'a'; (MAX_REFERENCED_FILE + 1) as usize],
    )
    .unwrap();
    let e = f.err(&f.good_cluster(), &token_file("big-token"));
    assert!(e.contains("cannot read tokenFile file"), "{e}");
    let p = f.bootstrap(&f.good_cluster(), &token_file("big-token"));
    let e = crate::runtime::report(&read(&p, false).unwrap_err());
    assert!(
        e.ends_with("big-token: is larger than the 1 MiB cap"),
        "{e}"
    );

    let made = std::process::Command::new("mkfifo")
        .arg(f.path("fifo"))
        .status();
    assert!(made.unwrap().success());
    let p = f.bootstrap(&f.good_cluster(), &token_file("fifo"));
    let e = crate::runtime::report(&read(&p, false).unwrap_err());
    assert!(e.ends_with("fifo: is a FIFO, not a regular file"), "{e}");
    let e = crate::runtime::report(&read(&f.path("fifo"), false).unwrap_err());
    assert!(
        e.ends_with("fifo: cannot read: is a FIFO, not a regular file"),
        "{e}"
    );

    // Inline data is held to the same cap once decoded.
    let big_ca = STANDARD.encode(vec![b'a'; (MAX_REFERENCED_FILE + 1) as usize]);
    let cluster =
        format!("    server: https://10.0.0.1:6443\n    certificate-authority-data: {big_ca}");
    let e = f.err(&cluster, &format!("    token: {TOKEN}"));
    assert!(
        e.ends_with("certificate-authority-data is larger than the 1 MiB cap"),
        "{e}"
    );
    // And the kubeconfig itself to its own.
    let huge = f.path("huge.yaml");
    std::fs::write(&huge, vec![b'#'; (MAX_KUBECONFIG_FILE + 1) as usize]).unwrap();
    let e = crate::runtime::report(&read(&huge, false).unwrap_err());
    assert!(
        e.ends_with("cannot read: is larger than the 4 MiB cap"),
        "{e}"
    );
}

/// Found by tests/local/fuzz.rs: a quote left open in `server:` swallowed the lines after it, a
/// token among them; the value was accepted (it starts with https://) and shown whole in
/// later errors and Debug, or in "is not an https:// URL". A value with a line break is
/// now refused, and described instead of shown.
#[test]
fn a_server_that_swallowed_other_lines_is_refused_without_showing_them() {
    let f = Fixture::new();
    let secret = "0123456789abcdef";
    for server in [
        format!("    server: \"https://10.0.0.1:6443\n      token: abcdef.{secret}\""),
        format!("    server: \"10.0.0.1:6443\n      token: abcdef.{secret}\""),
    ] {
        let cluster = format!("    certificate-authority-data: {}\n{server}", f.ca_data());
        let p = f.bootstrap(&cluster, &format!("    token: {TOKEN}"));
        let e = crate::runtime::report(&read(&p, false).unwrap_err());
        assert!(!e.contains(secret), "{e}");
        assert!(
            e.contains("with whitespace or line breaks: a quote left open?"),
            "{e}"
        );
    }
    // An ordinary value is still shown, quoted.
    let e = f.err(
        &format!(
            "    server: http://10.0.0.1\n    certificate-authority-data: {}",
            f.ca_data()
        ),
        &format!("    token: {TOKEN}"),
    );
    assert!(
        e.ends_with("server \"http://10.0.0.1\" is not an https:// URL"),
        "{e}"
    );
    assert_eq!(
        Shown(&"x".repeat(SHOWN_MAX + 1)).to_string(),
        "(a value of 257 characters)"
    );
}
