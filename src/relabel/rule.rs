//! One `metric_relabel_configs` rule: its fields as Prometheus defines them and the checks
//! Prometheus makes when it loads one. What it does to a label set is in `apply`.

use std::sync::LazyLock;

use super::pattern::Pattern;

/// What a rule does (Prometheus 2.x's `relabel_config` actions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Replace,
    Keep,
    Drop,
    KeepEqual,
    DropEqual,
    HashMod,
    LabelMap,
    LabelDrop,
    LabelKeep,
    Lowercase,
    Uppercase,
}

impl Action {
    const ALL: [Action; 11] = [
        Action::Replace,
        Action::Keep,
        Action::Drop,
        Action::KeepEqual,
        Action::DropEqual,
        Action::HashMod,
        Action::LabelMap,
        Action::LabelDrop,
        Action::LabelKeep,
        Action::Lowercase,
        Action::Uppercase,
    ];

    /// The action's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Keep => "keep",
            Action::Drop => "drop",
            Action::KeepEqual => "keepequal",
            Action::DropEqual => "dropequal",
            Action::HashMod => "hashmod",
            Action::LabelMap => "labelmap",
            Action::LabelDrop => "labeldrop",
            Action::LabelKeep => "labelkeep",
            Action::Lowercase => "lowercase",
            Action::Uppercase => "uppercase",
        }
    }

    /// Reads an action name, in any case as Prometheus does.
    fn parse(text: &str) -> Option<Action> {
        let lower = text.to_lowercase();
        Action::ALL.into_iter().find(|a| a.as_str() == lower)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule as written, each field `None` when it was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSpec {
    pub source_labels: Option<Vec<String>>,
    pub separator: Option<String>,
    pub regex: Option<String>,
    pub modulus: Option<u64>,
    pub target_label: Option<String>,
    pub replacement: Option<String>,
    pub action: Option<String>,
}

/// A problem with one field of a rule (`field` is its key, `source_labels[1]` for an item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    pub field: String,
    pub message: String,
}

impl RuleError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> RuleError {
        RuleError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A checked rule with Prometheus' defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Labels whose values are joined with `separator` and matched against `regex`.
    pub source_labels: Vec<String>,
    pub separator: String,
    pub regex: Pattern,
    /// For `hashmod`; 0 otherwise.
    pub modulus: u64,
    /// Empty when the action needs none.
    pub target_label: String,
    pub replacement: String,
    pub action: Action,
}

const DEFAULT_SEPARATOR: &str = ";";
const DEFAULT_REGEX: &str = "(.*)";
const DEFAULT_REPLACEMENT: &str = "$1";

/// What `replace`'s `target_label` and `labelmap`'s `replacement` may be when they hold
/// references: Prometheus' `relabelTarget` (Go's `\w` is ASCII).
static TEMPLATE_NAME: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^(?:(?:[a-zA-Z_]|\$(?:\{[0-9A-Za-z_]+\}|[0-9A-Za-z_]+))+[0-9A-Za-z_]*)+$")
        .expect("a constant, valid pattern")
});

/// Whether `name` is a label name Prometheus accepts (`__name__` and other `__` names
/// included): `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(crate) fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Rule {
    /// Checks a rule as Prometheus does when it loads one, and fills in the defaults.
    ///
    /// # Errors
    /// Every problem found, each naming its field.
    pub fn new(spec: RuleSpec) -> Result<Rule, Vec<RuleError>> {
        let mut errors = Vec::new();
        let action = match spec.action.as_deref() {
            None => Some(Action::Replace),
            Some(text) => Action::parse(text).or_else(|| {
                let all: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
                errors.push(RuleError::new(
                    "action",
                    format!("unknown action {text:?}: one of {}", all.join(", ")),
                ));
                None
            }),
        };
        for (i, name) in spec.source_labels.iter().flatten().enumerate() {
            if !is_label_name(name) {
                errors.push(RuleError::new(
                    format!("source_labels[{i}]"),
                    format!("{name:?} is not a valid label name"),
                ));
            }
        }
        let regex_text = spec.regex.as_deref().unwrap_or(DEFAULT_REGEX);
        let regex = match Pattern::new(regex_text) {
            Ok(regex) => Some(regex),
            Err(reason) => {
                errors.push(RuleError::new(
                    "regex",
                    format!("invalid regular expression {regex_text:?}: {reason}"),
                ));
                None
            }
        };
        let rule = Rule {
            source_labels: spec.source_labels.clone().unwrap_or_default(),
            separator: spec
                .separator
                .unwrap_or_else(|| DEFAULT_SEPARATOR.to_owned()),
            regex: regex.unwrap_or_else(|| {
                Pattern::new(DEFAULT_REGEX).expect("the default pattern is valid")
            }),
            modulus: spec.modulus.unwrap_or(0),
            target_label: spec.target_label.unwrap_or_default(),
            replacement: spec
                .replacement
                .unwrap_or_else(|| DEFAULT_REPLACEMENT.to_owned()),
            action: action.unwrap_or(Action::Replace),
        };
        if let Some(action) = action {
            rule.check(action, spec.source_labels.is_some(), &mut errors);
        }
        if errors.is_empty() {
            Ok(rule)
        } else {
            Err(errors)
        }
    }

    /// Prometheus' checks of which fields an action needs or forbids.
    fn check(&self, action: Action, sources_given: bool, errors: &mut Vec<RuleError>) {
        use Action as A;
        let target = self.target_label.as_str();
        let needs_target = matches!(
            action,
            A::Replace | A::HashMod | A::Lowercase | A::Uppercase | A::KeepEqual | A::DropEqual
        );
        if action == A::HashMod && self.modulus == 0 {
            errors.push(RuleError::new(
                "modulus",
                "the hashmod action needs a modulus greater than 0",
            ));
        }
        if needs_target && target.is_empty() {
            errors.push(RuleError::new(
                "target_label",
                format!("missing: the {action} action needs a target_label"),
            ));
        } else if needs_target {
            let valid = if action == A::Replace && target.contains('$') {
                TEMPLATE_NAME.is_match(target)
            } else {
                is_label_name(target)
            };
            if !valid {
                errors.push(RuleError::new(
                    "target_label",
                    format!("{target:?} is not a valid target_label for the {action} action"),
                ));
            }
        }
        if matches!(
            action,
            A::Lowercase | A::Uppercase | A::KeepEqual | A::DropEqual
        ) && self.replacement != DEFAULT_REPLACEMENT
        {
            errors.push(RuleError::new(
                "replacement",
                format!("the {action} action takes no replacement"),
            ));
        }
        if action == A::LabelMap && !TEMPLATE_NAME.is_match(&self.replacement) {
            errors.push(RuleError::new(
                "replacement",
                format!(
                    "{:?} is not a valid replacement for the labelmap action: it must make a \
                     label name",
                    self.replacement
                ),
            ));
        }
        let defaults = [
            ("regex", self.regex.as_str() == DEFAULT_REGEX),
            ("modulus", self.modulus == 0),
            ("separator", self.separator == DEFAULT_SEPARATOR),
            ("replacement", self.replacement == DEFAULT_REPLACEMENT),
            ("target_label", target.is_empty()),
            ("source_labels", !sources_given),
        ];
        let (allowed, only): (&[&str], &str) = match action {
            A::KeepEqual | A::DropEqual => (
                &["source_labels", "target_label", "replacement"],
                "source_labels and target_label",
            ),
            A::LabelDrop | A::LabelKeep => (&["regex"], "regex"),
            _ => return,
        };
        if let Some((field, _)) = defaults
            .iter()
            .find(|(field, default)| !default && !allowed.contains(field))
        {
            errors.push(RuleError::new(
                *field,
                format!("the {action} action takes only {only}"),
            ));
        }
    }

    /// Whether the rule can set or remove `__name__` (move a series to another family).
    pub(crate) fn may_rename(&self) -> bool {
        match self.action {
            Action::Replace => self.target_label == "__name__" || self.target_label.contains('$'),
            Action::HashMod | Action::Lowercase | Action::Uppercase => {
                self.target_label == "__name__"
            }
            Action::LabelMap => self.replacement == "__name__" || self.replacement.contains('$'),
            _ => false,
        }
    }
}
