//! The proof that a client certificate which does not chain to the kubeconfig's CA works,
//! before bootlet relies on it: one `authentication.k8s.io/v1` SelfSubjectReview with it,
//! over a fresh connection (a new TLS handshake with the new certificate and key, trusting
//! only the kubeconfig CA for the server), must answer the node's user and group. The
//! offline checks are `pki::verify`'s; this is the part only the API server can answer.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;

use crate::api::kubeconfig::{Credential, Server};
use crate::api::{self, retrying, ApiClient, ClientOptions};
use crate::pki::{CertProfile, PrivateKeyPem};
use crate::runtime::backoff::Backoff;

/// The review collection (GA since Kubernetes 1.28).
pub const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
/// Longest piece of the server's answer (a user or group name) that goes into a message.
const MAX_SERVER_TEXT: usize = 100;

/// Why the API server did not vouch for a certificate.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    #[error("no client can be built with it")]
    Setup(#[source] api::Error),
    #[error("the API server does not accept it")]
    Rejected(#[source] api::Error),
    #[error("the API server has no authentication.k8s.io/v1 SelfSubjectReview to prove it with (Kubernetes 1.28 or later)")]
    NoReview(#[source] api::Error),
    #[error("it authenticates as {user:?} in {groups:?}, not as {expected} in {group}")]
    OtherUser {
        user: String,
        groups: Vec<String>,
        expected: String,
        group: String,
    },
    #[error("the API server did not answer the SelfSubjectReview within {}", crate::runtime::health::human(*.after))]
    Unanswered { after: Duration },
    #[error("the SelfSubjectReview got no answer")]
    Unreachable(#[source] api::Error),
}

/// How hard to try for an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// Retry transport errors, 5xx and 429 (0.5 s doubling to 5 s) until this long.
    Retry(Duration),
    /// One request, bounded by this long (at start, when a failure must not hold READY).
    Once(Duration),
}

// === impl ProofError ===

impl ProofError {
    /// The server's answer is no (or cannot become yes by asking again): the certificate is
    /// refused. Only an unanswered review may succeed later.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ProofError::Unanswered { .. } | ProofError::Unreachable(_)
        )
    }
}

/// Where to ask, and with which transport options.
pub struct Cluster<'a> {
    pub server: &'a Server,
    /// The kubeconfig CA: the only trust anchor for the server's certificate.
    pub ca_pem: &'a [u8],
    pub api: &'a ClientOptions,
}

/// Authenticate with `chain_pem` + `key` and check the answer names `profile`'s subject
/// (`system:node:NODE` in `system:nodes`). Transport errors, 5xx and 429 are retried as
/// `patience` says; any other answer decides at once.
pub async fn prove(
    cluster: &Cluster<'_>,
    chain_pem: &str,
    key: &PrivateKeyPem,
    profile: &CertProfile,
    patience: Patience,
) -> Result<(), ProofError> {
    let credential = Credential::ClientCert {
        chain_pem: chain_pem.to_string(),
        key: key.clone(),
    };
    // A client of its own is a connection pool of its own: the review makes a new TLS
    // handshake presenting the new certificate, never a connection of the current one.
    let client = ApiClient::new(
        cluster.server,
        cluster.ca_pem,
        &credential,
        cluster.api.clone(),
    )
    .map_err(ProofError::Setup)?;
    let review = SelfSubjectReview::default();
    let ask = || client.create::<_, SelfSubjectReview>(SELF_SUBJECT_REVIEWS, &review);
    let answer = match patience {
        Patience::Retry(limit) => {
            let mut retry = Backoff::new(Duration::from_millis(500), Duration::from_secs(5), 0.2)
                .expect("constant backoff bounds are valid");
            let what = "proving the client certificate (SelfSubjectReview)";
            tokio::time::timeout(limit, retrying(what, &mut retry, ask))
                .await
                .map_err(|_| ProofError::Unanswered { after: limit })?
        }
        Patience::Once(limit) => match tokio::time::timeout(limit, ask()).await {
            Ok(Err(e)) if e.is_retryable() => return Err(ProofError::Unreachable(e)),
            Ok(answer) => answer,
            Err(_) => return Err(ProofError::Unanswered { after: limit }),
        },
    };
    let answer = answer.map_err(|e| {
        if e.is_not_found() {
            ProofError::NoReview(e)
        } else {
            ProofError::Rejected(e)
        }
    })?;
    judge(&answer, profile)
}

/// Whether a review's answer is `profile`'s node (pure).
pub fn judge(answer: &SelfSubjectReview, profile: &CertProfile) -> Result<(), ProofError> {
    let user = answer
        .status
        .as_ref()
        .and_then(|s| s.user_info.clone())
        .unwrap_or_default();
    let (expected, group) = profile.subject();
    let username = user.username.unwrap_or_default();
    let groups = user.groups.unwrap_or_default();
    if username == expected && groups.contains(&group) {
        return Ok(());
    }
    let clip = |s: &str| s.chars().take(MAX_SERVER_TEXT).collect::<String>();
    Err(ProofError::OtherUser {
        user: clip(&username),
        groups: groups.iter().take(8).map(|g| clip(g)).collect(),
        expected,
        group,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a real kube-apiserver answers (status.userInfo with extra), as JSON.
    fn answer(json: &str) -> SelfSubjectReview {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_answer_must_name_the_node_and_its_group() {
        let node = CertProfile::client("n1");
        let real = answer(
            r#"{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1",
                "metadata":{"creationTimestamp":null},
                "status":{"userInfo":{"username":"system:node:n1",
                  "groups":["system:nodes","system:authenticated"],
                  "extra":{"authentication.kubernetes.io/credential-id":["X509SHA256=ab12"]}}}}"#,
        );
        judge(&real, &node).unwrap();
        let other = judge(&real, &CertProfile::client("n2")).unwrap_err();
        assert!(other.is_refusal());
        assert_eq!(
            other.to_string(),
            "it authenticates as \"system:node:n1\" in [\"system:nodes\", \"system:authenticated\"], not as system:node:n2 in system:nodes"
        );
        let no_group = answer(
            r#"{"status":{"userInfo":{"username":"system:node:n1","groups":["system:authenticated"]}}}"#,
        );
        assert!(judge(&no_group, &node).is_err());
        assert!(judge(&answer("{}"), &node).is_err());
        assert!(!ProofError::Unanswered {
            after: Duration::from_secs(30)
        }
        .is_refusal());
    }
}
