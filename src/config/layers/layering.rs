//! Picking one key's value from flag, file or default, and remembering where it came
//! from ([`Layers`]); [`Layering`] does it key group by key group for `Settings::layer`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{parse_metrics_address, parse_node_ips, parse_tls_sans};
use crate::config::*;
use crate::runtime::telemetry::LogFormat;

/// Picks flag, else file, else default for one key of a [`Layering`], and records where the
/// value came from.
macro_rules! take {
    ($l:ident, $key:literal, $field:ident, $default:expr) => {
        $l.at.pick(
            $key,
            $l.flags.$field.clone(),
            $l.file.$field.clone(),
            $default,
        )
    };
}

/// [`take!`] for a duration, whose file value is Go-style text parsed here.
macro_rules! duration {
    ($l:ident, $key:literal, $field:ident, $default:expr) => {
        $l.at
            .duration($key, $l.flags.$field, $l.file.$field.as_deref(), $default)?
    };
}

/// [`take!`] for a path, made absolute.
macro_rules! path {
    ($l:ident, $key:literal, $field:ident, $default:expr) => {{
        let p = take!($l, $key, $field, PathBuf::from($default));
        $l.at.absolute($key, p)?
    }};
}

/// One layering under way: the three sources and the [`Layers`] picked so far. One method
/// per key or group of keys, so [`Settings::layer`] reads as the list of them.
pub(super) struct Layering<'a, 'x> {
    at: Layers<'a>,
    flags: &'x Flags,
    /// The file's values, or none set.
    file: FileConfig,
    kubelet: &'x KubeletView,
}

// === impl Layering ===

impl<'a, 'x> Layering<'a, 'x> {
    /// Starts layering `file` (its path, for errors and relative paths) under `flags`,
    /// with the kubelet's say for the keys shared with it.
    pub(super) fn new(
        file: Option<(&'a Path, &FileConfig)>,
        flags: &'x Flags,
        kubelet: &'x KubeletView,
    ) -> Self {
        Layering {
            at: Layers {
                file: file.map(|(p, _)| p),
                origins: BTreeMap::new(),
            },
            flags,
            file: file.map(|(_, f)| f.clone()).unwrap_or_default(),
            kubelet,
        }
    }

    /// Where each picked key's value came from, once layering is done.
    pub(super) fn into_layers(self) -> Layers<'a> {
        self.at
    }

    /// `nodeName`: typed (lower-cased), else the kubelet's `--hostname-override`, else the
    /// host name. Checked here, where what the operator typed is at hand: the error quotes
    /// it, not the lower-cased value the check saw.
    pub(super) fn node_name(&mut self) -> Result<String, ConfigError> {
        let l = self;
        let typed = take!(l, "nodeName", node_name, String::new());
        // Where a name nobody typed into bootlet's config came from, for the error.
        let (node_name, found_in) = match l.at.of("nodeName") {
            Origin::Default { .. } => match &l.kubelet.node_name {
                Some(name) => (name.clone(), Some("the kubelet's --hostname-override ")),
                None => (
                    hostname().map_err(|source| ConfigError::Hostname { source })?,
                    Some("host name "),
                ),
            },
            _ => (typed.to_lowercase(), None),
        };
        if !is_dns1123_subdomain(&node_name) {
            return Err(l.at.bad("nodeName", format!(
                "{}{:?} is not a valid node name (lower-case letters, digits, '-' and '.', at most 253){}",
                found_in.unwrap_or(""),
                if found_in.is_some() { &node_name } else { &typed },
                if found_in.is_some() { "; pass --node-name" } else { "" })));
        }
        Ok(node_name)
    }

    /// `bootstrapKubeconfig`, `kubeconfig` and `certDir`, absolute.
    pub(super) fn paths(&mut self) -> Result<[PathBuf; 3], ConfigError> {
        let l = self;
        Ok([
            path!(
                l,
                "bootstrapKubeconfig",
                bootstrap_kubeconfig,
                DEFAULT_BOOTSTRAP_KUBECONFIG
            ),
            path!(l, "kubeconfig", kubeconfig, DEFAULT_KUBECONFIG),
            path!(l, "certDir", cert_dir, DEFAULT_CERT_DIR),
        ])
    }

    /// `leaseRenewInterval`, `leaseDuration` and `csrTimeout`.
    pub(super) fn lease_timings(&mut self) -> Result<[Duration; 3], ConfigError> {
        let l = self;
        Ok([
            duration!(
                l,
                "leaseRenewInterval",
                lease_renew_interval,
                DEFAULT_LEASE_RENEW_INTERVAL
            ),
            duration!(l, "leaseDuration", lease_duration, DEFAULT_LEASE_DURATION),
            duration!(l, "csrTimeout", csr_timeout, DEFAULT_CSR_TIMEOUT),
        ])
    }

    /// `metricsBindAddress`: an address, or `off` for none.
    pub(super) fn metrics_bind_address(&mut self) -> Result<Option<SocketAddr>, ConfigError> {
        let l = self;
        let metrics = take!(
            l,
            "metricsBindAddress",
            metrics_bind_address,
            DEFAULT_METRICS_BIND_ADDRESS.into()
        );
        parse_metrics_address(&metrics).map_err(|problem| l.at.bad("metricsBindAddress", problem))
    }

    /// `nodeIP` and `tlsSAN`, the names a serving certificate asks for.
    pub(super) fn serving_names(&mut self) -> Result<(Vec<IpAddr>, Vec<String>), ConfigError> {
        let l = self;
        let node_ips = parse_node_ips(&take!(l, "nodeIP", node_ip, Vec::new()))
            .map_err(|problem| l.at.bad("nodeIP", problem))?;
        let tls_sans = parse_tls_sans(&take!(l, "tlsSAN", tls_san, Vec::new()))
            .map_err(|problem| l.at.bad("tlsSAN", problem))?;
        Ok((node_ips, tls_sans))
    }

    /// `csrBackoffMin`, `csrBackoffMax`, `csrNotIssuedWarning` and `execPluginTimeout`.
    pub(super) fn csr_timings(&mut self) -> Result<[Duration; 4], ConfigError> {
        let l = self;
        Ok([
            duration!(l, "csrBackoffMin", csr_backoff_min, DEFAULT_CSR_BACKOFF_MIN),
            duration!(l, "csrBackoffMax", csr_backoff_max, DEFAULT_CSR_BACKOFF_MAX),
            duration!(
                l,
                "csrNotIssuedWarning",
                csr_not_issued_warning,
                DEFAULT_CSR_NOT_ISSUED_WARNING
            ),
            duration!(
                l,
                "execPluginTimeout",
                exec_plugin_timeout,
                DEFAULT_EXEC_PLUGIN_TIMEOUT
            ),
        ])
    }

    /// `leaseOwnerLookupInterval` and `shutdownGrace`.
    pub(super) fn lookup_and_grace(&mut self) -> Result<[Duration; 2], ConfigError> {
        let l = self;
        Ok([
            duration!(
                l,
                "leaseOwnerLookupInterval",
                lease_owner_lookup_interval,
                DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL
            ),
            duration!(l, "shutdownGrace", shutdown_grace, DEFAULT_SHUTDOWN_GRACE),
        ])
    }

    /// `keepCertificates` and `allowInsecureKubeconfig`: how the files are kept and trusted.
    pub(super) fn cert_files(&mut self) -> (usize, bool) {
        let l = self;
        let keep = take!(
            l,
            "keepCertificates",
            keep_certificates,
            DEFAULT_KEEP_CERTIFICATES
        );
        let insecure = take!(
            l,
            "allowInsecureKubeconfig",
            allow_insecure_kubeconfig,
            DEFAULT_ALLOW_INSECURE_KUBECONFIG
        );
        (keep, insecure)
    }

    /// `rotateCertificates` (the kubelet's, where neither file nor flag sets it),
    /// `rotationFraction` and `rotationJitter`.
    pub(super) fn rotation(&mut self) -> (bool, f64, f64) {
        let l = self;
        let kubelet = l.kubelet.rotate_certificates;
        (
            take!(
                l,
                "rotateCertificates",
                rotate_certificates,
                kubelet.unwrap_or(DEFAULT_ROTATE_CERTIFICATES)
            ),
            take!(
                l,
                "rotationFraction",
                rotation_fraction,
                DEFAULT_ROTATION_FRACTION
            ),
            take!(
                l,
                "rotationJitter",
                rotation_jitter,
                DEFAULT_ROTATION_JITTER
            ),
        )
    }

    /// `renewLease` and `leaseHealthProbe` (none by default).
    pub(super) fn lease_switches(&mut self) -> (bool, Option<String>) {
        let l = self;
        let renew = take!(l, "renewLease", renew_lease, DEFAULT_RENEW_LEASE);
        let probe = l.at.pick(
            "leaseHealthProbe",
            l.flags.lease_health_probe.clone().map(Some),
            l.file.lease_health_probe.clone().map(Some),
            None,
        );
        (renew, probe)
    }

    /// `serverTLSBootstrap`: the kubelet's, where neither file nor flag sets it.
    pub(super) fn rotate_server_certificates(&mut self) -> bool {
        let l = self;
        let kubelet = l.kubelet.server_tls_bootstrap;
        take!(
            l,
            "serverTLSBootstrap",
            rotate_server_certificates,
            kubelet.unwrap_or(DEFAULT_ROTATE_SERVER_CERTIFICATES)
        )
    }

    /// `logFormat` and `verbosity`: `-v` is a count, and 0 means "not given", so the
    /// file's level applies.
    pub(super) fn logging(&mut self) -> (LogFormat, u8) {
        let l = self;
        let format = take!(l, "logFormat", log_format, DEFAULT_LOG_FORMAT);
        let verbosity = l.at.pick(
            "verbosity",
            (l.flags.verbose > 0).then_some(l.flags.verbose),
            l.file.verbosity,
            DEFAULT_VERBOSITY,
        );
        (format, verbosity)
    }
}

/// Where each key's value came from: the flag, the file, or the default.
pub(in crate::config) struct Layers<'a> {
    file: Option<&'a Path>,
    pub(in crate::config) origins: BTreeMap<&'static str, Origin>,
}

// === impl Layers ===

impl Layers<'_> {
    pub(super) fn pick<T>(
        &mut self,
        key: &'static str,
        flag: Option<T>,
        file: Option<T>,
        default: T,
    ) -> T {
        let (value, origin) = match (flag, file) {
            (Some(v), _) => (v, Origin::Flag { key }),
            (None, Some(v)) => (v, self.file_origin(key)),
            (None, None) => (default, Origin::Default { key }),
        };
        self.origins.insert(key, origin);
        value
    }

    pub(super) fn duration(
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
    pub(super) fn absolute(
        &self,
        key: &'static str,
        path: PathBuf,
    ) -> Result<PathBuf, ConfigError> {
        let anchored = match (self.of(key), self.file) {
            (Origin::File { .. }, Some(cfg)) if path.is_relative() => {
                cfg.parent().unwrap_or(Path::new("")).join(&path)
            }
            _ => path,
        };
        std::path::absolute(&anchored).map_err(|_| self.bad(key, "must not be empty".into()))
    }

    pub(super) fn file_origin(&self, key: &'static str) -> Origin {
        match self.file {
            Some(path) => Origin::File {
                path: path.to_owned(),
                key,
            },
            None => Origin::Default { key },
        }
    }

    pub(super) fn of(&self, key: &'static str) -> Origin {
        self.origins
            .get(key)
            .cloned()
            .unwrap_or(Origin::Default { key })
    }

    pub(super) fn bad(&self, key: &'static str, problem: String) -> ConfigError {
        ConfigError::Invalid {
            origin: self.of(key),
            problem,
        }
    }
}
