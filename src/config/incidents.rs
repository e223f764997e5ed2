//! The `incidents:` section: where incidents are kept across restarts, how many, how many
//! bytes. A directory that sysport cannot write to is a problem of the file, named with its
//! line, not a surprise at the first incident.

use std::path::{Path, PathBuf};

use super::data::{IncidentsConfig, UpstreamConfig};
use super::loader::{Loader, Origin};
use super::raw::{RawIncidents, Text};
use super::units::{parse_bytes, parse_count};

impl Loader<'_> {
    pub(super) fn incidents(
        &mut self,
        raw: Option<RawIncidents>,
        upstreams: &[UpstreamConfig],
    ) -> IncidentsConfig {
        let mut incidents = IncidentsConfig::default();
        let Some(raw) = raw else {
            return incidents;
        };
        self.unknown_keys(&raw.unknown, "incidents", RawIncidents::FIELDS);
        if let Some((keep, _)) = self.file_value(raw.keep.as_ref(), "incidents.keep", |t| {
            parse_count(t).and_then(|n| match n {
                0 => Err("must be at least 1".to_owned()),
                n => Ok(n),
            })
        }) {
            incidents.keep = keep;
        }
        if let Some((max, _)) =
            self.file_value(raw.max_bytes.as_ref(), "incidents.max_bytes", parse_bytes)
        {
            incidents.max_bytes = max;
        }
        if let Some((timeout, _)) = self.file_value(
            raw.stacks_timeout.as_ref(),
            "incidents.stacks_timeout",
            super::check::positive_duration,
        ) {
            incidents.stacks_timeout = timeout;
        }
        let base = self
            .file
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_owned)
            .unwrap_or_default();
        if let Some((py_spy, _)) = self.file_value(raw.py_spy.as_ref(), "incidents.py_spy", |t| {
            (!t.is_empty())
                .then(|| base.join(t))
                .ok_or_else(|| "must name a file".to_owned())
        }) {
            incidents.py_spy = Some(py_spy);
        }
        if let Some(processes) = raw.processes {
            incidents.processes = self.processes(processes.0, upstreams);
        }
        if let Some((dir, at)) = self.file_value(raw.dir.as_ref(), "incidents.dir", |t| {
            (!t.is_empty())
                .then(|| base.join(t))
                .ok_or_else(|| "must name a directory".to_owned())
        }) {
            match writable(&dir) {
                Ok(()) => incidents.dir = Some(dir),
                Err(why) => self.issue(Origin::File(at), "incidents.dir", why),
            }
        }
        incidents
    }
}

impl Loader<'_> {
    /// `incidents.processes`: each key an upstream's name, each value a regular expression.
    fn processes(
        &mut self,
        raw: Vec<(Text, Text)>,
        upstreams: &[UpstreamConfig],
    ) -> Vec<(String, String)> {
        let mut processes: Vec<(String, String)> = Vec::with_capacity(raw.len());
        for (name, value) in raw {
            let field = format!("incidents.processes.{}", name.value);
            if !upstreams.iter().any(|u| u.name == name.value) {
                let names: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                let message = format!(
                    "no upstream is named `{}` ({})",
                    name.value,
                    names.join(", ")
                );
                self.issue(Origin::File(name.referenced), &field, message);
                continue;
            }
            if processes.iter().any(|(n, _)| *n == name.value) {
                self.issue(Origin::File(name.referenced), &field, "named twice");
                continue;
            }
            if let Some((pattern, _)) = self.file_value(Some(&value), &field, command_pattern) {
                processes.push((name.value, pattern));
            }
        }
        processes
    }
}

/// A regular expression for processes' command lines: not empty (it would match every
/// process), and one the `regex` crate compiles.
fn command_pattern(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("must not be empty: it would match every process".to_owned());
    }
    regex::Regex::new(text)
        .map(|_| text.to_owned())
        .map_err(|e| {
            // The regex crate's message draws the pattern and a caret over several lines; the
            // problem is its last, `error: ...`.
            let text = e.to_string();
            let why = (text.lines().rev())
                .find_map(|l| l.strip_prefix("error: "))
                .map_or_else(|| text.replace('\n', " "), str::to_owned);
            format!("not a regular expression: {why}")
        })
}

/// Whether sysport can keep incidents in `dir`: it exists (or is made) and takes a file.
fn writable(dir: &PathBuf) -> Result<(), String> {
    let shown = dir.display();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make directory {shown}: {e}"))?;
    let probe = dir.join(format!(".sysport-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("cannot write to directory {shown}: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
