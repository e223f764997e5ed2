//! The open-file limit: raised to the hard limit at start, and the connection cap sized from it
//! so that upstream fetches, health checks and `/proc` reads always find a descriptor.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors never given to clients: upstream and health-check sockets, the runtime's own,
/// `/proc` reads, logs.
pub const RESERVED_FDS: u64 = 64;

/// The default connection cap where the open-file limit allows more.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as Go programs such as Prometheus do at
/// start: the default soft limit (often 1024) is a compatibility relic of `select(2)`, which
/// sysport does not use. Returns the soft limit before and after, or `None` when it cannot be
/// read.
pub fn raise_fd_limit() -> Option<(Option<u64>, Option<u64>)> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return Some((limit.current, limit.current));
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => Some((limit.current, limit.maximum)),
        Err(err) => {
            tracing::warn!(error = %err, soft = ?limit.current, hard = ?limit.maximum,
                "cannot raise the open-file limit");
            Some((limit.current, limit.current))
        }
    }
}

/// The soft open-file limit in force (`None`: unlimited).
pub fn fd_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// The hard open-file limit, which the soft one is raised to at start (`None`: unlimited).
pub fn fd_hard_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).maximum
}

/// The connection cap without a configured one: [`DEFAULT_MAX_CONNECTIONS`], or half the
/// open-file limit when that is lower (at least 1).
pub fn default_max_connections(limit: Option<u64>) -> usize {
    match limit {
        Some(limit) => usize::try_from(limit / 2)
            .unwrap_or(usize::MAX)
            .clamp(1, DEFAULT_MAX_CONNECTIONS),
        None => DEFAULT_MAX_CONNECTIONS,
    }
}

/// The cap in force: the configured one, lowered where it would leave fewer than
/// [`RESERVED_FDS`] descriptors under `limit`; else the default. The second value says it was
/// lowered.
pub fn effective_max_connections(configured: Option<usize>, limit: Option<u64>) -> (usize, bool) {
    let Some(configured) = configured else {
        return (default_max_connections(limit), false);
    };
    let Some(limit) = limit else {
        return (configured, false);
    };
    let room = usize::try_from(limit.saturating_sub(RESERVED_FDS))
        .unwrap_or(usize::MAX)
        .max(1);
    if configured > room {
        (room, true)
    } else {
        (configured, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_half_the_descriptors_for_upstreams() {
        assert_eq!(default_max_connections(Some(1024)), 512);
        assert_eq!(default_max_connections(Some(1_048_576)), 1024);
        assert_eq!(default_max_connections(None), 1024);
        assert_eq!(default_max_connections(Some(1)), 1);
    }

    #[test]
    fn a_configured_cap_above_the_limit_is_lowered_to_keep_the_reserve() {
        assert_eq!(
            effective_max_connections(Some(5000), Some(1024)),
            (960, true)
        );
        assert_eq!(
            effective_max_connections(Some(100), Some(1024)),
            (100, false)
        );
        assert_eq!(effective_max_connections(Some(100), None), (100, false));
        assert_eq!(effective_max_connections(None, Some(1024)), (512, false));
        assert_eq!(effective_max_connections(Some(10), Some(20)), (1, true));
    }
}
