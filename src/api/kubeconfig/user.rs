//! A kubeconfig user entry as a `Credential`: a token (inline or `tokenFile`), a client
//! certificate and key, or an `exec` credential plugin, exactly one. Every other way to
//! authenticate is refused by its key (`users[N].user.auth-provider`, ...) instead of being
//! dropped into an anonymous request. The credential types redact themselves in Debug and
//! have no Display.

use std::fmt;

use kube_client::config::AuthInfo;
use secrecy::ExposeSecret as _;

use super::exec::{self, ClusterInfo, ExecPlugin};
use super::{non_empty, KubeconfigError, PemSummary, Reader};
use crate::pki::{split_pem, PrivateKeyPem};

/// Why a credential kubectl would honour is no use to bootlet.
const NEEDS_TOKEN_OR_CERT: &str =
    "bootlet needs a bootstrap token, a client certificate or an exec plugin";
const NO_IMPERSONATION: &str =
    "bootlet acts as the node itself and never impersonates another user";

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

    /// The token itself, for the one place that writes it into a bootstrap kubeconfig
    /// (`bootlet rejoin`); never for a log line.
    pub fn expose(&self) -> &str {
        &self.0
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

/// How the kubeconfig's user authenticates. Debug shows the certificate chain's size and
/// fingerprint, never its body, and never the key or token.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Token(BootstrapToken),
    ClientCert {
        chain_pem: String,
        key: PrivateKeyPem,
    },
    /// An exec credential plugin, run when a request needs the credential.
    Exec(ExecPlugin),
    None,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Token(token) => f.debug_tuple("Token").field(token).finish(),
            Credential::ClientCert { chain_pem, key } => f
                .debug_struct("ClientCert")
                .field("chain_pem", &PemSummary(chain_pem.as_bytes()))
                .field("key", key)
                .finish(),
            Credential::Exec(plugin) => f.debug_tuple("Exec").field(plugin).finish(),
            Credential::None => f.write_str("None"),
        }
    }
}

// === impl Reader ===

impl Reader<'_> {
    /// The credential of user `user`, the `index`th entry of `users`: a token or a client
    /// certificate and key, never both (bootlet presents exactly one identity).
    pub(super) fn credential(
        &self,
        user: &str,
        index: usize,
        auth: Option<&AuthInfo>,
        cluster: &ClusterInfo<'_>,
    ) -> Result<Credential, KubeconfigError> {
        let Some(auth) = auth else {
            return Ok(Credential::None);
        };
        let key = |field: &str| format!("users[{index}].user.{field}");
        if let Some((field, reason)) = refused(auth) {
            return Err(KubeconfigError::Unsupported {
                path: self.p(),
                key: key(&field),
                reason,
            });
        }
        if let Some(config) = &auth.exec {
            return self.exec(auth, config, cluster, &key);
        }
        let key_data = auth
            .client_key_data
            .as_ref()
            .map(|k| k.expose_secret().to_string());
        let cert = (
            ("client-certificate-data", &auth.client_certificate_data),
            ("client-certificate", &auth.client_certificate),
        );
        let pkey = (
            ("client-key-data", &key_data),
            ("client-key", &auth.client_key),
        );
        let (has_cert, has_key) = (named(cert), named(pkey));
        if let Some(token) = self.token(auth)? {
            return self.only_token(user, &token, has_cert.or(has_key), &key);
        }
        let incomplete = match (has_cert.is_some(), has_key.is_some()) {
            (false, false) => return Ok(Credential::None),
            (true, true) => None,
            (true, false) => Some(("client-certificate", "client-key")),
            (false, true) => Some(("client-key", "client-certificate")),
        };
        if let Some((present, missing)) = incomplete {
            return Err(KubeconfigError::IncompleteClientCert {
                path: self.p(),
                user: user.to_string(),
                present,
                missing,
            });
        }
        self.client_cert(cert, pkey)
    }

    /// The user's token, which must be its only credential (`also` names a client
    /// certificate or key field that is set too) and not blank.
    fn only_token(
        &self,
        user: &str,
        token: &str,
        also: Option<&str>,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Credential, KubeconfigError> {
        if let Some(field) = also {
            return Err(KubeconfigError::Unsupported {
                path: self.p(),
                key: key(field),
                reason: "the user also has a token, and bootlet presents exactly one \
                         identity: keep the token or the client certificate"
                    .into(),
            });
        }
        let token = BootstrapToken::new(token);
        if token.0.is_empty() {
            return Err(KubeconfigError::EmptyToken {
                path: self.p(),
                user: user.to_string(),
            });
        }
        Ok(Credential::Token(token))
    }

    /// The user's `exec` plugin, which must be its only credential (pure: nothing runs).
    fn exec(
        &self,
        auth: &AuthInfo,
        config: &kube_client::config::ExecConfig,
        cluster: &ClusterInfo<'_>,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Credential, KubeconfigError> {
        let others = [
            ("token", auth.token.is_some()),
            ("tokenFile", non_empty(&auth.token_file).is_some()),
            (
                "client-certificate-data",
                non_empty(&auth.client_certificate_data).is_some(),
            ),
            (
                "client-certificate",
                non_empty(&auth.client_certificate).is_some(),
            ),
            ("client-key-data", auth.client_key_data.is_some()),
            ("client-key", non_empty(&auth.client_key).is_some()),
        ];
        if let Some((field, _)) = others.iter().find(|(_, set)| *set) {
            return Err(KubeconfigError::Unsupported {
                path: self.p(),
                key: key(field),
                reason: "the user also has an exec plugin, and bootlet presents exactly one \
                         identity: keep the plugin or the static credential"
                    .into(),
            });
        }
        match exec::spec(config, self.path, cluster) {
            Ok(spec) => Ok(Credential::Exec(ExecPlugin::new(spec))),
            Err(e) => {
                let (path, key) = (self.p(), key(&format!("exec.{}", e.key)));
                Err(match e.unsupported {
                    true => KubeconfigError::Unsupported {
                        path,
                        key,
                        reason: e.reason,
                    },
                    false => KubeconfigError::Invalid {
                        path,
                        key,
                        reason: e.reason,
                    },
                })
            }
        }
    }

    /// The user's token, inline or from `tokenFile`.
    fn token(&self, auth: &AuthInfo) -> Result<Option<String>, KubeconfigError> {
        Ok(match (&auth.token, non_empty(&auth.token_file)) {
            (Some(token), _) => Some(token.expose_secret().to_string()),
            (None, Some(file)) => {
                let bytes = self.read_file("tokenFile", &self.resolve(file))?;
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
            (None, None) => None,
        })
    }

    /// The client certificate chain and key, each from its `-data` field or its file (both
    /// known to be present).
    fn client_cert(
        &self,
        cert: PemFields<'_>,
        key: PemFields<'_>,
    ) -> Result<Credential, KubeconfigError> {
        let path = self.p();
        let (Some((cert_what, cert)), Some((key_what, key))) = (
            self.pem_source(cert.0, cert.1)?,
            self.pem_source(key.0, key.1)?,
        ) else {
            return Ok(Credential::None); // unreachable: both were present above
        };
        let (chain_pem, _) = split_pem(&String::from_utf8_lossy(&cert));
        if chain_pem.is_empty() {
            return Err(KubeconfigError::NoCertificate {
                path,
                what: cert_what,
            });
        }
        match split_pem(&String::from_utf8_lossy(&key)) {
            (_, Some(key)) => Ok(Credential::ClientCert { chain_pem, key }),
            (_, None) => Err(KubeconfigError::NoPrivateKey {
                path,
                what: key_what,
            }),
        }
    }
}

/// A PEM's two kubeconfig fields: `(FIELD-data, its value)`, `(FIELD, the file's path)`.
type PemFields<'a> = (
    (&'static str, &'a Option<String>),
    (&'static str, &'a Option<String>),
);

/// Which of a PEM's two fields names it: the `-data` one wins; `None` when neither does.
fn named(((data_field, data), (file_field, file)): PemFields<'_>) -> Option<&'static str> {
    match (non_empty(data), non_empty(file)) {
        (Some(_), _) => Some(data_field),
        (None, Some(_)) => Some(file_field),
        (None, None) => None,
    }
}

/// The first key of a user entry that bootlet would otherwise silently ignore, and why it
/// cannot honour it (pure). `extensions` is metadata for other tools and stays allowed.
fn refused(auth: &AuthInfo) -> Option<(String, String)> {
    refused_known(auth)
        .map(|(field, reason)| (field.to_string(), reason.to_string()))
        .or_else(|| {
            auth.other.keys().next().map(|unknown| {
                (
                    unknown.escape_debug().to_string(),
                    "it is not a kubeconfig user field (bootlet reads token, tokenFile, \
                     client-certificate[-data] and client-key[-data])"
                        .to_string(),
                )
            })
        })
}

/// The first kubeconfig user field that kubectl honours and bootlet does not, in the order
/// [`refused`] reports them (pure).
fn refused_known(auth: &AuthInfo) -> Option<(&'static str, &'static str)> {
    let set = |s: &Option<String>| non_empty(s).is_some();
    let password = auth
        .password
        .as_ref()
        .is_some_and(|p| !p.expose_secret().is_empty());
    let groups = auth
        .impersonate_groups
        .as_ref()
        .is_some_and(|g| !g.is_empty());
    let extra = auth
        .impersonate_user_extra
        .as_ref()
        .is_some_and(|e| !e.is_empty());
    [
        (
            auth.auth_provider.is_some(),
            "auth-provider",
            NEEDS_TOKEN_OR_CERT,
        ),
        (set(&auth.username), "username", NEEDS_TOKEN_OR_CERT),
        (password, "password", NEEDS_TOKEN_OR_CERT),
        (set(&auth.impersonate), "as", NO_IMPERSONATION),
        (set(&auth.impersonate_uid), "as-uid", NO_IMPERSONATION),
        (groups, "as-groups", NO_IMPERSONATION),
        (extra, "as-user-extra", NO_IMPERSONATION),
    ]
    .into_iter()
    .find_map(|(present, field, reason)| present.then_some((field, reason)))
}
