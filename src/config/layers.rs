//! The layering itself: consts <- file <- flags into [`Settings`], remembering where each
//! value came from so that validation errors name the flag or the file and key.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::*;

mod layering;

use layering::{Layering, Layers};

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
    /// The keys whose layering can fail are layered first, in this order, which decides the
    /// error reported when several are wrong.
    pub(super) fn layer<'a>(
        file: Option<(&'a Path, &FileConfig)>,
        flags: &Flags,
        kubelet: &KubeletView,
    ) -> Result<(Settings, Layers<'a>), ConfigError> {
        let mut l = Layering::new(file, flags, kubelet);
        let node_name = l.node_name()?;
        let [bootstrap_kubeconfig, kubeconfig, cert_dir] = l.paths()?;
        let [lease_renew_interval, lease_duration, csr_timeout] = l.lease_timings()?;
        let metrics_bind_address = l.metrics_bind_address()?;
        let (node_ips, tls_sans) = l.serving_names()?;
        let [csr_backoff_min, csr_backoff_max, csr_not_issued_warning, exec_plugin_timeout] =
            l.csr_timings()?;
        let [lease_owner_lookup_interval, shutdown_grace] = l.lookup_and_grace()?;
        let (rotate_certificates, rotation_fraction, rotation_jitter) = l.rotation();
        let (renew_lease, lease_health_probe) = l.lease_switches();
        let (keep_certificates, allow_insecure_kubeconfig) = l.cert_files();
        let (log_format, verbosity) = l.logging();
        let s = Settings {
            bootstrap_kubeconfig,
            kubeconfig,
            cert_dir,
            node_name,
            rotate_certificates,
            rotation_fraction,
            rotation_jitter,
            renew_lease,
            lease_health_probe,
            lease_renew_interval,
            lease_duration,
            csr_timeout,
            metrics_bind_address,
            rotate_server_certificates: l.rotate_server_certificates(),
            node_ips,
            tls_sans,
            keep_certificates,
            allow_insecure_kubeconfig,
            csr_backoff_min,
            csr_backoff_max,
            csr_not_issued_warning,
            exec_plugin_timeout,
            lease_owner_lookup_interval,
            shutdown_grace,
            log_format,
            verbosity,
        };
        Ok((s, l.into_layers()))
    }

    /// The cross-field and range checks, once, after layering. Every duration has a floor
    /// and a cap, so no sum, product or `Instant` made from one can overflow. The checks run
    /// in this order; the first to fail names its key.
    fn validate(&self, at: &Layers<'_>, renew_floor: Duration) -> Result<(), ConfigError> {
        self.check_rotation()
            .and_then(|()| self.check_probe())
            .and_then(|()| self.check_ranges(renew_floor))
            .and_then(|()| self.check_lease_timing(at))
            .and_then(|()| self.check_csr_backoff(at))
            .and_then(|()| self.check_keep())
            .map_err(|(key, problem)| at.bad(key, problem))
    }

    /// `rotationFraction` and `rotationJitter`, alone and as a window inside (0, 1).
    fn check_rotation(&self) -> Result<(), Problem> {
        let s = self;
        if !(s.rotation_fraction > 0.0 && s.rotation_fraction < 1.0) {
            return Err((
                "rotationFraction",
                format!("must be between 0 and 1, got {}", s.rotation_fraction),
            ));
        }
        if s.rotation_jitter.is_nan() || s.rotation_jitter < 0.0 {
            return Err((
                "rotationJitter",
                format!("must be 0 or more, got {}", s.rotation_jitter),
            ));
        }
        let (lo, hi) = (
            s.rotation_fraction - s.rotation_jitter,
            s.rotation_fraction + s.rotation_jitter,
        );
        if !(lo > 0.0 && hi < 1.0) {
            return Err((
                "rotationJitter",
                format!(
                    "rotation window [{lo}, {hi}] (fraction {} ± jitter {}) must lie inside (0, 1)",
                    s.rotation_fraction, s.rotation_jitter
                ),
            ));
        }
        Ok(())
    }

    /// `leaseHealthProbe`, when set, is a URL the probe can use.
    fn check_probe(&self) -> Result<(), Problem> {
        match self.lease_health_probe.as_deref().map(check_probe_url) {
            Some(Err(problem)) => Err(("leaseHealthProbe", problem)),
            _ => Ok(()),
        }
    }

    /// Every duration within its floor and cap, in the table's order.
    fn check_ranges(&self, renew_floor: Duration) -> Result<(), Problem> {
        let s = self;
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
            within(value, min, max).map_err(|problem| (key, problem))?;
        }
        Ok(())
    }

    /// `leaseDuration` is whole seconds (the Lease field is) and outlasts the renew interval.
    fn check_lease_timing(&self, at: &Layers<'_>) -> Result<(), Problem> {
        let s = self;
        if s.lease_duration.subsec_nanos() != 0 {
            return Err((
                "leaseDuration",
                format!(
                    "must be whole seconds (spec.leaseDurationSeconds), got {}",
                    format_duration(s.lease_duration)
                ),
            ));
        }
        if s.lease_duration <= s.lease_renew_interval {
            return Err((
                "leaseDuration",
                format!(
                    "must be longer than the lease renew interval ({}, from {}), got {}",
                    format_duration(s.lease_renew_interval),
                    at.of("leaseRenewInterval"),
                    format_duration(s.lease_duration)
                ),
            ));
        }
        Ok(())
    }

    /// `csrBackoffMax` is at least `csrBackoffMin`.
    fn check_csr_backoff(&self, at: &Layers<'_>) -> Result<(), Problem> {
        let s = self;
        if s.csr_backoff_max < s.csr_backoff_min {
            return Err((
                "csrBackoffMax",
                format!(
                    "must be at least the CSR backoff minimum ({}, from {}), got {}",
                    format_duration(s.csr_backoff_min),
                    at.of("csrBackoffMin"),
                    format_duration(s.csr_backoff_max)
                ),
            ));
        }
        Ok(())
    }

    /// `keepCertificates` keeps at least the current one.
    fn check_keep(&self) -> Result<(), Problem> {
        match self.keep_certificates {
            0 => Err(("keepCertificates", "must be at least 1".into())),
            _ => Ok(()),
        }
    }
}

/// A failed check: the key it names and the problem in words.
type Problem = (&'static str, String);

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
