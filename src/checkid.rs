//! The contract's doctor checks, in order: one row of one table ([`CHECKS`]) per check —
//! its id, title, the checks it needs first and what it observes. A leaf: doctor runs the
//! checks (their verdicts are `doctor::checks::verdict`, one arm per id), the daemon names
//! the same id when it backs off, so an operator reading a log line knows which link of
//! the join chain broke, and docs/troubleshooting.md is generated from the table.

use std::fmt;

/// The checks, in the contract's order (the order of [`CHECKS`]).
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
    ServingCsr,
}

/// One doctor check.
#[derive(Debug)]
pub struct Check {
    pub id: CheckId,
    /// The contract's id (doctor's JSON, log lines).
    pub name: &'static str,
    /// Its heading in docs/troubleshooting.md.
    pub title: &'static str,
    /// The checks whose observations this one needs; it is skipped when one failed. The
    /// chain is linear up to `csr`; the Node and the Lease each need only a working client
    /// certificate, so a NotReady Node does not hide a stale Lease (which usually explains
    /// it).
    pub depends_on: &'static [CheckId],
    /// What the check looks at and the root causes it names, one paragraph for the
    /// operator.
    pub observes: &'static str,
}

/// Every check, in the contract's order: row `i` is the check whose id is the `i`th
/// variant (a unit test holds this).
pub const CHECKS: [Check; 12] = [
    Check {
        id: CheckId::Config,
        name: "config",
        title: "Configuration",
        depends_on: &[],
        observes: "The flags and the config file, merged and validated as `bootlet run` would; the kubelet's unit and config file. Names a key or flag that does not parse, a node name the API would refuse, and warns when the kubelet would bootstrap or rotate too (its unit passes `--bootstrap-kubeconfig`, or `rotateCertificates: true` without bootlet's drop-in).",
    },
    Check {
        id: CheckId::BootstrapKubeconfig,
        name: "bootstrap-kubeconfig",
        title: "Bootstrap kubeconfig",
        depends_on: &[CheckId::Config],
        observes: "The bootstrap kubeconfig (`--bootstrap-kubeconfig`), read only when no valid client certificate is on disk. Names a missing, unreadable or non-YAML file, one without a server or token, or a token that is not a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`). An `exec` credential plugin is run once (within the exec timeout, at most 5 s): names a plugin that is not installed (with its `installHint`), that fails (its exit status and stderr), hangs, or returns no token or client certificate.",
    },
    Check {
        id: CheckId::ServerReachable,
        name: "server-reachable",
        title: "API server reachable",
        depends_on: &[CheckId::BootstrapKubeconfig],
        observes: "TCP, TLS and one anonymous `GET /livez` to the kubeconfig's server (connect and handshake 2 s each, the request 1.5 s). Names a refused, unresolvable or silent server, and one that completes TLS but never answers HTTP; a 5xx is a warning.",
    },
    Check {
        id: CheckId::CaTrust,
        name: "ca-trust",
        title: "CA trust",
        depends_on: &[CheckId::ServerReachable],
        observes: "Whether the server's certificate chains to the kubeconfig's CA. A mismatch names both CAs by key id and the cluster CA's `sha256:` pin; the pin the endpoint presents is never offered as one to trust.",
    },
    Check {
        id: CheckId::ClockSkew,
        name: "clock-skew",
        title: "Clock skew",
        depends_on: &[CheckId::CaTrust],
        observes: "The node's clock against the server's `Date` header: a warning beyond 30 s, a failure beyond 5 min, or a certificate not yet valid.",
    },
    Check {
        id: CheckId::Authentication,
        name: "authentication",
        title: "Authentication",
        depends_on: &[CheckId::ClockSkew],
        observes: "A SelfSubjectReview with the credential the daemon would use (a valid client certificate, else the bootstrap token or what the exec plugin handed out). Names an expired or deleted token (401) and an unexpected identity.",
    },
    Check {
        id: CheckId::Authorization,
        name: "authorization",
        title: "Authorization",
        depends_on: &[CheckId::Authentication],
        observes: "A SelfSubjectAccessReview: may this identity create CertificateSigningRequests? Names the lost or overwritten `kubeadm:kubelet-bootstrap` ClusterRoleBinding and prints the commands that restore it.",
    },
    Check {
        id: CheckId::Csr,
        name: "csr",
        title: "Certificate signing request",
        depends_on: &[CheckId::Authorization],
        observes: "bootlet's CertificateSigningRequest for this node, if one is open. Names one pending with no auto-approver (the `kubeadm:node-autoapprove-bootstrap` binding), denied, failed, or approved and never issued.",
    },
    Check {
        id: CheckId::ClientCertificate,
        name: "client-certificate",
        title: "Client certificate",
        depends_on: &[CheckId::Csr],
        observes: "The client certificate in the cert dir: for this node, valid now, chaining to the kubeconfig's CA (or, from another signer's CA, accepted by the API server). Names one for another node name, expired, near expiry with rotation off, or from another CA.",
    },
    Check {
        id: CheckId::Node,
        name: "node",
        title: "Node",
        depends_on: &[CheckId::ClientCertificate],
        observes: "The Node object. Names a stale Node from a reinstall (its `machineID` is not this host's), a NotReady Node, `NetworkUnavailable=True`, no `podCIDR`, the cloud provider's `uninitialized` taint or missing zone or instance-type labels; a missing Node is a warning (the kubelet registers it when it starts).",
    },
    Check {
        id: CheckId::Lease,
        name: "lease",
        title: "Node Lease",
        depends_on: &[CheckId::ClientCertificate],
        observes: "The node Lease in `kube-node-lease`. Names a stale Lease and one held by another identity.",
    },
    Check {
        id: CheckId::ServingCsr,
        name: "serving-csr",
        title: "Serving certificate approval",
        depends_on: &[CheckId::ClientCertificate],
        observes: "The newest `kubernetes.io/kubelet-serving` CSR requested by this node (filed by bootlet or by the kubelet's `serverTLSBootstrap`), and whether any kubelet-serving CSR was decided since it was filed. kube-controller-manager never approves these: one pending over a minute with none decided since means no approver acts (deploy `config/approver`, [approver.md](approver.md), or `kubectl certificate approve`); one pending while others are decided is left alone by the approver; a denied one names the rule and message that denied it.",
    },
];

// === impl CheckId ===

impl CheckId {
    pub const ALL: [CheckId; CHECKS.len()] = {
        let mut all = [CheckId::Config; CHECKS.len()];
        let mut i = 0;
        while i < CHECKS.len() {
            all[i] = CHECKS[i].id;
            i += 1;
        }
        all
    };

    /// Its row of [`CHECKS`].
    pub const fn check(self) -> &'static Check {
        &CHECKS[self as usize]
    }

    /// The contract's id.
    pub const fn as_str(self) -> &'static str {
        self.check().name
    }

    /// What the check looks at and the root causes it names.
    pub const fn observes(self) -> &'static str {
        self.check().observes
    }

    /// The checks whose observations this one needs.
    pub const fn depends_on(self) -> &'static [CheckId] {
        self.check().depends_on
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Row `i` is variant `i`, ids are unique, and a check needs only checks before it
    /// (so doctor's single pass in order has every verdict it needs).
    #[test]
    fn the_table_is_in_the_enums_order_and_needs_point_back() {
        for (i, check) in CHECKS.iter().enumerate() {
            assert_eq!(check.id as usize, i, "{} is row {i}", check.name);
            for dep in check.depends_on {
                assert!(*dep < check.id, "{} needs {dep}, a later check", check.name);
            }
            assert!(!check.title.is_empty() && !check.observes.is_empty());
        }
        let names: BTreeSet<_> = CHECKS.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), CHECKS.len());
    }
}
