//! One upstream's page from a fetched body: parsed with its `keep` prefixes and limits, then
//! relabelled by its rules.

use std::sync::Arc;

use super::error::ScrapeError;
use super::http::Fetched;
use super::shared::{Inner, UpstreamResult};
use crate::expfmt::{self, Exposition, ParseOptions};
use crate::relabel::{self, Page};

/// `parse`'s result, or an error if it panicked: a bug in the parser makes that upstream down
/// for this scrape instead of failing the request, and the fetch still ends (the requests
/// waiting on it get their answer, and the next one starts a fetch of its own).
pub(super) fn contained(parse: impl FnOnce() -> UpstreamResult) -> UpstreamResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(ScrapeError::Body(format!("parser failed: {what}")))
    })
}

/// Upstream `u`'s page from `fetched`, parsed after `prior` (its page of the last fetch).
pub(super) fn parse_for(
    inner: &Inner,
    u: usize,
    fetched: &Fetched,
    prior: Option<&Arc<Exposition>>,
) -> UpstreamResult {
    let added: Vec<&[u8]> = inner.added_names.iter().map(|n| n.as_slice()).collect();
    let opts = ParseOptions {
        keep: &inner.keep[u],
        limits: inner.limits.parse_limits(),
        added_labels: &added,
        hasher: inner.hasher,
        allow_reserved: false,
    };
    let exp = expfmt::parse_after(fetched.body.clone(), fetched.format, &opts, prior)?;
    let stats = exp.stats();
    // JSON or an HTML error page: every line malformed, nothing else. An empty body is an
    // empty exposition.
    if stats.kept == 0 && stats.dropped == 0 && stats.malformed > 0 && exp.families().is_empty() {
        return Err(ScrapeError::NotExposition {
            content_type: fetched.content_type.clone(),
            malformed: stats.malformed,
        });
    }
    let exp = Arc::new(exp);
    let page = match &inner.rules[u] {
        None => Page::unchanged(exp),
        Some(rules) => relabel::relabel(exp, rules, opts.limits, opts.hasher)?,
    };
    Ok(Arc::new(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parser_panic_is_that_upstreams_error() {
        let panicked = contained(|| panic!("index out of bounds"));
        match panicked {
            Err(e @ ScrapeError::Body(_)) => {
                assert_eq!(e.reason(), "body_error");
                assert_eq!(
                    e.to_string(),
                    "reading the response failed: parser failed: index out of bounds"
                );
            }
            other => panic!("expected a body error, got {other:?}"),
        }
        let fine = contained(|| Err(ScrapeError::Status(503)));
        assert!(matches!(fine, Err(ScrapeError::Status(503))));
    }
}
