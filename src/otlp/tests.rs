//! The conversion against fixture pages, delta temporality, and request splitting.

use std::collections::HashMap;

use bytes::Bytes;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, metric::Data, number_data_point::Value,
};

use super::{Converter, Delta, count_points, split};

const SMALL_OM: &[u8] = include_bytes!("../../tests/fixtures/small.openmetrics_allow-utf-8.txt");
const MEDIUM: &[u8] = include_bytes!("../../tests/fixtures/medium.prom");
const WEIRD_OM: &[u8] =
    include_bytes!("../../tests/fixtures/edge_weird_labels_nan.openmetrics_allow-utf-8.txt");

const T0: u64 = 1_800_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

fn convert(page: &[u8]) -> Vec<Metric> {
    Converter::default()
        .convert(Bytes::copy_from_slice(page), T0)
        .expect("the fixture parses")
}

fn find<'a>(metrics: &'a [Metric], name: &str) -> &'a Metric {
    metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("{name} converted"))
}

fn attr<'a>(kvs: &'a [opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> &'a str {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            V::StringValue(s) => Some(s.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("attribute {key}"))
}

#[test]
fn a_counter_is_a_monotonic_cumulative_sum_starting_at_its_created() {
    let metrics = convert(SMALL_OM);
    let m = find(&metrics, "vllm:prompt_tokens_total");
    assert_eq!(m.description, "Number of prefill tokens processed.");
    assert_eq!(m.metadata[0].key, "prometheus.type");
    let Some(Data::Sum(sum)) = &m.data else {
        panic!("a sum: {m:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(
        sum.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    let p = &sum.data_points[0];
    assert_eq!(p.value, Some(Value::AsDouble(275873.0)));
    assert_eq!(attr(&p.attributes, "engine"), "0");
    assert_eq!(
        attr(&p.attributes, "model_name"),
        "meta-llama/Llama-3.1-8B-Instruct"
    );
    assert_eq!(p.start_time_unix_nano / 1_000_000, 1_755_000_000_000);
    assert_eq!(p.time_unix_nano, T0);
    // `_created` is a start time, never a metric of its own.
    assert!(metrics.iter().all(|m| !m.name.ends_with("_created")));
}

#[test]
fn a_histogram_drops_inf_and_decumulates_its_buckets() {
    let metrics = convert(SMALL_OM);
    let m = find(&metrics, "vllm:request_prompt_tokens");
    let Some(Data::Histogram(h)) = &m.data else {
        panic!("a histogram: {m:?}")
    };
    let p = &h.data_points[0];
    let text = String::from_utf8_lossy(SMALL_OM);
    let cumulative: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("vllm:request_prompt_tokens_bucket{"))
        .map(|l| {
            let le = l.split("le=\"").nth(1).and_then(|r| r.split('"').next());
            let v = l.rsplit(' ').next().and_then(|v| v.parse().ok());
            (le.expect("le").to_owned(), v.expect("value"))
        })
        .collect();
    assert_eq!(
        p.explicit_bounds.len(),
        cumulative.len() - 1,
        "+Inf dropped"
    );
    assert!(p.explicit_bounds.iter().all(|b| b.is_finite()));
    assert_eq!(p.bucket_counts.len(), cumulative.len());
    let mut running = 0;
    for (i, (le, total)) in cumulative.iter().enumerate() {
        running += p.bucket_counts[i];
        assert_eq!(running as f64, *total, "cumulative count at le={le}");
    }
    assert_eq!(p.count, running);
    assert!(p.sum.is_some());
}

#[test]
fn every_sample_of_a_text_page_is_a_point_or_part_of_one() {
    let metrics = convert(MEDIUM);
    let text = String::from_utf8_lossy(MEDIUM);
    let gauges = text
        .lines()
        .filter(|l| l.starts_with("vllm:num_requests_running{"))
        .count();
    let m = find(&metrics, "vllm:num_requests_running");
    let Some(Data::Gauge(g)) = &m.data else {
        panic!("a gauge")
    };
    assert_eq!(g.data_points.len(), gauges);
    // A histogram point per `_count` line.
    let counts = text
        .lines()
        .filter(|l| l.starts_with("vllm:e2e_request_latency_seconds_count{"))
        .count();
    let Some(Data::Histogram(h)) = &find(&metrics, "vllm:e2e_request_latency_seconds").data else {
        panic!("a histogram")
    };
    assert_eq!(h.data_points.len(), counts);
    // One point per series: every sample line but buckets, sums and start times.
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
        .filter(|n| !n.ends_with("_bucket") && !n.ends_with("_sum") && !n.ends_with("_created"))
        .count();
    assert_eq!(count_points(&metrics), series as u64);
}

#[test]
fn nan_is_no_recorded_value() {
    let metrics = convert(WEIRD_OM);
    let m = find(&metrics, "vllm:kv_cache_usage_perc");
    let Some(Data::Gauge(g)) = &m.data else {
        panic!("a gauge")
    };
    let p = g
        .data_points
        .iter()
        .find(|p| attr(&p.attributes, "model_name") == "org/model \"quoted\"")
        .expect("the quoted model's point, its label unescaped");
    assert_eq!(p.flags, 1);
    assert_eq!(p.value, None);
}

#[test]
fn help_unit_summary_info_and_a_histogram_without_count() {
    let page = b"# HELP a_seconds Time \\\"spent\\\"\\nwaiting.\n# TYPE a_seconds summary\n# UNIT a_seconds seconds\n\
a_seconds{quantile=\"0.5\"} 1.5\na_seconds{quantile=\"0.9\"} 2.5\na_seconds_sum 10\na_seconds_count 4\n\
# TYPE b histogram\nb_bucket{le=\"1\"} 1\nb_bucket{le=\"+Inf\"} 2\nb_sum 3\n\
# TYPE build info\nbuild_info{version=\"1\"} 1\n# EOF\n";
    let metrics = convert(page);
    let a = find(&metrics, "a_seconds");
    assert_eq!(a.description, "Time \"spent\"\nwaiting.");
    assert_eq!(a.unit, "seconds");
    let Some(Data::Summary(s)) = &a.data else {
        panic!("a summary")
    };
    let p = &s.data_points[0];
    assert_eq!((p.count, p.sum), (4, 10.0));
    let q: Vec<(f64, f64)> = p
        .quantile_values
        .iter()
        .map(|q| (q.quantile, q.value))
        .collect();
    assert_eq!(q, [(0.5, 1.5), (0.9, 2.5)]);
    assert!(metrics.iter().all(|m| m.name != "b"), "no _count: dropped");
    let Some(Data::Sum(info)) = &find(&metrics, "build_info").data else {
        panic!("info as a sum")
    };
    assert!(!info.is_monotonic);
}

fn counter_page(value: f64) -> Bytes {
    Bytes::from(format!(
        "# TYPE c counter\nc_total{{x=\"1\"}} {value}\n# TYPE h histogram\n\
h_bucket{{le=\"1\"}} {value}\nh_bucket{{le=\"+Inf\"}} {}\nh_sum {}\nh_count {}\n# EOF\n",
        value * 2.0,
        value * 3.0,
        value * 2.0
    ))
}

fn sum_point(metrics: &[Metric]) -> (u64, f64) {
    let Some(Data::Sum(s)) = &find(metrics, "c_total").data else {
        panic!("a sum")
    };
    let p = &s.data_points[0];
    let Some(Value::AsDouble(v)) = p.value else {
        panic!("a value")
    };
    (p.start_time_unix_nano, v)
}

#[test]
fn a_counter_without_created_starts_anew_when_it_goes_down() {
    let mut c = Converter::default();
    let first = c.convert(counter_page(5.0), T0).expect("parses");
    let second = c
        .convert(counter_page(7.0), T0 + 60 * SECOND)
        .expect("parses");
    assert_eq!(sum_point(&first).0, sum_point(&second).0, "same start");
    let reset = c
        .convert(counter_page(1.0), T0 + 120 * SECOND)
        .expect("parses");
    assert_eq!(
        sum_point(&reset),
        (T0 + 60 * SECOND, 1.0),
        "restarted after the last page"
    );
}

#[test]
fn deltas_summed_back_equal_the_cumulative_values_whatever_failed() {
    let mut c = Converter::default();
    let mut delta = Delta::default();
    let (mut counter, mut count, mut sum, mut le1) = (0.0, 0u64, 0.0, 0u64);
    // Exports 3 to 5 fail, and the counter resets (to 2) before the next one succeeds.
    let values = [3.0, 4.0, 9.0, 10.0, 15.0, 22.0, 2.0, 5.0, 11.0];
    for (i, v) in values.iter().enumerate() {
        let mut metrics = c
            .convert(counter_page(*v), T0 + i as u64 * 60 * SECOND)
            .expect("parses");
        let pending = delta.apply(&mut metrics);
        if (3..=5).contains(&i) {
            continue;
        }
        delta.commit(pending);
        let Some(Data::Sum(s)) = &find(&metrics, "c_total").data else {
            panic!("a sum")
        };
        assert_eq!(
            s.aggregation_temporality,
            AggregationTemporality::Delta as i32
        );
        if let Some(Value::AsDouble(d)) = s.data_points[0].value {
            counter += d;
        }
        let Some(Data::Histogram(h)) = &find(&metrics, "h").data else {
            panic!("a histogram")
        };
        let p = &h.data_points[0];
        count += p.count;
        sum += p.sum.expect("a sum");
        le1 += p.bucket_counts[0];
    }
    // Every increase: 22 before the reset, then 11 since.
    assert_eq!(counter, 33.0);
    assert_eq!(count, 66);
    assert_eq!(sum, 99.0);
    assert_eq!(le1, 33);
}

#[test]
fn a_request_splits_by_metric_then_by_point() {
    let metrics = convert(SMALL_OM);
    let n = count_points(&metrics);
    let (a, b) = split(metrics).expect("splits");
    assert_eq!(count_points(&a) + count_points(&b), n);
    let one: Vec<Metric> = a
        .into_iter()
        .filter(|m| m.name == "vllm:prompt_tokens_by_source_total")
        .collect();
    let points = count_points(&one);
    assert!(points >= 2, "{one:?}");
    let (x, y) = split(one).expect("a metric's points split");
    assert_eq!(count_points(&x) + count_points(&y), points);
    let mut names: HashMap<String, usize> = HashMap::new();
    for m in x.iter().chain(&y) {
        *names.entry(m.name.clone()).or_default() += 1;
    }
    assert_eq!(names.len(), 1);
}
