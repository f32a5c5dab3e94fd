//! Errors from the API server, classified once: the typed `Error` keeps the server's
//! `Status`, predicates say what it means (401, 403, 404, 409, 410, retryable), and 401/403
//! carry a hint naming the credential that failed. Nothing here sends requests.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use reqwest::{Method, StatusCode};

use super::Identity;

/// Why an exchange got no answer: reqwest's error for the shared clients, hyper's or the
/// socket's for the Lease loop's own connection ([`super::conn`]).
pub type TransportError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong talking to the API server, classified once (STYLE rule 11).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{server}: cannot build the TLS client: {reason}")]
    Setup { server: String, reason: String },
    #[error("{method} {path}: cannot reach the API server as {identity}")]
    Transport {
        method: Method,
        path: String,
        identity: Identity,
        #[source]
        source: TransportError,
    },
    #[error("{method} {path}: HTTP {code} {reason} as {identity}: {message}{hint}", reason = status.reason.as_deref().unwrap_or(""), message = status.message.as_deref().unwrap_or(""), hint = hint(*code, identity))]
    Api {
        method: Method,
        path: String,
        code: u16,
        identity: Identity,
        status: Box<Status>,
        retry_after: Option<Duration>,
    },
    #[error("{method} {path}: response is not the expected JSON")]
    Decode {
        method: Method,
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{method} {path}: response is not the expected protobuf")]
    DecodeProtobuf {
        method: Method,
        path: String,
        #[source]
        source: super::protobuf::ProtoError,
    },
    /// The kubeconfig's exec plugin gave no credential.
    #[error("{server}: no credential from the kubeconfig's exec plugin")]
    Exec {
        server: String,
        #[source]
        source: super::kubeconfig::exec::ExecError,
    },
    #[error("{method} {path}: response larger than {limit} bytes")]
    TooLarge {
        method: Method,
        path: String,
        limit: usize,
    },
}

// === impl Error ===

/// The operator-facing hint for a 401/403, naming the credential that failed.
fn hint(code: u16, identity: &Identity) -> String {
    match (code, identity) {
        (401, Identity::BootstrapToken { id }) => format!(
            " (bootstrap token {id} is expired, deleted or wrong: create a new one with \
             `kubeadm token create` and put it in the bootstrap kubeconfig)"
        ),
        (401, Identity::Token) => " (the token is expired, revoked or from another \
             cluster: for bootlet approve, `kubectl -n bootlet-approver create token \
             bootlet-approver`, or check the pod's service account)"
            .to_string(),
        (401, Identity::ClientCertificate { .. }) => " (the client certificate is not \
             trusted by the API server: is it expired or from another cluster's CA?)"
            .to_string(),
        (401, Identity::ExecPlugin { command }) => format!(
            " (the credential from exec plugin {command} was refused, also after calling the \
             plugin again: is it issuing a credential for this cluster?)"
        ),
        (403, Identity::BootstrapToken { .. }) => " (RBAC: check that the ClusterRoleBinding \
             kubeadm:kubelet-bootstrap grants system:node-bootstrapper to the token's group)"
            .to_string(),
        (403, _) => " (RBAC or the Node authorizer refused this request)".to_string(),
        _ => String::new(),
    }
}

impl Error {
    /// The HTTP status code of an API answer, if this is one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The API's `Status.reason` (e.g. `AlreadyExists`, `Conflict`, `Expired`).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Error::Api { status, .. } => status.reason.as_deref(),
            _ => None,
        }
    }

    pub fn is_unauthorized(&self) -> bool {
        self.code() == Some(401)
    }
    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
    /// 409 because the name is taken (create).
    pub fn is_already_exists(&self) -> bool {
        self.code() == Some(409) && self.reason() == Some("AlreadyExists")
    }
    /// 409 because our resourceVersion is stale (update).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409) && self.reason() != Some("AlreadyExists")
    }
    /// 410: the watch's resourceVersion is too old; relist.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }

    /// The exchange itself failed (connect, TLS, timeout, reset): no answer at all.
    pub fn is_transport(&self) -> bool {
        matches!(self, Error::Transport { .. })
    }

    /// Worth retrying unchanged: the network, 5xx, 429.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Transport { .. } => true,
            Error::Api { code, .. } => *code == 429 || *code >= 500,
            _ => false,
        }
    }

    /// The server answered, but not with something usable: a body over the cap, or not the
    /// JSON or protobuf the request expects. Asking again for the same object gets the same
    /// answer.
    pub fn is_unusable_answer(&self) -> bool {
        matches!(
            self,
            Error::TooLarge { .. } | Error::Decode { .. } | Error::DecodeProtobuf { .. }
        )
    }

    /// The server's `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The `Status` of a non-2xx answer (pure): the server's, protobuf (an answer to a
/// protobuf request; the magic never starts JSON) or JSON, else one made from the code and
/// body; for a redirect, where it pointed.
pub(super) fn answer_status(code: StatusCode, location: Option<String>, body: &[u8]) -> Status {
    let given = |s: &Status| s.code.is_some() || s.reason.is_some() || s.message.is_some();
    match location.filter(|_| code.is_redirection()) {
        Some(location) => redirect_status(code, &location),
        None if body.starts_with(super::protobuf::MAGIC) => super::protobuf::decode_status(body)
            .ok()
            .filter(given)
            .unwrap_or_else(|| synthetic_status(code, b"")),
        None => serde_json::from_slice::<Status>(body)
            .ok()
            .filter(given)
            .unwrap_or_else(|| synthetic_status(code, body)),
    }
}

/// A `Status` for answers that carried none (a proxy's HTML page, an empty 503).
pub(super) fn synthetic_status(code: StatusCode, body: &[u8]) -> Status {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    Status {
        code: Some(i32::from(code.as_u16())),
        reason: code.canonical_reason().map(str::to_string),
        message: Some(if text.is_empty() {
            code.to_string()
        } else {
            text.chars().take(200).collect()
        }),
        status: Some("Failure".to_string()),
        ..Status::default()
    }
}

/// The `Status` for a redirect bootlet did not follow: where it pointed, and why not.
pub(super) fn redirect_status(code: StatusCode, location: &str) -> Status {
    let location: String = location
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    Status {
        code: Some(i32::from(code.as_u16())),
        reason: code.canonical_reason().map(str::to_string),
        message: Some(format!(
            "redirected to {location}; bootlet follows no redirect, so its credentials go \
             only to the kubeconfig's server (check the server URL)"
        )),
        status: Some("Failure".to_string()),
        ..Status::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> Error {
        Error::Api {
            method: Method::POST,
            path: "/x".into(),
            code,
            identity: Identity::BootstrapToken {
                id: "abcdef".into(),
            },
            status: Box::new(Status {
                reason: Some(reason.into()),
                message: Some("m".into()),
                ..Status::default()
            }),
            retry_after: None,
        }
    }

    #[test]
    fn classifies_statuses_once() {
        assert!(api(409, "AlreadyExists").is_already_exists());
        assert!(!api(409, "AlreadyExists").is_conflict());
        assert!(api(409, "Conflict").is_conflict());
        assert!(api(410, "Expired").is_gone());
        assert!(api(503, "ServiceUnavailable").is_retryable());
        assert!(api(429, "TooManyRequests").is_retryable());
        assert!(!api(401, "Unauthorized").is_retryable());
        assert!(!api(403, "Forbidden").is_retryable());
        assert!(!api(500, "InternalError").is_unusable_answer());
        let big = Error::TooLarge {
            method: Method::GET,
            path: "/x".into(),
            limit: 1,
        };
        assert!(big.is_unusable_answer() && !big.is_retryable());
    }

    #[test]
    fn unauthorized_names_the_token_id_and_the_fix() {
        let text = api(401, "Unauthorized").to_string();
        assert!(text.contains("bootstrap token abcdef"), "{text}");
        assert!(text.contains("kubeadm token create"), "{text}");
    }

    #[test]
    fn a_redirect_names_its_target_and_is_not_retried() {
        let s = redirect_status(StatusCode::TEMPORARY_REDIRECT, "https://x:1/y\t");
        assert_eq!(s.code, Some(307));
        let message = s.message.unwrap();
        assert!(
            message.starts_with("redirected to https://x:1/y;"),
            "{message}"
        );
        assert!(!api(307, "Temporary Redirect").is_retryable());
    }

    #[test]
    fn a_protobuf_status_is_read_like_a_json_one() {
        use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb;
        use prost::Message;
        let conflict = pb::Status {
            reason: Some("Conflict".into()),
            message: Some("Operation cannot be fulfilled on leases.coordination.k8s.io \"n1\": the object has been modified".into()),
            code: Some(409),
            ..Default::default()
        };
        let body = super::super::protobuf::wrap("v1", "Status", conflict.encode_to_vec());
        let s = answer_status(StatusCode::CONFLICT, None, &body);
        assert_eq!(s.reason.as_deref(), Some("Conflict"));
        assert!(s.message.unwrap().contains("has been modified"));
        let json = br#"{"kind":"Status","reason":"AlreadyExists","code":409}"#;
        let s = answer_status(StatusCode::CONFLICT, None, json);
        assert_eq!(s.reason.as_deref(), Some("AlreadyExists"));
        // A protobuf body that is not a Status: the code speaks, not the bytes.
        let s = answer_status(StatusCode::UNSUPPORTED_MEDIA_TYPE, None, b"k8s\0\xff");
        assert_eq!(s.code, Some(415));
        assert_eq!(s.message.as_deref(), Some("415 Unsupported Media Type"));
    }

    #[test]
    fn synthetic_status_keeps_code_and_a_short_message() {
        let s = synthetic_status(StatusCode::BAD_GATEWAY, b"<html>oops</html>");
        assert_eq!(s.code, Some(502));
        assert_eq!(s.message.as_deref(), Some("<html>oops</html>"));
    }
}
