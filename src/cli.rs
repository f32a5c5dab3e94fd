//! The command line: `bootlet [run] [flags]`, `bootlet doctor [flags] [--output text|json]`,
//! `bootlet version`. Only parses; defaults, the config file and validation live in config.rs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{builder::BoolishValueParser, ArgAction, Args, Parser, Subcommand, ValueEnum};

pub mod approve;
pub mod docs;
#[cfg(feature = "test-hooks")]
pub mod hooks;

use crate::defaults;
use crate::runtime::duration::{format_duration, parse_duration};
use crate::runtime::telemetry::LogFormat;

/// What to do, with the flags given for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The daemon (also `bootlet` with no subcommand).
    Run(Flags),
    /// Walk the join chain and name the root cause.
    Doctor { flags: Flags, output: OutputFormat },
    /// Exit 0 when the node's identity (kubeconfig and a valid client certificate) is on
    /// disk; else say why and exit 1. The kubelet's `ExecStartPre=` (20-bootlet.conf).
    CheckIdentity(Flags),
    /// Write a bootstrap kubeconfig from kubelet.conf's cluster and a fresh token, then wait
    /// for the new identity.
    Rejoin {
        flags: Flags,
        token: String,
        ca_hashes: Vec<String>,
        timeout: Duration,
    },
    /// The kubelet-serving CSR approver (in the cluster, or on a control-plane host).
    Approve(approve::ApproveFlags),
    /// Print the version and the supported Kubernetes versions.
    Version,
    /// Packaging (hidden): write the man pages or the shell completions into a directory.
    Generate { what: docs::Generated, dir: PathBuf },
}

/// doctor's report format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One line per check, a remediation command under each failure.
    #[default]
    Text,
    /// One JSON object `{ok, rootCause, checks}`.
    Json,
}

/// The `--help` heading of the tuning knobs an operator rarely needs: real settings (each
/// has a config file key), listed apart so the everyday flags stand out.
const ADVANCED: &str = "Advanced settings";

/// Flags shared by `run` and `doctor`. Every field is `None` unless given (no clap
/// defaults): config.rs layers them over the config file and the `DEFAULT_*` consts.
/// `verbose` counts `-v`; 0 means "not given".
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct Flags {
    #[arg(long, value_name = "FILE", help = dflt(
        "YAML config file; every setting below has a key there (docs/configuration.md)", "none"))]
    pub config: Option<PathBuf>,

    #[arg(long, value_name = "FILE", help = dflt(
        "Bootstrap kubeconfig (token + CA + server), used when no valid client cert exists",
        defaults::DEFAULT_BOOTSTRAP_KUBECONFIG))]
    pub bootstrap_kubeconfig: Option<PathBuf>,

    #[arg(long, value_name = "FILE", help = dflt(
        "Kubeconfig written by bootlet, pointing at the current client certificate",
        defaults::DEFAULT_KUBECONFIG))]
    pub kubeconfig: Option<PathBuf>,

    #[arg(long, value_name = "DIR", help = dflt(
        "Directory holding the client key and certificates", defaults::DEFAULT_CERT_DIR))]
    pub cert_dir: Option<PathBuf>,

    #[arg(long, value_name = "NAME", help = dflt(
        "Node name (CN system:node:NAME, O system:nodes)", "the host name, lower-cased"))]
    pub node_name: Option<String>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Rotate the client certificate before it expires", defaults::DEFAULT_ROTATE_CERTIFICATES))]
    pub rotate_certificates: Option<bool>,

    #[arg(long, value_name = "F", help = dflt(
        "Rotate at this fraction of the certificate's lifetime", defaults::DEFAULT_ROTATION_FRACTION))]
    pub rotation_fraction: Option<f64>,

    #[arg(long, value_name = "F", help = dflt(
        "Rotation deadline spread: drawn uniformly in [F-j, F+j] of the lifetime",
        defaults::DEFAULT_ROTATION_JITTER))]
    pub rotation_jitter: Option<f64>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Keep the node Lease alive (false when the kubelet renews it itself)",
        defaults::DEFAULT_RENEW_LEASE))]
    pub renew_lease: Option<bool>,

    #[arg(long, value_name = "URL", help = dflt(
        "Renew the Lease only while this local URL answers 2xx (e.g. http://127.0.0.1:10248/healthz)",
        "none"))]
    pub lease_health_probe: Option<String>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "Lease renewal period", format_duration(defaults::DEFAULT_LEASE_RENEW_INTERVAL)))]
    pub lease_renew_interval: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "spec.leaseDurationSeconds written into the Lease",
        format_duration(defaults::DEFAULT_LEASE_DURATION)))]
    pub lease_duration: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help = dflt(
        "How long one wait for a CSR's approval lasts; then the same CSR is adopted again",
        format_duration(defaults::DEFAULT_CSR_TIMEOUT)))]
    pub csr_timeout: Option<Duration>,

    #[arg(long, value_name = "ADDR", help = dflt(
        "Address for /metrics, /healthz, /readyz; `off` disables",
        defaults::DEFAULT_METRICS_BIND_ADDRESS))]
    pub metrics_bind_address: Option<String>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Also obtain and rotate the kubelet's serving certificate (signer kubernetes.io/kubelet-serving); file key serverTLSBootstrap",
        defaults::DEFAULT_ROTATE_SERVER_CERTIFICATES))]
    pub rotate_server_certificates: Option<bool>,

    #[arg(long, value_name = "IPS", value_delimiter = ',', help = dflt(
        "Comma-separated IPv4/IPv6 addresses put in the serving certificate's SANs until the Node reports its own",
        "the addresses of the default-route interface"))]
    pub node_ip: Option<Vec<String>>,

    #[arg(long, value_name = "NAMES", value_delimiter = ',', help = dflt(
        "Comma-separated extra DNS names or IPs for the serving certificate", "none"))]
    pub tls_san: Option<Vec<String>>,

    #[arg(long, value_name = "N", help = dflt(
        "Timestamped certificate files kept in the cert dir; older ones are pruned",
        defaults::DEFAULT_KEEP_CERTIFICATES))]
    pub keep_certificates: Option<usize>,

    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
        action = ArgAction::Set, value_parser = BoolishValueParser::new(), help = dflt(
        "Accept insecure-skip-tls-verify in the bootstrap kubeconfig",
        defaults::DEFAULT_ALLOW_INSECURE_KUBECONFIG))]
    pub allow_insecure_kubeconfig: Option<bool>,

    #[arg(long, value_name = "FORMAT", value_enum, help = dflt(
        "Log line format on stderr", "text"))]
    pub log_format: Option<LogFormat>,

    /// More log detail: -v debug, -vv trace, -vvv trace for dependencies too (RUST_LOG overrides) [default: info]
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "First wait after a denied or failed CSR", format_duration(defaults::DEFAULT_CSR_BACKOFF_MIN)))]
    pub csr_backoff_min: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "Longest wait between CSRs", format_duration(defaults::DEFAULT_CSR_BACKOFF_MAX)))]
    pub csr_backoff_max: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "Warn when an approved CSR has no certificate after this long",
        format_duration(defaults::DEFAULT_CSR_NOT_ISSUED_WARNING)))]
    pub csr_not_issued_warning: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "Kill a bootstrap kubeconfig's exec credential plugin after this long",
        format_duration(defaults::DEFAULT_EXEC_PLUGIN_TIMEOUT)))]
    pub exec_plugin_timeout: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "How often to look for the Node to own the Lease",
        format_duration(defaults::DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL)))]
    pub lease_owner_lookup_interval: Option<Duration>,

    #[arg(long, value_name = "DUR", value_parser = parse_duration, help_heading = ADVANCED, help = dflt(
        "Grace period for in-flight work after SIGTERM",
        format_duration(defaults::DEFAULT_SHUTDOWN_GRACE)))]
    pub shutdown_grace: Option<Duration>,

    /// The hidden `--test-*` flags; only in a build with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[command(flatten)]
    pub test: hooks::TestFlags,
}

/// Parses `args` (including the program name). `Err` carries clap's message, and for
/// `--help`/`--version` the text to print: use `Error::exit()` or `Error::print()`.
pub fn parse_from<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    Ok(match cli.command {
        None => Command::Run(cli.flags),
        Some(Sub::Run(flags)) => Command::Run(flags),
        Some(Sub::Doctor { flags, output }) => Command::Doctor {
            flags,
            output: output.unwrap_or_default(),
        },
        Some(Sub::CheckIdentity(flags)) => Command::CheckIdentity(flags),
        Some(Sub::Rejoin {
            flags,
            token,
            discovery_token_ca_cert_hash,
            timeout,
        }) => Command::Rejoin {
            flags,
            token,
            ca_hashes: discovery_token_ca_cert_hash,
            timeout: timeout.unwrap_or(defaults::DEFAULT_REJOIN_TIMEOUT),
        },
        Some(Sub::Approve(flags)) => Command::Approve(flags),
        Some(Sub::Version) => Command::Version,
        Some(Sub::Generate { what, dir }) => Command::Generate { what, dir },
    })
}

/// The clap command, for help snapshots and completion generation.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

pub(crate) fn dflt(help: &str, default: impl std::fmt::Display) -> String {
    format!("{help} [default: {default}]")
}

#[derive(Debug, Parser)]
#[command(
    name = "bootlet",
    version = crate::version::LONG,
    about = "Node identity agent: TLS bootstrap, client-certificate rotation and node Lease heartbeat",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    flags: Flags,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Run the daemon (the default)
    Run(Flags),
    /// Walk the join chain in order, name the root cause of a failed join and the command that fixes it
    Doctor {
        #[command(flatten)]
        flags: Flags,
        /// Report format [default: text]
        #[arg(long, value_enum, value_name = "FORMAT")]
        output: Option<OutputFormat>,
    },
    /// Exit 0 if the node's identity is on disk, else say what is missing (the kubelet's ExecStartPre)
    ///
    /// The identity is the kubeconfig and a client certificate valid now for this node; the
    /// check reads files only. Without it: one line saying what is missing and what bootlet
    /// waits for (bootlet.service's STATUS=), and exit 1, so the kubelet never starts
    /// without an identity and its Restart=always tries again.
    CheckIdentity(Flags),
    /// Bring back a node whose certificate expired after kubeadm deleted its bootstrap kubeconfig
    ///
    /// Writes the bootstrap kubeconfig (--bootstrap-kubeconfig) from the cluster in
    /// --kubeconfig (server and CA, checked against --discovery-token-ca-cert-hash when
    /// given) and a fresh bootstrap token (`kubeadm token create` on a control-plane host),
    /// restarts bootlet.service when systemd runs it, and waits until the new client
    /// certificate is on disk. Nothing is written while the current identity is valid.
    Rejoin {
        #[command(flatten)]
        flags: Flags,
        /// The bootstrap token, ID.SECRET (`kubeadm token create`)
        #[arg(long, value_name = "ID.SECRET")]
        token: String,
        /// The cluster CA's pin, sha256:HEX, as `kubeadm token create --print-join-command` prints it; repeatable [default: trust the CA already in --kubeconfig]
        #[arg(long, value_name = "sha256:HEX")]
        discovery_token_ca_cert_hash: Vec<String>,
        /// How long to wait for the new certificate [default: 5m]
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// Approve the kubelet's serving-certificate CSRs whose SANs match its Node; deny the rest
    ///
    /// Watches kubernetes.io/kubelet-serving CertificateSigningRequests and approves one only
    /// when a node requests it for itself (system:node:NAME in system:nodes, the same CN and
    /// O system:nodes), with the serving usages, and every IP and DNS SAN is an address of
    /// Node NAME (or its name, or matches --allowed-dns-pattern) and none another Node's.
    /// Anything else is denied with the rule it broke as the reason (or left Pending with
    /// --on-mismatch ignore). Runs as a Deployment with leader election (config/approver/)
    /// or under systemd on a control-plane host (docs/approver.md).
    Approve(approve::ApproveFlags),
    /// Print the version, and the Kubernetes versions this build supports and was tested against
    Version,
    /// Write the man pages (`man`) or the bash, zsh and fish completions (`completions`) into
    /// DIR, generated from this definition (packaging/deb.sh, packaging/rpm.sh)
    #[command(hide = true)]
    Generate {
        #[arg(value_enum)]
        what: docs::Generated,
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[cfg(test)]
mod tests;
