//! The `incidents:` section: where incidents are kept across restarts, how many, how many
//! bytes. A directory that sysport cannot write to is a problem of the file, named with its
//! line, not a surprise at the first incident.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::loader::{Loader, Origin};
use crate::config::quote::quoted;
use crate::config::section::{RawLabels, Text, section};
use crate::config::units::{format_bytes, format_duration};
use crate::config::units::{parse_bytes, parse_count};
use crate::scrape::config::UpstreamConfig;

/// Where incidents are kept (docs/incidents.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentsConfig {
    /// Written to and read back from at start; `None`: in memory only.
    pub dir: Option<PathBuf>,
    /// Most incidents kept, in memory and in `dir`.
    pub keep: usize,
    /// Most bytes the incidents take in `dir`.
    pub max_bytes: usize,
    /// py-spy, for the engine's Python stacks; `None`: found on `PATH`.
    pub py_spy: Option<PathBuf>,
    /// How long one process's dump may take before it is killed.
    pub stacks_timeout: Duration,
    /// Upstreams whose engine's processes are found by their command line instead of the
    /// upstream's port: (upstream name, regular expression), in the file's order.
    pub processes: Vec<(String, String)>,
}

impl Default for IncidentsConfig {
    fn default() -> Self {
        IncidentsConfig {
            dir: None,
            keep: 20,
            max_bytes: 256 << 20,
            py_spy: None,
            stacks_timeout: Duration::from_secs(10),
            processes: Vec::new(),
        }
    }
}

section! {
    /// `incidents:` section.
    RawIncidents {
        /// A directory sysport writes each closed incident to and reads them back from at
        /// start (default none: the last `keep` in memory only). Relative to the file.
        dir: Text,
        /// Most incidents kept (`20`, default 20), in memory and in `dir`; the oldest go first.
        keep: Text,
        /// Most bytes the incidents take in `dir` (`256MiB`, default 256MiB).
        max_bytes: Text,
        /// py-spy for the engine's Python stacks (default: `py-spy` on `PATH`).
        py_spy: Text,
        /// How long one process's stack dump may take before it is killed (`10s`, default 10s).
        stacks_timeout: Text,
        /// Per upstream, by name: a regular expression matched against each process's command
        /// line (as `pgrep -f`); the matching processes and their descendants are the engine's,
        /// instead of the process listening on the upstream's port
        /// (`{ vllm: "vllm serve|vllm.entrypoints" }`).
        processes: RawLabels,
    }
}

impl Loader<'_> {
    pub(crate) fn incidents(
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
            parse_count(t)
                .map_err(KeepError::from)
                .and_then(|n| match n {
                    0 => Err(KeepError::Zero),
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
            crate::config::check::positive_duration,
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
                Err(why) => self.issue(Origin::File(at), "incidents.dir", why.to_string()),
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

/// Why a process pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum PatternError {
    #[error("must not be empty: it would match every process")]
    Empty,
    #[error("not a regular expression: {0}")]
    Regex(String),
}

/// A regular expression for processes' command lines: not empty (it would match every
/// process), and one the `regex` crate compiles.
fn command_pattern(text: &str) -> Result<String, PatternError> {
    if text.is_empty() {
        return Err(PatternError::Empty);
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
            PatternError::Regex(why)
        })
}

/// Why `incidents.keep` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum KeepError {
    #[error(transparent)]
    Count(#[from] crate::config::units::UnitError),
    #[error("must be at least 1")]
    Zero,
}

/// Why sysport cannot keep incidents in a directory.
#[derive(Debug, thiserror::Error)]
enum Unwritable {
    #[error("cannot make directory {dir}: {error}")]
    Make { dir: String, error: std::io::Error },
    #[error("cannot write to directory {dir}: {error}")]
    Write { dir: String, error: std::io::Error },
}

/// Whether sysport can keep incidents in `dir`: it exists (or is made) and takes a file.
fn writable(dir: &PathBuf) -> Result<(), Unwritable> {
    let shown = || dir.display().to_string();
    std::fs::create_dir_all(dir).map_err(|error| Unwritable::Make {
        dir: shown(),
        error,
    })?;
    let probe = dir.join(format!(".sysport-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|error| Unwritable::Write {
        dir: shown(),
        error,
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The `incidents:` section as `check-config` prints it.
pub(crate) fn render(
    f: &mut std::fmt::Formatter<'_>,
    incidents: &IncidentsConfig,
) -> std::fmt::Result {
    writeln!(f, "incidents:")?;
    if let Some(dir) = &incidents.dir {
        writeln!(f, "  dir: {}", quoted(&dir.display().to_string()))?;
    }
    writeln!(f, "  keep: {}", incidents.keep)?;
    writeln!(f, "  max_bytes: {}", format_bytes(incidents.max_bytes))?;
    if let Some(py_spy) = &incidents.py_spy {
        writeln!(f, "  py_spy: {}", quoted(&py_spy.display().to_string()))?;
    }
    writeln!(
        f,
        "  stacks_timeout: {}",
        format_duration(incidents.stacks_timeout)
    )?;
    if !incidents.processes.is_empty() {
        writeln!(f, "  processes:")?;
        for (upstream, pattern) in &incidents.processes {
            writeln!(f, "    {}: {}", quoted(upstream), quoted(pattern))?;
        }
    }
    Ok(())
}
