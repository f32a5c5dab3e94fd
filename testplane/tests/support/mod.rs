//! Shared helpers for the testplane integration tests: rustls/reqwest clients for each
//! identity, node keys and CSRs, and bounded event waits.
#![allow(dead_code)]

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use testplane::{Event, TestPlane};

pub const WAIT: Duration = Duration::from_secs(10);
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

pub async fn start() -> TestPlane {
    TestPlane::builder()
        .start()
        .await
        .expect("testplane starts")
}

/// A rustls client config trusting `ca_pem`, optionally presenting a client cert.
pub fn tls(ca_pem: &str, cert: Option<(&str, &str)>, alpn: &[&str]) -> rustls::ClientConfig {
    testplane::client::client_tls(ca_pem, cert, alpn)
}

/// An HTTP client for one identity.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

pub enum Who<'a> {
    Anonymous,
    Token(&'a str),
    Cert(&'a str, &'a str),
}

impl Api {
    pub fn new(tp: &TestPlane, who: Who<'_>) -> Api {
        Api::with_ca(tp, &tp.ca_pem(), who, &["http/1.1"])
    }

    pub fn with_ca(tp: &TestPlane, ca: &str, who: Who<'_>, alpn: &[&str]) -> Api {
        let (cert, token) = match who {
            Who::Anonymous => (None, None),
            Who::Token(t) => (None, Some(t.to_string())),
            Who::Cert(c, k) => (Some((c, k)), None),
        };
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls(ca, cert, alpn))
            .build()
            .unwrap();
        Api {
            http,
            base: tp.url(),
            token,
        }
    }

    pub fn admin(tp: &TestPlane) -> Api {
        let (c, k) = admin_cert(tp);
        Api::new(tp, Who::Cert(&c, &k))
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// (status, JSON body or Null).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut r = self.req(method, path);
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await.expect("request sent");
        let code = resp.status().as_u16();
        let v = resp.json::<Value>().await.unwrap_or(Value::Null);
        (code, v)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }
}

/// The admin client cert/key.
pub fn admin_cert(tp: &TestPlane) -> (String, String) {
    tp.admin_credentials()
}

/// A node key and PEM CSR with the given CN and O.
pub fn node_csr(cn: &str, orgs: &[&str]) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    for o in orgs {
        dn.push(rcgen::DnType::OrganizationName, *o);
    }
    dn.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name = dn;
    let csr = p.serialize_request(&key).unwrap().pem().unwrap();
    (key, csr)
}

pub fn csr_body(name: &str, csr_pem: &str, usages: &[&str], expiration: Option<i64>) -> Value {
    csr_body_for(SIGNER, name, csr_pem, usages, expiration)
}

/// A CSR object for any signer.
pub fn csr_body_for(
    signer: &str,
    name: &str,
    csr_pem: &str,
    usages: &[&str],
    expiration: Option<i64>,
) -> Value {
    let mut v = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(csr_pem),
            "signerName": signer,
            "usages": usages,
        }
    });
    if let Some(e) = expiration {
        v["spec"]["expirationSeconds"] = e.into();
    }
    v
}

pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

pub fn lease_path(ns: &str, name: &str) -> String {
    format!(
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases{}",
        if name.is_empty() {
            String::new()
        } else {
            format!("/{name}")
        }
    )
}

pub fn lease_body(name: &str, rv: Option<&str>) -> Value {
    let mut v = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                 "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()}
    });
    if let Some(rv) = rv {
        v["metadata"]["resourceVersion"] = rv.into();
    }
    v
}

/// Wait for an event matching `f`, or panic naming `what`.
pub async fn wait<T>(
    rx: &mut tokio::sync::broadcast::Receiver<Event>,
    what: &str,
    f: impl FnMut(&Event) -> Option<T>,
) -> T {
    testplane::wait_for(rx, WAIT, f)
        .await
        .unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Join a node the way kubelet TLS bootstrap does: token CSR, auto approval, issued cert.
/// Returns (cert PEM, key PEM).
pub async fn join(tp: &TestPlane, node: &str) -> (String, String) {
    let token = tp.create_token(None);
    let api = Api::new(tp, Who::Token(&token));
    let mut ev = tp.events();
    let (key, csr) = node_csr(&format!("system:node:{node}"), &["system:nodes"]);
    let name = format!("node-csr-{node}");
    let (code, body) = api
        .post(
            CSRS,
            &csr_body(&name, &csr, &["digital signature", "client auth"], None),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    wait(&mut ev, "CsrIssued", |e| {
        matches!(e, Event::CsrIssued { name: n, .. } if *n == name).then_some(())
    })
    .await;
    let cert = tp
        .csr(&name)
        .unwrap()
        .status
        .unwrap()
        .certificate
        .unwrap()
        .0;
    (String::from_utf8(cert).unwrap(), key.serialize_pem())
}
