//! Dynamo's control and inventory routes in front of stand-in engines (`common::engines`):
//! `/metadata` for each engine, `/engine/{name}` mapped to each engine's route, `/v1/loras`,
//! who may call them (403 and 404 with the engine never asked), Dynamo's variables and their
//! precedence, and an engine that hangs or answers 5 MB: bounded, the probes unaffected.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::engines::StandIn;
use common::{Running, client, config, eventually, upstream_config};
use serde_json::{Value, json};
use sysport::config::{Config, Overrides, RoutePolicy};
use sysport::model::{Engine, Url};

fn upstream(name: &str, engine: Engine, s: &StandIn) -> sysport::config::UpstreamConfig {
    let mut u = upstream_config(name, &s.url("/metrics"), &["vllm:", "sglang:", "llamacpp:"]);
    u.engine = engine;
    u.health_url = Some(Url::parse(&s.url("/health")).expect("url"));
    u
}

/// sysport in front of `upstreams`, its control routes open without authentication.
fn open(upstreams: Vec<sysport::config::UpstreamConfig>) -> Config {
    let mut c = config(upstreams);
    c.control.allow_unauthenticated = true;
    c.control.lora = true;
    c
}

async fn send(
    running: &Running,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = client().request(method, running.url(path));
    if let Some(body) = body {
        r = r
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let r = r.send().await.expect("sysport answers");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn post(running: &Running, path: &str) -> (u16, Value) {
    send(running, reqwest::Method::POST, path, None).await
}

async fn get(running: &Running, path: &str) -> (u16, Value) {
    send(running, reqwest::Method::GET, path, None).await
}

#[tokio::test]
async fn metadata_says_what_each_engine_says_and_what_it_cannot_read() {
    let vllm = StandIn::vllm().await;
    let sglang = StandIn::sglang().await;
    let llama = StandIn::llamacpp(&[]).await;
    let mut gone = upstream_config("triton", "http://127.0.0.1:9/metrics", &["nv_"]);
    gone.engine = Engine::Triton;
    let mut c = config(vec![
        upstream("vllm", Engine::Vllm, &vllm),
        upstream("sglang", Engine::Sglang, &sglang),
        upstream("llama", Engine::Llamacpp, &llama),
        gone,
    ]);
    c.labels = vec![("worker_id".into(), "w-0".into())];
    c.control.timeout = Duration::from_secs(2);
    let running = Running::start(c).await;
    let (status, m) = get(&running, "/metadata").await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["sysport"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(m["labels"], json!({"worker_id": "w-0"}));
    let u = &m["upstreams"];
    assert_eq!(u["vllm"]["engine"], "vllm");
    assert_eq!(u["vllm"]["version"], "0.32.0");
    assert_eq!(
        u["vllm"]["models"],
        json!([{"id": "tiny", "max_model_len": 256, "parent": null}])
    );
    assert_eq!(
        u["vllm"]["cache_config"],
        json!({"block_size": "16", "cache_dtype": "auto", "num_gpu_blocks": "512"})
    );
    assert_eq!(u["sglang"]["version"], "0.5.4");
    assert_eq!(u["sglang"]["cache_config"]["max_total_num_tokens"], "8192");
    assert_eq!(u["llama"]["version"], "b7142-5d3a4e6a");
    assert_eq!(u["llama"]["models"][0]["max_model_len"], 1024);
    assert!(
        u["llama"]["cache_config"]["not_available"]
            .as_str()
            .is_some_and(|r| r.contains("llamacpp")),
        "{m}"
    );
    for field in ["version", "cache_config"] {
        let reason = u["triton"][field]["not_available"].as_str().unwrap_or("");
        assert!(!reason.is_empty(), "triton {field}: {m}");
    }
    // SGLang's server info holds its API key: only the version is taken from it.
    assert!(!m.to_string().contains("sk-hidden-key"), "{m}");
}

#[tokio::test]
async fn metadata_is_read_at_most_once_per_check_interval() {
    let vllm = StandIn::vllm().await;
    let mut c = config(vec![upstream("vllm", Engine::Vllm, &vllm)]);
    c.health.interval = Duration::from_secs(3600);
    let running = Running::start(c).await;
    // The read made once the first check finds the engine up, unasked.
    eventually(Duration::from_secs(5), "the read at start", || async {
        asked(&vllm, "GET /version") == 1
    })
    .await;
    for _ in 0..5 {
        assert_eq!(
            get(&running, "/metadata").await.1["upstreams"]["vllm"]["version"],
            "0.32.0"
        );
    }
    let versions = vllm
        .requests()
        .iter()
        .filter(|r| *r == "GET /version")
        .count();
    assert_eq!(versions, 1, "{:?}", vllm.requests());
}

/// How many of the stand-in's requests were `line` (`METHOD /path`).
fn asked(s: &StandIn, line: &str) -> usize {
    s.requests().iter().filter(|r| *r == line).count()
}

#[tokio::test]
async fn metadata_is_read_at_start_and_again_after_the_engine_restarts() {
    let vllm = StandIn::vllm().await;
    // Checks every 200 ms; nobody asks `/metadata` until the end.
    let running = Running::start(config(vec![upstream("vllm", Engine::Vllm, &vllm)])).await;
    let reads = || (asked(&vllm, "GET /version"), asked(&vllm, "GET /v1/models"));
    eventually(Duration::from_secs(5), "the read at start", || async {
        reads() == (1, 1)
    })
    .await;
    // While the engine runs on, its routes are not read again, check after check.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reads(), (1, 1), "{:?}", vllm.requests());
    // Restarted with another version: its process start time moves, the checks see it.
    *vllm.behaviour().version.lock().expect("lock") = Some("0.33.0".into());
    (vllm.behaviour().restarted_after).store(60, std::sync::atomic::Ordering::SeqCst);
    let restarted = Instant::now();
    while reads() != (2, 2) {
        if restarted.elapsed() > Duration::from_secs(10) {
            let (_, incidents) = get(&running, "/incidents").await;
            panic!(
                "no read after the restart: {:?}\n{incidents}",
                vllm.requests()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reads(), (2, 2), "one read a restart: {:?}", vllm.requests());
    let (status, m) = get(&running, "/metadata").await;
    assert_eq!(status, 200);
    assert_eq!(m["upstreams"]["vllm"]["version"], "0.33.0", "{m}");
    assert_eq!(m["upstreams"]["vllm"]["cache_config"]["block_size"], "16");
    let (_, incidents) = get(&running, "/incidents").await;
    assert_eq!(
        incidents[0]["kind"], "restarted",
        "the incidents' restart: {incidents}"
    );
}

#[tokio::test]
async fn metadata_is_read_again_once_the_engine_is_back_after_a_restart() {
    let vllm = StandIn::vllm().await;
    let mut c = config(vec![upstream("vllm", Engine::Vllm, &vllm)]);
    c.health.interval = Duration::from_secs(3600);
    let running = Running::start(c).await;
    let version =
        || async { get(&running, "/metadata").await.1["upstreams"]["vllm"]["version"].clone() };
    assert_eq!(running.get("/metrics").await.0, 200);
    assert_eq!(version().await, "0.32.0");
    // Restarted with another version: the scrapes see it down, then back.
    *vllm.behaviour().version.lock().expect("lock") = Some("0.33.0".into());
    assert_eq!(version().await, "0.32.0", "kept within the check interval");
    vllm.behaviour()
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    running.get("/metrics").await;
    vllm.behaviour()
        .down
        .store(false, std::sync::atomic::Ordering::SeqCst);
    running.get("/metrics").await;
    assert_eq!(version().await, "0.33.0");
}

#[tokio::test]
async fn without_authentication_control_is_refused_and_the_engine_never_asked() {
    let vllm = StandIn::vllm().await;
    let mut c = config(vec![upstream("vllm", Engine::Vllm, &vllm)]);
    c.control.lora = true;
    let running = Running::start(c).await;
    let (status, body) = post(&running, "/engine/reset_prefix_cache").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("allow_unauthenticated")
    );
    assert_eq!(get(&running, "/v1/loras").await.0, 403);
    assert_eq!(vllm.control_requests(), Vec::<String>::new());
    assert_eq!(vllm.prefix_resets(), 0);

    // Without DYN_LORA_ENABLED, /v1/loras is not there at all.
    let mut c = open(vec![upstream("vllm", Engine::Vllm, &vllm)]);
    c.control.lora = false;
    let running = Running::start(c).await;
    assert_eq!(get(&running, "/v1/loras").await.0, 404);
}

#[tokio::test]
async fn each_name_reaches_the_engine_route_it_maps_to() {
    let vllm = StandIn::vllm().await;
    let llama = StandIn::llamacpp(&[]).await;
    let sglang = StandIn::sglang().await;
    let running = Running::start(open(vec![
        upstream("vllm", Engine::Vllm, &vllm),
        upstream("llama", Engine::Llamacpp, &llama),
        upstream("sglang", Engine::Sglang, &sglang),
    ]))
    .await;
    // The first upstream whose engine has the route, the query passed on.
    assert_eq!(
        post(&running, "/engine/sleep?level=2").await,
        (200, json!({"status": "sleeping", "level": 2}))
    );
    assert_eq!(
        get(&running, "/engine/is_sleeping").await,
        (200, json!({"is_sleeping": true}))
    );
    assert_eq!(
        post(&running, "/engine/wake_up").await,
        (200, json!({"status": "awake", "tags": null}))
    );
    assert_eq!(
        post(&running, "/engine/reset_prefix_cache").await,
        (200, json!({"success": true}))
    );
    assert_eq!(vllm.prefix_resets(), 1);
    assert_eq!(
        vllm.control_requests(),
        [
            "POST /sleep?level=2",
            "GET /is_sleeping",
            "POST /wake_up",
            "POST /reset_prefix_cache"
        ]
    );
    // llama.cpp's slot erase: only llama.cpp has it.
    assert_eq!(
        post(&running, "/engine/erase_slot/2").await,
        (200, json!({"id_slot": 2, "n_erased": 7}))
    );
    assert_eq!(llama.control_requests(), ["POST /slots/2?action=erase"]);
    // ?upstream= picks SGLang, whose prefix cache reset is /flush_cache.
    let (status, _) = post(&running, "/engine/reset_prefix_cache?upstream=sglang").await;
    assert_eq!(status, 200);
    assert_eq!((sglang.prefix_resets(), vllm.prefix_resets()), (1, 1));
    // Dynamo's answers where sysport answers itself.
    assert_eq!(post(&running, "/engine/no_such_route").await.0, 404);
    assert_eq!(post(&running, "/engine/erase_slot/x").await.0, 404);
    assert_eq!(post(&running, "/engine/sleep?upstream=nobody").await.0, 404);
    let (status, body) = send(&running, reqwest::Method::POST, "/engine/sleep", None).await;
    assert_eq!(status, 200, "{body}");
    let bad = client()
        .post(running.url("/engine/sleep"))
        .body("{not json")
        .send()
        .await
        .expect("answers");
    assert_eq!(bad.status().as_u16(), 400);
    assert_eq!(
        llama.control_requests().len() + sglang.control_requests().len(),
        2,
        "no engine asked for the refused calls"
    );
}

type Vars<'a> = &'a [(&'a str, &'a str)];

/// The configuration loaded with Dynamo's variables set as `vars`.
fn with_env(vars: &[(&str, &str)], url: &str) -> Config {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let overrides = Overrides {
        upstreams: vec![format!("vllm={url}")],
        ..Overrides::default()
    };
    let mut c = sysport::config::load(&overrides, &env).expect("valid");
    c.control.allow_unauthenticated = true;
    c
}

#[tokio::test]
async fn dynamo_variables_decide_which_names_are_served_in_their_precedence() {
    let vllm = StandIn::vllm().await;
    let url = vllm.url("/metrics");
    // (the variables, then each name and the status it gets)
    let cases: [(Vars, &[(&str, u16)]); 4] = [
        (
            &[
                ("DYN_DISABLE_ENGINE_ROUTES", "true"),
                ("DYN_ENGINE_ROUTES_ALLOW", "sleep"),
            ],
            &[("sleep", 404), ("is_sleeping", 404)],
        ),
        (
            &[
                ("DYN_ENGINE_ROUTES_ALLOW", "is_sleeping"),
                ("DYN_ENGINE_ROUTES_DENY", "is_sleeping"),
            ],
            &[("is_sleeping", 200), ("reset_prefix_cache", 404)],
        ),
        (
            &[("DYN_ENGINE_ROUTES_DENY", "reset_prefix_cache")],
            &[("is_sleeping", 200), ("reset_prefix_cache", 404)],
        ),
        (&[("DYN_ENGINE_ROUTES_ALLOW", "")], &[("is_sleeping", 404)]),
    ];
    for (vars, wanted) in cases {
        let c = with_env(vars, &url);
        let running = Running::start(c).await;
        for (name, code) in wanted {
            let before = vllm.control_requests().len();
            let method = if *name == "is_sleeping" {
                reqwest::Method::GET
            } else {
                reqwest::Method::POST
            };
            let (status, body) = send(&running, method, &format!("/engine/{name}"), None).await;
            assert_eq!(status, *code, "{vars:?} {name}: {body}");
            let asked = vllm.control_requests().len() - before;
            assert_eq!(asked, usize::from(*code == 200), "{vars:?} {name}");
        }
    }
    let c = with_env(&[], &url);
    assert_eq!(c.control.engine_routes, RoutePolicy::AllowAll);
    let refused = sysport::config::load(
        &Overrides::default(),
        &HashMap::from([("DYN_DISABLE_ENGINE_ROUTES".to_owned(), "perhaps".to_owned())]),
    )
    .expect_err("refused");
    assert!(
        refused.to_string().contains("DYN_DISABLE_ENGINE_ROUTES"),
        "{refused}"
    );
}

#[tokio::test]
async fn basic_auth_opens_control_to_its_users_only() {
    let vllm = StandIn::vllm().await;
    let dir = common::pki::Pki::new("control-basic");
    let web = dir.path("web.yml");
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    std::fs::write(&web, format!("basic_auth_users:\n  operator: '{hash}'\n")).expect("write");
    let overrides = Overrides {
        host: Some("127.0.0.1".parse().expect("ip")),
        port: Some(0),
        upstreams: vec![format!("vllm={}", vllm.url("/metrics"))],
        web_config: Some(web),
        ..Overrides::default()
    };
    let c =
        sysport::server::load_config(&overrides, &HashMap::<String, String>::new()).expect("valid");
    assert!(!c.control.allow_unauthenticated);
    let running = Running::start(c).await;
    let anonymous = client()
        .post(running.url("/engine/reset_prefix_cache"))
        .send()
        .await;
    assert_eq!(anonymous.expect("answers").status().as_u16(), 401);
    let wrong = client()
        .post(running.url("/engine/reset_prefix_cache"))
        .basic_auth("operator", Some("guess"))
        .send()
        .await;
    assert_eq!(wrong.expect("answers").status().as_u16(), 401);
    assert_eq!(vllm.prefix_resets(), 0);
    let r = client()
        .post(running.url("/engine/reset_prefix_cache"))
        .basic_auth("operator", Some("s3cret"))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(vllm.prefix_resets(), 1);
}

#[tokio::test]
async fn a_hanging_engine_times_out_and_the_probes_do_not_wait() {
    let vllm = StandIn::vllm().await;
    *vllm.behaviour().hang.lock().expect("lock") = Some(Duration::from_secs(30));
    let mut c = open(vec![upstream("vllm", Engine::Vllm, &vllm)]);
    c.control.timeout = Duration::from_millis(800);
    let running = Running::start(c).await;
    let base = running.base.clone();
    // Four calls fill every place; the fifth is turned away at once.
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let url = format!("{base}/engine/sleep");
            tokio::spawn(async move {
                let started = Instant::now();
                let r = client().post(url).send().await.expect("answers");
                (r.status().as_u16(), started.elapsed())
            })
        })
        .collect();
    common::eventually(
        Duration::from_secs(5),
        "four calls at the engine",
        || async { vllm.control_requests().len() == 4 },
    )
    .await;
    let (status, body) = post(&running, "/engine/wake_up").await;
    assert_eq!(status, 503, "{body}");
    for _ in 0..5 {
        let started = Instant::now();
        let (status, _) = running.get("/live").await;
        assert_eq!(status, 200);
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
    }
    for call in calls {
        let (status, took) = call.await.expect("call");
        assert_eq!(status, 504);
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    assert_eq!(
        vllm.control_requests().len(),
        4,
        "the refused call never reached the engine"
    );
}

#[tokio::test]
async fn a_five_megabyte_answer_is_refused_not_passed_back() {
    let vllm = StandIn::vllm().await;
    *vllm.behaviour().huge.lock().expect("lock") = Some(5 << 20);
    let running = Running::start(open(vec![upstream("vllm", Engine::Vllm, &vllm)])).await;
    let (status, body) = get(&running, "/engine/is_sleeping").await;
    assert_eq!(status, 502);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("longer than"),
        "{body}"
    );
    assert_eq!(running.get("/live").await.0, 200);
    *vllm.behaviour().huge.lock().expect("lock") = None;
    assert_eq!(
        get(&running, "/engine/is_sleeping").await,
        (200, json!({"is_sleeping": false}))
    );
}

#[tokio::test]
async fn vllm_adapters_load_list_and_unload_in_dynamo_shapes() {
    let vllm = StandIn::vllm().await;
    let running = Running::start(open(vec![upstream("vllm", Engine::Vllm, &vllm)])).await;
    let load = json!({"lora_name": "ad", "source": {"uri": "file:///adapters/ad"}});
    // Started without VLLM_ALLOW_RUNTIME_LORA_UPDATING: the answer says what it needs.
    let (status, body) = send(
        &running,
        reqwest::Method::POST,
        "/v1/loras",
        Some(load.clone()),
    )
    .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(body["status"], "error");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"),
        "{body}"
    );
    vllm.behaviour()
        .lora_updating
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, body) = send(
        &running,
        reqwest::Method::POST,
        "/v1/loras",
        Some(load.clone()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "success");
    assert_eq!(body["lora_name"], "ad");
    assert!(
        vllm.requests()
            .contains(&"POST /v1/load_lora_adapter".to_owned())
    );
    // The engine's own refusal, passed back in the same shape.
    let (status, body) = send(&running, reqwest::Method::POST, "/v1/loras", Some(load)).await;
    assert_eq!(status, 400);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("already been loaded"),
        "{body}"
    );

    let (status, list) = get(&running, "/v1/loras").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["count"], 1);
    assert_eq!(
        list["loras"]["ad"],
        json!({"base_model": "tiny", "path": "/adapters/ad", "upstream": "vllm"})
    );
    assert_eq!(list["requests"]["vllm"]["running_lora_adapters"], "ad");

    let (status, body) = send(&running, reqwest::Method::DELETE, "/v1/loras/ad", None).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("success")),
        "{body}"
    );
    assert_eq!(get(&running, "/v1/loras").await.1["count"], 0);
    let (status, _) = send(&running, reqwest::Method::DELETE, "/v1/loras/ad", None).await;
    assert_eq!(status, 404);
    let (status, body) = send(
        &running,
        reqwest::Method::POST,
        "/v1/loras",
        Some(json!({"lora_name": "x", "source": {"uri": "s3://b/x"}})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn llamacpp_adapters_are_scaled_not_loaded() {
    let llama = StandIn::llamacpp(&["/a/style.gguf", "/a/other.gguf"]).await;
    let running = Running::start(open(vec![upstream("llama", Engine::Llamacpp, &llama)])).await;
    let (status, list) = get(&running, "/v1/loras").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["count"], 2);
    assert_eq!(list["loras"]["style"]["scale"], 1.0);
    let (status, body) = send(&running, reqwest::Method::DELETE, "/v1/loras/style", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        llama.scales(),
        [
            ("/a/style.gguf".to_owned(), 0.0),
            ("/a/other.gguf".to_owned(), 1.0)
        ]
    );
    let (status, body) = send(
        &running,
        reqwest::Method::POST,
        "/v1/loras",
        Some(
            json!({"lora_name": "style", "source": {"uri": "file:///a/style.gguf"}, "scale": 0.5}),
        ),
    )
    .await;
    assert_eq!((status, &body["lora_id"]), (200, &json!(0)), "{body}");
    assert_eq!(llama.scales()[0].1, 0.5);
    let (status, body) = send(
        &running,
        reqwest::Method::POST,
        "/v1/loras",
        Some(json!({"lora_name": "new", "source": {"uri": "file:///a/new.gguf"}})),
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        body["message"].as_str().unwrap_or("").contains("--lora"),
        "{body}"
    );
}

#[tokio::test]
async fn every_mapped_name_of_every_engine_reaches_its_route_with_its_method() {
    for engine in [
        Engine::Vllm,
        Engine::Sglang,
        Engine::Llamacpp,
        Engine::Trtllm,
        Engine::Triton,
    ] {
        let recorder = StandIn::recorder().await;
        let running = Running::start(open(vec![upstream("e", engine, &recorder)])).await;
        for route in engine.control().routes {
            let (path, arg) = if route.takes_arg {
                (format!("/engine/{}/3", route.name), Some("3"))
            } else {
                (format!("/engine/{}", route.name), None)
            };
            let method =
                reqwest::Method::from_bytes(route.method.as_str().as_bytes()).expect("method");
            let (status, body) = send(&running, method, &path, None).await;
            assert_eq!(status, 200, "{engine:?} {path}: {body}");
            assert_eq!(
                (body["method"].as_str(), body["path"].as_str()),
                (
                    Some(route.method.as_str()),
                    Some(route.target(arg).as_str())
                ),
                "{engine:?} {path}"
            );
        }
        // A name this engine does not map: 404, nothing sent.
        let before = recorder.control_requests().len();
        assert_eq!(
            post(&running, "/engine/erase_slot/0?upstream=e").await.0,
            if engine == Engine::Llamacpp { 200 } else { 404 }
        );
        let sent = recorder.control_requests().len() - before;
        assert_eq!(sent, usize::from(engine == Engine::Llamacpp), "{engine:?}");
    }
}

#[tokio::test]
async fn verified_client_certificates_open_control_and_an_optional_one_must_be_sent() {
    let pki = common::pki::Pki::new("control-mtls");
    pki.ca("ca");
    pki.leaf("ca", "server", "IP:127.0.0.1");
    pki.leaf("ca", "operator", "DNS:operator.example");
    let vllm = StandIn::vllm().await;
    for (auth, without) in [
        ("RequireAndVerifyClientCert", None),
        ("VerifyClientCertIfGiven", Some(403)),
    ] {
        let web = pki.path("web.yml");
        std::fs::write(
            &web,
            format!(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                 client_auth_type: {auth}\n  client_ca_file: ca.crt\n"
            ),
        )
        .expect("write");
        let overrides = Overrides {
            host: Some("127.0.0.1".parse().expect("ip")),
            port: Some(0),
            upstreams: vec![format!("vllm={}", vllm.url("/metrics"))],
            web_config: Some(web),
            ..Overrides::default()
        };
        let c = sysport::server::load_config(&overrides, &HashMap::<String, String>::new())
            .expect("valid");
        let running = Running::start(c).await;
        let url = running
            .url("/engine/reset_prefix_cache")
            .replace("http://", "https://");
        let before = vllm.prefix_resets();
        let with = pki
            .client("ca", Some("operator"))
            .post(&url)
            .send()
            .await
            .expect("answers");
        assert_eq!(with.status().as_u16(), 200, "{auth}");
        assert_eq!(vllm.prefix_resets(), before + 1, "{auth}");
        let anonymous = pki.client("ca", None).post(&url).send().await;
        match without {
            // The handshake itself refuses a client without a certificate.
            None => assert!(anonymous.is_err(), "{auth}"),
            Some(code) => assert_eq!(
                anonymous.expect("answers").status().as_u16(),
                code,
                "{auth}"
            ),
        }
        assert_eq!(
            vllm.prefix_resets(),
            before + 1,
            "{auth}: the engine not asked"
        );
    }
}

/// The sidecar's log lines of control calls.
fn control_calls(sidecar: &common::sidecar::Sidecar) -> Vec<String> {
    sidecar
        .log()
        .lines()
        .filter(|l| l.contains("control call"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn each_call_is_one_log_line_naming_who_route_upstream_status_and_duration() {
    let vllm = StandIn::vllm().await;
    let metrics = vllm.url("/metrics");
    let health = vllm.url("/health");
    let sidecar = common::sidecar::Sidecar::launch("control-log")
        .config(|port| {
            format!(
                "listen: {{ host: 127.0.0.1, port: {port} }}\n\
                 control: {{ allow_unauthenticated: true }}\n\
                 upstreams:\n  - name: engine-a\n    url: {metrics}\n    health_url: {health}\n"
            )
        })
        .start()
        .await;
    let r = client()
        .post(sidecar.url("/engine/reset_prefix_cache"))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status().as_u16(), 200);
    let lines = control_calls(&sidecar);
    assert_eq!(lines.len(), 1, "{lines:?}");
    for field in [
        "who=127.0.0.1",
        "route=reset_prefix_cache",
        "upstream=engine-a",
        "status=200",
        "duration_ms=",
    ] {
        assert!(lines[0].contains(field), "{field} in {}", lines[0]);
    }
}

#[tokio::test]
async fn a_call_with_a_client_certificate_is_logged_under_its_subject() {
    let pki = common::pki::Pki::new("control-who");
    pki.ca("ca");
    pki.leaf("ca", "server", "IP:127.0.0.1");
    pki.leaf("ca", "operator", "DNS:operator.example");
    std::fs::write(
        pki.path("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )
    .expect("web config");
    let vllm = StandIn::vllm().await;
    let (metrics, health, web) = (
        vllm.url("/metrics"),
        vllm.url("/health"),
        pki.path("web.yml"),
    );
    let probe_port = common::sidecar::free_port();
    let sidecar = common::sidecar::Sidecar::launch("control-who")
        .config(|port| {
            format!(
                "listen: {{ host: 127.0.0.1, port: {port}, probe_port: {probe_port}, \
                 web_config_file: {} }}\n\
                 upstreams:\n  - name: engine-a\n    url: {metrics}\n    health_url: {health}\n",
                web.display()
            )
        })
        .live_at(format!("http://127.0.0.1:{probe_port}/live"))
        .start()
        .await;
    let url = sidecar
        .url("/engine/reset_prefix_cache")
        .replace("http://", "https://");
    let r = pki
        .client("ca", Some("operator"))
        .post(&url)
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status().as_u16(), 200);
    let lines = control_calls(&sidecar);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(r#"client certificate \"CN=operator\" from 127.0.0.1"#),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn adapters_load_and_unload_through_each_engine_own_routes() {
    for (engine, load, unload) in [
        (
            Engine::Vllm,
            "/v1/load_lora_adapter",
            "/v1/unload_lora_adapter",
        ),
        (Engine::Sglang, "/load_lora_adapter", "/unload_lora_adapter"),
    ] {
        let recorder = StandIn::recorder().await;
        let running = Running::start(open(vec![upstream("e", engine, &recorder)])).await;
        let (status, body) = send(
            &running,
            reqwest::Method::POST,
            "/v1/loras",
            Some(json!({"lora_name": "ad", "source": {"uri": "hf://org/ad"}})),
        )
        .await;
        assert_eq!(
            (status, &body["status"]),
            (200, &json!("success")),
            "{engine:?}: {body}"
        );
        let (status, _) = send(&running, reqwest::Method::DELETE, "/v1/loras/ad", None).await;
        assert_eq!(status, 200, "{engine:?}");
        assert_eq!(
            recorder.control_requests(),
            [format!("POST {load}"), format!("POST {unload}")],
            "{engine:?}"
        );
    }
}

#[tokio::test]
async fn a_forwarded_get_is_sent_again_when_its_kept_alive_connection_closes_a_post_never() {
    // The engine answers one request per connection and closes it, unanswered, when the next
    // one arrives on it: every call after the first goes out on a kept-alive connection that
    // the engine closes as it arrives. A GET asks nothing of the engine but an answer: sysport
    // sends it again on another connection. A POST may have been acted on: it is sent once,
    // and its caller gets the failure.
    let engine = common::keep_alive_engine(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n",
        Some(Duration::ZERO),
        || {},
    )
    .await;
    let mut u = upstream_config("vllm", &format!("{}/metrics", engine.url), &["vllm:"]);
    u.health_url = Some(Url::parse(&format!("{}/health", engine.url)).expect("url"));
    let running = Running::start(open(vec![u])).await;
    for i in 0..6 {
        assert_eq!(
            get(&running, "/engine/is_sleeping").await,
            (200, json!({"is_sleeping": false})),
            "call {i}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut ok, mut failed) = (0, 0);
    for _ in 0..6 {
        match post(&running, "/engine/wake_up").await.0 {
            200 => ok += 1,
            _ => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let requests = engine.requests.lock().expect("lock").clone();
    let sleeping = requests
        .iter()
        .filter(|r| r.starts_with("GET /is_sleeping"))
        .count();
    let wake_ups = requests
        .iter()
        .filter(|r| r.starts_with("POST /wake_up"))
        .count();
    assert!(
        engine.closed.load(std::sync::atomic::Ordering::SeqCst) >= 5,
        "the engine closed too few connections for the test to tell: {requests:?}"
    );
    assert!(sleeping > 6, "no GET was sent again: {requests:?}");
    assert_eq!(
        wake_ups, 6,
        "each POST reaches the engine once: {requests:?}"
    );
    assert!(
        failed >= 1 && ok + failed == 6,
        "ok {ok}, failed {failed}: {requests:?}"
    );
}
