//! Which families a reader's `?name=` selects: the one rule that merging, sysport's own metrics
//! and the engine's `name[]` selection all follow.
//!
//! A requested name `x` selects the text 0.0.4 family `x` and every text family the
//! OpenMetrics family `x` is written as ([`Suffix::FAMILY_PARTS`]): a counter `x` is `x_total`
//! and `x_created`, a histogram `x` is `x` and `x_created`, an info `x` is `x_info`. A counter's
//! text name `x_total` also selects its `x_created`, which belongs to the same OpenMetrics
//! MetricPoint. So `?name=` gives the same series in both output formats, whichever of the two
//! names a reader asks for.

use crate::model::Suffix;

/// The families one read selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The selected text family names as (declared part, suffix), sorted, without repeats.
    parts: Vec<(String, Suffix)>,
    /// The same names written out, sorted, for lookups.
    families: Vec<Vec<u8>>,
}

impl Selection {
    /// The families `names` select.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Selection {
        let mut parts = Vec::new();
        for name in names {
            for suffix in Suffix::FAMILY_PARTS {
                parts.push((name.to_string(), suffix));
            }
            // Also a histogram's name may end in `_total` (vLLM's `iteration_tokens_total`).
            if let Some(base) = name.strip_suffix(as_str(Suffix::Total)) {
                parts.push((base.to_string(), Suffix::Created));
            }
        }
        parts.sort_unstable_by(|a, b| (&a.0, a.1 as u8).cmp(&(&b.0, b.1 as u8)));
        parts.dedup();
        let mut families: Vec<Vec<u8>> = parts
            .iter()
            .map(|(base, suffix)| [base.as_bytes(), suffix.as_bytes()].concat())
            .collect();
        families.sort_unstable();
        families.dedup();
        Selection { parts, families }
    }

    /// Whether the text family `name` is selected.
    pub fn selects(&self, name: &[u8]) -> bool {
        self.families
            .binary_search_by(|f| f.as_slice().cmp(name))
            .is_ok()
    }

    /// Whether a family whose name starts with `prefix` can be selected.
    pub fn selects_under(&self, prefix: &[u8]) -> bool {
        self.families.iter().any(|f| f.starts_with(prefix))
    }

    /// Whether nothing at all is selected.
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// Every sample name of the selected families, for a selection by sample name such as
    /// prometheus_client's `name[]`: a family's own name, and a histogram's or summary's
    /// `_bucket`, `_count` and `_sum` where the family could be one.
    pub fn sample_names(&self) -> impl Iterator<Item = String> + '_ {
        self.parts.iter().flat_map(|(base, suffix)| {
            let samples: &[Suffix] = match suffix {
                Suffix::None => &Suffix::SAMPLE_PARTS,
                _ => std::slice::from_ref(suffix),
            };
            samples.iter().map(move |s| format!("{base}{}", as_str(*s)))
        })
    }
}

fn as_str(suffix: Suffix) -> &'static str {
    std::str::from_utf8(suffix.as_bytes()).expect("suffixes are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(names: &[&str]) -> Vec<String> {
        Selection::new(names.iter().copied())
            .families
            .iter()
            .map(|f| String::from_utf8(f.clone()).expect("ASCII"))
            .collect()
    }

    #[test]
    fn an_openmetrics_name_selects_every_text_family_of_it() {
        let s = Selection::new(["vllm:prefix_cache_queries"]);
        for family in [
            "vllm:prefix_cache_queries",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_queries_created",
            "vllm:prefix_cache_queries_info",
            "vllm:prefix_cache_queries_gcount",
            "vllm:prefix_cache_queries_gsum",
        ] {
            assert!(s.selects(family.as_bytes()), "{family}");
        }
        for other in [
            "vllm:prefix_cache",
            "vllm:prefix_cache_queries_bucket",
            "vllm:prefix_cache_queries_totals",
            "vllm:prefix_cache_hits_total",
        ] {
            assert!(!s.selects(other.as_bytes()), "{other}");
        }
    }

    #[test]
    fn a_counters_text_name_also_selects_its_created() {
        let s = Selection::new(["vllm:x_total"]);
        assert!(s.selects(b"vllm:x_total"));
        assert!(s.selects(b"vllm:x_created"));
        assert!(!s.selects(b"vllm:x"));
        // `_created` alone is a gauge of its own: it selects no counter.
        let s = Selection::new(["vllm:x_created"]);
        assert!(s.selects(b"vllm:x_created"));
        assert!(!s.selects(b"vllm:x_total"));
    }

    #[test]
    fn repeated_and_overlapping_names_select_each_family_once() {
        let both = selected(&["vllm:x", "vllm:x_total", "vllm:x"]);
        let mut sorted = both.clone();
        sorted.dedup();
        assert_eq!(both, sorted);
        assert_eq!(both.iter().filter(|f| *f == "vllm:x_created").count(), 1);
        assert!(Selection::new([]).is_empty());
    }

    #[test]
    fn prefixes_are_matched_against_the_selected_families() {
        let s = Selection::new(["dynamo_sysport_upstream_scrapes"]);
        assert!(s.selects_under(b"dynamo_sysport_"));
        assert!(s.selects_under(b"dynamo_sysport_upstream_scrapes_t"));
        assert!(!s.selects_under(b"vllm:"));
        assert!(!Selection::new(["dynamo_sysportx"]).selects_under(b"dynamo_sysport_"));
    }

    #[test]
    fn sample_names_cover_every_sample_of_the_families() {
        let s = Selection::new(["vllm:h", "vllm:c_total", "vllm:iteration_tokens_total"]);
        let names: Vec<String> = s.sample_names().collect();
        for n in [
            "vllm:h",
            "vllm:h_bucket",
            "vllm:h_count",
            "vllm:h_sum",
            "vllm:h_created",
            "vllm:h_total",
            "vllm:h_info",
            "vllm:h_gcount",
            "vllm:h_gsum",
            "vllm:c_total",
            "vllm:c_created",
            "vllm:iteration_tokens_total_bucket",
            "vllm:iteration_tokens_total_count",
            "vllm:iteration_tokens_total_sum",
            "vllm:iteration_tokens_total_created",
        ] {
            assert!(names.contains(&n.to_string()), "{n} in {names:?}");
        }
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
