//! The Lease on the loop's own connection, as protobuf the way the kubelet sends it, or
//! JSON: the request's and answer's media types, decoding by the answer's `Content-Type`,
//! and the switch to JSON for good once a server refuses protobuf (406 or 415), with the
//! refused request sent again in JSON at once. The wire format itself is `protobuf`'s.

use k8s_openapi::api::coordination::v1::Lease;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::Method;

use super::{Connection, JSON};
use crate::api::protobuf::{self, LeaseWire, MEDIA_TYPE};
use crate::api::wire::decode;
use crate::api::Error;
use crate::metrics::METRICS;

/// What a protobuf request asks for: protobuf first, JSON from a server that has no
/// protobuf for the type (client-go's `Accept`).
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

// === impl Connection ===

impl Connection {
    pub async fn get_lease(&mut self, path: &str) -> Result<Lease, Error> {
        self.lease(Method::GET, path, None).await
    }

    pub async fn create_lease(&mut self, path: &str, lease: &Lease) -> Result<Lease, Error> {
        self.lease(Method::POST, path, Some(lease)).await
    }

    pub async fn replace_lease(&mut self, path: &str, lease: &Lease) -> Result<Lease, Error> {
        self.lease(Method::PUT, path, Some(lease)).await
    }

    /// One Lease exchange in this connection's [`LeaseWire`]. A 406 or 415 to protobuf
    /// was not applied: the connection says so once, goes JSON for good, and sends the
    /// same request again as JSON right away.
    async fn lease(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&Lease>,
    ) -> Result<Lease, Error> {
        if self.lease_wire == LeaseWire::Protobuf {
            let body = body.map(|lease| (protobuf::encode_lease(lease), MEDIA_TYPE));
            match self.exchange(&method, path, body, ACCEPT_PROTOBUF).await {
                Ok((headers, bytes)) => return lease_answer(method, path, &headers, &bytes),
                Err(e) if matches!(e.code(), Some(406 | 415)) => {
                    tracing::info!(error = %crate::runtime::report(&e), "lease: the API server refuses protobuf; the Lease goes as JSON from now on");
                    self.lease_wire = LeaseWire::Json;
                    METRICS.lease_protobuf(false);
                }
                Err(e) => return Err(e),
            }
        }
        let (headers, bytes) = match body {
            Some(lease) => {
                let json = crate::api::wire::encode(&method, path, lease)?;
                self.exchange(&method, path, Some((json, JSON)), JSON)
                    .await?
            }
            None => self.exchange(&method, path, None, JSON).await?,
        };
        lease_answer(method, path, &headers, &bytes)
    }
}

/// A 2xx Lease in whichever format the server chose, by its `Content-Type`.
fn lease_answer(
    method: Method,
    path: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<Lease, Error> {
    let protobuf = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with(MEDIA_TYPE));
    if protobuf {
        protobuf::decode_lease(bytes).map_err(|source| Error::DecodeProtobuf {
            method,
            path: path.to_string(),
            source,
        })
    } else {
        decode(method, path, bytes)
    }
}
