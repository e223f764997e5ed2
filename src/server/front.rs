//! The serving threads, each with a single-threaded runtime of its own:
//!
//! - `sysport-probes` (with `listen.probe_port`): the probe port's connections and the probes'
//!   answers, read from what the health checks publish. Nothing else runs there: no TLS, no
//!   gzip, no rendering, so nothing a client of the main port does can delay it.
//! - `sysport-front`: the main port's listener and connections (TLS handshakes, at most
//!   `listener::handshakes::IN_ALL` at once and `PER_SOURCE` from one address; HTTP parsing;
//!   the limits a client is held to). The probes asked on the main port are answered here;
//!   every other route is worked out on the worker runtime ([`on_worker`]), gzip included.
//!
//! The other threads: the worker runtime (`main.rs` builds it; the routes' work, the health
//! checks, scrapes and canaries), `sysport-parse` (the exposition crate's second parsing
//! thread), `sysport-vitals` (`health::check`, summing a check's vitals), `sysport-incidents`
//! (`incidents`, writing bundles to `incidents.dir`) and tokio's blocking
//! pool (bcrypt, and the search of `/proc` for an engine's processes). docs/architecture.md has
//! the table.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::listener::{self, Slots, Tls};

/// What the front thread serves.
pub(super) struct Front {
    pub main: std::net::TcpListener,
    pub probes: Option<std::net::TcpListener>,
    pub router: Router,
    pub probe_router: Router,
    pub tls: Option<Tls>,
    pub certs_verified: bool,
    pub slots: Arc<Slots>,
    /// The probe port's own connections, apart from the main port's.
    pub probe_slots: Arc<Slots>,
    pub limits: listener::Limits,
    /// Where the main port's plain connections that do not start with a probe are served.
    pub handoff: listener::Handoff,
    pub closed: watch::Receiver<bool>,
}

/// The running threads: the main port's, and the probe port's when there is one.
pub(super) struct Running {
    threads: Vec<Thread>,
}

/// One serving thread.
struct Thread {
    /// `None` once the thread has been seen to end.
    done: Option<oneshot::Receiver<()>>,
    abort: Option<oneshot::Sender<()>>,
}

impl Front {
    /// Starts the threads; each serves until `closed` is set and every connection has ended.
    /// The probe port gets a thread of its own, which does nothing else: a flood of TLS
    /// handshakes or of scrapes on the main port never reaches it.
    pub(super) fn start(self) -> std::io::Result<Running> {
        let mut threads = Vec::with_capacity(2);
        if let Some(probes) = self.probes {
            let (router, slots, limits, closed) = (
                self.probe_router,
                self.probe_slots,
                self.limits,
                self.closed.clone(),
            );
            threads.push(spawn("sysport-probes", move || async move {
                if let Some(probes) = listen(probes) {
                    listener::serve(probes, router, None, false, slots, limits, None, closed).await;
                }
            })?);
        }
        let (router, tls, verified, slots, limits, handoff, closed) = (
            self.router,
            self.tls,
            self.certs_verified,
            self.slots,
            self.limits,
            Some(self.handoff),
            self.closed,
        );
        let main = self.main;
        threads.push(spawn("sysport-front", move || async move {
            if let Some(main) = listen(main) {
                let serve =
                    listener::serve(main, router, tls, verified, slots, limits, handoff, closed);
                serve.await;
            }
        })?);
        Ok(Running { threads })
    }
}

/// A listener of the thread's own runtime; `None` (logged) when it cannot be.
fn listen(std: std::net::TcpListener) -> Option<TcpListener> {
    TcpListener::from_std(std)
        .inspect_err(|err| tracing::error!(error = %err, "cannot serve a listener"))
        .ok()
}

/// Starts a thread named `name` with a single-threaded runtime of its own, running what
/// `serve` makes until it ends or the thread is aborted.
fn spawn<F, Fut>(name: &str, serve: F) -> std::io::Result<Thread>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done_tx, done) = oneshot::channel();
    let (abort, abort_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            rt.block_on(async move {
                tokio::select! {
                    () = serve() => {}
                    _ = abort_rx => {}
                }
            });
            // Dropping the runtime drops the connections still open after an abort.
            drop(rt);
            let _ = done_tx.send(());
        })?;
    Ok(Thread {
        done: Some(done),
        abort: Some(abort),
    })
}

impl Running {
    /// Resolves once every thread has stopped serving.
    pub(super) async fn done(&mut self) {
        // Called again after a wait that timed out: a thread seen to end is not waited for again.
        for t in &mut self.threads {
            if let Some(done) = &mut t.done {
                let _ = done.await;
                t.done = None;
            }
        }
    }

    /// Drops every connection still open and waits for the threads to end.
    pub(super) async fn abort(mut self) {
        for t in &mut self.threads {
            if let Some(abort) = t.abort.take() {
                let _ = abort.send(());
            }
        }
        self.done().await;
    }
}

/// Runs `work` on the worker runtime and waits for its answer; the work is cancelled when the
/// request is (its client gone).
pub(super) async fn on_worker<T: Send + 'static>(
    worker: &tokio::runtime::Handle,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    match AbortOnDrop(worker.spawn(work)).await {
        Ok(answer) => Some(answer),
        Err(err) => {
            tracing::error!(error = %err, "a request's work failed");
            None
        }
    }
}

/// A task that is aborted when whoever waits for it stops waiting.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
