//! Decoding one watch stream: newline-delimited `WatchEvent`s, an idle timeout, and an
//! `ERROR` event turned into the same typed `Error` a failed request gives (410 → relist).
//! Which object to watch and what to do on each event is the caller's business.

use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::WatchEvent;
use reqwest::Method;
use serde::de::DeserializeOwned;

use super::{ApiClient, Error, Identity};

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// One open watch. `next` yields events until the server ends the stream (`timeoutSeconds`),
/// the connection goes quiet for longer than `idle`, or an error arrives.
pub struct EventStream<T> {
    client: ApiClient,
    path: String,
    body: Body,
    lines: LineBuf,
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
            lines: LineBuf::new(client.inner.opts.max_body),
            idle,
            _kind: PhantomData,
        })
    }

    /// The next event; `Ok(None)` when the stream ended or went idle (re-watch from the
    /// last resourceVersion). An `ERROR` event comes back as `Err(Error::Api)`, and a line
    /// longer than the client's body cap as `Err(Error::TooLarge)`.
    pub async fn next(&mut self) -> Result<Option<WatchEvent<T>>, Error> {
        loop {
            while let Some(line) = self.lines.take_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return self.decode(&line).map(Some);
            }
            if self.lines.overflowed() {
                return Err(Error::TooLarge {
                    method: Method::GET,
                    path: self.path.clone(),
                    limit: self.lines.limit(),
                });
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
                Ok(Some(Ok(chunk))) => self.lines.push(&chunk),
            }
        }
    }

    fn decode(&self, line: &[u8]) -> Result<WatchEvent<T>, Error> {
        decode_line(line, &self.path, self.client.identity())
    }
}

/// One line of a watch stream on `path` as an event (pure). An `ERROR` event becomes the
/// same typed `Error::Api` a failed request as `identity` gives (410 → relist); a line
/// that is not a `WatchEvent<T>` is `Error::Decode`.
pub fn decode_line<T: DeserializeOwned>(
    line: &[u8],
    path: &str,
    identity: &Identity,
) -> Result<WatchEvent<T>, Error> {
    let event: WatchEvent<T> = serde_json::from_slice(line).map_err(|source| Error::Decode {
        method: Method::GET,
        path: path.to_string(),
        source,
    })?;
    match event {
        WatchEvent::ErrorStatus(status) => Err(Error::Api {
            method: Method::GET,
            path: path.to_string(),
            code: status
                .code
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500),
            identity: identity.clone(),
            status: Box::new(status),
            retry_after: None,
        }),
        other => Ok(other),
    }
}

/// The bytes of a watch stream cut into lines: each byte is scanned for a newline once, a
/// line is split off the front without moving the rest (many short lines in one chunk cost
/// linear time, not quadratic), and a line that grows past `limit` (the client's body cap)
/// is an error, not unbounded memory.
pub struct LineBuf {
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    limit: usize,
}

// === impl LineBuf ===

impl LineBuf {
    /// An empty buffer for lines of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            scanned: 0,
            limit,
        }
    }

    /// Appends a chunk as read from the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The first complete line (with its newline), if one is buffered.
    pub fn take_line(&mut self) -> Option<Bytes> {
        match self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
            Some(pos) => {
                let end = self.scanned + pos;
                self.scanned = 0;
                Some(self.buf.split_to(end + 1).freeze())
            }
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }

    /// An unfinished line is longer than the cap: stop reading this stream.
    pub fn overflowed(&self) -> bool {
        self.buf.len() > self.limit
    }

    /// The cap given to [`LineBuf::new`].
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_each_byte_is_scanned_once() {
        let mut lines = LineBuf::new(1024);
        lines.push(b"{\"type\":");
        assert_eq!(lines.take_line(), None);
        assert_eq!(lines.scanned, 8, "the scanned prefix is remembered");
        lines.push(b"\"ADDED\"}\n{\"ty");
        assert_eq!(
            lines.take_line().as_deref(),
            Some(&b"{\"type\":\"ADDED\"}\n"[..])
        );
        assert_eq!(lines.take_line(), None);
        assert_eq!(lines.scanned, 4);
        lines.push(b"pe\":1}\n\n");
        assert_eq!(lines.take_line().as_deref(), Some(&b"{\"type\":1}\n"[..]));
        assert_eq!(lines.take_line().as_deref(), Some(&b"\n"[..]));
        assert_eq!(lines.take_line(), None);
        assert!(!lines.overflowed());
    }

    /// Regression: each line was drained off the front of a `Vec`, moving everything after
    /// it, so a chunk of N short lines cost O(N²) byte moves: a server sending a mebibyte of
    /// blank lines held a core for about a minute. Now each line is split off in O(1).
    #[test]
    fn a_chunk_of_many_short_lines_takes_linear_time() {
        let n = 1 << 20;
        let mut lines = LineBuf::new(4 << 20);
        lines.push(&vec![b'\n'; n]);
        let start = tokio::time::Instant::now();
        let mut taken = 0;
        while let Some(line) = lines.take_line() {
            assert_eq!(&line[..], b"\n");
            taken += 1;
        }
        let took = start.elapsed();
        assert_eq!(taken, n);
        assert!(
            took < Duration::from_secs(10),
            "{n} one-byte lines took {took:?}"
        );
    }

    #[test]
    fn a_line_longer_than_the_body_cap_overflows() {
        let mut lines = LineBuf::new(16);
        lines.push(&[b'x'; 16]);
        assert_eq!(lines.take_line(), None);
        assert!(!lines.overflowed(), "exactly the cap is allowed");
        lines.push(b"x");
        assert_eq!(lines.take_line(), None);
        assert!(
            lines.overflowed(),
            "a server streaming one endless line is cut off"
        );
    }
}
