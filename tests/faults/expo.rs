//! A strict, independent check of text format 0.0.4 output: what Prometheus' own parser would
//! refuse (bad syntax, invalid UTF-8, a second HELP/TYPE, a TYPE after samples, a family split in
//! two, a repeated series) is an error here.

use std::collections::{HashMap, HashSet};

/// Checks a whole body; returns the families in order of appearance.
pub(crate) fn check_text(body: &[u8]) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("output is not UTF-8: {e}"))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("output does not end with a newline".into());
    }
    let mut types: HashMap<&str, &str> = HashMap::new();
    let mut helps: HashSet<&str> = HashSet::new();
    let mut sampled: HashSet<String> = HashSet::new();
    let mut series: HashSet<&str> = HashSet::new();
    let mut order: Vec<String> = Vec::new();
    let mut ordered: HashSet<String> = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(name), _) => {
                    check_name(name).map_err(|e| at(&e))?;
                    if !helps.insert(name) {
                        return Err(at("second HELP"));
                    }
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    check_name(name).map_err(|e| at(&e))?;
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at("unknown TYPE"));
                    }
                    if types.insert(name, kind).is_some() {
                        return Err(at("second TYPE"));
                    }
                    if sampled.contains(name) {
                        return Err(at("TYPE after the family's samples"));
                    }
                }
                (Some("EOF"), None, None) => return Err(at("`# EOF` in text 0.0.4")),
                _ => {}
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let (name, key) = check_sample(line).map_err(|e| at(&e))?;
        if !series.insert(key) {
            return Err(at("repeated series"));
        }
        let family = family_of(name, &types).to_string();
        if order.last() != Some(&family) {
            if !ordered.insert(family.clone()) {
                return Err(at(&format!("family {family} is split")));
            }
            order.push(family.clone());
        }
        sampled.insert(family);
    }
    Ok(order)
}

/// The declared family a sample name belongs to, else the name itself.
fn family_of<'a>(name: &'a str, types: &HashMap<&'a str, &str>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(&kind) = types.get(base)
            && (kind == "histogram" || (kind == "summary" && suffix != "_bucket"))
        {
            return types.get_key_value(base).map_or(name, |(k, _)| k);
        }
    }
    name
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = name.bytes().enumerate().all(|(i, b)| {
        b.is_ascii_alphabetic() || b == b'_' || b == b':' || (i > 0 && b.is_ascii_digit())
    });
    if name.is_empty() || !ok {
        Err(format!("bad metric name {name:?}"))
    } else {
        Ok(())
    }
}

/// Checks `name{labels} value [timestamp]`; returns the name and the `name{labels}` key.
fn check_sample(line: &str) -> Result<(&str, &str), String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_name(name)?;
    let mut rest = &line[name_end..];
    if let Some(labels) = rest.strip_prefix('{') {
        rest = check_labels(labels)?;
    }
    let key = &line[..line.len() - rest.len()];
    let mut fields = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = fields.next().ok_or("no value")?;
    let valid_value =
        matches!(value, "+Inf" | "-Inf" | "Inf" | "NaN") || value.parse::<f64>().is_ok();
    if !valid_value {
        return Err(format!("bad value {value:?}"));
    }
    if let Some(ts) = fields.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(format!("bad timestamp {ts:?}"));
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok((name, key))
}

/// Reads `a="x",b="y"}` and returns what follows the `}`.
fn check_labels(mut s: &str) -> Result<&str, String> {
    let mut seen = HashSet::new();
    loop {
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let eq = s.find('=').ok_or("label without `=`")?;
        let label = &s[..eq];
        let ok = !label.is_empty()
            && label.bytes().enumerate().all(|(i, b)| {
                b.is_ascii_alphabetic() || b == b'_' || (i > 0 && b.is_ascii_digit())
            });
        if !ok {
            return Err(format!("bad label name {label:?}"));
        }
        if !seen.insert(label) {
            return Err(format!("repeated label {label:?}"));
        }
        let mut chars = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?
            .char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (_, '\\') => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    _ => return Err("bad escape in a label value".into()),
                },
                (_, '\n') => return Err("newline in a label value".into()),
                (j, '"') => break j,
                _ => {}
            }
        };
        s = &s[eq + 2 + end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}
