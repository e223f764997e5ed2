//! What the crate's tests share: limits no test input reaches, and the engine pages of the
//! repository's `tests/fixtures/` that the parse, merge and write tests read.

use crate::parse::ParseLimits;

pub(crate) const LIMITS: ParseLimits = ParseLimits {
    max_line_bytes: 1 << 20,
    max_series: 100_000,
    max_families: 10_000,
    max_labels: 64,
    max_label_value_bytes: 1 << 20,
};

pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) const FIXTURES: &[&str] = &[
    "small.prom",
    "small.openmetrics.txt",
    "small.openmetrics_allow-utf-8.txt",
    "small.text_escaping-dots.prom",
    "small_multiproc.prom",
    "medium.prom",
    "medium.openmetrics.txt",
    "medium_multiproc.prom",
    "medium_multiproc_gauge_all_pid.prom",
    "edge_weird_labels_nan.prom",
    "edge_weird_labels_nan.openmetrics_allow-utf-8.txt",
    "legacy_deprecated_offload.prom",
    "dynamo_worker_mixed.prom",
    "huge_info_label.prom",
    "dynamo-1.6.1-system-port.txt",
];
