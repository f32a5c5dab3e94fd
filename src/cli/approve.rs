//! `bootlet approve`'s flags: the kubelet-serving approver run in the cluster (a Deployment)
//! or on a control-plane host. All `Option`, no clap defaults: the defaults are the
//! `DEFAULT_APPROVE_*` consts in defaults.rs, applied by `approve::Settings`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{builder::BoolishValueParser, ArgAction, Args, ValueEnum};

use super::dflt;
use crate::defaults;
use crate::runtime::duration::{format_duration, parse_duration};
use crate::runtime::telemetry::LogFormat;

/// What to do with a kubelet-serving CSR that fails a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnMismatch {
    /// Deny it: a Denied condition whose reason names the rule.
    Deny,
    /// Leave it Pending for a human; log and count it.
    Ignore,
}

/// `bootlet approve` flags.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ApproveFlags {
    #[arg(long, value_name = "FILE", help = dflt(
        "Kubeconfig of the approver's identity (out of the cluster)",
        "the in-cluster service account"))]
    pub kubeconfig: Option<PathBuf>,

    #[arg(long, value_name = "ACTION", value_enum, help = dflt(
        "What to do with a kubelet-serving CSR that fails a rule: deny it, or leave it Pending",
        "deny"))]
    pub on_mismatch: Option<OnMismatch>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Accept a DNS SAN equal to the node name even when the Node does not report it",
        defaults::DEFAULT_APPROVE_ALLOW_NODE_NAME_DNS))]
    pub allow_node_name_dns: Option<bool>,

    #[arg(long, value_name = "REGEX", help = dflt(
        "Also accept DNS SANs matching this regular expression (anchored at both ends)",
        "none"))]
    pub allowed_dns_pattern: Option<String>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "Longest spec.expirationSeconds accepted",
        format_duration(defaults::DEFAULT_APPROVE_MAX_EXPIRATION)))]
    pub max_expiration: Option<Duration>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Act only while holding the leader Lease (false: a single instance)",
        defaults::DEFAULT_APPROVE_LEADER_ELECT))]
    pub leader_elect: Option<bool>,

    #[arg(long, value_name = "NS", help = dflt(
        "Namespace of the leader Lease",
        "the service account's namespace, else bootlet-approver"))]
    pub leader_elect_namespace: Option<String>,

    #[arg(long, value_name = "NAME", help = dflt(
        "Name of the leader Lease", defaults::DEFAULT_APPROVE_LEASE_NAME))]
    pub leader_elect_name: Option<String>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "How long a leader's Lease stays valid without renewal: the takeover time",
        format_duration(defaults::DEFAULT_APPROVE_LEASE_DURATION)))]
    pub leader_elect_lease_duration: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "The leader stops acting when it could not renew for this long (below the lease duration)",
        format_duration(defaults::DEFAULT_APPROVE_RENEW_DEADLINE)))]
    pub leader_elect_renew_deadline: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "How often the Lease is renewed or tried",
        format_duration(defaults::DEFAULT_APPROVE_RETRY_PERIOD)))]
    pub leader_elect_retry_period: Option<Duration>,

    #[arg(long, value_name = "ID", help = dflt(
        "This replica's holderIdentity", "the host (pod) name and a random suffix"))]
    pub identity: Option<String>,

    #[arg(long, value_name = "ADDR", help = dflt(
        "Address for the approver's /metrics, /healthz, /readyz; `off` disables",
        defaults::DEFAULT_APPROVE_METRICS_BIND_ADDRESS))]
    pub metrics_bind_address: Option<String>,

    #[arg(long, value_name = "FORMAT", value_enum, help = dflt(
        "Log line format on stderr", "text"))]
    pub log_format: Option<LogFormat>,

    /// More log detail: -v debug, -vv trace (RUST_LOG overrides) [default: info]
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
}
