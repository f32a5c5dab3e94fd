//! The node's certificates, one `const` [`Spec`] each: everything that makes one differ
//! from another (signer, usages, the extended key usage the issued certificate must carry,
//! whether it has SANs, its file prefix, its name in logs and its metric label). A leaf:
//! the CSR (`pki::profile`), the verification of what comes back (`pki::verify`), the
//! issuing pipeline (`identity::issue`) and the metrics read the same spec, so a new
//! certificate is one variant and one spec here (docs/architecture.md has the recipe).

/// Which of the node's certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// The kubelet's client certificate (`kubelet-client-current.pem`).
    Client,
    /// The kubelet's serving certificate (`kubelet-server-current.pem`).
    Serving,
}

/// The extended key usage an issued certificate must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eku {
    ClientAuth,
    ServerAuth,
}

/// What one certificate is: pure data, read by every layer.
#[derive(Debug, PartialEq, Eq)]
pub struct Spec {
    /// The CSR's `spec.signerName`.
    pub signer: &'static str,
    /// The CSR's `spec.usages` (our keys are ECDSA: no key encipherment).
    pub usages: &'static [&'static str],
    /// The extended key usage the issued certificate must carry.
    pub eku: Eku,
    /// Whether the request carries the node's addresses as SANs (and the issued
    /// certificate must carry exactly those).
    pub sans: bool,
    /// The cert dir's file prefix, the kubelet's own: `PREFIX-current.pem`,
    /// `PREFIX-YYYY-MM-DD-HH-MM-SS.pem`, `PREFIX.key.tmp`.
    pub file_prefix: &'static str,
    /// What to call it in logs and STATUS=.
    pub describe: &'static str,
    /// The `profile` label of bootlet's metrics.
    pub metric_label: &'static str,
}

/// The kubelet's client certificate.
pub const CLIENT: Spec = Spec {
    signer: "kubernetes.io/kube-apiserver-client-kubelet",
    usages: &["digital signature", "client auth"],
    eku: Eku::ClientAuth,
    sans: false,
    file_prefix: "kubelet-client",
    describe: "client certificate",
    metric_label: "client",
};

/// The kubelet's serving certificate.
pub const SERVING: Spec = Spec {
    signer: "kubernetes.io/kubelet-serving",
    usages: &["digital signature", "server auth"],
    eku: Eku::ServerAuth,
    sans: true,
    file_prefix: "kubelet-server",
    describe: "serving certificate",
    metric_label: "serving",
};

// === impl Purpose ===

impl Purpose {
    /// Every certificate, in the order metrics and docs list them.
    pub const ALL: [Purpose; 2] = [Purpose::Client, Purpose::Serving];

    /// Its spec.
    pub const fn spec(self) -> &'static Spec {
        match self {
            Purpose::Client => &CLIENT,
            Purpose::Serving => &SERVING,
        }
    }
}

// === impl Eku ===

impl Eku {
    /// The CSR usage that asks for it.
    pub const fn usage(self) -> &'static str {
        match self {
            Eku::ClientAuth => "client auth",
            Eku::ServerAuth => "server auth",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// What a new spec gets wrong first: a copied signer, prefix or label (two
    /// certificates overwriting each other's files or series), or usages that do not ask
    /// for the EKU the verification then requires.
    #[test]
    fn every_spec_is_distinct_and_asks_for_what_it_requires() {
        let all = |f: fn(&Spec) -> &'static str| -> BTreeSet<&str> {
            Purpose::ALL.iter().map(|p| f(p.spec())).collect()
        };
        assert_eq!(all(|s| s.signer).len(), Purpose::ALL.len());
        assert_eq!(all(|s| s.file_prefix).len(), Purpose::ALL.len());
        assert_eq!(all(|s| s.describe).len(), Purpose::ALL.len());
        assert_eq!(all(|s| s.metric_label).len(), Purpose::ALL.len());
        for p in Purpose::ALL {
            let spec = p.spec();
            assert!(spec.usages.contains(&"digital signature"), "{p:?}");
            assert!(spec.usages.contains(&spec.eku.usage()), "{p:?}");
            assert!(
                !spec.usages.contains(&"key encipherment"),
                "ECDSA keys: {p:?}"
            );
            assert!(spec.signer.starts_with("kubernetes.io/"), "{p:?}");
        }
    }

    /// `ALL` names every variant (a variant added to the enum and `spec` but not to
    /// `ALL` has no metric series and no docs row).
    #[test]
    fn all_lists_every_purpose() {
        for p in Purpose::ALL {
            // Exhaustive: a new variant fails to compile here until it is considered.
            let index = match p {
                Purpose::Client => 0,
                Purpose::Serving => 1,
            };
            assert_eq!(Purpose::ALL[index], p);
        }
    }
}
