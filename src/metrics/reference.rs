//! The metrics reference (docs/metrics.md's generated part): every family the registry
//! exports, read back from the exposition itself (name, type, labels, help), with the
//! serving certificate's and `bootlet approve`'s families and every labelled family's
//! series present. tests/local/docs.rs
//! compares it with the file.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::Metrics;
use crate::purpose::Purpose;
use crate::runtime::health::Health;

/// (type, labels, help) by family name.
type Families = BTreeMap<String, (String, Vec<String>, String)>;

/// Every family of a fresh registry, as `/metrics` exports it with the serving certificate on
/// and the Lease renewed by bootlet.
fn families() -> Families {
    let metrics = Metrics::new();
    metrics.profile_series(Purpose::Client);
    metrics.api_request("GET", Some(http::StatusCode::OK));
    metrics.lease_renewal(true, Duration::from_millis(1));
    let mut snap = Health::new(true).snapshot();
    snap.lease.enabled = true;
    let mut text = metrics.render(&snap, SystemTime::UNIX_EPOCH, true);
    // `bootlet approve`'s own families (its /metrics has them instead of the agent's).
    metrics.approver_series(["rule"]);
    metrics.approver_ignored("rule");
    text.extend(metrics.render_approver());
    let mut out = Families::new();
    for line in String::from_utf8_lossy(&text).lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().2 = help.replace("\\\\", "\\");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().0 = kind.to_string();
        } else if let Some((series, labels)) = line.split_once('{') {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| series.strip_suffix(s).filter(|f| out.contains_key(*f)))
                .unwrap_or(series);
            let Some(entry) = out.get_mut(family) else {
                continue;
            };
            for pair in labels.trim_end_matches(|c| c != '}').split(',') {
                let Some((label, _)) = pair.split_once('=') else {
                    continue;
                };
                if label != "le" && !entry.1.iter().any(|l| l == label) {
                    entry.1.push(label.to_string());
                }
            }
        }
    }
    out
}

/// The generated markdown: one table row per family, by name.
pub fn markdown() -> String {
    let mut out =
        String::from("| metric | type | labels | help (as exported) |\n|---|---|---|---|\n");
    for (name, (kind, labels, help)) in families() {
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| `{name}` | {kind} | {labels} | {} |\n",
            help.replace('|', "\\|")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        ));
    }
    out
}
