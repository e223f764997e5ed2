//! The system port: `/metrics`, `/health`, `/live`, the status page (`/`, `/status`), graceful
//! shutdown and reload.
//!
//! Start-up is staged so a bad address fails before anything runs (see `start`):
//! [`Sysport::bind`] (or [`Sysport::from_listener`] for tests on port 0) → [`Sysport::run`].
//! A [`Handle`] reloads the configuration or starts shutdown from outside.

mod app;
mod control;
mod front;
mod gzip;
mod held;
mod incidents;
mod negotiate;
mod page;
mod parts;
mod push;
mod render;
mod routes;
mod start;

pub use app::Handle;
pub use page::SYSPORT_AGE;
pub use start::{BindError, Sysport, serve};

/// The configuration the server runs with: [`crate::config::load`], then what only the TLS
/// stack can check ([`crate::web::tls::check`]: the certificate pairs with its key, every file
/// reads), so that `check-config`, start-up and SIGHUP refuse alike what the server could not
/// put in force.
pub fn load_config(
    overrides: &crate::config::Overrides,
    env: &dyn crate::config::Env,
) -> Result<crate::config::Config, crate::config::ConfigError> {
    crate::config::load(overrides, env).and_then(crate::web::tls::check)
}
