//! One `/metrics` page: the engine families merged and written once per set of fetches (shared
//! by the requests that wait for them), sysport's own families after them, and the age headers.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;

use super::app::{App, Runtime};
use super::gzip::{self, Deflated};
use super::held::hold;
use super::negotiate::Exposition;
use super::parts::Parts;
use super::render::{RenderKey, Rendered, Sources};
use crate::expfmt::{self, Format, MergeOptions, Output, ParseLimits, ParseOptions, Selection};
use crate::scrape::Scraped;
use crate::views;

/// Below this, a response is copied into one buffer and sent in one write; above it, its runs
/// (mostly the upstream bodies themselves) are written as they are.
const SINGLE_WRITE_BYTES: usize = 64 << 10;

/// The `/metrics` answer to one scrape of the upstreams `which`: the engine families (one
/// rendering shared by every request of the same fetches when the whole page is asked for),
/// then sysport's own, with the content type and the age headers; gzip when `gzip` (the engine
/// part compressed once per shared rendering, see `gzip`). Every byte it holds is charged to
/// the answers' ledger until it has been written.
#[allow(clippy::too_many_arguments)]
pub(super) async fn response(
    app: &App,
    runtime: &Runtime,
    which: &[usize],
    scraped: &[Scraped],
    selection: Option<&Selection>,
    format: Exposition,
    gzip: bool,
    started: Instant,
) -> Response {
    let openmetrics = format.is_openmetrics();
    // The shared rendering stays findable as long as an answer made from it is being written.
    let mut shared = None;
    let engines = match selection {
        Some(s) => {
            let runs = render_engines(app, runtime, which, scraped, Some(s), openmetrics);
            match gzip {
                true => Engines::Gzip(Deflated::of(&runs)),
                false => Engines::Plain(runs),
            }
        }
        None => {
            // Scrapers that share a fetch share its rendering too: one merge and one output
            // buffer however many of them wait (Prometheus HA pairs, load tests).
            let key = RenderKey {
                generations: scraped.iter().map(|s| s.generation).collect(),
                openmetrics,
            };
            let sources = Sources {
                runtime: runtime.id,
                which: which.to_vec(),
                bodies: scraped
                    .iter()
                    .map(|s| s.result.as_ref().ok().map(|p| p.parsed.body().clone()))
                    .collect(),
            };
            let cell = app.render.cell(key, &sources);
            let rendered = cell
                .get_or_init(|| async {
                    let runs = render_engines(app, runtime, which, scraped, None, openmetrics);
                    let held = app.held.charge(runs.iter().map(Bytes::len).sum());
                    Rendered::new(runs, sources, Some(held))
                })
                .await;
            let engines = match gzip {
                true => {
                    let deflated = rendered.gzip.get_or_init(|| {
                        let d = Deflated::of(&rendered.runs);
                        let held = app.held.charge(d.data.len());
                        (d, held)
                    });
                    Engines::Gzip(deflated.0.clone())
                }
                false => Engines::Plain(rendered.runs.clone()),
            };
            shared = Some(cell.clone());
            engines
        }
    };
    let now = Instant::now();
    // Rendered after the engine merge, so the series counts it records are this scrape's.
    let own = if wants_own(selection) {
        render_own(app, runtime, selection, openmetrics, now)
    } else {
        no_own(openmetrics)
    };
    let parts: Vec<Bytes> = match (engines, shared) {
        // A shared rendering: the answer's last run holds it (and its charge) until written.
        (Engines::Plain(runs), Some(cell)) => {
            let own = hold(own, cell);
            runs.iter().cloned().chain([own]).collect()
        }
        (Engines::Gzip(d), Some(cell)) => {
            let tail = hold(Bytes::from(d.finish_with(&own)), cell);
            vec![gzip::header(), d.data.clone(), tail]
        }
        // A selective read's own rendering: charged for this answer alone, held by its last run.
        (engines, None) => {
            let mut parts = match engines {
                Engines::Plain(runs) => runs.iter().cloned().chain([own]).collect(),
                Engines::Gzip(d) => {
                    let tail = Bytes::from(d.finish_with(&own));
                    vec![gzip::header(), d.data, tail]
                }
            };
            // An empty run is not sent, so it could not hold the charge.
            parts.retain(|p: &Bytes| !p.is_empty());
            let total = parts.iter().map(Bytes::len).sum();
            if let Some(last) = parts.pop() {
                parts.push(hold(last, app.held.charge(total)));
            }
            parts
        }
    };
    let mut r = Response::new(body(parts));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, format.content_type());
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    set_age(h, scraped, started, now);
    r
}

/// The engine part of an answer, as it goes out.
enum Engines {
    Plain(Arc<[Bytes]>),
    Gzip(Deflated),
}

/// The response body of runs: one buffer for a small answer, else the runs (mostly the
/// upstream bodies themselves) as they are.
fn body(parts: Vec<Bytes>) -> Body {
    let len = parts.iter().map(Bytes::len).sum::<usize>();
    if len < SINGLE_WRITE_BYTES {
        Body::from(parts.concat())
    } else {
        Body::new(Parts::new(parts))
    }
}

/// Merges and writes the engine families of one scrape (no `# EOF`), in text mostly as runs of
/// the upstream bodies. Without a name filter it also records each upstream's series counts.
fn render_engines(
    app: &App,
    runtime: &Runtime,
    which: &[usize],
    scraped: &[Scraped],
    names: Option<&Selection>,
    openmetrics: bool,
) -> Arc<[Bytes]> {
    // Renamed families under their other names (`aliases: true`) go after every upstream's
    // own, so the per-upstream counts below stay in step with the upstreams.
    let aliases = match names {
        None => views::aliases(&runtime.scraper, which, scraped),
        Some(_) => views::Aliases::default(),
    };
    // Each upstream's page as its rules leave it (one part or two), and whose each part is.
    let (mut engines, owners): (Vec<&expfmt::Exposition>, Vec<usize>) = which
        .iter()
        .zip(scraped)
        .filter_map(|(&i, s)| Some((i, s.result.as_ref().ok()?)))
        .flat_map(|(i, page)| page.served.iter().map(move |part| (&**part, i)))
        .unzip();
    engines.extend(&aliases.expositions);
    let opts = MergeOptions {
        added: runtime.scraper.added_labels(),
        names,
        hasher: runtime.scraper.hasher(),
    };
    let count = |stats: &[expfmt::MergeStats]| {
        if names.is_none() {
            count_series(runtime, &owners, stats, &aliases.counts);
        }
    };
    let to = Output::new(openmetrics, false);
    if openmetrics {
        let written = expfmt::merge_write::<Vec<u8>>(&engines, &opts, to);
        count(written.merge.stats());
        let stats = written.openmetrics;
        if stats.dropped_samples > 0 {
            app.telemetry
                .openmetrics_dropped
                .inc_by(stats.dropped_samples);
            tracing::debug!(
                families = stats.dropped_families,
                "families OpenMetrics cannot express were left out"
            );
        }
        Arc::new([Bytes::from(written.out)])
    } else {
        let written = expfmt::merge_write::<expfmt::Pieces>(&engines, &opts, to);
        count(written.merge.stats());
        written.out.finish().into()
    }
}

/// Records each upstream's series counts of one full merge: `stats` per merged part, `owners`
/// the upstream of each part (an upstream's page is one part or two), `aliased` the series
/// added under renamed families' other names.
fn count_series(
    runtime: &Runtime,
    owners: &[usize],
    stats: &[expfmt::MergeStats],
    aliased: &[(usize, u64)],
) {
    let mut totals: Vec<(usize, expfmt::MergeStats)> = Vec::new();
    for (&i, stats) in owners.iter().zip(stats) {
        match totals.last_mut() {
            Some((last, total)) if *last == i => {
                total.kept += stats.kept;
                total.conflict += stats.conflict;
                total.duplicate += stats.duplicate;
            }
            _ => totals.push((i, *stats)),
        }
    }
    let added = |i: usize| aliased.iter().find(|&&(a, _)| a == i).map(|&(_, n)| n);
    for &(i, stats) in &totals {
        let merge = (stats.kept, stats.conflict, stats.duplicate);
        runtime.scraper.merged(i, Some(merge), added(i));
    }
    for &(i, n) in aliased {
        if !totals.iter().any(|&(t, _)| t == i) {
            runtime.scraper.merged(i, None, Some(n));
        }
    }
}

/// sysport's own metrics (the selected ones) in the response's format; ends the OpenMetrics
/// document.
fn render_own(
    app: &App,
    runtime: &Runtime,
    selection: Option<&Selection>,
    openmetrics: bool,
    now: Instant,
) -> Bytes {
    let mut text = Vec::with_capacity(16 << 10);
    let records = runtime.scraper.records();
    app.telemetry
        .render_text(selection, &records, now, &mut text);
    if !openmetrics {
        // The registry's text is already canonical text 0.0.4 with nothing to merge into it:
        // reading it back would give the same bytes (`own_text_reads_back_unchanged`).
        return Bytes::from(text);
    }
    read_back_own(text, openmetrics, runtime.scraper.hasher())
}

/// sysport's own metrics, read back like an upstream so that both output formats treat them
/// like any family.
fn read_back_own(text: Vec<u8>, openmetrics: bool, hasher: expfmt::PairHasher) -> Bytes {
    let keep = [String::from_utf8_lossy(expfmt::RESERVED_PREFIX).into_owned()];
    let opts = ParseOptions {
        keep: &keep,
        limits: ParseLimits::DERIVED,
        added_labels: &[],
        hasher,
        allow_reserved: true,
    };
    let to = Output::new(openmetrics, true);
    match expfmt::parse_merge_write::<Vec<u8>>(text.into(), Format::Text, &opts, &[], None, to) {
        Ok(written) => Bytes::from(written.out),
        Err(err) => {
            tracing::error!(error = %err, "could not read back sysport's own metrics");
            no_own(openmetrics)
        }
    }
}

/// The response's end without sysport's own families: `# EOF` in OpenMetrics, else nothing.
fn no_own(openmetrics: bool) -> Bytes {
    if openmetrics {
        Bytes::from_static(expfmt::OPENMETRICS_EOF)
    } else {
        Bytes::new()
    }
}

/// `Sysport-Age`: the age of the oldest upstream data in the response, in seconds with
/// millisecond precision (readers judge staleness at 50 ms scale); and HTTP's own `Age`
/// (whole seconds) when that data predates the request: it came from a fetch that an earlier
/// request made (`min_interval`).
pub(super) fn set_age(h: &mut HeaderMap, scraped: &[Scraped], started: Instant, now: Instant) {
    let age = scraped
        .iter()
        .filter(|s| s.result.is_ok())
        .map(|s| (now.saturating_duration_since(s.at), s.at < started))
        .max();
    if let Some((age, reused)) = age {
        if let Ok(v) = HeaderValue::from_str(&format!("{:.3}", age.as_secs_f64())) {
            h.insert(SYSPORT_AGE, v);
        }
        if reused {
            h.insert(header::AGE, HeaderValue::from(age.as_secs()));
        }
    }
}

/// Response header: seconds since the oldest upstream data in the response was fetched.
pub const SYSPORT_AGE: &str = "sysport-age";

/// Whether a read includes sysport's own families at all (they cost a registry walk).
fn wants_own(selection: Option<&Selection>) -> bool {
    selection.is_none_or(|s| s.selects_under(expfmt::RESERVED_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Telemetry;

    #[test]
    fn own_text_reads_back_unchanged() {
        let t = Telemetry::new();
        t.register_upstream("engine \"0\"\\n");
        let mut record = crate::model::UpstreamRecord::default();
        record.series.kept = 7;
        record.response_bytes = Some(1210);
        record.last_success = Some(Instant::now());
        t.render_duration
            .with_label_values(&["full"])
            .observe(0.0123);
        t.scrape_duration
            .with_label_values(&["engine \"0\"\\n"])
            .observe(2.5);
        let mut text = Vec::new();
        t.render_text(
            None,
            &[("engine \"0\"\\n", record)],
            Instant::now(),
            &mut text,
        );
        let back = read_back_own(text.clone(), false, expfmt::PairHasher::new(7));
        assert!(text.len() > 1000);
        assert_eq!(
            String::from_utf8_lossy(&back),
            String::from_utf8_lossy(&text)
        );
    }

    /// A scrape result fetched at `at`: a page, or a timeout.
    fn scraped(at: Instant, ok: bool) -> Scraped {
        use crate::relabel::Page;
        use crate::scrape::ScrapeError;
        Scraped {
            generation: 1,
            at,
            result: if ok {
                Ok(Arc::new(Page::unchanged(Arc::new(
                    expfmt::Exposition::empty(),
                ))))
            } else {
                Err(ScrapeError::Timeout(std::time::Duration::from_secs(1)))
            },
        }
    }

    #[test]
    fn ages_are_the_oldest_data_served_and_http_age_only_for_earlier_fetches() {
        let ms = std::time::Duration::from_millis;
        let t0 = Instant::now();
        let header =
            |h: &HeaderMap, name: &str| h.get(name).map(|v| v.to_str().expect("ascii").to_owned());
        // A fetch an earlier request made (min_interval), one made for this request, and an
        // older failure, which serves no data and has no age.
        let mut h = HeaderMap::new();
        let all = [
            scraped(t0 + ms(250), true),
            scraped(t0 + ms(1_600), true),
            scraped(t0, false),
        ];
        set_age(&mut h, &all, t0 + ms(1_500), t0 + ms(2_999));
        assert_eq!(header(&h, SYSPORT_AGE).as_deref(), Some("2.749"));
        assert_eq!(header(&h, "age").as_deref(), Some("2"));
        // Every fetch made for this request: no HTTP Age.
        let mut h = HeaderMap::new();
        set_age(&mut h, &all[1..2], t0 + ms(1_500), t0 + ms(1_850));
        assert_eq!(header(&h, SYSPORT_AGE).as_deref(), Some("0.250"));
        assert_eq!(header(&h, "age"), None);
        // No data: no age at all.
        let mut h = HeaderMap::new();
        set_age(&mut h, &all[2..], t0 + ms(1_500), t0 + ms(1_850));
        assert!(h.is_empty());
    }

    #[test]
    fn own_metrics_are_rendered_only_when_a_read_can_include_them() {
        let wants = |names: &[&str]| wants_own(Some(&Selection::new(names.iter().copied())));
        assert!(wants_own(None));
        assert!(wants(&["vllm:a", "dynamo_sysport_upstream_up"]));
        assert!(wants(&["dynamo_sysport_upstream_scrapes"]));
        assert!(!wants(&["vllm:a", "vllm:b"]));
        assert!(!wants(&["dynamo_sysportx"]));
        assert!(!wants(&[]));
    }
}
