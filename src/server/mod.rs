//! The system port: `/metrics`, `/health`, `/live`, the status page (`/`, `/status`), graceful
//! shutdown and reload.
//!
//! Start-up is staged so a bad address fails before anything runs (see `start`):
//! [`Sysport::bind`] (or [`Sysport::from_listener`] for tests on port 0) → [`Sysport::run`].
//! A [`Handle`] reloads the configuration or starts shutdown from outside.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::watch;
use tower_http::compression::CompressionLayer;

use crate::config::Config;
use crate::expfmt::{self, MergeOptions, ParseLimits, ParseOptions, Selection, TEXT_CONTENT_TYPE};
use crate::health::{self, Readiness};
use crate::parts::Parts;
use crate::scrape::{Scraped, Scraper};
use crate::stall;
use crate::status;
use crate::telemetry::Telemetry;
use crate::views::{self, Views};
use crate::web;

mod start;

pub use start::{BindError, Sysport, serve};

/// Below this, a response is copied into one buffer and sent in one write; above it, its runs
/// (mostly the upstream bodies themselves) are written as they are.
const SINGLE_WRITE_BYTES: usize = 64 << 10;

/// How long in-flight requests may take to finish once the listener has closed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything that a configuration determines; replaced whole on reload.
struct Runtime {
    config: Config,
    scraper: Arc<Scraper>,
    views: Views,
    readiness: Arc<Readiness>,
    stop_checks: watch::Sender<bool>,
}

impl Runtime {
    fn start(config: Config, client: &reqwest::Client, telemetry: &Telemetry) -> Runtime {
        let scraper = Arc::new(Scraper::new(&config, client.clone(), telemetry.clone()));
        let readiness = Arc::new(Readiness::new(&config.health, &config.upstreams));
        telemetry.health_ready.set(readiness.is_ready() as i64);
        stall::register_gauges(&config.upstreams, telemetry);
        let (stop_checks, stop) = watch::channel(false);
        tokio::spawn(health::run(
            scraper.clone(),
            readiness.clone(),
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
            stop_checks,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.stop_checks.send(true);
    }
}

/// The latest shared rendering of the engine families, held weakly: it lives only while the
/// requests that share it are being answered.
type RenderSlot = Option<(
    RenderKey,
    std::sync::Weak<tokio::sync::OnceCell<Arc<[Bytes]>>>,
)>;

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

/// The routes, behind basic auth and the configured headers when the web configuration has
/// them (the probes stay open).
fn router(app: Arc<App>, guard: Option<web::auth::Guard>) -> Router {
    let routes = Router::new().fallback(dispatch).with_state(app);
    let routes = match guard {
        Some(guard) => routes.layer(axum::middleware::from_fn_with_state(
            guard,
            web::auth::require,
        )),
        None => routes,
    };
    routes.layer(
        // Prometheus asks for gzip on every scrape: the fastest level keeps compression from
        // costing more than the merge itself, for most of the size benefit.
        CompressionLayer::new()
            .quality(tower_http::CompressionLevel::Fastest)
            .gzip(true)
            .no_br()
            .no_deflate()
            .no_zstd(),
    )
}

/// Whether `path` is a probe: open without credentials, and served on the probe port.
fn is_probe(config: &Config, path: &str) -> bool {
    path == config.health.path || path == config.health.live_path || path == stall::LIVE_ENGINE_PATH
}

/// The probe port: the probes, nothing else.
async fn probes_only(State(app): State<Arc<App>>, req: Request) -> Response {
    let runtime = app.current();
    if is_probe(&runtime.config, req.uri().path()) {
        dispatch(State(app), req).await
    } else {
        (
            StatusCode::NOT_FOUND,
            "not found: this port serves only the probes\n",
        )
            .into_response()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    /// `/metrics/<name>`: a view.
    View(usize),
    Health,
    Live,
    /// `/`: the status page.
    Page,
    /// `/status`: its facts as JSON.
    Status,
    /// `/live/engine`: the engine container's liveness (stall detection).
    LiveEngine,
}

async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    let started = Instant::now();
    let runtime = app.current();
    let path = req.uri().path();
    let route = if path == "/metrics" {
        Some(Route::Metrics)
    } else if path == runtime.config.health.path {
        Some(Route::Health)
    } else if path == runtime.config.health.live_path {
        Some(Route::Live)
    } else if path == stall::LIVE_ENGINE_PATH {
        Some(Route::LiveEngine)
    } else {
        path.strip_prefix("/metrics/")
            .and_then(|name| runtime.views.find(name))
            .map(Route::View)
            .or(match path {
                "/" => Some(Route::Page),
                "/status" => Some(Route::Status),
                _ => None,
            })
    };
    let mut read = "";
    let response = match (route, check_host(&req)) {
        (_, Err(msg)) => (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response(),
        (None, _) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
        (Some(_), _) if req.method() != Method::GET && req.method() != Method::HEAD => {
            let mut r = (StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n").into_response();
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        (Some(Route::Live), _) => live(&runtime),
        (Some(Route::LiveEngine), _) => {
            let (live, body) = stall::live_engine(&runtime.readiness.stalls());
            let code = if live {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            json_response(code, body.to_string())
        }
        (Some(Route::Health), _) => health(&app, &runtime),
        (Some(Route::Status), _) => json_response(StatusCode::OK, facts(&app, &runtime).to_json()),
        (Some(Route::Page), _) => html_response(facts(&app, &runtime).to_html()),
        (Some(Route::Metrics), _) => {
            let names = requested_names(req.uri().query());
            // A query that names anything is a selective read, well-formed or not.
            read = if matches!(names, Ok(None)) {
                "full"
            } else {
                "selective"
            };
            match names {
                Ok(names) => {
                    let selection = names.map(|n| Selection::new(n.iter().map(String::as_str)));
                    metrics(&app, &runtime, selection, read, req.headers(), started).await
                }
                Err(msg) => (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response(),
            }
        }
        (Some(Route::View(v)), _) => {
            read = "view";
            view(&app, &runtime, v, req.headers(), started).await
        }
    };
    let view_path;
    let path_label = match route {
        Some(Route::Metrics) => "/metrics",
        Some(Route::View(v)) => {
            view_path = format!("/metrics/{}", runtime.views.name(v));
            view_path.as_str()
        }
        Some(Route::Health) => runtime.config.health.path.as_str(),
        Some(Route::Live) => runtime.config.health.live_path.as_str(),
        Some(Route::Page) => "/",
        Some(Route::Status) => "/status",
        Some(Route::LiveEngine) => stall::LIVE_ENGINE_PATH,
        None => "other",
    };
    let t = &app.telemetry;
    t.http_requests
        .with_label_values(&[path_label, response.status().as_str(), read])
        .inc();
    if !read.is_empty() {
        t.metrics_duration
            .with_label_values(&[read])
            .observe(started.elapsed().as_secs_f64());
    }
    response
}

fn live(runtime: &Runtime) -> Response {
    if runtime.readiness.is_shutting_down() {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"shutting down"}"#.into(),
        )
    } else {
        json_response(StatusCode::OK, r#"{"status":"live"}"#.into())
    }
}

fn health(app: &App, runtime: &Runtime) -> Response {
    let (ready, body) = runtime.readiness.report(app.telemetry.uptime_seconds());
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(code, body.to_string())
}

/// What the status page and `/status` show, read from sysport's state (no upstream fetch).
fn facts(app: &App, runtime: &Runtime) -> status::Facts {
    status::Facts::gather(status::Sources {
        config: &runtime.config,
        scraper: &runtime.scraper,
        readiness: &runtime.readiness,
        views: &runtime.views,
        telemetry: &app.telemetry,
        listen: &app.listen,
    })
}

fn html_response(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json_response(code: StatusCode, body: String) -> Response {
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The time an upstream may take for this request: Prometheus' scrape timeout minus a margin
/// for merging and sending, so the answer arrives before the scraper gives up.
fn budget(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = headers
        .get("x-prometheus-scrape-timeout-seconds")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    let margin = (secs * 0.1).clamp(0.05, 0.5);
    Some(Duration::from_secs_f64((secs - margin).max(0.01)))
}

/// At most this many `name` parameters in one read.
const MAX_NAMES: usize = 256;

/// `?name=a&name=b` → the requested family names (percent-decoded); `None` for the whole page,
/// which a query without any parameter (`?`, `?&`) asks for too. `name[]` (prometheus_client's
/// spelling) is accepted as well. Anything else is refused with a message, rather than silently
/// answered with the whole page.
fn requested_names(query: Option<&str>) -> Result<Option<Vec<String>>, String> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let url = reqwest::Url::parse(&format!("http://q/?{query}"))
        .map_err(|err| format!("unreadable query `{query}`: {err}"))?;
    let mut names = Vec::new();
    for (key, value) in url.query_pairs() {
        if key != "name" && key != "name[]" {
            return Err(format!(
                "unknown query parameter `{key}`: /metrics takes only `name` (repeatable), \
                 e.g. /metrics?name=vllm:num_requests_waiting&name=vllm:kv_cache_usage_perc"
            ));
        }
        if !expfmt::is_metric_name(value.as_bytes()) {
            return Err(format!(
                "`name={value}` is not a metric family name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
            ));
        }
        if names.len() == MAX_NAMES {
            return Err(format!("more than {MAX_NAMES} `name` parameters"));
        }
        names.push(value.into_owned());
    }
    Ok((!names.is_empty()).then_some(names))
}

/// RFC 9112 §3.2: a server answers 400 to an HTTP/1.1 request without a Host header, and to
/// any request with more than one or with an invalid one.
fn check_host(req: &Request) -> Result<(), &'static str> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => Err("more than one Host header (RFC 9112 section 3.2)"),
        (None, _) if req.version() == Version::HTTP_11 => {
            Err("an HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)")
        }
        (Some(host), _) if !valid_host(host.as_bytes()) => {
            Err("invalid Host header: expected host[:port] (RFC 9112 section 3.2)")
        }
        _ => Ok(()),
    }
}

/// `uri-host [ ":" port ]`, or empty (a target without an authority).
fn valid_host(host: &[u8]) -> bool {
    host.is_empty() || (!host.contains(&b'@') && axum::http::uri::Authority::try_from(host).is_ok())
}

async fn metrics(
    app: &App,
    runtime: &Runtime,
    selection: Option<Selection>,
    read: &str,
    headers: &HeaderMap,
    started: Instant,
) -> Response {
    let scraper = &runtime.scraper;
    // With `?name=`, only upstreams whose prefixes could hold a selected family are fetched.
    let which: Vec<usize> = (0..scraper.upstreams().len())
        .filter(|&i| selection.as_ref().is_none_or(|s| scraper.may_hold(i, s)))
        .collect();
    let scraped = scraper
        .scrape(&which, selection.as_ref(), budget(headers))
        .await;
    let rendering = Instant::now();
    let openmetrics = wants_openmetrics(headers);
    let engines = match &selection {
        Some(s) => render_engines(app, runtime, &which, &scraped, Some(s), openmetrics),
        None => {
            // Scrapers that share a fetch share its rendering too: one merge and one output
            // buffer however many of them wait (Prometheus HA pairs, load tests).
            let key = RenderKey {
                generations: scraped.iter().map(|s| s.generation).collect(),
                openmetrics,
            };
            let cell = app.render_cell(key);
            cell.get_or_init(|| async {
                render_engines(app, runtime, &which, &scraped, None, openmetrics)
            })
            .await
            .clone()
        }
    };
    let now = Instant::now();
    // Rendered after the engine merge, so the series counts it sets are this scrape's.
    let own = if wants_own(selection.as_ref()) {
        set_fetch_ages(app, runtime, &which, &scraped, now);
        stall::set_gauges(&runtime.readiness.stalls(), &app.telemetry);
        render_own(app, runtime, selection.as_ref(), openmetrics)
    } else if openmetrics {
        Bytes::from_static(expfmt::OPENMETRICS_EOF)
    } else {
        Bytes::new()
    };
    let len = engines.iter().map(Bytes::len).sum::<usize>() + own.len();
    let body = if len < SINGLE_WRITE_BYTES {
        let mut all = Vec::with_capacity(len);
        for part in engines.iter().chain([&own]) {
            all.extend_from_slice(part);
        }
        Body::from(all)
    } else {
        Body::new(Parts::new(engines.iter().cloned().chain([own])))
    };
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, content_type(openmetrics));
    set_age(r.headers_mut(), &scraped, started, now);
    app.telemetry
        .render_duration
        .with_label_values(&[read])
        .observe(rendering.elapsed().as_secs_f64());
    r
}

/// A view: the families it reads, fetched like a selective read (shared fetches,
/// `min_interval`, the engine's `name[]` selection) and combined.
async fn view(
    app: &App,
    runtime: &Runtime,
    v: usize,
    headers: &HeaderMap,
    started: Instant,
) -> Response {
    let scraper = &runtime.scraper;
    let (which, names) = runtime
        .views
        .wanted(v, |u, name| scraper.may_hold(u, &Selection::new([name])));
    let selection = Selection::new(names.iter().map(String::as_str));
    let scraped = scraper
        .scrape(&which, Some(&selection), budget(headers))
        .await;
    let rendering = Instant::now();
    let openmetrics = wants_openmetrics(headers);
    let (body, dropped) = runtime
        .views
        .render(v, scraper, &which, &scraped, openmetrics);
    app.telemetry.openmetrics_dropped.inc_by(dropped);
    let mut r = Response::new(Body::from(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, content_type(openmetrics));
    set_age(r.headers_mut(), &scraped, started, Instant::now());
    app.telemetry
        .render_duration
        .with_label_values(&["view"])
        .observe(rendering.elapsed().as_secs_f64());
    r
}

fn content_type(openmetrics: bool) -> HeaderValue {
    HeaderValue::from_static(if openmetrics {
        expfmt::OPENMETRICS_CONTENT_TYPE
    } else {
        TEXT_CONTENT_TYPE
    })
}

/// `Sysport-Age`: the age of the oldest upstream data in the response, in seconds with
/// millisecond precision (readers judge staleness at 50 ms scale); and HTTP's own `Age`
/// (whole seconds) when that data predates the request: it came from a fetch that an earlier
/// request made (`min_interval`).
fn set_age(h: &mut HeaderMap, scraped: &[Scraped], started: Instant, now: Instant) {
    let age = scraped
        .iter()
        .filter(|s| s.result.is_ok())
        .map(|s| (now.saturating_duration_since(s.at), s.at < started))
        .max();
    if let Some((age, reused)) = age {
        if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", age.as_secs_f64())) {
            h.insert(SYSPORT_AGE, v);
        }
        if reused {
            h.insert(header::AGE, HeaderValue::from(age.as_secs()));
        }
    }
}

/// Response header: seconds since the oldest upstream data in the response was fetched.
pub const SYSPORT_AGE: &str = "sysport-age";

/// Whether a read includes sysport's own families at all (they cost a registry walk).
fn wants_own(selection: Option<&Selection>) -> bool {
    selection.is_none_or(|s| s.selects_under(expfmt::RESERVED_PREFIX))
}

/// Sets `upstream_last_fetch_age_seconds` for every upstream: from this read's fetch where it
/// succeeded, else from the upstream's last success (absent until there is one).
fn set_fetch_ages(
    app: &App,
    runtime: &Runtime,
    which: &[usize],
    scraped: &[Scraped],
    now: Instant,
) {
    let gauge = &app.telemetry.last_fetch_age;
    for (i, u) in runtime.scraper.upstreams().iter().enumerate() {
        let here = which
            .iter()
            .position(|&w| w == i)
            .and_then(|k| scraped[k].result.is_ok().then_some(scraped[k].at));
        if let Some(at) = here.or_else(|| runtime.scraper.last_success(i)) {
            gauge
                .with_label_values(&[&u.name])
                .set(now.saturating_duration_since(at).as_secs_f64());
        }
    }
}

/// Identifies one rendering of the engine families: the fetches it came from and the format.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RenderKey {
    generations: Vec<u64>,
    openmetrics: bool,
}

impl App {
    /// The shared rendering for `key`, alive while some request holds it.
    fn render_cell(&self, key: RenderKey) -> Arc<tokio::sync::OnceCell<Arc<[Bytes]>>> {
        let mut slot = self.render.lock().expect("render cache lock");
        if let Some((k, weak)) = slot.as_ref()
            && *k == key
            && let Some(cell) = weak.upgrade()
        {
            return cell;
        }
        let cell = Arc::new(tokio::sync::OnceCell::new());
        *slot = Some((key, Arc::downgrade(&cell)));
        cell
    }
}

/// Merges and writes the engine families of one scrape (no `# EOF`), in text mostly as runs of
/// the upstream bodies. Without a name filter it also records each upstream's series counts.
fn render_engines(
    app: &App,
    runtime: &Runtime,
    which: &[usize],
    scraped: &[Scraped],
    names: Option<&Selection>,
    openmetrics: bool,
) -> Arc<[Bytes]> {
    // Renamed families under their other names (`aliases: true`) go after every upstream's
    // own, so the per-upstream counts below stay in step with the upstreams.
    let aliases = match names {
        None => views::aliases(&runtime.scraper, which, scraped),
        Some(_) => views::Aliases::default(),
    };
    // Each upstream's page as its rules leave it (one part or two), and whose each part is.
    let (mut engines, owners): (Vec<&expfmt::Exposition>, Vec<usize>) = which
        .iter()
        .zip(scraped)
        .filter_map(|(&i, s)| Some((i, s.result.as_ref().ok()?)))
        .flat_map(|(i, page)| page.served.iter().map(move |part| (&**part, i)))
        .unzip();
    engines.extend(&aliases.expositions);
    let merged = expfmt::merge(
        &engines,
        &MergeOptions {
            added: runtime.scraper.added_labels(),
            names,
            hasher: runtime.scraper.hasher(),
        },
    );
    if names.is_none() {
        let upstreams = runtime.scraper.upstreams();
        let mut totals: Vec<(usize, expfmt::MergeStats)> = Vec::new();
        for (&i, stats) in owners.iter().zip(merged.stats()) {
            match totals.last_mut() {
                Some((last, total)) if *last == i => {
                    total.kept += stats.kept;
                    total.conflict += stats.conflict;
                    total.duplicate += stats.duplicate;
                }
                _ => totals.push((i, *stats)),
            }
        }
        for (i, stats) in totals {
            let name = upstreams[i].name.as_str();
            let t = &app.telemetry;
            t.set_series(name, "kept", stats.kept);
            t.set_series(name, "conflict", stats.conflict);
            t.set_series(name, "duplicate", stats.duplicate);
        }
        for (i, added) in aliases.counts {
            app.telemetry
                .set_series(&upstreams[i].name, "aliased", added);
        }
    }
    if openmetrics {
        let mut out = Vec::with_capacity(merged.size_hint());
        let stats = expfmt::write_openmetrics(&merged, &mut out);
        if stats.dropped_samples > 0 {
            app.telemetry
                .openmetrics_dropped
                .inc_by(stats.dropped_samples);
            tracing::debug!(
                families = stats.dropped_families,
                "families OpenMetrics cannot express were left out"
            );
        }
        Arc::new([Bytes::from(out)])
    } else {
        let bodies = engines.iter().map(|e| e.body().clone()).collect();
        let mut out = expfmt::Pieces::new(bodies);
        expfmt::write_text(&merged, &mut out);
        out.finish().into()
    }
}

/// sysport's own metrics (the selected ones) in the response's format; ends the OpenMetrics
/// document.
fn render_own(
    app: &App,
    runtime: &Runtime,
    selection: Option<&Selection>,
    openmetrics: bool,
) -> Bytes {
    let mut text = Vec::with_capacity(16 << 10);
    app.telemetry.render_text(selection, &mut text);
    if !openmetrics {
        // The registry's text is already canonical text 0.0.4 with nothing to merge into it:
        // reading it back would give the same bytes (`own_text_reads_back_unchanged`).
        return Bytes::from(text);
    }
    read_back_own(text, openmetrics, runtime.scraper.hasher())
}

/// sysport's own metrics, read back like an upstream so that both output formats treat them
/// like any family.
fn read_back_own(text: Vec<u8>, openmetrics: bool, hasher: expfmt::PairHasher) -> Bytes {
    let keep = [String::from_utf8_lossy(expfmt::RESERVED_PREFIX).into_owned()];
    let opts = ParseOptions {
        keep: &keep,
        limits: ParseLimits::DERIVED,
        added_labels: &[],
        hasher,
        allow_reserved: true,
    };
    let own = expfmt::parse(text.into(), expfmt::Format::Text, &opts).unwrap_or_else(|err| {
        tracing::error!(error = %err, "could not read back sysport's own metrics");
        expfmt::Exposition::empty()
    });
    let sources = [&own];
    let merged = expfmt::merge(
        &sources,
        &MergeOptions {
            added: &[],
            names: None,
            hasher,
        },
    );
    let mut out = Vec::with_capacity(merged.size_hint() + 16);
    if openmetrics {
        expfmt::write_openmetrics(&merged, &mut out);
        out.extend_from_slice(expfmt::OPENMETRICS_EOF);
    } else {
        expfmt::write_text(&merged, &mut out);
    }
    Bytes::from(out)
}

/// Whether the Accept header prefers OpenMetrics to the text format (q-values honoured; a
/// wildcard alone means text, which every Prometheus-compatible scraper reads).
fn wants_openmetrics(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let (mut q_om, mut q_text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" => version = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        match media.as_str() {
            "application/openmetrics-text"
                if matches!(version.as_deref(), None | Some("1.0.0") | Some("0.0.1")) =>
            {
                q_om = q_om.max(q)
            }
            "text/plain" => q_text = q_text.max(q),
            _ => {}
        }
    }
    q_om > 0.0 && q_om > q_text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_leaves_a_margin_below_prometheus_timeout() {
        let mut h = HeaderMap::new();
        assert_eq!(budget(&h), None);
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("10"),
        );
        assert_eq!(budget(&h), Some(Duration::from_secs_f64(9.5)));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("1"),
        );
        assert_eq!(budget(&h), Some(Duration::from_secs_f64(0.9)));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("junk"),
        );
        assert_eq!(budget(&h), None);
    }

    #[test]
    fn accept_negotiation_follows_q_values() {
        let accept = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(v));
            wants_openmetrics(&h)
        };
        assert!(accept(
            "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        ));
        assert!(accept("application/openmetrics-text"));
        assert!(!accept(
            "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"
        ));
        assert!(!accept("*/*"));
        assert!(!accept("application/openmetrics-text;q=0"));
        assert!(!accept("application/openmetrics-text;version=2.0.0"));
        assert!(!wants_openmetrics(&HeaderMap::new()));
    }

    #[test]
    fn names_are_percent_decoded_and_repeatable() {
        assert_eq!(
            requested_names(Some(
                "name=vllm%3Anum_requests_running&name[]=vllm:kv_cache_usage_perc"
            )),
            Ok(Some(vec![
                "vllm:num_requests_running".to_string(),
                "vllm:kv_cache_usage_perc".to_string()
            ]))
        );
        assert_eq!(requested_names(None), Ok(None));
        assert_eq!(requested_names(Some("")), Ok(None));
    }

    #[test]
    fn bad_query_parameters_are_refused_with_the_reason() {
        let err = |q: &str| requested_names(Some(q)).expect_err(q);
        assert!(err("x=1").contains("unknown query parameter `x`"));
        assert!(err("name=vllm:a&match[]=up").contains("unknown query parameter `match[]`"));
        assert!(err("name=").contains("`name=` is not a metric family name"));
        assert!(err("name=vllm:a&name=1abc").contains("`name=1abc`"));
        assert!(err("name=vllm%20a").contains("`name=vllm a`"));
        assert!(err("name").contains("`name=`"));
        let many = vec!["name=a"; MAX_NAMES + 1].join("&");
        assert!(err(&many).contains("more than 256"));
        assert!(requested_names(Some(&vec!["name=a"; MAX_NAMES].join("&"))).is_ok());
    }

    #[test]
    fn own_text_reads_back_unchanged() {
        let t = Telemetry::new();
        t.register_upstream("engine \"0\"\\n");
        t.set_series("engine \"0\"\\n", "kept", 7);
        t.render_duration
            .with_label_values(&["full"])
            .observe(0.0123);
        t.scrape_duration
            .with_label_values(&["engine \"0\"\\n"])
            .observe(2.5);
        let mut text = Vec::new();
        t.render_text(None, &mut text);
        let back = read_back_own(text.clone(), false, expfmt::PairHasher::new(7));
        assert!(text.len() > 1000);
        assert_eq!(
            String::from_utf8_lossy(&back),
            String::from_utf8_lossy(&text)
        );
    }

    #[test]
    fn own_metrics_are_rendered_only_when_a_read_can_include_them() {
        let wants = |names: &[&str]| wants_own(Some(&Selection::new(names.iter().copied())));
        assert!(wants_own(None));
        assert!(wants(&["vllm:a", "dynamo_sysport_upstream_up"]));
        assert!(wants(&["dynamo_sysport_upstream_scrapes"]));
        assert!(!wants(&["vllm:a", "vllm:b"]));
        assert!(!wants(&["dynamo_sysportx"]));
        assert!(!wants(&[]));
    }
}
