//! The cluster the fuzz targets share: a CA, an intermediate, the node's key, certificates
//! signed for it (and some that must be refused) and a CSR, made once per run.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bootlet::pki::{csr_pem, CertProfile, NodeKey, Sans};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SubjectPublicKeyInfo,
};

/// The node every target's certificates and kubeconfigs are for.
pub const NODE: &str = "fuzz-node";

/// A CA, an intermediate, the node's key and certificates signed for it (and a few that
/// must be refused), all made once.
pub struct Pki {
    pub now: SystemTime,
    pub ca_pem: String,
    pub node_key: NodeKey,
    pub node_key_pem: String,
    /// Every certificate DER the CAs signed: an accepted leaf must be one of these.
    pub signed: BTreeSet<Vec<u8>>,
    /// Seeds: chains (leaf first), the CA bundle, a kubelet-client file, a CSR.
    pub seeds: Vec<String>,
    pub csr_der: Vec<u8>,
    pub serving: CertProfile,
}

pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(make_pki)
}

fn make_pki() -> Pki {
    let now = testplane::wall_now();
    let hour = Duration::from_secs(3600);
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "fuzz-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = (now - hour).into();
    ca.not_after = (now + 24 * hour).into();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let ca_issuer = Issuer::from_ca_cert_der(ca_cert.der(), &ca_key).unwrap();

    let int_key = KeyPair::generate().unwrap();
    let mut int = ca.clone();
    int.distinguished_name = rcgen::DistinguishedName::new();
    int.distinguished_name
        .push(DnType::CommonName, "fuzz-intermediate");
    let int_cert = int.signed_by(&int_key, &ca_issuer).unwrap();
    let int_issuer = Issuer::from_ca_cert_der(int_cert.der(), &int_key).unwrap();

    let node_key = NodeKey::generate().unwrap();
    let node_spki = SubjectPublicKeyInfo::from_der(&node_key.public_key_der()).unwrap();
    let other_key = KeyPair::generate().unwrap();
    let other_spki =
        SubjectPublicKeyInfo::from_der(&rcgen::PublicKeyData::subject_public_key_info(&other_key))
            .unwrap();
    let serving = CertProfile::serving(
        NODE,
        Sans::new(
            vec!["fuzz.example".into()],
            vec!["10.0.0.1".parse().unwrap()],
        ),
    );

    let leaf = |cn: &str, nb: SystemTime, na: SystemTime, server: bool| {
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.not_before = nb.into();
        p.not_after = na.into();
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.is_ca = IsCa::ExplicitNoCa;
        p.use_authority_key_identifier_extension = true;
        if server {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            p.subject_alt_names = vec![
                SanType::DnsName("fuzz.example".try_into().unwrap()),
                SanType::IpAddress("10.0.0.1".parse().unwrap()),
            ];
        } else {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        p
    };
    let cn = format!("system:node:{NODE}");
    let valid = (now - 5 * 60 * Duration::from_secs(1), now + hour);
    let mut signed = BTreeSet::new();
    let mut sign =
        |p: CertificateParams, spki: &SubjectPublicKeyInfo, issuer: &Issuer<'_, &KeyPair>| {
            let cert = p.signed_by(spki, issuer).unwrap();
            signed.insert(cert.der().to_vec());
            cert.pem()
        };
    let good = sign(leaf(&cn, valid.0, valid.1, false), &node_spki, &ca_issuer);
    let via_int = sign(leaf(&cn, valid.0, valid.1, false), &node_spki, &int_issuer);
    let other_node = sign(
        leaf("system:node:other", valid.0, valid.1, false),
        &node_spki,
        &ca_issuer,
    );
    let expired = sign(
        leaf(&cn, now - 2 * hour, now - hour, false),
        &node_spki,
        &ca_issuer,
    );
    let other_key_leaf = sign(leaf(&cn, valid.0, valid.1, false), &other_spki, &ca_issuer);
    let serving_leaf = sign(leaf(&cn, valid.0, valid.1, true), &node_spki, &ca_issuer);
    signed.insert(int_cert.der().to_vec());
    signed.insert(ca_cert.der().to_vec());

    let node_key_pem = node_key.to_pem().as_str().to_string();
    let csr = csr_pem(&node_key, &CertProfile::client(NODE)).unwrap();
    let csr_der = x509_parser::pem::Pem::iter_from_buffer(csr.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let ca_pem = ca_cert.pem();
    let int_pem = int_cert.pem();
    let seeds = vec![
        good.clone(),
        format!("{via_int}{int_pem}"),
        format!("{via_int}{int_pem}{ca_pem}"),
        format!("{good}{node_key_pem}"),
        format!("{good}\n{int_pem}\r\n{node_key_pem}"),
        other_node,
        expired,
        other_key_leaf,
        serving_leaf,
        ca_pem.clone(),
        csr.clone(),
        node_key_pem.clone(),
        format!("junk before\n{good}junk after\n"),
    ];
    Pki {
        now,
        ca_pem,
        node_key,
        node_key_pem,
        signed,
        seeds,
        csr_der,
        serving,
    }
}
