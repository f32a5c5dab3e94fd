//! The connect and handshake doctor observes on its own: DNS + TCP, then a TLS handshake
//! that trusts only the kubeconfig CA while recording the chain the server presented, so a
//! CA mismatch can show both CA pins. Sends no request itself: the verified session is
//! handed to `http.rs` for server-reachable's one round trip; the API client does the rest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::CertificateError;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::api::conn;
use crate::api::kubeconfig::Server;
use crate::api::proxy::{ProxyEnv, ProxyPolicy};
use crate::pki::spki_pin;
use crate::runtime::report;
use tokio::time::timeout;
use x509_parser::prelude::{FromDer as _, ParsedExtension, X509Certificate};

use crate::api::tls;

/// Why the handshake did not give a trusted session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsFailure {
    /// Connected, but no TLS answer in time: the server accepts and never answers.
    Timeout { after: Duration },
    /// Not TLS, reset, or an alert unrelated to trust.
    Protocol { detail: String },
    /// The server's chain does not lead to the kubeconfig CA ("x509: certificate signed
    /// by unknown authority"). Pins are kubeadm's `sha256:<hex SPKI digest>`.
    UnknownCa {
        kubeconfig_pins: Vec<String>,
        /// Each kubeconfig CA's subject and key id (`CN=kubernetes, key id 49:07:…`): two
        /// kubeadm clusters' CAs have the same name, never the same key.
        kubeconfig_cas: Vec<String>,
        /// Pins of the CA certificates the server sent with its own, if any (kube-apiserver
        /// sends none: its `--tls-cert-file` holds the serving certificate alone).
        server_ca_pins: Vec<String>,
        server_issuer: String,
        /// The key id of the CA that signed the server's certificate (its Authority Key
        /// Identifier), as `openssl x509 -ext subjectKeyIdentifier` prints a CA's.
        server_issuer_key_id: Option<String>,
    },
    /// Trusted CA, but the certificate is wrong for this server (name, validity...).
    BadCertificate { detail: String },
}

/// Resolve and connect to `server`'s host and port within `limit`, through the proxy the
/// agent's one proxy policy picks for it (an HTTP CONNECT tunnel), if any.
pub async fn connect(server: &Server, limit: Duration) -> Result<TcpStream, String> {
    let (host, port) = host_port(&server.url)?;
    let policy = ProxyPolicy::new(server.proxy.clone(), ProxyEnv::process());
    if let Some(proxy) = policy.proxy_for(&server.url)? {
        return match timeout(limit, conn::tunnel(&proxy, &host, port)).await {
            Err(_) => Err(format!("no tunnel through proxy {proxy} within {limit:?}")),
            Ok(Err(e)) => Err(format!("through proxy {proxy}: {}", report(&*e))),
            Ok(Ok(s)) => Ok(s),
        };
    }
    let addrs = match timeout(limit, tokio::net::lookup_host((host.as_str(), port))).await {
        Err(_) => return Err(format!("resolving {host} timed out after {limit:?}")),
        Ok(Err(e)) => return Err(format!("cannot resolve {host}: {e}")),
        Ok(Ok(a)) => a.collect::<Vec<_>>(),
    };
    let Some(first) = addrs.first().copied() else {
        return Err(format!("cannot resolve {host}: no addresses"));
    };
    match timeout(limit, TcpStream::connect(&addrs[..])).await {
        Err(_) => Err(format!("connecting to {first} timed out after {limit:?}")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(format!("connection to {first} refused"))
        }
        Ok(Err(e)) => Err(format!("cannot connect to {first}: {e}")),
        Ok(Ok(s)) => Ok(s),
    }
}

/// A TLS handshake over `stream` that trusts only `ca_pem`, verifying the server's
/// certificate for `tls-server-name` when the kubeconfig sets one, else the URL's host.
/// The session (ALPN `http/1.1`) is returned for one HTTP round trip.
pub async fn handshake(
    stream: TcpStream,
    server: &Server,
    ca_pem: &[u8],
    limit: Duration,
) -> Result<TlsStream<TcpStream>, TlsFailure> {
    let protocol = |detail: String| TlsFailure::Protocol { detail };
    let host = match &server.tls_server_name {
        Some(name) => name.clone(),
        None => host_port(&server.url).map_err(protocol)?.0,
    };
    let name = ServerName::try_from(host).map_err(|e| protocol(e.to_string()))?;
    let anchors = pem_certs(ca_pem);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let verifier = tls::verifier(ca_pem, None, Some(seen.clone())).map_err(protocol)?;
    let mut config = tls::builder()
        .map_err(protocol)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let result = match timeout(limit, connector.connect(name, stream)).await {
        Err(_) => return Err(TlsFailure::Timeout { after: limit }),
        Ok(r) => r,
    };
    let e = match result {
        Ok(session) => return Ok(session),
        Err(e) => e,
    };
    let chain = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let cert_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .and_then(|r| match r {
            rustls::Error::InvalidCertificate(c) => Some(c.clone()),
            _ => None,
        });
    Err(match cert_error {
        Some(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
            TlsFailure::UnknownCa {
                kubeconfig_pins: anchors.iter().filter_map(|d| spki_pin(d)).collect(),
                kubeconfig_cas: anchors.iter().filter_map(|d| named(d)).collect(),
                server_ca_pins: chain.iter().skip(1).filter_map(|d| spki_pin(d)).collect(),
                server_issuer: chain.first().map(|d| issuer(d)).unwrap_or_default(),
                server_issuer_key_id: chain.first().and_then(|d| authority_key_id(d)),
            }
        }
        Some(other) => TlsFailure::BadCertificate {
            detail: format!("{other:?}"),
        },
        None => protocol(e.to_string()),
    })
}

/// `openssl`'s spelling of a key identifier: upper-case hex pairs joined by ':'.
fn key_id(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A CA certificate's subject, and its key id when it has one.
fn named(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject().to_string();
    let id = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(key_id(k.0)),
            _ => None,
        });
    Some(match id {
        Some(id) => format!("{subject}, key id {id}"),
        None => subject,
    })
}

fn authority_key_id(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    cert.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| key_id(k.0))
            }
            _ => None,
        })
}

fn issuer(der: &[u8]) -> String {
    X509Certificate::from_der(der)
        .map(|(_, c)| c.issuer().to_string())
        .unwrap_or_default()
}

fn pem_certs(pem: &[u8]) -> Vec<Vec<u8>> {
    rustls_pemfile::certs(&mut &pem[..])
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect()
}

/// `https://host:port` → (host without brackets, port; 443 by default).
fn host_port(server: &str) -> Result<(String, u16), String> {
    let url = reqwest::Url::parse(server).map_err(|e| format!("server {server:?}: {e}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| format!("server {server:?} has no host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, url.port_or_known_default().unwrap_or(443)))
}
