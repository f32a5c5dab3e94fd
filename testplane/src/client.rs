//! What a client of the testplane needs in benches and tests: a TLS config for one
//! identity, the Lease body a renewing node sends, an object's resourceVersion.

use serde_json::{json, Value};

/// A rustls client config (ring) for tests and benches: trusts only `ca_pem`, presents
/// `cert` (certificate PEM, PKCS#8 key PEM) if given, offers `alpn`. Panics on bad PEM.
pub fn client_tls(ca_pem: &str, cert: Option<(&str, &str)>, alpn: &[&str]) -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for der in crate::pki::pem_blocks(ca_pem.as_bytes(), "CERTIFICATE") {
        roots.add(der.into()).expect("the CA certificate parses");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut cfg = match cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = crate::pki::pem_blocks(cert.as_bytes(), "CERTIFICATE")
                .into_iter()
                .map(Into::into)
                .collect();
            let key = crate::pki::pem_blocks(key.as_bytes(), "PRIVATE KEY")
                .into_iter()
                .next()
                .expect("a PKCS#8 key");
            let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.into());
            builder
                .with_client_auth_cert(chain, key)
                .expect("the client certificate and key match")
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    cfg
}

/// A Lease `kube-node-lease/NAME` held by NAME, renewed now; with `rv`, for a PUT.
pub fn lease_json(name: &str, rv: Option<&str>) -> Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let mut v = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}});
    if let Some(rv) = rv {
        v["metadata"]["resourceVersion"] = rv.into();
    }
    v
}

/// `metadata.resourceVersion` of an object the server returned. Panics without one.
pub fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("the object has a resourceVersion")
        .to_string()
}
