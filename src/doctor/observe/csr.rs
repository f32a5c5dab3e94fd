//! Finding our CSR, read-only: the one the daemon's pending key names (the daemon's own
//! name for it), else the newest kubelet-client CSR requested for this node.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::List;

use super::CsrObs;
use crate::api::{self, ApiClient};
use crate::config::Settings;
use crate::identity::csr::CSR_PATH;
use crate::pki::files::{self, CertDir};
use crate::pki::{self, CertProfile, NodeKey, PrivateKeyPem};

/// The CSR named by the pending key (the daemon's own name for it), else the newest
/// kubelet-client CSR whose request is for `system:node:NODE`.
pub(super) async fn find(
    client: &ApiClient,
    node: &str,
    pending: Option<String>,
) -> Result<CsrObs, api::Error> {
    if let Some(name) = pending {
        return match client
            .get::<CertificateSigningRequest>(&format!("{CSR_PATH}/{name}"))
            .await
        {
            Ok(csr) => Ok(CsrObs::Found(Box::new(csr))),
            Err(e) if e.is_not_found() => Ok(CsrObs::Missing { name }),
            Err(e) => Err(e),
        };
    }
    let list: List<CertificateSigningRequest> = client.get(CSR_PATH).await?;
    let profile = CertProfile::client(node);
    let (cn, _) = profile.subject();
    let newest = list
        .items
        .into_iter()
        .filter(|c| c.spec.signer_name == profile.signer() && request_cn(&c.spec.request.0) == cn)
        .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Ok(newest.map_or(CsrObs::None, |c| CsrObs::Found(Box::new(c))))
}

/// The subject CN of a PEM (or DER) PKCS#10 request; empty if it does not parse.
fn request_cn(pem_or_der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer as _, Pem, X509CertificationRequest};
    let der = match Pem::iter_from_buffer(pem_or_der).next() {
        Some(Ok(p)) => p.contents,
        _ => pem_or_der.to_vec(),
    };
    X509CertificationRequest::from_der(&der)
        .ok()
        .and_then(|(_, r)| {
            r.certification_request_info
                .subject
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok().map(str::to_string))
        })
        .unwrap_or_default()
}

/// The daemon's name for the CSR of the pending key, if one is waiting.
pub(super) fn pending_name(s: &Settings) -> Option<String> {
    let path = CertDir::peek(&s.cert_dir).pending_key_path();
    let pem = files::read_text_bounded(&path, files::MAX_FILE_SIZE).ok()?;
    let key = NodeKey::from_pem(&PrivateKeyPem::new(pem)).ok()?;
    Some(pki::csr_name(&key, &CertProfile::client(&s.node_name)))
}
