//! Validate-before-publish for an issued certificate: our key, our subject, the profile's
//! extended key usage (and SANs), digitalSignature and not a CA, validity at `now`, and its
//! signature chain: through valid CA intermediates to the kubeconfig CA, or, where that
//! chain does not reach it, to which CA it does lead (`Anchor::Other`: only the API server
//! can vouch for that one; `identity::issue` asks it). Pure (the clock is an argument, no
//! network); writing the files is `files`' job.

use std::fmt;
use std::time::{Duration, SystemTime};

use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::{FromDer as _, X509Certificate};

use crate::purpose::Eku;

use super::{certificates_pem, parse_cert_chain, CertInfo, CertProfile, NodeKey, PkiError};

/// How far in the future notBefore may be and still count as valid: signers backdate
/// and node clocks skew.
pub const NOT_BEFORE_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Longest issuer path followed through intermediates in the returned chain.
const MAX_CHAIN_DEPTH: usize = 8;
/// Most certificates an issued chain may hold: the leaf and an intermediate per hop.
pub const MAX_CHAIN_CERTS: usize = MAX_CHAIN_DEPTH + 1;
/// Most DER bytes an issued chain may hold: the chain is the client certificate every TLS
/// handshake sends, and one TLS handshake message carries at most 64 KiB (rustls refuses
/// more; some Go versions too). A longer chain would install fine and then fail every
/// handshake for the certificate's whole lifetime.
pub const MAX_CHAIN_BYTES: usize = 64 * 1024 - 1024;

/// Why an issued certificate was refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("issued certificate chain does not parse")]
    Malformed(#[source] PkiError),
    #[error("issued chain holds {certificates} certificates ({bytes} bytes of DER): more than a TLS handshake carries (at most {MAX_CHAIN_CERTS} certificates and {MAX_CHAIN_BYTES} bytes); a signer returns the leaf and its intermediates")]
    ChainTooLong { certificates: usize, bytes: usize },
    #[error("CA bundle holds no parseable certificate")]
    MalformedCa(#[source] PkiError),
    #[error("certificate {serial} is for another public key than our pending key")]
    WrongKey { serial: String },
    #[error("certificate subject is {got}, expected {expected}")]
    WrongSubject { expected: String, got: String },
    #[error("certificate issuer {issuer:?} does not chain to the kubeconfig CA")]
    UntrustedIssuer { issuer: String },
    #[error("certificate {serial}'s signature does not verify with the key of its issuer {issuer:?}, which the chain or the kubeconfig CA holds")]
    BadSignature { serial: String, issuer: String },
    #[error("certificate {serial} lacks the clientAuth extended key usage")]
    MissingClientAuth { serial: String },
    #[error("certificate {serial} lacks the serverAuth extended key usage")]
    MissingServerAuth { serial: String },
    #[error("certificate names {got}, not the SANs requested ({requested})")]
    WrongSans { requested: String, got: String },
    #[error("certificate {serial} has a key usage extension without digitalSignature")]
    MissingDigitalSignature { serial: String },
    #[error("certificate {serial} is a CA certificate (basic constraints CA:true); a node's client certificate must not be one")]
    LeafIsCa { serial: String },
    #[error("intermediate CA {subject} in the issued chain is not valid now")]
    Intermediate {
        subject: String,
        #[source]
        source: Box<VerifyError>,
    },
    #[error("certificate is not valid before {}, more than 5 minutes ahead of this node's clock (is the clock right? check `timedatectl`)", Rfc3339(*.not_before))]
    NotYetValid { not_before: SystemTime },
    #[error("certificate expired at {}", Rfc3339(*.not_after))]
    Expired { not_after: SystemTime },
}

/// Who vouches for an issued certificate that passed every check of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// Its signature chain reaches the kubeconfig CA.
    ClusterCa,
    /// It does not: the top of the chain the answer holds is signed by `issuer`, a CA the
    /// kubeconfig does not hold (a kubelet-client signer with its own CA, or a CA rotation
    /// in progress). Nothing offline can vouch for it; the API server can.
    Other { issuer: String },
}

/// An issued certificate that passed [`check_issued`].
#[derive(Debug, Clone)]
pub struct Checked {
    /// The leaf.
    pub info: CertInfo,
    pub anchor: Anchor,
    /// The leaf, then each certificate of the answer on its issuer path in order (DER):
    /// what is installed. Certificates of the answer off that path are dropped.
    pub path: Vec<Vec<u8>>,
}

// === impl Checked ===

impl Checked {
    /// [`Checked::path`] as plain PEM: the chain part of the kubelet's file.
    pub fn chain_pem(&self) -> String {
        certificates_pem(self.path.iter().map(Vec::as_slice))
    }
}

/// Checks the leaf of `chain_pem` against our key and the profile (node identity, extended
/// key usage, for a serving certificate every requested SAN, key usage, not a CA), its
/// validity at `now`, then its signature chain: every intermediate followed must be a CA
/// valid at `now`, and a signature that can be checked (its issuer, by name and key
/// identifier, is in the chain or the bundle `ca_pem`) must verify. Says which CA the chain
/// leads to; [`verify_issued`] insists on the kubeconfig CA.
pub fn check_issued(
    chain_pem: &str,
    key: &NodeKey,
    profile: &CertProfile,
    ca_pem: &[u8],
    now: SystemTime,
) -> Result<Checked, VerifyError> {
    let chain = parse_cert_chain(chain_pem).map_err(VerifyError::Malformed)?;
    let ders: Vec<&[u8]> = chain.iter().map(|(_, der)| der.as_slice()).collect();
    let bytes = ders.iter().map(|d| d.len()).sum();
    if ders.len() > MAX_CHAIN_CERTS || bytes > MAX_CHAIN_BYTES {
        return Err(VerifyError::ChainTooLong {
            certificates: ders.len(),
            bytes,
        });
    }
    let (leaf, _) = chain
        .first()
        .ok_or(VerifyError::Malformed(PkiError::NoCertificate))?;
    check_as_requested(leaf, key, profile)?;
    check_leaf_constraints(&parse(ders[0])?, &leaf.serial)?;
    check_validity(leaf, now)?;
    let anchors = ca_certs(ca_pem)?;
    let (anchor, path) = follow_chain(&ders, &anchors, now)?;
    Ok(Checked {
        info: leaf.clone(),
        anchor,
        path: path.into_iter().map(|i| ders[i].to_vec()).collect(),
    })
}

/// The leaf is what we asked for: our key, the profile's subject, its extended key usage
/// and, where the profile sets them, exactly its SANs.
fn check_as_requested(
    leaf: &CertInfo,
    key: &NodeKey,
    profile: &CertProfile,
) -> Result<(), VerifyError> {
    if leaf.spki_der != key.public_key_der() {
        return Err(VerifyError::WrongKey {
            serial: leaf.serial.clone(),
        });
    }
    let (cn, o) = profile.subject();
    if leaf.subject_cn != cn || leaf.subject_o != [o.clone()] {
        return Err(VerifyError::WrongSubject {
            expected: format!("CN={cn}, O={o}"),
            got: format!("CN={}, O={}", leaf.subject_cn, leaf.subject_o.join("+")),
        });
    }
    let spec = profile.spec();
    match spec.eku {
        Eku::ClientAuth if !leaf.client_auth => {
            return Err(VerifyError::MissingClientAuth {
                serial: leaf.serial.clone(),
            })
        }
        Eku::ServerAuth if !leaf.server_auth => {
            return Err(VerifyError::MissingServerAuth {
                serial: leaf.serial.clone(),
            })
        }
        _ => {}
    }
    if spec.sans && leaf.sans != profile.sans {
        return Err(VerifyError::WrongSans {
            requested: format!("{:?}", profile.sans),
            got: format!("{:?}", leaf.sans),
        });
    }
    Ok(())
}

/// [`check_issued`], and the chain must reach the kubeconfig CA; returns the leaf's
/// `CertInfo`.
pub fn verify_issued(
    chain_pem: &str,
    key: &NodeKey,
    profile: &CertProfile,
    ca_pem: &[u8],
    now: SystemTime,
) -> Result<CertInfo, VerifyError> {
    let checked = check_issued(chain_pem, key, profile, ca_pem, now)?;
    match checked.anchor {
        Anchor::ClusterCa => Ok(checked.info),
        Anchor::Other { issuer } => Err(VerifyError::UntrustedIssuer { issuer }),
    }
}

/// True while `now` lies in [notBefore - 5 min, notAfter).
pub fn still_valid(info: &CertInfo, now: SystemTime) -> bool {
    check_validity(info, now).is_ok()
}

fn check_validity(info: &CertInfo, now: SystemTime) -> Result<(), VerifyError> {
    if info.not_before > now + NOT_BEFORE_TOLERANCE {
        return Err(VerifyError::NotYetValid {
            not_before: info.not_before,
        });
    }
    if now >= info.not_after {
        return Err(VerifyError::Expired {
            not_after: info.not_after,
        });
    }
    Ok(())
}

/// A key usage extension, when present, must allow digitalSignature (what an ECDSA key
/// does in a TLS handshake); basic constraints, when present, must not say CA:true. A
/// duplicated extension is a malformed certificate and fails the check.
fn check_leaf_constraints(leaf: &X509Certificate<'_>, serial: &str) -> Result<(), VerifyError> {
    let signs = match leaf.key_usage() {
        Ok(None) => true,
        Ok(Some(ku)) => ku.value.digital_signature(),
        Err(_) => false,
    };
    if !signs {
        return Err(VerifyError::MissingDigitalSignature {
            serial: serial.to_string(),
        });
    }
    let ca = match leaf.basic_constraints() {
        Ok(None) => false,
        Ok(Some(bc)) => bc.value.ca,
        Err(_) => true,
    };
    if ca {
        return Err(VerifyError::LeafIsCa {
            serial: serial.to_string(),
        });
    }
    Ok(())
}

fn ca_certs(ca_pem: &[u8]) -> Result<Vec<Vec<u8>>, VerifyError> {
    let text = String::from_utf8_lossy(ca_pem);
    let certs = parse_cert_chain(&text).map_err(VerifyError::MalformedCa)?;
    Ok(certs.into_iter().map(|(_, der)| der).collect())
}

/// Follows signatures from the leaf (`chain[0]`) through CA intermediates found in
/// `chain[1..]` until one is signed by an anchor (`Anchor::ClusterCa`), or none of the
/// chain signed the last one reached (`Anchor::Other`, its issuer). Each intermediate on
/// the path must be valid at `now`; of several that fit a hop (a renewed intermediate beside
/// its expired predecessor), a valid one is taken. Returns the path as indices into `chain`.
/// Where the chain stops, a certificate in the chain or the bundle that is the issuer it
/// names (subject and key identifier) but whose key does not verify its signature is a bad
/// signature, not another CA.
fn follow_chain(
    chain: &[&[u8]],
    anchors: &[Vec<u8>],
    now: SystemTime,
) -> Result<(Anchor, Vec<usize>), VerifyError> {
    let anchors = anchors
        .iter()
        .map(|der| parse(der))
        .collect::<Result<Vec<_>, _>>()?;
    let certs = chain
        .iter()
        .map(|der| parse(der))
        .collect::<Result<Vec<_>, _>>()?;
    let mut path = vec![0];
    for _ in 0..MAX_CHAIN_DEPTH {
        let current = &certs[path[path.len() - 1]];
        if anchors.iter().any(|a| signed_by(current, a)) {
            return Ok((Anchor::ClusterCa, path));
        }
        if signed_by(current, current) {
            break; // a root of its own: nothing above it
        }
        match issuer_in_chain(&certs, &path, current, now)? {
            Some(next) => path.push(next),
            None => break,
        }
    }
    let top = &certs[path[path.len() - 1]];
    Ok((other_anchor(top, &anchors, &certs)?, path))
}

/// The index in `certs` of the CA certificate, valid `now` and not yet on `path`, that
/// signed `current`: the next link up. An issuer found only outside its validity is the
/// error (the first such); none at all is `None`.
fn issuer_in_chain(
    certs: &[X509Certificate<'_>],
    path: &[usize],
    current: &X509Certificate<'_>,
    now: SystemTime,
) -> Result<Option<usize>, VerifyError> {
    let mut invalid = None;
    for (i, candidate) in certs.iter().enumerate().skip(1) {
        if path.contains(&i) || !candidate.is_ca() || !signed_by(current, candidate) {
            continue;
        }
        let info = CertInfo::from_x509(candidate);
        match check_validity(&info, now) {
            Ok(()) => return Ok(Some(i)),
            Err(e) => {
                invalid.get_or_insert(VerifyError::Intermediate {
                    subject: candidate.subject().to_string(),
                    source: Box::new(e),
                });
            }
        }
    }
    invalid.map_or(Ok(None), Err)
}

/// The chain ends at `top`, not signed by a cluster CA: [`Anchor::Other`] with its
/// issuer, unless a certificate we hold is that issuer (same name and key id) and the
/// signature does not verify against it.
fn other_anchor(
    top: &X509Certificate<'_>,
    anchors: &[X509Certificate<'_>],
    certs: &[X509Certificate<'_>],
) -> Result<Anchor, VerifyError> {
    let mut named = anchors
        .iter()
        .chain(certs)
        .filter(|c| c.subject().as_raw() == top.issuer().as_raw() && key_ids_match(top, c))
        .peekable();
    if named.peek().is_some() && !named.any(|c| signed_by(top, c)) {
        return Err(VerifyError::BadSignature {
            serial: CertInfo::from_x509(top).serial,
            issuer: top.issuer().to_string(),
        });
    }
    Ok(Anchor::Other {
        issuer: top.issuer().to_string(),
    })
}

/// `cert`'s authority key identifier is `issuer`'s subject key identifier (both present).
fn key_ids_match(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
    let aki = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => a.key_identifier.as_ref(),
            _ => None,
        });
    let ski = issuer
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(k),
            _ => None,
        });
    matches!((aki, ski), (Some(a), Some(s)) if a.0 == s.0)
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, VerifyError> {
    X509Certificate::from_der(der)
        .map(|(_, c)| c)
        .map_err(|source| VerifyError::Malformed(PkiError::CertParse { index: 0, source }))
}

fn signed_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> bool {
    cert.issuer().as_raw() == issuer.subject().as_raw()
        && cert.verify_signature(Some(issuer.public_key())).is_ok()
}

/// Formats a `SystemTime` as RFC 3339 UTC for error messages.
struct Rfc3339(SystemTime);

// === impl Rfc3339 ===

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match jiff::Timestamp::try_from(self.0) {
            Ok(ts) => write!(f, "{ts}"),
            Err(_) => write!(f, "{:?}", self.0),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
