//! Where the node's client identity stands, as the issuing pipeline reports it: each state
//! knows its STATUS= line. Pure data and formatting, so the health snapshot can hold it
//! without importing the identity layer.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::checkid::CheckId;
use crate::runtime::{health, text};

/// Longest piece of server text (a deny message, an error's cause) in a status line, in
/// characters: STATUS= shares a datagram with WATCHDOG=1, and a datagram has a size limit.
const MAX_REASON: usize = 512;

/// Where the identity bootstrap stands. Each state knows its STATUS= line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Nothing checked yet.
    Starting,
    /// No valid certificate, and the bootstrap kubeconfig is not there yet (cloud-init
    /// writes it after boot); only under systemd, where exiting would end in `failed`.
    AwaitingBootstrapKubeconfig { path: PathBuf },
    /// Creating (or adopting) the CSR.
    Filing { csr: String },
    /// The CSR is filed and not yet approved.
    WaitingApproval { csr: String, since: SystemTime },
    /// Approved for a while with no certificate: no signer?
    ApprovedNotIssued { csr: String, since: SystemTime },
    /// The CSR waits (since `since`) and the API server has not answered the wait since
    /// `down_since` (`reason`, one line of the last error): an approval is not seen until
    /// it answers again.
    Unreachable {
        csr: String,
        since: SystemTime,
        down_since: SystemTime,
        reason: String,
    },
    /// The last attempt failed (at the doctor check `check`); the next starts at `until`.
    BackingOff {
        until: SystemTime,
        reason: String,
        check: CheckId,
    },
    /// A verified certificate is installed.
    Installed,
}

/// The tail of a back-off line: which doctor check failed, and where to look further.
pub fn doctor_hint(check: CheckId) -> String {
    format!("doctor check {check}: run 'bootlet doctor' for the full chain")
}

/// How long an approval may take before bootlet tells systemd it has started anyway: an
/// approver (kube-controller-manager's csrapproving) answers within a second, so the kubelet
/// started after bootlet then finds its identity on disk; a person takes longer than a boot
/// may wait.
pub const APPROVAL_GRACE: Duration = Duration::from_secs(5);

// === impl State ===

impl State {
    /// Whether issuing the identity now waits on something bootlet does not control and
    /// that may come only after the boot finished: the bootstrap kubeconfig (cloud-init's
    /// `kubeadm join` writes it after `multi-user.target`), an approval (a person), an API
    /// server that does not answer, or the back-off after a refusal. Then READY=1 goes out
    /// without the identity, so the boot is never held hostage; the kubelet's own
    /// `ExecStartPre=bootlet check-identity` keeps it from starting on a missing identity.
    /// Starting and filing are bootlet's own bounded work: READY waits for them.
    pub fn waits_on_others(&self, now: SystemTime) -> bool {
        match self {
            State::AwaitingBootstrapKubeconfig { .. }
            | State::ApprovedNotIssued { .. }
            | State::Unreachable { .. }
            | State::BackingOff { .. } => true,
            State::WaitingApproval { since, .. } => {
                now.duration_since(*since).unwrap_or_default() >= APPROVAL_GRACE
            }
            State::Starting | State::Filing { .. } | State::Installed => false,
        }
    }

    pub fn status_line(&self, now: SystemTime) -> String {
        match self {
            State::Starting => "starting: looking for a valid client certificate".into(),
            State::AwaitingBootstrapKubeconfig { path } => format!(
                "no valid client certificate; waiting for the bootstrap kubeconfig {} to appear",
                path.display()
            ),
            State::Filing { csr } => format!("filing CSR {csr}"),
            State::WaitingApproval { csr, since } => format!(
                "waiting for approval of CSR {csr} for {} — approve with: kubectl certificate approve {csr}",
                health::ago(now, *since)
            ),
            State::ApprovedNotIssued { csr, since } => format!(
                "CSR {csr} approved but not issued for {}: is a signer running?",
                health::ago(now, *since)
            ),
            State::Unreachable {
                csr,
                since,
                down_since,
                reason,
            } => format!(
                "waiting for approval of CSR {csr} for {} — API server unreachable for {} ({}): an approval is seen once it answers; approve with: kubectl certificate approve {csr}",
                health::ago(now, *since),
                health::ago(now, *down_since),
                text::clip(reason, MAX_REASON)
            ),
            State::BackingOff {
                until,
                reason,
                check,
            } => format!(
                "retrying in {}: {} ({})",
                health::human(until.duration_since(now).unwrap_or_default()),
                text::clip(reason, MAX_REASON),
                doctor_hint(*check)
            ),
            State::Installed => "client certificate installed".into(),
        }
    }
}
