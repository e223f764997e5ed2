//! Prometheus' regular expressions: RE2 syntax as Go's `regexp` reads it, fully anchored
//! (`^(?:RE)$`, as Prometheus compiles them), and Go's `Expand` for `$1`, `${1}`, `$name`.
//!
//! The `regex` crate reads RE2 syntax too, with a few differences that would change what a
//! rule matches; the pattern is rewritten before it is compiled so that it means what Go reads:
//! - `\d`, `\s`, `\w` (and `\D`, `\S`, `\W`) are ASCII classes in Go, Unicode ones here;
//!   `\b` and `\B` are ASCII word boundaries in Go.
//! - Inside a class, Go reads `[`, `&&`, `--` and `~~` literally; here they nest or combine
//!   classes.
//! - An escaped punctuation character is always that character in Go (`\<` is `<`); here some
//!   are assertions.
//! - `\Q...\E` quotes literal text in Go only.
//! - Go knows only the flags `i`, `m`, `s` and `U`.

use std::sync::{Arc, Mutex};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::{Anchored, Input};

/// A compiled, anchored rule regex.
#[derive(Clone)]
pub struct Pattern {
    /// As configured.
    source: String,
    regex: regex::Regex,
    /// The same regex as a lazy DFA, to tell whether any value with a given start can match.
    dfa: Arc<DFA>,
    cache: Arc<Mutex<Cache>>,
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Pattern").field(&self.source).finish()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    /// Compiles `source` as Prometheus does: Go's RE2 syntax, anchored at both ends.
    ///
    /// # Errors
    /// The problem with the pattern, as the regex compiler words it.
    pub fn new(source: &str) -> Result<Pattern, String> {
        let anchored = format!("^(?:{})$", to_rust_syntax(source)?);
        let regex = regex::Regex::new(&anchored).map_err(|err| describe(&err.to_string()))?;
        let dfa = DFA::new(&anchored).map_err(|err| describe(&err.to_string()))?;
        let cache = dfa.create_cache();
        Ok(Pattern {
            source: source.to_owned(),
            regex,
            dfa: Arc::new(dfa),
            cache: Arc::new(Mutex::new(cache)),
        })
    }

    /// The pattern as configured, without the anchors.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the whole of `value` matches.
    pub fn is_match(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }

    /// The capture group positions of a whole match of `value`, if it matches.
    pub fn captures<'v>(&self, value: &'v str) -> Option<regex::Captures<'v>> {
        self.regex.captures(value)
    }

    /// Whether some value starting with `prefix` could match; `true` when that is not known.
    pub fn may_match_with_prefix(&self, prefix: &str) -> bool {
        let Ok(mut cache) = self.cache.lock() else {
            return true;
        };
        let input = Input::new(prefix).anchored(Anchored::Yes);
        let Ok(mut state) = self.dfa.start_state_forward(&mut cache, &input) else {
            return true;
        };
        for &b in prefix.as_bytes() {
            match self.dfa.next_state(&mut cache, state, b) {
                Ok(next) if next.is_dead() => return false,
                Ok(next) if next.is_quit() => return true,
                Ok(next) => state = next,
                Err(_) => return true,
            }
        }
        true
    }

    /// `template` with `$1`, `${1}`, `$name` and `${name}` replaced by the groups of `caps`,
    /// exactly as Go's `Regexp.Expand` does.
    pub fn expand(&self, caps: &regex::Captures<'_>, template: &str, out: &mut String) {
        let mut rest = template;
        while let Some(dollar) = rest.find('$') {
            out.push_str(&rest[..dollar]);
            rest = &rest[dollar + 1..];
            if let Some(after) = rest.strip_prefix('$') {
                out.push('$');
                rest = after;
                continue;
            }
            let Some((name, after)) = reference(rest) else {
                // Go: a malformed reference leaves the `$` as it is.
                out.push('$');
                continue;
            };
            rest = after;
            let group = match group_number(name) {
                Some(n) => caps.get(n),
                None => self
                    .regex
                    .capture_names()
                    .position(|n| n == Some(name))
                    .and_then(|i| caps.get(i)),
            };
            if let Some(m) = group {
                out.push_str(m.as_str());
            }
        }
        out.push_str(rest);
    }
}

/// The name of a reference at the start of `s` (just after its `$`) and what follows it:
/// the longest run of letters, digits and `_`, or such a run between braces.
fn reference(s: &str) -> Option<(&str, &str)> {
    let (braced, body) = match s.strip_prefix('{') {
        Some(body) => (true, body),
        None => (false, s),
    };
    let end = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let (name, after) = body.split_at(end);
    if braced {
        return after.strip_prefix('}').map(|after| (name, after));
    }
    Some((name, after))
}

/// A reference that Go reads as a group number: digits only, no leading zero, below 10^8.
/// Anything else (`$1x`, `$01`) names a group.
fn group_number(name: &str) -> Option<usize> {
    if !name.bytes().all(|b| b.is_ascii_digit()) || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    name.parse().ok().filter(|&n| n < 100_000_000)
}

/// The last line of a `regex` error: the reason, without the pattern it repeats.
fn describe(err: &str) -> String {
    let reason = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(err);
    reason.trim().trim_start_matches("error: ").to_owned()
}

const DIGIT: &str = "0-9";
const SPACE: &str = "\\t\\n\\f\\r ";
const WORD: &str = "0-9A-Za-z_";

/// `source` (Go's syntax) written in the `regex` crate's syntax, with the same meaning.
fn to_rust_syntax(source: &str) -> Result<String, String> {
    let mut out = String::with_capacity(source.len() + 16);
    let mut chars = source.chars().peekable();
    // Inside a class: whether a `]` now would be its first character (a literal then).
    let mut class: Option<bool> = None;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    return Err("trailing backslash at end of expression".to_owned());
                };
                match e {
                    'd' | 'D' | 's' | 'S' | 'w' | 'W' => {
                        let set = match e.to_ascii_lowercase() {
                            'd' => DIGIT,
                            's' => SPACE,
                            _ => WORD,
                        };
                        let negated = if e.is_ascii_uppercase() { "^" } else { "" };
                        out.push_str(&format!("[{negated}{set}]"));
                    }
                    'b' | 'B' if class.is_none() => out.push_str(&format!("(?-u:\\{e})")),
                    'Q' => {
                        let mut literal = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            literal.push(q);
                        }
                        for l in literal.chars() {
                            push_literal(l, &mut out);
                        }
                    }
                    e if e.is_ascii_punctuation() => push_literal(e, &mut out),
                    e => {
                        out.push('\\');
                        out.push(e);
                    }
                }
                if let Some(first) = class.as_mut() {
                    *first = false;
                }
            }
            '[' if class.is_none() => {
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                class = Some(true);
            }
            '[' => {
                // A POSIX class (`[:alpha:]`) stays; any other `[` is a literal in Go.
                let rest: String = chars.clone().take_while(|&c| c != ']').collect();
                if rest.starts_with(':') && rest.len() > 1 && rest.ends_with(':') {
                    out.push('[');
                    out.push_str(&rest);
                    out.push(']');
                    for _ in 0..=rest.chars().count() {
                        chars.next();
                    }
                } else {
                    out.push_str("\\[");
                }
                class = Some(false);
            }
            ']' if class == Some(true) => {
                out.push_str("\\]");
                class = Some(false);
            }
            ']' if class.is_some() => {
                out.push(']');
                class = None;
            }
            '&' | '~' if class.is_some() => {
                out.push('\\');
                out.push(c);
                class = Some(false);
            }
            '-' if class.is_some() && chars.peek() == Some(&'-') => {
                // `--` is a range ending in `-` in Go; here it would subtract classes.
                out.push_str("-\\-");
                chars.next();
                class = Some(false);
            }
            '(' if class.is_none() && chars.peek() == Some(&'?') => {
                out.push('(');
                check_flags(chars.clone().skip(1))?;
            }
            c => {
                out.push(c);
                if let Some(first) = class.as_mut() {
                    *first = false;
                }
            }
        }
    }
    Ok(out)
}

/// Go accepts the flags `i`, `m`, `s` and `U` only (`(?i)`, `(?-s:...)`); names and
/// lookarounds (`(?P<`, `(?<`, `(?=`) are left for the compiler to judge.
fn check_flags(after: impl Iterator<Item = char>) -> Result<(), String> {
    for f in after {
        match f {
            ':' | ')' => return Ok(()),
            'i' | 'm' | 's' | 'U' | '-' => {}
            'P' | '<' | '=' | '!' => return Ok(()),
            other => return Err(format!("invalid or unsupported flag {other:?}")),
        }
    }
    Ok(())
}

/// `c` as a literal character in the `regex` crate's syntax.
fn push_literal(c: char, out: &mut String) {
    if regex_syntax_meta(c) {
        out.push('\\');
    }
    out.push(c);
}

/// The characters the `regex` crate gives a meaning when unescaped (in or out of a class).
fn regex_syntax_meta(c: char) -> bool {
    matches!(
        c,
        '\\' | '.'
            | '+'
            | '*'
            | '?'
            | '('
            | ')'
            | '|'
            | '['
            | ']'
            | '{'
            | '}'
            | '^'
            | '$'
            | '#'
            | '&'
            | '-'
            | '~'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(pattern: &str, value: &str, template: &str) -> String {
        let p = Pattern::new(pattern).expect("valid pattern");
        let caps = p.captures(value).expect("matches");
        let mut out = String::new();
        p.expand(&caps, template, &mut out);
        out
    }

    #[test]
    fn patterns_are_anchored_at_both_ends() {
        let p = Pattern::new("b+").expect("valid");
        assert!(p.is_match("bbb"));
        assert!(!p.is_match("abbb"));
        assert!(!p.is_match("bbba"));
        assert!(!p.is_match("bbb\n"), "Go's `$` is the end of the text");
        // An alternation is anchored as a whole, not only its ends.
        let p = Pattern::new("a|b").expect("valid");
        assert!(p.is_match("a") && p.is_match("b"));
        assert!(!p.is_match("ab"));
    }

    #[test]
    fn perl_classes_and_word_boundaries_are_ascii_as_in_go() {
        assert!(!Pattern::new(r"\d").expect("valid").is_match("٣"));
        assert!(!Pattern::new(r"\w+").expect("valid").is_match("héllo"));
        assert!(Pattern::new(r"\W").expect("valid").is_match("é"));
        assert!(Pattern::new(r"[\w.]+").expect("valid").is_match("a_b.c"));
        assert!(!Pattern::new(r"\s").expect("valid").is_match("\u{a0}"));
        // Go: `é` is not a word character, so there is a boundary between `a` and `é` and
        // none after a final `é`.
        assert!(Pattern::new(r"a\bé").expect("valid").is_match("aé"));
        assert!(!Pattern::new(r"é\b").expect("valid").is_match("é"));
        assert!(Pattern::new(r".*\bx").expect("valid").is_match("a x"));
    }

    #[test]
    fn class_and_escape_characters_mean_what_go_reads() {
        assert!(Pattern::new(r"[[]").expect("valid").is_match("["));
        let amp = Pattern::new(r"[a&&b]").expect("valid");
        assert!(amp.is_match("&") && amp.is_match("a"));
        assert!(Pattern::new(r"[]a]").expect("valid").is_match("]"));
        assert!(
            Pattern::new(r"[[:digit:]x]+")
                .expect("valid")
                .is_match("1x2")
        );
        assert!(Pattern::new(r"\<a\>").expect("valid").is_match("<a>"));
        assert!(Pattern::new(r"\Qa.b\E").expect("valid").is_match("a.b"));
        assert!(!Pattern::new(r"\Qa.b\E").expect("valid").is_match("axb"));
        assert!(Pattern::new(r"(?i)ab").expect("valid").is_match("AB"));
        assert!(
            Pattern::new(r"(?P<x>a)(?<y>b)")
                .expect("valid")
                .is_match("ab")
        );
        assert!(Pattern::new(r"(?x) a").is_err(), "Go has no x flag");
        assert!(Pattern::new(r"(").is_err());
        assert!(Pattern::new(r"a\").is_err());
    }

    #[test]
    fn expansion_follows_go() {
        assert_eq!(expand("(a)(b)", "ab", "$2$1"), "ba");
        assert_eq!(expand("(a)(b)", "ab", "${1}x"), "ax");
        // `$1x` names a group `1x`, which does not exist: empty, as in Go.
        assert_eq!(expand("(a)(b)", "ab", "$1x"), "");
        assert_eq!(
            expand("(a)(b)", "ab", "$01"),
            "",
            "a leading zero makes a name"
        );
        assert_eq!(expand("(?P<first>a)(b)", "ab", "${first}-$first"), "a-a");
        assert_eq!(expand("(a)", "a", "$$1 $"), "$1 $");
        assert_eq!(expand("(a)", "a", "${1"), "${1", "unclosed brace: literal");
        assert_eq!(expand("(a)", "a", "$-"), "$-");
        assert_eq!(
            expand("(a)|(b)", "a", "[$2]"),
            "[]",
            "unmatched group: empty"
        );
        assert_eq!(expand("(a)", "a", "$9"), "", "no such group: empty");
    }

    #[test]
    fn a_prefix_that_no_match_can_start_with_is_told_apart() {
        let p = Pattern::new(r"vllm:e2e_bucket;(0\.1|0\.5)").expect("valid");
        assert!(p.may_match_with_prefix("vllm:e2e_bucket;"));
        assert!(p.may_match_with_prefix("vllm:e2e_bucket;0.1"));
        assert!(!p.may_match_with_prefix("vllm:e2e_sum;"));
        assert!(!p.may_match_with_prefix("vllm:e2e_bucket;0.2"));
        assert!(
            Pattern::new(".*")
                .expect("valid")
                .may_match_with_prefix("x")
        );
    }
}
