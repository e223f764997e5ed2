//! How the page writes text and numbers: HTML escaping and spans of time, shared by the page
//! and its vitals rows.

use std::fmt::{self, Display};

/// `text`, HTML-escaped for element content and quoted attribute values alike.
pub(super) struct Esc<'a>(pub(super) &'a str);

/// `text`, HTML-escaped.
pub(super) fn escape(text: &str) -> String {
    Esc(text).to_string()
}

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A window in words: `1 min`, `90 s`.
pub(super) fn seconds_words(s: f64) -> String {
    if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{s} s")
    }
}

/// A short span of time: `850 µs`, `12.4 ms`, `1.25 s`, `3 min 20 s`.
pub(super) fn seconds(s: f64) -> String {
    if s < 0.001 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 0.01 {
        format!("{:.2} ms", s * 1e3)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else if s < 120.0 {
        format!("{s:.2} s")
    } else {
        format!("{} min {} s", s as u64 / 60, s as u64 % 60)
    }
}
