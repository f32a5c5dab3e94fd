//! Fuzz target: PEM chains and certificate verification (`parse_cert_chain`, `split_pem`,
//! `verify_issued` for both profiles, `csr_matches_key`). What verifies must be a leaf the
//! CA signed, with nothing after any certificate, and read back the same once installed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bootlet::pki::verify::{still_valid, verify_issued};
use bootlet::pki::{
    canonical_chain_pem, csr_matches_key, parse_cert_chain, split_pem, CertProfile, NodeKey,
};
use bootlet::runtime::report;
use rand::rngs::StdRng;
use rand::Rng;
use x509_parser::prelude::{FromDer as _, X509Certificate, X509CertificationRequest};

use super::cluster::{pki, NODE};
use super::engine::{one_clean_line, outcome, Target, Verdict};

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

/// Runs the target within the budget from the environment.
pub fn run() {
    let run = pem_case;
    let structured = pem_structured;
    let p = pki();
    super::run_target(&Target {
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
