//! Everything between the socket and the router: the accept loop, what one client may hold
//! (time to send a request head, idle keep-alive time, head size, concurrent connections) and
//! the open-file budget that keeps descriptors free for upstream fetches.
//!
//! - [`fds`]: the open-file limit and the default connection cap sized from it.
//! - [`slots`]: connection accounting and who is shed at the cap.
//! - [`phase`]: a connection's phase and deadlines, fed by its socket.
//! - [`conn`]: one connection's HTTP/1.1 server under those deadlines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

pub mod conn;
pub mod fds;
pub mod handoff;
pub mod handshakes;
mod limits;
pub mod metrics;
pub mod phase;
mod sendq;
pub mod slots;

pub use handoff::Handoff;
pub use limits::Limits;
pub use metrics::{Closed, ListenerMetrics};
pub use slots::{Slot, Slots};

use self::handshakes::Handshakes;
use self::phase::{Watch, Watched};

/// The TLS configuration for the next handshake (replaced when the certificate changes).
pub type Tls = watch::Receiver<Arc<ServerConfig>>;

/// Accepts connections on `listener` and serves `router` on each (over TLS when `tls` is given)
/// until `closed` turns true; then stops accepting, lets each connection finish its answer,
/// and returns once all are gone. With `handoff`, a plain connection whose first request is not
/// a probe is served on the worker runtime instead ([`handoff`]).
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    certs_verified: bool,
    slots: Arc<Slots>,
    limits: Limits,
    handoff: Option<Handoff>,
    mut closed: watch::Receiver<bool>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection task holds a sender; `recv` returns `None` once all have ended.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let handshakes = Handshakes::new(handshakes::IN_ALL, handshakes::PER_SOURCE);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    let watch = Watch::new(Instant::now());
                    let Some(slot) = slots.admit(watch.clone()) else {
                        continue;
                    };
                    let stop = stop_rx.clone();
                    let alive = alive_tx.clone();
                    let router = router.clone();
                    let tls = tls.as_ref().map(|t| (t.borrow().clone(), handshakes.clone()));
                    let serving = Serving { router, slot: Arc::new(slot), limits, stop, alive };
                    let handoff = handoff.clone();
                    tokio::spawn(async move {
                        connection(tcp, watch, serving, tls, certs_verified, handoff).await;
                    });
                }
                Err(err) => accept_failed(&err).await,
            },
            () = until_set(&mut closed) => break,
        }
    }
    drop(listener);
    stop_tx.send_replace(true);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

/// What serving one connection takes, wherever it is served.
struct Serving {
    router: Router,
    slot: Arc<Slot>,
    limits: Limits,
    stop: watch::Receiver<bool>,
    /// Held until the connection has ended (the listener's drain waits for every one).
    alive: mpsc::Sender<()>,
}

async fn connection(
    tcp: TcpStream,
    watch: Arc<Watch>,
    serving: Serving,
    tls: Option<(Arc<ServerConfig>, Arc<Handshakes>)>,
    certs_verified: bool,
    handoff: Option<Handoff>,
) {
    let Serving {
        router,
        slot,
        limits,
        stop,
        alive,
    } = serving;
    // The body goes out in two writes (the shared engine part, then sysport's own): without
    // TCP_NODELAY, Nagle's algorithm and the client's delayed ACK hold the second for 40 ms.
    if let Err(err) = tcp.set_nodelay(true) {
        tracing::debug!(error = %err, "cannot set TCP_NODELAY");
    }
    let remote = tcp.peer_addr().ok();
    let client = remote.map(|a| a.ip());
    let addrs = tcp.local_addr().ok().zip(remote);
    let Some((tls, handshakes)) = tls else {
        let peer = conn::Peer {
            ip: client,
            addrs,
            verified_cert: None,
        };
        if let Some(handoff) = handoff {
            let (deadline, _) = watch.deadline(&limits);
            // While it sends its first line it may be shed at the cap, like any waiter.
            let first = tokio::select! {
                first = handoff::first(&tcp, &handoff.is_probe, deadline) => first,
                () = slot.shed.notified() => return,
            };
            match first {
                // Served here; a late one is closed at once by its deadline, and counted.
                Some(handoff::First::Probe | handoff::First::Late) => {}
                Some(handoff::First::Other) => {
                    // Moved to the worker runtime's reactor: its requests are read, worked out
                    // and written there.
                    let Ok(std) = tcp.into_std() else { return };
                    handoff.worker.spawn(async move {
                        if let Ok(tcp) = TcpStream::from_std(std) {
                            let io = Watched::new(tcp, watch.clone());
                            conn::serve(io, peer, router, watch, slot, limits, stop).await;
                        }
                        drop(alive);
                    });
                    return;
                }
                None => return,
            }
        }
        let io = Watched::new(tcp, watch.clone());
        conn::serve(io, peer, router, watch, slot, limits, stop).await;
        drop(alive);
        return;
    };
    // The handshake counts against the request-head deadline, and a shed closes it too.
    let (deadline, _) = watch.deadline(&limits);
    let handshake = async {
        match first_byte(&tcp).await {
            // A TLS handshake record (content type 22).
            Some(0x16) => {}
            Some(_) => return Err(Some(tcp)),
            None => {
                slot.metrics().closed(Closed::TlsHandshake);
                return Err(None);
            }
        }
        let Some(_place) = handshakes.enter(client).await else {
            slot.metrics().closed(Closed::TlsBusy);
            return Err(None);
        };
        tokio_rustls::TlsAcceptor::from(tls)
            .accept(Watched::new(tcp, watch.clone()))
            .await
            .map_err(|err| {
                tracing::debug!(error = %err, "TLS handshake failed");
                slot.metrics().closed(Closed::TlsHandshake);
                None
            })
    };
    let outcome = tokio::select! {
        outcome = handshake => outcome,
        () = tokio::time::sleep_until(deadline.into()) => {
            slot.metrics().closed(Closed::HeadTimeout);
            return;
        }
        () = slot.shed.notified() => return,
    };
    match outcome {
        Ok(io) => {
            // A certificate the handshake accepted proves the client only where the
            // configuration has it verified against the client CA.
            let cert = io.get_ref().1.peer_certificates().and_then(|c| c.first());
            let peer = conn::Peer {
                ip: client,
                addrs,
                verified_cert: cert
                    .filter(|_| certs_verified)
                    .map(|der| conn::ClientCert::of(der)),
            };
            conn::serve(io, peer, router, watch, slot, limits, stop).await;
        }
        Err(Some(mut plain)) => {
            slot.metrics().closed(Closed::PlainHttp);
            // What Go's net/http answers, so a mistyped scheme is obvious from curl.
            let _ = plain
                .write_all(
                    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n\
                      Client sent an HTTP request to an HTTPS server.\n",
                )
                .await;
            // Read what the client sent before closing, or the kernel resets the connection
            // and the client never sees the answer.
            let _ = plain.shutdown().await;
            let drain = async {
                let mut sink = [0u8; 4096];
                for _ in 0..16 {
                    if matches!(plain.read(&mut sink).await, Ok(0) | Err(_)) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        }
        // Counted where it happened: a failed handshake, or a source over its share.
        Err(None) => {}
    }
}

/// The client's first byte, left unread; `None` when it closed first.
async fn first_byte(tcp: &TcpStream) -> Option<u8> {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(1) => Some(first[0]),
        _ => None,
    }
}

/// A failed `accept`: the peer's problem (reset before it was accepted) is skipped; anything
/// else (out of descriptors) is logged and waited out briefly, so the loop does not spin.
async fn accept_failed(err: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        err.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %err, "cannot accept a connection");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Resolves once `flag` is true (or its sender is gone).
pub async fn until_set(flag: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`: dropped here, before any other await.
    let _ = flag.wait_for(|&set| set).await;
}
