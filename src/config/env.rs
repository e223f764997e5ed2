//! The environment, read through a trait so tests can feed a `HashMap` instead of calling
//! `std::env::set_var`.

use std::collections::HashMap;

/// Path of the configuration file, used when `--config` is not given.
pub const SYSPORT_CONFIG: &str = "SYSPORT_CONFIG";
/// The web configuration file (`listen.web_config_file`): TLS, client certificates, basic auth.
pub const SYSPORT_WEB_CONFIG: &str = "SYSPORT_WEB_CONFIG";
/// Listen address (`listen.host`).
pub const DYN_SYSTEM_HOST: &str = "DYN_SYSTEM_HOST";
/// Listen port (`listen.port`).
pub const DYN_SYSTEM_PORT: &str = "DYN_SYSTEM_PORT";
/// Readiness route (`health.path`).
pub const DYN_SYSTEM_HEALTH_PATH: &str = "DYN_SYSTEM_HEALTH_PATH";
/// Liveness route (`health.live_path`).
pub const DYN_SYSTEM_LIVE_PATH: &str = "DYN_SYSTEM_LIVE_PATH";
/// Readiness before the first health check (`health.starting_status`): `notready` or `ready`.
pub const DYN_SYSTEM_STARTING_HEALTH_STATUS: &str = "DYN_SYSTEM_STARTING_HEALTH_STATUS";
/// Dynamo's switch for canary health checks: `true` gives every upstream without its own
/// `canary_after` one of `DYN_CANARY_WAIT_TIME`.
pub const DYN_HEALTH_CHECK_ENABLED: &str = "DYN_HEALTH_CHECK_ENABLED";
/// Seconds of idleness before a canary (default 10), with `DYN_HEALTH_CHECK_ENABLED`.
pub const DYN_CANARY_WAIT_TIME: &str = "DYN_CANARY_WAIT_TIME";
/// Seconds a canary may take (`canary.timeout`).
pub const DYN_HEALTH_CHECK_REQUEST_TIMEOUT: &str = "DYN_HEALTH_CHECK_REQUEST_TIMEOUT";
/// A canary's JSON body (`canary.body`), inline or `@/path/file.json`.
pub const DYN_HEALTH_CHECK_PAYLOAD: &str = "DYN_HEALTH_CHECK_PAYLOAD";

/// A source of environment variables.
pub trait Env {
    /// The value of `key`, or `None` when it is unset (or not valid UTF-8).
    fn var(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var_os(key).and_then(|value| value.into_string().ok())
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

/// A `DYN_SYSTEM_*` setting: an empty value counts as unset, as a Kubernetes manifest often
/// declares the variable with `value: ""` to mean "use the default".
pub(crate) fn setting(env: &dyn Env, key: &str) -> Option<String> {
    env.var(key).filter(|value| !value.trim().is_empty())
}
