//! Who may read the system port: TLS, client certificates and basic auth from a web
//! configuration file in the format of Prometheus' exporter-toolkit (`--web.config.file`), so
//! that the Prometheus Operator's `tlsConfig` and `basicAuth` talk to sysport as to any
//! official exporter.
//!
//! - the validated file is `config`'s [`WebConfig`](crate::config::WebConfig) (loaded with
//!   file:line errors there); [`tls::check`] adds what only the TLS stack can tell (a
//!   certificate that does not match its key) to a loaded configuration.
//! - [`tls`]: the rustls server configuration, re-read when its files change.
//! - [`verify`]: client-certificate policies rustls has no verifier for, and SAN matching.
//! - [`auth`]: basic auth (bcrypt, cached) and the configured response headers, in front of every
//!   route but the probes.
//!
//! The request paths never see TLS: it ends in the listener.

pub mod auth;
pub(crate) mod config;
mod gate;
pub mod tls;
pub mod verify;

/// Why the web configuration could not be put in force when the server started (its files
/// changed since the configuration was loaded and checked).
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The TLS material, at the `tls_server_config` field it comes from.
    #[error("tls_server_config.{field}: {0}", field = .0.field)]
    Tls(#[from] tls::TlsError),
    /// Basic auth or the configured headers.
    #[error(transparent)]
    Auth(#[from] auth::GuardError),
}
