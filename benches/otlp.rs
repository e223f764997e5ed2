//! The cost of one OTLP export of the large (~2.3 MB) and huge (~16 MB) pages, as OpenMetrics
//! (what the exporter reads): the page converted (parse, `_created` matched, histograms
//! de-cumulated) and the request encoded, without and with gzip (the fast level the exporter
//! uses); printed beside the timings: the request's size both ways, and the peak memory one
//! export adds to the process (Linux: peak RSS reset through `/proc/self/clear_refs`, then
//! read from `VmHWM` after one export).
//!
//! `cargo bench --bench otlp`; in test mode (`cargo test --all-targets`) each runs once on
//! the fixtures.

use std::hint::black_box;
use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use prost::Message;
use sysport::config::{OtlpConfig, OtlpProtocol, Temporality};
use sysport::expfmt::Format;
use sysport::otlp::{Converter, count_points, request};
use sysport_bench_inputs::{self as inputs, is_test_mode};

fn config() -> OtlpConfig {
    OtlpConfig {
        endpoint: "http://127.0.0.1:4318/v1/metrics".parse().expect("url"),
        protocol: OtlpProtocol::HttpProtobuf,
        headers: Vec::new(),
        gzip: false,
        timeout: Duration::from_secs(10),
        certificate: None,
        client_key: None,
        client_certificate: None,
        interval: Duration::from_secs(60),
        temporality: Temporality::Cumulative,
        resource: vec![("service.name".into(), "bench".into())],
        max_request_bytes: None,
    }
}

/// One export's work: convert and encode, gzipped when asked. Returns the request's bytes.
fn export(converter: &mut Converter, page: &Bytes, gzip: bool, now: u64) -> Vec<u8> {
    let metrics = converter
        .convert(page.clone(), now)
        .expect("the page parses");
    let encoded = request(&config(), metrics).encode_to_vec();
    if !gzip {
        return encoded;
    }
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(encoded.len() / 4),
        flate2::Compression::fast(),
    );
    gz.write_all(&encoded).expect("memory");
    gz.finish().expect("memory")
}

fn status_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Peak RSS one export adds, in MiB, when the kernel lets the peak be reset.
fn peak_mib(page: &Bytes, gzip: bool) -> Option<f64> {
    let mut converter = Converter::default();
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    let before = status_kib("VmRSS:")?;
    let out = export(&mut converter, page, gzip, 1);
    let peak = status_kib("VmHWM:")?;
    drop(black_box(out));
    Some(peak.saturating_sub(before) as f64 / 1024.0)
}

fn main() {
    let test_mode = is_test_mode();
    let python = inputs::generator(test_mode);
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    // In test mode (`cargo test --all-targets`) the large page alone.
    let names: &[&str] = if test_mode {
        &["large"]
    } else {
        &["large", "huge"]
    };
    for &name in names {
        let input = inputs::input(name, Format::OpenMetrics, python.as_ref());
        let page = input.body.clone();
        let mut converter = Converter::default();
        let metrics = converter.convert(page.clone(), 1).expect("parses");
        let points = count_points(&metrics);
        let plain = export(&mut converter, &page, false, 2).len();
        let gzipped = export(&mut converter, &page, true, 3).len();
        eprintln!(
            "{name}: page {} bytes ({}), {points} points, request {plain} bytes, gzip {gzipped} bytes, \
             peak memory of one export {:?} MiB (plain) {:?} MiB (gzip)",
            page.len(),
            input.source,
            peak_mib(&page, false),
            peak_mib(&page, true),
        );
        let mut g = c.benchmark_group(format!("otlp-{name}"));
        g.sampling_mode(SamplingMode::Flat);
        g.sample_size(10);
        g.throughput(Throughput::Bytes(page.len() as u64));
        for gzip in [false, true] {
            let label = if gzip { "export-gzip" } else { "export" };
            let mut n = 10;
            g.bench_function(label, |b| {
                b.iter(|| {
                    n += 1;
                    black_box(export(&mut converter, &page, gzip, n))
                })
            });
        }
        g.finish();
    }
    c.final_summary();
}
