//! `bootlet check-identity`: whether the node's identity is on disk now, for the kubelet's
//! `ExecStartPre=` (systemd/kubelet.service.d/20-bootlet.conf). Files only, no request: it
//! runs on every kubelet start, at boot too, and must answer in milliseconds whatever the
//! network does.
//!
//! Why a check on the kubelet's side and not bootlet's READY: the kubelet is
//! `WantedBy=multi-user.target`, so anything its start job waits for holds the boot, and
//! on a node built from an image the identity comes only after the boot (cloud-init's
//! `kubeadm join` runs after `multi-user.target`) or from a person (a manual approval).
//! bootlet therefore ends its start job as soon as the identity waits on others
//! (`State::waits_on_others`), and the kubelet refuses to start, at once and saying why,
//! until the identity is there; its own `Restart=always` (`RestartSec=10` in the kubelet
//! package's unit) tries again, and `kubeadm join` waits for its `/healthz` meanwhile.

use std::path::PathBuf;

use crate::api::kubeconfig::{self, KubeconfigError};
use crate::config::Settings;
use crate::identity::bootstrap::{check_installed_offline, InstalledError};
use crate::pki::files::{CertDir, FilesError};
use crate::pki::CertInfo;

/// Why the kubelet must not start yet.
#[derive(Debug, thiserror::Error)]
pub enum NoIdentity {
    #[error("no kubeconfig: {0}")]
    Kubeconfig(#[source] KubeconfigError),
    #[error("no client certificate at {path}")]
    NoCertificate { path: PathBuf },
    #[error("the client certificate file cannot be read")]
    Unreadable(#[source] FilesError),
    #[error("the client certificate cannot be used")]
    Unusable(#[source] InstalledError),
}

/// The identity the kubelet would start with: `--kubeconfig` reads, and the certificate it
/// names (`CERT_DIR/kubelet-client-current.pem`) holds its key and is valid now for this
/// node. A certificate from another CA than the kubeconfig's passes too: bootlet installs
/// one only once the API server vouched for it.
pub fn check(settings: &Settings) -> Result<CertInfo, NoIdentity> {
    let access = kubeconfig::read(&settings.kubeconfig, settings.allow_insecure_kubeconfig)
        .map_err(NoIdentity::Kubeconfig)?;
    let dir = CertDir::peek(&settings.cert_dir);
    let (chain_pem, key_pem) = dir
        .read_current()
        .map_err(NoIdentity::Unreadable)?
        .ok_or_else(|| NoIdentity::NoCertificate {
            path: dir.current_path(),
        })?;
    let (installed, _anchor) =
        check_installed_offline(chain_pem, key_pem, &settings.node_name, &access.ca_pem)
            .map_err(NoIdentity::Unusable)?;
    Ok(installed.info)
}

/// The most of bootlet's status line repeated in the kubelet's journal.
const STATUS_MAX: usize = 1024;

/// bootlet.service's `STATUS=` line (what it waits for: the bootstrap kubeconfig, the CSR
/// to approve and the `kubectl certificate approve` line), as systemd holds it: the kubelet's
/// journal, which `kubeadm join` points at when the kubelet does not come up, then says it
/// too. One line, clipped; `None` without systemd, or when it does not answer in 2 s.
pub fn agent_status() -> Option<String> {
    let text = crate::runtime::systemctl::show("bootlet.service", "StatusText", true)?;
    let line = crate::runtime::text::one_line(text.trim()).into_owned();
    let line: String = line.chars().take(STATUS_MAX).collect();
    (!line.is_empty()).then_some(line)
}

#[cfg(test)]
mod tests;
