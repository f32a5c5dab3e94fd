//! What runs on a bench node: bootlet or the peer (the identity codes that join, [`Kind`]),
//! or one of the two references `real bench` sets beside them, the floor and the baseline.

use std::time::Duration;

/// The renewal interval of every subject: bootlet's and the kubelet's default, which the
/// floor and the baseline are told.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Which identity code runs on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `bootlet run`.
    Bootlet,
    /// `kube kubelet-identity`: the kubelet's TLS bootstrap, certificate manager and Lease
    /// controller at the cluster's release.
    Peer,
}

impl Kind {
    pub fn label(self) -> &'static str {
        Subject::from(self).label()
    }
}

/// Any of the five subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Bootlet,
    Peer,
    /// bench/src/bin/floor.rs's child mode: the bare HTTP stack renewing the Lease, no join (the
    /// driver mints its certificate), no bootlet code (`floor.rs`).
    Floor,
    /// bench/baseline.sh: bash + openssl + kubectl (`baseline.rs`).
    Baseline,
    /// `bootlet run --test-lease-http1` (a `test-hooks` build, as bench/run.sh --real makes
    /// it): bootlet with its Lease connection on HTTP/1.1, what HTTP/2 (the default against
    /// kube-apiserver) changes on both sides.
    BootletHttp1,
}

impl From<Kind> for Subject {
    fn from(k: Kind) -> Subject {
        match k {
            Kind::Bootlet => Subject::Bootlet,
            Kind::Peer => Subject::Peer,
        }
    }
}

impl Subject {
    /// In the table's order.
    pub const ALL: [Subject; 5] = [
        Subject::Bootlet,
        Subject::Peer,
        Subject::Floor,
        Subject::Baseline,
        Subject::BootletHttp1,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Subject::Bootlet => "bootlet",
            Subject::Peer => "peer",
            Subject::Floor => "floor",
            Subject::Baseline => "baseline",
            Subject::BootletHttp1 => "bootlet-http1",
        }
    }

    /// The verb its Lease renewals reach kube-apiserver with: `kubectl patch` PATCHes.
    pub fn renewal_verb(self) -> &'static str {
        match self {
            Subject::Baseline => "PATCH",
            _ => "PUT",
        }
    }
}
