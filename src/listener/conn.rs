//! One client connection: hyper's HTTP/1.1 server on a watched socket, closed when a deadline
//! passes, when it is shed at the cap, or (after its answer) when the server stops.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::limits::Limits;
use super::metrics::Closed;
use super::phase::Watch;
use super::slots::Slot;

/// The address of the client that sent a request (a request extension), for what is decided
/// per client (basic auth's turn at bcrypt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// A request whose client proved who it is (a request extension): a client certificate the
/// TLS stack verified, or basic auth credentials that passed. Probes show it their whole body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentialed;

/// The client certificate a request's connection proved itself with (a request extension, set
/// with [`Credentialed`]): its subject (RFC 4514, `CN=operator`), or its first subject
/// alternative name when its subject is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert(pub Arc<str>);

impl ClientCert {
    /// The name of a DER certificate the handshake verified.
    pub fn of(der: &[u8]) -> ClientCert {
        Self::named(der).unwrap_or_else(|| ClientCert("(no subject or name)".into()))
    }

    fn named(der: &[u8]) -> Option<ClientCert> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject().to_string();
        if !subject.is_empty() {
            return Some(ClientCert(subject.into()));
        }
        let san = cert.subject_alternative_name().ok()??;
        san.value.general_names.iter().find_map(|name| match name {
            GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                Some(ClientCert((*s).into()))
            }
            _ => None,
        })
    }
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// The connection's local and remote addresses, where its send queue is read.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    /// The client certificate the TLS handshake verified against the client CA.
    pub verified_cert: Option<ClientCert>,
}

/// Serves HTTP/1.1 on `io` until the client leaves or sysport closes the connection.
pub async fn serve<I>(
    io: I,
    peer: Peer,
    router: Router,
    watch: Arc<Watch>,
    slot: Arc<Slot>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let addrs = peer.addrs;
    let service = ConnService {
        client: peer.ip,
        verified_cert: peer.verified_cert,
        router,
        watch: watch.clone(),
    };
    let mut builder = http1::Builder::new();
    builder
        .max_header_size(limits.max_request_head_bytes)
        // Deadlines are enforced below (see `phase`); hyper's would also close idle connections.
        .header_read_timeout(None);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    let mut queue = Queue::default();
    let every = (limits.write_timeout / 4).min(QUEUE_EVERY);
    loop {
        let (deadline, reason) = watch.deadline(&limits);
        if reason != Closed::WriteTimeout {
            // A reading of an earlier answer says nothing of the next one's.
            queue = Queue::default();
        }
        // While the answer's writes are stalled, the send queue is read every so often.
        let read_queue = (reason == Closed::WriteTimeout)
            .then_some(addrs)
            .flatten()
            .map(|_| queue.next(deadline - limits.write_timeout, every));
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(err) = done {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                if let Some((local, remote)) = addrs.filter(|_| reason == Closed::WriteTimeout) {
                    queue.read(local, remote, &watch);
                }
                // The phase may have moved the deadline while this slept.
                let (deadline, reason) = watch.deadline(&limits);
                if Instant::now() >= deadline {
                    slot.metrics().closed(reason);
                    return;
                }
            }
            () = tokio::time::sleep_until(read_queue.unwrap_or(deadline).into()),
                if read_queue.is_some_and(|at| at < deadline) =>
            {
                if let Some((local, remote)) = addrs {
                    queue.read(local, remote, &watch);
                }
            }
            () = watch.earlier.notified() => {}
            () = slot.shed.notified() => {
                if !watch.is_busy() {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// How often, at most, a stalled answer's send queue is read.
const QUEUE_EVERY: Duration = Duration::from_secs(5);

/// The last reading of a stalled answer's send queue: the bytes the kernel held, and when.
#[derive(Debug, Default)]
struct Queue {
    last: Option<(Instant, Option<u64>)>,
}

impl Queue {
    /// When to read it next: `every` after the later of the last write the client took
    /// (`since`) and the last reading.
    fn next(&self, since: Instant, every: Duration) -> Instant {
        match self.last {
            Some((at, _)) if at > since => at + every,
            _ => since + every,
        }
    }

    /// Reads the queue; when it went down since the last reading, the client took bytes,
    /// which moves its write deadline as a write would.
    fn read(&mut self, local: SocketAddr, remote: SocketAddr, watch: &Watch) {
        let now = super::sendq::queued(local, remote);
        if let (Some(now), Some((_, Some(before)))) = (now, self.last)
            && now < before
        {
            watch.taken(Instant::now());
        }
        self.last = Some((Instant::now(), now));
    }
}

/// The router, marking the connection busy from a request's head to the end of its answer.
struct ConnService {
    client: Option<IpAddr>,
    /// The client certificate the TLS handshake verified.
    verified_cert: Option<ClientCert>,
    router: Router,
    watch: Arc<Watch>,
}

type Answer = Pin<Box<dyn Future<Output = Result<hyper::Response<Guarded>, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for ConnService {
    type Response = hyper::Response<Guarded>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut req: hyper::Request<Incoming>) -> Answer {
        let busy = Busy::start(self.watch.clone());
        let watch = self.watch.clone();
        if let Some(ip) = self.client {
            req.extensions_mut().insert(ClientIp(ip));
        }
        if let Some(cert) = &self.verified_cert {
            req.extensions_mut().insert(Credentialed);
            req.extensions_mut().insert(cert.clone());
        }
        let answer = tower::ServiceExt::oneshot(self.router.clone(), req);
        Box::pin(async move {
            let response = match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            // From here the client must take the answer within the write timeout.
            watch.writing(Instant::now());
            Ok(response.map(|body| Guarded { body, _busy: busy }))
        })
    }
}

/// Held from a request's head until its answer is written (or dropped).
struct Busy {
    watch: Arc<Watch>,
}

impl Busy {
    fn start(watch: Arc<Watch>) -> Busy {
        watch.busy(Instant::now());
        Busy { watch }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.watch.idle(Instant::now());
    }
}

/// A response body that keeps its connection marked busy until hyper is done with it.
pub struct Guarded {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
