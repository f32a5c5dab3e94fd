//! An HTTPS endpoint on 127.0.0.1 with the testplane's serving certificate that answers every
//! request the same way (e.g. a redirect) and records what arrived, `Authorization`
//! included: for tests that a client does not follow redirects or leak its credential.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// One request the stub received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubRequest {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
}

/// A running stub; dropping it stops accepting.
pub struct Stub {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<StubRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

// === impl Stub ===

impl Stub {
    /// Serves `tls` and answers every request with `status` and `headers`, empty body.
    pub async fn start(
        tls: Arc<rustls::ServerConfig>,
        status: u16,
        headers: Vec<(String, String)>,
    ) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let addr = listener.local_addr().expect("stub address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let acceptor = TlsAcceptor::from(tls);
        let reply = Arc::new((status, headers));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, log, reply) = (acceptor.clone(), log.clone(), reply.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: Request<_>| {
                        let (log, reply) = (log.clone(), reply.clone());
                        async move {
                            log.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(StubRequest {
                                    method: req.method().to_string(),
                                    path: req.uri().path().to_string(),
                                    authorization: req
                                        .headers()
                                        .get("authorization")
                                        .and_then(|v| v.to_str().ok())
                                        .map(str::to_string),
                                });
                            let mut resp = Response::builder().status(reply.0);
                            for (name, value) in &reply.1 {
                                resp = resp.header(name, value);
                            }
                            Ok::<_, Infallible>(
                                resp.body(Full::new(Bytes::new()))
                                    .expect("a valid stub response"),
                            )
                        }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Stub { addr, seen, task }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<StubRequest> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}
