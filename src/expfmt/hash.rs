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
    pub fn bytes(self, s: &[u8]) -> u64 {
        let mut h = self.key ^ (s.len() as u64).wrapping_mul(K);
        let mut chunks = s.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("chunks_exact yields 8 bytes"));
            h = (h ^ w).wrapping_mul(K).rotate_left(29);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            h = (h ^ u64::from_le_bytes(buf))
                .wrapping_mul(K)
                .rotate_left(29);
        }
        fmix(h)
    }
}

/// Hash of one label pair; sums of these identify a label set.
#[inline]
pub(crate) fn pair_hash(h: PairHasher, name: &[u8], raw_value: &[u8]) -> u64 {
    fmix(h.bytes(name) ^ h.bytes(raw_value).rotate_left(17).wrapping_mul(K))
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
    fn distinct_inputs_hash_apart_and_pairs_do_not_commute_internally() {
        let h = PairHasher::new(1);
        assert_ne!(h.bytes(b"abc"), h.bytes(b"abd"));
        assert_ne!(h.bytes(b""), h.bytes(b"\0"));
        assert_ne!(h.bytes(b"12345678"), h.bytes(b"123456789"));
        assert_ne!(pair_hash(h, b"a", b"b"), pair_hash(h, b"b", b"a"));
    }
}
