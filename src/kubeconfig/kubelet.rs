//! The kubelet's own kubeconfig, written by bootlet: server and CA from the bootstrap
//! kubeconfig, client certificate and key both `kubelet-client-current.pem`.

use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use kube_client::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

use super::{KubeconfigError, KUBELET_CLUSTER, KUBELET_CONTEXT, KUBELET_USER};
use crate::pki::files;

/// The kubelet's own kubeconfig: cluster `default-cluster` (server, CA as
/// certificate-authority-data), user `default-auth` whose client-certificate and
/// client-key are both the absolute `cert_path`, context `default-context`.
pub fn render_kubelet(
    server: &str,
    ca_pem: &[u8],
    cert_path: &Path,
) -> Result<String, KubeconfigError> {
    let render_err = |detail: String| KubeconfigError::Render {
        path: cert_path.into(),
        detail,
    };
    let cert = std::path::absolute(cert_path).map_err(|e| render_err(e.to_string()))?;
    let cert = cert
        .to_str()
        .ok_or_else(|| render_err("certificate path is not UTF-8".into()))?
        .to_string();
    let kc = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: KUBELET_CLUSTER.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority_data: Some(STANDARD.encode(ca_pem)),
                ..Cluster::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: KUBELET_USER.into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(cert.clone()),
                client_key: Some(cert),
                ..AuthInfo::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: KUBELET_CONTEXT.into(),
            context: Some(Context {
                cluster: KUBELET_CLUSTER.into(),
                user: Some(KUBELET_USER.into()),
                namespace: Some("default".into()),
                ..Context::default()
            }),
            ..Default::default()
        }],
        current_context: Some(KUBELET_CONTEXT.into()),
        ..Kubeconfig::default()
    };
    serde_saphyr::to_string(&kc).map_err(|e| render_err(e.to_string()))
}

/// Renders the kubelet kubeconfig and writes it to `path`, 0600, atomically.
pub fn write_kubelet(
    path: &Path,
    server: &str,
    ca_pem: &[u8],
    cert_path: &Path,
) -> Result<(), KubeconfigError> {
    let yaml = render_kubelet(server, ca_pem, cert_path).map_err(|e| match e {
        KubeconfigError::Render { detail, .. } => KubeconfigError::Render {
            path: path.into(),
            detail,
        },
        other => other,
    })?;
    files::write_atomic(path, yaml.as_bytes(), files::FILE_MODE).map_err(|source| {
        KubeconfigError::Write {
            path: path.into(),
            source,
        }
    })
}
