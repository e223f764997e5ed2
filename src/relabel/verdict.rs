//! What a rule set does to the samples of one family, per name they can have: worked out by
//! `analysis`, kept from one page to the next by `seen`, followed by `page`.

/// What the rules do to every sample of one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing: the samples pass as they are.
    Keep,
    /// They are all dropped.
    Drop,
    /// Each sample is evaluated, from this rule on (the rules before it change nothing).
    Evaluate(usize),
}

/// What the rules do to the samples of one family, per name they can have.
#[derive(Debug)]
pub(crate) struct Verdicts {
    /// The names the family's samples can have (`x_bucket`, `x_sum`, `x_count` for a
    /// histogram `x`).
    pub(crate) names: Vec<String>,
    pub(crate) verdicts: Vec<Verdict>,
    /// The sum of the family's label-set hashes (`seen::label_sum`) when a verdict
    /// depended on the label names its samples carry.
    pub(crate) label_sum: Option<u64>,
}
