//! Stall detection: telling an engine that is busy and working from one that is busy and stuck.
//!
//! An engine can hang while its own `/health` keeps answering 200 (a tensor-parallel deadlock
//! left vLLM's `/health` green while no token was produced; a liveness check on vLLM's
//! iteration counter ended the false restarts, gonka-ai/gonka #1421). With `stall_after`, every
//! health check also reads the engine's busy gauges and progress counters (its preset's, see
//! [`crate::model::engine`], or `stall:`) into a [`crate::model::Reading`], and a [`Watch`] per
//! upstream judges it. The watch is a pure judge: `health` reads the page, feeds it and shows
//! what it says.
//!
//! - **Stalled** when requests were running or waiting at every check of the last
//!   `stall_after` and the progress counters (summed over every series) never moved in that
//!   time. It is decided at a check, from what that check read, never from the clock alone
//!   between checks.
//! - **Progress** is any change of the sum: a counter that went down (the engine restarted, or
//!   a process of it) is progress too. The first change clears a stall.
//! - **Idle** (nothing running or waiting) is never stalled, however long the counters stay put.
//! - **Down or unread** (the page cannot be fetched, or has no progress counter) is not
//!   stalled: the watch starts over at the next reading. Down is what readiness reports.
//!
//! Which series count (read by `health`): the busy gauges are the engine's requests, so copies
//! of one number (the preset's process labels like `pid`, and replica labels like `tp_rank`)
//! count once, with their largest value, and the rest (data-parallel ranks) add up; busy means
//! either total is above zero, which is the same as any series being above zero. The progress counters are
//! plainly summed: a sum of counters moves whenever any of them does, while a largest value
//! could hide a copy that moves below a stuck one.

pub(crate) mod config;
mod watch;

pub(crate) use watch::{CheckedAt, StallStatus, Unread, Watch};
