//! Node keys, CSRs and certificate parsing: ECDSA P-256 key generation, the PKCS#10
//! request, client-go's deterministic CSR name, and `CertInfo` from PEM chains.
//! Pure: no IO and no clock (validity checks live in `verify`, the cert dir in `files`).

pub mod files;
pub mod profile;
mod strict;
pub mod verify;

pub use profile::{CertProfile, Purpose, Sans};
use strict::unsigned_part_problem;
pub use strict::{canonical_chain_pem, certificates_pem};

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData as _, SanType};
use sha2::{Digest as _, Sha512_256};
use x509_parser::prelude::{FromDer as _, Pem, X509Certificate, X509CertificationRequest};
use x509_parser::x509::X509Name;

/// The organization every node identity carries.
pub const NODE_GROUP: &str = "system:nodes";
/// Prefix of the node's common name: `system:node:NODE`.
pub const NODE_CN_PREFIX: &str = "system:node:";

/// Errors building keys and CSRs or parsing certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot generate an ECDSA P-256 key")]
    KeyGeneration(#[source] rcgen::Error),
    #[error("private key PEM does not parse as a PKCS#8 key")]
    KeyParse(#[source] rcgen::Error),
    #[error("private key is not ECDSA P-256")]
    UnsupportedKey,
    #[error("cannot build the certificate signing request for node {node:?}")]
    Csr {
        node: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("no CERTIFICATE block in PEM")]
    NoCertificate,
    #[error("PEM block {index} is not valid base64 PEM")]
    Pem {
        index: usize,
        #[source]
        source: x509_parser::error::PEMError,
    },
    #[error("certificate {index} in the chain does not parse")]
    CertParse {
        index: usize,
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::X509Error>,
    },
    /// What Go's `x509.ParseCertificate` (the kubelet, the API server) refuses as
    /// "trailing data": a file with it would be installed and then fail to load.
    #[error("certificate {index} in the chain has {extra} bytes after its end")]
    TrailingData { index: usize, extra: usize },
    /// The parts a certificate's signature does not cover, read as Go reads them (RFC 5280
    /// 4.1.1.2-3): x509-parser reads them leniently, so a certificate it accepts there may
    /// be one the kubelet cannot load. `what` says which part.
    #[error("certificate {index} in the chain is malformed outside its signed part: {what}")]
    OutsideSignature { index: usize, what: &'static str },
}

/// A private key in PEM. Debug is redacted and there is no Display: use `as_str` only to
/// write the key to its 0600 file.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateKeyPem(String);

// === impl PrivateKeyPem ===

impl PrivateKeyPem {
    /// Wraps PEM text read from a key file; not validated here (see `NodeKey::from_pem`).
    pub fn new(pem: String) -> Self {
        Self(pem)
    }

    /// The PEM text, for writing files only.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PrivateKeyPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKeyPem(<redacted>)")
    }
}

/// The node's ECDSA P-256 key pair.
pub struct NodeKey(KeyPair);

// === impl NodeKey ===

impl NodeKey {
    /// A fresh random ECDSA P-256 key.
    pub fn generate() -> Result<Self, PkiError> {
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map(Self)
            .map_err(PkiError::KeyGeneration)
    }

    /// Parses a PKCS#8 `PRIVATE KEY` PEM, or the SEC1 `EC PRIVATE KEY` the kubelet writes
    /// into its kubelet-client-*.pem; refuses keys other than ECDSA P-256.
    pub fn from_pem(pem: &PrivateKeyPem) -> Result<Self, PkiError> {
        let sec1 = Pem::iter_from_buffer(pem.as_str().as_bytes())
            .filter_map(Result::ok)
            .find(|p| p.label == "EC PRIVATE KEY");
        let kp = match sec1 {
            Some(block) => KeyPair::try_from(sec1_p256_to_pkcs8(&block.contents)),
            None => KeyPair::from_pem(pem.as_str()),
        };
        let kp = kp.map_err(PkiError::KeyParse)?;
        if kp.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err(PkiError::UnsupportedKey);
        }
        Ok(Self(kp))
    }

    /// The key as PKCS#8 PEM.
    pub fn to_pem(&self) -> PrivateKeyPem {
        PrivateKeyPem(self.0.serialize_pem())
    }

    /// The PKIX SubjectPublicKeyInfo, DER.
    pub fn public_key_der(&self) -> Vec<u8> {
        self.0.subject_public_key_info()
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NodeKey(ECDSA P-256, <redacted>)")
    }
}

/// Wraps a SEC1 ECPrivateKey (RFC 5915) in a PKCS#8 PrivateKeyInfo for P-256, which is
/// all `ring` parses. A key for another curve then fails to parse, as it should.
fn sec1_p256_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match body.len() {
            n @ 0..=0x7f => out.push(n as u8),
            n @ 0x80..=0xff => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(body);
        out
    }
    // SEQUENCE { OID id-ecPublicKey, OID prime256v1 }
    const ALG_ID: [u8; 21] = [
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
        0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    let mut body = vec![0x02, 0x01, 0x00]; // version 0
    body.extend_from_slice(&ALG_ID);
    body.extend(tlv(0x04, sec1));
    tlv(0x30, &body)
}

/// `(CN, O)` of the node identity: `("system:node:NODE", "system:nodes")`.
pub fn node_subject(node: &str) -> (String, String) {
    (format!("{NODE_CN_PREFIX}{node}"), NODE_GROUP.to_string())
}

/// A PKCS#10 request in PEM, self-signed by `key`, for `profile`: subject O=system:nodes,
/// CN=system:node:NODE, and the profile's DNS and IP SANs (none for the client
/// certificate, which then has no extension request at all).
pub fn csr_pem(key: &NodeKey, profile: &CertProfile) -> Result<String, PkiError> {
    params_for(profile)?
        .serialize_request(&key.0)
        .and_then(|csr| csr.pem())
        .map_err(|source| csr_error(profile, source))
}

/// Subject (O before CN, as Go's pkix.Name writes it, mirroring the kubelet's request) and
/// the profile's DNS and IP SANs: what a request asks for and a placeholder carries.
fn params_for(profile: &CertProfile) -> Result<CertificateParams, PkiError> {
    let (cn, o) = profile.subject();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, o);
    dn.push(DnType::CommonName, cn);
    let mut params = CertificateParams::default();
    params.distinguished_name = dn;
    for name in &profile.sans.dns {
        let name = name
            .clone()
            .try_into()
            .map_err(|source| csr_error(profile, source))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in &profile.sans.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    Ok(params)
}

fn csr_error(profile: &CertProfile, source: rcgen::Error) -> PkiError {
    PkiError::Csr {
        node: profile.node.clone(),
        source,
    }
}

/// A self-signed certificate for `profile`'s subject and SANs, valid from `now` for
/// `lifetime`: what the kubelet itself serves without a signed certificate, so it can
/// start before the first serving CSR is approved. Never trusted by bootlet (it does not
/// chain to the cluster CA), so it is replaced as soon as a signed one is issued.
pub fn self_signed(
    key: &NodeKey,
    profile: &CertProfile,
    now: SystemTime,
    lifetime: Duration,
) -> Result<String, PkiError> {
    let mut params = params_for(profile)?;
    params.not_before = now.into();
    params.not_after = (now + lifetime).into();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params
        .self_signed(&key.0)
        .map(|cert| cert.pem())
        .map_err(|source| csr_error(profile, source))
}

/// client-go's `digestedName`: the CSR name as a function of key, subject and usages (and,
/// for a serving certificate, its SANs, so a new address means a new CSR), so a restarted
/// agent finds its own pending CSR. Deterministic for a key and profile.
pub fn csr_name(key: &NodeKey, profile: &CertProfile) -> String {
    let (cn, o) = profile.subject();
    let sans: Vec<String> = (profile.sans.dns.iter().cloned())
        .chain(profile.sans.ips.iter().map(|ip| ip.to_string()))
        .collect();
    let sans: Vec<&str> = sans.iter().map(String::as_str).collect();
    digested_name(
        &key.public_key_der(),
        &cn,
        &[o.as_str()],
        profile.usages(),
        &sans,
    )
}

fn digested_name(
    spki_der: &[u8],
    cn: &str,
    orgs: &[&str],
    usages: &[&str],
    sans: &[&str],
) -> String {
    let mut hash = Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(URL_SAFE_NO_PAD.encode(data).as_bytes());
        hash.update(b"|");
    };
    write(spki_der);
    write(cn.as_bytes());
    for o in orgs {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    for san in sans {
        write(san.as_bytes());
    }
    format!("node-csr-{}", URL_SAFE_NO_PAD.encode(hash.finalize()))
}

/// True only if `csr` (PEM or DER PKCS#10) carries our public key, the profile's subject
/// CN/O and SANs exactly, and a valid self-signature: the test for adopting an existing CSR.
pub fn csr_matches_key(csr_pem_or_der: &[u8], key: &NodeKey, profile: &CertProfile) -> bool {
    let der = if csr_pem_or_der.starts_with(b"-----BEGIN") {
        match Pem::iter_from_buffer(csr_pem_or_der).next() {
            Some(Ok(pem)) if pem.label.ends_with("CERTIFICATE REQUEST") => pem.contents,
            _ => return false,
        }
    } else {
        csr_pem_or_der.to_vec()
    };
    // Bytes after the request are refused, as Go's parser (the API server's) does.
    let Ok(([], csr)) = X509CertificationRequest::from_der(&der) else {
        return false;
    };
    let info = &csr.certification_request_info;
    let (cn, o) = profile.subject();
    info.subject_pki.raw == key.public_key_der().as_slice()
        && name_values(&info.subject, NameAttr::Cn) == [cn]
        && name_values(&info.subject, NameAttr::O) == [o]
        && requested_sans(&csr) == profile.sans
        && csr.verify_signature().is_ok()
}

/// The DNS and IP SANs a request asks for, sorted (empty when it has none).
fn requested_sans(csr: &X509CertificationRequest<'_>) -> Sans {
    use x509_parser::extensions::ParsedExtension;
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            collect_sans(&san.general_names, &mut dns, &mut ips);
        }
    }
    Sans::new(dns, ips)
}

/// DNS names and IPs (4 or 16 octets) out of a GeneralNames list.
fn collect_sans(
    names: &[x509_parser::extensions::GeneralName<'_>],
    dns: &mut Vec<String>,
    ips: &mut Vec<std::net::IpAddr>,
) {
    use x509_parser::extensions::GeneralName;
    for name in names {
        match name {
            GeneralName::DNSName(d) => dns.push(d.to_string()),
            GeneralName::IPAddress(b) => match b.len() {
                4 => ips.push(std::net::IpAddr::from(
                    <[u8; 4]>::try_from(*b).unwrap_or_default(),
                )),
                16 => ips.push(std::net::IpAddr::from(
                    <[u8; 16]>::try_from(*b).unwrap_or_default(),
                )),
                _ => {}
            },
            _ => {}
        }
    }
}

/// What a client certificate says about itself; safe to log (no key material). Debug
/// shows the public key as a SHA-256 fingerprint, never its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Serial number, lowercase hex of the DER integer bytes.
    pub serial: String,
    /// The subject CN; empty if absent.
    pub subject_cn: String,
    /// Every subject O, in order.
    pub subject_o: Vec<String>,
    /// The issuer DN, RFC 4514-like (`CN=kubernetes`).
    pub issuer: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The PKIX SubjectPublicKeyInfo, DER (compare with `NodeKey::public_key_der`).
    pub spki_der: Vec<u8>,
    /// The extended key usage extension lists id-kp-clientAuth.
    pub client_auth: bool,
    /// The extended key usage extension lists id-kp-serverAuth.
    pub server_auth: bool,
    /// The DNS and IP subject alternative names, sorted.
    pub sans: Sans,
}

// === impl CertInfo ===

impl CertInfo {
    /// Extracts the fields from a parsed certificate.
    pub fn from_x509(cert: &X509Certificate<'_>) -> Self {
        let eku = cert.extended_key_usage().ok().flatten().map(|e| e.value);
        let (client_auth, server_auth) =
            eku.map_or((false, false), |e| (e.client_auth, e.server_auth));
        let (mut dns, mut ips) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            collect_sans(&san.value.general_names, &mut dns, &mut ips);
        }
        Self {
            serial: cert
                .raw_serial()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            subject_cn: name_values(cert.subject(), NameAttr::Cn)
                .into_iter()
                .next()
                .unwrap_or_default(),
            subject_o: name_values(cert.subject(), NameAttr::O),
            issuer: cert.issuer().to_string(),
            not_before: to_system_time(cert.validity().not_before.timestamp()),
            not_after: to_system_time(cert.validity().not_after.timestamp()),
            spki_der: cert.public_key().raw.to_vec(),
            client_auth,
            server_auth,
            sans: Sans::new(dns, ips),
        }
    }
}

impl fmt::Debug for CertInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fingerprint: String = sha2::Sha256::digest(&self.spki_der)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        f.debug_struct("CertInfo")
            .field("serial", &self.serial)
            .field("subject_cn", &self.subject_cn)
            .field("subject_o", &self.subject_o)
            .field("issuer", &self.issuer)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("spki_sha256", &fingerprint)
            .field("client_auth", &self.client_auth)
            .field("server_auth", &self.server_auth)
            .field("sans", &self.sans)
            .finish()
    }
}

/// kubeadm's CA pin: `sha256:` + hex of SHA-256 over the certificate's SubjectPublicKeyInfo.
pub fn spki_pin(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let digest = sha2::Sha256::digest(cert.public_key().raw);
    Some(format!(
        "sha256:{}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// Every [`spki_pin`] of `pem`'s certificates, in order (a CA bundle may hold several).
pub fn ca_pins(pem: &str) -> Vec<String> {
    parse_cert_chain(pem)
        .map(|chain| chain.iter().filter_map(|(_, der)| spki_pin(der)).collect())
        .unwrap_or_default()
}

/// Every CERTIFICATE block of `pem`, in order, with its DER. Other blocks (a private key
/// in a kubelet-client-*.pem) are skipped. Errors if there is none, or one does not parse
/// or has bytes after the certificate (as Go's parser, which the kubelet uses, would).
pub fn parse_cert_chain(pem: &str) -> Result<Vec<(CertInfo, Vec<u8>)>, PkiError> {
    let mut out = Vec::new();
    for (index, block) in Pem::iter_from_buffer(pem.as_bytes()).enumerate() {
        let block = block.map_err(|source| PkiError::Pem { index, source })?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let (rest, cert) = X509Certificate::from_der(&block.contents)
            .map_err(|source| PkiError::CertParse { index, source })?;
        if !rest.is_empty() {
            let extra = rest.len();
            return Err(PkiError::TrailingData { index, extra });
        }
        if let Some(what) = unsigned_part_problem(&block.contents) {
            return Err(PkiError::OutsideSignature { index, what });
        }
        let info = CertInfo::from_x509(&cert);
        out.push((info, block.contents));
    }
    if out.is_empty() {
        return Err(PkiError::NoCertificate);
    }
    Ok(out)
}

/// Splits a kubelet-client-*.pem (chain then key) into the CERTIFICATE blocks, joined
/// with newlines, and the first `*PRIVATE KEY` block. Other blocks, and a `-----BEGIN`
/// without its `-----END`, are dropped.
pub fn split_pem(pem: &str) -> (String, Option<PrivateKeyPem>) {
    let mut certs = String::new();
    let mut key = None;
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = rest[start..].find(&end_marker) else {
            // A block that never ends is skipped, not the end of the file: the blocks
            // after it still count (as Go's pem.Decode, the kubelet's reader, does).
            rest = after;
            continue;
        };
        let block_end = start + end + end_marker.len();
        let block = &rest[start..block_end];
        if label == "CERTIFICATE" {
            certs.push_str(block);
            certs.push('\n');
        } else if label.ends_with("PRIVATE KEY") && key.is_none() {
            key = Some(PrivateKeyPem(format!("{block}\n")));
        }
        rest = &rest[block_end..];
    }
    (certs, key)
}

#[derive(Clone, Copy)]
enum NameAttr {
    Cn,
    O,
}

fn name_values(name: &X509Name<'_>, attr: NameAttr) -> Vec<String> {
    let iter: Box<dyn Iterator<Item = _>> = match attr {
        NameAttr::Cn => Box::new(name.iter_common_name()),
        NameAttr::O => Box::new(name.iter_organization()),
    };
    iter.map(|a| a.as_str().map(str::to_string).unwrap_or_default())
        .collect()
}

fn to_system_time(unix_secs: i64) -> SystemTime {
    if unix_secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix_secs.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(unix_secs.unsigned_abs())
    }
}

#[cfg(test)]
pub(crate) mod tests;
