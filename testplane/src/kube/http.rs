//! One HTTPS request to the real API server, for setting the cluster up and waiting on it:
//! HTTP/1.1, `Connection: close`, the cluster CA as the only root, an admin client
//! certificate or a bearer token. Not a client library: no redirects, no retries.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::KubeError;

/// Bound on one request, connect to the last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Who the request authenticates as.
pub enum Auth<'a> {
    /// A client certificate and its PKCS#8 key (PEM).
    Cert(&'a str, &'a str),
    /// A bearer token.
    Token(&'a str),
}

/// `method path` with an optional JSON body; returns (status, body).
pub async fn request(
    addr: SocketAddr,
    ca_pem: &str,
    auth: Auth<'_>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String), KubeError> {
    let fail = |what: String| KubeError::Http {
        request: format!("{method} {path}"),
        what,
    };
    let (cert, header) = match auth {
        Auth::Cert(c, k) => (Some((c, k)), String::new()),
        Auth::Token(t) => (None, format!("Authorization: Bearer {t}\r\n")),
    };
    let tls = crate::client::client_tls(ca_pem, cert, &["http/1.1"]);
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{header}Accept: application/json\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let mut s = tokio_rustls::TlsConnector::from(Arc::new(tls))
            .connect(name, tcp)
            .await?;
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        // The server closes after its answer; a TLS close_notify-less close is an EOF too.
        match s.read_to_end(&mut raw).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(e),
        }
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {REQUEST_TIMEOUT:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail("an answer without an HTTP head".into()))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| fail(format!("status line {:?}", head.lines().next())))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        code,
        if chunked {
            dechunk(rest)
        } else {
            rest.to_string()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn dechunks() {
        assert_eq!(super::dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
