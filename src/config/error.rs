//! Configuration problems: each one names where it came from (file and position, environment
//! variable or command-line flag), the field, and what is wrong.

use std::fmt;
use std::path::PathBuf;

/// One problem found while loading the configuration.
///
/// Displayed as `FILE:LINE:COL: FIELD: MESSAGE`, leaving out the parts that are unknown. A
/// problem in an environment variable or a command-line flag has no file: its `field` names the
/// variable or flag instead (`DYN_SYSTEM_PORT: invalid port "99999": must be 0-65535`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The configuration file, when the problem is in one.
    pub file: Option<PathBuf>,
    /// 1-based line in `file`.
    pub line: Option<usize>,
    /// 1-based column (in characters) in `file`.
    pub column: Option<usize>,
    /// The field (`upstreams[1].url`), environment variable or flag the problem is about; may be
    /// empty for a problem with the file as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut located = false;
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            located = true;
        }
        if let Some(line) = self.line {
            if located {
                f.write_str(":")?;
            }
            write!(f, "{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
            located = true;
        }
        if located {
            f.write_str(": ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// The configuration could not be loaded; holds every problem found, in the order found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.issues))]
pub struct ConfigError {
    /// Every problem found; never empty.
    pub issues: Vec<ConfigIssue>,
}

fn render(issues: &[ConfigIssue]) -> String {
    let lines: Vec<String> = issues.iter().map(ToString::to_string).collect();
    lines.join("\n")
}
