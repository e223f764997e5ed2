//! Upstreams that lie: a body whose Content-Encoding, Content-Type or status says something
//! else than it is, or that is no exposition at all. Each either reads correctly or makes that
//! upstream down with a reason naming the lie (in `upstream_scrapes_total{result}`, the log and
//! `/health`), never up with its series silently gone; readiness follows, and the other
//! upstream flows throughout.

use std::io::Write;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
use serde_json::Value;

use super::bodies;
use super::upstream::{Fault, RawUpstream};
use crate::common::metric;
use crate::common::sidecar::{Sidecar, UpstreamSpec};
use crate::{Case, Expect, series};

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A page as prometheus_client renders text 0.0.4: a counter with its `_created`, a gauge.
const PAGE: &str = "\
# HELP vllm:lie_requests_total Requests served.
# TYPE vllm:lie_requests_total counter
vllm:lie_requests_total{engine=\"0\"} 7.0
# HELP vllm:lie_requests_created Requests served.
# TYPE vllm:lie_requests_created gauge
vllm:lie_requests_created{engine=\"0\"} 1.7e+09
# HELP vllm:lie_waiting Requests waiting.
# TYPE vllm:lie_waiting gauge
vllm:lie_waiting{engine=\"0\"} 2.0
";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).expect("in memory");
    e.finish().expect("in memory")
}

/// A 200 with these headers besides the content type.
fn respond(content_type: &str, headers: &[(&'static str, &str)], body: impl Into<Bytes>) -> Fault {
    let mut all = vec![("Content-Type", content_type.to_string())];
    all.extend(headers.iter().map(|&(k, v)| (k, v.to_string())));
    Fault::Respond {
        status: "200 OK",
        headers: all,
        body: body.into(),
    }
}

/// Runs the fault case with both upstreams required, then checks readiness and the log: down,
/// the faulty upstream makes `/health` 503 with an error saying each of `says`, and the log's
/// "upstream is down" line says them too; up, `/health` is 200. Returns the `/metrics` body.
async fn lie(test: &str, fault: Fault, expect: Expect, says: &[&str]) -> String {
    let up = RawUpstream::start(fault).await;
    let url = up.url();
    let mut case = Case::new(test, &url, expect);
    case.required = true;
    let run = case.start().await;
    let (status, health) = checked(&run.sp, &["faulty", "healthy"]).await;
    let faulty = &health["upstreams"]["faulty"];
    assert_eq!(
        health["upstreams"]["healthy"]["status"], "ready",
        "{health}"
    );
    if let Expect::Down(_) = expect {
        assert_eq!(status, 503, "{health}");
        assert_eq!(faulty["status"], "notready", "{health}");
        let error = faulty["last_error"].as_str().expect("an error");
        let log = run.sp.log();
        let down = log
            .lines()
            .find(|l| l.contains("upstream is down") && l.contains("faulty"))
            .unwrap_or_else(|| panic!("no log line for the faulty upstream:\n{log}"));
        for said in says {
            assert!(
                error.contains(said),
                "/health error {error:?} lacks {said:?}"
            );
            // The log writes a value from outside quoted, with its quotes and backslashes escaped.
            let logged = said.replace('\\', "\\\\").replace('"', "\\\"");
            assert!(down.contains(&logged), "log line {down:?} lacks {logged:?}");
        }
    } else {
        assert_eq!(status, 200, "{health}");
        assert_eq!(faulty["status"], "ready", "{health}");
    }
    assert!(up.requests() >= 1);
    run.finish().await
}

/// `/health` once `upstreams` have been checked (sysport checks them as it starts).
async fn checked(sp: &Sidecar, upstreams: &[&str]) -> (u16, Value) {
    for _ in 0..100 {
        let r = sp.get("/health", &[]).await;
        let health: Value = serde_json::from_slice(&r.body).expect("/health is JSON");
        if upstreams
            .iter()
            .all(|u| health["upstreams"][u]["checked"] == true)
        {
            return (r.status, health);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the upstreams were not checked within 5 s");
}

fn assert_page(body: &str) {
    assert_eq!(
        metric(body, "vllm:lie_requests_total").value(),
        7.0,
        "{body}"
    );
    assert_eq!(metric(body, "vllm:lie_requests_created").value(), 1.7e9);
    assert_eq!(metric(body, "vllm:lie_waiting").value(), 2.0);
    assert_eq!(series(body, "faulty", "malformed"), 0.0, "{body}");
}

fn assert_no_page(body: &str) {
    assert!(!body.contains("vllm:lie_"), "{body}");
}

#[tokio::test]
async fn deflate_as_zlib_is_decoded() {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
    e.write_all(PAGE.as_bytes()).expect("in memory");
    let body = e.finish().expect("in memory");
    let fault = respond(TEXT, &[("Content-Encoding", "deflate")], body);
    assert_page(&lie("deflate-zlib", fault, Expect::Up, &[]).await);
}

#[tokio::test]
async fn deflate_without_the_zlib_wrapper_is_decoded() {
    let mut e = DeflateEncoder::new(Vec::new(), Compression::fast());
    e.write_all(PAGE.as_bytes()).expect("in memory");
    let body = e.finish().expect("in memory");
    let fault = respond(TEXT, &[("Content-Encoding", "deflate")], body);
    assert_page(&lie("deflate-raw", fault, Expect::Up, &[]).await);
}

#[tokio::test]
async fn brotli_is_refused_naming_the_encoding() {
    let fault = respond(TEXT, &[("Content-Encoding", "br")], gzip(PAGE.as_bytes()));
    let body = lie(
        "br",
        fault,
        Expect::Down("body_error"),
        &["Content-Encoding \"br\"", "cannot be decoded"],
    )
    .await;
    assert_no_page(&body);
}

#[tokio::test]
async fn gzip_applied_twice_and_said_in_one_header_is_decoded_twice() {
    let fault = respond(
        TEXT,
        &[("Content-Encoding", "gzip, gzip")],
        gzip(&gzip(PAGE.as_bytes())),
    );
    assert_page(&lie("gzip-gzip-one-header", fault, Expect::Up, &[]).await);
}

#[tokio::test]
async fn gzip_applied_twice_and_said_in_two_headers_is_decoded_twice() {
    let fault = respond(
        TEXT,
        &[("Content-Encoding", "gzip"), ("Content-Encoding", "gzip")],
        gzip(&gzip(PAGE.as_bytes())),
    );
    assert_page(&lie("gzip-gzip-two-headers", fault, Expect::Up, &[]).await);
}

#[tokio::test]
async fn gzip_said_twice_but_applied_once_is_a_body_error() {
    for (test, headers) in [
        (
            "gzip-once-said-twice",
            &[("Content-Encoding", "gzip, gzip")][..],
        ),
        (
            "gzip-once-two-headers",
            &[("Content-Encoding", "gzip"), ("Content-Encoding", "gzip")],
        ),
    ] {
        let fault = respond(TEXT, headers, gzip(PAGE.as_bytes()));
        let body = lie(
            test,
            fault,
            Expect::Down("body_error"),
            &["Content-Encoding \"gzip, gzip\""],
        )
        .await;
        assert_no_page(&body);
    }
}

#[tokio::test]
async fn a_gzip_bomb_compressed_again_stops_at_the_body_limit() {
    let bomb = gzip(&bodies::gzip_bomb());
    let fault = respond(TEXT, &[("Content-Encoding", "gzip, gzip")], bomb);
    lie(
        "gzip-bomb-twice",
        fault,
        Expect::Down("too_large"),
        &["max_body_bytes limit of 16777216 bytes"],
    )
    .await;
}

#[tokio::test]
async fn a_redirect_out_of_the_configuration_is_not_followed() {
    let elsewhere = RawUpstream::start(Fault::text(PAGE)).await;
    let location = elsewhere.url();
    let fault = Fault::Respond {
        status: "302 Found",
        headers: vec![("Location", location.clone())],
        body: Bytes::new(),
    };
    let body = lie(
        "redirect-elsewhere",
        fault,
        Expect::Down("redirect"),
        &[&location, "HTTP 302", "not followed"],
    )
    .await;
    assert_no_page(&body);
    assert_eq!(elsewhere.requests(), 0, "the target was never scraped");
}

#[tokio::test]
async fn a_health_url_that_redirects_is_not_healthy() {
    let elsewhere = RawUpstream::start(Fault::text("ok\n")).await;
    let location = format!("http://{}/health", elsewhere.addr);
    let health = RawUpstream::start(Fault::Respond {
        status: "301 Moved Permanently",
        headers: vec![("Location", location.clone())],
        body: Bytes::new(),
    })
    .await;
    let metrics = RawUpstream::start(Fault::text(PAGE)).await;
    let (metrics_url, health_url) = (metrics.url(), format!("http://{}/health", health.addr));
    let spec = UpstreamSpec {
        name: "faulty",
        url: &metrics_url,
        timeout: "1s",
        required: true,
    };
    // Appended to the last upstream's entry.
    let extra = format!("    health_url: {health_url}\n");
    let sp = Sidecar::start("health-redirect", &[spec], &extra).await;
    let (status, report) = checked(&sp, &["faulty"]).await;
    assert_eq!(status, 503, "{report}");
    let error = report["upstreams"]["faulty"]["last_error"]
        .as_str()
        .expect("an error");
    assert!(error.contains(&location), "{error}");
    assert!(error.contains("HTTP 301"), "{error}");
    assert!(sp.log().contains(&location), "{}", sp.log());
    assert_eq!(elsewhere.requests(), 0, "the redirect was not followed");
    // The metrics themselves are fine: only readiness says no.
    let page = String::from_utf8(sp.get("/metrics", &[]).await.body).expect("UTF-8");
    assert_eq!(metric(&page, "vllm:lie_waiting").value(), 2.0);
    sp.stop().await;
}

#[tokio::test]
async fn text_labelled_openmetrics_without_eof_is_read_as_text_and_counted() {
    let fault = respond(OPENMETRICS, &[], PAGE);
    let body = lie("openmetrics-without-eof", fault, Expect::Up, &[]).await;
    assert_page(&body);
    assert!(
        body.contains("# TYPE vllm:lie_requests_total counter\n"),
        "{body}"
    );
    let mismatches = |upstream| {
        metric(&body, "dynamo_sysport_upstream_format_mismatches_total")
            .label("upstream", upstream)
            .value()
    };
    assert!(mismatches("faulty") >= 1.0, "{body}");
    assert_eq!(mismatches("healthy"), 0.0);
}

#[tokio::test]
async fn a_leading_byte_order_mark_is_skipped() {
    let page = format!("\u{feff}vllm:lie_first{{engine=\"0\"}} 1.0\n{PAGE}");
    let body = lie("bom", respond(TEXT, &[], page), Expect::Up, &[]).await;
    assert_page(&body);
    assert_eq!(metric(&body, "vllm:lie_first").value(), 1.0);
    let page = format!("\u{feff}{PAGE}");
    let body = lie("bom-help", respond(TEXT, &[], page), Expect::Up, &[]).await;
    assert_page(&body);
    assert!(
        body.contains("# HELP vllm:lie_requests_total Requests served.\n"),
        "{body}"
    );
}

/// What trtllm-serve's `/metrics` answers: JSON iteration statistics.
const TRTLLM_JSON: &str = r#"[{"cpuMemUsage": 1048576, "gpuMemUsage": 21474836480, "iter": 41,
 "iterLatencyMS": 12.5, "numActiveRequests": 3, "maxNumActiveRequests": 64,
 "kvCacheStats": {"freeNumBlocks": 880, "maxNumBlocks": 1024, "usedNumBlocks": 144}}]
"#;

#[tokio::test]
async fn a_json_body_is_not_an_exposition() {
    let fault = respond("application/json", &[], TRTLLM_JSON);
    lie(
        "json",
        fault,
        Expect::Down("not_exposition"),
        &["application/json", "expected the Prometheus text format"],
    )
    .await;
}

#[tokio::test]
async fn an_html_error_page_is_not_an_exposition() {
    let html = "<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n\
                <body>\n<center><h1>502 Bad Gateway</h1></center>\n</body>\n</html>\n";
    let fault = respond("text/html; charset=utf-8", &[], html);
    lie(
        "html",
        fault,
        Expect::Down("not_exposition"),
        &["text/html", "not an exposition"],
    )
    .await;
}

#[tokio::test]
async fn an_empty_body_is_an_empty_exposition() {
    let body = lie("empty", respond(TEXT, &[], ""), Expect::Up, &[]).await;
    assert_eq!(series(&body, "faulty", "kept"), 0.0);
}

#[tokio::test]
async fn a_page_over_a_parse_limit_names_the_limit_and_the_line() {
    // Line 10 carries 65 labels, one over the default max_labels.
    let labels: Vec<String> = (0..65).map(|i| format!("l{i}=\"v\"")).collect();
    let page = format!("{PAGE}vllm:lie_wide{{{}}} 1.0\n", labels.join(","));
    lie(
        "parse-limit",
        respond(TEXT, &[], page),
        Expect::Down("too_large"),
        &["line 10", "max_labels"],
    )
    .await;
}

#[tokio::test]
async fn the_first_malformed_line_is_logged_with_its_rule_once_while_it_stays() {
    let page = format!("{PAGE}vllm:lie_broken{{engine=\"0\"}} not-a-number\n");
    let up = RawUpstream::start(respond(TEXT, &[], page)).await;
    let url = up.url();
    let mut case = Case::new("first-malformed", &url, Expect::Up);
    case.again = 3;
    let run = case.start().await;
    assert_eq!(
        series(&run.body, "faulty", "malformed"),
        1.0,
        "{}",
        run.body
    );
    assert!(up.requests() >= 4, "{} fetches", up.requests());
    let log = run.sp.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("malformed lines dropped") && l.contains("faulty"))
        .collect();
    assert_eq!(
        said.len(),
        1,
        "one line while the page stays the same:\n{log}"
    );
    assert!(said[0].contains("the first is line 10"), "{}", said[0]);
    assert!(said[0].contains("value"), "the rule it broke: {}", said[0]);
    run.finish().await;
}
