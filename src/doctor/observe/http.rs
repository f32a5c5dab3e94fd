//! server-reachable's one HTTP round trip: an anonymous `GET /livez` on the TLS session
//! doctor itself opened and verified, so a server that completes TCP and TLS and then never
//! answers HTTP is named by that check, not by whichever later request happens to wait.
//! Any status is an answer (anonymous requests may get 401/403); the body is not read.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::timeout;

/// The path asked: kube-apiserver's liveness endpoint, readable by anyone
/// (`system:public-info-viewer`) and cheap.
pub const PATH: &str = "/livez";

/// Why the round trip gave no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpFailure {
    /// TLS completed, but no response head arrived in time: a hung server.
    Timeout { after: Duration },
    /// The connection closed, or what came back was not HTTP/1.1.
    Failed { detail: String },
}

/// `GET {prefix}/livez` (the server URL's path prefix kept, as the API client keeps it) with
/// `Connection: close` over `stream`; the status, within `limit`.
pub async fn livez<S>(stream: S, server: &str, limit: Duration) -> Result<u16, HttpFailure>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let failed = |detail: String| HttpFailure::Failed { detail };
    let uri: Uri = server
        .parse()
        .map_err(|e| failed(format!("server {server:?}: {e}")))?;
    let authority = uri
        .authority()
        .ok_or_else(|| failed(format!("server {server:?} has no host")))?;
    let request = Request::builder()
        .method(Method::GET)
        .uri(format!("{}{PATH}", uri.path().trim_end_matches('/')))
        .header(HOST, authority.as_str())
        .header(USER_AGENT, HeaderValue::from_static(crate::api::USER_AGENT))
        .header(CONNECTION, HeaderValue::from_static("close"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| failed(e.to_string()))?;
    let exchange = async {
        let (mut sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
        let driver = tokio::spawn(driver);
        let response = sender.send_request(request).await;
        driver.abort();
        response
    };
    match timeout(limit, exchange).await {
        Err(_) => Err(HttpFailure::Timeout { after: limit }),
        Ok(Err(e)) => Err(failed(crate::runtime::report(&e))),
        Ok(Ok(response)) => Ok(response.status().as_u16()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn any_status_is_an_answer_and_the_prefix_is_kept() {
        let (client, mut server) = tokio::io::duplex(4096);
        let peer = tokio::spawn(async move {
            let mut buf = vec![0u8; 1024];
            let n = server.read(&mut buf).await.unwrap();
            server
                .write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let got = livez(client, "https://lb:6443/k8s/c-1/", Duration::from_secs(5)).await;
        assert_eq!(got, Ok(401));
        let request = peer.await.unwrap();
        assert!(
            request.starts_with("GET /k8s/c-1/livez HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.to_ascii_lowercase().contains("host: lb:6443\r\n"),
            "{request}"
        );
        assert!(
            !request.to_ascii_lowercase().contains("authorization"),
            "{request}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_answers_times_out() {
        let (client, _server) = tokio::io::duplex(4096);
        let got = livez(client, "https://10.0.0.1:6443", Duration::from_millis(1500)).await;
        assert_eq!(
            got,
            Err(HttpFailure::Timeout {
                after: Duration::from_millis(1500)
            })
        );
    }

    #[tokio::test]
    async fn a_closed_connection_is_no_answer() {
        let (client, server) = tokio::io::duplex(4096);
        drop(server);
        let got = livez(client, "https://10.0.0.1:6443", Duration::from_secs(5)).await;
        assert!(matches!(got, Err(HttpFailure::Failed { .. })), "{got:?}");
    }
}
