use super::*;
use crate::pki::csr_pem;
#[allow(unused_imports)]
use crate::pki::CertProfile;
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
        Self::issued(cn, parent, key, |_| {})
    }

    /// A CA certificate for `key`, valid 2020..2040 unless `edit` changes its params.
    fn issued(
        cn: &str,
        parent: Option<&TestCa>,
        key: KeyPair,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Self {
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
        edit(&mut params);
        let cert = match parent {
            None => params.self_signed(&key).unwrap(),
            Some(p) => params.signed_by(&key, &p.issuer).unwrap(),
        };
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// This CA's key under subject `cn` (its own, for a renewed or expired copy of an
    /// intermediate), issued by `parent` with `edit`ed params.
    fn reissued(
        &self,
        cn: &str,
        parent: &TestCa,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Self {
        let key = KeyPair::from_pem(&self.issuer.key().serialize_pem()).unwrap();
        Self::issued(cn, Some(parent), key, edit)
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
    let csr = csr_pem(&key, &CertProfile::client(NODE)).unwrap();
    Setup {
        ca: TestCa::new("kubernetes"),
        key,
        csr,
    }
}

impl Setup {
    /// [`verify_issued`] of `chain` for this node's key as a client, trusting this CA, at
    /// [`mid`].
    fn verify(&self, chain: &str) -> Result<CertInfo, VerifyError> {
        verify_issued(
            chain,
            &self.key,
            &CertProfile::client(NODE),
            self.ca.pem.as_bytes(),
            mid(),
        )
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
    let info = s.verify(&cert).unwrap();
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
    verify_issued(
        &cert,
        &s.key,
        &CertProfile::client(NODE),
        bundle.as_bytes(),
        mid(),
    )
    .unwrap();
}

/// A chain no TLS handshake can carry is refused before it is installed (a 3,000-copy
/// chain under the API's body cap used to be written, and then every handshake failed).
#[test]
fn refuses_a_chain_longer_than_a_handshake_carries() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let with_copies = |n: usize| format!("{cert}{}", s.ca.pem.repeat(n));
    s.verify(&with_copies(MAX_CHAIN_CERTS - 1)).unwrap();
    let err = s.verify(&with_copies(MAX_CHAIN_CERTS)).unwrap_err();
    assert!(
        matches!(err, VerifyError::ChainTooLong { certificates, .. } if certificates == MAX_CHAIN_CERTS + 1),
        "{err}"
    );
    // Few certificates, but too many bytes: a leaf padded with a huge extension.
    let big = s.ca.sign(&s.csr, |p| {
        p.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 99999, 1],
            vec![0u8; MAX_CHAIN_BYTES],
        )]
    });
    let err = s.verify(&big).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::ChainTooLong {
                certificates: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn refuses_a_cert_for_another_key() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let other = NodeKey::generate().unwrap();
    let err = verify_issued(
        &cert,
        &other,
        &CertProfile::client(NODE),
        s.ca.pem.as_bytes(),
        mid(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::WrongKey { .. }), "{err}");
}

#[test]
fn refuses_another_node_or_another_group() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let err = verify_issued(
        &cert,
        &s.key,
        &CertProfile::client("worker-2"),
        s.ca.pem.as_bytes(),
        mid(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "certificate subject is CN=system:node:worker-1, O=system:nodes, \
         expected CN=system:node:worker-2, O=system:nodes"
    );
    let cert = s.ca.sign(&s.csr, |p| {
        subject(p, "system:node:worker-1", "system:masters")
    });
    let err = s.verify(&cert).unwrap_err();
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
    let err = s.verify(&cert).unwrap_err();
    assert!(
        matches!(&err, VerifyError::UntrustedIssuer { issuer } if issuer == "CN=kubernetes"),
        "{err}"
    );
    // Appending the rogue CA to the returned chain does not make it trusted.
    let chain = format!("{cert}{}", rogue.pem);
    let err = s.verify(&chain).unwrap_err();
    assert!(matches!(err, VerifyError::UntrustedIssuer { .. }), "{err}");
}

#[test]
fn follows_intermediates_in_the_returned_chain() {
    let s = setup();
    let inter = TestCa::signed("kubelet-signer", Some(&s.ca));
    let cert = inter.sign(&s.csr, |_| {});
    let err = s.verify(&cert).unwrap_err();
    assert!(matches!(err, VerifyError::UntrustedIssuer { .. }), "{err}");
    let chain = format!("{cert}{}", inter.pem);
    let info = s.verify(&chain).unwrap();
    assert_eq!(info.issuer, "CN=kubelet-signer");
}

#[test]
fn refuses_a_cert_without_client_auth() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth]
    });
    let err = s.verify(&cert).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingClientAuth { .. }),
        "{err}"
    );
    let cert = s.ca.sign(&s.csr, |p| p.extended_key_usages.clear());
    let err = s.verify(&cert).unwrap_err();
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
    let ok = |now| verify_issued(&cert, &s.key, &CertProfile::client(NODE), ca, now);
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
    let err = s.verify("nope").unwrap_err();
    assert!(matches!(err, VerifyError::Malformed(_)), "{err}");
    let cert = s.ca.sign(&s.csr, |_| {});
    let err = verify_issued(&cert, &s.key, &CertProfile::client(NODE), b"", mid()).unwrap_err();
    assert!(matches!(err, VerifyError::MalformedCa(_)), "{err}");
}

/// `openssl verify -purpose sslclient` of `cert` at `now` against `ca`, with `untrusted`
/// intermediates: (accepted, what openssl said).
fn openssl_verify(ca: &str, untrusted: &str, cert: &str, now: SystemTime) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(body.as_bytes()))
            .unwrap();
        path
    };
    let (ca_path, cert_path) = (file("ca.pem", ca), file("cert.pem", cert));
    let attime = jiff::Timestamp::try_from(now)
        .unwrap()
        .as_second()
        .to_string();
    let mut cmd = Command::new("openssl");
    cmd.args([
        "verify",
        "-purpose",
        "sslclient",
        "-attime",
        &attime,
        "-CAfile",
    ])
    .arg(&ca_path);
    if !untrusted.is_empty() {
        cmd.arg("-untrusted").arg(file("untrusted.pem", untrusted));
    }
    let out = cmd.arg(&cert_path).output().expect("openssl runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success() && text.contains(": OK"), text)
}

/// STYLE rule 19: openssl agrees that an accepted certificate chains to the CA.
#[test]
fn openssl_verifies_an_accepted_cert() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    s.verify(&cert).unwrap();
    let (ok, text) = openssl_verify(&s.ca.pem, "", &cert, mid());
    assert!(ok, "{text}");
}

#[test]
fn refuses_a_leaf_that_is_a_ca() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained)
    });
    let err = s.verify(&cert).unwrap_err();
    assert!(matches!(err, VerifyError::LeafIsCa { .. }), "{err}");
    assert!(err.to_string().contains("CA:true"), "{err}");
    // CA:false spelled out is fine.
    let cert = s.ca.sign(&s.csr, |p| p.is_ca = IsCa::ExplicitNoCa);
    s.verify(&cert).unwrap();
}

#[test]
fn refuses_a_key_usage_without_digital_signature() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |p| {
        p.key_usages = vec![KeyUsagePurpose::KeyEncipherment]
    });
    let err = s.verify(&cert).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingDigitalSignature { .. }),
        "{err}"
    );
    // No key usage extension at all restricts nothing (RFC 5280 4.2.1.3).
    let cert = s.ca.sign(&s.csr, |p| p.key_usages.clear());
    s.verify(&cert).unwrap();
    let cert = s.ca.sign(&s.csr, |p| {
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ]
    });
    s.verify(&cert).unwrap();
}

#[test]
fn intermediates_on_the_path_must_be_valid_now() {
    let s = setup();
    let inter = TestCa::signed("kubelet-signer", Some(&s.ca));
    let cert = inter.sign(&s.csr, |_| {});
    let expired = inter.reissued("kubelet-signer", &s.ca, |p| {
        p.not_after = date_time_ymd(2030, 1, 15)
    });
    let chain = format!("{cert}{}", expired.pem);
    let err = s.verify(&chain).unwrap_err();
    assert_eq!(
        crate::runtime::report(&err),
        "intermediate CA CN=kubelet-signer in the issued chain is not valid now: \
         certificate expired at 2030-01-15T00:00:00Z"
    );
    // openssl agrees.
    let (ok, text) = openssl_verify(&s.ca.pem, &expired.pem, &cert, mid());
    assert!(!ok && text.contains("expired"), "{text}");

    let early = inter.reissued("kubelet-signer", &s.ca, |p| {
        p.not_before = date_time_ymd(2030, 3, 1)
    });
    let chain = format!("{cert}{}", early.pem);
    let err = s.verify(&chain).unwrap_err();
    assert!(
        matches!(&err, VerifyError::Intermediate { source, .. }
            if matches!(**source, VerifyError::NotYetValid { .. })),
        "{err}"
    );

    // A renewed intermediate beside its expired predecessor: the valid one is used.
    let chain = format!("{cert}{}{}", expired.pem, inter.pem);
    s.verify(&chain).unwrap();
}

#[test]
fn an_intermediate_that_is_not_a_ca_is_not_followed() {
    let s = setup();
    let inter = TestCa::signed("kubelet-signer", Some(&s.ca));
    let cert = inter.sign(&s.csr, |_| {});
    let not_ca = inter.reissued("kubelet-signer", &s.ca, |p| p.is_ca = IsCa::ExplicitNoCa);
    let chain = format!("{cert}{}", not_ca.pem);
    let err = s.verify(&chain).unwrap_err();
    assert!(matches!(err, VerifyError::UntrustedIssuer { .. }), "{err}");
}

fn serving_profile(ips: &[&str]) -> CertProfile {
    CertProfile::serving(
        NODE,
        crate::pki::Sans::new(
            vec![NODE.to_string()],
            ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        ),
    )
}

#[test]
fn a_serving_certificate_needs_server_auth_and_exactly_the_requested_sans() {
    let key = NodeKey::generate().unwrap();
    let ca = TestCa::new("kubernetes");
    let profile = serving_profile(&["10.0.0.7"]);
    let csr = csr_pem(&key, &profile).unwrap();
    let serving = |p: &mut CertificateParams| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth]
    };
    let cert = ca.sign(&csr, serving);
    let info = verify_issued(&cert, &key, &profile, ca.pem.as_bytes(), mid()).unwrap();
    assert!(info.server_auth && !info.client_auth);
    assert_eq!(
        info.sans, profile.sans,
        "the SANs the signer copied from the request"
    );
    // The same certificate is not a client certificate, nor a serving one for other SANs.
    let err = verify_issued(
        &cert,
        &key,
        &CertProfile::client(NODE),
        ca.pem.as_bytes(),
        mid(),
    )
    .unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingClientAuth { .. }),
        "{err}"
    );
    let err = verify_issued(
        &cert,
        &key,
        &serving_profile(&["10.0.0.8"]),
        ca.pem.as_bytes(),
        mid(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::WrongSans { .. }), "{err}");
    // A client certificate is not a serving one.
    let client = ca.sign(&csr, |_| {});
    let err = verify_issued(&client, &key, &profile, ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingServerAuth { .. }),
        "{err}"
    );
}

#[test]
fn a_serving_request_carries_its_sans_and_adoption_compares_them() {
    let key = NodeKey::generate().unwrap();
    let profile = serving_profile(&["10.0.0.7", "fd00::7"]);
    let pem = csr_pem(&key, &profile).unwrap();
    assert!(crate::pki::csr_matches_key(pem.as_bytes(), &key, &profile));
    assert!(!crate::pki::csr_matches_key(
        pem.as_bytes(),
        &key,
        &serving_profile(&["10.0.0.7"])
    ));
    assert!(!crate::pki::csr_matches_key(
        pem.as_bytes(),
        &key,
        &CertProfile::client(NODE)
    ));
    // A new address names a new CSR; the client CSR name (no SANs) is unchanged by them.
    let name = crate::pki::csr_name(&key, &profile);
    assert_ne!(
        name,
        crate::pki::csr_name(&key, &serving_profile(&["10.0.0.7"]))
    );
    assert_ne!(name, crate::pki::csr_name(&key, &CertProfile::client(NODE)));
    // openssl reads the SAN extension request as we wrote it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("req.pem");
    std::fs::write(&path, &pem).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["req", "-noout", "-text", "-in", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "IP Address:10.0.0.7",
        "IP Address:FD00:0:0:0:0:0:0:7",
        &format!("DNS:{NODE}"),
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

/// The DER of `pem`'s first block.
fn der_of(pem: &str) -> Vec<u8> {
    x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents
}

/// `der` as a CERTIFICATE block, its base64 on one line.
fn pem_of(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
}

/// `pem`'s first block with `extra` bytes appended to its DER.
fn with_trailing(pem: &str, extra: &[u8]) -> String {
    pem_of(&[der_of(pem).as_slice(), extra].concat())
}

/// Asserts that the leaf `der` is refused as malformed outside its signature, for `want`.
fn assert_refused_outside_signature(s: &Setup, der: &[u8], want: &str) {
    let err = s.verify(&pem_of(der)).unwrap_err();
    assert!(
        matches!(
            &err,
            VerifyError::Malformed(PkiError::OutsideSignature { index: 0, what }) if *what == want
        ),
        "{err:?}"
    );
}

/// Found by tests/local/fuzz.rs: a certificate block with bytes after the DER certificate was
/// accepted (x509-parser hands the rest back and it was ignored), then installed; Go's
/// `x509.ParseCertificate` in the kubelet and the API server refuses it ("trailing data").
#[test]
fn refuses_a_certificate_with_bytes_after_its_end() {
    let s = setup();
    let cert = s.ca.sign(&s.csr, |_| {});
    let client = CertProfile::client(NODE);
    for extra in [&[0u8][..], &[0xa7], &[0x30, 0x00]] {
        let leaf = with_trailing(&cert, extra);
        let err = s.verify(&leaf).unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::Malformed(PkiError::TrailingData { index: 0, extra: n }) if n == extra.len()
            ),
            "{err:?}"
        );
        let ca = with_trailing(&s.ca.pem, extra);
        let err = verify_issued(&cert, &s.key, &client, ca.as_bytes(), mid()).unwrap_err();
        assert!(
            matches!(err, VerifyError::MalformedCa(PkiError::TrailingData { .. })),
            "{err:?}"
        );
    }
    // Unpadded, both are fine.
    s.verify(&cert).unwrap();
}

/// Found by tests/local/fuzz.rs: the outer signatureAlgorithm sits outside the signed part, and
/// x509-parser accepted its OID under another tag (IA5String for OBJECT IDENTIFIER), so a
/// certificate Go refuses ("malformed algorithm identifier") verified and was installed.
#[test]
fn refuses_an_outer_signature_algorithm_that_is_not_the_signed_one() {
    let s = setup();
    let mut der = der_of(&s.ca.sign(&s.csr, |_| {}));
    // The outer AlgorithmIdentifier is the last one: ecdsa-with-SHA256's OID TLV.
    let oid = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    let at = der.windows(oid.len()).rposition(|w| w == oid).unwrap();
    der[at] = 0x16; // IA5String
    assert_refused_outside_signature(&s, &der, "the signature algorithm is not the signed one");
}

/// Found by bench/fuzz.sh: the signature BIT STRING under a context tag ([3], 0x83) was
/// accepted too; Go refuses it. So was one claiming unused bits: ring verifies the bytes
/// as they are, Go shifts them first (RightAlign), and the API server would refuse the
/// installed certificate's signature.
#[test]
fn refuses_a_signature_that_is_not_a_bit_string() {
    let s = setup();
    // A signature whose last byte is even, so that claiming one unused bit keeps the
    // padding zero, as DER wants (the ECDSA nonce is random: a few signings suffice).
    let mut der = Vec::new();
    for _ in 0..64 {
        der = der_of(&s.ca.sign(&s.csr, |_| {}));
        if der[der.len() - 1] % 2 == 0 {
            break;
        }
    }
    assert_eq!(
        der[der.len() - 1] % 2,
        0,
        "an even last byte in 64 signatures"
    );
    // The signature is the last TLV; an ECDSA P-256 one is 70 to 72 bytes long.
    let at = (der.len() - 80..der.len())
        .find(|&i| der[i] == 0x03 && usize::from(der[i + 1]) + i + 2 == der.len())
        .unwrap();
    let mut unused_bits = der.clone();
    unused_bits[at + 2] = 1;
    der[at] = 0x83;
    assert_refused_outside_signature(&s, &der, "the signature is not a BIT STRING");
    assert_refused_outside_signature(&s, &unused_bits, "the signature BIT STRING has unused bits");
}

/// [`check_issued`] of `chain` for this node's key as a client, with this CA as the
/// kubeconfig's, at [`mid`].
fn check(s: &Setup, chain: &str) -> Result<Checked, VerifyError> {
    check_issued(
        chain,
        &s.key,
        &CertProfile::client(NODE),
        s.ca.pem.as_bytes(),
        mid(),
    )
}

/// A kubelet-client signer with its own CA (k3s, RKE2, Gardener, a CA rotation): the
/// certificate passes every check of its own and says which CA vouches for it; whatever is
/// wrong with it is still refused, whoever signed it.
#[test]
fn a_cert_from_another_ca_passes_its_own_checks_and_names_that_ca() {
    let s = setup();
    let other = TestCa::new("kubelet-client-ca");
    let cert = other.sign(&s.csr, |_| {});
    let c = check(&s, &cert).unwrap();
    assert_eq!(
        c.anchor,
        Anchor::Other {
            issuer: "CN=kubelet-client-ca".into()
        }
    );
    assert_eq!(c.path, [der_of(&cert)]);
    assert_eq!(c.info.subject_cn, "system:node:worker-1");
    let err = s.verify(&cert).unwrap_err();
    assert!(
        matches!(&err, VerifyError::UntrustedIssuer { issuer } if issuer == "CN=kubelet-client-ca"),
        "verify_issued still insists on the kubeconfig CA: {err}"
    );
    let ours = check(&s, &s.ca.sign(&s.csr, |_| {})).unwrap();
    assert_eq!(ours.anchor, Anchor::ClusterCa);

    let other_key = NodeKey::generate().unwrap();
    let client = CertProfile::client(NODE);
    let err = check_issued(&cert, &other_key, &client, s.ca.pem.as_bytes(), mid()).unwrap_err();
    assert!(matches!(err, VerifyError::WrongKey { .. }), "{err}");
    let err = check_issued(
        &cert,
        &s.key,
        &CertProfile::client("worker-2"),
        s.ca.pem.as_bytes(),
        mid(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::WrongSubject { .. }), "{err}");
    let server_auth = other.sign(&s.csr, |p| {
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth]
    });
    let err = check(&s, &server_auth).unwrap_err();
    assert!(
        matches!(err, VerifyError::MissingClientAuth { .. }),
        "{err}"
    );
    let err = check_issued(
        &cert,
        &s.key,
        &client,
        s.ca.pem.as_bytes(),
        at("2031-01-01T00:00:00Z"),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::Expired { .. }), "{err}");
    let a_ca = other.sign(&s.csr, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained)
    });
    let err = check(&s, &a_ca).unwrap_err();
    assert!(matches!(err, VerifyError::LeafIsCa { .. }), "{err}");
    let err = check(
        &s,
        "-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n",
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::Malformed(_)), "{err}");
}

/// What is installed is the leaf and the certificates of the answer on its issuer path, in
/// order: the other CA's intermediate and root when the signer sends them, never a
/// certificate that signed nothing on the path, nor a copy of the kubeconfig CA.
#[test]
fn what_is_installed_is_the_leaf_and_its_issuer_path() {
    let s = setup();
    let root = TestCa::new("other-root");
    let inter = TestCa::signed("kubelet-client-ca", Some(&root));
    let unrelated = TestCa::new("unrelated");
    let cert = inter.sign(&s.csr, |_| {});
    let answer = format!("{cert}{}{}{}", unrelated.pem, inter.pem, root.pem);
    let c = check(&s, &answer).unwrap();
    assert_eq!(
        c.anchor,
        Anchor::Other {
            issuer: "CN=other-root".into()
        }
    );
    assert_eq!(
        c.path,
        [der_of(&cert), der_of(&inter.pem), der_of(&root.pem)]
    );
    assert_eq!(
        c.chain_pem(),
        crate::pki::canonical_chain_pem(&format!("{cert}{}{}", inter.pem, root.pem)).unwrap()
    );
    // Without the root: the intermediate's issuer is the CA named.
    let c = check(&s, &format!("{cert}{}", inter.pem)).unwrap();
    assert_eq!(
        c.anchor,
        Anchor::Other {
            issuer: "CN=other-root".into()
        }
    );
    assert_eq!(c.path.len(), 2);
    // The kubeconfig CA's own certificate in the answer is not written again.
    let ours = s.ca.sign(&s.csr, |_| {});
    let c = check(&s, &format!("{ours}{}", s.ca.pem)).unwrap();
    assert_eq!((c.anchor, c.path), (Anchor::ClusterCa, vec![der_of(&ours)]));
}

/// A signature is checkable when the chain or the bundle holds the issuer the certificate
/// names by subject and key identifier: one that key does not verify is refused, whoever
/// that issuer is. Without key identifiers a same-named CA may be a new one (a CA
/// rotation keeps the name): that is another CA, for the API server to judge.
#[test]
fn a_signature_its_named_issuer_does_not_verify_is_refused() {
    let s = setup();
    let tamper = |pem: &str| {
        let mut der = der_of(pem);
        let last = der.len() - 1;
        der[last] ^= 0x01;
        pem_of(&der)
    };
    let with_aki =
        |ca: &TestCa| ca.sign(&s.csr, |p| p.use_authority_key_identifier_extension = true);
    let cert = with_aki(&s.ca);
    check(&s, &cert).unwrap();
    let err = check(&s, &tamper(&cert)).unwrap_err();
    assert!(
        matches!(&err, VerifyError::BadSignature { issuer, .. } if issuer == "CN=kubernetes"),
        "{err}"
    );
    let other = TestCa::new("kubelet-client-ca");
    let theirs = tamper(&with_aki(&other));
    let err = check(&s, &format!("{theirs}{}", other.pem)).unwrap_err();
    assert!(matches!(err, VerifyError::BadSignature { .. }), "{err}");
    // Only the leaf's name: nothing offline knows which key should verify it.
    let c = check(&s, &tamper(&with_aki(&other))).unwrap();
    assert!(matches!(c.anchor, Anchor::Other { .. }));
    let c = check(&s, &tamper(&s.ca.sign(&s.csr, |_| {}))).unwrap();
    assert_eq!(
        c.anchor,
        Anchor::Other {
            issuer: "CN=kubernetes".into()
        }
    );
}
