//! Selective reads (`?name=`): asking the engine for the selected families only (`name[]`),
//! once a comparison with its full page has shown that it answers faithfully.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Budget;
use super::flight::fetch;
use super::shared::{Fetch, Inner};
use super::slot::{NameSet, Slot, Target};
use crate::expfmt::{Exposition, Selection};
use crate::model::{ShownUrl, Url};

/// At most this many selected name sets per target keep a slot of their own.
const MAX_NAME_SETS: usize = 8;

/// How long a check that the engine's selection (`name[]`) returns what the full page has
/// stays valid.
const SELECTION_CHECK_EVERY: Duration = Duration::from_secs(60);

/// A selective read of `target`: from the engine's own selection when it has been shown to agree
/// with the full page, else from the full page (and the comparison is made). `renames`: a rule
/// of one of its upstreams may rename series, which then come from families other than those
/// named, so only the full page has them.
pub(super) async fn fetch_selected(
    inner: &Arc<Inner>,
    target: &Arc<Target>,
    selection: &Selection,
    budget: Option<Budget>,
    renames: bool,
) -> Option<Arc<Fetch>> {
    let (slot, checked) = {
        let mut sets = target.name_sets.lock().expect("name sets lock");
        let set = match sets.iter().position(|s| s.selection == *selection) {
            Some(i) => sets.remove(i),
            None => NameSet {
                slot: Slot::new(selection_url(&target.full.url, selection), true),
                selection: selection.clone(),
                checked: None,
            },
        };
        let checked = set
            .checked
            .filter(|(at, _)| at.elapsed() < SELECTION_CHECK_EVERY)
            .map(|(_, agreed)| agreed);
        let slot = set.slot.clone();
        if sets.len() == MAX_NAME_SETS {
            sets.remove(0);
        }
        sets.push(set);
        (slot, checked)
    };
    match checked {
        _ if renames => fetch(inner, target, &target.full, budget).await,
        Some(true) => fetch(inner, target, &slot, budget).await,
        Some(false) => fetch(inner, target, &target.full, budget).await,
        None => {
            let (full, selected) = tokio::join!(
                fetch(inner, target, &target.full, budget),
                fetch(inner, target, &slot, budget)
            );
            if let Some(full) = &full
                && let Some(agreed) = selection_agrees(full, selected.as_deref(), selection)
            {
                if !agreed {
                    tracing::warn!(
                        url = %ShownUrl(&target.full.url),
                        "the upstream's name[] selection fails or lacks families its full \
                         page has: these selective reads use the full page"
                    );
                }
                let mut sets = target.name_sets.lock().expect("name sets lock");
                if let Some(set) = sets.iter_mut().find(|s| Arc::ptr_eq(&s.slot, &slot)) {
                    set.checked = Some((Instant::now(), agreed));
                }
            }
            full
        }
    }
}

/// `url` asking for the samples of `selection` only, the way prometheus_client's exposition
/// handlers take it (`name[]` selects sample names).
fn selection_url(url: &Url, selection: &Selection) -> Url {
    let mut url = url.clone();
    {
        let mut query = url.query_pairs_mut();
        for name in selection.sample_names() {
            query.append_pair("name[]", &name);
        }
    }
    url
}

/// Whether a selective fetch holds every family of the full page that `selection` selects, per
/// upstream; `None` when the full fetch failed and nothing can be said.
fn selection_agrees(full: &Fetch, selected: Option<&Fetch>, selection: &Selection) -> Option<bool> {
    if full.results.iter().any(Result::is_err) {
        return None;
    }
    let Some(selected) = selected else {
        return Some(false);
    };
    Some(
        full.results.len() == selected.results.len()
            && full.results.iter().zip(&selected.results).all(|(f, s)| {
                let (Ok(f), Ok(s)) = (f, s) else {
                    return false;
                };
                let has = selected_families(&s.parsed, selection);
                selected_families(&f.parsed, selection)
                    .iter()
                    .all(|n| has.contains(n))
            }),
    )
}

/// The text names of the families in `exp` that `selection` selects and that have samples.
fn selected_families(exp: &Exposition, selection: &Selection) -> Vec<Vec<u8>> {
    exp.families()
        .iter()
        .filter(|f| f.samples.1 > f.samples.0)
        .map(|f| {
            let (name, suffix) = exp.family_name(f);
            [name, suffix].concat()
        })
        .filter(|text| selection.selects(text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_asks_for_every_sample_name_of_the_families() {
        let url = Url::parse("http://127.0.0.1:8000/metrics?x=1").expect("url");
        let selection = Selection::new(["vllm:h", "vllm:c_total", "vllm:d"]);
        let url = selection_url(&url, &selection);
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("x".to_string(), "1".to_string()));
        assert!(pairs[1..].iter().all(|(k, _)| k == "name[]"));
        let asked: Vec<String> = pairs[1..].iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(asked, selection.sample_names().collect::<Vec<_>>());
        assert!(asked.contains(&"vllm:h_bucket".to_string()));
    }
}
