//! Start-up, staged so that a bad address fails before anything runs:
//! [`Sysport::bind`] (or [`Sysport::from_listener`] for tests on port 0) → [`Sysport::run`],
//! with the listeners (main port, optional probe port), TLS and basic auth in place.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::app::{App, Handle, Runtime, SHUTDOWN_GRACE};
use super::front::Front;
use super::routes::{is_probe, probes_only, router};
use crate::config::Config;
use crate::listener::{self, ListenerMetrics, Slots};
use crate::scrape;
use crate::telemetry::Telemetry;
use crate::web;

/// Connections the probe port holds apart from the main port's cap (the kubelet probes each
/// container every few seconds: a handful at a time).
const PROBE_CONNECTIONS: usize = 16;

/// Why sysport could not start listening.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The address is taken, not local, or not permitted.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The web configuration could not be put in force (its files changed since loading).
    #[error("{file}: {error}")]
    Web {
        /// The web configuration file.
        file: std::path::PathBuf,
        /// What is wrong.
        error: web::WebError,
    },
}

/// A bound, not yet running sysport.
pub struct Sysport {
    listener: TcpListener,
    probes: Option<TcpListener>,
    app: Arc<App>,
    limits: listener::Limits,
    slots: Arc<Slots>,
    tls: Option<web::tls::Reloader>,
    guard: Option<web::auth::Guard>,
}

async fn bind_addr(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError::Listen { addr, source })
}

impl Sysport {
    /// Binds the configured address (and the probe port, when configured).
    pub async fn bind(config: Config) -> Result<Sysport, BindError> {
        let host = config.listen.host;
        let listener = bind_addr(SocketAddr::new(host, config.listen.port)).await?;
        let probes = match config.listen.probe_port {
            Some(port) => Some(bind_addr(SocketAddr::new(host, port)).await?),
            None => None,
        };
        let sysport = Sysport::try_from_listener(listener, config)?;
        Ok(match probes {
            Some(probes) => sysport.with_probe_listener(probes),
            None => sysport,
        })
    }

    /// Serves only the probes (`/live`, `/health`, `/live/engine`), over plain HTTP, on `probes`
    /// too: the kubelet's way in when the main port requires client certificates.
    pub fn with_probe_listener(mut self, probes: TcpListener) -> Sysport {
        self.probes = Some(probes);
        self
    }

    /// The probe listener's address, when there is one.
    pub fn probe_addr(&self) -> Option<SocketAddr> {
        self.probes.as_ref().and_then(|p| p.local_addr().ok())
    }

    /// Uses an already bound listener (tests bind 127.0.0.1:0). Must be called in a runtime.
    ///
    /// # Panics
    /// When the web configuration's certificate cannot be loaded any more (it was when the
    /// configuration was loaded); [`Sysport::bind`] reports that as an error instead.
    pub fn from_listener(listener: TcpListener, config: Config) -> Sysport {
        Sysport::try_from_listener(listener, config)
            .expect("the web configuration loaded when the configuration was")
    }

    /// [`Sysport::from_listener`], with an error where the web configuration cannot be put in
    /// force.
    pub fn try_from_listener(listener: TcpListener, config: Config) -> Result<Sysport, BindError> {
        let telemetry = Telemetry::new();
        let fd_limit = listener::fds::fd_limit();
        let limits = listener::Limits::new(&config.listen, fd_limit);
        if let (_, true) =
            listener::fds::effective_max_connections(config.listen.max_connections, fd_limit)
        {
            tracing::warn!(
                max_connections = limits.max_connections,
                ?fd_limit,
                "listen.max_connections lowered to keep descriptors free under the open-file limit"
            );
        }
        let slots = Slots::new(limits.max_connections, ListenerMetrics::new(&telemetry));
        let web_file = config.listen.web.as_ref().map(|w| w.file.clone());
        let web_error = move |error: web::WebError| BindError::Web {
            file: web_file.clone().unwrap_or_default(),
            error,
        };
        let tls = match config.listen.web.as_ref().and_then(|w| w.tls.clone()) {
            Some(settings) => Some(
                web::tls::Reloader::new(settings, &telemetry).map_err(|e| web_error(e.into()))?,
            ),
            None => None,
        };
        let auth = config
            .listen
            .web
            .as_ref()
            .filter(|w| !w.users.is_empty() || !w.headers.is_empty())
            .map(|w| (w.users.clone(), w.headers.clone()));
        let client = scrape::http_client();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listen = listener
            .local_addr()
            .map_or_else(|_| String::new(), |addr| format!("{scheme}://{addr}"));
        let health = Arc::new(crate::health::Health::new(telemetry.clone()));
        let held = super::held::Ledger::new(config.listen.max_answer_bytes_held, &telemetry);
        let runtime = Runtime::start(config, &client, &telemetry, &health);
        let app = Arc::new(App {
            runtime: RwLock::new(Arc::new(runtime)),
            listen,
            render: Default::default(),
            held,
            telemetry,
            health,
            worker: tokio::runtime::Handle::current(),
            client,
            shutting_down: watch::channel(false).0,
            otlp: std::sync::OnceLock::new(),
        });
        let guard = match auth {
            Some((users, headers)) => {
                let probe_app = app.clone();
                let is_open: web::auth::IsOpen =
                    Arc::new(move |path: &str| is_probe(&probe_app.current().config, path));
                let guard = web::auth::Guard::new(&users, &headers, is_open)
                    .map_err(|e| web_error(e.into()))?;
                Some(guard.counting(app.telemetry.http_requests.clone()))
            }
            None => None,
        };
        Ok(Sysport {
            listener,
            probes: None,
            app,
            limits,
            slots,
            tls,
            guard,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle for reload and shutdown.
    pub fn handle(&self) -> Handle {
        Handle {
            app: self.app.clone(),
        }
    }

    /// Serves until `shutdown` resolves (or [`Handle::shutdown`] is called), then drains:
    /// `/health` answers 503 at once, the listener stays open for the drain delay so endpoint
    /// controllers notice, then it closes and in-flight requests finish (bounded).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self.app.clone();
        let mut stopping = app.shutting_down.subscribe();
        let signal_app = app.clone();
        tokio::spawn(async move {
            shutdown.await;
            signal_app.shutting_down.send_replace(true);
        });
        let (closed_tx, mut closed_rx) = watch::channel(false);
        let drain_app = app.clone();
        let drain = async move {
            let _ = stopping.wait_for(|&s| s).await;
            drain_app.health.begin_shutdown();
            let delay = drain_app.current().config.shutdown.drain_delay;
            tracing::info!(drain_delay = ?delay, "shutting down: /health is 503, draining");
            tokio::time::sleep(delay).await;
            closed_tx.send_replace(true);
        };
        tokio::spawn(drain);
        let tls = self.tls.map(|reloader| {
            let current = reloader.subscribe();
            tokio::spawn(reloader.run(closed_rx.clone()));
            current
        });
        let certs_verified = app
            .current()
            .config
            .listen
            .web
            .as_ref()
            .and_then(|w| w.tls.as_ref())
            .is_some_and(|t| t.client_auth.verifies());
        let probe_app = app.clone();
        let handoff = listener::Handoff {
            worker: app.worker.clone(),
            is_probe: Arc::new(move |path: &str| is_probe(&probe_app.current().config, path)),
        };
        let front = Front {
            main: self.listener.into_std()?,
            probes: self.probes.map(TcpListener::into_std).transpose()?,
            router: router(app.clone(), self.guard),
            probe_router: Router::new().fallback(probes_only).with_state(app.clone()),
            tls,
            certs_verified,
            // A reserve of its own: the main port's connections, however many, never take
            // the probes' places.
            probe_slots: Slots::reserve(PROBE_CONNECTIONS, self.slots.metrics().clone()),
            slots: self.slots,
            limits: self.limits,
            handoff,
            closed: closed_rx.clone(),
        };
        let mut front = front.start()?;
        let otlp = super::push::start(&app);
        tokio::select! {
            () = front.done() => return Ok(()),
            () = listener::until_set(&mut closed_rx) => {}
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, front.done())
            .await
            .is_err()
        {
            tracing::warn!("in-flight requests did not finish in {SHUTDOWN_GRACE:?}; exiting");
            front.abort().await;
        }
        super::push::finish(otlp, &app).await;
        // An incident closed just before the end is on disk for the next start.
        app.health.incidents.flush().await;
        Ok(())
    }
}

/// Serves `config` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    Sysport::from_listener(listener, config).run(shutdown).await
}
