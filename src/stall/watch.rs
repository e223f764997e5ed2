//! One upstream's stall judgement, fed one reading per health check.

use std::time::{Duration, Instant};

use crate::model::Reading;
use crate::scrape::ScrapeError;

/// Why a check could not judge an engine: nothing is stalled then, and the watch starts over.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Unread {
    /// The page could not be fetched or read.
    #[error("cannot read the stall families: {0}")]
    Scrape(ScrapeError),
    /// The scrape gave nothing for the upstream.
    #[error("no scrape result")]
    NoResult,
    /// Requests run, but the page has none of the progress counters.
    #[error("requests are running but the page has no progress counter")]
    NoProgressCounter,
}

/// When a check was made: the time it was due, by which its readings are placed on the grid of
/// checks, and the time its answers were in. A reading shows the engine at some instant between
/// the two, so a move of the progress counters is placed at `answered`, the latest it can have
/// happened: a reading that answered late never lengthens the quiet time it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckedAt {
    pub due: Instant,
    pub answered: Instant,
}

impl CheckedAt {
    /// A check whose answers were in when it was due.
    #[cfg(test)]
    pub(crate) fn instant(at: Instant) -> CheckedAt {
        CheckedAt {
            due: at,
            answered: at,
        }
    }
}

/// The state of one upstream's stall detection.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    after: Duration,
    /// The first check of the current run of checks that all found requests running and the
    /// progress counters at the same sum; `None` while idle, unread, or not yet read.
    quiet_since: Option<Instant>,
    /// The progress counters' sum at the last check that read it.
    last: Option<f64>,
    /// When a check last saw the sum change (or first read it).
    moved_at: Option<Instant>,
    /// The last check.
    checked: Option<Instant>,
    /// Requests running and waiting at the last check.
    running: Option<f64>,
    waiting: Option<f64>,
    /// Why the last check could not judge.
    unread: Option<Unread>,
    stalled: bool,
}

/// What a [`Watch`] says, for `/health`, `/live/engine` and the status page.
#[derive(Debug, Clone)]
pub(crate) struct StallStatus {
    /// Requests ran for `stall_after` without progress, as of the last check.
    pub stalled: bool,
    /// The configured `stall_after`.
    pub after: Duration,
    /// Requests running at the last check; `None` when it could not read them.
    pub running: Option<f64>,
    /// Requests waiting at the last check; `None` when it could not read them.
    pub waiting: Option<f64>,
    /// How long requests had been running without progress at the last check; `None` when
    /// idle, unread, or the counters had just moved.
    pub quiet_for: Option<Duration>,
    /// Time since a check last saw the progress counters move; `None` before the first read.
    pub progress_age: Option<Duration>,
    /// Why the last check could not judge (the page could not be read, or has no progress
    /// counter while requests run).
    pub unread: Option<Unread>,
}

impl Watch {
    /// A watch that calls a stall after `after` of busy checks without progress.
    pub(crate) fn new(after: Duration) -> Watch {
        Watch {
            after,
            quiet_since: None,
            last: None,
            moved_at: None,
            checked: None,
            running: None,
            waiting: None,
            unread: None,
            stalled: false,
        }
    }

    /// Feeds the check made `at`: what it read, or why it could read nothing. Returns whether
    /// the engine is stalled.
    ///
    /// The quiet time runs from the `answered` instant of the check that saw the counters move
    /// (or first found requests) to the `due` instant of the latest check: the shortest time
    /// the engine can have been without progress. Placed at its due time instead, a move read
    /// by a fetch that answered a second late (an engine's `/metrics` on busy cores) would call
    /// a stall that second early.
    pub(crate) fn observe(&mut self, at: CheckedAt, reading: Result<Reading, Unread>) -> bool {
        let now = at.due;
        self.checked = Some(now);
        let reading = match reading {
            Ok(reading) => reading,
            Err(why) => {
                // Down is not stalled: the run starts over when the page can be read again.
                self.quiet_since = None;
                self.running = None;
                self.waiting = None;
                self.unread = Some(why);
                self.stalled = false;
                return false;
            }
        };
        self.running = reading.running;
        self.waiting = reading.waiting;
        let moved = match (self.last, reading.progress) {
            (_, None) => false,
            (None, Some(_)) => true,
            // Down is progress as much as up: a restarted engine counts from zero again.
            (Some(before), Some(now)) => before != now,
        };
        if let Some(progress) = reading.progress {
            self.last = Some(progress);
            if moved {
                self.moved_at = Some(at.answered);
            }
        }
        self.unread =
            (reading.busy() && reading.progress.is_none()).then_some(Unread::NoProgressCounter);
        self.quiet_since = match (reading.busy(), reading.progress) {
            (true, Some(_)) if moved => Some(at.answered),
            (true, Some(_)) => self.quiet_since.or(Some(at.answered)),
            _ => None,
        };
        self.stalled = self
            .quiet_since
            .is_some_and(|since| now.saturating_duration_since(since) >= self.after);
        self.stalled
    }

    /// Takes a reload's `stall_after`, keeping the clock: the next check judges with it.
    pub(crate) fn set_after(&mut self, after: Duration) {
        self.after = after;
    }

    /// When the last check was made; `None` before the first.
    pub(crate) fn checked(&self) -> Option<Instant> {
        self.checked
    }

    /// Whether the last check found the engine stalled.
    pub(crate) fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// The judgement of the last check, with the progress age as of `now`.
    pub(crate) fn status(&self, now: Instant) -> StallStatus {
        StallStatus {
            stalled: self.stalled,
            after: self.after,
            running: self.running,
            waiting: self.waiting,
            quiet_for: self
                .quiet_since
                .zip(self.checked)
                .map(|(since, checked)| checked.saturating_duration_since(since)),
            progress_age: self.moved_at.map(|at| now.saturating_duration_since(at)),
            unread: self.unread.clone(),
        }
    }
}

impl StallStatus {
    /// `3 requests running, no progress for 75.0 s (stall_after 60 s)`, or `0 requests
    /// running, 5 waiting, ...`, for `/health`, logs and `/live/engine`.
    pub(crate) fn describe(&self) -> String {
        let load = match (self.running, self.waiting) {
            (Some(r), Some(w)) if w > 0.0 => format!("{r} requests running, {w} waiting"),
            (Some(r), _) => format!("{r} requests running"),
            (None, Some(w)) if w > 0.0 => format!("{w} requests waiting"),
            (None, _) => "running requests unknown".to_owned(),
        };
        match self.quiet_for {
            Some(quiet) => format!(
                "{load}, no progress for {:.1} s (stall_after {:.1} s)",
                quiet.as_secs_f64(),
                self.after.as_secs_f64()
            ),
            None => load,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn busy(progress: f64) -> Result<Reading, Unread> {
        Ok(Reading {
            running: Some(3.0),
            progress: Some(progress),
            ..Reading::default()
        })
    }

    fn idle(progress: f64) -> Result<Reading, Unread> {
        Ok(Reading {
            running: Some(0.0),
            progress: Some(progress),
            ..Reading::default()
        })
    }

    /// Feeds one reading per second from `start`, returning the judgements.
    fn feed(watch: &mut Watch, start: Instant, readings: &[Result<Reading, Unread>]) -> Vec<bool> {
        readings
            .iter()
            .enumerate()
            .map(|(k, r)| watch.observe(CheckedAt::instant(start + SECOND * k as u32), r.clone()))
            .collect()
    }

    #[test]
    fn busy_without_progress_for_stall_after_is_stalled_and_progress_clears_it() {
        let start = Instant::now();
        let mut w = Watch::new(3 * SECOND);
        let seen = feed(
            &mut w,
            start,
            &[busy(10.0), busy(10.0), busy(10.0), busy(10.0), busy(10.0)],
        );
        // Counted from the first check that saw 10: stalled once 3 s of checks agree.
        assert_eq!(seen, [false, false, false, true, true]);
        let status = w.status(start + 4 * SECOND);
        assert!(status.stalled);
        assert_eq!(status.quiet_for, Some(4 * SECOND));
        assert_eq!(status.running, Some(3.0));
        assert_eq!(
            status.describe(),
            "3 requests running, no progress for 4.0 s (stall_after 3.0 s)"
        );
        assert!(!w.observe(CheckedAt::instant(start + 5 * SECOND), busy(11.0)));
        assert_eq!(w.status(start + 5 * SECOND).quiet_for, Some(Duration::ZERO));
        assert_eq!(
            w.status(start + 7 * SECOND).progress_age,
            Some(2 * SECOND),
            "the age counts from the check that saw the move"
        );
    }

    #[test]
    fn a_move_read_late_starts_the_quiet_time_when_it_answered() {
        // The check due at 0 s answered at 1.4 s with the counters moved: the engine can have
        // made progress until 1.4 s. With stall_after 3 s, the check due at 4 s has seen only
        // 2.6 s without progress; the one due at 5 s has seen 3.6 s.
        let start = Instant::now();
        let mut w = Watch::new(3 * SECOND);
        let late = CheckedAt {
            due: start,
            answered: start + Duration::from_millis(1400),
        };
        assert!(!w.observe(late, busy(10.0)));
        let seen: Vec<bool> = (2..=5)
            .map(|k| w.observe(CheckedAt::instant(start + k * SECOND), busy(10.0)))
            .collect();
        assert_eq!(seen, [false, false, false, true]);
        let status = w.status(start + 5 * SECOND);
        assert_eq!(status.quiet_for, Some(Duration::from_millis(3600)));
        assert_eq!(status.progress_age, Some(Duration::from_millis(3600)));
    }

    #[test]
    fn an_idle_engine_is_never_stalled() {
        let start = Instant::now();
        let mut w = Watch::new(SECOND);
        let seen = feed(&mut w, start, &vec![idle(5.0); 10]);
        assert!(seen.iter().all(|s| !s));
        let status = w.status(start + 10 * SECOND);
        assert_eq!(status.quiet_for, None);
        assert_eq!(status.progress_age, Some(10 * SECOND));
    }

    #[test]
    fn an_idle_check_starts_the_run_over() {
        let start = Instant::now();
        let mut w = Watch::new(3 * SECOND);
        let seen = feed(
            &mut w,
            start,
            &[
                busy(1.0),
                busy(1.0),
                busy(1.0),
                idle(1.0),
                busy(1.0),
                busy(1.0),
            ],
        );
        assert!(seen.iter().all(|s| !s), "{seen:?}");
    }

    #[test]
    fn a_counter_that_goes_down_is_progress() {
        let start = Instant::now();
        let mut w = Watch::new(2 * SECOND);
        let seen = feed(
            &mut w,
            start,
            &[busy(100.0), busy(100.0), busy(3.0), busy(3.0), busy(1.0)],
        );
        assert!(seen.iter().all(|s| !s), "{seen:?}");
        assert_eq!(
            w.status(start + 4 * SECOND).progress_age,
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_page_that_cannot_be_read_is_down_not_stalled_and_restarts_the_run() {
        let start = Instant::now();
        let mut w = Watch::new(2 * SECOND);
        let down = || Err(Unread::Scrape(ScrapeError::Refused));
        let seen = feed(
            &mut w,
            start,
            &[
                busy(7.0),
                busy(7.0),
                down(),
                down(),
                down(),
                busy(7.0),
                busy(7.0),
                busy(7.0),
            ],
        );
        assert_eq!(
            seen,
            [false, false, false, false, false, false, false, true]
        );
        let mut w = Watch::new(2 * SECOND);
        feed(&mut w, start, &[busy(7.0), busy(7.0), down()]);
        let status = w.status(start + 2 * SECOND);
        assert!(!status.stalled);
        assert_eq!(status.running, None);
        assert_eq!(
            status.unread.map(|u| u.to_string()).as_deref(),
            Some("cannot read the stall families: connection refused")
        );
    }

    #[test]
    fn without_a_progress_counter_nothing_is_judged() {
        let start = Instant::now();
        let mut w = Watch::new(SECOND);
        let blind = Ok(Reading {
            running: Some(2.0),
            ..Reading::default()
        });
        let seen = feed(&mut w, start, &vec![blind; 5]);
        assert!(seen.iter().all(|s| !s));
        let status = w.status(start);
        assert!(
            status
                .unread
                .expect("says why")
                .to_string()
                .contains("no progress counter")
        );
        assert_eq!(status.progress_age, None);
        // Nor is an engine whose busy gauge is missing busy.
        let mut w = Watch::new(SECOND);
        let unknown = Ok(Reading {
            progress: Some(1.0),
            ..Reading::default()
        });
        assert!(feed(&mut w, start, &vec![unknown; 5]).iter().all(|s| !s));
        assert_eq!(w.status(start).describe(), "running requests unknown");
    }

    #[test]
    fn requests_waiting_with_none_running_and_frozen_counters_is_a_stall() {
        // A scheduler that stopped with requests queued (vllm-project/vllm PR #46811): its
        // running gauge is 0, its waiting gauge is not, and nothing moves.
        let start = Instant::now();
        let mut w = Watch::new(2 * SECOND);
        let queued = Ok(Reading {
            running: Some(0.0),
            waiting: Some(5.0),
            progress: Some(40.0),
            asleep: false,
        });
        let seen = feed(&mut w, start, &vec![queued; 4]);
        assert_eq!(seen, [false, false, true, true]);
        assert_eq!(
            w.status(start + 3 * SECOND).describe(),
            "0 requests running, 5 waiting, no progress for 3.0 s (stall_after 2.0 s)"
        );
        // A sleeping engine is never busy, whatever its gauges kept.
        let mut w = Watch::new(SECOND);
        let asleep = Ok(Reading {
            running: Some(2.0),
            waiting: Some(1.0),
            progress: Some(40.0),
            asleep: true,
        });
        assert!(feed(&mut w, start, &vec![asleep; 4]).iter().all(|s| !s));
    }
}
