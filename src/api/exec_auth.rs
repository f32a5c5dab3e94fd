//! A kubeconfig's exec plugin as an [`ApiClient`]'s credential: the pooled client and
//! `Authorization` header for what the plugin handed out. The plugin itself, its answer
//! and its cache are `kubeconfig::exec`'s; the retry after a 401 is `ApiClient::send`'s.

use reqwest::header::HeaderValue;

use super::kubeconfig::exec::{self, ExecPlugin};
use super::kubeconfig::{Credential, Server};
use super::{build_http, sni_alias, tls, ApiClient, Error};

/// An exec plugin as a client's credential: run (or its cached answer taken) per request.
pub(super) struct ExecAuth {
    pub(super) plugin: ExecPlugin,
    pub(super) ca_pem: Vec<u8>,
    pub(super) tls_server_name: Option<String>,
    /// The pooled client that presents the client certificate of the plugin's run N.
    pub(super) cert_http: std::sync::Mutex<Option<(u64, reqwest::Client)>>,
}

// === impl ExecAuth ===

impl ExecAuth {
    /// The exec plugin of `credential`, if that is what it is, with what a client
    /// certificate it hands out needs: the CA and `tls-server-name` of `server`.
    pub(super) fn for_credential(
        credential: &Credential,
        ca_pem: &[u8],
        server: &Server,
    ) -> Option<Self> {
        match credential {
            Credential::Exec(plugin) => Some(ExecAuth {
                plugin: plugin.clone(),
                ca_pem: ca_pem.to_vec(),
                tls_server_name: server.tls_server_name.clone(),
                cert_http: std::sync::Mutex::new(None),
            }),
            _ => None,
        }
    }
}

// === impl ApiClient ===

impl ApiClient {
    /// The pooled client and `Authorization` header for a credential from the plugin: a
    /// token rides on the shared client; a client certificate gets a client of its own,
    /// kept until the plugin hands out another one.
    pub(super) fn exec_transport(
        &self,
        exec: &ExecAuth,
        fresh: &exec::Fresh,
    ) -> Result<(reqwest::Client, Option<HeaderValue>), Error> {
        let setup = |reason: String| Error::Setup {
            server: self.inner.server.clone(),
            reason: format!("exec plugin {}: {reason}", exec.plugin.command()),
        };
        match &fresh.issued {
            exec::Issued::Token(token) => {
                let mut value = HeaderValue::from_str(&token.secret_header()).map_err(|_| {
                    setup("the token contains characters not allowed in a header".into())
                })?;
                value.set_sensitive(true);
                Ok((self.inner.http.clone(), Some(value)))
            }
            exec::Issued::ClientCert { chain_pem, key } => {
                let mut held = exec.cert_http.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((generation, http)) = held.as_ref() {
                    if *generation == fresh.generation {
                        return Ok((http.clone(), None));
                    }
                }
                let credential = Credential::ClientCert {
                    chain_pem: chain_pem.clone(),
                    key: key.clone(),
                };
                let (tls, identity, _) =
                    tls::client_config(&exec.ca_pem, &credential, self.inner.server_name.as_ref())
                        .map_err(setup)?;
                let alias = match &self.inner.proxy {
                    None => sni_alias(
                        &self.inner.server,
                        exec.tls_server_name.as_deref(),
                        &self.inner.opts.resolver,
                    )
                    .map(|(_, resolver)| resolver),
                    Some(_) => None,
                };
                let http = build_http(tls, &self.inner.opts, self.inner.proxy.as_ref(), alias)
                    .map_err(|e| setup(e.to_string()))?;
                tracing::info!(plugin = %exec.plugin.command(), %identity, "using the client certificate from the exec plugin");
                *held = Some((fresh.generation, http.clone()));
                Ok((http, None))
            }
        }
    }
}
