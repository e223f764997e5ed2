//! One upstream body, lexed, filtered and grouped by family: the [`Exposition`] a parse makes
//! and every writer reads.

use bytes::Bytes;

use super::family::{Family, Role};
use super::sample::{CANONICAL, SAME_NAME, Sample, SideLex};
use super::stats::ParseStats;
use crate::format::Format;
use crate::hash::{self, PairHasher};
use crate::lex::{LexKey, LexOptions, SampleLex};

/// One upstream body, lexed, filtered and grouped by family.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub(crate) body: Bytes,
    pub(crate) format: Format,
    pub(crate) families: Vec<Family>,
    pub(crate) samples: Vec<Sample>,
    /// The lexing of samples that do not fit [`Sample`].
    pub(crate) side: Vec<SideLex>,
    pub(crate) stats: ParseStats,
    /// Bytes of the kept sample lines with their newlines, known once parsed.
    pub(crate) kept_bytes: usize,
    /// The options its lines were lexed with: a later parse takes a line's lexing from here
    /// only under the same ones.
    pub(crate) lexed_with: LexKey,
    /// Its families by name and role, made when a later parse first reads it as its prior.
    pub(crate) by_name: FamilyIndex,
}

/// Two expositions are equal when they hold the same parse of the same body. The family index
/// is left out: it is made from the families, on first use.
impl PartialEq for Exposition {
    fn eq(&self, other: &Self) -> bool {
        // Every field is named, so a new one does not compile until it is compared or left out.
        let Exposition {
            body,
            format,
            families,
            samples,
            side,
            stats,
            kept_bytes,
            lexed_with,
            by_name: _,
        } = self;
        *body == other.body
            && *format == other.format
            && *families == other.families
            && *samples == other.samples
            && *side == other.side
            && *stats == other.stats
            && *kept_bytes == other.kept_bytes
            && *lexed_with == other.lexed_with
    }
}

impl Eq for Exposition {}

/// An index of an exposition's families by [`family_key`], made on first use.
#[derive(Debug, Default, Clone)]
pub(crate) struct FamilyIndex(
    std::sync::OnceLock<std::collections::HashMap<u64, u32, hash::PassThrough>>,
);

/// The key of a family of declared name `base` in role `role`.
fn family_key(hasher: PairHasher, base: &[u8], role: Role) -> u64 {
    hasher.bytes(base).wrapping_add(role as u64)
}

impl Exposition {
    /// An exposition with nothing in it.
    pub fn empty() -> Exposition {
        Exposition {
            body: Bytes::new(),
            format: Format::Text,
            families: Vec::new(),
            samples: Vec::new(),
            side: Vec::new(),
            stats: ParseStats::default(),
            kept_bytes: 0,
            lexed_with: LexKey::of(&LexOptions {
                format: Format::Text,
                max_labels: 0,
                max_label_value_bytes: 0,
                added: &[],
                hasher: PairHasher::new(0),
            }),
            by_name: FamilyIndex::default(),
        }
    }

    /// The index in [`Exposition::families`] of the family declared `base` with `role`.
    pub(crate) fn family_index(&self, base: &[u8], role: Role) -> Option<usize> {
        let hasher = self.lexed_with.hasher;
        let index = self.by_name.0.get_or_init(|| {
            let mut index = std::collections::HashMap::with_capacity_and_hasher(
                self.families.len(),
                hash::PassThrough,
            );
            for (i, f) in self.families.iter().enumerate() {
                index
                    .entry(family_key(hasher, f.base.of(&self.body), f.role))
                    .or_insert(i as u32);
            }
            index
        });
        let i = *index.get(&family_key(hasher, base, role))? as usize;
        let f = &self.families[i];
        (f.base.of(&self.body) == base && f.role == role).then_some(i)
    }

    /// The body the offsets refer to.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The format the body was parsed as.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Kept families in order of first appearance.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// All kept samples, grouped by family in family order.
    pub fn all_samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The samples of one family.
    pub fn samples(&self, family: &Family) -> &[Sample] {
        &self.samples[family.samples.0 as usize..family.samples.1 as usize]
    }

    /// Parse counts.
    pub fn stats(&self) -> ParseStats {
        self.stats
    }

    /// The family's text 0.0.4 name as two parts, declared name and suffix.
    pub fn family_name(&self, family: &Family) -> (&[u8], &'static [u8]) {
        (family.base.of(&self.body), family.suffix.as_bytes())
    }

    /// The sample's name as written out: its name in the body, or the recovered one.
    pub fn sample_name(&self, family: &Family, sample: &Sample) -> (&[u8], &'static [u8]) {
        match sample.rename() {
            Some(suffix) => (family.base.of(&self.body), suffix.as_bytes()),
            None => {
                let lex = self.lex(sample);
                (
                    self.sample_part(sample, (lex.name_start, lex.name_end)),
                    b"",
                )
            }
        }
    }

    /// The offsets of a sample's parts within its line.
    #[inline]
    pub fn lex(&self, sample: &Sample) -> SampleLex {
        match sample.side_index() {
            None => {
                let o = sample.offsets;
                SampleLex {
                    name_start: o[0] as u32,
                    name_end: o[1] as u32,
                    labels: (o[2] as u32, o[3] as u32),
                    value: (o[4] as u32, o[5] as u32),
                    timestamp: (0, 0),
                    exemplar: (0, 0),
                    labels_hash: sample.labels_hash,
                    present: sample.present,
                    canonical: sample.canonical(),
                }
            }
            Some(i) => self.side[i].lex,
        }
    }

    /// A part of a sample line given line-relative offsets.
    #[inline]
    pub fn sample_part(&self, sample: &Sample, r: (u32, u32)) -> &[u8] {
        let s = sample.line_start as usize;
        &self.body[s + r.0 as usize..s + r.1 as usize]
    }

    /// The whole sample line.
    #[inline]
    pub fn line(&self, sample: &Sample) -> &[u8] {
        let start = sample.line_start as usize;
        &self.body[start..start + self.line_len(sample)]
    }

    /// The line when it can be written out as it stands: canonical, under its own name, and
    /// without timestamp or exemplar (the common case, checked without decoding the offsets).
    #[inline]
    pub fn plain_line(&self, sample: &Sample) -> Option<&[u8]> {
        (sample.flags & !SAME_NAME == CANONICAL).then(|| {
            let start = sample.line_start as usize;
            &self.body[start..start + sample.offsets[6] as usize]
        })
    }

    /// The length of the sample's line.
    #[inline]
    pub fn line_len(&self, sample: &Sample) -> usize {
        sample.line_len(&self.side)
    }

    /// Total bytes of kept sample lines, for sizing output buffers.
    pub fn kept_bytes(&self) -> usize {
        self.kept_bytes
    }
}
