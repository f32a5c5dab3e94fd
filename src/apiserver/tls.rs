//! The rustls client configuration: the cluster CA as the only trust root, the ring
//! provider, HTTP/2 by ALPN, and the client certificate when that is our identity.
//! It does not read files; the kubeconfig module hands it PEM.

use std::sync::Arc;

use reqwest::header::HeaderValue;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::Identity;
use crate::kubeconfig::Credential;
use crate::pki;

/// Build the TLS config, our identity as logged, and the `Authorization` header (tokens).
pub fn client_config(
    ca_pem: &[u8],
    credential: &Credential,
) -> Result<(ClientConfig, Identity, Option<HeaderValue>), String> {
    let mut roots = RootCertStore::empty();
    for cert in certs(ca_pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("the cluster CA is not a usable trust root: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the cluster CA bundle holds no certificate".into());
    }
    let builder = builder()?.with_root_certificates(roots);
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
            let identity = Identity::BootstrapToken {
                id: token.id().to_string(),
            };
            (builder.with_no_client_auth(), identity, Some(value))
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
