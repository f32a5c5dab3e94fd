//! The test switches the daemon starts with, compiled only with the `test-hooks` feature:
//! from the hidden `--test-*` flags (never from the config file), kept out of `Settings`
//! so nothing a node is configured with can reach them.

use std::path::PathBuf;

use crate::cli::hooks::TestFlags;
use crate::lease;
use crate::pki::files::{crash, CrashPlan};
use crate::runtime::clock;

/// What `--test-*` asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestHooks {
    /// The Lease loop's: wedging, its first wire format, HTTP/1.1 only.
    pub lease: lease::Hooks,
    /// `--test-crash-at`: SIGKILL before the Nth file operation (`pki::files::crash`).
    pub crash_at: Option<CrashPlan>,
    /// `--test-clock-offset-file`: the wall clock shifted by the seconds in this file.
    pub clock_offset_file: Option<PathBuf>,
}

impl From<&TestFlags> for TestHooks {
    fn from(flags: &TestFlags) -> Self {
        Self {
            lease: lease::Hooks {
                wedge_after: flags.wedge_lease_after,
                wire: flags.lease_content_type.unwrap_or_default(),
                http1_only: flags.lease_http1,
            },
            crash_at: flags.crash_at,
            clock_offset_file: flags.clock_offset_file.clone(),
        }
    }
}

// === impl TestHooks ===

impl TestHooks {
    /// Arms the switches that belong to the whole process (the crash plan counts every
    /// file operation of it; the clock offset shifts every reading of the one wall clock)
    /// and returns the Lease loop's, which the agent passes to each loop it starts.
    pub(super) fn install(self) -> lease::Hooks {
        if let Some(plan) = self.crash_at {
            crash::arm(plan);
        }
        if let Some(file) = self.clock_offset_file {
            clock::offset_by_file(file);
        }
        self.lease
    }
}
