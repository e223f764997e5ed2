//! The `/metrics` page (OpenMetrics, as sysport serves it) → OTLP metrics, with the conversion
//! NVIDIA Dynamo's exporter makes (`lib/runtime/src/metrics/otlp_export.rs`): names as exposed;
//! HELP → description; UNIT → unit; counter → monotonic cumulative sum; gauge and unknown →
//! gauge; info and stateset → non-monotonic sum; histogram → `+Inf` bound dropped and buckets
//! de-cumulated; summary → summary; a histogram or summary without `_count` dropped;
//! `_created` → start time; NaN → the "no recorded value" flag; the Prometheus type in the
//! metric's metadata as `prometheus.type`.
//!
//! A series without `_created` starts when sysport first saw it, and again whenever its value
//! (a histogram's or summary's count) goes down: the counter was reset in between.

use std::collections::HashMap;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, DataPointFlags, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, Sum, Summary, SummaryDataPoint, metric::Data, number_data_point,
    summary_data_point::ValueAtQuantile,
};

use crate::expfmt::{
    self, Exposition, Family, Format, Kind, PairHasher, ParseLimits, ParseOptions, Role, Sample,
};

/// Why a page could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("the rendered page does not parse: {0}")]
pub struct PageError(#[from] expfmt::ParseError);

/// One series' label pairs, unescaped, in the order written.
type Labels = Vec<(String, String)>;

/// A series of a histogram or summary: its labels (without `le` or `quantile`) and its
/// samples as (suffix, labels, value).
type Group = (Labels, Vec<(&'static [u8], Labels, f64)>);

/// Converts pages, remembering when each cumulative series started.
#[derive(Debug, Default)]
pub struct Converter {
    /// Per series key: its start time and its last value (a histogram's or summary's count).
    starts: HashMap<String, (u64, f64)>,
    /// When the last page was converted; `None` before the first.
    last_ns: Option<u64>,
    /// When conversion began (the start of series already there at the first page).
    first_ns: Option<u64>,
}

impl Converter {
    /// Converts `page`, rendered at `now_ns` (Unix nanoseconds), into metrics.
    ///
    /// # Errors
    /// When the page does not parse (sysport's own rendering always does).
    pub fn convert(&mut self, page: bytes::Bytes, now_ns: u64) -> Result<Vec<Metric>, PageError> {
        let keep = [String::new()];
        let opts = ParseOptions {
            keep: &keep,
            limits: ParseLimits {
                max_line_bytes: usize::MAX,
                max_series: usize::MAX,
                max_families: usize::MAX,
                max_labels: usize::MAX,
                max_label_value_bytes: usize::MAX,
            },
            added_labels: &[],
            hasher: PairHasher::new(0),
            allow_reserved: true,
        };
        let format = Format::detect(&page);
        let e = expfmt::parse(page, format, &opts)?;
        let stems = stems(&e);
        let created = created_times(&e, &stems);
        let first = *self.first_ns.get_or_insert(now_ns);
        // A series first seen now started after the last page (or, at the first, with sysport).
        let fresh = self.last_ns.unwrap_or(first);
        let mut seen = HashMap::with_capacity(self.starts.len());
        let mut out = Vec::with_capacity(e.families().len());
        for family in e.families() {
            if created_of(&e, family, &stems).is_some() {
                continue;
            }
            let mut ctx = Ctx {
                e: &e,
                family,
                created: &created,
                old: &self.starts,
                seen: &mut seen,
                fresh,
                now_ns,
            };
            if let Some(metric) = ctx.metric() {
                out.push(metric);
            }
        }
        self.starts = seen;
        self.last_ns = Some(now_ns);
        Ok(out)
    }
}

/// The name of `family` as text 0.0.4 has it.
fn text_name(e: &Exposition, family: &Family) -> Vec<u8> {
    let (base, suffix) = e.family_name(family);
    [base, suffix].concat()
}

/// What a family's `_created` is named after: a counter's name without `_total`, a histogram's
/// or summary's name.
fn stem(name: &[u8], kind: Kind) -> &[u8] {
    match kind {
        Kind::Counter => name.strip_suffix(b"_total").unwrap_or(name),
        _ => name,
    }
}

/// Whether `family` holds start times: OpenMetrics' `_created` samples, or (in text 0.0.4,
/// as `prometheus_client` writes them) a gauge `X_created` beside a counter `X_total` or a
/// histogram or summary `X`. Returns the stem it belongs to.
fn created_of(e: &Exposition, family: &Family, stems: &HashMap<Vec<u8>, Kind>) -> Option<Vec<u8>> {
    if family.role == Role::Created {
        return Some(family.base.of(e.body()).to_vec());
    }
    if family.role != Role::Primary || family.kind != Kind::Gauge {
        return None;
    }
    let name = text_name(e, family);
    let stem = name.strip_suffix(b"_created")?;
    stems.contains_key(stem).then(|| stem.to_vec())
}

/// The stems of the page's counters, histograms and summaries.
fn stems(e: &Exposition) -> HashMap<Vec<u8>, Kind> {
    e.families()
        .iter()
        .filter(|f| {
            f.role == Role::Primary
                && matches!(f.kind, Kind::Counter | Kind::Histogram | Kind::Summary)
        })
        .map(|f| (stem(&text_name(e, f), f.kind).to_vec(), f.kind))
        .collect()
}

/// The `_created` values of a page: (stem, series key) → Unix nanoseconds.
fn created_times(
    e: &Exposition,
    stems: &HashMap<Vec<u8>, Kind>,
) -> HashMap<(Vec<u8>, String), u64> {
    let mut out = HashMap::new();
    for family in e.families() {
        let Some(stem) = created_of(e, family, stems) else {
            continue;
        };
        for sample in e.samples(family) {
            let v = e.value(sample);
            if v.is_finite() && v >= 0.0 {
                let key = series_key(&labels(e, sample), None);
                out.insert((stem.clone(), key), (v * 1e9) as u64);
            }
        }
    }
    out
}

/// The work of converting one family.
struct Ctx<'a> {
    e: &'a Exposition,
    family: &'a Family,
    created: &'a HashMap<(Vec<u8>, String), u64>,
    old: &'a HashMap<String, (u64, f64)>,
    seen: &'a mut HashMap<String, (u64, f64)>,
    fresh: u64,
    now_ns: u64,
}

impl Ctx<'_> {
    fn metric(&mut self) -> Option<Metric> {
        let e = self.e;
        let f = self.family;
        let (base, suffix) = e.family_name(f);
        let name = format!(
            "{}{}",
            String::from_utf8_lossy(base),
            String::from_utf8_lossy(suffix)
        );
        let description = f
            .help
            .map(|h| unescape_help(h.of(e.body())))
            .unwrap_or_default();
        let unit = f
            .unit
            .map(|u| String::from_utf8_lossy(u.of(e.body())).into_owned())
            .unwrap_or_default();
        let declared = match f.role {
            Role::GCount | Role::GSum => Kind::Gauge,
            _ => f.declared,
        };
        let cumulative = AggregationTemporality::Cumulative as i32;
        let data = match declared {
            Kind::Counter => Data::Sum(Sum {
                data_points: self.numbers(&name, true),
                aggregation_temporality: cumulative,
                is_monotonic: true,
            }),
            Kind::Info | Kind::StateSet => Data::Sum(Sum {
                data_points: self.numbers(&name, false),
                aggregation_temporality: cumulative,
                is_monotonic: false,
            }),
            Kind::Histogram => Data::Histogram(Histogram {
                data_points: self.histograms(&name),
                aggregation_temporality: cumulative,
            }),
            Kind::Summary => Data::Summary(Summary {
                data_points: self.summaries(&name),
            }),
            Kind::Gauge | Kind::Untyped | Kind::GaugeHistogram => Data::Gauge(Gauge {
                data_points: self.numbers(&name, false),
            }),
        };
        let empty = match &data {
            Data::Sum(s) => s.data_points.is_empty(),
            Data::Gauge(g) => g.data_points.is_empty(),
            Data::Histogram(h) => h.data_points.is_empty(),
            Data::Summary(s) => s.data_points.is_empty(),
            Data::ExponentialHistogram(_) => true,
        };
        if empty {
            return None;
        }
        Some(Metric {
            name,
            description,
            unit,
            metadata: vec![string_kv("prometheus.type", declared.openmetrics_name())],
            data: Some(data),
        })
    }

    /// The start of a cumulative series: its `_created`, else when it was first seen, renewed
    /// when `value` went down since the last page.
    fn start(&mut self, name: &str, key: &str, value: f64) -> u64 {
        let name_bytes = text_name(self.e, self.family);
        let stem = stem(&name_bytes, self.family.kind).to_vec();
        let created = self.created.get(&(stem, key.to_owned())).copied();
        let id = format!("{name}\u{0}{key}");
        let start = match (created, self.old.get(&id)) {
            (Some(c), _) => c,
            (None, Some(&(start, last))) if value >= last || value.is_nan() || last.is_nan() => {
                start
            }
            // Reset (or first seen): it started after the last page.
            (None, _) => self.fresh,
        };
        self.seen.insert(id, (start, value));
        start
    }

    fn numbers(&mut self, name: &str, cumulative: bool) -> Vec<NumberDataPoint> {
        let e = self.e;
        let mut points = Vec::with_capacity(e.samples(self.family).len());
        for sample in e.samples(self.family) {
            let labels = labels(e, sample);
            let value = e.value(sample);
            let start = if cumulative {
                self.start(name, &series_key(&labels, None), value)
            } else {
                0
            };
            points.push(NumberDataPoint {
                attributes: attributes(&labels, None),
                start_time_unix_nano: start,
                time_unix_nano: self.now_ns,
                exemplars: Vec::new(),
                flags: nan_flag(value),
                value: (!value.is_nan()).then_some(number_data_point::Value::AsDouble(value)),
            });
        }
        points
    }

    /// The samples of the family grouped into series: (labels without `skip`, samples).
    fn groups(&self, skip: &str) -> Vec<Group> {
        let e = self.e;
        let base_len = self.family.base.of(e.body()).len();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut groups: Vec<Group> = Vec::new();
        for sample in e.samples(self.family) {
            let labels = labels(e, sample);
            let key = series_key(&labels, Some(skip));
            let (name, added) = e.sample_name(self.family, sample);
            let suffix: &'static [u8] = match (name.get(base_len..).unwrap_or_default(), added) {
                (_, s) if !s.is_empty() => s,
                (b"_bucket", _) => b"_bucket",
                (b"_count", _) => b"_count",
                (b"_sum", _) => b"_sum",
                _ => b"",
            };
            let i = *index.entry(key).or_insert_with(|| {
                let without: Labels = labels.iter().filter(|(k, _)| k != skip).cloned().collect();
                groups.push((without, Vec::new()));
                groups.len() - 1
            });
            groups[i].1.push((suffix, labels, e.value(sample)));
        }
        groups
    }

    fn histograms(&mut self, name: &str) -> Vec<HistogramDataPoint> {
        let mut points = Vec::new();
        for (labels, samples) in self.groups("le") {
            let mut buckets: Vec<(f64, f64)> = Vec::new();
            let (mut count, mut sum) = (None, None);
            for (suffix, pairs, value) in samples {
                match suffix {
                    b"_bucket" => {
                        let le = pairs.iter().find(|(k, _)| k == "le").map(|(_, v)| v);
                        if let Some(le) = le.and_then(|le| parse_float(le)) {
                            buckets.push((le, value));
                        }
                    }
                    b"_count" => count = Some(value),
                    b"_sum" => sum = Some(value),
                    _ => {}
                }
            }
            // Without `_count` there is no histogram point (as Dynamo drops it).
            let Some(count) = count else { continue };
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut bounds = Vec::with_capacity(buckets.len());
            let mut counts = Vec::with_capacity(buckets.len() + 1);
            let mut below = 0.0;
            for &(le, cumulative) in &buckets {
                if le == f64::INFINITY {
                    break;
                }
                bounds.push(le);
                counts.push(to_count(cumulative - below));
                below = cumulative;
            }
            counts.push(to_count(count - below));
            let start = self.start(name, &series_key(&labels, None), count);
            let nan = count.is_nan() || sum.is_some_and(f64::is_nan);
            points.push(HistogramDataPoint {
                attributes: attributes(&labels, None),
                start_time_unix_nano: start,
                time_unix_nano: self.now_ns,
                count: to_count(count),
                sum: sum.filter(|s| !s.is_nan()),
                bucket_counts: counts,
                explicit_bounds: bounds,
                exemplars: Vec::new(),
                flags: if nan { no_value() } else { 0 },
                min: None,
                max: None,
            });
        }
        points
    }

    fn summaries(&mut self, name: &str) -> Vec<SummaryDataPoint> {
        let mut points = Vec::new();
        for (labels, samples) in self.groups("quantile") {
            let (mut count, mut sum, mut quantiles) = (None, 0.0, Vec::new());
            for (suffix, pairs, value) in samples {
                match suffix {
                    b"_count" => count = Some(value),
                    b"_sum" => sum = value,
                    b"" => {
                        let q = pairs.iter().find(|(k, _)| k == "quantile").map(|(_, v)| v);
                        if let Some(q) = q.and_then(|q| parse_float(q)) {
                            quantiles.push(ValueAtQuantile { quantile: q, value });
                        }
                    }
                    _ => {}
                }
            }
            let Some(count) = count else { continue };
            let start = self.start(name, &series_key(&labels, None), count);
            points.push(SummaryDataPoint {
                attributes: attributes(&labels, None),
                start_time_unix_nano: start,
                time_unix_nano: self.now_ns,
                count: to_count(count),
                sum,
                quantile_values: quantiles,
                flags: nan_flag(count),
            });
        }
        points
    }
}

fn no_value() -> u32 {
    DataPointFlags::NoRecordedValueMask as u32
}

fn nan_flag(value: f64) -> u32 {
    if value.is_nan() { no_value() } else { 0 }
}

/// A count as OTLP holds it: whole, not negative.
fn to_count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

fn parse_float(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" | "inf" | "+inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

/// A sample's labels, names and values unescaped, in the order written.
pub(crate) fn labels(e: &Exposition, sample: &Sample) -> Labels {
    e.label_pairs(sample)
        .map(|(k, v)| {
            let k = String::from_utf8_lossy(k.strip_prefix(b"\"").unwrap_or(k));
            let k = k.strip_suffix('"').unwrap_or(&k).to_owned();
            let v = String::from_utf8_lossy(&expfmt::unescape_label_value(v)).into_owned();
            (k, v)
        })
        .collect()
}

/// The identity of a series within its family: its pairs sorted, `skip` left out.
pub(crate) fn series_key(labels: &Labels, skip: Option<&str>) -> String {
    let mut pairs: Vec<&(String, String)> = labels
        .iter()
        .filter(|(k, _)| Some(k.as_str()) != skip)
        .collect();
    pairs.sort();
    let mut key = String::new();
    for (k, v) in pairs {
        key.push_str(k);
        key.push('\u{1}');
        key.push_str(v);
        key.push('\u{2}');
    }
    key
}

fn attributes(labels: &Labels, skip: Option<&str>) -> Vec<KeyValue> {
    labels
        .iter()
        .filter(|(k, _)| Some(k.as_str()) != skip)
        .map(|(k, v)| string_kv(k, v))
        .collect()
}

pub(crate) fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
    }
}

/// HELP text with its escapes undone (`\\`, `\n`, and OpenMetrics' `\"`: a label value's).
fn unescape_help(raw: &[u8]) -> String {
    String::from_utf8_lossy(&crate::expfmt::unescape_label_value(raw)).into_owned()
}
