//! The log: one line per event on stderr, `key=value` fields after the message, or one JSON
//! object per line with `SYSPORT_LOG_FORMAT=json`.
//!
//! Field values often come from outside: an upstream's error text or Content-Type, a redirect's
//! `Location`, a client's request. Written as they are, `text/html error=none INFO forged` reads
//! as extra fields, and a newline or U+2028 as an extra line. So every field value that is not a
//! plain token is written in double quotes, with `"` and `\` escaped and every control, line or
//! paragraph separator and format character written as `\u{…}` (`\n`, `\r` and `\t` by name). The
//! message itself is sysport's own text. A panic is logged as an event too, in the same format.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// `SYSPORT_LOG_FORMAT`: `text` (default) or `json`.
pub const SYSPORT_LOG_FORMAT: &str = "SYSPORT_LOG_FORMAT";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `TIME LEVEL message key=value ...`, values quoted when they are not plain tokens.
    Text,
    /// One JSON object per line.
    Json,
}

impl Format {
    /// Reads `SYSPORT_LOG_FORMAT`'s value.
    pub fn parse(text: &str) -> Option<Format> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// Installs the log for the process: `filter` (an `EnvFilter` directive such as `info`) and
/// `format`, on stderr; panics become error events.
pub fn init(filter: tracing_subscriber::EnvFilter, format: Format) {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    match format {
        Format::Text => builder.with_ansi(ansi).fmt_fields(QuotedFields).init(),
        Format::Json => builder.json().flatten_event(true).init(),
    }
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(panic = %payload, at = place.as_deref().unwrap_or(""), "panicked");
    }));
}

/// Writes fields as `key=value`, quoting and escaping values that are not plain tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotedFields;

impl<'writer> FormatFields<'writer> for QuotedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    fn separate(&mut self) -> fmt::Result {
        if !self.first {
            self.writer.write_char(' ')?;
        }
        self.first = false;
        Ok(())
    }

    fn field(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .separate()
            .and_then(|()| write!(self.writer, "{}={}", field.name(), Escaped(value)));
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            // sysport's own words, as written in the code.
            if self.result.is_ok() {
                self.result = self
                    .separate()
                    .and_then(|()| write!(self.writer, "{value:?}"));
            }
            return;
        }
        self.field(field, &format!("{value:?}"));
    }
}

/// A field value as the log writes it: as it is when it is a plain token, else quoted and
/// escaped so that it stays one value on one line.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.:/@+,%()[]#*~".contains(c)
}

/// A character that could end a line or change how the rest of one reads: controls, line and
/// paragraph separators, and format characters (bidirectional overrides, zero-width).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}')
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        if !text.is_empty() && text.chars().all(plain) {
            return f.write_str(text);
        }
        f.write_char('"')?;
        for c in text.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if hidden(c) => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_tokens_stay_as_they_are() {
        for v in [
            "vllm",
            "http://127.0.0.1:8000/metrics",
            "2.5s",
            "connect_error",
            "a,b",
        ] {
            assert_eq!(Escaped(v).to_string(), v);
        }
    }

    #[test]
    fn anything_else_is_one_quoted_value_on_one_line() {
        let forged = "text/html error=none\nINFO forged line";
        assert_eq!(
            Escaped(forged).to_string(),
            r#""text/html error=none\nINFO forged line""#
        );
        assert_eq!(Escaped("a\u{2028}b").to_string(), r#""a\u{2028}b""#);
        assert_eq!(Escaped("say \"hi\" \\").to_string(), r#""say \"hi\" \\""#);
        assert_eq!(Escaped("\u{1b}[31mred").to_string(), r#""\u{1b}[31mred""#);
        assert_eq!(Escaped("\u{202e}txt").to_string(), r#""\u{202e}txt""#);
        assert_eq!(Escaped("").to_string(), r#""""#);
        assert_eq!(Escaped("µs élan").to_string(), "\"µs élan\"");
        for v in [forged, "a\u{2028}b", "x\u{85}y", "a\rb"] {
            let out = Escaped(v).to_string();
            assert!(!out.contains(['\n', '\r', '\u{2028}', '\u{85}']), "{out}");
        }
    }

    #[test]
    fn the_format_is_read_from_its_variable() {
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert_eq!(Format::parse(" JSON "), Some(Format::Json));
        assert_eq!(Format::parse("text"), Some(Format::Text));
        assert_eq!(Format::parse(""), Some(Format::Text));
        assert_eq!(Format::parse("logfmt"), None);
    }
}
