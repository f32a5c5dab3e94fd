//! Lease-update throughput over keep-alive TLS connections: N node identities, one
//! connection each, renewing their own Lease (PUT with the last resourceVersion) for D seconds.
//! Usage: lease_bench [WORKERS=8] [SECONDS=5]. Prints updates/s, requests and TLS handshakes.

use std::time::Duration;

use serde_json::Value;
use testplane::client::{lease_json, resource_version};
use testplane::{Event, TestPlane};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let workers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let tp = TestPlane::builder()
        .start()
        .await
        .expect("testplane starts");
    let mut events = tp.events();
    let handshakes = tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            match events.recv().await {
                Ok(Event::TlsHandshake { .. }) => n += 1,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return n,
            }
        }
    });
    let base = format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        tp.url()
    );
    let start = tokio::time::Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = vec![];
    for i in 0..workers {
        let node = format!("bench-{i}");
        let (cert, key) = tp
            .client_cert(&format!("system:node:{node}"), &["system:nodes"])
            .expect("cert");
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(testplane::client::client_tls(
                &tp.ca_pem(),
                Some((&cert, &key)),
                &["http/1.1"],
            ))
            .pool_max_idle_per_host(1)
            .build()
            .expect("client");
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let created: Value = http
                .post(&base)
                .json(&lease_json(&node, None))
                .send()
                .await
                .expect("create")
                .json()
                .await
                .expect("json");
            let mut rv = resource_version(&created);
            let mut ok = 0u64;
            while tokio::time::Instant::now() < deadline {
                let r = http
                    .put(format!("{base}/{node}"))
                    .json(&lease_json(&node, Some(&rv)))
                    .send()
                    .await
                    .expect("update");
                assert_eq!(r.status(), 200, "lease update");
                let v: Value = r.json().await.expect("json");
                rv = resource_version(&v);
                ok += 1;
            }
            ok
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let requests = tp.requests().len();
    tp.shutdown().await;
    let hs = handshakes.await.unwrap_or(0);
    println!(
        "lease updates: {total} in {elapsed:.2}s = {:.0}/s over {workers} keep-alive connections; requests {requests}, TLS handshakes {hs}",
        total as f64 / elapsed
    );
}
