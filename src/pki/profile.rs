//! One node certificate to request: its [`Purpose`] (whose const spec in
//! [`crate::purpose`] holds the signer, usages, required EKU, file prefix and names), the
//! node and the SANs. Pure data: the issuing pipeline (`identity::issue`) is the same for
//! every profile.

use std::net::IpAddr;

pub use crate::purpose::{Eku, Purpose, Spec};

use super::{NODE_CN_PREFIX, NODE_GROUP};

/// Subject alternative names of a serving certificate: DNS names and IPs, sorted and
/// de-duplicated (so the same set always makes the same request and CSR name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Sans {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// One node certificate: what the CSR asks for and what the issued certificate must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertProfile {
    pub purpose: Purpose,
    /// The node name: CN `system:node:NODE`, O `system:nodes` for both purposes.
    pub node: String,
    /// Empty for the client certificate.
    pub sans: Sans,
}

// === impl Sans ===

impl Sans {
    /// Sorted and de-duplicated.
    pub fn new(mut dns: Vec<String>, mut ips: Vec<IpAddr>) -> Sans {
        dns.sort();
        dns.dedup();
        ips.sort();
        ips.dedup();
        Sans { dns, ips }
    }

    pub fn is_empty(&self) -> bool {
        self.dns.is_empty() && self.ips.is_empty()
    }
}

// === impl CertProfile ===

impl CertProfile {
    /// The client certificate of `node`.
    pub fn client(node: &str) -> CertProfile {
        CertProfile {
            purpose: Purpose::Client,
            node: node.to_string(),
            sans: Sans::default(),
        }
    }

    /// The serving certificate of `node` for `sans`.
    pub fn serving(node: &str, sans: Sans) -> CertProfile {
        CertProfile {
            purpose: Purpose::Serving,
            node: node.to_string(),
            sans,
        }
    }

    /// Its const spec.
    pub fn spec(&self) -> &'static Spec {
        self.purpose.spec()
    }

    /// The CSR's `spec.signerName`.
    pub fn signer(&self) -> &'static str {
        self.spec().signer
    }

    /// The CSR's `spec.usages`.
    pub fn usages(&self) -> &'static [&'static str] {
        self.spec().usages
    }

    /// `(CN, O)`: `("system:node:NODE", "system:nodes")`.
    pub fn subject(&self) -> (String, String) {
        (
            format!("{NODE_CN_PREFIX}{}", self.node),
            NODE_GROUP.to_string(),
        )
    }

    /// The cert dir's file prefix: `kubelet-client` or `kubelet-server`.
    pub fn file_prefix(&self) -> &'static str {
        self.spec().file_prefix
    }

    /// What to call it in logs and STATUS=.
    pub fn describe(&self) -> &'static str {
        self.spec().describe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_profiles_differ_in_signer_usage_and_files() {
        let client = CertProfile::client("n1");
        let serving = CertProfile::serving("n1", Sans::new(vec!["n1".into()], vec![]));
        assert_eq!(
            client.signer(),
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        assert_eq!(serving.signer(), "kubernetes.io/kubelet-serving");
        assert_eq!(client.usages(), ["digital signature", "client auth"]);
        assert_eq!(serving.usages(), ["digital signature", "server auth"]);
        assert_eq!(client.file_prefix(), "kubelet-client");
        assert_eq!(serving.file_prefix(), "kubelet-server");
        assert_eq!(client.subject(), serving.subject());
    }

    #[test]
    fn sans_are_sorted_and_deduplicated() {
        let a = Sans::new(
            vec!["b".into(), "a".into(), "b".into()],
            vec!["10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()],
        );
        assert_eq!(a.dns, ["a", "b"]);
        assert_eq!(a.ips[0].to_string(), "10.0.0.1");
        assert_eq!(
            a,
            Sans::new(
                vec!["a".into(), "b".into()],
                vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()]
            )
        );
    }
}
