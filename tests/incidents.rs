//! Incidents end to end: sysport on a loopback port in front of stand-in engines whose pages
//! the test freezes, stops and restarts; what was kept is read through `GET /incidents`,
//! `/incidents/{id}` and the bundle, `/incidents/{id}.tar.gz`.

mod common;

use std::io::Read;
use std::time::Duration;

use axum::http::StatusCode;
use common::{Reply, Running, Upstream, config, eventually, metric, upstream_config};
use serde_json::Value;
use sysport::config::{CanaryConfig, Config, StallConfig};
use sysport::model::engine::CanaryAnswer;
use sysport::model::{Engine, Url};

const INTERVAL: Duration = Duration::from_millis(100);
const STALL_AFTER: Duration = Duration::from_millis(600);
/// What a judgement may take beyond its own time on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(10);

/// A vLLM page (vllm/v1/metrics/loggers.py): requests running, the KV cache usage, the
/// engine-step histogram's count, and prometheus_client's process start time.
fn page(running: u32, steps: u64, started: f64) -> Reply {
    Reply::text(format!(
        "# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} 0.5
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{{engine=\"0\",model_name=\"m\"}} {sum}.0
vllm:iteration_tokens_total_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {steps}.0
vllm:iteration_tokens_total_count{{engine=\"0\",model_name=\"m\"}} {steps}.0
# TYPE process_start_time_seconds gauge
process_start_time_seconds {started}
",
        sum = steps * 8
    ))
}

/// The API key the canary sends: in no part of a bundle.
const API_KEY: &str = "sk-canary-8d5e";

/// sysport in front of `engine` (its URL with `password`) with vLLM's stall families, and a
/// canary (not due within the test) that sends an API key.
fn stall_config(engine: &Upstream, password: &str) -> Config {
    let url = engine
        .metrics_url()
        .replace("http://", &format!("http://ops:{password}@"));
    let mut u = upstream_config("vllm", &url, &["vllm:", "process_"]);
    u.stall = Some(StallConfig::preset(Engine::Vllm, STALL_AFTER));
    u.canary = Some(CanaryConfig {
        after: Duration::from_secs(3600),
        url: Url::parse(&engine.metrics_url().replace("/metrics", "/v1/completions")).expect("url"),
        body: Some(r#"{"model":{model},"prompt":"Hi","max_tokens":1}"#.to_owned()),
        headers: vec![("Authorization".into(), format!("Bearer {API_KEY}"))],
        timeout: Duration::from_secs(3),
        live_failures: 0,
        model: Some("m".to_owned()),
        answer: CanaryAnswer::Choices,
        idle: StallConfig::preset(Engine::Vllm, Duration::ZERO),
    });
    let mut c = config(vec![u]);
    c.health.interval = INTERVAL;
    c
}

async fn json(sp: &Running, path: &str) -> Value {
    let (code, body) = sp.get(path).await;
    assert_eq!(code, StatusCode::OK, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Waits until `/incidents` lists one for which `f` holds, and returns it in whole.
async fn until_incident(sp: &Running, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + MARGIN;
    loop {
        let list = json(sp, "/incidents").await;
        if let Some(found) = list.as_array().expect("list").iter().find(|i| f(i)) {
            let id = found["id"].as_str().expect("id");
            return json(sp, &format!("/incidents/{id}")).await;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {MARGIN:?}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gunzip(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

/// The files of a ustar archive, by name.
fn untar(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let name: Vec<u8> = h[..100].iter().take_while(|&&b| b != 0).copied().collect();
        let size = std::str::from_utf8(&h[124..135]).expect("ascii");
        let size = usize::from_str_radix(size, 8).expect("octal");
        files.push((
            String::from_utf8(name).expect("name"),
            tar[at + 512..at + 512 + size].to_vec(),
        ));
        at += 512 + size.next_multiple_of(512);
    }
    files
}

#[tokio::test]
async fn a_stall_opens_an_incident_with_the_evidence_and_progress_closes_it() {
    let engine = Upstream::start(page(3, 100, 1000.0)).await;
    let sp = Running::start(stall_config(&engine, "hunter2")).await;
    // Busy and moving, then frozen.
    for steps in 101..110 {
        engine.set(page(3, steps, 1000.0));
        tokio::time::sleep(INTERVAL).await;
    }
    let incident = until_incident(&sp, "a stalled incident", |i| i["kind"] == "stalled").await;
    assert_eq!(incident["upstream"], "vllm");
    assert!(incident["closed_unix_seconds"].is_null());
    let reason = incident["timeline"][0]["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("engine stalled: 3 requests running"),
        "{reason}"
    );
    // The readings before show the counters moving, then flat.
    let before = incident["readings_before"].as_array().expect("readings");
    let progress: Vec<f64> = before
        .iter()
        .filter_map(|r| r["progress"].as_f64())
        .collect();
    assert!(progress.len() >= 5, "{before:?}");
    assert!(
        progress.first() < progress.last(),
        "moving before the freeze: {progress:?}"
    );
    assert_eq!(before.last().expect("one")["running"], 3.0);
    assert_eq!(before.last().expect("one")["kv_cache_usage"], 0.5);
    assert_eq!(incident["page_before"]["file"], "page-before.prom.gz");
    assert!(incident["sysport_version"].is_string());

    // Progress closes it, with its duration.
    for steps in 200..215 {
        engine.set(page(1, steps, 1000.0));
        tokio::time::sleep(INTERVAL).await;
    }
    let id = incident["id"].as_str().expect("id").to_owned();
    let closed = until_incident(&sp, "the incident closed", |i| {
        i["id"] == id.as_str() && i["duration_seconds"].is_number()
    })
    .await;
    let timeline: Vec<&str> = closed["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .map(|c| c["verdict"].as_str().expect("verdict"))
        .collect();
    assert_eq!(timeline, ["stalled", "up"]);
    assert!(!closed["readings"].as_array().expect("during").is_empty());

    // The bundle: the JSON served, both pages as fetched; no password or API key anywhere in it.
    let r = common::client()
        .get(sp.url(&format!("/incidents/{id}.tar.gz")))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/gzip");
    let tar = gunzip(&r.bytes().await.expect("body"));
    let files = untar(&tar);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "incident.json",
            "page-before.prom.gz",
            "page-opening.prom.gz"
        ]
    );
    let bundled: Value = serde_json::from_slice(&files[0].1).expect("JSON");
    assert_eq!(bundled, closed);
    let opening = String::from_utf8(gunzip(&files[2].1)).expect("text");
    assert!(
        opening.contains("vllm:iteration_tokens_total_count{engine=\"0\",model_name=\"m\"} 109.0")
    );
    let config = bundled["config"].as_str().expect("config");
    assert!(config.contains("ops:***@"), "{config}");
    for (name, data) in &files {
        let plain = if name.ends_with(".gz") {
            gunzip(data)
        } else {
            data.clone()
        };
        let plain = String::from_utf8_lossy(&plain);
        assert!(!plain.contains("hunter2"), "the password is in {name}");
        assert!(!plain.contains(API_KEY), "the API key is in {name}");
    }

    // The status page lists it, linked to its JSON and its bundle.
    let (_, html) = sp.get("/").await;
    assert!(
        html.contains(&format!("<a href=\"/incidents/{id}\">vllm: stalled</a>")),
        "{html}"
    );
    assert!(html.contains(&format!("<a href=\"/incidents/{id}.tar.gz\">bundle</a>")));

    let (_, text) = sp.get("/metrics?name=dynamo_sysport_incidents_total").await;
    let m = metric(&text, "dynamo_sysport_incidents_total").label("kind", "stalled");
    assert_eq!(m.value(), 1.0);
    assert_eq!(sp.get("/incidents/nope").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        sp.get("/incidents/nope.tar.gz").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn down_after_up_and_a_restart_each_open_one() {
    let mut engine = Upstream::start(page(0, 5, 1000.0)).await;
    let sp = Running::start(stall_config(&engine, "pw")).await;
    eventually(MARGIN, "vllm up", || async {
        sp.get("/health").await.0 == StatusCode::OK
    })
    .await;
    engine.stop().await;
    let down = until_incident(&sp, "a down incident", |i| i["kind"] == "down").await;
    assert!(
        down["reason"]
            .as_str()
            .expect("reason")
            .starts_with("scrape failed"),
        "{down}"
    );
    engine.restart().await;
    let id = down["id"].as_str().expect("id").to_owned();
    until_incident(&sp, "down closed", |i| {
        i["id"] == id.as_str() && i["duration_seconds"].is_number()
    })
    .await;

    // The engine came back as a new process: its start time changed.
    engine.set(page(0, 0, 2000.0));
    let restarted = until_incident(&sp, "a restart", |i| i["kind"] == "restarted").await;
    let reason = restarted["reason"].as_str().expect("reason");
    assert!(reason.contains("1000 → 2000"), "{reason}");
    let list = json(&sp, "/incidents").await;
    assert_eq!(list[0]["kind"], "restarted", "newest first: {list}");
    assert_eq!(list[1]["kind"], "down");
}

async fn bytes(sp: &Running, path: &str) -> Vec<u8> {
    let r = common::client()
        .get(sp.url(path))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200, "{path}");
    r.bytes().await.expect("body").to_vec()
}

#[tokio::test]
async fn a_restarted_sysport_serves_the_kept_incidents_byte_for_byte() {
    let dir = std::env::temp_dir().join(format!("sysport-incidents-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = Upstream::start(page(0, 5, 1000.0)).await;
    let mut c = stall_config(&engine, "pw");
    c.incidents.dir = Some(dir.clone());
    let sp = Running::start(c.clone()).await;
    eventually(MARGIN, "vllm up", || async {
        sp.get("/health").await.0 == StatusCode::OK
    })
    .await;
    engine.stop().await;
    let down = until_incident(&sp, "a down incident", |i| i["kind"] == "down").await;
    let id = down["id"].as_str().expect("id").to_owned();
    engine.restart().await;
    until_incident(&sp, "down closed", |i| {
        i["id"] == id.as_str() && i["duration_seconds"].is_number()
    })
    .await;
    let list = bytes(&sp, "/incidents").await;
    let json = bytes(&sp, &format!("/incidents/{id}")).await;
    let bundle = bytes(&sp, &format!("/incidents/{id}.tar.gz")).await;
    sp.shutdown().await.expect("clean shutdown");
    assert!(dir.join(format!("{id}.tar.gz")).is_file());

    let again = Running::start(c).await;
    assert_eq!(bytes(&again, "/incidents").await, list);
    assert_eq!(bytes(&again, &format!("/incidents/{id}")).await, json);
    assert_eq!(
        bytes(&again, &format!("/incidents/{id}.tar.gz")).await,
        bundle
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stand-in for py-spy: a shell script that prints what it was asked (`dump --nonblocking
/// --pid P`) as py-spy prints a thread, or fails, or hangs.
fn fake_py_spy(name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("sysport-py-spy-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("py-spy");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Freezes a busy engine behind a sysport with `py_spy`, and returns the stalled incident once
/// its stacks are in.
async fn stalled_with_stacks(
    py_spy: std::path::PathBuf,
    timeout: Duration,
) -> (Running, Upstream, Value) {
    stalled_with_stacks_of(py_spy, timeout, Vec::new()).await
}

/// [`stalled_with_stacks`], with `incidents.processes`.
async fn stalled_with_stacks_of(
    py_spy: std::path::PathBuf,
    timeout: Duration,
    processes: Vec<(String, String)>,
) -> (Running, Upstream, Value) {
    let engine = Upstream::start(page(3, 100, 1000.0)).await;
    let mut c = stall_config(&engine, "pw");
    c.incidents.py_spy = Some(py_spy);
    c.incidents.stacks_timeout = timeout;
    c.incidents.processes = processes;
    let sp = Running::start(c).await;
    let opened = until_incident(&sp, "a stalled incident", |i| i["kind"] == "stalled").await;
    let id = opened["id"].as_str().expect("id").to_owned();
    let deadline = tokio::time::Instant::now() + timeout + MARGIN;
    loop {
        let incident = json(&sp, &format!("/incidents/{id}")).await;
        if !incident["stacks"].is_null() {
            return (sp, engine, incident);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no stacks: {incident}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_stacks_of_the_process_on_the_engines_port_are_in_the_bundle() {
    let py_spy = fake_py_spy(
        "ok",
        "echo \"Process $4: python3 -m vllm.entrypoints.openai.api_server\"\n\
         echo \"Thread 0x7F01 (idle): \\\"MainThread\\\"\"\n\
         echo \"    busy_loop (vllm/v1/engine/core.py:787)\"\n\
         echo \"args: $*\"\n\
         sleep 1\n\
         echo \"nice $(cut -d' ' -f19 /proc/$$/stat)\"",
    );
    let (sp, _engine, incident) = stalled_with_stacks(py_spy, Duration::from_secs(10)).await;
    let processes = incident["stacks"]["processes"]
        .as_array()
        .expect("processes");
    // The test's own process serves the stand-in engine's port.
    assert_eq!(processes[0]["pid"], std::process::id(), "{incident}");
    assert_eq!(processes[0]["result"], "ok");
    let id = incident["id"].as_str().expect("id");
    let tar = gunzip(&bytes(&sp, &format!("/incidents/{id}.tar.gz")).await);
    let files = untar(&tar);
    let (_, stacks) = files
        .iter()
        .find(|(n, _)| n == "stacks.txt")
        .expect("stacks.txt");
    let stacks = String::from_utf8_lossy(stacks);
    assert!(
        stacks.contains("busy_loop (vllm/v1/engine/core.py:787)"),
        "{stacks}"
    );
    assert!(
        stacks.contains(&format!(
            "args: dump --nonblocking --pid {}",
            std::process::id()
        )),
        "{stacks}"
    );
    // Below sysport's own threads, which go on checking the engine meanwhile.
    assert!(stacks.contains("nice 10\n"), "{stacks}");
}

#[tokio::test]
async fn a_failing_or_hanging_or_missing_py_spy_is_said_and_the_incident_still_opens() {
    let failing = fake_py_spy(
        "fails",
        "echo 'Error: Permission denied (os error 13)' >&2\nexit 1",
    );
    let (_sp, _engine, incident) = stalled_with_stacks(failing, Duration::from_secs(10)).await;
    let p = &incident["stacks"]["processes"][0];
    assert_eq!(p["result"], "failed", "{incident}");
    assert!(
        p["error"]
            .as_str()
            .expect("error")
            .contains("Permission denied (os error 13)"),
        "{incident}"
    );

    let hanging = fake_py_spy("hangs", "exec sleep 600");
    let started = std::time::Instant::now();
    let (_sp, _engine, incident) = stalled_with_stacks(hanging, Duration::from_secs(1)).await;
    let p = &incident["stacks"]["processes"][0];
    assert_eq!(p["result"], "timeout", "{incident}");
    // Its time is the limit's: killed then.
    let took = p["duration_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("{p}"));
    assert!(
        (1.0..1.0 + MARGIN.as_secs_f64()).contains(&took),
        "{incident}"
    );
    assert!(started.elapsed() < Duration::from_secs(1) + STALL_AFTER + MARGIN);

    let missing = std::env::temp_dir().join("sysport-no-such-py-spy");
    let (_sp, _engine, incident) = stalled_with_stacks(missing, Duration::from_secs(1)).await;
    let error = incident["stacks"]["processes"][0]["error"]
        .as_str()
        .expect("error");
    assert!(error.starts_with("cannot run"), "{incident}");
}

#[tokio::test]
async fn a_native_engine_has_no_python_stacks_and_the_incident_says_so() {
    // py-spy 0.4.3 on llama-server (tried here): exit 1, this line on stderr, and a Rust
    // backtrace after it when RUST_BACKTRACE=1 is in its environment.
    let native = fake_py_spy(
        "native",
        "echo 'Error: Failed to find python version from target process' >&2\n\
         [ \"$RUST_BACKTRACE\" = 1 ] && echo 'Stack backtrace:' >&2\nexit 1",
    );
    let (_sp, _engine, incident) = stalled_with_stacks(native, Duration::from_secs(10)).await;
    let why = incident["stacks"]["unavailable"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {incident}"));
    assert!(
        why.starts_with("not a Python process: py-spy found no Python interpreter"),
        "{why}"
    );
    assert!(
        why.contains(&format!("(pid {})", std::process::id())),
        "{why}"
    );
    assert!(!why.contains("backtrace"), "{why}");
}

#[tokio::test]
async fn configured_processes_are_dumped_instead_of_the_one_on_the_port() {
    // The engine's processes as an operator names them: a command line (here a shell, started
    // apart with setsid, and its child), not the process serving the page (the test's own).
    let marker = format!("sysport-engine-{}", std::process::id());
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("setsid sh -c 'sleep 60 & wait # {marker}' >/dev/null 2>&1 &"),
        ])
        .status()
        .expect("sh");
    assert!(status.success());
    let py_spy = fake_py_spy("named", "echo \"dumped $4\"");
    let processes = vec![("vllm".to_owned(), format!("# {marker}$"))];
    let (sp, _engine, incident) =
        stalled_with_stacks_of(py_spy, Duration::from_secs(10), processes).await;
    let pids: Vec<u64> = incident["stacks"]["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no dumps: {incident}"))
        .iter()
        .map(|p| p["pid"].as_u64().expect("pid"))
        .collect();
    for pid in pids.iter().rev() {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    assert_eq!(pids.len(), 2, "the shell and its child: {incident}");
    assert!(!pids.contains(&u64::from(std::process::id())), "{incident}");
    let id = incident["id"].as_str().expect("id");
    let files = untar(&gunzip(
        &bytes(&sp, &format!("/incidents/{id}.tar.gz")).await,
    ));
    let (_, stacks) = files
        .iter()
        .find(|(n, _)| n == "stacks.txt")
        .expect("stacks.txt");
    let stacks = String::from_utf8_lossy(stacks);
    for pid in &pids {
        assert!(stacks.contains(&format!("dumped {pid}")), "{stacks}");
    }
    assert!(
        incident["config"]
            .as_str()
            .expect("config")
            .contains(&marker)
    );
}

#[tokio::test]
async fn configured_processes_that_match_nothing_are_said() {
    let py_spy = fake_py_spy("unmatched", "echo never");
    let processes = vec![(
        "vllm".to_owned(),
        "^no engine has this command line$".to_owned(),
    )];
    let (_sp, _engine, incident) =
        stalled_with_stacks_of(py_spy, Duration::from_secs(10), processes).await;
    let why = incident["stacks"]["unavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.starts_with("no such process: no command line here matches `^no engine"),
        "{incident}"
    );
}

/// The bundles in `dir`: how many, how many bytes. A bundle being written is a dot-file until
/// it is whole (and the writer makes room for it first): those are not counted.
fn on_disk(dir: &std::path::Path) -> (usize, u64) {
    let files: Vec<u64> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.metadata().expect("metadata").len())
        .collect();
    (files.len(), files.iter().sum())
}

#[tokio::test]
async fn two_hundred_freezes_and_thaws_leave_keep_incidents_within_max_bytes() {
    // The engine's /health fails and comes back 200 times; each time one incident opens and
    // closes. What is kept, in memory and on disk, stays within keep and max_bytes throughout.
    let dir = std::env::temp_dir().join(format!("sysport-incidents-200-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Upstream::start(page(0, 5, 1000.0)).await;
    let mut c = stall_config(&engine, "pw");
    c.health.interval = Duration::from_millis(20);
    c.upstreams[0].health_url = Some(engine.health_url().parse().expect("url"));
    c.incidents.dir = Some(dir.clone());
    c.incidents.keep = 5;
    // About three bundles' worth: max_bytes, not keep, is the bound that bites.
    c.incidents.max_bytes = 5_000;
    let keep = c.incidents.keep;
    let sp = Running::start(c).await;
    eventually(MARGIN, "vllm up", || async {
        sp.get("/health").await.0 == StatusCode::OK
    })
    .await;
    let mut last = String::new();
    for n in 0..200 {
        engine.set_health(StatusCode::SERVICE_UNAVAILABLE);
        let opened = until_incident(&sp, "a new incident", |i| {
            i["id"] != last.as_str() && i["closed_unix_seconds"].is_null()
        })
        .await;
        assert_eq!(opened["kind"], "down", "{opened}");
        last = opened["id"].as_str().expect("id").to_owned();
        engine.set_health(StatusCode::OK);
        until_incident(&sp, "the incident closed", |i| {
            i["id"] == last.as_str() && i["duration_seconds"].is_number()
        })
        .await;
        let list = json(&sp, "/incidents").await;
        let listed = list.as_array().expect("list").len();
        // The closed ones kept, and the one open at most.
        assert!(
            listed <= keep + 1,
            "{listed} incidents in memory after {n}: {list}"
        );
        let (files, total) = on_disk(&dir);
        assert!(files <= keep, "{files} bundles on disk after {n}");
        assert!(total <= 5_000, "{total} bytes on disk after {n}");
    }
    let text = sp.get("/metrics").await.1;
    let opened = metric(&text, "dynamo_sysport_incidents_total")
        .label("upstream", "vllm")
        .label("kind", "down")
        .value();
    assert_eq!(opened, 200.0);
    let (files, total) = on_disk(&dir);
    println!("after 200: {files} bundles, {total} bytes on disk");
    assert!(
        (2..keep).contains(&files),
        "max_bytes left {files} bundles ({total} bytes)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
