//! A page through its rules, against a plain reference: every sample's labels read, every rule
//! applied in turn, invalid series dropped, the first of equal series kept. What sysport serves
//! (the untouched families as parsed, the rest rewritten, merged and written out) must hold
//! exactly the reference's series, whatever the rules.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::apply::{Memo, Step};
use super::labels::{Labels, SampleLabels};
use super::tests::spec;
use super::*;
use crate::expfmt::{
    self, AddedLabel, Exposition, Format, MergeOptions, PairHasher, ParseLimits, ParseOptions,
};

const MEDIUM: &str = include_str!("../../tests/fixtures/medium.prom");
const MEDIUM_OM: &str = include_str!("../../tests/fixtures/medium.openmetrics.txt");
const WEIRD: &str = include_str!("../../tests/fixtures/edge_weird_labels_nan.prom");

const LIMITS: ParseLimits = ParseLimits {
    max_line_bytes: 1 << 20,
    max_series: 1 << 20,
    max_families: 1 << 16,
    max_labels: 64,
    max_label_value_bytes: 1 << 20,
};

fn hasher() -> PairHasher {
    PairHasher::new(0x5eed)
}

/// A series: name and sorted labels.
type Series = (String, Vec<(String, String)>);

fn rules(rules: &[&[(&str, &str)]]) -> Vec<Rule> {
    rules
        .iter()
        .map(|fields| Rule::new(spec(fields)).unwrap_or_else(|e| panic!("{fields:?}: {e:?}")))
        .collect()
}

fn parse(body: &str, format: Format, added: &[(String, String)]) -> Arc<Exposition> {
    let keep = ["vllm:".to_owned(), "lmcache:".to_owned()];
    let names: Vec<&[u8]> = added.iter().map(|(n, _)| n.as_bytes()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &names,
        hasher: hasher(),
        allow_reserved: false,
    };
    Arc::new(expfmt::parse(Bytes::from(body.to_owned()), format, &opts).expect("parses"))
}

/// The reference: each sample on its own through every rule. Returns the series and how many
/// samples were dropped.
fn reference(
    exp: &Exposition,
    rules: &[Rule],
    added: &[(String, String)],
) -> (BTreeMap<Series, String>, u64) {
    let mut out = BTreeMap::new();
    let mut dropped = 0;
    let mut buf = String::new();
    for fam in exp.families() {
        for s in exp.samples(fam) {
            let (a, b) = exp.sample_name(fam, s);
            let name = String::from_utf8([a, b].concat()).expect("utf-8");
            let mut labels = SampleLabels::default();
            labels.push(Cow::Borrowed("__name__"), Cow::Owned(name));
            for (n, v) in exp.label_pairs(s) {
                let v = expfmt::unescape_label_value(v);
                labels.push(
                    Cow::Owned(String::from_utf8(n.to_vec()).expect("utf-8")),
                    Cow::Owned(String::from_utf8(v.into_owned()).expect("utf-8")),
                );
            }
            for (n, v) in added {
                labels.push(Cow::Borrowed(n), Cow::Borrowed(v));
            }
            let kept = rules
                .iter()
                .all(|r| r.apply(&mut labels, &mut buf, &mut Memo::default()) != Step::Drop);
            let name = labels.get("__name__").unwrap_or_default().to_owned();
            let valid = expfmt::is_metric_name(name.as_bytes())
                && !name.starts_with("dynamo_sysport_")
                && labels.pairs().iter().all(|(n, _)| rule::is_label_name(n));
            if !kept || !valid {
                dropped += 1;
                continue;
            }
            let mut set: Vec<(String, String)> = labels
                .pairs()
                .iter()
                .filter(|(n, _)| !n.starts_with("__"))
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            set.sort();
            let value = exp.sample_part(s, exp.lex(s).value);
            out.entry((labels.get("__name__").unwrap_or_default().to_owned(), set))
                .or_insert_with(|| String::from_utf8_lossy(value).into_owned());
        }
    }
    (out, dropped)
}

/// What sysport serves for the page, read back: its series, and the text it wrote.
fn served(page: &Page, added: &[(String, String)]) -> (BTreeMap<Series, String>, String) {
    let sources: Vec<&Exposition> = page.served.iter().map(|e| &**e).collect();
    let added: Vec<AddedLabel> = added.iter().map(|(n, v)| AddedLabel::new(n, v)).collect();
    let merged = expfmt::merge(
        &sources,
        &MergeOptions {
            added: &added,
            names: None,
            hasher: hasher(),
        },
    );
    let mut text = Vec::new();
    expfmt::write_text(&merged, &mut text);
    let keep = [String::new()];
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &[],
        hasher: hasher(),
        allow_reserved: false,
    };
    let back = expfmt::parse(Bytes::from(text.clone()), Format::Text, &opts).expect("parses");
    assert_eq!(back.stats().malformed, 0, "sysport wrote a malformed line");
    let mut out = BTreeMap::new();
    for fam in back.families() {
        for s in back.samples(fam) {
            let (a, b) = back.sample_name(fam, s);
            let mut set: Vec<(String, String)> = back
                .label_pairs(s)
                .map(|(n, v)| {
                    let v = expfmt::unescape_label_value(v);
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .filter(|(_, v)| !v.is_empty())
                .collect();
            set.sort();
            let name = String::from_utf8([a, b].concat()).expect("utf-8");
            let value = String::from_utf8_lossy(back.sample_part(s, back.lex(s).value));
            let fresh = out
                .insert((name.clone(), set), value.into_owned())
                .is_none();
            assert!(fresh, "{name}: a series written twice");
        }
    }
    (out, String::from_utf8(text).expect("utf-8"))
}

/// A text page through `set`, and the text sysport serves for it.
fn through(set: &RuleSet, body: &str) -> (Page, String) {
    let exp = parse(body, Format::Text, &[]);
    let page = relabel(exp, set, LIMITS, hasher()).expect("relabels");
    let text = served(&page, &[]).1;
    (page, text)
}

/// Checks a rule set on a page against the reference, twice: the second time with what the
/// rules made of the first page (the same label sets); returns the page.
fn check(body: &str, format: Format, rule_set: &[Rule], added: &[(String, String)]) -> Page {
    let exp = parse(body, format, added);
    let set = RuleSet::new(rule_set, &[], added).expect("rules");
    let first = relabel(exp.clone(), &set, LIMITS, hasher()).expect("relabels");
    let exp = parse(body, format, added);
    let page = relabel(exp.clone(), &set, LIMITS, hasher()).expect("relabels");
    assert_eq!(served(&first, added).1, served(&page, added).1);
    let (want, want_dropped) = reference(&exp, rule_set, added);
    let (got, text) = served(&page, added);
    for (series, value) in &want {
        assert_eq!(got.get(series), Some(value), "{series:?} in:\n{text}");
    }
    for series in got.keys() {
        assert!(want.contains_key(series), "unexpected {series:?}");
    }
    assert_eq!(page.relabel_dropped, want_dropped);
    // Families stay whole: one HELP and one TYPE each at most.
    let mut seen = std::collections::HashSet::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(
            seen.insert(line.split(' ').nth(2)),
            "two TYPE lines: {line}"
        );
    }
    page
}

#[test]
fn rules_that_only_drop_leave_the_rest_as_parsed() {
    let thin = rules(&[
        &[
            ("source_labels", "__name__"),
            ("regex", "vllm:request_(prompt|generation)_tokens_.*"),
            ("action", "drop"),
        ],
        &[
            ("source_labels", "__name__,le"),
            (
                "regex",
                r"vllm:e2e_request_latency_seconds_bucket;(0\.3|0\.5|0\.8|1\.0|2\.5)",
            ),
            ("action", "drop"),
        ],
    ]);
    let page = check(MEDIUM, Format::Text, &thin, &[]);
    assert_eq!(page.served.len(), 1, "nothing rewritten");
    assert!(std::ptr::eq(
        page.served[0].body().as_ptr(),
        page.parsed.body().as_ptr()
    ));
    let (_, text) = served(&page, &[]);
    assert!(!text.contains("vllm:request_prompt_tokens"));
    assert!(text.contains("le=\"+Inf\""), "the other buckets stay");
    assert!(!text.contains("e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\""));
    assert!(text.contains("e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.5\""));
}

#[test]
fn rules_that_touch_nothing_serve_the_parsed_page_itself() {
    let none = rules(&[
        &[
            ("source_labels", "__name__"),
            ("regex", "process_.*"),
            ("action", "drop"),
        ],
        &[("regex", "pid"), ("action", "labeldrop")],
        &[
            ("source_labels", "__name__,le"),
            ("regex", "nothing_bucket;.*"),
            ("action", "drop"),
        ],
    ]);
    let page = check(MEDIUM, Format::Text, &none, &[]);
    assert_eq!(page.served.len(), 1);
    assert!(Arc::ptr_eq(&page.served[0], &page.parsed));
}

#[test]
fn every_action_matches_the_reference() {
    let added = vec![("worker_id".to_owned(), "0".to_owned())];
    let sets: Vec<Vec<Rule>> = vec![
        rules(&[&[("regex", "engine"), ("action", "labeldrop")]]),
        rules(&[&[
            ("source_labels", "__name__"),
            (
                "regex",
                "vllm:(num_requests_.*|kv_cache_usage_perc|e2e_request_latency_seconds_.*)",
            ),
            ("action", "keep"),
        ]]),
        rules(&[
            &[("source_labels", "model_name"), ("target_label", "model")],
            &[("regex", "model_name"), ("action", "labeldrop")],
        ]),
        rules(&[&[
            ("source_labels", "__name__"),
            ("regex", "vllm:(.*)"),
            ("target_label", "__name__"),
            ("replacement", "inference:${1}"),
        ]]),
        rules(&[
            &[
                ("source_labels", "engine,model_name"),
                ("target_label", "shard"),
                ("modulus", "3"),
                ("action", "hashmod"),
            ],
            &[
                ("source_labels", "shard"),
                ("regex", "0|1"),
                ("action", "keep"),
            ],
        ]),
        rules(&[
            &[
                ("source_labels", "model_name"),
                ("target_label", "model_lower"),
                ("action", "lowercase"),
            ],
            &[
                ("source_labels", "reason"),
                ("target_label", "reason"),
                ("action", "uppercase"),
            ],
        ]),
        rules(&[&[
            ("regex", "(model_name|engine)"),
            ("replacement", "x_${1}"),
            ("action", "labelmap"),
        ]]),
        rules(&[&[
            ("regex", "__name__|le|quantile|engine|worker_id"),
            ("action", "labelkeep"),
        ]]),
        rules(&[&[
            ("source_labels", "engine"),
            ("target_label", "worker_id"),
            ("action", "keepequal"),
        ]]),
        rules(&[&[
            ("source_labels", "engine"),
            ("target_label", "worker_id"),
            ("action", "dropequal"),
        ]]),
        // Renamed into another family of the page, apart by a label.
        rules(&[
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:num_requests_waiting"),
                ("target_label", "was"),
                ("replacement", "waiting"),
            ],
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:num_requests_waiting"),
                ("target_label", "__name__"),
                ("replacement", "vllm:num_requests_running"),
            ],
        ]),
        // An invalid name, a reserved one, a name taken away: dropped and counted.
        rules(&[
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:num_preemptions_total"),
                ("target_label", "__name__"),
                ("replacement", "bad-name"),
            ],
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:prompt_tokens_total"),
                ("target_label", "__name__"),
                ("replacement", "dynamo_sysport_fake"),
            ],
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:generation_tokens_total"),
                ("target_label", "__name__"),
                ("replacement", ""),
            ],
        ]),
        // Series made equal: the first stays.
        rules(&[&[("regex", "engine|model_name"), ("action", "labeldrop")]]),
    ];
    for set in &sets {
        check(MEDIUM, Format::Text, set, &added);
        check(MEDIUM_OM, Format::OpenMetrics, set, &added);
    }
}

#[test]
fn escaped_values_are_relabelled_unescaped_and_written_escaped() {
    let set = rules(&[
        &[
            ("regex", ".*"),
            ("replacement", "copy_$0"),
            ("action", "labelmap"),
        ],
        &[
            ("source_labels", "__name__"),
            ("target_label", "name_again"),
        ],
    ]);
    check(WEIRD, Format::Text, &set, &[]);
}

#[test]
fn label_names_kept_from_the_last_page_follow_a_change_of_labels() {
    let set = RuleSet::new(
        &rules(&[&[("regex", "extra"), ("action", "labeldrop")]]),
        &[],
        &[],
    )
    .expect("rules");
    let page = |body: &str| {
        let (page, text) = through(&set, body);
        (page.served.len(), text)
    };
    let plain = "# TYPE vllm:g gauge\nvllm:g{a=\"1\"} 1\n";
    assert_eq!(page(plain), (1, plain.to_owned()));
    assert_eq!(
        page(plain),
        (1, plain.to_owned()),
        "names taken from the last page"
    );
    // The same family with one more label: its names are read again, the label dropped.
    let extra = "# TYPE vllm:g gauge\nvllm:g{a=\"1\",extra=\"x\"} 2\n";
    assert_eq!(page(extra).1, "# TYPE vllm:g gauge\nvllm:g{a=\"1\"} 2\n");
}

#[test]
fn samples_dropped_from_the_last_page_go_again_and_the_new_values_come_through() {
    let set = RuleSet::new(
        &rules(&[&[
            ("source_labels", "__name__,le"),
            ("regex", r"vllm:h_bucket;0\.5"),
            ("action", "drop"),
        ]]),
        &[],
        &[],
    )
    .expect("rules");
    let page = |buckets: &[(&str, u32)]| {
        let mut body = String::from("# TYPE vllm:h histogram\n");
        for (le, v) in buckets {
            body.push_str(&format!("vllm:h_bucket{{le=\"{le}\"}} {v}\n"));
        }
        body.push_str("vllm:h_count 9\nvllm:h_sum 1\n");
        let (page, text) = through(&set, &body);
        assert_eq!(page.relabel_dropped, 1);
        text
    };
    let first = page(&[("0.1", 1), ("0.5", 2), ("+Inf", 9)]);
    assert!(first.contains("le=\"0.1\"} 1\n") && !first.contains("0.5"));
    // The same label sets with new values: the same sample goes, the new values come through.
    let second = page(&[("0.1", 3), ("0.5", 4), ("+Inf", 9)]);
    assert!(
        second.contains("le=\"0.1\"} 3\n") && !second.contains("0.5"),
        "{second}"
    );
    // Another bucket: the samples are evaluated again.
    let third = page(&[("0.1", 3), ("0.25", 3), ("0.5", 4), ("+Inf", 9)]);
    assert!(
        third.contains("le=\"0.25\"} 3\n") && !third.contains("0.5"),
        "{third}"
    );
}

#[test]
fn a_family_rewritten_on_the_last_page_takes_the_new_values() {
    let set = RuleSet::new(
        &rules(&[
            &[("regex", "engine"), ("action", "labeldrop")],
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:g"),
                ("target_label", "__name__"),
                ("replacement", "vllm:renamed"),
            ],
        ]),
        &[],
        &[],
    )
    .expect("rules");
    let page = |body: &str| {
        let (page, text) = through(&set, body);
        (page.relabel_dropped, text)
    };
    let body = |a: u32, b: u32| {
        format!(
            "# TYPE vllm:g gauge\nvllm:g{{engine=\"0\",m=\"x\"}} {a}\nvllm:g{{engine=\"1\",m=\"y\"}} {b}\n"
        )
    };
    let want = |a: u32, b: u32| {
        format!(
            "# TYPE vllm:renamed untyped\nvllm:renamed{{m=\"x\"}} {a}\nvllm:renamed{{m=\"y\"}} {b}\n"
        )
    };
    assert_eq!(page(&body(1, 2)), (0, want(1, 2)));
    assert_eq!(
        page(&body(3, 4)),
        (0, want(3, 4)),
        "the same series, the new values"
    );
    // Two series made equal: the family is evaluated again, the second is a duplicate.
    let same =
        "# TYPE vllm:g gauge\nvllm:g{engine=\"0\",m=\"x\"} 5\nvllm:g{engine=\"1\",m=\"x\"} 6\n";
    let (_, text) = page(same);
    assert_eq!(
        text,
        "# TYPE vllm:renamed untyped\nvllm:renamed{m=\"x\"} 5\n"
    );
}

#[test]
fn a_rewritten_untyped_family_stays_its_own_whatever_is_written_before_it() {
    // `vllm:x_sum` comes before `vllm:x` is declared: an untyped family of its own. A renamed
    // sample puts the histogram first among the rewritten families.
    let body = "# TYPE vllm:y gauge\nvllm:y{le=\"+Inf\",src=\"y\"} 5\nvllm:x_sum{b=\"1\"} 7\n\
                # TYPE vllm:x histogram\nvllm:x_bucket{le=\"+Inf\"} 1\nvllm:x_count 1\nvllm:x_sum 2\n";
    let set = RuleSet::new(
        &rules(&[
            &[
                ("source_labels", "__name__"),
                ("regex", "vllm:y"),
                ("target_label", "__name__"),
                ("replacement", "vllm:x_bucket"),
            ],
            &[
                ("source_labels", "__name__,b"),
                ("regex", "vllm:x_sum;1"),
                ("target_label", "t"),
                ("replacement", "1"),
            ],
        ]),
        &[],
        &[],
    )
    .expect("rules");
    let exp = parse(body, Format::Text, &[]);
    let page = relabel(exp, &set, LIMITS, hasher()).expect("relabels");
    let sources: Vec<&Exposition> = page.served.iter().map(|e| &**e).collect();
    let merged = expfmt::merge(
        &sources,
        &MergeOptions {
            added: &[],
            names: None,
            hasher: hasher(),
        },
    );
    let mut om = Vec::new();
    let stats = expfmt::write_openmetrics(&merged, &mut om);
    let om = String::from_utf8(om).expect("utf-8");
    // The histogram keeps only its own samples (and the renamed bucket): OpenMetrics can
    // express it, and the untyped `_sum` is a family of its own.
    assert_eq!(stats.dropped_samples, 0, "{om}");
    assert!(
        om.contains("# TYPE vllm:x_sum unknown\nvllm:x_sum{b=\"1\",t=\"1\"} 7\n"),
        "{om}"
    );
}
