//! The HTTPS listener: TLS config (ring provider, h2 + http/1.1 by ALPN, client certs
//! requested), connection ids and events, bytes on the wire per connection (`wire`),
//! outages (drop every connection, re-listen on the same port) and shutdown. Request
//! handling is `api`'s.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_rustls::TlsAcceptor;

use crate::{auth, pki, Event, Shared};

/// (server config, the real CA verifier used per request to classify client certs).
pub fn tls_config(
    ca: &pki::Ca,
) -> Result<(Arc<rustls::ServerConfig>, Arc<dyn ClientCertVerifier>), crate::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der().to_vec().into())?;
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

/// Commands to the accept loop.
pub enum Command {
    /// Drop the listener and every connection, ack, wait, listen again.
    Outage(std::time::Duration, oneshot::Sender<()>),
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
            Some(Command::Outage(dur, ack)) = cmds.recv() => {
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
            res = accept => {
                let Ok((tcp, _peer)) = res else { continue };
                let _ = tcp.set_nodelay(true);
                let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                shared.emit(Event::ConnectionOpened { conn });
                tokio::spawn(serve_conn(shared.clone(), acceptor.clone(), tcp, conn, kill.subscribe()));
            }
        }
    }
}

/// Per-connection facts the handlers need.
#[derive(Clone)]
pub struct ConnInfo {
    pub conn: u64,
    pub peer: auth::PeerCert,
}

async fn serve_conn(
    shared: Arc<Shared>,
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    conn: u64,
    mut kill: watch::Receiver<u64>,
) {
    let tcp = crate::wire::Counted::new(tcp, shared.wire.open(conn));
    let work = async {
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
        let client_cn = match &peer {
            auth::PeerCert::Trusted(cn, _) => Some(cn.clone()),
            _ => None,
        };
        shared.emit(Event::TlsHandshake {
            conn,
            alpn,
            client_cn,
        });
        let info = ConnInfo { conn, peer };
        let sh = shared.clone();
        let svc = hyper::service::service_fn(move |req| {
            crate::api::handle(sh.clone(), info.clone(), req)
        });
        let _ = auto::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(tls), svc)
            .await;
    };
    tokio::select! {
        _ = work => {}
        _ = kill.changed() => {}
    }
    shared.wire.close(conn);
    shared.emit(Event::ConnectionClosed { conn });
}
