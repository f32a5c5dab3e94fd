//! Every setting's default and limit, with the reason for it: the one place `cli` (for
//! `--help`) and `config` (for the merge) both read, so neither imports the other for them.

use std::time::Duration;

use crate::runtime::telemetry::LogFormat;

/// The kubeadm/kubelet path, so `kubeadm join` output works unchanged.
pub const DEFAULT_BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/bootstrap-kubelet.conf";
/// The kubelet's own kubeconfig path, so a kubelet started with it needs no change.
pub const DEFAULT_KUBECONFIG: &str = "/etc/kubernetes/kubelet.conf";
/// The kubelet's default `--cert-dir`, where it looks for kubelet-client-current.pem.
pub const DEFAULT_CERT_DIR: &str = "/var/lib/kubelet/pki";
/// Rotation is what keeps the node's identity alive past the first certificate.
pub const DEFAULT_ROTATE_CERTIFICATES: bool = true;
/// The kubelet's choice: rotate with a quarter of the lifetime left for retries.
pub const DEFAULT_ROTATION_FRACTION: f64 = 0.75;
/// Spreads a fleet's rotations so nodes joined together do not rotate together.
pub const DEFAULT_ROTATION_JITTER: f64 = 0.05;
/// Most deployments use bootlet as the node's only heartbeat writer.
pub const DEFAULT_RENEW_LEASE: bool = true;
/// The kubelet's node Lease renewal period.
pub const DEFAULT_LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// The kubelet's `nodeLeaseDurationSeconds`: four missed renewals before the node is stale.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(40);
/// Long enough for a human approver, short enough that a lost CSR is noticed the same hour.
pub const DEFAULT_CSR_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a kubeconfig's exec credential plugin may run before it is killed: client-go
/// waits forever, but a hung plugin must not hang bootstrap; a minute covers a plugin that
/// asks a metadata server or a TPM, with room for retries of its own.
pub const DEFAULT_EXEC_PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Off as in the kubelet: serving CSRs need an approver most clusters do not run yet.
pub const DEFAULT_ROTATE_SERVER_CERTIFICATES: bool = false;
/// Loopback only: metrics and health are for the node's own agents, not the network. The
/// port is outside every one a Kubernetes node or control plane listens on: 10248-10259
/// are the kubelet's (10248, 10250, 10255), kube-proxy's (10249, 10256),
/// kube-controller-manager's (10257), cloud-controller-manager's (10258) and
/// kube-scheduler's (10259, bound on 127.0.0.1 by kubeadm on every control-plane node; it
/// was this default until kubeadm's `Port-10259` preflight showed the clash), 2379-2381
/// etcd's, 6443 kube-apiserver's, and the common node agents' (node-exporter 9100, Calico
/// 9099, Cilium 9962-9965) are elsewhere too.
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "127.0.0.1:10271";
/// A few past certificates for forensics and rollback without filling the disk.
pub const DEFAULT_KEEP_CERTIFICATES: usize = 5;
/// Skipping TLS verification hands the node's identity to whoever answers; opt in only.
pub const DEFAULT_ALLOW_INSECURE_KUBECONFIG: bool = false;
/// The contract's first wait after a Denied or Failed CSR: never a tight loop.
pub const DEFAULT_CSR_BACKOFF_MIN: Duration = Duration::from_secs(60);
/// The contract's cap between CSRs: an hour keeps retrying without flooding approvers.
pub const DEFAULT_CSR_BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// Jitter of the CSR backoff, so nodes denied together do not retry together.
pub const DEFAULT_CSR_BACKOFF_JITTER: f64 = 0.1;
/// An approved CSR is usually signed within seconds; a minute means the signer is down.
pub const DEFAULT_CSR_NOT_ISSUED_WARNING: Duration = Duration::from_secs(60);
/// The contract's "at most once a minute" Node lookup for the Lease owner reference.
pub const DEFAULT_LEASE_OWNER_LOOKUP_INTERVAL: Duration = Duration::from_secs(60);
/// Enough to finish an atomic file write, short next to systemd's 90 s stop timeout.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// `bootlet rejoin`'s wait for the new certificate: kubeadm's own `tlsBootstrap` timeout.
pub const DEFAULT_REJOIN_TIMEOUT: Duration = Duration::from_secs(300);
/// Human-readable logs; JSON is opt-in for shippers.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Text;
/// Info level: state transitions only (rule 15).
pub const DEFAULT_VERBOSITY: u8 = 0;

/// The floor of `leaseRenewInterval`: faster renewals only load the API server, whose
/// node lifecycle controller waits 40-50 s for a heartbeat anyway.
pub const MIN_LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(1);
/// The cap of `leaseRenewInterval` and `leaseDuration`: a heartbeat slower than an hour is
/// none (the node goes NotReady after 40-50 s without one).
pub const MAX_LEASE_TIMING: Duration = Duration::from_secs(3600);
/// The cap of the CSR timings (`csrTimeout`, `csrBackoffMin`/`Max`, `csrNotIssuedWarning`):
/// kube-controller-manager deletes a CSR still pending after 24 h, so waiting longer waits
/// on nothing.
pub const MAX_CSR_TIMING: Duration = Duration::from_secs(24 * 3600);
/// The cap of `leaseOwnerLookupInterval`: a day; the Node normally appears within minutes.
pub const MAX_LEASE_OWNER_LOOKUP_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// The cap of `shutdownGrace`: systemd's stop timeout (10 s in bootlet.service) kills the
/// agent long before; five minutes leaves room for a drop-in that raises it.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(300);

// `bootlet approve` (the kubelet-serving approver, src/approve/).

/// The approver's `/metrics`: on every address, as a pod is scraped on its own IP. 10272
/// is next to the agent's 10271 and outside every port a Kubernetes component uses
/// (10248–10259, 10260 for cloud-controller webhooks, 6443, 2379–2381); kubelet-csr-approver's
/// 8080 collides with many web servers on a control-plane host.
pub const DEFAULT_APPROVE_METRICS_BIND_ADDRESS: &str = "0.0.0.0:10272";
/// client-go's leader-election defaults: a dead leader is replaced within 15 s.
pub const DEFAULT_APPROVE_LEASE_DURATION: Duration = Duration::from_secs(15);
pub const DEFAULT_APPROVE_RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const DEFAULT_APPROVE_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Two replicas, one acting.
pub const DEFAULT_APPROVE_LEADER_ELECT: bool = true;
pub const DEFAULT_APPROVE_LEASE_NAME: &str = "bootlet-approver";
/// Where the Lease lives when the service account's namespace is unknown (out of cluster).
pub const DEFAULT_APPROVE_NAMESPACE: &str = "bootlet-approver";
/// The kubelet requests its hostname, which is the node name unless overridden.
pub const DEFAULT_APPROVE_ALLOW_NODE_NAME_DNS: bool = true;
/// kube-controller-manager's default `--cluster-signing-duration`: a year.
pub const DEFAULT_APPROVE_MAX_EXPIRATION: Duration = Duration::from_secs(365 * 24 * 3600);
