//! Request heads a client controls, on every route: header values that become numbers or
//! durations (`X-Prometheus-Scrape-Timeout-Seconds` from `1e20` to `NaN`), `Accept`,
//! `Accept-Encoding`, `Authorization`, query strings with control characters and percent
//! escapes. Whatever they hold, sysport answers with a well-formed HTTP response (never an empty
//! reply from a panicking handler), and keeps serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\"} 1\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{engine=\"0\"} 2\n";

/// Every route sysport serves, and one it does not.
const PATHS: [&str; 9] = [
    "/metrics",
    "/metrics/router",
    "/health",
    "/live",
    "/live/engine",
    "/",
    "/status",
    "/metrics/none",
    "/nope",
];

/// What a header that should hold a number may hold instead.
fn numberish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        any::<i64>().prop_map(|i| i.to_string()),
        (0u32..400).prop_map(|e| format!("1e{e}")),
        (0u32..400).prop_map(|e| format!("-1e{e}")),
        Just("NaN".to_owned()),
        Just("inf".to_owned()),
        Just("-infinity".to_owned()),
        Just("1e20".to_owned()),
        Just("18446744073709551616".to_owned()),
        "[ -~]{0,24}",
    ]
}

/// A header line's value: printable ASCII and tabs (what HTTP allows in a field value).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![numberish(), "[\t -~]{0,40}"]
}

fn header() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        Just("X-Prometheus-Scrape-Timeout-Seconds".to_owned()),
        Just("Accept".to_owned()),
        Just("Accept-Encoding".to_owned()),
        Just("Authorization".to_owned()),
        Just("If-Modified-Since".to_owned()),
        Just("Content-Length".to_owned()),
        Just("Range".to_owned()),
        "[A-Za-z][A-Za-z0-9-]{0,12}",
    ];
    (name, value())
}

/// A query string: `name=` parameters and anything else, percent escapes included.
fn query() -> impl Strategy<Value = String> {
    let param = prop_oneof![
        "[a-z:_]{1,12}".prop_map(|n| format!("name={n}")),
        "[!-~]{0,16}".prop_map(|s| s.replace(['#', ' '], "")),
        proptest::collection::vec(any::<u8>(), 0..6).prop_map(|bytes| {
            let escaped: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
            format!("name={escaped}")
        }),
    ];
    proptest::option::of(proptest::collection::vec(param, 0..4).prop_map(|p| p.join("&")))
        .prop_map(|q| q.map_or(String::new(), |q| format!("?{q}")))
}

/// Sends one request head and reads the whole answer (the request asks to close).
fn exchange(addr: &str, head: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("send");
    let mut out = Vec::new();
    // A reset after the answer is not the server's failure; an empty answer is.
    let _ = s.read_to_end(&mut out);
    out
}

/// The status code of a well-formed HTTP/1.1 answer, or what is wrong with it.
fn status_of(answer: &[u8]) -> Result<u16, String> {
    let text = String::from_utf8_lossy(answer);
    let line = text.lines().next().unwrap_or("");
    let code = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("no HTTP status line in {:?}", &text[..text.len().min(200)]))?;
    if !text.contains("\r\n\r\n") {
        return Err(format!("answer {line:?} has no end of head"));
    }
    Ok(code)
}

fn request(path: &str, query: &str, headers: &[(String, String)]) -> String {
    let mut head = format!("GET {path}{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    head
}

#[test]
fn any_request_head_on_any_route_gets_a_well_formed_answer() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (upstream, sp) = rt.block_on(async {
        let up = Upstream::start(Reply::text(PAGE)).await;
        let sp = start_single(&up.metrics_url(), &["vllm:"]).await;
        (up, sp)
    });
    let addr = sp.base.trim_start_matches("http://").to_owned();

    // The values found to panic the handler, on each route that reads them.
    for path in [
        "/metrics",
        "/metrics/router",
        "/metrics?name=vllm:num_requests_running",
    ] {
        for v in ["1e20", "1.85e19", "1e308", "NaN", "inf", "-1"] {
            let (path, query) = path
                .split_once('?')
                .map_or((path, ""), |(p, _)| (p, "?name=vllm:num_requests_running"));
            let head = request(
                path,
                query,
                &[("X-Prometheus-Scrape-Timeout-Seconds".into(), v.into())],
            );
            let answer = exchange(&addr, &head);
            assert_eq!(
                status_of(&answer),
                Ok(200),
                "{path}{query} with timeout {v}"
            );
        }
    }

    let cases = if std::env::var_os("CI").is_some() {
        160
    } else {
        96
    };
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let strategy = (
        proptest::sample::select(PATHS.as_slice()),
        query(),
        proptest::collection::vec(header(), 0..5),
    );
    runner
        .run(&strategy, |(path, query, headers)| {
            let head = request(path, &query, &headers);
            let answer = exchange(&addr, &head);
            match status_of(&answer) {
                Ok(code) => prop_assert!(
                    (200..500).contains(&code) || code == 503,
                    "{head:?} answered {code}"
                ),
                Err(e) => prop_assert!(false, "{head:?}: {e}"),
            }
            Ok(())
        })
        .expect("every request head gets a well-formed answer");

    // Still serving, and no scrape was lost to a panic.
    let answer = exchange(&addr, &request("/live", "", &[]));
    assert_eq!(status_of(&answer), Ok(200));
    drop(upstream);
    rt.block_on(sp.shutdown()).expect("clean shutdown");
}
