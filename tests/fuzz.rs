//! Fuzz harnesses for the parsers that read untrusted input, on the stable toolchain
//! (engine: tests/fuzz/engine.rs): the config file, kubeconfigs, PEM chains and their
//! verification, and the watch stream decoder. `cargo test` runs a few hundred cases per
//! target from a fixed seed; `bench/fuzz.sh` runs each for minutes (`FUZZ_SECONDS`,
//! `FUZZ_SEED`). Each target checks invariants, not just "no panic": errors are one clean
//! line naming the file, nothing secret reaches a message, what is accepted is sound.

mod fuzz {
    pub mod engine;
}
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bootlet::api::kubeconfig::{self, Credential};
use bootlet::api::watch::{decode_line, LineBuf};
use bootlet::api::Identity;
use bootlet::cli::Flags;
use bootlet::config::{is_dns1123_subdomain, FileConfig, Settings};
use bootlet::identity::csr::{verdict, Verdict as CsrVerdict};
use bootlet::identity::issue::IssueError;
use bootlet::pki::verify::{still_valid, verify_issued};
use bootlet::pki::{
    canonical_chain_pem, csr_matches_key, csr_pem, parse_cert_chain, split_pem, CertProfile,
    NodeKey, Sans,
};
use bootlet::runtime::report;
use fuzz::engine::{fuzz, one_clean_line, outcome, seed_from_env, Budget, Target, Verdict};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, WatchEvent};
use k8s_openapi::ByteString;
use rand::rngs::StdRng;
use rand::Rng;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SubjectPublicKeyInfo,
};
use x509_parser::prelude::{FromDer as _, X509Certificate, X509CertificationRequest};

/// Cases per target in `cargo test` (debug build): together well under 10 s.
const TEST_CASES: u64 = 1500;
/// The seed `cargo test` uses, so a failure there reproduces.
const TEST_SEED: u64 = 0x0b00_7137;

/// The token every kubeconfig seed carries; its secret half must never reach a message.
const TOKEN: &str = "07401b.f395accd246ae52d";
const TOKEN_SECRET: &str = "f395accd246ae52d";
const NODE: &str = "fuzz-node";

fn run_target(t: &Target<'_>) {
    let report = fuzz(t, Budget::from_env(TEST_CASES), seed_from_env(TEST_SEED));
    report.assert_clean();
}

// === the cluster every target shares ===

/// A CA, an intermediate, the node's key and certificates signed for it (and a few that
/// must be refused), all made once.
struct Pki {
    now: SystemTime,
    ca_pem: String,
    node_key: NodeKey,
    node_key_pem: String,
    /// Every certificate DER the CAs signed: an accepted leaf must be one of these.
    signed: BTreeSet<Vec<u8>>,
    /// Seeds: chains (leaf first), the CA bundle, a kubelet-client file, a CSR.
    seeds: Vec<String>,
    csr_der: Vec<u8>,
    serving: CertProfile,
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(make_pki)
}

fn make_pki() -> Pki {
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "fuzz-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = (now - hour).into();
    ca.not_after = (now + 24 * hour).into();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let ca_issuer = Issuer::from_ca_cert_der(ca_cert.der(), &ca_key).unwrap();

    let int_key = KeyPair::generate().unwrap();
    let mut int = ca.clone();
    int.distinguished_name = rcgen::DistinguishedName::new();
    int.distinguished_name
        .push(DnType::CommonName, "fuzz-intermediate");
    let int_cert = int.signed_by(&int_key, &ca_issuer).unwrap();
    let int_issuer = Issuer::from_ca_cert_der(int_cert.der(), &int_key).unwrap();

    let node_key = NodeKey::generate().unwrap();
    let node_spki = SubjectPublicKeyInfo::from_der(&node_key.public_key_der()).unwrap();
    let other_key = KeyPair::generate().unwrap();
    let other_spki =
        SubjectPublicKeyInfo::from_der(&rcgen::PublicKeyData::subject_public_key_info(&other_key))
            .unwrap();
    let serving = CertProfile::serving(
        NODE,
        Sans::new(
            vec!["fuzz.example".into()],
            vec!["10.0.0.1".parse().unwrap()],
        ),
    );

    let leaf = |cn: &str, nb: SystemTime, na: SystemTime, server: bool| {
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.not_before = nb.into();
        p.not_after = na.into();
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.is_ca = IsCa::ExplicitNoCa;
        p.use_authority_key_identifier_extension = true;
        if server {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            p.subject_alt_names = vec![
                SanType::DnsName("fuzz.example".try_into().unwrap()),
                SanType::IpAddress("10.0.0.1".parse().unwrap()),
            ];
        } else {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        p
    };
    let cn = format!("system:node:{NODE}");
    let valid = (now - 5 * 60 * Duration::from_secs(1), now + hour);
    let mut signed = BTreeSet::new();
    let mut sign =
        |p: CertificateParams, spki: &SubjectPublicKeyInfo, issuer: &Issuer<'_, &KeyPair>| {
            let cert = p.signed_by(spki, issuer).unwrap();
            signed.insert(cert.der().to_vec());
            cert.pem()
        };
    let good = sign(leaf(&cn, valid.0, valid.1, false), &node_spki, &ca_issuer);
    let via_int = sign(leaf(&cn, valid.0, valid.1, false), &node_spki, &int_issuer);
    let other_node = sign(
        leaf("system:node:other", valid.0, valid.1, false),
        &node_spki,
        &ca_issuer,
    );
    let expired = sign(
        leaf(&cn, now - 2 * hour, now - hour, false),
        &node_spki,
        &ca_issuer,
    );
    let other_key_leaf = sign(leaf(&cn, valid.0, valid.1, false), &other_spki, &ca_issuer);
    let serving_leaf = sign(leaf(&cn, valid.0, valid.1, true), &node_spki, &ca_issuer);
    signed.insert(int_cert.der().to_vec());
    signed.insert(ca_cert.der().to_vec());

    let node_key_pem = node_key.to_pem().as_str().to_string();
    let csr = csr_pem(&node_key, &CertProfile::client(NODE)).unwrap();
    let csr_der = x509_parser::pem::Pem::iter_from_buffer(csr.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let ca_pem = ca_cert.pem();
    let int_pem = int_cert.pem();
    let seeds = vec![
        good.clone(),
        format!("{via_int}{int_pem}"),
        format!("{via_int}{int_pem}{ca_pem}"),
        format!("{good}{node_key_pem}"),
        format!("{good}\n{int_pem}\r\n{node_key_pem}"),
        other_node,
        expired,
        other_key_leaf,
        serving_leaf,
        ca_pem.clone(),
        csr.clone(),
        node_key_pem.clone(),
        format!("junk before\n{good}junk after\n"),
    ];
    Pki {
        now,
        ca_pem,
        node_key,
        node_key_pem,
        signed,
        seeds,
        csr_der,
        serving,
    }
}

// === config ===

const CONFIG_PATH: &str = "/etc/bootlet/fuzz.yaml";

/// What a valid `Settings` promises (config.rs documents each field's range).
fn settings_sound(s: &Settings) -> Result<(), String> {
    let hour = Duration::from_secs(3600);
    let day = 24 * hour;
    let checks: [(&str, bool); 14] = [
        ("node name", is_dns1123_subdomain(&s.node_name)),
        (
            "fraction in (0,1)",
            s.rotation_fraction > 0.0 && s.rotation_fraction < 1.0,
        ),
        ("jitter >= 0", s.rotation_jitter >= 0.0),
        (
            "window inside (0,1)",
            s.rotation_fraction - s.rotation_jitter > 0.0
                && s.rotation_fraction + s.rotation_jitter < 1.0,
        ),
        (
            "renew interval in [1s, 1h]",
            s.lease_renew_interval >= Duration::from_secs(1) && s.lease_renew_interval <= hour,
        ),
        (
            "lease duration whole seconds, > interval, <= 1h",
            s.lease_duration.subsec_nanos() == 0
                && s.lease_duration > s.lease_renew_interval
                && s.lease_duration <= hour,
        ),
        (
            "csr timeout in (0, 24h]",
            !s.csr_timeout.is_zero() && s.csr_timeout <= day,
        ),
        (
            "csr backoff 0 < min <= max <= 24h",
            !s.csr_backoff_min.is_zero()
                && s.csr_backoff_min <= s.csr_backoff_max
                && s.csr_backoff_max <= day,
        ),
        ("keep >= 1", s.keep_certificates >= 1),
        (
            "paths absolute",
            s.cert_dir.is_absolute()
                && s.kubeconfig.is_absolute()
                && s.bootstrap_kubeconfig.is_absolute(),
        ),
        (
            "warning in (0, 24h]",
            !s.csr_not_issued_warning.is_zero() && s.csr_not_issued_warning <= day,
        ),
        ("owner lookup > 0", !s.lease_owner_lookup_interval.is_zero()),
        (
            "grace <= 5 min",
            s.shutdown_grace <= Duration::from_secs(300),
        ),
        (
            "node IPs usable",
            s.node_ips
                .iter()
                .all(|ip| !ip.is_unspecified() && !ip.is_multicast()),
        ),
    ];
    if let Some((what, _)) = checks.iter().find(|(_, ok)| !ok) {
        return Err(format!("config accepted but breaks: {what}"));
    }
    // Every retry has a floor and a cap: the CSR back-off never waits less than its
    // minimum, nor more than its (jittered) maximum.
    let mut backoff = s.csr_backoff();
    let j = bootlet::config::DEFAULT_CSR_BACKOFF_JITTER;
    let ceiling = s
        .csr_backoff_max
        .max(s.csr_backoff_min.div_f64(1.0 - j))
        .mul_f64(1.0 + j)
        + Duration::from_micros(1);
    for _ in 0..40 {
        let d = backoff.next_delay();
        if d + Duration::from_micros(1) < s.csr_backoff_min || d > ceiling {
            return Err(format!("CSR back-off delay outside [min, max]: {d:?}"));
        }
    }
    Ok(())
}

fn config_case(input: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(input);
    let path = Path::new(CONFIG_PATH);
    let fc = match FileConfig::parse(path, &text) {
        Ok(fc) => fc,
        Err(e) => {
            let line = report(&e);
            if !one_clean_line(&line) || !line.starts_with(CONFIG_PATH) {
                return Err(format!(
                    "parse error is not one clean line naming the file: {line}"
                ));
            }
            return Ok(outcome("parse", &line[CONFIG_PATH.len()..]));
        }
    };
    let flags = Flags {
        // Without a nodeName in the file the host name would be read: use a fixed one.
        node_name: fc.node_name.is_none().then(|| NODE.to_string()),
        ..Flags::default()
    };
    match Settings::from_parts(Some((path, &fc)), &flags) {
        Err(e) => {
            let line = report(&e);
            if !one_clean_line(&line) || !line.contains(CONFIG_PATH) {
                return Err(format!(
                    "invalid-setting error is not one clean line naming the file: {line}"
                ));
            }
            Ok(outcome(
                "invalid",
                &line[CONFIG_PATH.len().min(line.len())..],
            ))
        }
        Ok(s) => {
            settings_sound(&s)?;
            let keys = serde_json::to_value(&fc).unwrap_or_default();
            let keys: Vec<&String> = keys
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            Ok(format!("valid:{keys:?}"))
        }
    }
}

fn config_seeds() -> Vec<Vec<u8>> {
    let example =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/bootlet.example.yaml"))
            .unwrap();
    let texts = [
        "",
        "# only a comment\n---\n",
        "nodeName: worker-1\nleaseRenewInterval: 10s\nleaseDuration: 40s\n",
        "{nodeName: w, rotationFraction: 0.8, rotationJitter: 0.1, csrTimeout: 30m}\n",
        "nodeIP: [10.0.0.1, 'fd00::1']\ntlsSAN: node.example,10.0.0.2\nserverTLSBootstrap: true\n",
        "nodeIP: 10.0.0.1,10.0.0.2\ntlsSAN:\n  - a.example\n  - 192.168.0.1\n",
        "base: &d 10s\nleaseRenewInterval: *d\n",
        "metricsBindAddress: off\nlogFormat: json\nverbosity: 2\nkeepCertificates: 3\n",
        "csrBackoffMin: 1m\ncsrBackoffMax: 1h\ncsrNotIssuedWarning: 15m\nleaseOwnerLookupInterval: 1m\nshutdownGrace: 5s\n",
        "leaseHealthProbe: http://127.0.0.1:10248/healthz\nrenewLease: false\nrotateCertificates: false\n",
        "certDir: pki\nkubeconfig: ../kubelet.conf\nbootstrapKubeconfig: /etc/kubernetes/bootstrap-kubelet.conf\nallowInsecureKubeconfig: true\n",
        "{\"nodeName\": \"w\", \"leaseDuration\": \"40s\"}",
    ];
    let mut seeds: Vec<Vec<u8>> = texts.iter().map(|t| t.as_bytes().to_vec()).collect();
    seeds.push(example);
    seeds
}

fn config_dict() -> Vec<Vec<u8>> {
    let words = [
        "bootstrapKubeconfig: ",
        "kubeconfig: ",
        "certDir: ",
        "nodeName: ",
        "rotateCertificates: ",
        "rotationFraction: ",
        "rotationJitter: ",
        "renewLease: ",
        "leaseHealthProbe: ",
        "leaseRenewInterval: ",
        "leaseDuration: ",
        "csrTimeout: ",
        "metricsBindAddress: ",
        "serverTLSBootstrap: ",
        "nodeIP: ",
        "tlsSAN: ",
        "keepCertificates: ",
        "allowInsecureKubeconfig: ",
        "logFormat: ",
        "verbosity: ",
        "csrBackoffMin: ",
        "csrBackoffMax: ",
        "csrNotIssuedWarning: ",
        "leaseOwnerLookupInterval: ",
        "shutdownGrace: ",
        "10s",
        "1h",
        "500ms",
        "1h30m",
        "0s",
        "-1s",
        "99999999999h",
        "1.5h",
        "0.75",
        "0.05",
        ".nan",
        ".inf",
        "-.inf",
        "true",
        "false",
        "yes",
        "~",
        "null",
        "[",
        "]",
        "{",
        "}",
        "&a ",
        "*a",
        "!!binary ",
        "!!str ",
        "!!int ",
        "<<: ",
        "---\n",
        "...\n",
        "? ",
        "- ",
        "|\n  ",
        ">\n  ",
        "'",
        "\"",
        "\"\\u0000\"",
        "\"\\x1b[31m\"",
        "\t",
        "\u{2028}",
        "0x1F",
        "1_000",
        "off",
        "127.0.0.1:0",
        "[::1]:10259",
        "http://",
        "https://h:1/p",
        "::",
        "10.0.0.1,10.0.0.2",
        "255.255.255.255",
        "224.0.0.1",
        "0.0.0.0",
        "UPPER.example",
        "a..b",
        "-a",
        "json",
        "text",
    ];
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn fuzz_config_parser() {
    let run = config_case;
    run_target(&Target {
        name: "config",
        seeds: config_seeds(),
        dict: config_dict(),
        structured: None,
        run: &run,
    });
}

// === kubeconfig ===

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

#[test]
fn fuzz_kubeconfig_parser() {
    let run = kubeconfig_case;
    run_target(&Target {
        name: "kubeconfig",
        seeds: kubeconfig_seeds(),
        dict: kubeconfig_dict(),
        structured: None,
        run: &run,
    });
}

// === PEM and certificate verification ===

/// Whether `der` is one certificate and nothing after it (Go's x509.ParseCertificate,
/// which the kubelet and the API server use, refuses trailing data).
fn exactly_one_certificate(der: &[u8]) -> bool {
    matches!(X509Certificate::from_der(der), Ok((rest, _)) if rest.is_empty())
}

fn pem_case(input: &[u8]) -> Verdict {
    let p = pki();
    let text = String::from_utf8_lossy(input);
    let mut shape = Vec::new();
    match parse_cert_chain(&text) {
        Ok(chain) => shape.push(format!("chain{}", chain.len().min(4))),
        Err(e) => shape.push(outcome("chain", &report(&e))),
    }
    let (certs, key) = split_pem(&text);
    shape.push(format!(
        "split{}:{}",
        certs.matches("BEGIN").count().min(4),
        key.is_some()
    ));
    if let Some(key) = &key {
        shape.push(format!("key:{}", NodeKey::from_pem(key).is_ok()));
    }
    for profile in [CertProfile::client(NODE), p.serving.clone()] {
        match verify_issued(&text, &p.node_key, &profile, p.ca_pem.as_bytes(), p.now) {
            Err(e) => {
                let line = report(&e);
                if !one_clean_line(&line) {
                    return Err(format!("verify error is not one clean line: {line}"));
                }
                shape.push(outcome("refused", &line));
            }
            Ok(info) => {
                let chain = parse_cert_chain(&text)
                    .map_err(|e| format!("verified, then does not parse: {e}"))?;
                if !p.signed.contains(&chain[0].1) {
                    return Err("verified a leaf the CA never signed (its DER differs from every issued one)".into());
                }
                if let Some((i, _)) = chain
                    .iter()
                    .enumerate()
                    .find(|(_, (_, der))| !exactly_one_certificate(der))
                {
                    return Err(format!(
                        "verified a chain whose block {i} has bytes after the certificate"
                    ));
                }
                if !still_valid(&info, p.now) {
                    return Err("verified a certificate that is not valid now".into());
                }
                // What is installed (the verified chain re-encoded, then the key; see
                // issue.rs and CertDir::install) must verify the same when read back.
                let installed = canonical_chain_pem(&text)
                    .map_err(|e| format!("verified, then cannot be re-encoded: {e}"))?;
                let (reread, reread_key) = split_pem(&format!("{installed}{}", p.node_key_pem));
                if reread_key.is_none() {
                    return Err("the installed file's key does not read back".into());
                }
                match verify_issued(&reread, &p.node_key, &profile, p.ca_pem.as_bytes(), p.now) {
                    Ok(again) if again.serial == info.serial => {}
                    Ok(_) => {
                        return Err("the installed file reads back as another certificate".into())
                    }
                    Err(e) => {
                        return Err(format!(
                            "verified, but the installed file does not verify when read back: {}",
                            report(&e)
                        ))
                    }
                }
                shape.push(format!("verified:{:?}", profile.purpose));
            }
        }
    }
    if csr_matches_key(input, &p.node_key, &CertProfile::client(NODE)) {
        let der = if input.starts_with(b"-----BEGIN") {
            x509_parser::pem::Pem::iter_from_buffer(input)
                .next()
                .and_then(Result::ok)
                .map(|b| b.contents)
                .unwrap_or_default()
        } else {
            input.to_vec()
        };
        // The signed part (key, subject, SANs) must be ours byte for byte. A request's
        // outer signatureAlgorithm is not signed and has no inner copy to match, so an
        // odd encoding of it (x509-parser reads it leniently) changes nothing adopted.
        let signed_part = |der: &[u8]| {
            X509CertificationRequest::from_der(der)
                .map(|(_, r)| r.certification_request_info.raw.to_vec())
                .ok()
        };
        if signed_part(&der).is_none() || signed_part(&der) != signed_part(&p.csr_der) {
            return Err("adopted a CSR that is not the one the key signed".into());
        }
        shape.push("csr-matches".into());
    }
    Ok(shape.join(" "))
}

/// PEM-aware mutations: change the DER inside a block, or the blocks of a chain.
fn pem_structured(rng: &mut StdRng, data: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(data).into_owned();
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut from = 0;
    while let Some(b) = text[from..].find("-----BEGIN ") {
        let start = from + b;
        let Some(e) = text[start..].find("-----END ") else {
            break;
        };
        let Some(close) = text[start + e + 9..].find("-----") else {
            break;
        };
        let end = start + e + 9 + close + 5;
        blocks.push((start, end));
        from = end;
    }
    let seeds = &pki().seeds;
    if blocks.is_empty() || rng.random_bool(0.1) {
        let extra = &seeds[rng.random_range(0..seeds.len())];
        let at = if blocks.is_empty() {
            text.len()
        } else {
            blocks[rng.random_range(0..blocks.len())].0
        };
        let mut out = text.clone();
        out.insert_str(at, extra);
        *data = out.into_bytes();
        return;
    }
    let (start, end) = blocks[rng.random_range(0..blocks.len())];
    let block = &text[start..end];
    let replacement = match rng.random_range(0..6) {
        0..=2 => {
            // Mutate the DER: decode, change bytes, encode again.
            let mut lines = block.lines();
            let header = lines.next().unwrap_or_default().to_string();
            let body: String = lines.clone().filter(|l| !l.starts_with("-----")).collect();
            let footer = block.lines().last().unwrap_or_default().to_string();
            let Ok(mut der) = STANDARD.decode(body.trim()) else {
                return;
            };
            der_mutation(rng, &mut der);
            let b64 = STANDARD.encode(&der);
            let wrapped: Vec<&str> = b64
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            format!("{header}\n{}\n{footer}", wrapped.join("\n"))
        }
        3 => {
            let labels = [
                "CERTIFICATE",
                "CERTIFICATE REQUEST",
                "PRIVATE KEY",
                "EC PRIVATE KEY",
                "X509 CRL",
                "TRUSTED CERTIFICATE",
            ];
            let label = labels[rng.random_range(0..labels.len())];
            let first_end = block.find('\n').unwrap_or(block.len());
            let last_start = block.rfind("-----END ").unwrap_or(block.len());
            let body = block.get(first_end..last_start).unwrap_or_default();
            format!("-----BEGIN {label}-----{body}-----END {label}-----")
        }
        4 => format!("{block}\n{block}"),
        _ => String::new(),
    };
    let mut out = text.clone();
    out.replace_range(start..end, &replacement);
    *data = out.into_bytes();
}

/// ASN.1-minded byte changes: lengths, tags, trailing bytes, truncation.
fn der_mutation(rng: &mut StdRng, der: &mut Vec<u8>) {
    if der.is_empty() {
        der.push(0x30);
        return;
    }
    let i = rng.random_range(0..der.len());
    match rng.random_range(0..7) {
        0 => der[i] ^= 1 << rng.random_range(0..8),
        1 => {
            // A length byte: short form to long form, off by one, huge.
            let choices = [
                0x80,
                0x81,
                0x82,
                0x84,
                0xff,
                0x00,
                der[i].wrapping_add(1),
                der[i].wrapping_sub(1),
            ];
            der[i] = choices[rng.random_range(0..choices.len())];
        }
        2 => {
            let tags = [
                0x30, 0x31, 0x02, 0x03, 0x04, 0x05, 0x06, 0x0c, 0x13, 0x17, 0x18, 0xa0, 0xa3,
            ];
            der[i] = tags[rng.random_range(0..tags.len())];
        }
        3 => der.extend((0..rng.random_range(1..16)).map(|_| rng.random::<u8>())),
        4 => der.truncate(i),
        5 => {
            der.remove(i);
        }
        _ => der.insert(i, rng.random()),
    }
}

#[test]
fn fuzz_pem_and_verification() {
    let run = pem_case;
    let structured = pem_structured;
    let p = pki();
    run_target(&Target {
        name: "pem",
        seeds: p.seeds.iter().map(|s| s.as_bytes().to_vec()).collect(),
        dict: [
            "-----BEGIN CERTIFICATE-----\n",
            "-----END CERTIFICATE-----\n",
            "-----BEGIN PRIVATE KEY-----\n",
            "-----END PRIVATE KEY-----\n",
            "-----BEGIN EC PRIVATE KEY-----\n",
            "-----BEGIN ",
            "-----END ",
            "-----",
            "\r\n",
            "\n\n",
            "Proc-Type: 4,ENCRYPTED\n",
            "MII",
            "==",
            "=",
        ]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect(),
        structured: Some(&structured),
        run: &run,
    });
}

// === watch stream ===

const WATCH_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests?watch=true";

/// The lines a LineBuf must give for `stream` pushed in `chunks`: every complete line
/// ending before the first chunk boundary where an unfinished line is over `limit`, and
/// whether that happened.
fn expected_lines(stream: &[u8], bounds: &[usize], limit: usize) -> (Vec<Vec<u8>>, bool) {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut prev = 0;
    for &b in bounds {
        for i in prev..b {
            if stream[i] == b'\n' {
                lines.push(stream[start..=i].to_vec());
                start = i + 1;
            }
        }
        prev = b;
        if b - start > limit {
            return (lines, true);
        }
    }
    (lines, false)
}

fn watch_case(input: &[u8]) -> Verdict {
    let p = pki();
    if input.len() < 2 {
        return Ok("short".into());
    }
    let limit = [64usize, 512, 4096, 1 << 20][usize::from(input[0] % 4)];
    let stream = &input[2..];
    // Chunk boundaries from the second byte, so a corpus entry replays the same way.
    let mut rng: StdRng = rand::SeedableRng::seed_from_u64(u64::from(input[1]));
    let mut bounds = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        at = (at + 1 + rng.random_range(0..97usize)).min(stream.len());
        bounds.push(at);
    }
    let mut buf = LineBuf::new(limit);
    let mut got = Vec::new();
    let mut overflowed = false;
    let mut pushed = 0;
    for &b in &bounds {
        buf.push(&stream[pushed..b]);
        pushed = b;
        while let Some(line) = buf.take_line() {
            got.push(line.to_vec());
        }
        if buf.overflowed() {
            overflowed = true;
            break;
        }
    }
    let (want, want_overflow) = expected_lines(stream, &bounds, limit);
    if got != want || overflowed != want_overflow {
        return Err(format!(
            "LineBuf gave {} lines (overflow {overflowed}), expected {} (overflow {want_overflow})",
            got.len(),
            want.len()
        ));
    }

    let identity = Identity::BootstrapToken {
        id: "07401b".into(),
    };
    let mut shape = BTreeSet::new();
    for line in got
        .iter()
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
    {
        match decode_line::<CertificateSigningRequest>(line, WATCH_PATH, &identity) {
            Err(e) => {
                let msg = report(&e);
                if !one_clean_line(&msg) {
                    return Err(format!("watch error is not one clean line: {msg}"));
                }
                let _ = (e.is_gone(), e.is_retryable(), e.retry_after(), e.code());
                shape.insert(outcome("err", &msg));
            }
            Ok(WatchEvent::Added(csr) | WatchEvent::Modified(csr) | WatchEvent::Deleted(csr)) => {
                let (decided, approved) = verdict(&csr);
                let name = csr.metadata.name.clone().unwrap_or_default();
                let label = match decided {
                    None => format!("pending:{approved}"),
                    Some(CsrVerdict::Issued { chain_pem }) => {
                        match verify_issued(
                            &chain_pem,
                            &p.node_key,
                            &CertProfile::client(NODE),
                            p.ca_pem.as_bytes(),
                            p.now,
                        ) {
                            Ok(_) => "issued:ok".into(),
                            Err(e) => outcome("issued", &report(&e)),
                        }
                    }
                    Some(CsrVerdict::Denied { reason, message }) => {
                        let e = IssueError::Denied {
                            csr: name,
                            reason,
                            message,
                        };
                        let msg = report(&e);
                        if !one_clean_line(&msg) {
                            return Err(format!(
                                "a deny message reaches a log line unescaped: {msg}"
                            ));
                        }
                        "denied".into()
                    }
                    Some(CsrVerdict::Failed { reason, message }) => {
                        let e = IssueError::Failed {
                            csr: name,
                            reason,
                            message,
                        };
                        let msg = report(&e);
                        if !one_clean_line(&msg) {
                            return Err(format!(
                                "a failure message reaches a log line unescaped: {msg}"
                            ));
                        }
                        "failed".into()
                    }
                };
                shape.insert(label);
            }
            Ok(WatchEvent::Bookmark { .. }) => {
                shape.insert("bookmark".into());
            }
            Ok(WatchEvent::ErrorOther(_)) => {
                // An ERROR whose object is not a Status: the watch loop skips it (the
                // server ends the stream after it), so only its decoding is checked.
                shape.insert("error-other".into());
            }
            Ok(WatchEvent::ErrorStatus(_)) => {
                return Err("an ERROR event came back as an event, not an error".into())
            }
        }
        // The Lease type reads the same lines (the Lease loop does not watch, but the
        // decoder is generic): it must not panic either.
        let _ = decode_line::<Lease>(line, "/apis/coordination.k8s.io/v1/leases", &identity);
    }
    Ok(format!(
        "{}:{}",
        overflowed,
        shape.into_iter().collect::<Vec<_>>().join(",")
    ))
}

fn csr_event(kind: &str, conditions: &[(&str, &str, &str)], cert: Option<&str>) -> String {
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some("node-csr-abc".into()),
            resource_version: Some("42".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(b"-----BEGIN CERTIFICATE REQUEST-----".to_vec()),
            signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
            ..Default::default()
        },
        status: Some(CertificateSigningRequestStatus {
            certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, reason, message)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".into(),
                        reason: Some(reason.to_string()),
                        message: Some(message.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }),
    };
    serde_json::json!({"type": kind, "object": csr}).to_string()
}

fn watch_seeds() -> Vec<Vec<u8>> {
    let p = pki();
    let streams = [
        format!("{}\n", csr_event("ADDED", &[], None)),
        format!(
            "{}\n{}\n",
            csr_event("ADDED", &[], None),
            csr_event("MODIFIED", &[("Approved", "AutoApproved", "ok")], Some(&p.seeds[0]))
        ),
        format!("{}\r\n\n", csr_event("MODIFIED", &[("Denied", "Policy", "no\nREADY=1\u{1b}[2J")], None)),
        format!("{}\n", csr_event("MODIFIED", &[("Approved", "A", ""), ("Failed", "SignerValidationFailure", "bad\u{202e}x")], None)),
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"too old resource version: 1 (42)\",\"reason\":\"Expired\",\"code\":410}}\n".into(),
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"CertificateSigningRequest\",\"apiVersion\":\"certificates.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"43\"},\"spec\":{\"request\":\"\",\"signerName\":\"\"}}}\n".into(),
        "\n\n   \n{\"type\":\"DELETED\"}\n".into(),
    ];
    let mut seeds = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        for limit in [1u8, 2, 3] {
            let mut v = vec![limit, i as u8 * 31];
            v.extend_from_slice(s.as_bytes());
            seeds.push(v);
        }
    }
    seeds
}

#[test]
fn fuzz_watch_stream_decoder() {
    let run = watch_case;
    run_target(&Target {
        name: "watch",
        seeds: watch_seeds(),
        dict: [
            "\"type\":",
            "\"ADDED\"",
            "\"MODIFIED\"",
            "\"DELETED\"",
            "\"BOOKMARK\"",
            "\"ERROR\"",
            "\"object\":",
            "\"status\":",
            "\"conditions\":",
            "\"certificate\":",
            "\"Approved\"",
            "\"Denied\"",
            "\"Failed\"",
            "\"True\"",
            "\"code\":",
            "410",
            "-1",
            "65536",
            "4294967296",
            "\n",
            "\r\n",
            "\\u0000",
            "\\ud800",
            "\\n",
            "null",
            "{}",
            "[]",
            "1e999",
            "\"message\":",
            "\"reason\":",
            "\"metadata\":",
            "\"resourceVersion\":",
            "LS0tLS1CRUdJTi",
        ]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect(),
        structured: None,
        run: &run,
    });
}

// === regressions of findings that need the whole agent ===

/// Found by `fuzz_pem_and_verification`: the chain was verified as x509-parser reads it,
/// but the server's whole text was installed, and read back on restart by `split_pem`,
/// which reads PEM differently: here an unterminated block (mid-line: x509-parser skips
/// it) after the certificate hid the
/// key, so every restart failed ("holds no PRIVATE KEY block"). Now the verified
/// certificates are installed, re-encoded, and nothing else.
#[tokio::test]
async fn an_issued_chain_with_text_around_it_is_installed_as_verified() {
    use support::{wait_event, Agent, NodeDir};
    use testplane::{Event, Signer, TestPlane};

    let tp = TestPlane::builder()
        .signer(Signer::None)
        .start()
        .await
        .expect("start testplane");
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let agent = Agent::spawn(&node.args("junk-chain"));
    let name = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    wait_event(&mut events, |e| {
        matches!(e, Event::CsrApproved { name: n } if *n == name).then_some(())
    })
    .await;

    // Sign by hand, as an outside signer would, and put text around the certificate.
    let mut csr = tp.csr(&name).unwrap();
    let request = x509_parser::pem::Pem::iter_from_buffer(&csr.spec.request.0)
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let (_, req) = X509CertificationRequest::from_der(&request).unwrap();
    let spki = req.certification_request_info.subject_pki.raw;
    let now = SystemTime::now();
    let cert = tp
        .sign_client_cert(
            spki,
            "system:node:junk-chain",
            &["system:nodes"],
            now - Duration::from_secs(60),
            now + Duration::from_secs(3600),
            false,
        )
        .unwrap();
    let served = format!("signed by hand\n{cert}see -----BEGIN SIGNATURE----- below\n");
    csr.status.get_or_insert_with(Default::default).certificate =
        Some(ByteString(served.into_bytes()));
    let admin = node.tmp.path().join("admin.conf");
    std::fs::write(&admin, tp.admin_kubeconfig()).unwrap();
    let body = node.tmp.path().join("status.json");
    std::fs::write(&body, serde_json::to_vec(&csr).unwrap()).unwrap();
    let status_path =
        format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status");
    let (ok, out) = support::run(
        "kubectl",
        &[
            "--kubeconfig",
            &support::path(&admin),
            "replace",
            "--raw",
            &status_path,
            "-f",
            &support::path(&body),
        ],
    )
    .await;
    assert!(ok, "kubectl replace --raw: {out}");

    agent.wait_for_log("client certificate installed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    // A restart reuses it; the kubelet's view (Go, through kubectl) reads it too.
    let agent = Agent::spawn(&node.args("junk-chain"));
    agent.wait_for_log("no CSR needed").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let installed = std::fs::read_to_string(node.current()).unwrap();
    let (chain, key) = split_pem(&installed);
    assert_eq!(
        chain,
        canonical_chain_pem(&cert).unwrap(),
        "only the verified certificate"
    );
    assert!(
        key.is_some() && !installed.contains("signed by hand"),
        "{installed}"
    );

    let (ok, out) = support::run(
        "kubectl",
        &[
            "--kubeconfig",
            &support::path(&node.kubeconfig),
            "get",
            "--raw",
            "/version",
        ],
    )
    .await;
    assert!(ok, "kubectl with the kubelet kubeconfig: {out}");
}
