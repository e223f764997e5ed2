//! One upstream body → an [`Exposition`]: lex every line, resolve each sample to its family,
//! keep the families the upstream's prefixes allow, group samples by family.
//!
//! Families are resolved the way Prometheus' parser does it: a sample belongs to the family
//! declared under its exact name, else to the family its name minus a type suffix names
//! (`h_bucket` → histogram `h`), else to an untyped family of its own. OpenMetrics families are
//! split into their text 0.0.4 families here (counter `x` → `x_total` and gauge `x_created`).

use std::collections::HashMap;

use bytes::Bytes;

use super::lex::{self, Comment, LexOptions, LineError};
use super::{
    Exposition, Family, Format, Kind, PairHasher, ParseStats, RESERVED_PREFIX, Role, Sample,
    SideLex, Span, Suffix,
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
}

const NONE: u32 = u32::MAX;

struct Parser<'b, 'o> {
    body: &'b [u8],
    format: Format,
    opts: &'o ParseOptions<'o>,
    decls: Vec<Decl>,
    by_name: HashMap<&'b [u8], u32>,
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
}

/// How the previous sample's name resolved.
#[derive(Debug, Clone, Copy)]
struct LastSample {
    name: Span,
    decl: u32,
    suffix: Suffix,
    escaped: bool,
}

/// Parses one upstream body. The body is kept, not copied: the result refers into it.
pub fn parse(
    body: Bytes,
    format: Format,
    opts: &ParseOptions<'_>,
) -> Result<Exposition, ParseError> {
    if body.len() > u32::MAX as usize - 1 {
        return Err(ParseError::BodyTooLarge);
    }
    let (families, samples, side, kept_bytes, stats) = {
        // Room for the families of an engine's registry (vLLM's has some 200) in one go.
        let names = (body.len() / 2048).clamp(16, 256);
        let mut p = Parser {
            body: &body,
            format,
            opts,
            decls: Vec::with_capacity(names),
            by_name: HashMap::with_capacity(256),
            by_escaped: HashMap::new(),
            colon_decls: Vec::with_capacity(256),
            escaped_indexed: 0,
            families: Vec::with_capacity(names),
            kept_index: Vec::with_capacity(names),
            kept_counts: Vec::with_capacity(names),
            samples: Vec::with_capacity(body.len() / 96),
            side: Vec::new(),
            kept_bytes: 0,
            stats: ParseStats::default(),
            current: NONE,
            ascending: true,
            last_family: NONE,
            scratch: lex::LabelScratch::default(),
            last_sample: None,
            last_pushed: None,
        };
        p.run()?;
        p.finish()
    };
    Ok(Exposition {
        body,
        format,
        families,
        samples,
        side,
        stats,
        kept_bytes,
    })
}

impl<'b> Parser<'b, '_> {
    fn run(&mut self) -> Result<(), ParseError> {
        let body = self.body;
        let lex_opts = LexOptions {
            format: self.format,
            max_labels: self.opts.limits.max_labels,
            max_label_value_bytes: self.opts.limits.max_label_value_bytes,
            added: self.opts.added_labels,
            hasher: self.opts.hasher,
        };
        let mut start = 0;
        let mut line_no = 0;
        let mut eof_seen = false;
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
        Ok(())
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
        let bytes = name.of(self.body);
        if let Some(&d) = self.by_name.get(bytes) {
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
        });
        self.by_name.insert(bytes, d);
        d
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
        if let Some(&d) = self.by_name.get(name)
            && let Some((s, e)) = self.matches(d, name)
        {
            return Some((d, s, e));
        }
        for suffix in Suffix::ALL {
            if let Some(base) = name.strip_suffix(suffix.as_bytes())
                && let Some(&d) = self.by_name.get(base)
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
        if self.by_name.contains_key(name) {
            return None;
        }
        // A name of its own: an untyped family with no HELP.
        Some((self.declare(name_span), Suffix::None, false))
    }

    /// The text family a sample of `d` with `suffix` goes to, made on first use.
    fn family_for(&mut self, d: u32, suffix: Suffix) -> u32 {
        let decl = &self.decls[d as usize];
        let (slot, role) = match (self.format, suffix) {
            (Format::OpenMetrics, Suffix::Created) => (1, Role::Created),
            (Format::OpenMetrics, Suffix::GCount) => (2, Role::GCount),
            (Format::OpenMetrics, Suffix::GSum) => (3, Role::GSum),
            _ => return decl.families[0],
        };
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
        let lexed =
            match lex::lex_sample(line, first, first + name_len, lex_opts, &mut self.scratch) {
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

    /// Drops families that are not kept, orders samples by family.
    fn finish(mut self) -> (Vec<Family>, Vec<Sample>, Vec<SideLex>, usize, ParseStats) {
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
            let mut out = vec![unsorted[0]; unsorted.len()];
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
        (families, samples, self.side, self.kept_bytes, self.stats)
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
