use testplane::TestPlane;

use super::*;
use crate::identity::outage_tests::settings_in;
use crate::pki::PrivateKeyPem;

const NODE: &str = "check-a";

/// A node dir with the kubelet's kubeconfig (from the plane's cluster) and, when `cn` is
/// given, a certificate for it from the cluster CA installed as the current one.
async fn node(cn: Option<&str>) -> (TestPlane, tempfile::TempDir, Settings) {
    let tp = TestPlane::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings_in(dir.path(), NODE);
    std::fs::write(&settings.bootstrap_kubeconfig, tp.bootstrap_kubeconfig()).unwrap();
    let access = kubeconfig::read(&settings.bootstrap_kubeconfig, false).unwrap();
    let certs = CertDir::open(&settings.cert_dir).unwrap();
    kubeconfig::write_kubelet(
        &settings.kubeconfig,
        &access.server,
        &access.ca_pem,
        &certs.current_path(),
    )
    .unwrap();
    if let Some(cn) = cn {
        let (cert, key) = tp.client_cert(cn, &["system:nodes"]).unwrap();
        certs
            .install(
                &cert,
                &PrivateKeyPem::new(key),
                crate::runtime::clock::now(),
            )
            .unwrap();
    }
    (tp, dir, settings)
}

#[tokio::test]
async fn a_valid_certificate_for_this_node_passes() {
    let (_tp, _dir, settings) = node(Some(&format!("system:node:{NODE}"))).await;
    let info = check(&settings).expect("the identity is in place");
    assert!(info.not_after > crate::runtime::clock::now());
}

#[tokio::test]
async fn no_kubeconfig_means_no_identity() {
    let (_tp, _dir, settings) = node(None).await;
    std::fs::remove_file(&settings.kubeconfig).unwrap();
    let err = check(&settings).unwrap_err();
    assert!(matches!(err, NoIdentity::Kubeconfig(_)), "{err:?}");
}

#[tokio::test]
async fn a_kubeconfig_without_its_certificate_is_no_identity() {
    let (_tp, _dir, settings) = node(None).await;
    // The kubeconfig names the certificate file; reading it says which one is missing.
    let err = crate::runtime::report(&check(&settings).unwrap_err());
    assert!(
        err.contains("kubelet-client-current.pem") && err.contains("No such file"),
        "{err}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_node_is_refused() {
    let (_tp, _dir, settings) = node(Some("system:node:someone-else")).await;
    let err = check(&settings).unwrap_err();
    assert!(matches!(err, NoIdentity::Unusable(_)), "{err:?}");
}
