use super::*;
use crate::pki::csr_pem;
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateSigningRequestParams,
    DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use std::io::Write as _;
use std::process::Command;

const NODE: &str = "worker-1";

/// A throwaway CA made fresh for each test; nothing is committed.
pub(crate) struct TestCa {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(cn: &str) -> Self {
        Self::signed(cn, None)
    }

    /// A CA certificate, self-signed or (for an intermediate) signed by `parent`.
    fn signed(cn: &str, parent: Option<&TestCa>) -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2040, 1, 1);
        let cert = match parent {
            None => params.self_signed(&key).unwrap(),
            Some(p) => params.signed_by(&key, &p.issuer).unwrap(),
        };
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// Signs `csr` for 2030-01-01..2030-04-01; `edit` may change the certificate params.
    pub fn sign(&self, csr: &str, edit: impl FnOnce(&mut CertificateParams)) -> String {
        let mut req = CertificateSigningRequestParams::from_pem(csr).unwrap();
        req.params.not_before = date_time_ymd(2030, 1, 1);
        req.params.not_after = date_time_ymd(2030, 4, 1);
        req.params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        req.params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        edit(&mut req.params);
        req.signed_by(&self.issuer).unwrap().pem()
    }
}

pub(crate) fn at(rfc3339: &str) -> SystemTime {
    rfc3339.parse::<jiff::Timestamp>().unwrap().into()
}

fn mid() -> SystemTime {
    at("2030-02-01T00:00:00Z")
}

struct Setup {
    ca: TestCa,
    key: NodeKey,
    csr: String,
}

fn setup() -> Setup {
    let key = NodeKey::generate().unwrap();
    let csr = csr_pem(&key, NODE).unwrap();
    Setup {
        ca: TestCa::new("kubernetes"),
        key,
        csr,
    }
}

fn subject(params: &mut CertificateParams, cn: &str, o: &str) {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, o);
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
}

#[test]
fn accepts_a_cert_for_our_key_and_node() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let info = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap();
    assert_eq!(info.subject_cn, "system:node:worker-1");
    assert_eq!(info.subject_o, ["system:nodes"]);
    assert_eq!(info.issuer, "CN=kubernetes");
    assert_eq!(info.not_before, at("2030-01-01T00:00:00Z"));
    assert_eq!(info.not_after, at("2030-04-01T00:00:00Z"));
    assert!(info.client_auth);
    assert!(!info.serial.is_empty());
    assert!(still_valid(&info, mid()));
    // A bundle with another CA first still trusts ours.
    let bundle = format!("{}{}", TestCa::new("other").pem, s.ca.pem);
    verify_issued(&cert, &s.key, NODE, bundle.as_bytes(), mid()).unwrap();
}

#[test]
fn refuses_a_cert_for_another_key() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let other = NodeKey::generate().unwrap();
    let err = verify_issued(&cert, &other, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(matches!(err, VerifyError::WrongKey { .. }), "{err}");
}

#[test]
fn refuses_another_node_or_another_group() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let err = verify_issued(&cert, &s.key, "worker-2", s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "certificate subject is CN=system:node:worker-1, O=system:nodes, \
         expected CN=system:node:worker-2, O=system:nodes"
    );
    let cert = s.ca.sign(&s.csr, |p| {
        subject(p, "system:node:worker-1", "system:masters")
    });
    let err = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(
        matches!(&err, VerifyError::WrongSubject { got, .. } if got.contains("system:masters")),
        "{err}"
    );
}

#[test]
fn refuses_a_cert_from_another_ca() {
    let s = setup();
    let rogue = TestCa::new("kubernetes");
    let cert = rogue.sign(&s.csr, |_| {});
    let err = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(
        matches!(&err, VerifyError::UntrustedIssuer { issuer } if issuer == "CN=kubernetes"),
        "{err}"
    );
    // Appending the rogue CA to the returned chain does not make it trusted.
    let chain = format!("{cert}{}", rogue.pem);
    let err = verify_issued(&chain, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(matches!(err, VerifyError::UntrustedIssuer { .. }), "{err}");
}

#[test]
fn follows_intermediates_in_the_returned_chain() {
    let s = setup();
    let inter = TestCa::signed("kubelet-signer", Some(&s.ca));
    let cert = inter.sign(&s.csr, |_| {});
    let err = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(matches!(err, VerifyError::UntrustedIssuer { .. }), "{err}");
    let chain = format!("{cert}{}", inter.pem);
    let info = verify_issued(&chain, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap();
    assert_eq!(info.issuer, "CN=kubelet-signer");
}

#[test]
fn refuses_a_cert_without_client_auth() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth]
    });
    let err = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingClientAuth { .. }),
        "{err}"
    );
    let cert = s.ca.sign(&s.csr, |p| p.extended_key_usages.clear());
    let err = verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingClientAuth { .. }),
        "{err}"
    );
}

#[test]
fn validity_window_has_five_minutes_of_not_before_tolerance() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let ca = s.ca.pem.as_bytes();
    let ok = |now| verify_issued(&cert, &s.key, NODE, ca, now);
    ok(at("2029-12-31T23:55:00Z")).unwrap();
    let err = ok(at("2029-12-31T23:54:59Z")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "certificate is not valid before 2030-01-01T00:00:00Z, more than 5 minutes ahead of this node's clock (is the clock right? check `timedatectl`)"
    );
    ok(at("2030-03-31T23:59:59Z")).unwrap();
    let err = ok(at("2030-04-01T00:00:00Z")).unwrap_err();
    assert!(matches!(err, VerifyError::Expired { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "certificate expired at 2030-04-01T00:00:00Z"
    );
}

#[test]
fn refuses_garbage() {
    let s = setup();
    let err = verify_issued("nope", &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(matches!(err, VerifyError::Malformed(_)), "{err}");
    let cert = s.ca.sign(&s.csr, |_| {});
    let err = verify_issued(&cert, &s.key, NODE, b"", mid()).unwrap_err();
    assert!(matches!(err, VerifyError::MalformedCa(_)), "{err}");
}

/// STYLE rule 19: openssl agrees that an accepted certificate chains to the CA.
#[test]
fn openssl_verifies_an_accepted_cert() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    verify_issued(&cert, &s.key, NODE, s.ca.pem.as_bytes(), mid()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ca_path, cert_path) = (dir.path().join("ca.pem"), dir.path().join("cert.pem"));
    std::fs::File::create(&ca_path)
        .and_then(|mut f| f.write_all(s.ca.pem.as_bytes()))
        .unwrap();
    std::fs::File::create(&cert_path)
        .and_then(|mut f| f.write_all(cert.as_bytes()))
        .unwrap();
    let attime = jiff::Timestamp::try_from(mid())
        .unwrap()
        .as_second()
        .to_string();
    let out = Command::new("openssl")
        .args([
            "verify",
            "-purpose",
            "sslclient",
            "-attime",
            &attime,
            "-CAfile",
        ])
        .arg(&ca_path)
        .arg(&cert_path)
        .output()
        .expect("openssl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(": OK"), "{text}");
}
