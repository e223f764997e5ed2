//! The routes: which path is which, the probes, `/metrics` and the views, the status page; and
//! the count of every answer in `dynamo_sysport_http_requests_total`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};

use super::app::{App, Runtime};
use super::negotiate::{budget, exposition, requested_names};
use super::page::{self, set_age};
use super::parts::Parts;
use super::{gzip, held};
use crate::config::Config;
use crate::expfmt::Selection;
use crate::model::routes;
use crate::scrape::Budget;
use crate::{status, web};
use bytes::Bytes;

/// The routes, behind basic auth and the configured headers when the web configuration has
/// them (the probes stay open).
pub(super) fn router(app: Arc<App>, guard: Option<web::auth::Guard>) -> Router {
    let routes = Router::new().fallback(dispatch).with_state(app);
    match guard {
        Some(guard) => routes.layer(axum::middleware::from_fn_with_state(
            guard,
            web::auth::require,
        )),
        None => routes,
    }
}

/// Whether `path` is a probe: open without credentials, and served on the probe port.
pub(super) fn is_probe(config: &Config, path: &str) -> bool {
    table(config)
        .iter()
        .any(|&(p, route)| p == path && route.is_probe())
}

/// The probe port: the probes, nothing else.
pub(super) async fn probes_only(State(app): State<Arc<App>>, req: Request) -> Response {
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
    /// `/metadata`: what each upstream is.
    Metadata,
    /// `/engine/*` or `/v1/loras`: forwarded to an engine (see `control`).
    Control(super::control::Kind),
    /// `/incidents`: the incidents, newest first.
    Incidents,
    /// `/incidents/{id}` or `/incidents/{id}.tar.gz`: one, or its bundle.
    Incident,
}

impl Route {
    /// The route of a request's path: the table's first match, else a view.
    fn of(path: &str, runtime: &Runtime) -> Option<Route> {
        table(&runtime.config)
            .into_iter()
            .find(|&(p, _)| p == path)
            .map(|(_, route)| route)
            .or_else(|| {
                routes::view_name(path)
                    .and_then(|name| runtime.views.find(name))
                    .map(Route::View)
            })
            .or_else(|| super::control::kind(path).map(Route::Control))
            .or_else(|| routes::incident(path).map(|_| Route::Incident))
    }

    /// The route's path, as `dynamo_sysport_http_requests_total` labels it.
    fn path(self, runtime: &Runtime) -> Cow<'_, str> {
        match self {
            Route::View(v) => Cow::Owned(routes::view(runtime.views.name(v))),
            Route::Control(super::control::Kind::Engine) => Cow::Borrowed(routes::ENGINE),
            Route::Control(super::control::Kind::Loras) => Cow::Borrowed(routes::LORAS),
            Route::Incident => Cow::Borrowed("/incidents/{id}"),
            route => Cow::Borrowed(
                table(&runtime.config)
                    .into_iter()
                    .find(|&(_, r)| r == route)
                    .map_or("other", |(p, _)| p),
            ),
        }
    }

    fn is_probe(self) -> bool {
        matches!(self, Route::Health | Route::Live | Route::LiveEngine)
    }
}

/// The route table: every route but the views (`/metrics/<name>`, `model::routes::view`) with
/// its path, in the order a request's path is tried. The probes' paths come from the
/// configuration, which keeps them off `/metrics` and `/live/engine`; one on `/` or `/status`
/// wins over the status page. No view's path is one of these (the configuration refuses a view
/// on a probe's path).
fn table(config: &Config) -> [(&str, Route); 8] {
    [
        (routes::METRICS, Route::Metrics),
        (&config.health.path, Route::Health),
        (&config.health.live_path, Route::Live),
        (routes::LIVE_ENGINE, Route::LiveEngine),
        (routes::STATUS_PAGE, Route::Page),
        (routes::STATUS, Route::Status),
        (routes::METADATA, Route::Metadata),
        (routes::INCIDENTS, Route::Incidents),
    ]
}

async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    let started = Instant::now();
    let runtime = app.current();
    let route = Route::of(req.uri().path(), &runtime);
    let (response, read) = match (route, check_host(&req)) {
        (_, Err(msg)) => (
            (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response(),
            "",
        ),
        (None, _) => ((StatusCode::NOT_FOUND, "not found\n").into_response(), ""),
        // The control routes take any method: the control module answers those it does not.
        (Some(route), _)
            if !matches!(route, Route::Control(_))
                && req.method() != Method::GET
                && req.method() != Method::HEAD =>
        {
            let mut r = (StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n").into_response();
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            (r, "")
        }
        (Some(route), _) => match probe(&app, &runtime, route, &req) {
            // The probes are answered here, from what the health checks publish.
            Some(answer) => (answer, ""),
            // Every other route is worked out on the worker runtime, gzip included: a route
            // added to the table lands there, never on the connections' thread.
            None => {
                let (a, r) = (app.clone(), runtime.clone());
                super::front::on_worker(&app.worker, async move {
                    answer(&a, &r, route, req, started).await
                })
                .await
                .unwrap_or_else(|| {
                    let r = (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n");
                    (r.into_response(), "")
                })
            }
        },
    };
    let path_label = route.map_or(Cow::Borrowed("other"), |r| r.path(&runtime));
    let t = &app.telemetry;
    t.http_requests
        .with_label_values(&[&path_label, response.status().as_str(), read])
        .inc();
    if !read.is_empty() {
        t.metrics_duration
            .with_label_values(&[read])
            .observe(started.elapsed().as_secs_f64());
    }
    response
}

/// A probe's answer; `None` for every other route.
fn probe(app: &App, runtime: &Runtime, route: Route, req: &Request) -> Option<Response> {
    match route {
        Route::Live => Some(live(app)),
        Route::LiveEngine => {
            let (live, body) = app.health.live_engine(whole_probe_body(runtime, req));
            Some(json_response(code(live), body.to_string()))
        }
        Route::Health => {
            let whole = whole_probe_body(runtime, req);
            let (ready, body) = app.health.report(app.telemetry.uptime_seconds(), whole);
            Some(json_response(code(ready), body.to_string()))
        }
        Route::Metrics
        | Route::View(_)
        | Route::Page
        | Route::Status
        | Route::Metadata
        | Route::Control(_)
        | Route::Incidents
        | Route::Incident => None,
    }
}

/// Every route but the probes, on the worker runtime; with the kind of read it was
/// (`dynamo_sysport_http_requests_total`'s `read` label).
async fn answer(
    app: &Arc<App>,
    runtime: &Arc<Runtime>,
    route: Route,
    req: Request,
    started: Instant,
) -> (Response, &'static str) {
    let gzip = gzip::accepted(req.headers());
    match route {
        Route::Metadata => {
            let body = super::control::metadata(app, runtime).await;
            (finish(app, body, gzip).await, "")
        }
        Route::Control(kind) => (super::control::answer(app, runtime, kind, req).await, ""),
        Route::Incidents | Route::Incident => {
            let (body, compressed) =
                super::incidents::answer(&app.health.incidents, req.uri().path());
            (finish(app, body, gzip && !compressed).await, "")
        }
        Route::Status => {
            let body = json_response(StatusCode::OK, facts(app, runtime).to_json());
            (finish(app, body, gzip).await, "")
        }
        Route::Page => {
            let body = html_response(facts(app, runtime).to_html());
            (finish(app, body, gzip).await, "")
        }
        Route::Metrics => {
            let names = requested_names(req.uri().query());
            // A query that names anything is a selective read, well-formed or not.
            let read = if matches!(names, Ok(None)) {
                "full"
            } else {
                "selective"
            };
            let answer = match names {
                Err(msg) => (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response(),
                Ok(_) if !app.held.admit() => refused(),
                Ok(names) => {
                    let selection = names.map(|n| Selection::new(n.iter().map(String::as_str)));
                    metrics(app, runtime, selection, read, req.headers(), gzip, started).await
                }
            };
            (answer, read)
        }
        Route::View(v) => {
            let answer = match app.held.admit() {
                true => view(app, runtime, v, req.headers(), started).await,
                false => refused(),
            };
            (finish(app, answer, gzip).await, "view")
        }
        Route::Live | Route::Health | Route::LiveEngine => {
            let probe = probe(app, runtime, route, &req);
            (
                probe.unwrap_or_else(|| StatusCode::NOT_FOUND.into_response()),
                "",
            )
        }
    }
}

/// 503 while answers being written hold the budget (`held`); the probes are never refused.
fn refused() -> Response {
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        "answers being written hold listen.max_answer_bytes_held: retry shortly\n",
    )
        .into_response();
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(held::RETRY_AFTER_SECONDS),
    );
    r
}

/// An answer made in one piece (the status page, a view): charged to the answers' ledger
/// until written, and gzipped here when the client takes it.
async fn finish(app: &App, response: Response, gzip: bool) -> Response {
    let (mut head, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response();
    };
    head.headers
        .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    let bytes = if gzip && bytes.len() >= gzip::MIN_BYTES {
        head.headers.remove(header::CONTENT_LENGTH);
        head.headers
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        gzip::whole(&bytes)
    } else {
        bytes
    };
    let body = Body::new(Parts::new([held::charged(&app.held, bytes)]));
    Response::from_parts(head, body)
}

fn live(app: &App) -> Response {
    if app.health.is_shutting_down() {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"status":"shutting down"}"#.into(),
        )
    } else {
        json_response(StatusCode::OK, r#"{"status":"live"}"#.into())
    }
}

/// A probe's status code: 200 when it holds, else 503.
fn code(holds: bool) -> StatusCode {
    if holds {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// Whether a probe shows its whole body (upstream detail, error texts, engine numbers): always
/// when sysport asks for no credentials; with basic auth or client certificates configured,
/// only to a request that proved itself. The kubelet, which sends none, gets the status and
/// each upstream's ready or not ready.
fn whole_probe_body(runtime: &Runtime, req: &Request) -> bool {
    let asks = runtime.config.listen.web.as_ref().is_some_and(|w| {
        !w.users.is_empty()
            || w.tls
                .as_ref()
                .is_some_and(|t| t.client_auth != crate::config::ClientAuth::NoClientCert)
    });
    !asks
        || req
            .extensions()
            .get::<crate::listener::conn::Credentialed>()
            .is_some()
}

/// What the status page and `/status` show, read from sysport's state (no upstream fetch).
fn facts(app: &App, runtime: &Runtime) -> status::Facts {
    status::Facts::gather(status::Sources {
        config: &runtime.config,
        scraper: &runtime.scraper,
        history: &runtime.history,
        health: &app.health,
        views: &runtime.views,
        telemetry: &app.telemetry,
        vitals: &runtime.vitals,
        listen: &app.listen,
        otlp: app
            .otlp
            .get()
            .map(|r| r.lock().expect("report lock").clone()),
    })
}

fn html_response(body: String) -> Response {
    let mut r = Response::new(Body::new(Parts::new([Bytes::from(body)])));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json_response(code: StatusCode, body: String) -> Response {
    let mut r = Response::new(Body::new(Parts::new([Bytes::from(body)])));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
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

/// The request's budget (Prometheus' scrape timeout less a margin), from when it arrived.
fn deadline(headers: &HeaderMap, started: Instant) -> Option<Budget> {
    budget(headers).map(|limit| Budget {
        limit,
        from: started,
    })
}

async fn metrics(
    app: &App,
    runtime: &Runtime,
    selection: Option<Selection>,
    read: &str,
    headers: &HeaderMap,
    gzip: bool,
    started: Instant,
) -> Response {
    let scraper = &runtime.scraper;
    // With `?name=`, only upstreams whose prefixes could hold a selected family are fetched.
    let which: Vec<usize> = (0..scraper.upstreams().len())
        .filter(|&i| selection.as_ref().is_none_or(|s| scraper.may_hold(i, s)))
        .collect();
    let scraped = scraper
        .scrape(&which, selection.as_ref(), deadline(headers, started))
        .await;
    let rendering = Instant::now();
    let r = page::response(
        app,
        runtime,
        &which,
        &scraped,
        selection.as_ref(),
        exposition(headers),
        gzip,
        started,
    )
    .await;
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
        .scrape(&which, Some(&selection), deadline(headers, started))
        .await;
    let rendering = Instant::now();
    let format = exposition(headers);
    let (body, dropped) =
        runtime
            .views
            .render(v, scraper, &which, &scraped, format.is_openmetrics());
    app.telemetry.openmetrics_dropped.inc_by(dropped);
    let mut r = Response::new(Body::new(Parts::new([body])));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, format.content_type());
    set_age(r.headers_mut(), &scraped, started, Instant::now());
    app.telemetry
        .render_duration
        .with_label_values(&["view"])
        .observe(rendering.elapsed().as_secs_f64());
    r
}
