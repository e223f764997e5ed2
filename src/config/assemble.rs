//! Loading: file + environment + flags → one validated [`Config`], collecting every problem
//! with its location instead of stopping at the first.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::check::{
    CheckError, answer_bytes, check_label_name, nonzero, parse_ip, parse_route, positive_duration,
    request_head_size,
};
use super::data::{HealthConfig, Limits, Listen, ShutdownConfig, StartingStatus};
use super::env::{self, Env};
use super::error::{ConfigError, ConfigIssue};
use super::loader::{Loader, Origin};
use super::raw::{RawConfig, RawHealth, RawLimits, RawListen, RawShutdown};
use super::section::Text;
use super::units::{UnitError, parse_bytes, parse_count, parse_duration, parse_port};
use super::whole::Config;

/// Command-line flags; each one, when given, wins over the environment and the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--config FILE` (else `SYSPORT_CONFIG`, else no file).
    pub config: Option<PathBuf>,
    /// `--host ADDR`.
    pub host: Option<IpAddr>,
    /// `--port PORT`.
    pub port: Option<u16>,
    /// Each `--upstream NAME=URL`, as given; when any is given they replace the file's
    /// `upstreams` entirely.
    pub upstreams: Vec<String>,
    /// `--web.config.file FILE` (else `SYSPORT_WEB_CONFIG`, else `listen.web_config_file`).
    pub web_config: Option<PathBuf>,
}

/// Loads the configuration: the file from `overrides.config` or `SYSPORT_CONFIG` (if any), the
/// `DYN_SYSTEM_*` variables from `env`, then the flags in `overrides`
/// (flag > environment > file > default).
///
/// # Errors
/// Every problem found, each naming its file, line, column and field (or its environment
/// variable or flag).
pub fn load(overrides: &Overrides, env: &dyn Env) -> Result<Config, ConfigError> {
    let file = overrides
        .config
        .clone()
        .or_else(|| env::setting(env, env::SYSPORT_CONFIG).map(PathBuf::from));
    let Some(file) = file else {
        return Loader::new(env, None, String::new()).build(overrides);
    };
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let text = text
                .strip_prefix('\u{feff}')
                .map(str::to_owned)
                .unwrap_or(text);
            Loader::new(env, Some(file), text).build(overrides)
        }
        Err(err) => Err(ConfigError {
            issues: vec![ConfigIssue {
                file: Some(file),
                line: None,
                column: None,
                field: String::new(),
                message: format!("cannot read the configuration file: {err}"),
            }],
        }),
    }
}

/// Loads `path` with the environment and no flags, as on `SIGHUP`. To keep the flags the process
/// started with, call [`load`] with them and `config: Some(path)` instead.
///
/// # Errors
/// As [`load`].
pub fn load_file(path: &Path, env: &dyn Env) -> Result<Config, ConfigError> {
    let overrides = Overrides {
        config: Some(path.to_owned()),
        ..Overrides::default()
    };
    load(&overrides, env)
}

/// Loads configuration text as if read from `file`; for tests.
#[cfg(test)]
pub(crate) fn load_text(
    text: &str,
    file: Option<&Path>,
    overrides: &Overrides,
    env: &dyn Env,
) -> Result<Config, ConfigError> {
    Loader::new(env, file.map(Path::to_owned), text.to_owned()).build(overrides)
}

impl Loader<'_> {
    fn build(mut self, overrides: &Overrides) -> Result<Config, ConfigError> {
        let raw: RawConfig = self.parse();
        self.unknown_keys(&raw.unknown, "", RawConfig::FIELDS);
        let listen = self.listen(raw.listen.unwrap_or_default(), overrides);
        let health = self.health(raw.health.unwrap_or_default());
        // First: what a configured label value may hold.
        let limits = self.limits(raw.limits.unwrap_or_default());
        self.max_label_value_bytes = limits.max_label_value_bytes;
        let labels = self.labels(raw.labels.map(|labels| labels.0).unwrap_or_default());
        let dynamo = self.dynamo();
        let upstreams = self.upstreams(raw.upstreams, &overrides.upstreams, &dynamo);
        let metric_relabel_configs =
            self.relabel_rules(raw.metric_relabel_configs, "metric_relabel_configs");
        let drain_delay = raw.shutdown.and_then(|shutdown| {
            self.unknown_keys(&shutdown.unknown, "shutdown", RawShutdown::FIELDS);
            self.file_value(
                shutdown.drain_delay.as_ref(),
                "shutdown.drain_delay",
                parse_duration,
            )
        });
        let shutdown = drain_delay.map_or_else(ShutdownConfig::default, |(drain_delay, _)| {
            ShutdownConfig { drain_delay }
        });
        let vitals = self.vitals(raw.vitals);
        let views = self.views(raw.views, &upstreams, &health);
        let control = self.control(raw.control);
        let otlp = self.otlp(raw.otlp);
        let incidents = self.incidents(raw.incidents, &upstreams);

        if !self.issues.is_empty() {
            // File problems in file order (the web configuration's after the main file's),
            // then those from the environment and flags.
            let main = self.file.clone();
            self.issues.sort_by_key(|issue| {
                (
                    issue.file.is_some() && issue.file != main,
                    issue.line.is_none(),
                    issue.line,
                    issue.column,
                )
            });
            return Err(ConfigError {
                issues: self.issues,
            });
        }
        Ok(Config {
            listen,
            health,
            labels,
            upstreams,
            limits,
            shutdown,
            vitals,
            views,
            metric_relabel_configs,
            control,
            otlp,
            incidents,
            source: self.file,
        })
    }

    fn listen(&mut self, raw: RawListen, overrides: &Overrides) -> Listen {
        self.unknown_keys(&raw.unknown, "listen", RawListen::FIELDS);
        let defaults = Listen::default();
        let host = self.file_value(raw.host.as_ref(), "listen.host", parse_ip);
        let (host, _) = self.choose(
            overrides.host.map(|host| (host, "--host")),
            env::DYN_SYSTEM_HOST,
            parse_ip,
            host,
            defaults.host,
        );
        let port = self.file_value(raw.port.as_ref(), "listen.port", parse_port);
        let (port, _) = self.choose(
            overrides.port.map(|port| (port, "--port")),
            env::DYN_SYSTEM_PORT,
            parse_port,
            port,
            defaults.port,
        );
        let request_head_timeout = self
            .file_value(
                raw.request_head_timeout.as_ref(),
                "listen.request_head_timeout",
                positive_duration,
            )
            .map_or(defaults.request_head_timeout, |(d, _)| d);
        let idle_timeout = self
            .file_value(
                raw.idle_timeout.as_ref(),
                "listen.idle_timeout",
                positive_duration,
            )
            .map_or(defaults.idle_timeout, |(d, _)| d);
        let write_timeout = self
            .file_value(
                raw.write_timeout.as_ref(),
                "listen.write_timeout",
                positive_duration,
            )
            .map_or(defaults.write_timeout, |(d, _)| d);
        let max_request_head_bytes = self
            .file_value(
                raw.max_request_head_bytes.as_ref(),
                "listen.max_request_head_bytes",
                request_head_size,
            )
            .map_or(defaults.max_request_head_bytes, |(n, _)| n);
        let max_answer_bytes_held = self
            .file_value(
                raw.max_answer_bytes_held.as_ref(),
                "listen.max_answer_bytes_held",
                answer_bytes,
            )
            .map_or(defaults.max_answer_bytes_held, |(n, _)| n);
        let max_connections = self
            .file_value(
                raw.max_connections.as_ref(),
                "listen.max_connections",
                |text| {
                    parse_count(text)
                        .map_err(CheckError::from)
                        .and_then(nonzero)
                },
            )
            .map(|(n, _)| n);
        let probe_port = self
            .file_value(raw.probe_port.as_ref(), "listen.probe_port", parse_port)
            .map(|(p, _)| p);
        if probe_port.is_some_and(|p| p != 0 && p == port) {
            let at = raw.probe_port.as_ref().map(|t| t.referenced);
            if let Some(at) = at {
                self.issue(
                    Origin::File(at),
                    "listen.probe_port",
                    "must differ from the port",
                );
            }
        }
        let web_file = self
            .file_value(
                raw.web_config_file.as_ref(),
                "listen.web_config_file",
                |t| Ok::<_, std::convert::Infallible>(PathBuf::from(t)),
            )
            .map(|(p, _)| p);
        let web =
            crate::web::config::file::chosen(overrides.web_config.as_ref(), self.env(), web_file)
                .and_then(
                    |path| match crate::web::config::file::load(&path, self.env()) {
                        Ok(web) => Some(web),
                        Err(issues) => {
                            self.issues.extend(issues);
                            None
                        }
                    },
                );
        Listen {
            host,
            port,
            request_head_timeout,
            idle_timeout,
            write_timeout,
            max_request_head_bytes,
            max_answer_bytes_held,
            max_connections,
            probe_port,
            web,
        }
    }

    fn health(&mut self, raw: RawHealth) -> HealthConfig {
        self.unknown_keys(&raw.unknown, "health", RawHealth::FIELDS);
        let defaults = HealthConfig::default();
        let path = self.file_value(raw.path.as_ref(), "health.path", parse_route);
        let (path, path_origin) = self.choose(
            None,
            env::DYN_SYSTEM_HEALTH_PATH,
            parse_route,
            path,
            defaults.path,
        );
        let live = self.file_value(raw.live_path.as_ref(), "health.live_path", parse_route);
        let (live_path, live_origin) = self.choose(
            None,
            env::DYN_SYSTEM_LIVE_PATH,
            parse_route,
            live,
            defaults.live_path,
        );
        if path == live_path {
            // Point at whichever of the two was set; both defaults cannot clash.
            let (origin, field) = match live_origin {
                Origin::Default => (path_origin, "health.path"),
                _ => (live_origin, "health.live_path"),
            };
            let message = format!("readiness and liveness both use {path:?}; they must differ");
            self.issue(origin, field, message);
        }
        let starting = self.file_value(
            raw.starting_status.as_ref(),
            "health.starting_status",
            parse_starting_status,
        );
        let (starting_status, _) = self.choose(
            None,
            env::DYN_SYSTEM_STARTING_HEALTH_STATUS,
            parse_starting_status,
            starting,
            defaults.starting_status,
        );
        let interval = self
            .file_value(raw.interval.as_ref(), "health.interval", positive_duration)
            .map_or(defaults.interval, |(interval, _)| interval);
        HealthConfig {
            path,
            live_path,
            starting_status,
            interval,
        }
    }

    fn limits(&mut self, raw: RawLimits) -> Limits {
        self.unknown_keys(&raw.unknown, "limits", RawLimits::FIELDS);
        let defaults = Limits::default();
        Limits {
            max_body_bytes: self.limit(
                raw.max_body_bytes.as_ref(),
                "limits.max_body_bytes",
                parse_bytes,
                defaults.max_body_bytes,
            ),
            max_line_bytes: self.limit(
                raw.max_line_bytes.as_ref(),
                "limits.max_line_bytes",
                parse_bytes,
                defaults.max_line_bytes,
            ),
            max_series: self.limit(
                raw.max_series.as_ref(),
                "limits.max_series",
                parse_count,
                defaults.max_series,
            ),
            max_families: self.limit(
                raw.max_families.as_ref(),
                "limits.max_families",
                parse_count,
                defaults.max_families,
            ),
            max_labels: self.limit(
                raw.max_labels.as_ref(),
                "limits.max_labels",
                parse_count,
                defaults.max_labels,
            ),
            max_label_value_bytes: self.limit(
                raw.max_label_value_bytes.as_ref(),
                "limits.max_label_value_bytes",
                parse_bytes,
                defaults.max_label_value_bytes,
            ),
        }
    }

    fn limit(
        &mut self,
        text: Option<&Text>,
        field: &str,
        parse: fn(&str) -> Result<usize, UnitError>,
        default: usize,
    ) -> usize {
        self.file_value(text, field, |text| {
            parse(text).map_err(CheckError::from).and_then(nonzero)
        })
        .map_or(default, |(limit, _)| limit)
    }

    fn labels(&mut self, raw: Vec<(Text, Text)>) -> Vec<(String, String)> {
        let mut labels = Vec::with_capacity(raw.len());
        for (i, (name, value)) in raw.into_iter().enumerate() {
            let field = format!("labels.{}", name.value);
            if let Err(message) = check_label_name(&name.value) {
                self.issue(Origin::File(name.referenced), &field, message.to_string());
            }
            if i == crate::expfmt::MAX_ADDED_LABELS {
                let message = format!(
                    "at most {} labels can be added to every series",
                    crate::expfmt::MAX_ADDED_LABELS
                );
                self.issue(Origin::File(name.referenced), &field, message);
            }
            if let Some(expanded) = self.expand(&value, &field)
                && self.label_value_fits(&expanded, value.referenced, &field)
            {
                labels.push((name.value, expanded));
            }
        }
        labels
    }
}

/// A starting status that is neither `notready` nor `ready`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid starting status {0:?}: must be notready or ready")]
struct BadStartingStatus(String);

fn parse_starting_status(text: &str) -> Result<StartingStatus, BadStartingStatus> {
    match text.trim().to_ascii_lowercase().as_str() {
        "notready" => Ok(StartingStatus::NotReady),
        "ready" => Ok(StartingStatus::Ready),
        _ => Err(BadStartingStatus(text.to_owned())),
    }
}
