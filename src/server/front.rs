//! The front thread: the listeners, every client connection (TLS, HTTP, the limits a client is
//! held to) and the probes' answers, on a thread of its own with its own single-threaded
//! runtime. Everything else a request asks for (a `/metrics` page, a view, the status page)
//! runs on the worker runtime while the front thread waits for it; the health checks, the
//! scrapes, the vitals and the canaries run there too. So no work on the worker runtime, however
//! long (a large page to parse, a status page to compute), can delay `/live`, `/health` or
//! `/live/engine`: they are answered from state the health checks already hold, by a thread
//! that does nothing heavy (as linkerd2-proxy runs its admin server on a thread of its own).

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
    pub closed: watch::Receiver<bool>,
}

/// The running front thread.
pub(super) struct Running {
    done: oneshot::Receiver<()>,
    abort: Option<oneshot::Sender<()>>,
}

impl Front {
    /// Starts the thread; it serves until `closed` is set and every connection has ended.
    pub(super) fn start(self) -> std::io::Result<Running> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (done_tx, done) = oneshot::channel();
        let (abort, abort_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sysport-front".into())
            .spawn(move || {
                rt.block_on(async move {
                    tokio::select! {
                        () = self.serve() => {}
                        _ = abort_rx => {}
                    }
                });
                // Dropping the runtime drops the connections still open after an abort.
                drop(rt);
                let _ = done_tx.send(());
            })?;
        Ok(Running {
            done,
            abort: Some(abort),
        })
    }

    async fn serve(self) {
        let listen = |std: std::net::TcpListener| {
            TcpListener::from_std(std)
                .inspect_err(|err| tracing::error!(error = %err, "cannot serve a listener"))
                .ok()
        };
        let Some(main) = listen(self.main) else {
            return;
        };
        let probes = self.probes.and_then(listen);
        let main = listener::serve(
            main,
            self.router,
            self.tls,
            self.certs_verified,
            self.slots,
            self.limits,
            self.closed.clone(),
        );
        let probes = async move {
            if let Some(probes) = probes {
                let serve = listener::serve(
                    probes,
                    self.probe_router,
                    None,
                    false,
                    self.probe_slots,
                    self.limits,
                    self.closed,
                );
                serve.await;
            }
        };
        tokio::join!(main, probes);
    }
}

impl Running {
    /// Resolves once the thread has stopped serving.
    pub(super) async fn done(&mut self) {
        let _ = (&mut self.done).await;
    }

    /// Drops every connection still open and waits for the thread to end.
    pub(super) async fn abort(mut self) {
        if let Some(abort) = self.abort.take() {
            let _ = abort.send(());
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
