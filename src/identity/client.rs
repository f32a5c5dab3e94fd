//! The node's client identity: the client profile through the issuing pipeline, published
//! to the kubelet kubeconfig, and the `Credentials` (an API client for the installed
//! certificate) every loop uses. Bootstrap and rotation both obtain certificates here.

use std::time::Duration;

use crate::api::kubeconfig::{self, Credential};
use crate::api::{ApiClient, ClientOptions};
use crate::config::Settings;
use crate::identity::bootstrap::BootstrapError;
use crate::identity::issue::{Issuer, Publish, Request};
use crate::pki::files::CertDir;
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
