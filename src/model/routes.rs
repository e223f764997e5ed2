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

/// What each upstream is (Dynamo's `/metadata`): engine, version, models, cache configuration.
pub const METADATA: &str = "/metadata";
/// Dynamo's LoRA adapters: `GET` lists, `POST` loads; `DELETE /v1/loras/{name}` unloads.
pub const LORAS: &str = "/v1/loras";
/// Dynamo's control routes: `/engine/{name}`, each mapped to an engine's own route.
pub const ENGINE: &str = "/engine";

/// The incidents kept when an engine wedged: `GET /incidents` lists them, `/incidents/{id}` is
/// one as JSON, `/incidents/{id}.tar.gz` its bundle.
pub const INCIDENTS: &str = "/incidents";

/// What a path under `/incidents/` asks for: the incident's id, and whether its bundle.
pub fn incident(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix(INCIDENTS)?.strip_prefix('/')?;
    let (id, bundle) = match rest.strip_suffix(".tar.gz") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    (!id.is_empty() && !id.contains('/')).then_some((id, bundle))
}

/// The engine-neutral route name a path asks for, when it is under `/engine/`.
pub fn engine_route(path: &str) -> Option<&str> {
    path.strip_prefix(ENGINE)?
        .strip_prefix('/')
        .filter(|name| !name.is_empty())
}

/// The adapter a path names, when it is `/v1/loras/{name}`.
pub fn lora_name(path: &str) -> Option<&str> {
    path.strip_prefix(LORAS)?
        .strip_prefix('/')
        .filter(|name| !name.is_empty())
}

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

    #[test]
    fn incident_paths_read_back_as_their_id() {
        assert_eq!(incident("/incidents/17-2"), Some(("17-2", false)));
        assert_eq!(incident("/incidents/17-2.tar.gz"), Some(("17-2", true)));
        assert_eq!(incident("/incidents/"), None);
        assert_eq!(incident("/incidents/.tar.gz"), None);
        assert_eq!(incident("/incidents/a/b"), None);
        assert_eq!(incident("/incidentsx/a"), None);
    }

    #[test]
    fn control_paths_read_back_as_their_names() {
        assert_eq!(engine_route("/engine/sleep"), Some("sleep"));
        assert_eq!(engine_route("/engine/erase_slot/2"), Some("erase_slot/2"));
        assert_eq!(engine_route("/engine/"), None);
        assert_eq!(engine_route("/engines/sleep"), None);
        assert_eq!(lora_name("/v1/loras/a/b"), Some("a/b"));
        assert_eq!(lora_name("/v1/loras"), None);
        assert_eq!(lora_name("/v1/lorasx/a"), None);
    }
}
