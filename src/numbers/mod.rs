//! Numbers read from a parsed page: the series of one family that carry a label selection,
//! copies of one number (processes, tensor-parallel workers) combined with `max` and
//! data-parallel ranks with a family's operation. The router view, configured views and stall
//! detection read pages through here.

mod combine;
#[cfg(test)]
pub(crate) mod testing;

pub(crate) use combine::{Labels, combine, sample_tail};

use crate::expfmt::{self, Exposition, Family};
use crate::model::{FamilyKey, Op, Preset};

/// The family of `exp` whose text-format name is `name`.
pub(crate) fn find_family<'a>(exp: &'a Exposition, name: &str) -> Option<&'a Family> {
    exp.families().iter().find(|f| {
        let (base, suffix) = exp.family_name(f);
        base.len() + suffix.len() == name.len()
            && name.as_bytes().starts_with(base)
            && name.as_bytes().ends_with(suffix)
    })
}

/// The family of `exp` under the first of the names `preset`'s engine writes `name` with
/// (itself, a renamed family's other name, its other spelling: [`Preset::names_of`]).
pub(crate) fn find_engine_family<'a>(
    exp: &'a Exposition,
    preset: &Preset,
    name: &str,
) -> Option<&'a Family> {
    preset
        .names_of(name)
        .iter()
        .find_map(|n| find_family(exp, n))
}

/// [`total`] of family `key`, under the first of the names its engine (`preset`) writes it
/// with that `exp` has.
pub(crate) fn engine_total(
    exp: &Exposition,
    key: &FamilyKey,
    preset: &Preset,
    copies: &[&str],
) -> Option<f64> {
    preset
        .names_of(&key.name)
        .iter()
        .find_map(|n| total(exp, n, &key.select, copies))
}

/// The sum of the series of family `name` in `exp` that carry every `select` pair (plain
/// values), where series that differ only in a `copies` label count once, with their largest
/// value. A histogram's or summary's `_count` is its number, whether `name` is the family's or
/// its `_count`'s. `None` when the page has no such series.
pub(crate) fn total(
    exp: &Exposition,
    name: &str,
    select: &[(String, String)],
    copies: &[&str],
) -> Option<f64> {
    let family = find_family(exp, name).or_else(|| {
        let f = find_family(exp, name.strip_suffix("_count")?)?;
        matches!(f.kind, expfmt::Kind::Histogram | expfmt::Kind::Summary).then_some(f)
    })?;
    let tail: &[u8] = match family.kind {
        expfmt::Kind::Histogram | expfmt::Kind::Summary => b"_count",
        _ => b"",
    };
    let select: Vec<(String, Vec<u8>)> = select
        .iter()
        .map(|(k, v)| (k.clone(), escaped(k, v)))
        .collect();
    let labels = Labels { copies, ranks: &[] };
    combine(exp, family, &select, Op::Sum, labels)
        .iter()
        .filter(|s| s.tail == tail)
        .map(|s| s.number())
        .reduce(|a, b| a + b)
}

/// A label value as the exposition writes it.
pub(crate) fn escaped(name: &str, value: &str) -> Vec<u8> {
    expfmt::AddedLabel::new(name, value)
        .escaped_value()
        .to_vec()
}
