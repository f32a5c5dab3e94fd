//! One proxy policy for every connection (issue #10 §4): the kubeconfig's `proxy-url`, else
//! `HTTPS_PROXY`/`HTTP_PROXY` honouring `NO_PROXY`, never for loopback. The real binary
//! against the testplane behind a recording CONNECT proxy (`testplane::proxy`).
//!
//! The server URL's host, `kubernetes.default.svc`, resolves nowhere outside a cluster: a
//! request that reaches the testplane at all went through the proxy, which tunnels every
//! CONNECT to the testplane.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use support::{plane, Agent, NodeDir, WAIT};
use testplane::proxy::{ConnectProxy, ProxyRequest};
use testplane::{Event, TestPlane};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const HOUR: Duration = Duration::from_secs(3600);
/// In the testplane's serving certificate, and unresolvable here.
const NAME: &str = "kubernetes.default.svc";

/// A bootstrap kubeconfig for `server` with extra `cluster` lines (already indented).
fn bootstrap_kubeconfig(tp: &TestPlane, server: &str, cluster: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(tp.ca_pem());
    let token = tp.create_token(None);
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: boot\n\
         clusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n{cluster}\
         users:\n- name: u\n  user:\n    token: {token}\n\
         contexts:\n- name: boot\n  context: {{cluster: c, user: u}}\n"
    )
}

fn args(node: &NodeDir, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a = node.args(name);
    let lease = ["--lease-renew-interval", "1s", "--lease-duration", "3s"];
    a.extend(lease.iter().chain(extra).map(|s| s.to_string()));
    a
}

/// The proxy variables all unset (empty), then `set`: the test's own environment must
/// not decide the outcome.
fn proxy_env<'a>(set: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env: Vec<(&str, &str)> = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    .into_iter()
    .map(|k| (k, ""))
    .collect();
    env.extend_from_slice(set);
    env
}

/// Collects TLS handshakes (conn → ALPN) until `n` renewals of `node`'s Lease; returns the
/// ALPN of the connections the renewals came on.
async fn renewal_alpns(
    events: &mut tokio::sync::broadcast::Receiver<Event>,
    node: &str,
    n: usize,
) -> Vec<Option<String>> {
    let mut alpn: HashMap<u64, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, async {
        while out.len() < n {
            match events.recv().await {
                Ok(Event::TlsHandshake { conn, alpn: a, .. }) => {
                    alpn.insert(conn, a);
                }
                Ok(Event::LeaseRenewed { name, conn, .. }) if name == node => {
                    out.push(alpn.get(&conn).cloned().flatten());
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event stream ended: {e}"),
            }
        }
    })
    .await
    .expect("Lease renewals");
    out
}

/// Every request the proxy saw was a tunnel to `NAME:port`.
fn all_tunnels_to_the_server(seen: &[ProxyRequest], port: u16, auth: Option<&str>) {
    assert!(!seen.is_empty(), "the proxy saw nothing");
    for r in seen {
        assert_eq!(r.method, "CONNECT", "{r:?}");
        assert_eq!(r.target, format!("{NAME}:{port}"), "{r:?}");
        assert_eq!(r.proxy_authorization.as_deref(), auth, "{r:?}");
        assert!(r.tunnelled, "{r:?}");
    }
}

/// Before: `proxy-url` was ignored, so bootstrap dialled `kubernetes.default.svc` directly
/// and failed. Now bootstrap (reqwest) and the Lease loop's own connection (both
/// HTTP/2, chosen by ALPN end to end inside the tunnel) tunnel through it with Basic auth from its userinfo, and the kubelet
/// kubeconfig keeps `proxy-url`, so kubectl reaches the server the same way.
#[tokio::test]
async fn proxy_url_carries_bootstrap_and_lease_renewals() {
    let tp = plane(HOUR).await;
    let port = tp.addr().port();
    // base64("bob:s@cret"), the decoded userinfo of the URL below.
    let basic = "Basic Ym9iOnNAY3JldA==";
    let proxy = ConnectProxy::start(tp.addr(), Some(basic.into())).await;
    let proxy_url = format!("http://bob:s%40cret@{}", proxy.addr());
    let node = NodeDir::new(&bootstrap_kubeconfig(
        &tp,
        &format!("https://{NAME}:{port}"),
        &format!("    proxy-url: {proxy_url}\n"),
    ));
    let mut events = tp.events();
    let agent = Agent::spawn_env(&args(&node, "proxied", &[]), &proxy_env(&[]));
    agent.wait_for_log("client certificate installed").await;
    let alpns = renewal_alpns(&mut events, "proxied", 2).await;
    assert!(
        alpns.iter().all(|a| a.as_deref() == Some("h2")),
        "renewals ride the Lease loop's HTTP/2 connection: {alpns:?}"
    );
    let seen = proxy.requests();
    // At least the bootstrap client's connection and the Lease connection.
    assert!(seen.len() >= 2, "{seen:?}");
    all_tunnels_to_the_server(&seen, port, Some(basic));

    let written = std::fs::read_to_string(&node.kubeconfig).unwrap();
    assert!(
        written.contains(&format!("proxy-url: {proxy_url}")),
        "{written}"
    );
    let before = proxy.requests().len();
    let kc = support::path(&node.kubeconfig);
    let (ok, out) = support::run(
        "kubectl",
        &["--kubeconfig", &kc, "get", "--raw", "/version"],
    )
    .await;
    assert!(ok && out.contains("gitVersion"), "kubectl: {out}");
    assert!(
        proxy.requests().len() > before,
        "kubectl used the proxy too"
    );

    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    assert!(
        !log.contains("s%40cret") && !log.contains("s@cret"),
        "{log}"
    );
}

/// Before: reqwest honoured `HTTPS_PROXY` but the Lease connection dialled directly, so
/// with a server only the proxy can reach, bootstrap worked and no Lease was ever renewed.
#[tokio::test]
async fn https_proxy_from_the_environment_carries_the_lease_connection_too() {
    let tp = plane(HOUR).await;
    let port = tp.addr().port();
    let proxy = ConnectProxy::start(tp.addr(), None).await;
    let node = NodeDir::new(&bootstrap_kubeconfig(
        &tp,
        &format!("https://{NAME}:{port}"),
        "",
    ));
    let mut events = tp.events();
    let url = proxy.url();
    let env = proxy_env(&[
        ("HTTPS_PROXY", &url),
        ("NO_PROXY", "example.com,10.0.0.0/8"),
    ]);
    let agent = Agent::spawn_env(&args(&node, "envproxy", &[]), &env);
    let alpns = renewal_alpns(&mut events, "envproxy", 2).await;
    assert!(
        alpns.iter().all(|a| a.as_deref() == Some("h2")),
        "{alpns:?}"
    );
    all_tunnels_to_the_server(&proxy.requests(), port, None);
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// `NO_PROXY` naming the server sends it around the proxy (which would be the only way
/// to reach it here): bootstrap then cannot connect, and the proxy sees nothing.
#[tokio::test]
async fn no_proxy_excludes_the_server() {
    let tp = plane(HOUR).await;
    let proxy = ConnectProxy::start(tp.addr(), None).await;
    let node = NodeDir::new(&bootstrap_kubeconfig(
        &tp,
        &format!("https://{NAME}:{}", tp.addr().port()),
        "",
    ));
    let url = proxy.url();
    let env = proxy_env(&[("https_proxy", &url), ("no_proxy", ".svc")]);
    let agent = Agent::spawn_env(&args(&node, "noproxy", &[]), &env);
    agent
        .wait_for_log("creating the CSR failed; retrying")
        .await;
    assert_eq!(proxy.requests(), vec![]);
    let (status, _) = agent.terminate().await;
    assert!(status.success());
}

/// A plain-HTTP health endpoint on loopback that answers 200 and counts requests.
async fn healthz() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                while let Ok(n) = sock.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if sock.write_all(ok).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/healthz"), hits)
}

/// Before: the health probe went through `HTTP_PROXY` even for 127.0.0.1 (the proxy
/// refuses a plain GET, so the probe failed and the Lease was never renewed), and reqwest
/// tunnelled a 127.0.0.1 API server through `HTTPS_PROXY`. Loopback is never proxied.
#[tokio::test]
async fn loopback_targets_never_use_the_environment_proxy() {
    let tp = plane(HOUR).await;
    let proxy = ConnectProxy::start(tp.addr(), None).await;
    let (probe, hits) = healthz().await;
    let node = NodeDir::new(&tp.bootstrap_kubeconfig());
    let mut events = tp.events();
    let url = proxy.url();
    let env = proxy_env(&[("HTTPS_PROXY", &url), ("HTTP_PROXY", &url)]);
    let agent = Agent::spawn_env(
        &args(&node, "loopback", &["--lease-health-probe", &probe]),
        &env,
    );
    renewal_alpns(&mut events, "loopback", 2).await;
    assert!(
        hits.load(Ordering::SeqCst) >= 2,
        "the probe reached healthz"
    );
    assert_eq!(proxy.requests(), vec![], "nothing went through the proxy");
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
}

/// Before: the tunnel's TCP connection tried the proxy's addresses one after another under
/// one 5 s bound, so a proxy name whose first address is black-holed failed every renewal.
/// Now they are raced like the server's: each renewal over a fresh tunnel completes well
/// inside a 1 s interval's budget (950 ms), the black hole costing one attempt delay.
#[tokio::test]
async fn a_black_holed_proxy_address_costs_one_attempt_delay() {
    use bootlet::api::conn::Connection;
    use bootlet::api::dial::{Resolver, ATTEMPT_DELAY};
    use bootlet::api::proxy::ProxyEnv;
    use bootlet::api::{ApiClient, ClientOptions};
    use k8s_openapi::apimachinery::pkg::version::Info;

    let tp = plane(HOUR).await;
    let proxy = ConnectProxy::start(tp.addr(), None).await;
    let (hole, _listener, _held) = support::black_hole().await;
    let proxy_url = format!("http://proxy.test:{}", proxy.addr().port());
    let opts = ClientOptions {
        proxy_env: Arc::new(ProxyEnv::from_vars(|k| {
            (k == "HTTPS_PROXY").then(|| proxy_url.clone())
        })),
        resolver: Resolver::fixed([("proxy.test".to_string(), vec![hole, proxy.addr()])]),
        ..ClientOptions::default()
    };
    let (cert, key) = tp
        .client_cert("system:node:tunnel", &["system:nodes"])
        .unwrap();
    let credential = bootlet::api::kubeconfig::Credential::ClientCert {
        chain_pem: cert,
        key: bootlet::pki::PrivateKeyPem::new(key),
    };
    let server = format!("https://{NAME}:{}", tp.addr().port());
    let client = ApiClient::new(&server, tp.ca_pem().as_bytes(), &credential, opts).unwrap();
    let mut conn = Connection::new(&client);
    for _ in 0..3 {
        conn.reset();
        let started = tokio::time::Instant::now();
        let info: Info = tokio::time::timeout(Duration::from_millis(950), conn.get("/version"))
            .await
            .expect("an answer within a renewal's budget")
            .unwrap();
        assert!(!info.git_version.is_empty());
        let took = started.elapsed();
        assert!(
            took >= ATTEMPT_DELAY && took < ATTEMPT_DELAY * 3,
            "{took:?}"
        );
    }
    all_tunnels_to_the_server(&proxy.requests(), tp.addr().port(), None);
    assert_eq!(proxy.requests().len(), 3);
}
