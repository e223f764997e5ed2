//! One test per action, on the examples of Prometheus' documentation and its `relabel`
//! package's own cases, and one per check Prometheus makes when it loads a rule.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::apply::{Memo, Step};
use super::labels::SampleLabels;
use super::*;

/// A rule from `(field, value)` pairs; `source_labels` is comma-separated.
pub(super) fn spec(fields: &[(&str, &str)]) -> RuleSpec {
    let mut s = RuleSpec::default();
    for &(key, value) in fields {
        let v = Some(value.to_owned());
        match key {
            "source_labels" => {
                s.source_labels = Some(value.split(',').map(str::to_owned).collect());
            }
            "separator" => s.separator = v,
            "regex" => s.regex = v,
            "modulus" => s.modulus = Some(value.parse().expect("a number")),
            "target_label" => s.target_label = v,
            "replacement" => s.replacement = v,
            "action" => s.action = v,
            other => panic!("no field {other}"),
        }
    }
    s
}

fn rule(fields: &[(&str, &str)]) -> Rule {
    Rule::new(spec(fields)).unwrap_or_else(|errs| panic!("{fields:?}: {errs:?}"))
}

/// The label set after `rules`, or `None` when they drop it.
fn process(input: &[(&str, &str)], rules: &[Rule]) -> Option<BTreeMap<String, String>> {
    let mut memos: Vec<Memo> = rules.iter().map(|_| Memo::default()).collect();
    process_with(input, rules, &mut memos)
}

/// [`process`] with the rules remembering what they worked out in `memos`.
fn process_with(
    input: &[(&str, &str)],
    rules: &[Rule],
    memos: &mut [Memo],
) -> Option<BTreeMap<String, String>> {
    let mut labels = SampleLabels::default();
    for &(n, v) in input {
        labels.push(Cow::Borrowed(n), Cow::Borrowed(v));
    }
    let mut buf = String::new();
    for (r, memo) in rules.iter().zip(memos) {
        if r.apply(&mut labels, &mut buf, memo) == Step::Drop {
            return None;
        }
    }
    Some(
        labels
            .pairs()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
    )
}

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(pairs.iter().map(|&(n, v)| (n.into(), v.into())).collect())
}

const ABC: &[(&str, &str)] = &[("a", "foo"), ("b", "bar"), ("c", "baz")];

#[test]
fn replace_sets_the_target_from_the_groups() {
    let r = rule(&[
        ("source_labels", "a"),
        ("regex", "f(.*)"),
        ("target_label", "d"),
        ("replacement", "ch${1}-ch${1}"),
    ]);
    let want = map(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "choo-choo")]);
    assert_eq!(process(ABC, &[r]), want);
}

#[test]
fn replace_joins_sources_and_chains_with_later_rules() {
    let rules = [
        rule(&[
            ("source_labels", "a,b"),
            ("regex", "f(.*);(.*)r"),
            ("target_label", "a"),
            ("replacement", "b${1}${2}m"),
        ]),
        rule(&[
            ("source_labels", "c,a"),
            ("regex", "(b).*b(.*)ba(.*)"),
            ("target_label", "d"),
            ("replacement", "$1$2$2$3"),
        ]),
    ];
    let want = map(&[("a", "boobam"), ("b", "bar"), ("c", "baz"), ("d", "boooom")]);
    assert_eq!(process(ABC, &rules), want);
}

#[test]
fn replace_without_a_match_changes_nothing() {
    let r = rule(&[
        ("source_labels", "a"),
        ("regex", "f"),
        ("target_label", "b"),
        ("replacement", "bar"),
    ]);
    assert_eq!(process(&[("a", "boo")], &[r]), map(&[("a", "boo")]));
}

#[test]
fn replace_with_an_empty_result_removes_the_target() {
    let r = rule(&[("source_labels", "x"), ("target_label", "b")]);
    // `x` is absent: `(.*)` matches the empty value, `$1` is empty, `b` goes.
    assert_eq!(process(ABC, &[r]), map(&[("a", "foo"), ("c", "baz")]));
}

#[test]
fn replace_with_a_templated_target_skips_an_invalid_name() {
    let regex = "some-([^-]+)-([^,]+)";
    let ok = rule(&[
        ("source_labels", "a"),
        ("regex", regex),
        ("target_label", "${1}"),
        ("replacement", "${2}"),
    ]);
    let input = [("a", "some-name-value")];
    assert_eq!(
        process(&input, &[ok]),
        map(&[("a", "some-name-value"), ("name", "value")])
    );
    // Group 3 does not exist: the target is empty, not a label name, nothing happens.
    let bad = rule(&[
        ("source_labels", "a"),
        ("regex", regex),
        ("target_label", "${3}"),
        ("replacement", "${1}"),
    ]);
    assert_eq!(process(&input, &[bad]), map(&input));
    // `$1x` names a group `1x` (Go's rule), which does not exist.
    let named = rule(&[
        ("source_labels", "a"),
        ("regex", regex),
        ("target_label", "t"),
        ("replacement", "$1x"),
    ]);
    assert_eq!(process(&input, &[named]), map(&input));
}

#[test]
fn keep_and_drop_filter_on_the_joined_values() {
    let foo = [("a", "foo")];
    let drop = |regex: &str| rule(&[("source_labels", "a"), ("regex", regex), ("action", "drop")]);
    let keep = |regex: &str| rule(&[("source_labels", "a"), ("regex", regex), ("action", "keep")]);
    assert_eq!(process(&foo, &[drop(".*o.*")]), None);
    assert_eq!(process(&foo, &[drop("no-match")]), map(&foo));
    // Anchored: `f|o` matches neither `foo` as a whole.
    assert_eq!(process(&foo, &[drop("f|o")]), map(&foo));
    assert_eq!(process(&foo, &[keep("no-match")]), None);
    assert_eq!(process(&foo, &[keep("f.*")]), map(&foo));
    // A dropped series goes through no further rule.
    let later = rule(&[("source_labels", "a"), ("target_label", "d")]);
    assert_eq!(process(&foo, &[drop(".*o.*"), later]), None);
}

#[test]
fn keepequal_and_dropequal_compare_with_the_target() {
    let ports = [
        ("__tmp_port", "1234"),
        ("__port1", "1234"),
        ("__port2", "5678"),
    ];
    let eq = |action: &str, target: &str| {
        rule(&[
            ("source_labels", "__tmp_port"),
            ("target_label", target),
            ("action", action),
        ])
    };
    assert_eq!(process(&ports, &[eq("keepequal", "__port1")]), map(&ports));
    assert_eq!(process(&ports, &[eq("keepequal", "__port2")]), None);
    assert_eq!(process(&ports, &[eq("dropequal", "__port1")]), None);
    assert_eq!(process(&ports, &[eq("dropequal", "__port2")]), map(&ports));
}

#[test]
fn hashmod_takes_the_low_64_bits_of_the_md5() {
    let r = rule(&[
        ("source_labels", "c"),
        ("target_label", "d"),
        ("modulus", "1000"),
        ("action", "hashmod"),
    ]);
    let want = map(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "976")]);
    assert_eq!(process(ABC, std::slice::from_ref(&r)), want);
    let newline = [("c", "foo\nbar")];
    assert_eq!(
        process(&newline, &[r]),
        map(&[("c", "foo\nbar"), ("d", "734")])
    );
}

#[test]
fn labelmap_copies_matching_labels_under_new_names() {
    let input = [("a", "foo"), ("b1", "bar"), ("b2", "baz")];
    let r = rule(&[
        ("regex", "(b.*)"),
        ("replacement", "bar_${1}"),
        ("action", "labelmap"),
    ]);
    let want = map(&[
        ("a", "foo"),
        ("b1", "bar"),
        ("b2", "baz"),
        ("bar_b1", "bar"),
        ("bar_b2", "baz"),
    ]);
    assert_eq!(process(&input, &[r]), want);
    // Two labels mapped to one name: the later name in sort order wins, whatever the order
    // of the labels on the line.
    let both = rule(&[
        ("regex", "b[12]"),
        ("replacement", "b"),
        ("action", "labelmap"),
    ]);
    let reversed = [("b2", "two"), ("b1", "one")];
    let out = process(&reversed, &[both]).expect("kept");
    assert_eq!(out["b"], "two");
}

#[test]
fn labeldrop_and_labelkeep_match_label_names() {
    let input = [("a", "foo"), ("b1", "bar"), ("b2", "baz")];
    let keep = rule(&[("regex", "(b.*)"), ("action", "labelkeep")]);
    let drop = rule(&[("regex", "(b.*)"), ("action", "labeldrop")]);
    assert_eq!(
        process(&input, &[keep]),
        map(&[("b1", "bar"), ("b2", "baz")])
    );
    assert_eq!(process(&input, &[drop]), map(&[("a", "foo")]));
}

#[test]
fn lowercase_and_uppercase_map_the_joined_values() {
    let input = [("foo", "bAr123Foo")];
    let rules = [
        rule(&[
            ("source_labels", "foo"),
            ("target_label", "foo_uppercase"),
            ("action", "uppercase"),
        ]),
        rule(&[
            ("source_labels", "foo"),
            ("target_label", "foo_lowercase"),
            ("action", "lowercase"),
        ]),
    ];
    let want = map(&[
        ("foo", "bAr123Foo"),
        ("foo_lowercase", "bar123foo"),
        ("foo_uppercase", "BAR123FOO"),
    ]);
    assert_eq!(process(&input, &rules), want);
    // Go's simple mappings: `ß` has no single upper-case letter, `İ` lowers to `i`.
    let odd = [("foo", "ßİ")];
    let up = rule(&[
        ("source_labels", "foo"),
        ("target_label", "u"),
        ("action", "Uppercase"),
    ]);
    let low = rule(&[
        ("source_labels", "foo"),
        ("target_label", "l"),
        ("action", "LOWERCASE"),
    ]);
    let out = process(&odd, &[up, low]).expect("kept");
    assert_eq!((out["u"].as_str(), out["l"].as_str()), ("ßİ", "ßi"));
}

#[test]
fn what_a_rule_remembers_serves_only_the_same_values() {
    let rules = [
        rule(&[
            ("source_labels", "a"),
            ("regex", "f(.*)"),
            ("target_label", "d"),
        ]),
        rule(&[
            ("regex", "b.*"),
            ("replacement", "x_$0"),
            ("action", "labelmap"),
        ]),
        rule(&[("source_labels", "a"), ("regex", "boo"), ("action", "drop")]),
    ];
    let mut memos: Vec<Memo> = rules.iter().map(|_| Memo::default()).collect();
    let mut run = |input: &[(&str, &str)]| process_with(input, &rules, &mut memos);
    assert_eq!(
        run(&[("a", "foo"), ("b", "1")]),
        map(&[("a", "foo"), ("b", "1"), ("d", "oo"), ("x_b", "1")])
    );
    assert_eq!(
        run(&[("a", "foo"), ("c", "2")]),
        map(&[("a", "foo"), ("c", "2"), ("d", "oo")])
    );
    assert_eq!(
        run(&[("a", "fee"), ("b", "3")]),
        map(&[("a", "fee"), ("b", "3"), ("d", "ee"), ("x_b", "3")])
    );
    assert_eq!(run(&[("a", "boo")]), None);
    assert_eq!(
        run(&[("a", "foo"), ("b", "4")]),
        map(&[("a", "foo"), ("b", "4"), ("d", "oo"), ("x_b", "4")])
    );
}

#[test]
fn defaults_are_prometheus_defaults() {
    let r = rule(&[("target_label", "t")]);
    assert_eq!(r.action, Action::Replace);
    assert_eq!(r.separator, ";");
    assert_eq!(r.regex.as_str(), "(.*)");
    assert_eq!(r.replacement, "$1");
    assert!(r.source_labels.is_empty());
}

/// The fields the errors of a rule name.
fn refused(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    match Rule::new(spec(fields)) {
        Ok(rule) => panic!("{fields:?} was accepted: {rule:?}"),
        Err(errs) => errs.into_iter().map(|e| (e.field, e.message)).collect(),
    }
}

#[test]
fn rules_are_checked_as_prometheus_checks_them() {
    let first = |fields: &[(&str, &str)]| refused(fields).remove(0);
    assert_eq!(first(&[("action", "rename")]).0, "action");
    assert!(
        first(&[("action", "rename")])
            .1
            .contains("unknown action \"rename\"")
    );
    assert_eq!(first(&[("regex", "(")]).0, "regex");
    assert_eq!(first(&[("action", "replace")]).0, "target_label");
    assert_eq!(first(&[("action", "lowercase")]).0, "target_label");
    assert_eq!(
        first(&[("action", "hashmod"), ("target_label", "t")]).0,
        "modulus"
    );
    assert_eq!(first(&[("target_label", "-${3}")]).0, "target_label");
    assert_eq!(first(&[("target_label", "0${3}")]).0, "target_label");
    assert!(Rule::new(spec(&[("target_label", "${3}")])).is_ok());
    assert_eq!(
        first(&[("action", "lowercase"), ("target_label", "${3}")]).0,
        "target_label"
    );
    assert_eq!(
        first(&[
            ("action", "uppercase"),
            ("target_label", "t"),
            ("replacement", "x")
        ])
        .0,
        "replacement"
    );
    assert_eq!(
        first(&[
            ("action", "keepequal"),
            ("target_label", "t"),
            ("regex", "x")
        ])
        .0,
        "regex"
    );
    assert_eq!(
        first(&[("action", "labeldrop"), ("source_labels", "a")]).0,
        "source_labels"
    );
    assert_eq!(
        first(&[("action", "labelkeep"), ("target_label", "a")]).0,
        "target_label"
    );
    assert_eq!(
        first(&[("action", "labelmap"), ("replacement", "-x")]).0,
        "replacement"
    );
    assert_eq!(
        first(&[("source_labels", "a,b-c"), ("target_label", "t")]).0,
        "source_labels[1]"
    );
    // Every problem of a rule is reported.
    assert_eq!(refused(&[("action", "hashmod"), ("regex", "(")]).len(), 3);
}

#[test]
fn target_templates_are_valid_as_in_prometheus() {
    for (target, valid) in [
        ("label", true),
        ("label${1}", true),
        ("${1}label", true),
        ("${1}", true),
        ("$1", true),
        ("asd$2asd", true),
        ("_${1}_", true),
        ("foo${bar}foo", true),
        ("-label", false),
        ("${", false),
        ("$", false),
        ("${}", false),
        ("foo${", false),
        ("-foo${1}bar-", false),
    ] {
        let r = Rule::new(spec(&[("target_label", target)]));
        assert_eq!(r.is_ok(), valid, "{target}");
    }
}
