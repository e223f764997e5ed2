use super::*;

fn opts(format: Format) -> LexOptions<'static> {
    LexOptions {
        format,
        max_labels: 64,
        max_label_value_bytes: 1 << 20,
        added: &[b"worker_id"],
        hasher: PairHasher::new(7),
    }
}

fn lex(line: &str) -> Result<SampleLex, LineError> {
    lex_in(line, Format::Text)
}

/// Lexing a line after others (reusing their pairs and names) gives what lexing it alone
/// gives, for lines that share prefixes ending anywhere: inside a name, inside a value, on
/// an escape, at a quote, with blanks, with a repeated name, with the added label.
#[test]
fn lines_lex_the_same_after_any_previous_line() {
    let blocks = [
        r#"engine="0",model_name="m",le="0.1""#,
        r#"engine="0",le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct""#,
        r#"engine="0",le="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct""#,
        r#"engine="1",le="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct""#,
        r#"engine="0",le = "0.25",model_name="meta-llama/Llama-3.1-8B-Instruct""#,
        r#"engine="0",lf="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct""#,
        r#"engine="0",le="0.25",model_name="meta-llama/Llama-3.1-8B-Instruct",x="1""#,
        r#"engine="0",model_name="m",le="0.25""#,
        r#"engine="0",model_name="m",le="+Inf""#,
        r#"engine="0",model_name="m""#,
        r#"engine="0",model_name="mm""#,
        r#"engine="0",model_name="m"",le="1""#,
        r#"engine="0",model_name="m\",le="1""#,
        r#"engine="0",model_name="m
""#,
        r#"engine="0",model_nam="m""#,
        r#"engine="0", model_name="m""#,
        r#"engine="0" ,model_name="m""#,
        r#"engine = "0",model_name="m""#,
        r#"engine="0",engine="1""#,
        r#"engine="0",worker_id="w",le="1""#,
        r#"engine="0",model_name="m","#,
        r#"engine="0",model_name="m",le="1",x="é""#,
        r#"engine="0",model_name="m",le="1",x="ÿ""#,
        r#"engine="0",model_name="m",__x="1""#,
        r#"engine="01""#,
        r#"engine="0""#,
        r#"engine="0"#,
        r#""#,
    ];
    let line = |b: &str, name: &str| format!("{name}{{{b}}} 1");
    let mut lines: Vec<String> = Vec::new();
    for a in blocks {
        for b in blocks {
            lines.push(line(a, "vllm:x_bucket"));
            lines.push(line(b, "vllm:x_count"));
        }
    }
    for format in [Format::Text, Format::OpenMetrics] {
        let o = opts(format);
        let mut shared = LabelScratch::default();
        let mut reused = 0;
        for l in &lines {
            let b = l.as_bytes();
            let n = metric_name_len(b);
            let alone = lex_sample(b, 0, n, &o, &mut LabelScratch::default());
            let after = lex_sample(b, 0, n, &o, &mut shared);
            assert_eq!(after, alone, "{l}");
            reused += usize::from(!shared.prev_pairs.is_empty() && alone.is_ok());
        }
        assert!(reused > lines.len() / 2);
    }
}

#[test]
fn too_many_labels_is_found_after_a_bad_name_and_before_a_bad_value() {
    let o = LexOptions {
        max_labels: 2,
        ..opts(Format::Text)
    };
    let mut shared = LabelScratch::default();
    for (line, want) in [
        (r#"m{a="1",b="2"} 1"#, None),
        (r#"m{a="1",b="2",1c="3"} 1"#, Some(LineError::BadLabelName)),
        (r#"m{a="1",b="2",a="3"} 1"#, Some(LineError::BadLabelName)),
        (r#"m{a="1",b="2",c="3"} 1"#, Some(LineError::TooManyLabels)),
        (r#"m{a="1",b="2",c="\q"} 1"#, Some(LineError::TooManyLabels)),
        (r#"m{a="1",b="\q"} 1"#, Some(LineError::BadEscape)),
    ] {
        let b = line.as_bytes();
        let after = lex_sample(b, 0, 1, &o, &mut shared);
        let alone = lex_sample(b, 0, 1, &o, &mut LabelScratch::default());
        assert_eq!(after, alone, "{line}");
        assert_eq!(alone.err(), want, "{line}");
    }
}

fn lex_in(line: &str, format: Format) -> Result<SampleLex, LineError> {
    let b = line.as_bytes();
    let n = metric_name_len(b);
    if n == 0 {
        return Err(LineError::BadName);
    }
    lex_sample(b, 0, n, &opts(format), &mut LabelScratch::default())
}

fn part(line: &str, r: (u32, u32)) -> &str {
    &line[r.0 as usize..r.1 as usize]
}

#[test]
fn sample_with_labels_value_and_timestamp() {
    let l = r#"vllm:x{a="1",b="2"} 3.5 1700000000000"#;
    let s = lex(l).expect("valid");
    assert_eq!(part(l, (s.name_start, s.name_end)), "vllm:x");
    assert_eq!(part(l, s.labels), r#"a="1",b="2""#);
    assert_eq!(part(l, s.value), "3.5");
    assert_eq!(part(l, s.timestamp), "1700000000000");
    assert!(s.canonical);
}

#[test]
fn label_values_may_hold_separators_and_escapes() {
    let l = r#"m{a="x,y=z}",b="q\"uo\\te\nnl # not a comment"} 1"#;
    let s = lex(l).expect("valid");
    assert_eq!(
        part(l, s.labels),
        r#"a="x,y=z}",b="q\"uo\\te\nnl # not a comment""#
    );
    assert_eq!(part(l, s.value), "1");
}

#[test]
fn invalid_escape_is_rejected() {
    assert_eq!(lex(r#"m{a="\t"} 1"#), Err(LineError::BadEscape));
}

#[test]
fn special_values() {
    for v in [
        "NaN", "+Inf", "-Inf", "Inf", "nan", "1e+06", "-0.5", ".5", "5.", "1E-3",
    ] {
        assert!(lex(&format!("m {v}")).is_ok(), "{v}");
    }
    for v in ["0x10", "1_000", "", "e5", "1e", "--1", "Infx", "+NaN"] {
        assert!(lex(&format!("m {v}")).is_err(), "{v}");
    }
}

#[test]
fn blanks_and_trailing_comma_are_accepted_but_not_canonical() {
    let s = lex("m { a = \"1\" , } \t 2  ").expect("valid");
    assert!(!s.canonical);
    assert_eq!(lex("m{a=\"1\",} 2").map(|s| s.canonical), Ok(false));
    assert_eq!(lex("m{} 2").map(|s| s.canonical), Ok(true));
}

#[test]
fn reserved_duplicate_and_bad_label_names() {
    assert_eq!(lex(r#"m{__name__="x"} 1"#), Err(LineError::BadLabelName));
    assert_eq!(lex(r#"m{a="1",a="2"} 1"#), Err(LineError::BadLabelName));
    assert_eq!(lex(r#"m{1a="1"} 1"#), Err(LineError::BadLabelName));
    assert_eq!(lex(r#"m{a:b="1"} 1"#), Err(LineError::BadLabelSyntax));
}

#[test]
fn unterminated_or_missing_pieces() {
    assert_eq!(lex(r#"m{a="1} 1"#), Err(LineError::BadLabelSyntax));
    assert_eq!(lex(r#"m{a="1""#), Err(LineError::BadLabelSyntax));
    assert_eq!(lex("m"), Err(LineError::BadValue));
    assert_eq!(lex("m 1 2 3"), Err(LineError::TrailingGarbage));
    assert_eq!(lex("m 1 1.5"), Err(LineError::BadTimestamp));
    assert_eq!(lex("m-x 1"), Err(LineError::BadName));
}

#[test]
fn timestamps_per_format() {
    assert!(lex_in("m 1 1.5", Format::OpenMetrics).is_ok());
    assert_eq!(
        lex_in("m 1 NaN", Format::OpenMetrics),
        Err(LineError::BadTimestamp)
    );
    assert!(lex("m 1 -12").is_ok());
}

#[test]
fn exemplars_only_in_openmetrics() {
    let l = r#"m_bucket{le="1"} 2 # {trace_id="abc"} 0.5 1.6e9"#;
    let s = lex_in(l, Format::OpenMetrics).expect("valid");
    assert_eq!(part(l, s.exemplar), r#"# {trace_id="abc"} 0.5 1.6e9"#);
    assert_eq!(part(l, s.value), "2");
    assert_eq!(lex(l), Err(LineError::TrailingGarbage));
}

#[test]
fn label_hash_ignores_order_and_tracks_added_labels() {
    let a = lex(r#"m{a="1",b="2"} 1"#).expect("valid");
    let b = lex(r#"m{b="2",a="1"} 1"#).expect("valid");
    let c = lex(r#"m{b="1",a="2"} 1"#).expect("valid");
    assert_eq!(a.labels_hash, b.labels_hash);
    assert_ne!(a.labels_hash, c.labels_hash);
    assert_eq!(lex(r#"m{worker_id="w"} 1"#).map(|s| s.present), Ok(1));
}

#[test]
fn label_pairs_reads_back_any_accepted_block() {
    let pairs: Vec<_> = label_pairs(br#" a = "x,\"y" , b="}" ,"#).collect();
    assert_eq!(
        pairs,
        vec![(&b"a"[..], &br#"x,\"y"#[..]), (&b"b"[..], &b"}"[..])]
    );
}

#[test]
fn invalid_utf8_is_rejected() {
    let line = b"m{a=\"\xff\xfe\"} 1";
    assert_eq!(
        lex_sample(
            line,
            0,
            1,
            &opts(Format::Text),
            &mut LabelScratch::default()
        ),
        Err(LineError::NotUtf8)
    );
}

#[test]
fn comments() {
    let l = "# HELP vllm:x Some \\\\ help\\n text ";
    match lex_comment(l.as_bytes(), 0) {
        Ok(Comment::Help { name, text }) => {
            assert_eq!(part(l, name), "vllm:x");
            assert_eq!(part(l, text), "Some \\\\ help\\n text ");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        lex_comment(b"# HELP m", 0),
        Ok(Comment::Help {
            name: (7, 8),
            text: (8, 8)
        })
    );
    assert!(matches!(
        lex_comment(b"# TYPE m counter", 0),
        Ok(Comment::Type { .. })
    ));
    assert_eq!(
        lex_comment(b"# TYPE m counter x", 0),
        Err(LineError::BadType)
    );
    assert_eq!(lex_comment(b"# EOF", 0), Ok(Comment::Eof));
    assert_eq!(lex_comment(b"# just a comment", 0), Ok(Comment::Other));
    assert_eq!(lex_comment(b"#HELP", 0), Ok(Comment::Other));
    assert!(valid_help(b"a \\\\ b \\n", Format::Text));
    assert!(!valid_help(b"a \\\" b", Format::Text));
    assert!(valid_help(b"a \\\" b", Format::OpenMetrics));
}
