//! The approver's judgement, pure: one kubelet-serving CSR, the Nodes and the [`Policy`] in,
//! a [`Decision`] out. No IO, no clock. Every rule that can refuse a CSR is a [`Rule`]; its
//! name is the Denied condition's reason and the `rule` label of the denial counter.
//!
//! The rules, in the order they are checked (the first that fails names the refusal):
//! the requester is `system:node:NAME` in `system:nodes`; the PKCS#10 request parses, its
//! subject is CN `system:node:NAME`, O `system:nodes`; the usages are exactly `digital
//! signature` + `server auth` (+ `key encipherment` for an RSA key only); `expirationSeconds`
//! is at most the policy's maximum; the request has at least one SAN, DNS names and IPs
//! only; no SAN belongs to another Node; every IP is one of Node NAME's addresses; every DNS
//! name is one of its addresses, its name (when allowed) or matches the policy's pattern.
//! Names are never resolved: what the Node reports is the only evidence.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use regex_automata::meta::Regex;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer as _, Pem};

/// The signer this approver judges; every other CSR is ignored.
pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The requester prefix of a node identity.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node identity is in.
pub const NODES_GROUP: &str = "system:nodes";
/// The longest value quoted in a denial message (the message as a whole stays short).
const MAX_QUOTED: usize = 128;

/// What the approver may accept beyond the Node's own addresses.
#[derive(Debug, Clone)]
pub struct Policy {
    /// A DNS SAN equal to the node name is accepted (the kubelet requests its hostname,
    /// which is its node name unless `--hostname-override` differs).
    pub allow_node_name_dns: bool,
    /// DNS SANs matching this pattern (anchored at both ends) are accepted too.
    pub dns_pattern: Option<DnsPattern>,
    /// The longest `spec.expirationSeconds` accepted (none requested is fine: the signer's
    /// own duration applies).
    pub max_expiration_seconds: i32,
}

/// A compiled, fully anchored pattern for DNS names, with its source for logs.
#[derive(Clone)]
pub struct DnsPattern {
    source: String,
    regex: Regex,
}

impl DnsPattern {
    /// `pattern` must match a whole DNS name (it is anchored: `^(?:pattern)$`).
    pub fn new(pattern: &str) -> Result<Self, String> {
        let regex = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?;
        Ok(Self {
            source: pattern.to_string(),
            regex,
        })
    }

    pub fn is_match(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for DnsPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DnsPattern({:?})", self.source)
    }
}

/// Why a CSR is refused: the rule, and the value that broke it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// spec.username is not `system:node:NAME`.
    RequesterNotNode,
    /// spec.groups lacks `system:nodes`.
    RequesterNotInNodesGroup,
    /// spec.request is not a PEM PKCS#10 request with a valid signature.
    RequestUnparseable,
    /// The request's CN is not the requester.
    SubjectMismatch,
    /// The request's O is not exactly `system:nodes`.
    OrganizationMismatch,
    /// The usages are not the kubelet-serving ones for the key type.
    UsagesMismatch,
    /// expirationSeconds is above the policy's maximum.
    ExpirationTooLong,
    /// The request has no DNS or IP SAN.
    NoSubjectAltName,
    /// The request has an email, URI or other SAN.
    UnsupportedSubjectAltName,
    /// A SAN is an address or the name of another Node.
    SanOfAnotherNode,
    /// An IP SAN is not one of the Node's addresses.
    IpNotOfNode,
    /// A DNS SAN is not one of the Node's addresses, its name, nor matches the pattern.
    DnsNotOfNode,
}

impl Rule {
    /// Every rule, for metrics (each series exists from the start).
    pub const ALL: [Rule; 12] = [
        Rule::RequesterNotNode,
        Rule::RequesterNotInNodesGroup,
        Rule::RequestUnparseable,
        Rule::SubjectMismatch,
        Rule::OrganizationMismatch,
        Rule::UsagesMismatch,
        Rule::ExpirationTooLong,
        Rule::NoSubjectAltName,
        Rule::UnsupportedSubjectAltName,
        Rule::SanOfAnotherNode,
        Rule::IpNotOfNode,
        Rule::DnsNotOfNode,
    ];

    /// The Denied condition's reason and the metric label.
    pub const fn reason(self) -> &'static str {
        match self {
            Rule::RequesterNotNode => "RequesterNotNode",
            Rule::RequesterNotInNodesGroup => "RequesterNotInNodesGroup",
            Rule::RequestUnparseable => "RequestUnparseable",
            Rule::SubjectMismatch => "SubjectMismatch",
            Rule::OrganizationMismatch => "OrganizationMismatch",
            Rule::UsagesMismatch => "UsagesMismatch",
            Rule::ExpirationTooLong => "ExpirationTooLong",
            Rule::NoSubjectAltName => "NoSubjectAltName",
            Rule::UnsupportedSubjectAltName => "UnsupportedSubjectAltName",
            Rule::SanOfAnotherNode => "SanOfAnotherNode",
            Rule::IpNotOfNode => "IpNotOfNode",
            Rule::DnsNotOfNode => "DnsNotOfNode",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// A refusal: the rule and one sentence naming the value (already one line and bounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: Rule,
    pub detail: String,
}

/// What to do with one CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not ours to judge: another signer, or already decided.
    Ignore,
    /// Every rule holds.
    Approve { node: String },
    /// A rule fails.
    Deny(Refusal),
    /// The requester's Node does not exist (yet): look again later.
    NodeMissing { node: String },
}

/// The addresses a Node reports, as the approver compares them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddrs {
    pub name: String,
    pub ips: BTreeSet<IpAddr>,
    /// Lower-cased.
    pub dns: BTreeSet<String>,
}

impl NodeAddrs {
    /// A Node's `status.addresses`: `InternalIP`/`ExternalIP` (and a `Hostname` that is an
    /// IP) as IPs, `Hostname`/`InternalDNS`/`ExternalDNS` as DNS names.
    pub fn from_node(node: &Node) -> NodeAddrs {
        let mut out = NodeAddrs {
            name: node.metadata.name.clone().unwrap_or_default(),
            ..NodeAddrs::default()
        };
        let addrs = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        for a in addrs.into_iter().flatten() {
            match (a.type_.as_str(), a.address.parse::<IpAddr>()) {
                (_, Ok(ip)) => {
                    out.ips.insert(ip);
                }
                ("Hostname" | "InternalDNS" | "ExternalDNS", Err(_)) => {
                    out.dns.insert(a.address.to_ascii_lowercase());
                }
                _ => {}
            }
        }
        out
    }
}

/// Whether a CSR carries an Approved, Denied or Failed condition: a decided CSR is never
/// touched again.
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied" | "Failed"))
        })
}

/// The node a kubelet-serving CSR is requested for (its requester's node name), if the
/// requester is a node.
pub fn requested_node(csr: &CertificateSigningRequest) -> Option<&str> {
    csr.spec
        .username
        .as_deref()?
        .strip_prefix(NODE_USER_PREFIX)
        .filter(|n| !n.is_empty())
}

/// The request's fields the rules read.
struct Request {
    cn: Vec<String>,
    orgs: Vec<String>,
    rsa: bool,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    other_sans: Vec<String>,
}

/// The decision on `csr` given every Node (`nodes`, the requester's among them or not).
pub fn decide(csr: &CertificateSigningRequest, nodes: &[NodeAddrs], policy: &Policy) -> Decision {
    if csr.spec.signer_name != SIGNER || is_decided(csr) {
        return Decision::Ignore;
    }
    match judge(csr, nodes, policy) {
        Ok(node) => Decision::Approve { node },
        Err(Judged::Refused(r)) => Decision::Deny(r),
        Err(Judged::NodeMissing(node)) => Decision::NodeMissing { node },
    }
}

enum Judged {
    Refused(Refusal),
    NodeMissing(String),
}

fn refuse(rule: Rule, detail: String) -> Judged {
    Judged::Refused(Refusal { rule, detail })
}

/// `value` quoted for a message: one line, bounded.
fn q(value: &str) -> String {
    let line = crate::runtime::text::one_line(value);
    format!("{:?}", crate::runtime::text::clip(&line, MAX_QUOTED))
}

/// Every rule in order, the first broken one refusing: the Node the CSR may be approved
/// for, or why not.
fn judge(
    csr: &CertificateSigningRequest,
    nodes: &[NodeAddrs],
    p: &Policy,
) -> Result<String, Judged> {
    let spec = &csr.spec;
    let user = spec.username.as_deref().unwrap_or_default();
    let node = check_requester(csr, user)?;
    let req = parse_request(&spec.request.0).map_err(|why| {
        refuse(
            Rule::RequestUnparseable,
            format!("spec.request: {}", q(&why)),
        )
    })?;
    check_subject(&req, user)?;
    check_usages(spec.usages.as_deref().unwrap_or_default(), req.rsa)?;
    check_expiration(spec.expiration_seconds, p)?;
    check_san_kinds(&req)?;
    let Some(own) = nodes.iter().find(|n| n.name == node) else {
        return Err(Judged::NodeMissing(node.to_string()));
    };
    check_sans(node, own, nodes, &req, p)?;
    Ok(node.to_string())
}

/// The requester is a node (`system:node:NAME`) in the nodes group: its name.
fn check_requester<'a>(csr: &'a CertificateSigningRequest, user: &str) -> Result<&'a str, Judged> {
    let Some(node) = requested_node(csr) else {
        return Err(refuse(
            Rule::RequesterNotNode,
            format!("requester {} is not system:node:NAME", q(user)),
        ));
    };
    let groups = csr.spec.groups.as_deref().unwrap_or_default();
    if !groups.iter().any(|g| g == NODES_GROUP) {
        return Err(refuse(
            Rule::RequesterNotInNodesGroup,
            format!("requester {} is not in group {NODES_GROUP}", q(user)),
        ));
    }
    Ok(node)
}

/// The request's subject is the requester: CN the user, O the nodes group.
fn check_subject(req: &Request, user: &str) -> Result<(), Judged> {
    if req.cn != [user] {
        return Err(refuse(
            Rule::SubjectMismatch,
            format!(
                "subject CN {} is not the requester {}",
                q(&req.cn.join(",")),
                q(user)
            ),
        ));
    }
    if req.orgs != [NODES_GROUP] {
        return Err(refuse(
            Rule::OrganizationMismatch,
            format!("subject O {} is not {NODES_GROUP}", q(&req.orgs.join(","))),
        ));
    }
    Ok(())
}

/// `expirationSeconds`, when asked for, within the policy's maximum.
fn check_expiration(asked: Option<i32>, p: &Policy) -> Result<(), Judged> {
    if let Some(secs) = asked {
        if secs > p.max_expiration_seconds {
            return Err(refuse(
                Rule::ExpirationTooLong,
                format!(
                    "expirationSeconds {secs} is above the maximum {}",
                    p.max_expiration_seconds
                ),
            ));
        }
    }
    Ok(())
}

/// Only DNS and IP SANs, and at least one of them.
fn check_san_kinds(req: &Request) -> Result<(), Judged> {
    if let Some(other) = req.other_sans.first() {
        return Err(refuse(
            Rule::UnsupportedSubjectAltName,
            format!("SAN {} is neither a DNS name nor an IP", q(other)),
        ));
    }
    if req.dns.is_empty() && req.ips.is_empty() {
        return Err(refuse(
            Rule::NoSubjectAltName,
            "the request has no DNS or IP SAN".into(),
        ));
    }
    Ok(())
}

/// Exactly `digital signature` + `server auth`, plus `key encipherment` for an RSA key
/// only (the kubelet stopped requesting it for ECDSA keys in 1.27, and the signer never
/// needed it for them).
fn check_usages(usages: &[String], rsa: bool) -> Result<(), Judged> {
    let got: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let base = BTreeSet::from(["digital signature", "server auth"]);
    let mut with_ke = base.clone();
    with_ke.insert("key encipherment");
    let ok = got == base || (rsa && got == with_ke);
    if ok && got.len() == usages.len() {
        return Ok(());
    }
    let key = if rsa { "an RSA" } else { "a non-RSA" };
    Err(refuse(
        Rule::UsagesMismatch,
        format!(
            "usages {} are not digital signature + server auth{} for {key} key",
            q(&usages.join(", ")),
            if rsa { " (+ key encipherment)" } else { "" }
        ),
    ))
}

/// Another Node's claim first (the most telling refusal), then each SAN against the
/// requester's own Node.
fn check_sans(
    node: &str,
    own: &NodeAddrs,
    nodes: &[NodeAddrs],
    req: &Request,
    p: &Policy,
) -> Result<(), Judged> {
    for other in nodes.iter().filter(|n| n.name != node) {
        if let Some(ip) = req
            .ips
            .iter()
            .find(|ip| other.ips.contains(ip) && !own.ips.contains(ip))
        {
            return Err(refuse(
                Rule::SanOfAnotherNode,
                format!("IP SAN {ip} is an address of Node {}", q(&other.name)),
            ));
        }
        let claims = |d: &String| other.dns.contains(d) || *d == other.name.to_ascii_lowercase();
        if let Some(d) = req.dns.iter().find(|d| claims(d) && !own.dns.contains(*d)) {
            return Err(refuse(
                Rule::SanOfAnotherNode,
                format!("DNS SAN {} names Node {}", q(d), q(&other.name)),
            ));
        }
    }
    if let Some(ip) = req.ips.iter().find(|ip| !own.ips.contains(ip)) {
        return Err(refuse(
            Rule::IpNotOfNode,
            format!("IP SAN {ip} is not an address of Node {}", q(node)),
        ));
    }
    let allowed = |d: &String| {
        own.dns.contains(d)
            || (p.allow_node_name_dns && *d == node.to_ascii_lowercase())
            || p.dns_pattern.as_ref().is_some_and(|r| r.is_match(d))
    };
    if let Some(d) = req.dns.iter().find(|d| !allowed(d)) {
        return Err(refuse(
            Rule::DnsNotOfNode,
            format!("DNS SAN {} is not an address of Node {}", q(d), q(node)),
        ));
    }
    Ok(())
}

/// The PEM PKCS#10 request: subject CN and O, key type, SANs. Its signature must verify
/// (a request not signed by its own key proves nothing about the key).
fn parse_request(pem: &[u8]) -> Result<Request, String> {
    let block = Pem::iter_from_buffer(pem)
        .next()
        .ok_or("no PEM block")?
        .map_err(|e| format!("PEM: {e}"))?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(format!(
            "PEM block {:?} is not a CERTIFICATE REQUEST",
            block.label
        ));
    }
    let (_, csr) =
        X509CertificationRequest::from_der(&block.contents).map_err(|e| format!("PKCS#10: {e}"))?;
    csr.verify_signature()
        .map_err(|e| format!("signature: {e}"))?;
    let info = &csr.certification_request_info;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| {
        a.as_str()
            .map(str::to_string)
            .unwrap_or_else(|_| "<non-string>".into())
    };
    let cn = info.subject.iter_common_name().map(text).collect();
    let orgs = info.subject.iter_organization().map(text).collect();
    let rsa =
        info.subject_pki.algorithm.algorithm == x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION;
    let mut req = Request {
        cn,
        orgs,
        rsa,
        dns: vec![],
        ips: vec![],
        other_sans: vec![],
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(d) => req.dns.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(bytes) => match ip_from(bytes) {
                    Some(ip) => req.ips.push(ip),
                    None => req.other_sans.push(format!("IP of {} bytes", bytes.len())),
                },
                other => req.other_sans.push(other.to_string()),
            }
        }
    }
    Ok(req)
}

fn ip_from(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
