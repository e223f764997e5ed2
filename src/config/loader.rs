//! The loading machinery: parsing the file, expanding and parsing each value, choosing between
//! flag, environment, file and default, and recording each problem where it came from.

use std::path::PathBuf;

use serde_saphyr::{Location, MessageFormatter, UserMessageFormatter};

use super::env::{self, Env};
use super::error::ConfigIssue;
use super::expand::expand;
use super::path;
use super::section::Text;

/// Where an effective value came from, to point a problem with it at the right place.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin {
    Default,
    File(Location),
    Env(&'static str),
    Flag(&'static str),
}

/// One load in progress: the file text, the environment, and the problems found so far.
pub(crate) struct Loader<'a> {
    env: &'a dyn Env,
    /// The file being loaded, if any.
    pub(crate) file: Option<PathBuf>,
    source: String,
    /// Every problem found so far.
    pub(crate) issues: Vec<ConfigIssue>,
    /// `limits.max_label_value_bytes` once read: the most a configured label value may hold.
    pub(crate) max_label_value_bytes: usize,
}

impl<'a> Loader<'a> {
    pub(crate) fn new(env: &'a dyn Env, file: Option<PathBuf>, source: String) -> Self {
        Loader {
            env,
            file,
            source,
            issues: Vec::new(),
            max_label_value_bytes: super::units::DEFAULT_MAX_LABEL_VALUE_BYTES,
        }
    }

    /// The environment values come from.
    pub(crate) fn env(&self) -> &'a dyn Env {
        self.env
    }

    /// Parses the file's YAML; on failure records the problem and goes on with defaults, so
    /// that problems in the environment and flags are reported too.
    pub(crate) fn parse<T: serde::de::DeserializeOwned + Default>(&mut self) -> T {
        match serde_saphyr::from_str::<T>(&self.source) {
            Ok(raw) => raw,
            Err(err) => {
                let message = UserMessageFormatter.format_message(err.without_snippet());
                let mut message: String = match message.as_ref() {
                    "expected sequence start" => "expected a list",
                    "expected mapping start" => "expected a mapping of keys to values",
                    "expected string scalar" => "expected a single value",
                    other => other,
                }
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
                match err.location().filter(|location| location.line() > 0) {
                    Some(location) => {
                        let line = usize::try_from(location.line() - 1).unwrap_or(usize::MAX);
                        let text = self.source.lines().nth(line).unwrap_or_default();
                        if message.contains("flow") && text.contains("${") {
                            // `{ key: ${VAR} }`: the braces of the reference end the mapping.
                            message.push_str(" (quote a ${VAR} value inside { } or [ ])");
                        }
                        let field = path::field_at(&self.source, &location);
                        self.at(location.line(), location.column(), field, message);
                    }
                    None => self.issues.push(ConfigIssue {
                        file: self.file.clone(),
                        line: None,
                        column: None,
                        field: String::new(),
                        message,
                    }),
                }
                T::default()
            }
        }
    }

    /// Chooses flag > environment > file > default, reporting a bad environment value.
    pub(crate) fn choose<T, E: std::fmt::Display>(
        &mut self,
        flag: Option<(T, &'static str)>,
        var: &'static str,
        parse: fn(&str) -> Result<T, E>,
        file: Option<(T, Location)>,
        default: T,
    ) -> (T, Origin) {
        if let Some((value, flag)) = flag {
            return (value, Origin::Flag(flag));
        }
        if let Some(text) = env::setting(self.env, var) {
            match parse(&text) {
                Ok(value) => return (value, Origin::Env(var)),
                Err(problem) => self.issue(Origin::Env(var), var, problem.to_string()),
            }
        }
        match file {
            Some((value, location)) => (value, Origin::File(location)),
            None => (default, Origin::Default),
        }
    }

    /// Expands and parses one file value, recording any problem at its position.
    pub(crate) fn file_value<T, E: std::fmt::Display>(
        &mut self,
        text: Option<&Text>,
        field: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Option<(T, Location)> {
        let text = text?;
        let expanded = self.expand(text, field)?;
        match parse(&expanded) {
            Ok(value) => Some((value, text.referenced)),
            Err(problem) => {
                self.issue(Origin::File(text.referenced), field, problem.to_string());
                None
            }
        }
    }

    /// Expands `${VAR}` references in a file value; each failing one is reported at its own
    /// position in the file.
    pub(crate) fn expand(&mut self, text: &Text, field: &str) -> Option<String> {
        let errors = match expand(&text.value, self.env) {
            Ok(expanded) => return Some(expanded),
            Err(errors) => errors,
        };
        let span = text.defined.span();
        let scalar = match (span.byte_offset(), span.byte_len()) {
            (Some(start), Some(len)) => usize::try_from(start)
                .ok()
                .zip(usize::try_from(len).ok())
                .map(|(start, len)| (start, start.saturating_add(len).min(self.source.len()))),
            _ => None,
        };
        let mut from = scalar.map_or(0, |(start, _)| start);
        for error in errors {
            let found = scalar.and_then(|(_, end)| {
                let at = from + self.source.get(from..end)?.find(&error.token)?;
                from = at + error.token.len();
                Some(line_column(&self.source, at))
            });
            let (line, column) =
                found.unwrap_or((text.referenced.line(), text.referenced.column()));
            self.at(line, column, field.to_owned(), error.problem.to_string());
        }
        None
    }

    /// Records each key of the mapping at `path` that it does not have, at the key.
    pub(crate) fn unknown_keys(&mut self, unknown: &[Text], path: &str, fields: &[&str]) {
        for key in unknown {
            let field = match path {
                "" => key.value.clone(),
                path => format!("{path}.{}", key.value),
            };
            let message = format!(
                "unknown field `{}`, expected one of {}",
                key.value,
                fields.join(", ")
            );
            self.issue(Origin::File(key.referenced), &field, message);
        }
    }

    /// Records a problem with a value that came from `origin`. Environment and flag problems
    /// are named after the variable or flag, not the file field.
    /// Records a problem when `value`, configured at `at` for `field`, is longer than a label
    /// value may be (`limits.max_label_value_bytes`, as the engines' values): it would be
    /// written into every series. Returns whether it fits.
    pub(crate) fn label_value_fits(&mut self, value: &str, at: Location, field: &str) -> bool {
        let limit = self.max_label_value_bytes;
        if value.len() <= limit {
            return true;
        }
        let message = format!(
            "{} bytes: a label value is at most limits.max_label_value_bytes ({limit} bytes)",
            value.len()
        );
        self.issue(Origin::File(at), field, message);
        false
    }

    pub(crate) fn issue(&mut self, origin: Origin, field: &str, message: impl Into<String>) {
        match origin {
            Origin::File(location) => {
                self.at(
                    location.line(),
                    location.column(),
                    field.to_owned(),
                    message.into(),
                );
            }
            Origin::Env(name) | Origin::Flag(name) => self.issues.push(ConfigIssue {
                file: None,
                line: None,
                column: None,
                field: name.to_owned(),
                message: message.into(),
            }),
            Origin::Default => self.issues.push(ConfigIssue {
                file: None,
                line: None,
                column: None,
                field: field.to_owned(),
                message: message.into(),
            }),
        }
    }

    pub(crate) fn at(&mut self, line: u64, column: u64, field: String, message: String) {
        self.issues.push(ConfigIssue {
            file: self.file.clone(),
            line: usize::try_from(line).ok(),
            column: usize::try_from(column).ok(),
            field,
            message,
        });
    }
}

/// 1-based line and column (in characters) of byte `at` in `source`.
fn line_column(source: &str, at: usize) -> (u64, u64) {
    let before = &source[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (line as u64, column as u64)
}
