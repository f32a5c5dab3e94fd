//! The HTTPS listener: TLS config (ring provider, h2 + http/1.1 by ALPN, client certs
//! requested), connection ids and events (with the SNI each client sent), bytes on the
//! wire per connection (`wire`), outages (drop every connection, re-listen on the same
//! port) and shutdown, and the connection-level fault hooks: accept modes (silent, a
//! stalled TLS handshake), watches reset with a TCP RST, and rewritten answers. Request
//! handling is `api`'s.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio_rustls::TlsAcceptor;

use crate::faults::AcceptMode;
use crate::types::{Command, ConnInfo};
use crate::{auth, pki, Event, Shared};

/// (server config, the real CA verifier used per request to classify client certs). Client
/// certificates are trusted from the cluster CA `ca` and from `client_ca` (kube-apiserver's
/// `--client-ca-file` bundle holding a separate kubelet-client signer's CA); the server's
/// own certificate is `ca`'s.
pub fn tls_config(
    ca: &pki::Ca,
    client_ca: &pki::Ca,
) -> Result<(Arc<rustls::ServerConfig>, Arc<dyn ClientCertVerifier>), crate::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der().to_vec().into())?;
    roots.add(client_ca.cert_der().to_vec().into())?;
    let verifier: Arc<dyn ClientCertVerifier> =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()?;
    let (cert_pem, key_pem) = ca.serving()?;
    let chain = pki::pem_blocks(cert_pem.as_bytes(), "CERTIFICATE")
        .into_iter()
        .chain([ca.cert_der().to_vec()])
        .map(Into::into)
        .collect();
    let key_der = pki::pem_blocks(key_pem.as_bytes(), "PRIVATE KEY").remove(0);
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_der.into());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(auth::RequestClientCert {
            inner: verifier.clone(),
        }))
        .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(cfg), verifier))
}

/// Bind with SO_REUSEADDR so an outage can re-listen on the same port at once.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(1024)
}

pub struct Handle {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Handle {
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub fn spawn(shared: Arc<Shared>, listener: TcpListener, tls: Arc<rustls::ServerConfig>) -> Handle {
    let (stop, stop_rx) = watch::channel(false);
    let (cmd_tx, cmd_rx) = mpsc::channel(8);
    shared.faults.set_commands(cmd_tx);
    let task = tokio::spawn(accept_loop(
        shared,
        listener,
        TlsAcceptor::from(tls),
        stop_rx,
        cmd_rx,
    ));
    Handle {
        stop,
        task: Some(task),
    }
}

async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    mut stop: watch::Receiver<bool>,
    mut cmds: mpsc::Receiver<Command>,
) {
    // Bumped to drop every open connection (outage or shutdown).
    let (kill, _) = watch::channel(0u64);
    // Bumped to close every open connection gracefully (GOAWAY).
    let (goaway, _) = watch::channel(0u64);
    let mut listener = Some(listener);
    loop {
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => {
                kill.send_modify(|g| *g += 1);
                return;
            }
            Some(cmd) = cmds.recv() => match cmd {
                Command::Outage(dur, ack) => {
                    listener = None;
                    kill.send_modify(|g| *g += 1);
                    shared.emit(Event::OutageStarted);
                    let _ = ack.send(());
                    tokio::select! {
                        _ = tokio::time::sleep(dur) => {}
                        _ = stop.changed() => return,
                    }
                    match bind(shared.addr).await {
                        Ok(l) => listener = Some(l),
                        Err(e) => tracing::error!(addr = %shared.addr, error = %e, "re-listen after outage failed"),
                    }
                    shared.emit(Event::OutageEnded);
                }
                Command::DropConnections(ack) => {
                    kill.send_modify(|g| *g += 1);
                    let _ = ack.send(());
                }
                Command::GoAway(ack) => {
                    goaway.send_modify(|g| *g += 1);
                    let _ = ack.send(());
                }
            },
            res = accept => {
                let Ok((tcp, _peer)) = res else { continue };
                let _ = tcp.set_nodelay(true);
                let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                shared.emit(Event::ConnectionOpened { conn });
                let signals = Signals { kill: kill.subscribe(), goaway: goaway.subscribe() };
                tokio::spawn(serve_conn(shared.clone(), acceptor.clone(), tcp, conn, signals));
            }
        }
    }
}

/// What the accept loop tells every connection: drop now, or close gracefully.
struct Signals {
    kill: watch::Receiver<u64>,
    goaway: watch::Receiver<u64>,
}

async fn serve_conn(
    shared: Arc<Shared>,
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    conn: u64,
    signals: Signals,
) {
    let Signals {
        mut kill,
        mut goaway,
    } = signals;
    let mode = shared.faults.accept_mode();
    let reset = Arc::new(Reset::default());
    let tcp = Resettable {
        tcp,
        reset: reset.clone(),
    };
    let mut tcp = crate::wire::Counted::new(tcp, shared.wire.open(conn));
    let work = async {
        let mut acceptor = acceptor;
        match mode {
            AcceptMode::Serve => {}
            AcceptMode::Http1Only => {
                let mut cfg = (*acceptor.config().clone()).clone();
                cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
                acceptor = TlsAcceptor::from(Arc::new(cfg));
            }
            AcceptMode::Silent => {
                let _ = drain(&mut tcp).await;
                return;
            }
            AcceptMode::StallHandshake => {
                let _ = stall_handshake(&mut tcp, acceptor.config().clone()).await;
                return;
            }
        }
        let tls = match acceptor.accept(tcp).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(conn, error = %e, "TLS handshake failed");
                return;
            }
        };
        let (_, sc) = tls.get_ref();
        let alpn = sc
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let peer = auth::classify_peer(&*shared.verifier, sc.peer_certificates().unwrap_or(&[]));
        let (client_cn, client_serial) = match &peer {
            auth::PeerCert::Trusted(cn, _) => (
                Some(cn.clone()),
                sc.peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|leaf| pki::cert_serial(leaf)),
            ),
            _ => (None, None),
        };
        let sni = sc.server_name().map(str::to_string);
        shared.emit(Event::TlsHandshake {
            conn,
            alpn,
            client_cn,
            sni,
            client_serial,
        });
        let info = ConnInfo { conn, peer };
        let (sh, rs) = (shared.clone(), reset.clone());
        let svc = hyper::service::service_fn(move |req| {
            respond(sh.clone(), info.clone(), rs.clone(), req)
        });
        let builder = auto::Builder::new(TokioExecutor::new());
        let http = builder.serve_connection(TokioIo::new(tls), svc);
        tokio::pin!(http);
        tokio::select! {
            _ = http.as_mut() => return,
            _ = goaway.changed() => {}
        }
        http.as_mut().graceful_shutdown();
        let _ = http.await;
    };
    tokio::select! {
        _ = work => {}
        _ = kill.changed() => {}
        () = reset.notify.notified() => {
            if reset.watch.load(Ordering::Relaxed) {
                shared.emit(Event::WatchDropped { conn });
            }
        }
    }
    shared.wire.close(conn);
    shared.emit(Event::ConnectionClosed { conn });
}

/// A scripted reset (the connection dies unanswered), else `api::handle`, then the answer
/// faults: a write applied and its connection reset unanswered, a watch's connection reset
/// after a while, a rewritten body. The admin path is never touched.
async fn respond(
    shared: Arc<Shared>,
    info: ConnInfo,
    reset: Arc<Reset>,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<crate::types::Resp, std::convert::Infallible> {
    let method = req.method().as_str().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let admin = req.uri().path().starts_with("/testplane/");
    let watch = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    if !admin && shared.faults.take_reset() {
        // Reset before the request is read: the connection goes with an RST, unanswered.
        reset.trigger(false);
        std::future::pending::<()>().await;
    }
    let resp = crate::api::handle(shared.clone(), info, req).await?;
    if admin {
        return Ok(resp);
    }
    if shared.faults.take_apply_then_reset(&method) {
        // Applied, and the answer never leaves: the connection goes with an RST.
        reset.trigger(false);
        std::future::pending::<()>().await;
    }
    if let Some(after) = shared.faults.reset_watches_after().filter(|_| watch) {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            reset.trigger(true);
        });
    }
    Ok(match shared.faults.answer_for(&method, &path, watch) {
        Some(answer) => answer.apply(resp),
        None => resp,
    })
}

/// Read and drop what the client sends until it closes (or the connection is dropped).
async fn drain<S: AsyncRead + Unpin>(s: &mut S) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    while s.read(&mut buf).await? > 0 {}
    Ok(())
}

/// `AcceptMode::StallHandshake`: read the ClientHello, send only the first record of the
/// server's flight (the ServerHello), then hold the connection without another byte.
async fn stall_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    cfg: Arc<rustls::ServerConfig>,
) -> io::Result<()> {
    let mut tls = rustls::ServerConnection::new(cfg).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 16 * 1024];
    while !tls.wants_write() {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        tls.read_tls(&mut &buf[..n])?;
        tls.process_new_packets().map_err(io::Error::other)?;
    }
    let mut flight = Vec::new();
    while tls.wants_write() {
        tls.write_tls(&mut flight)?;
    }
    // A TLS record: type (1), version (2), length (2), then the fragment.
    let first = match flight.get(3..5) {
        Some(len) => 5 + usize::from(u16::from_be_bytes([len[0], len[1]])),
        None => flight.len(),
    };
    s.write_all(&flight[..first.min(flight.len())]).await?;
    s.flush().await?;
    drain(s).await
}

/// A request to reset one connection.
#[derive(Default)]
struct Reset {
    flag: AtomicBool,
    /// Set when the reset ends a watch (reported as `Event::WatchDropped`).
    watch: AtomicBool,
    notify: Notify,
}

impl Reset {
    fn trigger(&self, watch: bool) {
        self.watch.store(watch, Ordering::Relaxed);
        self.flag.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }
}

/// The accepted socket. Dropped after its [`Reset`] was triggered, it closes with an RST
/// (zero linger) instead of a FIN.
struct Resettable {
    tcp: TcpStream,
    reset: Arc<Reset>,
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.flag.load(Ordering::Relaxed) {
            let _ = self.tcp.set_zero_linger();
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
