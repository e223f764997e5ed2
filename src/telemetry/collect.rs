//! Families made when a page is made, from state that others keep (the scraper's records, the
//! health verdicts): the pieces a render-time collector builds them from.

use prometheus::core::Desc;
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// A gauge with `labels` (sorted by name, as a registry keeps them).
pub(crate) fn gauge(labels: &[(&str, &str)], value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::from_gauge(g);
    m.set_label(
        labels
            .iter()
            .map(|(k, v)| {
                let mut pair = LabelPair::default();
                pair.set_name((*k).to_owned());
                pair.set_value((*v).to_owned());
                pair
            })
            .collect(),
    );
    m
}

/// A gauge family of `metrics` sorted by their label values, as a registry gathers them; `None`
/// without any.
pub(crate) fn family(name: &str, help: &str, mut metrics: Vec<Metric>) -> Option<MetricFamily> {
    if metrics.is_empty() {
        return None;
    }
    metrics.sort_by(|a, b| {
        let (a, b) = (a.get_label().iter(), b.get_label().iter());
        a.map(LabelPair::value).cmp(b.map(LabelPair::value))
    });
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(MetricType::GAUGE);
    f.set_metric(metrics);
    Some(f)
}

/// The description a registry checks a collector's family against (unique names).
pub(crate) fn desc(name: &str, help: &str, labels: &[&str]) -> Desc {
    Desc::new(
        name.to_owned(),
        help.to_owned(),
        labels.iter().map(|l| (*l).to_owned()).collect(),
        Default::default(),
    )
    .expect("valid metric")
}
