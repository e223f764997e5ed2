//! What a view is made of: families, each with the label values that pick its series and the
//! operation that combines copies of one number.

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

/// One family of a view: its text-format name, the label values its series must carry (plain,
/// not escaped), and its operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFamily {
    pub name: String,
    pub select: Vec<(String, String)>,
    pub op: Op,
}

impl ViewFamily {
    /// The family as a picker's flags write it: `name` or `name{label=value,...}` (values may be
    /// quoted).
    pub fn key(&self) -> String {
        family_key(&self.name, &self.select)
    }
}

/// A family key as [`parse_family_key`] reads it back: `name` or `name{label="value",...}`.
pub fn family_key(name: &str, select: &[(String, String)]) -> String {
    if select.is_empty() {
        return name.to_owned();
    }
    let pairs: Vec<String> = select.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", pairs.join(","))
}

/// Reads a family key: `vllm:num_requests_waiting` or
/// `nv_trt_llm_request_metrics{request_type="waiting"}` (quotes optional, several pairs
/// separated by commas), the way endpoint pickers' metric flags are written.
pub fn parse_family_key(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let text = text.trim();
    let (name, rest) = match text.split_once('{') {
        Some((name, rest)) => (name.trim(), Some(rest)),
        None => (text, None),
    };
    if !crate::expfmt::is_metric_name(name.as_bytes()) {
        return Err(format!(
            "{text:?} is not a metric family name ([a-zA-Z_:][a-zA-Z0-9_:]*, optionally followed \
             by {{label=\"value\"}})"
        ));
    }
    let mut select = Vec::new();
    if let Some(rest) = rest {
        let Some(body) = rest.trim_end().strip_suffix('}') else {
            return Err(format!(
                "{text:?}: the label selection does not end with }}"
            ));
        };
        for pair in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((label, value)) = pair.split_once('=') else {
                return Err(format!("{text:?}: {pair:?} is not label=value"));
            };
            let label = label.trim();
            if !crate::expfmt::is_label_name(label.as_bytes()) {
                return Err(format!("{text:?}: {label:?} is not a label name"));
            }
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            if value.contains(['"', '\\']) {
                return Err(format!(
                    "{text:?}: label values with quotes or backslashes cannot be selected"
                ));
            }
            select.push((label.to_owned(), value.to_owned()));
        }
    }
    Ok((name.to_owned(), select))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_keys_read_like_picker_flags() {
        assert_eq!(
            parse_family_key("vllm:num_requests_waiting"),
            Ok(("vllm:num_requests_waiting".into(), vec![]))
        );
        let triton = parse_family_key("nv_trt_llm_request_metrics{request_type=waiting}");
        assert_eq!(
            triton,
            Ok((
                "nv_trt_llm_request_metrics".into(),
                vec![("request_type".into(), "waiting".into())]
            ))
        );
        assert_eq!(
            parse_family_key(r#"x{a="1", b = 2}"#),
            Ok((
                "x".into(),
                vec![("a".into(), "1".into()), ("b".into(), "2".into())]
            ))
        );
        let family = ViewFamily {
            name: "x".into(),
            select: vec![("a".into(), "1".into())],
            op: Op::Sum,
        };
        assert_eq!(family.key(), r#"x{a="1"}"#);
        assert_eq!(
            parse_family_key(&family.key()),
            Ok((family.name, family.select))
        );
        assert!(parse_family_key("1x").is_err());
        assert!(parse_family_key("x{a=1").is_err());
        assert!(parse_family_key("x{a}").is_err());
        assert!(parse_family_key("x{__a=1}").is_err());
        assert!(parse_family_key(r#"x{a="q\"}"#).is_err());
    }

    #[test]
    fn operations_round_trip_by_name() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.name()), Some(op));
        }
        assert_eq!(Op::parse("mean"), None);
    }
}
