//! The HTTP version the loop's connection speaks, chosen by ALPN in the TLS handshake:
//! HTTP/2 where the server offers it (kube-apiserver does; so does the testplane), HTTP/1.1
//! where it does not (a TLS-terminating proxy or load balancer that speaks only HTTP/1.1,
//! or one that negotiates nothing).
//!
//! HTTP/2 is the `h2` crate driven directly rather than through hyper: hyper's HTTP/2 client
//! sends a request body from a task of its own (HEADERS and DATA in two writes, two TLS
//! records) and keeps a PING timer that wakes the process; here the HEADERS and DATA frames
//! of a request are queued together and leave in one vectored write (one TLS record), no
//! PING is sent (liveness is the caller's bound on each exchange, and TCP keepalive with
//! `TCP_USER_TIMEOUT` in the kernel), and nothing else wakes the connection's driver. What
//! HTTP/2 buys is HPACK: kube-apiserver's ~330 bytes of response headers (`Audit-Id`, the
//! APF UIDs, `Cache-Control`, `Content-Type`, `Date`) shrink to the few that change, and
//! the request's to its `:path` and `content-length`.

use std::future::poll_fn;

use bytes::{Bytes, BytesMut};
use http::response::Parts;
use http::{Request, Version};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::TransportError;

/// The ALPN protocols offered, in the order of preference.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The largest header list an HTTP/2 answer may carry (SETTINGS_MAX_HEADER_LIST_SIZE):
/// kube-apiserver's are under 1 KiB, its `Warning`s included; h2's default is 16 MiB.
const MAX_HEADER_LIST: u32 = 256 << 10;

/// One connection's request handle, by the protocol ALPN chose.
pub enum Sender {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(h2::client::SendRequest<Bytes>),
}

/// An answer's body, read whole by [`Body::collect`].
pub enum Body {
    Http1(hyper::body::Incoming),
    Http2(h2::RecvStream),
}

/// Why a body could not be read.
pub enum BodyError {
    TooLarge,
    Transport(TransportError),
}

// === impl Sender ===

impl Sender {
    /// HTTP/2 over `io` if the TLS handshake chose `h2`, HTTP/1.1 otherwise; the
    /// connection's driver is spawned and ends when the sender is dropped or the
    /// connection closes.
    pub async fn handshake<T>(io: T, alpn: Option<&[u8]>) -> Result<Sender, TransportError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if alpn == Some(b"h2") {
            let (sender, driver) = h2::client::Builder::new()
                .enable_push(false)
                .max_header_list_size(MAX_HEADER_LIST)
                .handshake::<_, Bytes>(io)
                .await?;
            tokio::spawn(async move {
                if let Err(e) = driver.await {
                    tracing::debug!(error = %e, "API server connection (HTTP/2) ended");
                }
            });
            return Ok(Sender::Http2(sender));
        }
        let (sender, driver) = http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            if let Err(e) = driver.await {
                tracing::debug!(error = %e, "API server connection ended");
            }
        });
        Ok(Sender::Http1(sender))
    }

    pub fn version(&self) -> Version {
        match self {
            Sender::Http1(_) => Version::HTTP_11,
            Sender::Http2(_) => Version::HTTP_2,
        }
    }

    /// Whether a request can go on this connection now. `false` when it closed since the
    /// last exchange (an idle timeout, a GOAWAY): nothing was sent on it, so a new
    /// connection is safe for any request.
    pub async fn ready(&mut self) -> bool {
        match self {
            Sender::Http1(s) => !s.is_closed() && s.ready().await.is_ok(),
            Sender::Http2(s) => poll_fn(|cx| s.poll_ready(cx)).await.is_ok(),
        }
    }

    /// Sends `request` (its body, if any, in the same write as its headers on HTTP/2) and
    /// waits for the answer's head.
    pub async fn send(
        &mut self,
        request: Request<Option<Bytes>>,
    ) -> Result<(Parts, Body), TransportError> {
        match self {
            Sender::Http1(s) => {
                let request = request.map(|body| body.map(Full::new).unwrap_or_default());
                let response = s.send_request(request).await?;
                let (head, body) = response.into_parts();
                Ok((head, Body::Http1(body)))
            }
            Sender::Http2(s) => {
                poll_fn(|cx| s.poll_ready(cx)).await?;
                let (parts, body) = request.into_parts();
                let end = body.is_none();
                let (response, mut stream) = s.send_request(Request::from_parts(parts, ()), end)?;
                if let Some(body) = body {
                    stream.send_data(body, true)?;
                }
                let (head, body) = response.await?.into_parts();
                Ok((head, Body::Http2(body)))
            }
        }
    }
}

// === impl Body ===

impl Body {
    /// The whole body, refused past `limit` bytes. HTTP/2's flow-control window is given
    /// back as data arrives, so the connection never stalls on what was read.
    pub async fn collect(self, limit: usize) -> Result<Bytes, BodyError> {
        match self {
            Body::Http1(body) => match Limited::new(body, limit).collect().await {
                Ok(collected) => Ok(collected.to_bytes()),
                Err(e) if e.is::<LengthLimitError>() => Err(BodyError::TooLarge),
                Err(e) => Err(BodyError::Transport(e)),
            },
            Body::Http2(mut body) => {
                let mut first: Option<Bytes> = None;
                let mut rest = BytesMut::new();
                let mut len = 0usize;
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.map_err(|e| BodyError::Transport(e.into()))?;
                    let _ = body.flow_control().release_capacity(chunk.len());
                    len += chunk.len();
                    if len > limit {
                        return Err(BodyError::TooLarge);
                    }
                    // The usual answer is one DATA frame: kept as it came, without a copy.
                    match first.take() {
                        None if rest.is_empty() => first = Some(chunk),
                        None => rest.extend_from_slice(&chunk),
                        Some(head) => {
                            rest.extend_from_slice(&head);
                            rest.extend_from_slice(&chunk);
                        }
                    }
                }
                Ok(first.unwrap_or_else(|| rest.freeze()))
            }
        }
    }
}
