//! No secret in any log line, at the most verbose level with HTTP traces on (`-vv`), in both
//! log formats, through an expired token (401), a denied CSR, a bootstrap and a rotation:
//! not the token secret, not a `PRIVATE KEY` block, not any 40-character slice of the base64
//! body of a key or certificate bootlet holds (the files it wrote, the pending key of the
//! denied CSR, the cluster CA).

use crate::support;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use support::{wait_event, Agent, NodeDir};
use testplane::{Approval, Event, TestPlane, DEFAULT_TOKEN_TTL};

/// The window slid over every base64 body.
const WINDOW: usize = 40;

/// The base64 bodies of every PEM block in `pem`, line breaks removed.
fn pem_bodies(pem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        if line.starts_with("-----BEGIN ") {
            body = Some(String::new());
        } else if line.starts_with("-----END ") {
            out.extend(body.take());
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    out
}

/// Every 40-character slice of every body.
fn windows(bodies: &[String]) -> HashSet<String> {
    let mut set = HashSet::new();
    for body in bodies {
        let b = body.as_bytes();
        for w in b.windows(WINDOW) {
            set.insert(String::from_utf8(w.to_vec()).unwrap());
        }
    }
    set
}

/// The first secret `line` shows, if any: its raw text and its text with escaped line
/// breaks removed (a body logged with `\n` between its lines) are both checked.
fn leak(line: &str, tokens: &[String], slices: &HashSet<String>) -> Option<String> {
    for t in tokens {
        if line.contains(t.as_str()) {
            return Some(format!("the token secret {t}"));
        }
    }
    if line.contains("PRIVATE KEY") {
        return Some("a PRIVATE KEY block".into());
    }
    let joined = line
        .replace("\\r", "")
        .replace("\\n", "")
        .replace(['\r', '\n'], "");
    for text in [line, joined.as_str()] {
        let b = text.as_bytes();
        if b.len() < WINDOW {
            continue;
        }
        for w in b.windows(WINDOW) {
            if let Ok(s) = std::str::from_utf8(w) {
                if slices.contains(s) {
                    return Some(format!("a key or certificate body slice {s}"));
                }
            }
        }
    }
    None
}

fn secret_of(token: &str) -> String {
    token.split_once('.').unwrap().1.to_string()
}

/// Writes `body` to `path` as bootlet itself would have to read it: whole or not at all.
fn replace_file(path: &Path, body: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, body).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Bootstrap through an expired token and a denied CSR, then a rotation, at `verbosity`
/// (`-vv`: bootlet's HTTP traces; `-vvv`: its dependencies' too: hyper, h2, rustls) in
/// `format`; then check every line of the log.
async fn no_secret_in_any_line(format: &str, verbosity: &str) {
    let tp = TestPlane::builder()
        .cert_ttl(Duration::from_secs(4))
        .allow_short_expiration(true)
        .approval(Approval::Manual)
        .start()
        .await
        .expect("start testplane");
    let expired = tp.create_token(Some(DEFAULT_TOKEN_TTL));
    tp.expire_token(expired.split('.').next().unwrap()).unwrap();
    let node = NodeDir::new(&tp.kubeconfig_for_token(&expired));
    let mut events = tp.events();
    let name = format!("secrets-{format}-{}", verbosity.len() - 1);
    let mut args = node.args(&name);
    args.extend(
        [
            verbosity,
            "--log-format",
            format,
            "--csr-backoff-min",
            "1s",
            "--csr-backoff-max",
            "1s",
            "--test-short-lease-interval",
            "--lease-renew-interval",
            "500ms",
            "--lease-duration",
            "2s",
        ]
        .map(String::from),
    );
    // A blank RUST_LOG leaves the level to -vv (the harness sets one otherwise).
    let agent = Agent::spawn_env(&args, &[("RUST_LOG", "")]);

    // 1. The expired token: a 401, logged with the token's id.
    let line = agent.wait_for_log("bootstrap attempt failed").await;
    assert!(line.contains("401"), "{line}");
    // 2. A fresh token; its CSR is denied (with a message that tries to break the line).
    let fresh = tp.create_token(Some(DEFAULT_TOKEN_TTL));
    replace_file(&node.bootstrap, &tp.kubeconfig_for_token(&fresh));
    let denied = wait_event(&mut events, |e| match e {
        Event::CsrCreated { name, .. } => Some(name.clone()),
        _ => None,
    })
    .await;
    let denied_key = std::fs::read_to_string(node.cert_dir.join("kubelet-client.key.tmp"))
        .expect("the pending key of the CSR about to be denied");
    tp.deny_with_message(&denied, "NotToday", "no\nREADY=1")
        .unwrap();
    agent.wait_for_log("was denied").await;
    // 3. The next CSR is approved: bootstrap completes; 4. the short certificate rotates.
    tp.set_approval(Approval::Auto);
    agent.wait_for_log("client certificate installed").await;
    agent.wait_for_log("client certificate rotated").await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");

    // Every key and certificate bootlet holds or held, and the cluster CA.
    let mut pems = vec![denied_key, tp.ca_pem()];
    for entry in std::fs::read_dir(&node.cert_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            pems.push(std::fs::read_to_string(&path).unwrap());
        }
    }
    let bodies: Vec<String> = pems.iter().flat_map(|p| pem_bodies(p)).collect();
    let keys = pems.iter().filter(|p| p.contains("PRIVATE KEY")).count();
    assert!(
        keys >= 3,
        "the denied key and both issued keys were read: {keys}"
    );
    assert!(
        bodies.len() >= 6,
        "keys, certificates and the CA: {}",
        bodies.len()
    );
    let slices = windows(&bodies);
    let tokens = [secret_of(&expired), secret_of(&fresh)];

    let lines: Vec<&str> = log.lines().collect();
    // The log is the verbose one: HTTP traces of the CSR and Lease requests are in it.
    let traces = lines
        .iter()
        .filter(|l| l.contains("TRACE") || l.contains("\"level\":\"TRACE\""))
        .count();
    assert!(
        traces >= 10,
        "HTTP traces are on: {traces} trace lines\n{log}"
    );
    if format == "json" {
        assert!(
            lines.iter().all(|l| l.starts_with('{')),
            "one JSON object per line:\n{log}"
        );
    }
    for line in &lines {
        if let Some(what) = leak(line, &tokens, &slices) {
            panic!("{format} {verbosity} log line shows {what}:\n{line}");
        }
    }
    // The check itself can see a leak: a line with any slice of a body would be caught.
    let planted = format!("cert {}", &bodies[0][5..5 + WINDOW]);
    assert!(leak(&planted, &tokens, &slices).is_some());
    assert!(leak(&format!("Bearer {fresh}"), &tokens, &slices).is_some());
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn no_secret_in_any_text_log_line_with_http_traces() {
    no_secret_in_any_line("text", "-vv").await;
}

#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn no_secret_in_any_json_log_line_with_http_traces() {
    no_secret_in_any_line("json", "-vv").await;
}

/// `-vvv` adds the dependencies' traces (HTTP/2 frames, HPACK, TLS handshake messages):
/// about 25 times the lines, still no secret.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (bash tests/run.sh)"
)]
#[tokio::test]
async fn no_secret_in_any_line_with_dependency_traces() {
    no_secret_in_any_line("text", "-vvv").await;
}
