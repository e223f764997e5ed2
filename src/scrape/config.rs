//! The `upstreams:` section and `--upstream NAME=URL`: the engine endpoints to scrape, each with
//! its engine preset's defaults, its health checks (stall detection and canaries, whose own
//! parts are `stall::config` and `canary::config`) and its relabelling rules.

use std::collections::HashMap;
use std::time::Duration;

use serde_saphyr::Spanned;

use crate::canary::config::{CanaryConfig, CanaryUpstream, Dynamo, FileCanary, RawCanary};
use crate::config::check::{
    CheckError, check_upstream_name, keep_prefix, parse_bool, parse_engine, parse_health_url,
    parse_url, positive_duration,
};
use crate::config::loader::{Loader, Origin};
use crate::config::quote::{quoted, shown};
use crate::config::section::{Text, section};
use crate::config::units::{format_duration, parse_duration};
use crate::model::{Engine, Url, hide_password_in};
use crate::relabel::Rule;
use crate::relabel::config::RawRules;
use crate::stall::config::{RawStall, StallConfig, default_stall};

/// The most upstreams one configuration may name: `/status`, `/` and `/health` cost time in
/// proportion to them, and each check loop keeps a task for every one.
pub const MAX_UPSTREAMS: usize = 2_000;

/// One engine endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// Unique name, used as the `upstream` label of sysport's own metrics.
    pub name: String,
    /// The inference engine behind it (default vLLM): its preset gave the defaults, and decides
    /// the `router` view's families and the renamed families of `aliases`.
    pub engine: Engine,
    /// The Prometheus endpoint (http or https).
    pub url: Url,
    /// Family-name prefixes to keep; never empty.
    pub keep: Vec<String>,
    /// Per-scrape timeout, default 2 s (further capped by Prometheus' scrape timeout header).
    pub timeout: Duration,
    /// Optional health URL; without one, readiness follows the last scrape.
    pub health_url: Option<Url>,
    /// Whether readiness needs this upstream, default true.
    pub required: bool,
    /// Reuse a fetch younger than this, and serve a slightly older one while a refresh runs
    /// (0 = always fetch), default 0.
    pub min_interval: Duration,
    /// Also serve renamed families under their other name in the full `/metrics`, default false.
    pub aliases: bool,
    /// Ask the engine for a gzip-compressed page (`Accept-Encoding: gzip`), else for the page as
    /// it is (`identity`). Default: not when `url` is on loopback (`localhost`, `127.0.0.0/8`,
    /// `::1`), where compression saves no bandwidth and costs the engine's server a compression
    /// of its page at every fetch; yes elsewhere.
    pub enable_compression: bool,
    /// Rules applied to this upstream's series before the top-level ones; default none.
    pub metric_relabel_configs: Vec<Rule>,
    /// Stall detection (`stall_after` above zero); from a file, the flags or the built-in
    /// default on for every engine whose families the upstream keeps, off in
    /// [`UpstreamConfig::new`].
    pub stall: Option<StallConfig>,
    /// Canary requests while idle (`canary_after` above zero); from a file, the flags or the
    /// built-in default on for every engine with a generation route whose families the
    /// upstream keeps, off in [`UpstreamConfig::new`].
    pub canary: Option<CanaryConfig>,
}

impl UpstreamConfig {
    /// An upstream with the defaults of `--upstream NAME=URL`: vLLM, keep `vllm:` and
    /// `lmcache:`, 2 s timeout, required, no health URL, always fetch, no aliases, no stall
    /// detection and no canaries (the loader turns both on by default; see
    /// [`UpstreamConfig::stall`]).
    pub fn new(name: impl Into<String>, url: Url) -> Self {
        UpstreamConfig {
            name: name.into(),
            engine: Engine::Vllm,
            keep: Engine::Vllm.default_keep(),
            timeout: Duration::from_secs(2),
            health_url: None,
            required: true,
            min_interval: Duration::ZERO,
            aliases: false,
            enable_compression: !is_loopback(&url),
            metric_relabel_configs: Vec::new(),
            stall: None,
            canary: None,
            url,
        }
    }
}

/// Whether `url` names this machine's loopback interface: `localhost` (or a name under it,
/// RFC 6761), `127.0.0.0/8` or `::1`. An engine in the same pod is reached there.
pub(crate) fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => {
            let name = host.strip_suffix('.').unwrap_or(host);
            name.eq_ignore_ascii_case("localhost")
                || name
                    .rsplit_once('.')
                    .is_some_and(|(_, top)| top.eq_ignore_ascii_case("localhost"))
        }
    }
}

impl UpstreamConfig {
    /// This upstream with the health checks a configuration gets when it says nothing of them:
    /// stall detection and canaries on where its engine's preset has them and the upstream
    /// keeps their families (see [`UpstreamConfig::stall`], [`UpstreamConfig::canary`]).
    pub fn with_default_checks(self) -> UpstreamConfig {
        let u = UpstreamConfig {
            stall: default_stall(self.engine, &self.keep),
            ..self
        };
        UpstreamConfig {
            canary: CanaryConfig::default_for(&u),
            ..u
        }
    }
}

impl CanaryUpstream for UpstreamConfig {
    fn engine(&self) -> Engine {
        self.engine
    }

    fn metrics_url(&self) -> &Url {
        &self.url
    }

    fn health_url(&self) -> Option<&Url> {
        self.health_url.as_ref()
    }

    fn keep(&self) -> &[String] {
        &self.keep
    }

    fn stall(&self) -> Option<&StallConfig> {
        self.stall.as_ref()
    }
}

section! {
    /// One entry of `upstreams:`.
    RawUpstream {
        /// Unique name, made of `A-Z a-z 0-9 _ . -`; the `upstream` label of sysport's own metrics.
        name: Text,
        /// The inference engine: `vllm` (default), `sglang`, `trtllm` (trtllm-serve), `llamacpp`
        /// (llama.cpp's `llama-server`) or `triton` (Triton with the TensorRT-LLM backend). Its
        /// preset gives the defaults of `url`, `keep` and `health_url` (named, the engine's
        /// health endpoint on `url`'s origin), and the families of the `router` view.
        engine: Text,
        /// The Prometheus endpoint, `http://` or `https://`; default the engine's own on
        /// 127.0.0.1 (vLLM `:8000/metrics`, SGLang `:30000/metrics`, trtllm-serve
        /// `:8000/prometheus/metrics`, Triton `:8002/metrics`, llama.cpp `:8080/metrics`, served
        /// only with `--metrics`). Several upstreams may share a URL: it is fetched once per
        /// scrape.
        url: Text,
        /// Family-name prefixes to keep; default the engine's (`["vllm:", "lmcache:"]`,
        /// `["sglang:"]`, `["trtllm_"]`, `["nv_"]`, `["llamacpp:"]`); not empty, and none under `dynamo_sysport_`
        /// (sysport's own names, which no upstream's can take).
        keep: Spanned<Vec<Text>>,
        /// Per-scrape timeout (`2s`, default 2s), further capped by Prometheus' scrape timeout; more
        /// than zero.
        timeout: Text,
        /// Health URL checked every `health.interval` (2xx is healthy; a redirect is not, and is
        /// not followed), or `none`: readiness follows the last scrape. Default the engine's own
        /// (vLLM, SGLang, trtllm-serve, llama.cpp `/health`; Triton `/v2/health/ready` on its
        /// HTTP port 8000): at the preset's address when `url` is omitted, on `url`'s origin
        /// when `engine` is named; none when neither is written (a metrics URL of something
        /// else, like LMCache's).
        health_url: Text,
        /// Whether readiness needs this upstream (`true`, default, or `false`).
        required: Text,
        /// Reuse a fetch younger than this (`0s`, default: always fetch). Bounds the load that
        /// frequent readers such as inference gateways put on the engine.
        min_interval: Text,
        /// Also serve each family the engine renamed under its other name in the full `/metrics`
        /// (`true` or `false`, default), when the page has only one of the two.
        aliases: Text,
        /// Ask the engine for its page gzip-compressed (`true` or `false`; the name and meaning of
        /// Prometheus' scrape option). Default `false` when `url` is on a loopback address
        /// (`localhost`, `127.0.0.0/8`, `::1`): an engine in the same pod then spends no time
        /// compressing its page for sysport (prometheus_client compresses at level 9, on the
        /// server's event loop); `true` elsewhere. A compressed answer is read either way.
        enable_compression: Text,
        /// Prometheus `metric_relabel_configs` (the same schema and meaning) applied to this
        /// upstream's series before the wire, before the top-level ones.
        metric_relabel_configs: RawRules,
        /// Stall detection (`60s`; default `0s`, off): an engine whose requests run at every
        /// health check for this long while its progress counters never move is stalled:
        /// `/health` and `/live/engine` answer 503 until the counters move again. Make it longer
        /// than the longest prefill; several `health.interval`s.
        stall_after: Text,
        /// The families stall detection reads, instead of the engine's (needs `stall_after`).
        stall: Spanned<RawStall>,
        /// Canary requests (`10s`; default `0s`, off): after this long with nothing running and
        /// no progress, one one-token request goes through the engine; a failure makes the
        /// upstream not ready until a canary passes or progress is seen.
        canary_after: Text,
        /// The canary request, instead of the engine's (needs `canary_after`).
        canary: Spanned<RawCanary>,
    }
}

/// The built-in upstream: vLLM at `http://127.0.0.1:8000/metrics`, with its health URL and
/// the health checks a configuration gets when it says nothing of them.
pub(crate) fn builtin() -> Vec<UpstreamConfig> {
    let preset = Engine::Vllm.preset();
    let url = |u: &str| Url::parse(u).expect("a preset's URLs are valid");
    let mut vllm = UpstreamConfig::new("vllm", url(preset.metrics_url));
    vllm.health_url = Some(url(preset.health_url));
    vec![vllm.with_default_checks()]
}

impl Loader<'_> {
    pub(crate) fn upstreams(
        &mut self,
        file: Option<Spanned<Vec<Spanned<RawUpstream>>>>,
        flags: &[String],
        dynamo: &Dynamo,
    ) -> Vec<UpstreamConfig> {
        let given = |loader: &mut Self, upstreams: Vec<UpstreamConfig>| {
            upstreams
                .into_iter()
                .map(|u| {
                    let u = u.with_default_checks();
                    UpstreamConfig {
                        canary: loader.canary(FileCanary::none(), &u, dynamo),
                        ..u
                    }
                })
                .collect()
        };
        if !flags.is_empty() {
            let upstreams = self.flag_upstreams(flags);
            return given(self, upstreams);
        }
        let Some(file) = file else {
            return given(self, builtin());
        };
        if file.value.is_empty() {
            let message =
                "empty list: name at least one upstream, or omit the section for the default";
            self.issue(Origin::File(file.referenced), "upstreams", message);
        }
        self.file_upstreams(file.value, dynamo)
    }

    fn file_upstreams(
        &mut self,
        raw: Vec<Spanned<RawUpstream>>,
        dynamo: &Dynamo,
    ) -> Vec<UpstreamConfig> {
        let mut first_lines = HashMap::new();
        if let Some(extra) = raw.get(MAX_UPSTREAMS) {
            let message = format!(
                "{} upstreams: at most {MAX_UPSTREAMS} can be configured",
                raw.len()
            );
            let field = format!("upstreams[{MAX_UPSTREAMS}]");
            self.issue(Origin::File(extra.referenced), &field, message);
        }
        raw.into_iter()
            .enumerate()
            .filter_map(|(i, entry)| self.file_upstream(i, entry, &mut first_lines, dynamo))
            .collect()
    }

    /// One entry of the file's `upstreams`; `None` when it lacks a usable name, url or keep list
    /// (the problem is recorded, so the load fails anyway).
    fn file_upstream(
        &mut self,
        i: usize,
        entry: Spanned<RawUpstream>,
        first_lines: &mut HashMap<String, u64>,
        dynamo: &Dynamo,
    ) -> Option<UpstreamConfig> {
        let field = |key: &str| format!("upstreams[{i}].{key}");
        let raw = entry.value;
        self.unknown_keys(
            &raw.unknown,
            &format!("upstreams[{i}]"),
            RawUpstream::FIELDS,
        );
        if raw.name.is_none() {
            let message = "missing: every upstream needs a name";
            self.issue(Origin::File(entry.referenced), &field("name"), message);
        }
        let name = self
            .file_value(raw.name.as_ref(), &field("name"), check_upstream_name)
            .filter(|(name, at)| self.label_value_fits(name, *at, &field("name")));
        if let Some((name, location)) = &name {
            if let Some(first) = first_lines.get(name) {
                let message = format!("duplicate upstream name {name:?} (first at line {first})");
                self.issue(Origin::File(*location), &field("name"), message);
            } else {
                first_lines.insert(name.clone(), location.line());
            }
        }
        let engine = self
            .file_value(raw.engine.as_ref(), &field("engine"), parse_engine)
            .map_or(Engine::Vllm, |(engine, _)| engine);
        let preset = engine.preset();
        let preset_url = |u: &str| Url::parse(u).expect("a preset's URLs are valid");
        let url = match &raw.url {
            Some(text) => self
                .file_value(Some(text), &field("url"), parse_url)
                .map(|(url, _)| url),
            None => Some(preset_url(preset.metrics_url)),
        };
        let keep = match raw.keep {
            None => Some(engine.default_keep()),
            Some(keep) => self.keep(keep, &field("keep")),
        };
        let stall = self.stall(
            i,
            raw.stall_after.as_ref(),
            raw.stall,
            engine,
            keep.as_deref(),
        );
        let canary = self.file_canary(i, raw.canary_after.as_ref(), raw.canary);
        let timeout = self.file_value(raw.timeout.as_ref(), &field("timeout"), positive_duration);
        let health_url = match (&raw.health_url, &raw.url) {
            (Some(text), _) => self
                .file_value(Some(text), &field("health_url"), parse_health_url)
                .and_then(|(url, _)| url),
            (None, None) => Some(preset_url(preset.health_url)),
            // With the engine named, its own health endpoint on the metrics URL's origin (a URL
            // of something else, like LMCache's, names no engine: readiness follows scrapes).
            (None, Some(_)) if raw.engine.is_some() => {
                url.as_ref().map(|u| preset.health_url_of(u))
            }
            (None, Some(_)) => None,
        };
        let required = self.file_value(raw.required.as_ref(), &field("required"), parse_bool);
        let min_interval = self.file_value(
            raw.min_interval.as_ref(),
            &field("min_interval"),
            parse_duration,
        );
        let aliases = self.file_value(raw.aliases.as_ref(), &field("aliases"), parse_bool);
        let enable_compression = self.file_value(
            raw.enable_compression.as_ref(),
            &field("enable_compression"),
            parse_bool,
        );
        let metric_relabel_configs =
            self.relabel_rules(raw.metric_relabel_configs, &field("metric_relabel_configs"));

        let defaults = UpstreamConfig::new(name?.0, url?);
        let upstream = UpstreamConfig {
            engine,
            keep: keep?,
            timeout: timeout.map_or(defaults.timeout, |(timeout, _)| timeout),
            health_url,
            required: required.map_or(defaults.required, |(required, _)| required),
            min_interval: min_interval.map_or(defaults.min_interval, |(interval, _)| interval),
            aliases: aliases.is_some_and(|(aliases, _)| aliases),
            enable_compression: enable_compression
                .map_or(defaults.enable_compression, |(compress, _)| compress),
            metric_relabel_configs,
            stall: stall?,
            ..defaults
        };
        Some(UpstreamConfig {
            canary: self.canary(canary?, &upstream, dynamo),
            ..upstream
        })
    }

    fn keep(&mut self, keep: Spanned<Vec<Text>>, field: &str) -> Option<Vec<String>> {
        if keep.value.is_empty() {
            self.issue(
                Origin::File(keep.referenced),
                field,
                "empty list keeps nothing: list the family-name prefixes to keep, like \"vllm:\"",
            );
            return None;
        }
        let mut prefixes = Vec::with_capacity(keep.value.len());
        let mut ok = true;
        for (j, prefix) in keep.value.iter().enumerate() {
            let field = format!("{field}[{j}]");
            match self.file_value(Some(prefix), &field, keep_prefix) {
                Some((prefix, _)) => prefixes.push(prefix),
                None => ok = false,
            }
        }
        ok.then_some(prefixes)
    }

    fn flag_upstreams(&mut self, specs: &[String]) -> Vec<UpstreamConfig> {
        if specs.len() > MAX_UPSTREAMS {
            let message = format!(
                "{} upstreams: at most {MAX_UPSTREAMS} can be configured",
                specs.len()
            );
            self.issue(Origin::Flag("--upstream"), "--upstream", message);
        }
        let mut upstreams: Vec<UpstreamConfig> = Vec::with_capacity(specs.len());
        for spec in specs {
            match parse_flag_upstream(spec) {
                Ok(upstream) if upstreams.iter().any(|u| u.name == upstream.name) => {
                    let message = format!(
                        "{:?}: duplicate upstream name {:?}",
                        hide_password_in(spec),
                        upstream.name
                    );
                    self.issue(Origin::Flag("--upstream"), "--upstream", message);
                }
                Ok(upstream) => upstreams.push(upstream),
                Err(problem) => {
                    let message = problem.to_string();
                    self.issue(Origin::Flag("--upstream"), "--upstream", message);
                }
            }
        }
        upstreams
    }
}

/// A `--upstream` value that does not read, quoted with its password hidden.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FlagUpstreamError {
    #[error("invalid value {0:?}: expected NAME=URL, like vllm=http://127.0.0.1:8000/metrics")]
    Form(String),
    #[error("{shown:?}: {error}")]
    Part { shown: String, error: CheckError },
}

fn parse_flag_upstream(spec: &str) -> Result<UpstreamConfig, FlagUpstreamError> {
    let shown = || hide_password_in(spec).into_owned();
    let Some((name, url)) = spec.split_once('=') else {
        return Err(FlagUpstreamError::Form(shown()));
    };
    let part = |error| FlagUpstreamError::Part {
        shown: shown(),
        error,
    };
    let name = check_upstream_name(name).map_err(part)?;
    let url = parse_url(url).map_err(part)?;
    Ok(UpstreamConfig::new(name, url))
}

/// `upstreams:` as `check-config` prints it; `router_view`: whether a view replaces the
/// built-in `router` (else each upstream shows the families its engine gives it).
pub(crate) fn render(
    f: &mut std::fmt::Formatter<'_>,
    upstreams: &[UpstreamConfig],
    router_view: bool,
) -> std::fmt::Result {
    writeln!(f, "upstreams:")?;
    for upstream in upstreams {
        writeln!(f, "  - name: {}", quoted(&upstream.name))?;
        writeln!(f, "    engine: {}", upstream.engine.name())?;
        writeln!(f, "    url: {}", shown(&upstream.url))?;
        let keep: Vec<String> = upstream.keep.iter().map(|p| quoted(p)).collect();
        writeln!(f, "    keep: [{}]", keep.join(", "))?;
        writeln!(f, "    timeout: {}", format_duration(upstream.timeout))?;
        match &upstream.health_url {
            Some(health_url) => writeln!(f, "    health_url: {}", shown(health_url))?,
            None => writeln!(f, "    health_url: none")?,
        }
        writeln!(f, "    required: {}", upstream.required)?;
        writeln!(
            f,
            "    min_interval: {}",
            format_duration(upstream.min_interval)
        )?;
        writeln!(f, "    aliases: {}", upstream.aliases)?;
        writeln!(f, "    enable_compression: {}", upstream.enable_compression)?;
        crate::stall::config::render(f, upstream.stall.as_ref())?;
        crate::canary::config::render(f, upstream.canary.as_ref())?;
        if !router_view {
            let router: Vec<String> = upstream
                .engine
                .preset()
                .router
                .iter()
                .map(|r| format!("{}: {}", r.key, r.op))
                .collect();
            writeln!(f, "    # /metrics/router: {}", router.join(", "))?;
        }
        crate::relabel::config::render(f, &upstream.metric_relabel_configs, "    ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
