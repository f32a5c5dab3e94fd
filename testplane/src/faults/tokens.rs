//! Bootstrap-token Secrets as kubeadm writes them, and the faults on them (expiry,
//! deletion); static tokens like kube-apiserver's `--token-auth-file`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use crate::store::{Kind, Store};
use crate::Error;

fn random_chars(n: usize) -> String {
    use rand::Rng;
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut r = rand::rng();
    (0..n)
        .map(|_| A[r.random_range(0..A.len())] as char)
        .collect()
}

/// A fresh bootstrap token `(id, secret)`: `[a-z0-9]{6}`, `[a-z0-9]{16}`.
pub fn random_token() -> (String, String) {
    (random_chars(6), random_chars(16))
}

/// The Secret kubeadm writes for a bootstrap token (`kubeadm token create`): kube-system,
/// `bootstrap.kubernetes.io/token`, both usages, `expiration` (RFC 3339, whole seconds)
/// when `ttl` is given, `auth-extra-groups` when `groups` is not empty.
pub fn token_secret(id: &str, secret: &str, ttl: Option<Duration>, groups: &[&str]) -> Secret {
    let mut data: BTreeMap<String, ByteString> = [
        ("token-id", id.to_string()),
        ("token-secret", secret.to_string()),
        ("usage-bootstrap-authentication", "true".into()),
        ("usage-bootstrap-signing", "true".into()),
        ("description", "bootlet-testplane token".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
    .collect();
    if !groups.is_empty() {
        data.insert(
            "auth-extra-groups".into(),
            ByteString(groups.join(",").into_bytes()),
        );
    }
    if let Some(ttl) = ttl {
        let exp = jiff::Timestamp::now() + ttl;
        let exp = exp.round(jiff::Unit::Second).unwrap_or(exp);
        data.insert(
            "expiration".into(),
            ByteString(exp.to_string().into_bytes()),
        );
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(token_name(id)),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// Store a kubeadm-style bootstrap-token Secret; returns "id.secret".
pub fn create_token(store: &Store, ttl: Option<Duration>, groups: &[&str]) -> String {
    loop {
        let (id, secret) = random_token();
        let s = token_secret(&id, &secret, ttl, groups);
        if store
            .create(Kind::Secret, "kube-system", crate::to_value(&s))
            .is_ok()
        {
            return format!("{id}.{secret}");
        }
    }
}

pub fn token_name(id: &str) -> String {
    let id = id.split('.').next().unwrap_or(id);
    format!("bootstrap-token-{id}")
}

/// Set `expiration` to now (RFC 3339).
pub fn expire_token(store: &Store, id: &str) -> Result<(), Error> {
    use base64::Engine;
    let name = token_name(id);
    let now = jiff::Timestamp::now().to_string();
    store
        .update_with(Kind::Secret, "kube-system", &name, |old| {
            let mut v = old.clone();
            v["data"]["expiration"] = base64::engine::general_purpose::STANDARD.encode(now).into();
            Ok(v)
        })
        .map(drop)
        .map_err(|_| Error::NotFound {
            kind: "Secret",
            name,
        })
}

pub fn delete_token(store: &Store, id: &str) -> Result<(), Error> {
    let name = token_name(id);
    store
        .delete(Kind::Secret, "kube-system", &name)
        .map(drop)
        .map_err(|_| Error::NotFound {
            kind: "Secret",
            name,
        })
}

/// Store a static token as a `testplane/static-token` Secret named after its id.
pub fn add_static_token(store: &Store, token: &str, user: &str, groups: &[&str]) {
    let (id, secret) = token.split_once('.').unwrap_or((token, ""));
    let data = BTreeMap::from([
        ("token-id".to_string(), ByteString(id.as_bytes().to_vec())),
        (
            "token-secret".to_string(),
            ByteString(secret.as_bytes().to_vec()),
        ),
        ("user".to_string(), ByteString(user.as_bytes().to_vec())),
        (
            "groups".to_string(),
            ByteString(groups.join(",").into_bytes()),
        ),
    ]);
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{}{id}", crate::auth::STATIC_TOKEN_PREFIX)),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some(crate::auth::STATIC_TOKEN_TYPE.into()),
        data: Some(data),
        ..Default::default()
    };
    let _ = store.create(Kind::Secret, "kube-system", crate::to_value(&s));
}
