//! A rule set: one upstream's rules and the top-level ones, with what they saw of the last page.

use super::rule::Rule;
use super::seen::Seen;

/// The rules one upstream's pages go through, and what they see besides each sample.
#[derive(Debug, Clone)]
pub struct RuleSet {
    pub(super) rules: Vec<Rule>,
    /// sysport's configured labels, as the rules see them on a sample that lacks them.
    pub(super) added: Vec<(String, String)>,
    renames: bool,
    /// What the rules made of each family of the last page.
    pub(super) seen: std::sync::Arc<Seen>,
}

impl RuleSet {
    /// The upstream's own rules, then the top-level ones, seeing the configured `labels`;
    /// `None` when there are no rules at all.
    pub fn new(upstream: &[Rule], global: &[Rule], labels: &[(String, String)]) -> Option<RuleSet> {
        let rules: Vec<Rule> = upstream.iter().chain(global).cloned().collect();
        if rules.is_empty() {
            return None;
        }
        Some(RuleSet {
            renames: rules.iter().any(Rule::may_rename),
            rules,
            added: labels.to_vec(),
            seen: Default::default(),
        })
    }

    /// Whether a rule can change a sample's name, so that its series may leave its family
    /// (a read of selected families then needs the whole page).
    pub fn may_rename(&self) -> bool {
        self.renames
    }
}
