//! Configuration: `DEFAULT_*` consts <- YAML file (`--config`) <- flags, validated once into
//! an `Option`-free [`Settings`]; Go-style durations. Parsing argv is cli.rs's job.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cli::Flags;
use crate::pki::files::read_text_bounded;
use crate::runtime::backoff::Backoff;
use crate::runtime::telemetry::LogFormat;

pub use crate::runtime::duration::{format_duration, parse_duration, DurationError};

pub mod kubelet;
mod layers;
pub mod reference;
pub mod reload;

pub use kubelet::{KubeletFiles, KubeletView};

pub use crate::defaults::*;

/// The largest config file read: every key set takes well under 4 KiB, so anything near a
/// mebibyte is not a config file (or is a YAML bomb).
pub const MAX_CONFIG_FILE: u64 = 1 << 20;

/// The YAML config file: a key for every setting, all optional (the flag's name in camelCase
/// except `nodeIP`, `tlsSAN`, `serverTLSBootstrap` and `verbosity`). Durations are Go-style
/// strings (`10s`), booleans YAML booleans. Relative paths are relative to the file's folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[rustfmt::skip]
pub struct FileConfig {
    #[serde(skip_serializing_if = "Option::is_none")] pub bootstrap_kubeconfig: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")] pub kubeconfig: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")] pub cert_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")] pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub rotate_certificates: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")] pub rotation_fraction: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")] pub rotation_jitter: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")] pub renew_lease: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")] pub lease_health_probe: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub lease_renew_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub lease_duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub metrics_bind_address: Option<String>,
    /// The kubelet's KubeletConfiguration key, not the flag's camelCase.
    #[serde(skip_serializing_if = "Option::is_none", rename = "serverTLSBootstrap")]
    pub rotate_server_certificates: Option<bool>,
    /// A YAML list, or one comma-separated string as on the command line.
    #[serde(skip_serializing_if = "Option::is_none", rename = "nodeIP", default, deserialize_with = "string_list")]
    pub node_ip: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none", rename = "tlsSAN", default, deserialize_with = "string_list")]
    pub tls_san: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")] pub keep_certificates: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")] pub allow_insecure_kubeconfig: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")] pub log_format: Option<LogFormat>,
    #[serde(skip_serializing_if = "Option::is_none")] pub verbosity: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_backoff_min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_backoff_max: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_not_issued_warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub exec_plugin_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub lease_owner_lookup_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub shutdown_grace: Option<String>,
}

/// The validated configuration every job is built from. Paths are absolute. Each field's
/// reload policy is in [`reload::TABLE`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(test, derive(Serialize))]
pub struct Settings {
    pub bootstrap_kubeconfig: PathBuf,
    pub kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    /// Lower-case DNS-1123 subdomain.
    pub node_name: String,
    pub rotate_certificates: bool,
    /// In (0, 1); `rotation_fraction ± rotation_jitter` also lies in (0, 1).
    pub rotation_fraction: f64,
    pub rotation_jitter: f64,
    pub renew_lease: bool,
    /// A plain `http://` URL, when set (https has no trust root here: refused).
    pub lease_health_probe: Option<String>,
    /// In [1 s, 1 h] (the floor is lower only with the test flag).
    pub lease_renew_interval: Duration,
    /// Whole seconds, longer than `lease_renew_interval`, at most 1 h.
    pub lease_duration: Duration,
    /// In (0, 24 h].
    pub csr_timeout: Duration,
    /// `None` means `off`.
    pub metrics_bind_address: Option<SocketAddr>,
    /// Also obtain and rotate the kubelet's serving certificate.
    pub rotate_server_certificates: bool,
    /// `--node-ip`: the serving certificate's IPs before the Node reports its addresses;
    /// empty means "the default-route interface's addresses". Never unspecified or multicast.
    pub node_ips: Vec<IpAddr>,
    /// `--tls-san`: extra serving-certificate SANs, each an IP in canonical form or a
    /// lower-case DNS-1123 subdomain.
    pub tls_sans: Vec<String>,
    /// At least 1.
    pub keep_certificates: usize,
    pub allow_insecure_kubeconfig: bool,
    /// `0 < csr_backoff_min <= csr_backoff_max <= 24 h`.
    pub csr_backoff_min: Duration,
    pub csr_backoff_max: Duration,
    /// In (0, 24 h].
    pub csr_not_issued_warning: Duration,
    /// How long a kubeconfig's exec credential plugin may run; in (0, 24 h].
    pub exec_plugin_timeout: Duration,
    /// In (0, 24 h].
    pub lease_owner_lookup_interval: Duration,
    /// In [0, 5 min].
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
    pub verbosity: u8,
}

/// Why the configuration is unusable. Display is one line naming the file and key, or flag.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read config file", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not YAML, a wrong type or an unknown key; `message` has serde-saphyr's location.
    #[error("{}: {message}", path.display())]
    ParseFile { path: PathBuf, message: String },
    #[error("{origin}: {problem}")]
    Invalid { origin: Origin, problem: String },
    #[error("cannot read the host name from /proc/sys/kernel/hostname or /etc/hostname; pass --node-name")]
    Hostname {
        #[source]
        source: std::io::Error,
    },
}

/// Where a setting came from, for error messages.
#[derive(Debug, Clone, PartialEq)]
/// `key` is the file key (camelCase); a flag is named by [`flag_for_key`].
pub enum Origin {
    /// Nothing set it: the `DEFAULT_*` const (or, for `nodeName`, the host name).
    Default { key: &'static str },
    /// The config file at `path`.
    File { path: PathBuf, key: &'static str },
    /// A command-line flag.
    Flag { key: &'static str },
}

/// File keys that are not their flag's camelCase: `-v` counts, `serverTLSBootstrap` is the
/// kubelet's own key, and `IP`/`SAN` keep Kubernetes' upper-case acronyms (`podIP`, `clusterDNS`).
const KEY_FLAGS: [(&str, &str); 4] = [
    ("verbosity", "-v"),
    ("serverTLSBootstrap", "--rotate-server-certificates"),
    ("nodeIP", "--node-ip"),
    ("tlsSAN", "--tls-san"),
];

/// The flag that sets a file key: `leaseRenewInterval` -> `--lease-renew-interval`.
pub fn flag_for_key(key: &str) -> String {
    if let Some((_, flag)) = KEY_FLAGS.iter().find(|(k, _)| *k == key) {
        return (*flag).to_owned();
    }
    let mut flag = String::from("--");
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            flag.push('-');
        }
        flag.push(c.to_ascii_lowercase());
    }
    flag
}

/// Whether `name` is a lower-case RFC 1123 subdomain, as Kubernetes requires of node names.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    name.len() <= 253 && name.split('.').all(label_ok)
}

/// The host name, lower-cased, from /proc/sys/kernel/hostname or else /etc/hostname.
pub fn hostname() -> Result<String, std::io::Error> {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))?;
    Ok(raw.trim().to_lowercase())
}

// === impl FileConfig ===

impl FileConfig {
    /// Reads and parses `path`: a regular file of at most [`MAX_CONFIG_FILE`] bytes (a FIFO
    /// or device there is refused at once, never read). An empty file (or only comments)
    /// is an empty config.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        let text =
            read_text_bounded(path, MAX_CONFIG_FILE).map_err(|source| ConfigError::ReadFile {
                path: path.to_owned(),
                source,
            })?;
        FileConfig::parse(path, &text)
    }

    /// Parses YAML text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
        let is_blank = text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---");
        if is_blank {
            return Ok(FileConfig::default());
        }
        serde_saphyr::from_str(text).map_err(|e| {
            let mut opts = serde_saphyr::RenderOptions::default();
            opts.snippets = serde_saphyr::SnippetMode::Off;
            let mut message = e.render_with_options(opts);
            // Type errors carry only a location: name the key on that line too.
            let line = e
                .location()
                .and_then(|l| text.lines().nth(l.line().checked_sub(1)? as usize));
            if let Some((key, _)) = line.and_then(|l| l.split_once(':')) {
                let key = key.trim();
                if !key.is_empty()
                    && key.chars().all(|c| c.is_ascii_alphanumeric())
                    && !message.contains(key)
                {
                    message = format!("{key}: {message}");
                }
            }
            ConfigError::ParseFile {
                path: path.to_owned(),
                message: message.split_whitespace().collect::<Vec<_>>().join(" "),
            }
        })
    }

    /// The defaults as a file, as in config/bootlet.example.yaml. `nodeName`,
    /// `leaseHealthProbe` and `nodeIP` have no static default and stay unset.
    pub fn defaults() -> FileConfig {
        let d = |d: Duration| Some(format_duration(d));
        FileConfig {
            bootstrap_kubeconfig: Some(DEFAULT_BOOTSTRAP_KUBECONFIG.into()),
            kubeconfig: Some(DEFAULT_KUBECONFIG.into()),
            cert_dir: Some(DEFAULT_CERT_DIR.into()),
            node_name: None,
            rotate_certificates: Some(DEFAULT_ROTATE_CERTIFICATES),
            rotation_fraction: Some(DEFAULT_ROTATION_FRACTION),
            rotation_jitter: Some(DEFAULT_ROTATION_JITTER),
            renew_lease: Some(DEFAULT_RENEW_LEASE),
            lease_health_probe: None,
            lease_renew_interval: d(DEFAULT_LEASE_RENEW_INTERVAL),
            lease_duration: d(DEFAULT_LEASE_DURATION),
            csr_timeout: d(DEFAULT_CSR_TIMEOUT),
            metrics_bind_address: Some(DEFAULT_METRICS_BIND_ADDRESS.into()),
            rotate_server_certificates: Some(DEFAULT_ROTATE_SERVER_CERTIFICATES),
            node_ip: None,
            tls_san: Some(Vec::new()),
            keep_certificates: Some(DEFAULT_KEEP_CERTIFICATES),
            allow_insecure_kubeconfig: Some(DEFAULT_ALLOW_INSECURE_KUBECONFIG),
            log_format: Some(DEFAULT_LOG_FORMAT),
            verbosity: Some(DEFAULT_VERBOSITY),
            csr_backoff_min: d(DEFAULT_CSR_BACKOFF_MIN),
            csr_backoff_max: d(DEFAULT_CSR_BACKOFF_MAX),
            csr_not_issued_warning: d(DEFAULT_CSR_NOT_ISSUED_WARNING),
            exec_plugin_timeout: d(DEFAULT_EXEC_PLUGIN_TIMEOUT),
            lease_owner_lookup_interval: d(DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL),
            shutdown_grace: d(DEFAULT_SHUTDOWN_GRACE),
        }
    }
}

/// A list of strings from a YAML list or from one comma-separated string (as the flag).
fn string_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(s)) => Some(s.split(',').map(str::to_owned).collect()),
        Some(OneOrMany::Many(v)) => Some(v),
    })
}

// === impl Settings ===

impl Settings {
    /// consts <- the `--config` file (if any) <- flags, validated once.
    pub fn load(flags: &Flags) -> Result<Settings, ConfigError> {
        match &flags.config {
            Some(path) => Settings::from_parts(Some((path, &FileConfig::read(path)?)), flags),
            None => Settings::from_parts(None, flags),
        }
    }

    /// The backoff between CSRs after a Denied/Failed one: jittered, yet never under
    /// `csr_backoff_min` (the contract's "at least 1 minute"), doubling to `csr_backoff_max`.
    pub fn csr_backoff(&self) -> Backoff {
        let j = DEFAULT_CSR_BACKOFF_JITTER;
        let min = self.csr_backoff_min.div_f64(1.0 - j);
        Backoff::new(min, self.csr_backoff_max.max(min), j)
            .expect("validated: 0 < min <= max and jitter const in [0, 1)")
    }
}

// === impl Origin ===

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default { key } => write!(f, "{key} (default)"),
            Origin::File { path, key } => write!(f, "{}: {key}", path.display()),
            Origin::Flag { key } => f.write_str(&flag_for_key(key)),
        }
    }
}

#[cfg(test)]
mod tests;
