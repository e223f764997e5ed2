//! What the rules made of each family of an upstream's last page, for the next one. An engine's
//! label sets rarely change from one scrape to the next, only its values do: a family whose
//! label sets are those of the last page needs neither its label names read again nor any of
//! its samples evaluated. Rules never read values, so the same label sets give the same
//! outcome; only the values are taken from the new page.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::made::Rewritten;
use super::verdict::Verdicts;
use crate::expfmt::{Exposition, Family, Sample};

/// Per family (by [`key`]), what the last page taught.
#[derive(Debug, Default)]
pub(crate) struct Seen(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    families: HashMap<Vec<u8>, FamilySeen>,
    /// Bytes held by the [`Rewritten`] families.
    rewritten_bytes: usize,
    /// The last body of rewritten families, parsed: the next one parses after it.
    made: Option<Arc<Exposition>>,
}

#[derive(Debug, Default)]
struct FamilySeen {
    /// What the rules do to its samples, per name.
    verdicts: Option<Arc<Verdicts>>,
    /// The sum of the family's label-set hashes, and the label names its samples carried.
    names: Option<(u64, Arc<Vec<String>>)>,
    /// The fingerprint of its samples' names and label sets in order, and what the rules
    /// made of them.
    outcome: Option<(u64, Outcome)>,
}

/// What the rules made of a family whose samples were evaluated one by one.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// They dropped these samples (by index in the family) and changed none.
    Filtered(Arc<Vec<u32>>),
    /// They changed some: the family as written anew.
    Rewritten(Arc<Rewritten>),
}

/// Families remembered at most (a page has a few hundred; the parse allows 20000).
const FAMILIES: usize = 20_000;
/// Rewritten families are kept for the next page up to this many bytes of series, as the last
/// body of a URL is kept up to 4 MiB for the next parse; beyond, they are written every time.
const REWRITTEN_MAX_BYTES: usize = 4 << 20;
/// The last body of rewritten families is kept for the next parse up to this size.
const MADE_MAX_BYTES: usize = 4 << 20;

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
        self.remember(key, |f, _| f.names = Some((sum, names.clone())));
        names
    }

    /// The verdicts on the family `key` (whose samples are `samples`) from the last page,
    /// unless they depended on label sets that changed since.
    pub(crate) fn verdicts(&self, key: &[u8], samples: &[Sample]) -> Option<Arc<Verdicts>> {
        let verdicts = self.with(key, |f| f.verdicts.clone())?;
        match verdicts.label_sum {
            Some(sum) if sum != label_sum(samples) => None,
            _ => Some(verdicts),
        }
    }

    /// Keeps the verdicts on the family `key` for the next page.
    pub(crate) fn remember_verdicts(&self, key: &[u8], verdicts: Arc<Verdicts>) {
        self.remember(key, |f, _| f.verdicts = Some(verdicts));
    }

    /// What the rules made of the family `key` on the last page, if it had the same
    /// fingerprint.
    pub(crate) fn outcome(&self, key: &[u8], sequence: u64) -> Option<Outcome> {
        self.with(key, |f| f.outcome.clone())
            .filter(|(known, _)| *known == sequence)
            .map(|(_, outcome)| outcome)
    }

    /// Notes what the rules made of the family `key`.
    pub(crate) fn remember_outcome(&self, key: &[u8], sequence: u64, outcome: Outcome) {
        self.remember(key, |f, bytes| {
            if let Some((_, Outcome::Rewritten(old))) = &f.outcome {
                *bytes -= old.bytes();
            }
            f.outcome = match outcome {
                Outcome::Rewritten(new) if *bytes + new.bytes() > REWRITTEN_MAX_BYTES => None,
                Outcome::Rewritten(new) => {
                    *bytes += new.bytes();
                    Some((sequence, Outcome::Rewritten(new)))
                }
                filtered => Some((sequence, filtered)),
            };
        });
    }

    /// The last body of rewritten families, parsed, to parse the next one after.
    pub(crate) fn made(&self) -> Option<Arc<Exposition>> {
        self.0.lock().ok()?.made.clone()
    }

    /// Keeps `made` (the body of rewritten families just parsed) for the next parse.
    pub(crate) fn remember_made(&self, made: &Arc<Exposition>) {
        if let Ok(mut inner) = self.0.lock() {
            inner.made = (made.body().len() <= MADE_MAX_BYTES).then(|| made.clone());
        }
    }

    fn with<T>(&self, key: &[u8], read: impl FnOnce(&FamilySeen) -> Option<T>) -> Option<T> {
        read(self.0.lock().ok()?.families.get(key)?)
    }

    fn remember(&self, key: &[u8], write: impl FnOnce(&mut FamilySeen, &mut usize)) {
        let Ok(mut inner) = self.0.lock() else {
            return;
        };
        let Inner {
            families,
            rewritten_bytes,
            ..
        } = &mut *inner;
        if let Some(family) = families.get_mut(key) {
            write(family, rewritten_bytes);
        } else if families.len() < FAMILIES {
            write(families.entry(key.to_vec()).or_default(), rewritten_bytes);
        }
    }
}
