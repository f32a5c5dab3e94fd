//! Decoding one watch stream: newline-delimited `WatchEvent`s, an idle timeout, and an
//! `ERROR` event turned into the same typed `Error` a failed request gives (410 → relist).
//! Which object to watch and what to do on each event is the caller's business.

use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::WatchEvent;
use reqwest::Method;
use serde::de::DeserializeOwned;

use super::{ApiClient, Error};

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// One open watch. `next` yields events until the server ends the stream (`timeoutSeconds`),
/// the connection goes quiet for longer than `idle`, or an error arrives.
pub struct EventStream<T> {
    client: ApiClient,
    path: String,
    body: Body,
    buf: Vec<u8>,
    idle: Duration,
    _kind: PhantomData<fn() -> T>,
}

// === impl EventStream ===

impl<T: DeserializeOwned> EventStream<T> {
    /// Open `path` (which must carry `watch=true` and `timeoutSeconds=N`); the request is
    /// bounded by N plus a margin, and each read by `idle`.
    pub async fn open(
        client: &ApiClient,
        path: String,
        server_timeout: Duration,
        idle: Duration,
    ) -> Result<Self, Error> {
        let resp = client
            .stream(&path, server_timeout + Duration::from_secs(10))
            .await?;
        Ok(Self {
            client: client.clone(),
            path,
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
            idle,
            _kind: PhantomData,
        })
    }

    /// The next event; `Ok(None)` when the stream ended or went idle (re-watch from the
    /// last resourceVersion). An `ERROR` event comes back as `Err(Error::Api)`.
    pub async fn next(&mut self) -> Result<Option<WatchEvent<T>>, Error> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return self.decode(&line).map(Some);
            }
            match tokio::time::timeout(self.idle, self.body.next()).await {
                Err(_) => {
                    tracing::debug!(path = %self.path, "watch idle; re-watching");
                    return Ok(None);
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(source))) => {
                    if source.is_timeout() || source.is_body() || source.is_decode() {
                        // A dropped connection mid-stream: resume from the last version.
                        tracing::debug!(path = %self.path, error = %source, "watch stream broke");
                        return Ok(None);
                    }
                    return Err(Error::Transport {
                        method: Method::GET,
                        path: self.path.clone(),
                        identity: self.client.identity().clone(),
                        source: source.into(),
                    });
                }
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    fn decode(&self, line: &[u8]) -> Result<WatchEvent<T>, Error> {
        let event: WatchEvent<T> =
            serde_json::from_slice(line).map_err(|source| Error::Decode {
                method: Method::GET,
                path: self.path.clone(),
                source,
            })?;
        match event {
            WatchEvent::ErrorStatus(status) => Err(Error::Api {
                method: Method::GET,
                path: self.path.clone(),
                code: status
                    .code
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(500),
                identity: self.client.identity().clone(),
                status: Box::new(status),
                retry_after: None,
            }),
            other => Ok(other),
        }
    }
}
