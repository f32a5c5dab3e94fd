//! Fuzz target: the watch stream. `LineBuf` against a reference splitter under random
//! chunking and overflow; each line through `decode_line`, `csr::verdict` and, for an
//! issued chain, `verify_issued`. Every error or server message ends in one clean line.

use std::collections::BTreeSet;

use bootlet::api::watch::{decode_line, LineBuf};
use bootlet::api::Identity;
use bootlet::identity::csr::{verdict, Verdict as CsrVerdict};
use bootlet::identity::issue::IssueError;
use bootlet::pki::verify::verify_issued;
use bootlet::pki::CertProfile;
use bootlet::runtime::report;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, WatchEvent};
use k8s_openapi::ByteString;
use rand::rngs::StdRng;
use rand::Rng;

use super::cluster::{pki, NODE};
use super::engine::{one_clean_line, outcome, Target, Verdict};

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

/// Runs the target within the budget from the environment.
pub fn run() {
    let run = watch_case;
    super::run_target(&Target {
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
