//! An upstream's `stall_after` and `stall:`: how long a busy engine may go without progress, and
//! the families that tell (the engine preset's unless given), each one the upstream keeps.

use serde_saphyr::Spanned;

use super::data::StallConfig;
use super::loader::{Loader, Origin};
use super::raw::{RawList, RawStall, Text};
use super::units::parse_duration;
use crate::model::{Engine, FamilyKey};

impl Loader<'_> {
    /// The stall detection of upstream `i`: `Some(None)` when off, `None` when a problem was
    /// recorded. `keep` is `None` when the upstream's own was unusable (already reported).
    pub(super) fn stall(
        &mut self,
        i: usize,
        after: Option<&Text>,
        raw: Option<Spanned<RawStall>>,
        engine: Engine,
        keep: Option<&[String]>,
    ) -> Option<Option<StallConfig>> {
        let field = |key: &str| format!("upstreams[{i}].{key}");
        let mut ok = true;
        let after = match after {
            None => None,
            Some(text) => {
                let after = self.file_value(Some(text), &field("stall_after"), parse_duration);
                ok &= after.is_some();
                after
            }
        };
        let (mut busy, mut progress) = (None, None);
        if let Some(raw) = raw {
            let at = raw.referenced;
            let raw = raw.value;
            self.unknown_keys(&raw.unknown, &field("stall"), RawStall::FIELDS);
            if ok && after.as_ref().is_none_or(|(d, _)| d.is_zero()) {
                let message = "has no effect without stall_after: set stall_after (like 60s) to \
                               turn stall detection on";
                self.issue(Origin::File(at), &field("stall"), message);
                ok = false;
            }
            if let Some(text) = &raw.busy {
                busy = self.stall_family(text, &field("stall.busy"), keep);
                ok &= busy.is_some();
            }
            if let Some(list) = raw.progress {
                progress = self.stall_families(list, &field("stall.progress"), keep);
                ok &= progress.is_some();
            }
        }
        if !ok {
            return None;
        }
        let Some((after, at)) = after.filter(|(d, _)| !d.is_zero()) else {
            return Some(None);
        };
        let defaults = StallConfig::preset(engine, after);
        let busy = busy.unwrap_or(defaults.busy);
        let progress = progress.unwrap_or(defaults.progress);
        // The engine's families under a `keep` that leaves them out would never be read.
        let keep = keep?;
        let unkept: Vec<String> = std::iter::once(&busy)
            .chain(&progress)
            .filter(|f| !kept(keep, &f.name))
            .map(FamilyKey::to_string)
            .collect();
        if !unkept.is_empty() {
            let message = format!(
                "stall detection reads {}, which keep {keep:?} leaves out: add its prefix to keep, \
                 or name kept families under stall:",
                unkept.join(", ")
            );
            self.issue(Origin::File(at), &field("stall_after"), message);
            return None;
        }
        Some(Some(StallConfig {
            after,
            busy,
            progress,
        }))
    }

    fn stall_families(
        &mut self,
        list: Spanned<RawList>,
        field: &str,
        keep: Option<&[String]>,
    ) -> Option<Vec<FamilyKey>> {
        let texts = match list.value {
            RawList::One(one) => vec![one],
            RawList::Many(many) => many,
        };
        if texts.is_empty() {
            let message = "empty list: name the counters that move while the engine works";
            self.issue(Origin::File(list.referenced), field, message);
            return None;
        }
        let mut families = Vec::with_capacity(texts.len());
        let mut ok = true;
        for (j, text) in texts.into_iter().enumerate() {
            let text = Spanned::new(text, list.referenced, list.defined);
            match self.stall_family(&text, &format!("{field}[{j}]"), keep) {
                Some(family) => families.push(family),
                None => ok = false,
            }
        }
        ok.then_some(families)
    }

    fn stall_family(
        &mut self,
        text: &Text,
        field: &str,
        keep: Option<&[String]>,
    ) -> Option<FamilyKey> {
        let (family, _) = self.file_value(Some(text), field, |t| {
            let key = FamilyKey::parse(t).map_err(|e| e.to_string())?;
            match keep {
                Some(keep) if !kept(keep, &key.name) => Err(format!(
                    "{:?} is not kept by this upstream (keep: {keep:?}), so it is never read",
                    key.name
                )),
                _ => Ok(key),
            }
        })?;
        Some(family)
    }
}

fn kept(keep: &[String], name: &str) -> bool {
    keep.iter().any(|k| name.starts_with(k.as_str()))
}
