//! The request pipeline: record, delay, authenticate, inject faults, route, authorize,
//! dispatch, then stamp `Date` and log. Also metav1 Status errors and JSON responses.
//! Resource semantics live in `resources.rs`, `csr.rs`, `watch.rs`; discovery in `discovery.rs`.

mod csr;
mod discovery;
mod proto;
mod resources;
mod table;
mod watch;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, DATE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

use crate::auth::{self, UserInfo};
use crate::faults::Injected;
use crate::rbac::{self, Attrs, Decision};
use crate::server::ConnInfo;
use crate::store::{Kind, StoreError};
use crate::{Event, RequestRecord, Shared};

pub type Body = BoxBody<Bytes, Infallible>;
pub type Resp = Response<Body>;

/// Everything a handler needs about one request.
pub struct Ctx {
    pub shared: Arc<Shared>,
    pub conn: u64,
    pub user: UserInfo,
    pub method: Method,
    pub path: String,
    pub query: HashMap<String, String>,
    pub accept: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Ctx {
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    pub fn wants_table(&self) -> bool {
        self.accept.contains("as=Table")
    }
}

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

    fn with_details(mut self, kind: Kind, name: &str) -> ApiError {
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

/// The parsed target of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    NonResource,
    Resource {
        kind: Kind,
        ns: String,
        name: String,
        sub: String,
    },
    /// POST-only review resources: (group, resource).
    Review(&'static str, &'static str),
    Admin(String),
    Unknown,
}

pub fn parse_route(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["testplane", rest @ ..] => return Route::Admin(rest.join("/")),
        ["api"] | ["apis"] | ["version"] | ["healthz"] | ["readyz"] | ["livez"] => {
            return Route::NonResource
        }
        ["api", "v1"] | ["apis", _] | ["apis", _, _] | ["openapi", ..] => {
            return Route::NonResource
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    match (group, version, rest) {
        ("authentication.k8s.io", "v1", ["selfsubjectreviews"]) => {
            return Route::Review("authentication.k8s.io", "selfsubjectreviews")
        }
        ("authorization.k8s.io", "v1", ["selfsubjectaccessreviews"]) => {
            return Route::Review("authorization.k8s.io", "selfsubjectaccessreviews")
        }
        _ => {}
    }
    let (ns, res, name, sub) = match rest {
        ["namespaces", ns, res, tail @ ..]
            if tail.len() <= 2 && !(group.is_empty() && tail.is_empty() && *res == "status") =>
        {
            (*ns, *res, tail.first().copied(), tail.get(1).copied())
        }
        [res, tail @ ..] if tail.len() <= 2 => {
            ("", *res, tail.first().copied(), tail.get(1).copied())
        }
        _ => return Route::Unknown,
    };
    let Some(kind) = Kind::from_resource(group, version, res) else {
        return Route::Unknown;
    };
    if !ns.is_empty() && !kind.info().namespaced {
        return Route::Unknown;
    }
    Route::Resource {
        kind,
        ns: ns.to_string(),
        name: name.unwrap_or("").to_string(),
        sub: sub.unwrap_or("").to_string(),
    }
}

fn verb_for(method: &Method, route: &Route, query: &HashMap<String, String>) -> String {
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    match (method, route) {
        (&Method::GET, Route::Resource { name, .. }) if name.is_empty() => {
            if watch { "watch" } else { "list" }.into()
        }
        (&Method::GET, Route::Resource { .. }) => if watch { "watch" } else { "get" }.into(),
        (&Method::POST, Route::Resource { .. } | Route::Review(..)) => "create".into(),
        (&Method::PUT, _) => "update".into(),
        (&Method::PATCH, _) => "patch".into(),
        (&Method::DELETE, Route::Resource { name, .. }) if name.is_empty() => {
            "deletecollection".into()
        }
        (&Method::DELETE, _) => "delete".into(),
        (m, _) => m.as_str().to_ascii_lowercase(),
    }
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(pct_decode(k), pct_decode(v));
    }
    out
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
                continue;
            }
            (b'+', _) => out.push(b' '),
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The hyper service: one request in, one response out, always recorded.
pub async fn handle(
    shared: Arc<Shared>,
    conn: ConnInfo,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let path_q = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_else(|| path.clone());
    let query = parse_query(req.uri().query());
    let header = |h| {
        req.headers()
            .get(h)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    let authz = header(AUTHORIZATION);
    let accept = header(ACCEPT).unwrap_or_default();
    let content_type = header(CONTENT_TYPE).unwrap_or_default();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();

    let delay = shared.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let route = parse_route(&path);
    let verb = verb_for(&method, &route, &query);
    let (mut resp, user) = match auth::authenticate(
        &shared.store,
        &conn.peer,
        authz.as_deref(),
        jiff::Timestamp::now(),
    ) {
        Err(_) => (
            ApiError::new(401, "Unauthorized", "Unauthorized").into_resp(),
            String::new(),
        ),
        Ok(user) => {
            let name = user.name.clone();
            let ctx = Ctx {
                shared: shared.clone(),
                conn: conn.conn,
                user,
                method: method.clone(),
                path: path.clone(),
                query,
                accept,
                content_type,
                body,
            };
            (dispatch(&ctx, &route, &verb).await, name)
        }
    };
    let skew = shared.faults.skew_secs();
    let now = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(skew);
    let date = now.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
    if let Ok(v) = HeaderValue::from_str(&date) {
        resp.headers_mut().insert(DATE, v);
    }
    resp.headers_mut().insert(
        "cache-control",
        HeaderValue::from_static("no-cache, private"),
    );
    let rec = RequestRecord {
        at: SystemTime::now(),
        conn: conn.conn,
        user,
        verb,
        method: method.to_string(),
        path: path_q,
        status: resp.status().as_u16(),
    };
    tracing::debug!(conn = rec.conn, user = %rec.user, verb = %rec.verb, path = %rec.path, status = rec.status, "request");
    if resp.headers_mut().remove(UNEXPECTED).is_some() {
        shared
            .unexpected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rec.clone());
    }
    {
        let mut log = shared.requests.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= crate::MAX_REQUEST_LOG {
            log.drain(..crate::MAX_REQUEST_LOG / 10);
        }
        log.push(rec.clone());
    }
    shared.emit(Event::Request(rec));
    Ok(resp)
}

async fn dispatch(ctx: &Ctx, route: &Route, verb: &str) -> Resp {
    let shared = &ctx.shared;
    // Injected failures hit API traffic, never the admin path.
    if !matches!(route, Route::Admin(_)) {
        match shared.faults.take_injected() {
            Some(Injected::Fail(code)) => {
                return ApiError::new(
                    code,
                    "InternalError",
                    "Internal error occurred: injected by testplane",
                )
                .into_resp()
            }
            Some(Injected::Throttle(secs)) => {
                let mut e = ApiError::new(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                );
                e.details = Some(Box::new(StatusDetails {
                    retry_after_seconds: Some(secs as i32),
                    ..Default::default()
                }));
                e.retry_after = Some(secs);
                return e.into_resp();
            }
            None => {}
        }
    }
    let attrs = match route {
        Route::NonResource => Attrs {
            verb: verb.into(),
            path: Some(ctx.path.clone()),
            ..Default::default()
        },
        Route::Resource {
            kind,
            ns,
            name,
            sub,
        } => {
            let i = kind.info();
            Attrs::resource(verb, i.group, i.resource, sub, ns, name)
        }
        Route::Review(g, r) => Attrs::resource(verb, g, r, "", "", ""),
        Route::Admin(_) => Attrs::resource(verb, "testplane", "faults", "", "", ""),
        Route::Unknown => return unknown(ctx),
    };
    if let Decision::Deny(why) = rbac::authorize(&shared.store, &ctx.user, &attrs) {
        let mut msg = attrs.forbidden_message(&ctx.user.name);
        if let Some(w) = why {
            msg = format!("{msg}: {w}");
        }
        let mut e = ApiError::new(403, "Forbidden", msg);
        if let Route::Resource { kind, name, .. } = route {
            e = e.with_details(*kind, name);
        }
        return e.into_resp();
    }
    let result = match route {
        Route::NonResource => return discovery::serve(ctx),
        Route::Review(_, r) => discovery::review(ctx, r),
        Route::Admin(p) => admin(ctx, p).await,
        Route::Resource {
            kind,
            ns,
            name,
            sub,
        } => resources::serve(ctx, verb, *kind, ns, name, sub).await,
        Route::Unknown => return unknown(ctx),
    };
    result.unwrap_or_else(ApiError::into_resp)
}

/// Strict fake: anything unexpected is a 404 naming the method and path.
pub fn unknown(ctx: &Ctx) -> Resp {
    let mut r = ApiError::new(
        404,
        "NotFound",
        format!(
            "the server could not find the requested resource ({} {})",
            ctx.method, ctx.path
        ),
    )
    .into_resp();
    r.headers_mut()
        .insert(UNEXPECTED, HeaderValue::from_static("1"));
    r
}

/// Internal marker on strict-404 responses; stripped before sending.
const UNEXPECTED: &str = "x-testplane-unexpected";

async fn admin(ctx: &Ctx, path: &str) -> Result<Resp, ApiError> {
    match (&ctx.method, path) {
        (&Method::POST, "faults") => {
            let r: crate::FaultRequest = serde_json::from_slice(&ctx.body)
                .map_err(|e| ApiError::bad_request(format!("fault request: {e}")))?;
            crate::Faults::new(ctx.shared.clone())
                .apply(r)
                .await
                .map_err(|e| ApiError::new(404, "NotFound", e.to_string()))?;
            Ok(text(200, "ok"))
        }
        (&Method::POST, "compact") => {
            ctx.shared.store.compact();
            Ok(text(200, "ok"))
        }
        _ => Ok(unknown(ctx)),
    }
}

pub use self::text as plain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            parse_route("/apis/certificates.k8s.io/v1/certificatesigningrequests/x/approval"),
            Route::Resource {
                kind: Kind::Csr,
                ns: "".into(),
                name: "x".into(),
                sub: "approval".into()
            }
        );
        assert_eq!(
            parse_route("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
            Route::Resource {
                kind: Kind::Lease,
                ns: "kube-node-lease".into(),
                name: "n1".into(),
                sub: "".into()
            }
        );
        assert_eq!(
            parse_route("/api/v1/namespaces/kube-system"),
            Route::Resource {
                kind: Kind::Namespace,
                ns: "".into(),
                name: "kube-system".into(),
                sub: "".into()
            }
        );
        assert_eq!(parse_route("/api/v1/namespaces/x/nodes"), Route::Unknown);
        assert_eq!(parse_route("/apis/foo/v1/bars"), Route::Unknown);
        assert_eq!(parse_route("/version"), Route::NonResource);
        assert_eq!(pct_decode("metadata.name%3Dabc"), "metadata.name=abc");
    }
}
