//! Integration tests over real TLS: every authentication path, RBAC and Node-authorizer
//! denials, CSR validation/approval/signing (checked by openssl), Leases and watches.

use crate::support;

use serde_json::{json, Value};
use support::*;
use testplane::{Approval, Event, Signer, TestPlane};

fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert_eq!(body["code"], code, "{body}");
}

#[tokio::test]
async fn authentication_paths() {
    let tp = start().await;
    let ssr = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});

    // Token ok: bootstrap user, groups in order.
    let token = tp.create_token(Some(std::time::Duration::from_secs(3600)));
    let id = token.split('.').next().unwrap().to_string();
    let (code, body) = Api::new(&tp, Who::Token(&token)).post(ssr, &review).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["status"]["userInfo"]["username"],
        format!("system:bootstrap:{id}")
    );
    assert_eq!(
        body["status"]["userInfo"]["groups"],
        json!([
            "system:bootstrappers",
            testplane::DEFAULT_TOKEN_GROUP,
            "system:authenticated"
        ])
    );

    // Expired, unknown, malformed tokens: 401 Status.
    tp.expire_token(&id).unwrap();
    for t in [token.as_str(), "abcdef.0123456789abcdef", "not-a-token"] {
        let (code, body) = Api::new(&tp, Who::Token(t)).get("/version").await;
        assert_eq!(code, 401, "{t}");
        assert_status(&body, 401, "Unauthorized");
    }
    // Deleted token.
    let t2 = tp.create_token(None);
    tp.delete_token(&t2).unwrap();
    assert_eq!(Api::new(&tp, Who::Token(&t2)).get("/version").await.0, 401);

    // Client cert from the cluster CA: CN user, O groups.
    let (c, k) = tp.client_cert("alice", &["devs"]).unwrap();
    let (code, body) = Api::new(&tp, Who::Cert(&c, &k)).post(ssr, &review).await;
    assert_eq!(code, 201);
    assert_eq!(body["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        body["status"]["userInfo"]["groups"],
        json!(["devs", "system:authenticated"])
    );

    // Client cert from another CA: the handshake succeeds, the request is 401 (like kube-apiserver).
    let rogue = testplane::pki::Ca::generate("rogue").unwrap();
    let (rc, rk) = rogue.client("mallory", &["system:masters"]).unwrap();
    let (code, body) = Api::new(&tp, Who::Cert(&rc, &rk)).get("/version").await;
    assert_eq!(code, 401);
    assert_status(&body, 401, "Unauthorized");

    // Anonymous: public info yes, resources no.
    let anon = Api::new(&tp, Who::Anonymous);
    assert_eq!(anon.get("/version").await.0, 200);
    let (code, body) = anon.get(CSRS).await;
    assert_eq!(code, 403);
    assert_status(&body, 403, "Forbidden");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("User \"system:anonymous\" cannot list resource"));

    // Every request was recorded with its identity and status.
    let log = tp.requests();
    assert!(log.iter().any(|r| r.user == "alice" && r.status == 201));
    assert!(log.iter().any(|r| r.user.is_empty() && r.status == 401));
    tp.shutdown().await;
}

#[tokio::test]
async fn bootstrap_then_node_identity_and_rbac() {
    let tp = start().await;
    let mut ev = tp.events();
    let (cert, key) = join(&tp, "n1").await;
    let csr = tp.csr("node-csr-n1").unwrap();
    let approved = csr.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert_eq!(approved[0].reason.as_deref(), Some("AutoApproved"));
    assert_eq!(
        approved[0].message.as_deref(),
        Some("Auto approving kubelet client certificate after SubjectAccessReview.")
    );
    assert!(csr.spec.username.unwrap().starts_with("system:bootstrap:"));

    // The issued cert verifies with openssl against the CA; the CSR with openssl req -verify.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), tp.ca_pem()).unwrap();
    std::fs::write(dir.path().join("n1.crt"), &cert).unwrap();
    std::fs::write(dir.path().join("n1.csr"), &csr.spec.request.0).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["verify", "-CAfile", "ca.crt", "n1.crt"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new("openssl")
        .args(["req", "-verify", "-noout", "-in", "n1.csr"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // As the node: own Lease ok, stale resourceVersion 409, other node's Lease 403.
    let node = Api::new(&tp, Who::Cert(&cert, &key));
    let (code, lease) = node
        .post(&lease_path("kube-node-lease", ""), &lease_body("n1", None))
        .await;
    assert_eq!(code, 201, "{lease}");
    wait(&mut ev, "LeaseCreated", |e| matches!(e, Event::LeaseCreated { name, user, .. } if name == "n1" && user == "system:node:n1").then_some(())).await;
    let rv = lease["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _) = node
        .put(
            &lease_path("kube-node-lease", "n1"),
            &lease_body("n1", Some(&rv)),
        )
        .await;
    assert_eq!(code, 200);
    wait(&mut ev, "LeaseRenewed", |e| {
        matches!(e, Event::LeaseRenewed { name, renew_time: Some(_), .. } if name == "n1")
            .then_some(())
    })
    .await;
    let (code, body) = node
        .put(
            &lease_path("kube-node-lease", "n1"),
            &lease_body("n1", Some(&rv)),
        )
        .await;
    assert_eq!(code, 409);
    assert_status(&body, 409, "Conflict");
    let (code, body) = node
        .put(
            &lease_path("kube-node-lease", "n2"),
            &lease_body("n2", None),
        )
        .await;
    assert_eq!(code, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("can only access node lease with the same name as the requesting node"),
        "{body}"
    );
    assert_eq!(
        tp.lease("kube-node-lease", "n1")
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("n1")
    );

    // Node: own Node yes, other node no.
    tp.create_node("n1");
    tp.create_node("n2");
    assert_eq!(node.get("/api/v1/nodes/n1").await.0, 200);
    assert_eq!(node.get("/api/v1/nodes/n2").await.0, 403);
    let other_node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"}});
    assert_eq!(node.post("/api/v1/nodes", &other_node).await.0, 403);
    // Its own bootstrap CSR was filed by the token user, not by the node: not readable.
    assert_eq!(node.get(&format!("{CSRS}/node-csr-n1")).await.0, 403);

    // NodeRestriction: a CSR for another node is forbidden; its own renewal is self-approved.
    let (_, other) = node_csr("system:node:n2", &["system:nodes"]);
    let (code, body) = node
        .post(
            CSRS,
            &csr_body("steal", &other, &["digital signature", "client auth"], None),
        )
        .await;
    assert_eq!(code, 403, "{body}");
    let (_, renew) = node_csr("system:node:n1", &["system:nodes"]);
    let (code, _) = node
        .post(
            CSRS,
            &csr_body(
                "renew-n1",
                &renew,
                &["digital signature", "client auth"],
                Some(3600),
            ),
        )
        .await;
    assert_eq!(code, 201);
    wait(&mut ev, "renewal issued", |e| {
        matches!(e, Event::CsrIssued { name, .. } if name == "renew-n1").then_some(())
    })
    .await;
    assert_eq!(
        node.get(&format!("{CSRS}/renew-n1")).await.0,
        200,
        "its own CSR"
    );
    let c = tp.csr("renew-n1").unwrap();
    assert_eq!(
        c.status.unwrap().conditions.unwrap()[0].message.as_deref(),
        Some("Auto approving self kubelet client certificate after SubjectAccessReview.")
    );
    // A bootstrap token may not touch Leases.
    let token = tp.create_token(None);
    let boot = Api::new(&tp, Who::Token(&token));
    assert_eq!(boot.get(&lease_path("kube-node-lease", "n1")).await.0, 403);

    // Deleting the kubeadm binding through the API takes effect at once.
    let admin = Api::admin(&tp);
    let (code, _) = admin
        .delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kubeadm:kubelet-bootstrap")
        .await;
    assert_eq!(code, 200);
    let (_, csr3) = node_csr("system:node:n3", &["system:nodes"]);
    let (code, body) = boot
        .post(
            CSRS,
            &csr_body("n3", &csr3, &["digital signature", "client auth"], None),
        )
        .await;
    assert_eq!(code, 403);
    let id = token.split('.').next().unwrap();
    assert_eq!(
        body["message"],
        format!("certificatesigningrequests.certificates.k8s.io is forbidden: User \"system:bootstrap:{id}\" cannot create resource \"certificatesigningrequests\" in API group \"certificates.k8s.io\" at the cluster scope")
    );
    // SelfSubjectAccessReview agrees.
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "group": "certificates.k8s.io", "resource": "certificatesigningrequests"}}});
    let (code, body) = boot
        .post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &sar,
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(body["status"]["allowed"], false);
    assert!(
        tp.unexpected_requests().is_empty(),
        "{:?}",
        tp.unexpected_requests()
    );
    tp.shutdown().await;
}

#[tokio::test]
async fn csr_validation_and_conflicts() {
    let tp = TestPlane::builder()
        .approval(Approval::Manual)
        .start()
        .await
        .unwrap();
    let admin = Api::admin(&tp);
    let (_, pem) = node_csr("system:node:v", &["system:nodes"]);
    let mut body = csr_body(
        "v1",
        &pem,
        &["digital signature", "client auth", "client auth"],
        Some(599),
    );
    body["spec"]["signerName"] = "".into();
    let (code, st) = admin.post(CSRS, &body).await;
    assert_eq!(code, 422);
    assert_status(&st, 422, "Invalid");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.signerName",
            "spec.usages[2]",
            "spec.expirationSeconds"
        ],
        "{st}"
    );
    assert!(st["message"].as_str().unwrap().starts_with("CertificateSigningRequest.certificates.k8s.io \"v1\" is invalid: [spec.signerName: Required value"));
    let (code, st) = admin
        .post(CSRS, &csr_body("v2", "garbage", &["client auth"], None))
        .await;
    assert_eq!(code, 422, "{st}");
    let (code, st) = admin
        .post(CSRS, &csr_body("v3", &pem, &["server auth"], None))
        .await;
    assert_eq!(code, 422, "{st}");

    // Created, duplicate, not found, stale approval.
    let (code, created) = admin
        .post(
            CSRS,
            &csr_body("ok", &pem, &["digital signature", "client auth"], Some(600)),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(created["spec"]["username"], "kubernetes-admin");
    let (code, st) = admin
        .post(
            CSRS,
            &csr_body("ok", &pem, &["digital signature", "client auth"], None),
        )
        .await;
    assert_eq!(code, 409);
    assert_status(&st, 409, "AlreadyExists");
    let (code, st) = admin.get(&format!("{CSRS}/nope")).await;
    assert_eq!(code, 404);
    assert_status(&st, 404, "NotFound");
    let mut approve = created.clone();
    approve["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "X", "message": "y"}]});
    approve["metadata"]["resourceVersion"] = "1".into();
    assert_eq!(
        admin.put(&format!("{CSRS}/ok/approval"), &approve).await.0,
        409
    );
    // Content rules: wrong O is approved by hand but the signer fails it.
    let mut ev = tp.events();
    let (_, bad) = node_csr("system:node:v", &["wrong"]);
    assert_eq!(
        admin
            .post(
                CSRS,
                &csr_body("bad-o", &bad, &["digital signature", "client auth"], None)
            )
            .await
            .0,
        201
    );
    tp.approve("bad-o").unwrap();
    let (reason, message) = wait(&mut ev, "CsrFailed", |e| match e {
        Event::CsrFailed {
            name,
            reason,
            message,
        } if name == "bad-o" => Some((reason.clone(), message.clone())),
        _ => None,
    })
    .await;
    assert_eq!(reason, "SignerValidationFailure");
    assert_eq!(message, "subject organization is not system:nodes");
    // Requested duration honoured (600 s), backdated 5 min.
    tp.approve("ok").unwrap();
    wait(&mut ev, "ok issued", |e| {
        matches!(e, Event::CsrIssued { name, .. } if name == "ok").then_some(())
    })
    .await;
    let cert = tp.csr("ok").unwrap().status.unwrap().certificate.unwrap().0;
    let der = testplane::pki::pem_blocks(&cert, "CERTIFICATE").remove(0);
    let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
    // notAfter = now + 600 s; notBefore backdated, but never before the (fresh) CA.
    let now = jiff::Timestamp::now().as_second();
    assert!((x.validity().not_after.timestamp() - (now + 600)).abs() <= 5);
    let ca_der = testplane::pki::pem_blocks(tp.ca_pem().as_bytes(), "CERTIFICATE").remove(0);
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    assert_eq!(x.validity().not_before, ca.validity().not_before);
    tp.shutdown().await;
}

#[tokio::test]
async fn approval_modes_and_signer_modes() {
    let tp = TestPlane::builder()
        .approval(Approval::Deny {
            reason: "NoWay".into(),
        })
        .start()
        .await
        .unwrap();
    let token = tp.create_token(None);
    let api = Api::new(&tp, Who::Token(&token));
    let mut ev = tp.events();
    let (_, pem) = node_csr("system:node:m", &["system:nodes"]);
    let usages = ["digital signature", "client auth"];
    api.post(CSRS, &csr_body("d1", &pem, &usages, None)).await;
    let reason = wait(&mut ev, "denied", |e| match e {
        Event::CsrDenied { name, reason } if name == "d1" => Some(reason.clone()),
        _ => None,
    })
    .await;
    assert_eq!(reason, "NoWay");

    tp.set_approval(Approval::Manual);
    api.post(CSRS, &csr_body("m1", &pem, &usages, None)).await;
    wait(&mut ev, "created", |e| {
        matches!(e, Event::CsrCreated { name, .. } if name == "m1").then_some(())
    })
    .await;
    tp.set_signer(Signer::None);
    tp.approve("m1").unwrap();
    wait(&mut ev, "approved", |e| {
        matches!(e, Event::CsrApproved { name } if name == "m1").then_some(())
    })
    .await;
    assert!(tp.csr("m1").unwrap().status.unwrap().certificate.is_none());

    let ca = tp.ca_pem();
    let ca_der = testplane::pki::pem_blocks(ca.as_bytes(), "CERTIFICATE").remove(0);
    let (_, ca_x) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    for (i, mode) in [
        Signer::WrongKey,
        Signer::WrongNode,
        Signer::WrongCa,
        Signer::Normal,
    ]
    .into_iter()
    .enumerate()
    {
        tp.set_signer(mode);
        let (key, pem) = node_csr("system:node:m", &["system:nodes"]);
        let name = format!("s{i}");
        api.post(CSRS, &csr_body(&name, &pem, &usages, None)).await;
        tp.approve(&name).unwrap();
        wait(&mut ev, "issued", |e| {
            matches!(e, Event::CsrIssued { name: n, .. } if *n == name).then_some(())
        })
        .await;
        let cert = tp
            .csr(&name)
            .unwrap()
            .status
            .unwrap()
            .certificate
            .unwrap()
            .0;
        let der = testplane::pki::pem_blocks(&cert, "CERTIFICATE").remove(0);
        let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
        let same_key =
            x.public_key().raw == rcgen::PublicKeyData::subject_public_key_info(&key).as_slice();
        let cn = x
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let chains = x.verify_signature(Some(ca_x.public_key())).is_ok();
        match mode {
            Signer::WrongKey => assert!(!same_key && chains),
            Signer::WrongNode => assert!(same_key && cn == "system:node:wrong-node" && chains),
            Signer::WrongCa => assert!(same_key && !chains),
            _ => assert!(same_key && chains && cn == "system:node:m"),
        }
    }
    // kubectl-style deny through the API.
    tp.deny("m1", "TooLate").ok();
    tp.shutdown().await;
}

async fn read_lines(resp: &mut reqwest::Response, n: usize) -> Vec<Value> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .expect("watch event in time")
            .unwrap();
        let Some(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn watch_resume_and_gone() {
    let tp = TestPlane::builder()
        .approval(Approval::Manual)
        .start()
        .await
        .unwrap();
    let admin = Api::admin(&tp);
    let (_, pem) = node_csr("system:node:w", &["system:nodes"]);
    let usages = ["digital signature", "client auth"];
    let (_, a) = admin.post(CSRS, &csr_body("wa", &pem, &usages, None)).await;
    let rv_a = a["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A watch filtered to one name sees it approved.
    let mut w = admin
        .req(reqwest::Method::GET, &format!("{CSRS}?watch=true&fieldSelector=metadata.name%3Dwa&resourceVersion={rv_a}&timeoutSeconds=30"))
        .send()
        .await
        .unwrap();
    assert_eq!(w.status(), 200);
    admin.post(CSRS, &csr_body("wb", &pem, &usages, None)).await;
    tp.approve("wa").unwrap();
    let evs = read_lines(&mut w, 1).await;
    assert_eq!(evs[0]["type"], "MODIFIED");
    assert_eq!(evs[0]["object"]["metadata"]["name"], "wa");
    assert_eq!(
        evs[0]["object"]["status"]["conditions"][0]["type"],
        "Approved"
    );

    // Resume from the first version replays what happened since (wb ADDED, wa MODIFIED).
    let mut w2 = admin
        .req(
            reqwest::Method::GET,
            &format!("{CSRS}?watch=1&resourceVersion={rv_a}"),
        )
        .send()
        .await
        .unwrap();
    let evs = read_lines(&mut w2, 2).await;
    let kinds: Vec<(String, String)> = evs
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().into(),
                e["object"]["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("ADDED".to_string(), "wb".to_string()),
            ("MODIFIED".into(), "wa".into())
        ]
    );

    // No resourceVersion: current state first.
    let mut w3 = admin
        .req(reqwest::Method::GET, &format!("{CSRS}?watch=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(read_lines(&mut w3, 2).await.len(), 2);

    // After compaction an old version is 410 Expired, as an ERROR event.
    tp.compact();
    let mut w4 = admin
        .req(
            reqwest::Method::GET,
            &format!("{CSRS}?watch=true&resourceVersion={rv_a}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(w4.status(), 200);
    let evs = read_lines(&mut w4, 1).await;
    assert_eq!(evs[0]["type"], "ERROR");
    assert_eq!(evs[0]["object"]["code"], 410);
    assert_eq!(evs[0]["object"]["reason"], "Expired");
    assert!(
        w4.chunk().await.unwrap().is_none(),
        "stream ends after the error"
    );

    // list with fieldSelector.
    let (code, list) = admin
        .get(&format!("{CSRS}?fieldSelector=metadata.name%3Dwb"))
        .await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "CertificateSigningRequestList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    tp.shutdown().await;
}

#[tokio::test]
async fn strict_404_and_h2() {
    let tp = start().await;
    let admin = Api::admin(&tp);
    let (code, body) = admin.get("/apis/apps/v1/deployments").await;
    assert_eq!(code, 404);
    assert_eq!(
        body["message"],
        "the server could not find the requested resource (GET /apis/apps/v1/deployments)"
    );
    let (code, body) = admin
        .send(
            reqwest::Method::PATCH,
            &format!("{CSRS}/x"),
            Some(&json!({})),
        )
        .await;
    assert_eq!(code, 404);
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("PATCH /apis/certificates.k8s.io/v1/certificatesigningrequests/x"));
    assert!(tp
        .requests()
        .iter()
        .any(|r| r.method == "PATCH" && r.status == 404));
    assert_eq!(tp.unexpected_requests().len(), 2);

    // HTTP/2 by ALPN, and keep-alive: many requests, one connection.
    let (c, k) = admin_cert(&tp);
    let h2 = Api::with_ca(&tp, &tp.ca_pem(), Who::Cert(&c, &k), &["h2"]);
    let mut ev = tp.events();
    for _ in 0..5 {
        let r = h2
            .req(reqwest::Method::GET, "/version")
            .send()
            .await
            .unwrap();
        assert_eq!(r.version(), reqwest::Version::HTTP_2);
        assert!(r.headers().contains_key("date"));
    }
    let alpn = wait(&mut ev, "handshake", |e| match e {
        Event::TlsHandshake { alpn, .. } => Some(alpn.clone()),
        _ => None,
    })
    .await;
    assert_eq!(alpn.as_deref(), Some("h2"));
    let opened = tp
        .requests()
        .iter()
        .filter(|r| r.path == "/version")
        .map(|r| r.conn)
        .collect::<std::collections::HashSet<_>>();
    assert_eq!(opened.len(), 1, "keep-alive reuses the connection");
    tp.shutdown().await;
}

#[tokio::test]
async fn short_lived_certificates() {
    let tp = TestPlane::builder()
        .allow_short_expiration(true)
        .backdate(std::time::Duration::ZERO)
        .max_cert_ttl(std::time::Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let token = tp.create_token(None);
    let api = Api::new(&tp, Who::Token(&token));
    let mut ev = tp.events();
    for (name, secs, want) in [("short", 30, 30), ("capped", 7200, 3600)] {
        let (_, pem) = node_csr("system:node:s", &["system:nodes"]);
        let body = csr_body(
            name,
            &pem,
            &["digital signature", "client auth"],
            Some(secs),
        );
        assert_eq!(api.post(CSRS, &body).await.0, 201);
        let not_after = wait(&mut ev, "issued", |e| match e {
            Event::CsrIssued { name: n, not_after } if n == name => Some(*not_after),
            _ => None,
        })
        .await;
        let cert = tp.csr(name).unwrap().status.unwrap().certificate.unwrap().0;
        let der = testplane::pki::pem_blocks(&cert, "CERTIFICATE").remove(0);
        let (_, x) = x509_parser::parse_x509_certificate(&der).unwrap();
        let life = x.validity().not_after.timestamp() - x.validity().not_before.timestamp();
        assert!((want..=want + 1).contains(&life), "{name}: {life}");
        let na = not_after
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert_eq!(na, x.validity().not_after.timestamp());
    }
    tp.shutdown().await;
}
