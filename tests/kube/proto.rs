//! The Lease as protobuf against the real kube-apiserver (`testplane::kube`, built from
//! upstream): bootlet renews in protobuf by default, the API server accepts every PUT (no
//! 415, no fallback to JSON), the renewTime kubectl reads advances, and a Lease the API
//! server encodes (Go's encoder) decodes to what its own JSON says; and the Lease
//! connection speaks HTTP/2 with it (ALPN).

use crate::support;

use std::time::Duration;

use bootlet::api::conn::Connection;
use bootlet::api::ApiClient;
use k8s_openapi::api::coordination::v1::Lease;
use support::kube::{block_on, eventually, lease, node_dir, sample, REAL_WAIT};
use testplane::kube::Cluster;

async fn cluster() -> &'static Cluster {
    support::kube::cluster("proto", |_| {}).await
}

/// `BOOTLET_PROTO_GOLDEN=FILE`: the Lease as kube-apiserver encodes it, saved for the
/// golden vector in src/api/protobuf/tests.rs (curl with the node's certificate).
async fn golden(c: &Cluster, dir: &support::NodeDir, path: &str) {
    let Some(out) = std::env::var_os("BOOTLET_PROTO_GOLDEN") else {
        return;
    };
    let cert = support::path(&dir.current());
    let ca = support::path(&c.state_dir().join("ca.crt"));
    let url = format!("{}{path}", c.url());
    let (ok, text) = support::run(
        "curl",
        &[
            "-sSf",
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "-H",
            "Accept: application/vnd.kubernetes.protobuf",
            "-o",
            out.to_str().unwrap(),
            &url,
        ],
    )
    .await;
    assert!(ok, "curl: {text}");
}

#[ignore = "needs the Kubernetes components built from upstream (Go; 15-20 min cold): run bash tests/run.sh"]
#[test]
fn bootlet_renews_its_lease_in_protobuf_and_kube_apiserver_accepts_it() {
    block_on(async {
        let c = cluster().await;
        let (dir, _token) = node_dir(c).await;
        let node = "real-proto";
        let mut args = dir.args(node);
        let at = args
            .iter()
            .position(|s| s == "--metrics-bind-address")
            .unwrap();
        args[at + 1] = "127.0.0.1:0".into();
        args.extend(["--lease-renew-interval", "1s"].map(String::from));
        let agent = support::Agent::spawn(&args);
        agent
            .wait_for_log("ready: client certificate and kubeconfig in place")
            .await;
        let renew_time = |l: serde_json::Value| l["spec"]["renewTime"].as_str().map(String::from);
        let first = eventually(REAL_WAIT, "the Lease is renewed", || async {
            lease(c, node).await.and_then(renew_time)
        })
        .await;
        let later = eventually(REAL_WAIT, "renewTime advances", || async {
            lease(c, node)
                .await
                .and_then(renew_time)
                .filter(|t| *t > first)
        })
        .await;
        // At microseconds, as a MicroTime on the wire keeps it.
        assert_eq!(later.len(), "2026-12-01T10:05:07.123456Z".len(), "{later}");

        let addr = support::metrics_address(&agent).await;
        let (_, metrics) = support::http(addr, "GET", "/metrics").await;
        assert_eq!(
            sample(&metrics, "bootlet_lease_protobuf"),
            Some(1.0),
            "{metrics}"
        );
        let puts = sample(
            &metrics,
            r#"bootlet_api_requests_total{code="200",verb="PUT"}"#,
        );
        assert!(puts.is_some_and(|n| n >= 1.0), "{metrics}");
        assert!(!metrics.contains(r#"code="415""#), "{metrics}");

        // Go's encoding, read back: the Lease in protobuf and in JSON from the same server
        // are the same object (managedFields aside, which bootlet does not read).
        let access = bootlet::api::kubeconfig::read(&dir.kubeconfig, false).unwrap();
        let client = ApiClient::new(
            &access.server,
            &access.ca_pem,
            &access.credential,
            Default::default(),
        )
        .unwrap();
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}");
        let mut conn = Connection::new(&client);
        // kube-apiserver offers HTTP/2 by ALPN, and the Lease connection takes it.
        conn.get_lease(&path).await.expect("a protobuf GET");
        assert_eq!(conn.http_version(), Some(http::Version::HTTP_2));
        let mut compared = false;
        for _ in 0..10 {
            let from_pb = conn.get_lease(&path).await.expect("a protobuf GET");
            let mut from_json: Lease = conn.get(&path).await.expect("a JSON GET");
            from_json.metadata.managed_fields = None;
            // A renewal in between moves the Lease: compare two reads of one version.
            if from_pb.metadata.resource_version == from_json.metadata.resource_version {
                assert_eq!(from_pb, from_json);
                assert_eq!(from_pb.spec.unwrap().holder_identity.as_deref(), Some(node));
                compared = true;
                break;
            }
        }
        assert!(compared, "no two reads of the same version");
        golden(c, &dir, &path).await;

        tokio::time::sleep(Duration::from_secs(2)).await;
        let (status, log) = agent.terminate().await;
        assert!(status.success(), "{log}");
        assert!(!log.contains("refuses protobuf"), "{log}");
        assert!(!log.contains("Lease renewal failed"), "{log}");
    })
}
