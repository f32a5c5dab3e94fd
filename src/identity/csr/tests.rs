use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};

use tokio::time::Instant;

use super::approval::ApprovalTracker;
use super::*;
#[allow(unused_imports)]
use crate::pki::CertProfile;

fn condition(type_: &str, reason: &str) -> CertificateSigningRequestCondition {
    CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(format!("{type_} by test")),
        ..CertificateSigningRequestCondition::default()
    }
}

fn with_status(
    conditions: Vec<CertificateSigningRequestCondition>,
    cert: &[u8],
) -> CertificateSigningRequest {
    let key = NodeKey::generate().unwrap();
    let mut csr = build(&key, &CertProfile::client("node-a")).unwrap();
    csr.status = Some(CertificateSigningRequestStatus {
        conditions: Some(conditions),
        certificate: (!cert.is_empty()).then(|| ByteString(cert.to_vec())),
    });
    csr
}

#[test]
fn build_follows_the_contract() {
    let key = NodeKey::generate().unwrap();
    let csr = build(&key, &CertProfile::client("node-a")).unwrap();
    assert_eq!(
        csr.metadata.name.as_deref(),
        Some(pki::csr_name(&key, &CertProfile::client("node-a")).as_str())
    );
    assert!(csr
        .metadata
        .name
        .as_deref()
        .unwrap()
        .starts_with("node-csr-"));
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr.spec.usages.as_deref(),
        Some(&["digital signature".to_string(), "client auth".to_string()][..])
    );
    assert!(pki::csr_matches_key(
        &csr.spec.request.0,
        &key,
        &CertProfile::client("node-a")
    ));
    // The same key gives the same name: a restart finds its own CSR.
    assert_eq!(
        build(&key, &CertProfile::client("node-a"))
            .unwrap()
            .metadata
            .name,
        csr.metadata.name
    );
}

#[test]
fn verdicts() {
    let pending = with_status(vec![], b"");
    assert_eq!(verdict(&pending), (None, false));

    let approved = with_status(vec![condition("Approved", "AutoApproved")], b"");
    assert_eq!(verdict(&approved), (None, true));

    let issued = with_status(vec![condition("Approved", "AutoApproved")], b"PEM");
    assert_eq!(
        verdict(&issued).0,
        Some(Verdict::Issued {
            chain_pem: "PEM".into()
        })
    );

    let denied = with_status(vec![condition("Denied", "Nope")], b"");
    assert!(matches!(verdict(&denied).0, Some(Verdict::Denied { reason, .. }) if reason == "Nope"));

    let failed = with_status(
        vec![
            condition("Approved", "AutoApproved"),
            condition("Failed", "SignerValidationFailure"),
        ],
        b"",
    );
    assert!(matches!(verdict(&failed).0, Some(Verdict::Failed { .. })));

    // A certificate without approval is not trusted as issued.
    let unapproved_cert = with_status(vec![], b"PEM");
    assert_eq!(verdict(&unapproved_cert).0, None);
}

#[tokio::test(start_paused = true)]
async fn the_not_issued_warning_fires_once_after_the_threshold() {
    let mut tracker = ApprovalTracker::new(Duration::from_secs(60));
    let approved = with_status(vec![condition("Approved", "AutoApproved")], b"");
    let mut seen = Vec::new();
    assert!(tracker.observe(&approved, &mut |p| seen.push(p)).is_none());
    let start = Instant::now();
    tracker.warning_due().await;
    assert_eq!(start.elapsed(), Duration::from_secs(60));
    assert!(
        tokio::time::timeout(Duration::from_secs(3600), tracker.warning_due())
            .await
            .is_err()
    );
}
