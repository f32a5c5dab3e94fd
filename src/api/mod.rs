//! The shared HTTP client bootlet uses to reach the API server (the Lease loop keeps a
//! connection of its own, [`conn`], made from it with the same TLS and identity): TLS that
//! trusts only the cluster CA (checked against `tls-server-name` when set), exactly one
//! identity (bootstrap token or client certificate), the one proxy policy, no redirects
//! followed, bounded requests, and typed errors that keep the API's `Status`. It knows no
//! resource kinds.

pub mod conn;
pub mod dial;
mod error;
mod exec_auth;
pub mod kubeconfig;
pub mod protobuf;
pub mod proxy;
pub mod tls;
pub mod watch;
mod wire;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::kubeconfig::{Credential, ProxyUrl, ToServer};
use crate::metrics::METRICS;
use crate::runtime::backoff::Backoff;
use crate::runtime::clock;

use dial::{AliasResolver, Resolver};
pub use error::{Error, TransportError};
use exec_auth::ExecAuth;
use proxy::{ProxyEnv, ProxyPolicy};
use wire::{decode, encode, location, parse_http_date, retry_after, skew_secs};

/// Upper bound on one request/response exchange (not watches): the contract's ≤ 10 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP + TLS connect bound; a node that cannot connect in 5 s should retry, not hang.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 PING period: well under the 40 s lease grace period, so a dead connection is
/// noticed before the node controller notices the node.
pub const H2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// An unanswered HTTP/2 PING closes the connection after this long.
pub const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalive in the kernel: the first probe after this much silence, then every
/// [`TCP_KEEPALIVE_INTERVAL`], [`TCP_KEEPALIVE_PROBES`] times.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const TCP_KEEPALIVE_PROBES: u32 = 3;
/// Data (or a keepalive probe) the server has not acknowledged for this long closes the
/// connection in the kernel (TCP_USER_TIMEOUT): a dead peer is noticed in at most ~30 s
/// whether the connection is busy or quiet, with no wake-up of ours.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
/// A server `Date` further than this from the local clock is reported: beyond it,
/// fresh certificates look not-yet-valid and rotation deadlines land at the wrong time.
pub const CLOCK_SKEW_WARNING: Duration = Duration::from_secs(30);
/// What bootlet calls itself in `User-Agent`.
pub const USER_AGENT: &str = concat!("bootlet/", env!("CARGO_PKG_VERSION"));
/// Responses bigger than this are refused: our objects are a few KiB.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// Transport knobs; the defaults are what production uses.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_body: usize,
    /// The environment's proxies (`HTTPS_PROXY`, `NO_PROXY`); the default is this
    /// process's, read once. Tests build their own with [`ProxyEnv::from_vars`].
    pub proxy_env: Arc<ProxyEnv>,
    /// How host names become addresses; the default is the system's. Tests use
    /// [`Resolver::fixed`] (a black-holed address beside a good one).
    pub resolver: Resolver,
    /// How long a kubeconfig's exec credential plugin may run before it is killed.
    pub exec_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            proxy_env: ProxyEnv::process(),
            resolver: Resolver::system(),
            exec_timeout: crate::defaults::DEFAULT_EXEC_PLUGIN_TIMEOUT,
        }
    }
}

/// Who we are to the API server, as logged (never the secret part).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    BootstrapToken {
        id: String,
    },
    /// Any other bearer token (a service account's, for `bootlet approve`): nothing of it
    /// is shown.
    Token,
    ClientCertificate {
        subject: String,
        serial: String,
    },
    /// Whatever the kubeconfig's exec plugin hands out (a token or a client certificate).
    ExecPlugin {
        command: String,
    },
    Anonymous,
}

/// A cheap-to-clone client bound to one server, one CA and one identity.
/// Rotation builds a new one; nobody keeps an old one across a credential change.
#[derive(Clone)]
pub struct ApiClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    tls: rustls::ClientConfig,
    server: String,
    /// What the pooled client's request URLs start with: `server`, or `server` with its
    /// host replaced by the `tls-server-name` (see [`sni_alias`]).
    base: String,
    /// `tls-server-name`, else the URL's host: the name TLS sends and verifies.
    server_name: Option<rustls::pki_types::ServerName<'static>>,
    /// What the proxy policy chose for `server`; `None` dials it directly.
    proxy: Option<ProxyUrl>,
    identity: Identity,
    auth_header: Option<HeaderValue>,
    opts: ClientOptions,
    /// Server clock minus local clock from the last `Date` header, in seconds.
    skew_secs: AtomicI64,
    skew_reported: AtomicBool,
    /// The exec plugin, when it is the kubeconfig's credential.
    exec: Option<ExecAuth>,
}

// === impl Identity ===

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::BootstrapToken { id } => write!(f, "bootstrap token {id}"),
            Identity::Token => f.write_str("bearer token"),
            Identity::ClientCertificate { subject, serial } => {
                write!(f, "client certificate {subject} (serial {serial})")
            }
            Identity::ExecPlugin { command } => {
                write!(f, "the credential of exec plugin {command}")
            }
            Identity::Anonymous => f.write_str("anonymous"),
        }
    }
}

// === impl ApiClient ===

impl ApiClient {
    /// A client for `server` (a URL, or a kubeconfig's [`Server`](kubeconfig::Server) with its
    /// `tls-server-name` and `proxy-url`) that trusts only `ca_pem` and presents
    /// `credential`. The proxy is decided here, once, by [`ProxyPolicy::proxy_for`].
    pub fn new<S: ToServer + ?Sized>(
        server: &S,
        ca_pem: &[u8],
        credential: &Credential,
        opts: ClientOptions,
    ) -> Result<Self, Error> {
        let server = server.to_server();
        let setup = |reason: String| Error::Setup {
            server: server.url.clone(),
            reason,
        };
        let server_name = server_name(server.tls_server_name.as_deref()).map_err(setup)?;
        let policy = ProxyPolicy::new(server.proxy.clone(), opts.proxy_env.clone());
        let proxy = policy.proxy_for(&server.url).map_err(setup)?;
        let (tls, identity, auth_header) =
            tls::client_config(ca_pem, credential, server_name.as_ref()).map_err(setup)?;
        let (base, resolver) = base_url(&server, proxy.as_ref(), &opts.resolver);
        let http = build_http(tls.clone(), &opts, proxy.as_ref(), resolver)
            .map_err(|e| setup(e.to_string()))?;
        if let Some(proxy) = &proxy {
            tracing::debug!(server = %server.url, %proxy, "API server connections go through a proxy");
        }
        let exec = ExecAuth::for_credential(credential, ca_pem, &server);
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                tls,
                server: server.url.trim_end_matches('/').to_string(),
                base: base.trim_end_matches('/').to_string(),
                server_name,
                proxy,
                identity,
                auth_header,
                opts,
                skew_secs: AtomicI64::new(0),
                skew_reported: AtomicBool::new(false),
                exec,
            }),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    pub fn server(&self) -> &str {
        &self.inner.server
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(Method::GET, path, None::<&()>).await
    }

    pub async fn create<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn replace<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.call(Method::PUT, path, Some(body)).await
    }

    /// One bounded request; the body is decoded as `T` on 2xx, as a `Status` otherwise.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Error> {
        let timeout = self.inner.opts.request_timeout;
        let resp = self.send(method.clone(), path, body, timeout).await?;
        let bytes = self.read_body(&method, path, resp).await?;
        decode(method, path, &bytes)
    }

    /// Send a request; non-2xx answers become `Error::Api` with the decoded `Status`.
    /// With an exec plugin, the request carries its (cached) credential, and a 401 runs
    /// the plugin again and sends the request once more: then the answer stands.
    async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<reqwest::Response, Error> {
        let Some(exec) = &self.inner.exec else {
            let (http, auth) = (&self.inner.http, self.inner.auth_header.as_ref());
            return self.send_as(http, auth, method, path, body, timeout).await;
        };
        let mut refreshed = false;
        loop {
            let fresh = exec
                .plugin
                .credential(self.inner.opts.exec_timeout)
                .await
                .map_err(|source| Error::Exec {
                    server: self.inner.server.clone(),
                    source,
                })?;
            let (http, auth) = self.exec_transport(exec, &fresh)?;
            let sent = self
                .send_as(&http, auth.as_ref(), method.clone(), path, body, timeout)
                .await;
            match sent {
                Err(e) if e.is_unauthorized() && !refreshed => {
                    refreshed = true;
                    tracing::info!(plugin = %exec.plugin.command(), %method, path, "the API server refused the exec plugin's credential (401); calling the plugin again");
                    exec.plugin.invalidate(fresh.generation).await;
                }
                other => return other,
            }
        }
    }

    /// [`send`](Self::send) on `http` with `auth`, once.
    async fn send_as<B: Serialize>(
        &self,
        http: &reqwest::Client,
        auth: Option<&HeaderValue>,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<reqwest::Response, Error> {
        let url = format!("{}{}", self.inner.base, path);
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let Some(auth) = auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        let mut req = http
            .request(method.clone(), &url)
            .headers(headers)
            .timeout(timeout);
        if let Some(body) = body {
            let json = encode(&method, path, body)?;
            req = req.header(CONTENT_TYPE, "application/json").body(json);
        }
        tracing::trace!(%method, path, "request");
        let resp = req.send().await;
        METRICS.api_request(method.as_str(), resp.as_ref().ok().map(|r| r.status()));
        let resp = resp.map_err(|source| self.transport(&method, path, source.into()))?;
        let code = resp.status();
        tracing::trace!(%method, path, code = code.as_u16(), "response");
        self.observe_date(resp.headers().get(reqwest::header::DATE));
        if code.is_success() {
            return Ok(resp);
        }
        Err(self.api_error(method, path, resp).await)
    }

    /// Server clock minus local clock, as of the last response (zero before any).
    pub fn clock_skew_secs(&self) -> i64 {
        self.inner.skew_secs.load(Ordering::Relaxed)
    }

    /// Track the server's `Date`; say once (per client) when it is far from ours.
    fn observe_date(&self, date: Option<&HeaderValue>) {
        let Some(server) = date.and_then(|v| v.to_str().ok()).and_then(parse_http_date) else {
            return;
        };
        let skew = skew_secs(server, clock::now());
        self.inner.skew_secs.store(skew, Ordering::Relaxed);
        let far = skew.unsigned_abs() > CLOCK_SKEW_WARNING.as_secs();
        if far && !self.inner.skew_reported.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                skew_seconds = skew,
                server = %self.inner.server,
                "the API server's clock is {}s {} this node's: certificates will look not yet valid or expired early and rotation will be mistimed; fix time sync (`timedatectl`, chrony/ntp)",
                skew.unsigned_abs(),
                if skew > 0 { "ahead of" } else { "behind" }
            );
        } else if !far && self.inner.skew_reported.swap(false, Ordering::Relaxed) {
            tracing::info!(
                skew_seconds = skew,
                "the API server's clock agrees with this node's again"
            );
        }
    }

    fn transport(&self, method: &Method, path: &str, source: TransportError) -> Error {
        Error::Transport {
            method: method.clone(),
            path: path.to_string(),
            identity: self.inner.identity.clone(),
            source,
        }
    }

    async fn api_error(&self, method: Method, path: &str, resp: reqwest::Response) -> Error {
        let code = resp.status();
        let retry_after = retry_after(resp.headers());
        let location = location(resp.headers());
        let body = self
            .read_body(&method, path, resp)
            .await
            .unwrap_or_default();
        self.refusal(method, path, code, retry_after, location, &body)
    }

    /// A non-2xx answer as `Error::Api`, keeping the server's `Status` (or making one).
    /// A redirect is never followed (it would resend the credential elsewhere): it is an
    /// answer like any other, its `Location` kept in the message.
    fn refusal(
        &self,
        method: Method,
        path: &str,
        code: reqwest::StatusCode,
        retry_after: Option<Duration>,
        location: Option<String>,
        body: &[u8],
    ) -> Error {
        let status = error::answer_status(code, location, body);
        Error::Api {
            method,
            path: path.to_string(),
            code: code.as_u16(),
            identity: self.inner.identity.clone(),
            status: Box::new(status),
            retry_after,
        }
    }

    /// Read a body, refusing more than `max_body` bytes.
    async fn read_body(
        &self,
        method: &Method,
        path: &str,
        resp: reqwest::Response,
    ) -> Result<Vec<u8>, Error> {
        let limit = self.inner.opts.max_body;
        if resp.content_length().is_some_and(|n| n as usize > limit) {
            return Err(Error::TooLarge {
                method: method.clone(),
                path: path.to_string(),
                limit,
            });
        }
        let mut out = Vec::new();
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|source| self.transport(method, path, source.into()))?;
            if out.len() + chunk.len() > limit {
                return Err(Error::TooLarge {
                    method: method.clone(),
                    path: path.to_string(),
                    limit,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Start a streaming GET (a watch); the caller bounds it with `timeoutSeconds`.
    pub(crate) async fn stream(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<reqwest::Response, Error> {
        self.send(Method::GET, path, None::<&()>, timeout).await
    }
}

/// One pooled HTTP client: keep-alive, bounded connect, kernel TCP keepalive, HTTP/2
/// PINGs after [`H2_KEEPALIVE_INTERVAL`] without a frame from the server, and idle
/// connections closed after 90 s. It goes through `proxy` (decided by the policy, never
/// reqwest's own reading of the environment) and follows no redirect. Names resolve with
/// `alias` when the URLs carry the `tls-server-name` ([`sni_alias`]), else with the
/// options' resolver; reqwest races the address families itself (happy eyeballs, 300 ms).
/// (The Lease loop has a connection of its own without any of these timers:
/// [`conn::Connection`].)
fn build_http(
    tls: rustls::ClientConfig,
    opts: &ClientOptions,
    proxy: Option<&ProxyUrl>,
    alias: Option<AliasResolver>,
) -> reqwest::Result<reqwest::Client> {
    let builder = match proxy {
        Some(proxy) => {
            reqwest::Client::builder().proxy(reqwest::Proxy::all(proxy.with_credentials())?)
        }
        None => reqwest::Client::builder().no_proxy(),
    };
    let builder = match alias {
        Some(alias) => builder.dns_resolver(Arc::new(alias)),
        None if opts.resolver.is_fixed() => builder.dns_resolver(Arc::new(AliasResolver {
            alias: String::new(),
            host: String::new(),
            resolver: opts.resolver.clone(),
        })),
        None => builder,
    };
    builder
        .redirect(reqwest::redirect::Policy::none())
        .use_preconfigured_tls(tls)
        .connect_timeout(opts.connect_timeout)
        .pool_max_idle_per_host(2)
        .pool_idle_timeout(Duration::from_secs(90))
        .http2_keep_alive_interval(H2_KEEPALIVE_INTERVAL)
        .http2_keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .tcp_keepalive(TCP_KEEPALIVE_IDLE)
        .tcp_keepalive_interval(TCP_KEEPALIVE_INTERVAL)
        .tcp_keepalive_retries(TCP_KEEPALIVE_PROBES)
        .tcp_user_timeout(TCP_USER_TIMEOUT)
        .user_agent(USER_AGENT)
        .build()
}

/// The `tls-server-name` as the name TLS sends and verifies; the error is the reason.
fn server_name(
    name: Option<&str>,
) -> Result<Option<rustls::pki_types::ServerName<'static>>, String> {
    name.map(|name| {
        rustls::pki_types::ServerName::try_from(name.to_string())
            .map_err(|e| format!("tls-server-name {name:?}: {e}"))
    })
    .transpose()
}

/// What the pooled client's URLs start with, and the resolver that maps an SNI alias back
/// to the server's addresses: the alias only without a proxy ([`sni_alias`]).
fn base_url(
    server: &kubeconfig::Server,
    proxy: Option<&ProxyUrl>,
    resolver: &Resolver,
) -> (String, Option<AliasResolver>) {
    let alias = match proxy {
        None => sni_alias(&server.url, server.tls_server_name.as_deref(), resolver),
        Some(_) => None,
    };
    match alias {
        Some((url, resolver)) => (url, Some(resolver)),
        None => (server.url.clone(), None),
    }
}

/// reqwest sends the URL's host as SNI, with no way to name another. So when the
/// kubeconfig sets a `tls-server-name` that is a DNS name (an IP is never sent as SNI) and
/// no proxy is in the way, the pooled client's URLs carry that name instead of the host
/// (pure): TLS sends it as SNI (and verifies it, as before), the returned resolver maps it
/// back to the kubeconfig host's own addresses, and the request's `Host`/`:authority`
/// names it too. Behind a proxy the CONNECT must name the real host, so there the URL
/// stays as written (and SNI is the URL's host; the Lease connection does send the name).
fn sni_alias(
    url: &str,
    tls_server_name: Option<&str>,
    resolver: &Resolver,
) -> Option<(String, AliasResolver)> {
    let name = tls_server_name?;
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let mut parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.eq_ignore_ascii_case(name) {
        return None;
    }
    // Keep the port the URL meant, written or not.
    let port = parsed.port_or_known_default()?;
    parsed.set_host(Some(name)).ok()?;
    parsed.set_port(Some(port)).ok()?;
    let resolver = AliasResolver {
        alias: name.to_ascii_lowercase(),
        host,
        resolver: resolver.clone(),
    };
    Some((parsed.to_string(), resolver))
}

/// Run `op` until it succeeds or fails in a way retrying cannot fix. Transport errors,
/// 5xx and 429 are retried after `backoff` (honouring `Retry-After`). Cancel by dropping.
pub async fn retrying<T, F, Fut>(what: &str, backoff: &mut Backoff, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    loop {
        match op().await {
            Ok(v) => {
                backoff.reset();
                return Ok(v);
            }
            Err(e) if e.is_retryable() => {
                let delay = backoff.with_retry_after(e.retry_after());
                tracing::warn!(
                    error = %crate::runtime::report(&e),
                    retry_in = ?delay,
                    "{what} failed; retrying"
                );
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_and_skew() {
        let t = parse_http_date("Mon, 30 Nov 2026 21:13:00 GMT").unwrap();
        let local = t - Duration::from_secs(90);
        assert_eq!(skew_secs(t, local), 90);
        assert_eq!(skew_secs(local, t), -90);
        assert!(parse_http_date("yesterday").is_none());
    }

    #[test]
    fn the_pooled_client_names_a_dns_tls_server_name_in_its_urls() {
        let r = Resolver::system();
        let alias = |url, name| sni_alias(url, name, &r).map(|(u, a)| (u, a.alias, a.host));
        assert_eq!(
            alias("https://10.0.0.1:6443", Some("kubernetes")),
            Some((
                "https://kubernetes:6443/".to_string(),
                "kubernetes".to_string(),
                "10.0.0.1".to_string()
            ))
        );
        // The URL's path (a proxy's prefix) and implied port are kept; IPv6 hosts lose
        // their brackets.
        let (url, _, host) =
            alias("https://lb.example/k8s/clusters/c-1", Some("API.Internal")).unwrap();
        assert_eq!(url, "https://api.internal/k8s/clusters/c-1");
        assert_eq!(host, "lb.example");
        let (url, _, host) = alias("https://[fd00::1]:6443", Some("kubernetes")).unwrap();
        assert_eq!(
            (url.as_str(), host.as_str()),
            ("https://kubernetes:6443/", "fd00::1")
        );
        // Nothing to do: no name, an IP (never sent as SNI), or the URL's own host.
        assert_eq!(alias("https://10.0.0.1:6443", None), None);
        assert_eq!(alias("https://10.0.0.1:6443", Some("10.0.0.2")), None);
        assert_eq!(alias("https://kubernetes:6443", Some("kubernetes")), None);
    }
}
