//! The per-connection deadlines of the metrics listener: a connection that moves no byte
//! for [`Deadlines::idle`] is closed, and none lives past [`Deadlines::lifetime`] (plus a
//! grace for the answer in flight). `Tracked` is the socket wrapper that notes each byte's
//! progress. Without them a local client that pipelines requests and never reads blocks
//! hyper's writes forever, and sixteen such clients hold every connection slot.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// How long a metrics connection may stall and live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// No byte read or written for this long: closed at once (nothing in flight moves).
    pub idle: Duration,
    /// Past this age the connection finishes the answer in flight and closes (a client
    /// that reads a byte now and then is never idle).
    pub lifetime: Duration,
    /// How long that last answer may take once `lifetime` is up.
    pub grace: Duration,
}

/// When a connection last moved a byte, shared by its socket wrapper and its task.
#[derive(Debug)]
pub struct Progress {
    born: Instant,
    /// Milliseconds from `born` to the last byte moved.
    last_ms: AtomicU64,
}

/// A socket that records every byte's progress in [`Progress`].
pub struct Tracked<T> {
    inner: T,
    progress: Arc<Progress>,
}

// === impl Progress ===

impl Progress {
    pub fn new() -> Arc<Progress> {
        Arc::new(Progress {
            born: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    pub fn born(&self) -> Instant {
        self.born
    }

    /// The instant the last byte moved (the connection's birth before the first).
    pub fn last(&self) -> Instant {
        self.born + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    fn moved(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

// === impl Deadlines ===

impl Deadlines {
    /// What the connection task does at `now`, and the next instant to look again.
    pub fn check(&self, progress: &Progress, closing: Option<Instant>, now: Instant) -> Verdict {
        let idle_at = progress.last() + self.idle;
        if now >= idle_at || closing.is_some_and(|hard| now >= hard) {
            return Verdict::Close;
        }
        match closing {
            Some(hard) => Verdict::Wait(idle_at.min(hard)),
            None if now >= progress.born() + self.lifetime => Verdict::Finish(now + self.grace),
            None => Verdict::Wait(idle_at.min(progress.born() + self.lifetime)),
        }
    }
}

/// [`Deadlines::check`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing due; look again then.
    Wait(Instant),
    /// The lifetime is up: finish the answer in flight (graceful shutdown) by then.
    Finish(Instant),
    /// Drop the connection now.
    Close,
}

// === impl Tracked ===

impl<T> Tracked<T> {
    pub fn new(inner: T, progress: Arc<Progress>) -> Self {
        Self { inner, progress }
    }

    fn note<E>(&self, r: &Poll<Result<usize, E>>) {
        if matches!(r, Poll::Ready(Ok(n)) if *n > 0) {
            self.progress.moved();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.progress.moved();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
