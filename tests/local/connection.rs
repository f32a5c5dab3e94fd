//! Connections to the API server against the testplane over real TLS. The Lease loop's
//! own connection (`api::conn::Connection`): HTTP/2 on one keep-alive connection where the
//! server offers it by ALPN, HTTP/1.1 where it does not, the same typed errors as the shared client, the body limit, no half-used connection after a
//! cancelled exchange, and a black-holed address raced past. Every client: the kubeconfig's
//! `tls-server-name` sent as SNI.

use std::collections::BTreeMap;
use std::time::Duration;

use bootlet::api::conn::Connection;
use bootlet::api::dial::{Resolver, ATTEMPT_DELAY};
use bootlet::api::kubeconfig::Credential;
use bootlet::api::{ApiClient, ClientOptions, Error};
use bootlet::pki::PrivateKeyPem;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use support::{wait_event, Agent, NodeDir};
use testplane::{AcceptMode, Event, TestPlane};
use tokio::time::{timeout, Instant};

use crate::support;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

async fn connection(tp: &TestPlane, node: &str, opts: ClientOptions) -> Connection {
    connection_to(tp, &tp.url(), node, opts)
}

/// A connection to `url` (the testplane under another name) for `node`.
fn connection_to(tp: &TestPlane, url: &str, node: &str, opts: ClientOptions) -> Connection {
    let (cert, key) = tp
        .client_cert(&format!("system:node:{node}"), &["system:nodes"])
        .expect("client cert");
    let credential = Credential::ClientCert {
        chain_pem: cert,
        key: PrivateKeyPem::new(key),
    };
    let client = ApiClient::new(url, tp.ca_pem().as_bytes(), &credential, opts).unwrap();
    Connection::new(&client)
}

/// A testplane, a connection for `node`, and `node`'s Lease (created through it) by path.
async fn with_lease(node: &str) -> (TestPlane, Connection, String) {
    let tp = TestPlane::builder().start().await.unwrap();
    let mut conn = connection(&tp, node, ClientOptions::default()).await;
    let _: Lease = conn.create(LEASES, &lease(node, None)).await.unwrap();
    (tp, conn, format!("{LEASES}/{node}"))
}

fn lease(node: &str, resource_version: Option<String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some("kube-node-lease".into()),
            resource_version,
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(40),
            ..LeaseSpec::default()
        }),
    }
}

/// Connection ids and HTTP versions of `node`'s requests, in order.
fn seen(tp: &TestPlane, node: &str) -> Vec<(u64, String)> {
    let user = format!("system:node:{node}");
    tp.requests()
        .into_iter()
        .filter(|r| r.user == user)
        .map(|r| (r.conn, r.version))
        .collect()
}

/// Five exchanges of `node` (a 404, a create, a replace, a 409 and a 403) on one
/// connection, every answer typed as the shared client types it; the HTTP version each
/// went over, as the testplane saw it.
async fn typed_errors_on_one_connection(tp: &TestPlane, node: &str) -> Vec<String> {
    let mut conn = connection(tp, node, ClientOptions::default()).await;
    let path = format!("{LEASES}/{node}");

    let missing = conn.get::<Lease>(&path).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    let created: Lease = conn.create(LEASES, &lease(node, None)).await.unwrap();
    let rv = created.metadata.resource_version.clone();
    let renewed: Lease = conn.replace(&path, &lease(node, rv.clone())).await.unwrap();
    assert_ne!(renewed.metadata.resource_version, rv);
    // A stale resourceVersion: the API's 409 with its Status, classified as a conflict.
    let stale = conn
        .replace::<_, Lease>(&path, &lease(node, rv))
        .await
        .unwrap_err();
    assert!(stale.is_conflict(), "{stale}");
    assert!(!stale.is_retryable());
    // The Node authorizer's 403 names the credential.
    let other_node = format!("{node}-other");
    let other = conn
        .replace::<_, Lease>(&format!("{LEASES}/{other_node}"), &lease(&other_node, None))
        .await
        .unwrap_err();
    assert!(other.is_forbidden(), "{other}");
    assert!(other.to_string().contains("client certificate"), "{other}");

    let requests = seen(tp, node);
    assert_eq!(requests.len(), 5, "{requests:?}");
    assert!(
        requests.iter().all(|(c, _)| *c == requests[0].0),
        "one connection for every answer, errors included: {requests:?}"
    );
    requests.into_iter().map(|(_, v)| v).collect()
}

#[tokio::test]
async fn http2_on_one_connection_with_the_shared_clients_typed_errors() {
    let tp = TestPlane::builder().start().await.unwrap();
    let versions = typed_errors_on_one_connection(&tp, "c1").await;
    assert!(versions.iter().all(|v| v == "HTTP/2.0"), "{versions:?}");
    let mut conn = connection(&tp, "c1", ClientOptions::default()).await;
    assert_eq!(conn.http_version(), None);
    let _: Lease = conn.get(&format!("{LEASES}/c1")).await.unwrap();
    assert_eq!(conn.http_version(), Some(http::Version::HTTP_2));
}

/// A server (or a TLS-terminating balancer in front of it) that offers only `http/1.1` by
/// ALPN gets HTTP/1.1, with the same answers.
#[tokio::test]
async fn http1_where_the_server_offers_no_http2() {
    let tp = TestPlane::builder().start().await.unwrap();
    tp.faults().set_accept_mode(AcceptMode::Http1Only).await;
    let versions = typed_errors_on_one_connection(&tp, "c2").await;
    assert!(versions.iter().all(|v| v == "HTTP/1.1"), "{versions:?}");
}

#[tokio::test]
async fn a_cancelled_exchange_leaves_no_connection_behind() {
    let (tp, mut conn, path) = with_lease("c3").await;

    // The caller's deadline passes while the server sits on the request.
    tp.faults().delay(Duration::from_millis(500));
    let late = tokio::time::timeout(Duration::from_millis(100), conn.get::<Lease>(&path)).await;
    assert!(late.is_err(), "answered before the deadline");
    tp.faults().delay(Duration::ZERO);
    let _: Lease = conn.get(&path).await.unwrap();
    let requests = seen(&tp, "c3");
    let last = requests.last().unwrap().0;
    assert_ne!(requests[0].0, last, "reused the abandoned connection");

    // reset() closes it too; the next request opens a fresh one.
    conn.reset();
    let _: Lease = conn.get(&path).await.unwrap();
    assert_ne!(seen(&tp, "c3").last().unwrap().0, last);
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused() {
    let tp = TestPlane::builder().start().await.unwrap();
    let small = ClientOptions {
        max_body: 64,
        ..ClientOptions::default()
    };
    let mut conn = connection(&tp, "c4", small).await;
    let err = conn
        .create::<_, Lease>(LEASES, &lease("c4", None))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { limit: 64, .. }), "{err}");
}

#[tokio::test]
async fn a_server_that_is_gone_is_a_transport_error_then_a_fresh_connection() {
    let (tp, mut conn, path) = with_lease("c5").await;
    let mut events = tp.events();
    // Every connection dropped and the port closed until the outage ends.
    tp.faults().outage(Duration::from_millis(300)).await;
    let err = conn.get::<Lease>(&path).await.unwrap_err();
    assert!(err.is_transport() && err.is_retryable(), "{err}");
    wait_event(&mut events, |e| (*e == Event::OutageEnded).then_some(())).await;
    let _: Lease = conn.get(&path).await.unwrap();
    let requests = seen(&tp, "c5");
    assert_ne!(requests[0].0, requests.last().unwrap().0);
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_replaced_without_an_error() {
    let (tp, mut conn, path) = with_lease("c6").await;
    let mut events = tp.events();
    // The server drops the idle connection (as an idle timeout would) and is back at once.
    tp.faults().outage(Duration::from_millis(50)).await;
    wait_event(&mut events, |e| (*e == Event::OutageEnded).then_some(())).await;
    // Nothing was in flight, so the next request simply goes over a new connection.
    let _: Lease = conn.get(&path).await.unwrap();
    let requests = seen(&tp, "c6");
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_ne!(requests[0].0, requests[1].0);
}

/// A server that closes the connection gracefully (an HTTP/2 GOAWAY, as kube-apiserver's
/// `--goaway-chance` sends to rebalance its clients, or a shutting-down server) costs no
/// failed exchange: the next one goes over a fresh connection, on either HTTP version.
#[tokio::test]
async fn a_goaway_moves_the_next_exchange_to_a_fresh_connection_without_an_error() {
    for http1 in [false, true] {
        let (tp, mut conn, path) = with_lease("c8").await;
        if http1 {
            tp.faults().set_accept_mode(AcceptMode::Http1Only).await;
        }
        let _: Lease = conn.get(&path).await.unwrap();
        let want = if http1 { "HTTP/1.1" } else { "HTTP/2.0" };
        assert_eq!(seen(&tp, "c8").last().unwrap().1, want);
        let old = seen(&tp, "c8").last().unwrap().0;
        let mut events = tp.events();
        tp.faults().go_away().await;
        wait_event(&mut events, |e| {
            (*e == Event::ConnectionClosed { conn: old }).then_some(())
        })
        .await;
        for _ in 0..2 {
            let _: Lease = conn.get(&path).await.unwrap();
        }
        let requests = seen(&tp, "c8");
        let after: Vec<_> = requests.iter().rev().take(2).collect();
        assert!(
            after
                .iter()
                .all(|(c, v)| *c != old && *c == after[0].0 && v == want),
            "{requests:?}"
        );
    }
}

/// A reused connection that dies while a request is on its way (reset before the server
/// read it) costs no failed exchange: the request goes once more, on a fresh connection.
/// Once only: a second death is the caller's error, and so is the death of a connection
/// opened for the request.
#[tokio::test]
async fn a_reused_connection_that_dies_unanswered_is_tried_once_more_on_a_fresh_one() {
    for http1 in [false, true] {
        let (tp, mut conn, path) = with_lease("c9").await;
        if http1 {
            tp.faults().set_accept_mode(AcceptMode::Http1Only).await;
            conn.reset();
        }
        let _: Lease = conn.get(&path).await.unwrap();
        let mut events = tp.events();
        let handshakes = |events: &mut tokio::sync::broadcast::Receiver<Event>| {
            std::iter::from_fn(|| events.try_recv().ok())
                .filter(|e| matches!(e, Event::TlsHandshake { .. }))
                .count()
        };
        let before = seen(&tp, "c9").len();

        tp.faults().reset_next(1);
        let _: Lease = conn.get(&path).await.unwrap();
        assert_eq!(handshakes(&mut events), 1, "HTTP/1.1 only: {http1}");
        assert_eq!(seen(&tp, "c9").len(), before + 1);

        tp.faults().reset_next(2);
        let err = conn.get::<Lease>(&path).await.unwrap_err();
        assert!(err.is_transport() && err.is_retryable(), "{err}");
        assert_eq!(handshakes(&mut events), 1, "HTTP/1.1 only: {http1}");

        tp.faults().reset_next(1);
        let err = conn.get::<Lease>(&path).await.unwrap_err();
        assert!(err.is_transport(), "{err}");
        assert_eq!(handshakes(&mut events), 1, "HTTP/1.1 only: {http1}");
        assert_eq!(
            seen(&tp, "c9").len(),
            before + 1,
            "no reset request was handled"
        );
        let _: Lease = conn.get(&path).await.unwrap();
    }
}

/// Before: a write on a reused connection that died unanswered went once more on a fresh
/// one, so a write the server had applied was sent twice (and the replay answered 409).
/// Now only reads go again: a PUT or POST that died, applied or not, is the caller's
/// transport error, and nothing more reaches the server.
#[tokio::test]
async fn a_write_on_a_reused_connection_that_dies_unanswered_is_never_sent_again() {
    for http1 in [false, true] {
        let (tp, mut conn, path) = with_lease("c10").await;
        if http1 {
            tp.faults().set_accept_mode(AcceptMode::Http1Only).await;
            conn.reset();
        }
        let current: Lease = conn.get(&path).await.unwrap();
        let before = seen(&tp, "c10").len();

        // Applied, then the connection reset: one PUT reached the server, no more.
        tp.faults().apply_then_reset_next(1);
        let rv = current.metadata.resource_version.clone();
        let err = conn
            .replace::<_, Lease>(&path, &lease("c10", rv.clone()))
            .await
            .unwrap_err();
        assert!(err.is_transport(), "HTTP/1.1 only: {http1}: {err}");
        assert_eq!(seen(&tp, "c10").len(), before + 1, "HTTP/1.1 only: {http1}");
        let after: Lease = conn.get(&path).await.unwrap();
        assert_ne!(after.metadata.resource_version, rv, "the PUT was applied");

        // Reset before the server read it: not applied, and not sent again either.
        let before = seen(&tp, "c10").len();
        tp.faults().reset_next(1);
        let rv = after.metadata.resource_version.clone();
        let err = conn
            .replace::<_, Lease>(&path, &lease("c10", rv.clone()))
            .await
            .unwrap_err();
        assert!(err.is_transport(), "HTTP/1.1 only: {http1}: {err}");
        assert_eq!(seen(&tp, "c10").len(), before, "HTTP/1.1 only: {http1}");
        let unchanged: Lease = conn.get(&path).await.unwrap();
        assert_eq!(unchanged.metadata.resource_version, rv);
    }
}

/// Before: the addresses of the server's name were tried one after another under one 5 s
/// bound, so a dual-stack server whose first path is black-holed failed every renewal (the
/// reqwest client, racing them, worked). Now they are raced RFC 8305 style: the black hole
/// costs one attempt delay (250 ms), and every renewal, each over a fresh connection,
/// completes well inside a 1 s interval's budget (950 ms).
#[tokio::test]
async fn a_black_holed_first_address_costs_one_attempt_delay_not_the_renewal() {
    let tp = TestPlane::builder().start().await.unwrap();
    let (hole, _listener, _held) = support::black_hole().await;
    let opts = ClientOptions {
        resolver: Resolver::fixed(BTreeMap::from([(
            "localhost".to_string(),
            vec![hole, tp.addr()],
        )])),
        ..ClientOptions::default()
    };
    let url = format!("https://localhost:{}", tp.addr().port());
    let mut conn = connection_to(&tp, &url, "c7", opts);
    let budget = Duration::from_millis(950);
    let _: Lease = timeout(budget, conn.create(LEASES, &lease("c7", None)))
        .await
        .expect("created within a renewal's budget")
        .unwrap();
    let path = format!("{LEASES}/c7");
    for _ in 0..3 {
        conn.reset();
        let started = Instant::now();
        let _: Lease = timeout(budget, conn.get(&path))
            .await
            .expect("renewed within its budget")
            .unwrap();
        let took = started.elapsed();
        // The black hole was tried first (its family first): the good one after the delay.
        assert!(took >= ATTEMPT_DELAY, "{took:?}");
        assert!(took < ATTEMPT_DELAY * 3, "{took:?}");
    }
    let conns: std::collections::BTreeSet<u64> = seen(&tp, "c7").iter().map(|c| c.0).collect();
    assert_eq!(conns.len(), 4, "one fresh connection per reset: {conns:?}");
}

/// Before: only the Lease connection (and doctor) sent the kubeconfig's `tls-server-name`
/// as SNI; the pooled client sent the URL's host (none at all for an IP), so behind an
/// SNI-routing front end CSR creation failed while the Lease worked. Now the testplane sees
/// the name on every connection of a whole join: the CSR's, the watch's, the Lease's.
#[tokio::test]
async fn every_connection_of_a_join_sends_the_tls_server_name_as_sni() {
    let tp = TestPlane::builder().start().await.unwrap();
    let bootstrap = tp.bootstrap_kubeconfig();
    let server_line = bootstrap
        .lines()
        .find(|l| l.trim_start().starts_with("server: "))
        .expect("a server line")
        .to_string();
    let indent = &server_line[..server_line.len() - server_line.trim_start().len()];
    let named = bootstrap.replace(
        &server_line,
        &format!("{server_line}\n{indent}tls-server-name: kubernetes"),
    );
    let node = NodeDir::new(&named);
    let mut events = tp.events();
    let mut args = node.args("sni");
    args.extend(["--lease-renew-interval", "1s"].map(String::from));
    let agent = Agent::spawn(&args);
    let mut sni: BTreeMap<u64, Option<String>> = BTreeMap::new();
    wait_event(&mut events, |e| match e {
        Event::TlsHandshake {
            conn, sni: name, ..
        } => {
            sni.insert(*conn, name.clone());
            None
        }
        Event::LeaseRenewed { name, .. } | Event::LeaseCreated { name, .. } if name == "sni" => {
            Some(())
        }
        _ => None,
    })
    .await;
    let (status, log) = agent.terminate().await;
    assert!(status.success(), "{log}");
    let requests = tp.requests();
    let csr_conns: Vec<u64> = requests
        .iter()
        .filter(|r| r.path.contains("/certificatesigningrequests"))
        .map(|r| r.conn)
        .collect();
    assert!(!csr_conns.is_empty(), "no CSR request");
    for r in &requests {
        assert_eq!(
            sni.get(&r.conn).cloned().flatten().as_deref(),
            Some("kubernetes"),
            "{} {} over connection {} without the name",
            r.method,
            r.path,
            r.conn
        );
    }
}
