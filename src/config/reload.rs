//! Every setting with its file key and what a reload (SIGHUP) does with it, each listed
//! once. The agent's reload reads this table (what to apply live, when to restart the Lease
//! loop, what to keep as it runs until a restart); a test checks that every `Settings`
//! field is in it, so a new setting cannot be added without deciding its reload policy.

use super::Settings;

/// What a reload does with a changed setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Applied at once (the log level, the stop grace period).
    Live,
    /// Applied by restarting the Lease loop with the new values.
    LeaseLoop,
    /// Only a process restart applies it; the running value is kept and the change logged.
    Restart,
}

macro_rules! reload_table {
    ($($field:ident => $key:literal : $policy:ident,)*) => {
        /// `(Settings field, file key, policy)` for every setting.
        pub const TABLE: &[(&str, &str, Reload)] = &[$((stringify!($field), $key, Reload::$policy),)*];

        /// The settings that differ between `old` and `new`, as (file key, policy).
        pub fn changed(old: &Settings, new: &Settings) -> Vec<(&'static str, Reload)> {
            let mut out = Vec::new();
            $(if old.$field != new.$field {
                out.push(($key, Reload::$policy));
            })*
            out
        }

        /// Puts the running value of every restart-only setting back into `live`.
        #[allow(clippy::clone_on_copy)]
        pub fn keep_restart_only(live: &mut Settings, running: &Settings) {
            $(if Reload::$policy == Reload::Restart {
                live.$field = running.$field.clone();
            })*
        }
    };
}

reload_table! {
    verbosity => "verbosity": Live,
    shutdown_grace => "shutdownGrace": Live,
    renew_lease => "renewLease": LeaseLoop,
    lease_renew_interval => "leaseRenewInterval": LeaseLoop,
    lease_duration => "leaseDuration": LeaseLoop,
    lease_health_probe => "leaseHealthProbe": LeaseLoop,
    lease_owner_lookup_interval => "leaseOwnerLookupInterval": LeaseLoop,
    bootstrap_kubeconfig => "bootstrapKubeconfig": Restart,
    kubeconfig => "kubeconfig": Restart,
    cert_dir => "certDir": Restart,
    node_name => "nodeName": Restart,
    rotate_certificates => "rotateCertificates": Restart,
    rotation_fraction => "rotationFraction": Restart,
    rotation_jitter => "rotationJitter": Restart,
    csr_timeout => "csrTimeout": Restart,
    metrics_bind_address => "metricsBindAddress": Restart,
    rotate_server_certificates => "serverTLSBootstrap": Restart,
    node_ips => "nodeIP": Restart,
    tls_sans => "tlsSAN": Restart,
    keep_certificates => "keepCertificates": Restart,
    allow_insecure_kubeconfig => "allowInsecureKubeconfig": Restart,
    log_format => "logFormat": Restart,
    csr_backoff_min => "csrBackoffMin": Restart,
    csr_backoff_max => "csrBackoffMax": Restart,
    csr_not_issued_warning => "csrNotIssuedWarning": Restart,
    exec_plugin_timeout => "execPluginTimeout": Restart,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FileConfig;

    #[test]
    fn every_setting_has_a_reload_policy_and_a_file_key() {
        let settings = crate::config::tests::settings_for_tests();
        let fields = serde_json::to_value(&settings).unwrap();
        let fields: Vec<&String> = fields.as_object().unwrap().keys().collect();
        let listed: Vec<&str> = TABLE.iter().map(|(f, _, _)| *f).collect();
        for field in &fields {
            assert!(
                listed.contains(&field.as_str()),
                "Settings::{field} has no reload policy"
            );
        }
        assert_eq!(fields.len(), TABLE.len(), "{listed:?}");
        // Every key is a real file key: a file setting only that key parses.
        for (_, key, _) in TABLE {
            let yaml = format!("{key}: ~\n");
            assert!(
                FileConfig::parse(std::path::Path::new("/k.yaml"), &yaml).is_ok(),
                "{key} is not a file key"
            );
        }
    }

    #[test]
    fn changes_are_reported_by_key_and_restart_only_ones_kept() {
        let old = crate::config::tests::settings_for_tests();
        let mut new = old.clone();
        new.verbosity = 2;
        new.lease_renew_interval *= 2;
        new.csr_timeout *= 2;
        assert_eq!(
            changed(&old, &new),
            [
                ("verbosity", Reload::Live),
                ("leaseRenewInterval", Reload::LeaseLoop),
                ("csrTimeout", Reload::Restart)
            ]
        );
        keep_restart_only(&mut new, &old);
        assert_eq!(new.csr_timeout, old.csr_timeout, "kept as it runs");
        assert_eq!(new.verbosity, 2, "live changes stay");
    }
}
