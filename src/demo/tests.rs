use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// One sample line: name, labels as `(key, value)` pairs, value.
#[derive(Debug)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, &'a str)>,
    value: f64,
}

impl Sample<'_> {
    /// Name plus labels, without `le`: identifies the series a bucket belongs to.
    fn series(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }

    fn key(&self) -> String {
        format!("{}{:?}", self.name, self.labels)
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// A deliberately simple parser: the demo's label values hold no `,`, `"` or `}`.
fn samples(text: &str) -> Vec<Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let inner = rest.strip_suffix('}').expect("labels close");
                    let labels = inner
                        .split(',')
                        .map(|kv| {
                            let (k, v) = kv.split_once('=').expect("label has =");
                            (k, v.trim_matches('"'))
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, Vec::new()),
            };
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().expect("value parses"),
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// Family name → type, from the TYPE lines.
fn types(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_once(' ').expect("TYPE has a type"))
        .collect()
}

/// Sum of the samples named `name` whose labels include all of `labels`.
fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text)
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

fn sim_at(seconds: f64) -> Sim {
    let mut sim = Sim::new(SEED, 1_763_000_000.0);
    sim.advance_to(seconds);
    sim
}

fn pages(sim: &Sim) -> [String; 2] {
    let mut v = String::new();
    pages::vllm(sim, &mut v);
    let mut l = String::new();
    pages::lmcache(sim, &mut l);
    [v, l]
}

/// Samples that may never go down: counters, histogram buckets, counts and sums.
fn monotonic<'a>(text: &'a str) -> Vec<Sample<'a>> {
    let types = types(text);
    samples(text)
        .into_iter()
        .filter(|s| {
            let family = ["_bucket", "_count", "_sum"].iter().find_map(|suffix| {
                s.name
                    .strip_suffix(suffix)
                    .filter(|f| types.get(f) == Some(&"histogram"))
            });
            family.is_some() || types.get(s.name) == Some(&"counter")
        })
        .collect()
}

#[test]
fn counters_and_histograms_never_decrease() {
    let mut sim = sim_at(60.0);
    let before = pages(&sim);
    sim.advance_to(75.0);
    let after = pages(&sim);
    for (before, after) in before.iter().zip(&after) {
        let old: HashMap<String, f64> = monotonic(before)
            .iter()
            .map(|s| (s.key(), s.value))
            .collect();
        let new = monotonic(after);
        assert_eq!(old.len(), new.len(), "same series in both scrapes");
        let mut increased = 0;
        for s in &new {
            let was = old[&s.key()];
            assert!(s.value >= was, "{} went from {was} to {}", s.key(), s.value);
            increased += usize::from(s.value > was);
        }
        assert!(increased > 10, "only {increased} series moved");
    }
    let [v, l] = &after;
    for page in [v, l] {
        assert!(sum(page, "python_gc_objects_collected_total", &[]) > 0.0);
    }
    assert!(
        sum(v, "vllm:generation_tokens_total", &[])
            > sum(
                &pages(&sim_at(60.0))[0],
                "vllm:generation_tokens_total",
                &[]
            )
    );
}

#[test]
fn a_hung_engine_keeps_its_requests_and_stops_counting_until_resumed() {
    let mut sim = sim_at(60.0);
    sim.hang();
    sim.advance_to(61.0);
    assert_eq!(sim.hang_state(), sim::Hang::Hung);
    let [hung, _] = pages(&sim);
    sim.advance_to(300.0);
    let [later, _] = pages(&sim);
    let steps = |page: &str| sum(page, "vllm:iteration_tokens_total_count", &[]);
    let tokens = |page: &str| sum(page, "vllm:generation_tokens_total", &[]);
    assert!(sum(&later, "vllm:num_requests_running", &[]) > 0.0);
    assert_eq!(
        sum(&later, "vllm:num_requests_running", &[]),
        sum(&hung, "vllm:num_requests_running", &[])
    );
    assert_eq!(steps(&later), steps(&hung));
    assert_eq!(tokens(&later), tokens(&hung));
    sim.resume();
    sim.advance_to(310.0);
    let [resumed, _] = pages(&sim);
    assert!(steps(&resumed) > steps(&later));
    assert!(tokens(&resumed) > tokens(&later));
}

#[test]
fn broken_generation_drains_the_engines_to_idle_until_resumed() {
    let mut sim = sim_at(60.0);
    sim.broken = true;
    sim.advance_to(240.0);
    let [idle, _] = pages(&sim);
    sim.advance_to(300.0);
    let [later, _] = pages(&sim);
    let steps = |page: &str| sum(page, "vllm:iteration_tokens_total_count", &[]);
    assert_eq!(sum(&later, "vllm:num_requests_running", &[]), 0.0);
    assert_eq!(sum(&later, "vllm:num_requests_waiting", &[]), 0.0);
    assert_eq!(steps(&later), steps(&idle), "an idle engine does not step");
    sim.resume();
    assert!(!sim.broken);
    sim.advance_to(320.0);
    let [resumed, _] = pages(&sim);
    assert!(steps(&resumed) > steps(&later));
}

#[test]
fn inf_bucket_equals_count_and_buckets_are_cumulative() {
    for page in pages(&sim_at(200.0)) {
        let types = types(&page);
        let mut last_bucket: HashMap<String, f64> = HashMap::new();
        let mut inf: HashMap<String, f64> = HashMap::new();
        let mut histograms = 0;
        for s in samples(&page) {
            if let Some(family) = s
                .name
                .strip_suffix("_bucket")
                .filter(|f| types.get(f) == Some(&"histogram"))
            {
                let series = s.series();
                let prev = last_bucket.insert(series.clone(), s.value).unwrap_or(0.0);
                assert!(s.value >= prev, "{family}: buckets not cumulative");
                if s.label("le") == Some("+Inf") {
                    inf.insert(series.replace("_bucket{", "{"), s.value);
                }
            } else if let Some(family) = s
                .name
                .strip_suffix("_count")
                .filter(|f| types.get(f) == Some(&"histogram"))
            {
                let series = s.series().replace("_count{", "{");
                assert_eq!(
                    inf.get(&series),
                    Some(&s.value),
                    "{family}: +Inf bucket != _count"
                );
                histograms += 1;
            }
        }
        assert!(histograms >= 10, "only {histograms} histogram series");
    }
}

#[test]
fn help_and_type_appear_once_and_before_their_samples() {
    for page in pages(&sim_at(30.0)) {
        let mut seen = HashSet::new();
        let mut current: Option<(&str, &str)> = None;
        let mut lines = page.lines();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split_once(' ').map_or(rest, |(n, _)| n);
                assert!(seen.insert(name), "second HELP for {name}");
                let ty = lines
                    .next()
                    .and_then(|l| l.strip_prefix("# TYPE "))
                    .expect("TYPE follows HELP");
                let (ty_name, kind) = ty.split_once(' ').expect("TYPE has a type");
                assert_eq!(ty_name, name);
                current = Some((name, kind));
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line}");
            let (family, kind) = current.expect("sample before any HELP/TYPE");
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let suffixes: &[&str] = match kind {
                "histogram" => &["_bucket", "_count", "_sum"],
                "summary" => &["", "_count", "_sum"],
                _ => &[""],
            };
            assert!(
                suffixes
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(family)),
                "{name} is not a sample of {kind} {family}"
            );
        }
    }
}

#[test]
fn serves_the_expected_families() {
    let [v, l] = pages(&sim_at(30.0));
    let vt = types(&v);
    for (name, kind) in [
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:num_preemptions_total", "counter"),
        ("vllm:num_preemptions_created", "gauge"),
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:request_success_total", "counter"),
        ("vllm:prefix_cache_queries_total", "counter"),
        ("vllm:prefix_cache_hits_total", "counter"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:time_to_first_token_seconds_created", "gauge"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:e2e_request_latency_seconds", "histogram"),
        ("vllm:request_queue_time_seconds", "histogram"),
        ("vllm:iteration_tokens_total", "histogram"),
        ("vllm:cache_config_info", "gauge"),
        ("python_gc_objects_collected_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("http_requests_total", "counter"),
    ] {
        assert_eq!(vt.get(name), Some(&kind), "vLLM family {name}");
    }
    for reason in sim::FINISH_REASONS {
        for engine in ["0", "1"] {
            let labels = [
                ("engine", engine),
                ("finished_reason", reason),
                ("model_name", "demo-model"),
            ];
            assert_eq!(
                samples(&v)
                    .iter()
                    .filter(|s| s.name == "vllm:request_success_total" && s.labels == labels)
                    .count(),
                1
            );
        }
    }
    assert!(v.contains("vllm:cache_config_info{_block_size_resolved=\"True\",block_size=\"16\","));
    assert!(v.contains("vllm:time_to_first_token_seconds_bucket{engine=\"1\",le=\"2560.0\",model_name=\"demo-model\"}"));

    let lt = types(&l);
    for (name, kind) in [
        ("lmcache:retrieve_hit_rate", "gauge"),
        ("lmcache:lookup_hit_rate", "gauge"),
        ("lmcache:num_retrieve_requests_total", "counter"),
        ("lmcache:num_store_requests_total", "counter"),
        ("lmcache:num_hit_tokens_created", "gauge"),
        ("lmcache:time_to_retrieve", "histogram"),
        ("lmcache:time_to_store", "histogram"),
        ("lmcache:local_cache_usage", "gauge"),
        ("lmcache:periodic_threads_critical_total", "gauge"),
        ("lmcache:request_cache_lifespan", "histogram"),
        ("python_gc_objects_collected_total", "counter"),
    ] {
        assert_eq!(lt.get(name), Some(&kind), "LMCache family {name}");
    }
    assert!(l.contains("lmcache:time_to_lookup_bucket{le=\"0.00016\",model_name=\"demo-model\",role=\"worker\",served_model_name=\"demo-model\",worker_id=\"0\"}"));
    assert!(l.contains("lmcache:request_cache_lifespan_bucket{le=\"0.0\","));
}

#[test]
fn the_workload_is_self_consistent() {
    let [v, l] = pages(&sim_at(400.0));
    for engine in ["0", "1"] {
        let e = [("engine", engine)];
        let finished = sum(&v, "vllm:request_success_total", &e);
        assert!(finished > 100.0, "engine {engine} finished only {finished}");
        for hist in [
            "e2e_request_latency_seconds",
            "request_queue_time_seconds",
            "request_prompt_tokens",
        ] {
            assert_eq!(
                sum(&v, &format!("vllm:{hist}_count"), &e),
                finished,
                "{hist}"
            );
        }
        assert!(sum(&v, "vllm:time_to_first_token_seconds_count", &e) >= finished);
        let prompt = sum(&v, "vllm:prompt_tokens_total", &e);
        assert_eq!(sum(&v, "vllm:prompt_tokens_by_source_total", &e), prompt);
        assert!(
            sum(&v, "vllm:prefix_cache_hits_total", &e)
                <= sum(&v, "vllm:prefix_cache_queries_total", &e)
        );
        let generated = sum(&v, "vllm:generation_tokens_total", &e);
        assert!(generated >= sum(&v, "vllm:request_generation_tokens_sum", &e));
        let first_tokens = sum(&v, "vllm:time_to_first_token_seconds_count", &e);
        assert_eq!(
            sum(&v, "vllm:inter_token_latency_seconds_count", &e),
            generated - first_tokens
        );
        let kv = sum(&v, "vllm:kv_cache_usage_perc", &e);
        assert!((0.0..=1.0).contains(&kv), "kv usage {kv}");

        // The engine's LMCache worker saw the same requests.
        let w = [("worker_id", engine)];
        assert_eq!(
            sum(&l, "lmcache:num_hit_tokens_total", &w),
            sum(&v, "vllm:external_prefix_cache_hits_total", &e)
        );
        assert_eq!(
            sum(&l, "lmcache:num_vllm_hit_tokens_total", &w),
            sum(&v, "vllm:prefix_cache_hits_total", &e)
        );
        assert!(
            sum(&l, "lmcache:num_hit_tokens_total", &w)
                <= sum(&l, "lmcache:num_requested_tokens_total", &w)
        );
        assert!(
            sum(&l, "lmcache:num_lookup_hits_total", &w)
                <= sum(&l, "lmcache:num_lookup_tokens_total", &w)
        );
        assert!(
            sum(&l, "lmcache:num_hit_tokens_total", &w) > 0.0,
            "LMCache never hit"
        );
    }
    let http_2xx = sum(
        &v,
        "http_requests_total",
        &[("method", "POST"), ("status", "2xx")],
    );
    assert_eq!(http_2xx, sum(&v, "vllm:request_success_total", &[]));
}

#[test]
fn same_scrape_times_give_the_same_pages() {
    assert_eq!(pages(&sim_at(90.0)), pages(&sim_at(90.0)));
}

#[test]
fn a_long_pause_is_caught_up_in_bounded_time() {
    let mut sim = sim_at(10.0);
    let started = std::time::Instant::now();
    sim.advance_to(86_400.0);
    assert!(started.elapsed() < Duration::from_secs(10));
    let [v, _] = pages(&sim);
    assert!(sum(&v, "vllm:request_success_total", &[]) > 1000.0);
}

/// Output parses with the official Python parser when one is available:
/// `SYSPORT_TEST_PYTHON`, else the project's `.venv`, with `prometheus_client` installed.
#[test]
fn python_prometheus_client_parses_both_pages() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    let python = std::env::var("SYSPORT_TEST_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_owned());
    let available = Command::new(&python)
        .args(["-c", "import prometheus_client.parser"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !available {
        eprintln!("skipped: no {python} with prometheus_client");
        return;
    }
    let script = "import sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        fams = list(text_string_to_metric_families(sys.stdin.read()))\n\
        print(len(fams), sum(len(f.samples) for f in fams))\n";
    for page in pages(&sim_at(150.0)) {
        let mut child = Command::new(&python)
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(page.as_bytes())
            .expect("write page");
        let out = child.wait_with_output().expect("python runs");
        assert!(
            out.status.success(),
            "parser failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counts = String::from_utf8_lossy(&out.stdout);
        let samples_parsed: usize = counts
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("counts");
        assert_eq!(samples_parsed, samples(&page).len());
    }
}

async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n"),
        "",
    )
    .await
}

/// Sends one request (its request line and headers, then `body`) and reads the answer.
async fn http(addr: SocketAddr, head: &str, body: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .expect("read response");
    let response = String::from_utf8(response).expect("utf-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("head and body");
    (head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn serves_both_endpoints_until_shutdown() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let up = DemoUpstreams::start(Ipv4Addr::LOCALHOST.into(), async move {
        let _ = stopped.await;
    })
    .await
    .expect("start demo upstreams");
    assert_eq!(
        up.vllm_metrics_url(),
        format!("http://127.0.0.1:{}/metrics", up.vllm.port())
    );
    assert_eq!(
        up.vllm_health_url(),
        format!("http://127.0.0.1:{}/health", up.vllm.port())
    );
    assert_eq!(
        up.lmcache_metrics_url(),
        format!("http://127.0.0.1:{}/metrics", up.lmcache.port())
    );

    let content_type = "content-type: text/plain; version=0.0.4; charset=utf-8";
    let (head, body) = http_get(up.vllm, "/metrics").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(content_type), "{head}");
    assert!(body.contains("# TYPE vllm:num_requests_running gauge\n"));
    assert!(
        sum(&body, "vllm:request_success_total", &[]) > 0.0,
        "warm-up finished requests"
    );

    let (head, body) = http_get(up.lmcache, "/metrics").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains(content_type), "{head}");
    assert!(body.contains("# TYPE lmcache:num_retrieve_requests_total counter\n"));

    let (head, body) = http_get(up.vllm, "/health").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(body.is_empty());
    let (head, _) = http_get(up.lmcache, "/health").await;
    assert!(head.starts_with("http/1.1 404"), "{head}");

    stop.send(()).expect("demo still running");
    tokio::time::timeout(Duration::from_secs(5), up.wait())
        .await
        .expect("servers stop after shutdown");
}

async fn http_post(addr: SocketAddr, path: &str) -> (String, String) {
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n");
    http(
        addr,
        &head,
        r#"{"model": "demo-model", "prompt": "Test", "max_tokens": 1}"#,
    )
    .await
}

#[tokio::test]
async fn generation_answers_hangs_when_broken_and_heals_on_resume() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let up = DemoUpstreams::start(Ipv4Addr::LOCALHOST.into(), async move {
        let _ = stopped.await;
    })
    .await
    .expect("start demo upstreams");
    let (head, body) = http_get(up.vllm, "/v1/models").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let models: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(models["data"][0]["id"], MODEL);
    let (head, body) = http_post(up.vllm, "/v1/completions").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let completion: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(completion["choices"].as_array().map(Vec::len), Some(1));
    let (head, _) = http_post(up.vllm, "/demo/break-generate").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let hung = tokio::time::timeout(
        Duration::from_millis(500),
        http_post(up.vllm, "/v1/completions"),
    )
    .await;
    assert!(hung.is_err(), "no answer while broken");
    let (head, _) = http_get(up.vllm, "/health").await;
    assert!(
        head.starts_with("http/1.1 200"),
        "/health stays 200: {head}"
    );
    http_post(up.vllm, "/demo/resume").await;
    let (head, _) = http_post(up.vllm, "/v1/completions").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    stop.send(()).expect("demo still running");
    // The hung request is dropped with its connection; the servers stop.
    tokio::time::timeout(Duration::from_secs(10), up.wait())
        .await
        .expect("servers stop after shutdown");
}
