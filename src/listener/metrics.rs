//! The listener's own metrics: open connections, the cap in force, and every connection
//! sysport closed itself, by reason.

use prometheus::{IntCounterVec, IntGauge, Opts};

use crate::telemetry::{NAMESPACE, Telemetry};

/// Why sysport closed a connection (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The request head (or the TLS handshake before it) did not arrive in time.
    HeadTimeout,
    /// A kept-alive connection carried no new request in time.
    IdleTimeout,
    /// A request moved no byte in either direction for the idle timeout.
    Stalled,
    /// The client took no byte of its answer for the write timeout.
    WriteTimeout,
    /// At the cap, the connection that moved no byte longest (waiting for a request head, or
    /// for its client to take its answer) made room for a new one.
    Shed,
    /// At the cap with every connection busy, a new connection was closed at once.
    Refused,
    /// The TLS handshake failed (no or a refused client certificate, no common version).
    TlsHandshake,
    /// Plain HTTP on the TLS port: answered 400 and closed.
    PlainHttp,
    /// Its source already had as many TLS handshakes in progress as one source may
    /// (`listener::handshakes`): closed before any handshake work.
    TlsBusy,
}

impl Closed {
    const ALL: [Closed; 9] = [
        Closed::HeadTimeout,
        Closed::IdleTimeout,
        Closed::Stalled,
        Closed::WriteTimeout,
        Closed::Shed,
        Closed::Refused,
        Closed::TlsHandshake,
        Closed::PlainHttp,
        Closed::TlsBusy,
    ];

    fn label(self) -> &'static str {
        match self {
            Closed::HeadTimeout => "head_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::Stalled => "stalled",
            Closed::WriteTimeout => "write_timeout",
            Closed::Shed => "shed",
            Closed::Refused => "refused",
            Closed::TlsHandshake => "tls_handshake",
            Closed::PlainHttp => "plain_http",
            Closed::TlsBusy => "tls_busy",
        }
    }
}

/// `http_connections`, `http_connections_limit`, `http_connections_closed_total{reason}`.
#[derive(Clone)]
pub struct ListenerMetrics {
    pub(crate) open: IntGauge,
    pub(crate) limit: IntGauge,
    closed: IntCounterVec,
}

impl ListenerMetrics {
    /// Registers the metrics in sysport's registry.
    pub fn new(telemetry: &Telemetry) -> ListenerMetrics {
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(NAMESPACE);
        let open = IntGauge::with_opts(opts(
            "http_connections",
            "Client connections open on sysport's listeners.",
        ))
        .expect("valid metric");
        let limit = IntGauge::with_opts(opts(
            "http_connections_limit",
            "Most client connections held at once (listen.max_connections, or the default \
             sized from the open-file limit).",
        ))
        .expect("valid metric");
        let closed = IntCounterVec::new(
            opts(
                "http_connections_closed_total",
                "Client connections sysport closed itself, by reason.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for reason in Closed::ALL {
            closed.with_label_values(&[reason.label()]);
        }
        telemetry.register(Box::new(open.clone()));
        telemetry.register(Box::new(limit.clone()));
        telemetry.register(Box::new(closed.clone()));
        ListenerMetrics {
            open,
            limit,
            closed,
        }
    }

    /// Counts one connection closed for `reason`.
    pub fn closed(&self, reason: Closed) {
        self.closed.with_label_values(&[reason.label()]).inc();
    }
}
