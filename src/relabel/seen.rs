//! What the rules made of each family of an upstream's last page, for the next one. An engine's
//! label sets rarely change from one scrape to the next, only its values do: a family whose
//! label sets are those of the last page needs neither its label names read again nor, when
//! the rules only dropped some of its samples, any of its samples evaluated. Rules never read
//! values, so the same label sets give the same outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::expfmt::{Exposition, Family, Sample};

/// Per family (by [`key`]), what the last page taught.
#[derive(Debug, Default)]
pub(crate) struct Seen(Mutex<HashMap<Vec<u8>, FamilySeen>>);

#[derive(Debug, Default)]
struct FamilySeen {
    /// The sum of the family's label-set hashes, and the label names its samples carried.
    names: Option<(u64, Arc<Vec<String>>)>,
    /// The fingerprint of its samples' names and label sets in order, and which of them (by
    /// index in the family) the rules dropped, having changed none.
    filtered: Option<(u64, Arc<Vec<u32>>)>,
}

/// Families remembered at most (a page has a few hundred; the parse allows 20000).
const FAMILIES: usize = 20_000;

/// A family's identity from one page to the next: its text name, type and role.
pub(crate) fn key(exp: &Exposition, family: &Family) -> Vec<u8> {
    let (base, suffix) = exp.family_name(family);
    let mut key = Vec::with_capacity(base.len() + suffix.len() + 2);
    key.extend_from_slice(base);
    key.extend_from_slice(suffix);
    key.push(family.kind as u8);
    key.push(family.role as u8);
    key
}

/// The sum of the label-set hashes of `samples` (and their number): equal sums mean the same
/// label sets, in any order.
pub(crate) fn label_sum(samples: &[Sample]) -> u64 {
    samples.iter().fold(samples.len() as u64, |sum, s| {
        sum.wrapping_add(s.labels_hash())
    })
}

/// A fingerprint of `samples` in order: each one's name (`which` indexes `names`) and label
/// set.
pub(crate) fn sequence(samples: &[Sample], which: &[u32], names: &[impl AsRef<str>]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = names.iter().fold(samples.len() as u64, |h, n| {
        n.as_ref().bytes().fold(h.rotate_left(7) ^ K, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(K)
        })
    });
    for (s, &w) in samples.iter().zip(which) {
        h = (h.rotate_left(23) ^ s.labels_hash() ^ u64::from(w)).wrapping_mul(K);
    }
    h
}

impl Seen {
    /// The label names of the family `key` when its label sets sum to `sum`, from the last
    /// page when they summed to the same, else from `read`.
    pub(crate) fn names(
        &self,
        key: &[u8],
        sum: u64,
        read: impl FnOnce() -> Vec<String>,
    ) -> Arc<Vec<String>> {
        if let Some(names) = self.with(key, |f| f.names.clone())
            && names.0 == sum
        {
            return names.1;
        }
        let names = Arc::new(read());
        self.remember(key, |f| f.names = Some((sum, names.clone())));
        names
    }

    /// The samples the rules dropped from the family `key` on the last page, if it had the
    /// same fingerprint and the rules changed none of its samples.
    pub(crate) fn filtered(&self, key: &[u8], sequence: u64) -> Option<Arc<Vec<u32>>> {
        self.with(key, |f| f.filtered.clone())
            .filter(|(known, _)| *known == sequence)
            .map(|(_, dropped)| dropped)
    }

    /// Notes that the rules dropped `dropped` from the family `key` and changed nothing else.
    pub(crate) fn remember_filtered(&self, key: &[u8], sequence: u64, dropped: Vec<u32>) {
        self.remember(key, |f| f.filtered = Some((sequence, Arc::new(dropped))));
    }

    fn with<T>(&self, key: &[u8], read: impl FnOnce(&FamilySeen) -> Option<T>) -> Option<T> {
        read(self.0.lock().ok()?.get(key)?)
    }

    fn remember(&self, key: &[u8], write: impl FnOnce(&mut FamilySeen)) {
        let Ok(mut all) = self.0.lock() else {
            return;
        };
        if let Some(family) = all.get_mut(key) {
            write(family);
        } else if all.len() < FAMILIES {
            write(all.entry(key.to_vec()).or_default());
        }
    }
}
