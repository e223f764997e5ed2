//! Pages for tests of the modules that read numbers from them.

use crate::expfmt::{self, Exposition, Format, PairHasher, ParseLimits, ParseOptions};

/// `page` parsed as the scraper parses an upstream keeping `keep`.
pub(crate) fn parsed(page: &str, format: Format, keep: &[&str]) -> Exposition {
    let keep: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits: ParseLimits::DERIVED,
        added_labels: &[],
        hasher: PairHasher::new(1),
        allow_reserved: false,
    };
    expfmt::parse(page.as_bytes().to_vec().into(), format, &opts).expect("parses")
}
