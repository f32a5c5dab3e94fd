use super::*;
use crate::pki::files::CertDir;
use crate::pki::tests::FIXED_KEY;
use crate::pki::verify::tests::{at, TestCa};
use crate::pki::{csr_pem, NodeKey};
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
    assert_eq!(access.server, "https://10.0.0.1:6443");
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
    let chain = ca.sign(&csr_pem(&key, "n1").unwrap(), |_| {});
    let cd = CertDir::open(&f.path("pki")).unwrap();
    cd.install(&chain, &key.to_pem(), at("2030-01-01T00:00:00Z"))
        .unwrap();
    let kc = f.path("kubelet.conf");
    write_kubelet(
        &kc,
        "https://10.0.0.1:6443",
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
    assert_eq!(access.server, "https://10.0.0.1:6443");
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
    write_kubelet(&kc, "https://10.0.0.1:6443", f.ca.as_bytes(), &cert).unwrap();
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
