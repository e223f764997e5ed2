//! Views: pages at `/metrics/<name>` made for one kind of reader, computed from the upstreams'
//! parsed pages.
//!
//! The built-in `router` view serves, for every upstream, the families its engine's endpoint
//! pickers read (see [`crate::model::engine`]), one series per family and remaining label set: copies
//! of one number (`pid`, `tp_rank`, ...) combined with `max`, then data-parallel ranks with the
//! family's operation. A family the engine renamed is served under both names, each made from
//! the other when the engine has only one. `views:` in the configuration adds more, or replaces
//! `router`.
//!
//! Each upstream's part is written as text, read back as an exposition and merged like the
//! upstreams of `/metrics`, so added labels, duplicates and both output formats are handled by
//! the same code.
//!
//! - `crate::numbers`: grouping the series of one family;
//!   `aliases`: renamed families under their other name in the full `/metrics`.

mod aliases;
pub(crate) mod config;
mod text;

pub use aliases::{Aliases, aliases};

use bytes::Bytes;

use crate::config::{Config, UpstreamConfig};
use crate::expfmt::{self, Exposition, MergeOptions, Output};
use crate::model::{Preset, ViewFamily};
use crate::scrape::{Scraped, Scraper};

use crate::numbers::{Labels, combine, escaped, find_family};

use self::text::{derived, write_pairs};

/// The name of the built-in view for endpoint pickers.
pub const ROUTER: &str = crate::model::engine::ROUTER_VIEW;

/// The views one configuration serves.
#[derive(Debug)]
pub struct Views {
    views: Vec<View>,
    /// The last rendering of each view and format, with the fetches it came from: pickers
    /// read far more often than the engine is fetched (`min_interval`), and every read of one
    /// fetch gets the same bytes.
    last: std::sync::Mutex<Vec<Rendered>>,
}

#[derive(Debug)]
struct Rendered {
    view: usize,
    openmetrics: bool,
    generations: Vec<u64>,
    body: Bytes,
}

#[derive(Debug)]
struct View {
    name: String,
    /// Per upstream, in configuration order: its families in this view.
    families: Vec<Vec<Wanted>>,
    /// The labels whose series are combined with each family's operation; `None`: each
    /// upstream engine's data-parallel rank labels.
    aggregate: Option<Vec<String>>,
}

/// One family of a view, as one upstream's page is searched for it.
#[derive(Debug, Clone)]
struct Wanted {
    family: ViewFamily,
    /// The family's other names on this engine (renamed, or in its other spelling such as
    /// `sglang_`): read when the page lacks the family's.
    others: Vec<String>,
    /// The family's label selection with each value escaped as a page writes it.
    select: Vec<(String, Vec<u8>)>,
}

impl Views {
    /// The built-in `router` view (unless the configuration defines its own) and the
    /// configured ones.
    pub fn new(config: &Config) -> Views {
        let mut views = Vec::with_capacity(config.views.len() + 1);
        if !config.views.iter().any(|v| v.name == ROUTER) {
            views.push(View {
                name: ROUTER.to_owned(),
                families: config
                    .upstreams
                    .iter()
                    .map(|u| {
                        let preset = u.engine.preset();
                        preset.router.iter().map(|f| wanted(f, preset)).collect()
                    })
                    .collect(),
                aggregate: None,
            });
        }
        for v in &config.views {
            views.push(View {
                name: v.name.clone(),
                families: config
                    .upstreams
                    .iter()
                    .map(|u| {
                        v.families
                            .iter()
                            .map(|f| wanted(f, u.engine.preset()))
                            .collect()
                    })
                    .collect(),
                aggregate: v.aggregate.clone(),
            });
        }
        Views {
            views,
            last: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The view served at `/metrics/<name>`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.views.iter().position(|v| v.name == name)
    }

    /// The names of the views, in the order they are served.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.views.iter().map(|v| v.name.as_str())
    }

    /// The name of view `v`.
    pub fn name(&self, v: usize) -> &str {
        &self.views[v].name
    }

    /// The upstreams a read of view `v` fetches (those whose prefixes could hold one of its
    /// families) and the family names to ask them for.
    pub fn wanted(
        &self,
        v: usize,
        may_hold: impl Fn(usize, &str) -> bool,
    ) -> (Vec<usize>, Vec<String>) {
        let mut which = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (u, families) in self.views[v].families.iter().enumerate() {
            let mut any = false;
            for f in families {
                for name in std::iter::once(&f.family.key.name).chain(&f.others) {
                    if may_hold(u, name) {
                        any = true;
                        if !names.contains(name) {
                            names.push(name.clone());
                        }
                    }
                }
            }
            if any {
                which.push(u);
            }
        }
        (which, names)
    }

    /// View `v` of one scrape of the upstreams `which` (text 0.0.4, or OpenMetrics with its
    /// `# EOF`), and how many series OpenMetrics could not express (counted once per fetch).
    pub fn render(
        &self,
        v: usize,
        scraper: &Scraper,
        which: &[usize],
        scraped: &[Scraped],
        openmetrics: bool,
    ) -> (Bytes, u64) {
        let generations: Vec<u64> = scraped.iter().map(|s| s.generation).collect();
        let mut last = self.last.lock().expect("view cache lock");
        let slot = last
            .iter()
            .position(|r| r.view == v && r.openmetrics == openmetrics);
        if let Some(i) = slot
            && last[i].generations == generations
        {
            return (last[i].body.clone(), 0);
        }
        let (body, dropped) = self.compute(v, scraper, which, scraped, openmetrics);
        let rendered = Rendered {
            view: v,
            openmetrics,
            generations,
            body: body.clone(),
        };
        match slot {
            Some(i) => last[i] = rendered,
            None => last.push(rendered),
        }
        (body, dropped)
    }

    fn compute(
        &self,
        v: usize,
        scraper: &Scraper,
        which: &[usize],
        scraped: &[Scraped],
        openmetrics: bool,
    ) -> (Bytes, u64) {
        let view = &self.views[v];
        let upstreams = scraper.upstreams();
        let parts: Vec<Exposition> = which
            .iter()
            .zip(scraped)
            // Views read the engine's page as parsed: their families and operations are their
            // own contract with the pickers, apart from `metric_relabel_configs`.
            .filter_map(|(&u, s)| Some((u, &s.result.as_ref().ok()?.parsed)))
            .map(|(u, exp)| {
                let mut text = Vec::with_capacity(1024);
                write_upstream(
                    &view.families[u],
                    view.aggregate.as_deref(),
                    &upstreams[u],
                    exp,
                    &mut text,
                );
                derived(text, &upstreams[u], scraper)
            })
            .collect();
        let sources: Vec<&Exposition> = parts.iter().collect();
        let opts = MergeOptions {
            added: scraper.added_labels(),
            names: None,
            hasher: scraper.hasher(),
        };
        let written =
            expfmt::merge_write::<Vec<u8>>(&sources, &opts, Output::new(openmetrics, true));
        (
            Bytes::from(written.out),
            written.openmetrics.dropped_samples,
        )
    }
}

fn wanted(f: &ViewFamily, preset: &Preset) -> Wanted {
    Wanted {
        family: f.clone(),
        others: preset.names_of(&f.key.name).split_off(1),
        select: f
            .key
            .select
            .iter()
            .map(|(k, v)| (k.clone(), escaped(k, v)))
            .collect(),
    }
}

/// One upstream's part of a view, as text 0.0.4.
fn write_upstream(
    families: &[Wanted],
    aggregate: Option<&[String]>,
    upstream: &UpstreamConfig,
    exp: &Exposition,
    out: &mut Vec<u8>,
) {
    let preset = upstream.engine.preset();
    let copies = preset.copy_labels();
    let ranks: Vec<&str> = match aggregate {
        Some(labels) => labels.iter().map(String::as_str).collect(),
        None => preset.rank_labels.to_vec(),
    };
    let labels = Labels {
        copies: &copies,
        ranks: &ranks,
    };
    for (i, f) in families.iter().enumerate() {
        // Families listed twice (Triton's selections of one family) are written together.
        if families[..i]
            .iter()
            .any(|g| g.family.key.name == f.family.key.name)
        {
            continue;
        }
        let Some(family) = std::iter::once(&f.family.key.name)
            .chain(&f.others)
            .find_map(|n| find_family(exp, n))
        else {
            continue;
        };
        let name = f.family.key.name.as_bytes();
        let start = out.len();
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(name);
        out.push(b' ');
        if exp.help_as_text(family, out) {
            out.push(b'\n');
        } else {
            out.truncate(start);
        }
        if family.typed {
            out.extend_from_slice(b"# TYPE ");
            out.extend_from_slice(name);
            out.push(b' ');
            out.extend_from_slice(family.kind.text_name().as_bytes());
            out.push(b'\n');
        }
        for g in families[i..]
            .iter()
            .filter(|g| g.family.key.name == f.family.key.name)
        {
            for series in combine(exp, family, &g.select, g.family.op, labels) {
                out.extend_from_slice(name);
                out.extend_from_slice(series.tail);
                write_pairs(&series.pairs, out);
                out.push(b' ');
                series.write_value(g.family.op, out);
                if let Some(sample) = series.sample {
                    exp.timestamp_as_text(sample, out);
                }
                out.push(b'\n');
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
