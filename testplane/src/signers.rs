//! kube-controller-manager's two kubelet signers as pure rules: which signer a CSR names,
//! `ValidateKubeletClientCSR` / `ValidateKubeletServingCSR` (order and messages as upstream),
//! and the leaf each signer issues. No IO, no clock; `controllers.rs` decides when to sign.

use std::time::SystemTime;

use rcgen::{ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};

use crate::pki::{LeafSpec, ParsedCsr};
use crate::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

/// The built-in signers the testplane's controllers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubelet {
    /// `kubernetes.io/kube-apiserver-client-kubelet`.
    Client,
    /// `kubernetes.io/kubelet-serving`.
    Serving,
}

// === impl Kubelet ===

impl Kubelet {
    /// The signer a CSR's `spec.signerName` selects; None for signers nobody here runs.
    pub fn from_name(signer: &str) -> Option<Kubelet> {
        match signer {
            KUBELET_CLIENT_SIGNER => Some(Kubelet::Client),
            KUBELET_SERVING_SIGNER => Some(Kubelet::Serving),
            _ => None,
        }
    }

    /// kube-controller-manager's validation for this signer; Err is the Failed message.
    pub fn validate(self, csr: &ParsedCsr, usages: &[String]) -> Result<(), String> {
        match self {
            Kubelet::Client => validate_kubelet_client(csr, usages),
            Kubelet::Serving => validate_kubelet_serving(csr, usages),
        }
    }

    /// The leaf this signer issues for a validated request, with subject `cn`/O from the
    /// request. Client: digitalSignature + clientAuth, no SANs (as the testplane always did).
    /// Serving: the requested DNS/IP SANs, the requested key usages (digitalSignature, plus
    /// keyEncipherment when asked, which kubelets do for RSA keys), serverAuth, CA:FALSE.
    pub fn leaf(
        self,
        cn: &str,
        csr: &ParsedCsr,
        usages: &[String],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<LeafSpec, String> {
        match self {
            Kubelet::Client => Ok(LeafSpec::client(
                cn,
                csr.orgs.clone(),
                not_before,
                not_after,
            )),
            Kubelet::Serving => {
                let mut sans = Vec::with_capacity(csr.dns.len() + csr.ips.len());
                for d in &csr.dns {
                    let name = d
                        .as_str()
                        .try_into()
                        .map_err(|e| format!("DNS subjectAltName {d:?}: {e}"))?;
                    sans.push(SanType::DnsName(name));
                }
                sans.extend(csr.ips.iter().map(|ip| SanType::IpAddress(*ip)));
                let mut key_usages = vec![KeyUsagePurpose::DigitalSignature];
                if usages.iter().any(|u| u == "key encipherment") {
                    key_usages.push(KeyUsagePurpose::KeyEncipherment);
                }
                Ok(LeafSpec {
                    cn: cn.to_string(),
                    orgs: csr.orgs.clone(),
                    sans,
                    not_before,
                    not_after,
                    key_usages,
                    ekus: vec![ExtendedKeyUsagePurpose::ServerAuth],
                    explicit_not_ca: true,
                })
            }
        }
    }
}

/// The usage set as upstream compares it (a set: order and duplicates do not matter).
fn usage_set(usages: &[String]) -> Vec<&str> {
    let mut got: Vec<&str> = usages.iter().map(String::as_str).collect();
    got.sort_unstable();
    got.dedup();
    got
}

/// kube-controller-manager's `ValidateKubeletClientCSR`: the error text is what the signer
/// puts in the Failed condition's message.
pub fn validate_kubelet_client(csr: &ParsedCsr, usages: &[String]) -> Result<(), String> {
    if csr.orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !csr.dns.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if csr.email_sans > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !csr.ips.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if csr.uri_sans > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !csr.cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    let got = usage_set(usages);
    let ok = got == ["client auth", "digital signature"]
        || got == ["client auth", "digital signature", "key encipherment"];
    if !ok {
        return Err("usages did not match [client auth digital signature key encipherment]".into());
    }
    Ok(())
}

/// kube-controller-manager's `ValidateKubeletServingCSR`, in upstream's order: O exactly
/// `[system:nodes]`, at least one DNS or IP SAN, no email and no URI SANs, usages exactly
/// {digital signature, server auth} or that plus key encipherment, CN prefix `system:node:`.
pub fn validate_kubelet_serving(csr: &ParsedCsr, usages: &[String]) -> Result<(), String> {
    if csr.orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if csr.dns.is_empty() && csr.ips.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if csr.email_sans > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if csr.uri_sans > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let got = usage_set(usages);
    let ok = got == ["digital signature", "server auth"]
        || got == ["digital signature", "key encipherment", "server auth"];
    if !ok {
        return Err("usages did not match [digital signature key encipherment server auth]".into());
    }
    if !csr.cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// The testplane's serving signer additionally requires that the requester is the node the
/// certificate names (`spec.username == CN`); kube-controller-manager leaves that to the
/// approver. Err is the Failed message.
pub fn check_serving_requester(csr: &ParsedCsr, username: &str) -> Result<(), String> {
    if username != csr.cn {
        return Err(format!(
            "requester {username:?} is not the node named in the request ({:?}): a kubelet serving certificate must be requested by the node itself",
            csr.cn
        ));
    }
    Ok(())
}

/// What an approver like kubelet-csr-approver decides for a serving CSR: Ok to approve, Err
/// with the reason to deny. It checks the requester and the SANs, not O or usages (the
/// signer fails those), like the real one.
pub fn serving_approver(csr: &ParsedCsr, username: &str) -> Result<(), String> {
    if csr.dns.is_empty() && csr.ips.is_empty() {
        return Err("the x509 certificate request has neither an IP address nor a DNS name".into());
    }
    if !username.starts_with("system:node:") {
        return Err("spec.username is not prefixed with system:node:".into());
    }
    if csr.cn != username {
        return Err("spec.username does not match the request's common name".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::parse_csr;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn csr(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> ParsedCsr {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.subject_alt_names = sans;
        parse_csr(p.serialize_request(&key).unwrap().pem().unwrap().as_bytes()).unwrap()
    }

    fn u(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn dns(s: &str) -> SanType {
        SanType::DnsName(s.try_into().unwrap())
    }

    #[test]
    fn kubelet_client_rules() {
        let good = csr("system:node:a", &["system:nodes"], vec![]);
        assert_eq!(good.cn, "system:node:a");
        validate_kubelet_client(&good, &u(&["digital signature", "client auth"])).unwrap();
        assert!(validate_kubelet_client(&good, &u(&["client auth"])).is_err());
        let bad_o = csr("system:node:a", &["x"], vec![]);
        assert_eq!(
            validate_kubelet_client(&bad_o, &u(&["digital signature", "client auth"])),
            Err("subject organization is not system:nodes".into())
        );
        let san = csr("system:node:a", &["system:nodes"], vec![dns("a.example")]);
        assert!(validate_kubelet_client(&san, &u(&["digital signature", "client auth"])).is_err());
        // Upstream's order (SANs before the CN) and its sorted usage list in the message.
        let san_and_cn = csr("n1", &["system:nodes"], vec![dns("a.example")]);
        assert_eq!(
            validate_kubelet_client(&san_and_cn, &u(&["digital signature", "client auth"])),
            Err("DNS subjectAltNames are not allowed".into())
        );
        assert_eq!(
            validate_kubelet_client(&good, &u(&["digital signature", "server auth"])),
            Err("usages did not match [client auth digital signature key encipherment]".into())
        );
        assert!(parse_csr(b"garbage").is_err());
    }

    #[test]
    fn kubelet_serving_rules_in_upstream_order() {
        let ok_u = u(&["digital signature", "server auth"]);
        let sans = || vec![dns("n1.example"), SanType::IpAddress([10, 0, 0, 1].into())];
        let good = csr("system:node:n1", &["system:nodes"], sans());
        assert_eq!(good.dns, ["n1.example"]);
        assert_eq!(good.ips, [std::net::IpAddr::from([10, 0, 0, 1])]);
        validate_kubelet_serving(&good, &ok_u).unwrap();
        let rsa_u = u(&["key encipherment", "server auth", "digital signature"]);
        validate_kubelet_serving(&good, &rsa_u).unwrap();
        let ip_only = csr(
            "system:node:n1",
            &["system:nodes"],
            vec![SanType::IpAddress([10, 0, 0, 1].into())],
        );
        validate_kubelet_serving(&ip_only, &ok_u).unwrap();

        let table: Vec<(ParsedCsr, Vec<String>, &str)> = vec![
            (
                csr("system:node:n1", &["system:nodes", "x"], sans()),
                ok_u.clone(),
                "subject organization is not system:nodes",
            ),
            (
                csr("system:node:n1", &["system:nodes"], vec![]),
                ok_u.clone(),
                "DNS or IP subjectAltName is required",
            ),
            (
                csr(
                    "system:node:n1",
                    &["system:nodes"],
                    vec![
                        dns("n1"),
                        SanType::Rfc822Name("a@b.example".try_into().unwrap()),
                    ],
                ),
                ok_u.clone(),
                "Email subjectAltNames are not allowed",
            ),
            (
                csr(
                    "system:node:n1",
                    &["system:nodes"],
                    vec![dns("n1"), SanType::URI("spiffe://x/y".try_into().unwrap())],
                ),
                ok_u.clone(),
                "URI subjectAltNames are not allowed",
            ),
            (
                good.clone(),
                u(&["digital signature"]),
                "usages did not match [digital signature key encipherment server auth]",
            ),
            (
                good.clone(),
                u(&["digital signature", "server auth", "client auth"]),
                "usages did not match [digital signature key encipherment server auth]",
            ),
            (
                csr("node:n1", &["system:nodes"], sans()),
                ok_u.clone(),
                "subject common name does not begin with system:node:",
            ),
            // Upstream checks usages before the CN: both wrong reports the usages.
            (
                csr("n1", &["system:nodes"], sans()),
                u(&["server auth"]),
                "usages did not match [digital signature key encipherment server auth]",
            ),
        ];
        for (c, usages, want) in table {
            assert_eq!(
                validate_kubelet_serving(&c, &usages),
                Err(want.to_string()),
                "{c:?} {usages:?}"
            );
        }
    }

    #[test]
    fn serving_requester_and_approver() {
        let c = csr("system:node:n1", &["system:nodes"], vec![dns("n1")]);
        check_serving_requester(&c, "system:node:n1").unwrap();
        assert!(check_serving_requester(&c, "system:bootstrap:abcdef").is_err());
        assert!(check_serving_requester(&c, "system:node:n2").is_err());
        serving_approver(&c, "system:node:n1").unwrap();
        assert!(serving_approver(&c, "system:bootstrap:abcdef").is_err());
        assert!(serving_approver(&c, "system:node:n2").is_err());
        let bare = csr("system:node:n1", &["system:nodes"], vec![]);
        assert!(serving_approver(&bare, "system:node:n1").is_err());
    }

    #[test]
    fn serving_leaf_carries_sans_and_usages() {
        let c = csr(
            "system:node:n1",
            &["system:nodes"],
            vec![dns("n1.example"), SanType::IpAddress([10, 0, 0, 1].into())],
        );
        let now = SystemTime::now();
        let rsa = u(&["digital signature", "key encipherment", "server auth"]);
        let leaf = Kubelet::Serving
            .leaf("system:node:n1", &c, &rsa, now, now)
            .unwrap();
        assert_eq!(leaf.sans.len(), 2);
        assert_eq!(
            leaf.key_usages,
            [
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment
            ]
        );
        assert_eq!(leaf.ekus, [ExtendedKeyUsagePurpose::ServerAuth]);
        assert!(leaf.explicit_not_ca);
        let ec = u(&["digital signature", "server auth"]);
        let leaf = Kubelet::Serving
            .leaf("system:node:n1", &c, &ec, now, now)
            .unwrap();
        assert_eq!(leaf.key_usages, [KeyUsagePurpose::DigitalSignature]);
    }
}
