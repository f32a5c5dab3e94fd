//! The self-signed placeholder serving certificate written before READY, so the kubelet
//! can start while the first serving CSR waits; never trusted, replaced once one is issued.

use std::net::IpAddr;
use std::time::Duration;

use crate::config::Settings;
use crate::identity::sans;
use crate::pki::files::CertDir;
use crate::pki::{CertProfile, NodeKey};
use crate::runtime::clock;
use crate::runtime::report;

/// How long the placeholder serving certificate is valid (the kubelet's own self-signed
/// one is valid a year too).
const PLACEHOLDER_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Before READY: when no serving certificate is installed, a self-signed one for the SANs
/// known now, so the kubelet (pointed at `kubelet-server-current.pem` by the drop-in) can
/// start while the first serving CSR waits for approval — it refuses to start without the
/// file. This is what the kubelet serves on its own without `serverTLSBootstrap`; bootlet
/// never trusts it and replaces it as soon as a signed certificate is issued.
pub fn ensure_placeholder(settings: &Settings, detected: &[IpAddr]) -> Result<(), String> {
    let profile = CertProfile::serving(
        &settings.node_name,
        sans::from_settings(
            &settings.node_name,
            &settings.node_ips,
            detected,
            &settings.tls_sans,
        ),
    );
    let dir = CertDir::open(&settings.cert_dir)
        .map_err(|e| report(&e))?
        .for_profile(&profile);
    if dir.read_current().ok().flatten().is_some() {
        return Ok(());
    }
    let key = NodeKey::generate().map_err(|e| report(&e))?;
    let now = clock::now();
    let chain = crate::pki::self_signed(&key, &profile, now, PLACEHOLDER_LIFETIME)
        .map_err(|e| report(&e))?;
    let file = dir
        .install(&chain, &key.to_pem(), now)
        .map_err(|e| report(&e))?;
    tracing::info!(file = %file.display(), sans = ?profile.sans, "no serving certificate yet: wrote a self-signed one so the kubelet can start; it is replaced once a kubelet-serving CSR is approved");
    Ok(())
}
