//! One upstream's canary schedule and judgement, fed one reading per health check.

use std::time::{Duration, Instant, SystemTime};

use crate::model::Reading;

/// The longest pause after a canary the engine would not take (401, 403, 400, 404).
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(300);

/// How a canary ended: the `result` label of `dynamo_sysport_canary_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Success,
    Timeout,
    HttpStatus,
    BadAnswer,
    ConnectError,
    /// The answer was longer than the canary reads (`canary::MAX_ANSWER_BYTES`).
    TooLarge,
    /// The engine refused the canary's credentials (401, 403): canaries pause.
    Unauthorized,
    /// The engine does not generate on the canary's route (404, 400): canaries pause.
    CannotGenerate,
}

impl Kind {
    /// Every result, for the counter's series.
    pub(crate) const ALL: [Kind; 8] = [
        Kind::Success,
        Kind::Timeout,
        Kind::HttpStatus,
        Kind::BadAnswer,
        Kind::ConnectError,
        Kind::TooLarge,
        Kind::Unauthorized,
        Kind::CannotGenerate,
    ];

    /// The `result` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Success => "success",
            Kind::Timeout => "timeout",
            Kind::HttpStatus => "http_status",
            Kind::BadAnswer => "bad_answer",
            Kind::ConnectError => "connect_error",
            Kind::TooLarge => "too_large",
            Kind::Unauthorized => "unauthorized",
            Kind::CannotGenerate => "cannot_generate",
        }
    }

    /// Whether this answer pauses the canaries of the upstream: the engine works, but sysport
    /// cannot ask it to generate (wrong credentials, no generation on that route), so it is
    /// no reason to call it not ready; readiness stays with the health check while they pause.
    pub(crate) fn stops(self) -> bool {
        matches!(self, Kind::Unauthorized | Kind::CannotGenerate)
    }
}

/// One finished canary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub kind: Kind,
    /// Why it failed, in words (`timed out after 3s`); empty on success.
    pub detail: String,
    /// When it finished.
    pub at: SystemTime,
    /// How long it took.
    pub took: Duration,
}

/// What one check saw of the engine, for the canary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Seen {
    /// The upstream is down, not yet checked healthy, or its page could not be read.
    Down,
    /// The engine says it sleeps.
    Asleep,
    /// The busy gauge and progress counters.
    Read(Reading),
}

/// Why no canary is due, or that one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Due at this instant if the engine stays idle.
    At(Instant),
    Busy,
    Asleep,
    Down,
    InFlight,
    /// Canaries paused until this instant: the engine refused their credentials or cannot
    /// generate.
    Paused(Instant),
}

/// The state of one upstream's canaries.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    after: Duration,
    live_failures: u32,
    /// The first check of the current run of idle checks (or when the last canary was sent).
    idle_since: Option<Instant>,
    /// The progress counters' sum at the last check that read it.
    last: Option<f64>,
    /// The next reading is the new baseline: the progress a canary made is not traffic.
    rebase: bool,
    in_flight: bool,
    /// Failed canaries since the last passing one or the last progress.
    failures: u32,
    /// Why the upstream is not ready: the last canary failed, and nothing proved otherwise.
    failed: Option<String>,
    last_outcome: Option<Outcome>,
    /// Why canaries pause ([`Kind::stops`]), until `paused_until`, the engine is seen down and
    /// up again or a reload changes the canary.
    stopped: Option<String>,
    paused_until: Option<Instant>,
    /// The last pause: the next one after another refusal is twice as long (at most
    /// [`MAX_PAUSE`]); `None` once a canary is taken.
    pause: Option<Duration>,
    next: Next,
    /// The model the engine named (vLLM's `/v1/models`), until a canary fails.
    pub(crate) model: Option<String>,
}

/// What a [`Tracker`] says, for `/health`, `/status` and the status page.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CanaryStatus {
    pub after: Duration,
    /// Why the upstream is not ready, when its last canary failed.
    pub failed: Option<String>,
    /// Failed canaries in a row.
    pub failures: u32,
    /// `/live/engine` is 503 for it.
    pub dead: bool,
    /// Why canaries pause, when they do.
    pub stopped: Option<String>,
    /// While they pause: until when, and for how long in all.
    pub paused: Option<(Instant, Duration)>,
    pub last: Option<Outcome>,
    /// Seconds until the next canary if still idle (0: at the next check), or why none.
    pub next: Next,
}

impl Tracker {
    pub(crate) fn new(after: Duration, live_failures: u32) -> Tracker {
        Tracker {
            after,
            live_failures,
            idle_since: None,
            last: None,
            rebase: false,
            in_flight: false,
            failures: 0,
            failed: None,
            last_outcome: None,
            stopped: None,
            paused_until: None,
            pause: None,
            next: Next::Down,
            model: None,
        }
    }

    /// Feeds the check made at `now`; returns whether a canary is due now (the caller sends it
    /// and reports with [`Tracker::finish`]).
    pub(crate) fn observe(&mut self, now: Instant, seen: Seen) -> bool {
        if seen == Seen::Down {
            // A restarted engine may take the canary's credentials, or serve another model.
            self.resume();
            self.pause = None;
        }
        if let Some(until) = self.paused_until {
            if now < until {
                self.next = Next::Paused(until);
                return false;
            }
            // Asked again: the engine may take the canary now (a key added, a model loaded).
            self.resume();
        }
        let reading = match seen {
            Seen::Down | Seen::Asleep => {
                self.idle_since = None;
                self.next = if seen == Seen::Down {
                    Next::Down
                } else {
                    Next::Asleep
                };
                return false;
            }
            Seen::Read(reading) => reading,
        };
        let moved = match (self.last, reading.progress) {
            (Some(before), Some(now)) => before != now,
            _ => false,
        };
        if reading.progress.is_some() {
            self.last = reading.progress;
        }
        if self.in_flight {
            self.next = Next::InFlight;
            return false;
        }
        if std::mem::take(&mut self.rebase) {
            // The first reading after a canary includes the canary's own work.
        } else if moved {
            // Progress is traffic the engine served: proof enough, and the idle clock restarts.
            self.failures = 0;
            self.failed = None;
            self.idle_since = None;
            self.next = Next::Busy;
            return false;
        }
        if reading.busy() {
            self.idle_since = None;
            self.next = Next::Busy;
            return false;
        }
        let since = *self.idle_since.get_or_insert(now);
        let due = since + self.after;
        if now >= due {
            self.in_flight = true;
            self.next = Next::InFlight;
            return true;
        }
        self.next = Next::At(due);
        false
    }

    /// Records the canary sent at `sent`.
    pub(crate) fn finish(&mut self, sent: Instant, outcome: Outcome) {
        self.in_flight = false;
        self.rebase = true;
        // At most one canary per `after` of idleness: the next counts from this one.
        self.idle_since = Some(sent);
        self.next = Next::At(sent + self.after);
        if outcome.kind.stops() {
            // Not the engine's failure: the canary has no say in readiness while it pauses.
            self.failures = 0;
            self.failed = None;
            self.stopped = Some(outcome.detail.clone());
            let pause = self
                .pause
                .map_or(self.after, |p| p.saturating_mul(2))
                .min(MAX_PAUSE);
            self.pause = Some(pause);
            self.paused_until = Some(sent + pause);
            self.next = Next::Paused(sent + pause);
        } else if outcome.kind == Kind::Success {
            self.failures = 0;
            self.failed = None;
            self.pause = None;
        } else {
            self.pause = None;
            self.failures = self.failures.saturating_add(1);
            // The model may have been replaced: ask again before the next one.
            self.model = None;
            self.failed = Some(outcome.detail.clone());
        }
        self.last_outcome = Some(outcome);
    }

    /// Takes a reload's settings, keeping the schedule, the failures and what is in flight (a
    /// reload is not a new start); a changed request (`changed`) is tried again even where the
    /// last one stopped the canaries, and asks the engine for its model again.
    pub(crate) fn reconfigure(&mut self, after: Duration, live_failures: u32, changed: bool) {
        self.after = after;
        self.live_failures = live_failures;
        if changed {
            self.resume();
            self.pause = None;
            self.model = None;
        }
    }

    /// Ends a pause (the back-off is kept until a canary is taken).
    fn resume(&mut self) {
        self.stopped = None;
        self.paused_until = None;
    }

    /// Whether a refusal paused the canaries and none was taken since: a refusal now only
    /// lengthens the back-off.
    pub(crate) fn backing_off(&self) -> bool {
        self.pause.is_some()
    }

    /// The last canary failed and no progress or passing canary came since.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// `live_failures` canaries failed in a row with no progress between them.
    pub(crate) fn is_dead(&self) -> bool {
        self.live_failures > 0 && self.failures >= self.live_failures
    }

    pub(crate) fn status(&self) -> CanaryStatus {
        CanaryStatus {
            after: self.after,
            failed: self.failed.clone(),
            failures: self.failures,
            dead: self.is_dead(),
            stopped: self.stopped.clone(),
            paused: self.paused_until.zip(self.pause),
            last: self.last_outcome.clone(),
            next: self.next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_is_one_the_counter_knows() {
        let labels: Vec<&str> = Kind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels, crate::telemetry::CANARY_RESULTS);
    }

    const SECOND: Duration = Duration::from_secs(1);

    fn idle(progress: f64) -> Seen {
        Seen::Read(Reading {
            running: Some(0.0),
            progress: Some(progress),
            ..Reading::default()
        })
    }

    fn busy(progress: f64) -> Seen {
        Seen::Read(Reading {
            running: Some(2.0),
            progress: Some(progress),
            ..Reading::default()
        })
    }

    fn outcome(kind: Kind) -> Outcome {
        Outcome {
            kind,
            detail: if kind == Kind::Success {
                String::new()
            } else {
                "timed out after 3s".into()
            },
            at: SystemTime::now(),
            took: SECOND,
        }
    }

    /// Advances the paused clock by one check interval and feeds what it saw.
    async fn check(t: &mut Tracker, seen: Seen) -> bool {
        tokio::time::advance(SECOND).await;
        t.observe(tokio::time::Instant::now().into_std(), seen)
    }

    #[tokio::test(start_paused = true)]
    async fn due_after_canary_after_of_idle_checks_and_at_most_once_per_idle_period() {
        let mut t = Tracker::new(3 * SECOND, 3);
        let mut due = Vec::new();
        for _ in 0..4 {
            due.push(check(&mut t, idle(5.0)).await);
        }
        // The run starts at the first idle check: due three checks later.
        assert_eq!(due, [false, false, false, true]);
        let sent = tokio::time::Instant::now().into_std();
        assert!(!check(&mut t, idle(5.0)).await, "one in flight at a time");
        assert_eq!(t.status().next, Next::InFlight);
        t.finish(sent, outcome(Kind::Success));
        // The canary's own progress is not traffic, and the next one counts from this one.
        let mut due = Vec::new();
        for _ in 0..3 {
            due.push(check(&mut t, idle(6.0)).await);
        }
        assert_eq!(due, [false, true, false]);
    }

    #[tokio::test(start_paused = true)]
    async fn busy_or_moving_engines_get_none() {
        let mut t = Tracker::new(2 * SECOND, 3);
        for k in 0..10 {
            assert!(!check(&mut t, busy(f64::from(k))).await);
        }
        // Nothing running but the counters move (requests shorter than a check): traffic.
        for k in 0..10 {
            assert!(!check(&mut t, idle(f64::from(k))).await);
        }
        assert_eq!(t.status().next, Next::Busy);
    }

    #[tokio::test(start_paused = true)]
    async fn down_or_asleep_engines_get_none_and_start_over() {
        let mut t = Tracker::new(2 * SECOND, 3);
        assert!(!check(&mut t, idle(1.0)).await);
        assert!(!check(&mut t, idle(1.0)).await);
        assert!(!check(&mut t, Seen::Asleep).await);
        assert_eq!(t.status().next, Next::Asleep);
        for _ in 0..5 {
            assert!(!check(&mut t, Seen::Asleep).await);
        }
        assert!(!check(&mut t, Seen::Down).await);
        assert_eq!(t.status().next, Next::Down);
        assert!(!check(&mut t, idle(1.0)).await);
        assert!(!check(&mut t, idle(1.0)).await);
        assert!(check(&mut t, idle(1.0)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_are_dead_and_progress_heals_both() {
        let mut t = Tracker::new(SECOND, 2);
        for n in 1..=2 {
            while !check(&mut t, idle(1.0)).await {}
            t.finish(
                tokio::time::Instant::now().into_std(),
                outcome(Kind::Timeout),
            );
            assert!(t.is_failed());
            assert_eq!(t.status().failures, n);
        }
        assert!(t.is_dead());
        assert_eq!(t.status().failed.as_deref(), Some("timed out after 3s"));
        // The first reading after a canary is its baseline; a later move is traffic.
        assert!(!check(&mut t, busy(1.0)).await);
        assert!(t.is_dead(), "the canary's own progress heals nothing");
        assert!(!check(&mut t, idle(2.0)).await);
        assert!(!t.is_failed() && !t.is_dead());
        // live_failures 0: never dead.
        let mut t = Tracker::new(SECOND, 0);
        for _ in 0..5 {
            while !check(&mut t, idle(1.0)).await {}
            t.finish(
                tokio::time::Instant::now().into_std(),
                outcome(Kind::Timeout),
            );
        }
        assert!(t.is_failed() && !t.is_dead());
        // A passing canary heals.
        while !check(&mut t, idle(1.0)).await {}
        t.finish(
            tokio::time::Instant::now().into_std(),
            outcome(Kind::Success),
        );
        assert!(!t.is_failed());
    }

    #[tokio::test(start_paused = true)]
    async fn refused_credentials_pause_the_canaries_with_a_doubling_back_off() {
        let mut t = Tracker::new(SECOND, 1);
        while !check(&mut t, idle(1.0)).await {}
        t.finish(
            tokio::time::Instant::now().into_std(),
            outcome(Kind::Timeout),
        );
        assert!(t.is_failed() && t.is_dead());
        // Each refusal pauses them twice as long as the last: 1 s, 2 s, 4 s...
        let mut pauses = Vec::new();
        for _ in 0..4 {
            while !check(&mut t, idle(1.0)).await {}
            let sent = tokio::time::Instant::now().into_std();
            let mut refused = outcome(Kind::Unauthorized);
            refused.detail = "answered HTTP 401".into();
            t.finish(sent, refused);
            assert!(!t.is_failed() && !t.is_dead(), "no say in readiness");
            assert_eq!(t.status().stopped.as_deref(), Some("answered HTTP 401"));
            let (until, pause) = t.status().paused.expect("paused");
            assert_eq!(until, sent + pause);
            pauses.push(pause.as_secs());
            assert_eq!(t.status().next, Next::Paused(until));
            // Asked again once the pause is over, not before.
            let mut checks = 0;
            while !check(&mut t, idle(1.0)).await {
                checks += 1;
            }
            assert_eq!(checks + 1, pause.as_secs(), "asked again after {pause:?}");
            t.finish(
                tokio::time::Instant::now().into_std(),
                outcome(Kind::Unauthorized),
            );
        }
        assert_eq!(pauses, [1, 4, 16, 64]);
        // At most five minutes.
        for _ in 0..10 {
            while !check(&mut t, idle(1.0)).await {}
            t.finish(
                tokio::time::Instant::now().into_std(),
                outcome(Kind::CannotGenerate),
            );
        }
        assert_eq!(t.status().paused.expect("paused").1, MAX_PAUSE);
        // The engine takes one again: canaries run as before, and the back-off starts over.
        while !check(&mut t, idle(1.0)).await {}
        t.finish(
            tokio::time::Instant::now().into_std(),
            outcome(Kind::Success),
        );
        assert_eq!(t.status().stopped, None);
        assert_eq!(t.status().paused, None);
        while !check(&mut t, idle(1.0)).await {}
        t.finish(
            tokio::time::Instant::now().into_std(),
            outcome(Kind::Unauthorized),
        );
        assert_eq!(t.status().paused.expect("paused").1, SECOND);
        // A reload that changes the request asks again at once; down and up again too.
        t.reconfigure(SECOND, 1, true);
        assert!(t.status().stopped.is_none() && t.status().paused.is_none());
        while !check(&mut t, idle(1.0)).await {}
        t.finish(
            tokio::time::Instant::now().into_std(),
            outcome(Kind::CannotGenerate),
        );
        assert!(t.status().stopped.is_some());
        assert!(!check(&mut t, Seen::Down).await);
        assert!(t.status().stopped.is_none());
    }
}
