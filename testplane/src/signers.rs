//! kube-controller-manager's two kubelet signers as pure rules: which signer a CSR names,
//! `ValidateKubeletClientCSR` / `ValidateKubeletServingCSR` (order and messages as upstream),
//! the leaf each signer issues, and the broken answers of the hostile `Signer` modes
//! (another key, node or CA, expired, not yet valid, the wrong usage, a 10,000-certificate
//! chain, a truncated PEM). No IO, no clock; `controllers.rs` decides when to sign.

use std::time::{Duration, SystemTime};

use rcgen::{ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};

use crate::pki::{signing_window, Ca, LeafSpec, ParsedCsr};
use crate::{Signer, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

/// How far outside its window an `Expired` or `NotYetValid` certificate is: far beyond
/// any tolerance for clock skew.
const OFF_BY: Duration = Duration::from_secs(3600);

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

/// The validity a correct certificate gets: `lifetime` from `now`, notBefore backdated by
/// `backdate` (see [`signing_window`]).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub lifetime: Duration,
    pub backdate: Duration,
    pub now: SystemTime,
}

/// What the signer puts in `status.certificate` for a validated request in `mode`: the
/// correct leaf (`Normal`) or the broken answer the mode stands for. `cas` is the cluster
/// CA, the one nobody trusts, then the second CA the server trusts for client
/// certificates. Err is the Failed message. (`Signer::None` never gets here: it does not
/// issue.)
pub fn issue(
    mode: Signer,
    kubelet: Kubelet,
    cas: [&Ca; 3],
    csr: &ParsedCsr,
    usages: &[String],
    window: Window,
) -> Result<String, String> {
    let [cluster, rogue, second] = cas;
    let ca = match mode {
        Signer::WrongCa => rogue,
        Signer::SecondCa { .. } => second,
        _ => cluster,
    };
    let (not_before, not_after) = match mode {
        Signer::Expired => (window.now - 2 * OFF_BY, window.now - OFF_BY),
        Signer::NotYetValid => (window.now + OFF_BY, window.now + 2 * OFF_BY),
        _ => signing_window(window.now, window.lifetime, window.backdate, ca),
    };
    let cn = match mode {
        Signer::WrongNode => "system:node:wrong-node",
        _ => &csr.cn,
    };
    let mut spec = kubelet.leaf(cn, csr, usages, not_before, not_after)?;
    if mode == Signer::WrongUsage {
        spec.ekus = match kubelet {
            Kubelet::Client => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Kubelet::Serving => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
    }
    let signed = match mode {
        Signer::WrongKey => ca.issue_with_new_key(&spec).map(|(cert, _)| cert),
        _ => ca.issue(&csr.spki_der, &spec),
    };
    let leaf = signed.map_err(|e| format!("error signing certificate: {e}"))?;
    Ok(match mode {
        Signer::LongChain(n) => {
            let extra = cluster.cert_pem();
            let mut chain = String::with_capacity(leaf.len() + extra.len() * n);
            chain.push_str(&leaf);
            for _ in 1..n {
                chain.push_str(extra);
            }
            chain
        }
        Signer::TruncatedPem => leaf[..leaf.len() / 2].to_string(),
        Signer::SecondCa { chain: true } => format!("{leaf}{}", second.cert_pem()),
        _ => leaf,
    })
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
    fn hostile_modes_issue_what_they_say() {
        use crate::pki::pem_blocks;
        let (ca, rogue) = (Ca::generate("c").unwrap(), Ca::generate("r").unwrap());
        let second = Ca::generate("s").unwrap();
        let c = csr("system:node:n1", &["system:nodes"], vec![]);
        let usages = u(&["digital signature", "client auth"]);
        let now = crate::wall_now();
        let window = Window {
            lifetime: Duration::from_secs(600),
            backdate: Duration::ZERO,
            now,
        };
        let issue = |mode| {
            issue(
                mode,
                Kubelet::Client,
                [&ca, &rogue, &second],
                &c,
                &usages,
                window,
            )
        };
        let leaf = |pem: &str| {
            let der = pem_blocks(pem.as_bytes(), "CERTIFICATE").remove(0);
            let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
            let eku = x.extended_key_usage().unwrap().unwrap().value;
            (
                x.subject_pki.raw.to_vec(),
                x.validity().not_before.timestamp(),
                x.validity().not_after.timestamp(),
                x.issuer().to_string(),
                (eku.client_auth, eku.server_auth),
            )
        };
        let unix =
            |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
        let good = leaf(&issue(Signer::Normal).unwrap());
        assert_eq!(good.0, c.spki_der);
        assert_eq!(good.4, (true, false));
        assert!(good.1 <= unix(now) && unix(now) < good.2);
        assert_ne!(leaf(&issue(Signer::WrongKey).unwrap()).0, c.spki_der);
        assert_eq!(leaf(&issue(Signer::WrongCa).unwrap()).3, "CN=r");
        let second_leaf = issue(Signer::SecondCa { chain: false }).unwrap();
        assert_eq!(leaf(&second_leaf).3, "CN=s");
        assert_eq!(leaf(&second_leaf).0, c.spki_der);
        assert_eq!(pem_blocks(second_leaf.as_bytes(), "CERTIFICATE").len(), 1);
        let with_chain = issue(Signer::SecondCa { chain: true }).unwrap();
        let blocks = pem_blocks(with_chain.as_bytes(), "CERTIFICATE");
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1], second.cert_der());
        assert!(leaf(&issue(Signer::Expired).unwrap()).2 < unix(now));
        assert!(leaf(&issue(Signer::NotYetValid).unwrap()).1 > unix(now) + 3000);
        assert_eq!(leaf(&issue(Signer::WrongUsage).unwrap()).4, (false, true));
        let chain = issue(Signer::LongChain(10_000)).unwrap();
        assert_eq!(pem_blocks(chain.as_bytes(), "CERTIFICATE").len(), 10_000);
        let cut = issue(Signer::TruncatedPem).unwrap();
        assert!(cut.starts_with("-----BEGIN CERTIFICATE-----") && !cut.contains("END"));
        assert!(pem_blocks(cut.as_bytes(), "CERTIFICATE").is_empty());
    }

    #[test]
    fn serving_leaf_carries_sans_and_usages() {
        let c = csr(
            "system:node:n1",
            &["system:nodes"],
            vec![dns("n1.example"), SanType::IpAddress([10, 0, 0, 1].into())],
        );
        let now = crate::wall_now();
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
