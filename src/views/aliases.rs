//! `aliases: true`: a family the engine renamed is also served in the full `/metrics` under its
//! other name, so that dashboards, autoscalers and routers pinned to either name keep working
//! across the engine's deprecation window (vllm-project/production-stack #617). A page that
//! has both names already gets nothing added: never two copies of one name.

use crate::expfmt::Exposition;
use crate::scrape::{Scraped, Scraper};

use super::text::{derived, write_pairs};

/// The other names of one scrape's renamed families, to merge after the upstreams' pages.
#[derive(Debug, Default)]
pub struct Aliases {
    pub expositions: Vec<Exposition>,
    /// Per upstream with `aliases: true` that answered: the series added under other names.
    pub counts: Vec<(usize, u64)>,
}

/// The aliases of the upstreams `which` that have `aliases: true`.
pub fn aliases(scraper: &Scraper, which: &[usize], scraped: &[Scraped]) -> Aliases {
    let mut out = Aliases::default();
    for (&u, s) in which.iter().zip(scraped) {
        let upstream = &scraper.upstreams()[u];
        // The engine's page as parsed: aliases stand beside the engine's own names, whatever
        // `metric_relabel_configs` make of the page.
        let Ok(page) = &s.result else { continue };
        let exp = &page.parsed;
        if !upstream.aliases {
            continue;
        }
        let mut text = Vec::new();
        let added = write_aliases(exp, upstream.engine.preset(), &mut text);
        out.counts.push((u, added));
        if added > 0 {
            out.expositions.push(derived(text, upstream, scraper));
        }
    }
    out
}

/// Writes the families of `exp` that `preset` renamed under their other name, for each rename
/// of which the page has one side only; returns the number of series written.
pub(super) fn write_aliases(
    exp: &Exposition,
    preset: &crate::model::engine::Preset,
    out: &mut Vec<u8>,
) -> u64 {
    let text_name = |f: &crate::expfmt::Family| {
        let (base, suffix) = exp.family_name(f);
        String::from_utf8_lossy(&[base, suffix].concat()).into_owned()
    };
    let names: Vec<String> = exp.families().iter().map(text_name).collect();
    let mut written = 0;
    for (family, name) in exp.families().iter().zip(&names) {
        let Some((from, to)) = preset.rename_of(name) else {
            continue;
        };
        // Both sides present (the deprecation window): the engine serves both itself.
        if names
            .iter()
            .any(|n| preset.rename_of(n).is_some_and(|(f, _)| f == to))
        {
            continue;
        }
        let alias = format!("{to}{}", &name[from.len()..]);
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(alias.as_bytes());
        out.push(b' ');
        let start = out.len();
        if !exp.help_as_text(family, out) {
            out.truncate(start - b"# HELP ".len() - alias.len() - 1);
        } else {
            out.push(b'\n');
        }
        if family.typed {
            out.extend_from_slice(b"# TYPE ");
            out.extend_from_slice(alias.as_bytes());
            out.push(b' ');
            out.extend_from_slice(family.kind.text_name().as_bytes());
            out.push(b'\n');
        }
        for s in exp.samples(family) {
            let (a, b) = exp.sample_name(family, s);
            let sample = [a, b].concat();
            out.extend_from_slice(to.as_bytes());
            out.extend_from_slice(&sample[from.len().min(sample.len())..]);
            let pairs: Vec<(&[u8], &[u8])> = exp.label_pairs(s).collect();
            write_pairs(&pairs, out);
            out.push(b' ');
            out.extend_from_slice(exp.value_text(s));
            exp.timestamp_as_text(s, out);
            out.push(b'\n');
            written += 1;
        }
    }
    written
}
