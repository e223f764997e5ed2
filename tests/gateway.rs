//! High-frequency readers (inference-gateway endpoint pickers): `min_interval` coalescing,
//! selective `?name=` reads, and how a response tells the age of its data. Upstream hits are
//! counted at the upstream. An age is checked against the sleep before it (never younger) and the
//! window it must fall in (seconds wide), a fresh one against the read's own duration.

mod common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::*;
use sysport::config::Config;

const MEDIUM: &str = include_str!("fixtures/medium.prom");

/// What an endpoint picker reads, plus a histogram and a counter named the text-format way.
const PICKER: [&str; 6] = [
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:lora_requests_info",
    "vllm:cache_config_info",
    "vllm:e2e_request_latency_seconds",
    "vllm:num_preemptions_total",
];

fn gauge(v: f64) -> String {
    format!(
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\"}} {v}\n"
    )
}

const WAITING: &str = "/metrics?name=vllm:num_requests_waiting";

/// sysport in front of `upstream` with `min_interval`, health checks out of the way (they would
/// add upstream hits of their own).
async fn start(upstream: &Upstream, min_interval: Duration) -> Running {
    Running::start(reader_config(upstream, min_interval)).await
}

/// [`start`]'s configuration.
fn reader_config(upstream: &Upstream, min_interval: Duration) -> Config {
    let mut cfg = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    cfg.health.interval = Duration::from_secs(3600);
    cfg.upstreams[0].health_url = Some(upstream.health_url().parse().expect("url"));
    cfg.upstreams[0].min_interval = min_interval;
    // The vitals' reads at each check would be upstream hits too.
    cfg.vitals.window = Duration::ZERO;
    cfg
}

/// A GET: its status, `Sysport-Age` in seconds, `Age`, body, and how long it took.
struct Read {
    status: StatusCode,
    sysport_age: Option<f64>,
    age: Option<u64>,
    body: String,
    took: Duration,
}

impl Read {
    /// Data fetched for this read: no HTTP `Age`, and a `Sysport-Age` no older than the read.
    fn assert_fresh(&self) {
        assert_eq!(self.age, None, "fresh data is not from a cache");
        let sysport_age = self.sysport_age.expect("Sysport-Age");
        assert!(
            sysport_age <= self.took.as_secs_f64(),
            "Sysport-Age {sysport_age} s for a read of {:?}",
            self.took
        );
    }
}

async fn read(sp: &Running, path: &str) -> Read {
    let started = Instant::now();
    let r = client().get(sp.url(path)).send().await.expect("answers");
    let status = StatusCode::from_u16(r.status().as_u16()).expect("status");
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().expect("ascii").to_string())
    };
    let sysport_age = header("sysport-age").map(|v| v.parse().expect("seconds"));
    let age = header("age").map(|v| v.parse().expect("whole seconds"));
    let body = r.text().await.expect("body");
    Read {
        status,
        sysport_age,
        age,
        body,
        took: started.elapsed(),
    }
}

#[tokio::test]
async fn concurrent_and_repeated_reads_reach_the_engine_once_per_min_interval() {
    let mut reply = Reply::text(gauge(4.0));
    // Slow enough that all the concurrent reads below arrive while the fetch is in flight.
    reply.delay = Duration::from_millis(300);
    let a = Upstream::start(reply).await;
    let sp = start(&a, Duration::from_secs(60)).await;
    let reads = (0..20).map(|i| {
        let path = if i % 4 == 0 { "/metrics" } else { WAITING };
        let url = sp.url(path);
        tokio::spawn(async move { get_text(&url).await })
    });
    for body in futures_util::future::join_all(reads).await {
        let body = body.expect("read task");
        assert_eq!(metric(&body, "vllm:num_requests_waiting").value(), 4.0);
    }
    let mut queries = a.queries();
    queries.sort();
    assert_eq!(queries.len(), 2, "20 concurrent reads: {queries:?}");
    assert_eq!(queries[0], "", "one fetch of the full page");
    assert!(queries[1].contains("name%5B%5D="), "one of the selection");
    for _ in 0..20 {
        let Read { status, body, .. } = read(&sp, WAITING).await;
        assert_eq!(status, 200);
        assert_eq!(metric(&body, "vllm:num_requests_waiting").value(), 4.0);
    }
    assert_eq!(
        a.requests(),
        2,
        "repeated reads within min_interval reuse them"
    );
    let page = read(&sp, "/metrics").await.body;
    assert_eq!(
        metric(&page, "dynamo_sysport_upstream_scrapes_total")
            .label("result", "success")
            .value(),
        2.0,
        "sysport counts the fetches that reached the engine"
    );
}

#[tokio::test]
async fn min_interval_zero_fetches_every_scrape_and_shares_concurrent_ones() {
    let a = Upstream::start(Reply::text(gauge(1.0))).await;
    let sp = start(&a, Duration::ZERO).await;
    for i in 0..5 {
        a.set(Reply::text(gauge(i as f64)));
        let r = read(&sp, "/metrics").await;
        assert_eq!(r.status, 200);
        assert_eq!(
            metric(&r.body, "vllm:num_requests_waiting").value(),
            i as f64
        );
        r.assert_fresh();
    }
    assert_eq!(a.requests(), 5);
    let mut reply = Reply::text(gauge(7.0));
    reply.delay = Duration::from_millis(1000);
    a.set(reply);
    let reads = (0..10).map(|_| {
        let url = sp.url("/metrics");
        tokio::spawn(async move { get_text(&url).await })
    });
    for body in futures_util::future::join_all(reads).await {
        assert_eq!(
            metric(&body.expect("read task"), "vllm:num_requests_waiting").value(),
            7.0
        );
    }
    assert_eq!(
        a.requests(),
        6,
        "concurrent scrapes share one in-flight fetch"
    );
}

#[tokio::test]
async fn a_read_past_min_interval_gets_the_last_fetch_at_once_and_a_refresh_starts() {
    // The first fetch takes 2.5 s, which makes its stale window (min_interval plus the longer of
    // min_interval and twice that) 6 s: seconds of slack for the read that must fall in it.
    let mut reply = Reply::text(gauge(3.0));
    reply.delay = Duration::from_millis(2500);
    let a = Upstream::start(reply).await;
    let mut cfg = reader_config(&a, Duration::from_secs(1));
    cfg.upstreams[0].timeout = Duration::from_secs(10);
    let sp = Running::start(cfg).await;
    let r = read(&sp, "/metrics").await;
    assert_eq!(metric(&r.body, "vllm:num_requests_waiting").value(), 3.0);
    r.assert_fresh();

    // Past min_interval, within the stale window: the last fetch is served without waiting for
    // the (slow) refresh, which starts behind it.
    let mut reply = Reply::text(gauge(9.0));
    reply.delay = Duration::from_millis(500);
    a.set(reply);
    let slept = Duration::from_millis(1200);
    tokio::time::sleep(slept).await;
    let r = read(&sp, "/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(metric(&r.body, "vllm:num_requests_waiting").value(), 3.0);
    // As old as the sleep at least; younger than the stale window, or the read would have
    // waited for the refresh.
    let window = 1.0..6.0;
    let sysport_age = r.sysport_age.expect("Sysport-Age");
    assert!(sysport_age >= slept.as_secs_f64(), "{sysport_age}");
    assert!(window.contains(&sysport_age), "{sysport_age}");
    let age = r.age.expect("HTTP Age for reused data");
    assert!(
        (age as f64..=age as f64 + 1.0).contains(&sysport_age),
        "HTTP Age {age} is Sysport-Age {sysport_age} in whole seconds"
    );
    let gauge_age = metric(&r.body, "dynamo_sysport_upstream_last_fetch_age_seconds")
        .label("upstream", "vllm")
        .value();
    assert!(gauge_age >= slept.as_secs_f64(), "{gauge_age}");
    assert!(window.contains(&gauge_age), "{gauge_age}");
    eventually(
        Duration::from_secs(5),
        "the refresh reaches the engine",
        || {
            let n = a.requests();
            async move { n == 2 }
        },
    )
    .await;
    eventually(Duration::from_secs(5), "the refresh is served", || async {
        let body = read(&sp, "/metrics").await.body;
        metric(&body, "vllm:num_requests_waiting").value() == 9.0
    })
    .await;
    assert_eq!(a.requests(), 2, "one refresh for every read in between");

    // Past the stale window (min_interval plus the longer of min_interval and twice the 0.5 s
    // the last fetch took: 2 s) the read waits for fresh data.
    a.set(Reply::text(gauge(11.0)));
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let r = read(&sp, "/metrics").await;
    assert_eq!(metric(&r.body, "vllm:num_requests_waiting").value(), 11.0);
    r.assert_fresh();
    assert_eq!(a.requests(), 3);
}

/// The page cut into its families: (name, lines), where a family starts at a HELP, TYPE or UNIT
/// line for a new name.
fn families(page: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in page.lines().filter(|l| *l != "# EOF") {
        let meta = ["# HELP ", "# TYPE ", "# UNIT "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .and_then(|rest| rest.split(' ').next());
        match (meta, out.last_mut()) {
            (Some(name), Some((current, _))) if current == name => {}
            (Some(name), _) => out.push((name.to_string(), Vec::new())),
            (None, None) => panic!("sample before any family: {line}"),
            (None, Some(_)) => {}
        }
        out.last_mut().expect("a family").1.push(line);
    }
    out
}

#[tokio::test]
async fn selective_output_equals_the_full_page_for_those_families() {
    let a = Upstream::start(Reply::text(MEDIUM)).await;
    let sp = start(&a, Duration::from_secs(60)).await;
    let query: Vec<String> = PICKER.iter().map(|n| format!("name={n}")).collect();
    let path = format!("/metrics?{}", query.join("&"));
    for accept in ["text/plain", "application/openmetrics-text;version=1.0.0"] {
        let get = |p: String| {
            let url = sp.url(&p);
            async move {
                let r = client()
                    .get(url)
                    .header("accept", accept)
                    .send()
                    .await
                    .expect("answers");
                assert_eq!(r.status(), 200);
                let ct = r.headers()["content-type"]
                    .to_str()
                    .expect("ascii")
                    .to_string();
                (ct, r.text().await.expect("body"))
            }
        };
        let (full_type, full) = get("/metrics".into()).await;
        let (sel_type, selective) = get(path.clone()).await;
        assert_eq!(full_type, sel_type);
        let openmetrics = accept.starts_with("application/openmetrics-text");
        assert_eq!(selective.ends_with("# EOF\n"), openmetrics);
        // A name selects its family with the `_created` that OpenMetrics writes inside it: a
        // family of its own in text.
        let wanted = |name: &str| {
            PICKER.iter().any(|n| {
                let base = n.strip_suffix("_total").unwrap_or(n);
                *n == name || base == name || format!("{base}_created") == name
            })
        };
        let expected: Vec<(String, Vec<&str>)> = families(&full)
            .into_iter()
            .filter(|(name, _)| wanted(name))
            .collect();
        let created = if openmetrics { 0 } else { 2 };
        assert_eq!(
            expected.len(),
            PICKER.len() + created,
            "{accept}: all in the page"
        );
        assert_eq!(families(&selective), expected, "{accept}");
        let (_, histogram) = expected
            .iter()
            .find(|(name, _)| name == "vllm:e2e_request_latency_seconds")
            .expect("the histogram");
        let buckets = |lines: &mut dyn Iterator<Item = &str>| {
            lines
                .filter(|l| l.starts_with("vllm:e2e_request_latency_seconds_bucket{"))
                .count()
        };
        assert_eq!(
            buckets(&mut histogram.iter().copied()),
            buckets(&mut MEDIUM.lines()),
            "every engine's buckets"
        );
    }
    // The full page was fetched once; the selection once, by the first selective read (which
    // compared it with the full page); every other read reused them.
    assert_eq!(a.requests(), 2);
}

#[tokio::test]
async fn bad_parameters_get_400_and_unknown_names_get_nothing() {
    let a = Upstream::start(Reply::text(MEDIUM)).await;
    let sp = start(&a, Duration::ZERO).await;
    for (query, message) in [
        ("foo=1", "unknown query parameter `foo`"),
        (
            "name=vllm:a&match[]=up",
            "unknown query parameter `match[]`",
        ),
        ("name=", "`name=` is not a metric family name"),
        ("name=vllm%20x", "`name=vllm x` is not a metric family name"),
    ] {
        let (code, body) = sp.get(&format!("/metrics?{query}")).await;
        assert_eq!(code, 400, "{query}");
        assert!(body.contains(message), "{query}: {body}");
    }
    assert_eq!(a.requests(), 0, "a refused read costs the engine nothing");
    let (code, body) = sp.get("/metrics?name=vllm:no_such_family").await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, ""));
    let r = client()
        .get(sp.url("/metrics?name=vllm:no_such_family"))
        .header("accept", "application/openmetrics-text")
        .send()
        .await
        .expect("answers");
    assert_eq!(r.text().await.expect("body"), "# EOF\n");
}

#[tokio::test]
async fn full_and_selective_reads_are_counted_apart_with_their_cost() {
    let a = Upstream::start(Reply::text(MEDIUM)).await;
    let sp = start(&a, Duration::from_secs(60)).await;
    for _ in 0..7 {
        let (code, _) = sp.get(WAITING).await;
        assert_eq!(code, 200);
    }
    let (code, _) = sp.get("/metrics?bad=1").await;
    assert_eq!(code, 400);
    for _ in 0..2 {
        sp.get("/metrics").await;
    }
    let (_, page) = sp.get("/metrics").await;
    let requests = |read: &str, code: &str| {
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("path", "/metrics")
            .label("code", code)
            .label("read", read)
            .value()
    };
    assert_eq!(requests("selective", "200"), 7.0);
    assert_eq!(requests("selective", "400"), 1.0);
    // The page being rendered is not counted yet.
    assert_eq!(requests("full", "200"), 2.0);
    let renders = |read: &str| {
        metric(&page, "dynamo_sysport_metrics_render_seconds_count")
            .label("read", read)
            .value()
    };
    assert_eq!(renders("selective"), 7.0);
    assert_eq!(renders("full"), 2.0);
    let selective_cost = metric(&page, "dynamo_sysport_metrics_render_seconds_sum")
        .label("read", "selective")
        .value();
    assert!(selective_cost > 0.0);
    let answered = metric(
        &page,
        "dynamo_sysport_metrics_request_duration_seconds_count",
    )
    .label("read", "selective")
    .value();
    assert_eq!(answered, 8.0, "the refused read was answered too");
    assert!(
        metric(&page, "dynamo_sysport_upstream_last_fetch_age_seconds")
            .label("upstream", "vllm")
            .value()
            < 60.0
    );
}

const THREE: &str = "# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{engine=\"0\"} 2.0\n\
# TYPE vllm:kv_cache_usage_perc gauge\n\
vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n\
# TYPE vllm:iteration_tokens_total histogram\n\
vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\"} 9.0\n\
vllm:iteration_tokens_total_count{engine=\"0\"} 9.0\n\
vllm:iteration_tokens_total_sum{engine=\"0\"} 120.0\n";

/// The engine's answer to `name[]=vllm:num_requests_waiting...`, as prometheus_client selects.
const WAITING_ONLY: &str =
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 2.0\n";

#[tokio::test]
async fn selective_reads_ask_the_engine_for_those_families_once_checked() {
    let a = Upstream::start(Reply::text(THREE)).await;
    a.set_selected(WAITING_ONLY);
    let sp = start(&a, Duration::ZERO).await;
    for _ in 0..3 {
        let Read { status, body, .. } = read(&sp, WAITING).await;
        assert_eq!(status, 200);
        assert_eq!(metric(&body, "vllm:num_requests_waiting").value(), 2.0);
        assert!(!body.contains("kv_cache"), "{body}");
    }
    let queries = a.queries();
    assert_eq!(queries.len(), 4, "{queries:?}");
    // The first read compares the engine's selection with its full page.
    let (first, rest) = queries.split_at(2);
    assert!(first.iter().any(String::is_empty), "{queries:?}");
    for q in first.iter().filter(|q| !q.is_empty()).chain(rest) {
        assert!(q.contains("name%5B%5D=vllm%3Anum_requests_waiting&"), "{q}");
        assert!(!q.contains("kv_cache"), "{q}");
    }
    // A full page still reads the whole engine.
    let page = read(&sp, "/metrics").await.body;
    assert_eq!(metric(&page, "vllm:kv_cache_usage_perc").value(), 0.25);
    assert_eq!(a.queries().last().map(String::as_str), Some(""));
}

#[tokio::test]
async fn an_engine_whose_selection_lacks_families_is_read_in_full() {
    let a = Upstream::start(Reply::text(THREE)).await;
    // prometheus_client in multiprocess mode: its collector registers no names, so `name[]`
    // selects nothing.
    a.set_selected("");
    let sp = start(&a, Duration::ZERO).await;
    let path = "/metrics?name=vllm:num_requests_waiting&name=vllm:iteration_tokens_total";
    for _ in 0..3 {
        let Read { status, body, .. } = read(&sp, path).await;
        assert_eq!(status, 200);
        assert_eq!(metric(&body, "vllm:num_requests_waiting").value(), 2.0);
        assert_eq!(
            metric(&body, "vllm:iteration_tokens_total_count").value(),
            9.0
        );
    }
    let queries = a.queries();
    assert_eq!(queries.len(), 4, "one check, then full pages: {queries:?}");
    assert!(queries[2..].iter().all(String::is_empty), "{queries:?}");
}

/// A counter as prometheus_client renders it in text 0.0.4, and a gauge whose name starts alike.
const COUNTER: &str = "# HELP vllm:prefix_cache_queries_total Prefix cache queries.\n\
# TYPE vllm:prefix_cache_queries_total counter\n\
vllm:prefix_cache_queries_total{engine=\"0\"} 42.0\n\
# HELP vllm:prefix_cache_queries_created Prefix cache queries.\n\
# TYPE vllm:prefix_cache_queries_created gauge\n\
vllm:prefix_cache_queries_created{engine=\"0\"} 1.7e+09\n\
# TYPE vllm:prefix_cache_queries_rate gauge\n\
vllm:prefix_cache_queries_rate{engine=\"0\"} 3.0\n";

/// A read of `path` with the Accept header of Prometheus (OpenMetrics first) or of a plain client.
async fn read_as(sp: &Running, path: &str, openmetrics: bool) -> String {
    let accept = if openmetrics {
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    } else {
        "text/plain"
    };
    let r = client()
        .get(sp.url(path))
        .header("accept", accept)
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200, "{path}");
    r.text().await.expect("body")
}

#[tokio::test]
async fn a_counter_is_selected_by_its_openmetrics_name_in_both_formats() {
    let a = Upstream::start(Reply::text(COUNTER)).await;
    // What prometheus_client answers to the `name[]` sysport sends for the counter.
    a.set_selected(
        &COUNTER[..COUNTER
            .find("# TYPE vllm:prefix_cache_queries_rate")
            .expect("gauge")],
    );
    let sp = start(&a, Duration::ZERO).await;
    let path = "/metrics?name=vllm:prefix_cache_queries&name=dynamo_sysport_upstream_scrapes";
    // The first read checks the engine's selection against its full page, the next ones use it.
    for round in 0..2 {
        let text = read_as(&sp, path, false).await;
        assert_eq!(
            metric(&text, "vllm:prefix_cache_queries_total").value(),
            42.0,
            "{round}: {text}"
        );
        assert_eq!(
            metric(&text, "vllm:prefix_cache_queries_created").value(),
            1.7e9
        );
        assert!(!text.contains("queries_rate"), "{text}");
        assert!(
            metric(&text, "dynamo_sysport_upstream_scrapes_total")
                .label("upstream", "vllm")
                .label("result", "success")
                .value()
                >= 1.0,
            "{text}"
        );
        assert!(text.contains("# TYPE dynamo_sysport_upstream_scrapes_total counter\n"));
        assert!(!text.contains("dynamo_sysport_upstream_up"), "{text}");

        let om = read_as(&sp, path, true).await;
        assert!(
            om.contains(
                "# TYPE vllm:prefix_cache_queries counter\n\
                 # HELP vllm:prefix_cache_queries Prefix cache queries.\n\
                 vllm:prefix_cache_queries_total{engine=\"0\"} 42.0\n\
                 vllm:prefix_cache_queries_created{engine=\"0\"} 1.7e+09\n"
            ),
            "{round}: {om}"
        );
        assert!(
            !om.contains("# TYPE vllm:prefix_cache_queries_created"),
            "{om}"
        );
        assert!(
            om.contains("# TYPE dynamo_sysport_upstream_scrapes counter\n"),
            "{om}"
        );
        assert!(
            metric(&om, "dynamo_sysport_upstream_scrapes_total")
                .label("upstream", "vllm")
                .label("result", "success")
                .value()
                >= 1.0,
            "{om}"
        );
        assert!(om.ends_with("# EOF\n"));
    }
    let queries = a.queries();
    let selections: Vec<&String> = queries.iter().filter(|q| !q.is_empty()).collect();
    assert!(selections.len() >= 3, "{queries:?}");
    for q in selections {
        for sample in ["prefix_cache_queries_total", "prefix_cache_queries_created"] {
            assert!(q.contains(&format!("name%5B%5D=vllm%3A{sample}&")), "{q}");
        }
    }
    assert_eq!(
        queries.iter().filter(|q| q.is_empty()).count(),
        1,
        "the engine's selection agreed with its page: {queries:?}"
    );
}

#[tokio::test]
async fn a_histogram_named_total_is_asked_for_with_its_buckets() {
    let a = Upstream::start(Reply::text(THREE)).await;
    a.set_selected(&THREE[THREE.find("# TYPE vllm:iteration").expect("histogram")..]);
    let sp = start(&a, Duration::ZERO).await;
    for _ in 0..2 {
        let body = read_as(&sp, "/metrics?name=vllm:iteration_tokens_total", false).await;
        assert_eq!(
            metric(&body, "vllm:iteration_tokens_total_count").value(),
            9.0,
            "{body}"
        );
        assert!(!body.contains("num_requests_waiting"), "{body}");
    }
    let queries = a.queries();
    assert_eq!(queries.len(), 3, "{queries:?}");
    let last = queries.last().expect("a selection");
    for sample in ["_bucket", "_count", "_sum", "_created"] {
        assert!(
            last.contains(&format!(
                "name%5B%5D=vllm%3Aiteration_tokens_total{sample}&"
            )),
            "{last}"
        );
    }
}
