//! Throughput of the exposition pipeline on realistic engine scrapes.
//!
//! Each iteration does what one `/metrics` request does with one upstream body: parse it, keep
//! the `vllm:` and `lmcache:` families, merge, and write text 0.0.4 into a fresh buffer sized by
//! [`Merge::size_hint`]. Beside it, on the same bytes, a grep-like line filter built on `memchr`
//! (keep lines starting with `vllm:`/`lmcache:` or `# HELP`/`# TYPE` of those): the practical speed
//! limit of anything that reads every byte once.
//!
//! Inputs, text 0.0.4 and OpenMetrics each:
//! - `small` (~10 KB): `tests/fixtures/small.prom` cut at the first family boundary after 10 KB.
//! - `typical` (~100 KB): one model on 2 data-parallel engines.
//! - `large` (~2.3 MB): 48 engines with LMCache (TP 2), LoRA and spec decode.
//! - `huge` (~15.6 MB): the same with 360 engines, just under the default 16 MiB body limit.
//!
//! `typical`, `large` and `huge` come from `gen_vllm_like.py` (the shared fixture generator, real
//! `prometheus_client`) when a Python with `prometheus_client` is found, else from the checked-in
//! fixtures replicated per engine: every family once, its `engine="N"` series repeated with the
//! engine number rewritten, series without an engine label once. That is what a
//! `prometheus_client` registry with more engines renders, and it needs nothing but this crate.
//! `EXPFMT_BENCH_INPUTS=fixtures` forces the fixtures; `PYTHON` and `GEN_VLLM_LIKE` override the
//! interpreter and the generator path. In test mode (`cargo test --all-targets`, where criterion
//! runs every benchmark once) the fixtures are always used and `huge` is left out.
//!
//! `relabel/text` measures the same pipeline on the `large` text input with
//! `metric_relabel_configs` applied after the parse, as the server does: none, ten typical rules
//! (the README's example and the like), and one rule that changes every vLLM series; page after
//! page with the same rule set (as an upstream's scrapes go), and on a first page (`-first`).
//!
//! After the timings (benchmark mode only), heap allocations per parse+merge+write are counted
//! for several sizes by running this binary under valgrind's memcheck, which counts every
//! `malloc`/`calloc`/`realloc`/`memalign`; a counting `#[global_allocator]` cannot live here
//! because the package forbids `unsafe` code in every target. `bench/load/driver` counts the
//! same with a counting allocator (`bash bench/load.sh` runs it).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use sysport::expfmt::{
    self, AddedLabel, Exposition, Format, MergeOptions, PairHasher, ParseLimits, ParseOptions,
};
use sysport::relabel::{self, Page, Rule, RuleSet};

const SMALL_PROM: &[u8] = include_bytes!("../tests/fixtures/small.prom");
const SMALL_OM: &[u8] = include_bytes!("../tests/fixtures/small.openmetrics.txt");
const MEDIUM_PROM: &[u8] = include_bytes!("../tests/fixtures/medium.prom");
const MEDIUM_OM: &[u8] = include_bytes!("../tests/fixtures/medium.openmetrics.txt");

const KEEP: [&str; 2] = ["vllm:", "lmcache:"];

/// The generator flags of `medium.prom` (see the fixtures' `make_samples.sh`), engines apart.
const MEDIUM_FLAGS: &[&str] = &[
    "--lmcache",
    "--tp",
    "2",
    "--lora-adapters",
    "4",
    "--spec-decode",
    "2",
];

/// Sysport's default limits, with room for the huge input's series.
const LIMITS: ParseLimits = ParseLimits {
    max_line_bytes: 1 << 20,
    max_series: 250_000,
    max_families: 20_000,
    max_labels: 64,
    max_label_value_bytes: 512 << 10,
};

/// One benchmark input.
struct Input {
    name: &'static str,
    format: Format,
    body: Bytes,
    /// Where the bytes came from, for the log.
    source: String,
}

/// A size of input and how to make it.
struct Size {
    name: &'static str,
    /// Data-parallel engines; `None` for the cut fixture.
    engines: Option<usize>,
    /// The generator flags besides `--engines`, and the fixtures replicated without Python.
    flags: &'static [&'static str],
    fixture: (&'static [u8], &'static [u8]),
}

const SIZES: [Size; 4] = [
    Size {
        name: "small",
        engines: None,
        flags: &[],
        fixture: (SMALL_PROM, SMALL_OM),
    },
    Size {
        name: "typical",
        engines: Some(2),
        flags: &[],
        fixture: (SMALL_PROM, SMALL_OM),
    },
    Size {
        name: "large",
        engines: Some(48),
        flags: MEDIUM_FLAGS,
        fixture: (MEDIUM_PROM, MEDIUM_OM),
    },
    Size {
        name: "huge",
        engines: Some(360),
        flags: MEDIUM_FLAGS,
        fixture: (MEDIUM_PROM, MEDIUM_OM),
    },
];

fn main() {
    if let Ok(spec) = std::env::var(ALLOC_CHILD) {
        alloc_child(&spec);
        return;
    }
    let test_mode = is_test_mode();
    let python = if test_mode || std::env::var("EXPFMT_BENCH_INPUTS").as_deref() == Ok("fixtures") {
        None
    } else {
        Generator::find()
    };
    match &python {
        Some(g) => eprintln!("inputs: gen_vllm_like.py via {}", g.python.display()),
        None => eprintln!("inputs: checked-in fixtures, replicated per engine"),
    }
    let mut inputs = Vec::new();
    for size in &SIZES {
        if test_mode && size.name == "huge" {
            eprintln!("huge: left out in test mode");
            continue;
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let input = make_input(size, format, python.as_ref());
            check_against_grep(&input);
            inputs.push(input);
        }
    }
    for i in &inputs {
        eprintln!(
            "{:>8} {:<11} {:>10} bytes  {}",
            i.name,
            format_name(i.format),
            i.body.len(),
            i.source
        );
    }

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for format in [Format::Text, Format::OpenMetrics] {
        let mut group = c.benchmark_group(format!("expfmt/{}", format_name(format)));
        for input in inputs.iter().filter(|i| i.format == format) {
            group.throughput(Throughput::Bytes(input.body.len() as u64));
            if input.body.len() > 1 << 20 {
                group.sampling_mode(SamplingMode::Flat).sample_size(10);
            } else {
                group.sampling_mode(SamplingMode::Auto).sample_size(50);
            }
            let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
            group.bench_function(format!("sysport/{}", input.name), |b| {
                b.iter(|| black_box(pipeline(&input.body, input.format, &keep, &[])))
            });
            if format == Format::Text {
                let labels = [AddedLabel::new("worker_id", "vllm-worker-7d9f8c-abcde")];
                group.bench_function(format!("sysport+label/{}", input.name), |b| {
                    b.iter(|| black_box(pipeline(&input.body, input.format, &keep, &labels)))
                });
            }
            group.bench_function(format!("grep-like/{}", input.name), |b| {
                b.iter(|| black_box(grep_like(&input.body)))
            });
        }
        group.finish();
    }
    bench_relabel(&mut c, &inputs);
    c.final_summary();

    if !test_mode {
        count_allocations(&inputs);
    }
}

/// Criterion's own rule: `cargo bench` passes `--bench`; `cargo test` does not, or adds `--test`.
fn is_test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let test = args.iter().any(|a| a == "--test");
    !bench || test
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::Text => "text",
        Format::OpenMetrics => "openmetrics",
    }
}

/// What one `/metrics` request does with one upstream body.
fn pipeline(body: &Bytes, format: Format, keep: &[String], added: &[AddedLabel]) -> Vec<u8> {
    let hasher = PairHasher::new(0x5eed);
    let names: Vec<&[u8]> = added.iter().map(|a| a.name()).collect();
    let opts = ParseOptions {
        keep,
        limits: LIMITS,
        added_labels: &names,
        hasher,
        allow_reserved: false,
    };
    let exp = expfmt::parse(body.clone(), format, &opts).expect("inputs are within the limits");
    merged_text(&[&exp], added, hasher)
}

/// What a request does with the parsed pages: merge them, write text 0.0.4 into a fresh
/// buffer sized by [`Merge::size_hint`].
fn merged_text(sources: &[&Exposition], added: &[AddedLabel], hasher: PairHasher) -> Vec<u8> {
    let m = expfmt::merge(
        sources,
        &MergeOptions {
            added,
            names: None,
            hasher,
        },
    );
    let mut out = Vec::with_capacity(m.size_hint());
    expfmt::write_text(&m, &mut out);
    out
}

/// The speed limit: keep each line that starts with a kept prefix, or is the HELP or TYPE line
/// of one, as `grep -E '^(# (HELP|TYPE) )?(vllm:|lmcache:)'` does.
fn grep_like(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len())) {
        if start >= body.len() {
            break;
        }
        let line = &body[start..nl];
        let name = match line.first() {
            Some(b'#') if line.starts_with(b"# HELP ") || line.starts_with(b"# TYPE ") => {
                &line[7..]
            }
            _ => line,
        };
        if KEEP.iter().any(|p| name.starts_with(p.as_bytes())) {
            out.extend_from_slice(&body[start..(nl + 1).min(body.len())]);
        }
        start = nl + 1;
    }
    out
}

/// For clean text input from `prometheus_client`, sysport's output holds exactly the lines grep
/// keeps (contract rule 2: kept families pass byte for byte), so both sides of the comparison
/// produce the same bytes. A difference is reported, not fatal: the tests own the contract.
fn check_against_grep(input: &Input) {
    let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
    let ours = pipeline(&input.body, input.format, &keep, &[]);
    assert!(!ours.is_empty(), "{}: nothing kept", input.name);
    if input.format == Format::Text {
        let grep = grep_like(&input.body);
        if ours != grep {
            eprintln!(
                "{}: sysport wrote {} bytes, the grep-like filter {}: the throughputs compare \
                 different outputs",
                input.name,
                ours.len(),
                grep.len()
            );
        }
    }
}

/// `gen_vllm_like.py` and a Python that can run it.
struct Generator {
    python: PathBuf,
    script: PathBuf,
    http: bool,
}

impl Generator {
    fn find() -> Option<Generator> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = std::env::var_os("GEN_VLLM_LIKE")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("../shared/fixtures/gen_vllm_like.py"));
        if !script.is_file() {
            return None;
        }
        let candidates = std::env::var_os("PYTHON")
            .map(PathBuf::from)
            .into_iter()
            .chain([
                root.join("bench/.venv/bin/python"),
                root.join(".venv/bin/python"),
                PathBuf::from("python3"),
            ]);
        for python in candidates {
            let imports = |module: &str| {
                Command::new(&python)
                    .args(["-c", &format!("import {module}")])
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            if imports("prometheus_client") {
                let http = imports("prometheus_fastapi_instrumentator");
                return Some(Generator {
                    python,
                    script,
                    http,
                });
            }
        }
        None
    }

    fn run(&self, engines: usize, flags: &[&str], format: Format) -> Option<Vec<u8>> {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .args(["--engines", &engines.to_string()])
            .args(flags);
        if !self.http {
            cmd.arg("--no-http");
        }
        if format == Format::OpenMetrics {
            cmd.arg("--openmetrics");
        }
        match cmd.output() {
            Ok(o) if o.status.success() && !o.stdout.is_empty() => Some(o.stdout),
            Ok(o) => {
                eprintln!(
                    "gen_vllm_like.py failed ({}); using the fixtures: {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
                None
            }
            Err(err) => {
                eprintln!("gen_vllm_like.py did not run ({err}); using the fixtures");
                None
            }
        }
    }

    fn describe(&self, engines: usize, flags: &[&str], format: Format) -> String {
        let mut s = format!("gen_vllm_like.py --engines {engines}");
        for f in flags {
            s.push(' ');
            s.push_str(f);
        }
        if !self.http {
            s.push_str(" --no-http");
        }
        if format == Format::OpenMetrics {
            s.push_str(" --openmetrics");
        }
        s
    }
}

fn make_input(size: &Size, format: Format, python: Option<&Generator>) -> Input {
    let fixture = match format {
        Format::Text => size.fixture.0,
        Format::OpenMetrics => size.fixture.1,
    };
    let (body, source) = match size.engines {
        None => (
            cut(fixture, 10_000, format),
            "first 10 KB of the small fixture, cut at a family boundary".to_owned(),
        ),
        Some(engines) => {
            match python.and_then(|g| {
                g.run(engines, size.flags, format)
                    .map(|b| (b, g.describe(engines, size.flags, format)))
            }) {
                Some(generated) => generated,
                None => (
                    replicate(fixture, engines, format),
                    format!("fixture replicated to {engines} engines"),
                ),
            }
        }
    };
    Input {
        name: size.name,
        format,
        body: Bytes::from(body),
        source,
    }
}

/// The fixture up to the first `# HELP` line at or after `at` bytes (plus `# EOF` for
/// OpenMetrics), so no family is cut in half.
fn cut(fixture: &[u8], at: usize, format: Format) -> Vec<u8> {
    let end =
        memchr::memmem::find(&fixture[at..], b"\n# HELP ").map_or(fixture.len(), |i| at + i + 1);
    let mut out = fixture[..end].to_vec();
    if format == Format::OpenMetrics && !out.ends_with(b"# EOF\n") {
        out.extend_from_slice(b"# EOF\n");
    }
    out
}

/// The fixture as its registry would render it with `engines` data-parallel engines.
fn replicate(fixture: &[u8], engines: usize, format: Format) -> Vec<u8> {
    let per_copy = engine_count(fixture).max(1);
    let copies = engines.div_ceil(per_copy);
    let mut out = Vec::with_capacity(fixture.len() * copies);
    let mut block: Vec<&[u8]> = Vec::new();
    let flush = |block: &mut Vec<&[u8]>, out: &mut Vec<u8>| {
        for copy in 0..copies {
            for line in block.iter() {
                match engine_value(line) {
                    Some((vs, ve, n)) => {
                        let engine = copy * per_copy + n;
                        if engine < engines {
                            out.extend_from_slice(&line[..vs]);
                            out.extend_from_slice(engine.to_string().as_bytes());
                            out.extend_from_slice(&line[ve..]);
                            out.push(b'\n');
                        }
                    }
                    None if copy == 0 => {
                        out.extend_from_slice(line);
                        out.push(b'\n');
                    }
                    None => {}
                }
            }
        }
        block.clear();
    };
    for line in fixture.split(|&b| b == b'\n') {
        if line.is_empty() || line == b"# EOF" {
            continue;
        }
        if line.starts_with(b"#") {
            // HELP/TYPE/UNIT lines start a family: write the samples gathered so far first.
            if block.iter().any(|l| !l.starts_with(b"#")) {
                flush(&mut block, &mut out);
            }
            out.extend_from_slice(line);
            out.push(b'\n');
        } else {
            block.push(line);
        }
    }
    flush(&mut block, &mut out);
    if format == Format::OpenMetrics {
        out.extend_from_slice(b"# EOF\n");
    }
    out
}

/// The value of the `engine` label in a sample line: its span and number.
fn engine_value(line: &[u8]) -> Option<(usize, usize, usize)> {
    let at = memchr::memmem::find(line, b"engine=\"")?;
    if at > 0 && !matches!(line[at - 1], b'{' | b',') {
        return None;
    }
    let vs = at + b"engine=\"".len();
    let len = line[vs..].iter().take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || line.get(vs + len) != Some(&b'"') {
        return None;
    }
    let n = std::str::from_utf8(&line[vs..vs + len])
        .ok()?
        .parse()
        .ok()?;
    Some((vs, vs + len, n))
}

fn engine_count(fixture: &[u8]) -> usize {
    fixture
        .split(|&b| b == b'\n')
        .filter_map(engine_value)
        .map(|(_, _, n)| n + 1)
        .max()
        .unwrap_or(0)
}

/// The environment variable that turns this binary into the allocation-counting child.
const ALLOC_CHILD: &str = "EXPFMT_BENCH_ALLOC_CHILD";

/// Child: `FILE:FORMAT:ITERATIONS` → run the pipeline that many times on the file's bytes.
fn alloc_child(spec: &str) {
    let mut parts = spec.rsplitn(3, ':');
    let iterations: usize = parts
        .next()
        .and_then(|n| n.parse().ok())
        .expect("iteration count");
    let format = match parts.next() {
        Some("openmetrics") => Format::OpenMetrics,
        _ => Format::Text,
    };
    let file = parts.next().expect("input file");
    let body = Bytes::from(std::fs::read(file).expect("input file is readable"));
    let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
    for _ in 0..iterations {
        black_box(pipeline(&body, format, &keep, &[]));
    }
}

/// Heap allocations per parse+merge+write, from the difference between a run with 1 and with 3
/// iterations under memcheck (start-up and input reading cancel out).
fn count_allocations(inputs: &[Input]) {
    let valgrind_ok = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !valgrind_ok {
        eprintln!(
            "allocation counts: valgrind not found, skipped (bash bench/load.sh counts them)"
        );
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("expfmt-bench-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    println!("\nheap allocations per parse+filter+merge+write_text (valgrind memcheck):");
    println!(
        "{:>8} {:<11} {:>10} {:>8} {:>8} {:>12}",
        "input", "format", "bytes", "series", "allocs", "alloc bytes"
    );
    for input in inputs.iter().filter(|i| i.name != "huge") {
        let file = dir.join(format!("{}-{}", input.name, format_name(input.format)));
        if std::fs::write(&file, &input.body).is_err() {
            continue;
        }
        let run = |iterations: u64| -> Option<(u64, u64)> {
            let spec = format!(
                "{}:{}:{iterations}",
                file.display(),
                format_name(input.format)
            );
            let out = Command::new("valgrind")
                .args(["--tool=memcheck", "--leak-check=no", "--error-exitcode=0"])
                .arg(&exe)
                .env(ALLOC_CHILD, spec)
                .output()
                .ok()?;
            heap_usage(&String::from_utf8_lossy(&out.stderr))
        };
        let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
        let series = {
            let opts = ParseOptions {
                keep: &keep,
                limits: LIMITS,
                added_labels: &[],
                hasher: PairHasher::new(1),
                allow_reserved: false,
            };
            expfmt::parse(input.body.clone(), input.format, &opts)
                .map_or(0, |e| e.all_samples().len())
        };
        match (run(1), run(3)) {
            (Some((a1, b1)), Some((a3, b3))) => println!(
                "{:>8} {:<11} {:>10} {:>8} {:>8} {:>12}",
                input.name,
                format_name(input.format),
                input.body.len(),
                series,
                (a3 - a1) / 2,
                (b3 - b1) / 2
            ),
            _ => println!(
                "{:>8} {:<11} memcheck run failed",
                input.name,
                format_name(input.format)
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `total heap usage: 1,234 allocs, 1,200 frees, 56,789 bytes allocated` → (1234, 56789).
fn heap_usage(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr.lines().find(|l| l.contains("total heap usage:"))?;
    let number = |word: &str| -> Option<u64> {
        let before = line.split(word).next()?;
        let digits: String = before
            .rsplit([':', ' '])
            .find(|s| !s.is_empty())?
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    Some((number(" allocs")?, number(" bytes allocated")?))
}

/// Ten typical rules: the README's example (request-size histograms dropped, latency buckets
/// thinned), a few more families dropped, and a label rewritten on two small families.
const TYPICAL_RULES: &str = r#"
- source_labels: [__name__]
  regex: "vllm:request_(prompt|generation)_tokens_(bucket|sum|count|created)"
  action: drop
- source_labels: [__name__, le]
  regex: 'vllm:(time_to_first_token|inter_token_latency|e2e_request_latency)_seconds_bucket;(0\.1|0\.5|1\.0|2\.5|5\.0|10\.0|20\.0|40\.0|80\.0|\+Inf)'
  target_label: __keep_bucket
  replacement: "yes"
- source_labels: [__name__, __keep_bucket]
  regex: 'vllm:(time_to_first_token|inter_token_latency|e2e_request_latency)_seconds_bucket;'
  action: drop
- regex: __keep_bucket
  action: labeldrop
- source_labels: [__name__]
  regex: "vllm:request_params_(n|max_tokens)_.*"
  action: drop
- source_labels: [__name__]
  regex: "vllm:(cache_config_info|lora_requests_info)"
  action: drop
- source_labels: [__name__]
  regex: "vllm:iteration_tokens_total_.*"
  action: drop
- source_labels: [__name__]
  regex: "lmcache:p2p_.*"
  action: drop
- regex: pid
  action: labeldrop
- source_labels: [__name__, model_name]
  regex: "vllm:num_requests_(running|waiting);(?:.*/)?(.*)"
  target_label: model
  replacement: "$2"
"#;

/// One rule that changes every vLLM series: every vLLM family is written anew.
const REWRITE_ALL_RULES: &str = r#"
- source_labels: [model_name]
  regex: "(?:.*/)?(.*)"
  target_label: model_name
"#;

/// The rules of a YAML list, read by sysport's own configuration loader.
fn rules(rules: &str) -> Vec<Rule> {
    let mut yaml = String::from(
        "upstreams:\n  - name: bench\n    url: http://127.0.0.1:1/metrics\n    metric_relabel_configs:\n",
    );
    for line in rules.lines().filter(|l| !l.is_empty()) {
        yaml.push_str("      ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    let path =
        std::env::temp_dir().join(format!("sysport-bench-rules-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write the rules");
    let env: std::collections::HashMap<String, String> = Default::default();
    let config = sysport::config::load_file(&path, &env).expect("valid rules");
    let _ = std::fs::remove_file(&path);
    config.upstreams[0].metric_relabel_configs.clone()
}

fn rule_set(rules: &[Rule]) -> RuleSet {
    RuleSet::new(rules, &[], &[]).expect("some rules")
}

/// [`pipeline`] with the page through `rules` between the parse and the merge.
fn relabelled_pipeline(body: &Bytes, rules: Option<&RuleSet>) -> Vec<u8> {
    let hasher = PairHasher::new(0x5eed);
    let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &[],
        hasher,
        allow_reserved: false,
    };
    let exp = expfmt::parse(body.clone(), Format::Text, &opts).expect("within the limits");
    let exp = std::sync::Arc::new(exp);
    let page = match rules {
        None => Page::unchanged(exp),
        Some(rules) => relabel::relabel(exp, rules, LIMITS, hasher).expect("within the limits"),
    };
    let sources: Vec<&Exposition> = page.served.iter().map(|e| &**e).collect();
    merged_text(&sources, &[], hasher)
}

/// The cost of `metric_relabel_configs` on the large text input.
fn bench_relabel(c: &mut Criterion, inputs: &[Input]) {
    let Some(input) = inputs
        .iter()
        .find(|i| i.name == "large" && i.format == Format::Text)
    else {
        return;
    };
    let typical = rules(TYPICAL_RULES);
    let rewrite_all = rules(REWRITE_ALL_RULES);
    let sets = [
        ("none", None),
        ("typical", Some(rule_set(&typical))),
        ("rewrite-all", Some(rule_set(&rewrite_all))),
    ];
    for (name, rules) in &sets {
        let out = relabelled_pipeline(&input.body, rules.as_ref());
        let lines = out.iter().filter(|&&b| b == b'\n').count();
        eprintln!("relabel {name}: {} bytes out, {lines} lines", out.len());
    }
    let mut group = c.benchmark_group("relabel/text");
    group
        .throughput(Throughput::Bytes(input.body.len() as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10);
    // The same rule set page after page, as an upstream's scrapes go: what the rules made of
    // each family of the last page is reused (only values change between scrapes).
    for (name, rules) in &sets {
        group.bench_function(format!("{name}/{}", input.name), |b| {
            b.iter(|| black_box(relabelled_pipeline(&input.body, rules.as_ref())))
        });
    }
    // The first page of an upstream: nothing known yet.
    for (name, rules) in [
        ("typical-first", &typical),
        ("rewrite-all-first", &rewrite_all),
    ] {
        group.bench_function(format!("{name}/{}", input.name), |b| {
            b.iter(|| black_box(relabelled_pipeline(&input.body, Some(&rule_set(rules)))))
        });
    }
    group.finish();
}
