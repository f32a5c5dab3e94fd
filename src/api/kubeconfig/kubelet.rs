//! The kubelet's own kubeconfig, written by bootlet: server, CA, `tls-server-name` and
//! `proxy-url` from the bootstrap kubeconfig (so the kubelet reaches the server the same
//! way), client certificate and key both `kubelet-client-current.pem`.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use kube_client::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};

use super::{
    BootstrapToken, KubeconfigError, Server, KUBELET_CLUSTER, KUBELET_CONTEXT, KUBELET_USER,
};
use crate::pki::files;

/// Mode of a directory bootlet creates for the kubeconfig (like `/etc/kubernetes`).
pub const KUBECONFIG_DIR_MODE: u32 = 0o755;

/// The kubelet's own kubeconfig: cluster `default-cluster` (server, CA as
/// certificate-authority-data, tls-server-name and proxy-url when set), user
/// `default-auth` whose client-certificate and client-key are both the absolute
/// `cert_path`, context `default-context`.
pub fn render_kubelet(
    server: &Server,
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
            cluster: Some(cluster(server, ca_pem)),
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

/// A bootstrap kubeconfig as `kubeadm join` writes it: cluster `kubernetes` (server, CA,
/// tls-server-name and proxy-url when set), user `tls-bootstrap-token-user` with `token`,
/// context `tls-bootstrap-token-user@kubernetes`.
pub fn render_bootstrap(
    server: &Server,
    ca_pem: &[u8],
    token: &BootstrapToken,
) -> Result<String, KubeconfigError> {
    const CLUSTER: &str = "kubernetes";
    const USER: &str = "tls-bootstrap-token-user";
    let context = format!("{USER}@{CLUSTER}");
    let kc = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: CLUSTER.into(),
            cluster: Some(cluster(server, ca_pem)),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: USER.into(),
            auth_info: Some(AuthInfo {
                token: Some(token.expose().to_string().into()),
                ..AuthInfo::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: context.clone(),
            context: Some(Context {
                cluster: CLUSTER.into(),
                user: Some(USER.into()),
                ..Context::default()
            }),
            ..Default::default()
        }],
        current_context: Some(context),
        ..Kubeconfig::default()
    };
    serde_saphyr::to_string(&kc).map_err(|e| KubeconfigError::Render {
        path: CLUSTER.into(),
        detail: e.to_string(),
    })
}

/// The cluster entry of a kubeconfig bootlet writes: server, CA as
/// certificate-authority-data, tls-server-name and proxy-url when set.
fn cluster(server: &Server, ca_pem: &[u8]) -> Cluster {
    Cluster {
        server: Some(server.url.clone()),
        certificate_authority_data: Some(STANDARD.encode(ca_pem)),
        tls_server_name: server.tls_server_name.clone(),
        proxy_url: server
            .proxy
            .as_ref()
            .map(|p| p.with_credentials().to_string()),
        ..Cluster::default()
    }
}

/// Renders the kubelet kubeconfig and writes it to `path`, 0600, atomically; missing
/// parent directories are created 0755 first.
pub fn write_kubelet(
    path: &Path,
    server: &Server,
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
    write_rendered(path, &yaml)
}

/// Writes rendered kubeconfig `yaml` to `path`, 0600, atomically; missing parent
/// directories are created 0755 first.
pub fn write_rendered(path: &Path, yaml: &str) -> Result<(), KubeconfigError> {
    create_parents(path)?;
    files::write_atomic(path, yaml.as_bytes(), files::FILE_MODE).map_err(|source| {
        KubeconfigError::Write {
            path: path.into(),
            source,
        }
    })
}

/// Creates each missing ancestor of `path`, outermost first, with exactly
/// [`KUBECONFIG_DIR_MODE`] (not narrowed by the umask); existing ones are left as they are.
fn create_parents(path: &Path) -> Result<(), KubeconfigError> {
    let missing: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| !d.exists())
        .collect();
    for dir in missing.into_iter().rev() {
        let err = |source| KubeconfigError::CreateDir {
            path: path.into(),
            dir: dir.into(),
            source,
        };
        match std::fs::DirBuilder::new()
            .mode(KUBECONFIG_DIR_MODE)
            .create(dir)
        {
            Ok(()) => {}
            // Created meanwhile by someone else: theirs to keep as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err(e)),
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(KUBECONFIG_DIR_MODE))
            .map_err(err)?;
    }
    Ok(())
}
