use std::collections::HashMap;
use std::io::Read;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::*;

fn incidents() -> (Incidents, Telemetry) {
    let telemetry = Telemetry::new();
    (Incidents::new(&telemetry), telemetry)
}

fn check(page: &str, running: f64, progress: f64) -> Check {
    Check {
        at: SystemTime::now(),
        health_error: None,
        reading: Some(Reading {
            running: Some(running),
            waiting: Some(0.0),
            progress: Some(progress),
            asleep: false,
        }),
        page: Some(Bytes::from(page.to_owned())),
    }
}

/// The open incident of `upstream`.
fn open_of(inc: &Incidents, upstream: &str) -> Incident {
    inc.lock().tracks[upstream]
        .open
        .clone()
        .expect("an open incident")
}

fn gunzip(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

fn count(t: &Telemetry, upstream: &str, kind: &str) -> u64 {
    let mut out = Vec::new();
    t.render_text(None, &[], std::time::Instant::now(), &mut out);
    let text = String::from_utf8(out).expect("text");
    let line =
        format!("dynamo_sysport_incidents_total{{kind=\"{kind}\",upstream=\"{upstream}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |v| v.parse().expect("count"))
}

#[test]
fn a_stall_opens_with_what_came_before_and_closes_after_settling() {
    let (inc, t) = incidents();
    inc.configure(
        &IncidentsConfig::default(),
        "upstreams: []\n".into(),
        HashMap::new(),
    );
    inc.verdict("vllm", "up", false, None);
    for p in 0..5 {
        inc.check("vllm", check(&format!("progress {p}\n"), 2.0, f64::from(p)));
    }
    inc.verdict(
        "vllm",
        "stalled",
        true,
        Some("engine stalled: 2 running".into()),
    );
    inc.check("vllm", check("progress 4\nfrozen 1\n", 2.0, 4.0));
    let list = inc.list();
    assert_eq!(list.as_array().expect("list").len(), 1);
    let id = list[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(list[0]["kind"], "stalled");
    assert_eq!(list[0]["closed_unix_seconds"], Value::Null, "still open");
    let open = open_of(&inc, "vllm");
    assert_eq!(open.before.len(), 5, "the readings before the opening");
    assert_eq!(open.before[4].reading.expect("read").progress, Some(4.0));
    assert_eq!(
        gunzip(&open.page_before.as_ref().expect("before").gzip),
        b"progress 4\n"
    );
    assert_eq!(
        gunzip(&open.page_opening.as_ref().expect("opening").gzip),
        b"progress 4\nfrozen 1\n"
    );
    assert_eq!(count(&t, "vllm", "stalled"), 1);

    inc.verdict("vllm", "up", false, None);
    for p in 5..5 + SETTLE_CHECKS {
        assert_eq!(open_of(&inc, "vllm").id, id, "closes only once settled");
        inc.check("vllm", check("progress 9\n", 1.0, f64::from(p)));
    }
    let kept = inc.get(&id).expect("kept after closing");
    let json: Value = serde_json::from_slice(&kept.json).expect("JSON");
    assert!(json["closed_unix_seconds"].is_number());
    assert_eq!(json["timeline"][0]["reason"], "engine stalled: 2 running");
    assert_eq!(json["timeline"][1]["verdict"], "up");
    assert_eq!(json["readings"].as_array().expect("during").len(), 4);
    assert_eq!(json["config"], "upstreams: []\n");
    assert!(json["duration_seconds"].as_f64().is_some());
}

#[test]
fn down_opens_only_after_having_been_up() {
    let (inc, t) = incidents();
    inc.verdict("sg", "down", true, Some("health check failed".into()));
    assert_eq!(
        inc.list().as_array().expect("list").len(),
        0,
        "never up yet"
    );
    inc.verdict("sg", "up", false, None);
    inc.verdict(
        "sg",
        "down",
        true,
        Some("health check failed: connect".into()),
    );
    let list = inc.list();
    assert_eq!(list[0]["kind"], "down");
    assert_eq!(list[0]["reason"], "health check failed: connect");
    assert_eq!(count(&t, "sg", "down"), 1);
}

#[test]
fn a_flapping_engine_extends_the_open_incident() {
    let (inc, t) = incidents();
    inc.verdict("v", "up", false, None);
    for _ in 0..50 {
        inc.verdict(
            "v",
            "canary_failed",
            true,
            Some("canary failed: timed out".into()),
        );
        inc.check("v", check("x 1\n", 0.0, 1.0));
        inc.verdict("v", "up", false, None);
        inc.check("v", check("x 1\n", 0.0, 1.0));
    }
    let list = inc.list();
    assert_eq!(
        list.as_array().expect("list").len(),
        1,
        "one incident, not fifty"
    );
    let one = open_of(&inc, "v");
    assert_eq!(one.timeline.len(), 100);
    assert_eq!(count(&t, "v", "canary_failed"), 1);
}

#[test]
fn a_changed_start_time_is_a_restart() {
    let (inc, t) = incidents();
    let mut told = inc.watch_restarts();
    inc.verdict("l", "up", false, None);
    inc.check("l", check("process_start_time_seconds 100\n", 0.0, 1.0));
    inc.check("l", check("process_start_time_seconds 100\n", 0.0, 1.0));
    assert_eq!(inc.list().as_array().expect("list").len(), 0);
    assert_eq!(inc.restarts("l"), 0);
    assert!(!told.has_changed().expect("sender kept"));
    inc.check("l", check("process_start_time_seconds 250\n", 0.0, 0.0));
    // Told once, to `/metadata`'s reader, of this upstream only.
    assert_eq!(inc.restarts("l"), 1);
    assert_eq!(inc.restarts("other"), 0);
    assert!(told.has_changed().expect("sender kept"));
    assert_eq!(*told.borrow_and_update(), 1);
    let list = inc.list();
    assert_eq!(list[0]["kind"], "restarted");
    assert!(
        list[0]["reason"]
            .as_str()
            .expect("reason")
            .contains("100 → 250")
    );
    let one = open_of(&inc, "l");
    assert_eq!(
        gunzip(&one.page_opening.as_ref().expect("opening").gzip),
        b"process_start_time_seconds 250\n"
    );
    assert_eq!(count(&t, "l", "restarted"), 1);
}

#[test]
fn every_part_stays_within_its_bound() {
    let (inc, _t) = incidents();
    inc.verdict("v", "up", false, None);
    for _ in 0..MAX_READINGS_TEST {
        inc.check("v", check("x 1\n", 1.0, 1.0));
    }
    inc.verdict("v", "stalled", true, Some("stalled".into()));
    for _ in 0..incident::MAX_TIMELINE + 10 {
        inc.verdict("v", "up", false, None);
    }
    for _ in 0..incident::MAX_READINGS + 5 {
        inc.check("v", check("x 1\n", 1.0, 1.0));
        inc.verdict("v", "stalled", true, None);
    }
    for _ in 0..incident::MAX_CANARIES + 7 {
        inc.canary("v", run());
    }
    let one = open_of(&inc, "v");
    assert!(one.before.len() <= incident::MAX_READINGS);
    assert_eq!(one.timeline.len(), incident::MAX_TIMELINE);
    assert!(one.timeline_dropped > 0);
    assert_eq!(one.during.len(), incident::MAX_READINGS);
    assert_eq!(one.during_dropped, 5);
    assert_eq!(one.canaries.len(), incident::MAX_CANARIES);
    assert_eq!(one.canaries_dropped, 7);

    // 200 incidents in a row leave the latest KEEP closed ones.
    for _ in 0..200 {
        inc.verdict("w", "up", false, None);
        inc.verdict("w", "down", true, Some("gone".into()));
        inc.verdict("w", "up", false, None);
        for _ in 0..SETTLE_CHECKS {
            inc.check("w", check("x 1\n", 0.0, 1.0));
        }
    }
    let closed = inc.lock().closed.len();
    assert_eq!(closed, IncidentsConfig::default().keep);
}

const MAX_READINGS_TEST: usize = incident::MAX_READINGS + 20;

fn run() -> CanaryRun {
    CanaryRun {
        sent: SystemTime::now(),
        took: Duration::from_millis(30),
        result: "timeout",
        error: Some("timed out after 3s".into()),
    }
}

#[test]
fn readings_older_than_the_window_are_not_kept() {
    let (inc, _t) = incidents();
    let old = SystemTime::now() - BEFORE - Duration::from_secs(60);
    let mut c = check("x 1\n", 1.0, 1.0);
    c.at = old;
    inc.check("v", c);
    inc.canary("v", CanaryRun { sent: old, ..run() });
    inc.check("v", check("x 2\n", 1.0, 2.0));
    inc.canary("v", run());
    inc.verdict("v", "up", false, None);
    inc.verdict("v", "stalled", true, None);
    let one = open_of(&inc, "v");
    assert_eq!(
        one.before.len(),
        1,
        "the reading from 11 minutes ago is gone"
    );
    assert_eq!(one.canaries_before.len(), 1);
    let json = one.to_json();
    assert_eq!(json["canaries_before"][0]["result"], "timeout");
    assert_eq!(json["canaries_before"][0]["duration_seconds"], 0.03);
}

#[test]
fn a_16_mb_page_is_kept_compressed_and_whole() {
    let (inc, _t) = incidents();
    let line =
        "vllm:request_success_total{engine=\"0\",model_name=\"m\",finished_reason=\"stop\"} 12\n";
    let page = line.repeat((16 << 20) / line.len() + 1);
    inc.verdict("v", "up", false, None);
    inc.check("v", check(&page, 1.0, 1.0));
    inc.verdict("v", "stalled", true, None);
    inc.check("v", check(&page, 1.0, 1.0));
    let one = open_of(&inc, "v");
    let before = one.page_before.as_ref().expect("before");
    assert!(!before.cut);
    assert!(
        before.gzip.len() < page.len() / 20,
        "compressed: {}",
        before.gzip.len()
    );
    assert_eq!(gunzip(&before.gzip), page.as_bytes());
}

/// The files of a ustar archive, checking each header's checksum.
fn untar(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let field = |r: std::ops::Range<usize>| {
            let s = std::str::from_utf8(&h[r]).expect("ascii");
            u64::from_str_radix(s.trim_matches(|c| c == '\0' || c == ' '), 8).expect("octal")
        };
        let mut blank = h.to_vec();
        blank[148..156].fill(b' ');
        assert_eq!(
            field(148..156),
            blank.iter().map(|&b| u64::from(b)).sum::<u64>(),
            "checksum"
        );
        assert_eq!(&h[257..263], b"ustar\0");
        let name = String::from_utf8(h[..100].iter().take_while(|&&b| b != 0).copied().collect())
            .expect("name");
        let size = usize::try_from(field(124..136)).expect("size");
        files.push((name, tar[at + 512..at + 512 + size].to_vec()));
        at += 512 + size.next_multiple_of(512);
    }
    files
}

#[test]
fn the_bundle_holds_the_json_and_both_pages() {
    let (inc, _t) = incidents();
    inc.verdict("v", "up", false, None);
    inc.check("v", check("a 1\n", 1.0, 1.0));
    inc.verdict("v", "stalled", true, Some("engine stalled".into()));
    inc.check("v", check("a 2\n", 1.0, 1.0));
    let id = inc.list()[0]["id"].as_str().expect("id").to_owned();
    let files = untar(&gunzip(&inc.get(&id).expect("kept").bundle));
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "incident.json",
            "page-before.prom.gz",
            "page-opening.prom.gz"
        ]
    );
    let json: Value = serde_json::from_slice(&files[0].1).expect("JSON");
    assert_eq!(json["id"], id.as_str());
    assert_eq!(json["kind"], "stalled");
    assert_eq!(gunzip(&files[1].1), b"a 1\n");
    assert_eq!(gunzip(&files[2].1), b"a 2\n");
    assert!(inc.get("nope").is_none());
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sysport-incidents-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Opens and closes one `down` incident of `upstream`, with `page` before and at the opening,
/// and waits until its writes are done.
fn freeze_and_thaw(inc: &Incidents, upstream: &str, page: &str) {
    open_and_close(inc, upstream, page);
    written(inc);
}

/// [`freeze_and_thaw`] without waiting for the writer: the calls the checks make.
fn open_and_close(inc: &Incidents, upstream: &str, page: &str) {
    inc.verdict(upstream, "up", false, None);
    inc.check(upstream, check(page, 0.0, 1.0));
    inc.verdict(upstream, "down", true, Some("gone".into()));
    inc.check(upstream, check(page, 0.0, 1.0));
    inc.verdict(upstream, "up", false, None);
    for _ in 0..SETTLE_CHECKS {
        inc.check(upstream, check(page, 0.0, 1.0));
    }
}

/// Waits until the writer thread has done what was asked of it.
fn written(inc: &Incidents) {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(inc.flush());
}

/// Incidents kept in a new directory named after `name`, at most `keep` of them and 1 MiB.
fn in_dir(name: &str, keep: usize) -> (Incidents, Telemetry, IncidentsConfig, std::path::PathBuf) {
    let dir = temp_dir(name);
    let config = IncidentsConfig {
        dir: Some(dir.clone()),
        keep,
        max_bytes: 1 << 20,
        ..IncidentsConfig::default()
    };
    let (inc, t) = incidents();
    inc.configure(&config, "incidents: {}\n".into(), HashMap::new());
    (inc, t, config, dir)
}

fn bundles(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry"))
        .map(|e| {
            let len = e.metadata().expect("metadata").len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn kept_incidents_are_read_back_byte_for_byte_within_keep_and_max_bytes() {
    let (inc, _t, config, dir) = in_dir("keep", 7);
    for n in 0..200 {
        freeze_and_thaw(&inc, "v", &format!("counter {n}\n"));
        let files = bundles(&dir);
        assert!(files.len() <= config.keep, "{files:?}");
        assert!(
            files.iter().all(|(name, _)| name.ends_with(".tar.gz")),
            "no temporary file left: {files:?}"
        );
    }
    let list = inc.list();
    assert_eq!(list.as_array().expect("list").len(), config.keep);
    let served: Vec<(Bytes, Bytes)> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|i| {
            let kept = inc.get(i["id"].as_str().expect("id")).expect("kept");
            (kept.json.clone(), kept.bundle.clone())
        })
        .collect();

    // A new sysport with the same directory lists the same, and serves the same bytes.
    let (again, _t2) = incidents();
    again.configure(&config, "incidents: {}\n".into(), HashMap::new());
    assert_eq!(again.list(), list);
    for (i, (json, bundle)) in list.as_array().expect("list").iter().zip(&served) {
        let kept = again.get(i["id"].as_str().expect("id")).expect("read back");
        assert_eq!(&kept.json, json);
        assert_eq!(&kept.bundle, bundle);
    }
    // A new incident does not take a kept one's id.
    freeze_and_thaw(&again, "v", "counter 1\n");
    assert_eq!(again.list().as_array().expect("list").len(), config.keep);
    let ids: std::collections::BTreeSet<String> = again
        .list()
        .as_array()
        .expect("list")
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), config.keep);

    // max_bytes: the oldest go until the rest fit.
    let big = "x".repeat(100_000);
    let tight = IncidentsConfig {
        max_bytes: 5_000,
        ..config.clone()
    };
    again.configure(&tight, String::new(), HashMap::new());
    for n in 0..20 {
        // Incompressible enough that one bundle is about 1–2 KB.
        freeze_and_thaw(&again, "w", &format!("{n} {}\n", &big[..n * 37 % 1000]));
        let total: u64 = bundles(&dir).iter().map(|(_, len)| len).sum();
        assert!(total <= 5_000, "{total} bytes on disk");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_that_takes_long_holds_neither_the_checks_nor_the_verdicts() {
    // A synced write to a slow volume can take seconds. Held here by holding the directory
    // (the writer thread waits for it, as it would for the disk): an incident opens and
    // closes meanwhile, and the calls that record it, made on the runtime thread by the
    // checks, return at once. Once the directory is free the bundle is written.
    let (inc, _t, _, dir) = in_dir("slow", 5);
    let inc = Arc::new(inc);
    freeze_and_thaw(&inc, "v", "a 1\n");
    assert_eq!(bundles(&dir).len(), 1);
    let held = inc.store.lock().expect("lock");
    let (done, finished) = std::sync::mpsc::channel();
    let checks = {
        let inc = inc.clone();
        std::thread::spawn(move || {
            open_and_close(&inc, "v", "a 2\n");
            let _ = done.send(());
        })
    };
    let returned = finished.recv_timeout(Duration::from_secs(10));
    drop(held);
    checks.join().expect("no panic");
    assert!(returned.is_ok(), "the checks waited for the write");
    assert_eq!(inc.list().as_array().expect("list").len(), 2);
    written(&inc);
    assert_eq!(
        bundles(&dir).len(),
        2,
        "written once the directory was free"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_write_leaves_the_incident_in_memory() {
    let (inc, _t, _, dir) = in_dir("full", 5);
    // The directory goes away and a file takes its place: every write fails.
    std::fs::remove_dir_all(&dir).expect("remove");
    std::fs::write(&dir, b"in the way").expect("a file");
    freeze_and_thaw(&inc, "v", "a 1\n");
    freeze_and_thaw(&inc, "v", "a 2\n");
    let list = inc.list();
    assert_eq!(list.as_array().expect("list").len(), 2, "{list}");
    let id = list[0]["id"].as_str().expect("id");
    assert!(!inc.get(id).expect("in memory").bundle.is_empty());
    let store = inc.store.lock().expect("lock");
    assert!(
        store.as_ref().expect("a store").said(),
        "the error was said"
    );
    drop(store);
    let _ = std::fs::remove_file(&dir);
}

/// A vLLM page of `ranks` data-parallel ranks (as tests/bounds.rs makes one): three gauges, six
/// counters and three histograms of 20 buckets per rank.
fn ranks_page(ranks: usize) -> String {
    use std::fmt::Write;
    let mut p = String::new();
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ] {
        let _ = writeln!(p, "# TYPE {name} gauge");
        for r in 0..ranks {
            let _ = writeln!(p, "{name}{{engine=\"{r}\",model_name=\"m\"}} {}", r % 7);
        }
    }
    for name in [
        "request_success",
        "prompt_tokens",
        "generation_tokens",
        "num_preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
    ] {
        let _ = writeln!(p, "# TYPE vllm:{name} counter");
        for r in 0..ranks {
            let _ = writeln!(
                p,
                "vllm:{name}_total{{engine=\"{r}\",model_name=\"m\"}} 1000"
            );
        }
    }
    for name in [
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
    ] {
        let _ = writeln!(p, "# TYPE vllm:{name} histogram");
        for r in 0..ranks {
            for k in 1..=20 {
                let le = 0.01 * f64::from(k * k);
                let _ = writeln!(
                    p,
                    "vllm:{name}_bucket{{engine=\"{r}\",le=\"{le}\",model_name=\"m\"}} {k}"
                );
            }
        }
    }
    p
}

/// The bytes an upstream's rolling record holds: its readings, its canaries (with their
/// strings) and the last page it read (held until the next check).
fn rolling_bytes(inc: &Incidents, upstream: &str) -> (usize, usize, usize, usize) {
    let inner = inc.lock();
    let t = &inner.tracks[upstream];
    let rows = t.rows.capacity() * std::mem::size_of::<Row>()
        + (t.rows.iter())
            .map(|r| r.health_error.as_ref().map_or(0, String::capacity))
            .sum::<usize>();
    let canaries = t.canaries.capacity() * std::mem::size_of::<CanaryRun>()
        + (t.canaries.iter())
            .map(|c| c.error.as_ref().map_or(0, String::capacity))
            .sum::<usize>();
    let page = t.last_page.as_ref().map_or(0, |(_, p)| p.len());
    (t.rows.len(), t.canaries.len(), rows + canaries, page)
}

/// bench/RESULTS.md's figure: 20 minutes of 1 s checks, a canary every 10 s, of an engine with
/// 1 and with 1,000 ranks. The readings and canaries of the last ten minutes are kept
/// whatever the page (a reading is the check's sums, not the page's series); the page is held
/// once, the last one read.
#[test]
fn ten_minutes_of_1s_checks_are_kept_whatever_the_ranks() {
    let start = SystemTime::now() - Duration::from_secs(1200);
    let mut figures = Vec::new();
    for ranks in [1, 1_000] {
        let page = Bytes::from(ranks_page(ranks));
        let (inc, _t) = incidents();
        inc.verdict("v", "up", false, None);
        for s in 0..1200 {
            let at = start + Duration::from_secs(s);
            let error = (s % 60 == 0).then(|| "health check failed: timed out after 2s".to_owned());
            // The page only at the last checks: each check scans it (the start time, the KV
            // cache), 5 MB at 1,000 ranks, which a debug build takes long over 1,200 times.
            let page = (s >= 1195).then(|| page.clone());
            let c = check("", 1.0, s as f64);
            inc.check(
                "v",
                Check {
                    at,
                    health_error: error,
                    page,
                    ..c
                },
            );
            if s % 10 == 0 {
                inc.canary("v", CanaryRun { sent: at, ..run() });
            }
        }
        let (rows, runs, held, last_page) = rolling_bytes(&inc, "v");
        assert!(
            (600..=601).contains(&rows),
            "{rows} readings kept of 1,200 s"
        );
        assert_eq!(last_page, page.len());
        figures.push((ranks, rows, held, page.len()));
        println!(
            "{ranks} ranks: {rows} readings and {runs} canaries kept, {held} bytes; the last \
             page held: {} bytes",
            page.len()
        );
    }
    // The readings and canaries cost the same with 1,000 ranks as with one.
    assert_eq!(figures[0].2, figures[1].2);
}
