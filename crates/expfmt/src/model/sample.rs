//! One kept sample line in 32 bytes ([`Sample`]), and the side table entry of a line that does
//! not fit them ([`SideLex`]).

use super::family::Suffix;
use crate::lex::SampleLex;

/// One sample line that was kept, in 32 bytes: a 16 MiB body holds some 130,000 of them.
///
/// The offsets of the line's parts are kept relative to the line as `u16`. A line with a
/// timestamp or an exemplar, or one too long for `u16` offsets, keeps its whole [`SampleLex`] in
/// a side table of the exposition instead (rare: the engines sysport fronts write neither), so
/// [`Exposition::lex`](super::Exposition::lex) is the way to read any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Start of the line in the body.
    pub(super) line_start: u32,
    family: u32,
    pub(super) labels_hash: u64,
    /// `name_start`, `name_end`, labels start and end, value start and end, line length; for a
    /// line in the side table the first two hold its index there (low half first).
    pub(super) offsets: [u16; 7],
    /// [`SampleLex::present`].
    pub(crate) present: u8,
    /// `CANONICAL`, `SIDE`, the rename suffix (0 = none, else its index + 1) in bits 2 to 5,
    /// `SAME_NAME`.
    pub(super) flags: u8,
}

pub(super) const CANONICAL: u8 = 1;
const SIDE: u8 = 2;
const RENAME_SHIFT: u32 = 2;
const RENAME_MASK: u8 = 0xf;
/// The sample's name is the one of the sample before it in the exposition.
pub(super) const SAME_NAME: u8 = 0x80;

impl Sample {
    /// A sample for the line at `line_start..line_end`. Returns `None` when its lexing has to go
    /// to the side table; then [`Sample::new_side`] makes it.
    pub(crate) fn new(
        line_start: usize,
        line_end: usize,
        lex: &SampleLex,
        rename: Option<Suffix>,
        family: u32,
    ) -> Option<Sample> {
        let len = line_end - line_start;
        // One test for all three: a length over 16 bits, a timestamp, an exemplar.
        let extra = (len >> 16) as u32
            | (lex.timestamp.1 - lex.timestamp.0)
            | (lex.exemplar.1 - lex.exemplar.0);
        if extra != 0 {
            return None;
        }
        // Every offset is within the line, so each fits once the length does.
        let offsets = [
            lex.name_start as u16,
            lex.name_end as u16,
            lex.labels.0 as u16,
            lex.labels.1 as u16,
            lex.value.0 as u16,
            lex.value.1 as u16,
            len as u16,
        ];
        Some(Sample {
            line_start: line_start as u32,
            family,
            labels_hash: lex.labels_hash,
            offsets,
            present: lex.present,
            flags: Sample::flags(lex, rename, 0),
        })
    }

    /// A sample whose lexing is entry `index` of the side table.
    pub(crate) fn new_side(
        line_start: usize,
        lex: &SampleLex,
        rename: Option<Suffix>,
        family: u32,
        index: u32,
    ) -> Sample {
        let mut s = Sample {
            line_start: line_start as u32,
            family,
            labels_hash: lex.labels_hash,
            offsets: [0; 7],
            present: lex.present,
            flags: Sample::flags(lex, rename, SIDE),
        };
        s.set_side_index(index);
        s
    }

    /// Where a side-table sample's index is kept: its first two offsets.
    fn set_side_index(&mut self, index: u32) {
        self.offsets[0] = index as u16;
        self.offsets[1] = (index >> 16) as u16;
    }

    fn flags(lex: &SampleLex, rename: Option<Suffix>, side: u8) -> u8 {
        let rename = rename.map_or(0, |r| r as u8 + 1);
        (if lex.canonical { CANONICAL } else { 0 }) | side | (rename << RENAME_SHIFT)
    }

    /// Start of the line in the body.
    #[inline]
    pub fn line_start(&self) -> u32 {
        self.line_start
    }

    /// Order-independent hash of the label pairs ([`SampleLex::labels_hash`]).
    #[inline]
    pub fn labels_hash(&self) -> u64 {
        self.labels_hash
    }

    /// Bit `i` set when the line carries the `i`-th added label ([`SampleLex::present`]).
    #[inline]
    pub fn present(&self) -> u8 {
        self.present
    }

    /// Whether the line can be copied as it stands ([`SampleLex::canonical`]).
    #[inline]
    pub fn canonical(&self) -> bool {
        self.flags & CANONICAL != 0
    }

    /// When not `None`, the name as written is an escaped form (`vllm_x_total` for `vllm:x`,
    /// prometheus/client_python#1177) and the real name is the family's `base` + this suffix.
    #[inline]
    pub fn rename(&self) -> Option<Suffix> {
        match (self.flags >> RENAME_SHIFT) & RENAME_MASK {
            0 => None,
            r => Some(Suffix::BY_INDEX[r as usize - 1]),
        }
    }

    #[inline]
    pub(super) fn side_index(&self) -> Option<usize> {
        (self.flags & SIDE != 0)
            .then(|| self.offsets[0] as usize | (self.offsets[1] as usize) << 16)
    }

    /// The length of the line, given the side table of its exposition.
    #[inline]
    pub(crate) fn line_len(&self, side: &[SideLex]) -> usize {
        match self.side_index() {
            None => self.offsets[6] as usize,
            Some(i) => (side[i].line_end - self.line_start) as usize,
        }
    }

    /// Where the line's labels end (its `}`, relative to the line) when a later line that
    /// repeats the line up to there may take its name and labels as lexed: the line was
    /// canonical, had labels, and its lexing is held here (no timestamp or exemplar, under
    /// 64 KiB).
    #[inline]
    pub(crate) fn reusable_labels_end(&self) -> Option<usize> {
        let close = self.offsets[3] as usize;
        (self.flags & (CANONICAL | SIDE) == CANONICAL && close != 0).then_some(close)
    }

    /// The line's length, when a later parse may take this sample whole for the line right
    /// after the one it took as `prev` ([`crate::parse`]'s run of unchanged lines): its line came
    /// right after `prev`'s in the body, with the same name, and was canonical with labels,
    /// without timestamp or exemplar (its value ends it).
    #[inline]
    pub(crate) fn whole_after(&self, prev: &Sample) -> Option<usize> {
        let len = self.offsets[6];
        let ok = self.flags & (CANONICAL | SIDE | SAME_NAME) == CANONICAL | SAME_NAME
            && prev.flags & SIDE == 0
            && self.offsets[3] != 0
            && self.offsets[5] == len
            && self.line_start == prev.line_start + u32::from(prev.offsets[6]) + 1;
        ok.then_some(len as usize)
    }

    /// This sample of a prior page as the sample of the same line at `line_start` of a later
    /// one, pushed right after `last`, the sample of the line before it, of the same name:
    /// the family and the rename are `last`'s, the lexing this one's.
    #[inline]
    pub(crate) fn taken_whole(&self, line_start: usize, last: &Sample, present: u8) -> Sample {
        Sample {
            line_start: line_start as u32,
            family: last.family,
            labels_hash: self.labels_hash,
            offsets: self.offsets,
            present,
            flags: CANONICAL | SAME_NAME | (last.flags & (RENAME_MASK << RENAME_SHIFT)),
        }
    }

    /// Whether the sample's name (as [`Exposition::sample_name`] gives it) is the one of the
    /// sample before it in [`Exposition::all_samples`]; `false` when not known.
    #[inline]
    pub(crate) fn same_name_as_previous(&self) -> bool {
        self.flags & SAME_NAME != 0
    }

    pub(crate) fn set_same_name_as_previous(&mut self, same: bool) {
        self.flags = self.flags & !SAME_NAME | if same { SAME_NAME } else { 0 };
    }

    pub(crate) fn family(&self) -> u32 {
        self.family
    }

    pub(crate) fn set_family(&mut self, family: u32) {
        self.family = family;
    }

    /// The sample with `family` added to its family index and `side` to its side-table index
    /// (for appending one exposition part's samples to another's).
    #[inline]
    pub(crate) fn shifted(mut self, family: u32, side: u32) -> Sample {
        self.family += family;
        if let Some(i) = self.side_index() {
            self.set_side_index(i as u32 + side);
        }
        self
    }
}

/// A line's whole lexing, for the samples that [`Sample`] cannot hold in its own 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SideLex {
    pub line_end: u32,
    pub lex: SampleLex,
}
