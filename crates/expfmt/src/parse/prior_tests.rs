//! The parse after a prior (the previous parse of the same upstream) against a fresh parse:
//! whatever the prior holds, the result must be the fresh result exactly, on one thread or
//! two; and where the series are the previous scrape's, their lexing must come from the prior.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use sysport_bench_inputs::values_moved;

use super::prior::{FOLLOWED, REUSED, REUSED_WHOLE};
use crate::testing::{FIXTURES, LIMITS, fixture};
use crate::*;

/// Options for one side of a comparison.
#[derive(Clone, Copy)]
struct Opts<'a> {
    format: Format,
    keep: &'a [&'a str],
    added: &'a [&'a str],
    limits: ParseLimits,
    key: u64,
}

const TEXT: Opts<'static> = Opts {
    format: Format::Text,
    keep: &["vllm:", "lmcache:"],
    added: &[],
    limits: LIMITS,
    key: 7,
};

/// Every family of `body` kept, in the format it is in.
fn every_family(body: &[u8]) -> Opts<'static> {
    Opts {
        format: Format::detect(body),
        keep: &[""],
        ..TEXT
    }
}

fn parse_opts<R>(o: &Opts<'_>, f: impl FnOnce(&ParseOptions<'_>) -> R) -> R {
    let keep: Vec<String> = o.keep.iter().map(|s| s.to_string()).collect();
    let added: Vec<&[u8]> = o.added.iter().map(|s| s.as_bytes()).collect();
    f(&ParseOptions {
        keep: &keep,
        limits: o.limits,
        added_labels: &added,
        hasher: PairHasher::new(o.key),
        allow_reserved: false,
    })
}

/// `body` parsed on this thread after `prior`, and how many of its lines took their lexing
/// from the prior.
fn after(
    body: &[u8],
    o: &Opts<'_>,
    prior: Option<&Arc<Exposition>>,
) -> (Result<Exposition, ParseError>, usize) {
    REUSED.with(|n| n.set(0));
    let parsed = parse_opts(o, |opts| {
        parse_with(
            Bytes::copy_from_slice(body),
            o.format,
            opts,
            Split::OnePass,
            prior,
        )
    });
    (parsed, REUSED.with(|n| n.get()))
}

/// Parses `body` after the parse of `before` (made with `prior_opts`) in every way a parse
/// can run, checks each against the fresh parse, and returns how many lines the one-thread
/// parse took from the prior.
///
/// The prior is merged first, as a scrape's page is, so that what that merge learnt of its
/// families ([`NoDuplicates`]) is carried where their series are the same: each parse after
/// it must then merge and write as the fresh parse does, the same bytes and counts.
fn check(before: &[u8], prior_opts: &Opts<'_>, body: &[u8], o: &Opts<'_>) -> usize {
    let Ok(prior) = after(before, prior_opts, None).0 else {
        return 0;
    };
    let prior = Arc::new(prior);
    merged(&prior, prior_opts);
    let fresh = after(body, o, None).0;
    let (parsed, reused) = after(body, o, Some(&prior));
    assert_eq!(parsed, fresh);
    let fresh_merged = fresh.as_ref().ok().map(|e| merged(e, o));
    assert_eq!(parsed.as_ref().ok().map(|e| merged(e, o)), fresh_merged);
    // Two threads, the second starting at each place it could (some 16 places of a large
    // body).
    let step = (body.len() / 16).max(1 << 12);
    let starts =
        (1..body.len()).filter(|&i| body[i - 1] == b'\n' && (body.len() < step || i % step < 64));
    for near in starts.chain([body.len()]) {
        let split = parse_opts(o, |opts| {
            parse_with(
                Bytes::copy_from_slice(body),
                o.format,
                opts,
                Split::Near(near),
                Some(&prior),
            )
        });
        assert_eq!(split, fresh, "second thread from {near}");
        assert_eq!(
            split.as_ref().ok().map(|e| merged(e, o)),
            fresh_merged,
            "merged, second thread from {near}"
        );
    }
    reused
}

/// `page` merged alone with a table per family (as a page of more than 4,096 samples is, where
/// [`NoDuplicates`] is used), written as text: the bytes and the counts.
fn merged(page: &Exposition, o: &Opts<'_>) -> (String, Vec<MergeStats>) {
    let sources = [page];
    let opts = MergeOptions {
        added: &[],
        names: None,
        hasher: PairHasher::new(o.key),
    };
    let m = crate::merge::merge_with(&sources, &opts, crate::merge::Tables::PerFamily);
    let mut out = Vec::new();
    write_text(&m, &mut out);
    (
        String::from_utf8_lossy(&out).into_owned(),
        m.stats().to_vec(),
    )
}

/// Which families of `e` are known to hold no duplicate series.
fn known(e: &Exposition) -> Vec<bool> {
    e.families()
        .iter()
        .map(|f| f.no_duplicates.known())
        .collect()
}

#[test]
fn what_the_merge_found_of_a_family_is_carried_only_to_the_same_series_in_the_same_order() {
    let o = TEXT;
    let page = |lines: &[&str]| {
        let mut p = String::from("# TYPE vllm:g gauge\n");
        for l in lines {
            p.push_str(l);
            p.push('\n');
        }
        p.push_str("# TYPE vllm:h gauge\nvllm:h{a=\"1\"} 5\n");
        p
    };
    let parse_after = |body: &str, prior: &Arc<Exposition>| {
        after(body.as_bytes(), &o, Some(prior)).0.expect("parses")
    };
    let clean = page(&["vllm:g{a=\"1\"} 1", "vllm:g{a=\"2\"} 2"]);
    let prior = Arc::new(after(clean.as_bytes(), &o, None).0.expect("parses"));
    assert_eq!(
        known(&prior),
        [false, false],
        "nothing known before a merge"
    );
    assert_eq!(merged(&prior, &o).1[0].duplicate, 0);
    assert_eq!(known(&prior), [true, true], "the merge found no duplicate");

    // The same series, values moved: carried, and merged as the fresh parse is.
    let moved = page(&["vllm:g{a=\"1\"} 7", "vllm:g{a=\"2\"} 8"]);
    let next = parse_after(&moved, &prior);
    assert_eq!(known(&next), [true, true]);
    let fresh = after(moved.as_bytes(), &o, None).0.expect("parses");
    assert_eq!(merged(&next, &o), merged(&fresh, &o));

    // A line the prior did not have (a duplicate), two in another order, one less: the
    // family is not known, and a duplicate is found and dropped.
    for (lines, duplicates) in [
        (
            &[
                "vllm:g{a=\"1\"} 1",
                "vllm:g{a=\"2\"} 2",
                "vllm:g{a=\"1\"} 3",
            ][..],
            1,
        ),
        (&["vllm:g{a=\"2\"} 2", "vllm:g{a=\"1\"} 1"][..], 0),
        (&["vllm:g{a=\"1\"} 1"][..], 0),
    ] {
        let body = page(lines);
        let next = parse_after(&body, &prior);
        assert_eq!(known(&next), [false, true], "{body}");
        let (out, stats) = merged(&next, &o);
        assert_eq!(stats[0].duplicate, duplicates, "{body}");
        assert_eq!(
            (out, stats),
            merged(&after(body.as_bytes(), &o, None).0.expect("parses"), &o)
        );
    }

    // A family whose merge found a duplicate is not known, nor is it after it.
    let twice = page(&["vllm:g{a=\"1\"} 1", "vllm:g{a=\"1\"} 2"]);
    let prior = Arc::new(after(twice.as_bytes(), &o, None).0.expect("parses"));
    assert_eq!(merged(&prior, &o).1[0].duplicate, 1);
    assert_eq!(known(&prior), [false, true]);
    let next = parse_after(&twice, &prior);
    assert_eq!(known(&next), [false, true]);
    assert_eq!(merged(&next, &o).1[0].duplicate, 1);
}

/// The samples a parse after a prior of the same series takes from it: canonical lines
/// with labels, without timestamp or exemplar, short enough for a sample's own offsets.
fn reusable(e: &Exposition) -> usize {
    e.all_samples().iter().filter(|s| is_reusable(e, s)).count()
}

/// Whether a later parse after a prior of the same series takes `s`'s lexing from it.
fn is_reusable(e: &Exposition, s: &crate::model::Sample) -> bool {
    let l = e.lex(s);
    l.canonical
        && l.labels.1 != 0
        && l.timestamp == (0, 0)
        && l.exemplar == (0, 0)
        && e.line_len(s) < 1 << 16
}

/// The sample lines of `a` that are the line at the same place of `b`.
fn unchanged_samples(a: &[u8], b: &[u8]) -> usize {
    a.split(|&x| x == b'\n')
        .zip(b.split(|&x| x == b'\n'))
        .filter(|(a, b)| a == b && !a.is_empty() && a[0] != b'#')
        .count()
}

#[test]
fn every_fixture_after_its_previous_scrape_is_the_fresh_parse() {
    for name in FIXTURES {
        let body = fixture(name);
        let format = Format::detect(&body);
        for keep in [&["vllm:", "lmcache:"][..], &[""][..]] {
            let o = Opts {
                format,
                keep,
                ..TEXT
            };
            let before = values_moved(&body);
            assert_ne!(before, body, "{name}: values changed");
            let reused = check(&before, &o, &body, &o);
            let fresh = after(&body, &o, None).0.expect("fixtures parse");
            assert_eq!(
                reused,
                reusable(&fresh),
                "{name}: every reusable line is reused"
            );
            assert!(reused > 0, "{name}");
        }
    }
}

#[test]
fn a_line_that_did_not_change_takes_its_value_from_the_prior_and_one_that_did_reads_it() {
    for name in FIXTURES {
        let body = fixture(name);
        let o = every_family(&body);
        let fresh = after(&body, &o, None).0.expect("fixtures parse");
        // The same page again: every reusable line is the prior's whole.
        REUSED_WHOLE.with(|n| n.set(0));
        let reused = check(&body, &o, &body, &o);
        let whole = REUSED_WHOLE.with(|n| n.get());
        assert_eq!(reused, reusable(&fresh), "{name}");
        assert!(whole >= reused, "{name}: {whole} of {reused} lines whole");
        // Every value with a digit changed: only the lines left as they were (`NaN`, `+Inf`)
        // are the prior's whole, and every value is the new one.
        let before = values_moved(&body);
        let unchanged = unchanged_samples(&body, &before);
        REUSED_WHOLE.with(|n| n.set(0));
        let (parsed, _) = after(
            &body,
            &o,
            Some(&Arc::new(after(&before, &o, None).0.expect("parses"))),
        );
        let whole = REUSED_WHOLE.with(|n| n.get());
        assert!(
            whole <= unchanged,
            "{name}: {whole} whole, {unchanged} unchanged"
        );
        assert_eq!(parsed.expect("parses"), fresh, "{name}");
    }
}

#[test]
fn runs_of_unchanged_lines_are_taken_in_one_step_and_stop_at_a_changed_one() {
    for name in FIXTURES {
        let body = fixture(name);
        let o = every_family(&body);
        let fresh = after(&body, &o, None).0.expect("fixtures parse");
        let prior = Arc::new(after(&body, &o, None).0.expect("parses"));
        // The same page again: every reusable line that follows one of the same name in a run
        // is taken in the run, and the parse is the fresh one.
        FOLLOWED.with(|n| n.set(0));
        let (parsed, reused) = after(&body, &o, Some(&prior));
        let followed = FOLLOWED.with(|n| n.get());
        assert_eq!(parsed.expect("parses"), fresh, "{name}");
        let runs = runs_in(&fresh);
        assert_eq!(
            followed, runs,
            "{name}: {followed} followed, {runs} in runs, {reused} reused"
        );
        // Every value with a digit changed: only lines left as they were (`NaN`, `+Inf`) can be
        // taken in a run (a run stops at the first changed line), and every value is the new one.
        let before = values_moved(&body);
        let moved = Arc::new(after(&before, &o, None).0.expect("parses"));
        FOLLOWED.with(|n| n.set(0));
        let (parsed, _) = after(&body, &o, Some(&moved));
        assert_eq!(parsed.expect("parses"), fresh, "{name}");
        let followed = FOLLOWED.with(|n| n.get());
        let unchanged = unchanged_samples(&body, &before);
        assert!(
            followed <= unchanged,
            "{name}: {followed} followed, {unchanged} unchanged"
        );
    }
}

/// The lines a parse after the same page takes in runs: reusable ones right after a reusable
/// line of the same name.
fn runs_in(e: &Exposition) -> usize {
    e.all_samples()
        .windows(2)
        .filter(|w| {
            is_reusable(e, &w[0])
                && is_reusable(e, &w[1])
                && w[1].same_name_as_previous()
                && w[1].line_start() as usize == w[0].line_start() as usize + e.line_len(&w[0]) + 1
        })
        .count()
}

#[test]
fn a_prior_lexed_otherwise_is_not_used() {
    let body = fixture("medium.prom");
    let fresh = after(&body, &TEXT, None).0.expect("parses");
    assert!(reusable(&fresh) > 100);
    // Limits the page is well within: they change nothing but the key.
    let mut other_limits = LIMITS;
    other_limits.max_labels -= 1;
    let mut other_value_limit = LIMITS;
    other_value_limit.max_label_value_bytes -= 1;
    for (why, prior_opts) in [
        (
            "added labels",
            Opts {
                added: &["pod"],
                ..TEXT
            },
        ),
        (
            "label limit",
            Opts {
                limits: other_limits,
                ..TEXT
            },
        ),
        (
            "label value limit",
            Opts {
                limits: other_value_limit,
                ..TEXT
            },
        ),
        ("hasher", Opts { key: 8, ..TEXT }),
        (
            "format",
            Opts {
                format: Format::OpenMetrics,
                ..TEXT
            },
        ),
    ] {
        let prior = after(&body, &prior_opts, None).0;
        assert!(
            prior.is_ok_and(|p| reusable(&p) > 100),
            "{why}: the prior parses"
        );
        assert_eq!(check(&body, &prior_opts, &body, &TEXT), 0, "{why}");
    }
    // What keep prefixes select is the parse's own business: the lines it shares are reused.
    let all = Opts {
        keep: &[""],
        ..TEXT
    };
    assert_eq!(check(&body, &all, &body, &TEXT), reusable(&fresh));
}

#[test]
fn series_gone_or_new_since_leave_the_rest_reused() {
    let line = |e: u32, m: &str| format!("vllm:x{{engine=\"{e}\",model_name=\"{m}\"}} {e}.5\n");
    let page = |engines: &[u32]| {
        let mut s = String::from("# HELP vllm:x X.\n# TYPE vllm:x gauge\n");
        for &e in engines {
            s.push_str(&line(e, "m"));
        }
        s.push_str("# TYPE vllm:y counter\nvllm:y_total{engine=\"0\"} 1\n");
        s
    };
    let o = TEXT;
    let full = page(&[0, 1, 2, 3, 4]);
    // Gone: one series in the middle, then the last one.
    assert_eq!(
        check(
            page(&[0, 1, 2, 3, 4]).as_bytes(),
            &o,
            page(&[0, 1, 3, 4]).as_bytes(),
            &o
        ),
        5
    );
    assert_eq!(
        check(full.as_bytes(), &o, page(&[0, 1, 2, 3]).as_bytes(), &o),
        5
    );
    // New: at the end (where prometheus_client adds a child), then in the middle.
    assert_eq!(
        check(
            full.as_bytes(),
            &o,
            page(&[0, 1, 2, 3, 4, 5]).as_bytes(),
            &o
        ),
        6
    );
    assert_eq!(
        check(
            full.as_bytes(),
            &o,
            page(&[0, 1, 9, 2, 3, 4]).as_bytes(),
            &o
        ),
        6
    );
    // Same series, other label bytes: not reused.
    let respelled = full.replace("model_name=\"m\"", "model_name=\"n\"");
    assert_eq!(check(full.as_bytes(), &o, respelled.as_bytes(), &o), 1);
    // A line equal up to its `}` whose value is now broken is malformed, as in a fresh parse.
    // Its labels still come from the prior; its value is read, and rejected.
    let broken = full.replace("} 2.5", "} 2.5.5");
    let prior = Arc::new(after(full.as_bytes(), &o, None).0.expect("parses"));
    let (parsed, _) = after(broken.as_bytes(), &o, Some(&prior));
    assert_eq!(parsed.expect("parses").stats().malformed, 1);
    assert_eq!(check(full.as_bytes(), &o, broken.as_bytes(), &o), 6);
    // Non-canonical lines in the prior are passed over.
    let spaced = full
        .replace("{engine=\"1\",", "{engine=\"1\" ,")
        .replace("{engine=\"2\",", "{ engine=\"2\",");
    assert_eq!(check(spaced.as_bytes(), &o, full.as_bytes(), &o), 4);
}

// Pages of a few labelled families, and the page a scrape later: lines dropped, added,
// revalued or relabelled, types changed.
const NAMES: [&str; 7] = [
    "vllm:a",
    "vllm:h_bucket",
    "vllm:h_sum",
    "lmcache:c_total",
    "lmcache:c_created",
    "vllm:a_total",
    "other",
];
const DECLARED: [&str; 3] = ["vllm:a", "vllm:h", "lmcache:c"];
const KINDS: [&str; 5] = ["gauge", "counter", "histogram", "untyped", "summary"];
const LABEL_NAMES: [&str; 4] = ["engine", "le", "model_name", "pod"];
const LABEL_VALUES: [&str; 6] = ["0", "1", "meta-llama/L", "a\\\"b", "é", ""];
const VALUES: [&str; 6] = ["1", "2.5", "NaN", "+Inf", "1e3", "x"];

#[derive(Debug, Clone)]
struct Sample {
    name: usize,
    labels: Vec<(usize, usize)>,
    value: usize,
    /// 0: canonical; 1: blanks around labels; 2: trailing comma; 3: timestamp.
    shape: u8,
}

fn sample() -> impl Strategy<Value = Sample> {
    (
        0..NAMES.len(),
        proptest::collection::vec((0..LABEL_NAMES.len(), 0..LABEL_VALUES.len()), 0..4),
        0..VALUES.len(),
        prop_oneof![6 => Just(0u8), 1 => 1u8..4],
    )
        .prop_map(|(name, labels, value, shape)| Sample {
            name,
            labels,
            value,
            shape,
        })
}

#[derive(Debug, Clone)]
enum Edit {
    Same,
    Drop,
    Value(usize),
    Label(usize, usize),
    Insert(Sample),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        12 => Just(Edit::Same),
        2 => Just(Edit::Drop),
        3 => (0..VALUES.len()).prop_map(Edit::Value),
        1 => (0..LABEL_NAMES.len(), 0..LABEL_VALUES.len()).prop_map(|(n, v)| Edit::Label(n, v)),
        2 => sample().prop_map(Edit::Insert),
    ]
}

fn render(kinds: &[usize], samples: &[Sample], om: bool) -> String {
    let mut out = String::new();
    for (name, &kind) in DECLARED.iter().zip(kinds) {
        out.push_str(&format!("# TYPE {name} {}\n", KINDS[kind]));
    }
    for s in samples {
        let pairs: Vec<String> = s
            .labels
            .iter()
            .map(|&(n, v)| format!("{}=\"{}\"", LABEL_NAMES[n], LABEL_VALUES[v]))
            .collect();
        let labels = match (s.labels.is_empty(), s.shape) {
            (true, _) => String::new(),
            (false, 1) => format!(" {{ {} }}", pairs.join(" , ")),
            (false, 2) => format!("{{{},}}", pairs.join(",")),
            (false, _) => format!("{{{}}}", pairs.join(",")),
        };
        let ts = if s.shape == 3 { " 17" } else { "" };
        out.push_str(&format!(
            "{}{labels} {}{ts}\n",
            NAMES[s.name], VALUES[s.value]
        ));
    }
    if om {
        out.push_str("# EOF\n");
    }
    out
}

fn edited(samples: &[Sample], edits: &[Edit]) -> Vec<Sample> {
    let mut out = Vec::new();
    for (s, e) in samples
        .iter()
        .zip(edits.iter().chain(std::iter::repeat(&Edit::Same)))
    {
        match e {
            Edit::Same => out.push(s.clone()),
            Edit::Drop => {}
            Edit::Value(v) => out.push(Sample {
                value: *v,
                ..s.clone()
            }),
            Edit::Label(n, v) => {
                let mut s = s.clone();
                if let Some(pair) = s.labels.first_mut() {
                    *pair = (*n, *v);
                }
                out.push(s);
            }
            Edit::Insert(new) => {
                out.push(new.clone());
                out.push(s.clone());
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_parse_after_the_previous_scrape_is_the_fresh_parse(
        kinds in proptest::collection::vec(0..KINDS.len(), DECLARED.len()),
        later_kinds in proptest::collection::vec(0..KINDS.len(), DECLARED.len()),
        retyped in proptest::bool::weighted(0.2),
        samples in proptest::collection::vec(sample(), 0..30),
        edits in proptest::collection::vec(edit(), 0..30),
        om in any::<bool>(),
        added in any::<bool>(),
        keep_all in any::<bool>(),
    ) {
        let o = Opts {
            format: if om { Format::OpenMetrics } else { Format::Text },
            keep: if keep_all { &[""] } else { &["vllm:", "lmcache:"] },
            added: if added { &["pod", "le"] } else { &[] },
            ..TEXT
        };
        let before = render(&kinds, &samples, om);
        let later = render(if retyped { &later_kinds } else { &kinds }, &edited(&samples, &edits), om);
        check(before.as_bytes(), &o, later.as_bytes(), &o);
    }
}

#[test]
fn the_generated_pages_reuse_lines() {
    // The property above is only worth its cases if they take lines from the prior: count.
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let samples = proptest::collection::vec(sample(), 5..30);
    let edits = proptest::collection::vec(edit(), 0..30);
    let (mut reused, mut lines) = (0, 0);
    FOLLOWED.with(|n| n.set(0));
    for i in 0..200 {
        let s = samples.new_tree(&mut runner).expect("tree").current();
        let e = edits.new_tree(&mut runner).expect("tree").current();
        let om = i % 2 == 0;
        let o = Opts {
            format: if om {
                Format::OpenMetrics
            } else {
                Format::Text
            },
            keep: &[""],
            ..TEXT
        };
        let kinds = [0, 2, 1];
        let later = render(&kinds, &edited(&s, &e), om);
        reused += check(render(&kinds, &s, om).as_bytes(), &o, later.as_bytes(), &o);
        lines += later.lines().count();
    }
    let followed = FOLLOWED.with(|n| n.get());
    eprintln!("{reused} of {lines} lines reused, {followed} of them in runs");
    assert!(reused * 4 >= lines, "{reused} of {lines} lines reused");
    // And the runs of unchanged lines are in them too, else the property does not cover them.
    assert!(
        followed * 20 >= reused,
        "{followed} of {reused} reused lines in runs"
    );
}
