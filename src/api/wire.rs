//! The bytes of one exchange, shared by both clients (the pooled one and the Lease loop's
//! own connection): JSON bodies in and out, and the response headers bootlet reads
//! (`Location`, `Retry-After`, `Date`). Pure.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Error;

/// A request body as JSON.
pub(super) fn encode<B: Serialize>(
    method: &Method,
    path: &str,
    body: &B,
) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(body).map_err(|source| Error::Decode {
        method: method.clone(),
        path: path.to_string(),
        source,
    })
}

/// A 2xx body as `T`.
pub(super) fn decode<T: DeserializeOwned>(
    method: Method,
    path: &str,
    bytes: &[u8],
) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|source| Error::Decode {
        method,
        path: path.to_string(),
        source,
    })
}

/// A response's `Location` (a header value is visible ASCII, so it is log-safe).
pub(super) fn location(headers: &HeaderMap) -> Option<String> {
    headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `Retry-After` in seconds (the API server never sends the date form).
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// An HTTP `Date` (`Mon, 30 Nov 2026 21:13:00 GMT`).
pub(super) fn parse_http_date(text: &str) -> Option<SystemTime> {
    let ts = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(text)
        .ok()?;
    Some(SystemTime::from(ts))
}

/// `server - local` in whole seconds (pure).
pub(super) fn skew_secs(server: SystemTime, local: SystemTime) -> i64 {
    match server.duration_since(local) {
        Ok(ahead) => ahead.as_secs() as i64,
        Err(behind) => -(behind.duration().as_secs() as i64),
    }
}
