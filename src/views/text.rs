//! The text a view writes, and reading it back as a page of its upstream.

use crate::config::UpstreamConfig;
use crate::expfmt::{self, Exposition, ParseLimits, ParseOptions};
use crate::scrape::Scraper;

/// `{name="value",...}` (values already escaped), or nothing without labels.
pub(super) fn write_pairs(pairs: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    if pairs.is_empty() {
        return;
    }
    out.push(b'{');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(k);
        out.extend_from_slice(b"=\"");
        out.extend_from_slice(v);
        out.push(b'"');
    }
    out.push(b'}');
}

/// Text sysport wrote from `upstream`'s page, read back like a page of that upstream.
pub(super) fn derived(text: Vec<u8>, upstream: &UpstreamConfig, scraper: &Scraper) -> Exposition {
    let added: Vec<&[u8]> = scraper.added_labels().iter().map(|a| a.name()).collect();
    let opts = ParseOptions {
        keep: &upstream.keep,
        limits: ParseLimits::DERIVED,
        added_labels: &added,
        hasher: scraper.hasher(),
        allow_reserved: false,
    };
    expfmt::parse(text.into(), expfmt::Format::Text, &opts).unwrap_or_else(|err| {
        tracing::error!(error = %err, upstream = %upstream.name, "could not read back a view");
        Exposition::empty()
    })
}
