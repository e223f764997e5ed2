//! One upstream body → an [`Exposition`]: lex every line, resolve each sample to its family,
//! keep the families the upstream's prefixes allow, group samples by family.
//!
//! Families are resolved the way Prometheus' parser does it: a sample belongs to the family
//! declared under its exact name, else to the family its name minus a type suffix names
//! (`h_bucket` → histogram `h`), else to an untyped family of its own. OpenMetrics families are
//! split into their text 0.0.4 families here (counter `x` → `x_total` and gauge `x_created`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::hash::PassThrough;
use super::lex::{self, Comment, LexOptions, LineError};
use super::{
    CANONICAL, Exposition, Family, Format, Kind, LexKey, PairHasher, ParseStats, RESERVED_PREFIX,
    Role, SIDE, Sample, SideLex, Span, Suffix,
};

/// Limits applied while parsing one body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    pub max_line_bytes: usize,
    pub max_series: usize,
    /// Distinct names (declared or implied), kept or not: each costs a table entry.
    pub max_families: usize,
    pub max_labels: usize,
    pub max_label_value_bytes: usize,
}

/// What to keep and how far to go.
#[derive(Debug, Clone, Copy)]
pub struct ParseOptions<'a> {
    /// Family-name prefixes to keep.
    pub keep: &'a [String],
    pub limits: ParseLimits,
    /// Names of the labels sysport adds to this body's series (so the lexer can note which a
    /// line already has). Empty: add none to these series (sysport's own metrics).
    pub added_labels: &'a [&'a [u8]],
    pub hasher: PairHasher,
    /// Keep families under [`RESERVED_PREFIX`] (only for sysport's own metrics).
    pub allow_reserved: bool,
}

/// Which limit a body went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    LineBytes,
    Series,
    Families,
    Labels,
    LabelValueBytes,
}

/// A body that cannot be used at all. Malformed lines are not errors: they are dropped and
/// counted in [`ParseStats::malformed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line {line}: over the {limit:?} limit")]
    TooLarge { limit: Limit, line: usize },
    #[error("body larger than 4 GiB")]
    BodyTooLarge,
}

/// A declared (or implied) name and what the upstream said of it.
struct Decl {
    name: Span,
    kind: Option<Kind>,
    has_colon: bool,
    kept: bool,
    has_samples: bool,
    /// Text families by [`Role`]: primary, created, gcount, gsum (u32::MAX = not yet made).
    families: [u32; 4],
    /// Bit `s`: the name plus suffix `s` is in `Parser::probes`.
    probed: u16,
    /// The next declaration whose name has the same hash, or `NONE` (see `Parser::by_name`).
    next: u32,
}

const NONE: u32 = u32::MAX;

struct Parser<'b, 'o> {
    body: &'b [u8],
    format: Format,
    opts: &'o ParseOptions<'o>,
    decls: Vec<Decl>,
    /// Declarations by the keyed hash of their name ([`PairHasher::bytes`], quicker than the
    /// map's own SipHash), those with equal hashes chained through [`Decl::next`].
    by_name: HashMap<u64, u32, PassThrough>,
    /// Declared names with `:`, under their escaped form (`vllm:x` → `vllm_x`).
    by_escaped: HashMap<Vec<u8>, u32>,
    /// Declarations with `:` in their name, and how many of them `by_escaped` holds.
    colon_decls: Vec<u32>,
    escaped_indexed: usize,
    families: Vec<Family>,
    /// Per family: its index among the kept families, or `NONE`.
    kept_index: Vec<u32>,
    /// Samples per kept family.
    kept_counts: Vec<u32>,
    samples: Vec<Sample>,
    side: Vec<SideLex>,
    /// Bytes of the lines in `samples`, each with its newline.
    kept_bytes: usize,
    stats: ParseStats,
    current: u32,
    /// The families of the samples so far never go down: they need no sorting.
    ascending: bool,
    /// The family of the last sample.
    last_family: u32,
    scratch: lex::LabelScratch<'b>,
    last_sample: Option<LastSample>,
    /// Declaration, suffix and escaping of the last sample pushed: the same three give the same
    /// sample name.
    last_pushed: Option<(u32, Suffix, bool)>,
    /// Lines read so far.
    line_no: usize,
    /// The last line read was `# EOF` (OpenMetrics), no sample line since.
    eof_seen: bool,
    /// Note in `probes` the sample names looked up past the family in force and the exact
    /// name (for the join with an earlier part, [`join`]).
    record_probes: bool,
    probes: Vec<Span>,
    /// The previous parse of the same upstream, if its lines lexed as this body's do.
    prior: Option<&'o Exposition>,
    /// Per family: the next sample of its family in `prior` to compare a line with, and the
    /// end of that family's samples there (`UNSEEN` before its first sample).
    cursors: Vec<(u32, u32)>,
}

#[cfg(test)]
thread_local! {
    /// Lines this thread lexed from a prior's, for tests to see the prior used.
    pub(super) static REUSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A family whose place in `prior` has not been looked up yet.
const UNSEEN: (u32, u32) = (NONE, NONE);

/// How the previous sample's name resolved.
#[derive(Debug, Clone, Copy)]
struct LastSample {
    name: Span,
    decl: u32,
    suffix: Suffix,
    escaped: bool,
}

/// Bodies this large or larger are parsed by two threads (see [`parse`]).
pub(super) const PARALLEL_MIN_BYTES: usize = 256 << 10;
/// The same after a usable prior ([`parse_after`]): most lines then cost half as much, and
/// below this a second thread costs more CPU than it saves time (a 740 KB page: 0.85 → 0.74 ms
/// of CPU per scrape in one pass, in the same time).
const PARALLEL_MIN_BYTES_AFTER_PRIOR: usize = 1 << 20;
/// The first thread claims the body this many bytes at a time (see [`parse_shared`]).
const CLAIM_BYTES: usize = 32 << 10;
/// The second thread takes no share of the body smaller than this.
const MIN_SHARE_BYTES: usize = 64 << 10;
/// How long the first thread waits for the second without sleeping (see [`parse_shared`]).
const SPIN: std::time::Duration = std::time::Duration::from_micros(100);
/// Set in [`parse_shared`]'s frontier once the second thread has taken the rest of the body.
const TAKEN: u64 = 1 << 63;

/// How [`parse_with`] may share a body's parse between two threads. Whichever, the result is
/// the one a parse in one pass gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// One thread, one pass.
    OnePass,
    /// A second thread, once it runs, takes the later half of what this one has not parsed
    /// yet, cut at a family declaration.
    Shared,
    /// A second thread takes the body from the family declaration nearest this byte offset.
    Near(usize),
}

/// Parses one upstream body. The body is kept, not copied: the result refers into it.
///
/// A body of [`PARALLEL_MIN_BYTES`] or more is parsed with [`Split::Shared`]: a second thread
/// takes a later part of it, and the two results are joined when that is provably the result
/// of a parse in one pass (see [`join`]); otherwise the body is parsed in one pass.
pub fn parse(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
) -> Result<Exposition, ParseError> {
    parse_after(body, format, opts, None)
}

/// [`parse`], given `prior`, the previous parse of the same upstream: a sample line whose
/// name and labels are byte for byte those of the line at the same place in `prior`'s
/// family takes their lexing from there, and only its value is read. An engine's series stay
/// the same from one scrape to the next, only their values change, so that is most lines.
/// The result is the one [`parse`] gives, whatever `prior` holds; `prior` is not used when it
/// was parsed from another format or with other labels, limits or hasher. With a usable prior,
/// a second thread takes part from [`PARALLEL_MIN_BYTES_AFTER_PRIOR`] on.
pub fn parse_after(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    prior: Option<&Arc<Exposition>>,
) -> Result<Exposition, ParseError> {
    let min = match usable(prior.map(Arc::as_ref), format, opts) {
        Some(_) => PARALLEL_MIN_BYTES_AFTER_PRIOR,
        None => PARALLEL_MIN_BYTES,
    };
    let split = if body.len() >= min {
        Split::Shared
    } else {
        Split::OnePass
    };
    parse_with(body, format, opts, split, prior)
}

/// [`parse_after`] with the threads as `split` says, whatever the body's size.
pub fn parse_with(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
    split: Split,
    prior: Option<&Arc<Exposition>>,
) -> Result<Exposition, ParseError> {
    if body.len() > u32::MAX as usize - 1 {
        return Err(ParseError::BodyTooLarge);
    }
    let parsed = match split {
        Split::OnePass => None,
        Split::Shared => parse_shared(
            &body,
            format,
            opts,
            prior,
            CLAIM_BYTES,
            MIN_SHARE_BYTES,
            None,
        )?
        .part(),
        Split::Near(near) => match split_point(&body, near, 0) {
            Some(cut) => {
                parse_shared(&body, format, opts, prior, CLAIM_BYTES, 0, Some(cut))?.part()
            }
            None => None,
        },
    };
    let part = match parsed {
        Some(part) => part,
        None => {
            let mut p = Parser::new(&body, format, opts, prior.map(Arc::as_ref), body.len());
            p.run(0, body.len())?;
            p.finish(0)
        }
    };
    Ok(Exposition::from_part(body, format, opts, part))
}

impl Exposition {
    fn from_part(body: Bytes, format: Format, opts: &ParseOptions<'_>, part: Part) -> Exposition {
        Exposition {
            body,
            format,
            families: part.families,
            samples: part.samples,
            side: part.side,
            stats: part.stats,
            kept_bytes: part.kept_bytes,
            lexed_with: LexKey::of(opts),
            by_name: Default::default(),
        }
    }
}

/// One part of a body, parsed and finished on its own.
struct Part {
    /// Kept families; their sample ranges index `samples`.
    families: Vec<Family>,
    /// Samples; their family and side-table indices are this part's own.
    samples: Vec<Sample>,
    side: Vec<SideLex>,
    kept_bytes: usize,
    stats: ParseStats,
}

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

/// Parses `body` on this thread and one more. This one claims the body `claim` bytes at a
/// time, a line at a time; the other, once it runs, takes the later half of what is not
/// claimed yet, cut at a family declaration ([`split_point`]), unless that is less than
/// `min_share`. Whenever the other thread starts (a thread can wait long for a core of its
/// own), the two then have about as much left to parse each; if it starts too late, this one
/// parses the whole body, in one pass, and does not wait for the other to end. With `cut`,
/// the other thread takes the body from there instead.
///
/// Returns [`Outcome::Apart`] when the two parts cannot be joined ([`join`]) or no thread
/// could be started: the body is then to be parsed in one pass.
fn parse_shared(
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
    let Ok(second) = std::thread::Builder::new().spawn(move || other.second()) else {
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
                let _ = second.join();
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
    // The other thread should be about done: waiting for it here a little is quicker than
    // being woken up by its end.
    let wait = std::time::Instant::now();
    while !second.is_finished() && wait.elapsed() < SPIN {
        std::hint::spin_loop();
    }
    match second.join() {
        Ok(Some(Ok(tail))) => {
            Ok(join(&mut head, first, pushed, tail).map_or(Outcome::Apart, Outcome::Joined))
        }
        Ok(_) => Ok(Outcome::Apart),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// How [`parse_shared`] went.
enum Outcome {
    /// The second thread took no part: this one parsed the body in one pass.
    OnePass(Part),
    /// The two parts, joined.
    Joined(Part),
    /// The two parts cannot be joined, or the second thread could not be started.
    Apart,
}

impl Outcome {
    fn part(self) -> Option<Part> {
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
    };
    Some(a)
}

/// The two-thread parse alone, cut at `cut` (a line start): `Ok(None)` when the parts cannot
/// be joined.
#[cfg(test)]
pub(super) fn parse_joined(
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
pub(super) fn parse_shared_with(
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
pub(super) fn parse_in_runs(
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
pub(super) fn split_point(body: &[u8], target: usize, lo: usize) -> Option<usize> {
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
    // Line starts before `target`, nearer than `forward`, not before `lo`.
    let from = target.saturating_sub(reach).max(lo) - 1;
    let backward = memmem::rfind_iter(&body[from..target], b"\n#")
        .map(|p| from + p + 1)
        .find(|&s| s < target && starts_family(body, s));
    backward.or(forward)
}

/// Whether the line at `start` declares a family and the line before it does not declare the
/// same one.
fn starts_family(body: &[u8], start: usize) -> bool {
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

impl<'b, 'o> Parser<'b, 'o> {
    /// A parser for lines of `body` that hold about `sample_bytes` of samples.
    fn new(
        body: &'b [u8],
        format: Format,
        opts: &'o ParseOptions<'o>,
        prior: Option<&'o Exposition>,
        sample_bytes: usize,
    ) -> Self {
        let prior = usable(prior, format, opts);
        // Room for the families of an engine's registry (vLLM's has some 200) in one go.
        let names = (sample_bytes / 2048).clamp(16, 256);
        Parser {
            body,
            format,
            opts,
            decls: Vec::with_capacity(names),
            by_name: HashMap::with_capacity_and_hasher(256, PassThrough),
            by_escaped: HashMap::new(),
            colon_decls: Vec::with_capacity(256),
            escaped_indexed: 0,
            families: Vec::with_capacity(names),
            kept_index: Vec::with_capacity(names),
            kept_counts: Vec::with_capacity(names),
            samples: Vec::with_capacity(sample_bytes / 96),
            side: Vec::new(),
            kept_bytes: 0,
            stats: ParseStats::default(),
            current: NONE,
            ascending: true,
            last_family: NONE,
            scratch: lex::LabelScratch::default(),
            last_sample: None,
            last_pushed: None,
            line_no: 0,
            eof_seen: false,
            record_probes: false,
            probes: Vec::new(),
            prior,
            cursors: Vec::new(),
        }
    }

    /// Reads the lines in `start..end`, after those read before if any; `start` is the start of
    /// a line, `end` the end of one.
    fn run(&mut self, start: usize, end: usize) -> Result<(), ParseError> {
        let body = self.body;
        let body = &body[..end];
        let lex_opts = LexOptions {
            format: self.format,
            max_labels: self.opts.limits.max_labels,
            max_label_value_bytes: self.opts.limits.max_label_value_bytes,
            added: self.opts.added_labels,
            hasher: self.opts.hasher,
        };
        let mut start = start;
        let mut line_no = self.line_no;
        let mut eof_seen = self.eof_seen;
        while start < body.len() {
            line_no += 1;
            let nl = memchr::memchr(b'\n', &body[start..]).map_or(body.len(), |i| start + i);
            let next = nl + 1;
            let mut end = nl;
            if end > start && body[end - 1] == b'\r' {
                end -= 1;
            }
            if end - start > self.opts.limits.max_line_bytes {
                return Err(ParseError::TooLarge {
                    limit: Limit::LineBytes,
                    line: line_no,
                });
            }
            let line = &body[start..end];
            let first = line.iter().position(|&b| b != b' ' && b != b'\t');
            match first {
                None => {}
                Some(i) if line[i] == b'#' => match lex::lex_comment(line, i) {
                    Ok(Comment::Eof) => {
                        if eof_seen {
                            self.stats.malformed += 1;
                        }
                        eof_seen = true;
                    }
                    Ok(c) => self.comment(line, start, c),
                    Err(_) => self.stats.malformed += 1,
                },
                Some(i) => {
                    if eof_seen {
                        // OpenMetrics ends at `# EOF`. Lines after it (two bodies glued
                        // together) are still read, and the stray `# EOF` counted once.
                        self.stats.malformed += 1;
                        eof_seen = false;
                    }
                    self.sample(line, start, i, line_no, &lex_opts)?;
                }
            }
            if self.decls.len() > self.opts.limits.max_families {
                return Err(ParseError::TooLarge {
                    limit: Limit::Families,
                    line: line_no,
                });
            }
            start = next;
        }
        self.line_no = line_no;
        self.eof_seen = eof_seen;
        Ok(())
    }

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

    fn comment(&mut self, line: &[u8], start: usize, c: Comment) {
        // A declaration can change how the next sample name resolves.
        self.last_sample = None;
        let abs = |r: (u32, u32)| Span::new(start + r.0 as usize, start + r.1 as usize);
        let (name, what) = match c {
            Comment::Help { name, .. }
            | Comment::Type { name, .. }
            | Comment::Unit { name, .. } => (name, c),
            Comment::Eof | Comment::Other => return,
        };
        let d = self.declare(abs(name));
        self.current = d;
        let decl = &self.decls[d as usize];
        let kept = decl.kept;
        let primary = decl.families[0] as usize;
        match what {
            Comment::Help { text, .. } => {
                if !kept {
                    return;
                }
                let text_bytes = &line[text.0 as usize..text.1 as usize];
                if self.families[primary].help.is_some()
                    || !lex::valid_help(text_bytes, self.format)
                {
                    self.stats.malformed += kept as u64;
                } else {
                    self.families[primary].help = Some(abs(text));
                }
            }
            Comment::Type { kind, .. } => {
                let parsed = Kind::parse(&line[kind.0 as usize..kind.1 as usize]);
                match (parsed, decl.kind, decl.has_samples) {
                    (Some(k), None, false) => self.set_kind(d, k),
                    _ => self.stats.malformed += kept as u64,
                }
            }
            Comment::Unit { unit, .. } => {
                if kept
                    && self.format == Format::OpenMetrics
                    && self.families[primary].unit.is_none()
                {
                    self.families[primary].unit = Some(abs(unit));
                } else {
                    self.stats.malformed += kept as u64;
                }
            }
            Comment::Eof | Comment::Other => {}
        }
    }

    /// Adds the declarations with `:` made since the last call to the escaped-name index.
    fn index_escaped(&mut self) {
        for &d in &self.colon_decls[self.escaped_indexed..] {
            let escaped: Vec<u8> = self.decls[d as usize]
                .name
                .of(self.body)
                .iter()
                .map(|&b| if b == b':' { b'_' } else { b })
                .collect();
            self.by_escaped.entry(escaped).or_insert(d);
        }
        self.escaped_indexed = self.colon_decls.len();
    }

    /// Finds or creates the declaration for a name.
    fn declare(&mut self, name: Span) -> u32 {
        self.declare_hashed(name, self.opts.hasher.bytes(name.of(self.body)))
    }

    /// [`Parser::declare`], `hash` being the hash of the name.
    fn declare_hashed(&mut self, name: Span, hash: u64) -> u32 {
        let bytes = name.of(self.body);
        if let Some(d) = self.lookup_hashed(hash, bytes) {
            return d;
        }
        let d = self.decls.len() as u32;
        let kept = self.keeps(bytes);
        let has_colon = memchr::memchr(b':', bytes).is_some();
        if has_colon {
            self.colon_decls.push(d);
        }
        let primary = self.new_family(name, Suffix::None, Kind::Untyped, Role::Primary, kept);
        self.decls.push(Decl {
            name,
            kind: None,
            has_colon,
            kept,
            has_samples: false,
            families: [primary, NONE, NONE, NONE],
            probed: 0,
            next: NONE,
        });
        if let Some(head) = self.by_name.insert(hash, d) {
            self.decls[d as usize].next = head;
        }
        d
    }

    /// The declaration of `name`, if any.
    fn lookup(&self, name: &[u8]) -> Option<u32> {
        self.lookup_hashed(self.opts.hasher.bytes(name), name)
    }

    fn lookup_hashed(&self, hash: u64, name: &[u8]) -> Option<u32> {
        let mut d = *self.by_name.get(&hash)?;
        loop {
            let decl = &self.decls[d as usize];
            if decl.name.of(self.body) == name {
                return Some(d);
            }
            if decl.next == NONE {
                return None;
            }
            d = decl.next;
        }
    }

    fn keeps(&self, name: &[u8]) -> bool {
        (self.opts.allow_reserved || !name.starts_with(RESERVED_PREFIX))
            && self
                .opts
                .keep
                .iter()
                .any(|p| name.starts_with(p.as_bytes()))
    }

    fn new_family(
        &mut self,
        base: Span,
        suffix: Suffix,
        kind: Kind,
        role: Role,
        kept: bool,
    ) -> u32 {
        let f = self.families.len() as u32;
        self.families.push(Family {
            base,
            suffix,
            kind,
            typed: false,
            declared: kind,
            role,
            help: None,
            unit: None,
            samples: (0, 0),
        });
        if kept {
            self.kept_index.push(self.kept_counts.len() as u32);
            self.kept_counts.push(0);
        } else {
            self.kept_index.push(NONE);
        }
        f
    }

    fn set_kind(&mut self, d: u32, kind: Kind) {
        let decl = &mut self.decls[d as usize];
        decl.kind = Some(kind);
        let fam = &mut self.families[decl.families[0] as usize];
        fam.typed = true;
        fam.declared = kind;
        match self.format {
            Format::Text => {
                fam.kind = match kind {
                    Kind::Info | Kind::StateSet => Kind::Gauge,
                    Kind::GaugeHistogram => Kind::Histogram,
                    k => k,
                };
            }
            Format::OpenMetrics => {
                // prometheus_client's own mapping from OpenMetrics types to text 0.0.4.
                let (suffix, text_kind) = match kind {
                    Kind::Counter => (Suffix::Total, Kind::Counter),
                    Kind::Info => (Suffix::Info, Kind::Gauge),
                    Kind::StateSet => (Suffix::None, Kind::Gauge),
                    Kind::GaugeHistogram => (Suffix::None, Kind::Histogram),
                    k => (Suffix::None, k),
                };
                fam.suffix = suffix;
                fam.kind = text_kind;
            }
        }
    }

    /// Which suffixes a declaration's samples may carry, in the upstream's format.
    fn suffix_allowed(&self, kind: Option<Kind>, suffix: Suffix) -> bool {
        use Suffix as S;
        match (self.format, kind) {
            (Format::Text, Some(Kind::Histogram | Kind::GaugeHistogram)) => {
                matches!(suffix, S::Bucket | S::Count | S::Sum)
            }
            (Format::Text, Some(Kind::Summary)) => matches!(suffix, S::None | S::Count | S::Sum),
            (Format::Text, _) => suffix == S::None,
            (Format::OpenMetrics, Some(Kind::Counter)) => matches!(suffix, S::Total | S::Created),
            (Format::OpenMetrics, Some(Kind::Histogram)) => {
                matches!(suffix, S::Bucket | S::Count | S::Sum | S::Created)
            }
            (Format::OpenMetrics, Some(Kind::Summary)) => {
                matches!(suffix, S::None | S::Count | S::Sum | S::Created)
            }
            (Format::OpenMetrics, Some(Kind::GaugeHistogram)) => {
                matches!(suffix, S::Bucket | S::GCount | S::GSum)
            }
            (Format::OpenMetrics, Some(Kind::Info)) => suffix == S::Info,
            (Format::OpenMetrics, _) => suffix == S::None,
        }
    }

    /// Does `name` belong to declaration `d`? Returns the suffix and whether the name was the
    /// escaped form of the declared one.
    fn matches(&self, d: u32, name: &[u8]) -> Option<(Suffix, bool)> {
        let decl = &self.decls[d as usize];
        let base = decl.name.of(self.body);
        if name.len() < base.len() {
            return None;
        }
        let (head, tail) = name.split_at(base.len());
        let escaped = if head == base {
            false
        } else if decl.has_colon && escaped_eq(head, base) {
            true
        } else {
            return None;
        };
        let suffix = Suffix::parse(tail)?;
        self.suffix_allowed(decl.kind, suffix)
            .then_some((suffix, escaped))
    }

    /// Resolves a sample name to its declaration; `None` when the name was declared with a type
    /// whose samples cannot carry it (`# TYPE x counter` in OpenMetrics, then a sample `x`).
    fn resolve(&mut self, name_span: Span) -> Option<(u32, Suffix, bool)> {
        let name = name_span.of(self.body);
        if self.current != NONE
            && let Some((s, e)) = self.matches(self.current, name)
        {
            return Some((self.current, s, e));
        }
        if let Some(d) = self.lookup(name)
            && let Some((s, e)) = self.matches(d, name)
        {
            return Some((d, s, e));
        }
        let found = self.resolve_further(name_span);
        if self.record_probes {
            self.probe(name_span, found);
        }
        found
    }

    /// Notes a sample name [`Parser::resolve_further`] resolved to `found`, once per
    /// declaration and suffix it stands for (escaped names every time).
    fn probe(&mut self, name: Span, found: Option<(u32, Suffix, bool)>) {
        let exact = match found {
            Some((d, s, false)) => Some((d, s)),
            Some((_, _, true)) => None,
            None => self.lookup(name.of(self.body)).map(|d| (d, Suffix::None)),
        };
        if let Some((d, s)) = exact {
            let bit = 1u16 << s as u32;
            let decl = &mut self.decls[d as usize];
            if decl.probed & bit != 0 {
                return;
            }
            decl.probed |= bit;
        }
        self.probes.push(name);
    }

    /// [`Parser::resolve`] past the family in force and the exact name.
    fn resolve_further(&mut self, name_span: Span) -> Option<(u32, Suffix, bool)> {
        let name = name_span.of(self.body);
        for suffix in Suffix::ALL {
            if let Some(base) = name.strip_suffix(suffix.as_bytes())
                && let Some(d) = self.lookup(base)
                && let Some((s, e)) = self.matches(d, name)
            {
                return Some((d, s, e));
            }
        }
        // Escaped names (`vllm_x_total` for `vllm:x`) only come from OpenMetrics renderers with
        // client_python#1177: the escaped index is built on the first name that needs it.
        self.index_escaped();
        for suffix in Suffix::ALL {
            if let Some(base) = name.strip_suffix(suffix.as_bytes())
                && let Some(&d) = self.by_escaped.get(base)
                && let Some((s, e)) = self.matches(d, name)
            {
                return Some((d, s, e));
            }
        }
        if let Some(&d) = self.by_escaped.get(name)
            && let Some((s, e)) = self.matches(d, name)
        {
            return Some((d, s, e));
        }
        if self.lookup(name).is_some() {
            return None;
        }
        // A name of its own: an untyped family with no HELP.
        Some((self.declare(name_span), Suffix::None, false))
    }

    /// The text family a sample of `d` with `suffix` goes to, made on first use.
    fn family_for(&mut self, d: u32, suffix: Suffix) -> u32 {
        let decl = &self.decls[d as usize];
        let (slot, role) = family_slot(self.format, suffix);
        if decl.families[slot] != NONE {
            return decl.families[slot];
        }
        let (name, kept, primary) = (decl.name, decl.kept, decl.families[0] as usize);
        let help = self.families[primary].help;
        let f = self.new_family(name, suffix, Kind::Gauge, role, kept);
        let fam = &mut self.families[f as usize];
        fam.typed = true;
        fam.help = help;
        self.decls[d as usize].families[slot] = f;
        f
    }

    fn sample(
        &mut self,
        line: &'b [u8],
        start: usize,
        first: usize,
        line_no: usize,
        lex_opts: &LexOptions<'_>,
    ) -> Result<(), ParseError> {
        // Consecutive samples mostly share a name: when this line starts with the previous
        // sample's name, neither the name scan nor the family resolution needs doing again.
        let rest = &line[first..];
        let cached = self.last_sample.filter(|c| {
            let prev = c.name.of(self.body);
            rest.starts_with(prev)
                && rest
                    .get(prev.len())
                    .is_none_or(|&b| !lex::is_metric_char(b))
        });
        let (name_len, d, suffix, escaped) = match cached {
            Some(c) => (
                (c.name.end - c.name.start) as usize,
                c.decl,
                c.suffix,
                c.escaped,
            ),
            None => {
                let name_len = lex::metric_name_len(rest);
                if name_len == 0 {
                    self.stats.malformed += 1;
                    return Ok(());
                }
                let name = Span::new(start + first, start + first + name_len);
                let Some((d, suffix, escaped)) = self.resolve(name) else {
                    self.stats.malformed += 1;
                    return Ok(());
                };
                self.last_sample = Some(LastSample {
                    name,
                    decl: d,
                    suffix,
                    escaped,
                });
                (name_len, d, suffix, escaped)
            }
        };
        self.current = d;
        self.decls[d as usize].has_samples = true;
        if !self.decls[d as usize].kept {
            self.stats.dropped += 1;
            return Ok(());
        }
        let cursor = self.prior_cursor(d, suffix);
        let (known, next) = self.prior_match(line, cursor);
        #[cfg(test)]
        if known.is_some() {
            REUSED.with(|n| n.set(n.get() + 1));
        }
        let lexed = match known {
            Some(known) => lex::lex_sample_known_labels(
                line,
                known.labels.1 as usize,
                &known,
                lex_opts,
                &mut self.scratch,
            ),
            None => lex::lex_sample(line, first, first + name_len, lex_opts, &mut self.scratch),
        };
        let lexed = match lexed {
            Ok(l) if self.opts.added_labels.is_empty() => lex::SampleLex {
                present: u8::MAX,
                ..l
            },
            Ok(l) => l,
            Err(LineError::TooManyLabels) => {
                return Err(ParseError::TooLarge {
                    limit: Limit::Labels,
                    line: line_no,
                });
            }
            Err(LineError::LabelValueTooLong) => {
                return Err(ParseError::TooLarge {
                    limit: Limit::LabelValueBytes,
                    line: line_no,
                });
            }
            Err(_) => {
                self.stats.malformed += 1;
                return Ok(());
            }
        };
        if self.samples.len() >= self.opts.limits.max_series {
            return Err(ParseError::TooLarge {
                limit: Limit::Series,
                line: line_no,
            });
        }
        let family = self.family_for(d, suffix);
        if self.prior.is_some() {
            let at = family as usize;
            if self.cursors.len() <= at {
                self.cursors.resize(at + 1, UNSEEN);
            }
            self.cursors[at] = (next, cursor.1);
        }
        if family != self.last_family {
            // Families are numbered in order of appearance (`NONE` is the largest number).
            self.ascending &= family > self.last_family || self.last_family == NONE;
            self.last_family = family;
        }
        let rename = if escaped {
            self.stats.renamed += 1;
            let fam = &self.families[family as usize];
            // The written name is `base` + the family's own suffix + the sample's suffix.
            Some(match (fam.suffix, suffix) {
                (Suffix::None, s) => s,
                (fs, _) => fs,
            })
        } else {
            None
        };
        let end = start + line.len();
        // Only kept families have samples.
        let kept = self.kept_index[family as usize];
        self.kept_counts[kept as usize] += 1;
        let mut sample = match Sample::new(start, end, &lexed, rename, kept) {
            Some(s) => s,
            None => {
                self.side.push(SideLex {
                    line_end: end as u32,
                    lex: lexed,
                });
                let index = (self.side.len() - 1) as u32;
                Sample::new_side(start, &lexed, rename, kept, index)
            }
        };
        let pushed = (d, suffix, escaped);
        sample.set_same_name_as_previous(self.last_pushed == Some(pushed));
        self.last_pushed = Some(pushed);
        self.samples.push(sample);
        self.kept_bytes += line.len() + 1;
        Ok(())
    }

    /// Where the samples of declaration `d` with `suffix` stand in `prior`: the next one to
    /// compare a line with and the end of their family's, `(0, 0)` when it has none.
    fn prior_cursor(&self, d: u32, suffix: Suffix) -> (u32, u32) {
        let Some(prior) = self.prior else {
            return (0, 0);
        };
        let (slot, role) = family_slot(self.format, suffix);
        let decl = &self.decls[d as usize];
        let family = decl.families[slot];
        if family != NONE
            && let Some(&c) = self.cursors.get(family as usize)
            && c != UNSEEN
        {
            return c;
        }
        prior
            .find_family(decl.name.of(self.body), role)
            .unwrap_or((0, 0))
    }

    /// The lexing of the sample of `prior` at `cursor`, or of the one after it (a series gone
    /// since), when that line had labels, was canonical without timestamp or exemplar, and
    /// starts with the same bytes as `line` up to and including its `}`; and where the cursor
    /// goes next.
    fn prior_match(&self, line: &[u8], cursor: (u32, u32)) -> (Option<lex::SampleLex>, u32) {
        let Some(prior) = self.prior else {
            return (None, 0);
        };
        let (at, end) = cursor;
        let candidate = |k: u32| {
            let sample = &prior.samples[k as usize];
            let close = sample.offsets[3] as usize;
            (sample.flags & (CANONICAL | SIDE) == CANONICAL && close != 0)
                .then_some((sample, close))
        };
        for k in at..end.min(at.saturating_add(2)) {
            if let Some((sample, close)) = candidate(k) {
                let start = sample.line_start as usize;
                if line.len() > close && line[..=close] == prior.body[start..=start + close] {
                    return (Some(prior.lex(sample)), k + 1);
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

    /// Drops families that are not kept, orders samples by family. `capacity`: room for this
    /// many samples in the result.
    fn finish(&mut self, capacity: usize) -> Part {
        // Samples are numbered by kept family already: only families under the reserved
        // prefix (an OpenMetrics counter `dynamo_sysport` is `dynamo_sysport_total`) can
        // still go, and then the samples are renumbered.
        let mut families = Vec::with_capacity(self.kept_counts.len());
        let mut counts = Vec::with_capacity(self.kept_counts.len());
        let mut remap = Vec::new();
        for (fam, &k) in self.families.iter().zip(&self.kept_index) {
            if k == NONE {
                continue;
            }
            let reserved = !self.opts.allow_reserved
                && concat_starts_with(
                    fam.base.of(self.body),
                    fam.suffix.as_bytes(),
                    RESERVED_PREFIX,
                );
            if reserved && remap.is_empty() {
                remap = (0..k).collect();
            }
            if reserved {
                remap.push(NONE);
                continue;
            }
            if !remap.is_empty() {
                remap.push(families.len() as u32);
            }
            families.push(fam.clone());
            counts.push(self.kept_counts[k as usize]);
        }
        if !remap.is_empty() {
            let before = self.samples.len();
            let side = &self.side;
            let mut removed_bytes = 0;
            let (mut ascending, mut last) = (true, 0);
            self.samples.retain_mut(|s| {
                let f = remap[s.family() as usize];
                if f == NONE {
                    removed_bytes += s.line_len(side) + 1;
                    return false;
                }
                s.set_family(f);
                ascending &= f >= last;
                last = f;
                true
            });
            self.kept_bytes -= removed_bytes;
            self.stats.dropped += (before - self.samples.len()) as u64;
            self.ascending = ascending;
        }
        let mut next = 0u32;
        for (fam, &n) in families.iter_mut().zip(&counts) {
            fam.samples = (next, next + n);
            next += n;
        }
        let unsorted = std::mem::take(&mut self.samples);
        let samples = if self.ascending {
            unsorted
        } else {
            // Counting sort by family: stable, O(n), one allocation. A sample with the same
            // name as the one before it is in the same family, so it still follows it.
            let mut next: Vec<u32> = families.iter().map(|f| f.samples.0).collect();
            let mut out = Vec::with_capacity(capacity.max(unsorted.len()));
            out.resize(unsorted.len(), unsorted[0]);
            for s in &unsorted {
                let slot = &mut next[s.family() as usize];
                out[*slot as usize] = *s;
                *slot += 1;
            }
            out
        };
        #[cfg(test)]
        {
            // In order of family, then of the body; every family's range holds its samples.
            assert!(samples.windows(2).all(|w| {
                (w[0].family(), w[0].line_start()) < (w[1].family(), w[1].line_start())
            }));
            for (f, fam) in families.iter().enumerate() {
                let range = &samples[fam.samples.0 as usize..fam.samples.1 as usize];
                assert!(range.iter().all(|s| s.family() as usize == f));
            }
            assert_eq!(next as usize, samples.len());
        }
        self.stats.kept = samples.len() as u64;
        Part {
            families,
            samples,
            side: std::mem::take(&mut self.side),
            kept_bytes: self.kept_bytes,
            stats: self.stats,
        }
    }
}

/// `prior`, if its lines were lexed as a parse with `format` and `opts` lexes them.
fn usable<'p>(
    prior: Option<&'p Exposition>,
    format: Format,
    opts: &ParseOptions<'_>,
) -> Option<&'p Exposition> {
    prior.filter(|p| p.format == format && p.lexed_with == LexKey::of(opts))
}

/// The slot of a declaration's families (`Decl::families`) that its samples with `suffix` go
/// to, and that family's role.
fn family_slot(format: Format, suffix: Suffix) -> (usize, Role) {
    match (format, suffix) {
        (Format::OpenMetrics, Suffix::Created) => (1, Role::Created),
        (Format::OpenMetrics, Suffix::GCount) => (2, Role::GCount),
        (Format::OpenMetrics, Suffix::GSum) => (3, Role::GSum),
        _ => (0, Role::Primary),
    }
}

/// Whether `a` followed by `b` starts with `prefix`.
fn concat_starts_with(a: &[u8], b: &[u8], prefix: &[u8]) -> bool {
    if a.len() >= prefix.len() {
        a.starts_with(prefix)
    } else {
        prefix.starts_with(a) && b.starts_with(&prefix[a.len()..])
    }
}

/// `a` equals `b` where `b` may have `:` and `a` has `_` in its place.
fn escaped_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || (y == b':' && x == b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_equal_hashes_are_told_apart() {
        // A keyed 64-bit hash makes a collision between real names all but impossible, so the
        // chain of declarations sharing a hash is exercised with a hash given by hand.
        let body = b"vllm:a vllm:b vllm:c";
        let keep = ["vllm:".to_string()];
        let opts = ParseOptions {
            keep: &keep,
            limits: super::super::tests::LIMITS,
            added_labels: &[],
            hasher: PairHasher::new(1),
            allow_reserved: false,
        };
        let mut p = Parser::new(body, Format::Text, &opts, None, body.len());
        let (a, b) = (Span::new(0, 6), Span::new(7, 13));
        let da = p.declare_hashed(a, 42);
        let db = p.declare_hashed(b, 42);
        assert_ne!(da, db);
        assert_eq!(p.declare_hashed(a, 42), da, "declared once");
        assert_eq!(p.declare_hashed(b, 42), db, "declared once");
        assert_eq!(p.lookup_hashed(42, b"vllm:a"), Some(da));
        assert_eq!(p.lookup_hashed(42, b"vllm:b"), Some(db));
        assert_eq!(p.lookup_hashed(42, b"vllm:c"), None);
        assert_eq!(p.lookup_hashed(43, b"vllm:a"), None);
    }
}
