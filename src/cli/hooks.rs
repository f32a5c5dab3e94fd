//! The hidden `--test-*` flags, compiled only with the `test-hooks` feature (tests/run.sh,
//! the benches): a shipped binary refuses them as unknown arguments. Flags only, never
//! config file keys; what they switch on is `agent::TestHooks`. Only parses.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::api::protobuf::LeaseWire;
use crate::pki::files::CrashPlan;
use crate::runtime::duration::parse_duration;

/// The test switches, flattened into `Flags` (`run` and `doctor`), all hidden from --help.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct TestFlags {
    /// The Lease loop stops making progress after DUR, so tests can prove that the systemd
    /// watchdog restarts a wedged agent.
    #[arg(long = "test-wedge-lease-after", value_name = "DUR", value_parser = parse_duration, hide = true)]
    pub wedge_lease_after: Option<Duration>,

    /// Lets `--lease-renew-interval` go below its 1 s floor, so integration tests see many
    /// renewals quickly.
    #[arg(long = "test-short-lease-interval", hide = true)]
    pub short_lease_interval: bool,

    /// SIGKILL the process right before its Nth file operation in the cert dir or on the
    /// kubeconfig (`trace`: print each one), so crash tests can stop it between any two
    /// steps of a write.
    #[arg(long = "test-crash-at", value_name = "N|trace", hide = true)]
    pub crash_at: Option<CrashPlan>,

    /// How the Lease goes on the wire from the start, `protobuf` (the default, as the
    /// kubelet sends it) or `json`, so tests and bench/proto.sh can compare the two.
    #[arg(
        long = "test-lease-content-type",
        value_name = "json|protobuf",
        hide = true
    )]
    pub lease_content_type: Option<LeaseWire>,

    /// The Lease connection offers only HTTP/1.1 by ALPN (HTTP/2 where the server offers
    /// it, otherwise), so the bench can compare the two against one server.
    #[arg(long = "test-lease-http1", hide = true)]
    pub lease_http1: bool,

    /// The certificate loops read the wall clock as the system clock plus the signed whole
    /// seconds written in FILE, re-read at every reading, so tests can step the clock
    /// forward and back without root.
    #[arg(long = "test-clock-offset-file", value_name = "FILE", hide = true)]
    pub clock_offset_file: Option<PathBuf>,
}
