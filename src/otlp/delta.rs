//! Delta temporality (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta`): monotonic
//! sums and histograms sent as the change since the last export the receiver took.
//!
//! Each series keeps a running total of every increase seen on the pages (a reset adds the new
//! value: what the counter counted since), updated whether or not an export succeeds; an export
//! sends that total minus the one the last successful export reached. So summing what a
//! receiver got gives every increase, whatever failed and whatever reset in between.

use std::collections::HashMap;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, metric::Data, number_data_point,
};

/// Running totals of one series' increases: value (a histogram's count), sum, buckets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Totals {
    value: f64,
    sum: f64,
    buckets: Vec<f64>,
}

/// One series: the last reading seen, its running totals, and the totals last sent.
#[derive(Debug, Clone)]
struct Series {
    start: u64,
    last: Totals,
    bounds: Vec<f64>,
    seen: Totals,
    sent: Totals,
    /// When the receiver last took this series (the next delta's start).
    sent_at: u64,
    /// Exports since the series was last on a page.
    unseen: u32,
}

/// Series forgotten after this many exports without them.
const FORGET_AFTER: u32 = 60;

/// Every series' totals.
#[derive(Debug, Default)]
pub struct Delta {
    series: HashMap<String, Series>,
}

/// What an export sent, recorded once it succeeded: (key, totals, time).
#[derive(Debug, Default)]
pub struct Pending(Vec<(String, Totals, u64)>);

impl Delta {
    /// Turns the cumulative `metrics` into deltas since the last successful export.
    pub fn apply(&mut self, metrics: &mut [Metric]) -> Pending {
        let mut pending = Vec::new();
        let delta = AggregationTemporality::Delta as i32;
        for s in self.series.values_mut() {
            s.unseen += 1;
        }
        for m in metrics.iter_mut() {
            match &mut m.data {
                Some(Data::Sum(sum)) if sum.is_monotonic => {
                    sum.aggregation_temporality = delta;
                    for p in &mut sum.data_points {
                        let Some(number_data_point::Value::AsDouble(value)) = p.value else {
                            continue;
                        };
                        let now = Totals {
                            value,
                            ..Totals::default()
                        };
                        let key = key(&m.name, &p.attributes);
                        let s = self.observe(&key, p.start_time_unix_nano, now, &[]);
                        p.value = Some(number_data_point::Value::AsDouble(
                            s.seen.value - s.sent.value,
                        ));
                        p.start_time_unix_nano = s.sent_at;
                        pending.push((key, s.seen.clone(), p.time_unix_nano));
                    }
                }
                Some(Data::Histogram(h)) => {
                    h.aggregation_temporality = delta;
                    for p in &mut h.data_points {
                        let now = Totals {
                            value: p.count as f64,
                            sum: p.sum.unwrap_or(0.0),
                            buckets: p.bucket_counts.iter().map(|&c| c as f64).collect(),
                        };
                        let key = key(&m.name, &p.attributes);
                        let s = self.observe(&key, p.start_time_unix_nano, now, &p.explicit_bounds);
                        p.count = (s.seen.value - s.sent.value).round() as u64;
                        p.sum = p.sum.map(|_| s.seen.sum - s.sent.sum);
                        for (i, c) in p.bucket_counts.iter_mut().enumerate() {
                            let sent = s.sent.buckets.get(i).copied().unwrap_or(0.0);
                            *c = (s.seen.buckets[i] - sent).round() as u64;
                        }
                        p.start_time_unix_nano = s.sent_at;
                        pending.push((key, s.seen.clone(), p.time_unix_nano));
                    }
                }
                _ => {}
            }
        }
        self.series.retain(|_, s| s.unseen < FORGET_AFTER);
        Pending(pending)
    }

    /// Adds one reading's increase to the series' running totals.
    fn observe(&mut self, key: &str, start: u64, now: Totals, bounds: &[f64]) -> &Series {
        let s = self.series.entry(key.to_owned()).or_insert_with(|| Series {
            start,
            last: Totals {
                buckets: vec![0.0; now.buckets.len()],
                ..Totals::default()
            },
            bounds: bounds.to_vec(),
            seen: Totals {
                buckets: vec![0.0; now.buckets.len()],
                ..Totals::default()
            },
            sent: Totals {
                buckets: vec![0.0; now.buckets.len()],
                ..Totals::default()
            },
            sent_at: start,
            unseen: 0,
        });
        s.unseen = 0;
        if s.bounds != bounds {
            // New buckets: the totals start again from this reading.
            let zero = Totals {
                buckets: vec![0.0; now.buckets.len()],
                ..Totals::default()
            };
            s.bounds = bounds.to_vec();
            s.last = zero.clone();
            s.seen = zero.clone();
            s.sent = zero;
            s.sent_at = start;
        }
        let reset = s.start != start || now.value < s.last.value;
        let base = if reset {
            Totals {
                buckets: vec![0.0; now.buckets.len()],
                ..Totals::default()
            }
        } else {
            s.last.clone()
        };
        s.seen.value += now.value - base.value;
        s.seen.sum += now.sum - base.sum;
        for (i, b) in now.buckets.iter().enumerate() {
            s.seen.buckets[i] += b - base.buckets[i];
        }
        s.start = start;
        s.last = now;
        &*s
    }

    /// Records what a successful export sent.
    pub fn commit(&mut self, pending: Pending) {
        for (key, totals, at) in pending.0 {
            if let Some(s) = self.series.get_mut(&key) {
                s.sent = totals;
                s.sent_at = at;
            }
        }
    }
}

fn key(name: &str, attributes: &[KeyValue]) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let mut pairs: Vec<(&str, &str)> = attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.as_str(),
                _ => "",
            };
            (kv.key.as_str(), v)
        })
        .collect();
    pairs.sort_unstable();
    let mut key = String::from(name);
    for (k, v) in pairs {
        key.push('\u{0}');
        key.push_str(k);
        key.push('\u{1}');
        key.push_str(v);
    }
    key
}
