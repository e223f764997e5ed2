//! The two-part parse of large bodies against the one-pass parse: for every input, every cut
//! the two-part parse may choose must give the one-pass result exactly (families, samples, side
//! table, counts, kept bytes, errors), and so the same merged output in both formats.

use bytes::Bytes;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::split::{
    PARALLEL_MIN_BYTES, parse_in_runs, parse_joined, parse_shared_with, split_point,
};
use crate::testing::{FIXTURES, LIMITS, fixture};
use crate::*;

struct Case<'a> {
    body: &'a [u8],
    format: Format,
    keep: &'a [&'a str],
    added: &'a [AddedLabel],
    limits: ParseLimits,
}

fn case<'a>(body: &'a str, format: Format) -> Case<'a> {
    Case {
        body: body.as_bytes(),
        format,
        keep: &["vllm:", "lmcache:"],
        added: &[],
        limits: LIMITS,
    }
}

/// Calls `f` with `c`'s parse options and body.
fn with_opts<R>(c: &Case<'_>, f: impl FnOnce(Bytes, &ParseOptions<'_>) -> R) -> R {
    let keep: Vec<String> = c.keep.iter().map(|s| s.to_string()).collect();
    let names: Vec<&[u8]> = c.added.iter().map(|a| a.name()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits: c.limits,
        added_labels: &names,
        hasher: PairHasher::new(7),
        allow_reserved: false,
    };
    f(Bytes::copy_from_slice(c.body), &opts)
}

fn parse_case(c: &Case<'_>, split: Split) -> Result<Exposition, ParseError> {
    with_opts(c, |body, opts| {
        parse_with(body, c.format, opts, split, None)
    })
}

/// The one-pass result.
fn one_pass(c: &Case<'_>) -> Result<Exposition, ParseError> {
    parse_case(c, Split::OnePass)
}

/// The two-thread parse cut at `cut`, with no one-pass fallback: `None` when the parts were
/// not joined.
fn parse_joined_at(c: &Case<'_>, cut: usize) -> Result<Option<Exposition>, ParseError> {
    with_opts(c, |body, opts| parse_joined(body, c.format, opts, cut))
}

/// The one-pass parse, its lines read in runs ending at `ends`.
fn in_runs(c: &Case<'_>, ends: &[usize]) -> Result<Exposition, ParseError> {
    with_opts(c, |body, opts| parse_in_runs(body, c.format, opts, ends))
}

/// Text and OpenMetrics output of the exposition merged alone.
fn outputs(e: &Exposition, added: &[AddedLabel]) -> (Vec<u8>, Vec<u8>) {
    let sources = [e];
    let m = merge(
        &sources,
        &MergeOptions {
            added,
            names: None,
            hasher: PairHasher::new(7),
        },
    );
    let mut text = Vec::with_capacity(m.size_hint());
    write_text(&m, &mut text);
    let mut om = Vec::with_capacity(m.size_hint());
    write_openmetrics(&m, &mut om);
    (text, om)
}

/// The distinct cuts the two-part parse chooses near each of `targets`.
fn cuts(body: &[u8], targets: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut cuts: Vec<usize> = targets
        .into_iter()
        .filter_map(|t| split_point(body, t, 0))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Every line start of `body` but the first.
fn line_starts(body: &[u8]) -> Vec<usize> {
    (1..body.len()).filter(|&i| body[i - 1] == b'\n').collect()
}

/// Checks every cut reached from `targets` against the one-pass parse; returns the number of
/// cuts whose parts were joined (the others fell back to one pass).
fn check(c: &Case<'_>, targets: impl IntoIterator<Item = usize>) -> usize {
    let one = one_pass(c);
    let mut joined = 0;
    for cut in cuts(c.body, targets) {
        assert!(cut > 0 && c.body[cut - 1] == b'\n', "a cut starts a line");
        match parse_joined_at(c, cut) {
            Ok(Some(parts)) => {
                let one = one.as_ref().expect("joined only what parses in one pass");
                assert_eq!(&parts, one, "cut at {cut}");
                assert_eq!(outputs(&parts, c.added), outputs(one, c.added));
                joined += 1;
            }
            Ok(None) => {}
            Err(err) => assert_eq!(Err(&err), one.as_ref(), "cut at {cut}"),
        }
        let near = parse_case(c, Split::Near(cut));
        assert_eq!(near, one, "cut at {cut}, with the fallback");
    }
    joined
}

/// Checks [`Split::Shared`] (wherever the second thread happens to cut) against the one-pass
/// parse, with the first thread claiming `claim` bytes at a time; returns whether the second
/// thread took a part and the parts were joined.
fn check_shared(c: &Case<'_>, claim: usize) -> bool {
    let one = one_pass(c);
    let shared = with_opts(c, |body, opts| {
        parse_shared_with(body, c.format, opts, claim, 0)
    });
    let took = matches!(shared, Ok(Some((_, true))));
    match shared.map(|r| r.map(|(e, _)| e)) {
        Ok(Some(e)) => {
            let one = one.as_ref().expect("joined only what parses in one pass");
            assert_eq!(&e, one);
            assert_eq!(outputs(&e, c.added), outputs(one, c.added));
        }
        Ok(None) => {}
        Err(err) => assert_eq!(Err(&err), one.as_ref()),
    }
    assert_eq!(parse_case(c, Split::Shared), one);
    took
}

/// The number of joined cuts of a body with a cut before every line.
fn check_all(c: &Case<'_>) -> usize {
    check(c, line_starts(c.body))
}

#[test]
fn disjoint_families_are_joined() {
    let body = "# HELP vllm:a A\n# TYPE vllm:a gauge\nvllm:a{x=\"1\"} 1\nvllm:a{x=\"2\"} 2\n# HELP vllm:b B\n# TYPE vllm:b counter\nvllm:b 3\n# HELP other_c C\n# TYPE other_c gauge\nother_c 4\n";
    assert_eq!(check_all(&case(body, Format::Text)), 2);
    let c = Case {
        keep: &[""],
        ..case(body, Format::Text)
    };
    assert_eq!(check_all(&c), 2);
}

#[test]
fn the_first_malformed_line_keeps_its_number_in_the_joined_parse() {
    // Malformed lines in the rest only (line 7), and in both parts (line 3 first).
    let rest_only = "# TYPE vllm:a gauge\nvllm:a 1\nvllm:a{x=\"2\"} 2\n# TYPE vllm:b gauge\nvllm:b 3\nvllm:b{x=\"1\"} 4\nvllm:b{x=\"2\"} x\n";
    let both = rest_only.replace("vllm:a{x=\"2\"} 2", "vllm:a{x=\"2\"} y");
    for (body, line) in [(rest_only, 7), (both.as_str(), 3)] {
        let c = case(body, Format::Text);
        let cut = body.find("# TYPE vllm:b").expect("second family");
        let joined = parse_joined_at(&c, cut)
            .expect("within limits")
            .expect("disjoint families join");
        let first = joined.stats().first_malformed.expect("a malformed line");
        assert_eq!(first.line, line, "{body}");
        assert_eq!(first.rule, Rule::Line(LineError::BadValue));
        assert_eq!(Ok(joined), one_pass(&c));
    }
}

/// The cut [`split_point`] is to choose, by reading every line: the family start nearest
/// `target`, at `lo` or after, the earlier one on a tie, looked for at most an eighth of the
/// body (or 64 KiB) after `target` and no farther before it than the one found after.
/// `families` is every line start of `body` that starts a family.
fn nearest_cut(body: &[u8], families: &[usize], target: usize, lo: usize) -> Option<usize> {
    let lo = lo.max(1);
    if body.len() <= lo {
        return None;
    }
    let target = target.clamp(lo, body.len());
    let window = (body.len() / 8).max(64 << 10);
    let mut starts = families.iter().copied().filter(|&s| s >= lo);
    let forward = starts.clone().find(|&s| s >= target && s < target + window);
    let reach = forward.map_or(window, |s| s - target);
    let backward = starts.rfind(|&s| s < target && target - s <= reach);
    backward.or(forward)
}

#[test]
fn the_cut_is_the_nearest_family_start_on_a_page_of_many_engines() {
    // 40 engines' worth of a page (families far longer than the search window's eighth), with
    // `#` in HELP texts, label values and comments, where no family starts.
    let mut body = fixture("medium.prom");
    body.extend_from_slice(b"# a comment # with # signs\nvllm:x{a=\"#\"} 1\n");
    body.extend_from_slice(b"# HELP vllm:y has # in it\n# TYPE vllm:y gauge\nvllm:y 2\n");
    body.extend_from_slice(&fixture("edge_weird_labels_nan.prom"));
    let starts = line_starts(&body);
    let families: Vec<usize> = (starts.iter().copied())
        .filter(|&s| super::split::starts_family(&body, s))
        .collect();
    let mut checked = 0;
    for (i, &t) in starts.iter().enumerate().step_by(97) {
        for t in [t - 1, t, t + 1] {
            for lo in [0, t / 2, t.saturating_sub(3)] {
                assert_eq!(
                    split_point(&body, t, lo),
                    nearest_cut(&body, &families, t, lo),
                    "target {t} (line {i}), lo {lo}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn a_cut_goes_before_the_declarations_of_its_family() {
    let body = "# HELP vllm:a A\n# TYPE vllm:a gauge\nvllm:a 1\n# HELP vllm:b B\n# TYPE vllm:b counter\n# UNIT vllm:b s\nvllm:b 3\n";
    let b = body.find("# HELP vllm:b").expect("there");
    for line in [
        "# HELP vllm:b",
        "# TYPE vllm:b",
        "# UNIT vllm:b",
        "vllm:b 3",
    ] {
        let at = body.find(line).expect("there");
        assert_eq!(split_point(body.as_bytes(), at, 0), Some(b), "from {line}");
    }
    // Nearest wins, either way; never before `lo`.
    assert_eq!(split_point(body.as_bytes(), b - 1, 0), Some(b));
    assert_eq!(split_point(body.as_bytes(), b + 1, b), Some(b));
    assert_eq!(split_point(body.as_bytes(), b, b + 1), None);
    let three = "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE c gauge\nc 1\n";
    let (b3, c3) = (
        three.find("# TYPE b").expect("b"),
        three.find("# TYPE c").expect("c"),
    );
    assert_eq!(split_point(three.as_bytes(), b3 + 1, 0), Some(b3));
    assert_eq!(split_point(three.as_bytes(), b3 + 1, b3 + 1), Some(c3));
    // A body with one family has nowhere to be cut.
    let one = "# HELP vllm:a A\n# TYPE vllm:a gauge\nvllm:a 1\nvllm:a{x=\"1\"} 2\n";
    assert!(
        line_starts(one.as_bytes())
            .into_iter()
            .all(|t| split_point(one.as_bytes(), t, 0).is_none())
    );
    assert_eq!(split_point(b"", 0, 0), None);
    assert_eq!(split_point(b"\n", 1, 0), None);
    // Not a declaration: a comment, a bad name, a line with leading blanks.
    let none = "vllm:a 1\n# some comment\n# HELP 1bad x\n  # HELP vllm:b B\nvllm:b 1\n";
    assert!(
        line_starts(none.as_bytes())
            .into_iter()
            .all(|t| split_point(none.as_bytes(), t, 0).is_none())
    );
}

#[test]
fn a_family_on_both_sides_falls_back() {
    let body = "# TYPE vllm:a gauge\nvllm:a 1\n# HELP vllm:b B\nvllm:b 1\n# HELP vllm:a again\nvllm:a 2\n# HELP vllm:a third\n";
    assert_eq!(check_all(&case(body, Format::Text)), 0);
    // Implied by a sample in the first part, declared in the second.
    let body = "vllm:a 1\n# HELP vllm:b B\nvllm:b 1\n# TYPE vllm:a gauge\nvllm:a 2\n";
    assert_eq!(check_all(&case(body, Format::Text)), 0);
    // Declared in the first part, a sample in the second, under another family's declaration.
    let body = "# TYPE vllm:a gauge\nvllm:a 1\n# HELP vllm:b B\nvllm:b 1\nvllm:a 2\n";
    assert_eq!(check_all(&case(body, Format::Text)), 0);
}

#[test]
fn a_type_in_the_first_part_and_samples_in_the_second_fall_back() {
    // One pass: `vllm:h_bucket` belongs to the histogram `vllm:h`; alone, the second part
    // would make it an untyped family of its own.
    let body = "# TYPE vllm:h histogram\n# HELP vllm:b B\n# TYPE vllm:b gauge\nvllm:b 1\nvllm:h_bucket{le=\"+Inf\"} 1\nvllm:h_count 1\nvllm:h_sum 1\n";
    assert_eq!(check_all(&case(body, Format::Text)), 0);
    let one = one_pass(&case(body, Format::Text)).expect("parses");
    assert_eq!(one.families().len(), 2);
    // A sample of the first part's exact name under the second part's declaration.
    let body = "# TYPE vllm:x_count gauge\nvllm:x_count 1\n# TYPE vllm:x gauge\nvllm:x 2\nvllm:x_count 3\n";
    assert_eq!(check_all(&case(body, Format::Text)), 0);
    // The family in force resolves a name first: `vllm:x_count` right after `# TYPE vllm:x
    // summary` is the summary's in one pass too, so that cut is joined.
    let body = "# TYPE vllm:x_count gauge\nvllm:x_count 1\n# TYPE vllm:x summary\nvllm:x_count 2\nvllm:x_sum 3\n";
    assert_eq!(check_all(&case(body, Format::Text)), 1);
    // The OpenMetrics counter `y` in the first part, its `y_created` sample in the second.
    let body = "# TYPE vllm:y counter\nvllm:y_total 1\n# TYPE vllm:z gauge\nvllm:z 1\nvllm:y_created 2\n# EOF\n";
    assert_eq!(check_all(&case(body, Format::OpenMetrics)), 0);
}

#[test]
fn escaped_names_in_the_second_part_fall_back() {
    // client_python#1177: `vllm_x_total` is `vllm:x` of the first part.
    let body = "# TYPE vllm:x counter\nvllm:x_total 1\n# TYPE vllm:y gauge\nvllm:y 1\nvllm_x_total 2\nvllm_x_created 3\n# EOF\n";
    assert_eq!(check_all(&case(body, Format::OpenMetrics)), 0);
    let one = one_pass(&case(body, Format::OpenMetrics)).expect("parses");
    assert_eq!(one.stats().renamed, 2);
    // Two names with one escaped form: the first declared wins the escaped lookup.
    let body = "# TYPE a:b_c counter\na:b_c_total 1\n# TYPE a_b:c counter\na_b:c_total 1\n# TYPE q gauge\nq 1\na_b_c_total 2\n# EOF\n";
    let c = Case {
        keep: &[""],
        ..case(body, Format::OpenMetrics)
    };
    assert_eq!(check_all(&c), 0);
    // Escaped names of the second part's own declarations are joined: the cut before
    // `vllm:y`, not the one before `vllm:z`, which leaves a `vllm_y_total` after it.
    let body = "# TYPE vllm:x counter\nvllm_x_total 1\n# TYPE vllm:y counter\nvllm_y_total 1\nvllm_y_created 2\n# TYPE vllm:z gauge\nvllm:z 1\nvllm_y_total{a=\"1\"} 2\n# EOF\n";
    assert_eq!(check_all(&case(body, Format::OpenMetrics)), 1);
}

#[test]
fn an_eof_at_the_end_of_the_first_part_falls_back() {
    let body = "# TYPE vllm:a gauge\nvllm:a 1\n# EOF\n# TYPE vllm:b gauge\nvllm:b 2\n# EOF\n";
    assert_eq!(check_all(&case(body, Format::OpenMetrics)), 0);
    let one = one_pass(&case(body, Format::OpenMetrics)).expect("parses");
    assert_eq!(one.stats().malformed, 1);
    // A sample after the `# EOF` in the first part: the second part starts afresh.
    let body = "# TYPE vllm:a gauge\nvllm:a 1\n# EOF\nvllm:a{x=\"1\"} 2\n# TYPE vllm:b gauge\nvllm:b 2\n# EOF\n# EOF\n";
    assert_eq!(check_all(&case(body, Format::OpenMetrics)), 1);
}

#[test]
fn limits_over_only_in_the_union_fall_back() {
    let body = "# TYPE vllm:a gauge\nvllm:a 1\nvllm:a{x=\"1\"} 1\n# TYPE vllm:b gauge\nvllm:b 1\nvllm:b{x=\"1\"} 1\n# TYPE other_c gauge\nother_c 1\n";
    let at = |max_series, max_families| Case {
        limits: ParseLimits {
            max_series,
            max_families,
            ..LIMITS
        },
        ..case(body, Format::Text)
    };
    assert_eq!(check_all(&at(4, 3)), 2, "at the limits");
    assert_eq!(check_all(&at(3, 3)), 0);
    assert_eq!(
        one_pass(&at(3, 3)),
        Err(ParseError::TooLarge {
            limit: Limit::Series,
            line: 6
        })
    );
    assert_eq!(check_all(&at(4, 2)), 0);
    assert_eq!(
        one_pass(&at(4, 2)),
        Err(ParseError::TooLarge {
            limit: Limit::Families,
            line: 7
        })
    );
}

#[test]
fn errors_in_either_part_are_the_one_pass_errors() {
    let long = format!(
        "# TYPE vllm:a gauge\nvllm:a 1\n# TYPE vllm:b gauge\nvllm:b{{x=\"{}\"}} 1\n",
        "y".repeat(300)
    );
    let c = Case {
        limits: ParseLimits {
            max_line_bytes: 200,
            ..LIMITS
        },
        ..case(&long, Format::Text)
    };
    assert_eq!(check_all(&c), 0);
    assert_eq!(
        one_pass(&c),
        Err(ParseError::TooLarge {
            limit: Limit::LineBytes,
            line: 4
        })
    );
    let first = format!(
        "# TYPE vllm:a gauge\nvllm:a{{x=\"{}\"}} 1\n# TYPE vllm:b gauge\nvllm:b 1\n",
        "y".repeat(300)
    );
    let c = Case {
        limits: ParseLimits {
            max_label_value_bytes: 200,
            ..LIMITS
        },
        ..case(&first, Format::Text)
    };
    assert_eq!(check_all(&c), 0);
    assert_eq!(
        parse_joined_at(&c, first.find("# TYPE vllm:b").expect("there")),
        Err(ParseError::TooLarge {
            limit: Limit::LabelValueBytes,
            line: 2
        })
    );
}

#[test]
fn crlf_blank_lines_and_no_final_newline_are_joined() {
    let body = "# HELP vllm:a A\r\n# TYPE vllm:a gauge\r\nvllm:a 1\r\n\r\n  \r\n# HELP vllm:b B\r\n# TYPE vllm:b gauge\r\nvllm:b{x=\"1\"}  2\r\n# HELP vllm:c C\r\nvllm:c 3";
    assert_eq!(check_all(&case(body, Format::Text)), 2);
}

#[test]
fn side_table_samples_in_both_parts_are_renumbered() {
    let long = "v".repeat(70_000);
    let body = format!(
        "# TYPE vllm:a gauge\nvllm:a 1 1700000000000\nvllm:a{{x=\"1\"}} 1\nvllm:a{{x=\"{long}\"}} 1\n# TYPE vllm:b gauge\nvllm:b{{x=\"{long}\"}} 2\nvllm:b{{x=\"2\"}} 2 1700000000001\nvllm:b{{x=\"3\"}} 2\n"
    );
    let c = case(&body, Format::Text);
    assert_eq!(check_all(&c), 1);
    let om = "# TYPE vllm:a counter\nvllm:a_total 1 # {t=\"1\"} 0.5\nvllm:a_created 1.7e9\n# TYPE vllm:b histogram\nvllm:b_bucket{le=\"+Inf\"} 1 # {t=\"2\"} 0.1 1.6e9\nvllm:b_count 1 1700000000.5\nvllm:b_sum 1\n# EOF\n";
    assert_eq!(check_all(&case(om, Format::OpenMetrics)), 1);
}

#[test]
fn parts_sorted_by_family_each_join_in_one_pass_order() {
    // Interleaved families in each part: each part is sorted by family on its own. (Only the
    // cut before `vllm:c` is joined: the others leave samples of a family in the part before.)
    let body = "# TYPE vllm:a gauge\n# TYPE vllm:b gauge\nvllm:a 1\nvllm:b 1\nvllm:a{x=\"1\"} 1\nvllm:b{x=\"1\"} 1\n# TYPE vllm:c gauge\n# TYPE vllm:d gauge\nvllm:c 1\nvllm:d 1\nvllm:c{x=\"1\"} 1\nvllm:d{x=\"1\"} 1\n";
    assert_eq!(check_all(&case(body, Format::Text)), 1);
    // Multiprocess histograms write every `_sum` first.
    let body = "# TYPE vllm:h histogram\nvllm:h_sum{e=\"0\"} 1\nvllm:h_sum{e=\"1\"} 2\nvllm:h_bucket{e=\"0\",le=\"+Inf\"} 1\nvllm:h_count{e=\"0\"} 1\n# HELP vllm:g G\n# TYPE vllm:g histogram\nvllm:g_sum{e=\"0\"} 1\nvllm:g_count{e=\"0\"} 1\nvllm:g_sum{e=\"1\"} 1\nvllm:g_count{e=\"1\"} 1\n";
    assert_eq!(check_all(&case(body, Format::Text)), 1);
}

#[test]
fn reserved_and_unkept_families_in_both_parts() {
    let body = "# TYPE dynamo_sysport counter\ndynamo_sysport_total 1\ndynamo_sysport_created 1\ndynamo_sysport_total{a=\"1\"} 1\n# TYPE vllm:a gauge\nvllm:a 1\nother 1\n# TYPE dynamo_sysport_x gauge\ndynamo_sysport_x 1\n# TYPE dynamo_s counter\ndynamo_s_total 1\ndynamo_s_created 1\ndynamo_s_total{a=\"1\"} 1\n# EOF\n";
    let c = Case {
        keep: &["dynamo", "vllm:"],
        ..case(body, Format::OpenMetrics)
    };
    assert_eq!(check_all(&c), 3);
}

#[test]
fn every_fixture_matches_at_every_cut() {
    let added = [
        AddedLabel::new("pod", "p1"),
        AddedLabel::new("model_name", "m"),
    ];
    for name in FIXTURES {
        let body = fixture(name);
        let format = Format::detect(&body);
        let mut joined = 0;
        for (keep, added) in [
            (&["vllm:", "lmcache:"][..], &[][..]),
            (&[""][..], &added[..]),
        ] {
            let c = Case {
                body: &body,
                format,
                keep,
                added,
                limits: LIMITS,
            };
            // Some 12 cuts spread over the body, and the middle.
            let step = (body.len() / 12).max(1);
            let targets = (0..body.len()).step_by(step).chain([body.len() / 2]);
            joined += check(&c, targets);
            check_shared(&c, 4096);
            // The public entry point cuts large bodies itself.
            let auto = with_opts(&c, |body, opts| parse(body, format, opts));
            assert_eq!(auto, one_pass(&c));
        }
        assert!(joined > 0, "{name}: some cut is joined");
    }
}

#[test]
fn large_bodies_are_joined_by_the_public_parse() {
    // Copies of a fixture under distinct prefixes, past the size where parse cuts.
    let text = String::from_utf8(fixture("medium.prom")).expect("utf-8");
    let mut body = Vec::new();
    let mut i = 0;
    while body.len() < 2 * PARALLEL_MIN_BYTES {
        for line in text.lines() {
            let line = match line.strip_prefix("# ") {
                Some(c) => format!("# {} g{i}_{}", &c[..4], &c[5..]),
                None => format!("g{i}_{line}"),
            };
            body.extend_from_slice(line.as_bytes());
            body.push(b'\n');
        }
        i += 1;
    }
    let c = Case {
        body: &body,
        format: Format::Text,
        keep: &["g"],
        added: &[],
        limits: LIMITS,
    };
    assert_eq!(check(&c, [body.len() / 2]), 1);
    let auto = with_opts(&c, |body, opts| parse(body, Format::Text, opts));
    assert_eq!(auto, one_pass(&c));
    // Where the second thread cuts depends on when it runs: it runs at some point of a parse
    // this long, and cuts where the join holds (every family is declared once).
    assert!(
        (0..10).any(|_| check_shared(&c, 4096)),
        "joined once at least"
    );
}

// Bodies built from a few names that relate in every way the resolution cares about: exact,
// with type suffixes, escaped, two names with one escaped form, reserved, unkept.
const NAMES: [&str; 12] = [
    "vllm:a",
    "vllm_a",
    "vllm:a_total",
    "vllm:a_created",
    "vllm:b",
    "a:b_c",
    "a_b:c",
    "x",
    "x_count",
    "dynamo_sysport",
    "lmcache:z",
    "other",
];
const SUFFIXES: [&str; 9] = [
    "", "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info",
];
const KINDS: [&str; 9] = [
    "counter",
    "gauge",
    "histogram",
    "summary",
    "untyped",
    "info",
    "stateset",
    "gaugehistogram",
    "bogus",
];

#[derive(Debug, Clone)]
enum Line {
    Help(usize),
    Type(usize, usize),
    Unit(usize),
    Sample {
        name: usize,
        suffix: usize,
        escaped: bool,
        label: Option<u8>,
        ts: bool,
        exemplar: bool,
    },
    Eof,
    Comment,
    Blank,
    Broken,
    Long,
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        2 => (0..NAMES.len()).prop_map(Line::Help),
        3 => (0..NAMES.len(), 0..KINDS.len()).prop_map(|(n, k)| Line::Type(n, k)),
        1 => (0..NAMES.len()).prop_map(Line::Unit),
        10 => (0..NAMES.len(), prop_oneof![3 => Just(0usize), 2 => 0..SUFFIXES.len()], any::<bool>(), proptest::option::of(0u8..4), proptest::bool::weighted(0.1), proptest::bool::weighted(0.05))
            .prop_map(|(name, suffix, escaped, label, ts, exemplar)| Line::Sample { name, suffix, escaped, label, ts, exemplar }),
        1 => Just(Line::Eof),
        1 => Just(Line::Comment),
        1 => Just(Line::Blank),
        1 => Just(Line::Broken),
        1 => Just(Line::Long),
    ]
}

fn render(lines: &[Line], crlf: bool, final_newline: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    for l in lines {
        match l {
            Line::Help(n) => out.push_str(&format!("# HELP {} Help {n}.", NAMES[*n])),
            Line::Type(n, k) => out.push_str(&format!("# TYPE {} {}", NAMES[*n], KINDS[*k])),
            Line::Unit(n) => out.push_str(&format!("# UNIT {} seconds", NAMES[*n])),
            Line::Sample {
                name,
                suffix,
                escaped,
                label,
                ts,
                exemplar,
            } => {
                let mut name = format!("{}{}", NAMES[*name], SUFFIXES[*suffix]);
                if *escaped {
                    name = name.replace(':', "_");
                }
                out.push_str(&name);
                if let Some(v) = label {
                    out.push_str(&format!("{{le=\"{v}\"}}"));
                }
                out.push_str(" 1");
                if *ts {
                    out.push_str(" 17");
                }
                if *exemplar {
                    out.push_str(" # {t=\"1\"} 0.5");
                }
            }
            Line::Eof => out.push_str("# EOF"),
            Line::Comment => out.push_str("# a comment"),
            Line::Blank => {}
            Line::Broken => out.push_str("vllm:a{x=\"1} 1"),
            Line::Long => out.push_str(&format!("vllm:a{{x=\"{}\"}} 1", "y".repeat(90))),
        }
        out.push_str(nl);
    }
    if !final_newline {
        out.truncate(out.len() - nl.len().min(out.len()));
    }
    out
}

/// A family as renderers write it: declarations, then samples (mostly of its own name, with
/// any suffix, sometimes escaped or of another name), then maybe stray lines.
#[derive(Debug, Clone)]
struct Block {
    name: usize,
    /// `_t1`.. after the name; a tag makes names that relate to no other tag's.
    tag: u8,
    help: bool,
    kind: Option<usize>,
    unit: bool,
    /// (another name, suffix, escaped, label).
    samples: Vec<(Option<usize>, usize, bool, Option<u8>)>,
    stray: Vec<Line>,
}

fn block() -> impl Strategy<Value = Block> {
    (
        (0..NAMES.len(), 0u8..4, proptest::bool::weighted(0.8)),
        (
            proptest::option::weighted(0.8, 0..KINDS.len()),
            proptest::bool::weighted(0.1),
        ),
        proptest::collection::vec(
            (
                proptest::option::weighted(0.1, 0..NAMES.len()),
                prop_oneof![2 => Just(0usize), 1 => 0..SUFFIXES.len()],
                proptest::bool::weighted(0.15),
                proptest::option::of(0u8..4),
            ),
            0..5,
        ),
        proptest::collection::vec(line(), 0..2),
    )
        .prop_map(|((name, tag, help), (kind, unit), samples, stray)| Block {
            name,
            tag,
            help,
            kind,
            unit,
            samples,
            stray,
        })
}

fn render_blocks(blocks: &[Block], om: bool) -> String {
    let mut out = String::new();
    for b in blocks {
        let name = match b.tag {
            0 => NAMES[b.name].to_string(),
            t => format!("{}_t{t}", NAMES[b.name]),
        };
        if b.help {
            out.push_str(&format!("# HELP {name} Help.\n"));
        }
        if let Some(k) = b.kind {
            out.push_str(&format!("# TYPE {name} {}\n", KINDS[k]));
        }
        if b.unit {
            out.push_str(&format!("# UNIT {name} seconds\n"));
        }
        for (other, suffix, escaped, label) in &b.samples {
            let mut n = format!(
                "{}{}",
                other.map_or(name.as_str(), |o| NAMES[o]),
                SUFFIXES[*suffix]
            );
            if *escaped {
                n = n.replace(':', "_");
            }
            let labels = label.map_or(String::new(), |v| format!("{{le=\"{v}\"}}"));
            out.push_str(&format!("{n}{labels} 1\n"));
        }
        out.push_str(&render(&b.stray, false, true));
    }
    if om && blocks.len() % 2 == 0 {
        out.push_str("# EOF\n");
    }
    out
}

fn limits() -> impl Strategy<Value = ParseLimits> {
    prop_oneof![
        3 => Just(LIMITS),
        1 => (1usize..30, 1usize..12, prop_oneof![Just(80usize), Just(1 << 20)])
            .prop_map(|(max_series, max_families, max_line_bytes)| ParseLimits {
                max_series,
                max_families,
                max_line_bytes,
                max_labels: 64,
                max_label_value_bytes: 64,
            }),
    ]
}

const KEEPS: [&[&str]; 3] = [&[""], &["vllm:"], &["vllm:", "lmcache:", "dynamo"]];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_cut_of_related_families_matches_one_pass(
        lines in proptest::collection::vec(line(), 0..40),
        om in any::<bool>(),
        crlf in any::<bool>(),
        final_newline in proptest::bool::weighted(0.8),
        keep in 0..KEEPS.len(),
        added in any::<bool>(),
        limits in limits(),
    ) {
        let body = render(&lines, crlf, final_newline);
        let added_labels = [AddedLabel::new("le", "9"), AddedLabel::new("pod", "p")];
        let c = Case {
            body: body.as_bytes(),
            format: if om { Format::OpenMetrics } else { Format::Text },
            keep: KEEPS[keep],
            added: if added { &added_labels } else { &[] },
            limits,
        };
        check_all(&c);
    }

    #[test]
    fn every_cut_of_family_blocks_matches_one_pass(
        blocks in proptest::collection::vec(block(), 0..12),
        om in any::<bool>(),
        keep in 0..KEEPS.len(),
        added in any::<bool>(),
        limits in limits(),
    ) {
        let body = render_blocks(&blocks, om);
        let added_labels = [AddedLabel::new("le", "9"), AddedLabel::new("pod", "p")];
        let c = Case {
            body: body.as_bytes(),
            format: if om { Format::OpenMetrics } else { Format::Text },
            keep: KEEPS[keep],
            added: if added { &added_labels } else { &[] },
            limits,
        };
        check_all(&c);
    }

    #[test]
    fn a_shared_parse_matches_one_pass(
        blocks in proptest::collection::vec(block(), 0..12),
        om in any::<bool>(),
        keep in 0..KEEPS.len(),
        limits in limits(),
        claim in 1usize..80,
    ) {
        let body = render_blocks(&blocks, om);
        let c = Case {
            body: body.as_bytes(),
            format: if om { Format::OpenMetrics } else { Format::Text },
            keep: KEEPS[keep],
            added: &[],
            limits,
        };
        check_shared(&c, claim);
    }

    #[test]
    fn reading_in_runs_is_reading_in_one_pass(
        blocks in proptest::collection::vec(block(), 0..12),
        om in any::<bool>(),
        keep in 0..KEEPS.len(),
        limits in limits(),
        every in 1usize..5,
    ) {
        let body = render_blocks(&blocks, om);
        let c = Case {
            body: body.as_bytes(),
            format: if om { Format::OpenMetrics } else { Format::Text },
            keep: KEEPS[keep],
            added: &[],
            limits,
        };
        let ends: Vec<usize> = line_starts(c.body).into_iter().step_by(every).collect();
        prop_assert_eq!(in_runs(&c, &ends), one_pass(&c));
    }

    #[test]
    fn every_cut_of_arbitrary_bytes_matches_one_pass(
        body in proptest::collection::vec(
            prop_oneof![
                8 => any::<u8>(),
                4 => Just(b'\n'),
                2 => Just(b'#'),
                2 => Just(b' '),
                1 => Just(b':'),
                1 => Just(b'_'),
            ],
            0..400,
        ),
        om in any::<bool>(),
        keep in 0..KEEPS.len(),
    ) {
        let c = Case { body: &body, format: if om { Format::OpenMetrics } else { Format::Text }, keep: KEEPS[keep], added: &[], limits: LIMITS };
        check_all(&c);
    }

    #[test]
    fn every_cut_of_declarations_and_arbitrary_lines_matches_one_pass(
        parts in proptest::collection::vec(
            prop_oneof![
                line().prop_map(|l| render(&[l], false, true)),
                "[a-z_:# {}=\"0-9.\\n]{0,30}\n",
            ],
            0..30,
        ),
        om in any::<bool>(),
        keep in 0..KEEPS.len(),
    ) {
        let body = parts.concat();
        let c = Case { body: body.as_bytes(), format: if om { Format::OpenMetrics } else { Format::Text }, keep: KEEPS[keep], added: &[], limits: LIMITS };
        check_all(&c);
    }
}

#[test]
fn the_generated_bodies_are_often_joined() {
    // The property above is only worth its cases if many of them exercise the join: count.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(block(), 2..12);
    let (mut joined, mut cuts_seen) = (0, 0);
    for i in 0..200 {
        let blocks = strategy.new_tree(&mut runner).expect("tree").current();
        let om = i % 2 == 0;
        let body = render_blocks(&blocks, om);
        let format = if om {
            Format::OpenMetrics
        } else {
            Format::Text
        };
        let c = Case {
            keep: &[""],
            ..case(&body, format)
        };
        cuts_seen += cuts(c.body, line_starts(c.body)).len();
        joined += check_all(&c);
    }
    eprintln!("{joined} of {cuts_seen} cuts joined");
    assert!(
        joined * 4 >= cuts_seen,
        "{joined} of {cuts_seen} cuts joined"
    );
}
