//! The Lease loop's own connection (`api::conn::Connection`) against the testplane
//! over real TLS: HTTP/1.1 on one keep-alive connection, the same typed errors as the
//! shared client, the body limit, and no half-used connection after a cancelled exchange.

use std::time::Duration;

use bootlet::api::conn::Connection;
use bootlet::api::kubeconfig::Credential;
use bootlet::api::{ApiClient, ClientOptions, Error};
use bootlet::pki::PrivateKeyPem;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use support::wait_event;
use testplane::{Event, TestPlane};

mod support;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

async fn connection(tp: &TestPlane, node: &str, opts: ClientOptions) -> Connection {
    let (cert, key) = tp
        .client_cert(&format!("system:node:{node}"), &["system:nodes"])
        .expect("client cert");
    let credential = Credential::ClientCert {
        chain_pem: cert,
        key: PrivateKeyPem::new(key),
    };
    let client = ApiClient::new(&tp.url(), tp.ca_pem().as_bytes(), &credential, opts).unwrap();
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

#[tokio::test]
async fn http1_on_one_connection_with_the_shared_clients_typed_errors() {
    let tp = TestPlane::builder().start().await.unwrap();
    let mut conn = connection(&tp, "c1", ClientOptions::default()).await;
    let path = format!("{LEASES}/c1");

    let missing = conn.get::<Lease>(&path).await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    let created: Lease = conn.create(LEASES, &lease("c1", None)).await.unwrap();
    let rv = created.metadata.resource_version.clone();
    let renewed: Lease = conn.replace(&path, &lease("c1", rv.clone())).await.unwrap();
    assert_ne!(renewed.metadata.resource_version, rv);
    // A stale resourceVersion: the API's 409 with its Status, classified as a conflict.
    let stale = conn
        .replace::<_, Lease>(&path, &lease("c1", rv))
        .await
        .unwrap_err();
    assert!(stale.is_conflict(), "{stale}");
    assert!(!stale.is_retryable());
    // The Node authorizer's 403 names the credential.
    let other = conn
        .replace::<_, Lease>(&format!("{LEASES}/c2"), &lease("c2", None))
        .await
        .unwrap_err();
    assert!(other.is_forbidden(), "{other}");
    assert!(other.to_string().contains("client certificate"), "{other}");

    let requests = seen(&tp, "c1");
    assert_eq!(requests.len(), 5, "{requests:?}");
    assert!(
        requests
            .iter()
            .all(|(c, v)| *c == requests[0].0 && v == "HTTP/1.1"),
        "one HTTP/1.1 connection for every answer, errors included: {requests:?}"
    );
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
