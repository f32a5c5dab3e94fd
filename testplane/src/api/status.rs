//! metav1 Status errors (reason, message, details and causes as kube-apiserver words them)
//! and the JSON/text response helpers. No routing or policy here.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

use super::{Body, Resp};
use crate::store::{Kind, StoreError};

/// A failed request, rendered as a metav1 Status.
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<StatusDetails>>,
    pub retry_after: Option<u64>,
}

// === impl ApiError ===

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, kind: Kind, name: &str) -> ApiError {
        let i = kind.info();
        self.details = Some(Box::new(StatusDetails {
            name: (!name.is_empty()).then(|| name.to_string()),
            group: (!i.group.is_empty()).then(|| i.group.to_string()),
            kind: Some(i.resource.to_string()),
            ..Default::default()
        }));
        self
    }

    pub fn not_found(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(kind)),
        )
        .with_details(kind, name)
    }

    pub fn already_exists(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(kind)),
        )
        .with_details(kind, name)
    }

    pub fn conflict(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(kind)
            ),
        )
        .with_details(kind, name)
    }

    /// kube-apiserver's answer to an update whose object (by UID) is gone: the storage
    /// precondition on the UID in the body fails against the missing object.
    pub fn uid_precondition(kind: Kind, name: &str, uid: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: ",
                qualified(kind)
            ),
        )
        .with_details(kind, name)
    }

    pub fn from_store(e: StoreError, kind: Kind, name: &str) -> ApiError {
        match e {
            StoreError::AlreadyExists => ApiError::already_exists(kind, name),
            StoreError::NotFound => ApiError::not_found(kind, name),
            StoreError::Conflict => ApiError::conflict(kind, name),
            StoreError::Gone { requested, oldest } => ApiError::new(
                410,
                "Expired",
                format!("too old resource version: {requested} ({oldest})"),
            ),
        }
    }

    pub fn bad_request(msg: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", msg)
    }

    /// 422 with field causes: (field, reason, message).
    pub fn invalid(
        kind: Kind,
        name: &str,
        causes: Vec<(String, &'static str, String)>,
    ) -> ApiError {
        let list: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let i = kind.info();
        let gk = if i.group.is_empty() {
            i.kind.to_string()
        } else {
            format!("{}.{}", i.kind, i.group)
        };
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {joined}"),
        );
        e.details = Some(Box::new(StatusDetails {
            name: Some(name.to_string()),
            group: Some(i.group.to_string()),
            kind: Some(i.kind.to_string()),
            causes: Some(
                causes
                    .into_iter()
                    .map(|(f, r, m)| StatusCause {
                        field: Some(f),
                        reason: Some(r.into()),
                        message: Some(m),
                    })
                    .collect(),
            ),
            ..Default::default()
        }));
        e
    }

    pub fn status(&self) -> Status {
        Status {
            code: Some(self.code as i32),
            details: self.details.as_deref().cloned(),
            message: Some(self.message.clone()),
            metadata: ListMeta::default(),
            reason: Some(self.reason.to_string()),
            status: Some("Failure".into()),
        }
    }

    pub fn into_resp(self) -> Resp {
        let mut r = json(self.code, &self.status());
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// "certificatesigningrequests.certificates.k8s.io" or "nodes".
pub fn qualified(kind: Kind) -> String {
    let i = kind.info();
    if i.group.is_empty() {
        i.resource.to_string()
    } else {
        format!("{}.{}", i.resource, i.group)
    }
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

pub fn json<T: serde::Serialize>(code: u16, v: &T) -> Resp {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub fn text(code: u16, s: &'static str) -> Resp {
    let mut r = Response::new(full(s));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
