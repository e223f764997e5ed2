//! Fault injection: the real `sysport` binary in front of two upstreams, one healthy and one that
//! misbehaves at the TCP, HTTP or exposition level. Whatever the faulty one does, `/metrics`
//! answers 200 within the faulty upstream's timeout plus a margin, the body is valid text 0.0.4
//! carrying every healthy series, the fault shows in `dynamo_sysport_upstream_up` and
//! `dynamo_sysport_upstream_scrapes_total{result}` and in `/status` (its error in words), `/live`
//! stays 200 and peak RSS stays bounded.
//!
//! `cargo test --test faults -- --nocapture` prints one line per fault: result, time, VmHWM.

mod common;
/// The faults' parts, in `tests/faults/`.
mod faults {
    pub(crate) mod bodies;
    pub(crate) mod expo;
    pub(crate) mod lies;
    pub(crate) mod upstream;
}

use std::time::Duration;

use bytes::Bytes;
use common::metric;
use common::sidecar::{Sidecar, UpstreamSpec};
use faults::upstream::{Fault, RawUpstream, refused_url};
use faults::{bodies, expo};

/// The faulty upstream's `timeout`, and how long `/metrics` may take with it.
const TIMEOUT: &str = "1s";
const DEADLINE: Duration = Duration::from_millis(1500);
/// Peak RSS allowed to sysport, in KiB.
const MAX_HWM_KIB: u64 = 128 << 10;

/// What the faulty upstream should look like afterwards.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Down for the scrape, counted under this `result`.
    Down(&'static str),
    /// Up: its bad lines are dropped, the rest flows.
    Up,
    /// Within every limit yet costly: taken whole (up) or refused as `too_large`; either way
    /// memory stays bounded.
    UpOrTooLarge,
}

struct Case<'a> {
    test: &'a str,
    faulty_url: &'a str,
    expect: Expect,
    timeout: &'a str,
    headers: &'a [(&'a str, &'a str)],
    deadline: Duration,
    /// The fault costs CPU after the download (parsing up to a limit), which the upstream
    /// timeout does not bound: a slow machine may answer the first scrape at the deadline with
    /// `timeout` while the parse finishes, and count the expected result a moment later.
    reason_may_lag: bool,
    /// More `/metrics` scrapes after the checked one, before peak memory is read.
    again: usize,
    /// Whether readiness needs the faulty upstream (and the healthy one).
    required: bool,
}

impl<'a> Case<'a> {
    fn new(test: &'a str, faulty_url: &'a str, expect: Expect) -> Case<'a> {
        Case {
            test,
            faulty_url,
            expect,
            timeout: TIMEOUT,
            headers: &[],
            deadline: DEADLINE,
            reason_may_lag: false,
            again: 0,
            required: false,
        }
    }

    /// Runs sysport against the fault, checks what every fault must leave intact, and returns
    /// the `/metrics` body for the fault's own checks.
    async fn run(self) -> String {
        self.start().await.finish().await
    }

    /// [`Case::run`] up to the checks of `/live` and memory, which [`Running::finish`] makes.
    async fn start(self) -> Running {
        let healthy = RawUpstream::start(Fault::text(bodies::HEALTHY)).await;
        let healthy_url = healthy.url();
        let faulty = UpstreamSpec {
            name: "faulty",
            url: self.faulty_url,
            timeout: self.timeout,
            required: self.required,
        };
        let healthy = UpstreamSpec {
            name: "healthy",
            url: &healthy_url,
            timeout: TIMEOUT,
            required: self.required,
        };
        let sp = Sidecar::start(self.test, &[faulty, healthy], "").await;
        let r = sp.get("/metrics", self.headers).await;
        for _ in 0..self.again {
            assert_eq!(sp.get("/metrics", self.headers).await.status, 200);
        }
        let hwm = sp.vm_hwm_kib();
        let results = results(&String::from_utf8_lossy(&r.body), "faulty");
        println!(
            "fault {}: status {} in {:.3} s, faulty results {:?}, VmHWM {} KiB",
            self.test,
            r.status,
            r.elapsed.as_secs_f64(),
            results,
            hwm
        );
        assert_eq!(r.status, 200, "/metrics status");
        assert!(
            r.elapsed < self.deadline,
            "/metrics took {:?}, over {:?}",
            r.elapsed,
            self.deadline
        );
        if let Err(e) = expo::check_text(&r.body) {
            panic!("/metrics is not a valid exposition: {e}");
        }
        let body = String::from_utf8(r.body).expect("checked as UTF-8");
        for line in bodies::healthy_series() {
            assert!(
                body.lines().any(|l| l == line),
                "healthy series missing: {line}\n{body}"
            );
        }
        assert!(!body.contains("python_gc"), "unkept families are dropped");
        let up = |upstream| {
            metric(&body, "dynamo_sysport_upstream_up")
                .label("upstream", upstream)
                .value()
        };
        assert_eq!(up("healthy"), 1.0);
        let reason = match self.expect {
            Expect::Down(reason) => reason,
            Expect::Up => "success",
            Expect::UpOrTooLarge if up("faulty") == 1.0 => "success",
            Expect::UpOrTooLarge => "too_large",
        };
        let expected_up = if reason == "success" { 1.0 } else { 0.0 };
        assert_eq!(up("faulty"), expected_up, "faulty upstream_up");
        if !counted(&results, reason) {
            assert!(
                self.reason_may_lag && counted(&results, "timeout"),
                "expected result=\"{reason}\" for the faulty upstream, got {results:?}"
            );
            let later = lagging_result(&sp, reason).await;
            println!(
                "fault {}: first scrape timed out while parsing, then {later:?}",
                self.test
            );
        }
        status_agrees(&sp, reason).await;
        Running { sp, body, hwm }
    }
}

/// `/status` says of the faulty upstream what `/metrics` said, the error in words. Polled
/// until its last scrape has that result: a fetch that outlives a request's deadline records
/// its own result when it ends.
async fn status_agrees(sp: &Sidecar, reason: &str) {
    let mut faulty = serde_json::Value::Null;
    for _ in 0..50 {
        let r = sp.get("/status", &[]).await;
        assert_eq!(r.status, 200, "/status");
        let status: serde_json::Value = serde_json::from_slice(&r.body).expect("/status is JSON");
        faulty = status["upstreams"][0].clone();
        assert_eq!(faulty["name"], "faulty");
        if faulty["last_scrape"]["result"] == reason {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(faulty["last_scrape"]["result"], reason, "{faulty}");
    assert_eq!(faulty["up"], reason == "success", "{faulty}");
    if reason != "success" {
        let words = match reason {
            "connect_error" => "connection refused",
            "timeout" => "timed out after ",
            "http_status" => "HTTP ",
            "redirect" => "redirect to ",
            "not_exposition" => "not an exposition (",
            "too_large" => "response over the ",
            "reset" => "connection reset or closed mid-response",
            "body_error" => "reading the response failed",
            other => panic!("no words for result {other:?}"),
        };
        let error = faulty["last_error"].as_str().expect("an error");
        assert!(error.starts_with(words), "{reason}: {error:?}");
    }
}

/// sysport after the first checks of a fault, still running.
struct Running {
    sp: Sidecar,
    /// The checked `/metrics` body.
    body: String,
    /// Peak RSS after the scrapes, in KiB.
    hwm: u64,
}

impl Running {
    /// Checks `/live` and peak memory, stops sysport, returns the `/metrics` body.
    async fn finish(self) -> String {
        assert_eq!(self.sp.get("/live", &[]).await.status, 200, "/live");
        let hwm = self.hwm;
        assert!(
            hwm < MAX_HWM_KIB,
            "sysport VmHWM {hwm} KiB, over {MAX_HWM_KIB} KiB"
        );
        self.sp.stop().await;
        self.body
    }
}

/// Whether `result` was counted at least once.
fn counted(results: &[(String, f64)], result: &str) -> bool {
    results.iter().any(|(r, n)| r == result && *n >= 1.0)
}

/// Polls sysport's counters (5 s at most) until the faulty upstream's `result` shows.
async fn lagging_result(sp: &Sidecar, result: &str) -> Vec<(String, f64)> {
    let mut later = Vec::new();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r = sp
            .get("/metrics?name=dynamo_sysport_upstream_scrapes_total", &[])
            .await;
        assert_eq!(r.status, 200);
        later = results(&String::from_utf8_lossy(&r.body), "faulty");
        if counted(&later, result) {
            return later;
        }
    }
    panic!("expected result=\"{result}\" for the faulty upstream, got {later:?}");
}

/// `(result, count)` of `dynamo_sysport_upstream_scrapes_total` for one upstream.
fn results(body: &str, upstream: &str) -> Vec<(String, f64)> {
    let want = format!("upstream=\"{upstream}\"");
    body.lines()
        .filter(|l| l.starts_with("dynamo_sysport_upstream_scrapes_total{") && l.contains(&want))
        .filter_map(|l| {
            let result = l.split("result=\"").nth(1)?.split('"').next()?;
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((result.to_string(), value))
        })
        .collect()
}

fn series(body: &str, upstream: &str, outcome: &str) -> f64 {
    metric(body, "dynamo_sysport_upstream_series")
        .label("upstream", upstream)
        .label("outcome", outcome)
        .value()
}

#[tokio::test]
async fn connection_refused() {
    let url = refused_url();
    Case::new("refused", &url, Expect::Down("connect_error"))
        .run()
        .await;
}

#[tokio::test]
async fn accepts_but_never_answers() {
    let up = RawUpstream::start(Fault::Silent).await;
    Case::new("silent", &up.url(), Expect::Down("timeout"))
        .run()
        .await;
    assert!(up.requests() >= 1);
}

#[tokio::test]
async fn headers_then_stall_mid_body() {
    let up = RawUpstream::start(Fault::StallMidBody).await;
    let body = Case::new("stall-mid-body", &up.url(), Expect::Down("timeout"))
        .run()
        .await;
    assert!(!body.contains("vllm:stalled"), "a partial body is not used");
}

#[tokio::test]
async fn trickles_one_byte_per_second() {
    let up = RawUpstream::start(Fault::Trickle(Bytes::from_static(
        bodies::HEALTHY.as_bytes(),
    )))
    .await;
    Case::new("slowloris", &up.url(), Expect::Down("timeout"))
        .run()
        .await;
}

#[tokio::test]
async fn http_500() {
    let up = RawUpstream::start(Fault::status("500 Internal Server Error")).await;
    Case::new("http-500", &up.url(), Expect::Down("http_status"))
        .run()
        .await;
}

#[tokio::test]
async fn http_404() {
    let up = RawUpstream::start(Fault::status("404 Not Found")).await;
    Case::new("http-404", &up.url(), Expect::Down("http_status"))
        .run()
        .await;
}

#[tokio::test]
async fn redirect_loop() {
    let up = RawUpstream::start(Fault::RedirectToSelf).await;
    Case::new("redirect-loop", &up.url(), Expect::Down("redirect"))
        .run()
        .await;
    // One request for the check at start-up and one for the scrape, or one they shared.
    assert!(
        (1..=2).contains(&up.requests()),
        "the redirect is not followed: {} requests",
        up.requests()
    );
}

#[tokio::test]
async fn garbage_and_binary_body_is_dropped_line_by_line() {
    let up = RawUpstream::start(Fault::text(bodies::garbage())).await;
    let body = Case::new("garbage", &up.url(), Expect::Up).run().await;
    assert!(
        series(&body, "faulty", "malformed") > 0.0,
        "malformed lines are counted"
    );
    assert_eq!(
        metric(&body, "vllm:faulty_ok").label("kept", "yes").value(),
        1.0
    );
    assert_eq!(
        metric(&body, "vllm:faulty_after").value(),
        2.0,
        "lines after the garbage still flow"
    );
    for bad in ["vllm:broken", "vllm:no_value", "vllm:bad_value", "json"] {
        assert!(!body.contains(bad), "{bad} was passed through");
    }
}

#[tokio::test]
async fn invalid_utf8_label_values_drop_only_their_lines() {
    let up = RawUpstream::start(Fault::text(bodies::invalid_utf8_labels())).await;
    let body = Case::new("invalid-utf8", &up.url(), Expect::Up).run().await;
    assert_eq!(
        metric(&body, "vllm:utf8_test").label("v", "ok").value(),
        1.0
    );
    assert_eq!(
        metric(&body, "vllm:utf8_test")
            .label("v", "caf\u{e9} \u{1f680}")
            .value(),
        5.0
    );
    assert_eq!(
        metric(&body, "vllm:utf8_test").count(),
        2,
        "the three invalid lines are dropped"
    );
    assert_eq!(metric(&body, "vllm:utf8_after").value(), 6.0);
    assert!(series(&body, "faulty", "malformed") >= 3.0);
}

#[tokio::test]
async fn body_of_64_mib_without_length() {
    let line = b"vllm:big{pad=\"0123456789abcdef0123456789abcdef\"} 1\n";
    let chunk: Vec<u8> = line.iter().copied().cycle().take(64 << 10).collect();
    let up = RawUpstream::start(Fault::Stream {
        chunk: Bytes::from(chunk),
        times: 1024,
    })
    .await;
    Case::new("64mib-streamed", &up.url(), Expect::Down("too_large"))
        .run()
        .await;
}

#[tokio::test]
async fn body_of_64_mib_with_length() {
    let body = Bytes::from(vec![b'#'; 64 << 20]);
    let up = RawUpstream::start(Fault::text(body)).await;
    Case::new("64mib-content-length", &up.url(), Expect::Down("too_large"))
        .run()
        .await;
}

#[tokio::test]
async fn gzip_bomb() {
    let bomb = bodies::gzip_bomb();
    assert!(bomb.len() < 2 << 20, "the bomb is {} bytes", bomb.len());
    let up = RawUpstream::start(Fault::Respond {
        status: "200 OK",
        headers: vec![
            ("Content-Type", "text/plain; version=0.0.4".to_string()),
            ("Content-Encoding", "gzip".to_string()),
        ],
        body: bomb,
    })
    .await;
    Case::new("gzip-bomb", &up.url(), Expect::Down("too_large"))
        .run()
        .await;
}

#[tokio::test]
async fn single_line_of_10_mib() {
    let up = RawUpstream::start(Fault::text(bodies::long_line(10 << 20))).await;
    Case::new("10mib-line", &up.url(), Expect::Down("too_large"))
        .run()
        .await;
}

#[tokio::test]
async fn a_million_series_under_the_body_limit() {
    let body = bodies::many_series(1_000_000);
    assert!(body.len() < 16 << 20, "the body is {} bytes", body.len());
    let up = RawUpstream::start(Fault::text(body)).await;
    let url = up.url();
    let mut case = Case::new("1m-series", &url, Expect::Down("too_large"));
    case.reason_may_lag = true;
    case.run().await;
}

/// The costliest body the default limits let through: 240,000 series (under `max_series`),
/// each its own family, in 3.3 MB (far under `max_body_bytes`). Taken whole or refused, and
/// scraped a few times as Prometheus would, it must not take sysport's memory past the bound
/// the other faults keep.
#[tokio::test]
async fn a_quarter_million_families_within_every_limit() {
    let body = bodies::many_series(240_000);
    let up = RawUpstream::start(Fault::text(body)).await;
    let url = up.url();
    let mut case = Case::new("240k-families", &url, Expect::UpOrTooLarge);
    // Time is not the point here: let a debug build finish the parse.
    case.timeout = "5s";
    case.deadline = Duration::from_millis(5500);
    case.again = 3;
    case.run().await;
}

#[tokio::test]
async fn openmetrics_with_two_eof_keeps_both_halves() {
    let om = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    let up = RawUpstream::start(Fault::ok(om, bodies::OPENMETRICS_TWO_EOF)).await;
    let body = Case::new("openmetrics-two-eof", &up.url(), Expect::Up)
        .run()
        .await;
    assert_eq!(
        metric(&body, "vllm:om_first_total")
            .label("engine", "0")
            .value(),
        17.0
    );
    assert_eq!(
        metric(&body, "vllm:om_first_created")
            .label("engine", "0")
            .value(),
        1.7e9
    );
    assert_eq!(
        metric(&body, "vllm:om_second").label("engine", "0").value(),
        4.0
    );
    assert!(
        body.contains("# TYPE vllm:om_first_total counter\n"),
        "{body}"
    );
    assert!(
        !body.contains("om_first_created_total"),
        "_created never becomes a _total"
    );
}

#[tokio::test]
async fn interleaved_families_come_out_once_and_contiguous() {
    let up = RawUpstream::start(Fault::text(bodies::INTERLEAVED)).await;
    let body = Case::new("interleaved", &up.url(), Expect::Up).run().await;
    // `expo::check_text` has already refused a split family or a second TYPE.
    let kept: Vec<&str> = body.lines().filter(|l| l.starts_with("vllm:il_")).collect();
    assert_eq!(
        kept,
        [
            "vllm:il_a{x=\"1\"} 1",
            "vllm:il_a{x=\"2\"} 3",
            "vllm:il_a{x=\"3\"} 5",
            "vllm:il_b{x=\"1\"} 2",
            "vllm:il_b{x=\"2\"} 4",
            "vllm:il_b{x=\"3\"} 6",
            "vllm:il_h_bucket{le=\"1\"} 1",
            "vllm:il_h_bucket{le=\"+Inf\"} 2",
            "vllm:il_h_sum 3",
            "vllm:il_h_count 2",
        ],
        "each family once, in first-seen order, samples in upstream order"
    );
    for family in ["vllm:il_a", "vllm:il_b", "vllm:il_h"] {
        assert_eq!(
            body.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family}"
        );
    }
}

#[tokio::test]
async fn connection_reset_after_the_request() {
    let up = RawUpstream::start(Fault::Reset).await;
    Case::new("reset", &up.url(), Expect::Down("reset"))
        .run()
        .await;
}

#[tokio::test]
async fn connection_closed_inside_the_headers() {
    let up = RawUpstream::start(Fault::PartialHeaders).await;
    Case::new("partial-headers", &up.url(), Expect::Down("reset"))
        .run()
        .await;
}

#[tokio::test]
async fn prometheus_scrape_timeout_header_bounds_a_stalled_upstream() {
    let up = RawUpstream::start(Fault::Silent).await;
    let url = up.url();
    let mut case = Case::new("scrape-timeout-header", &url, Expect::Down("timeout"));
    case.timeout = "5s";
    case.headers = &[("X-Prometheus-Scrape-Timeout-Seconds", "0.5")];
    case.deadline = Duration::from_millis(750);
    case.run().await;
}

#[tokio::test]
async fn a_request_whose_deadline_comes_before_the_shared_fetch_counts_and_logs_a_timeout() {
    let up = RawUpstream::start(Fault::Silent).await;
    let url = up.url();
    let faulty = UpstreamSpec {
        name: "faulty",
        url: &url,
        timeout: "10s",
        required: false,
    };
    let sp = Sidecar::start("deadline-joins-fetch", &[faulty], "").await;
    // A scrape without a deadline starts a fetch that waits up to 10 s for the silent upstream;
    // one with Prometheus' 0.5 s joins it and must answer at its own deadline.
    let full = sp.get("/metrics", &[]);
    tokio::pin!(full);
    let bounded = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sp.get(
            "/metrics",
            &[("X-Prometheus-Scrape-Timeout-Seconds", "0.5")],
        )
        .await
    };
    let r = tokio::select! {
        r = bounded => r,
        _ = &mut full => panic!("the silent upstream answered"),
    };
    assert_eq!(r.status, 200);
    assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    let body = String::from_utf8_lossy(&r.body);
    let scrapes = |result| {
        metric(&body, "dynamo_sysport_upstream_scrapes_total")
            .label("upstream", "faulty")
            .label("result", result)
            .count()
    };
    assert_eq!(scrapes("timeout"), 1, "{body}");
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "faulty")
            .value(),
        0.0
    );
    // The shared fetch is still waiting: the line comes from the request's deadline.
    let mut log = String::new();
    for _ in 0..40 {
        log = sp.log();
        if log.contains("upstream is down") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let down = log
        .lines()
        .find(|l| l.contains("upstream is down") && l.contains("faulty"))
        .unwrap_or_else(|| panic!("no log line for the deadline:\n{log}"));
    assert!(down.contains("timed out after 450ms"), "{down}");
}
