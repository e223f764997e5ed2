//! One incident: what was kept of an upstream from the moment its verdict turned bad until it
//! was back, each part bounded (the bounds are the constants here, documented in
//! docs/incidents.md), and its JSON.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::stacks::Taken;
use crate::model::Reading;

/// At most this many verdict changes per incident: a flapping engine keeps the first ones and
/// counts the rest.
pub(crate) const MAX_TIMELINE: usize = 1_000;
/// At most this many checks' readings during an incident (the latest kept), and before it.
pub(crate) const MAX_READINGS: usize = 3_600;
/// At most this many canaries during an incident (the latest kept), and before it.
pub(crate) const MAX_CANARIES: usize = 600;
/// At most this many bytes of an engine page are kept (before compression); a longer page is
/// cut there and says so.
pub(crate) const MAX_PAGE_BYTES: usize = 32 << 20;

/// Why an incident opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Stalled,
    CanaryFailed,
    /// Down after having been up.
    Down,
    /// The engine's `process_start_time_seconds` changed.
    Restarted,
}

impl Kind {
    /// The `kind` label and JSON word.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Stalled => "stalled",
            Kind::CanaryFailed => "canary_failed",
            Kind::Down => "down",
            Kind::Restarted => "restarted",
        }
    }

    /// The kind of a bad verdict's word.
    pub(crate) fn of_verdict(word: &str) -> Option<Kind> {
        match word {
            "stalled" => Some(Kind::Stalled),
            "canary_failed" => Some(Kind::CanaryFailed),
            "down" => Some(Kind::Down),
            _ => None,
        }
    }
}

/// One verdict change, with its reason's words.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub at: SystemTime,
    pub verdict: &'static str,
    pub reason: Option<String>,
}

/// What one check read of the upstream.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub at: SystemTime,
    /// `None` when the check passed, else its error.
    pub health_error: Option<String>,
    pub reading: Option<Reading>,
    /// The KV cache usage (0–1) the page showed, where it has one.
    pub kv_cache: Option<f64>,
}

/// One canary: when it was sent, how long it took, how it ended.
#[derive(Debug, Clone)]
pub(crate) struct CanaryRun {
    pub sent: SystemTime,
    pub took: Duration,
    pub result: &'static str,
    pub error: Option<String>,
}

impl CanaryRun {
    /// The run `outcome` tells of.
    pub(crate) fn of(outcome: &crate::canary::Outcome) -> CanaryRun {
        CanaryRun {
            sent: outcome.at.checked_sub(outcome.took).unwrap_or(outcome.at),
            took: outcome.took,
            result: outcome.kind.label(),
            error: (!outcome.detail.is_empty()).then(|| outcome.detail.clone()),
        }
    }
}

/// An engine page as fetched, gzip-compressed.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    pub at: SystemTime,
    pub gzip: Vec<u8>,
    /// Its length before compression (as fetched, before a cut at [`MAX_PAGE_BYTES`]).
    pub bytes: usize,
    pub cut: bool,
}

/// One incident.
#[derive(Debug, Clone)]
pub(crate) struct Incident {
    pub id: String,
    pub upstream: String,
    pub kind: Kind,
    pub opened: SystemTime,
    pub closed: Option<SystemTime>,
    pub timeline: Vec<Change>,
    pub timeline_dropped: u64,
    pub before: Vec<Row>,
    pub during: VecDeque<Row>,
    pub during_dropped: u64,
    pub canaries_before: Vec<CanaryRun>,
    pub canaries: VecDeque<CanaryRun>,
    pub canaries_dropped: u64,
    /// The page at the last check before the opening, and at the opening.
    pub page_before: Option<Page>,
    pub page_opening: Option<Page>,
    /// The engine's stacks, once taken (`None` while being taken, or never asked for).
    pub stacks: Option<super::stacks::Taken>,
    pub version: &'static str,
    /// The effective configuration as `check-config` prints it (passwords as `***`).
    pub config: String,
}

impl Incident {
    /// Adds a verdict change, within [`MAX_TIMELINE`].
    pub(crate) fn push_change(&mut self, change: Change) {
        if self.timeline.len() < MAX_TIMELINE {
            self.timeline.push(change);
        } else {
            self.timeline_dropped += 1;
        }
    }

    /// Adds a check's reading, the latest [`MAX_READINGS`] kept.
    pub(crate) fn push_row(&mut self, row: Row) {
        if self.during.len() == MAX_READINGS {
            self.during.pop_front();
            self.during_dropped += 1;
        }
        self.during.push_back(row);
    }

    /// Adds a canary, the latest [`MAX_CANARIES`] kept.
    pub(crate) fn push_canary(&mut self, run: CanaryRun) {
        if self.canaries.len() == MAX_CANARIES {
            self.canaries.pop_front();
            self.canaries_dropped += 1;
        }
        self.canaries.push_back(run);
    }

    /// The short form `GET /incidents` lists.
    pub(crate) fn summary(&self) -> Value {
        json!({
            "id": self.id,
            "upstream": self.upstream,
            "kind": self.kind.word(),
            "opened_unix_seconds": unix(self.opened),
            "closed_unix_seconds": self.closed.map(unix),
            "duration_seconds": self.closed.and_then(|c| c.duration_since(self.opened).ok())
                .map(|d| d.as_secs_f64()),
            "reason": self.timeline.first().and_then(|c| c.reason.clone()),
        })
    }

    /// The whole incident, but the pages' bodies (which the bundle holds).
    pub(crate) fn to_json(&self) -> Value {
        let mut v = self.summary();
        v["sysport_version"] = Value::from(self.version);
        v["timeline"] = self.timeline.iter().map(change_json).collect();
        v["timeline_dropped"] = Value::from(self.timeline_dropped);
        v["readings_before"] = self.before.iter().map(row_json).collect();
        v["readings"] = self.during.iter().map(row_json).collect();
        v["readings_dropped"] = Value::from(self.during_dropped);
        v["canaries_before"] = self.canaries_before.iter().map(canary_json).collect();
        v["canaries"] = self.canaries.iter().map(canary_json).collect();
        v["canaries_dropped"] = Value::from(self.canaries_dropped);
        v["page_before"] = page_json(self.page_before.as_ref(), "page-before.prom.gz");
        v["page_opening"] = page_json(self.page_opening.as_ref(), "page-opening.prom.gz");
        v["config"] = Value::from(self.config.as_str());
        v["stacks"] = match &self.stacks {
            None => Value::Null,
            Some(Taken::Unavailable(why)) => json!({ "unavailable": why }),
            Some(Taken::Dumps(dumps)) => json!({
                "file": "stacks.txt",
                "processes": dumps.iter().map(|d| json!({
                    "pid": d.pid,
                    "result": d.result,
                    "error": d.error,
                    "bytes": d.text.len(),
                    "cut": d.cut,
                    "duration_seconds": d.took.as_secs_f64(),
                })).collect::<Vec<_>>(),
            }),
        };
        v
    }

    /// Every dump, one after the other under a line naming its process (the bundle's
    /// `stacks.txt`); `None` without dumps.
    pub(crate) fn stacks_text(&self) -> Option<String> {
        let Some(Taken::Dumps(dumps)) = &self.stacks else {
            return None;
        };
        let mut text = String::new();
        for d in dumps {
            text.push_str(&format!("=== pid {}: {}", d.pid, d.result));
            if let Some(e) = &d.error {
                text.push_str(&format!(" ({e})"));
            }
            text.push('\n');
            text.push_str(&d.text);
            if !d.text.ends_with('\n') {
                text.push('\n');
            }
        }
        Some(text)
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn change_json(c: &Change) -> Value {
    json!({ "unix_seconds": unix(c.at), "verdict": c.verdict, "reason": c.reason })
}

fn row_json(r: &Row) -> Value {
    let reading = r.reading.unwrap_or_default();
    json!({
        "unix_seconds": unix(r.at),
        "health": r.health_error.as_deref().unwrap_or("ok"),
        "running": reading.running,
        "waiting": reading.waiting,
        "progress": reading.progress,
        "asleep": reading.asleep,
        "kv_cache_usage": r.kv_cache,
    })
}

fn canary_json(c: &CanaryRun) -> Value {
    json!({
        "sent_unix_seconds": unix(c.sent),
        "duration_seconds": c.took.as_secs_f64(),
        "result": c.result,
        "error": c.error,
    })
}

fn page_json(p: Option<&Page>, file: &str) -> Value {
    p.map_or(Value::Null, |p| {
        json!({
            "unix_seconds": unix(p.at),
            "bytes": p.bytes,
            "cut": p.cut,
            "file": file,
        })
    })
}
