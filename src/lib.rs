//! sysport: a system-port sidecar for LLM inference workers.
//!
//! # One `/metrics` request, through the modules
//!
//! 1. `listener` accepts the connection and holds it to its limits (head deadline, head size,
//!    idle time, connection cap); [`web`] terminates TLS and checks basic auth when configured.
//! 2. [`server`] routes it (`server::routes`), reads what it asks for (`server::negotiate`: the
//!    budget from `X-Prometheus-Scrape-Timeout-Seconds`, `?name=`, `Accept`) and asks `scrape`
//!    for the upstreams' pages.
//! 3. `scrape` fetches each distinct URL once, shared by every request waiting for it
//!    (`scrape::flight`): one GET (`scrape::http`), the body decoded (`scrape::decode`) into a
//!    reused block (`scrape::blocks`), parsed by [`expfmt`] with the upstream's `keep` prefixes
//!    and limits, then relabelled by [`relabel`] (`scrape::parse`). `scrape::record` tells the
//!    outcome to the scraper's recorders ([`model::Recorder`]: `telemetry` and the status
//!    page's history, which `scrape` does not know) and logs it.
//! 4. Back in [`server`], `server::page` merges the pages ([`expfmt::merge`]), writes them in the
//!    format asked for (mostly as runs of the upstream bodies), once for all requests that share
//!    the fetches, then appends sysport's own `dynamo_sysport_*` families from `telemetry`.
//!
//! `health` checks the upstreams in the background for `/health`; `stall` tells a busy engine
//! from a stuck one for `/live/engine`; [`views`] serves `/metrics/<name>`; `status` the status
//! page. [`config`] turns the YAML file, `DYN_SYSTEM_*` variables and flags into one `Config`,
//! [`model::engine`] knows each engine's families, [`demo`] simulates vLLM and LMCache.
//!
//! # Modules
//!
//! - [`config`]: YAML file + `DYN_SYSTEM_*` environment + CLI flags → one validated `Config`.
//! - [`model`]: plain data every module may use: family keys, engine presets
//!   ([`model::engine`]), the paths served, scrape records and their [`model::Recorder`].
//! - [`expfmt`]: the exposition format, pure and I/O-free: lexer, filter, merge, writers (the
//!   `sysport-expfmt` crate in `crates/expfmt`, re-exported).
//! - `scrape`: fetches upstreams concurrently, single-flight, with limits and timeouts, and
//!   records each outcome.
//! - [`relabel`]: Prometheus' `metric_relabel_configs`, applied to each page before it is served.
//! - `health`: background checks and the readiness state.
//! - `stall`: telling a busy engine from a stuck one (`stall_after`, `/live/engine`).
//! - `vitals`: windowed rates and latency quantiles of each engine (`/status`, the page).
//! - `telemetry`: sysport's own `dynamo_sysport_*` metrics.
//! - [`listener`]: the accept loop and what a client may hold: deadlines, head size, connection
//!   cap, the open-file budget.
//! - [`server`]: start-up, reload and graceful shutdown, the routes, the page and its response
//!   body, content negotiation; [`server::serve`] for tests on port 0.
//! - `status`: the status page (`/`) and its facts as JSON (`/status`).
//! - [`web`]: TLS, client certificates and basic auth from an exporter-toolkit web config.
//! - [`control`]: Dynamo's `/engine/{name}`, `/v1/loras` and `/metadata`, forwarded to each
//!   engine's own routes.
//! - [`views`]: pages at `/metrics/<name>` computed from the upstreams' families (`router`).
//! - [`demo`]: simulated vLLM and LMCache upstreams for `sysport demo`.

pub mod config;
pub mod control;
pub mod demo;
pub mod model;
pub mod otlp;
pub use sysport_expfmt as expfmt;
pub(crate) mod canary;
pub(crate) mod health;
pub(crate) mod incidents;
pub mod listener;
pub mod logging;
pub(crate) mod numbers;
pub mod relabel;
pub(crate) mod scrape;
pub mod server;
pub(crate) mod stall;
pub(crate) mod status;
pub(crate) mod telemetry;
pub mod views;
pub(crate) mod vitals;
pub mod web;
