//! Families as readers name them ([`FamilyKey`]), and how copies of one number combine ([`Op`]).

use std::fmt;

/// How the series of one family that differ only in aggregated labels become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The total (queue lengths, running requests).
    Sum,
    /// The mean (usage fractions).
    Avg,
    Max,
    Min,
    /// Every series as it is (info families, whose labels are the data).
    Pass,
}

impl Op {
    /// Every operation, as the configuration spells it.
    pub const ALL: [Op; 5] = [Op::Sum, Op::Avg, Op::Max, Op::Min, Op::Pass];

    /// Reads an operation name.
    pub fn parse(text: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == text.trim())
    }

    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Avg => "avg",
            Op::Max => "max",
            Op::Min => "min",
            Op::Pass => "pass",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A family as a reader picks it: its text-format name and the label values (plain, not
/// escaped) its series must carry. Engine presets, the configuration's `stall:` and `views:`,
/// the router view and stall detection all speak of families this way; it is written
/// `name` or `name{label="value",...}` (endpoint pickers' metric flags read the same).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FamilyKey {
    pub name: String,
    pub select: Vec<(String, String)>,
}

/// A family and how copies of its number combine: one family of a view or of an engine's
/// router preset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFamily {
    pub key: FamilyKey,
    pub op: Op,
}

/// Why a text is not a family key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FamilyKeyError {
    #[error(
        "{0:?} is not a metric family name ([a-zA-Z_:][a-zA-Z0-9_:]*, optionally followed by \
         {{label=\"value\"}})"
    )]
    Name(String),
    #[error("{0:?}: the label selection does not end with }}")]
    Unclosed(String),
    #[error("{key:?}: {pair:?} is not label=value")]
    Pair { key: String, pair: String },
    #[error("{key:?}: {label:?} is not a label name")]
    Label { key: String, label: String },
    #[error("{0:?}: label values with quotes or backslashes cannot be selected")]
    Quoted(String),
}

impl FamilyKey {
    /// A family with no label selection.
    pub fn named(name: &str) -> FamilyKey {
        FamilyKey {
            name: name.to_owned(),
            select: Vec::new(),
        }
    }

    /// A family whose series carry `label="value"`.
    pub fn selected(name: &str, label: &str, value: &str) -> FamilyKey {
        FamilyKey {
            name: name.to_owned(),
            select: vec![(label.to_owned(), value.to_owned())],
        }
    }

    /// Reads a family key: `vllm:num_requests_waiting` or
    /// `nv_trt_llm_request_metrics{request_type="waiting"}` (quotes optional, several pairs
    /// separated by commas), the way endpoint pickers' metric flags are written.
    pub fn parse(text: &str) -> Result<FamilyKey, FamilyKeyError> {
        let text = text.trim();
        let (name, rest) = match text.split_once('{') {
            Some((name, rest)) => (name.trim(), Some(rest)),
            None => (text, None),
        };
        if !sysport_expfmt::is_metric_name(name.as_bytes()) {
            return Err(FamilyKeyError::Name(text.to_owned()));
        }
        let mut select = Vec::new();
        if let Some(rest) = rest {
            let Some(body) = rest.trim_end().strip_suffix('}') else {
                return Err(FamilyKeyError::Unclosed(text.to_owned()));
            };
            for pair in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((label, value)) = pair.split_once('=') else {
                    return Err(FamilyKeyError::Pair {
                        key: text.to_owned(),
                        pair: pair.to_owned(),
                    });
                };
                let label = label.trim();
                if !sysport_expfmt::is_label_name(label.as_bytes()) {
                    return Err(FamilyKeyError::Label {
                        key: text.to_owned(),
                        label: label.to_owned(),
                    });
                }
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                if value.contains(['"', '\\']) {
                    return Err(FamilyKeyError::Quoted(text.to_owned()));
                }
                select.push((label.to_owned(), value.to_owned()));
            }
        }
        Ok(FamilyKey {
            name: name.to_owned(),
            select,
        })
    }
}

/// The key as [`FamilyKey::parse`] reads it back: `name` or `name{label="value",...}`.
impl fmt::Display for FamilyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.select.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.select.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_keys_read_like_picker_flags() {
        assert_eq!(
            FamilyKey::parse("vllm:num_requests_waiting"),
            Ok(FamilyKey::named("vllm:num_requests_waiting"))
        );
        assert_eq!(
            FamilyKey::parse("nv_trt_llm_request_metrics{request_type=waiting}"),
            Ok(FamilyKey::selected(
                "nv_trt_llm_request_metrics",
                "request_type",
                "waiting"
            ))
        );
        let two = FamilyKey::parse(r#"x{a="1", b = 2}"#).expect("two pairs");
        assert_eq!(
            two.select,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        let key = FamilyKey::selected("x", "a", "1");
        assert_eq!(key.to_string(), r#"x{a="1"}"#);
        assert_eq!(FamilyKey::parse(&key.to_string()), Ok(key));
        assert!(matches!(
            FamilyKey::parse("1x"),
            Err(FamilyKeyError::Name(_))
        ));
        assert!(matches!(
            FamilyKey::parse("x{a=1"),
            Err(FamilyKeyError::Unclosed(_))
        ));
        assert!(matches!(
            FamilyKey::parse("x{a}"),
            Err(FamilyKeyError::Pair { .. })
        ));
        assert!(matches!(
            FamilyKey::parse("x{__a=1}"),
            Err(FamilyKeyError::Label { .. })
        ));
        assert!(matches!(
            FamilyKey::parse(r#"x{a="q\"}"#),
            Err(FamilyKeyError::Quoted(_))
        ));
    }

    #[test]
    fn operations_round_trip_by_name() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.name()), Some(op));
        }
        assert_eq!(Op::parse("mean"), None);
    }
}
