//! Renders the kubeconfig files the testplane hands out (bootstrap token or embedded client
//! certificate, CA always embedded as certificate-authority-data) and writes them 0600.

use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// A kubeconfig with one cluster named `cluster`, one user and their context; with
/// `auth` null, a cluster-only file (kube-public/cluster-info's shape).
fn render(cluster: &str, server: &str, ca_pem: &str, user: &str, auth: Value) -> String {
    let mut doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server,
            "certificate-authority-data": b64(ca_pem),
        }}],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": format!("{user}@{cluster}"), "context": {"cluster": cluster, "user": user}}],
        "current-context": format!("{user}@{cluster}"),
        "preferences": {},
    });
    if doc["users"][0]["user"].is_null() {
        doc["users"] = json!([]);
        doc["contexts"] = json!([]);
        doc["current-context"] = "".into();
    }
    // Plain scalars, like kubeadm writes: no folded `>-` blocks for the long base64 values.
    let mut opts = serde_saphyr::SerializerOptions::default();
    opts.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(&doc, opts).expect("a JSON value renders as YAML")
}

pub fn with_token(server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    with_token_in(server, ca_pem, "testplane", user, token)
}

/// `with_token` for a cluster named `cluster` (kubeadm names it `kubernetes`).
pub fn with_token_in(server: &str, ca_pem: &str, cluster: &str, user: &str, token: &str) -> String {
    render(cluster, server, ca_pem, user, json!({ "token": token }))
}

pub fn with_cert(server: &str, ca_pem: &str, user: &str, cert: &str, key: &str) -> String {
    with_cert_in(server, ca_pem, "testplane", user, cert, key)
}

/// `with_cert` for a cluster named `cluster`.
pub fn with_cert_in(
    server: &str,
    ca_pem: &str,
    cluster: &str,
    user: &str,
    cert: &str,
    key: &str,
) -> String {
    render(
        cluster,
        server,
        ca_pem,
        user,
        json!({ "client-certificate-data": b64(cert), "client-key-data": b64(key) }),
    )
}

/// Server and CA only, under the cluster name `cluster` (empty: kubeadm's cluster-info).
pub fn cluster_only(server: &str, ca_pem: &str, cluster: &str) -> String {
    render(cluster, server, ca_pem, "", Value::Null)
}

pub fn write(path: &Path, body: &str) -> Result<(), crate::Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| crate::Error::Io {
        path: path.display().to_string(),
        source,
    };
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(body.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_yaml() {
        let y = super::with_token("https://127.0.0.1:1", "CA", "u", "abcdef.0123456789abcdef");
        assert!(y.contains("token: abcdef.0123456789abcdef"), "{y}");
        assert!(y.contains("certificate-authority-data: Q0E="), "{y}");
        assert!(y.contains("current-context: u@testplane"), "{y}");
    }
}
