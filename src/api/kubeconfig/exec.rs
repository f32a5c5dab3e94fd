//! A kubeconfig user's `exec` credential plugin (`client.authentication.k8s.io` v1 and
//! v1beta1), run as the kubelet's client-go runs it: the command (PATH lookup, or a path
//! relative to the kubeconfig), its args and env, no stdin, `KUBERNETES_EXEC_INFO`; its
//! `ExecCredential` answer (a token, or a client certificate and key) cached until its
//! `expirationTimestamp` or until the API server refuses it. Owns the child process and
//! the protocol's JSON; does not send API requests (`api::ApiClient` does, with this). It sits in `kubeconfig/`
//! because a kubeconfig user is what names it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use kube_client::config::{ExecAuthCluster, ExecConfig, ExecInteractiveMode};
use serde::Serialize;

use super::{BootstrapToken, Shown};
use crate::pki::PrivateKeyPem;
use crate::runtime::clock;
use crate::runtime::text::{clip, one_line};

/// The environment variable client-go hands the plugin its request in.
pub const EXEC_INFO_ENV: &str = "KUBERNETES_EXEC_INFO";
/// The key of a cluster's `extensions` entry passed to the plugin as `spec.cluster.config`.
pub const CLUSTER_EXTENSION: &str = "client.authentication.k8s.io/exec";
/// The API versions bootlet speaks; `v1alpha1` is gone from client-go too.
pub const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];
/// The most stdout read from a plugin: an ExecCredential is a few KiB (a certificate
/// chain and key at most).
pub const MAX_STDOUT: usize = 1 << 20;
/// The most of a plugin's stderr kept, and shown in an error, in characters.
pub const STDERR_SHOWN: usize = 512;

/// A plugin as the kubeconfig configures it, resolved. Two users with the same spec share
/// one cached credential in this process, as in client-go.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ExecSpec {
    /// The command as written in the kubeconfig.
    pub command: String,
    /// What is started: a bare name is looked up in PATH when run; a name with a `/`
    /// resolved against the kubeconfig's directory (client-go's `ResolveLocalPaths`).
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The kubeconfig's `env`, added to bootlet's own environment.
    pub env: Vec<(String, String)>,
    pub api_version: String,
    pub install_hint: Option<String>,
    /// The `KUBERNETES_EXEC_INFO` JSON (with `spec.cluster` when `provideClusterInfo`).
    pub exec_info: String,
}

impl fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // env values may be secrets: names only.
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ExecSpec")
            .field("program", &self.program)
            .field("args", &self.args.len())
            .field("env", &env)
            .field("api_version", &self.api_version)
            .finish()
    }
}

/// Why a kubeconfig's `exec` cannot be used: the key (below `users[N].user.exec`) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct SpecError {
    pub key: &'static str,
    pub reason: String,
    /// A client-go feature bootlet cannot honour (rather than a malformed value).
    pub unsupported: bool,
}

/// What went wrong running a plugin; Display starts with the plugin's command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec plugin {command} not found{}", hint(.install_hint))]
    NotFound {
        command: String,
        install_hint: Option<String>,
    },
    #[error("exec plugin {command} could not be started")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("exec plugin {command} failed: {status}{}", stderr_text(.stderr))]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("exec plugin {command} did not answer within {}s and was killed{}", .timeout.as_secs_f64(), stderr_text(.stderr))]
    TimedOut {
        command: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("exec plugin {command} returned {reason}{}", stderr_text(.stderr))]
    BadOutput {
        command: String,
        reason: String,
        stderr: String,
    },
}

fn hint(install_hint: &Option<String>) -> String {
    match install_hint
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
    {
        Some(h) => format!(": {}", clip(&one_line(h), STDERR_SHOWN)),
        None => String::new(),
    }
}

fn stderr_text(stderr: &str) -> String {
    match stderr.trim() {
        "" => String::new(),
        s => format!(": stderr: {s}"),
    }
}

/// What a plugin hands out. Debug redacts it; there is no Display.
#[derive(Clone, PartialEq, Eq)]
pub enum Issued {
    Token(BootstrapToken),
    ClientCert {
        chain_pem: String,
        key: PrivateKeyPem,
    },
}

impl fmt::Debug for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Issued::Token(t) => f.debug_tuple("Token").field(t).finish(),
            Issued::ClientCert { key, .. } => {
                f.debug_struct("ClientCert").field("key", key).finish()
            }
        }
    }
}

/// A credential fresh from the plugin or the cache, and which run produced it (what a 401
/// invalidates, so that concurrent refusals run the plugin once).
#[derive(Clone, Debug)]
pub struct Fresh {
    pub issued: Issued,
    pub generation: u64,
}

/// One plugin and its cached credential; clones share the cache.
#[derive(Clone)]
pub struct ExecPlugin {
    shared: Arc<Shared>,
}

struct Shared {
    spec: ExecSpec,
    cache: tokio::sync::Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    issued: Option<(Issued, Option<SystemTime>)>,
    generation: u64,
}

/// The process's plugins by spec (client-go's global cache), so a credential outlives the
/// re-read of its kubeconfig that every bootstrap attempt does. A handful of entries: the
/// bootstrap kubeconfig's, and one more per edit of it.
static PLUGINS: StdMutex<Option<HashMap<ExecSpec, Arc<Shared>>>> = StdMutex::new(None);
const MAX_PLUGINS: usize = 16;

// === impl ExecPlugin ===

impl ExecPlugin {
    /// The plugin for `spec`, sharing the cache of an earlier one with the same spec.
    pub fn new(spec: ExecSpec) -> Self {
        let mut all = PLUGINS.lock().unwrap_or_else(|p| p.into_inner());
        let all = all.get_or_insert_with(HashMap::new);
        if all.len() >= MAX_PLUGINS && !all.contains_key(&spec) {
            all.clear();
        }
        let shared = all
            .entry(spec.clone())
            .or_insert_with(|| {
                Arc::new(Shared {
                    spec,
                    cache: tokio::sync::Mutex::new(Cache::default()),
                })
            })
            .clone();
        Self { shared }
    }

    pub fn spec(&self) -> &ExecSpec {
        &self.shared.spec
    }

    /// The command as the kubeconfig names it, for logs and errors.
    pub fn command(&self) -> &str {
        &self.shared.spec.command
    }

    /// The cached credential while it has not expired, else a fresh one from the plugin
    /// (one run at a time; callers waiting meanwhile get its answer).
    pub async fn credential(&self, timeout: Duration) -> Result<Fresh, ExecError> {
        let mut cache = self.shared.cache.lock().await;
        if let Some((issued, expiry)) = &cache.issued {
            if expiry.is_none_or(|at| clock::now() < at) {
                let (issued, generation) = (issued.clone(), cache.generation);
                return Ok(Fresh { issued, generation });
            }
            tracing::info!(plugin = %self.command(), "the exec plugin's credential expired; calling the plugin again");
        }
        cache.issued = None;
        let (issued, expiry) = run(&self.shared.spec, timeout).await?;
        cache.generation += 1;
        cache.issued = Some((issued.clone(), expiry));
        let generation = cache.generation;
        Ok(Fresh { issued, generation })
    }

    /// Forget the credential of run `generation` (the API server refused it), unless a
    /// newer one has replaced it already.
    pub async fn invalidate(&self, generation: u64) {
        let mut cache = self.shared.cache.lock().await;
        if cache.generation == generation {
            cache.issued = None;
        }
    }
}

impl fmt::Debug for ExecPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ExecPlugin")
            .field(&self.shared.spec)
            .finish()
    }
}

impl PartialEq for ExecPlugin {
    fn eq(&self, other: &Self) -> bool {
        self.shared.spec == other.shared.spec
    }
}

impl Eq for ExecPlugin {}

// === the kubeconfig side (pure) ===

/// The cluster as the plugin is told about it (`provideClusterInfo`).
pub struct ClusterInfo<'a> {
    pub server: &'a str,
    pub ca_pem: &'a [u8],
    pub tls_server_name: Option<&'a str>,
    pub insecure_skip_tls_verify: bool,
    pub proxy_url: Option<&'a str>,
    /// The cluster's `extensions` entry named [`CLUSTER_EXTENSION`].
    pub config: Option<serde_json::Value>,
}

/// `exec` of a kubeconfig at `kubeconfig` as a spec (pure: nothing is run or looked up).
pub fn spec(
    exec: &ExecConfig,
    kubeconfig: &Path,
    cluster: &ClusterInfo<'_>,
) -> Result<ExecSpec, SpecError> {
    let bad = |key, reason: String, unsupported| SpecError {
        key,
        reason,
        unsupported,
    };
    let command = exec.command.clone().unwrap_or_default();
    if command.trim().is_empty() {
        return Err(bad("command", "is empty".into(), false));
    }
    let api_version = exec.api_version.clone().unwrap_or_default();
    if !API_VERSIONS.contains(&api_version.as_str()) {
        let reason = format!(
            "{} is not one of {} (bootlet speaks what the kubelet speaks)",
            Shown(&api_version),
            API_VERSIONS.join(", ")
        );
        return Err(bad("apiVersion", reason, true));
    }
    match &exec.interactive_mode {
        Some(ExecInteractiveMode::Always) => {
            let reason = "Always needs a terminal, and bootlet runs as a service without \
                          one (client-go refuses it the same way); use Never or IfAvailable"
                .into();
            return Err(bad("interactiveMode", reason, true));
        }
        None if api_version.ends_with("/v1") => {
            let reason = "must be set with client.authentication.k8s.io/v1 (Never or \
                          IfAvailable), as client-go requires"
                .into();
            return Err(bad("interactiveMode", reason, false));
        }
        _ => {}
    }
    let env = env(exec).ok_or_else(|| {
        let reason = "has an entry without a valid name and value".into();
        bad("env", reason, false)
    })?;
    let program = if command.contains('/') {
        let dir = kubeconfig.parent().unwrap_or(Path::new("."));
        dir.join(&command)
    } else {
        PathBuf::from(&command)
    };
    let exec_info = exec_info(&api_version, exec.provide_cluster_info.then_some(cluster));
    Ok(ExecSpec {
        command,
        program,
        args: exec.args.clone().unwrap_or_default(),
        env,
        api_version,
        install_hint: exec.install_hint.clone().filter(|h| !h.trim().is_empty()),
        exec_info,
    })
}

/// The kubeconfig's `env` as pairs; `None` when an entry lacks a valid name or a value.
fn env(exec: &ExecConfig) -> Option<Vec<(String, String)>> {
    let pair = |p: &HashMap<String, String>| match (p.get("name"), p.get("value")) {
        (Some(name), Some(value)) if !name.is_empty() && !name.contains('=') => {
            Some((name.clone(), value.clone()))
        }
        _ => None,
    };
    exec.env.iter().flatten().map(pair).collect()
}

/// The request the plugin reads from `KUBERNETES_EXEC_INFO`.
#[derive(Serialize)]
struct ExecRequest<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'static str,
    spec: RequestSpec,
}

#[derive(Serialize)]
struct RequestSpec {
    interactive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ExecAuthCluster>,
}

/// `KUBERNETES_EXEC_INFO` (pure): never interactive; the cluster when asked for.
pub fn exec_info(api_version: &str, cluster: Option<&ClusterInfo<'_>>) -> String {
    let cluster = cluster.map(|c| ExecAuthCluster {
        server: Some(c.server.to_string()),
        insecure_skip_tls_verify: c.insecure_skip_tls_verify.then_some(true),
        certificate_authority_data: Some(c.ca_pem.to_vec()),
        proxy_url: c.proxy_url.map(str::to_string),
        tls_server_name: c.tls_server_name.map(str::to_string),
        config: c.config.clone(),
    });
    let request = ExecRequest {
        api_version,
        kind: "ExecCredential",
        spec: RequestSpec {
            interactive: false,
            cluster,
        },
    };
    serde_json::to_string(&request).unwrap_or_default()
}

mod answer;
mod run;

pub use answer::parse_answer;
use run::run;

#[cfg(test)]
mod tests;
