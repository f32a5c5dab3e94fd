//! What the kubelet's own configuration says about the keys bootlet shares with it, so a
//! node is configured in one place: `kubeadm join --node-name X` writes
//! `--hostname-override=X` into kubeadm-flags.env, and KubeletConfiguration
//! (`/var/lib/kubelet/config.yaml`, from ConfigMap `kube-system/kubelet-config`) says
//! `serverTLSBootstrap` and `rotateCertificates`. Each is used only where bootlet's own
//! flag or config file says nothing. Read, in order, as the kubelet's command line
//! applies them (the later wins):
//! 1. `/var/lib/kubelet/kubeadm-flags.env`: `KUBELET_KUBEADM_ARGS` (kubeadm writes it);
//! 2. `/etc/default/kubelet` (Debian's package) or `/etc/sysconfig/kubelet` (the RPM's):
//!    `KUBELET_EXTRA_ARGS`, the operator's own flags, which come last on the kubelet's
//!    command line in kubeadm's drop-in;
//! 3. `/var/lib/kubelet/config.yaml` for the two KubeletConfiguration fields (a flag on
//!    the kubelet's command line would override the file; bootlet's drop-in passes
//!    `--rotate-certificates=false` to the kubelet only because bootlet rotates instead,
//!    so that flag says nothing about whether the node's certificate should rotate).
//!
//! Files that are absent or unreadable say nothing; none of them is required.

use std::path::{Path, PathBuf};

/// Where kubeadm and the kubelet packages keep what bootlet reads.
#[derive(Debug, Clone)]
pub struct KubeletFiles {
    pub kubeadm_flags: PathBuf,
    pub extra_args: Vec<PathBuf>,
    pub config: PathBuf,
}

impl Default for KubeletFiles {
    fn default() -> Self {
        Self {
            kubeadm_flags: "/var/lib/kubelet/kubeadm-flags.env".into(),
            extra_args: vec![
                "/etc/default/kubelet".into(),
                "/etc/sysconfig/kubelet".into(),
            ],
            config: "/var/lib/kubelet/config.yaml".into(),
        }
    }
}

/// The kubelet's say on the shared keys; `None` where it says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletView {
    /// `--hostname-override`, lower-cased as the kubelet does.
    pub node_name: Option<String>,
    pub server_tls_bootstrap: Option<bool>,
    pub rotate_certificates: Option<bool>,
}

/// The largest of these files read (each is a line or a few dozen lines).
const MAX_FILE: u64 = 1 << 20;

impl KubeletFiles {
    /// Reads what the files say now.
    pub fn view(&self) -> KubeletView {
        let mut node_name = None;
        let sources = [(&self.kubeadm_flags, "KUBELET_KUBEADM_ARGS")]
            .into_iter()
            .chain(self.extra_args.iter().map(|p| (p, "KUBELET_EXTRA_ARGS")));
        for (path, var) in sources {
            if let Some(name) = read(path).and_then(|t| hostname_override(&t, var)) {
                node_name = Some(name);
            }
        }
        let config = read(&self.config)
            .and_then(|t| serde_saphyr::from_str::<KubeletConfig>(&t).ok())
            .unwrap_or_default();
        KubeletView {
            node_name,
            server_tls_bootstrap: config.server_tls_bootstrap,
            rotate_certificates: config.rotate_certificates,
        }
    }
}

/// The two KubeletConfiguration fields bootlet follows; every other key is ignored.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeletConfig {
    #[serde(rename = "serverTLSBootstrap")]
    server_tls_bootstrap: Option<bool>,
    rotate_certificates: Option<bool>,
}

fn read(path: &Path) -> Option<String> {
    crate::pki::files::read_text_bounded(path, MAX_FILE).ok()
}

/// The last `--hostname-override` in `var="…"` of an environment file (systemd's
/// `EnvironmentFile=` syntax: `VAR=value` or `VAR="value"`; `#` comments), either as
/// `--hostname-override=X` or `--hostname-override X`.
pub fn hostname_override(text: &str, var: &str) -> Option<String> {
    let mut found = None;
    for line in text.lines().map(str::trim) {
        let Some(value) = line
            .strip_prefix(var)
            .and_then(|rest| rest.trim_start().strip_prefix('='))
        else {
            continue;
        };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        let mut words = value.split_whitespace();
        while let Some(word) = words.next() {
            let name = match word.strip_prefix("--hostname-override") {
                Some(rest) if rest.starts_with('=') => Some(rest[1..].to_string()),
                Some("") => words.next().map(str::to_string),
                _ => None,
            };
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                found = Some(name.to_lowercase());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_is_read_as_the_kubelet_would() {
        let kubeadm = "KUBELET_KUBEADM_ARGS=\"--pod-infra-container-image=registry.k8s.io/pause:3.10 --hostname-override=Worker-7\"\n";
        assert_eq!(
            hostname_override(kubeadm, "KUBELET_KUBEADM_ARGS").as_deref(),
            Some("worker-7")
        );
        let spaced =
            "# comment\nKUBELET_EXTRA_ARGS=--node-ip=10.0.0.1 --hostname-override node-b\n";
        assert_eq!(
            hostname_override(spaced, "KUBELET_EXTRA_ARGS").as_deref(),
            Some("node-b")
        );
        for none in [
            "KUBELET_KUBEADM_ARGS=\"--pod-infra-container-image=pause\"",
            "OTHER=\"--hostname-override=x\"",
            "KUBELET_KUBEADM_ARGS=\"--hostname-override=\"",
            "",
        ] {
            assert_eq!(
                hostname_override(none, "KUBELET_KUBEADM_ARGS"),
                None,
                "{none}"
            );
        }
    }

    #[test]
    fn the_later_file_wins_and_config_yaml_gives_the_two_fields() {
        let dir = tempfile::tempdir().unwrap();
        let files = KubeletFiles {
            kubeadm_flags: dir.path().join("kubeadm-flags.env"),
            extra_args: vec![dir.path().join("kubelet")],
            config: dir.path().join("config.yaml"),
        };
        assert_eq!(files.view(), KubeletView::default());
        std::fs::write(
            &files.kubeadm_flags,
            "KUBELET_KUBEADM_ARGS=\"--hostname-override=from-kubeadm\"\n",
        )
        .unwrap();
        std::fs::write(
            &files.config,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nrotateCertificates: true\nserverTLSBootstrap: true\ncgroupDriver: systemd\n",
        )
        .unwrap();
        assert_eq!(
            files.view(),
            KubeletView {
                node_name: Some("from-kubeadm".into()),
                server_tls_bootstrap: Some(true),
                rotate_certificates: Some(true),
            }
        );
        std::fs::write(
            &files.extra_args[0],
            "KUBELET_EXTRA_ARGS=--hostname-override=from-operator\n",
        )
        .unwrap();
        assert_eq!(files.view().node_name.as_deref(), Some("from-operator"));
    }
}
