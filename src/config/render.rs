//! The effective configuration as YAML in the file's schema (`sysport check-config`, and the
//! status page's copy of it); loading the output gives back the same [`Config`], except that a
//! URL's password is shown as `***` ([`ShownUrl`]) and canary header values are left out: the
//! operator reads those in the file, or the environment variable they were expanded from.
//! Rendering reads nothing but the configuration and the host facts it is given
//! ([`Rendered::with_connection_cap`]).

use std::fmt;

use super::quote::quoted;
use super::units::{format_bytes, format_duration};
use super::whole::Config;

/// The configuration as `check-config` prints it.
#[derive(Debug, Clone, Copy)]
pub struct Rendered<'a> {
    config: &'a Config,
    /// The connection cap in force without `listen.max_connections`, and the open-file limit
    /// it comes from, where the caller knows them.
    default_cap: Option<(usize, Option<u64>)>,
}

impl Config {
    /// The effective configuration as YAML in the file's schema.
    pub fn render(&self) -> Rendered<'_> {
        Rendered {
            config: self,
            default_cap: None,
        }
    }
}

impl Rendered<'_> {
    /// Says which connection cap an unset `listen.max_connections` gives on this host: `cap`,
    /// from the open-file limit `fd_limit`.
    pub fn with_connection_cap(mut self, cap: usize, fd_limit: Option<u64>) -> Self {
        self.default_cap = Some((cap, fd_limit));
        self
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render().fmt(f)
    }
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Config {
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
            source: _,
        } = self.config;
        writeln!(f, "listen:")?;
        writeln!(f, "  host: {}", quoted(&listen.host.to_string()))?;
        writeln!(f, "  port: {}", listen.port)?;
        writeln!(
            f,
            "  request_head_timeout: {}",
            format_duration(listen.request_head_timeout)
        )?;
        writeln!(
            f,
            "  idle_timeout: {}",
            format_duration(listen.idle_timeout)
        )?;
        writeln!(
            f,
            "  write_timeout: {}",
            format_duration(listen.write_timeout)
        )?;
        writeln!(
            f,
            "  max_request_head_bytes: {}",
            format_bytes(listen.max_request_head_bytes)
        )?;
        writeln!(
            f,
            "  max_answer_bytes_held: {}",
            format_bytes(listen.max_answer_bytes_held)
        )?;
        match listen.max_connections {
            Some(n) => writeln!(f, "  max_connections: {n}")?,
            None => match self.default_cap {
                Some((n, limit)) => {
                    let limit = limit.map_or("unlimited".to_owned(), |l| l.to_string());
                    writeln!(
                        f,
                        "  # max_connections: not set: {n} here (1024, or half the open-file \
                         limit, {limit})"
                    )?;
                }
                None => writeln!(
                    f,
                    "  # max_connections: not set: 1024, or half the open-file limit"
                )?,
            },
        }
        if let Some(port) = listen.probe_port {
            writeln!(f, "  probe_port: {port}")?;
        }
        if let Some(web) = &listen.web {
            writeln!(
                f,
                "  web_config_file: {}",
                quoted(&web.file.display().to_string())
            )?;
            writeln!(f, "  # {}", web.summary())?;
        }
        writeln!(f, "health:")?;
        writeln!(f, "  path: {}", quoted(&health.path))?;
        writeln!(f, "  live_path: {}", quoted(&health.live_path))?;
        writeln!(f, "  starting_status: {}", health.starting_status)?;
        writeln!(f, "  interval: {}", format_duration(health.interval))?;
        if labels.is_empty() {
            writeln!(f, "labels: {{}}")?;
        } else {
            writeln!(f, "labels:")?;
            for (name, value) in labels {
                writeln!(f, "  {}: {}", quoted(name), quoted(value))?;
            }
        }
        let router_view = views
            .iter()
            .any(|v| v.name == crate::model::engine::ROUTER_VIEW);
        crate::scrape::config::render(f, upstreams, router_view)?;
        crate::relabel::config::render(f, metric_relabel_configs, "")?;
        writeln!(f, "limits:")?;
        writeln!(
            f,
            "  max_body_bytes: {}",
            format_bytes(limits.max_body_bytes)
        )?;
        writeln!(
            f,
            "  max_line_bytes: {}",
            format_bytes(limits.max_line_bytes)
        )?;
        writeln!(f, "  max_series: {}", limits.max_series)?;
        writeln!(f, "  max_families: {}", limits.max_families)?;
        writeln!(f, "  max_labels: {}", limits.max_labels)?;
        writeln!(
            f,
            "  max_label_value_bytes: {}",
            format_bytes(limits.max_label_value_bytes)
        )?;
        writeln!(f, "shutdown:")?;
        writeln!(
            f,
            "  drain_delay: {}",
            format_duration(shutdown.drain_delay)
        )?;
        crate::vitals::config::render(f, vitals)?;
        crate::control::config::render(f, control)?;
        crate::otlp::config::render(otlp.as_ref(), f)?;
        crate::incidents::config::render(f, incidents)?;
        crate::views::config::render(f, views)
    }
}
