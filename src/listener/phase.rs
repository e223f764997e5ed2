//! What one connection is doing, as its deadlines need it: waiting for a request head (since
//! when), idle between requests, or answering one (and when a byte last moved).
//!
//! hyper's own `header_read_timeout` also runs while a kept-alive connection waits for its next
//! request, so it cannot be a few seconds without closing every idle scraper connection; these
//! deadlines follow Go's `net/http` instead: the head timeout counts from the connection's start
//! or from the first byte of the next request, the idle timeout from the end of the last answer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::limits::Limits;
use super::metrics::Closed;

const HEAD: u64 = 0;
const IDLE: u64 = 1 << 62;
const BUSY: u64 = 2 << 62;
/// The answer is handed to the client: it must take it within the write timeout.
const WRITING: u64 = 3 << 62;
const PHASE: u64 = 3 << 62;

/// One connection's phase and the time it began, shared by its socket, its requests and the
/// task that enforces its deadlines.
pub struct Watch {
    base: Instant,
    /// Phase bits over milliseconds since `base` when the phase began.
    phase: AtomicU64,
    /// Milliseconds since `base` when a byte last moved.
    progress: AtomicU64,
    /// Woken when the phase changes so that the deadline may come earlier.
    pub(crate) earlier: Notify,
}

impl Watch {
    /// A new connection: its request head is due `request_head_timeout` from now.
    pub fn new(now: Instant) -> Arc<Watch> {
        Arc::new(Watch {
            base: now,
            phase: AtomicU64::new(HEAD),
            progress: AtomicU64::new(0),
            earlier: Notify::new(),
        })
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis())
            .unwrap_or(u64::MAX)
            .min(!PHASE)
    }

    fn at(&self, millis: u64) -> Instant {
        self.base + Duration::from_millis(millis & !PHASE)
    }

    fn read(&self, now: Instant) {
        let millis = self.millis(now);
        self.progress.store(millis, Ordering::Relaxed);
        let phase = self.phase.load(Ordering::Relaxed);
        if phase & PHASE == IDLE {
            self.phase.store(HEAD | millis, Ordering::Relaxed);
            self.earlier.notify_one();
        }
    }

    fn wrote(&self, now: Instant) {
        self.progress.store(self.millis(now), Ordering::Relaxed);
    }

    /// The client took bytes the kernel held for it (the socket's send queue went down): as
    /// much progress as a write.
    pub fn taken(&self, now: Instant) {
        self.wrote(now);
    }

    /// A request head arrived: no head deadline until the answer is done.
    pub fn busy(&self, now: Instant) {
        let millis = self.millis(now);
        self.progress.store(millis, Ordering::Relaxed);
        self.phase.store(BUSY | millis, Ordering::Relaxed);
    }

    /// The answer is ready and being written: from now on the client must take its bytes.
    pub fn writing(&self, now: Instant) {
        let millis = self.millis(now);
        self.progress.store(millis, Ordering::Relaxed);
        self.phase.store(WRITING | millis, Ordering::Relaxed);
        // The write deadline may come before the one the watcher sleeps on.
        self.earlier.notify_one();
    }

    /// The answer is done: the connection idles until the next request's first byte.
    pub fn idle(&self, now: Instant) {
        self.phase.store(IDLE | self.millis(now), Ordering::Relaxed);
        // The idle deadline may come before the head deadline the watcher sleeps on.
        self.earlier.notify_one();
    }

    /// Whether a request is in flight and its answer not yet handed to the client.
    pub fn is_busy(&self) -> bool {
        self.phase.load(Ordering::Relaxed) & PHASE == BUSY
    }

    /// Since when the connection has moved nothing that a shed would lose: a connection waiting
    /// for a request head (since it began to wait) or for its client to take its answer (since
    /// the client last took a byte); `None` while an answer is being made, which is never shed.
    pub fn stuck_since(&self) -> Option<Instant> {
        let phase = self.phase.load(Ordering::Relaxed);
        match phase & PHASE {
            BUSY => None,
            WRITING => Some(self.at(self.progress.load(Ordering::Relaxed))),
            _ => Some(self.at(phase)),
        }
    }

    /// When the connection is due to be closed, and why.
    pub fn deadline(&self, limits: &Limits) -> (Instant, Closed) {
        let phase = self.phase.load(Ordering::Relaxed);
        match phase & PHASE {
            HEAD => (
                self.at(phase) + limits.request_head_timeout,
                Closed::HeadTimeout,
            ),
            IDLE => (self.at(phase) + limits.idle_timeout, Closed::IdleTimeout),
            WRITING => {
                let progress = self.progress.load(Ordering::Relaxed);
                (
                    self.at(progress) + limits.write_timeout,
                    Closed::WriteTimeout,
                )
            }
            _ => {
                let progress = self.progress.load(Ordering::Relaxed);
                (self.at(progress) + limits.idle_timeout, Closed::Stalled)
            }
        }
    }
}

/// A socket whose reads and writes are reported to its [`Watch`].
pub struct Watched<T> {
    inner: T,
    watch: Arc<Watch>,
}

impl<T> Watched<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, watch: Arc<Watch>) -> Watched<T> {
        Watched { inner, watch }
    }

    /// The wrapped socket.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.read(Instant::now());
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote(Instant::now());
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.watch.wrote(Instant::now());
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            request_head_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_request_head_bytes: 16 << 10,
            max_connections: 8,
        }
    }

    #[test]
    fn an_answer_the_client_does_not_take_is_due_within_the_write_timeout() {
        let t0 = Instant::now();
        let w = Watch::new(t0);
        w.busy(t0 + Duration::from_secs(1));
        // While the answer is made (waiting for an upstream), the idle timeout bounds it.
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(121), Closed::Stalled)
        );
        assert_eq!(w.stuck_since(), None, "never shed while the answer is made");
        w.writing(t0 + Duration::from_secs(2));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(32), Closed::WriteTimeout)
        );
        // Each byte the client takes moves the deadline.
        w.wrote(t0 + Duration::from_secs(20));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(50), Closed::WriteTimeout)
        );
        assert_eq!(w.stuck_since(), Some(t0 + Duration::from_secs(20)));
        w.idle(t0 + Duration::from_secs(21));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(141), Closed::IdleTimeout)
        );
    }

    #[test]
    fn a_new_connection_owes_its_head_within_the_head_timeout() {
        let t0 = Instant::now();
        let w = Watch::new(t0);
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(5), Closed::HeadTimeout)
        );
        // Trickled bytes do not move the head deadline.
        w.read(t0 + Duration::from_secs(3));
        assert_eq!(w.deadline(&limits()).0, t0 + Duration::from_secs(5));
    }

    #[test]
    fn an_idle_connection_gets_the_idle_timeout_then_the_head_timeout_from_its_first_byte() {
        let t0 = Instant::now();
        let w = Watch::new(t0);
        w.busy(t0 + Duration::from_secs(1));
        assert!(w.is_busy());
        w.idle(t0 + Duration::from_secs(2));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(122), Closed::IdleTimeout)
        );
        w.read(t0 + Duration::from_secs(60));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(65), Closed::HeadTimeout)
        );
    }

    #[test]
    fn a_busy_connection_is_due_only_when_no_byte_moves_for_the_idle_timeout() {
        let t0 = Instant::now();
        let w = Watch::new(t0);
        w.busy(t0 + Duration::from_secs(1));
        w.wrote(t0 + Duration::from_secs(30));
        assert_eq!(
            w.deadline(&limits()),
            (t0 + Duration::from_secs(150), Closed::Stalled)
        );
    }
}
