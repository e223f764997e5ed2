//! What one check reads of an engine, decided once per configuration: the families stall
//! detection and canaries judge (busy gauges, progress counters, the sleep gauge) and the
//! vitals' families, asked of the engine in one read, and the [`Reading`] made of them.

use crate::config::{StallConfig, UpstreamConfig};
use crate::expfmt::Exposition;
use crate::model::{FamilyKey, Preset, Reading};
use crate::numbers::engine_total;

/// The families one upstream's checks read.
#[derive(Debug)]
pub(crate) struct Families {
    /// The busy gauges and progress counters that stall detection and canaries judge: the
    /// stall detection's, else the canaries' (`None` when the upstream has neither).
    judged: Option<StallConfig>,
    /// The gauge that is 0 while the engine sleeps.
    awake: Option<FamilyKey>,
    preset: &'static Preset,
    /// Every name the read asks the engine for, in every spelling the engine writes it with.
    names: Vec<String>,
}

impl Families {
    /// What the checks of `u` read: its judged families, and `vitals` (the vitals' names; empty
    /// when its vitals are not read).
    pub(crate) fn of(u: &UpstreamConfig, vitals: &[String]) -> Families {
        let preset = u.engine.preset();
        let judged = u
            .stall
            .clone()
            .or_else(|| u.canary.as_ref().map(|c| c.idle.clone()));
        let awake = judged.as_ref().and_then(|_| u.engine.canary().awake_key());
        let mut names: Vec<String> = Vec::new();
        if let Some(judged) = &judged {
            let gauges = [&judged.busy, &judged.waiting]
                .into_iter()
                .map(|f| f.name.as_str());
            // A `_count` name may be read from its histogram or summary.
            let counters = judged.progress.iter().flat_map(|f| {
                std::iter::once(f.name.as_str()).chain(f.name.strip_suffix("_count"))
            });
            let sleep = awake.iter().map(|a| a.name.as_str());
            names.extend(
                gauges
                    .chain(counters)
                    .chain(sleep)
                    .flat_map(|n| preset.names_of(n)),
            );
        }
        names.extend_from_slice(vitals);
        names.sort_unstable();
        names.dedup();
        Families {
            judged,
            awake,
            preset,
            names,
        }
    }

    /// The names one read asks for; empty when nothing is read beyond the health check.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether stall detection or canaries judge what is read.
    pub(crate) fn judged(&self) -> bool {
        self.judged.is_some()
    }

    /// The reading of `exp` (as parsed: whatever `metric_relabel_configs` leave of its families
    /// for Prometheus, these are read as the engine wrote them); `None` when nothing is judged.
    /// The busy gauges are requests, so copies of one number (the preset's process and replica
    /// labels) count once, with their largest value; the progress counters are plainly summed,
    /// as a sum moves whenever any of them does.
    pub(crate) fn read(&self, exp: &Exposition) -> Option<Reading> {
        let judged = self.judged.as_ref()?;
        let preset = self.preset;
        let copies = preset.copy_labels();
        let progress = judged
            .progress
            .iter()
            .filter_map(|f| engine_total(exp, f, preset, &[]))
            .reduce(|a, b| a + b)
            .filter(|p| !p.is_nan());
        Some(Reading {
            running: engine_total(exp, &judged.busy, preset, &copies),
            waiting: engine_total(exp, &judged.waiting, preset, &copies),
            progress,
            asleep: self
                .awake
                .as_ref()
                .is_some_and(|a| engine_total(exp, a, preset, &copies) == Some(0.0)),
        })
    }
}

#[cfg(test)]
mod tests;
