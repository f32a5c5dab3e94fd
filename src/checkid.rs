//! The contract's doctor check ids, in order, and what each depends on. A leaf: doctor
//! runs the checks, and the daemon names the same id when it backs off, so an operator
//! reading a log line knows which link of the join chain broke.

use std::fmt;

/// The checks, in the contract's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckId {
    Config,
    BootstrapKubeconfig,
    ServerReachable,
    CaTrust,
    ClockSkew,
    Authentication,
    Authorization,
    Csr,
    ClientCertificate,
    Node,
    Lease,
}

// === impl CheckId ===

impl CheckId {
    pub const ALL: [CheckId; 11] = [
        CheckId::Config,
        CheckId::BootstrapKubeconfig,
        CheckId::ServerReachable,
        CheckId::CaTrust,
        CheckId::ClockSkew,
        CheckId::Authentication,
        CheckId::Authorization,
        CheckId::Csr,
        CheckId::ClientCertificate,
        CheckId::Node,
        CheckId::Lease,
    ];

    /// The contract's id.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckId::Config => "config",
            CheckId::BootstrapKubeconfig => "bootstrap-kubeconfig",
            CheckId::ServerReachable => "server-reachable",
            CheckId::CaTrust => "ca-trust",
            CheckId::ClockSkew => "clock-skew",
            CheckId::Authentication => "authentication",
            CheckId::Authorization => "authorization",
            CheckId::Csr => "csr",
            CheckId::ClientCertificate => "client-certificate",
            CheckId::Node => "node",
            CheckId::Lease => "lease",
        }
    }

    /// What the check looks at and the root causes it names, one paragraph for the
    /// operator (docs/troubleshooting.md is generated from it, src/doctor/reference.rs).
    pub fn observes(self) -> &'static str {
        use CheckId::*;
        match self {
            Config => "The flags and the config file, merged and validated as `bootlet run` would; the kubelet's unit and config file. Names a key or flag that does not parse, a node name the API would refuse, and warns when the kubelet would bootstrap or rotate too (its unit passes `--bootstrap-kubeconfig`, or `rotateCertificates: true` without bootlet's drop-in).",
            BootstrapKubeconfig => "The bootstrap kubeconfig (`--bootstrap-kubeconfig`), read only when no valid client certificate is on disk. Names a missing, unreadable or non-YAML file, one without a server or token, or a token that is not a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`).",
            ServerReachable => "TCP, TLS and one anonymous `GET /livez` to the kubeconfig's server (connect and handshake 2 s each, the request 1.5 s). Names a refused, unresolvable or silent server, and one that completes TLS but never answers HTTP; a 5xx is a warning.",
            CaTrust => "Whether the server's certificate chains to the kubeconfig's CA. A mismatch names both CAs by key id and the cluster CA's `sha256:` pin; the pin the endpoint presents is never offered as one to trust.",
            ClockSkew => "The node's clock against the server's `Date` header: a warning beyond 30 s, a failure beyond 5 min, or a certificate not yet valid.",
            Authentication => "A SelfSubjectReview with the credential the daemon would use (a valid client certificate, else the bootstrap token). Names an expired or deleted token (401) and an unexpected identity.",
            Authorization => "A SelfSubjectAccessReview: may this identity create CertificateSigningRequests? Names the lost or overwritten `kubeadm:kubelet-bootstrap` ClusterRoleBinding and prints the commands that restore it.",
            Csr => "bootlet's CertificateSigningRequest for this node, if one is open. Names one pending with no auto-approver (the `kubeadm:node-autoapprove-bootstrap` binding), denied, failed, or approved and never issued.",
            ClientCertificate => "The client certificate in the cert dir: for this node, valid now, chaining to the kubeconfig's CA (or, from another signer's CA, accepted by the API server). Names one for another node name, expired, near expiry with rotation off, or from another CA.",
            Node => "The Node object. Names a stale Node from a reinstall (its `machineID` is not this host's), a NotReady Node, `NetworkUnavailable=True`, no `podCIDR`, the cloud provider's `uninitialized` taint or missing zone or instance-type labels; a missing Node is a warning (the kubelet registers it when it starts).",
            Lease => "The node Lease in `kube-node-lease`. Names a stale Lease and one held by another identity.",
        }
    }

    /// The checks whose observations this one needs. The chain is linear up to `csr`;
    /// the Node and the Lease each need only a working client certificate, so a NotReady
    /// Node does not hide a stale Lease (which usually explains it).
    pub fn depends_on(self) -> &'static [CheckId] {
        use CheckId::*;
        match self {
            Config => &[],
            BootstrapKubeconfig => &[Config],
            ServerReachable => &[BootstrapKubeconfig],
            CaTrust => &[ServerReachable],
            ClockSkew => &[CaTrust],
            Authentication => &[ClockSkew],
            Authorization => &[Authentication],
            Csr => &[Authorization],
            ClientCertificate => &[Csr],
            Node => &[ClientCertificate],
            Lease => &[ClientCertificate],
        }
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
