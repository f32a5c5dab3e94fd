//! The `--metrics-bind-address` listener: `/metrics` (the text exposition), `/healthz` (every
//! loop keeps its heartbeat promise: the same test that stops the systemd watchdog) and
//! `/readyz` (a valid client certificate, the condition of READY=1; `?verbose` lists each
//! condition, the Lease's freshness among them, kube-apiserver style). HTTP/1.1, one small
//! task per connection, bounded in number, in how long a request may take to arrive, and in
//! how long a connection may stall or live (`deadline.rs`).
//! A listener that cannot bind is one error line; bootlet runs on without it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::deadline::{Deadlines, Progress, Tracked, Verdict};
use super::{CONTENT_TYPE, METRICS};
use crate::runtime::clock;
use crate::runtime::health::{self, Health, Snapshot, State};
use crate::runtime::shutdown::Shutdown;

/// Connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 16;
/// A connection that moves no byte in either direction for this long is closed (a client
/// that pipelines requests and never reads blocks every write; an idle keep-alive).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection lives; then the answer in flight is finished and it closes.
pub const MAX_LIFETIME: Duration = Duration::from_secs(60);
/// A request's headers must arrive within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The listener's per-connection deadlines (tests pass shorter ones to [`serve_with`]).
pub const DEADLINES: Deadlines = Deadlines {
    idle: IDLE_TIMEOUT,
    lifetime: MAX_LIFETIME,
    grace: Duration::from_secs(5),
};

/// What the endpoints read.
#[derive(Clone)]
pub struct Endpoints {
    pub health: Health,
    /// bootlet obtains the serving certificate: its families are exported.
    pub serving: bool,
    /// `bootlet approve`: its families on /metrics; /readyz is 200 once it runs (it needs
    /// no certificate of its own).
    pub approver: bool,
}

/// Binds `addr`, or says in one line why not (the port is taken, the address is not
/// local) and returns `None`: metrics are worth less than the node's identity.
pub fn bind(addr: SocketAddr) -> Option<TcpListener> {
    let listener = std::net::TcpListener::bind(addr).and_then(|l| {
        l.set_nonblocking(true)?;
        TcpListener::from_std(l)
    });
    match listener {
        Ok(l) => {
            let local = l.local_addr().map_or(addr, |a| a);
            tracing::info!(address = %local, "serving /metrics, /healthz and /readyz");
            Some(l)
        }
        Err(e) => {
            tracing::error!(address = %addr, error = %e, "cannot listen for /metrics, /healthz and /readyz; running without them (set metricsBindAddress to a free address, or off)");
            None
        }
    }
}

/// Serves until shutdown.
pub async fn serve(listener: TcpListener, endpoints: Endpoints, shutdown: Shutdown) {
    serve_with(listener, endpoints, shutdown, DEADLINES).await;
}

/// [`serve`] with the given per-connection deadlines.
pub async fn serve_with(
    listener: TcpListener,
    endpoints: Endpoints,
    mut shutdown: Shutdown,
    deadlines: Deadlines,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = shutdown.requested() => return,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: say so, and give the process a moment.
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.requested() => return,
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            connection(stream, endpoints, deadlines).await;
            drop(permit);
        });
    }
}

/// One connection, until the client closes it or a deadline does: no byte moved for
/// `idle` (dropped at once), or older than `lifetime` (the answer in flight is finished
/// within `grace`, then dropped).
async fn connection(stream: TcpStream, endpoints: Endpoints, deadlines: Deadlines) {
    let progress = Progress::new();
    let io = TokioIo::new(Tracked::new(stream, progress.clone()));
    let service = hyper::service::service_fn(move |req| {
        let resp = respond(&req, &endpoints);
        async move { Ok::<_, std::convert::Infallible>(resp) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut closing = None;
    loop {
        match deadlines.check(&progress, closing, Instant::now()) {
            Verdict::Close => return,
            Verdict::Finish(hard) => {
                conn.as_mut().graceful_shutdown();
                closing = Some(hard);
            }
            Verdict::Wait(at) => tokio::select! {
                _ = conn.as_mut() => return,
                () = tokio::time::sleep_until(at) => {}
            },
        }
    }
}

fn respond(req: &Request<Incoming>, endpoints: &Endpoints) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    let verbose = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.split('=').next() == Some("verbose"))
    });
    let snap = endpoints.health.snapshot();
    let now = clock::now();
    match path {
        "/metrics" => {
            let body = if endpoints.approver {
                METRICS.render_approver()
            } else {
                METRICS.render(&snap, now, endpoints.serving)
            };
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(CONTENT_TYPE),
            );
            resp
        }
        "/healthz" => healthz(&endpoints.health, Instant::now()),
        _ if endpoints.approver => text(StatusCode::OK, "ok\n".into()),
        _ => readyz(&snap, now, verbose),
    }
}

/// 200 while every loop keeps its heartbeat promise; 500 naming the most overdue one.
fn healthz(health: &Health, now: Instant) -> Response<Full<Bytes>> {
    match health.stalled(now) {
        None => text(StatusCode::OK, "ok\n".into()),
        Some(s) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the {} loop is {} past its heartbeat (the systemd watchdog stops too)\n",
                s.task,
                health::human(s.overdue.max(Duration::from_secs(1)))
            ),
        ),
    }
}

/// 200 with a client certificate valid now (what READY=1 means); `verbose` lists the
/// conditions, one line each, and the Lease's freshness, which never gates readiness.
fn readyz(snap: &Snapshot, now: SystemTime, verbose: bool) -> Response<Full<Bytes>> {
    let (code, body) = readiness(snap, now, verbose, METRICS.lease_duration());
    text(code, body)
}

/// The `/readyz` answer as data (tested without a socket).
pub fn readiness(
    snap: &Snapshot,
    now: SystemTime,
    verbose: bool,
    lease_duration: Duration,
) -> (StatusCode, String) {
    // The certificate stays in the snapshot after it expired (until a replacement is
    // installed): readiness compares it with the clock at each request.
    let expired = snap.cert_expired(now);
    let ready = snap.ready() && !expired;
    let mut lines = Vec::new();
    match &snap.cert {
        Some(cert) if expired => {
            let mut line = format!(
                "[-]client-certificate failed: expired at {}",
                health::rfc3339(cert.not_after)
            );
            if snap.bootstrap != State::Installed {
                line.push_str("; ");
                line.push_str(&crate::runtime::text::one_line(
                    &snap.bootstrap.status_line(now),
                ));
            }
            lines.push(line);
        }
        Some(cert) => lines.push(format!(
            "[+]client-certificate ok: valid until {}",
            health::rfc3339(cert.not_after)
        )),
        None => lines.push(format!(
            "[-]client-certificate failed: {}",
            snap.status_line(now)
        )),
    }
    lines.push(if snap.ready() {
        "[+]kubeconfig ok".to_string()
    } else {
        "[-]kubeconfig failed: not written until a certificate is installed".to_string()
    });
    lines.push(lease_line(snap, now, lease_duration));
    let verdict = if ready {
        "readyz check passed"
    } else {
        "readyz check failed"
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    let body = if verbose {
        format!("{}\n{verdict}\n", lines.join("\n"))
    } else if ready {
        "ok\n".to_string()
    } else {
        format!("{verdict}: {}\n", snap.status_line(now))
    };
    (code, body)
}

/// The Lease's freshness: renewed within the lease duration, or not (never a readiness
/// condition: an API outage must not make the kubelet's prerequisite "not ready").
fn lease_line(snap: &Snapshot, now: SystemTime, duration: Duration) -> String {
    const NOTE: &str = "(informational: the Lease does not gate readiness)";
    let lease = &snap.lease;
    if !lease.enabled {
        return "[+]lease ok: renewed by the kubelet (--renew-lease=false)".into();
    }
    if let Some(p) = &lease.paused {
        return format!(
            "[-]lease paused: {} {NOTE}",
            crate::runtime::text::one_line(&p.why)
        );
    }
    match lease.last_renewed {
        Some(at) if now.duration_since(at).unwrap_or_default() <= duration => {
            format!("[+]lease ok: renewed {} ago", health::ago(now, at))
        }
        Some(at) => format!(
            "[-]lease stale: last renewed {} ago, longer than the lease duration ({}) {NOTE}",
            health::ago(now, at),
            health::human(duration)
        ),
        None => format!("[-]lease not renewed yet {NOTE}"),
    }
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        header::HeaderName::from_static("x-content-type-options"),
        header::HeaderValue::from_static("nosniff"),
    );
    resp
}
