//! The vitals of engine pages parsed as the scraper parses them, read at known times.

use std::time::{Duration, Instant};

use super::*;
use crate::expfmt::Format;
use crate::model::Engine;
use crate::numbers::testing::parsed;
use crate::vitals::figures::SparkPoint;

/// A vLLM page with two data-parallel ranks at step `n`: rank 0 finishes 1 request/s and makes
/// 50 generation tokens/s, rank 1 half of that; every first token takes between 0.1 and
/// 0.25 s (rank 0) or between 0.25 and 0.5 s (rank 1).
fn vllm_page(n: u64, renamed: bool) -> String {
    page_from(n as f64 * 5.0, renamed, 100.0)
}

/// The page `t` seconds after counters started at `base` (and tokens at 50 times that).
fn page_from(t: f64, renamed: bool, base: f64) -> String {
    let (kv, itl) = if renamed {
        (
            "vllm:gpu_cache_usage_perc",
            "vllm:time_per_output_token_seconds",
        )
    } else {
        (
            "vllm:kv_cache_usage_perc",
            "vllm:inter_token_latency_seconds",
        )
    };
    let mut page = String::new();
    page += "# TYPE vllm:num_requests_running gauge\n";
    page += "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n";
    page += "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1\n";
    page += "# TYPE vllm:num_requests_waiting gauge\n";
    page += "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n";
    page += "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 0\n";
    page += &format!(
        "# TYPE {kv} gauge\n{kv}{{engine=\"0\",model_name=\"m\"}} 0.5\n{kv}{{engine=\"1\",model_name=\"m\"}} 0.25\n"
    );
    page += "# TYPE vllm:request_success_total counter\n";
    page += &format!(
        "vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {}\n",
        base + t
    );
    page += &format!(
        "vllm:request_success_total{{engine=\"1\",finished_reason=\"stop\",model_name=\"m\"}} {}\n",
        base + t / 2.0
    );
    page += "# TYPE vllm:generation_tokens_total counter\n";
    page += &format!(
        "vllm:generation_tokens_total{{engine=\"0\",model_name=\"m\"}} {}\n",
        50.0 * base + 50.0 * t
    );
    page += &format!(
        "vllm:generation_tokens_total{{engine=\"1\",model_name=\"m\"}} {}\n",
        50.0 * base + 25.0 * t
    );
    page += "# TYPE vllm:prefix_cache_queries_total counter\n";
    page += &format!(
        "vllm:prefix_cache_queries_total{{engine=\"0\",model_name=\"m\"}} {}\n",
        100.0 * t
    );
    page += "# TYPE vllm:prefix_cache_hits_total counter\n";
    page += &format!(
        "vllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"m\"}} {}\n",
        40.0 * t
    );
    page += "# TYPE vllm:time_to_first_token_seconds histogram\n";
    for (engine, per_s, lo) in [("0", 1.0, 0.1), ("1", 0.5, 0.25)] {
        let count = base + per_s * t;
        for le in ["0.1", "0.25", "0.5", "1.0", "+Inf"] {
            let bound: f64 = le.parse().unwrap_or(f64::INFINITY);
            let c = if bound > lo { count } else { 0.0 };
            page += &format!(
                "vllm:time_to_first_token_seconds_bucket{{engine=\"{engine}\",le=\"{le}\",model_name=\"m\"}} {c}\n"
            );
        }
        page += &format!(
            "vllm:time_to_first_token_seconds_count{{engine=\"{engine}\",model_name=\"m\"}} {count}\n"
        );
    }
    page += &format!("# TYPE {itl} histogram\n");
    page += &format!(
        "{itl}_bucket{{engine=\"0\",le=\"0.02\",model_name=\"m\"}} {}\n",
        10.0 * t
    );
    page += &format!(
        "{itl}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {}\n",
        10.0 * t
    );
    page
}

/// The vitals of one upstream of `engine`, over a 1 min window.
fn vitals(engine: Engine) -> Vitals {
    vitals_with(engine, Duration::from_secs(60))
}

fn vitals_with(engine: Engine, window: Duration) -> Vitals {
    let mut config = crate::config::Config::default();
    config.upstreams[0].engine = engine;
    config.upstreams[0].keep = engine.default_keep();
    config.vitals.window = window;
    Vitals::new(&config)
}

fn feed(v: &Vitals, engine: Engine, start: Instant, pages: impl Iterator<Item = (u64, String)>) {
    let p = engine.preset();
    for (n, page) in pages {
        let exp = parsed(&page, Format::Text, p.keep);
        v.record(0, &exp, start + Duration::from_secs(5 * n), v.canaries(0));
    }
}

/// [`vitals`] fed `pages` (step, page; one step is 5 s), and the time of step 0.
fn fed(engine: Engine, pages: impl Iterator<Item = (u64, String)>) -> (Vitals, Instant) {
    let v = vitals(engine);
    let start = Instant::now();
    feed(&v, engine, start, pages);
    (v, start)
}

/// The report of `v` after a check at `at` (which ages the figures out once readings stop).
fn report_at(v: &Vitals, at: Instant) -> Report {
    v.age(0, at);
    v.report(0).expect("a report")
}

/// The vitals of a vLLM upstream fed `pages`, as of `at` seconds after the first step.
fn vllm_report(pages: impl Iterator<Item = (u64, String)>, at: u64) -> Report {
    let (v, start) = fed(Engine::Vllm, pages);
    report_at(&v, start + Duration::from_secs(at))
}

fn close(got: Option<f64>, want: f64) {
    let got = got.expect("a figure");
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{got} != {want}"
    );
}

#[test]
fn constant_rates_and_quantiles_over_a_full_window() {
    // Readings every 5 s from 0 to 120 s; the window (60, 120] holds 12 of them.
    let r = vllm_report((0..=24).map(|n| (n, vllm_page(n, false))), 120);
    assert_eq!(r.readings, 12);
    let t = &r.total;
    close(t.running, 4.0);
    close(t.waiting, 2.0);
    close(t.kv_cache_usage, 0.375);
    close(t.requests_per_second, 1.5);
    close(t.generation_tokens_per_second, 75.0);
    close(t.prefix_cache_hit_rate, 0.4);
    assert_eq!(
        t.prompt_tokens_per_second, None,
        "no such family: null, not 0"
    );
    assert_eq!(t.preemptions_per_second, None);
    // TTFT: rate 1/s in (0.1, 0.25], 0.5/s in (0.25, 0.5]. p50 rank 0.75 of 1.5 → 0.1 + 0.15 *
    // 0.75; p90 rank 1.35 → 0.25 + 0.25 * 0.35/0.5.
    let ttft = t.time_to_first_token_seconds;
    close(ttft.p50, 0.1 + 0.15 * 0.75);
    close(ttft.p90, 0.25 + 0.25 * 0.35 / 0.5);
    close(ttft.p99, 0.25 + 0.25 * 0.485 / 0.5);
    // Every inter-token latency is in the first bucket (0, 0.02].
    close(t.inter_token_latency_seconds.p50, 0.01);
    assert_eq!(t.e2e_request_latency_seconds.p50, None);
    // Ranks: counts and rates per rank, quantiles from the rank's own buckets.
    assert_eq!(r.rank_label, Some("engine"));
    let ids: Vec<&str> = r.ranks.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["0", "1"]);
    close(r.ranks[0].figures.requests_per_second, 1.0);
    close(r.ranks[1].figures.requests_per_second, 0.5);
    close(r.ranks[1].figures.kv_cache_usage, 0.25);
    close(r.ranks[1].figures.time_to_first_token_seconds.p50, 0.375);
    assert_eq!(r.ranks[1].figures.prefix_cache_hit_rate, None);
    assert!(r.pids.is_empty());
}

#[test]
fn renamed_families_are_read_under_their_old_names() {
    let r = vllm_report((0..=12).map(|n| (n, vllm_page(n, true))), 60);
    close(r.total.kv_cache_usage, 0.375);
    close(r.total.inter_token_latency_seconds.p50, 0.01);
}

#[test]
fn too_little_data_is_null_never_zero() {
    let v = vitals(Engine::Vllm);
    let start = Instant::now();
    let r = report_at(&v, start);
    assert_eq!(r.readings, 0);
    assert_eq!(r.total.running, None);
    feed(
        &v,
        Engine::Vllm,
        start,
        std::iter::once((0, vllm_page(0, false))),
    );
    let r = report_at(&v, start);
    assert_eq!(r.readings, 1);
    close(r.total.running, 4.0);
    assert_eq!(r.total.requests_per_second, None, "one reading");
    assert_eq!(r.total.time_to_first_token_seconds.p99, None);
    // Two readings, but no observation in between: no quantile either.
    feed(
        &v,
        Engine::Vllm,
        start,
        std::iter::once((1, vllm_page(0, false))),
    );
    let r = report_at(&v, start + Duration::from_secs(5));
    assert_eq!(r.total.requests_per_second, Some(0.0));
    assert_eq!(r.total.time_to_first_token_seconds.p50, None);
    // Readings older than the window no longer count.
    let r = report_at(&v, start + Duration::from_secs(200));
    assert_eq!(r.readings, 0);
    assert_eq!(r.total.running, None);
}

#[test]
fn a_counter_reset_in_the_window_counts_as_prometheus_counts_it() {
    // Steps 0..=12, the engine restarted after step 6: its counters start again from 0.
    let pages = (0..=12).map(|n| {
        let page = if n <= 6 {
            vllm_page(n, false)
        } else {
            page_from((n - 7) as f64 * 5.0, false, 0.0)
        };
        (n, page)
    });
    let r = vllm_report(pages, 60);
    // Rank 0's requests: 100+5..100+30 (readings 1..6), then 0, 5, .., 25. Prometheus: last -
    // first + the value before the drop = 25 - 105 + 130 = 50 over 55 s of readings, spaced
    // 5 s, touching both ends: 50 * 60/55 / 60.
    let rank0 = &r.ranks[0].figures;
    close(rank0.requests_per_second, 50.0 / 55.0);
    // The same reading without the reset rule would be negative.
    assert!(rank0.requests_per_second.expect("a rate") > 0.0);
}

const SGLANG_UNDERSCORE: &str = "\
# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 5
sglang_num_running_reqs{dp_rank=\"0\",tp_rank=\"1\"} 5
sglang_num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 2
# TYPE sglang_num_queue_reqs gauge
sglang_num_queue_reqs{dp_rank=\"0\",tp_rank=\"0\"} 1
# TYPE sglang_token_usage gauge
sglang_token_usage{dp_rank=\"0\",tp_rank=\"0\"} 0.2
sglang_token_usage{dp_rank=\"1\",tp_rank=\"0\"} 0.4
";

#[test]
fn sglang_in_underscore_spelling_fills_the_vitals() {
    let (v, start) = fed(
        Engine::Sglang,
        std::iter::once((0, SGLANG_UNDERSCORE.to_owned())),
    );
    let r = report_at(&v, start);
    // Tensor-parallel copies count once: 5 + 2.
    close(r.total.running, 7.0);
    close(r.total.waiting, 1.0);
    close(r.total.kv_cache_usage, 0.3);
    assert_eq!(r.rank_label, Some("dp_rank"));
    close(r.ranks[0].figures.running, 5.0);
    close(r.ranks[1].figures.kv_cache_usage, 0.4);
}

#[test]
fn the_selection_asks_for_every_name_and_spelling() {
    let sglang = names(Engine::Sglang.preset());
    for n in [
        "sglang:num_running_reqs",
        "sglang_num_running_reqs",
        "sglang_time_to_first_token_seconds",
    ] {
        assert!(sglang.iter().any(|x| x == n), "{n}: {sglang:?}");
    }
    let vllm = names(Engine::Vllm.preset());
    for n in [
        "vllm:gpu_cache_usage_perc",
        "vllm:time_per_output_token_seconds",
        "vllm:gpu_prefix_cache_hits_total",
    ] {
        assert!(vllm.iter().any(|x| x == n), "{n}: {vllm:?}");
    }
}

#[test]
fn sparks_cover_five_minutes_one_point_per_reading() {
    let (v, start) = fed(Engine::Vllm, (0..=120).map(|n| (n, vllm_page(n, false))));
    let now = start + Duration::from_secs(600);
    let s = report_at(&v, now).history;
    // Readings from 300 s to 600 s ago: 61 points, 5 s apart.
    assert_eq!(s.running.len(), 61);
    assert_eq!(s.running[0].0, -300.0);
    assert_eq!(s.running[60], (0.0, Some(4.0)));
    let last = s.generation_tokens_per_second[60].1.expect("a rate");
    assert!((last - 75.0).abs() < 1e-9, "{last}");
}

#[test]
fn counter_copies_count_once_in_a_rate() {
    // SGLang with every scheduler reporting: each tensor-parallel scheduler of a data-parallel
    // rank counts the same retractions (rank 0: 1/s, rank 1: 0.5/s).
    let page = |t: f64| {
        let mut p = String::from("# TYPE sglang:num_retracted_requests_total counter\n");
        for (dp, per_s) in [("0", 1.0), ("1", 0.5)] {
            for tp in ["0", "1"] {
                p += &format!(
                    "sglang:num_retracted_requests_total{{dp_rank=\"{dp}\",tp_rank=\"{tp}\"}} {}\n",
                    per_s * t
                );
            }
        }
        p
    };
    let (v, start) = fed(Engine::Sglang, (0..=24).map(|n| (n, page(5.0 * n as f64))));
    let r = report_at(&v, start + Duration::from_secs(120));
    close(r.total.preemptions_per_second, 1.5);
    close(r.ranks[0].figures.preemptions_per_second, 1.0);
    close(r.ranks[1].figures.preemptions_per_second, 0.5);
}

/// A vLLM page of `ranks` data-parallel ranks at `t` seconds: each rank runs 2 requests and
/// makes 10 tokens/s, every first token in (0.1, 0.25]; `extra` is a label added to every
/// series (one that changes at every check makes every series new).
fn many_ranks(ranks: usize, t: f64, extra: &str) -> String {
    let mut p = String::from("# TYPE vllm:num_requests_running gauge\n");
    for r in 0..ranks {
        p += &format!("vllm:num_requests_running{{engine=\"{r}\"{extra}}} 2\n");
    }
    p += "# TYPE vllm:generation_tokens_total counter\n";
    for r in 0..ranks {
        p += &format!(
            "vllm:generation_tokens_total{{engine=\"{r}\"{extra}}} {}\n",
            10.0 * t
        );
    }
    p += "# TYPE vllm:time_to_first_token_seconds histogram\n";
    for r in 0..ranks {
        for le in ["0.1", "0.25", "+Inf"] {
            let c = if le == "0.1" { 0.0 } else { t };
            p += &format!(
                "vllm:time_to_first_token_seconds_bucket{{engine=\"{r}\",le=\"{le}\"{extra}}} {c}\n"
            );
        }
    }
    p
}

#[test]
fn a_reading_keeps_its_figures_summed_not_its_series() {
    // 1,000 ranks: the total holds every one; 32 are shown apart, the rest said to be left out.
    let (v, start) = fed(
        Engine::Vllm,
        (0..=12).map(|n| (n, many_ranks(1000, 5.0 * n as f64, ""))),
    );
    let r = report_at(&v, start + Duration::from_secs(60));
    close(r.total.running, 2000.0);
    close(r.total.generation_tokens_per_second, 10_000.0);
    assert_eq!(r.ranks.len(), MAX_RANKS);
    assert_eq!(r.ranks[31].id, "31", "the lowest ids, in numeric order");
    close(r.ranks[31].figures.generation_tokens_per_second, 10.0);
    assert_eq!(r.left_out.ranks, 1000 - MAX_RANKS);
    // A reading holds 1 + 32 groups of 9 + 3 numbers, whatever the page holds.
    let per_reading = (1 + MAX_RANKS) * (9 + 3) * 8;
    assert_eq!(
        r.kept_bytes - r.history.running.len() * SPARK_BYTES,
        12 * per_reading
    );
    assert_eq!(
        SPARK_BYTES, 96,
        "docs/vitals.md's formula counts 96 bytes a sparkline point"
    );
}

/// What one sparkline point keeps.
const SPARK_BYTES: usize = std::mem::size_of::<(Instant, SparkPoint)>();

#[test]
fn a_label_that_changes_at_every_check_costs_nothing_once_summed() {
    // Every check, every series is new (a label with the check's number): each adds nothing to
    // the totals, and nothing of it is kept but the sums.
    let v = vitals(Engine::Vllm);
    let start = Instant::now();
    let page = |n: u64| many_ranks(4, 5.0 * n as f64, &format!(",churn=\"{n}\""));
    feed(&v, Engine::Vllm, start, (0..=80).map(|n| (n, page(n))));
    let a = report_at(&v, start + Duration::from_secs(400));
    feed(&v, Engine::Vllm, start, (81..=120).map(|n| (n, page(n))));
    let b = report_at(&v, start + Duration::from_secs(600));
    assert_eq!(a.kept_bytes, b.kept_bytes, "flat once the window is full");
    // New series each time: no increase is ever seen, as Prometheus sees none.
    close(b.total.generation_tokens_per_second, 0.0);
    let kept = v.upstreams[0].kept.lock().expect("lock");
    assert_eq!(kept.summer.series(), 4 * 5, "the last page's series only");
}

#[test]
fn readings_in_a_long_window_are_thinned_to_max_points() {
    // One check a second over a 10 minute window: 600 readings would be in it.
    let v = vitals_with(Engine::Vllm, Duration::from_secs(600));
    let start = Instant::now();
    let p = Engine::Vllm.preset();
    for s in 0..=900u64 {
        let exp = parsed(&many_ranks(2, s as f64, ""), Format::Text, p.keep);
        v.record(0, &exp, start + Duration::from_secs(s), v.canaries(0));
    }
    let r = v.report(0).expect("a report");
    assert!(r.readings <= MAX_POINTS + 1, "{} readings", r.readings);
    assert!(r.history.running.len() <= MAX_SPARKS + 1);
    // Thinned, the rate is still the engine's.
    close(r.total.generation_tokens_per_second, 20.0);
}

#[test]
fn a_histogram_with_too_many_buckets_keeps_an_even_spread_with_its_ends() {
    let page = |t: f64| {
        let mut p = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
        for k in 1..=100 {
            let le = k as f64 / 100.0;
            let c = if le >= 0.5 { t } else { 0.0 };
            p += &format!("vllm:time_to_first_token_seconds_bucket{{le=\"{le}\"}} {c}\n");
        }
        p += &format!("vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {t}\n");
        p
    };
    let (v, start) = fed(Engine::Vllm, (0..=12).map(|n| (n, page(5.0 * n as f64))));
    let r = report_at(&v, start + Duration::from_secs(60));
    assert_eq!(r.left_out.buckets, 101 - MAX_BUCKETS);
    // Every observation is in (0.49, 0.5]: the coarser histogram puts the median in the kept
    // bucket that holds 0.5, between its neighbours' bounds.
    let p50 = r.total.time_to_first_token_seconds.p50.expect("a median");
    assert!((0.4..=0.55).contains(&p50), "{p50}");
}

#[test]
fn numbers_that_cannot_be_figures_are_not_shown_as_numbers_and_say_why() {
    let page = "\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\"} -10
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\"} +Inf
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\"} -5
";
    let (v, start) = fed(Engine::Vllm, std::iter::once((0, page.to_owned())));
    let r = report_at(&v, start);
    assert_eq!(
        (r.total.running, r.total.waiting, r.total.kv_cache_usage),
        (None, None, None)
    );
    let why = &r.total.not_available;
    assert!(why["running"].contains("cannot be negative"), "{why:?}");
    assert!(why["waiting"].contains("inf"), "{why:?}");
    assert!(why["kv_cache_usage"].contains("between 0 and 1"), "{why:?}");
    assert!(r.ranks[0].figures.not_available.contains_key("running"));
    assert_eq!(
        r.history.running[0].1, None,
        "a gap in the sparkline, not a number"
    );
}

/// An idle vLLM engine's page: only sysport's canaries, `canaries` of them so far (one token
/// generated each), moved its counters.
fn idle_page(canaries: u64) -> String {
    let n = 100 + canaries;
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 0\n\
         # TYPE vllm:request_success_total counter\nvllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"m\"}} {n}\n\
         # TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine=\"0\",model_name=\"m\"}} {n}\n"
    )
}

#[test]
fn an_idle_engines_rates_leave_out_sysports_canaries_and_show_them_beside() {
    let v = vitals(Engine::Vllm);
    let start = Instant::now();
    let p = Engine::Vllm.preset();
    // A canary every third check (5 s apart), answered between checks.
    let mut sent = 0;
    for n in 0..12u64 {
        let exp = parsed(&idle_page(sent), Format::Text, p.keep);
        v.record(0, &exp, start + Duration::from_secs(5 * n), v.canaries(0));
        if n % 3 == 2 {
            sent += 1;
            v.count_canary(0, 1.0);
        }
    }
    let r = report_at(&v, start + Duration::from_secs(55));
    assert_eq!(r.total.requests_per_second, Some(0.0), "{r:?}");
    assert_eq!(r.total.generation_tokens_per_second, Some(0.0), "{r:?}");
    let canaries = r.canaries.requests_per_second.expect("a canary rate");
    assert!(canaries > 0.0, "{r:?}");
    assert_eq!(r.canaries.generation_tokens_per_second, Some(canaries));
    // Without them counted, the canaries would be the engine's traffic.
    let v = vitals(Engine::Vllm);
    let mut sent = 0;
    for n in 0..12u64 {
        let exp = parsed(&idle_page(sent), Format::Text, p.keep);
        v.record(0, &exp, start + Duration::from_secs(5 * n), v.canaries(0));
        if n % 3 == 2 {
            sent += 1;
        }
    }
    let r = report_at(&v, start + Duration::from_secs(55));
    assert!(r.total.requests_per_second.expect("a rate") > 0.0);
    // Real traffic beside canaries is kept whole: 10 requests a check, and the canaries.
    let v = vitals(Engine::Vllm);
    let mut sent = 0;
    for n in 0..12u64 {
        let exp = parsed(&idle_page(sent + 10 * n), Format::Text, p.keep);
        v.record(0, &exp, start + Duration::from_secs(5 * n), v.canaries(0));
        if n % 3 == 2 {
            sent += 1;
            v.count_canary(0, 1.0);
        }
    }
    let r = report_at(&v, start + Duration::from_secs(55));
    close(r.total.requests_per_second, 2.0);
}
