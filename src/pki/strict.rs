//! Certificates as Go reads them (the kubelet, the API server): the parts a signature does
//! not cover, which x509-parser reads leniently, checked strictly; and a verified chain
//! written again as plain PEM for installing. Pure.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::{parse_cert_chain, PkiError};

/// What is wrong with the parts of a certificate its signature does not cover, if anything:
/// `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue BIT
/// STRING }` with exactly those tags, nothing after them, no unused bits in the signature,
/// and the signatureAlgorithm the TBS `signature` field byte for byte. Go's parser insists
/// on each; x509-parser accepts, for instance, the algorithm's OID under another tag or the
/// signature under a context tag, so the raw TLVs are compared here.
pub(super) fn unsigned_part_problem(der: &[u8]) -> Option<&'static str> {
    use x509_parser::asn1_rs::{Any, FromDer as _};
    /// One TLV: its raw bytes, its parsed form, what follows it.
    fn tlv(input: &[u8]) -> Option<(&[u8], Any<'_>, &[u8])> {
        let (rest, any) = Any::from_der(input).ok()?;
        Some((&input[..input.len() - rest.len()], any, rest))
    }
    const SEQUENCE: u8 = 0x30;
    const BIT_STRING: u8 = 0x03;
    const MALFORMED: &str = "not a certificate SEQUENCE";
    let Some((raw, cert, _)) = tlv(der) else {
        return Some(MALFORMED);
    };
    let parts = tlv(cert.data).and_then(|(tbs_raw, tbs, rest)| {
        let (alg, _, rest) = tlv(rest)?;
        let (sig, sig_value, rest) = tlv(rest)?;
        Some((tbs_raw, tbs, alg, sig, sig_value.data, rest))
    });
    let Some((tbs_raw, tbs, outer_alg, sig, sig_bits, after)) = parts else {
        return Some(MALFORMED);
    };
    if raw[0] != SEQUENCE || tbs_raw[0] != SEQUENCE || outer_alg[0] != SEQUENCE {
        return Some(MALFORMED);
    }
    if sig[0] != BIT_STRING {
        return Some("the signature is not a BIT STRING");
    }
    // The first content byte counts the unused bits of the last one: a signature has none
    // (Go would shift the bits into another signature, which no longer verifies).
    if sig_bits.first() != Some(&0) {
        return Some("the signature BIT STRING has unused bits");
    }
    if !after.is_empty() {
        return Some("fields after the signature");
    }
    // TBSCertificate: [0] EXPLICIT version (optional), serialNumber, signature.
    let inner_alg = tlv(tbs.data).and_then(|(first, _, mut fields)| {
        if first[0] == 0xa0 {
            (_, _, fields) = tlv(fields)?; // the serial number
        }
        Some(tlv(fields)?.0)
    });
    (inner_alg != Some(outer_alg)).then_some("the signature algorithm is not the signed one")
}

/// The certificates of `pem` exactly as [`parse_cert_chain`] reads them, written again as
/// plain PEM (64-column base64, `\n` line ends, nothing before, between or after): what is
/// installed is what was verified, so every PEM reader (ours on restart, Go's in the
/// kubelet) sees the same certificates whatever else the server's text held.
pub fn canonical_chain_pem(pem: &str) -> Result<String, PkiError> {
    let chain = parse_cert_chain(pem)?;
    Ok(certificates_pem(
        chain.iter().map(|(_, der)| der.as_slice()),
    ))
}

/// DER certificates as plain PEM, in order (64-column base64, `\n` line ends).
pub fn certificates_pem<'a>(ders: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut out = String::new();
    for der in ders {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = STANDARD.encode(der);
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}
