//! Property test: random expositions (valid and broken lines mixed, tricky label values, odd
//! spacing, CRLF) through parse → merge → write, checked against what the generator knows each
//! line means, and against a deliberately naive reader of the output.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::contract_tests::{Up, parse_one, run};
use crate::testing::LIMITS;
use crate::*;

const NAMES: [&str; 5] = ["vllm:a", "vllm:b_total", "lmcache:c", "other_d", "vllm:e"];
const KINDS: [&str; 3] = ["gauge", "counter", "untyped"];
const LABEL_NAMES: [&str; 3] = ["model_name", "engine", "x"];
const VALUES: [&str; 7] = ["1", "0", "NaN", "+Inf", "-Inf", "-1.5e3", "2.0"];
const BROKEN: [&str; 8] = [
    "vllm:a{x=\"unterminated} 1",
    "vllm:a{x=\"bad \\q escape\"} 1",
    "vllm:a{x=\"1\"}",
    "vllm:a 1 2 3",
    "vllm:a{1x=\"1\"} 1",
    "vllm:a{x=\"1\",x=\"2\"} 1",
    "{x=\"1\"} 1",
    "vllm:a 0x1F",
];

#[derive(Debug, Clone)]
enum Line {
    Sample {
        name: usize,
        labels: Vec<(usize, String)>,
        value: usize,
        ts: Option<i64>,
        spaced: bool,
    },
    Broken(usize),
    Blank,
    Comment(String),
}

fn label_value() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just(' '),
            Just(','),
            Just('='),
            Just('}'),
            Just('{'),
            Just('#'),
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('é'),
            Just('😀')
        ],
        0..6,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        8 => (0..NAMES.len(), proptest::collection::vec((0..LABEL_NAMES.len(), label_value()), 0..3), 0..VALUES.len(), proptest::option::of(-5i64..2_000_000_000_000), any::<bool>())
            .prop_map(|(name, labels, value, ts, spaced)| Line::Sample { name, labels, value, ts, spaced }),
        1 => (0..BROKEN.len()).prop_map(Line::Broken),
        1 => Just(Line::Blank),
        1 => "[a-z ]{0,10}".prop_map(Line::Comment),
    ]
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Series identity → value text, as a reader of the output sees it.
type Series = HashMap<(String, Vec<(String, String)>), String>;

/// Renders the body, and what a correct reader keeps: `(name, sorted labels) -> (value, ts)`,
/// first occurrence wins, plus how many lines are malformed.
fn render(kinds: &[usize], lines: &[Line], crlf: bool) -> (String, Series, u64) {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut body = String::new();
    for (i, name) in NAMES.iter().enumerate() {
        body.push_str(&format!(
            "# HELP {name} Help for {name} \\\\ with \\n escapes{nl}"
        ));
        body.push_str(&format!("# TYPE {name} {}{nl}", KINDS[kinds[i]]));
    }
    let mut expected = HashMap::new();
    let mut malformed = 0;
    for l in lines {
        match l {
            Line::Sample {
                name,
                labels,
                value,
                ts,
                spaced,
            } => {
                let mut seen = HashSet::new();
                let labels: Vec<&(usize, String)> =
                    labels.iter().filter(|(n, _)| seen.insert(*n)).collect();
                let sep = if *spaced { " \t " } else { " " };
                let block: Vec<String> = labels
                    .iter()
                    .map(|(n, v)| {
                        if *spaced {
                            format!(" {} = \"{}\" ", LABEL_NAMES[*n], escape(v))
                        } else {
                            format!("{}=\"{}\"", LABEL_NAMES[*n], escape(v))
                        }
                    })
                    .collect();
                let labels_text = if block.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", block.join(","))
                };
                let ts_text = ts.map(|t| format!("{sep}{t}")).unwrap_or_default();
                body.push_str(&format!(
                    "{}{labels_text}{sep}{}{ts_text}{nl}",
                    NAMES[*name], VALUES[*value]
                ));
                if !NAMES[*name].starts_with("other") {
                    let mut key_labels: Vec<(String, String)> = labels
                        .iter()
                        .map(|(n, v)| (LABEL_NAMES[*n].to_string(), escape(v)))
                        .collect();
                    key_labels.sort();
                    let v = format!(
                        "{}{}",
                        VALUES[*value],
                        ts.map(|t| format!(" {t}")).unwrap_or_default()
                    );
                    expected
                        .entry((NAMES[*name].to_string(), key_labels))
                        .or_insert(v);
                }
            }
            Line::Broken(b) => {
                body.push_str(BROKEN[*b]);
                body.push_str(nl);
                malformed += 1;
            }
            Line::Blank => body.push_str(nl),
            Line::Comment(c) => body.push_str(&format!("# {c}{nl}")),
        }
    }
    (body, expected, malformed)
}

/// A reader written for clarity, not speed: canonical output lines only.
fn naive_read(out: &str) -> Series {
    let mut m = HashMap::new();
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        let mut name = String::new();
        while i < chars.len() && chars[i] != '{' && chars[i] != ' ' {
            name.push(chars[i]);
            i += 1;
        }
        let mut labels = Vec::new();
        if chars.get(i) == Some(&'{') {
            i += 1;
            while chars[i] != '}' {
                let mut ln = String::new();
                while chars[i] != '=' {
                    ln.push(chars[i]);
                    i += 1;
                }
                i += 2; // ="
                let mut lv = String::new();
                while chars[i] != '"' {
                    if chars[i] == '\\' {
                        lv.push(chars[i]);
                        i += 1;
                    }
                    lv.push(chars[i]);
                    i += 1;
                }
                i += 1;
                if chars[i] == ',' {
                    i += 1;
                }
                labels.push((ln, lv));
            }
            i += 1;
        }
        assert_eq!(chars[i], ' ', "one space before the value: {line}");
        let rest: String = chars[i + 1..].iter().collect();
        labels.sort();
        assert!(
            m.insert((name, labels), rest).is_none(),
            "series written twice: {line}"
        );
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_valid_kept_sample_comes_out_once_exactly(
        kinds in proptest::collection::vec(0..KINDS.len(), NAMES.len()),
        lines in proptest::collection::vec(line(), 0..40),
        crlf in any::<bool>(),
    ) {
        let (body, expected, malformed) = render(&kinds, &lines, crlf);
        let (out, stats) = run(&[Up { body: body.as_bytes(), format: Format::Text, keep: &["vllm:", "lmcache:"] }], &[]);
        prop_assert_eq!(stats[0].0.malformed, malformed);
        prop_assert_eq!(naive_read(&out), expected);
        // The output reads back cleanly and keeps every family's header once, before samples.
        let again = parse_one(&Up { body: out.as_bytes(), format: Format::Text, keep: &["vllm:", "lmcache:"] }, &[], LIMITS).expect("reparses");
        prop_assert_eq!(again.stats().malformed, 0);
        let mut headers = HashSet::new();
        let mut with_samples = HashSet::new();
        for l in out.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().expect("name").to_string();
                prop_assert!(headers.insert(name.clone()), "TYPE twice for {}", name);
                prop_assert!(!with_samples.contains(&name), "TYPE after samples for {}", name);
            } else if !l.starts_with('#') {
                with_samples.insert(l.split(['{', ' ']).next().expect("name").to_string());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_output_always_reparses(body in proptest::collection::vec(any::<u8>(), 0..600), om in any::<bool>()) {
        let format = if om { Format::OpenMetrics } else { Format::Text };
        let up = Up { body: &body, format, keep: &[""] };
        let (out, _) = run(&[up], &[AddedLabel::new("pod", "p\"1")]);
        let again = parse_one(&Up { body: out.as_bytes(), format: Format::Text, keep: &[""] }, &[], LIMITS).expect("reparses");
        prop_assert_eq!(again.stats().malformed, 0);
    }
}
