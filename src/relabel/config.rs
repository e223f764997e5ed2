//! `metric_relabel_configs`: Prometheus' `relabel_config` schema, read as written.
//!
//! Unlike every other value, these are taken literally: `${VAR}` is not expanded, so that
//! `$1`, `${1}` and `$$` mean what they mean in Prometheus and rules can be copied over as
//! they are.

use serde_saphyr::{Location, Spanned};

use crate::config::loader::{Loader, Origin};
use crate::config::quote::literal;
use crate::config::section::Text;
use crate::relabel::{Rule, RuleSpec};
use serde::Deserialize;

/// The list as written.
pub(crate) type RawRules = Spanned<Vec<Spanned<RawRelabel>>>;

/// One rule, with Prometheus' fields and defaults. See Prometheus' `<relabel_config>`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRelabel {
    /// Labels whose values are joined with `separator` and matched against `regex`
    /// (`__name__` is the sample's name).
    pub(crate) source_labels: Option<Spanned<Vec<Text>>>,
    /// Placed between the joined source values, default `;`.
    pub(crate) separator: Option<Text>,
    /// RE2 regular expression, anchored at both ends, default `(.*)`.
    pub(crate) regex: Option<Text>,
    /// For `hashmod`: the modulus of the hash of the joined source values.
    pub(crate) modulus: Option<Text>,
    /// The label a `replace`, `hashmod`, `lowercase`, `uppercase` writes, or that `keepequal`
    /// and `dropequal` compare with; `replace` may use `$1`-style references in it.
    pub(crate) target_label: Option<Text>,
    /// What `replace` writes (and `labelmap` names labels), with `$1`, `${1}`, `$name`
    /// references to the regex's groups; default `$1`.
    pub(crate) replacement: Option<Text>,
    /// `replace` (default), `keep`, `drop`, `keepequal`, `dropequal`, `hashmod`, `labelmap`,
    /// `labeldrop`, `labelkeep`, `lowercase` or `uppercase`.
    pub(crate) action: Option<Text>,
}

impl Loader<'_> {
    /// Checks every rule of a list (`field` names the list), recording each problem where it
    /// was written; the rules that pass, in order.
    pub(crate) fn relabel_rules(&mut self, raw: Option<RawRules>, field: &str) -> Vec<Rule> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let mut rules = Vec::with_capacity(raw.value.len());
        for (i, entry) in raw.value.into_iter().enumerate() {
            let field = format!("{field}[{i}]");
            if let Some(rule) = self.relabel_rule(entry, &field) {
                rules.push(rule);
            }
        }
        rules
    }

    fn relabel_rule(&mut self, entry: Spanned<RawRelabel>, field: &str) -> Option<Rule> {
        let raw = entry.value;
        let text = |t: &Option<Text>| t.as_ref().map(|t| t.value.clone());
        let mut modulus_ok = true;
        let modulus = match &raw.modulus {
            None => None,
            Some(m) => match m.value.trim().parse::<u64>() {
                Ok(m) => Some(m),
                Err(_) => {
                    let message = format!("invalid modulus {:?}: must be a whole number", m.value);
                    self.issue(
                        Origin::File(m.referenced),
                        &format!("{field}.modulus"),
                        message,
                    );
                    modulus_ok = false;
                    None
                }
            },
        };
        if let Some(replacement) = &raw.replacement
            && !self.label_value_fits(
                &replacement.value,
                replacement.referenced,
                &format!("{field}.replacement"),
            )
        {
            return None;
        }
        let spec = RuleSpec {
            source_labels: raw
                .source_labels
                .as_ref()
                .map(|list| list.value.iter().map(|t| t.value.clone()).collect()),
            separator: text(&raw.separator),
            regex: text(&raw.regex),
            modulus,
            target_label: text(&raw.target_label),
            replacement: text(&raw.replacement),
            action: text(&raw.action),
        };
        match Rule::new(spec) {
            Ok(rule) => modulus_ok.then_some(rule),
            Err(errors) => {
                // An unreadable modulus is reported once, above.
                for err in errors
                    .into_iter()
                    .filter(|e| modulus_ok || e.field != "modulus")
                {
                    let at = location(&raw, &err.field).unwrap_or(entry.referenced);
                    self.issue(
                        Origin::File(at),
                        &format!("{field}.{}", err.field),
                        err.message,
                    );
                }
                None
            }
        }
    }
}

/// Where the rule's `field` (`regex`, `source_labels[1]`) was written, if it was.
fn location(raw: &RawRelabel, field: &str) -> Option<Location> {
    let at = |t: &Option<Text>| t.as_ref().map(|t| t.referenced);
    match field {
        "separator" => at(&raw.separator),
        "regex" => at(&raw.regex),
        "modulus" => at(&raw.modulus),
        "target_label" => at(&raw.target_label),
        "replacement" => at(&raw.replacement),
        "action" => at(&raw.action),
        "source_labels" => raw.source_labels.as_ref().map(|s| s.referenced),
        item => {
            let i: usize = item
                .strip_prefix("source_labels[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            Some(raw.source_labels.as_ref()?.value.get(i)?.referenced)
        }
    }
}

/// `metric_relabel_configs` at `indent`, every field with its effective value (those an
/// action must leave at their default are left out when they are).
pub(crate) fn render(
    f: &mut std::fmt::Formatter<'_>,
    rules: &[Rule],
    indent: &str,
) -> std::fmt::Result {
    if rules.is_empty() {
        return writeln!(f, "{indent}metric_relabel_configs: []");
    }
    writeln!(f, "{indent}metric_relabel_configs:")?;
    for rule in rules {
        let mut lead = format!("{indent}  - ");
        let mut field = |f: &mut std::fmt::Formatter<'_>, key: &str, value: &str| {
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

#[cfg(test)]
mod tests;
