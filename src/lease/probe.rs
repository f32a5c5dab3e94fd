//! The `--lease-health-probe` check: a local URL that must answer 2xx within a second.
//! It follows the one proxy policy (`api::proxy`): a probe to loopback never goes
//! through a proxy, whatever `HTTP_PROXY` says; a redirect is an answer, not followed.

use std::time::Duration;

use crate::api::proxy::ProxyPolicy;

/// One local health probe: 2xx within a second counts as healthy.
pub(super) async fn probe(url: &str) -> bool {
    probe_with(url, &CLIENT).await
}

static CLIENT: std::sync::LazyLock<Option<(ProxyPolicy, reqwest::Client)>> =
    std::sync::LazyLock::new(|| client(ProxyPolicy::from_env()));

/// The probe client for `policy`: reqwest's own reading of the environment is off, and
/// each probe's proxy is what `policy` decides for its URL.
fn client(policy: ProxyPolicy) -> Option<(ProxyPolicy, reqwest::Client)> {
    // Probes are plain http (configuration refuses https: there is no trust root for a
    // local endpoint); the empty root store is only what reqwest's builder needs.
    let tls = crate::api::tls::builder()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let decide = policy.clone();
    let proxy = reqwest::Proxy::custom(move |url| {
        decide
            .proxy_for(url.as_str())
            .ok()
            .flatten()
            .map(|p| p.with_credentials().to_string())
    });
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .no_proxy()
        .proxy(proxy)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(1))
        .build()
        .ok()?;
    Some((policy, client))
}

async fn probe_with(url: &str, client: &Option<(ProxyPolicy, reqwest::Client)>) -> bool {
    let Some((policy, client)) = client else {
        return false;
    };
    // An environment proxy bootlet cannot use fails the probe, loudly, rather than
    // silently probing around it.
    if let Err(reason) = policy.proxy_for(url) {
        tracing::warn!(probe = %url, %reason, "cannot probe through the environment's proxy");
        return false;
    }
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;

    use super::*;
    use crate::api::proxy::ProxyEnv;

    /// Answers every connection with `status` and counts the connections.
    async fn answering(status: &'static str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status}\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            }
        });
        (format!("http://{addr}"), hits)
    }

    #[tokio::test]
    async fn loopback_probes_bypass_the_environment_proxy_and_redirects_fail() {
        let (healthz, direct) = answering("200 OK").await;
        let (proxy, proxied) = answering("502 Bad Gateway").await;
        let env = Arc::new(ProxyEnv::from_vars(|k| {
            (k == "HTTP_PROXY").then(|| proxy.clone())
        }));
        let client = client(ProxyPolicy::new(None, env));
        assert!(probe_with(&format!("{healthz}/healthz"), &client).await);
        assert_eq!(direct.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(proxied.load(std::sync::atomic::Ordering::SeqCst), 0);

        // A name that is not loopback goes through the environment's proxy.
        assert!(!probe_with("http://kubelet.invalid:10248/healthz", &client).await);
        assert_eq!(proxied.load(std::sync::atomic::Ordering::SeqCst), 1);

        let (moved, _) = answering("302 Found").await;
        assert!(!probe_with(&format!("{moved}/healthz"), &client).await);
    }
}
