//! Both kubeconfig files: reading the bootstrap (or any) kubeconfig into `ClusterAccess`,
//! and rendering/writing the kubelet's own kubeconfig that names the current client cert.
//! Every field is used or refused by name (file + key), never silently dropped. Uses
//! kube_client's `Kubeconfig` model; does not talk to the apiserver.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use kube_client::config::{Cluster, Context, Kubeconfig};
use sha2::{Digest as _, Sha256};

use exec::ClusterInfo;

use crate::pki::files::{read_bounded, read_text_bounded, FilesError, Refusal};
use crate::pki::parse_cert_chain;

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
    #[error("{}: context {} not found", .path.display(), Shown(.name))]
    ContextNotFound { path: PathBuf, name: String },
    #[error("{}: cluster {} not found", .path.display(), Shown(.name))]
    ClusterNotFound { path: PathBuf, name: String },
    #[error("{}: user {} not found", .path.display(), Shown(.name))]
    UserNotFound { path: PathBuf, name: String },
    #[error("{}: cluster {} has no server", .path.display(), Shown(.cluster))]
    NoServer { path: PathBuf, cluster: String },
    #[error("{}: server {} is not an https:// URL", .path.display(), Shown(.server))]
    NotHttps { path: PathBuf, server: String },
    #[error("{}: cluster {} has neither certificate-authority nor certificate-authority-data", .path.display(), Shown(.cluster))]
    NoCa { path: PathBuf, cluster: String },
    #[error("{}: cluster {} sets insecure-skip-tls-verify, which bootlet refuses", .path.display(), Shown(.cluster))]
    InsecureRefused { path: PathBuf, cluster: String },
    #[error("{}: {field} is not valid base64", .path.display())]
    BadBase64 { path: PathBuf, field: &'static str },
    /// Inline `FIELD-data` decoding to more than `limit` bytes.
    #[error("{}: {field} {}", .path.display(), Refusal::TooLarge { limit: *.limit })]
    DataTooLarge {
        path: PathBuf,
        field: &'static str,
        limit: u64,
    },
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
    #[error("{}: user {} has {present} but not {missing}", .path.display(), Shown(.user))]
    IncompleteClientCert {
        path: PathBuf,
        user: String,
        present: &'static str,
        missing: &'static str,
    },
    #[error("{}: user {} has an empty token", .path.display(), Shown(.user))]
    EmptyToken { path: PathBuf, user: String },
    /// A key bootlet cannot honour; `key` is its path in the file, e.g.
    /// `users[0].user.exec`.
    #[error("{}: {key} is not supported: {reason}", .path.display())]
    Unsupported {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error("{}: {key} {reason}", .path.display())]
    Invalid {
        path: PathBuf,
        key: String,
        reason: String,
    },
    #[error("{}: cannot create the directory {}", .path.display(), .dir.display())]
    CreateDir {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot render kubeconfig: {detail}", .path.display())]
    Render { path: PathBuf, detail: String },
    #[error("{}: cannot write", .path.display())]
    Write { path: PathBuf, source: FilesError },
}

/// What a kubeconfig says about reaching the apiserver. Debug shows the CA's size and
/// fingerprint, not its body.
#[derive(Clone)]
pub struct ClusterAccess {
    /// The kubeconfig read.
    pub path: PathBuf,
    /// The server: URL, tls-server-name, proxy-url.
    pub server: Server,
    /// The CA bundle, PEM; never empty.
    pub ca_pem: Vec<u8>,
    pub credential: Credential,
    /// insecure-skip-tls-verify was set and allowed (the CA is still enforced).
    pub insecure: bool,
}

impl fmt::Debug for ClusterAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterAccess")
            .field("path", &self.path)
            .field("server", &self.server)
            .field("ca_pem", &PemSummary(&self.ca_pem))
            .field("credential", &self.credential)
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// A PEM bundle as Debug shows it: `PEM(N bytes, K certs, sha256:FIRST-16-HEX)`, the
/// fingerprint being that of the first certificate's DER (what `openssl x509 -fingerprint
/// -sha256` prints, lower-case, truncated).
pub struct PemSummary<'a>(pub &'a [u8]);

impl fmt::Debug for PemSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = String::from_utf8_lossy(self.0);
        match parse_cert_chain(&text) {
            Ok(chain) => {
                let digest = Sha256::digest(&chain[0].1);
                let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
                write!(
                    f,
                    "PEM({} bytes, {} certs, sha256:{hex}…)",
                    self.0.len(),
                    chain.len()
                )
            }
            Err(_) => write!(f, "PEM({} bytes, unparsed)", self.0.len()),
        }
    }
}

/// The largest kubeconfig read: a few KiB in practice, more only with a large inline CA
/// bundle (itself capped at [`MAX_REFERENCED_FILE`]).
pub const MAX_KUBECONFIG_FILE: u64 = 4 << 20;
/// The largest file a kubeconfig names (CA bundle, token file, client certificate or key),
/// and the largest CA bundle inline: the kubelet kubeconfig bootlet writes embeds the CA
/// base64-encoded, and must itself stay under [`MAX_KUBECONFIG_FILE`].
pub const MAX_REFERENCED_FILE: u64 = 1 << 20;

/// Reads the kubeconfig at `path`: the current context (or the only one), its cluster's
/// server and CA, and its user's credential. Relative file references resolve against
/// the kubeconfig's directory. insecure-skip-tls-verify is refused unless `allow_insecure`.
/// The file and every file it names must be regular files under their caps
/// ([`MAX_KUBECONFIG_FILE`], [`MAX_REFERENCED_FILE`]): a FIFO is refused, never waited on.
pub fn read(path: &Path, allow_insecure: bool) -> Result<ClusterAccess, KubeconfigError> {
    parse(path, &read_file(path)?, allow_insecure)
}

/// The kubeconfig's text, bounded by [`MAX_KUBECONFIG_FILE`]; a missing file is `Missing`.
fn read_file(path: &Path) -> Result<String, KubeconfigError> {
    read_text_bounded(path, MAX_KUBECONFIG_FILE).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => KubeconfigError::Missing {
            path: path.to_path_buf(),
        },
        _ => KubeconfigError::Read {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// [`read`] on text already in memory; `path` names the file in errors and anchors its
/// relative file references (which are still read from disk).
pub fn parse(
    path: &Path,
    text: &str,
    allow_insecure: bool,
) -> Result<ClusterAccess, KubeconfigError> {
    parse_with(path, text, allow_insecure, true)
}

/// [`read`] of the cluster alone (server and CA): the user's credential is neither read
/// nor checked, so a kubeconfig whose client certificate expired or is gone still says
/// where the cluster is (`bootlet rejoin`). Its `credential` is [`Credential::None`].
pub fn read_cluster(path: &Path, allow_insecure: bool) -> Result<ClusterAccess, KubeconfigError> {
    parse_with(path, &read_file(path)?, allow_insecure, false)
}

fn parse_with(
    path: &Path,
    text: &str,
    allow_insecure: bool,
    with_credential: bool,
) -> Result<ClusterAccess, KubeconfigError> {
    let r = Reader { path };
    let kc = Kubeconfig::from_yaml(text).map_err(|e| {
        let (path, detail) = (r.p(), one_line(&e));
        KubeconfigError::Parse { path, detail }
    })?;

    let context = r.context(&kc)?;
    let name = context.cluster;
    let found = kc.clusters.iter().enumerate().find(|(_, c)| c.name == name);
    let Some((index, cluster)) = found.and_then(|(i, c)| Some((i, c.cluster.as_ref()?))) else {
        return Err(KubeconfigError::ClusterNotFound { path: r.p(), name });
    };
    let server = r.server(cluster, &name, index)?;
    let insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    if insecure && !allow_insecure {
        let (path, cluster) = (r.p(), name);
        return Err(KubeconfigError::InsecureRefused { path, cluster });
    }
    let ca_pem = r.ca(cluster, &name)?;
    let extension = cluster
        .extensions
        .iter()
        .flatten()
        .find(|e| e.name == exec::CLUSTER_EXTENSION);
    let info = ClusterInfo {
        server: &server.url,
        ca_pem: &ca_pem,
        tls_server_name: server.tls_server_name.as_deref(),
        insecure_skip_tls_verify: insecure,
        proxy_url: non_empty(&cluster.proxy_url),
        config: extension.map(|e| e.extension.clone()),
    };
    let credential = match context.user.filter(|_| with_credential) {
        None => Credential::None,
        Some(name) => r.user(&kc, name, &info)?,
    };
    let path = r.p();
    Ok(ClusterAccess {
        path,
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

/// Resolves the pieces of one kubeconfig file; every error names `path`.
struct Reader<'a> {
    path: &'a Path,
}

// === impl Reader ===

impl Reader<'_> {
    fn p(&self) -> PathBuf {
        self.path.to_path_buf()
    }

    fn context(&self, kc: &Kubeconfig) -> Result<Context, KubeconfigError> {
        let named = match kc.current_context.as_deref().filter(|c| !c.is_empty()) {
            Some(name) => kc.contexts.iter().find(|c| c.name == name),
            None => match kc.contexts.as_slice() {
                [only] => Some(only),
                all => {
                    let (path, count) = (self.p(), all.len());
                    return Err(KubeconfigError::NoCurrentContext { path, count });
                }
            },
        };
        match named.map(|n| (n, n.context.clone())) {
            Some((_, Some(context))) => Ok(context),
            Some((n, None)) => Err(self.context_not_found(&n.name)),
            None => Err(self.context_not_found(kc.current_context.as_deref().unwrap_or(""))),
        }
    }

    fn context_not_found(&self, name: &str) -> KubeconfigError {
        let (path, name) = (self.p(), name.to_string());
        KubeconfigError::ContextNotFound { path, name }
    }

    /// The cluster's CA bundle, which must parse as certificates. Even an allowed insecure
    /// kubeconfig must name one: bootlet never skips server verification, and it checks
    /// issued certificates against that CA.
    fn ca(&self, cluster: &Cluster, name: &str) -> Result<Vec<u8>, KubeconfigError> {
        let ca = self.pem_source(
            (
                "certificate-authority-data",
                &cluster.certificate_authority_data,
            ),
            ("certificate-authority", &cluster.certificate_authority),
        )?;
        match ca {
            Some((what, pem)) if parse_cert_chain(&String::from_utf8_lossy(&pem)).is_err() => {
                Err(KubeconfigError::NoCertificate {
                    path: self.p(),
                    what,
                })
            }
            Some((_, pem)) => Ok(pem),
            None => {
                let (path, cluster) = (self.p(), name.to_string());
                Err(KubeconfigError::NoCa { path, cluster })
            }
        }
    }

    /// The credential of the context's user `name`, which must be in `users`.
    fn user(
        &self,
        kc: &Kubeconfig,
        name: String,
        info: &ClusterInfo<'_>,
    ) -> Result<Credential, KubeconfigError> {
        match kc
            .auth_infos
            .iter()
            .enumerate()
            .find(|(_, a)| a.name == name)
        {
            Some((index, auth)) => self.credential(&name, index, auth.auth_info.as_ref(), info),
            None => Err(KubeconfigError::UserNotFound {
                path: self.p(),
                name,
            }),
        }
    }

    /// The cluster's server URL, `tls-server-name` and `proxy-url`; `index` is the
    /// cluster's place in `clusters`, for naming keys in errors.
    fn server(
        &self,
        cluster: &Cluster,
        name: &str,
        index: usize,
    ) -> Result<Server, KubeconfigError> {
        let url = self.server_url(cluster, name, index)?;
        let tls_server_name = non_empty(&cluster.tls_server_name).map(str::to_string);
        if let Some(name) = tls_server_name.as_deref() {
            if !server::valid_server_name(name) {
                return Err(KubeconfigError::Invalid {
                    path: self.p(),
                    key: format!("clusters[{index}].cluster.tls-server-name"),
                    reason: format!("{} is neither a DNS name nor an IP address", Shown(name)),
                });
            }
        }
        let proxy = self.proxy(cluster, index)?;
        Ok(Server {
            url,
            tls_server_name,
            proxy,
        })
    }

    /// The cluster's `server`: present, https, and without whitespace or control
    /// characters inside.
    fn server_url(
        &self,
        cluster: &Cluster,
        name: &str,
        index: usize,
    ) -> Result<String, KubeconfigError> {
        let (path, cluster_name) = (self.p(), name.to_string());
        match cluster.server.clone().filter(|s| !s.is_empty()) {
            None => Err(KubeconfigError::NoServer {
                path,
                cluster: cluster_name,
            }),
            Some(server) if !server.starts_with("https://") => {
                Err(KubeconfigError::NotHttps { path, server })
            }
            // What a URL parser trims around it is fine; inside, it means a quote left open.
            Some(server)
                if server
                    .trim()
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control()) =>
            {
                Err(KubeconfigError::Invalid {
                    path,
                    key: format!("clusters[{index}].cluster.server"),
                    reason: format!("{} is not a URL", Shown(&server)),
                })
            }
            Some(server) => Ok(server),
        }
    }

    /// The cluster's `proxy-url`, if set: a scheme bootlet speaks, and a valid URL.
    fn proxy(&self, cluster: &Cluster, index: usize) -> Result<Option<ProxyUrl>, KubeconfigError> {
        let key = format!("clusters[{index}].cluster.proxy-url");
        match non_empty(&cluster.proxy_url).map(|p| ProxyUrl::parse(p, false)) {
            None => Ok(None),
            Some(Ok(proxy)) => Ok(Some(proxy)),
            Some(Err(e @ ProxyUrlError::Unsupported { .. })) => Err(KubeconfigError::Unsupported {
                path: self.p(),
                key,
                reason: e.to_string(),
            }),
            Some(Err(e @ ProxyUrlError::Invalid)) => Err(KubeconfigError::Invalid {
                path: self.p(),
                key,
                reason: e.to_string(),
            }),
        }
    }

    /// `FIELD-data` (base64) wins over the file `FIELD`; returns what was read and the bytes.
    fn pem_source(
        &self,
        (data_field, data): (&'static str, &Option<String>),
        (file_field, file): (&'static str, &Option<String>),
    ) -> Result<Option<(String, Vec<u8>)>, KubeconfigError> {
        if let Some(data) = non_empty(data) {
            let data: String = data.split_whitespace().collect();
            let bytes = STANDARD.decode(data).map_err(|_| {
                let (path, field) = (self.p(), data_field);
                KubeconfigError::BadBase64 { path, field }
            })?;
            if bytes.len() as u64 > MAX_REFERENCED_FILE {
                return Err(KubeconfigError::DataTooLarge {
                    path: self.p(),
                    field: data_field,
                    limit: MAX_REFERENCED_FILE,
                });
            }
            return Ok(Some((data_field.to_string(), bytes)));
        }
        let Some(file) = non_empty(file) else {
            return Ok(None);
        };
        let file = self.resolve(file);
        let bytes = self.read_file(file_field, &file)?;
        Ok(Some((
            format!("{file_field} file {}", file.display()),
            bytes,
        )))
    }

    /// A referenced file; a relative path resolves against the kubeconfig's directory.
    fn resolve(&self, file: &str) -> PathBuf {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        dir.join(file) // join keeps an absolute `file` as is
    }

    fn read_file(&self, field: &'static str, file: &Path) -> Result<Vec<u8>, KubeconfigError> {
        read_bounded(file, MAX_REFERENCED_FILE).map_err(|source| {
            let (path, file) = (self.p(), file.to_path_buf());
            KubeconfigError::ReadReferenced {
                path,
                field,
                file,
                source,
            }
        })
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

pub mod exec;
mod kubelet;
mod server;
mod shown;
mod user;

pub use kubelet::{render_bootstrap, render_kubelet, write_kubelet, write_rendered};
pub use server::{ProxyUrl, ProxyUrlError, Server, ToServer};
pub use shown::{Shown, SHOWN_MAX};
pub use user::{BootstrapToken, Credential};

#[cfg(test)]
mod tests;
