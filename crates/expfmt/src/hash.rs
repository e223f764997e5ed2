//! A small keyed hash for series identity.
//!
//! Series are identified by their name and their *set* of label pairs, so the label part is a
//! wrapping sum of per-pair hashes: `{a="1",b="2"}` and `{b="2",a="1"}` hash alike, and labels
//! sysport adds can be summed in without re-reading the line. The key comes from the process'
//! random state, so an upstream cannot aim collisions at the duplicate table. A hash match is
//! always confirmed by comparing the series, so a collision can never drop a sample.

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The key for series hashes; copy it freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairHasher {
    key: u64,
}

impl PairHasher {
    /// A hasher with a fixed key (tests) .
    pub fn new(key: u64) -> Self {
        PairHasher { key: key | 1 }
    }

    /// A hasher keyed from the process' random state.
    pub fn random() -> Self {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5157_5053);
        PairHasher::new(h.finish())
    }

    /// Hash of a byte string.
    #[inline]
    pub(crate) fn bytes(self, s: &[u8]) -> u64 {
        fmix(self.raw(s))
    }

    /// A fast unfinalised hash of `s`, good enough as the input of [`pair_from_raw`], which
    /// finalises. Label names and values are short, so short inputs take one folded multiply
    /// on two overlapping loads; longer ones run two independent lanes.
    #[inline]
    pub(crate) fn raw(self, s: &[u8]) -> u64 {
        let len = s.len();
        let (a, b) = if len <= 16 {
            if len >= 8 {
                (read64(s, 0), read64(s, len - 8))
            } else if len >= 4 {
                (read32(s, 0), read32(s, len - 4))
            } else if len > 0 {
                (
                    (s[0] as u64) << 16 | (s[len / 2] as u64) << 8 | s[len - 1] as u64,
                    0,
                )
            } else {
                (0, 0)
            }
        } else {
            let (mut x, mut y) = (self.key, K2);
            let mut i = 0;
            while i + 16 < len {
                x = folded_mul(read64(s, i) ^ x, K);
                y = folded_mul(read64(s, i + 8) ^ y, K2);
                i += 16;
            }
            (x ^ read64(s, len - 16), y ^ read64(s, len - 8))
        };
        folded_mul(a ^ self.key, b ^ K2 ^ len as u64)
    }
}

const K2: u64 = 0xA076_1D64_78BD_642F;

#[inline]
fn folded_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

#[inline]
fn read64(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn read32(s: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes")) as u64
}

/// Hash of one label pair; sums of these identify a label set.
#[inline]
pub(crate) fn pair_hash(h: PairHasher, name: &[u8], raw_value: &[u8]) -> u64 {
    pair_from_raw(h.raw(name), h.raw(raw_value))
}

/// [`pair_hash`] from the [`PairHasher::raw`] hashes of name and value.
#[inline]
pub(crate) fn pair_from_raw(name: u64, value: u64) -> u64 {
    fmix(name ^ value.rotate_left(17).wrapping_mul(K))
}

/// MurmurHash3's 64-bit finaliser.
#[inline]
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A `BuildHasher` for maps whose keys are already good 64-bit hashes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PassThrough;

/// The hasher behind [`PassThrough`].
#[derive(Debug, Default)]
pub(crate) struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(K);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_position_matters() {
        let h = PairHasher::new(3);
        let mut seen = std::collections::HashSet::new();
        let base: Vec<u8> = (0..64u8).map(|i| b'a' + i % 26).collect();
        for len in 0..64 {
            assert!(seen.insert(h.bytes(&base[..len])), "length {len}");
            for pos in 0..len {
                let mut v = base[..len].to_vec();
                v[pos] ^= 1;
                assert!(seen.insert(h.bytes(&v)), "length {len}, byte {pos}");
            }
        }
    }

    #[test]
    fn distinct_inputs_hash_apart_and_pairs_do_not_commute_internally() {
        let h = PairHasher::new(1);
        assert_ne!(h.bytes(b"abc"), h.bytes(b"abd"));
        assert_ne!(h.bytes(b""), h.bytes(b"\0"));
        assert_ne!(h.bytes(b"12345678"), h.bytes(b"123456789"));
        assert_ne!(pair_hash(h, b"a", b"b"), pair_hash(h, b"b", b"a"));
    }
}
