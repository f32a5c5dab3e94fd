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
