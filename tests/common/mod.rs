//! Shared test harness: loopback upstreams that tests can change, stop and restart; sysport
//! itself on port 0, in-process, or the binary as a child ([`sidecar`]); a small matcher for
//! metrics.
#![allow(dead_code, unreachable_pub)]

pub mod engines;
pub mod pki;
pub mod sidecar;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use sysport::config::{
    Config, HealthConfig, Limits, Listen, ShutdownConfig, StartingStatus, UpstreamConfig,
};
use sysport::model::Url;
use sysport::server::{Handle, Sysport};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a fake upstream answers.
#[derive(Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub delay: Duration,
}

impl Reply {
    pub fn text(body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status: StatusCode::OK,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: body.into(),
            delay: Duration::ZERO,
        }
    }
}

struct UpstreamState {
    metrics: Mutex<Reply>,
    /// The body for a request with prometheus_client's `name[]` selection, when set.
    selected: Mutex<Option<Vec<u8>>>,
    queries: Mutex<Vec<String>>,
    health: Mutex<StatusCode>,
    requests: AtomicUsize,
}

/// A loopback HTTP server with `/metrics` and `/health`, on a fixed port across restarts.
pub struct Upstream {
    pub addr: SocketAddr,
    state: Arc<UpstreamState>,
    task: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Upstream {
    pub async fn start(reply: Reply) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(UpstreamState {
            metrics: Mutex::new(reply),
            selected: Mutex::new(None),
            queries: Mutex::new(Vec::new()),
            health: Mutex::new(StatusCode::OK),
            requests: AtomicUsize::new(0),
        });
        let mut u = Upstream {
            addr,
            state,
            task: None,
        };
        u.serve(listener);
        u
    }

    fn serve(&mut self, listener: TcpListener) {
        let state = self.state.clone();
        let app = Router::new()
            .route(
                "/metrics",
                axum::routing::get({
                    let state = state.clone();
                    move |uri: axum::http::Uri| async move {
                        state.requests.fetch_add(1, Ordering::SeqCst);
                        let query = uri.query().unwrap_or("").to_string();
                        let mut reply = state.metrics.lock().expect("lock").clone();
                        if query.contains("name%5B%5D=")
                            && let Some(selected) = state.selected.lock().expect("lock").clone()
                        {
                            reply.body = selected;
                        }
                        state.queries.lock().expect("lock").push(query);
                        tokio::time::sleep(reply.delay).await;
                        let mut r = (reply.status, reply.body).into_response();
                        r.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(reply.content_type),
                        );
                        r
                    }
                }),
            )
            .route(
                "/health",
                axum::routing::get(move || async move { *state.health.lock().expect("lock") }),
            );
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        self.task = Some((tx, task));
    }

    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    pub fn health_url(&self) -> String {
        format!("http://{}/health", self.addr)
    }

    pub fn set(&self, reply: Reply) {
        *self.state.metrics.lock().expect("lock") = reply;
    }

    /// What a `name[]` request gets instead of the full body (prometheus_client's selection).
    pub fn set_selected(&self, body: impl Into<Vec<u8>>) {
        *self.state.selected.lock().expect("lock") = Some(body.into());
    }

    /// The query strings of the `/metrics` requests so far, in order.
    pub fn queries(&self) -> Vec<String> {
        self.state.queries.lock().expect("lock").clone()
    }

    pub fn set_health(&self, code: StatusCode) {
        *self.state.health.lock().expect("lock") = code;
    }

    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Closes the listener: connections are refused until `restart`.
    pub async fn stop(&mut self) {
        if let Some((tx, task)) = self.task.take() {
            let _ = tx.send(());
            task.abort();
            let _ = task.await;
        }
    }

    pub async fn restart(&mut self) {
        self.stop().await;
        for _ in 0..100 {
            if let Ok(listener) = TcpListener::bind(self.addr).await {
                self.serve(listener);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("cannot bind {} again", self.addr);
    }
}

pub fn upstream_config(name: &str, url: &str, keep: &[&str]) -> UpstreamConfig {
    UpstreamConfig {
        keep: keep.iter().map(|s| s.to_string()).collect(),
        ..UpstreamConfig::new(name, Url::parse(url).expect("valid url"))
    }
}

pub fn config(upstreams: Vec<UpstreamConfig>) -> Config {
    Config {
        listen: Listen {
            host: "127.0.0.1".parse().expect("ip"),
            port: 0,
            ..Listen::default()
        },
        health: HealthConfig {
            path: "/health".into(),
            live_path: "/live".into(),
            starting_status: StartingStatus::NotReady,
            interval: Duration::from_millis(200),
        },
        labels: Vec::new(),
        upstreams,
        limits: Limits::default(),
        shutdown: ShutdownConfig {
            drain_delay: Duration::ZERO,
        },
        vitals: sysport::config::VitalsConfig::default(),
        views: Vec::new(),
        metric_relabel_configs: Vec::new(),
        control: sysport::config::ControlConfig::default(),
        otlp: None,
        incidents: sysport::config::IncidentsConfig::default(),
        source: None,
    }
}

/// sysport running in-process on a loopback port.
pub struct Running {
    pub base: String,
    pub handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    pub async fn start(config: Config) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let sysport = Sysport::from_listener(listener, config);
        let base = format!("http://{}", sysport.local_addr().expect("local addr"));
        let handle = sysport.handle();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(sysport.run(async {
            let _ = rx.await;
        }));
        Running {
            base,
            handle,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let r = client()
            .get(self.url(path))
            .send()
            .await
            .expect("sysport answers");
        let status = StatusCode::from_u16(r.status().as_u16()).expect("status");
        (status, r.text().await.expect("body"))
    }

    /// Sends the shutdown signal and waits for `run` to return.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task
            .take()
            .expect("running")
            .await
            .expect("server task")
    }
}

/// The body of a GET, which must succeed.
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body")
}

/// sysport in front of one upstream.
pub async fn start_single(url: &str, keep: &[&str]) -> Running {
    Running::start(config(vec![upstream_config("vllm", url, keep)])).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// Waits until `f` holds, polling; fails the test after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A sample in exposition text: `metric(&text, "name").label("k", "v").value()`.
pub struct Matcher<'a> {
    text: &'a str,
    name: &'a str,
    labels: Vec<(&'a str, &'a str)>,
}

pub fn metric<'a>(text: &'a str, name: &'a str) -> Matcher<'a> {
    Matcher {
        text,
        name,
        labels: Vec::new(),
    }
}

impl<'a> Matcher<'a> {
    pub fn label(mut self, k: &'a str, v: &'a str) -> Self {
        self.labels.push((k, v));
        self
    }

    /// The samples named `name` that carry every label asked for, each with exactly that value.
    fn lines(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.text.lines().filter(move |l| {
            !l.starts_with('#')
                && parse_sample(l).is_some_and(|s| {
                    s.name == self.name
                        && self
                            .labels
                            .iter()
                            .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
                })
        })
    }

    /// The value of the only matching sample; panics when there is none or several.
    pub fn value(&self) -> f64 {
        let found: Vec<&str> = self.lines().collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {} {:?}, found {:?}",
            self.name,
            self.labels,
            found
        );
        let sample = parse_sample(found[0]).expect("a matched sample parses");
        let value = sample.rest.split_whitespace().next().expect("a value");
        value.parse().expect("numeric value")
    }

    pub fn count(&self) -> usize {
        self.lines().count()
    }
}

/// A sample line cut up: `name{labels} rest`, label values unescaped.
#[derive(Debug, PartialEq)]
pub struct Sample<'a> {
    pub name: String,
    pub labels: Vec<(String, String)>,
    /// The value and what follows it (timestamp, exemplar).
    pub rest: &'a str,
}

/// Parses `name value`, `name{k="v",...} value` or OpenMetrics' `{"name",k="v"} value`; values
/// may hold `\\`, `\"` and `\n`, commas and braces. `None` for a line that is not a sample.
pub fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let mut name = line[..end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[end..];
    if let Some(set) = rest.strip_prefix('{') {
        rest = set;
        loop {
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let (key, r) = if rest.starts_with('"') {
                quoted(rest)?
            } else {
                let end =
                    rest.find(|c: char| c == '=' || c == ',' || c == '}' || c.is_whitespace())?;
                (rest[..end].to_string(), &rest[end..])
            };
            let r = r.trim_start();
            rest = match r.strip_prefix('=') {
                Some(r) => {
                    let (value, r) = quoted(r.trim_start())?;
                    labels.push((key, value));
                    r
                }
                // A quoted name inside the braces is the metric's.
                None if name.is_empty() => {
                    name = key;
                    r
                }
                None => return None,
            }
            .trim_start();
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if !rest.starts_with('}') {
                return None;
            }
        }
    }
    if name.is_empty() || !rest.starts_with(char::is_whitespace) {
        return None;
    }
    Some(Sample {
        name,
        labels,
        rest: rest.trim_start(),
    })
}

/// `"..."` at the start of `s`, unescaped, and what follows the closing quote.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.strip_prefix('"')?.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[1 + i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// One probe on a fresh connection, as the kubelet makes it: the time to the whole answer.
pub async fn probe(port: u16, path: &str) -> (u16, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = std::time::Instant::now();
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer);
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, started.elapsed())
}

/// An engine on loopback speaking HTTP/1.1 with keep-alive, as seen from [`keep_alive_engine`].
pub struct KeepAlive {
    /// Its origin, `http://127.0.0.1:PORT`.
    pub url: String,
    /// Requests that met a close.
    pub closed: Arc<AtomicUsize>,
    /// The request line of every request that arrived, answered or met a close.
    pub requests: Arc<Mutex<Vec<String>>>,
}

/// An engine on loopback speaking HTTP/1.1 with keep-alive as uvicorn (vLLM, SGLang) and
/// cpp-httplib (llama-server) do. With `close_idle`, its idle connections time out: a request
/// that arrives on a kept-alive connection idle that long meets the close (closed without an
/// answer, as when the server's timer fires while the request is on its way). Answers
/// `/metrics` with `page`, `/is_sleeping` as vLLM does when awake, and anything else with
/// `ok`, each after `before_answer` ran.
pub async fn keep_alive_engine(
    page: &'static str,
    close_idle: Option<Duration>,
    before_answer: impl Fn() + Send + Sync + 'static,
) -> KeepAlive {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let closed = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (closed.clone(), requests.clone());
    let before_answer = Arc::new(before_answer);
    tokio::spawn(async move {
        // Bounded: a handful of connections, one request every second or few, for ~20 s.
        while let Ok((mut tcp, _)) = listener.accept().await {
            let (count, log) = (count.clone(), log.clone());
            let before_answer = before_answer.clone();
            tokio::spawn(async move {
                let line = |head: &[u8]| {
                    let end = head.iter().position(|&b| b == b'\r').unwrap_or(head.len());
                    String::from_utf8_lossy(&head[..end]).into_owned()
                };
                let mut idle_since = std::time::Instant::now();
                let mut answered = false;
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = tcp.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    if answered
                        && head.is_empty()
                        && close_idle.is_some_and(|d| idle_since.elapsed() >= d)
                    {
                        log.lock().expect("lock").push(line(&buf[..n]));
                        count.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let request = line(&head);
                    let (content_type, body) = if request.starts_with("GET /metrics") {
                        ("text/plain; version=0.0.4", page)
                    } else if request.starts_with("GET /is_sleeping") {
                        // vLLM 0.32, vllm/entrypoints/serve/dev/sleep/api_router.py `is_sleeping`.
                        ("application/json", "{\"is_sleeping\":false}")
                    } else {
                        ("text/plain", "ok")
                    };
                    log.lock().expect("lock").push(request);
                    head.drain(..end + 4);
                    before_answer();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tcp.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    idle_since = std::time::Instant::now();
                    answered = true;
                }
            });
        }
    });
    KeepAlive {
        url: format!("http://{addr}"),
        closed,
        requests,
    }
}
