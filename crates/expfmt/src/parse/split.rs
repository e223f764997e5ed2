//! The two-thread parse of a large body: a second thread takes a later part of the body, cut at
//! a family declaration, and the two parts are joined when that is provably the result of a
//! parse in one pass ([`join`]); otherwise the body is parsed again in one pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::{Decl, Parser, Part, helper};
use crate::format::Format;
use crate::hash::PairHasher;
use crate::lex::{self, Comment};
use crate::model::{Exposition, Malformed, ParseStats, Span, Suffix};
use crate::parse::{ParseError, ParseLimits, ParseOptions};

/// Bodies this large or larger are parsed by two threads (see [`crate::parse()`]).
pub(crate) const PARALLEL_MIN_BYTES: usize = 256 << 10;
/// The same after a usable prior ([`crate::parse_after`]): most lines then cost half as much, and
/// below this a second thread costs more CPU than it saves time (a 740 KB page: 0.85 → 0.74 ms
/// of CPU per scrape in one pass, in the same time).
pub(super) const PARALLEL_MIN_BYTES_AFTER_PRIOR: usize = 1 << 20;
/// The first thread claims the body this many bytes at a time (see [`parse_shared`]).
pub(super) const CLAIM_BYTES: usize = 32 << 10;
/// The second thread takes no share of the body smaller than this.
pub(super) const MIN_SHARE_BYTES: usize = 64 << 10;
/// How long the first thread waits for the second without sleeping (see [`parse_shared`]).
const SPIN: Duration = Duration::from_micros(100);
/// Set in [`parse_shared`]'s frontier once the second thread has taken the rest of the body.
const TAKEN: u64 = 1 << 63;

/// The second part of a body, finished, with what [`join`] checks against the first.
struct Tail {
    part: Part,
    /// Its declarations; only their names are read.
    decls: Vec<Decl>,
    /// Sample names it looked up beyond the family in force and its own exact name.
    probes: Vec<Span>,
    /// Samples made before unkept families were dropped (what the series limit counts).
    pushed: usize,
}

/// Parses `body[cut..]` as a body of its own, noting what [`join`] checks.
fn parse_tail(
    body: &[u8],
    format: Format,
    opts: &ParseOptions<'_>,
    prior: Option<&Exposition>,
    cut: usize,
) -> Result<Tail, ParseError> {
    let mut p = Parser::new(body, format, opts, prior, body.len() - cut);
    p.record_probes = true;
    p.run(cut, body.len())?;
    let pushed = p.samples.len();
    let part = p.finish(0);
    Ok(Tail {
        part,
        decls: p.decls,
        probes: p.probes,
        pushed,
    })
}

/// What the second thread of a parse shares with the first; it owns what it reads, so the
/// first thread need not wait for the second to end when it did not take a part.
struct Shared {
    body: Bytes,
    format: Format,
    keep: Vec<String>,
    added_labels: Vec<Vec<u8>>,
    limits: ParseLimits,
    hasher: PairHasher,
    allow_reserved: bool,
    prior: Option<Arc<Exposition>>,
    claim: usize,
    min_share: usize,
    /// The end of what the first thread has claimed, `TAKEN` added once the second thread
    /// took the rest from there.
    frontier: AtomicU64,
}

impl Shared {
    /// The second thread: takes the later half of what the first has not claimed yet, cut at
    /// a family declaration, unless that is less than `min_share`; or the part from a cut set
    /// beforehand. `None` when it took no part.
    fn second(&self) -> Option<Result<Tail, ParseError>> {
        let len = self.body.len();
        let mut f = self.frontier.load(Ordering::Acquire);
        let cut = loop {
            if f & TAKEN != 0 {
                break (f & !TAKEN) as usize;
            }
            let at = f as usize;
            if len - at < self.min_share.max(1) {
                return None;
            }
            // The first thread is somewhere in its last claim.
            let target = (at.saturating_sub(self.claim / 2) + len) / 2;
            let cut = split_point(&self.body, target, at)?;
            match self.frontier.compare_exchange(
                f,
                cut as u64 | TAKEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break cut,
                Err(now) => f = now,
            }
        };
        let added: Vec<&[u8]> = self.added_labels.iter().map(Vec::as_slice).collect();
        let opts = ParseOptions {
            keep: &self.keep,
            limits: self.limits,
            added_labels: &added,
            hasher: self.hasher,
            allow_reserved: self.allow_reserved,
        };
        Some(parse_tail(
            &self.body,
            self.format,
            &opts,
            self.prior.as_deref(),
            cut,
        ))
    }
}

/// Parses `body` on this thread and the [`helper`] thread. This one claims the body `claim`
/// bytes at a time, a line at a time; the other, once it runs, takes the later half of what is
/// not claimed yet, cut at a family declaration ([`split_point`]), unless that is less than
/// `min_share`. Whenever the other thread gets to it (a thread can wait long for a core of its
/// own, or for an earlier parse's part), the two then have about as much left to parse each;
/// if it gets to it too late, this one
/// parses the whole body, in one pass, and does not wait for the other to end. With `cut`,
/// the other thread takes the body from there instead.
///
/// Returns [`Outcome::Apart`] when the two parts cannot be joined ([`join`]) or no thread
/// could be started: the body is then to be parsed in one pass.
pub(super) fn parse_shared(
    body: &Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    prior: Option<&Arc<Exposition>>,
    claim: usize,
    min_share: usize,
    cut: Option<usize>,
) -> Result<Outcome, ParseError> {
    let len = body.len();
    let shared = Arc::new(Shared {
        body: body.clone(),
        format,
        keep: opts.keep.to_vec(),
        added_labels: opts.added_labels.iter().map(|a| a.to_vec()).collect(),
        limits: opts.limits,
        hasher: opts.hasher,
        allow_reserved: opts.allow_reserved,
        prior: prior.cloned(),
        claim,
        min_share,
        frontier: AtomicU64::new(cut.map_or(0, |c| c as u64 | TAKEN)),
    });
    let other = Arc::clone(&shared);
    let Some(second) = helper::run(move || other.second()) else {
        return Ok(Outcome::Apart);
    };
    let frontier = &shared.frontier;
    // Room for the other part's samples too.
    let mut head = Parser::new(body, format, opts, prior.map(Arc::as_ref), len);
    let mut at = 0;
    let cut = loop {
        let f = frontier.load(Ordering::Acquire);
        let (end, last) = if f & TAKEN != 0 {
            ((f & !TAKEN) as usize, true)
        } else if at == len {
            break None;
        } else {
            let probe = (at + claim).min(len);
            let end = memchr::memchr(b'\n', &body[probe..]).map_or(len, |i| probe + i + 1);
            if frontier
                .compare_exchange(at as u64, end as u64, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            (end, false)
        };
        if let Err(err) = head.run(at, end) {
            // Keep the other thread from starting on a body that fails anyway; once it has,
            // let it end first.
            let (end, len) = (end as u64, len as u64);
            if frontier
                .compare_exchange(end, len, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                let _ = second.wait(Duration::ZERO);
            }
            return Err(err);
        }
        at = end;
        if last {
            break Some(end);
        }
    };
    if cut.is_none() {
        // All parsed here, in one pass; the other thread ends without parsing.
        return Ok(Outcome::OnePass(head.finish(0)));
    }
    let pushed = head.samples.len();
    let first = head.finish(len / 96);
    // The other thread should be about done.
    match second.wait(SPIN) {
        Some(Ok(Some(Ok(tail)))) => {
            Ok(join(&mut head, first, pushed, tail).map_or(Outcome::Apart, Outcome::Joined))
        }
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        _ => Ok(Outcome::Apart),
    }
}

/// How [`parse_shared`] went.
pub(super) enum Outcome {
    /// The second thread took no part: this one parsed the body in one pass.
    OnePass(Part),
    /// The two parts, joined.
    Joined(Part),
    /// The two parts cannot be joined, or the second thread could not be started.
    Apart,
}

impl Outcome {
    pub(super) fn part(self) -> Option<Part> {
        match self {
            Outcome::OnePass(part) | Outcome::Joined(part) => Some(part),
            Outcome::Apart => None,
        }
    }
}

/// Joins the first part of a body (parsed by `head`, finished as `first` after `pushed`
/// samples) and the rest of it, or `None` if the result might not be the one-pass result.
///
/// The rest starts at a line that declares a family ([`split_point`]), so that line resets
/// everything one line passes to the next in a one-pass parse (the family in force and the
/// sample-name cache): the rest was parsed from the state the one-pass parse has there, but
/// for the first part's tables of names. Its result is then the one-pass result with its
/// indices shifted, provided that:
/// - neither part is over a limit (an error in the first part is the one-pass error; one in
///   the rest is left to a one-pass parse, for its line number), and the two together are
///   not over the series or families limit;
/// - the first part does not end after an OpenMetrics `# EOF` with no sample since (the
///   one-pass parse would count the first sample of the rest as a line after it);
/// - no name the rest looked up is in the first part's tables: not the name of any of its
///   declarations (every declaring line and every new sample name looks its name up), and
///   none of the names [`Parser::resolve`] tries for a sample name it noted as a probe (every
///   name it had to look up further than the family in force and the exact name, once per
///   declaration and suffix). A lookup that finds nothing in the rest's tables then finds
///   nothing in the first part's either, so it goes the same way as in one pass.
///
/// With those, every line of the rest resolves as in one pass. Its families and samples come
/// after the first part's in one pass too, so sorting each part's samples by family and
/// concatenating gives the one-pass order; and the first sample of the rest is of a family of
/// its own, so the same-name mark of a sample never spans the two parts.
fn join(head: &mut Parser<'_, '_>, mut a: Part, pushed: usize, b: Tail) -> Option<Part> {
    let limits = head.opts.limits;
    if head.eof_seen
        || head.decls.len() + b.decls.len() > limits.max_families
        || pushed + b.pushed > limits.max_series
        || head.has_any(&b.decls, &b.probes)
    {
        return None;
    }
    let b = b.part;
    let family_shift = a.families.len() as u32;
    let sample_shift = a.samples.len() as u32;
    let side_shift = a.side.len() as u32;
    a.families.extend(b.families.into_iter().map(|mut f| {
        f.samples = (f.samples.0 + sample_shift, f.samples.1 + sample_shift);
        f
    }));
    a.samples.extend(
        b.samples
            .iter()
            .map(|s| s.shifted(family_shift, side_shift)),
    );
    a.side.extend_from_slice(&b.side);
    a.kept_bytes += b.kept_bytes;
    a.stats = ParseStats {
        kept: a.stats.kept + b.stats.kept,
        dropped: a.stats.dropped + b.stats.dropped,
        malformed: a.stats.malformed + b.stats.malformed,
        renamed: a.stats.renamed + b.stats.renamed,
        // The rest's lines are numbered from its first.
        first_malformed: a
            .stats
            .first_malformed
            .or(b.stats.first_malformed.map(|m| Malformed {
                line: m.line + head.line_no,
                ..m
            })),
    };
    Some(a)
}

/// The two-thread parse alone, cut at `cut` (a line start): `Ok(None)` when the parts cannot
/// be joined.
#[cfg(test)]
pub(crate) fn parse_joined(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    cut: usize,
) -> Result<Option<Exposition>, ParseError> {
    Ok(
        parse_shared(&body, format, opts, None, CLAIM_BYTES, 0, Some(cut))?
            .part()
            .map(|part| Exposition::from_part(body.clone(), format, opts, part)),
    )
}

/// [`Split::Shared`] with the given claim and least share, and whether the second thread
/// took a part: `None` when it did and the parts could not be joined.
#[cfg(test)]
pub(crate) fn parse_shared_with(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    claim: usize,
    min_share: usize,
) -> Result<Option<(Exposition, bool)>, ParseError> {
    let (part, took) = match parse_shared(&body, format, opts, None, claim, min_share, None)? {
        Outcome::OnePass(part) => (part, false),
        Outcome::Joined(part) => (part, true),
        Outcome::Apart => return Ok(None),
    };
    Ok(Some((
        Exposition::from_part(body.clone(), format, opts, part),
        took,
    )))
}

/// The one-pass parse, its lines read in runs ending at each of `ends` (line starts).
#[cfg(test)]
pub(crate) fn parse_in_runs(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    ends: &[usize],
) -> Result<Exposition, ParseError> {
    let mut p = Parser::new(&body, format, opts, None, body.len());
    let mut at = 0;
    for &end in ends.iter().chain([&body.len()]) {
        p.run(at, end)?;
        at = end;
    }
    let part = p.finish(0);
    Ok(Exposition::from_part(body.clone(), format, opts, part))
}

/// Where a second thread can start parsing `body`: the line nearest `target` (within an
/// eighth of the body, or 64 KiB), at `lo` or after, that starts with `#` and is the first of
/// the lines declaring a family (HELP, TYPE or UNIT), so that those stay together. `None` when
/// there is no such line, or only the first line of the body.
pub(crate) fn split_point(body: &[u8], target: usize, lo: usize) -> Option<usize> {
    use memchr::memmem;
    let lo = lo.max(1);
    if body.len() <= lo {
        return None;
    }
    let target = target.clamp(lo, body.len());
    let window = (body.len() / 8).max(64 << 10);
    let hi = (target + window).min(body.len());
    // Line starts at `target` or after: a newline at `target - 1` or after.
    let forward = memmem::find_iter(&body[target - 1..hi], b"\n#")
        .map(|p| target + p)
        .find(|&s| starts_family(body, s));
    let reach = forward.map_or(window, |s| s - target);
    // Line starts before `target`, nearer than `forward`, not before `lo`: each `#` right after
    // a newline, found from the end with `memrchr` (memmem's search from the end is not
    // vectorised, and this one can cross a whole family of a many-engine page: 5.9 % of a 2 MB
    // scrape's CPU, bench/RESULTS.md section 33).
    let from = target.saturating_sub(reach).max(lo);
    let backward = memchr::memrchr_iter(b'#', &body[from..target])
        .map(|p| from + p)
        .find(|&s| body[s - 1] == b'\n' && starts_family(body, s));
    backward.or(forward)
}

/// Whether the line at `start` declares a family and the line before it does not declare the
/// same one.
pub(crate) fn starts_family(body: &[u8], start: usize) -> bool {
    let Some(name) = declared_name(body, start) else {
        return false;
    };
    let prev = memchr::memrchr(b'\n', &body[..start - 1]).map_or(0, |i| i + 1);
    declared_name(body, prev) != Some(name)
}

/// The name a line starting with `#` at `start` declares (HELP, TYPE or UNIT).
fn declared_name(body: &[u8], start: usize) -> Option<&[u8]> {
    let rest = &body[start..];
    if rest.first() != Some(&b'#') {
        return None;
    }
    let mut line = memchr::memchr(b'\n', rest).map_or(rest, |i| &rest[..i]);
    if let [head @ .., b'\r'] = line {
        line = head;
    }
    match lex::lex_comment(line, 0) {
        Ok(
            Comment::Help { name, .. } | Comment::Type { name, .. } | Comment::Unit { name, .. },
        ) => Some(&line[name.0 as usize..name.1 as usize]),
        _ => None,
    }
}

impl Parser<'_, '_> {
    /// Whether one of `decls` or `probes` (of a later part of the body) names an entry of
    /// this part's tables, so a lookup of the later part could have found it.
    fn has_any(&mut self, decls: &[Decl], probes: &[Span]) -> bool {
        let body = self.body;
        if decls.iter().any(|d| self.lookup(d.name.of(body)).is_some()) {
            return true;
        }
        if probes.is_empty() {
            return false;
        }
        self.index_escaped();
        let known = |key: &[u8]| self.lookup(key).is_some() || self.by_escaped.contains_key(key);
        probes.iter().any(|p| {
            let name = p.of(body);
            known(name)
                || Suffix::ALL
                    .into_iter()
                    .any(|s| name.strip_suffix(s.as_bytes()).is_some_and(known))
        })
    }
}
