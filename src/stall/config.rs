//! An upstream's `stall_after` and `stall:`: how long a busy engine may go without progress, and
//! the families that tell (the engine preset's unless given), each one the upstream keeps.

use std::time::Duration;

use serde_saphyr::Spanned;

use serde::Deserialize;

use crate::config::loader::{Loader, Origin};
use crate::config::quote::quoted;
use crate::config::section::{Text, section};
use crate::config::units::{format_duration, parse_duration};
use crate::model::{Engine, FamilyKey};

/// Stall detection of one upstream: requests running or waiting at every check for `after`, and
/// the progress counters never moving in that time, is a stalled engine.
#[derive(Debug, Clone, PartialEq)]
pub struct StallConfig {
    /// How long requests may run without progress; more than zero.
    pub after: Duration,
    /// The gauge of requests being worked on: busy when a series is above zero.
    pub busy: FamilyKey,
    /// The gauge of requests waiting: busy too when a series is above zero.
    pub waiting: FamilyKey,
    /// Counters that move while requests are worked on, summed over every series (a
    /// histogram's or summary's `_count`); never empty.
    pub progress: Vec<FamilyKey>,
}

impl StallConfig {
    /// Stall detection after `after` with `engine`'s own families.
    pub fn preset(engine: Engine, after: Duration) -> StallConfig {
        let families = &engine.preset().stall;
        StallConfig {
            after,
            busy: families.busy.clone(),
            waiting: families.waiting.clone(),
            progress: families.progress.clone(),
        }
    }
}

section! {
    /// `stall:` of an upstream.
    RawStall {
        /// The gauge of requests being worked on (busy when any series is above zero), as a
        /// family key: `vllm:num_requests_running`, or with label values that pick its series,
        /// `'nv_trt_llm_request_metrics{request_type="active"}'`. Default the engine's.
        busy: Text,
        /// The gauge of requests waiting to be worked on (busy too when any series is above
        /// zero: a scheduler that stopped with requests queued), as a family key. Default the
        /// engine's.
        waiting: Text,
        /// One family key, or a list: counters that move while requests are worked on (a
        /// histogram's or summary's `_count`), summed over every series. Default the engine's.
        progress: Spanned<RawList>,
    }
}

/// One value or a list of them. Its elements have no positions of their own (serde reads an
/// untagged enum through a buffer): problems point at the whole value.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawList {
    One(String),
    Many(Vec<String>),
}

/// `stall_after` when the file does not say: long enough for one long prefill step and for
/// SGLang's idle gauge (set every 30 s once idle), and Dynamo's `DYN_HEALTH_CHECK_BUSY_STALL`
/// (docs/readiness.md, "Choosing stall_after").
pub(crate) const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(60);

/// Stall detection with `engine`'s own families after [`DEFAULT_STALL_AFTER`], for an upstream
/// that keeps them (`None` for one that does not, like LMCache's own endpoint).
pub(crate) fn default_stall(engine: Engine, keep: &[String]) -> Option<StallConfig> {
    let stall = StallConfig::preset(engine, DEFAULT_STALL_AFTER);
    unkept(keep, &stall).is_empty().then_some(stall)
}

/// The families `stall` reads that `keep` leaves out.
pub(crate) fn unkept(keep: &[String], stall: &StallConfig) -> Vec<String> {
    [&stall.busy, &stall.waiting]
        .into_iter()
        .chain(&stall.progress)
        .filter(|f| !kept(keep, &f.name))
        .map(FamilyKey::to_string)
        .collect()
}

impl Loader<'_> {
    /// The stall detection of upstream `i`: `Some(None)` when off, `None` when a problem was
    /// recorded. `keep` is `None` when the upstream's own was unusable (already reported).
    /// Without `stall_after`, on after [`DEFAULT_STALL_AFTER`] where the upstream keeps the
    /// families, else off; `stall_after: 0s` turns it off.
    pub(crate) fn stall(
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
        let (mut busy, mut waiting, mut progress) = (None, None, None);
        let mut stall_at = None;
        if let Some(raw) = raw {
            let at = raw.referenced;
            stall_at = Some(at);
            let raw = raw.value;
            self.unknown_keys(&raw.unknown, &field("stall"), RawStall::FIELDS);
            if ok && after.as_ref().is_some_and(|(d, _)| d.is_zero()) {
                let message = "has no effect: stall_after is 0s (off); remove one of the two";
                self.issue(Origin::File(at), &field("stall"), message);
                ok = false;
            }
            if let Some(text) = &raw.busy {
                busy = self.stall_family(text, &field("stall.busy"), keep);
                ok &= busy.is_some();
            }
            if let Some(text) = &raw.waiting {
                waiting = self.stall_family(text, &field("stall.waiting"), keep);
                ok &= waiting.is_some();
            }
            if let Some(list) = raw.progress {
                progress = self.stall_families(list, &field("stall.progress"), keep);
                ok &= progress.is_some();
            }
        }
        if !ok {
            return None;
        }
        let (after, at) = match after {
            Some((d, _)) if d.is_zero() => return Some(None),
            Some((d, at)) => (d, Some(at)),
            None => (DEFAULT_STALL_AFTER, stall_at),
        };
        let defaults = StallConfig::preset(engine, after);
        let stall = StallConfig {
            after,
            busy: busy.unwrap_or(defaults.busy),
            waiting: waiting.unwrap_or(defaults.waiting),
            progress: progress.unwrap_or(defaults.progress),
        };
        let keep = keep?;
        let unkept = unkept(keep, &stall);
        if unkept.is_empty() {
            return Some(Some(stall));
        }
        // The engine's families under a `keep` that leaves them out would never be read: an
        // error where the file asked for stall detection, off where it is only the default.
        let Some(at) = at else {
            return Some(None);
        };
        let field_name = if stall_at == Some(at) {
            "stall"
        } else {
            "stall_after"
        };
        let message = format!(
            "stall detection reads {}, which keep {keep:?} leaves out: add its prefix to keep, \
             name kept families under stall:, or turn it off with stall_after: 0s",
            unkept.join(", ")
        );
        self.issue(Origin::File(at), &field(field_name), message);
        None
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

/// `stall_after` and `stall:` of an upstream, as `check-config` prints them.
pub(crate) fn render(
    f: &mut std::fmt::Formatter<'_>,
    stall: Option<&StallConfig>,
) -> std::fmt::Result {
    let Some(stall) = stall else {
        return writeln!(f, "    stall_after: 0s");
    };
    writeln!(f, "    stall_after: {}", format_duration(stall.after))?;
    writeln!(f, "    stall:")?;
    writeln!(f, "      busy: {}", quoted(&stall.busy.to_string()))?;
    writeln!(f, "      waiting: {}", quoted(&stall.waiting.to_string()))?;
    let progress: Vec<String> = stall
        .progress
        .iter()
        .map(|p| quoted(&p.to_string()))
        .collect();
    writeln!(f, "      progress: [{}]", progress.join(", "))
}

#[cfg(test)]
mod tests;
