//! A tiny HTTP proxy on 127.0.0.1 for tests: it records every request it is sent, opens
//! CONNECT tunnels to one upstream (the testplane) whatever host was asked for, and refuses
//! everything else with 502. Optionally it demands one `Proxy-Authorization` value (407).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// One request the proxy was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    /// `CONNECT`, or `GET` etc. for a plain forward-proxy request.
    pub method: String,
    /// The request target: `host:port` for CONNECT, an absolute URL otherwise.
    pub target: String,
    pub proxy_authorization: Option<String>,
    /// A tunnel was opened to the upstream.
    pub tunnelled: bool,
}

/// A running proxy; dropping it stops accepting (open tunnels run to their end).
pub struct ConnectProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<ProxyRequest>>>,
    events: broadcast::Sender<ProxyRequest>,
    task: tokio::task::JoinHandle<()>,
}

// === impl ConnectProxy ===

impl ConnectProxy {
    /// Tunnels every CONNECT to `upstream`; with `require_auth`, a CONNECT without exactly
    /// that `Proxy-Authorization` value gets 407.
    pub async fn start(upstream: SocketAddr, require_auth: Option<String>) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (events, _) = broadcast::channel(1024);
        let (log, tx) = (seen.clone(), events.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (log, tx, auth) = (log.clone(), tx.clone(), require_auth.clone());
                tokio::spawn(async move {
                    if let Some(req) = serve(client, upstream, auth.as_deref()).await {
                        log.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(req.clone());
                        let _ = tx.send(req);
                    }
                });
            }
        });
        ConnectProxy {
            addr,
            seen,
            events,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in order of arrival of their heads.
    pub fn requests(&self) -> Vec<ProxyRequest> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Requests as they arrive (after the reply to each was decided).
    pub fn subscribe(&self) -> broadcast::Receiver<ProxyRequest> {
        self.events.subscribe()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client connection: read the head, answer, and for an accepted CONNECT copy bytes
/// both ways until either side closes.
async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    require_auth: Option<&str>,
) -> Option<ProxyRequest> {
    let head = read_head(&mut client).await?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let proxy_authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, value)| value.trim().to_string());
    let mut req = ProxyRequest {
        method,
        target,
        proxy_authorization,
        tunnelled: false,
    };
    if req.method != "CONNECT" {
        let _ = client
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        return Some(req);
    }
    if require_auth.is_some() && req.proxy_authorization.as_deref() != require_auth {
        let _ = client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic realm=\"test\"\r\ncontent-length: 0\r\n\r\n")
            .await;
        return Some(req);
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return Some(req);
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .ok()?;
    req.tunnelled = true;
    let record = req.clone();
    tokio::spawn(async move {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    });
    Some(record)
}

/// The request head, up to and without the blank line (at most 16 KiB).
async fn read_head(client: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte, so nothing after the head (a client's early bytes) is consumed.
    while !buf.ends_with(b"\r\n\r\n") {
        if buf.len() > 16 << 10 || client.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    buf.truncate(buf.len() - 4);
    String::from_utf8(buf).ok()
}
