//! What serves: the runtime a configuration makes (replaced whole on reload), the state that
//! outlives it, and the [`Handle`] that reloads and shuts down from outside.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::held::Ledger;
use super::render::Renders;
use crate::config::Config;
use crate::control::Control;
use crate::health::{self, Checks, Families, Health, Summing};
use crate::model::Recorder;
use crate::scrape::Scraper;
use crate::status::history::History;
use crate::telemetry::Telemetry;
use crate::views::Views;
use crate::vitals::Vitals;

/// How long in-flight requests may take to finish once the listener has closed.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything that a configuration determines; replaced whole on reload.
pub(super) struct Runtime {
    /// Unique per runtime: what a rendering was made under (relabelling, added labels).
    pub(super) id: u64,
    pub(super) config: Config,
    pub(super) scraper: Arc<Scraper>,
    /// The scrapes' recent history, for the status page (recorded by the scraper).
    pub(super) history: Arc<History>,
    pub(super) views: Views,
    /// The engines' vitals, recorded by the health checks.
    pub(super) vitals: Arc<Vitals>,
    /// The control routes (`/engine/*`, `/v1/loras`, `/metadata`).
    pub(super) control: Arc<Control>,
    pub(super) stop_checks: watch::Sender<bool>,
}

impl Runtime {
    /// Starts `config`: its scraper, views and vitals, and the health checks of its upstreams,
    /// whose health `health` keeps (across reloads, for the upstreams a reload keeps).
    pub(super) fn start(
        config: Config,
        client: &reqwest::Client,
        telemetry: &Telemetry,
        health: &Arc<Health>,
    ) -> Runtime {
        for u in &config.upstreams {
            telemetry.register_upstream(&u.name);
        }
        // Every scrape result is recorded in sysport's own metrics and the status page's history.
        let history = Arc::new(History::new(config.upstreams.len()));
        let metadata = Arc::new(crate::control::metadata::Cache::new(config.upstreams.len()));
        let recorders: Vec<Arc<dyn Recorder>> = vec![
            Arc::new(telemetry.clone()),
            history.clone(),
            metadata.clone(),
        ];
        let scraper = Arc::new(Scraper::new(&config, client.clone(), recorders));
        let vitals = Arc::new(Vitals::new(&config));
        let summing = Summing::start(vitals.clone());
        let checks = Arc::new(Checks {
            scraper: scraper.clone(),
            health: health.clone(),
            board: health.configure(&config),
            families: (config.upstreams.iter().enumerate())
                .map(|(i, u)| Families::of(u, vitals.names(i)))
                .collect(),
            vitals: vitals.clone(),
            client: client.clone(),
            summing,
        });
        let control = Arc::new(Control::new(
            &config,
            client.clone(),
            scraper.clone(),
            metadata,
            health.incidents.clone(),
        ));
        let (stop_checks, stop) = watch::channel(false);
        tokio::spawn(control.clone().keep_read(stop.clone()));
        tokio::spawn(health::run(checks, config.health.interval, stop));
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Runtime {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            views: Views::new(&config),
            config,
            scraper,
            history,
            vitals,
            control,
            stop_checks,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.stop_checks.send(true);
    }
}

pub(super) struct App {
    pub(super) runtime: RwLock<Arc<Runtime>>,
    /// The main port as a URL, for the status page.
    pub(super) listen: String,
    pub(super) render: Renders,
    /// The bytes answers being written hold, against `listen.max_answer_bytes_held`.
    pub(super) held: Arc<Ledger>,
    pub(super) telemetry: Telemetry,
    /// Readiness and each upstream's verdict, across reloads.
    pub(super) health: Arc<Health>,
    /// The runtime the work of a request runs on (the probes are answered on the front
    /// thread, see `front`).
    pub(super) worker: tokio::runtime::Handle,
    pub(super) client: reqwest::Client,
    pub(super) shutting_down: watch::Sender<bool>,
    /// The OTLP export's report, once it runs (`push`).
    pub(super) otlp: std::sync::OnceLock<Arc<std::sync::Mutex<crate::otlp::Report>>>,
}

impl App {
    pub(super) fn current(&self) -> Arc<Runtime> {
        self.runtime.read().expect("runtime lock").clone()
    }
}

/// Controls a running sysport from outside: reload, shutdown.
#[derive(Clone)]
pub struct Handle {
    pub(super) app: Arc<App>,
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
            &self.app.health,
        ));
        self.app
            .held
            .set_budget(new.config.listen.max_answer_bytes_held);
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
