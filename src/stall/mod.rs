//! Stall detection: telling an engine that is busy and working from one that is busy and stuck.
//!
//! An engine can hang while its own `/health` keeps answering 200 (a tensor-parallel deadlock
//! left vLLM's `/health` green while no token was produced; a liveness check on vLLM's
//! iteration counter ended the false restarts, gonka-ai/gonka #1421). With `stall_after`, every
//! health check also reads the engine's busy gauge and progress counters (its preset's, see
//! [`crate::model::engine`], or `stall:`), and a [`Watch`] per upstream judges:
//!
//! - **Stalled** when requests were running at every check of the last `stall_after` and the
//!   progress counters (summed over every series) never moved in that time. It is decided at a
//!   check, from what that check read, never from the clock alone between checks.
//! - **Progress** is any change of the sum: a counter that went down (the engine restarted, or
//!   a process of it) is progress too. The first change clears a stall.
//! - **Idle** (nothing running) is never stalled, however long the counters stay put.
//! - **Down or unread** (the page cannot be fetched, or has no progress counter) is not
//!   stalled: the watch starts over at the next reading. Down is what readiness reports.
//!
//! Which series count: the busy gauge is the engine's requests, so copies of one number (the
//! preset's process labels like `pid`, and replica labels like `tp_rank`) count once, with
//! their largest value, and the rest (data-parallel ranks) add up; busy means that total is
//! above zero, which is the same as any series being above zero. The progress counters are
//! plainly summed: a sum of counters moves whenever any of them does, while a largest value
//! could hide a copy that moves below a stuck one.

mod report;
mod watch;

pub(crate) use report::{live_engine, register_gauges, set_gauges, status_json};
pub(crate) use watch::{Reading, StallStatus, Unread, Watch};

use crate::config::StallConfig;
use crate::expfmt::Exposition;
use crate::model::Preset;

/// Reads the stall families of `stall` from one upstream's page, under any name its engine
/// (`preset`) writes them with (SGLang's `sglang_` spelling too); the preset's copy labels
/// tell which series are copies of one number.
pub(crate) fn read(exp: &Exposition, stall: &StallConfig, preset: &Preset) -> Reading {
    let copies = preset.copy_labels();
    let running = crate::numbers::engine_total(exp, &stall.busy, preset, &copies);
    let progress = stall
        .progress
        .iter()
        .filter_map(|f| crate::numbers::engine_total(exp, f, preset, &[]))
        .reduce(|a, b| a + b)
        .filter(|p| !p.is_nan());
    Reading { running, progress }
}

/// The families a stall read asks the engine for: the busy gauge and the progress counters,
/// and for a `_count` name the histogram or summary it may belong to, in every spelling of
/// the engine.
pub(crate) fn names(stall: &StallConfig, preset: &Preset) -> Vec<String> {
    let names = std::iter::once(&stall.busy)
        .chain(&stall.progress)
        .map(|f| f.name.as_str());
    let bases = stall
        .progress
        .iter()
        .filter_map(|f| f.name.strip_suffix("_count"));
    names
        .chain(bases)
        .flat_map(|n| preset.names_of(n))
        .collect()
}

#[cfg(test)]
mod tests;
