//! Throughput of the exposition pipeline on realistic engine scrapes.
//!
//! Each iteration does what one `/metrics` request does with one upstream body: parse it, keep
//! the `vllm:` and `lmcache:` families, merge, and write text 0.0.4 into a fresh buffer sized by
//! `Merge::size_hint` ([`expfmt::parse_merge_write`]). Beside it, on the same bytes, a grep-like line filter built on `memchr`
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
//! After the timings (benchmark mode only), heap allocations per parse+merge+write are counted
//! for several sizes by running this binary under valgrind's memcheck, which counts every
//! `malloc`/`calloc`/`realloc`/`memalign`; a counting `#[global_allocator]` cannot live here
//! because the package forbids `unsafe` code in every target. `bench/load/driver` counts the
//! same with a counting allocator (`bash bench/load.sh` runs it).

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use sysport_bench_inputs::{
    self as inputs, Input, KEEP, LIMITS, SIZES, format_name, is_test_mode, make_input,
};
use sysport_expfmt::{self as expfmt, AddedLabel, Format, Output, PairHasher, ParseOptions};

fn main() {
    if let Ok(spec) = std::env::var(ALLOC_CHILD) {
        alloc_child(&spec);
        return;
    }
    let test_mode = is_test_mode();
    let python = inputs::generator(test_mode);
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
            size_group(&mut group, input);
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
    // The parse after the previous scrape, on one thread (what each line costs; sysport gives
    // a large page a second thread besides): the page unchanged since (every line the prior's
    // whole) and every value changed (only the names and labels the prior's). A live engine's
    // page lies between the two. `parse_once` is not inlined, so that an instruction count can
    // take it alone: `valgrind --tool=callgrind --toggle-collect='*parse_once*'
    // target/release/deps/expfmt-HASH --test text-after-prior/unchanged/large`.
    let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
    let mut group = c.benchmark_group("expfmt/text-after-prior");
    for input in inputs.iter().filter(|i| i.format == Format::Text) {
        size_group(&mut group, input);
        let opts = text_opts(&keep);
        for (case, before) in [
            ("unchanged", input.body.clone()),
            (
                "values-changed",
                Bytes::from(inputs::values_moved(&input.body)),
            ),
        ] {
            let prior = Arc::new(parse_once(&before, &opts, None));
            group.bench_function(format!("{case}/{}", input.name), |b| {
                b.iter(|| black_box(parse_once(&input.body, &opts, Some(&prior))))
            });
        }
    }
    group.finish();
    // The merge and write of a page (as `Pieces`, what sysport sends), parsed fresh and parsed
    // after a prior that was merged itself: then its families with the same series as the
    // prior's, in the same order, are known to hold no duplicates and skip the duplicate table
    // (`NoDuplicates`; pages above 4,096 samples, which have a table per family). Values
    // changed since the prior, as on a live engine. `merge_once` is not inlined, for
    // `--toggle-collect='*merge_once*'`.
    let mut group = c.benchmark_group("expfmt/text-merge");
    for input in inputs.iter().filter(|i| i.format == Format::Text) {
        size_group(&mut group, input);
        let opts = text_opts(&keep);
        let before = Bytes::from(inputs::values_moved(&input.body));
        let prior = Arc::new(parse_once(&before, &opts, None));
        black_box(merge_once(&prior));
        for (case, page) in [
            ("fresh", parse_once(&input.body, &opts, None)),
            (
                "after-merged-prior",
                parse_once(&input.body, &opts, Some(&prior)),
            ),
        ] {
            group.bench_function(format!("{case}/{}", input.name), |b| {
                b.iter(|| black_box(merge_once(&page)))
            });
        }
    }
    group.finish();
    c.final_summary();

    if !test_mode {
        count_allocations(&inputs);
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
    expfmt::parse_merge_write::<Vec<u8>>(body.clone(), format, &opts, added, None, Output::Text)
        .expect("inputs are within the limits")
        .out
}

/// The group's throughput and sampling for `input`: ten flat samples above 1 MiB.
fn size_group(group: &mut BenchmarkGroup<'_, WallTime>, input: &Input) {
    group.throughput(Throughput::Bytes(input.body.len() as u64));
    if input.body.len() > 1 << 20 {
        group.sampling_mode(SamplingMode::Flat).sample_size(10);
    } else {
        group.sampling_mode(SamplingMode::Auto).sample_size(50);
    }
}

/// `body` parsed on this thread in one pass, after `prior`.
#[inline(never)]
fn parse_once(
    body: &Bytes,
    opts: &ParseOptions<'_>,
    prior: Option<&Arc<expfmt::Exposition>>,
) -> expfmt::Exposition {
    expfmt::parse_with(
        body.clone(),
        Format::Text,
        opts,
        expfmt::Split::OnePass,
        prior,
    )
    .expect("inputs are within the limits")
}

/// The options of the parses after a prior: `keep`, no added label.
fn text_opts(keep: &[String]) -> ParseOptions<'_> {
    ParseOptions {
        keep,
        limits: LIMITS,
        added_labels: &[],
        hasher: PairHasher::new(0x5eed),
        allow_reserved: false,
    }
}

/// `page` merged alone and written as runs of its body.
#[inline(never)]
fn merge_once(page: &expfmt::Exposition) -> Vec<Bytes> {
    let sources = [page];
    let opts = expfmt::MergeOptions {
        added: &[],
        names: None,
        hasher: PairHasher::new(0x5eed),
    };
    expfmt::merge_write::<expfmt::Pieces>(&sources, &opts, Output::Text)
        .out
        .finish()
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
