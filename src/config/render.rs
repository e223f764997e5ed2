//! The effective configuration as YAML in the file's schema (`sysport check-config`); loading
//! the output gives back the same [`Config`].

use std::fmt;

use super::Config;
use super::units::{format_bytes, format_duration};
use crate::relabel::Rule;

impl fmt::Display for Config {
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
            source: _,
        } = self;
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
            "  max_request_head_bytes: {}",
            format_bytes(listen.max_request_head_bytes)
        )?;
        match listen.max_connections {
            Some(n) => writeln!(f, "  max_connections: {n}")?,
            None => {
                let limit = crate::listener::fds::fd_hard_limit();
                let n = crate::listener::fds::default_max_connections(limit);
                let limit = limit.map_or("unlimited".to_owned(), |l| l.to_string());
                writeln!(
                    f,
                    "  # max_connections: not set: {n} here (1024, or half the open-file limit, \
                     {limit})"
                )?;
            }
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
        writeln!(f, "upstreams:")?;
        for upstream in upstreams {
            writeln!(f, "  - name: {}", quoted(&upstream.name))?;
            writeln!(f, "    engine: {}", upstream.engine.name())?;
            writeln!(f, "    url: {}", quoted(upstream.url.as_str()))?;
            let keep: Vec<String> = upstream.keep.iter().map(|p| quoted(p)).collect();
            writeln!(f, "    keep: [{}]", keep.join(", "))?;
            writeln!(f, "    timeout: {}", format_duration(upstream.timeout))?;
            if let Some(health_url) = &upstream.health_url {
                writeln!(f, "    health_url: {}", quoted(health_url.as_str()))?;
            }
            writeln!(f, "    required: {}", upstream.required)?;
            writeln!(
                f,
                "    min_interval: {}",
                format_duration(upstream.min_interval)
            )?;
            writeln!(f, "    aliases: {}", upstream.aliases)?;
            match &upstream.stall {
                None => writeln!(f, "    stall_after: 0s")?,
                Some(stall) => {
                    writeln!(f, "    stall_after: {}", format_duration(stall.after))?;
                    writeln!(f, "    stall:")?;
                    writeln!(f, "      busy: {}", quoted(&stall.busy.key()))?;
                    let progress: Vec<String> =
                        stall.progress.iter().map(|p| quoted(&p.key())).collect();
                    writeln!(f, "      progress: [{}]", progress.join(", "))?;
                }
            }
            if !views.iter().any(|v| v.name == crate::views::ROUTER) {
                let router: Vec<String> = upstream
                    .engine
                    .preset()
                    .router
                    .iter()
                    .map(|r| match r.select {
                        Some((k, v)) => format!("{}{{{k}={v:?}}}: {}", r.name, r.op),
                        None => format!("{}: {}", r.name, r.op),
                    })
                    .collect();
                writeln!(f, "    # /metrics/router: {}", router.join(", "))?;
            }
            write_rules(f, &upstream.metric_relabel_configs, "    ")?;
        }
        write_rules(f, metric_relabel_configs, "")?;
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
        writeln!(f, "vitals:")?;
        writeln!(f, "  window: {}", format_duration(vitals.window))?;
        if views.is_empty() {
            return writeln!(f, "views: []");
        }
        writeln!(f, "views:")?;
        for view in views {
            writeln!(f, "  - name: {}", quoted(&view.name))?;
            writeln!(f, "    families:")?;
            for family in &view.families {
                writeln!(f, "      {}: {}", quoted(&family.key()), family.op)?;
            }
            if let Some(labels) = &view.aggregate {
                let labels: Vec<String> = labels.iter().map(|l| quoted(l)).collect();
                writeln!(f, "    aggregate: [{}]", labels.join(", "))?;
            }
        }
        Ok(())
    }
}

/// `metric_relabel_configs` at `indent`, every field with its effective value (those an
/// action must leave at their default are left out when they are).
fn write_rules(f: &mut fmt::Formatter<'_>, rules: &[Rule], indent: &str) -> fmt::Result {
    if rules.is_empty() {
        return writeln!(f, "{indent}metric_relabel_configs: []");
    }
    writeln!(f, "{indent}metric_relabel_configs:")?;
    for rule in rules {
        let mut lead = format!("{indent}  - ");
        let mut field = |f: &mut fmt::Formatter<'_>, key: &str, value: &str| {
            let line = writeln!(f, "{lead}{key}: {value}");
            lead = format!("{indent}    ");
            line
        };
        if !rule.source_labels.is_empty() {
            let names: Vec<String> = rule.source_labels.iter().map(|n| literal(n)).collect();
            field(f, "source_labels", &format!("[{}]", names.join(", ")))?;
        }
        field(f, "separator", &literal(&rule.separator))?;
        field(f, "regex", &literal(rule.regex.as_str()))?;
        if rule.modulus != 0 {
            field(f, "modulus", &rule.modulus.to_string())?;
        }
        if !rule.target_label.is_empty() {
            field(f, "target_label", &literal(&rule.target_label))?;
        }
        field(f, "replacement", &literal(&rule.replacement))?;
        field(f, "action", rule.action.as_str())?;
    }
    Ok(())
}

/// A YAML double-quoted scalar that reads back as `text`: `$` is doubled because loading expands
/// `${VAR}` in every value.
fn quoted(text: &str) -> String {
    quote(text, true)
}

/// A YAML double-quoted scalar that reads back as `text` where no `${VAR}` is expanded.
fn literal(text: &str) -> String {
    quote(text, false)
}

fn quote(text: &str, expands: bool) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '$' if expands => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
