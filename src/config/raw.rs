//! The configuration file as written: every value a string with its position, checked and
//! converted later (see `build`), so that each problem names its line and column. The sections
//! a feature owns are written in its own folder (`canary::config`, ...).

use serde_saphyr::Spanned;

use super::section::{RawLabels, Text, section};
use crate::control::config::RawControl;
use crate::incidents::config::RawIncidents;
use crate::otlp::config::RawOtlp;
use crate::relabel::config::RawRules;
use crate::scrape::config::RawUpstream;
use crate::views::config::RawView;
use crate::vitals::config::RawVitals;

section! {
    /// The whole file. Every section is optional.
    RawConfig {
        /// Where the system port listens.
        listen: RawListen,
        /// Readiness (`/health`) and liveness (`/live`) settings.
        health: RawHealth,
        /// Labels added to every engine series that lacks them, in this order
        /// (`{ worker_id: "${POD_NAME}" }`).
        labels: RawLabels,
        /// The engine endpoints to scrape, in order. Without this section (and without
        /// `--upstream`), sysport scrapes vLLM at `http://127.0.0.1:8000/metrics`.
        upstreams: Spanned<Vec<Spanned<RawUpstream>>>,
        /// Resource limits applied to every upstream response.
        limits: RawLimits,
        /// Graceful shutdown.
        shutdown: RawShutdown,
        /// The engine vitals on `/status` and the status page.
        vitals: RawVitals,
        /// More pages computed from the upstreams' families, each served at `/metrics/<name>`; one
        /// named `router` replaces the built-in view for endpoint pickers.
        views: Spanned<Vec<Spanned<RawView>>>,
        /// Prometheus `metric_relabel_configs` applied to every engine series, after the
        /// upstream's own.
        metric_relabel_configs: RawRules,
        /// Dynamo's control routes (`/engine/*`, `/v1/loras`): who may reach them.
        control: RawControl,
        /// OTLP push of the `/metrics` page (off by default; `OTEL_*` variables override it).
        otlp: RawOtlp,
        /// Where the incidents (docs/incidents.md) are kept across restarts.
        incidents: RawIncidents,
    }
}

section! {
    /// `listen:` section.
    RawListen {
        /// IP address to listen on, default `0.0.0.0`; `DYN_SYSTEM_HOST` and `--host` override it.
        host: Text,
        /// TCP port, default 8081 (0 asks the OS for a free port); `DYN_SYSTEM_PORT` and `--port`
        /// override it.
        port: Text,
        /// Time a client has to send a whole request head (`5s`, default 5s): from the connection's
        /// start, and on a kept-alive connection from the next request's first byte. A connection
        /// that sends nothing, or trickles its head, is closed when it runs out.
        request_head_timeout: Text,
        /// Time a kept-alive connection may wait for its next request (`2m`, default 2m), and a
        /// request may go without moving a byte. Keep it above the scrape interval, so that
        /// scrapers reuse their connection.
        idle_timeout: Text,
        /// Time an answer may go without the client taking a byte of it (`30s`, default 30s):
        /// a client that stops reading is closed then, and the page it held is freed.
        write_timeout: Text,
        /// Most bytes the answers being written may hold at once (`64MiB`, default 64MiB; at
        /// least 1MiB): a rendering of the page counts once however many answers share it.
        /// Beyond it a new `/metrics` or view answer gets 503 with `Retry-After` until clients
        /// take what they hold (the probes are never refused). Size it under the container's
        /// memory limit, less sysport's own use (docs/deployment.md).
        max_answer_bytes_held: Text,
        /// Largest request head, request line and headers together (`16KiB`, default 16KiB; 1KiB
        /// to 1MiB). A larger head gets 431.
        max_request_head_bytes: Text,
        /// Most client connections held at once (default 1024, or half the open-file limit when
        /// that is lower; lowered to leave 64 descriptors under the limit). At the cap, the
        /// connection that has waited longest for a request head is closed to make room.
        max_connections: Text,
        /// A web configuration file in Prometheus exporter-toolkit's format (`tls_server_config`,
        /// `basic_auth_users`, `http_server_config.headers`): TLS, client certificates and basic
        /// auth. `SYSPORT_WEB_CONFIG` and `--web.config.file` override it. Default: none (plain
        /// HTTP, no credentials).
        web_config_file: Text,
        /// A second port serving only the probes (`/live` and `/health`) over plain HTTP, for
        /// kubelet probes when the main port requires client certificates. Default: none.
        probe_port: Text,
    }
}

section! {
    /// `health:` section.
    RawHealth {
        /// Readiness route, default `/health`; `DYN_SYSTEM_HEALTH_PATH` overrides it.
        path: Text,
        /// Liveness route, default `/live`; `DYN_SYSTEM_LIVE_PATH` overrides it. Must differ from
        /// `path`: liveness never depends on the engine's health.
        live_path: Text,
        /// Readiness before the first health check: `notready` (default) or `ready`;
        /// `DYN_SYSTEM_STARTING_HEALTH_STATUS` overrides it.
        starting_status: Text,
        /// How often each upstream is checked, by its `health_url` or else by a scrape (`5s`,
        /// default 5s); more than zero.
        interval: Text,
    }
}

section! {
    /// `limits:` section. Sizes take a binary unit, always: `B`, `KiB`, `MiB`, `GiB` (or `Ki`,
    /// `Mi`, `Gi`), as in `512KiB` or `16MiB`.
    RawLimits {
        /// Largest upstream body after decoding its Content-Encoding, default `16MiB`. Over it,
        /// the upstream is down for that scrape.
        max_body_bytes: Text,
        /// Longest line of an upstream body, default `1MiB`.
        max_line_bytes: Text,
        /// Most series kept from one upstream, default 250000.
        max_series: Text,
        /// Most metric families (distinct names) from one upstream, default 20000; vLLM exposes a
        /// few hundred. Each costs far more than a series, so this bounds memory separately.
        max_families: Text,
        /// Most labels on one series, default 64.
        max_labels: Text,
        /// Longest label value, default `512KiB`.
        max_label_value_bytes: Text,
    }
}

section! {
    /// `shutdown:` section.
    RawShutdown {
        /// After SIGTERM, `/health` answers 503 at once and the listener keeps serving this long
        /// (`5s`, default 5s) so load balancers stop sending traffic first.
        drain_delay: Text,
    }
}
