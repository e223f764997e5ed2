//! One upstream body → an [`Exposition`]: lex every line, resolve each sample to its family,
//! keep the families the upstream's prefixes allow, group samples by family.
//!
//! Families are resolved the way Prometheus' parser does it: a sample belongs to the family
//! declared under its exact name, else to the family its name minus a type suffix names
//! (`h_bucket` → histogram `h`), else to an untyped family of its own. OpenMetrics families are
//! split into their text 0.0.4 families here (counter `x` → `x_total` and gauge `x_created`).
//!
//! This file holds the entry points and the line loop; [`family`] resolves names to families,
//! [`split`] shares a large body between two threads (the second one a
//! long-lived [`helper`]), [`prior`] reuses the previous page.

mod family;
mod helper;
mod prior;
#[cfg(test)]
mod prior_tests;
mod split;
#[cfg(test)]
mod split_tests;

use self::prior::{Known, UNSEEN, usable};
use self::split::{
    CLAIM_BYTES, MIN_SHARE_BYTES, PARALLEL_MIN_BYTES, PARALLEL_MIN_BYTES_AFTER_PRIOR, parse_shared,
    split_point,
};

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::format::Format;
use crate::hash::{PairHasher, PassThrough};
use crate::lex::{self, Comment, LexKey, LexOptions, LineError};
use crate::model::{
    Exposition, Family, Kind, Malformed, NoDuplicates, ParseStats, RESERVED_PREFIX, Rule, Sample,
    SideLex, Span, Suffix,
};

/// Limits applied while parsing one body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// The longest line, in bytes, without its line ending.
    pub max_line_bytes: usize,
    /// Samples kept.
    pub max_series: usize,
    /// Distinct names (declared or implied), kept or not: each costs a table entry.
    pub max_families: usize,
    /// Labels on one sample.
    pub max_labels: usize,
    /// One label value, in bytes as written (escaped).
    pub max_label_value_bytes: usize,
}

/// What to keep and how far to go.
#[derive(Debug, Clone, Copy)]
pub struct ParseOptions<'a> {
    /// Family-name prefixes to keep.
    pub keep: &'a [String],
    /// How far a body may go before it is refused.
    pub limits: ParseLimits,
    /// Names of the labels sysport adds to this body's series (so the lexer can note which a
    /// line already has). Empty: add none to these series (sysport's own metrics).
    pub added_labels: &'a [&'a [u8]],
    /// The key of the label hashes that identify series.
    pub hasher: PairHasher,
    /// Keep families under [`RESERVED_PREFIX`] (only for sysport's own metrics).
    pub allow_reserved: bool,
}

impl<'a> ParseOptions<'a> {
    /// What the lexer needs of these options, for a body in `format`.
    pub(crate) fn lex_options(&self, format: Format) -> LexOptions<'a> {
        LexOptions {
            format,
            max_labels: self.limits.max_labels,
            max_label_value_bytes: self.limits.max_label_value_bytes,
            added: self.added_labels,
            hasher: self.hasher,
        }
    }
}

/// Which limit a body went over; each is the [`ParseLimits`] field of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    /// [`ParseLimits::max_line_bytes`].
    #[error("line longer than the max_line_bytes limit")]
    LineBytes,
    /// [`ParseLimits::max_series`].
    #[error("more series than the max_series limit")]
    Series,
    /// [`ParseLimits::max_families`].
    #[error("more metric names than the max_families limit")]
    Families,
    /// [`ParseLimits::max_labels`].
    #[error("more labels on a series than the max_labels limit")]
    Labels,
    /// [`ParseLimits::max_label_value_bytes`].
    #[error("label value longer than the max_label_value_bytes limit")]
    LabelValueBytes,
}

/// A body that cannot be used at all. Malformed lines are not errors: they are dropped and
/// counted in [`ParseStats::malformed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body went over a limit at line `line` (1-based).
    #[error("line {line}: {limit}")]
    TooLarge {
        /// The limit it went over.
        limit: Limit,
        /// The line where it did.
        line: usize,
    },
    /// Offsets into the body are 32-bit.
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
/// Bodies this large or larger, parsed after a prior, note which families have the prior's
/// series in the same order ([`crate::NoDuplicates`]). Only a merge of more than 4,096 samples
/// (one table per family) uses it, and a smaller body rarely holds as many: there the noting,
/// a few instructions a sample, would be spent for nothing (4 % of a 100 KB page's parse).
/// The tests note it on every body, so that each parse after a prior they make checks it.
#[cfg(not(test))]
const ORDER_MIN_BYTES: usize = 256 << 10;
#[cfg(test)]
const ORDER_MIN_BYTES: usize = 1;

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
    /// name (for the join with an earlier part: `split::join`).
    record_probes: bool,
    probes: Vec<Span>,
    /// The previous parse of the same upstream, if its lines lexed as this body's do.
    prior: Option<&'o Exposition>,
    /// Per family: the next sample of its family in `prior` to compare a line with, and the
    /// end of that family's samples there (`UNSEEN` before its first sample).
    cursors: Vec<(u32, u32)>,
    /// Per family, as `cursors`: the index of its family in `prior` while each of its samples
    /// so far was the next one of that family there (so its series are the prior's, in the
    /// same order, as far as read), else `NONE`. Kept only when `track_order`.
    as_prior: Vec<u32>,
    /// Whether `as_prior` is kept: with a prior, for a body of [`ORDER_MIN_BYTES`] or more.
    track_order: bool,
    /// The prior's sample that the last line pushed was, whole ([`Known::Whole`]), or `NONE`:
    /// the lines after it may follow the prior's ([`Parser::follow_prior`]). Read and reset
    /// after each sample line.
    whole_at: u32,
}

/// How the previous sample's name resolved.
#[derive(Debug, Clone, Copy)]
struct LastSample {
    name: Span,
    decl: u32,
    suffix: Suffix,
    escaped: bool,
}

/// The UTF-8 encoding of U+FEFF, which some writers put at the start of a text.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

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
/// A body of 256 KiB or more is parsed with [`Split::Shared`]: a second thread takes a later
/// part of it, and the two results are joined when that is provably the result of a parse in
/// one pass; otherwise the body is parsed in one pass.
pub fn parse(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
) -> Result<Exposition, ParseError> {
    parse_after(body, format, opts, None)
}

/// [`parse()`], given `prior`, the previous parse of the same upstream: a sample line whose
/// name and labels are byte for byte those of the line at the same place in `prior`'s
/// family takes their lexing from there, and only its value is read. An engine's series stay
/// the same from one scrape to the next, only their values change, so that is most lines.
/// The result is the one [`parse()`] gives, whatever `prior` holds; `prior` is not used when it
/// was parsed from another format or with other labels, limits or hasher. With a usable prior,
/// a second thread takes part from 1 MiB on.
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
    // A byte order mark is no part of the first line (a HELP, or a sample, would be malformed).
    let body = match body.strip_prefix(UTF8_BOM) {
        Some(rest) => body.slice(body.len() - rest.len()..),
        None => body,
    };
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
            lexed_with: LexKey::of(&opts.lex_options(format)),
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
            as_prior: Vec::new(),
            track_order: prior.is_some() && sample_bytes >= ORDER_MIN_BYTES,
            whole_at: NONE,
        }
    }

    /// Reads the lines in `start..end`, after those read before if any; `start` is the start of
    /// a line, `end` the end of one.
    fn run(&mut self, start: usize, end: usize) -> Result<(), ParseError> {
        let body = self.body;
        let body = &body[..end];
        let lex_opts = self.opts.lex_options(self.format);
        let mut start = start;
        let mut line_no = self.line_no;
        let mut eof_seen = self.eof_seen;
        while start < body.len() {
            line_no += 1;
            let nl = memchr::memchr(b'\n', &body[start..]).map_or(body.len(), |i| start + i);
            let mut next = nl + 1;
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
                            self.malformed(line_no, Rule::RepeatedEof);
                        }
                        eof_seen = true;
                    }
                    Ok(c) => self.comment(line, start, line_no, c),
                    Err(err) => self.malformed(line_no, Rule::Line(err)),
                },
                Some(i) => {
                    if eof_seen {
                        // OpenMetrics ends at `# EOF`. Lines after it (two bodies glued
                        // together) are still read, and the stray `# EOF` counted once.
                        self.malformed(line_no, Rule::AfterEof);
                        eof_seen = false;
                    }
                    self.sample(line, start, i, line_no, &lex_opts)?;
                    if self.whole_at != NONE && next < body.len() {
                        let (to, lines) = self.follow_prior(body, next);
                        next = to;
                        line_no += lines;
                    }
                    self.whole_at = NONE;
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

    /// Counts a malformed line; the first of the body is kept with its line number. Out of
    /// line, so that the line loop's code stays as it was without it (callgrind: 1% fewer
    /// instructions per parse than inlined).
    #[cold]
    #[inline(never)]
    fn malformed(&mut self, line: usize, rule: Rule) {
        self.stats.malformed += 1;
        if self.stats.first_malformed.is_none() {
            self.stats.first_malformed = Some(Malformed { line, rule });
        }
    }

    fn comment(&mut self, line: &[u8], start: usize, line_no: usize, c: Comment) {
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
                if self.families[primary].help.is_some() {
                    self.malformed(line_no, Rule::RepeatedHelp);
                } else if !lex::valid_help(text_bytes, self.format) {
                    self.malformed(line_no, Rule::BadHelp);
                } else {
                    self.families[primary].help = Some(abs(text));
                }
            }
            Comment::Type { kind, .. } => {
                let parsed = Kind::parse(&line[kind.0 as usize..kind.1 as usize]);
                let broken = match (parsed, decl.kind, decl.has_samples) {
                    (Some(k), None, false) => {
                        self.set_kind(d, k);
                        return;
                    }
                    (None, _, _) => Rule::UnknownType,
                    (Some(_), Some(_), _) => Rule::RepeatedType,
                    (Some(_), None, true) => Rule::TypeAfterSamples,
                };
                if kept {
                    self.malformed(line_no, broken);
                }
            }
            Comment::Unit { unit, .. } => {
                if kept
                    && self.format == Format::OpenMetrics
                    && self.families[primary].unit.is_none()
                {
                    self.families[primary].unit = Some(abs(unit));
                } else if kept {
                    self.malformed(line_no, Rule::Unit);
                }
            }
            Comment::Eof | Comment::Other => {}
        }
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
                    self.malformed(line_no, Rule::Line(LineError::BadName));
                    return Ok(());
                }
                let name = Span::new(start + first, start + first + name_len);
                let Some((d, suffix, escaped)) = self.resolve(name) else {
                    self.malformed(line_no, Rule::NameNotOfType);
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
        let whole = matches!(known, Some(Known::Whole(_)));
        let matched = known.is_some();
        let lexed = match known {
            Some(Known::Whole(known)) => Ok(known),
            Some(Known::Labels(known)) => lex::lex_sample_known_labels(
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
            Err(err) => {
                self.malformed(line_no, Rule::Line(err));
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
            if self.track_order {
                let in_order = matched && next == cursor.0 + 1;
                if !in_order || self.cursors[at] == UNSEEN {
                    self.note_order(at, d, suffix, in_order);
                }
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
        if whole {
            self.whole_at = next - 1;
        }
        Ok(())
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
        for (i, (fam, &k)) in self.families.iter().zip(&self.kept_index).enumerate() {
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
            families.push(Family {
                no_duplicates: NoDuplicates::new(self.no_duplicates_as_prior(i)),
                ..fam.clone()
            });
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
        // In order of family, then of the body; every family's range holds its samples. Checked
        // in tests and by the fuzzer, which build with debug assertions.
        debug_assert!(
            samples.windows(2).all(|w| {
                (w[0].family(), w[0].line_start()) < (w[1].family(), w[1].line_start())
            })
        );
        debug_assert!(families.iter().enumerate().all(|(f, fam)| {
            samples[fam.samples.0 as usize..fam.samples.1 as usize]
                .iter()
                .all(|s| s.family() as usize == f)
        }));
        debug_assert_eq!(next as usize, samples.len());
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

/// Whether `a` followed by `b` starts with `prefix`.
fn concat_starts_with(a: &[u8], b: &[u8], prefix: &[u8]) -> bool {
    if a.len() >= prefix.len() {
        a.starts_with(prefix)
    } else {
        prefix.starts_with(a) && b.starts_with(&prefix[a.len()..])
    }
}
