//! The cluster CA: generation or loading, the serving and admin certificates, CSR parsing
//! and the signing window. Pure certificate work; the only IO is `load_or_create`. The
//! per-signer rules are `signers.rs`; *whether* to sign is `controllers.rs`.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber, SubjectPublicKeyInfo,
};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};

/// How far the kubelet-client signer backdates notBefore (kube-controller-manager uses 5 min).
pub const BACKDATE: Duration = Duration::from_secs(300);
/// Below this lifetime the signer does not shorten notAfter by the backdate (like the real one).
pub const SHORT_CERT: Duration = Duration::from_secs(8 * 3600);
/// Lifetime of the CA, the serving certificate and the admin client certificate.
const LONG: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("rcgen: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("CA certificate: {0}")]
    BadCa(String),
}

/// The cluster certificate authority (ECDSA P-256).
pub struct Ca {
    key: KeyPair,
    cert_pem: String,
    cert_der: Vec<u8>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

// === impl Ca ===

impl Ca {
    /// A fresh self-signed CA named `cn`, valid from now (to the second) for ten years. A
    /// fresh CA thereby also clamps the signer's backdate during a short test run.
    pub fn generate(cn: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let now = crate::wall_now();
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(cn, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = (now - Duration::from_secs(1)).into();
        params.not_after = (now + LONG).into();
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?;
        Ca::from_parts(cert.pem(), key)
    }

    /// Load `ca.crt`/`ca.key` from `dir`, or generate and write them (0600 key).
    pub fn load_or_create(dir: &Path) -> Result<Ca, PkiError> {
        let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
        let io = |p: &Path| {
            let path = p.display().to_string();
            move |source| PkiError::Io { path, source }
        };
        if crt.exists() && key.exists() {
            let cert_pem = std::fs::read_to_string(&crt).map_err(io(&crt))?;
            let key_pem = std::fs::read_to_string(&key).map_err(io(&key))?;
            return Ca::from_parts(cert_pem, KeyPair::from_pem(&key_pem)?);
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let ca = Ca::generate("kubernetes")?;
        std::fs::write(&crt, &ca.cert_pem).map_err(io(&crt))?;
        write_private(&key, &ca.key.serialize_pem()).map_err(io(&key))?;
        Ok(ca)
    }

    fn from_parts(cert_pem: String, key: KeyPair) -> Result<Ca, PkiError> {
        let der = pem_blocks(cert_pem.as_bytes(), "CERTIFICATE")
            .into_iter()
            .next()
            .ok_or_else(|| PkiError::BadCa("no CERTIFICATE block".into()))?;
        let (_, x) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| PkiError::BadCa(e.to_string()))?;
        let not_before = to_system(x.validity().not_before.timestamp());
        let not_after = to_system(x.validity().not_after.timestamp());
        Ok(Ca {
            key,
            cert_pem,
            cert_der: der,
            not_before,
            not_after,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA's private key (PKCS#8 PEM), for a signer that runs outside this process.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    fn issuer(&self) -> Result<Issuer<'static, &KeyPair>, PkiError> {
        Ok(Issuer::from_ca_cert_der(
            &self.cert_der.clone().into(),
            &self.key,
        )?)
    }

    /// Sign `spki_der` with the given subject and validity; returns the certificate PEM.
    pub fn issue(&self, spki_der: &[u8], spec: &LeafSpec) -> Result<String, PkiError> {
        let public = SubjectPublicKeyInfo::from_der(spki_der)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&spec.cn, &spec.orgs);
        params.subject_alt_names = spec.sans.clone();
        params.not_before = spec.not_before.into();
        params.not_after = spec.not_after.into();
        params.serial_number = Some(random_serial());
        params.key_usages = spec.key_usages.clone();
        params.extended_key_usages = spec.ekus.clone();
        params.use_authority_key_identifier_extension = true;
        if spec.explicit_not_ca {
            params.is_ca = IsCa::ExplicitNoCa;
        }
        Ok(params.signed_by(&public, &self.issuer()?)?.pem())
    }

    /// A fresh key and a certificate for it; returns (cert PEM, key PEM).
    pub fn issue_with_new_key(&self, spec: &LeafSpec) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let cert = self.issue(&rcgen::PublicKeyData::subject_public_key_info(&key), spec)?;
        Ok((cert, key.serialize_pem()))
    }

    /// The serving certificate for 127.0.0.1, ::1 and localhost; returns (cert PEM, key PEM).
    pub fn serving(&self) -> Result<(String, String), PkiError> {
        let now = crate::wall_now();
        self.issue_with_new_key(&LeafSpec {
            cn: "kube-apiserver".into(),
            orgs: vec![],
            sans: vec![
                SanType::IpAddress([127, 0, 0, 1].into()),
                SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()),
                SanType::DnsName("localhost".try_into()?),
                SanType::DnsName("kubernetes".try_into()?),
                SanType::DnsName("kubernetes.default.svc".try_into()?),
            ],
            not_before: clamp_before(now - BACKDATE, self.not_before),
            not_after: self.not_after,
            key_usages: vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ],
            ekus: vec![ExtendedKeyUsagePurpose::ServerAuth],
            explicit_not_ca: false,
        })
    }

    /// A client certificate (fresh key) for `cn` in groups `orgs`; returns (cert PEM, key PEM).
    pub fn client(&self, cn: &str, orgs: &[&str]) -> Result<(String, String), PkiError> {
        let now = crate::wall_now();
        self.issue_with_new_key(&LeafSpec::client(
            cn,
            orgs.iter().map(|s| s.to_string()).collect(),
            clamp_before(now - BACKDATE, self.not_before),
            self.not_after,
        ))
    }
}

/// What goes into an issued leaf certificate.
pub struct LeafSpec {
    pub cn: String,
    pub orgs: Vec<String>,
    pub sans: Vec<SanType>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub key_usages: Vec<KeyUsagePurpose>,
    pub ekus: Vec<ExtendedKeyUsagePurpose>,
    /// Emit basicConstraints CA:FALSE (kube-controller-manager's signer does; rcgen omits
    /// the extension for a leaf otherwise).
    pub explicit_not_ca: bool,
}

impl LeafSpec {
    /// A client-auth leaf like the kube-apiserver-client(-kubelet) signers issue.
    pub fn client(cn: &str, orgs: Vec<String>, nb: SystemTime, na: SystemTime) -> LeafSpec {
        LeafSpec {
            cn: cn.to_string(),
            orgs,
            sans: vec![],
            not_before: nb,
            not_after: na,
            key_usages: vec![KeyUsagePurpose::DigitalSignature],
            ekus: vec![ExtendedKeyUsagePurpose::ClientAuth],
            explicit_not_ca: false,
        }
    }
}

/// The validity window the kubelet-client signer uses: notBefore = now - backdate (5 min in
/// kube-controller-manager; never before the CA's notBefore); notAfter = now + lifetime for
/// short certificates (< 8 h), else now + lifetime - backdate; never after the CA's notAfter.
pub fn signing_window(
    now: SystemTime,
    lifetime: Duration,
    backdate: Duration,
    ca: &Ca,
) -> (SystemTime, SystemTime) {
    let nb = clamp_before(now - backdate, ca.not_before);
    let na = if lifetime < SHORT_CERT {
        now + lifetime
    } else {
        now + lifetime.saturating_sub(backdate)
    };
    (nb, na.min(ca.not_after))
}

fn clamp_before(t: SystemTime, floor: SystemTime) -> SystemTime {
    t.max(floor)
}

/// The parts of a PKCS#10 request the API validation and the signer look at.
#[derive(Debug, Clone)]
pub struct ParsedCsr {
    pub cn: String,
    pub orgs: Vec<String>,
    /// Requested DNS subjectAltNames, in request order.
    pub dns: Vec<String>,
    /// Requested IP subjectAltNames, in request order.
    pub ips: Vec<IpAddr>,
    pub email_sans: usize,
    pub uri_sans: usize,
    pub spki_der: Vec<u8>,
}

/// Parse a PEM `CERTIFICATE REQUEST` and check its self-signature; errors read like the
/// apiserver's field errors.
pub fn parse_csr(pem: &[u8]) -> Result<ParsedCsr, String> {
    let der = pem_blocks(pem, "CERTIFICATE REQUEST")
        .into_iter()
        .next()
        .ok_or("PEM block type must be CERTIFICATE REQUEST")?;
    let (_, req) = X509CertificationRequest::from_der(&der)
        .map_err(|e| format!("unable to parse certificate request: {e}"))?;
    req.verify_signature()
        .map_err(|_| "x509: ECDSA verification failure".to_string())?;
    let info = &req.certification_request_info;
    let strs = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        it.filter_map(|a| a.as_str().ok().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let cn = strs(&mut info.subject.iter_common_name())
        .into_iter()
        .next()
        .unwrap_or_default();
    let orgs = strs(&mut info.subject.iter_organization());
    let mut out = ParsedCsr {
        cn,
        orgs,
        dns: vec![],
        ips: vec![],
        email_sans: 0,
        uri_sans: 0,
        spki_der: info.subject_pki.raw.to_vec(),
    };
    if let Some(exts) = req.requested_extensions() {
        for ext in exts {
            if let ParsedExtension::SubjectAlternativeName(san) = ext {
                for n in &san.general_names {
                    match n {
                        GeneralName::DNSName(d) => out.dns.push(d.to_string()),
                        GeneralName::IPAddress(b) => out.ips.push(ip_from_bytes(b)?),
                        GeneralName::RFC822Name(_) => out.email_sans += 1,
                        GeneralName::URI(_) => out.uri_sans += 1,
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(out)
}

fn ip_from_bytes(b: &[u8]) -> Result<IpAddr, String> {
    match b.len() {
        4 => Ok(IpAddr::from(<[u8; 4]>::try_from(b).unwrap_or_default())),
        16 => Ok(IpAddr::from(<[u8; 16]>::try_from(b).unwrap_or_default())),
        n => Err(format!(
            "x509: invalid IP address length {n} in subjectAltName"
        )),
    }
}

/// Every DER body of PEM blocks labelled `label` in `pem`.
pub fn pem_blocks(pem: &[u8], label: &str) -> Vec<Vec<u8>> {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .filter_map(Result::ok)
        .filter(|p| p.label == label)
        .map(|p| p.contents)
        .collect()
}

/// Subject CN and O list of a DER certificate.
pub fn cert_subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, x) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = x
        .subject()
        .iter_common_name()
        .find_map(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = x
        .subject()
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some((cn, orgs))
}

/// The serial of a DER certificate, lower-case hex of its DER integer bytes.
pub fn cert_serial(der: &[u8]) -> Option<String> {
    let (_, x) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(x.raw_serial().iter().map(|b| format!("{b:02x}")).collect())
}

fn dn(cn: &str, orgs: &[String]) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    for o in orgs {
        d.push(DnType::OrganizationName, o.as_str());
    }
    d.push(DnType::CommonName, cn);
    d
}

fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    b[0] &= 0x7f;
    b[0] |= 0x01;
    SerialNumber::from_slice(&b)
}

fn to_system(unix: i64) -> SystemTime {
    if unix >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
    }
}

fn write_private(path: &Path, body: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_backdated_and_capped() {
        let ca = Ca::generate("t").unwrap();
        let now = crate::wall_now();
        let (nb, na) = signing_window(now, Duration::from_secs(60), BACKDATE, &ca);
        assert_eq!(nb, ca.not_before, "a fresh CA clamps the backdate");
        let later = now + Duration::from_secs(3600);
        assert_eq!(
            signing_window(later, Duration::from_secs(60), BACKDATE, &ca).0,
            later - BACKDATE
        );
        assert_eq!(na, now + Duration::from_secs(60));
        let (_, na) = signing_window(now, Duration::from_secs(100 * 365 * 86400), BACKDATE, &ca);
        assert_eq!(na, ca.not_after);
        let s = ca
            .issue_with_new_key(&LeafSpec::client("u", vec!["g".into()], nb, na))
            .unwrap();
        let der = pem_blocks(s.0.as_bytes(), "CERTIFICATE").remove(0);
        assert_eq!(cert_subject(&der).unwrap(), ("u".into(), vec!["g".into()]));
    }
}
