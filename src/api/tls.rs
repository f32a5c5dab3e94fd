//! The rustls client configuration: the cluster CA as the only trust root, the serving
//! certificate checked against `tls-server-name` when the kubeconfig sets one, the ring
//! provider, HTTP/2 by ALPN, and the client certificate when that is our identity.
//! It does not read files; the kubeconfig module hands it PEM.

use std::sync::{Arc, Mutex};

use reqwest::header::HeaderValue;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::Identity;
use crate::api::kubeconfig::Credential;
use crate::pki;

/// Build the TLS config, our identity as logged, and the `Authorization` header (tokens).
/// With `server_name` (the kubeconfig's `tls-server-name`) the serving certificate must
/// carry that name, whatever host the connection was opened to.
pub fn client_config(
    ca_pem: &[u8],
    credential: &Credential,
    server_name: Option<&ServerName<'static>>,
) -> Result<(ClientConfig, Identity, Option<HeaderValue>), String> {
    let builder = match server_name {
        None => builder()?.with_root_certificates(roots(ca_pem)?),
        Some(name) => builder()?
            .dangerous()
            .with_custom_certificate_verifier(verifier(ca_pem, Some(name.clone()), None)?),
    };
    let (mut config, identity, header) = match credential {
        Credential::ClientCert { chain_pem, key } => {
            let chain = certs(chain_pem.as_bytes())?;
            let key = private_key(key.as_str())?;
            let identity = cert_identity(chain_pem);
            let config = builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!("the client certificate and key do not form a TLS identity: {e}")
            })?;
            (config, identity, None)
        }
        Credential::Token(token) => {
            let mut value = HeaderValue::from_str(&token.secret_header()).map_err(|_| {
                "the bearer token contains characters not allowed in a header".to_string()
            })?;
            value.set_sensitive(true);
            let identity = if token.is_bootstrap_token() {
                Identity::BootstrapToken {
                    id: token.id().to_string(),
                }
            } else {
                Identity::Token
            };
            (builder.with_no_client_auth(), identity, Some(value))
        }
        // The plugin runs when a request needs it (`ApiClient::send`), and a client
        // certificate it hands out gets a config of its own, built with the arm above.
        Credential::Exec(plugin) => {
            let identity = Identity::ExecPlugin {
                command: plugin.command().to_string(),
            };
            (builder.with_no_client_auth(), identity, None)
        }
        Credential::None => (builder.with_no_client_auth(), Identity::Anonymous, None),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, identity, header))
}

/// Every rustls config bootlet builds starts here: the ring provider (never a
/// process-wide default), safe protocol versions; the caller picks the trust roots.
pub fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, String> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
}

/// The cluster CA bundle as rustls trust roots; an empty or unusable bundle is an error.
fn roots(ca_pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certs(ca_pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("the cluster CA is not a usable trust root: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the cluster CA bundle holds no certificate".into());
    }
    Ok(roots)
}

/// The cluster CA's own verifier, wrapped in [`CaVerifier`]: checked against `name` when
/// given (`tls-server-name`), and remembering the chain the server sent in `seen` when
/// given (doctor shows its CA pin when it does not verify).
pub fn verifier(
    ca_pem: &[u8],
    name: Option<ServerName<'static>>,
    seen: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
) -> Result<Arc<CaVerifier>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca_pem)?), provider)
        .build()
        .map_err(|e| format!("the cluster CA is not a usable trust root: {e}"))?;
    Ok(Arc::new(CaVerifier { inner, name, seen }))
}

fn certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("unreadable PEM certificate: {e}"))
}

fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|e| format!("unreadable PEM private key: {e}"))?
        .ok_or_else(|| "no private key in the client key PEM".to_string())
}

fn cert_identity(chain_pem: &str) -> Identity {
    match pki::parse_cert_chain(chain_pem)
        .ok()
        .and_then(|c| c.into_iter().next())
    {
        Some((info, _)) => Identity::ClientCertificate {
            subject: info.subject_cn,
            serial: info.serial,
        },
        None => Identity::ClientCertificate {
            subject: "<unparsed>".into(),
            serial: "?".into(),
        },
    }
}

/// The cluster CA's own verification (chain, validity, signatures); nothing is relaxed.
/// With `name`, the certificate is checked against it instead of the host the connection
/// was opened to (Go's `tls.Config.ServerName`); with `seen`, the chain the server sent is
/// remembered, whatever the verdict.
#[derive(Debug)]
pub struct CaVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: Option<ServerName<'static>>,
    seen: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
}

impl ServerCertVerifier for CaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        dialed: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(seen) = &self.seen {
            let chain = std::iter::once(end_entity)
                .chain(intermediates)
                .map(|c| c.to_vec())
                .collect();
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = chain;
        }
        let name = self.name.as_ref().unwrap_or(dialed);
        self.inner
            .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
