//! How `check-config` writes a value back so that it loads as it was: quoted YAML scalars, a
//! URL with its password as `***`.

use crate::model::{ShownUrl, Url};

/// A configured URL, quoted, its password as `***`.
pub(crate) fn shown(url: &Url) -> String {
    quoted(&ShownUrl(url).to_string())
}

/// A YAML double-quoted scalar that reads back as `text`: `$` is doubled because loading expands
/// `${VAR}` in every value.
pub(crate) fn quoted(text: &str) -> String {
    quote(text, true)
}

/// A YAML double-quoted scalar that reads back as `text` where no `${VAR}` is expanded.
pub(crate) fn literal(text: &str) -> String {
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
