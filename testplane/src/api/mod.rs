//! The request pipeline: record, delay, authenticate, inject faults, route, authorize,
//! dispatch, then stamp `Date` and log. Also metav1 Status errors and JSON responses.
//! Resource semantics live in `resources.rs`, `csr.rs`, `watch.rs`; discovery in `discovery.rs`.

mod csr;
mod discovery;
mod lease_pb;
mod proto;
mod resources;
mod route;
mod select;
mod status;
mod watch;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, DATE};
use hyper::{Method, Request};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails;

use crate::auth::{self, UserInfo};
use crate::faults::Injected;
use crate::rbac::{self, Attrs, Decision};
use crate::types::ConnInfo;
use crate::{Event, RequestRecord, Shared};

use route::{parse_query, verb_for};
pub use route::{parse_route, Route};
pub use status::{json, text, ApiError};

pub use crate::types::{Body, Resp};

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
}

/// The hyper service: one request in, one response out, always recorded.
pub async fn handle(
    shared: Arc<Shared>,
    conn: ConnInfo,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    let method = req.method().clone();
    let version = format!("{:?}", req.version());
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
    let request_type = content_type.clone();
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
        at: crate::wall_now(),
        conn: conn.conn,
        user,
        verb,
        method: method.to_string(),
        path: path_q,
        status: resp.status().as_u16(),
        version,
        content_type: request_type,
        response_type: resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
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
    if shared.faults.unserves(&ctx.path) {
        let msg = "the server could not find the requested resource";
        return ApiError::new(404, "NotFound", msg).into_resp();
    }
    let result = match route {
        Route::NonResource => return discovery::serve(ctx),
        Route::Review(_, r) if ctx.method == Method::POST => discovery::review(ctx, r),
        Route::Review(..) => return unknown(ctx),
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
