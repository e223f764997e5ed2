//! The paths sysport serves, each written once: the server's route table matches requests
//! against them, the configuration keeps the probes off them and takes its defaults from them,
//! and the status page lists them.

/// The merged page of every upstream and sysport's own families.
pub const METRICS: &str = "/metrics";
/// The status page for people.
pub const STATUS_PAGE: &str = "/";
/// The status page's facts as JSON.
pub const STATUS: &str = "/status";
/// The engine container's liveness probe (stall detection).
pub const LIVE_ENGINE: &str = "/live/engine";
/// The readiness probe's path unless configured (`health.path`).
pub const HEALTH: &str = "/health";
/// The liveness probe's path unless configured (`health.live_path`).
pub const LIVE: &str = "/live";

/// The path view `name` is served at: `/metrics/<name>`.
pub fn view(name: &str) -> String {
    format!("{METRICS}/{name}")
}

/// The view name a path asks for, when it is under `/metrics/`.
pub fn view_name(path: &str) -> Option<&str> {
    path.strip_prefix(METRICS)?.strip_prefix('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_path_reads_back_as_its_name() {
        assert_eq!(view("router"), "/metrics/router");
        assert_eq!(view_name(&view("router")), Some("router"));
        assert_eq!(view_name("/metrics"), None);
        assert_eq!(view_name("/metricsx/router"), None);
        assert_eq!(view_name("/metrics/"), Some(""));
    }
}
