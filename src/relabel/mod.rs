//! Prometheus' `metric_relabel_configs`, applied to each upstream page before it is served.
//!
//! The rules mean what they mean in Prometheus 2.x (`model/relabel`), sample by sample:
//! - A sample's labels are its `__name__` (its name as Prometheus stores it: `x_bucket`,
//!   `x_sum`, `x_count` apart, `x_total` for a counter), its own labels with their values
//!   unescaped, and sysport's configured `labels` it lacks: Prometheus attaches a target's
//!   labels before its metric relabelling, and sysport's configured labels play that part.
//! - Each rule joins its `source_labels`' values with `separator` (`;`) and matches them
//!   against `regex` (`(.*)`), anchored at both ends, in RE2 syntax as Go reads it;
//!   `replacement` (`$1`) expands `$1`, `${1}`, `$name`, `${name}` as Go's `Expand` does
//!   (`$1x` names a group `1x`); the action defaults to `replace`.
//! - `hashmod` takes the low 64 bits of the MD5 of the joined values, big-endian, modulo
//!   `modulus`; `labelmap` maps label names through `replacement`, in name order; a label set to
//!   the empty string is removed.
//! - `upstreams[].metric_relabel_configs` run first, then the top-level ones.
//!
//! Where sysport cannot do what Prometheus does, the series is dropped and counted
//! (`dynamo_sysport_upstream_series{outcome="relabel_dropped"}`): a series left without a
//! valid `__name__` or with an invalid label name (Prometheus fails the whole scrape), or named
//! under `dynamo_sysport_`. Labels whose names start with `__` are left out of the output
//! (the exposition formats reserve them; Prometheus would store them).
//!
//! Series that two rules make equal leave one, the first (counted as a duplicate).
//!
//! Layout: `rule` (the fields and Prometheus' checks), `pattern` (Go's regex reading and
//! `Expand`), `apply` (what a rule does to a label set), `labels` (one sample's label set),
//! `analysis` (what the rules do to a family, decided per sample name so that a family no rule
//! can touch costs no work per sample), `page` (a page through the rules: untouched families
//! as parsed, dropped samples left out, changed families written anew by `made`), `seen` (what
//! the rules made of each family, kept for the next page).

mod analysis;
mod apply;
pub(crate) mod config;
mod labels;
mod made;
mod page;
#[cfg(test)]
mod page_tests;
mod pattern;
mod rule;
mod seen;
mod set;
#[cfg(test)]
mod tests;
mod verdict;

pub use page::{Page, relabel};
pub use pattern::Pattern;
pub use rule::{Action, Rule, RuleError, RuleSpec};
pub use set::RuleSet;
