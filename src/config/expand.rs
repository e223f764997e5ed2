//! `${VAR}` references in configuration values.
//!
//! Expansion runs on each value after the YAML is parsed, never on the file's text, so a value
//! holding `: `, `#`, quotes or newlines cannot change the document's structure or shift the
//! position of anything reported later.
//!
//! - `${NAME}`: the variable's value; an error when it is unset.
//! - `${NAME:-default}`: the variable's value, or `default` when it is unset or empty.
//! - `$$`: a literal `$` (so `$${NAME}` is the literal text `${NAME}`).
//! - A `$` followed by anything else is kept as is.

use super::env::Env;

/// A reference that could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpandError {
    /// The reference as written (`${POD_NAME}`), to find it in the file.
    pub(crate) token: String,
    /// What is wrong.
    pub(crate) problem: ReferenceError,
}

/// Why a `${...}` reference could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReferenceError {
    #[error("unterminated \"${{\" (write $$ for a literal $)")]
    Unterminated,
    #[error("invalid reference \"${{{0}}}\": expected ${{NAME}} or ${{NAME:-default}}")]
    Malformed(String),
    #[error("environment variable {0} is not set (\"${{{0}:-default}}\" gives a fallback)")]
    Unset(String),
}

/// Expands every reference in `value`, reporting each one that fails.
pub(crate) fn expand(value: &str, env: &dyn Env) -> Result<String, Vec<ExpandError>> {
    if !value.contains('$') {
        return Ok(value.to_owned());
    }
    let mut out = String::with_capacity(value.len());
    let mut errors = Vec::new();
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(close) = body.find('}') else {
                errors.push(ExpandError {
                    token: rest[dollar..].to_owned(),
                    problem: ReferenceError::Unterminated,
                });
                break;
            };
            let token = &rest[dollar..dollar + close + 3];
            match reference(&body[..close], env) {
                Ok(text) => out.push_str(&text),
                Err(problem) => errors.push(ExpandError {
                    token: token.to_owned(),
                    problem,
                }),
            }
            rest = &body[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The text of one reference, given what is between `${` and `}`.
fn reference(inner: &str, env: &dyn Env) -> Result<String, ReferenceError> {
    let (name, default) = match inner.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (inner, None),
    };
    if !is_variable_name(name) {
        return Err(ReferenceError::Malformed(inner.to_owned()));
    }
    match (env.var(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_owned()),
        (None, None) => Err(ReferenceError::Unset(name.to_owned())),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env() -> HashMap<String, String> {
        [
            ("POD_NAME", "vllm-0"),
            ("TRICKY", "a: b # c \"d\" 'e'"),
            ("EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn references_expand_to_the_variable_value_verbatim() {
        assert_eq!(expand("${POD_NAME}", &env()), Ok("vllm-0".to_owned()));
        assert_eq!(
            expand("w=${POD_NAME}/${TRICKY}", &env()),
            Ok("w=vllm-0/a: b # c \"d\" 'e'".to_owned())
        );
        assert_eq!(expand("no refs", &env()), Ok("no refs".to_owned()));
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(expand("${NOPE:-x:y}", &env()), Ok("x:y".to_owned()));
        assert_eq!(expand("${EMPTY:-d}", &env()), Ok("d".to_owned()));
        assert_eq!(expand("${EMPTY}", &env()), Ok(String::new()));
        assert_eq!(expand("${POD_NAME:-d}", &env()), Ok("vllm-0".to_owned()));
    }

    #[test]
    fn double_dollar_is_a_literal_dollar() {
        assert_eq!(expand("$${POD_NAME}", &env()), Ok("${POD_NAME}".to_owned()));
        assert_eq!(expand("a$$b", &env()), Ok("a$b".to_owned()));
        assert_eq!(expand("cost $5", &env()), Ok("cost $5".to_owned()));
        assert_eq!(expand("end$", &env()), Ok("end$".to_owned()));
    }

    #[test]
    fn every_failing_reference_is_reported_with_its_token() {
        let errors = expand("${A}-${POD_NAME}-${B:-}-${C}", &env()).expect_err("A and C unset");
        let tokens: Vec<&str> = errors.iter().map(|e| e.token.as_str()).collect();
        assert_eq!(tokens, ["${A}", "${C}"]);
        assert!(
            errors[0].problem.to_string().contains("A is not set"),
            "{}",
            errors[0].problem
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for value in ["${}", "${1X}", "${A B}", "x ${POD_NAME"] {
            assert!(expand(value, &env()).is_err(), "{value}");
        }
    }
}
