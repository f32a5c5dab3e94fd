//! Configuration: `DEFAULT_*` consts <- YAML file (`--config`) <- flags, validated once into
//! an `Option`-free [`Settings`]; Go-style durations. Parsing argv is cli.rs's job.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::cli::Flags;
use crate::telemetry::LogFormat;

/// The kubeadm/kubelet path, so `kubeadm join` output works unchanged.
pub const DEFAULT_BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/bootstrap-kubelet.conf";
/// The kubelet's own kubeconfig path, so a kubelet started with it needs no change.
pub const DEFAULT_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
/// The kubelet's default `--cert-dir`, where it looks for kubelet-client-current.pem.
pub const DEFAULT_CERT_DIR: &str = "/var/lib/kubelet/pki";
/// Rotation is what keeps the node's identity alive past the first certificate.
pub const DEFAULT_ROTATE_CERTIFICATES: bool = true;
/// The kubelet's choice: rotate with a quarter of the lifetime left for retries.
pub const DEFAULT_ROTATION_FRACTION: f64 = 0.75;
/// Spreads a fleet's rotations so nodes joined together do not rotate together.
pub const DEFAULT_ROTATION_JITTER: f64 = 0.05;
/// Most deployments use bootlet as the node's only heartbeat writer.
pub const DEFAULT_RENEW_LEASE: bool = true;
/// The kubelet's node Lease renewal period.
pub const DEFAULT_LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// The kubelet's `nodeLeaseDurationSeconds`: four missed renewals before the node is stale.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(40);
/// Long enough for a human approver, short enough that a lost CSR is noticed the same hour.
pub const DEFAULT_CSR_TIMEOUT: Duration = Duration::from_secs(3600);
/// Loopback only: metrics and health are for the node's own agents, not the network.
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "127.0.0.1:10259";
/// A few past certificates for forensics and rollback without filling the disk.
pub const DEFAULT_KEEP_CERTIFICATES: usize = 5;
/// Skipping TLS verification hands the node's identity to whoever answers; opt in only.
pub const DEFAULT_ALLOW_INSECURE_KUBECONFIG: bool = false;
/// The contract's first wait after a Denied or Failed CSR: never a tight loop.
pub const DEFAULT_CSR_BACKOFF_MIN: Duration = Duration::from_secs(60);
/// The contract's cap between CSRs: an hour keeps retrying without flooding approvers.
pub const DEFAULT_CSR_BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// Jitter of the CSR backoff, so nodes denied together do not retry together.
pub const DEFAULT_CSR_BACKOFF_JITTER: f64 = 0.1;
/// An approved CSR is usually signed within seconds; a minute means the signer is down.
pub const DEFAULT_CSR_NOT_ISSUED_WARNING: Duration = Duration::from_secs(60);
/// The contract's "at most once a minute" Node lookup for the Lease owner reference.
pub const DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL: Duration = Duration::from_secs(60);
/// Enough to finish an atomic file write, short next to systemd's 90 s stop timeout.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Human-readable logs; JSON is opt-in for shippers.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Text;
/// Info level: state transitions only (rule 15).
pub const DEFAULT_VERBOSITY: u8 = 0;

/// The YAML config file: every flag's camelCase key, all optional. Durations are Go-style
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
    #[serde(skip_serializing_if = "Option::is_none")] pub keep_certificates: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")] pub allow_insecure_kubeconfig: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")] pub log_format: Option<LogFormat>,
    #[serde(skip_serializing_if = "Option::is_none")] pub verbosity: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_backoff_min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_backoff_max: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub csr_not_issued_warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub lease_owner_lookup_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")] pub shutdown_grace: Option<String>,
}

/// The validated configuration every job is built from. Paths are absolute.
#[derive(Debug, Clone, PartialEq)]
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
    /// An http(s) URL, when set.
    pub lease_health_probe: Option<String>,
    pub lease_renew_interval: Duration,
    /// Whole seconds, longer than `lease_renew_interval`.
    pub lease_duration: Duration,
    pub csr_timeout: Duration,
    /// `None` means `off`.
    pub metrics_bind_address: Option<SocketAddr>,
    /// At least 1.
    pub keep_certificates: usize,
    pub allow_insecure_kubeconfig: bool,
    /// `0 < csr_backoff_min <= csr_backoff_max`.
    pub csr_backoff_min: Duration,
    pub csr_backoff_max: Duration,
    pub csr_not_issued_warning: Duration,
    pub lease_owner_lookup_interval: Duration,
    /// May be zero.
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
pub enum Origin {
    Default { key: &'static str },
    File { path: PathBuf, key: &'static str },
    Flag { key: &'static str },
}

/// A duration that is not Go syntax, or is negative.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid duration {input:?} (use Go units such as 10s, 5m, 1h)")]
pub struct DurationError {
    pub input: String,
}

/// Parses a Go-style duration: `500ms`, `10s`, `5m`, `1h`, `1h30m`, `1.5h`, `300us`, `0`.
/// Negative durations are rejected.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    static PARSER: jiff::fmt::friendly::SpanParser = jiff::fmt::friendly::SpanParser::new();
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    // Go has no spaces, signs or long unit names; the friendly parser would accept them.
    let go_shaped = !t.is_empty()
        && t.chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && t.chars().all(|c| {
            c.is_ascii_digit() || matches!(c, '.' | 'n' | 's' | 'u' | 'µ' | 'μ' | 'm' | 'h')
        });
    let err = || DurationError {
        input: s.to_owned(),
    };
    if !go_shaped {
        return Err(err());
    }
    PARSER
        .parse_unsigned_duration(t.replace('μ', "µ"))
        .map_err(|_| err())
}

/// Formats a duration so [`parse_duration`] reads it back exactly: `10s`, `1h30m`, `500ms`.
pub fn format_duration(d: Duration) -> String {
    use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};
    static PRINTER: SpanPrinter = SpanPrinter::new()
        .designator(Designator::Compact)
        .spacing(Spacing::None);
    PRINTER.unsigned_duration_to_string(&d).replace('µ', "u")
}

/// The flag that sets a file key: `leaseRenewInterval` -> `--lease-renew-interval`.
pub fn flag_for_key(key: &str) -> String {
    if key == "verbosity" {
        return "-v".to_owned();
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
    /// Reads and parses `path`. An empty file (or only comments) is an empty config.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
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

    /// The defaults as a file, as in config/bootlet.example.yaml. `nodeName` and
    /// `leaseHealthProbe` have no static default and stay unset.
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
            keep_certificates: Some(DEFAULT_KEEP_CERTIFICATES),
            allow_insecure_kubeconfig: Some(DEFAULT_ALLOW_INSECURE_KUBECONFIG),
            log_format: Some(DEFAULT_LOG_FORMAT),
            verbosity: Some(DEFAULT_VERBOSITY),
            csr_backoff_min: d(DEFAULT_CSR_BACKOFF_MIN),
            csr_backoff_max: d(DEFAULT_CSR_BACKOFF_MAX),
            csr_not_issued_warning: d(DEFAULT_CSR_NOT_ISSUED_WARNING),
            lease_owner_lookup_interval: d(DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL),
            shutdown_grace: d(DEFAULT_SHUTDOWN_GRACE),
        }
    }
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

    /// [`Settings::load`] with the file already parsed (`path` names it in errors and
    /// anchors its relative paths).
    pub fn from_parts(
        file: Option<(&Path, &FileConfig)>,
        flags: &Flags,
    ) -> Result<Settings, ConfigError> {
        let l = Layers { file };
        let f = file.map(|(_, f)| f).cloned().unwrap_or_default();
        let fl = flags;
        let (rotation_fraction, fraction_at) = l.pick(
            "rotationFraction",
            fl.rotation_fraction,
            f.rotation_fraction,
            DEFAULT_ROTATION_FRACTION,
        );
        let (rotation_jitter, jitter_at) = l.pick(
            "rotationJitter",
            fl.rotation_jitter,
            f.rotation_jitter,
            DEFAULT_ROTATION_JITTER,
        );
        let (lease_renew_interval, interval_at) = l.duration(
            "leaseRenewInterval",
            fl.lease_renew_interval,
            &f.lease_renew_interval,
            DEFAULT_LEASE_RENEW_INTERVAL,
        )?;
        let (lease_duration, duration_at) = l.duration(
            "leaseDuration",
            fl.lease_duration,
            &f.lease_duration,
            DEFAULT_LEASE_DURATION,
        )?;
        let (csr_backoff_min, min_at) = l.duration(
            "csrBackoffMin",
            fl.csr_backoff_min,
            &f.csr_backoff_min,
            DEFAULT_CSR_BACKOFF_MIN,
        )?;
        let (csr_backoff_max, max_at) = l.duration(
            "csrBackoffMax",
            fl.csr_backoff_max,
            &f.csr_backoff_max,
            DEFAULT_CSR_BACKOFF_MAX,
        )?;
        let (metrics, metrics_at) = l.pick(
            "metricsBindAddress",
            fl.metrics_bind_address.clone(),
            f.metrics_bind_address.clone(),
            DEFAULT_METRICS_BIND_ADDRESS.to_owned(),
        );
        let (keep_certificates, keep_at) = l.pick(
            "keepCertificates",
            fl.keep_certificates,
            f.keep_certificates,
            DEFAULT_KEEP_CERTIFICATES,
        );
        let (probe, probe_at) = l.pick(
            "leaseHealthProbe",
            fl.lease_health_probe.clone().map(Some),
            f.lease_health_probe.clone().map(Some),
            None,
        );
        let (node_name, node_at) = match (&fl.node_name, &f.node_name) {
            (Some(n), _) => (n.clone(), l.origin_flag("nodeName")),
            (None, Some(n)) => (n.clone(), l.origin_file("nodeName")),
            (None, None) => (
                hostname().map_err(|source| ConfigError::Hostname { source })?,
                Origin::Default { key: "nodeName" },
            ),
        };
        let verbosity = if fl.verbose > 0 {
            fl.verbose
        } else {
            f.verbosity.unwrap_or(DEFAULT_VERBOSITY)
        };

        let s = Settings {
            bootstrap_kubeconfig: l.path(
                "bootstrapKubeconfig",
                &fl.bootstrap_kubeconfig,
                &f.bootstrap_kubeconfig,
                DEFAULT_BOOTSTRAP_KUBECONFIG,
            )?,
            kubeconfig: l.path(
                "kubeconfig",
                &fl.kubeconfig,
                &f.kubeconfig,
                DEFAULT_KUBECONFIG,
            )?,
            cert_dir: l.path("certDir", &fl.cert_dir, &f.cert_dir, DEFAULT_CERT_DIR)?,
            node_name: node_name.to_lowercase(),
            rotate_certificates: fl
                .rotate_certificates
                .or(f.rotate_certificates)
                .unwrap_or(DEFAULT_ROTATE_CERTIFICATES),
            rotation_fraction,
            rotation_jitter,
            renew_lease: fl
                .renew_lease
                .or(f.renew_lease)
                .unwrap_or(DEFAULT_RENEW_LEASE),
            lease_health_probe: probe,
            lease_renew_interval,
            lease_duration,
            csr_timeout: l
                .duration(
                    "csrTimeout",
                    fl.csr_timeout,
                    &f.csr_timeout,
                    DEFAULT_CSR_TIMEOUT,
                )?
                .0,
            metrics_bind_address: parse_metrics_address(&metrics).map_err(|problem| {
                ConfigError::Invalid {
                    origin: metrics_at,
                    problem,
                }
            })?,
            keep_certificates,
            allow_insecure_kubeconfig: fl
                .allow_insecure_kubeconfig
                .or(f.allow_insecure_kubeconfig)
                .unwrap_or(DEFAULT_ALLOW_INSECURE_KUBECONFIG),
            csr_backoff_min,
            csr_backoff_max,
            csr_not_issued_warning: l
                .duration(
                    "csrNotIssuedWarning",
                    fl.csr_not_issued_warning,
                    &f.csr_not_issued_warning,
                    DEFAULT_CSR_NOT_ISSUED_WARNING,
                )?
                .0,
            lease_owner_lookup_interval: l
                .duration(
                    "leaseOwnerLookupInterval",
                    fl.lease_owner_lookup_interval,
                    &f.lease_owner_lookup_interval,
                    DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL,
                )?
                .0,
            shutdown_grace: l
                .duration(
                    "shutdownGrace",
                    fl.shutdown_grace,
                    &f.shutdown_grace,
                    DEFAULT_SHUTDOWN_GRACE,
                )?
                .0,
            log_format: fl.log_format.or(f.log_format).unwrap_or(DEFAULT_LOG_FORMAT),
            verbosity,
        };

        let bad = |origin: Origin, problem: String| Err(ConfigError::Invalid { origin, problem });
        if !is_dns1123_subdomain(&s.node_name) {
            return bad(node_at, format!(
                "{:?} is not a valid node name (lower-case letters, digits, '-' and '.', at most 253)",
                s.node_name));
        }
        if !(s.rotation_fraction > 0.0 && s.rotation_fraction < 1.0) {
            return bad(
                fraction_at,
                format!("must be between 0 and 1, got {}", s.rotation_fraction),
            );
        }
        if s.rotation_jitter.is_nan() || s.rotation_jitter < 0.0 {
            return bad(
                jitter_at,
                format!("must be 0 or more, got {}", s.rotation_jitter),
            );
        }
        let (lo, hi) = (
            s.rotation_fraction - s.rotation_jitter,
            s.rotation_fraction + s.rotation_jitter,
        );
        if !(lo > 0.0 && hi < 1.0) {
            return bad(
                jitter_at,
                format!(
                    "rotation window [{lo}, {hi}] (fraction {} ± jitter {}) must lie inside (0, 1)",
                    s.rotation_fraction, s.rotation_jitter
                ),
            );
        }
        if let Some(probe) = &s.lease_health_probe {
            if let Err(problem) = check_probe_url(probe) {
                return bad(probe_at, problem);
            }
        }
        for (key, value) in [
            ("leaseRenewInterval", s.lease_renew_interval),
            ("leaseDuration", s.lease_duration),
            ("csrTimeout", s.csr_timeout),
            ("csrBackoffMin", s.csr_backoff_min),
            ("csrNotIssuedWarning", s.csr_not_issued_warning),
            ("leaseOwnerLookupInterval", s.lease_owner_lookup_interval),
        ] {
            if value.is_zero() {
                return bad(l.origin_of(key, fl, &f), "must be greater than 0".into());
            }
        }
        if s.lease_duration.subsec_nanos() != 0 {
            return bad(
                duration_at,
                format!(
                    "must be whole seconds (it becomes spec.leaseDurationSeconds), got {}",
                    format_duration(s.lease_duration)
                ),
            );
        }
        if s.lease_duration <= s.lease_renew_interval {
            return bad(
                duration_at,
                format!(
                    "must be longer than the lease renew interval ({}, from {interval_at}), got {}",
                    format_duration(s.lease_renew_interval),
                    format_duration(s.lease_duration)
                ),
            );
        }
        if s.csr_backoff_max < s.csr_backoff_min {
            return bad(
                max_at,
                format!(
                    "must be at least the CSR backoff minimum ({}, from {min_at}), got {}",
                    format_duration(s.csr_backoff_min),
                    format_duration(s.csr_backoff_max)
                ),
            );
        }
        if s.keep_certificates == 0 {
            return bad(keep_at, "must be at least 1".into());
        }
        Ok(s)
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

fn parse_metrics_address(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.trim().parse().map(Some).map_err(|_| {
        format!(
            "invalid address {s:?} (use IP:PORT such as {DEFAULT_METRICS_BIND_ADDRESS}, or off)"
        )
    })
}

fn check_probe_url(s: &str) -> Result<(), String> {
    match reqwest::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        _ => Err(format!("invalid URL {s:?} (use http://HOST:PORT/PATH)")),
    }
}

/// Picks each value from flag, else file, else default, remembering where it came from.
struct Layers<'a> {
    file: Option<(&'a Path, &'a FileConfig)>,
}

// === impl Layers ===

impl Layers<'_> {
    fn origin_flag(&self, key: &'static str) -> Origin {
        Origin::Flag { key }
    }

    fn origin_file(&self, key: &'static str) -> Origin {
        match self.file {
            Some((path, _)) => Origin::File {
                path: path.to_owned(),
                key,
            },
            None => Origin::Default { key },
        }
    }

    fn pick<T>(
        &self,
        key: &'static str,
        flag: Option<T>,
        file: Option<T>,
        default: T,
    ) -> (T, Origin) {
        match (flag, file) {
            (Some(v), _) => (v, self.origin_flag(key)),
            (None, Some(v)) => (v, self.origin_file(key)),
            (None, None) => (default, Origin::Default { key }),
        }
    }

    /// Where a duration key came from, for the zero check.
    fn origin_of(&self, key: &'static str, flags: &Flags, f: &FileConfig) -> Origin {
        let (flag_set, file_set) = match key {
            "leaseRenewInterval" => (
                flags.lease_renew_interval.is_some(),
                f.lease_renew_interval.is_some(),
            ),
            "leaseDuration" => (flags.lease_duration.is_some(), f.lease_duration.is_some()),
            "csrTimeout" => (flags.csr_timeout.is_some(), f.csr_timeout.is_some()),
            "csrBackoffMin" => (flags.csr_backoff_min.is_some(), f.csr_backoff_min.is_some()),
            "csrNotIssuedWarning" => (
                flags.csr_not_issued_warning.is_some(),
                f.csr_not_issued_warning.is_some(),
            ),
            _ => (
                flags.lease_owner_lookup_interval.is_some(),
                f.lease_owner_lookup_interval.is_some(),
            ),
        };
        self.pick(key, flag_set.then_some(()), file_set.then_some(()), ())
            .1
    }

    fn duration(
        &self,
        key: &'static str,
        flag: Option<Duration>,
        file: &Option<String>,
        default: Duration,
    ) -> Result<(Duration, Origin), ConfigError> {
        let file = match file {
            Some(s) => Some(parse_duration(s).map_err(|e| ConfigError::Invalid {
                origin: self.origin_file(key),
                problem: e.to_string(),
            })?),
            None => None,
        };
        Ok(self.pick(key, flag, file, default))
    }

    /// Flag paths are relative to the working directory, file paths to the file's folder.
    fn path(
        &self,
        key: &'static str,
        flag: &Option<PathBuf>,
        file: &Option<PathBuf>,
        default: &str,
    ) -> Result<PathBuf, ConfigError> {
        let (path, origin) = self.pick(key, flag.clone(), file.clone(), PathBuf::from(default));
        let anchored = match (&origin, self.file) {
            (Origin::File { .. }, Some((cfg, _))) if path.is_relative() => {
                cfg.parent().unwrap_or(Path::new("")).join(&path)
            }
            _ => path,
        };
        std::path::absolute(&anchored).map_err(|_| ConfigError::Invalid {
            origin,
            problem: "must not be empty".into(),
        })
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
