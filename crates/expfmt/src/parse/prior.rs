//! The reuse of the previous page: a sample line whose name and labels are byte for byte those
//! of the line at the same place of its family in the previous parse of the same upstream takes
//! their lexing from there ([`crate::parse_after`]); a line that is that line whole, value
//! included, takes its whole lexing (every line of an idle engine's page, 28 % of a busy real
//! vLLM's a second apart: bench/RESULTS.md, section 30); and the lines right after such a line
//! that are the prior's next lines whole, of the same name, are taken in a run without being
//! read again ([`Parser::follow_prior`]: 56 % fewer instructions for an unchanged 2.3 MB page,
//! section 31).

use super::ParseOptions;
use super::family::family_slot;
use super::{NONE, Parser};
use crate::format::Format;
use crate::lex;
use crate::lex::LexKey;
use crate::model::{Exposition, Suffix};

#[cfg(test)]
thread_local! {
    /// Lines this thread lexed from a prior's, for tests to see the prior used.
    pub(crate) static REUSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Of those, the lines that were the prior's line whole.
    pub(crate) static REUSED_WHOLE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Of those, the lines taken in a run after the line before them ([`Parser::follow_prior`]).
    pub(crate) static FOLLOWED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A line's lexing from the prior ([`Parser::prior_match`]).
pub(super) enum Known {
    /// The name and labels are the prior line's: their lexing, the value still to read.
    Labels(lex::SampleLex),
    /// The line is the prior line, byte for byte: its whole lexing (the value was read then).
    Whole(lex::SampleLex),
}

/// A family whose place in `prior` has not been looked up yet.
pub(super) const UNSEEN: (u32, u32) = (NONE, NONE);

impl Parser<'_, '_> {
    /// Where the samples of declaration `d` with `suffix` stand in `prior`: the next one to
    /// compare a line with and the end of their family's, `(0, 0)` when it has none.
    pub(super) fn prior_cursor(&self, d: u32, suffix: Suffix) -> (u32, u32) {
        let Some(prior) = self.prior else {
            return (0, 0);
        };
        let family = self.decls[d as usize].families[family_slot(self.format, suffix).0];
        if family != NONE
            && let Some(&c) = self.cursors.get(family as usize)
            && c != UNSEEN
        {
            return c;
        }
        self.prior_family(d, suffix)
            .map_or((0, 0), |i| prior.families()[i].samples)
    }

    /// The index in `prior` of the family of declaration `d`'s samples with `suffix`.
    fn prior_family(&self, d: u32, suffix: Suffix) -> Option<usize> {
        let decl = &self.decls[d as usize];
        self.prior?
            .family_index(decl.name.of(self.body), family_slot(self.format, suffix).1)
    }

    /// The lexing of the sample of `prior` at `cursor`, or of the one after it (a series gone
    /// since), when that line had labels, was canonical without timestamp or exemplar, and
    /// starts with the same bytes as `line` up to and including its `}` (whole when the rest
    /// is the same too); and where the cursor goes next.
    pub(super) fn prior_match(&self, line: &[u8], cursor: (u32, u32)) -> (Option<Known>, u32) {
        let Some(prior) = self.prior else {
            return (None, 0);
        };
        let (at, end) = cursor;
        let candidate = |k: u32| {
            let sample = &prior.samples[k as usize];
            sample.reusable_labels_end().map(|close| (sample, close))
        };
        for k in at..end.min(at.saturating_add(2)) {
            if let Some((sample, close)) = candidate(k) {
                let start = sample.line_start() as usize;
                if line.len() > close && line[..=close] == prior.body[start..=start + close] {
                    #[cfg(test)]
                    REUSED.with(|n| n.set(n.get() + 1));
                    let lexed = prior.lex(sample);
                    // A canonical line without timestamp ends with its value. Its last eight
                    // bytes first (the labels before them are the same already): a value that
                    // moved mostly differs there, so such a line costs one more compare.
                    let end = lexed.value.1 as usize;
                    let before = &prior.body[start..start + end];
                    let whole = line.len() == end
                        && last_eight(line) == last_eight(before)
                        && line[close + 1..] == before[close + 1..];
                    #[cfg(test)]
                    REUSED_WHOLE.with(|n| n.set(n.get() + usize::from(whole)));
                    let known = match whole {
                        true => Known::Whole(lexed),
                        false => Known::Labels(lexed),
                    };
                    return (Some(known), k + 1);
                }
            }
        }
        // A line no later one can match is passed; a series new since stays before the rest.
        let next = if at < end && candidate(at).is_none() {
            at + 1
        } else {
            at
        };
        (None, next)
    }

    /// After a line that was the prior's line `whole_at` whole: the lines from `at` on that
    /// are, one after the other, the prior's next lines whole, of the same name as the line
    /// before them (the rows of a histogram, the labels of a gauge), each pushed as the sample
    /// its own reading would make ([`Parser::sample`] through [`Known::Whole`]) without
    /// reading it again: no line scan, no name, no lookup of its family or its place in the
    /// prior, one compare. Returns where reading goes on and how many lines were taken.
    pub(super) fn follow_prior(&mut self, body: &[u8], mut at: usize) -> (usize, usize) {
        let (Some(prior), Some(&last)) = (self.prior, self.samples.last()) else {
            return (at, 0);
        };
        // The family's number among all (for its cursor); `last.family()` is its number among
        // the kept ones (for its count).
        let family = self.last_family as usize;
        let (_, end) = self.cursors[family];
        // As `sample` sets it: every added label present when there are none.
        let all_present = self.opts.added_labels.is_empty();
        let renamed = u64::from(last.rename().is_some());
        let limits = self.opts.limits;
        let mut k = self.whole_at as usize;
        let mut taken = 0;
        while k + 1 < end as usize {
            let (prev, p) = (&prior.samples[k], &prior.samples[k + 1]);
            let Some(len) = p.whole_after(prev) else {
                break;
            };
            let line_end = at + len;
            if line_end >= body.len()
                || body[line_end] != b'\n'
                || len > limits.max_line_bytes
                || self.samples.len() >= limits.max_series
            {
                break;
            }
            let line = &body[at..line_end];
            let start = p.line_start() as usize;
            let before = &prior.body[start..start + len];
            if last_eight(line) != last_eight(before) || line != before {
                break;
            }
            debug_assert_eq!(raw_name(prior, prev), raw_name(prior, p));
            let present = if all_present { u8::MAX } else { p.present() };
            let sample = p.taken_whole(at, &last, present);
            self.samples.push(sample);
            self.kept_bytes += len + 1;
            self.stats.renamed += renamed;
            taken += 1;
            at = line_end + 1;
            k += 1;
        }
        if taken > 0 {
            self.kept_counts[last.family() as usize] += taken as u32;
            self.cursors[family].0 = (k + 1) as u32;
            #[cfg(test)]
            {
                REUSED.with(|n| n.set(n.get() + taken));
                REUSED_WHOLE.with(|n| n.set(n.get() + taken));
                FOLLOWED.with(|n| n.set(n.get() + taken));
            }
        }
        (at, taken)
    }
}

impl Parser<'_, '_> {
    /// Notes for family `f` (of declaration `d` and `suffix`) a sample that is not the prior's
    /// next one of its family, or its first sample. Out of line: most samples are neither.
    #[cold]
    #[inline(never)]
    pub(super) fn note_order(&mut self, f: usize, d: u32, suffix: Suffix, in_order: bool) {
        if self.as_prior.len() <= f {
            self.as_prior.resize(f + 1, NONE);
        }
        self.as_prior[f] = match in_order && self.cursors[f] == UNSEEN {
            true => self.prior_family(d, suffix).map_or(NONE, |i| i as u32),
            false => NONE,
        };
    }

    /// Whether family `f` (kept, read to its end) is known to hold no two samples of the same
    /// series: its series are the prior's family's, byte for byte and in the same order (each
    /// sample the next one of the prior's, all of them taken), and that one was known to hold
    /// none. A family with a line the prior did not have, one less, or two in another order
    /// is checked by the merge again.
    pub(super) fn no_duplicates_as_prior(&self, f: usize) -> bool {
        let (Some(prior), Some(&(at, end)), Some(&p)) =
            (self.prior, self.cursors.get(f), self.as_prior.get(f))
        else {
            return false;
        };
        self.track_order
            && p != NONE
            && at == end
            && prior.families()[p as usize].no_duplicates.known()
    }
}

/// A sample's name as its line writes it.
fn raw_name<'p>(prior: &'p Exposition, s: &crate::model::Sample) -> &'p [u8] {
    let l = prior.lex(s);
    prior.sample_part(s, (l.name_start, l.name_end))
}

/// The last eight bytes of `b`, `None` when it is shorter.
#[inline]
fn last_eight(b: &[u8]) -> Option<u64> {
    let at = b.len().checked_sub(8)?;
    Some(u64::from_ne_bytes(b[at..].try_into().ok()?))
}

/// `prior`, if its lines were lexed as a parse with `format` and `opts` lexes them.
pub(super) fn usable<'p>(
    prior: Option<&'p Exposition>,
    format: Format,
    opts: &ParseOptions<'_>,
) -> Option<&'p Exposition> {
    let key = LexKey::of(&opts.lex_options(format));
    prior.filter(|p| p.lexed_with == key)
}
