//! Both kubeconfig files: reading the bootstrap (or any) kubeconfig into `ClusterAccess`,
//! and rendering/writing the kubelet's own kubeconfig that names the current client cert.
//! Uses kube_client's `Kubeconfig` model; does not talk to the apiserver.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use kube_client::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use secrecy::ExposeSecret as _;

use crate::pki::files::{self, FilesError};
use crate::pki::{parse_cert_chain, split_pem, PrivateKeyPem};

/// Names the kubelet writes into its kubeconfig.
pub const KUBELET_CLUSTER: &str = "default-cluster";
pub const KUBELET_USER: &str = "default-auth";
pub const KUBELET_CONTEXT: &str = "default-context";

/// What is wrong with a kubeconfig; Display is one line starting with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("{}: no such file", .path.display())]
    Missing { path: PathBuf },
    #[error("{}: cannot read", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a kubeconfig: {detail}", .path.display())]
    Parse { path: PathBuf, detail: String },
    #[error("{}: no current-context and {count} contexts to choose from", .path.display())]
    NoCurrentContext { path: PathBuf, count: usize },
    #[error("{}: context {name:?} not found", .path.display())]
    ContextNotFound { path: PathBuf, name: String },
    #[error("{}: cluster {name:?} not found", .path.display())]
    ClusterNotFound { path: PathBuf, name: String },
    #[error("{}: user {name:?} not found", .path.display())]
    UserNotFound { path: PathBuf, name: String },
    #[error("{}: cluster {cluster:?} has no server", .path.display())]
    NoServer { path: PathBuf, cluster: String },
    #[error("{}: server {server:?} is not an https:// URL", .path.display())]
    NotHttps { path: PathBuf, server: String },
    #[error("{}: cluster {cluster:?} has neither certificate-authority nor certificate-authority-data", .path.display())]
    NoCa { path: PathBuf, cluster: String },
    #[error("{}: cluster {cluster:?} sets insecure-skip-tls-verify, which bootlet refuses", .path.display())]
    InsecureRefused { path: PathBuf, cluster: String },
    #[error("{}: {field} is not valid base64", .path.display())]
    BadBase64 { path: PathBuf, field: &'static str },
    #[error("{}: {what} holds no PEM certificate", .path.display())]
    NoCertificate { path: PathBuf, what: String },
    #[error("{}: {what} holds no PEM private key", .path.display())]
    NoPrivateKey { path: PathBuf, what: String },
    #[error("{}: cannot read {field} file {}", .path.display(), .file.display())]
    ReadReferenced {
        path: PathBuf,
        field: &'static str,
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: user {user:?} has {present} but not {missing}", .path.display())]
    IncompleteClientCert {
        path: PathBuf,
        user: String,
        present: &'static str,
        missing: &'static str,
    },
    #[error("{}: user {user:?} has an empty token", .path.display())]
    EmptyToken { path: PathBuf, user: String },
    #[error("{}: cannot render kubeconfig: {detail}", .path.display())]
    Render { path: PathBuf, detail: String },
    #[error("{}: cannot write", .path.display())]
    Write { path: PathBuf, source: FilesError },
}

/// A bearer token: a bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`, or any other token kept
/// opaque. Debug shows only the token id; there is no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken(String);

// === impl BootstrapToken ===

impl BootstrapToken {
    /// Wraps a token, trimming surrounding whitespace (token files end in a newline).
    pub fn new(token: &str) -> Self {
        Self(token.trim().to_string())
    }

    /// True if the token has the bootstrap-token shape `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub fn is_bootstrap_token(&self) -> bool {
        let ok = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        matches!(self.0.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
    }

    /// The public token id (first 6 characters) of a bootstrap token, else `"<opaque>"`.
    pub fn id(&self) -> &str {
        if self.is_bootstrap_token() {
            &self.0[..6]
        } else {
            "<opaque>"
        }
    }

    /// `"Bearer TOKEN"`, for the Authorization header only.
    pub fn secret_header(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<redacted>)", self.id())
    }
}

/// How the kubeconfig's user authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    Token(BootstrapToken),
    ClientCert {
        chain_pem: String,
        key: PrivateKeyPem,
    },
    None,
}

/// What a kubeconfig says about reaching the apiserver.
#[derive(Clone, Debug)]
pub struct ClusterAccess {
    /// The kubeconfig read.
    pub path: PathBuf,
    /// The server, an `https://` URL.
    pub server: String,
    /// The CA bundle, PEM; empty only when `insecure`.
    pub ca_pem: Vec<u8>,
    pub credential: Credential,
    /// insecure-skip-tls-verify was set and allowed.
    pub insecure: bool,
}

/// Reads the kubeconfig at `path`: the current context (or the only one), its cluster's
/// server and CA, and its user's credential. Relative file references resolve against
/// the kubeconfig's directory. insecure-skip-tls-verify is refused unless `allow_insecure`.
pub fn read(path: &Path, allow_insecure: bool) -> Result<ClusterAccess, KubeconfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => KubeconfigError::Missing { path: path.into() },
        _ => KubeconfigError::Read {
            path: path.into(),
            source,
        },
    })?;
    let kc = Kubeconfig::from_yaml(&text).map_err(|e| KubeconfigError::Parse {
        path: path.into(),
        detail: one_line(&e),
    })?;
    let r = Reader {
        path,
        dir: path.parent().unwrap_or(Path::new(".")),
    };

    let context = r.context(&kc)?;
    let cluster_name = context.cluster.clone();
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| KubeconfigError::ClusterNotFound {
            path: path.into(),
            name: cluster_name.clone(),
        })?;
    let server = r.server(&cluster, &cluster_name)?;
    let insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    if insecure && !allow_insecure {
        return Err(KubeconfigError::InsecureRefused {
            path: path.into(),
            cluster: cluster_name,
        });
    }
    let ca_pem = match r.ca(&cluster)? {
        Some(ca) => ca,
        None if insecure => Vec::new(),
        None => {
            return Err(KubeconfigError::NoCa {
                path: path.into(),
                cluster: cluster_name,
            })
        }
    };
    let credential = match &context.user {
        None => Credential::None,
        Some(user) => {
            let auth = kc
                .auth_infos
                .iter()
                .find(|a| &a.name == user)
                .ok_or_else(|| KubeconfigError::UserNotFound {
                    path: path.into(),
                    name: user.clone(),
                })?;
            r.credential(user, auth.auth_info.as_ref())?
        }
    };
    Ok(ClusterAccess {
        path: path.into(),
        server,
        ca_pem,
        credential,
        insecure,
    })
}

/// The first line of an error and its sources, joined with ": ".
fn one_line(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    let joined = parts.join(": ");
    let line = joined.lines().next().unwrap_or_default().trim();
    let line = line.trim_start_matches("failed to parse kubeconfig YAML: ");
    line.trim_start_matches("error: ").to_string()
}

/// Resolves the pieces of one kubeconfig file.
struct Reader<'a> {
    path: &'a Path,
    dir: &'a Path,
}

// === impl Reader ===

impl Reader<'_> {
    fn context(&self, kc: &Kubeconfig) -> Result<Context, KubeconfigError> {
        let named = match kc.current_context.as_deref().filter(|c| !c.is_empty()) {
            Some(name) => kc.contexts.iter().find(|c| c.name == name).ok_or_else(|| {
                KubeconfigError::ContextNotFound {
                    path: self.path.into(),
                    name: name.to_string(),
                }
            })?,
            None => match kc.contexts.as_slice() {
                [only] => only,
                all => {
                    return Err(KubeconfigError::NoCurrentContext {
                        path: self.path.into(),
                        count: all.len(),
                    })
                }
            },
        };
        named
            .context
            .clone()
            .ok_or_else(|| KubeconfigError::ContextNotFound {
                path: self.path.into(),
                name: named.name.clone(),
            })
    }

    fn server(&self, cluster: &Cluster, name: &str) -> Result<String, KubeconfigError> {
        let server = cluster.server.clone().filter(|s| !s.is_empty());
        let server = server.ok_or_else(|| KubeconfigError::NoServer {
            path: self.path.into(),
            cluster: name.to_string(),
        })?;
        if !server.starts_with("https://") {
            return Err(KubeconfigError::NotHttps {
                path: self.path.into(),
                server,
            });
        }
        Ok(server)
    }

    fn ca(&self, cluster: &Cluster) -> Result<Option<Vec<u8>>, KubeconfigError> {
        let (what, pem) = if let Some(data) = non_empty(&cluster.certificate_authority_data) {
            let field = "certificate-authority-data";
            (field.to_string(), self.decode(field, data)?)
        } else if let Some(file) = non_empty(&cluster.certificate_authority) {
            let file = self.resolve(file);
            let pem = self.read_file("certificate-authority", &file)?;
            (
                format!("certificate-authority file {}", file.display()),
                pem,
            )
        } else {
            return Ok(None);
        };
        if parse_cert_chain(&String::from_utf8_lossy(&pem)).is_err() {
            return Err(KubeconfigError::NoCertificate {
                path: self.path.into(),
                what,
            });
        }
        Ok(Some(pem))
    }

    fn credential(
        &self,
        user: &str,
        auth: Option<&AuthInfo>,
    ) -> Result<Credential, KubeconfigError> {
        let Some(auth) = auth else {
            return Ok(Credential::None);
        };
        let token = match (&auth.token, non_empty(&auth.token_file)) {
            (Some(token), _) => Some(token.expose_secret().to_string()),
            (None, Some(file)) => {
                let bytes = self.read_file("tokenFile", &self.resolve(file))?;
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
            (None, None) => None,
        };
        if let Some(token) = token {
            let token = BootstrapToken::new(&token);
            if token.0.is_empty() {
                return Err(KubeconfigError::EmptyToken {
                    path: self.path.into(),
                    user: user.to_string(),
                });
            }
            return Ok(Credential::Token(token));
        }

        let key_data = auth
            .client_key_data
            .as_ref()
            .map(|k| k.expose_secret().to_string())
            .filter(|k| !k.is_empty());
        let cert_data = non_empty(&auth.client_certificate_data);
        let cert_file = non_empty(&auth.client_certificate);
        let key_file = non_empty(&auth.client_key);
        let incomplete = |present, missing| KubeconfigError::IncompleteClientCert {
            path: self.path.into(),
            user: user.to_string(),
            present,
            missing,
        };
        let has_cert = cert_data.is_some() || cert_file.is_some();
        let has_key = key_data.is_some() || key_file.is_some();
        match (has_cert, has_key) {
            (false, false) => return Ok(Credential::None),
            (true, false) => return Err(incomplete("client-certificate", "client-key")),
            (false, true) => return Err(incomplete("client-key", "client-certificate")),
            (true, true) => {}
        }
        let cert = self.pem_source(
            "client-certificate",
            "client-certificate-data",
            cert_data,
            cert_file,
        )?;
        let key = self.pem_source(
            "client-key",
            "client-key-data",
            key_data.as_deref(),
            key_file,
        )?;
        match (cert, key) {
            (Some((cert_what, cert)), Some((key_what, key))) => {
                let (chain_pem, _) = split_pem(&String::from_utf8_lossy(&cert));
                if chain_pem.is_empty() {
                    return Err(KubeconfigError::NoCertificate {
                        path: self.path.into(),
                        what: cert_what,
                    });
                }
                let (_, key) = split_pem(&String::from_utf8_lossy(&key));
                let key = key.ok_or_else(|| KubeconfigError::NoPrivateKey {
                    path: self.path.into(),
                    what: key_what,
                })?;
                Ok(Credential::ClientCert { chain_pem, key })
            }
            // Both presences were checked above.
            _ => Ok(Credential::None),
        }
    }

    /// `FIELD-data` (base64) wins over the file `FIELD`; returns what was read and the bytes.
    fn pem_source(
        &self,
        field: &'static str,
        data_field: &'static str,
        data: Option<&str>,
        file: Option<&str>,
    ) -> Result<Option<(String, Vec<u8>)>, KubeconfigError> {
        if let Some(data) = data {
            return Ok(Some((
                data_field.to_string(),
                self.decode(data_field, data)?,
            )));
        }
        let Some(file) = file else {
            return Ok(None);
        };
        let file = self.resolve(file);
        let pem = self.read_file(field, &file)?;
        Ok(Some((format!("{field} file {}", file.display()), pem)))
    }

    fn resolve(&self, file: &str) -> PathBuf {
        let file = Path::new(file);
        if file.is_absolute() {
            file.to_path_buf()
        } else {
            self.dir.join(file)
        }
    }

    fn read_file(&self, field: &'static str, file: &Path) -> Result<Vec<u8>, KubeconfigError> {
        std::fs::read(file).map_err(|source| KubeconfigError::ReadReferenced {
            path: self.path.into(),
            field,
            file: file.to_path_buf(),
            source,
        })
    }

    fn decode(&self, field: &'static str, data: &str) -> Result<Vec<u8>, KubeconfigError> {
        let data: String = data.split_whitespace().collect();
        STANDARD
            .decode(data)
            .map_err(|_| KubeconfigError::BadBase64 {
                path: self.path.into(),
                field,
            })
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

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
            other: BTreeMap::new(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: KUBELET_USER.into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(cert.clone()),
                client_key: Some(cert),
                ..AuthInfo::default()
            }),
            other: BTreeMap::new(),
        }],
        contexts: vec![NamedContext {
            name: KUBELET_CONTEXT.into(),
            context: Some(Context {
                cluster: KUBELET_CLUSTER.into(),
                user: Some(KUBELET_USER.into()),
                namespace: Some("default".into()),
                ..Context::default()
            }),
            other: BTreeMap::new(),
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

#[cfg(test)]
mod tests;
