//! Fuzz target for the exposition lexer, merge and both writers.
//!
//! The exposition crate is pure (no I/O, three small dependencies), so the fuzz build stays small
//! and its debug assertions (the parser's invariants) are checked on every input. Checks: no panic; memory stays
//! within the parse limits; every output (text 0.0.4 and OpenMetrics) reads back with no
//! malformed line; text output keeps every sample the merge kept; a two-part parse (cut near a
//! point the input picks) gives exactly the one-pass result; so does a parse after a prior (the
//! input with one byte gone, as the page of the scrape before), in one pass and in two parts.
#![no_main]

use sysport_expfmt::{
    AddedLabel, Format, MergeOptions, OPENMETRICS_EOF, PairHasher, ParseLimits, ParseOptions, Pieces, Split,
    merge, parse, parse_after, parse_with, write_openmetrics, write_text,
};
use libfuzzer_sys::fuzz_target;

const LIMITS: ParseLimits =
    ParseLimits { max_line_bytes: 1 << 16, max_series: 20_000, max_families: 5_000, max_labels: 32, max_label_value_bytes: 1 << 12 };
const LOOSE: ParseLimits =
    ParseLimits { max_line_bytes: 1 << 20, max_series: 1 << 20, max_families: 1 << 20, max_labels: 64, max_label_value_bytes: 1 << 20 };

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let format = if selector & 1 == 0 { Format::Text } else { Format::OpenMetrics };
    let keep = [if selector & 2 == 0 { String::new() } else { "vllm:".to_string() }];
    let added = [AddedLabel::new("pod", "p\"\\\n1")];
    let added_names: Vec<&[u8]> = added.iter().map(AddedLabel::name).collect();
    let hasher = PairHasher::new(0x5eed);
    let opts = ParseOptions { keep: &keep, limits: LIMITS, added_labels: &added_names, hasher, allow_reserved: false };
    let body = bytes::Bytes::copy_from_slice(body);
    // Bits 2 to 7 of the selector: where to look for a cut, in 64ths of the body.
    let near = body.len() * (selector >> 2) as usize / 64;
    let parts = parse_with(body.clone(), format, &opts, Split::Near(near), None);
    let one = parse(body.clone(), format, &opts);
    assert_eq!(parts, one, "a two-part parse gives the one-pass result");
    let before: Vec<u8> = body.iter().enumerate().filter(|&(i, _)| i != near).map(|(_, &b)| b).collect();
    if let Ok(prior) = parse(before.into(), format, &opts) {
        let prior = std::sync::Arc::new(prior);
        let after = parse_after(body.clone(), format, &opts, Some(&prior));
        assert_eq!(after, one, "a parse after a prior gives the fresh result");
        let parts = parse_with(body.clone(), format, &opts, Split::Near(near), Some(&prior));
        assert_eq!(parts, one, "a two-part parse after a prior gives the fresh result");
    }
    let Ok(exp) = one else { return };
    let sources = [&exp];
    let m = merge(&sources, &MergeOptions { added: &added, names: None, hasher });
    let kept = m.stats()[0].kept;

    let mut text = Vec::with_capacity(m.size_hint());
    write_text(&m, &mut text);
    // Without added labels most lines go out as runs of the body: the same bytes either way.
    let plain = merge(&sources, &MergeOptions { added: &[], names: None, hasher });
    let mut copied = Vec::new();
    write_text(&plain, &mut copied);
    let mut pieces = Pieces::with_min_run(vec![exp.body().clone()], 1 + (selector as usize >> 2));
    write_text(&plain, &mut pieces);
    assert_eq!(pieces.finish().concat(), copied, "runs of the body write the same bytes as a copy");

    let mut om = Vec::with_capacity(m.size_hint());
    let om_stats = write_openmetrics(&m, &mut om);
    om.extend_from_slice(OPENMETRICS_EOF);

    let reread = ParseOptions { keep: &[String::new()], limits: LOOSE, added_labels: &[], hasher, allow_reserved: true };
    let text_again = parse(text.into(), Format::Text, &reread).expect("text output within limits");
    assert_eq!(text_again.stats().malformed, 0, "text output must read back cleanly");
    assert_eq!(text_again.stats().kept, kept, "text output keeps every merged sample");
    let om_again = parse(om.into(), Format::OpenMetrics, &reread).expect("OpenMetrics output within limits");
    assert_eq!(om_again.stats().malformed, 0, "OpenMetrics output must read back cleanly");
    assert_eq!(om_again.stats().kept + om_stats.dropped_samples, kept, "OpenMetrics keeps or counts every sample");
});
