//! What one health check keeps for the vitals: its figures' numbers already summed, for the
//! upstream as a whole and for each rank and process shown, not the series behind them. A
//! gauge is kept as the figure combines it; a counter, and each bucket of a histogram, as a
//! running total of the increases of its series (resets counted as Prometheus counts them), so
//! that `rate()` over the totals is the sum of the series' rates.

use std::sync::Arc;
use std::time::Instant;

/// The gauges and counters of the vitals, in their place in a row's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Plain {
    Running,
    Waiting,
    KvUsage,
    Requests,
    PromptTokens,
    GenerationTokens,
    Preemptions,
    PrefixHits,
    PrefixQueries,
}

impl Plain {
    pub(crate) const ALL: [Plain; 9] = [
        Plain::Running,
        Plain::Waiting,
        Plain::KvUsage,
        Plain::Requests,
        Plain::PromptTokens,
        Plain::GenerationTokens,
        Plain::Preemptions,
        Plain::PrefixHits,
        Plain::PrefixQueries,
    ];

    /// Whether the figure is a gauge (kept as read) rather than a counter (kept as a running
    /// total of increases).
    pub(crate) fn is_gauge(self) -> bool {
        matches!(self, Plain::Running | Plain::Waiting | Plain::KvUsage)
    }
}

/// The latency histograms of the vitals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hist {
    Ttft,
    Itl,
    E2e,
}

impl Hist {
    pub(crate) const ALL: [Hist; 3] = [Hist::Ttft, Hist::Itl, Hist::E2e];
}

/// Where each number of a row is: the plain figures, then each histogram's buckets by bound.
/// It changes only when a histogram shows a bucket bound not seen before (and there is room).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Layout {
    /// Each histogram's bucket bounds kept, ascending (`+Inf` last).
    pub les: [Vec<f64>; 3],
}

impl Layout {
    /// How many numbers a group of a row holds.
    pub(crate) fn len(&self) -> usize {
        Plain::ALL.len() + self.les.iter().map(Vec::len).sum::<usize>()
    }

    /// The place of a plain figure.
    pub(crate) fn plain(p: Plain) -> usize {
        p as usize
    }

    /// The place of histogram `h`'s bucket with bound `le`, if kept.
    pub(crate) fn bucket(&self, h: Hist, le: f64) -> Option<usize> {
        let before: usize = self.les[..h as usize].iter().map(Vec::len).sum();
        let at = self.les[h as usize].iter().position(|&b| b == le)?;
        Some(Plain::ALL.len() + before + at)
    }
}

/// Whose numbers: the upstream as a whole, one data-parallel rank, or one process.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Group {
    All,
    Rank(Arc<str>),
    Pid(Arc<str>),
}

/// One reading, summed.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// When the check that read it was due.
    pub at: Instant,
    pub layout: Arc<Layout>,
    /// Each group's numbers (`NaN` where the page had none), sorted by group.
    pub groups: Vec<(Group, Box<[f64]>)>,
    /// sysport's own canaries the engine had answered when the check began, as running totals.
    pub canaries: Canaries,
}

/// Running totals of sysport's canaries that the engine answered: requests, and the tokens
/// they asked it to generate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Canaries {
    pub requests: f64,
    pub generation_tokens: f64,
}

impl Row {
    /// The numbers of `group`.
    pub(crate) fn group(&self, group: &Group) -> Option<&[f64]> {
        self.groups
            .binary_search_by(|(g, _)| g.cmp(group))
            .ok()
            .map(|i| &*self.groups[i].1)
    }

    /// A plain figure of `group`; `None` where the page had none.
    pub(crate) fn plain(&self, group: &Group, p: Plain) -> Option<f64> {
        let v = *self.group(group)?.get(Layout::plain(p))?;
        (!v.is_nan()).then_some(v)
    }

    /// The running total of histogram `h`'s bucket `le` for `group`.
    pub(crate) fn bucket(&self, group: &Group, h: Hist, le: f64) -> Option<f64> {
        let v = *self.group(group)?.get(self.layout.bucket(h, le)?)?;
        (!v.is_nan()).then_some(v)
    }

    /// The bytes the row holds, as the cost formula of docs/vitals.md counts them.
    pub(crate) fn bytes(&self) -> usize {
        self.groups.iter().map(|(_, v)| v.len() * 8).sum()
    }
}
