//! One keep-alive connection of the caller's own to the API server, for a loop that sends
//! one small request at a time and bounds each exchange itself (the Lease loop). Same
//! server, CA, identity, typed errors and clock-skew report as the [`ApiClient`] it is
//! made from, without what a shared client needs and a heartbeat does not: no pool, no
//! per-request timer, no PING timer. HTTP/2 where the server offers it by ALPN, HTTP/1.1
//! otherwise (`conn/sender.rs`); either way a renewal is one TLS record written, one read,
//! and the connection's driver as the only other task.
//!
//! Liveness is the caller's: an exchange that does not complete (an error, or the caller
//! dropping it at its deadline) leaves no connection behind, so the next request opens a
//! fresh one. Quiet stretches are covered in the kernel by TCP keepalive and
//! `TCP_USER_TIMEOUT`, as on every client bootlet builds.
//!
//! Bodies are JSON here; the Lease's own exchanges (protobuf by default, JSON after a
//! server refused it) are in `conn/lease.rs`.
//!
//! It reaches the server the way the [`ApiClient`] does: through the proxy the policy chose
//! for it (an HTTP CONNECT tunnel, TLS inside), verifying and naming the server by its
//! `tls-server-name` when the kubeconfig sets one.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Uri, Version};
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use reqwest::header::{
    HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, DATE, HOST, PROXY_AUTHORIZATION,
    USER_AGENT,
};
use reqwest::Method;
use rustls::pki_types::ServerName;
use serde::de::DeserializeOwned;
use serde::Serialize;
use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::dial::{self, Resolver};
use super::protobuf::LeaseWire;
use super::wire::{decode, encode, location, retry_after};
use super::{
    ApiClient, Error, Identity, TransportError, TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_INTERVAL,
    TCP_KEEPALIVE_PROBES, TCP_USER_TIMEOUT,
};
use crate::api::kubeconfig::ProxyUrl;
use crate::metrics::METRICS;

mod lease;
mod sender;

use sender::{Body, BodyError, Sender};

/// The media type of JSON bodies, sent and asked for.
const JSON: &str = "application/json";

/// A connection of its own, opened on first use and after any exchange that did not
/// complete. Not `Clone`: one caller, one request at a time.
pub struct Connection {
    client: ApiClient,
    tls: TlsConnector,
    target: Result<Target, String>,
    sender: Option<Sender>,
    /// How the Lease goes on the wire (`conn/lease.rs`): protobuf until a server refuses it.
    lease_wire: LeaseWire,
}

/// Where the server URL points, and how to get there.
#[derive(Debug)]
struct Target {
    /// Host for name resolution (an IPv6 literal without brackets).
    host: String,
    port: u16,
    /// The name TLS sends and the server certificate must carry: `tls-server-name`, else
    /// the URL's host.
    name: ServerName<'static>,
    /// The proxy to tunnel through, if the policy chose one.
    proxy: Option<ProxyUrl>,
    /// The `Host` header: the URL's authority as written.
    authority: HeaderValue,
    /// A path prefix of the server URL (a proxy's), without the trailing slash.
    prefix: String,
}

// === impl Connection ===

impl Connection {
    /// A connection for `client`'s server and identity; nothing is opened yet.
    pub fn new(client: &ApiClient) -> Self {
        Self {
            client: client.clone(),
            tls: connector(client, &sender::ALPN[..]),
            target: target(
                &client.inner.server,
                client.inner.server_name.clone(),
                client.inner.proxy.clone(),
            ),
            sender: None,
            lease_wire: LeaseWire::default(),
        }
    }

    /// The same connection sending Leases as `wire` (a new connection keeps what the
    /// one it replaces learned: a server that refused protobuf is not asked again).
    pub fn with_lease_wire(mut self, wire: LeaseWire) -> Self {
        self.lease_wire = wire;
        self
    }

    /// Test hook (`--test-lease-http1`, `test-hooks` feature only): the same connection
    /// offering only HTTP/1.1 by ALPN, so the bench can compare HTTP/1.1 with HTTP/2
    /// against one server. Call it before the first exchange.
    #[cfg(feature = "test-hooks")]
    pub fn offering_http1_only(mut self) -> Self {
        self.tls = connector(&self.client, &sender::ALPN[1..]);
        self
    }

    pub fn lease_wire(&self) -> LeaseWire {
        self.lease_wire
    }

    pub fn identity(&self) -> &Identity {
        self.client.identity()
    }

    /// The client's bound on one exchange; the caller enforces it.
    pub fn request_timeout(&self) -> std::time::Duration {
        self.client.inner.opts.request_timeout
    }

    /// The HTTP version of the open connection (ALPN's choice), if one is open.
    pub fn http_version(&self) -> Option<Version> {
        self.sender.as_ref().map(Sender::version)
    }

    /// Closes the connection; the next request opens a fresh one.
    pub fn reset(&mut self) {
        self.sender = None;
    }

    pub async fn get<T: DeserializeOwned>(&mut self, path: &str) -> Result<T, Error> {
        self.call(Method::GET, path, None::<&()>).await
    }

    pub async fn create<B: Serialize, T: DeserializeOwned>(
        &mut self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn replace<B: Serialize, T: DeserializeOwned>(
        &mut self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        self.call(Method::PUT, path, Some(body)).await
    }

    /// One exchange, unbounded in time (the caller bounds it); the body is decoded as `T`
    /// on 2xx, as a `Status` otherwise, exactly as [`ApiClient::call`] does.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Error> {
        let json = body.map(|b| encode(&method, path, b)).transpose()?;
        let body = json.map(|json| (json, JSON));
        let (_, bytes) = self.exchange(&method, path, body, JSON).await?;
        decode(method, path, &bytes)
    }

    /// One exchange of `body` (bytes and their media type) asking for `accept`: the
    /// response headers and body on 2xx, the server's refusal as `Error::Api` otherwise.
    async fn exchange(
        &mut self,
        method: &Method,
        path: &str,
        body: Option<(Vec<u8>, &'static str)>,
        accept: &'static str,
    ) -> Result<(HeaderMap, Bytes), Error> {
        let target = self.target.as_ref().map_err(|reason| Error::Setup {
            server: self.client.server().to_string(),
            reason: reason.clone(),
        })?;
        let body = body.map(|(bytes, media_type)| (Bytes::from(bytes), media_type));
        // Taken for the exchange and put back only once it completed: an error or a
        // cancelled exchange leaves no half-used connection behind.
        let reused = self.sender.take();
        let (mut sender, mut fresh) = self.reuse_or_connect(reused, target, method, path).await?;
        let (head, body) = loop {
            let request = self
                .request(target, sender.version(), method, path, body.clone(), accept)
                .map_err(|e| Error::Setup {
                    server: self.client.server().to_string(),
                    reason: format!("{method} {path}: {e}"),
                })?;
            match sender.send(request).await {
                Ok(answer) => break answer,
                // A connection that served earlier exchanges failed before any answer: it
                // closed, or its GOAWAY crossed this request, before its driver saw it.
                // A read goes once more, at once, on a fresh connection (as Go's transport
                // does for a reused connection); never a second time. A write never does:
                // the server may have applied it before the connection died (an API server
                // killed between the etcd commit and the answer, a VIP failover, a
                // middlebox RST), and its replay would be answered 409 (a PUT's stale
                // resourceVersion, a POST's name) for a write that succeeded. Go's
                // transport never replays a PUT or POST either. The caller gets the
                // transport error and decides (the Lease loop re-reads at its next slot
                // and recognises its own renewTime, `lease/writers.rs`).
                Err(e) if !fresh && idempotent(method) => {
                    tracing::debug!(error = %e, "{method} {path}: the reused connection failed before answering; once more on a fresh one");
                    sender = self.connect(target, method, path).await?;
                    fresh = true;
                }
                Err(e) => {
                    METRICS.api_request(method.as_str(), None);
                    return Err(self.client.transport(method, path, e));
                }
            }
        };
        METRICS.api_request(method.as_str(), Some(head.status));
        let bytes = self.collect(method, path, body).await?;
        self.sender = Some(sender);
        self.client.observe_date(head.headers.get(DATE));
        self.verdict(method, path, head, bytes)
    }

    /// A 2xx answer's headers and body, or any other status as the refusal it is.
    fn verdict(
        &self,
        method: &Method,
        path: &str,
        head: http::response::Parts,
        bytes: Bytes,
    ) -> Result<(HeaderMap, Bytes), Error> {
        if head.status.is_success() {
            Ok((head.headers, bytes))
        } else {
            let retry = retry_after(&head.headers);
            let location = location(&head.headers);
            Err(self
                .client
                .refusal(method.clone(), path, head.status, retry, location, &bytes))
        }
    }

    /// The connection an exchange goes on: `reused` if it is still open, else a new one.
    /// `true` with a new one (a reused one failing unanswered may be replaced once).
    async fn reuse_or_connect(
        &self,
        mut reused: Option<Sender>,
        target: &Target,
        method: &Method,
        path: &str,
    ) -> Result<(Sender, bool), Error> {
        if let Some(sender) = reused.as_mut() {
            if !sender.ready().await {
                // Closed since the last exchange (the server's idle timeout, a GOAWAY):
                // nothing was sent on it, so a new connection is safe for any request.
                reused = None;
            }
        }
        match reused {
            Some(sender) => Ok((sender, false)),
            None => Ok((self.connect(target, method, path).await?, true)),
        }
    }

    /// An answer's whole body, refused past the client's `max_body` bytes.
    async fn collect(&self, method: &Method, path: &str, body: Body) -> Result<Bytes, Error> {
        let limit = self.client.inner.opts.max_body;
        match body.collect(limit).await {
            Ok(bytes) => Ok(bytes),
            Err(BodyError::TooLarge) => Err(Error::TooLarge {
                method: method.clone(),
                path: path.to_string(),
                limit,
            }),
            Err(BodyError::Transport(e)) => Err(self.client.transport(method, path, e)),
        }
    }

    /// A new connection to `target`; failing, the exchange it was for fails as a transport
    /// error (counted without an answer).
    async fn connect(&self, target: &Target, method: &Method, path: &str) -> Result<Sender, Error> {
        open(target, &self.tls, &self.client).await.map_err(|e| {
            METRICS.api_request(method.as_str(), None);
            self.client.transport(method, path, e)
        })
    }

    /// The request as `version` carries it: HTTP/1.1 with the path and a `Host` header,
    /// HTTP/2 with the whole URL (its `:scheme`, `:authority` and `:path`).
    fn request(
        &self,
        target: &Target,
        version: Version,
        method: &Method,
        path: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<Request<Option<Bytes>>, http::Error> {
        let mut builder = Request::builder().method(method.clone()).version(version);
        builder = if version == Version::HTTP_2 {
            let authority = target.authority.to_str().unwrap_or_default();
            builder.uri(format!("https://{authority}{}{path}", target.prefix))
        } else {
            builder
                .uri(format!("{}{path}", target.prefix))
                .header(HOST, target.authority.clone())
        };
        builder = builder
            .header(ACCEPT, HeaderValue::from_static(accept))
            .header(USER_AGENT, HeaderValue::from_static(super::USER_AGENT));
        if let Some(auth) = &self.client.inner.auth_header {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        let body = match body {
            Some((bytes, media_type)) => {
                builder = builder.header(CONTENT_TYPE, HeaderValue::from_static(media_type));
                Some(bytes)
            }
            None => None,
        };
        builder.body(body)
    }
}

/// Whether a request may go once more after its connection died unanswered: only one
/// that changes nothing (RFC 9110's safe methods, as Go's transport decides).
fn idempotent(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// TCP (the addresses raced, with kernel keepalive and `TCP_USER_TIMEOUT`), TLS with the
/// client's identity, then HTTP/2 or HTTP/1.1 as ALPN chose, all of it bounded by the
/// client's connect timeout; the connection's driver is spawned and ends when the
/// connection is dropped or closed.
async fn open(
    target: &Target,
    tls: &TlsConnector,
    client: &ApiClient,
) -> Result<Sender, TransportError> {
    let bound = client.inner.opts.connect_timeout;
    let resolver = &client.inner.opts.resolver;
    let handshake = async {
        let tcp = match &target.proxy {
            None => tcp(resolver, &target.host, target.port).await?,
            Some(proxy) => tunnel_with(resolver, proxy, &target.host, target.port).await?,
        };
        let stream = tls.connect(target.name.clone(), tcp).await?;
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Sender::handshake(stream, alpn.as_deref()).await
    };
    tokio::time::timeout(bound, handshake)
        .await
        .map_err(|_| format!("no TCP/TLS connection within {bound:?}"))?
}

/// A TCP connection to the proxy carrying an HTTP CONNECT tunnel to the server: hyper
/// writes the CONNECT (with `Proxy-Authorization` from the proxy URL's userinfo) and reads
/// the answer; on 2xx the socket is handed back as it is, for TLS end to end with the server.
/// (doctor opens its raw TLS probe through it too, so it reaches the server as bootlet does.)
/// The proxy's addresses are raced like the server's.
pub async fn tunnel(proxy: &ProxyUrl, host: &str, port: u16) -> Result<TcpStream, TransportError> {
    tunnel_with(&Resolver::system(), proxy, host, port).await
}

async fn tunnel_with(
    resolver: &Resolver,
    proxy: &ProxyUrl,
    host: &str,
    port: u16,
) -> Result<TcpStream, TransportError> {
    let tcp = tcp(resolver, proxy.host(), proxy.port()).await?;
    let (mut sender, conn) = http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tcp)).await?;
    let conn = tokio::spawn(conn.without_shutdown());
    let authority = match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{host}]:{port}"),
        Err(_) => format!("{host}:{port}"),
    };
    let mut request = Request::builder()
        .method(Method::CONNECT)
        .uri(authority.as_str())
        .header(HOST, authority.as_str())
        .header(USER_AGENT, HeaderValue::from_static(super::USER_AGENT));
    if let Some(auth) = proxy.basic_auth() {
        request = request.header(PROXY_AUTHORIZATION, auth.clone());
    }
    let response = sender.send_request(request.body(Empty::new())?).await?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("proxy {proxy} answered CONNECT {authority} with {status}").into());
    }
    drop(sender);
    // hyper treats a 2xx to CONNECT as the end of HTTP on this connection: the driver
    // returns the socket, and whatever it read past the response (nothing: TLS waits for
    // our ClientHello).
    let parts = conn
        .await
        .map_err(|e| format!("proxy {proxy}: CONNECT task failed: {e}"))??;
    if !parts.read_buf.is_empty() {
        return Err(format!("proxy {proxy} sent data before the TLS handshake").into());
    }
    Ok(parts.io.into_inner())
}

/// The client's TLS configuration offering `alpn`.
fn connector(client: &ApiClient, alpn: &[&[u8]]) -> TlsConnector {
    let mut tls = client.inner.tls.clone();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(tls))
}

/// A TCP connection to `host:port`: its addresses from `resolver`, raced RFC 8305 style
/// ([`dial::race`]: a black-holed address costs [`dial::ATTEMPT_DELAY`], not the connect
/// bound), with kernel keepalive and `TCP_USER_TIMEOUT`. Unbounded in time: [`open`]
/// bounds it.
async fn tcp(resolver: &Resolver, host: &str, port: u16) -> Result<TcpStream, TransportError> {
    let addrs = resolver.lookup(host, port).await?;
    let stream = dial::race(addrs, dial::ATTEMPT_DELAY).await?;
    stream.set_nodelay(true)?;
    let socket = SockRef::from(&stream);
    socket.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(TCP_KEEPALIVE_IDLE)
            .with_interval(TCP_KEEPALIVE_INTERVAL)
            .with_retries(TCP_KEEPALIVE_PROBES),
    )?;
    socket.set_tcp_user_timeout(Some(TCP_USER_TIMEOUT))?;
    Ok(stream)
}

/// Parses the kubeconfig's server URL (pure); `name` overrides the TLS name (the
/// kubeconfig's `tls-server-name`), `proxy` is what the policy chose.
fn target(
    server: &str,
    name: Option<ServerName<'static>>,
    proxy: Option<ProxyUrl>,
) -> Result<Target, String> {
    let bad = |why: &str| format!("server URL {server:?}: {why}");
    let uri: Uri = server.parse().map_err(|e| bad(&format!("{e}")))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("bootlet only talks https"));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let name = match name {
        Some(name) => name,
        None => ServerName::try_from(host.clone()).map_err(|e| bad(&format!("{e}")))?,
    };
    Ok(Target {
        port: authority.port_u16().unwrap_or(443),
        name,
        proxy,
        authority: HeaderValue::from_str(authority.as_str()).map_err(|e| bad(&format!("{e}")))?,
        prefix: uri.path().trim_end_matches('/').to_string(),
        host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        let t = target("https://127.0.0.1:6443", None, None).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 6443));
        assert_eq!(t.authority, "127.0.0.1:6443");
        assert!(matches!(t.name, ServerName::IpAddress(_)));
        assert_eq!(t.prefix, "");

        let t = target("https://api.example.com/k8s/clusters/c-1/", None, None).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("api.example.com", 443));
        assert_eq!(t.authority, "api.example.com");
        assert!(matches!(t.name, ServerName::DnsName(_)));
        assert_eq!(t.prefix, "/k8s/clusters/c-1");

        let t = target("https://[fd00::1]:6443", None, None).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("fd00::1", 6443));
        assert_eq!(t.authority, "[fd00::1]:6443");
        assert!(matches!(t.name, ServerName::IpAddress(_)));

        assert!(target("http://127.0.0.1:8080", None, None)
            .unwrap_err()
            .contains("https"));
        assert!(target("not a url", None, None).is_err());
    }

    #[test]
    fn tls_server_name_and_proxy_ride_along() {
        let name = ServerName::try_from("kubernetes").unwrap();
        let proxy = ProxyUrl::parse("http://proxy:3128", false).unwrap();
        let t = target("https://10.0.0.1:6443", Some(name.clone()), Some(proxy)).unwrap();
        // TCP (or the CONNECT) still goes to the URL's host; TLS names `kubernetes`.
        assert_eq!((t.host.as_str(), t.port), ("10.0.0.1", 6443));
        assert_eq!(t.name, name);
        assert_eq!(t.authority, "10.0.0.1:6443");
        assert_eq!(t.proxy.unwrap().host(), "proxy");
    }
}
