//! sysport: a system-port sidecar for LLM inference workers.
//!
//! Layout:
//! - [`config`]: YAML file + `DYN_SYSTEM_*` environment + CLI flags → one validated `Config`.
//! - [`engine`]: what sysport knows about each inference engine (presets).
//! - [`expfmt`]: the exposition format, pure and I/O-free: lexer, filter, merge, writers (the
//!   `sysport-expfmt` crate in `crates/expfmt`, re-exported).
//! - [`scrape`]: fetches upstreams concurrently, single-flight, with limits and timeouts.
//! - [`fetch`]: one GET of an upstream, and why its answer may be unusable.
//! - [`decode`]: undoes an upstream body's `Content-Encoding` within the body limit.
//! - [`relabel`]: Prometheus' `metric_relabel_configs`, applied to each page before it is served.
//! - [`health`]: background checks and the readiness state.
//! - [`stall`]: telling a busy engine from a stuck one (`stall_after`, `/live/engine`).
//! - [`telemetry`]: sysport's own `dynamo_sysport_*` metrics.
//! - [`parts`]: a response body of shared byte runs.
//! - [`listener`]: the accept loop and what a client may hold: deadlines, head size, connection
//!   cap, the open-file budget.
//! - [`server`]: the HTTP routes, graceful shutdown, and [`server::serve`] for tests on port 0.
//! - [`status`]: the status page (`/`) and its facts as JSON (`/status`).
//! - [`web`]: TLS, client certificates and basic auth from an exporter-toolkit web config.
//! - [`views`]: pages at `/metrics/<name>` computed from the upstreams' families (`router`).
//! - [`demo`]: simulated vLLM and LMCache upstreams for `sysport demo`.

pub mod config;
pub mod demo;
pub mod engine;
pub use sysport_expfmt as expfmt;
pub(crate) mod health;
pub mod listener;
pub(crate) mod parts;
pub mod relabel;
pub(crate) mod scrape;
pub mod server;
pub(crate) mod stall;
pub(crate) mod status;
pub(crate) mod telemetry;
pub mod views;
pub mod web;
