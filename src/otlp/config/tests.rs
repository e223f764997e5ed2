//! `otlp:` and the `OTEL_*` variables: off by default, the OpenTelemetry precedence
//! (metrics-specific over generic over file), the generic endpoint's `/v1/metrics`, and every
//! bad value named by its variable or its line and field.

use std::time::Duration;

use crate::config::tests::{assert_issue, env, load_yaml, no_env, ok, problems, url};
use crate::config::{OtlpProtocol, Temporality};

#[test]
fn off_unless_the_exporter_is_otlp() {
    assert_eq!(ok("").otlp, None);
    let none = load_yaml(
        "otlp: { exporter: otlp }",
        &env(&[("OTEL_METRICS_EXPORTER", "none")]),
    );
    assert_eq!(
        none.expect("valid").otlp,
        None,
        "the variable wins over the file"
    );
    let on = load_yaml("", &env(&[("OTEL_METRICS_EXPORTER", "otlp")])).expect("valid");
    let o = on.otlp.expect("on");
    assert_eq!(
        o.protocol,
        OtlpProtocol::Grpc,
        "Dynamo's protocol by default"
    );
    assert_eq!(o.endpoint, url("http://localhost:4317"));
    assert_eq!(o.interval, Duration::from_secs(60));
    assert_eq!(o.timeout, Duration::from_secs(10));
    assert_eq!(o.temporality, Temporality::Cumulative);
    assert_eq!(
        o.resource,
        [("service.name".to_owned(), "sysport".to_owned())]
    );
}

#[test]
fn the_metrics_variable_wins_and_only_the_generic_endpoint_gets_the_signal_path() {
    let vars = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        v.extend_from_slice(extra);
        env(&v)
    };
    let generic = load_yaml(
        "",
        &vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]),
    )
    .expect("valid")
    .otlp
    .expect("on");
    assert_eq!(generic.endpoint, url("http://collector:4318/v1/metrics"));
    let specific = load_yaml(
        "otlp: { endpoint: http://file:1/x }",
        &vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://metrics:9/custom",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                "b=two%20words, c = x=y",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"),
            ("OTEL_SERVICE_NAME", "worker"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=ignored,k8s.pod.name=p%2C0",
            ),
        ]),
    )
    .expect("valid")
    .otlp
    .expect("on");
    assert_eq!(specific.endpoint, url("http://metrics:9/custom"));
    assert_eq!(specific.protocol, OtlpProtocol::HttpProtobuf);
    let headers: Vec<(&str, &str)> = specific
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [("b", "two words"), ("c", "x=y")],
        "replaces, not merges"
    );
    assert_eq!(specific.timeout, Duration::from_millis(2500));
    assert_eq!(specific.interval, Duration::from_secs(5));
    assert!(specific.gzip);
    assert_eq!(specific.temporality, Temporality::Delta);
    let resource: Vec<(&str, &str)> = specific
        .resource
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        resource,
        [("service.name", "worker"), ("k8s.pod.name", "p,0")]
    );
}

#[test]
fn the_file_section_and_what_check_config_prints() {
    let config = ok("\
otlp:
  exporter: otlp
  endpoint: https://collector:4318/v1/metrics
  protocol: http/protobuf
  headers: authorization=Bearer%20secret
  compression: gzip
  timeout: 3s
  interval: 30s
  temporality: delta
  service_name: w
  resource_attributes: zone=a
  max_request_bytes: 1MiB
");
    let o = config.otlp.as_ref().expect("on");
    assert_eq!(o.timeout, Duration::from_secs(3));
    assert_eq!(o.max_request_bytes, Some(1 << 20));
    let text = config.to_string();
    for line in [
        "  exporter: otlp",
        "  endpoint: https://collector:4318/v1/metrics",
        "  protocol: http/protobuf",
        "  headers: \"authorization=***\"",
        "  compression: gzip",
        "  interval: 30s",
        "  temporality: delta",
        "  service_name: \"w\"",
        "  resource_attributes: \"zone=a\"",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn bad_values_name_their_variable() {
    let cases = [
        ("OTEL_METRICS_EXPORTER", "prometheus", "\"prometheus\""),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/json",
            "grpc or http/protobuf",
        ),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "collector:4317",
            "invalid URL",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,novalue", "not key=value"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            "bad header=1",
            "header name",
        ),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "gzip or none"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0", "milliseconds"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
            "lowmemory",
            "cumulative or delta",
        ),
    ];
    for (var, value, says) in cases {
        let mut vars = vec![(var, value)];
        if var != "OTEL_METRICS_EXPORTER" {
            vars.push(("OTEL_METRICS_EXPORTER", "otlp"));
        }
        let issues = problems("", &env(&vars));
        assert_eq!(issues.len(), 1, "{var}={value}: {issues:#?}");
        assert_eq!(issues[0].field, var, "{}", issues[0]);
        assert!(issues[0].message.contains(says), "{}", issues[0]);
    }
}

#[test]
fn bad_file_values_name_their_line_and_field() {
    let issues = problems(
        "otlp:\n  exporter: otlp\n  protocol: thrift\n  interval: soon\n  colour: red\n",
        &no_env(),
    );
    assert_eq!(issues.len(), 3, "{issues:#?}");
    assert_issue(&issues[0], 3, 13, "otlp.protocol", "grpc or http/protobuf");
    assert_issue(&issues[1], 4, 13, "otlp.interval", "soon");
    assert_issue(&issues[2], 5, 3, "otlp.colour", "unknown field");
}
