//! The `--lease-health-probe` check: a local URL that must answer 2xx within a second.

use std::time::Duration;

/// One local health probe: 2xx within a second counts as healthy.
pub(super) async fn probe(url: &str) -> bool {
    static CLIENT: std::sync::OnceLock<Option<reqwest::Client>> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        // Probes are plain http on loopback; an https URL finds no trust root and fails.
        let tls = crate::apiserver::tls::builder()
            .ok()?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(Duration::from_secs(1))
            .build()
            .ok()
    });
    match client {
        Some(c) => c
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success()),
        None => false,
    }
}
