//! The node's client identity: the client profile through the issuing pipeline, published
//! to the kubelet kubeconfig, and the `Credentials` (an API client for the installed
//! certificate) every loop uses. Bootstrap and rotation both obtain certificates here.

use std::path::PathBuf;
use std::time::Duration;

use crate::api::kubeconfig::{self, Credential, KubeconfigError};
use crate::api::{self, ApiClient, ClientOptions};
use crate::checkid::CheckId;
use crate::config::Settings;
use crate::identity::issue::{api_check, IssueError, Issuer, Publish, Request};
use crate::pki::files::{CertDir, FilesError};
use crate::pki::{CertInfo, CertProfile, PrivateKeyPem};
use crate::runtime::health::{self, Health, State};

/// A working identity: the client for the installed certificate and what it came from.
#[derive(Clone)]
pub struct Credentials {
    pub client: ApiClient,
    pub cert: CertInfo,
    pub server: kubeconfig::Server,
    pub ca_pem: Vec<u8>,
    /// Issued by this process just now (not found on disk).
    pub fresh: bool,
}

/// Obtains and installs client certificates for one node.
#[derive(Clone)]
pub struct ClientIdentity<'a> {
    pub settings: &'a Settings,
    pub health: Health,
    pub api: ClientOptions,
}

// === impl ClientIdentity ===

impl ClientIdentity<'_> {
    /// A client certificate through `client` (the bootstrap token, or the current
    /// certificate when rotating), by the one issuing pipeline, published to the kubelet
    /// kubeconfig; then the credentials every loop switches to.
    pub async fn obtain(
        &self,
        dir: &CertDir,
        client: &ApiClient,
        server: &kubeconfig::Server,
        ca_pem: &[u8],
        wait_limit: Duration,
    ) -> Result<Credentials, BootstrapError> {
        let s = self.settings;
        let issued = self
            .issuer()
            .issue(
                dir,
                Request {
                    profile: &CertProfile::client(&s.node_name),
                    client,
                    ca_pem,
                    wait_limit,
                    not_issued_warning: s.csr_not_issued_warning,
                    publish: Publish::Kubeconfig {
                        path: &s.kubeconfig,
                        server,
                        ca_pem,
                        api: &self.api,
                    },
                },
            )
            .await?;
        tracing::info!(kubeconfig = %s.kubeconfig.display(), "kubelet kubeconfig written");
        let mut creds = self.credentials(
            server,
            ca_pem,
            issued.chain_pem,
            issued.key_pem,
            issued.info,
        )?;
        creds.fresh = true;
        self.installed(&creds);
        Ok(creds)
    }

    /// The pipeline, reporting to this agent's health.
    fn issuer(&self) -> Issuer {
        Issuer {
            health: self.health.clone(),
        }
    }

    pub fn credentials(
        &self,
        server: &kubeconfig::Server,
        ca_pem: &[u8],
        chain_pem: String,
        key: PrivateKeyPem,
        cert: CertInfo,
    ) -> Result<Credentials, BootstrapError> {
        let credential = Credential::ClientCert { chain_pem, key };
        let client = ApiClient::new(server, ca_pem, &credential, self.api.clone())?;
        Ok(Credentials {
            client,
            cert,
            server: server.clone(),
            ca_pem: ca_pem.to_vec(),
            fresh: false,
        })
    }

    pub fn installed(&self, creds: &Credentials) {
        let summary = health::CertSummary {
            serial: creds.cert.serial.clone(),
            not_after: creds.cert.not_after,
            rotate_at: None,
        };
        self.health.update(|s| {
            s.bootstrap = State::Installed;
            s.cert = Some(summary);
        });
    }
}

/// Why bootstrap could not produce an identity.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("no valid client certificate in {cert_dir}, and the bootstrap kubeconfig is unusable")]
    NoBootstrap {
        cert_dir: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error(transparent)]
    Files(#[from] FilesError),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Issue(#[from] IssueError),
}

// === impl BootstrapError ===

impl BootstrapError {
    /// See [`IssueError::is_refusal`].
    pub fn is_refusal(&self) -> bool {
        matches!(self, BootstrapError::Issue(e) if e.is_refusal())
    }

    /// See [`IssueError::is_approval_timeout`].
    pub fn is_approval_timeout(&self) -> bool {
        matches!(self, BootstrapError::Issue(e) if e.is_approval_timeout())
    }

    /// The doctor check (the contract's ids) this failure belongs to: the back-off log line
    /// and STATUS= name it, so an operator knows which link of the join chain broke and
    /// that `bootlet doctor` walks the whole chain.
    pub fn check(&self) -> CheckId {
        match self {
            BootstrapError::NoBootstrap { .. } | BootstrapError::Kubeconfig(_) => {
                CheckId::BootstrapKubeconfig
            }
            BootstrapError::Files(_) => CheckId::Config,
            BootstrapError::Api(e) => api_check(e),
            BootstrapError::Issue(e) => e.check(),
        }
    }
}
