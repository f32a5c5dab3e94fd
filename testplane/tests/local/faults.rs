//! Every fault switch, from Rust and from the admin-only HTTP path.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use testplane::Event;

#[tokio::test]
async fn error_injection_delay_and_skew() {
    let tp = start().await;
    let admin = Api::admin(&tp);
    let f = tp.faults();

    f.fail_next(2, 500);
    for _ in 0..2 {
        let (code, body) = admin.get("/version").await;
        assert_eq!(code, 500);
        assert_eq!(body["reason"], "InternalError");
    }
    assert_eq!(admin.get("/version").await.0, 200);

    f.throttle_next(1, Duration::from_secs(3));
    let r = admin
        .req(reqwest::Method::GET, "/version")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "3");
    assert_eq!(admin.get("/version").await.0, 200);

    f.delay(Duration::from_millis(300));
    let t0 = tokio::time::Instant::now();
    admin.get("/version").await;
    assert!(t0.elapsed() >= Duration::from_millis(300));
    f.delay(Duration::ZERO);

    f.skew_date(3600);
    let r = admin
        .req(reqwest::Method::GET, "/version")
        .send()
        .await
        .unwrap();
    let date = r.headers()["date"].to_str().unwrap().to_string();
    let server: jiff::Timestamp = jiff::fmt::rfc2822::parse(&date).unwrap().timestamp();
    let skew = (server - jiff::Timestamp::now()).get_seconds();
    assert!((3590..=3610).contains(&skew), "skew {skew} from {date}");
    f.clear();
    tp.shutdown().await;
}

#[tokio::test]
async fn lease_conflict_and_watch_drop() {
    let tp = start().await;
    let admin = Api::admin(&tp);
    let (code, lease) = admin
        .post(&lease_path("kube-node-lease", ""), &lease_body("n1", None))
        .await;
    assert_eq!(code, 201);
    let rv = lease["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    tp.faults().lease_conflict_once();
    let (code, body) = admin
        .put(
            &lease_path("kube-node-lease", "n1"),
            &lease_body("n1", Some(&rv)),
        )
        .await;
    assert_eq!(code, 409);
    assert_eq!(body["reason"], "Conflict");
    assert_eq!(
        admin
            .put(
                &lease_path("kube-node-lease", "n1"),
                &lease_body("n1", Some(&rv))
            )
            .await
            .0,
        200
    );
    // Create-on-update, like the real Lease strategy.
    let (code, _) = admin
        .put(
            &lease_path("kube-node-lease", "n7"),
            &lease_body("n7", None),
        )
        .await;
    assert_eq!(code, 201);

    // The next watch ends after one event.
    tp.faults().watch_drop_after(1);
    let mut ev = tp.events();
    let mut w = admin
        .req(
            reqwest::Method::GET,
            &format!("{}?watch=true", lease_path("kube-node-lease", "")),
        )
        .send()
        .await
        .unwrap();
    let mut body = Vec::new();
    while let Some(c) = tokio::time::timeout(WAIT, w.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        body.extend_from_slice(&c);
    }
    assert_eq!(body.iter().filter(|b| **b == b'\n').count(), 1);
    wait(&mut ev, "WatchDropped", |e| {
        matches!(e, Event::WatchDropped { .. }).then_some(())
    })
    .await;
    tp.shutdown().await;
}

#[tokio::test]
async fn outage_drops_connections_and_relistens() {
    let tp = start().await;
    let admin = Api::admin(&tp);
    assert_eq!(admin.get("/version").await.0, 200);
    let mut ev = tp.events();
    let mut w = admin
        .req(reqwest::Method::GET, &format!("{CSRS}?watch=true"))
        .send()
        .await
        .unwrap();
    tp.faults().outage(Duration::from_millis(500)).await;
    // The open watch is cut, new connections are refused.
    assert!(tokio::time::timeout(WAIT, w.chunk())
        .await
        .unwrap()
        .map(|c| c.is_none())
        .unwrap_or(true));
    assert!(admin
        .req(reqwest::Method::GET, "/version")
        .send()
        .await
        .is_err());
    wait(&mut ev, "OutageEnded", |e| {
        matches!(e, Event::OutageEnded).then_some(())
    })
    .await;
    assert_eq!(admin.get("/version").await.0, 200, "same port again");
    tp.shutdown().await;
}

#[tokio::test]
async fn admin_http_fault_path() {
    let tp = start().await;
    let admin = Api::admin(&tp);
    let token = tp.create_token(None);
    let boot = Api::new(&tp, Who::Token(&token));
    // Only system:masters may script faults.
    let (code, _) = boot
        .post("/testplane/faults", &json!({"failNext": 1}))
        .await;
    assert_eq!(code, 403);
    let r = admin
        .req(reqwest::Method::POST, "/testplane/faults")
        .json(&json!({"failNext": 1, "failStatus": 503}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(boot.get("/version").await.0, 503);
    // Expire the token over HTTP: next request 401.
    let id = token.split('.').next().unwrap();
    let r = admin
        .req(reqwest::Method::POST, "/testplane/faults")
        .json(&json!({"expireToken": id}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(boot.get("/version").await.0, 401);
    let t2 = tp.create_token(None);
    let r = admin
        .req(reqwest::Method::POST, "/testplane/faults")
        .json(&json!({"deleteToken": t2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(Api::new(&tp, Who::Token(&t2)).get("/version").await.0, 401);
    let (code, body) = admin.post("/testplane/faults", &json!({"bogus": 1})).await;
    assert_eq!(code, 400, "{body}");
    // Outage over HTTP: the reply comes first, then the listener goes away and comes back.
    let mut ev = tp.events();
    let r = admin
        .req(reqwest::Method::POST, "/testplane/faults")
        .json(&json!({"outageSeconds": 0.2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait(&mut ev, "OutageStarted", |e| {
        matches!(e, Event::OutageStarted).then_some(())
    })
    .await;
    wait(&mut ev, "OutageEnded", |e| {
        matches!(e, Event::OutageEnded).then_some(())
    })
    .await;
    assert_eq!(admin.get("/version").await.0, 200);
    tp.shutdown().await;
}
