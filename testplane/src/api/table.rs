//! meta.k8s.io/v1 Table responses for `kubectl get` (which asks with `as=Table`), with the
//! real server-side columns. k8s-openapi has no Table type, so this one is built as JSON.

use serde_json::{json, Value};

use super::resources::object_meta;
use crate::store::Kind;

/// kubectl's `duration.HumanDuration`.
pub fn human(secs: i64) -> String {
    if secs < 0 {
        return "<invalid>".into();
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => {
            let s = secs % 60;
            if s == 0 {
                format!("{m}m")
            } else {
                format!("{m}m{s}s")
            }
        }
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => {
            let mm = m % 60;
            if mm == 0 {
                format!("{h}h")
            } else {
                format!("{h}h{mm}m")
            }
        }
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => {
            let hh = h % 24;
            if hh == 0 {
                format!("{d}d")
            } else {
                format!("{d}d{hh}h")
            }
        }
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

fn age(obj: &Value) -> String {
    let ts = object_meta(obj).creation_timestamp.map(|t| t.0);
    match ts {
        Some(t) => human((jiff::Timestamp::now() - t).get_seconds()),
        None => "<unknown>".into(),
    }
}

fn columns(kind: Kind) -> Vec<(&'static str, &'static str)> {
    match kind {
        Kind::Csr => vec![
            ("Name", "string"),
            ("Age", "date"),
            ("SignerName", "string"),
            ("Requestor", "string"),
            ("RequestedDuration", "string"),
            ("Condition", "string"),
        ],
        Kind::Lease => vec![("Name", "string"), ("Holder", "string"), ("Age", "string")],
        Kind::Node => vec![
            ("Name", "string"),
            ("Status", "string"),
            ("Roles", "string"),
            ("Age", "string"),
            ("Version", "string"),
        ],
        Kind::Secret => vec![
            ("Name", "string"),
            ("Type", "string"),
            ("Data", "string"),
            ("Age", "string"),
        ],
        Kind::Namespace => vec![("Name", "string"), ("Status", "string"), ("Age", "string")],
        Kind::ClusterRole => vec![("Name", "string"), ("Created At", "date")],
        Kind::ClusterRoleBinding => vec![("Name", "string"), ("Role", "string"), ("Age", "string")],
    }
}

fn csr_condition(o: &Value) -> String {
    let mut out: Vec<String> = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect();
    if o["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
        && out.iter().any(|c| c == "Approved")
    {
        out.push("Issued".into());
    }
    if out.is_empty() {
        "Pending".into()
    } else {
        out.join(",")
    }
}

fn cells(kind: Kind, o: &Value) -> Vec<Value> {
    let name = o["metadata"]["name"].clone();
    let s = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| "<none>".into())
    };
    match kind {
        Kind::Csr => vec![
            name,
            age(o).into(),
            s(&o["spec"]["signerName"]).into(),
            s(&o["spec"]["username"]).into(),
            o["spec"]["expirationSeconds"]
                .as_i64()
                .map(human)
                .unwrap_or_else(|| "<none>".into())
                .into(),
            csr_condition(o).into(),
        ],
        Kind::Lease => vec![name, s(&o["spec"]["holderIdentity"]).into(), age(o).into()],
        Kind::Node => vec![
            name,
            "Unknown".into(),
            "<none>".into(),
            age(o).into(),
            s(&o["status"]["nodeInfo"]["kubeletVersion"]).into(),
        ],
        Kind::Secret => {
            let n = o["data"].as_object().map(|m| m.len()).unwrap_or(0);
            vec![name, s(&o["type"]).into(), n.into(), age(o).into()]
        }
        Kind::Namespace => vec![name, "Active".into(), age(o).into()],
        Kind::ClusterRole => vec![name, o["metadata"]["creationTimestamp"].clone()],
        Kind::ClusterRoleBinding => {
            vec![
                name,
                format!("ClusterRole/{}", s(&o["roleRef"]["name"])).into(),
                age(o).into(),
            ]
        }
    }
}

/// A Table of `items`; `rv` is the list resourceVersion (None for a single get).
pub fn table(kind: Kind, items: Vec<Value>, rv: Option<u64>) -> Value {
    let cols: Vec<Value> = columns(kind)
        .into_iter()
        .map(|(n, t)| {
            json!({"name": n, "type": t, "format": if n == "Name" { "name" } else { "" }, "description": "", "priority": 0})
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            json!({
                "cells": cells(kind, o),
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            })
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = rv {
        meta["resourceVersion"] = rv.to_string().into();
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": cols, "rows": rows})
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_durations() {
        assert_eq!(super::human(5), "5s");
        assert_eq!(super::human(600), "10m");
        assert_eq!(super::human(3600), "60m");
        assert_eq!(super::human(86400), "24h");
        assert_eq!(super::human(365 * 86400), "365d");
    }
}
