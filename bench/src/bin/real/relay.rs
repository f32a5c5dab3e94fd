//! A counting TCP relay in front of kube-apiserver: the real API server keeps no
//! per-connection statistics, so each subject's bootstrap kubeconfig points here and the
//! relay counts its connections (≈ TLS handshakes: the relay passes TLS through untouched)
//! and the bytes each way. It opens one upstream connection per accepted one; when the API
//! server is down the client's connection is closed at once, as a refused connect would be.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What went through the relay so far.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections whose upstream connect succeeded.
    pub conns: AtomicU64,
    /// Client → API server bytes (TLS records, handshakes included).
    pub up: AtomicU64,
    /// API server → client bytes.
    pub down: AtomicU64,
}

/// A snapshot of `Counts`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    pub conns: u64,
    pub up: u64,
    pub down: u64,
}

impl Snapshot {
    pub fn since(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            conns: self.conns - earlier.conns,
            up: self.up - earlier.up,
            down: self.down - earlier.down,
        }
    }
}

pub struct Relay {
    pub addr: SocketAddr,
    counts: Arc<Counts>,
}

// === impl Relay ===

impl Relay {
    /// Listen on a free loopback port and relay every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let c = c.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    c.conns.fetch_add(1, Ordering::Relaxed);
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, c.clone(), true);
                    let down = pump(sr, cw, c, false);
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Ok(Relay { addr, counts })
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            conns: self.counts.conns.load(Ordering::Relaxed),
            up: self.counts.up.load(Ordering::Relaxed),
            down: self.counts.down.load(Ordering::Relaxed),
        }
    }
}

/// Copy one direction, counting, until EOF or an error; then shut the write half.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    c: Arc<Counts>,
    up: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                let counter = if up { &c.up } else { &c.down };
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}
