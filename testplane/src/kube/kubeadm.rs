//! A control plane prepared for `kubeadm join` by kubeadm itself (`Options::kubeadm`), and
//! the scheduler every real control plane runs.
//!
//! Instead of the launcher's own copies of kubeadm's objects (`setup::kubeadm_objects`), the
//! pinned release's kubeadm (`BIN kubeadm`, unmodified) makes them from one v1beta4 config
//! file (`DIR/kubeadm.yaml`: InitConfiguration with the cluster's first token,
//! ClusterConfiguration with `controlPlaneEndpoint` = the API server's loopback address,
//! and the KubeletConfiguration of `Kubeadm::kubelet_config`), as `kubeadm init` would:
//! - `kubeadm init phase upload-config all`: ConfigMaps `kube-system/kubeadm-config` and
//!   `kube-system/kubelet-config`, with the Roles that let bootstrap tokens read them;
//! - `kubeadm init phase bootstrap-token`: the token Secret, `kubeadm:get-nodes`, the CSR
//!   bindings (with `Approve::Manual` the two auto-approve bindings are then deleted),
//!   `kube-public/cluster-info` from admin.conf's cluster and its RBAC.
//!
//! kube-controller-manager runs kubeadm's controller set (`*,bootstrapsigner,tokencleaner`;
//! the bootstrapsigner JWS-signs cluster-info per token) and kube-scheduler runs beside it;
//! both serve HTTPS on 127.0.0.1, on kubeadm's ports (10257, 10259) or on free ones
//! (`ComponentPorts`). kube-apiserver already runs with `--enable-bootstrap-token-auth`.

use std::path::PathBuf;
use std::time::Duration;

use super::procs::free_port;
use super::{poll, Cluster, KubeError, CONTROLLERS_TIMEOUT, TOKEN_TTL};
use crate::DEFAULT_TOKEN_GROUP;

/// kube-controller-manager's default secure port (kubeadm binds it on 127.0.0.1).
pub const KCM_PORT: u16 = 10257;
/// kube-scheduler's default secure port (kubeadm binds it on 127.0.0.1).
pub const SCHEDULER_PORT: u16 = 10259;

/// Where kube-controller-manager and kube-scheduler serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentPorts {
    /// kubeadm's: 127.0.0.1:10257 and 127.0.0.1:10259. One such cluster per network
    /// namespace at a time (what a test of port collisions needs).
    Kubeadm,
    /// Free loopback ports, so that clusters run side by side.
    Free,
}

/// `Options::kubeadm`: how the kubeadm-prepared cluster is set up.
#[derive(Debug, Clone)]
pub struct Kubeadm {
    pub ports: ComponentPorts,
    /// The KubeletConfiguration document kubeadm defaults and uploads to
    /// `kube-system/kubelet-config` (what `kubeadm join` writes to
    /// `/var/lib/kubelet/config.yaml`). `KUBELET_CONFIG` by default.
    pub kubelet_config: String,
}

/// A KubeletConfiguration for the test kubelet (`BIN kubelet`, testplane/kube/kubelet.go):
/// its container manager is a stub, so no cgroups per QoS class and nothing to enforce, and
/// neither swap nor a cgroup v1 host (the kubelet refuses one by default since v1.35:
/// `failCgroupV1`, checked in ValidateKubeletConfiguration) is a reason to stop. Everything
/// else is kubeadm's defaulting, including `rotateCertificates: true` (bootlet's drop-in
/// passes `--rotate-certificates=false`).
pub const KUBELET_CONFIG: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupsPerQOS: false
enforceNodeAllocatable: [\"none\"]
failSwapOn: false
failCgroupV1: false
resolvConf: /etc/resolv.conf
rotateCertificates: true
";

impl Kubeadm {
    pub fn new(ports: ComponentPorts) -> Kubeadm {
        Kubeadm {
            ports,
            kubelet_config: KUBELET_CONFIG.to_string(),
        }
    }
}

/// InitConfiguration's `localAPIEndpoint.advertiseAddress`. kubeadm reads a loopback address
/// there as "the global address on lo" (`SetAPIEndpointDynamicDefaults`) and fails without
/// one; without an address it picks one from the default route, which a sandbox may lack.
/// No phase run here uses it (cluster-info is made from admin.conf's cluster, joins use
/// `controlPlaneEndpoint`), so a documentation address (RFC 5737) stands in.
const LOCAL_API_ADDRESS: &str = "203.0.113.1";

/// What `kubeadm token create --print-join-command` printed, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinCommand {
    /// The whole line, e.g. `kubeadm join 127.0.0.1:PORT --token ID.SECRET
    /// --discovery-token-ca-cert-hash sha256:HEX`.
    pub line: String,
    /// `127.0.0.1:PORT` (kubeadm join's API server endpoint argument).
    pub server: String,
    /// `ID.SECRET`.
    pub token: String,
    /// `sha256:HEX` of the cluster CA's SubjectPublicKeyInfo.
    pub ca_cert_hash: String,
}

impl JoinCommand {
    /// Parse kubeadm's line; None when it is not a `kubeadm join` command with the three.
    pub fn parse(line: &str) -> Option<JoinCommand> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let rest = words.strip_prefix(&["kubeadm", "join"])?;
        let server = rest.first()?.to_string();
        let after = |flag: &str| {
            rest.iter()
                .position(|w| *w == flag)
                .and_then(|i| rest.get(i + 1))
                .map(|s| s.to_string())
        };
        Some(JoinCommand {
            line: words.join(" "),
            server,
            token: after("--token")?,
            ca_cert_hash: after("--discovery-token-ca-cert-hash")?,
        })
    }

    /// `kubeadm`'s arguments: `join SERVER --token T --discovery-token-ca-cert-hash H`.
    pub fn args(&self) -> Vec<String> {
        vec![
            "join".into(),
            self.server.clone(),
            "--token".into(),
            self.token.clone(),
            "--discovery-token-ca-cert-hash".into(),
            self.ca_cert_hash.clone(),
        ]
    }
}

// === impl Cluster ===

impl Cluster {
    /// `DIR/kubeadm.yaml`, the config the kubeadm phases ran with (kubeadm-prepared only).
    pub fn kubeadm_config(&self) -> PathBuf {
        self.opts.state_dir.join("kubeadm.yaml")
    }

    /// `BIN kubeadm ARGS` (the pinned release's kubeadm), HOME in the state dir.
    pub async fn kubeadm(&self, args: &[&str]) -> std::process::Output {
        tokio::process::Command::new(&self.bin)
            .arg("kubeadm")
            .args(args)
            .env("HOME", &self.opts.state_dir)
            .output()
            .await
            .expect("run kubeadm")
    }

    /// `BIN kubeadm ARGS`, an error with its output unless it succeeds; returns stdout.
    async fn kubeadm_ok(&self, args: &[&str]) -> Result<String, KubeError> {
        let out = self.kubeadm(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            return Ok(stdout);
        }
        Err(KubeError::Component {
            name: "kubeadm".into(),
            why: format!("{args:?} failed ({})", out.status),
            log: "its output".into(),
            tail: format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)),
        })
    }

    /// A new bootstrap token made by `kubeadm token create --print-join-command --ttl TTL`
    /// (kubeadm's usages and group), returned once it authenticates and the bootstrapsigner
    /// has signed cluster-info for it: ready for `kubeadm join`.
    pub async fn join_command(&self, ttl: Duration) -> Result<JoinCommand, KubeError> {
        // The TTL goes in a config file rather than --ttl: without --config kubeadm picks
        // an advertise address from the default route, which a sandbox may lack.
        let kubelet = self
            .opts
            .kubeadm
            .as_ref()
            .map(|k| k.kubelet_config.clone())
            .unwrap_or_else(|| KUBELET_CONFIG.to_string());
        let (nonce, _) = crate::faults::random_token();
        let config = self
            .opts
            .state_dir
            .join(format!("kubeadm-token-{nonce}.yaml"));
        let io = |source| KubeError::Io {
            path: config.display().to_string(),
            source,
        };
        std::fs::write(&config, self.init_config(None, ttl, &kubelet)).map_err(io)?;
        let out = self
            .kubeadm_ok(&[
                "token",
                "create",
                "--print-join-command",
                "--config",
                &config.display().to_string(),
                "--kubeconfig",
                &self.admin_kubeconfig().display().to_string(),
            ])
            .await;
        let _ = std::fs::remove_file(&config);
        let out = out?;
        let line = out
            .lines()
            .find(|l| l.contains("kubeadm join"))
            .unwrap_or("");
        let join = JoinCommand::parse(line).ok_or_else(|| KubeError::Component {
            name: "kubeadm".into(),
            why: "printed no join command".into(),
            log: "its output".into(),
            tail: out.clone(),
        })?;
        self.wait_token(&join.token).await?;
        let id = join.token.split('.').next().unwrap_or_default();
        self.wait_controllers(id).await?;
        Ok(join)
    }

    /// The port a component serves HTTPS on (`--secure-port`), None when it serves none.
    pub async fn component_port(&self, name: &str) -> Option<u16> {
        let args = self.component_args(name).await?;
        args.iter()
            .filter_map(|a| a.strip_prefix("--secure-port="))
            .filter_map(|p| p.parse().ok())
            .find(|p| *p != 0)
    }

    /// Write `kubeadm.yaml` and run kubeadm's phases against the running API server.
    pub(super) async fn kubeadm_prepare(&self) -> Result<(), KubeError> {
        let Some(k) = &self.opts.kubeadm else {
            return Ok(());
        };
        let config = self.kubeadm_config();
        let yaml = self.init_config(Some(&self.token), TOKEN_TTL, &k.kubelet_config);
        std::fs::write(&config, yaml).map_err(|source| KubeError::Io {
            path: config.display().to_string(),
            source,
        })?;
        let config = config.display().to_string();
        let admin = self.admin_kubeconfig().display().to_string();
        let common = ["--config", &config, "--kubeconfig", &admin];
        let mut upload = vec!["init", "phase", "upload-config", "all"];
        upload.extend(common);
        self.kubeadm_ok(&upload).await?;
        let mut token = vec!["init", "phase", "bootstrap-token", "--skip-token-print"];
        token.extend(common);
        self.kubeadm_ok(&token).await?;
        if self.opts.approve == super::Approve::Manual {
            for name in [
                "kubeadm:node-autoapprove-bootstrap",
                "kubeadm:node-autoapprove-certificate-rotation",
            ] {
                let path = format!("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}");
                match self.api("DELETE", &path, None).await? {
                    (200 | 202 | 404, _) => {}
                    (code, text) => {
                        return Err(KubeError::Http {
                            request: format!("DELETE {path}"),
                            what: format!("HTTP {code}: {text}"),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// kubeadm's config: an InitConfiguration with one bootstrap token (`token`, or one
    /// kubeadm generates, valid for `ttl`, kubeadm's usages and group), the
    /// ClusterConfiguration, and the KubeletConfiguration document `kubelet`.
    fn init_config(&self, token: Option<&str>, ttl: Duration, kubelet: &str) -> String {
        let token = token
            .map(|t| format!("  token: \"{t}\"\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- description: \"bootlet-testplane\"
{token}  ttl: \"{ttl}s\"
  usages: [signing, authentication]
  groups: [\"{group}\"]
localAPIEndpoint:
  advertiseAddress: \"{LOCAL_API_ADDRESS}\"
  bindPort: {port}
nodeRegistration:
  name: kubeadm-control-plane
  criSocket: unix:///var/run/containerd/containerd.sock
  taints: []
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: kubernetes
kubernetesVersion: \"{release}\"
controlPlaneEndpoint: \"{addr}\"
networking:
  serviceSubnet: 10.96.0.0/12
  dnsDomain: cluster.local
---
{kubelet}",
            ttl = ttl.as_secs().max(1),
            group = DEFAULT_TOKEN_GROUP,
            port = self.addr.port(),
            release = self.release,
            addr = self.addr,
        )
    }

    /// kubeadm's kube-controller-manager flags over the launcher's: its controller set, and
    /// HTTPS on 127.0.0.1 with delegated authentication and authorization.
    pub(super) fn kubeadm_controller_manager_args(
        &self,
        k: &Kubeadm,
        args: &mut Vec<String>,
    ) -> Result<(), KubeError> {
        let port = match k.ports {
            ComponentPorts::Kubeadm => KCM_PORT,
            ComponentPorts::Free => free_port()?,
        };
        let conf = self.files.kcm_conf.display().to_string();
        args.retain(|a| !a.starts_with("--controllers=") && !a.starts_with("--secure-port="));
        args.extend([
            "--controllers=*,bootstrapsigner,tokencleaner".to_string(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--authentication-kubeconfig={conf}"),
            format!("--authorization-kubeconfig={conf}"),
        ]);
        Ok(())
    }

    /// kube-scheduler's flags as kubeadm's static pod has them (leader election off: one
    /// replica), or None without `Options::kubeadm`.
    pub(super) fn scheduler_args(&self) -> Result<Option<Vec<String>>, KubeError> {
        let Some(k) = &self.opts.kubeadm else {
            return Ok(None);
        };
        let port = match k.ports {
            ComponentPorts::Kubeadm => SCHEDULER_PORT,
            ComponentPorts::Free => free_port()?,
        };
        let conf = self.files.scheduler_conf.display().to_string();
        Ok(Some(vec![
            format!("--kubeconfig={conf}"),
            format!("--authentication-kubeconfig={conf}"),
            format!("--authorization-kubeconfig={conf}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--leader-elect=false".into(),
        ]))
    }

    /// Until kube-controller-manager and kube-scheduler accept connections on their secure
    /// ports (those that have one).
    pub(super) async fn wait_serving(&self) -> Result<(), KubeError> {
        for name in ["kube-controller-manager", "kube-scheduler"] {
            let Some(port) = self.component_port(name).await else {
                continue;
            };
            let what = format!("{name} to serve on 127.0.0.1:{port}");
            poll(CONTROLLERS_TIMEOUT, &what, || async {
                self.check_running().await?;
                Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ()))
            })
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::JoinCommand;

    #[test]
    fn parses_kubeadms_join_line() {
        let j = JoinCommand::parse(
            "kubeadm join 127.0.0.1:6443 --token abcdef.0123456789abcdef  \
             --discovery-token-ca-cert-hash sha256:00ff ",
        )
        .unwrap();
        assert_eq!(j.server, "127.0.0.1:6443");
        assert_eq!(j.token, "abcdef.0123456789abcdef");
        assert_eq!(j.ca_cert_hash, "sha256:00ff");
        assert_eq!(j.args()[0], "join");
        assert!(JoinCommand::parse("kubeadm token list").is_none());
    }
}
