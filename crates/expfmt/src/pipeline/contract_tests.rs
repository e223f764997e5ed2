//! Rule-by-rule tests of parse → merge → write, named after the contract rule they check.

use bytes::Bytes;

use crate::openmetrics::OpenMetricsStats;
use crate::testing::{FIXTURES, LIMITS, fixture};
use crate::*;

pub(crate) struct Up<'a> {
    pub body: &'a [u8],
    pub format: Format,
    pub keep: &'a [&'a str],
}

pub(crate) fn up<'a>(body: &'a str, keep: &'a [&'a str]) -> Up<'a> {
    Up {
        body: body.as_bytes(),
        format: Format::Text,
        keep,
    }
}

pub(crate) fn parse_one(
    u: &Up<'_>,
    added: &[AddedLabel],
    limits: ParseLimits,
) -> Result<Exposition, ParseError> {
    let keep: Vec<String> = u.keep.iter().map(|s| s.to_string()).collect();
    let names: Vec<&[u8]> = added.iter().map(|a| a.name()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits,
        added_labels: &names,
        hasher: PairHasher::new(99),
        allow_reserved: false,
    };
    parse(Bytes::copy_from_slice(u.body), u.format, &opts)
}

/// Parses, merges and writes text; returns the output and per-upstream (parse, merge) stats.
pub(crate) fn run(ups: &[Up<'_>], added: &[AddedLabel]) -> (String, Vec<(ParseStats, MergeStats)>) {
    let exps: Vec<Exposition> = ups
        .iter()
        .map(|u| parse_one(u, added, LIMITS).expect("within limits"))
        .collect();
    let refs: Vec<&Exposition> = exps.iter().collect();
    let m = merge_checked(
        &refs,
        &MergeOptions {
            added,
            names: None,
            hasher: PairHasher::new(99),
        },
    );
    let mut out = Vec::with_capacity(m.size_hint());
    write_text(&m, &mut out);
    // Written as runs of the bodies, every run kept however short, the output is the same.
    let bodies = exps.iter().map(|e| e.body().clone()).collect();
    let mut pieces = Pieces::with_min_run(bodies, 1);
    write_text(&m, &mut pieces);
    assert_eq!(
        String::from_utf8_lossy(&pieces.finish().concat()),
        String::from_utf8_lossy(&out)
    );
    let stats = exps
        .iter()
        .map(|e| e.stats())
        .zip(m.stats().iter().copied())
        .collect();
    (String::from_utf8(out).expect("output is UTF-8"), stats)
}

/// [`merge`], with both ways of finding duplicates checked on the same sources: one table for
/// the whole merge (what `merge` does up to 4,096 samples, so for most inputs here and most
/// pages in production) and a table per family give the same counts and the same output in
/// both formats.
pub(crate) fn merge_checked<'a>(
    sources: &'a [&'a Exposition],
    opts: &MergeOptions<'a>,
) -> Merge<'a> {
    let write = |m: &Merge<'_>| {
        let mut text = Vec::new();
        write_text(m, &mut text);
        let mut om = Vec::new();
        let om_stats = write_openmetrics(m, &mut om);
        (m.stats().to_vec(), text, om, om_stats)
    };
    let one = write(&merge::merge_with(sources, opts, merge::Tables::One));
    let per_family = write(&merge::merge_with(sources, opts, merge::Tables::PerFamily));
    assert!(
        one == per_family,
        "one duplicate table and one per family disagree:\n{}\n---\n{}",
        String::from_utf8_lossy(&one.1),
        String::from_utf8_lossy(&per_family.1)
    );
    let m = merge(sources, opts);
    assert!(write(&m) == one, "merge() gives what both ways give");
    m
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn rule1_interleaved_families_come_out_once_and_contiguous() {
    let input = "# HELP vllm:a A\n# TYPE vllm:a gauge\nvllm:a{x=\"1\"} 1\n# TYPE vllm:b gauge\nvllm:b 2\nvllm:a{x=\"2\"} 3\n# HELP vllm:a A again\n";
    let (out, stats) = run(&[up(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# HELP vllm:a A",
            "# TYPE vllm:a gauge",
            "vllm:a{x=\"1\"} 1",
            "vllm:a{x=\"2\"} 3",
            "# TYPE vllm:b gauge",
            "vllm:b 2"
        ]
    );
    assert_eq!(
        stats[0].0.malformed, 1,
        "the second HELP is dropped and counted"
    );
}

#[test]
fn rule2_kept_lines_are_byte_for_byte() {
    let input = "# HELP vllm:h Latency \\\\ with \\n escapes\n# TYPE vllm:h histogram\nvllm:h_bucket{le=\"0.07500000000000001\",model_name=\"m\"} 3.0 1700000000000\nvllm:h_bucket{le=\"+Inf\",model_name=\"m\"} 5.0\nvllm:h_count{model_name=\"m\"} 5.0\nvllm:h_sum{model_name=\"m\"} 1e+06\n";
    let (out, _) = run(&[up(input, &["vllm:"])], &[]);
    assert_eq!(out, input);
}

#[test]
fn rule2_text_format_edge_cases_are_read_exactly() {
    let input = "vllm:x{a=\"q\\\"u,o=t}e#\\\\\\n\"} NaN\r\n\r\n# a comment\r\n   \nvllm:y +Inf -5\nvllm:z -Inf";
    let (out, stats) = run(&[up(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "vllm:x{a=\"q\\\"u,o=t}e#\\\\\\n\"} NaN",
            "vllm:y +Inf -5",
            "vllm:z -Inf"
        ]
    );
    assert_eq!(stats[0].0.kept, 3);
    assert_eq!(stats[0].0.malformed, 0);
}

#[test]
fn rule2_non_canonical_spacing_is_normalised_not_lost() {
    let input = "vllm:x { b = \"2\" , a=\"1\", }   7  \t 123 \n";
    let (out, _) = run(&[up(input, &["vllm:"])], &[]);
    assert_eq!(out, "vllm:x{b=\"2\",a=\"1\"} 7 123\n");
}

#[test]
fn a_sample_is_32_bytes() {
    // A 16 MiB body has some 130,000 kept samples; this is most of what parsing holds.
    assert_eq!(std::mem::size_of::<Sample>(), 32);
}

#[test]
fn lines_longer_than_64_kib_and_timestamps_keep_every_part() {
    // Offsets past u16 and timestamps go to the exposition's side table; mixed with short
    // lines, in and out of canonical form, with and without an added label.
    let v = "y".repeat(70_000);
    let input = format!(
        "vllm:a{{x=\"{v}\"}} 1\nvllm:a{{x=\"s\"}} 2 1700000000000\nvllm:a{{x=\"t\"}} 3\nvllm:a {{ x=\"{v}z\" }} 4 5\nvllm:b{{x=\"{v}\"}} 6 7\n"
    );
    let (out, stats) = run(&[up(&input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            format!("vllm:a{{x=\"{v}\"}} 1"),
            "vllm:a{x=\"s\"} 2 1700000000000".to_string(),
            "vllm:a{x=\"t\"} 3".to_string(),
            format!("vllm:a{{x=\"{v}z\"}} 4 5"),
            format!("vllm:b{{x=\"{v}\"}} 6 7"),
        ]
    );
    assert_eq!(stats[0].0.kept, 5);
    let added = [AddedLabel::new("pod", "p")];
    let (out, _) = run(&[up(&input, &["vllm:"])], &added);
    assert_eq!(
        lines(&out)[3..],
        [
            format!("vllm:a{{x=\"{v}z\",pod=\"p\"}} 4 5"),
            format!("vllm:b{{x=\"{v}\",pod=\"p\"}} 6 7"),
        ]
    );
    let long =
        format!("# TYPE vllm:c counter\nvllm:c_total{{x=\"{v}\"}} 1 # {{t=\"{v}\"}} 0.5\n# EOF\n");
    let (out, _) = run_om(&[om(&long, &["vllm:"])]);
    let want = format!("vllm:c_total{{x=\"{v}\"}} 1 # {{t=\"{v}\"}} 0.5");
    assert!(lines(&out).contains(&want.as_str()), "exemplar kept");
}

#[test]
fn keep_prefixes_are_family_aware() {
    let input = "# TYPE foo histogram\nfoo_bucket{le=\"1\"} 1\nfoo_count 1\nfoo_sum 1\n# TYPE foo_b gauge\nfoo_b 2\n";
    let (out, stats) = run(&[up(input, &["foo_b"])], &[]);
    assert_eq!(lines(&out), ["# TYPE foo_b gauge", "foo_b 2"]);
    assert_eq!(stats[0].0.dropped, 3);
}

#[test]
fn an_upstream_cannot_inject_sysport_series() {
    let input = "# TYPE dynamo_sysport_upstream_up gauge\ndynamo_sysport_upstream_up{upstream=\"x\"} 1\ndynamo_sysport_x 1\n# TYPE dynamo_sysport counter\ndynamo_other 1\n";
    let (out, stats) = run(&[up(input, &["dynamo_", ""])], &[]);
    // `dynamo_sysport` itself is not under the reserved `dynamo_sysport_` prefix.
    assert_eq!(
        lines(&out),
        ["# TYPE dynamo_sysport counter", "dynamo_other 1"]
    );
    assert_eq!(stats[0].0.dropped, 2);
    let om = "# TYPE dynamo_sysport counter\ndynamo_sysport_total 1\n# EOF\n";
    let (out, _) = run(
        &[Up {
            body: om.as_bytes(),
            format: Format::OpenMetrics,
            keep: &["dynamo"],
        }],
        &[],
    );
    assert_eq!(
        out, "",
        "an OpenMetrics counter must not become dynamo_sysport_total"
    );
}

#[test]
fn a_body_with_only_reserved_samples_out_of_order_parses() {
    // The samples of an OpenMetrics counter `dynamo_sysport` are all dropped as reserved; they
    // were once sorted by family as if one were left.
    let om = "# TYPE dynamo_sysport counter\ndynamo_sysport_total 1\ndynamo_sysport_created 1\ndynamo_sysport_total{a=\"1\"} 1\n# EOF\n";
    let e = parse_one(
        &Up {
            body: om.as_bytes(),
            format: Format::OpenMetrics,
            keep: &["dynamo"],
        },
        &[],
        LIMITS,
    )
    .expect("parses");
    assert!(e.all_samples().is_empty());
    assert!(e.families().is_empty());
    assert_eq!(e.stats().dropped, 3);
}

#[test]
fn rule4_same_family_from_two_upstreams_merges_under_one_header() {
    let a = "# HELP vllm:r Running.\n# TYPE vllm:r gauge\nvllm:r{engine=\"0\"} 1\n";
    let b = "# HELP vllm:r Other help.\n# TYPE vllm:r gauge\nvllm:r{engine=\"1\"} 2\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# HELP vllm:r Running.",
            "# TYPE vllm:r gauge",
            "vllm:r{engine=\"0\"} 1",
            "vllm:r{engine=\"1\"} 2"
        ]
    );
    assert_eq!(stats[1].1.kept, 1);
}

#[test]
fn rule4_duplicates_are_found_whatever_order_the_upstreams_list_families_in() {
    let a = "vllm:b{x=\"1\"} 1\nvllm:a{x=\"1\"} 2\n";
    let b = "vllm:a{x=\"1\"} 3\nvllm:a{x=\"2\"} 4\nvllm:b{x=\"1\"} 5\nvllm:b{x=\"2\"} 6\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "vllm:b{x=\"1\"} 1",
            "vllm:b{x=\"2\"} 6",
            "vllm:a{x=\"1\"} 2",
            "vllm:a{x=\"2\"} 4",
        ]
    );
    assert_eq!((stats[1].1.kept, stats[1].1.duplicate), (2, 2));
}

#[test]
fn rule4_a_sample_name_two_families_share_is_still_deduplicated() {
    // `vllm:x_count` is a sample of the histogram `vllm:x` in one upstream and a gauge family
    // of its own in the other: the same series, written once.
    let a = "# TYPE vllm:x histogram\nvllm:x_bucket{le=\"+Inf\"} 1\nvllm:x_count 1\nvllm:x_sum 2\n";
    let b = "# TYPE vllm:x_count gauge\nvllm:x_count 1\nvllm:x_count{y=\"1\"} 3\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:x histogram",
            "vllm:x_bucket{le=\"+Inf\"} 1",
            "vllm:x_count 1",
            "vllm:x_sum 2",
            "# TYPE vllm:x_count gauge",
            "vllm:x_count{y=\"1\"} 3",
        ]
    );
    assert_eq!((stats[0].1.kept, stats[0].1.duplicate), (3, 0));
    assert_eq!((stats[1].1.kept, stats[1].1.duplicate), (1, 1));
}

#[test]
fn rule4_type_conflict_keeps_the_first_and_counts_the_other() {
    let a = "# TYPE vllm:r gauge\nvllm:r 1\n";
    let b = "# TYPE vllm:r counter\nvllm:r 2\nvllm:r{x=\"1\"} 3\n# TYPE vllm:s gauge\nvllm:s 4\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:r gauge",
            "vllm:r 1",
            "# TYPE vllm:s gauge",
            "vllm:s 4"
        ]
    );
    assert_eq!(stats[1].1.conflict, 2);
    assert_eq!(stats[1].1.kept, 1);
}

#[test]
fn rule4_exact_duplicate_series_is_dropped_and_counted() {
    let a = "# TYPE vllm:r gauge\nvllm:r{a=\"1\",b=\"2\"} 1\n";
    let b = "# TYPE vllm:r gauge\nvllm:r{b=\"2\",a=\"1\"} 9\nvllm:r{a=\"1\",b=\"3\"} 2\nvllm:r{a=\"1\",b=\"3\"} 2\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:r gauge",
            "vllm:r{a=\"1\",b=\"2\"} 1",
            "vllm:r{a=\"1\",b=\"3\"} 2"
        ]
    );
    assert_eq!(stats[1].1.duplicate, 2);
    assert_eq!(stats[0].1.kept + stats[1].1.kept, 2);
}

#[test]
fn rule4_duplicates_account_for_added_labels() {
    let a = "vllm:r{worker_id=\"w\"} 1\n";
    let b = "vllm:r 2\n";
    let added = [AddedLabel::new("worker_id", "w")];
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &added);
    assert_eq!(lines(&out), ["vllm:r{worker_id=\"w\"} 1"]);
    assert_eq!(stats[1].1.duplicate, 1);
}

#[test]
fn rule5_malformed_lines_are_dropped_and_the_rest_flows() {
    let input = "# TYPE vllm:g gauge\nvllm:g{a=\"1\"} 1\nvllm:g{a=\"2} 2\nvllm:g{a=\"3\"} x\nvllm:g{a=\"4\"} 4 5 6\n\u{1}\u{2}garbage\n{a=\"1\"} 3\nvllm:g{a=\"\\q\"} 5\nvllm:g{a=\"5\"} 5\n# TYPE vllm:g counter\n";
    let (out, stats) = run(&[up(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:g gauge",
            "vllm:g{a=\"1\"} 1",
            "vllm:g{a=\"5\"} 5"
        ]
    );
    assert_eq!(stats[0].0.malformed, 7);
    assert_eq!(stats[0].0.kept, 2);
}

#[test]
fn invalid_utf8_in_a_label_value_drops_only_that_line() {
    let mut input = b"vllm:g{a=\"".to_vec();
    input.extend_from_slice(&[0xff, 0xc3]);
    input.extend_from_slice(b"\"} 1\nvllm:g{a=\"ok\"} 2\n");
    let u = Up {
        body: &input,
        format: Format::Text,
        keep: &["vllm:"],
    };
    let e = parse_one(&u, &[], LIMITS).expect("parses");
    assert_eq!(e.stats().malformed, 1);
    assert_eq!(e.stats().kept, 1);
}

#[test]
fn rule5_the_first_malformed_line_is_kept_with_its_number_and_rule() {
    use Format::{OpenMetrics as Om, Text};
    let bad = |e| Rule::Line(e);
    for (body, format, line, rule) in [
        (
            "vllm:a 1\nvllm:b x\nvllm:c y\n",
            Text,
            2,
            bad(LineError::BadValue),
        ),
        (
            "vllm:a 1\n# TYPE 1x gauge\n",
            Text,
            2,
            bad(LineError::BadName),
        ),
        ("vllm:a{x=\"1} 1\n", Text, 1, bad(LineError::BadLabelSyntax)),
        ("-x 1\nvllm:a 1\n", Text, 1, bad(LineError::BadName)),
        (
            "# TYPE vllm:x counter\nvllm:x 1\n# EOF\n",
            Om,
            2,
            Rule::NameNotOfType,
        ),
        (
            "# HELP vllm:a A\n# HELP vllm:a B\n",
            Text,
            2,
            Rule::RepeatedHelp,
        ),
        ("# HELP vllm:a tab \\t\n", Text, 1, Rule::BadHelp),
        ("# TYPE vllm:a gauges\n", Text, 1, Rule::UnknownType),
        (
            "# TYPE vllm:a gauge\n# TYPE vllm:a counter\n",
            Text,
            2,
            Rule::RepeatedType,
        ),
        (
            "vllm:a 1\n# TYPE vllm:a gauge\n",
            Text,
            2,
            Rule::TypeAfterSamples,
        ),
        ("# UNIT vllm:a_seconds seconds\n", Text, 1, Rule::Unit),
        ("vllm:a 1\n# EOF\nvllm:b 2\n", Om, 3, Rule::AfterEof),
        ("vllm:a 1\n# EOF\n# EOF\n", Om, 3, Rule::RepeatedEof),
        // HELP and TYPE lines of families not kept are not counted, so not kept either.
        (
            "# HELP other A\n# HELP other B\nvllm:a x\n",
            Text,
            3,
            bad(LineError::BadValue),
        ),
    ] {
        let u = Up {
            body: body.as_bytes(),
            format,
            keep: &["vllm:"],
        };
        let stats = parse_one(&u, &[], LIMITS).expect("parses").stats();
        assert_eq!(
            stats.first_malformed,
            Some(Malformed { line, rule }),
            "{body:?}"
        );
    }
    let clean = parse_one(&up("vllm:a 1\n", &["vllm:"]), &[], LIMITS).expect("parses");
    assert_eq!(clean.stats().first_malformed, None);
    let first = Malformed {
        line: 12,
        rule: Rule::Line(LineError::BadValue),
    };
    assert_eq!(first.to_string(), "line 12: value is not a number");
}

#[test]
fn added_labels_are_appended_escaped_and_never_doubled() {
    let input =
        "vllm:a 1\nvllm:b{x=\"1\"} 2\nvllm:c{pod=\"mine\",x=\"1\"} 3\nvllm:d{ x=\"1\" } 4 1000\n";
    let added = [
        AddedLabel::new("pod", "p\"0\\\n"),
        AddedLabel::new("ns", "default"),
    ];
    let (out, _) = run(&[up(input, &["vllm:"])], &added);
    assert_eq!(
        lines(&out),
        [
            "vllm:a{pod=\"p\\\"0\\\\\\n\",ns=\"default\"} 1",
            "vllm:b{x=\"1\",pod=\"p\\\"0\\\\\\n\",ns=\"default\"} 2",
            "vllm:c{pod=\"mine\",x=\"1\",ns=\"default\"} 3",
            "vllm:d{x=\"1\",pod=\"p\\\"0\\\\\\n\",ns=\"default\"} 4 1000",
        ]
    );
}

#[test]
fn limits_turn_the_upstream_away_before_memory_is_spent() {
    let long = format!("vllm:a{{x=\"{}\"}} 1\n", "y".repeat(2000));
    let small = ParseLimits {
        max_line_bytes: 1000,
        max_series: 2,
        max_families: 3,
        max_labels: 2,
        max_label_value_bytes: 100,
    };
    let err = parse_one(&up(&long, &["vllm:"]), &[], small).expect_err("line too long");
    assert_eq!(
        err,
        ParseError::TooLarge {
            limit: Limit::LineBytes,
            line: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "line 1: line longer than the max_line_bytes limit"
    );
    let many = "vllm:a 1\nvllm:b 1\nvllm:c 1\n";
    let err = parse_one(&up(many, &["vllm:"]), &[], small).expect_err("too many series");
    assert_eq!(
        err,
        ParseError::TooLarge {
            limit: Limit::Series,
            line: 3
        }
    );
    let labels = "vllm:a{a=\"1\",b=\"2\",c=\"3\"} 1\n";
    assert!(matches!(
        parse_one(&up(labels, &["vllm:"]), &[], small),
        Err(ParseError::TooLarge {
            limit: Limit::Labels,
            ..
        })
    ));
    let value = format!("vllm:a{{a=\"{}\"}} 1\n", "v".repeat(101));
    assert!(matches!(
        parse_one(&up(&value, &["vllm:"]), &[], small),
        Err(ParseError::TooLarge {
            limit: Limit::LabelValueBytes,
            ..
        })
    ));
    let names = "vllm:a 1\nvllm:b 1\nother_c 1\nvllm:d 1\n";
    assert_eq!(
        parse_one(
            &up(names, &["vllm:"]),
            &[],
            ParseLimits {
                max_series: 100,
                ..small
            }
        )
        .expect_err("too many names"),
        ParseError::TooLarge {
            limit: Limit::Families,
            line: 4
        },
        "every distinct name counts, kept or not"
    );
    // Dropped families do not count towards the series limit.
    let dropped = "other 1\nother 2\nother 3\nvllm:a 1\n";
    assert!(parse_one(&up(dropped, &["vllm:"]), &[], small).is_ok());
}

fn om<'a>(body: &'a str, keep: &'a [&'a str]) -> Up<'a> {
    Up {
        body: body.as_bytes(),
        format: Format::OpenMetrics,
        keep,
    }
}

#[test]
fn rule3_openmetrics_counter_created_never_becomes_total() {
    let input = "# HELP vllm:p Preemptions.\n# TYPE vllm:p counter\nvllm:p_total{e=\"0\"} 3.0\nvllm:p_created{e=\"0\"} 1.7e+09\nvllm:p_total{e=\"1\"} 4.0\nvllm:p_created{e=\"1\"} 1.8e+09\n# EOF\n";
    let (out, stats) = run(&[om(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# HELP vllm:p_total Preemptions.",
            "# TYPE vllm:p_total counter",
            "vllm:p_total{e=\"0\"} 3.0",
            "vllm:p_total{e=\"1\"} 4.0",
            "# HELP vllm:p_created Preemptions.",
            "# TYPE vllm:p_created gauge",
            "vllm:p_created{e=\"0\"} 1.7e+09",
            "vllm:p_created{e=\"1\"} 1.8e+09",
        ]
    );
    assert_eq!(stats[0].0.malformed, 0);
}

#[test]
fn rule3_escaped_openmetrics_names_are_recovered() {
    // prometheus_client renders `vllm:x` as `vllm_x_total` in OpenMetrics (client_python#1177).
    let input = "# HELP vllm:x X.\n# TYPE vllm:x counter\nvllm_x_total 3.0\nvllm_x_created 1.7e+09\n# HELP vllm:h H.\n# TYPE vllm:h histogram\nvllm_h_bucket{le=\"+Inf\"} 1.0\nvllm_h_count 1.0\nvllm_h_sum 0.5\n# TYPE vllm:g gauge\nvllm_g 2.0\n# EOF\n";
    let (out, stats) = run(&[om(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# HELP vllm:x_total X.",
            "# TYPE vllm:x_total counter",
            "vllm:x_total 3.0",
            "# HELP vllm:x_created X.",
            "# TYPE vllm:x_created gauge",
            "vllm:x_created 1.7e+09",
            "# HELP vllm:h H.",
            "# TYPE vllm:h histogram",
            "vllm:h_bucket{le=\"+Inf\"} 1.0",
            "vllm:h_count 1.0",
            "vllm:h_sum 0.5",
            "# TYPE vllm:g gauge",
            "vllm:g 2.0",
        ]
    );
    assert_eq!(stats[0].0.renamed, 6);
    assert_eq!(stats[0].0.dropped, 0);
}

#[test]
fn rule3_openmetrics_types_units_timestamps_and_exemplars() {
    let input = "# TYPE vllm:i info\nvllm:i_info{v=\"1\"} 1\n# TYPE vllm:u unknown\n# UNIT vllm:u seconds\nvllm:u 1 1700000000.5\n# TYPE vllm:b histogram\nvllm:b_bucket{le=\"+Inf\"} 2 # {trace_id=\"t\"} 0.1 1.6e9\n# EOF\n";
    let (out, _) = run(&[om(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:i_info gauge",
            "vllm:i_info{v=\"1\"} 1",
            "# TYPE vllm:u untyped",
            "vllm:u 1 1700000000500",
            "# TYPE vllm:b histogram",
            "vllm:b_bucket{le=\"+Inf\"} 2",
        ]
    );
}

#[test]
fn two_eofs_are_counted_and_nothing_after_them_is_lost() {
    let input = "# TYPE vllm:a gauge\nvllm:a 1\n# EOF\n# TYPE vllm:b gauge\nvllm:b 2\n# EOF\n";
    let (out, stats) = run(&[om(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:a gauge",
            "vllm:a 1",
            "# TYPE vllm:b gauge",
            "vllm:b 2"
        ]
    );
    assert_eq!(stats[0].0.malformed, 1);
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    let page = "# HELP vllm:a A gauge.\n# TYPE vllm:a gauge\nvllm:a 1\n";
    let bare = "vllm:b{x=\"y\"} 2\n";
    for body in [page, bare] {
        let with_bom = format!("\u{feff}{body}");
        let (out, stats) = run(&[up(&with_bom, &["vllm:"])], &[]);
        let (want, _) = run(&[up(body, &["vllm:"])], &[]);
        assert_eq!(out, want);
        assert_eq!(stats[0].0.malformed, 0, "{body}");
        assert_eq!(stats[0].0.kept, 1, "{body}");
    }
    let om_page = "\u{feff}# TYPE vllm:c counter\nvllm:c_total 3\n# EOF\n";
    let (out, stats) = run(&[om(om_page, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        ["# TYPE vllm:c_total counter", "vllm:c_total 3"]
    );
    assert_eq!(stats[0].0.malformed, 0);
    // Only at the very start: elsewhere it is a malformed line like any other.
    let (_, stats) = run(&[up("vllm:a 1\n\u{feff}vllm:b 2\n", &["vllm:"])], &[]);
    assert_eq!((stats[0].0.kept, stats[0].0.malformed), (1, 1));
}

#[test]
fn format_detection_reads_the_body_not_the_header() {
    assert_eq!(Format::detect(b"a 1\n# EOF\n"), Format::OpenMetrics);
    assert_eq!(Format::detect(b"a 1\n# EOF"), Format::OpenMetrics);
    assert_eq!(Format::detect(b"# EOF\n"), Format::OpenMetrics);
    // OpenMetrics requires `# EOF`: without it, a body is text 0.0.4 whatever it is labelled.
    assert_eq!(Format::detect(b"a 1\n"), Format::Text);
    assert_eq!(Format::detect(b""), Format::Text);
    assert_eq!(Format::detect(b"a{x=\"# EOF\"} 1\n"), Format::Text);
    assert_eq!(Format::detect(b"a 1\nb # EOF\n"), Format::Text);
    assert_eq!(
        Format::declared("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        Some(Format::OpenMetrics)
    );
    assert_eq!(
        Format::declared("Text/Plain;version=0.0.4"),
        Some(Format::Text)
    );
    assert_eq!(Format::declared("application/json"), None);
    assert_eq!(Format::declared(""), None);
}

#[test]
fn name_filter_selects_exact_families() {
    let input = "# TYPE vllm:a gauge\nvllm:a 1\n# TYPE vllm:ab gauge\nvllm:ab 2\n# TYPE vllm:c counter\nvllm:c 3\n";
    let exp = parse_one(&up(input, &["vllm:"]), &[], LIMITS).expect("parses");
    assert_eq!(
        selected(&exp, &["vllm:a", "vllm:c"], false),
        "# TYPE vllm:a gauge\nvllm:a 1\n# TYPE vllm:c counter\nvllm:c 3\n"
    );
}

/// The families of `exp` that `names` select, written as text or OpenMetrics.
fn selected(exp: &Exposition, names: &[&str], openmetrics: bool) -> String {
    let refs = [exp];
    let selection = Selection::new(names.iter().copied());
    let m = merge_checked(
        &refs,
        &MergeOptions {
            added: &[],
            names: Some(&selection),
            hasher: PairHasher::new(1),
        },
    );
    let mut out = Vec::new();
    if openmetrics {
        write_openmetrics(&m, &mut out);
    } else {
        write_text(&m, &mut out);
    }
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn name_filter_selects_a_counter_by_its_openmetrics_name_in_both_formats() {
    let text = "# HELP vllm:q_total Queries.\n# TYPE vllm:q_total counter\n\
                vllm:q_total{e=\"0\"} 3.0\n\
                # HELP vllm:q_created Queries.\n# TYPE vllm:q_created gauge\n\
                vllm:q_created{e=\"0\"} 1.7e+09\n\
                # TYPE vllm:qq gauge\nvllm:qq 1\n";
    let om = "# TYPE vllm:q counter\n# HELP vllm:q Queries.\n\
              vllm:q_total{e=\"0\"} 3.0\nvllm:q_created{e=\"0\"} 1.7e+09\n\
              # TYPE vllm:qq gauge\nvllm:qq 1\n# EOF\n";
    let want_text = "# HELP vllm:q_total Queries.\n# TYPE vllm:q_total counter\n\
                     vllm:q_total{e=\"0\"} 3.0\n\
                     # HELP vllm:q_created Queries.\n# TYPE vllm:q_created gauge\n\
                     vllm:q_created{e=\"0\"} 1.7e+09\n";
    let want_om = "# TYPE vllm:q counter\n# HELP vllm:q Queries.\n\
                   vllm:q_total{e=\"0\"} 3.0\nvllm:q_created{e=\"0\"} 1.7e+09\n";
    for (body, format) in [(text, Format::Text), (om, Format::OpenMetrics)] {
        let u = Up {
            body: body.as_bytes(),
            format,
            keep: &["vllm:"],
        };
        let exp = parse_one(&u, &[], LIMITS).expect("parses");
        for names in [&["vllm:q"][..], &["vllm:q_total"]] {
            assert_eq!(
                selected(&exp, names, false),
                want_text,
                "{format:?} {names:?}"
            );
            assert_eq!(selected(&exp, names, true), want_om, "{format:?} {names:?}");
        }
        assert_eq!(
            selected(&exp, &["vllm:q_created"], false),
            "# HELP vllm:q_created Queries.\n# TYPE vllm:q_created gauge\n\
             vllm:q_created{e=\"0\"} 1.7e+09\n",
            "{format:?}"
        );
    }
}

/// Every header names a family at most once, and every sample follows its own family's header.
fn assert_families_once_and_contiguous(out: &str) {
    let mut seen = std::collections::HashSet::new();
    let mut current = String::new();
    for line in out.lines() {
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            let name = rest.split(' ').next().expect("a name");
            if name != current {
                assert!(seen.insert(name.to_string()), "family {name} appears twice");
                current = name.to_string();
            }
            assert!(!line.starts_with("# HELP") || !out.contains(&format!("\n{line}\n{line}\n")));
        }
    }
}

#[test]
fn fixtures_keep_every_engine_sample_and_reparse_cleanly() {
    for name in FIXTURES {
        let body = fixture(name);
        let format = Format::detect(&body);
        let keep: &[&str] = &["vllm:", "lmcache:"];
        let (out, stats) = run(
            &[Up {
                body: &body,
                format,
                keep,
            }],
            &[],
        );
        let (p, m) = stats[0];
        assert!(p.kept > 0, "{name}: nothing kept");
        assert_eq!(m.duplicate + m.conflict, 0, "{name}");
        assert_families_once_and_contiguous(&out);
        // Every kept text line is in the input as it stands (rule 2).
        if format == Format::Text {
            let input = String::from_utf8_lossy(&body);
            let input_lines: std::collections::HashSet<&str> = input.lines().collect();
            for line in out.lines().filter(|l| !l.starts_with('#')) {
                assert!(
                    input_lines.contains(line),
                    "{name}: {line} is not an input line"
                );
            }
        }
        // The output reads back with no malformed line and the same samples.
        let again = parse_one(
            &Up {
                body: out.as_bytes(),
                format: Format::Text,
                keep,
            },
            &[],
            LIMITS,
        )
        .expect("reparses");
        assert_eq!(again.stats().malformed, 0, "{name}");
        assert_eq!(again.stats().kept, p.kept, "{name}");
        assert!(!out.contains("# EOF"));
        assert!(
            out.lines()
                .all(|l| l.starts_with("vllm") || l.starts_with("lmcache") || l.starts_with("# ")),
            "{name}"
        );
    }
}

#[test]
fn fixtures_drop_only_what_is_invalid() {
    let body = fixture("small.prom");
    let (_, stats) = run(
        &[up(std::str::from_utf8(&body).expect("utf-8"), &["vllm:"])],
        &[],
    );
    assert_eq!(stats[0].0.malformed, 0);
    assert!(stats[0].0.dropped > 0, "python_* and process_* are dropped");
    // The escaping=dots fixture carries one reserved `__` label name: that line alone goes.
    let dots = fixture("small.text_escaping-dots.prom");
    let (_, stats) = run(
        &[up(std::str::from_utf8(&dots).expect("utf-8"), &["vllm:"])],
        &[],
    );
    assert_eq!(stats[0].0.malformed, 1);
    // OpenMetrics with escaped names keeps as many samples as the text rendering of the same
    // registry, once `_created` samples (absent from text families) are accounted for.
    let text = fixture("small.prom");
    let om = fixture("small.openmetrics.txt");
    let (t_out, _) = run(
        &[up(std::str::from_utf8(&text).expect("utf-8"), &["vllm:"])],
        &[],
    );
    let (o_out, _) = run(
        &[Up {
            body: &om,
            format: Format::OpenMetrics,
            keep: &["vllm:"],
        }],
        &[],
    );
    let names = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().expect("name").to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&t_out), names(&o_out));
}

fn run_om(ups: &[Up<'_>]) -> (String, OpenMetricsStats) {
    let exps: Vec<Exposition> = ups
        .iter()
        .map(|u| parse_one(u, &[], LIMITS).expect("within limits"))
        .collect();
    let refs: Vec<&Exposition> = exps.iter().collect();
    let m = merge_checked(
        &refs,
        &MergeOptions {
            added: &[],
            names: None,
            hasher: PairHasher::new(99),
        },
    );
    let mut out = Vec::new();
    let stats = write_openmetrics(&m, &mut out);
    out.extend_from_slice(OPENMETRICS_EOF);
    (String::from_utf8(out).expect("utf-8"), stats)
}

#[test]
fn openmetrics_output_folds_created_per_metric_point() {
    let input = "# HELP vllm:p_total Preemptions \"now\".\n# TYPE vllm:p_total counter\nvllm:p_total{e=\"0\"} 3.0\nvllm:p_total{e=\"1\"} 4.0\n# HELP vllm:p_created Preemptions \"now\".\n# TYPE vllm:p_created gauge\nvllm:p_created{e=\"0\"} 1.7e+09\nvllm:p_created{e=\"1\"} 1.8e+09\n";
    let (out, stats) = run_om(&[up(input, &["vllm:"])]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:p counter",
            "# HELP vllm:p Preemptions \\\"now\\\".",
            "vllm:p_total{e=\"0\"} 3.0",
            "vllm:p_created{e=\"0\"} 1.7e+09",
            "vllm:p_total{e=\"1\"} 4.0",
            "vllm:p_created{e=\"1\"} 1.8e+09",
            "# EOF",
        ]
    );
    assert_eq!(stats, OpenMetricsStats::default());
}

#[test]
fn openmetrics_output_regroups_multiprocess_histograms() {
    // Multiprocess mode writes every `_sum` first; OpenMetrics needs each label set together.
    let input = "# TYPE vllm:h histogram\nvllm:h_sum{e=\"0\"} 1.5\nvllm:h_sum{e=\"1\"} 2.5\nvllm:h_bucket{e=\"0\",le=\"1.0\"} 1.0\nvllm:h_bucket{e=\"0\",le=\"+Inf\"} 2.0\nvllm:h_count{e=\"0\"} 2.0\nvllm:h_bucket{e=\"1\",le=\"1.0\"} 0.0\nvllm:h_bucket{e=\"1\",le=\"+Inf\"} 1.0\nvllm:h_count{e=\"1\"} 1.0\n";
    let (out, _) = run_om(&[up(input, &["vllm:"])]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:h histogram",
            "vllm:h_sum{e=\"0\"} 1.5",
            "vllm:h_bucket{e=\"0\",le=\"1.0\"} 1.0",
            "vllm:h_bucket{e=\"0\",le=\"+Inf\"} 2.0",
            "vllm:h_count{e=\"0\"} 2.0",
            "vllm:h_sum{e=\"1\"} 2.5",
            "vllm:h_bucket{e=\"1\",le=\"1.0\"} 0.0",
            "vllm:h_bucket{e=\"1\",le=\"+Inf\"} 1.0",
            "vllm:h_count{e=\"1\"} 1.0",
            "# EOF",
        ]
    );
}

#[test]
fn openmetrics_output_drops_what_it_cannot_express_and_counts_it() {
    let input = "# TYPE vllm:c counter\nvllm:c NaN\n# TYPE vllm:h histogram\nvllm:h_bucket{le=\"1\"} 1\nvllm:h_count 1\nvllm:h_sum 1\n# TYPE vllm:g gauge\nvllm:g NaN 1700000000000\n# TYPE vllm:u untyped\nvllm:u -Inf\n";
    let (out, stats) = run_om(&[up(input, &["vllm:"])]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:g gauge",
            "vllm:g NaN 1700000000.000",
            "# TYPE vllm:u unknown",
            "vllm:u -Inf",
            "# EOF"
        ]
    );
    assert_eq!(
        stats,
        OpenMetricsStats {
            dropped_families: 2,
            dropped_samples: 4
        }
    );
}

#[test]
fn openmetrics_round_trip_keeps_types_units_info_and_exemplars() {
    let input = "# TYPE vllm:i info\nvllm:i_info{v=\"1\"} 1\n# TYPE vllm:x_seconds counter\n# UNIT vllm:x_seconds seconds\nvllm:x_seconds_total 1 # {trace_id=\"t\"} 0.1\nvllm:x_seconds_created 1.7e9\n# TYPE state stateset\nstate{state=\"a\"} 1\n# TYPE vllm:gh gaugehistogram\nvllm:gh_bucket{le=\"+Inf\"} 2\nvllm:gh_gcount 2\nvllm:gh_gsum 3\n# EOF\n";
    let (out, stats) = run_om(&[om(input, &["vllm:", "state"])]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:i info",
            "vllm:i_info{v=\"1\"} 1",
            "# TYPE vllm:x_seconds counter",
            "# UNIT vllm:x_seconds seconds",
            "vllm:x_seconds_total 1 # {trace_id=\"t\"} 0.1",
            "vllm:x_seconds_created 1.7e9",
            "# TYPE state stateset",
            "state{state=\"a\"} 1",
            "# TYPE vllm:gh gaugehistogram",
            "vllm:gh_bucket{le=\"+Inf\"} 2",
            "vllm:gh_gcount 2",
            "vllm:gh_gsum 3",
            "# EOF",
        ]
    );
    assert_eq!(stats, OpenMetricsStats::default());
}

#[test]
fn fixtures_as_openmetrics_reparse_with_every_sample() {
    for name in FIXTURES {
        let body = fixture(name);
        let format = Format::detect(&body);
        let keep: &[&str] = &["vllm:", "lmcache:"];
        let (text, stats) = run(
            &[Up {
                body: &body,
                format,
                keep,
            }],
            &[],
        );
        let (om_out, om_stats) = run_om(&[Up {
            body: &body,
            format,
            keep,
        }]);
        assert!(
            om_out.ends_with("\n# EOF\n") && om_out.matches("# EOF").count() == 1,
            "{name}"
        );
        assert!(!om_out.contains("\n\n"), "{name}: blank line");
        let again = parse_one(
            &Up {
                body: om_out.as_bytes(),
                format: Format::OpenMetrics,
                keep,
            },
            &[],
            LIMITS,
        )
        .expect("reparses");
        assert_eq!(again.stats().malformed, 0, "{name}");
        assert_eq!(
            again.stats().kept + om_stats.dropped_samples,
            stats[0].0.kept,
            "{name}: {om_stats:?}"
        );
        // Re-rendered as text, the OpenMetrics output gives back the text output.
        let (text_again, _) = run(
            &[Up {
                body: om_out.as_bytes(),
                format: Format::OpenMetrics,
                keep,
            }],
            &[],
        );
        if om_stats.dropped_samples == 0 {
            let sorted = |s: &str| {
                let mut v: Vec<String> = s
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .map(str::to_string)
                    .collect();
                v.sort();
                v
            };
            assert_eq!(sorted(&text_again), sorted(&text), "{name}");
        }
    }
}

#[test]
fn a_sample_its_declared_type_cannot_carry_is_malformed() {
    // OpenMetrics counter `x` has samples `x_total`/`x_created`; a bare `x` contradicts its TYPE.
    let input = "# TYPE vllm:x counter\nvllm:x 1\nvllm:x_total 2\n# TYPE vllm:h histogram\nvllm:h 3\n# EOF\n";
    let (out, stats) = run(&[om(input, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:x_total counter",
            "vllm:x_total 2",
            "# TYPE vllm:h histogram"
        ]
    );
    assert_eq!(stats[0].0.malformed, 2);
}

#[test]
fn rule4_a_histogram_from_two_upstreams_is_kept_whole_from_the_first() {
    let a = "# TYPE vllm:h histogram\nvllm:h_bucket{le=\"1\"} 1\nvllm:h_bucket{le=\"+Inf\"} 2\nvllm:h_count 2\nvllm:h_sum 3\n";
    let b = "# TYPE vllm:h histogram\nvllm:h_bucket{le=\"0.5\"} 5\nvllm:h_bucket{le=\"+Inf\"} 7\nvllm:h_count 7\nvllm:h_sum 9\nvllm:h_bucket{e=\"1\",le=\"+Inf\"} 1\nvllm:h_count{e=\"1\"} 1\nvllm:h_sum{e=\"1\"} 1\n";
    let (out, stats) = run(&[up(a, &["vllm:"]), up(b, &["vllm:"])], &[]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:h histogram",
            "vllm:h_bucket{le=\"1\"} 1",
            "vllm:h_bucket{le=\"+Inf\"} 2",
            "vllm:h_count 2",
            "vllm:h_sum 3",
            "vllm:h_bucket{e=\"1\",le=\"+Inf\"} 1",
            "vllm:h_count{e=\"1\"} 1",
            "vllm:h_sum{e=\"1\"} 1",
        ]
    );
    assert_eq!(stats[1].1.duplicate, 4);
    assert_eq!(stats[1].1.kept, 3);
    let (om_out, om_stats) = run_om(&[up(a, &["vllm:"]), up(b, &["vllm:"])]);
    assert_eq!(om_stats, OpenMetricsStats::default());
    assert_eq!(om_out.matches("vllm:h_count").count(), 2);
}

#[test]
fn an_invalid_stateset_is_written_as_the_gauge_it_is_in_text() {
    // prometheus_client escapes an Enum's state label `vllm:x` to `vllm_x` in OpenMetrics.
    let input =
        "# TYPE vllm:x stateset\nvllm_x{vllm_x=\"a\"} 1.0\nvllm_x{vllm_x=\"b\"} 0.0\n# EOF\n";
    let (out, stats) = run_om(&[om(input, &["vllm:"])]);
    assert_eq!(
        lines(&out),
        [
            "# TYPE vllm:x gauge",
            "vllm:x{vllm_x=\"a\"} 1.0",
            "vllm:x{vllm_x=\"b\"} 0.0",
            "# EOF"
        ]
    );
    assert_eq!(stats, OpenMetricsStats::default());
}
