//! Redirects are never followed (issue #10 §4): following one resends the credential to
//! wherever the server pointed. A 3xx is an error naming the target; nothing reaches it.

use bootlet::api::conn::Connection;
use bootlet::api::kubeconfig::{BootstrapToken, Credential};
use bootlet::api::{ApiClient, ClientOptions, Error};
use k8s_openapi::apimachinery::pkg::version::Info;
use testplane::stub::Stub;
use testplane::TestPlane;

const TOKEN: &str = "abcdef.0123456789abcdef";

async fn setup() -> (TestPlane, std::sync::Arc<rustls::ServerConfig>) {
    let tp = TestPlane::builder().start().await.expect("testplane");
    let tls = tp.serving_tls().unwrap();
    (tp, tls)
}

fn client(tp: &TestPlane, url: &str) -> ApiClient {
    let token = Credential::Token(BootstrapToken::new(TOKEN));
    ApiClient::new(
        url,
        tp.ca_pem().as_bytes(),
        &token,
        ClientOptions::default(),
    )
    .unwrap()
}

fn assert_redirect_error(err: &Error, code: u16, target: &str) {
    assert_eq!(err.code(), Some(code), "{err}");
    assert!(!err.is_retryable(), "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("redirected to {target}")), "{text}");
    assert!(!text.contains("0123456789abcdef"), "{text}");
}

/// Before: reqwest followed the 307 to the other port (it drops `Authorization` across
/// origins, but the request still went there, and the answer there was taken as the
/// API's). Now the 307 is the answer: an error, and the other server sees nothing.
#[tokio::test]
async fn a_redirect_to_another_port_is_an_error_and_nothing_goes_there() {
    let (tp, tls) = setup().await;
    let elsewhere = Stub::start(tls.clone(), 200, vec![]).await;
    let target = format!("{}/version", elsewhere.url());
    let redirecting = Stub::start(tls, 307, vec![("location".into(), target.clone())]).await;
    let api = client(&tp, &redirecting.url());

    let err = api.get::<Info>("/version").await.unwrap_err();
    assert_redirect_error(&err, 307, &target);
    // The Lease loop's own connection answers the same way.
    let err = Connection::new(&api)
        .get::<Info>("/version")
        .await
        .unwrap_err();
    assert_redirect_error(&err, 307, &target);

    assert_eq!(
        elsewhere.requests(),
        vec![],
        "nothing reached the redirect target"
    );
    let asked = redirecting.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked
        .iter()
        .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))));
}

/// Before: a same-origin 302 was followed with the token attached, again and again (ten
/// requests carrying the token). Now one request, and the 302 is the error.
#[tokio::test]
async fn a_same_origin_redirect_does_not_resend_the_token() {
    let (tp, tls) = setup().await;
    // The stub's own URL is known only once it listens: point it at a fixed path on the
    // same origin through a relative Location.
    let redirecting = Stub::start(tls, 302, vec![("location".into(), "/elsewhere".into())]).await;
    let api = client(&tp, &redirecting.url());
    let err = api.get::<Info>("/version").await.unwrap_err();
    assert_redirect_error(&err, 302, "/elsewhere");
    let asked = redirecting.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].path, "/version");
}
