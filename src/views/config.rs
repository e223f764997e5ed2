//! `views:`: each view's name (a path under `/metrics/`), families and operations, checked
//! against the upstreams that must be able to hold them.

use std::collections::HashMap;

use serde_saphyr::Spanned;

use crate::config::check::{check_label_name, check_name};
use crate::config::data::HealthConfig;
use crate::config::loader::{Loader, Origin};
use crate::config::quote::quoted;
use crate::config::section::{RawLabels, Text, section};
use crate::model::{FamilyKey, Op, ViewFamily, routes};
use crate::scrape::config::UpstreamConfig;

/// A page at `/metrics/<name>` computed from the upstreams' families.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewConfig {
    pub name: String,
    /// In output order; each read from every upstream that has it.
    pub families: Vec<ViewFamily>,
    /// Labels combined with each family's operation; `None`: each upstream engine's
    /// data-parallel rank labels.
    pub aggregate: Option<Vec<String>>,
}

section! {
    /// One entry of `views:`.
    RawView {
        /// Served at `/metrics/<name>`; `A-Z a-z 0-9 _ . -`, unique.
        name: Text,
        /// Family → operation, in output order. A family is its text-format name, optionally with
        /// label values that pick its series (`nv_trt_llm_request_metrics{request_type="waiting"}`);
        /// the operation (`sum`, `avg`, `max`, `min`, or `pass` to keep every series as it is)
        /// combines the series that differ only in the `aggregate` labels.
        families: Spanned<RawLabels>,
        /// Labels aggregated away with each family's operation; default each upstream engine's
        /// data-parallel rank labels (`engine` for vLLM, `dp_rank` for SGLang). Copies of one
        /// number (`pid`, `tp_rank`, `pp_rank`) are always combined with `max` first.
        aggregate: Spanned<Vec<Text>>,
    }
}

impl Loader<'_> {
    pub(crate) fn views(
        &mut self,
        raw: Option<Spanned<Vec<Spanned<RawView>>>>,
        upstreams: &[UpstreamConfig],
        health: &HealthConfig,
    ) -> Vec<ViewConfig> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let mut first_lines = HashMap::new();
        raw.value
            .into_iter()
            .enumerate()
            .filter_map(|(i, entry)| self.view(i, entry, upstreams, health, &mut first_lines))
            .collect()
    }

    fn view(
        &mut self,
        i: usize,
        entry: Spanned<RawView>,
        upstreams: &[UpstreamConfig],
        health: &HealthConfig,
        first_lines: &mut HashMap<String, u64>,
    ) -> Option<ViewConfig> {
        let field = |key: &str| format!("views[{i}].{key}");
        let raw = entry.value;
        self.unknown_keys(&raw.unknown, &format!("views[{i}]"), RawView::FIELDS);
        if raw.name.is_none() {
            let message = "missing: every view needs a name (it is served at /metrics/<name>)";
            self.issue(Origin::File(entry.referenced), &field("name"), message);
        }
        let name = self.file_value(raw.name.as_ref(), &field("name"), |n| check_name(n, "view"));
        if let Some((name, location)) = &name {
            let path = routes::view(name);
            if let Some(first) = first_lines.get(name) {
                let message = format!(
                    "duplicate view name {name:?}: {path} is already the view at line {first}"
                );
                self.issue(Origin::File(*location), &field("name"), message);
            } else if path == health.path || path == health.live_path {
                let message = format!("{path} is also the readiness or liveness path");
                self.issue(Origin::File(*location), &field("name"), message);
            } else {
                first_lines.insert(name.clone(), location.line());
            }
        }
        let families = match raw.families {
            None => {
                let message =
                    "missing: list the families, like { \"vllm:num_requests_waiting\": sum }";
                self.issue(Origin::File(entry.referenced), &field("families"), message);
                None
            }
            Some(families) if families.value.0.is_empty() => {
                let message =
                    "empty: list the families, like { \"vllm:num_requests_waiting\": sum }";
                self.issue(
                    Origin::File(families.referenced),
                    &field("families"),
                    message,
                );
                None
            }
            Some(families) => self.view_families(families.value.0, upstreams, &field("families")),
        };
        let aggregate = match raw.aggregate {
            None => Some(None),
            Some(labels) => {
                let mut ok = true;
                let mut names = Vec::with_capacity(labels.value.len());
                for (j, label) in labels.value.iter().enumerate() {
                    let field = format!("{}[{j}]", field("aggregate"));
                    match self.file_value(Some(label), &field, |l| {
                        check_label_name(l).map(|()| l.to_owned())
                    }) {
                        Some((label, _)) => names.push(label),
                        None => ok = false,
                    }
                }
                ok.then_some(Some(names))
            }
        };
        Some(ViewConfig {
            name: name?.0,
            families: families?,
            aggregate: aggregate?,
        })
    }

    fn view_families(
        &mut self,
        raw: Vec<(crate::config::section::Text, crate::config::section::Text)>,
        upstreams: &[UpstreamConfig],
        field: &str,
    ) -> Option<Vec<ViewFamily>> {
        let mut families: Vec<ViewFamily> = Vec::with_capacity(raw.len());
        let mut ok = true;
        for (key, op) in raw {
            let field = format!("{field}.{}", key.value);
            let family = self.file_value(Some(&key), &field, |k| {
                let key = FamilyKey::parse(k).map_err(|e| e.to_string())?;
                if !upstreams
                    .iter()
                    .any(|u| u.keep.iter().any(|p| key.name.starts_with(p.as_str())))
                {
                    return Err(format!(
                        "unknown family {:?}: no upstream keeps it (check the upstreams' keep \
                         prefixes)",
                        key.name
                    ));
                }
                Ok(key)
            });
            let op = self.file_value(Some(&op), &field, |o| {
                Op::parse(o).ok_or_else(|| {
                    let ops: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
                    format!("bad operation {o:?}: must be one of {}", ops.join(", "))
                })
            });
            match (family, op) {
                (Some((key, location)), Some((op, _))) => {
                    let family = ViewFamily { key, op };
                    if families.iter().any(|f| f.key == family.key) {
                        let message = format!("{} is listed twice", family.key);
                        self.issue(Origin::File(location), &field, message);
                        ok = false;
                    }
                    families.push(family);
                }
                _ => ok = false,
            }
        }
        ok.then_some(families)
    }
}

/// `views:` as `check-config` prints it.
pub(crate) fn render(f: &mut std::fmt::Formatter<'_>, views: &[ViewConfig]) -> std::fmt::Result {
    if views.is_empty() {
        return writeln!(f, "views: []");
    }
    writeln!(f, "views:")?;
    for view in views {
        writeln!(f, "  - name: {}", quoted(&view.name))?;
        writeln!(f, "    families:")?;
        for family in &view.families {
            writeln!(
                f,
                "      {}: {}",
                quoted(&family.key.to_string()),
                family.op
            )?;
        }
        if let Some(labels) = &view.aggregate {
            let labels: Vec<String> = labels.iter().map(|l| quoted(l)).collect();
            writeln!(f, "    aggregate: [{}]", labels.join(", "))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
