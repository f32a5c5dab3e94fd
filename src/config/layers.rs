//! The layering itself: consts <- file <- flags into [`Settings`], remembering where each
//! value came from so that validation errors name the flag or the file and key.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

// === impl Settings ===

impl Settings {
    /// [`Settings::load`] with the file already parsed: `path` names it in errors and
    /// anchors its relative paths. Flag paths are relative to the working directory.
    /// The keys bootlet shares with the kubelet (`nodeName`, `serverTLSBootstrap`,
    /// `rotateCertificates`) follow the kubelet's own configuration where neither file nor
    /// flag sets them ([`KubeletFiles`] at their standard paths).
    pub fn from_parts(
        file: Option<(&Path, &FileConfig)>,
        flags: &Flags,
    ) -> Result<Settings, ConfigError> {
        Settings::from_parts_with(file, flags, &KubeletFiles::default().view())
    }

    /// [`Settings::from_parts`] with the kubelet's say already read.
    pub fn from_parts_with(
        file: Option<(&Path, &FileConfig)>,
        flags: &Flags,
        kubelet: &KubeletView,
    ) -> Result<Settings, ConfigError> {
        let (settings, at) = Settings::layer(file, flags, kubelet)?;
        settings.validate(&at, renew_floor(flags))?;
        Ok(settings)
    }

    /// Merges without range checks; the [`Layers`] say where each key's value came from.
    pub(super) fn layer<'a>(
        file: Option<(&'a Path, &FileConfig)>,
        flags: &Flags,
        kubelet: &KubeletView,
    ) -> Result<(Settings, Layers<'a>), ConfigError> {
        let mut at = Layers {
            file: file.map(|(p, _)| p),
            origins: BTreeMap::new(),
        };
        let f = file.map(|(_, f)| f.clone()).unwrap_or_default();
        let fl = flags;
        // Picks flag, else file, else default, and records where the value came from.
        macro_rules! take {
            ($key:literal, $field:ident, $default:expr) => {
                at.pick($key, fl.$field.clone(), f.$field.clone(), $default)
            };
        }
        macro_rules! duration {
            ($key:literal, $field:ident, $default:expr) => {
                at.duration($key, fl.$field, f.$field.as_deref(), $default)?
            };
        }
        macro_rules! path {
            ($key:literal, $field:ident, $default:expr) => {{
                let p = take!($key, $field, PathBuf::from($default));
                at.absolute($key, p)?
            }};
        }
        let typed = take!("nodeName", node_name, String::new());
        // Where a name nobody typed into bootlet's config came from, for the error.
        let (node_name, found_in) = match at.of("nodeName") {
            Origin::Default { .. } => match &kubelet.node_name {
                Some(name) => (name.clone(), Some("the kubelet's --hostname-override ")),
                None => (
                    hostname().map_err(|source| ConfigError::Hostname { source })?,
                    Some("host name "),
                ),
            },
            _ => (typed.to_lowercase(), None),
        };
        // Checked here, where what the operator typed is at hand: the error quotes it, not
        // the lower-cased value the check saw.
        if !is_dns1123_subdomain(&node_name) {
            return Err(at.bad("nodeName", format!(
                "{}{:?} is not a valid node name (lower-case letters, digits, '-' and '.', at most 253){}",
                found_in.unwrap_or(""),
                if found_in.is_some() { &node_name } else { &typed },
                if found_in.is_some() { "; pass --node-name" } else { "" })));
        }
        let metrics = take!(
            "metricsBindAddress",
            metrics_bind_address,
            DEFAULT_METRICS_BIND_ADDRESS.into()
        );
        let s = Settings {
            bootstrap_kubeconfig: path!(
                "bootstrapKubeconfig",
                bootstrap_kubeconfig,
                DEFAULT_BOOTSTRAP_KUBECONFIG
            ),
            kubeconfig: path!("kubeconfig", kubeconfig, DEFAULT_KUBECONFIG),
            cert_dir: path!("certDir", cert_dir, DEFAULT_CERT_DIR),
            node_name,
            rotate_certificates: take!(
                "rotateCertificates",
                rotate_certificates,
                kubelet
                    .rotate_certificates
                    .unwrap_or(DEFAULT_ROTATE_CERTIFICATES)
            ),
            rotation_fraction: take!(
                "rotationFraction",
                rotation_fraction,
                DEFAULT_ROTATION_FRACTION
            ),
            rotation_jitter: take!("rotationJitter", rotation_jitter, DEFAULT_ROTATION_JITTER),
            renew_lease: take!("renewLease", renew_lease, DEFAULT_RENEW_LEASE),
            lease_health_probe: at.pick(
                "leaseHealthProbe",
                fl.lease_health_probe.clone().map(Some),
                f.lease_health_probe.clone().map(Some),
                None,
            ),
            lease_renew_interval: duration!(
                "leaseRenewInterval",
                lease_renew_interval,
                DEFAULT_LEASE_RENEW_INTERVAL
            ),
            lease_duration: duration!("leaseDuration", lease_duration, DEFAULT_LEASE_DURATION),
            csr_timeout: duration!("csrTimeout", csr_timeout, DEFAULT_CSR_TIMEOUT),
            metrics_bind_address: parse_metrics_address(&metrics)
                .map_err(|problem| at.bad("metricsBindAddress", problem))?,
            rotate_server_certificates: take!(
                "serverTLSBootstrap",
                rotate_server_certificates,
                kubelet
                    .server_tls_bootstrap
                    .unwrap_or(DEFAULT_ROTATE_SERVER_CERTIFICATES)
            ),
            node_ips: parse_node_ips(&take!("nodeIP", node_ip, Vec::new()))
                .map_err(|problem| at.bad("nodeIP", problem))?,
            tls_sans: parse_tls_sans(&take!("tlsSAN", tls_san, Vec::new()))
                .map_err(|problem| at.bad("tlsSAN", problem))?,
            keep_certificates: take!(
                "keepCertificates",
                keep_certificates,
                DEFAULT_KEEP_CERTIFICATES
            ),
            allow_insecure_kubeconfig: take!(
                "allowInsecureKubeconfig",
                allow_insecure_kubeconfig,
                DEFAULT_ALLOW_INSECURE_KUBECONFIG
            ),
            csr_backoff_min: duration!("csrBackoffMin", csr_backoff_min, DEFAULT_CSR_BACKOFF_MIN),
            csr_backoff_max: duration!("csrBackoffMax", csr_backoff_max, DEFAULT_CSR_BACKOFF_MAX),
            csr_not_issued_warning: duration!(
                "csrNotIssuedWarning",
                csr_not_issued_warning,
                DEFAULT_CSR_NOT_ISSUED_WARNING
            ),
            exec_plugin_timeout: duration!(
                "execPluginTimeout",
                exec_plugin_timeout,
                DEFAULT_EXEC_PLUGIN_TIMEOUT
            ),
            lease_owner_lookup_interval: duration!(
                "leaseOwnerLookupInterval",
                lease_owner_lookup_interval,
                DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL
            ),
            shutdown_grace: duration!("shutdownGrace", shutdown_grace, DEFAULT_SHUTDOWN_GRACE),
            log_format: take!("logFormat", log_format, DEFAULT_LOG_FORMAT),
            // -v is a count: 0 means "not given", so the file's level applies.
            verbosity: at.pick(
                "verbosity",
                (fl.verbose > 0).then_some(fl.verbose),
                f.verbosity,
                DEFAULT_VERBOSITY,
            ),
        };
        Ok((s, at))
    }

    /// The cross-field and range checks, once, after layering. Every duration has a floor
    /// and a cap, so no sum, product or `Instant` made from one can overflow.
    fn validate(&self, at: &Layers<'_>, renew_floor: Duration) -> Result<(), ConfigError> {
        let s = self;
        let fail = |key: &'static str, problem: String| Err(at.bad(key, problem));
        if !(s.rotation_fraction > 0.0 && s.rotation_fraction < 1.0) {
            return fail(
                "rotationFraction",
                format!("must be between 0 and 1, got {}", s.rotation_fraction),
            );
        }
        if s.rotation_jitter.is_nan() || s.rotation_jitter < 0.0 {
            return fail(
                "rotationJitter",
                format!("must be 0 or more, got {}", s.rotation_jitter),
            );
        }
        let (lo, hi) = (
            s.rotation_fraction - s.rotation_jitter,
            s.rotation_fraction + s.rotation_jitter,
        );
        if !(lo > 0.0 && hi < 1.0) {
            return fail(
                "rotationJitter",
                format!(
                    "rotation window [{lo}, {hi}] (fraction {} ± jitter {}) must lie inside (0, 1)",
                    s.rotation_fraction, s.rotation_jitter
                ),
            );
        }
        if let Some(Err(problem)) = s.lease_health_probe.as_deref().map(check_probe_url) {
            return fail("leaseHealthProbe", problem);
        }
        for (key, value, min, max) in [
            (
                "leaseRenewInterval",
                s.lease_renew_interval,
                renew_floor,
                MAX_LEASE_TIMING,
            ),
            (
                "leaseDuration",
                s.lease_duration,
                POSITIVE,
                MAX_LEASE_TIMING,
            ),
            ("csrTimeout", s.csr_timeout, POSITIVE, MAX_CSR_TIMING),
            ("csrBackoffMin", s.csr_backoff_min, POSITIVE, MAX_CSR_TIMING),
            ("csrBackoffMax", s.csr_backoff_max, POSITIVE, MAX_CSR_TIMING),
            (
                "csrNotIssuedWarning",
                s.csr_not_issued_warning,
                POSITIVE,
                MAX_CSR_TIMING,
            ),
            (
                "execPluginTimeout",
                s.exec_plugin_timeout,
                POSITIVE,
                MAX_CSR_TIMING,
            ),
            (
                "leaseOwnerLookupInterval",
                s.lease_owner_lookup_interval,
                POSITIVE,
                MAX_LEASE_OWNER_LOOKUP_INTERVAL,
            ),
            (
                "shutdownGrace",
                s.shutdown_grace,
                Duration::ZERO,
                MAX_SHUTDOWN_GRACE,
            ),
        ] {
            if let Err(problem) = within(value, min, max) {
                return fail(key, problem);
            }
        }
        if s.lease_duration.subsec_nanos() != 0 {
            return fail(
                "leaseDuration",
                format!(
                    "must be whole seconds (spec.leaseDurationSeconds), got {}",
                    format_duration(s.lease_duration)
                ),
            );
        }
        if s.lease_duration <= s.lease_renew_interval {
            return fail(
                "leaseDuration",
                format!(
                    "must be longer than the lease renew interval ({}, from {}), got {}",
                    format_duration(s.lease_renew_interval),
                    at.of("leaseRenewInterval"),
                    format_duration(s.lease_duration)
                ),
            );
        }
        if s.csr_backoff_max < s.csr_backoff_min {
            return fail(
                "csrBackoffMax",
                format!(
                    "must be at least the CSR backoff minimum ({}, from {}), got {}",
                    format_duration(s.csr_backoff_min),
                    at.of("csrBackoffMin"),
                    format_duration(s.csr_backoff_max)
                ),
            );
        }
        if s.keep_certificates == 0 {
            return fail("keepCertificates", "must be at least 1".into());
        }
        Ok(())
    }
}

/// The floor of a duration that must not be zero.
const POSITIVE: Duration = Duration::from_nanos(1);

/// The floor of `leaseRenewInterval`.
#[cfg(not(feature = "test-hooks"))]
fn renew_floor(_: &Flags) -> Duration {
    MIN_LEASE_RENEW_INTERVAL
}

/// The floor of `leaseRenewInterval`; `--test-short-lease-interval` lowers it to just above
/// zero, so integration tests see many renewals quickly.
#[cfg(feature = "test-hooks")]
fn renew_floor(flags: &Flags) -> Duration {
    match flags.test.short_lease_interval {
        true => POSITIVE,
        false => MIN_LEASE_RENEW_INTERVAL,
    }
}

/// `value` in [`min`, `max`], or the problem in words.
fn within(value: Duration, min: Duration, max: Duration) -> Result<(), String> {
    if value < min {
        return Err(match min {
            POSITIVE => "must be greater than 0".into(),
            min => format!(
                "must be at least {}, got {}",
                format_duration(min),
                format_duration(value)
            ),
        });
    }
    if value > max {
        return Err(format!(
            "must be at most {}, got {}",
            format_duration(max),
            format_duration(value)
        ));
    }
    Ok(())
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

/// `--node-ip`: each entry an IPv4 or IPv6 address that can name the node (not
/// unspecified or multicast). Loopback is allowed: single-host clusters and tests use it.
fn parse_node_ips(entries: &[String]) -> Result<Vec<IpAddr>, String> {
    entries
        .iter()
        .map(|e| match e.trim() {
            "" => Err("an empty entry (give comma-separated IPv4/IPv6 addresses)".into()),
            e => e
                .parse()
                .map_err(|_| {
                    format!("invalid IP address {e:?} (give comma-separated IPv4/IPv6 addresses)")
                })
                .and_then(node_address),
        })
        .collect()
}

/// `--tls-san`: each entry an IP (as for `--node-ip`, kept in canonical form) or a DNS name
/// (kept lower-cased).
fn parse_tls_sans(entries: &[String]) -> Result<Vec<String>, String> {
    entries
        .iter()
        .map(|e| match e.trim() {
            "" => Err("an empty name (give comma-separated DNS names or IPs)".into()),
            e => match e.parse::<IpAddr>() {
                Ok(ip) => node_address(ip).map(|ip| ip.to_string()),
                // A valid DNS name, but surely a mistyped IP (such as 192.0.2.001).
                Err(_) if e.split('.').all(|l| l.bytes().all(|b| b.is_ascii_digit())) => {
                    Err(format!("invalid IP address {e:?}"))
                }
                Err(_) if is_dns1123_subdomain(&e.to_ascii_lowercase()) => {
                    Ok(e.to_ascii_lowercase())
                }
                Err(_) => Err(format!(
                    "{e:?} is neither an IP address nor a DNS name (letters, digits, '-' and '.', at most 253)"
                )),
            },
        })
        .collect()
}

/// `ip` if a serving certificate can name the node by it.
fn node_address(ip: IpAddr) -> Result<IpAddr, String> {
    if ip.is_unspecified() {
        return Err(format!("{ip} is the unspecified address, not the node's"));
    }
    if ip.is_multicast() {
        return Err(format!("{ip} is a multicast address, not the node's"));
    }
    Ok(ip)
}

/// A health probe is a plain `http://` URL (the kubelet's:
/// `http://127.0.0.1:10248/healthz`). `https://` is refused here rather than accepted and failing forever: the probe has no
/// trust root to verify a local endpoint's certificate with (not the cluster CA, which does
/// not sign the kubelet's healthz, and never none at all), so it could never answer 2xx.
fn check_probe_url(s: &str) -> Result<(), String> {
    match reqwest::Url::parse(s) {
        Ok(u) if u.scheme() == "http" && u.host().is_some() => Ok(()),
        Ok(u) if u.scheme() == "https" && u.host().is_some() => Err(format!(
            "{s:?}: https is not supported (the probe has no trust root for a local \
             endpoint's certificate, so it could never succeed); use the plain http health \
             URL, e.g. http://127.0.0.1:10248/healthz"
        )),
        _ => Err(format!("invalid URL {s:?} (use http://HOST:PORT/PATH)")),
    }
}

/// Where each key's value came from: the flag, the file, or the default.
pub(super) struct Layers<'a> {
    file: Option<&'a Path>,
    pub(super) origins: BTreeMap<&'static str, Origin>,
}

// === impl Layers ===

impl Layers<'_> {
    fn pick<T>(&mut self, key: &'static str, flag: Option<T>, file: Option<T>, default: T) -> T {
        let (value, origin) = match (flag, file) {
            (Some(v), _) => (v, Origin::Flag { key }),
            (None, Some(v)) => (v, self.file_origin(key)),
            (None, None) => (default, Origin::Default { key }),
        };
        self.origins.insert(key, origin);
        value
    }

    fn duration(
        &mut self,
        key: &'static str,
        flag: Option<Duration>,
        file: Option<&str>,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        let file = file
            .map(parse_duration)
            .transpose()
            .map_err(|e| ConfigError::Invalid {
                origin: self.file_origin(key),
                problem: e.to_string(),
            })?;
        Ok(self.pick(key, flag, file, default))
    }

    /// Makes a picked path absolute: a relative path from the file is anchored at the
    /// file's folder, any other at the working directory.
    fn absolute(&self, key: &'static str, path: PathBuf) -> Result<PathBuf, ConfigError> {
        let anchored = match (self.of(key), self.file) {
            (Origin::File { .. }, Some(cfg)) if path.is_relative() => {
                cfg.parent().unwrap_or(Path::new("")).join(&path)
            }
            _ => path,
        };
        std::path::absolute(&anchored).map_err(|_| self.bad(key, "must not be empty".into()))
    }

    fn file_origin(&self, key: &'static str) -> Origin {
        match self.file {
            Some(path) => Origin::File {
                path: path.to_owned(),
                key,
            },
            None => Origin::Default { key },
        }
    }

    fn of(&self, key: &'static str) -> Origin {
        self.origins
            .get(key)
            .cloned()
            .unwrap_or(Origin::Default { key })
    }

    fn bad(&self, key: &'static str, problem: String) -> ConfigError {
        ConfigError::Invalid {
            origin: self.of(key),
            problem,
        }
    }
}
