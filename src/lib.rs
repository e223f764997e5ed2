//! sysport: a system-port sidecar for LLM inference workers.
//!
//! Layout:
//! - [`config`]: YAML file + `DYN_SYSTEM_*` environment + CLI flags → one validated `Config`.
//! - [`expfmt`]: the exposition format, pure and I/O-free: lexer, filter, merge, writers.
//! - [`scrape`]: fetches upstreams concurrently, single-flight, with limits and timeouts.
//! - [`relabel`]: Prometheus' `metric_relabel_configs`, applied to each page before it is served.
//! - [`health`]: background checks and the readiness state.
//! - [`telemetry`]: sysport's own `dynamo_sysport_*` metrics.
//! - [`parts`]: a response body of shared byte runs.
//! - [`server`]: the HTTP routes, graceful shutdown, and [`server::serve`] for tests on port 0.
//! - [`demo`]: simulated vLLM and LMCache upstreams for `sysport demo`.

pub mod config;
pub mod demo;
pub mod expfmt;
pub mod health;
pub mod parts;
pub mod relabel;
pub mod scrape;
pub mod server;
pub mod telemetry;
