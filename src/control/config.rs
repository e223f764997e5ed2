//! The `control:` section and Dynamo's variables for the control routes (`/engine/{name}`,
//! `/v1/loras`): who may reach them, and which are served.
//!
//! Dynamo's meanings (`lib/runtime/src/engine_routes.rs`, `EngineRoutePolicy::from_env`;
//! `system_status_server.rs` for `DYN_LORA_ENABLED`):
//! - `DYN_DISABLE_ENGINE_ROUTES` truthy (`1`, `true`, `on`, `yes`): no `/engine/*` route;
//! - else `DYN_ENGINE_ROUTES_ALLOW` set, even empty: only the names it lists (empty: none);
//! - else `DYN_ENGINE_ROUTES_DENY` set and not empty: every name but those it lists;
//! - `DYN_LORA_ENABLED=true`: `/v1/loras` is served.

use std::time::Duration;

use crate::config::check::{parse_bool, positive_duration};
use crate::config::env::{self, Env};
use crate::config::loader::{Loader, Origin};
use crate::config::section::{Text, section};
use crate::config::units::format_duration;

section! {
    /// `control:` section.
    RawControl {
        /// Serve `/engine/*` and `/v1/loras` on a port without basic auth or client
        /// certificates (`false`, default false: they answer 403 there).
        allow_unauthenticated: Text,
        /// How long one call to an engine may take (`30s`, default 30s).
        timeout: Text,
    }
}

/// Turns every `/engine/*` route off (truthy values as Dynamo's `env_is_truthy`).
pub const DYN_DISABLE_ENGINE_ROUTES: &str = "DYN_DISABLE_ENGINE_ROUTES";
/// Comma-separated names: only these `/engine/*` routes are served.
pub const DYN_ENGINE_ROUTES_ALLOW: &str = "DYN_ENGINE_ROUTES_ALLOW";
/// Comma-separated names: these `/engine/*` routes are not served.
pub const DYN_ENGINE_ROUTES_DENY: &str = "DYN_ENGINE_ROUTES_DENY";
/// `true`: `/v1/loras` is served.
pub const DYN_LORA_ENABLED: &str = "DYN_LORA_ENABLED";

/// Which `/engine/*` names are served, after Dynamo's three variables.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RoutePolicy {
    /// Every mapped name (no variable set).
    #[default]
    AllowAll,
    /// None (`DYN_DISABLE_ENGINE_ROUTES`).
    DisableAll,
    /// Only these (`DYN_ENGINE_ROUTES_ALLOW`).
    Allow(Vec<String>),
    /// All but these (`DYN_ENGINE_ROUTES_DENY`).
    Deny(Vec<String>),
}

impl RoutePolicy {
    /// Whether `name` (the route's name, without its argument) is served.
    pub fn serves(&self, name: &str) -> bool {
        match self {
            RoutePolicy::AllowAll => true,
            RoutePolicy::DisableAll => false,
            RoutePolicy::Allow(names) => names.iter().any(|n| n == name),
            RoutePolicy::Deny(names) => !names.iter().any(|n| n == name),
        }
    }

    /// The policy the three variables make (see the module's documentation); a value of
    /// `DYN_DISABLE_ENGINE_ROUTES` that is neither truthy nor falsy is an error naming it.
    pub fn from_env(env: &dyn Env) -> Result<RoutePolicy, NotTruthy> {
        let disable = match env.var(DYN_DISABLE_ENGINE_ROUTES) {
            Some(v) => truthy(&v)?,
            None => false,
        };
        if disable {
            return Ok(RoutePolicy::DisableAll);
        }
        if let Some(allow) = env.var(DYN_ENGINE_ROUTES_ALLOW) {
            return Ok(RoutePolicy::Allow(names(&allow)));
        }
        match env.var(DYN_ENGINE_ROUTES_DENY).map(|d| names(&d)) {
            Some(deny) if !deny.is_empty() => Ok(RoutePolicy::Deny(deny)),
            _ => Ok(RoutePolicy::AllowAll),
        }
    }
}

/// The `control:` section and the variables.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlConfig {
    /// Serve `/engine/*` and `/v1/loras` on a port without basic auth or client certificates,
    /// default false (they then answer 403).
    pub allow_unauthenticated: bool,
    /// How long one call to an engine may take, default 30 s.
    pub timeout: Duration,
    /// Which `/engine/*` names are served.
    pub engine_routes: RoutePolicy,
    /// Whether `/v1/loras` is served (`DYN_LORA_ENABLED=true`).
    pub lora: bool,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            allow_unauthenticated: false,
            timeout: Duration::from_secs(30),
            engine_routes: RoutePolicy::AllowAll,
            lora: false,
        }
    }
}

/// A value of `DYN_DISABLE_ENGINE_ROUTES` that is neither on nor off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {0:?}: must be one of 1, true, on, yes (on) or 0, false, off, no (off)")]
pub struct NotTruthy(String);

fn truthy(value: &str) -> Result<bool, NotTruthy> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "" | "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(NotTruthy(value.to_owned())),
    }
}

fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Loader<'_> {
    pub(crate) fn control(&mut self, raw: Option<RawControl>) -> ControlConfig {
        let mut control = ControlConfig::default();
        if let Some(raw) = raw {
            self.unknown_keys(&raw.unknown, "control", RawControl::FIELDS);
            if let Some((allow, _)) = self.file_value(
                raw.allow_unauthenticated.as_ref(),
                "control.allow_unauthenticated",
                parse_bool,
            ) {
                control.allow_unauthenticated = allow;
            }
            if let Some((timeout, _)) =
                self.file_value(raw.timeout.as_ref(), "control.timeout", positive_duration)
            {
                control.timeout = timeout;
            }
        }
        match RoutePolicy::from_env(self.env()) {
            Ok(policy) => control.engine_routes = policy,
            Err(problem) => self.issue(
                Origin::Env(DYN_DISABLE_ENGINE_ROUTES),
                DYN_DISABLE_ENGINE_ROUTES,
                problem.to_string(),
            ),
        }
        if let Some(lora) = env::setting(self.env(), DYN_LORA_ENABLED) {
            match parse_bool(&lora) {
                Ok(lora) => control.lora = lora,
                Err(problem) => {
                    let message = problem.to_string();
                    self.issue(Origin::Env(DYN_LORA_ENABLED), DYN_LORA_ENABLED, message);
                }
            }
        }
        control
    }
}

/// The `control:` section as `check-config` prints it.
pub(crate) fn render(f: &mut std::fmt::Formatter<'_>, control: &ControlConfig) -> std::fmt::Result {
    writeln!(f, "control:")?;
    writeln!(
        f,
        "  allow_unauthenticated: {}",
        control.allow_unauthenticated
    )?;
    writeln!(f, "  timeout: {}", format_duration(control.timeout))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn policy(vars: &[(&str, &str)]) -> Result<RoutePolicy, NotTruthy> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RoutePolicy::from_env(&env)
    }

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn dynamo_precedence_disable_then_allow_then_deny() {
        assert_eq!(policy(&[]), Ok(RoutePolicy::AllowAll));
        let all = [
            (DYN_DISABLE_ENGINE_ROUTES, "yes"),
            (DYN_ENGINE_ROUTES_ALLOW, "sleep"),
            (DYN_ENGINE_ROUTES_DENY, "wake_up"),
        ];
        assert_eq!(policy(&all), Ok(RoutePolicy::DisableAll));
        assert_eq!(policy(&all[1..]), Ok(RoutePolicy::Allow(list(&["sleep"]))));
        assert_eq!(policy(&all[2..]), Ok(RoutePolicy::Deny(list(&["wake_up"]))));
        // A falsy disable leaves the others to decide.
        assert_eq!(
            policy(&[(DYN_DISABLE_ENGINE_ROUTES, "0"), all[2]]),
            Ok(RoutePolicy::Deny(list(&["wake_up"])))
        );
    }

    #[test]
    fn an_empty_allow_list_serves_nothing_and_an_empty_deny_list_is_unset() {
        let closed = policy(&[(DYN_ENGINE_ROUTES_ALLOW, " , ,")]).expect("valid");
        assert_eq!(closed, RoutePolicy::Allow(Vec::new()));
        assert!(!closed.serves("sleep"));
        assert_eq!(
            policy(&[(DYN_ENGINE_ROUTES_DENY, "")]),
            Ok(RoutePolicy::AllowAll)
        );
        let allow = policy(&[(DYN_ENGINE_ROUTES_ALLOW, "sleep, wake_up ")]).expect("valid");
        assert!(allow.serves("wake_up") && !allow.serves("reset_prefix_cache"));
    }

    #[test]
    fn an_unreadable_disable_value_is_an_error_naming_the_values() {
        let err = policy(&[(DYN_DISABLE_ENGINE_ROUTES, "maybe")])
            .expect_err("refused")
            .to_string();
        assert!(err.contains("\"maybe\"") && err.contains("yes"), "{err}");
    }
}

#[cfg(test)]
mod section_tests;
