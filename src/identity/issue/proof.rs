//! The proof that a client certificate which does not chain to the kubeconfig's CA works,
//! before bootlet relies on it: one `authentication.k8s.io/v1` SelfSubjectReview with it,
//! over a fresh connection (a new TLS handshake with the new certificate and key, trusting
//! only the kubeconfig CA for the server), must answer the node's user and group. Only a
//! 401 (or another user) is a no: a 403 comes after authentication, and a server without
//! the review (404) is asked a SelfSubjectAccessReview instead. The offline checks are
//! `pki::verify`'s; this is the part only the API server can answer.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};

use crate::api::kubeconfig::{Credential, Server};
use crate::api::{self, retrying, ApiClient, ClientOptions};
use crate::pki::{CertProfile, PrivateKeyPem};
use crate::runtime::backoff::Backoff;

/// The review collection (GA since Kubernetes 1.28).
pub const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
/// The fallback where there is no SelfSubjectReview (GA since 1.6). Not `GET /version` or
/// `/api`: those are open to `system:unauthenticated` on most clusters (system:public-info-
/// viewer, system:discovery), so their 200 says nothing about who asked, while creating a
/// SelfSubjectAccessReview is granted to `system:authenticated` only (system:basic-user).
pub const SELF_SUBJECT_ACCESS_REVIEWS: &str =
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
/// Longest piece of the server's answer (a user or group name) that goes into a message.
const MAX_SERVER_TEXT: usize = 100;

/// How the API server vouched for a certificate. Each is an answer only an authenticated
/// request gets: kube-apiserver answers 401 to a client certificate it cannot verify even
/// with anonymous auth on (an authenticator's error fails the request before anonymous is
/// tried), so a 403 too means the certificate was accepted; the offline checks already
/// matched its subject to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vouched {
    /// A SelfSubjectReview with it answered the node's user and group.
    Reviewed,
    /// The SelfSubjectReview was forbidden (403): its authorization was trimmed.
    ReviewForbidden,
    /// No SelfSubjectReview (404: before Kubernetes 1.28, or turned off), and a
    /// SelfSubjectAccessReview with it was answered with `status` (201, or 403 when
    /// system:basic-user is trimmed too).
    AccessReviewed { status: u16 },
}

/// Why the API server did not vouch for a certificate.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    #[error("no client can be built with it")]
    Setup(#[source] api::Error),
    #[error("the API server does not accept it")]
    Rejected(#[source] api::Error),
    #[error("the API server answers neither a SelfSubjectReview nor a SelfSubjectAccessReview (404) to prove it with")]
    NoReview(#[source] api::Error),
    #[error("the API server's answer to the review proves nothing either way")]
    Inconclusive(#[source] api::Error),
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
    /// The server's answer is no: the certificate is refused (a 401, another user, or no
    /// client can be built with it). An unanswered review, a server with no review to ask
    /// and an answer that proves nothing are not a no.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ProofError::Setup(_) | ProofError::Rejected(_) | ProofError::OtherUser { .. }
        )
    }

    /// A refused review's error as the proof sees it: only a 401 says no.
    fn from_answer(e: api::Error) -> ProofError {
        if e.is_unauthorized() {
            ProofError::Rejected(e)
        } else if e.is_not_found() {
            ProofError::NoReview(e)
        } else {
            ProofError::Inconclusive(e)
        }
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
/// (`system:node:NODE` in `system:nodes`); see [`Vouched`] for the other answers that
/// prove it. Transport errors, 5xx and 429 are retried as `patience` says (for each of the
/// two reviews, when the first is missing); any other answer decides at once.
pub async fn prove(
    cluster: &Cluster<'_>,
    chain_pem: &str,
    key: &PrivateKeyPem,
    profile: &CertProfile,
    patience: Patience,
) -> Result<Vouched, ProofError> {
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
    let answer = ask(patience, "SelfSubjectReview", || {
        client.create::<_, SelfSubjectReview>(SELF_SUBJECT_REVIEWS, &review)
    })
    .await?;
    match answer {
        Ok(answer) => judge(&answer, profile).map(|()| Vouched::Reviewed),
        Err(e) if e.is_forbidden() => Ok(Vouched::ReviewForbidden),
        Err(e) if e.is_not_found() => {
            let access = access_review(profile);
            let answer = ask(patience, "SelfSubjectAccessReview", || {
                client.create::<_, SelfSubjectAccessReview>(SELF_SUBJECT_ACCESS_REVIEWS, &access)
            })
            .await?;
            match answer {
                Ok(_) => Ok(Vouched::AccessReviewed { status: 201 }),
                Err(e) if e.is_forbidden() => Ok(Vouched::AccessReviewed { status: 403 }),
                Err(e) => Err(ProofError::from_answer(e)),
            }
        }
        Err(e) => Err(ProofError::from_answer(e)),
    }
}

/// One review, retried as `patience` says: the server's answer (a status included), or
/// why there was none.
async fn ask<T, F, Fut>(
    patience: Patience,
    review: &str,
    op: F,
) -> Result<Result<T, api::Error>, ProofError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, api::Error>>,
{
    match patience {
        Patience::Retry(limit) => {
            let mut retry = Backoff::new(Duration::from_millis(500), Duration::from_secs(5), 0.2)
                .expect("constant backoff bounds are valid");
            let what = format!("proving the client certificate ({review})");
            tokio::time::timeout(limit, retrying(&what, &mut retry, op))
                .await
                .map_err(|_| ProofError::Unanswered { after: limit })
        }
        Patience::Once(limit) => {
            let mut op = op;
            match tokio::time::timeout(limit, op()).await {
                Ok(Err(e)) if e.is_retryable() => Err(ProofError::Unreachable(e)),
                Ok(answer) => Ok(answer),
                Err(_) => Err(ProofError::Unanswered { after: limit }),
            }
        }
    }
}

/// The fallback's question: may I read my own Lease? Whatever the answer, that the server
/// answered it is the proof.
fn access_review(profile: &CertProfile) -> SelfSubjectAccessReview {
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("get".into()),
                group: Some("coordination.k8s.io".into()),
                resource: Some("leases".into()),
                namespace: Some("kube-node-lease".into()),
                name: Some(profile.node.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

// === impl Vouched ===

impl Vouched {
    /// What the server's answer was, for a log line or doctor ("… answers system:node:n1 in
    /// system:nodes").
    pub fn evidence(&self, profile: &CertProfile) -> String {
        let (user, group) = profile.subject();
        match self {
            Vouched::Reviewed => {
                format!("a SelfSubjectReview with it answers {user} in {group}")
            }
            Vouched::ReviewForbidden => "a SelfSubjectReview with it is forbidden (403), an answer only an authenticated request gets".into(),
            Vouched::AccessReviewed { status } => format!("the server has no SelfSubjectReview (404), and a SelfSubjectAccessReview with it is answered ({status}), which only an authenticated request gets"),
        }
    }
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

    #[test]
    fn only_a_401_refuses_the_certificate() {
        let answer = |code| {
            ProofError::from_answer(api::Error::Api {
                method: reqwest::Method::POST,
                path: SELF_SUBJECT_REVIEWS.into(),
                code,
                identity: api::Identity::Anonymous,
                status: Box::default(),
                retry_after: None,
            })
        };
        assert!(answer(401).is_refusal());
        for code in [400, 404, 405, 409] {
            assert!(!answer(code).is_refusal(), "{code}");
        }
        assert!(matches!(answer(404), ProofError::NoReview(_)));
    }
}
