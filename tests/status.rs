//! The status page (`/`) and its JSON (`/status`): what they say agrees with `/health` and
//! `/metrics`, opening them fetches nothing from the upstreams, their schema stays put,
//! nothing an upstream or the configuration says becomes markup, no secret is shown, and
//! they sit behind basic auth with the rest (the probes stay open).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use common::{Reply, Running, Upstream, client, config, eventually, metric, upstream_config};
use serde_json::Value;
use sysport::config::Config;
use sysport::config::WebConfig;
use sysport::model::Url;

const PAGE: &str = "# HELP vllm:num_requests_running Requests running.\n\
                    # TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{engine=\"0\"} 4\n\
                    vllm:num_requests_running{engine=\"1\"} 2\n\
                    # TYPE python_gc_objects_collected_total counter\n\
                    python_gc_objects_collected_total 9\n";

/// A loopback URL nothing listens on.
fn refused_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    format!("http://{}/metrics", l.local_addr().expect("addr"))
}

/// sysport in front of a healthy upstream (checked through its health URL, so that only
/// `/metrics` reads fetch its page) and a refused one, both required.
async fn healthy_and_refused(healthy: &Upstream) -> Running {
    let mut good = upstream_config("vllm", &healthy.metrics_url(), &["vllm:"]);
    good.health_url = Some(Url::parse(&healthy.health_url()).expect("url"));
    let gone = upstream_config("lmcache", &refused_url(), &["lmcache:"]);
    let mut config = config(vec![good, gone]);
    config.health.interval = Duration::from_secs(3600);
    let sp = Running::start(config).await;
    eventually(
        Duration::from_secs(10),
        "both upstreams checked",
        || async {
            let (_, health) = json(&sp, "/health").await;
            ["vllm", "lmcache"]
                .iter()
                .all(|u| health["upstreams"][u]["checked"] == true)
        },
    )
    .await;
    sp
}

async fn json(sp: &Running, path: &str) -> (StatusCode, Value) {
    let (code, body) = sp.get(path).await;
    (code, serde_json::from_str(&body).expect("JSON"))
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(names: &[&'a str]) -> BTreeSet<&'a str> {
    names.iter().copied().collect()
}

/// The documented keys of one upstream's `vitals` (docs/vitals.md): every figure, null where
/// there is too little data.
fn vitals_schema(vitals: &Value) {
    let figures = [
        "running",
        "waiting",
        "kv_cache_usage",
        "requests_per_second",
        "prompt_tokens_per_second",
        "generation_tokens_per_second",
        "preemptions_per_second",
        "prefix_cache_hit_rate",
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "not_available",
    ];
    let mut want = set(&figures);
    want.extend([
        "window_seconds",
        "as_of_unix_seconds",
        "readings",
        "readings_total",
        "rank_label",
        "ranks",
        "pids",
        "left_out",
        "kept_bytes",
        "history",
        "canaries",
    ]);
    assert_eq!(keys(vitals), want, "{vitals}");
    assert_eq!(
        keys(&vitals["canaries"]),
        set(&["requests_per_second", "generation_tokens_per_second"])
    );
    assert_eq!(
        keys(&vitals["left_out"]),
        set(&["ranks", "pids", "buckets"])
    );
    for q in &figures[8..11] {
        assert_eq!(keys(&vitals[q]), set(&["p50", "p90", "p99"]), "{q}");
    }
    assert_eq!(
        keys(&vitals["history"]),
        set(&[
            "running",
            "waiting",
            "kv_cache_usage",
            "generation_tokens_per_second",
            "ttft_p99_seconds"
        ])
    );
    for part in vitals["ranks"].as_array().expect("ranks") {
        let mut want = set(&figures);
        want.insert("id");
        assert_eq!(keys(part), want, "{part}");
    }
}

#[tokio::test]
async fn status_keeps_its_schema_and_agrees_with_health_and_metrics() {
    let healthy = Upstream::start(Reply::text(PAGE)).await;
    let sp = healthy_and_refused(&healthy).await;
    let (_, metrics) = sp.get("/metrics").await;
    let (health_code, health) = json(&sp, "/health").await;
    let (code, status) = json(&sp, "/status").await;
    assert_eq!(code, StatusCode::OK);

    // The documented schema (docs/status.md): every key the code emits is pinned here, so
    // removing, renaming or adding one without documenting it fails.
    assert_eq!(
        keys(&status),
        set(&[
            "version",
            "uptime_seconds",
            "ready",
            "not_ready_reason",
            "shutting_down",
            "listen",
            "config_file",
            "paths",
            "upstreams",
            "otlp",
            "incidents"
        ])
    );
    assert!(status["otlp"].is_null(), "no OTLP export configured");
    assert_eq!(
        keys(&status["paths"]),
        set(&["metrics", "health", "live", "status", "views"])
    );
    let ups = status["upstreams"].as_array().expect("upstreams");
    assert_eq!(ups.len(), 2);
    for u in ups {
        assert_eq!(
            keys(u),
            set(&[
                "name",
                "url",
                "engine",
                "required",
                "up",
                "state",
                "state_since",
                "last_error",
                "last_error_at",
                "last_scrape",
                "series",
                "response_bytes",
                "data_age_seconds",
                "health",
                "history",
                "vitals"
            ])
        );
        // LMCache's endpoint keeps none of the vLLM preset's vitals families.
        if u["name"] == "lmcache" {
            assert_eq!(u["vitals"], Value::Null);
        } else {
            vitals_schema(&u["vitals"]);
        }
        assert_eq!(
            keys(&u["last_scrape"]),
            set(&["at", "duration_seconds", "result", "read"])
        );
        assert_eq!(
            keys(&u["series"]),
            set(&[
                "kept",
                "dropped",
                "conflict",
                "duplicate",
                "malformed",
                "aliased",
                "relabel_dropped"
            ])
        );
        for (outcome, n) in u["series"].as_object().expect("series") {
            assert!(n.is_u64(), "{outcome}: {u}");
        }
        let history = u["history"].as_array().expect("history");
        assert!(!history.is_empty(), "both were scraped: {u}");
        for second in history {
            assert_eq!(
                keys(second),
                set(&[
                    "seconds_ago",
                    "scrapes",
                    "failures",
                    "max_duration_seconds",
                    "kept"
                ])
            );
        }
        assert_eq!(
            keys(&u["health"]),
            set(&[
                "ready",
                "reason",
                "checked",
                "check",
                "last_check_at",
                "last_error",
                "stall",
                "stalled",
                "canary",
                "canary_failed",
                "canary_stopped",
                "canary_paused_until"
            ])
        );
    }

    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["listen"], sp.base);
    assert_eq!(status["paths"]["views"][0], "/metrics/router");
    assert!(status["uptime_seconds"].as_f64().expect("uptime") >= 0.0);
    // Readiness says what /health says, and why.
    assert_eq!(health_code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(status["ready"], false);
    let reason = status["not_ready_reason"].as_str().expect("a reason");
    assert!(reason.contains("lmcache"), "{reason}");
    assert!(reason.contains("connection refused"), "{reason}");
    assert!(!reason.contains("vllm"), "{reason}");

    for u in ups {
        let name = u["name"].as_str().expect("name");
        let up = metric(&metrics, "dynamo_sysport_upstream_up")
            .label("upstream", name)
            .value();
        assert_eq!(u["up"], up == 1.0, "{name}");
        let ready = health["endpoints"][name] == "ready";
        assert_eq!(u["health"]["ready"], ready, "{name}");
        for (outcome, n) in u["series"].as_object().expect("series") {
            let gauge = metric(&metrics, "dynamo_sysport_upstream_series")
                .label("upstream", name)
                .label("outcome", outcome)
                .value();
            assert_eq!(n.as_f64(), Some(gauge), "{name} {outcome}");
        }
    }
    let (good, gone) = (&ups[0], &ups[1]);
    assert_eq!(good["url"], healthy.metrics_url());
    assert_eq!(good["engine"], "vllm");
    assert_eq!(good["state"], "up");
    assert_eq!(good["last_error"], Value::Null);
    assert_eq!(good["last_scrape"]["result"], "success");
    assert_eq!(good["last_scrape"]["read"], "full");
    assert!(
        good["last_scrape"]["at"]
            .as_str()
            .is_some_and(|at| at.len() == 24 && at.ends_with('Z')),
        "{good}"
    );
    assert_eq!(good["series"]["kept"], 2);
    assert_eq!(good["series"]["dropped"], 1);
    assert_eq!(
        good["response_bytes"].as_f64(),
        Some(
            metric(&metrics, "dynamo_sysport_upstream_response_bytes")
                .label("upstream", "vllm")
                .value()
        )
    );
    assert_eq!(good["response_bytes"], PAGE.len());
    let age = good["data_age_seconds"].as_f64().expect("an age");
    assert!((0.0..30.0).contains(&age), "{age}");
    assert_eq!(good["health"]["check"], "health_url");
    // The health check read the vitals families: two ranks running 4 and 2; one reading, so
    // no rate yet (null, not 0).
    let vitals = &good["vitals"];
    assert_eq!(vitals["window_seconds"], 60.0);
    assert_eq!(vitals["readings"], 1);
    assert_eq!(vitals["readings_total"], 1);
    assert_eq!(vitals["running"], 6.0);
    assert_eq!(vitals["waiting"], Value::Null);
    assert_eq!(vitals["requests_per_second"], Value::Null);
    assert_eq!(vitals["time_to_first_token_seconds"]["p99"], Value::Null);
    assert_eq!(vitals["rank_label"], "engine");
    assert_eq!(vitals["ranks"][1]["id"], "1");
    assert_eq!(vitals["ranks"][1]["running"], 2.0);
    assert_eq!(vitals["history"]["running"][0][1], 6.0);
    let history = good["history"].as_array().expect("history");
    assert!(!history.is_empty());
    assert_eq!(history.last().expect("a point")["kept"], 2);

    assert_eq!(gone["state"], "down");
    assert_eq!(gone["up"], false);
    assert_eq!(gone["last_error"], "connection refused");
    assert_eq!(gone["last_scrape"]["result"], "connect_error");
    assert_eq!(gone["data_age_seconds"], Value::Null);
    assert_eq!(gone["response_bytes"], Value::Null);
    assert_eq!(gone["health"]["check"], "scrape");
    assert!(gone["history"][0]["failures"].as_u64() >= Some(1));
}

#[tokio::test]
async fn opening_the_page_and_status_fetches_nothing() {
    let healthy = Upstream::start(Reply::text(PAGE)).await;
    let sp = healthy_and_refused(&healthy).await;
    assert_eq!(sp.get("/metrics").await.0, StatusCode::OK);
    let fetched = healthy.requests();
    // The health check's read of the vitals families (the engine's selection and, the first
    // time, the full page to compare it with), then `/metrics`.
    assert_eq!(fetched, 3);
    for _ in 0..20 {
        let (code, page) = sp.get("/").await;
        assert_eq!(code, StatusCode::OK);
        assert!(page.contains("id=\"upstream-vllm\""));
        assert_eq!(sp.get("/status").await.0, StatusCode::OK);
    }
    assert_eq!(healthy.requests(), fetched, "the page fetched the upstream");
}

#[tokio::test]
async fn the_page_shows_both_upstreams_links_and_charts() {
    let healthy = Upstream::start(Reply::text(PAGE)).await;
    let sp = healthy_and_refused(&healthy).await;
    for _ in 0..3 {
        sp.get("/metrics").await;
    }
    let r = client().get(sp.url("/")).send().await.expect("answers");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
    let page = r.text().await.expect("body");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<meta http-equiv=\"refresh\""));
    for link in ["/metrics", "/metrics/router", "/health", "/live", "/status"] {
        assert!(page.contains(&format!("href=\"{link}\"")), "{link}");
    }
    // Nothing from elsewhere: no script, stylesheet, image or font to fetch.
    assert!(!page.contains("<script"));
    assert!(!page.contains("src="));
    assert!(!page.contains("<link"));
    assert!(!page.contains("url("));
    let card = |name: &str| {
        let start = page
            .find(&format!("id=\"upstream-{name}\""))
            .unwrap_or_else(|| panic!("no card for {name}"));
        let end = page[start..].find("</section>").expect("card ends") + start;
        page[start..end].to_string()
    };
    let good = card("vllm");
    assert!(good.contains("class=\"badge ok\">up<"), "{good}");
    assert!(good.contains("<svg class=\"chart\""), "{good}");
    assert!(good.contains("class=\"took\""), "{good}");
    let gone = card("lmcache");
    assert!(gone.contains("class=\"badge bad\">down<"), "{gone}");
    assert!(gone.contains("connection refused"), "{gone}");
    assert!(gone.contains("class=\"fail\""), "{gone}");
    // The reason names the upstream once, not "Not ready: lmcache is not ready: ...".
    assert!(page.contains("Not ready: lmcache: "), "{page}");
    assert!(!page.contains("lmcache is not ready"), "{page}");
}

/// An upstream that redirects to a URL carrying markup.
async fn hostile_redirect() -> String {
    let app = axum::Router::new().fallback(|| async {
        let mut r = StatusCode::FOUND.into_response();
        r.headers_mut().insert(
            header::LOCATION,
            HeaderValue::from_static("http://10.0.0.9/<script>alert(2)</script>"),
        );
        r
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/metrics")
}

#[tokio::test]
async fn text_from_upstreams_and_the_configuration_is_never_markup() {
    let html = Upstream::start(Reply {
        content_type: "text/html<script>alert(1)</script>",
        ..Reply::text("<html><body><script>alert(1)</script></body></html>\n")
    })
    .await;
    let redirect = hostile_redirect().await;
    let mut config = config(vec![
        upstream_config("html", &html.metrics_url(), &["vllm:"]),
        upstream_config("redirect", &redirect, &["vllm:"]),
    ]);
    config.labels = vec![("team".into(), "<img src=x onerror=alert(3)>".into())];
    let sp = Running::start(config).await;
    sp.get("/metrics").await;
    let (_, status) = json(&sp, "/status").await;
    let error = |i: usize| {
        status["upstreams"][i]["last_error"]
            .as_str()
            .map(String::from)
    };
    assert!(
        error(0).is_some_and(|e| e.starts_with("not an exposition (text/html<script>")),
        "{status}"
    );
    assert!(
        error(1).is_some_and(|e| e.starts_with("redirect to http://10.0.0.9/<script>")),
        "{status}"
    );
    let (_, page) = sp.get("/").await;
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    assert!(page.contains("not an exposition (text/html&lt;script&gt;alert(1)&lt;/script&gt;)"));
    assert!(page.contains("redirect to http://10.0.0.9/&lt;script&gt;alert(2)&lt;/script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(3)&gt;"));
}

/// A configuration with basic auth for `user` and an upstream URL with a password.
fn guarded(upstream: &Upstream, user: &str, hash: &str) -> Config {
    let url = upstream
        .metrics_url()
        .replace("http://", "http://scraper:hunter2-secret@");
    let mut config = config(vec![upstream_config("vllm", &url, &["vllm:"])]);
    config.listen.web = Some(WebConfig {
        file: "/etc/sysport/web.yml".into(),
        tls: None,
        users: vec![(user.to_owned(), hash.to_owned())],
        headers: Vec::new(),
    });
    config
}

#[tokio::test]
async fn basic_auth_guards_the_page_and_no_secret_is_shown() {
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let user = "operator-7f3a";
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    let sp = Running::start(guarded(&upstream, user, &hash)).await;
    let get = |path: &str, auth: bool| {
        let mut req = client().get(sp.url(path));
        if auth {
            req = req.basic_auth(user, Some("s3cret"));
        }
        async move {
            let r = req.send().await.expect("answers");
            (r.status(), r.text().await.expect("body"))
        }
    };
    for path in ["/", "/status"] {
        assert_eq!(get(path, false).await.0, StatusCode::UNAUTHORIZED, "{path}");
    }
    assert_eq!(get("/live", false).await.0, StatusCode::OK);
    assert_ne!(get("/health", false).await.0, StatusCode::UNAUTHORIZED);
    eventually(
        Duration::from_secs(10),
        "the upstream is scraped",
        || async {
            let (code, body) = get("/status", true).await;
            code == StatusCode::OK && body.contains("\"state\":\"up\"")
        },
    )
    .await;
    let (code, page) = get("/", true).await;
    assert_eq!(code, StatusCode::OK);
    let (_, status) = get("/status", true).await;
    for shown in [&page, &status] {
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        assert!(!shown.contains(&hash), "{shown}");
        assert!(!shown.contains("$2"), "{shown}");
        assert!(!shown.contains(user), "{shown}");
    }
    assert!(status.contains("http://scraper:***@127.0.0.1"), "{status}");
    assert!(page.contains("http://scraper:***@127.0.0.1"), "{page}");
    assert!(page.contains("basic auth: 1 user(s)"), "{page}");
}

#[tokio::test]
async fn no_url_password_is_shown_on_the_page_or_in_status() {
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let with_password = |url: String| url.replace("http://", "http://u:s3cret@");
    let (url, health_url) = (
        with_password(upstream.metrics_url()),
        with_password(upstream.health_url()),
    );
    let path = std::env::temp_dir().join(format!(
        "sysport-status-{}-passwords.yaml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "listen: {{host: 127.0.0.1, port: 0}}\n\
             upstreams:\n  - name: vllm\n    url: {url}\n    health_url: {health_url}\n    \
             keep: [\"vllm:\"]\n    canary_after: 10s\n    \
             canary: {{url: http://u:s3cret@127.0.0.1:1/v1/completions}}\n"
        ),
    )
    .expect("write the configuration");
    let config = sysport::config::load_file(&path, &std::collections::HashMap::new());
    let _ = std::fs::remove_file(&path);
    let sp = Running::start(config.expect("loads")).await;
    let (_, page) = sp.get("/").await;
    let (_, status) = sp.get("/status").await;
    for shown in [&page, &status] {
        assert!(!shown.contains("s3cret"), "{shown}");
    }
    let masked = |url: &str| url.replace("s3cret", "***");
    assert!(
        status.contains(&format!("\"url\":\"{}\"", masked(&url))),
        "{status}"
    );
    for url in [
        masked(&url),
        masked(&health_url),
        "http://u:***@127.0.0.1:1/v1/completions".to_owned(),
    ] {
        assert!(page.contains(&url), "{url} in {page}");
    }
}

#[tokio::test]
async fn the_pages_answer_like_the_other_routes() {
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let mut config = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    config.shutdown.drain_delay = Duration::from_secs(30);
    let sp = Running::start(config).await;
    for path in ["/", "/status"] {
        let r = client().post(sp.url(path)).send().await.expect("answers");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        let head = client().head(sp.url(path)).send().await.expect("answers");
        assert_eq!(head.status(), StatusCode::OK, "{path}");
        assert!(head.text().await.expect("body").is_empty());
    }
    for path in ["/index.html", "/status/", "/statuss", "//"] {
        assert_eq!(sp.get(path).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    let (code, metrics) = sp.get("/metrics").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        metric(&metrics, "dynamo_sysport_http_requests_total")
            .label("path", "/status")
            .label("code", "405")
            .value(),
        1.0
    );

    // Shutting down is a reason of its own, and the page still answers while draining.
    sp.handle.shutdown();
    eventually(Duration::from_secs(5), "/health turns 503", || async {
        sp.get("/health").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let (code, status) = json(&sp, "/status").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status["ready"], false);
    assert_eq!(status["shutting_down"], true);
    assert_eq!(status["not_ready_reason"], "shutting down");
    let (_, page) = sp.get("/").await;
    assert!(page.contains("Not ready: shutting down"), "{page}");
}

#[tokio::test]
async fn a_configured_probe_path_takes_precedence_over_the_status_routes() {
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let mut config = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    config.health.live_path = "/status".into();
    config.health.path = "/".into();
    let sp = Running::start(config).await;
    let (code, live) = json(&sp, "/status").await;
    assert_eq!(
        (code, live["status"].as_str()),
        (StatusCode::OK, Some("live"))
    );
    let (_, health) = sp.get("/").await;
    assert!(health.contains("\"endpoints\""), "{health}");
}

/// The status card's badge of an upstream (`up`, `down`, ...) on the `/` page.
fn card_badge(page: &str, name: &str) -> String {
    let start = page
        .find(&format!("id=\"upstream-{name}\""))
        .unwrap_or_else(|| panic!("no card for {name}"));
    let card = &page[start..];
    let badge = card.find("class=\"badge ").expect("a badge");
    let word = &card[badge..];
    let word = &word[word.find('>').expect("badge opens") + 1..];
    word[..word.find('<').expect("badge closes")].to_owned()
}

#[tokio::test]
async fn a_request_whose_deadline_passes_leaves_the_status_page_and_health_agreeing() {
    // Checked through its health URL, which stays healthy: the verdict is up throughout.
    let engine = Upstream::start(Reply::text(PAGE)).await;
    let mut u = upstream_config("vllm", &engine.metrics_url(), &["vllm:"]);
    u.health_url = Some(Url::parse(&engine.health_url()).expect("url"));
    u.timeout = Duration::from_secs(10);
    let mut config = config(vec![u]);
    config.health.interval = Duration::from_secs(3600);
    let sp = Running::start(config).await;
    eventually(Duration::from_secs(10), "the upstream checked", || async {
        json(&sp, "/health").await.0 == StatusCode::OK
    })
    .await;
    // The engine now takes 3 s for its page, and a scraper gives sysport half a second: the
    // request's deadline (0.45 s) passes while the shared fetch runs on.
    engine.set(Reply {
        delay: Duration::from_secs(3),
        ..Reply::text(PAGE)
    });
    let asked = std::time::Instant::now();
    let r = client()
        .get(sp.url("/metrics"))
        .header("X-Prometheus-Scrape-Timeout-Seconds", "0.5")
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), StatusCode::OK);
    let metrics = r.text().await.expect("body");
    assert_eq!(
        metric(&metrics, "dynamo_sysport_upstream_scrapes_total")
            .label("upstream", "vllm")
            .label("result", "timeout")
            .value(),
        1.0
    );

    let (health_code, health) = json(&sp, "/health").await;
    let (_, status) = json(&sp, "/status").await;
    let (_, page) = sp.get("/").await;
    // Still within the fetch: what is read is what the deadline left.
    assert!(asked.elapsed() < Duration::from_secs(3), "the fetch ended");
    assert_eq!(health_code, StatusCode::OK, "{health}");
    assert_eq!(health["endpoints"]["vllm"], "ready", "{health}");
    let u = &status["upstreams"][0];
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(u["health"]["ready"], true, "{u}");
    // The badge is the verdict; the request's timeout is beside it, in `up` and the last
    // error. The fetch it gave up on runs on to the upstream's own 10 s timeout: the last
    // scrape is still the check's, until that fetch ends.
    assert_eq!(u["state"], "up", "{u}");
    assert_eq!(card_badge(&page, "vllm"), "up");
    assert_eq!(u["up"], false, "{u}");
    assert_eq!(u["last_error"], "timed out after 450ms", "{u}");
    assert_eq!(u["last_scrape"]["result"], "success", "{u}");
    assert_eq!(u["last_scrape"]["read"], "selective", "{u}");
    // Then the engine's answer lands, 3 s after it was asked: the page says so.
    eventually(Duration::from_secs(10), "the fetch ended", || async {
        json(&sp, "/status").await.1["upstreams"][0]["last_scrape"]["read"] == "full"
    })
    .await;
    let (_, status) = json(&sp, "/status").await;
    let landed = &status["upstreams"][0];
    assert_eq!(landed["last_scrape"]["result"], "success", "{landed}");
    assert!(
        landed["last_scrape"]["duration_seconds"].as_f64() >= Some(3.0),
        "{landed}"
    );
    assert_eq!(landed["up"], true, "{landed}");
}
