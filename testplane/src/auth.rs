//! Authentication: client certificates (CN user, O groups, verified against the cluster CA
//! after the handshake, like kube-apiserver's x509 authenticator), bootstrap-token Secrets and
//! anonymous requests. It does not authorize (that is `rbac.rs`).

use std::sync::Arc;

use jiff::Timestamp;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use serde_json::Value;

use crate::store::{Kind, Store};

/// Who is asking, as the apiserver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    pub fn in_group(&self, g: &str) -> bool {
        self.groups.iter().any(|x| x == g)
    }

    /// The node name if this is a node identity (`system:node:X` in `system:nodes`).
    pub fn node_name(&self) -> Option<&str> {
        self.name
            .strip_prefix("system:node:")
            .filter(|_| self.in_group("system:nodes"))
    }
}

/// What the TLS layer learnt about the peer's certificate.
#[derive(Debug, Clone)]
pub enum PeerCert {
    None,
    /// Chains to the cluster CA: (CN, O).
    Trusted(String, Vec<String>),
    /// Presented but not issued by the cluster CA (or expired).
    Untrusted(String),
}

/// A bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`, split.
pub fn parse_token(t: &str) -> Option<(&str, &str)> {
    let (id, secret) = t.split_once('.')?;
    let ok = |s: &str, n| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// Why a request is 401.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("invalid bearer token")]
    BadToken,
    #[error("verifying certificate: {0}")]
    BadCert(String),
}

/// Authenticate one request: a trusted client certificate wins, then a bearer token;
/// an untrusted certificate or a bad token is 401; nothing at all is anonymous.
pub fn authenticate(
    store: &Store,
    peer: &PeerCert,
    authorization: Option<&str>,
    now: Timestamp,
) -> Result<UserInfo, AuthError> {
    if let PeerCert::Trusted(cn, orgs) = peer {
        let mut groups = orgs.clone();
        groups.push("system:authenticated".into());
        return Ok(UserInfo {
            name: cn.clone(),
            uid: String::new(),
            groups,
        });
    }
    if let Some(h) = authorization {
        let token = h.strip_prefix("Bearer ").ok_or(AuthError::BadToken)?.trim();
        return token_user(store, token, now).ok_or(AuthError::BadToken);
    }
    if let PeerCert::Untrusted(why) = peer {
        return Err(AuthError::BadCert(why.clone()));
    }
    Ok(UserInfo::anonymous())
}

/// Name prefix and type of the Secrets that hold static tokens (`TestPlane::add_static_token`).
pub const STATIC_TOKEN_PREFIX: &str = "testplane-static-token-";
pub const STATIC_TOKEN_TYPE: &str = "testplane/static-token";

fn token_user(store: &Store, token: &str, now: Timestamp) -> Option<UserInfo> {
    let (id, secret) = parse_token(token)?;
    let Some(s) = store.get(
        Kind::Secret,
        "kube-system",
        &format!("bootstrap-token-{id}"),
    ) else {
        return static_user(store, id, secret);
    };
    if s["type"] != "bootstrap.kubernetes.io/token" {
        return None;
    }
    let field = |k: &str| secret_field(&s, k);
    if field("token-id")? != id || field("token-secret")? != secret {
        return None;
    }
    if field("usage-bootstrap-authentication").as_deref() != Some("true") {
        return None;
    }
    if let Some(exp) = field("expiration") {
        match exp.parse::<Timestamp>() {
            Ok(t) if t > now => {}
            _ => return None,
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    for g in field("auth-extra-groups").unwrap_or_default().split(',') {
        let g = g.trim();
        if !g.is_empty() {
            groups.push(g.to_string());
        }
    }
    groups.push("system:authenticated".into());
    Some(UserInfo {
        name: format!("system:bootstrap:{id}"),
        uid: String::new(),
        groups,
    })
}

/// A static token's user, like kube-apiserver's `--token-auth-file`.
fn static_user(store: &Store, id: &str, secret: &str) -> Option<UserInfo> {
    let s = store.get(
        Kind::Secret,
        "kube-system",
        &format!("{STATIC_TOKEN_PREFIX}{id}"),
    )?;
    let field = |k: &str| secret_field(&s, k);
    if s["type"] != STATIC_TOKEN_TYPE || field("token-secret")? != secret {
        return None;
    }
    let mut groups: Vec<String> = field("groups")
        .unwrap_or_default()
        .split(',')
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect();
    groups.push("system:authenticated".into());
    Some(UserInfo {
        name: field("user")?,
        uid: String::new(),
        groups,
    })
}

/// A Secret's `data[k]` (base64) or `stringData[k]`, decoded.
pub fn secret_field(s: &Value, k: &str) -> Option<String> {
    use base64::Engine;
    if let Some(v) = s["data"][k].as_str() {
        let b = base64::engine::general_purpose::STANDARD.decode(v).ok()?;
        return String::from_utf8(b).ok();
    }
    s["stringData"][k].as_str().map(str::to_string)
}

/// Requests a client certificate and checks the handshake signature, but accepts any chain:
/// trust is decided per request (`PeerCert`) so an unknown CA yields a 401 like kube-apiserver,
/// not a TLS alert.
#[derive(Debug)]
pub struct RequestClientCert {
    pub inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Classify a presented chain with the real verifier.
pub fn classify_peer(verifier: &dyn ClientCertVerifier, chain: &[CertificateDer<'_>]) -> PeerCert {
    let Some((leaf, rest)) = chain.split_first() else {
        return PeerCert::None;
    };
    match verifier.verify_client_cert(leaf, rest, UnixTime::now()) {
        Ok(_) => match crate::pki::cert_subject(leaf) {
            Some((cn, o)) => PeerCert::Trusted(cn, o),
            None => PeerCert::Untrusted("unparsable certificate".into()),
        },
        Err(e) => PeerCert::Untrusted(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shape() {
        assert_eq!(
            parse_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(parse_token("ABCDEF.0123456789abcdef"), None);
        assert_eq!(parse_token("abcdef0123456789abcdef"), None);
        assert_eq!(parse_token("abcde.0123456789abcdef"), None);
    }
}
