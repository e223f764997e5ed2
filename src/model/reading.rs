//! What one health check read of an engine's load and progress: the one reading that stall
//! detection and canaries judge (`health` reads it; neither judge reads a page).

/// An engine's busy gauges, progress counters and sleep gauge, as one check read them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    /// Requests being worked on; `None` when the page has no series of the running gauge.
    pub running: Option<f64>,
    /// Requests waiting to be scheduled; `None` when the page has none (or the engine names no
    /// waiting gauge).
    pub waiting: Option<f64>,
    /// The progress counters' sum; `None` when the page has none of them (or one is NaN).
    pub progress: Option<f64>,
    /// The engine says it sleeps (vLLM's sleep mode): it runs nothing and is not asked to.
    pub asleep: bool,
}

impl Reading {
    /// Whether the engine has work: requests running or waiting (a scheduler that stopped
    /// with requests queued and none running is busy too), unless it sleeps.
    pub fn busy(&self) -> bool {
        !self.asleep
            && (self.running.is_some_and(|n| n > 0.0) || self.waiting.is_some_and(|n| n > 0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_running_or_waiting_unless_asleep() {
        let r = |running, waiting, asleep| Reading {
            running,
            waiting,
            progress: Some(1.0),
            asleep,
        };
        assert!(r(Some(2.0), Some(0.0), false).busy());
        assert!(
            r(Some(0.0), Some(5.0), false).busy(),
            "queued with none running"
        );
        assert!(r(None, Some(1.0), false).busy());
        assert!(!r(Some(0.0), Some(0.0), false).busy());
        assert!(!r(None, None, false).busy());
        assert!(!r(Some(3.0), Some(1.0), true).busy(), "asleep");
    }
}
