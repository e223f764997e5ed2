//! The system port: `/metrics`, `/health`, `/live`, the status page (`/`, `/status`), graceful
//! shutdown and reload.
//!
//! Start-up is staged so a bad address fails before anything runs (see `start`):
//! [`Sysport::bind`] (or [`Sysport::from_listener`] for tests on port 0) → [`Sysport::run`].
//! A [`Handle`] reloads the configuration or starts shutdown from outside.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::health::{self, Readiness};
use crate::scrape::Scraper;
use crate::stall;
use crate::telemetry::Telemetry;
use crate::views::Views;

mod negotiate;
mod page;
mod parts;
mod routes;
mod start;

use page::RenderSlot;
pub use page::SYSPORT_AGE;
pub use start::{BindError, Sysport, serve};

/// How long in-flight requests may take to finish once the listener has closed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything that a configuration determines; replaced whole on reload.
struct Runtime {
    config: Config,
    scraper: Arc<Scraper>,
    views: Views,
    readiness: Arc<Readiness>,
    vitals: Arc<crate::vitals::Vitals>,
    stop_checks: watch::Sender<bool>,
}

impl Runtime {
    fn start(config: Config, client: &reqwest::Client, telemetry: &Telemetry) -> Runtime {
        let scraper = Arc::new(Scraper::new(&config, client.clone(), telemetry.clone()));
        let readiness = Arc::new(Readiness::new(&config.health, &config.upstreams));
        telemetry.health_ready.set(readiness.is_ready() as i64);
        stall::register_gauges(&config.upstreams, telemetry);
        let vitals = Arc::new(crate::vitals::Vitals::new(&config));
        let (stop_checks, stop) = watch::channel(false);
        tokio::spawn(health::run(
            scraper.clone(),
            readiness.clone(),
            vitals.clone(),
            client.clone(),
            telemetry.clone(),
            config.health.interval,
            stop,
        ));
        Runtime {
            views: Views::new(&config),
            config,
            scraper,
            readiness,
            vitals,
            stop_checks,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.stop_checks.send(true);
    }
}

struct App {
    runtime: RwLock<Arc<Runtime>>,
    /// The main port as a URL, for the status page.
    listen: String,
    render: std::sync::Mutex<RenderSlot>,
    telemetry: Telemetry,
    client: reqwest::Client,
    shutting_down: watch::Sender<bool>,
}

impl App {
    fn current(&self) -> Arc<Runtime> {
        self.runtime.read().expect("runtime lock").clone()
    }
}

/// Controls a running sysport from outside: reload, shutdown.
#[derive(Clone)]
pub struct Handle {
    app: Arc<App>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

impl Handle {
    /// Replaces the configuration atomically: requests already running finish with the old one.
    /// Listen address changes need a restart and are ignored with a warning.
    pub fn reload(&self, config: Config) {
        let old = self.app.current();
        if old.config.listen != config.listen {
            tracing::warn!("listen address changes take effect only after a restart");
        }
        for u in &old.config.upstreams {
            if !config.upstreams.iter().any(|n| n.name == u.name) {
                self.app.telemetry.forget_upstream(&u.name);
            }
        }
        let new = Arc::new(Runtime::start(
            config,
            &self.app.client,
            &self.app.telemetry,
        ));
        if old.readiness.is_shutting_down() {
            new.readiness.begin_shutdown();
        }
        *self.app.runtime.write().expect("runtime lock") = new;
        self.app
            .telemetry
            .config_reloads
            .with_label_values(&["success"])
            .inc();
        tracing::info!("configuration reloaded");
    }

    /// Counts a reload that was refused (the caller logs why).
    pub fn reload_failed(&self) {
        self.app
            .telemetry
            .config_reloads
            .with_label_values(&["failure"])
            .inc();
    }

    /// The configuration in use.
    pub fn config(&self) -> Config {
        self.app.current().config.clone()
    }

    /// Starts shutdown: `/health` turns 503 at once; the listener closes after the drain delay.
    pub fn shutdown(&self) {
        self.app.shutting_down.send_replace(true);
    }
}
