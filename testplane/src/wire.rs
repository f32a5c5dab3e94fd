//! Bytes on the wire per connection: a counting wrapper around each accepted TCP stream
//! (TLS records included, handshake and all, as the socket carries them) and the table that
//! `TestPlane::wire_bytes` reads. Connection ids, TLS and HTTP are `server`'s.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How many closed connections' totals the table keeps (oldest dropped first), so a
/// long-running `serve` with a client that reconnects every few seconds stays bounded.
/// Open connections are never dropped.
pub const MAX_CLOSED: usize = 65_536;

/// Bytes one connection carried so far (or in all, once closed), counted at the server's
/// socket: `from_client` is what the server read (requests), `to_client` what it wrote
/// (responses), TLS framing and handshake included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireBytes {
    pub from_client: u64,
    pub to_client: u64,
}

/// One connection's running totals.
#[derive(Debug, Default)]
pub struct Counter {
    read: AtomicU64,
    written: AtomicU64,
}

impl Counter {
    pub fn get(&self) -> WireBytes {
        WireBytes {
            from_client: self.read.load(Ordering::Relaxed),
            to_client: self.written.load(Ordering::Relaxed),
        }
    }
}

/// Every connection's counter by connection id.
#[derive(Debug, Default)]
pub struct Table {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    conns: HashMap<u64, Arc<Counter>>,
    /// Closed connections, oldest first.
    closed: VecDeque<u64>,
}

// === impl Table ===

impl Table {
    /// A counter for a new connection.
    pub fn open(&self, conn: u64) -> Arc<Counter> {
        let counter = Arc::new(Counter::default());
        self.lock().conns.insert(conn, counter.clone());
        counter
    }

    /// The connection is gone: its totals are final; the oldest closed ones beyond
    /// [`MAX_CLOSED`] are forgotten.
    pub fn close(&self, conn: u64) {
        let mut inner = self.lock();
        inner.closed.push_back(conn);
        while inner.closed.len() > MAX_CLOSED {
            if let Some(old) = inner.closed.pop_front() {
                inner.conns.remove(&old);
            }
        }
    }

    pub fn get(&self, conn: u64) -> Option<WireBytes> {
        self.lock().conns.get(&conn).map(|c| c.get())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A stream that adds what passes through it to a [`Counter`]; reads and writes go to the
/// inner stream unchanged (vectored writes stay vectored).
pub struct Counted<S> {
    inner: S,
    counter: Arc<Counter>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, counter: Arc<Counter>) -> Self {
        Counted { inner, counter }
    }
}

// === impl Counted ===

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        self.counter.read.fetch_add(n as u64, Ordering::Relaxed);
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count_written(&res);
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count_written(&res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> Counted<S> {
    fn count_written(&self, res: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = res {
            self.counter.written.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn counts_both_directions_as_passed_through() {
        let (a, mut b) = tokio::io::duplex(64);
        let counter = Arc::new(Counter::default());
        let mut counted = Counted::new(a, counter.clone());
        counted.write_all(b"hello, world").await.unwrap();
        let mut got = [0u8; 12];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello, world");
        b.write_all(b"ok").await.unwrap();
        let mut back = [0u8; 2];
        counted.read_exact(&mut back).await.unwrap();
        assert_eq!(
            counter.get(),
            WireBytes {
                from_client: 2,
                to_client: 12
            }
        );
    }

    #[test]
    fn keeps_open_connections_and_prunes_the_oldest_closed() {
        let table = Table::default();
        let live = table.open(0);
        for id in 1..=(MAX_CLOSED as u64 + 2) {
            table.open(id);
            table.close(id);
        }
        // Connection 0 is the oldest but still open; 1 and 2 are the oldest closed ones.
        assert_eq!(table.get(0), Some(live.get()));
        assert_eq!(table.get(1), None);
        assert_eq!(table.get(2), None);
        assert!(table.get(3).is_some());
        assert!(table.get(MAX_CLOSED as u64 + 2).is_some());
    }

    /// A real TLS connection to the testplane, counted on the client side too: what the
    /// server reports is exactly what the client's socket carried, handshake included.
    #[tokio::test]
    async fn the_server_counts_what_the_client_socket_carried() {
        let tp = crate::TestPlane::builder().start().await.unwrap();
        let mut events = tp.events();
        let client_side = Arc::new(Counter::default());
        let tcp = tokio::net::TcpStream::connect(tp.addr()).await.unwrap();
        let tcp = Counted::new(tcp, client_side.clone());
        let cfg = crate::client::client_tls(&tp.ca_pem(), None, &["http/1.1"]);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let name = rustls::pki_types::ServerName::from(tp.addr().ip());
        let mut tls = connector.connect(name, tcp).await.unwrap();
        let request = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        tls.write_all(request).await.unwrap();
        let mut response = Vec::new();
        tls.read_to_end(&mut response).await.unwrap();
        assert!(response.starts_with(b"HTTP/1.1 200"));
        let conn = crate::wait_for(
            &mut events,
            std::time::Duration::from_secs(5),
            |e| match e {
                crate::Event::ConnectionClosed { conn } => Some(*conn),
                _ => None,
            },
        )
        .await
        .expect("the connection closes");
        let client = client_side.get();
        let server = tp.wire_bytes(conn).expect("the closed connection is kept");
        assert_eq!(server.from_client, client.to_client, "client -> server");
        assert_eq!(server.to_client, client.from_client, "server -> client");
        // TLS records, not plaintext: the handshake alone carries the server's certificates.
        assert!(server.from_client > request.len() as u64);
        assert!(server.to_client > response.len() as u64 + 500);
        assert_eq!(tp.wire_bytes(conn + 1000), None);
        tp.shutdown().await;
    }
}
