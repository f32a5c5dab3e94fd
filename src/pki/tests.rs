use super::*;
#[allow(unused_imports)]
use crate::pki::CertProfile;
use std::io::Write as _;
use std::process::Command;

/// Generated once with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`;
/// a test fixture, not a credential.
pub(crate) const FIXED_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgVfaXJ6rfRzLYZWXc
B83YqHFAZioVxrgd4RXuoYyBOc2hRANCAASXxwOPYSY01HF5ue96FtRkRQsDULk0
O1bnWPcoboZvfhnKMl3v1rOng242/+m1Tpvvdp3vz6agNim8xo7xP9aI
-----END PRIVATE KEY-----
";

/// Computed independently of this code with openssl and a shell pipeline:
/// `printf '%s|' b64u(SPKI) b64u(CN) b64u(O) b64u(usage)... | openssl dgst -sha512-256 -binary | b64u`.
const FIXED_NAME: &str = "node-csr-rBqEUO3L9uUgZmh5bRNifckk9aNCJqqAIyU6qFITqQE";

fn fixed_key() -> NodeKey {
    NodeKey::from_pem(&PrivateKeyPem::new(FIXED_KEY.to_string())).expect("fixture key parses")
}

fn csr_der(pem: &str) -> Vec<u8> {
    let block = Pem::iter_from_buffer(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(block.label, "CERTIFICATE REQUEST");
    block.contents
}

#[test]
fn csr_name_is_pinned_for_a_fixed_key() {
    assert_eq!(
        csr_name(&fixed_key(), &CertProfile::client("worker-1")),
        FIXED_NAME
    );
}

#[test]
fn csr_name_is_deterministic_per_key_and_node() {
    let key = NodeKey::generate().unwrap();
    let again = NodeKey::from_pem(&key.to_pem()).unwrap();
    assert_eq!(
        csr_name(&key, &CertProfile::client("n1")),
        csr_name(&again, &CertProfile::client("n1"))
    );
    assert_ne!(
        csr_name(&key, &CertProfile::client("n1")),
        csr_name(&key, &CertProfile::client("n2"))
    );
    let other = NodeKey::generate().unwrap();
    assert_ne!(
        csr_name(&key, &CertProfile::client("n1")),
        csr_name(&other, &CertProfile::client("n1"))
    );
    let name = csr_name(&key, &CertProfile::client("n1"));
    assert!(name.starts_with("node-csr-"));
    // 32-byte digest, unpadded base64url: 43 characters, a valid object name charset.
    assert_eq!(name.len(), "node-csr-".len() + 43);
}

/// `openssl ec -in FIXED_KEY`: the same key in the SEC1 form the kubelet writes.
pub(crate) const FIXED_KEY_SEC1: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIFX2lyeq30cy2GVl3AfN2KhxQGYqFca4HeEV7qGMgTnNoAoGCCqGSM49
AwEHoUQDQgAEl8cDj2EmNNRxebnvehbUZEULA1C5NDtW51j3KG6Gb34ZyjJd79az
p4NuNv/ptU6b73ad78+moDYpvMaO8T/WiA==
-----END EC PRIVATE KEY-----
";

#[test]
fn sec1_keys_from_the_kubelet_parse_to_the_same_key() {
    let sec1 = NodeKey::from_pem(&PrivateKeyPem::new(FIXED_KEY_SEC1.into())).unwrap();
    assert_eq!(sec1.public_key_der(), fixed_key().public_key_der());
    assert_eq!(
        csr_name(&sec1, &CertProfile::client("worker-1")),
        FIXED_NAME
    );
    let broken = FIXED_KEY_SEC1.replace("MHcCAQEE", "MHcCAQIE");
    assert!(NodeKey::from_pem(&PrivateKeyPem::new(broken)).is_err());
}

#[test]
fn private_key_debug_is_redacted() {
    let pem = fixed_key().to_pem();
    let shown = format!("{pem:?} {:?}", fixed_key());
    assert!(!shown.contains("MIG"), "{shown}");
    assert_eq!(format!("{pem:?}"), "PrivateKeyPem(<redacted>)");
}

#[test]
fn key_round_trips_and_non_p256_is_refused() {
    let key = NodeKey::generate().unwrap();
    let back = NodeKey::from_pem(&key.to_pem()).unwrap();
    assert_eq!(key.public_key_der(), back.public_key_der());
    let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let err = NodeKey::from_pem(&PrivateKeyPem::new(ed.serialize_pem())).unwrap_err();
    assert!(matches!(err, PkiError::UnsupportedKey), "{err}");
    let err = NodeKey::from_pem(&PrivateKeyPem::new("garbage".into())).unwrap_err();
    assert!(matches!(err, PkiError::KeyParse(_)), "{err}");
}

#[test]
fn csr_has_node_subject_our_key_and_no_extensions() {
    let key = NodeKey::generate().unwrap();
    let pem = csr_pem(&key, &CertProfile::client("worker-1")).unwrap();
    let der = csr_der(&pem);
    let (_, csr) = X509CertificationRequest::from_der(&der).unwrap();
    csr.verify_signature().unwrap();
    let info = &csr.certification_request_info;
    assert_eq!(
        info.subject.to_string(),
        "O=system:nodes, CN=system:node:worker-1"
    );
    assert_eq!(info.subject_pki.raw, key.public_key_der().as_slice());
    assert!(csr.requested_extensions().is_none());
}

#[test]
fn csr_matches_only_our_key_and_node() {
    let key = NodeKey::generate().unwrap();
    let pem = csr_pem(&key, &CertProfile::client("worker-1")).unwrap();
    assert!(csr_matches_key(
        pem.as_bytes(),
        &key,
        &CertProfile::client("worker-1")
    ));
    assert!(csr_matches_key(
        &csr_der(&pem),
        &key,
        &CertProfile::client("worker-1")
    ));
    assert!(!csr_matches_key(
        pem.as_bytes(),
        &key,
        &CertProfile::client("worker-2")
    ));
    let other = NodeKey::generate().unwrap();
    assert!(!csr_matches_key(
        pem.as_bytes(),
        &other,
        &CertProfile::client("worker-1")
    ));
    assert!(!csr_matches_key(
        b"not a csr",
        &key,
        &CertProfile::client("worker-1")
    ));
    // A flipped bit in the signature breaks the self-signature.
    let mut der = csr_der(&pem);
    let last = der.len() - 1;
    der[last] ^= 1;
    assert!(!csr_matches_key(
        &der,
        &key,
        &CertProfile::client("worker-1")
    ));
}

/// Found by tests/local/fuzz.rs: a request with bytes after it matched (the rest was ignored);
/// the API server's Go parser refuses one, so such an object is never ours to adopt.
#[test]
fn a_csr_with_bytes_after_it_does_not_match() {
    let key = NodeKey::generate().unwrap();
    let profile = CertProfile::client("worker-1");
    let mut der = csr_der(&csr_pem(&key, &profile).unwrap());
    assert!(csr_matches_key(&der, &key, &profile));
    der.push(0);
    assert!(!csr_matches_key(&der, &key, &profile));
}

/// STYLE rule 19: an independent implementation accepts our request.
#[test]
fn openssl_verifies_our_csr() {
    let key = fixed_key();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(
        csr_pem(&key, &CertProfile::client("worker-1"))
            .unwrap()
            .as_bytes(),
    )
    .unwrap();
    let out = Command::new("openssl")
        .args(["req", "-verify", "-noout", "-subject", "-in"])
        .arg(file.path())
        .output()
        .expect("openssl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("verify OK") || text.contains("Certificate request self-signature verify OK"),
        "{text}"
    );
    assert!(
        text.contains("O = system:nodes, CN = system:node:worker-1"),
        "{text}"
    );
}

#[test]
fn split_pem_separates_chain_and_key() {
    let key = fixed_key().to_pem();
    let chain = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
                 -----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n";
    let (certs, k) = split_pem(&format!("{chain}{}", key.as_str()));
    assert_eq!(certs, chain);
    assert_eq!(k.unwrap(), key);
    let (certs, k) = split_pem(chain);
    assert_eq!(certs, chain);
    assert!(k.is_none());
    let ec = "-----BEGIN EC PRIVATE KEY-----\nCCCC\n-----END EC PRIVATE KEY-----\n";
    assert_eq!(split_pem(ec).1.unwrap().as_str(), ec);
}

/// Found by tests/local/fuzz.rs: a `-----BEGIN` without its `-----END` (here mid-line, where
/// x509-parser does not see it) stopped the scan, so a key after it was never found.
#[test]
fn split_pem_skips_a_block_that_never_ends() {
    let key = fixed_key().to_pem();
    let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let text = format!(
        "{cert}see -----BEGIN SIGNATURE----- below\n{}",
        key.as_str()
    );
    let (certs, k) = split_pem(&text);
    assert_eq!(certs, cert);
    assert_eq!(k.unwrap(), key);
}

#[test]
fn parse_cert_chain_needs_a_certificate() {
    assert!(matches!(parse_cert_chain(""), Err(PkiError::NoCertificate)));
    assert!(matches!(
        parse_cert_chain(FIXED_KEY),
        Err(PkiError::NoCertificate)
    ));
    let bad = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        parse_cert_chain(bad),
        Err(PkiError::CertParse { index: 0, .. })
    ));
}

#[test]
fn negative_timestamps_map_before_the_epoch() {
    assert_eq!(to_system_time(-10), UNIX_EPOCH - Duration::from_secs(10));
    assert_eq!(to_system_time(10), UNIX_EPOCH + Duration::from_secs(10));
}

#[test]
fn cert_info_debug_fingerprints_the_public_key_instead_of_dumping_it() {
    let spki = fixed_key().public_key_der();
    let info = CertInfo {
        serial: "0a1b".into(),
        subject_cn: "system:node:n1".into(),
        subject_o: vec![NODE_GROUP.into()],
        issuer: "CN=kubernetes".into(),
        not_before: UNIX_EPOCH,
        not_after: UNIX_EPOCH + Duration::from_secs(60),
        spki_der: spki.clone(),
        client_auth: true,
        server_auth: false,
        sans: Default::default(),
    };
    let debug = format!("{info:?}");
    let bytes = format!("{spki:?}");
    let hex: String = spki.iter().map(|b| format!("{b:02x}")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&spki);
    for body in [&bytes[1..40], &hex[..40], &b64[..40]] {
        assert!(!debug.contains(body), "{debug}");
    }
    assert!(debug.contains("serial: \"0a1b\""), "{debug}");
    // `openssl pkey -in FIXED_KEY -pubout -outform DER | sha256sum`.
    assert!(
        debug.contains(
            "spki_sha256: \"86f6229fdf8984993f74f3386c01a5be0b043a4ce93bf0d979d755d32f5245c4\""
        ),
        "{debug}"
    );
}
