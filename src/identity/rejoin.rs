//! `bootlet rejoin --token ID.SECRET [--discovery-token-ca-cert-hash sha256:H]`: the one
//! command that brings back a node whose client certificate expired while it was off, after
//! `kubeadm join` deleted the bootstrap kubeconfig (kubernetes/kubeadm#2054: upstream's
//! answer is a manual procedure with the CA key on a control-plane node).
//!
//! The node still knows its cluster: kubelet.conf names the server and embeds the CA. From
//! them and a fresh bootstrap token it writes a bootstrap kubeconfig as `kubeadm join` does
//! (0600, atomically), the CA checked first against the pins given (kubeadm's
//! `--discovery-token-ca-cert-hash`: SHA-256 over the CA's SubjectPublicKeyInfo), then lets
//! the agent bootstrap with it and waits until the new identity is on disk.

use std::time::Duration;

use crate::api::kubeconfig::{self, BootstrapToken, KubeconfigError};
use crate::config::Settings;
use crate::identity::check;
use crate::pki::{ca_pins, CertInfo};

/// Why a rejoin did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    #[error("the token is not a bootstrap token (ID.SECRET: [a-z0-9]{{6}}.[a-z0-9]{{16}}); create one with `kubeadm token create` on a control-plane host")]
    Token,
    #[error("cannot read the cluster from the node's kubeconfig (this node never joined, or `kubeadm reset` removed it: use `kubeadm join`)")]
    Cluster(#[source] KubeconfigError),
    #[error(
        "the CA in {kubeconfig} has pin(s) {found}, none of them {wanted}: refusing to trust it"
    )]
    CaHash {
        kubeconfig: String,
        found: String,
        wanted: String,
    },
    #[error("a --discovery-token-ca-cert-hash must be sha256:<64 hex digits>, not {0:?}")]
    HashFormat(String),
    #[error("cannot write the bootstrap kubeconfig")]
    Write(#[source] KubeconfigError),
    #[error("no new identity within {}: {last}", crate::runtime::health::human(*.waited))]
    Timeout { waited: Duration, last: String },
}

/// What `rejoin` needs besides the settings.
pub struct Rejoin<'a> {
    pub settings: &'a Settings,
    pub token: &'a str,
    /// Accepted CA pins (`sha256:HEX`); empty trusts the CA already in kubelet.conf.
    pub ca_hashes: &'a [String],
    pub timeout: Duration,
}

/// How often the new identity is looked for, and progress printed.
const POLL: Duration = Duration::from_secs(1);

impl Rejoin<'_> {
    /// Writes the bootstrap kubeconfig: the cluster of kubelet.conf, the CA checked against
    /// the pins, the token. Returns the bootstrap kubeconfig's path.
    pub fn write_bootstrap(&self) -> Result<&std::path::Path, RejoinError> {
        let s = self.settings;
        let token = BootstrapToken::new(self.token);
        if !token.is_bootstrap_token() {
            return Err(RejoinError::Token);
        }
        let cluster = kubeconfig::read_cluster(&s.kubeconfig, s.allow_insecure_kubeconfig)
            .map_err(RejoinError::Cluster)?;
        if !self.ca_hashes.is_empty() {
            let wanted: Vec<String> = self
                .ca_hashes
                .iter()
                .map(|h| normalize_pin(h))
                .collect::<Result<_, _>>()?;
            let found = ca_pins(&String::from_utf8_lossy(&cluster.ca_pem));
            if !found.iter().any(|f| wanted.contains(f)) {
                return Err(RejoinError::CaHash {
                    kubeconfig: s.kubeconfig.display().to_string(),
                    found: found.join(", "),
                    wanted: wanted.join(", "),
                });
            }
        }
        let yaml = kubeconfig::render_bootstrap(&cluster.server, &cluster.ca_pem, &token)
            .map_err(RejoinError::Write)?;
        kubeconfig::write_rendered(&s.bootstrap_kubeconfig, &yaml).map_err(RejoinError::Write)?;
        Ok(&s.bootstrap_kubeconfig)
    }

    /// Until the node's identity is valid again ([`check::check`]), printing what bootlet
    /// says (its STATUS=) whenever that changes; at most `timeout`.
    pub async fn wait(&self, mut progress: impl FnMut(&str)) -> Result<CertInfo, RejoinError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut said = String::new();
        loop {
            let last = match check::check(self.settings) {
                Ok(info) => return Ok(info),
                Err(e) => crate::runtime::report(&e),
            };
            let status = check::agent_status().unwrap_or_else(|| last.clone());
            if status != said {
                progress(&status);
                said = status;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RejoinError::Timeout {
                    waited: self.timeout,
                    last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `sha256:HEX` lower-cased; kubeadm's spelling, checked.
fn normalize_pin(pin: &str) -> Result<String, RejoinError> {
    let hex = pin
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| RejoinError::HashFormat(pin.to_string()))?;
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_checked_for_shape_and_lower_cased() {
        let hex = "AB".repeat(32);
        assert_eq!(
            normalize_pin(&format!("sha256:{hex}")).unwrap(),
            format!("sha256:{}", "ab".repeat(32))
        );
        for bad in [
            "ab",
            "sha256:xyz",
            "sha1:00",
            &format!("sha256:{}", "a".repeat(63)),
        ] {
            assert!(normalize_pin(bad).is_err(), "{bad}");
        }
    }
}
