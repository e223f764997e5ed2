//! `expfmt-driver`: sysport's exposition pipeline outside criterion, on files.
//!
//! - `expfmt-driver allocs FILE...`: heap allocations per parse+filter+merge+write_text, counted
//!   by a global allocator that wraps the system one, and the median wall time per run.
//! - `expfmt-driver phases FILE...`: median time of each step (parse, merge, write_text) and of
//!   a plain copy of the kept lines (the floor for the write step). The parse is also timed in
//!   one pass, and after a prior (the same page with other values, as a scrape before it).
//! - `expfmt-driver big-allocs FILE`: every allocation or reallocation of 256 KiB or more
//!   made by one run of the pipeline, in order.
//! - `expfmt-driver rss FILE [keep-last]`: peak RSS of five fetch+pipeline rounds in a row;
//!   `keep-last` holds the previous round's parsed body meanwhile, as a scrape target's cached
//!   last fetch does.
//! - `expfmt-driver loop N FILE`: the pipeline N times and nothing else, for callgrind or perf.
//!
//! The pipeline is the one a `/metrics` request runs for one upstream: keep `vllm:` and
//! `lmcache:`, no added labels, text 0.0.4 out into a buffer sized by `Merge::size_hint`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use bytes::Bytes;

use sysport_expfmt::{
    self as expfmt, Format, MergeOptions, Output, PairHasher, ParseLimits, ParseOptions, Split,
};

/// Counts every allocation and reallocation; frees are not interesting here.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Sizes of large allocations (bit 63 set: a reallocation), for `big-allocs`.
static BIG: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static BIG_COUNT: AtomicU64 = AtomicU64::new(0);

fn note(size: usize, realloc: bool) {
    if size >= 256 << 10 {
        let i = BIG_COUNT.fetch_add(1, Relaxed) as usize;
        if i < BIG.len() {
            BIG[i].store(size as u64 | (realloc as u64) << 63, Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        note(layout.size(), false);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        note(layout.size(), false);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new_size as u64, Relaxed);
        note(new_size, true);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const LIMITS: ParseLimits = ParseLimits {
    max_line_bytes: 1 << 20,
    max_series: 250_000,
    max_families: 20_000,
    max_labels: 64,
    max_label_value_bytes: 512 << 10,
};

struct Run {
    series: usize,
    families: usize,
    out_bytes: usize,
}

fn pipeline(body: &Bytes, format: Format, keep: &[String]) -> Run {
    let hasher = PairHasher::new(0x5eed);
    let opts = ParseOptions {
        keep,
        limits: LIMITS,
        added_labels: &[],
        hasher,
        allow_reserved: false,
    };
    let w =
        expfmt::parse_merge_write::<Vec<u8>>(body.clone(), format, &opts, &[], None, Output::Text)
            .expect("input within the limits");
    let run = Run {
        series: w.page.all_samples().len(),
        families: w.families,
        out_bytes: w.out.len(),
    };
    black_box(w.out);
    run
}

fn read(path: &str) -> (Bytes, Format) {
    let body = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let format = Format::detect(&body);
    (Bytes::from(body), format)
}

fn keep() -> Vec<String> {
    vec!["vllm:".to_owned(), "lmcache:".to_owned()]
}

fn allocs(files: &[String]) {
    println!(
        "| input | bytes | format | kept series | families | allocations | of which realloc | bytes allocated | median time |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    let keep = keep();
    for path in files {
        let (body, format) = read(path);
        pipeline(&body, format, &keep);
        let (a0, r0, b0) = (
            ALLOCS.load(Relaxed),
            REALLOCS.load(Relaxed),
            BYTES.load(Relaxed),
        );
        const N: u64 = 5;
        let mut run = None;
        for _ in 0..N {
            run = Some(pipeline(&body, format, &keep));
        }
        let run = run.expect("ran at least once");
        let allocs = (ALLOCS.load(Relaxed) - a0) / N;
        let reallocs = (REALLOCS.load(Relaxed) - r0) / N;
        let bytes = (BYTES.load(Relaxed) - b0) / N;
        let mut times: Vec<f64> = (0..21)
            .map(|_| {
                let t = Instant::now();
                pipeline(&body, format, &keep);
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.as_str(), |n| n.to_str().unwrap_or(path));
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {:.3} ms ({:.0} MB/s) |",
            body.len(),
            match format {
                Format::Text => "text",
                Format::OpenMetrics => "openmetrics",
            },
            run.series,
            run.families,
            allocs + reallocs,
            reallocs,
            bytes,
            times[10] * 1e3,
            body.len() as f64 / times[10] / 1e6,
        );
        let _ = run.out_bytes;
    }
}

fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..31)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[15]
}

fn phases(files: &[String]) {
    println!(
        "| input | bytes | parse ms | in one pass | parse after prior ms | in one pass | merge ms | write_text ms | total ms | copy of kept bytes ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let keep = keep();
    let hasher = PairHasher::new(0x5eed);
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &[],
        hasher,
        allow_reserved: false,
    };
    let mopts = MergeOptions {
        added: &[],
        names: None,
        hasher,
    };
    for path in files {
        let (body, format) = read(path);
        let parse = median_ms(|| {
            black_box(expfmt::parse(body.clone(), format, &opts).expect("within limits"));
        });
        let exp = expfmt::parse(body.clone(), format, &opts).expect("within limits");
        // The previous scrape of the same page: same series, other values.
        let prior = std::sync::Arc::new(
            expfmt::parse(other_values(&body), format, &opts).expect("within limits"),
        );
        let after = median_ms(|| {
            black_box(
                expfmt::parse_after(body.clone(), format, &opts, Some(&prior))
                    .expect("within limits"),
            );
        });
        let one_pass = |prior: Option<&std::sync::Arc<expfmt::Exposition>>| {
            median_ms(|| {
                black_box(
                    expfmt::parse_with(body.clone(), format, &opts, Split::OnePass, prior)
                        .expect("within limits"),
                );
            })
        };
        let (one, one_after) = (one_pass(None), one_pass(Some(&prior)));
        let sources = [&exp];
        let merge = median_ms(|| {
            black_box(expfmt::merge(&sources, &mopts));
        });
        let m = expfmt::merge(&sources, &mopts);
        let write = median_ms(|| {
            let mut out = Vec::with_capacity(m.size_hint());
            expfmt::write_text(&m, &mut out);
            black_box(out);
        });
        let kept = exp.kept_bytes();
        let copy = median_ms(|| {
            let mut out = Vec::with_capacity(kept);
            out.extend_from_slice(&body[..kept.min(body.len())]);
            black_box(out);
        });
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.as_str(), |n| n.to_str().unwrap_or(path));
        println!(
            "| {name} | {} | {parse:.3} | {one:.3} | {after:.3} | {one_after:.3} | {merge:.3} | {write:.3} | {:.3} | {copy:.3} |",
            body.len(),
            parse + merge + write
        );
    }
}

/// `body` with the last digit of every sample value changed: the page of a scrape later.
fn other_values(body: &[u8]) -> Bytes {
    let mut out = body.to_vec();
    let mut start = 0;
    while start < out.len() {
        let end = memchr::memchr(b'\n', &out[start..]).map_or(out.len(), |i| start + i);
        if out[start] != b'#'
            && let Some(sp) = memchr::memrchr(b' ', &out[start..end])
            && let Some(last) = out[start + sp + 1..end]
                .iter()
                .rposition(u8::is_ascii_digit)
        {
            let at = start + sp + 1 + last;
            out[at] = if out[at] == b'9' { b'0' } else { out[at] + 1 };
        }
        start = end + 1;
    }
    Bytes::from(out)
}

fn big_allocs(path: &str) {
    let (body, format) = read(path);
    let first = BIG_COUNT.load(Relaxed);
    pipeline(&body, format, &keep());
    let last = BIG_COUNT.load(Relaxed).min(BIG.len() as u64);
    for i in first..last {
        let v = BIG[i as usize].load(Relaxed);
        let what = if v >> 63 == 1 { "realloc" } else { "alloc" };
        println!("{what} {}", v & !(1 << 63));
    }
}

fn rss(path: &str, keep_last: bool) {
    let keep = keep();
    let hasher = PairHasher::new(1);
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &[],
        hasher,
        allow_reserved: false,
    };
    let mut last = None;
    for _ in 0..5 {
        let (body, format) = read(path);
        let expfmt::Rewritten { page, out, .. } =
            expfmt::parse_merge_write::<Vec<u8>>(body, format, &opts, &[], None, Output::Text)
                .expect("input within the limits");
        black_box(&out);
        drop(out);
        if keep_last {
            last = Some(page);
        }
    }
    black_box(&last);
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs is mounted");
    for line in status.lines().filter(|l| l.starts_with("VmHWM")) {
        println!("{line}");
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("allocs") if args.len() > 1 => allocs(&args[1..]),
        Some("phases") if args.len() > 1 => phases(&args[1..]),
        Some("big-allocs") if args.len() == 2 => big_allocs(&args[1]),
        Some("rss") if args.len() == 2 || args.len() == 3 => {
            rss(&args[1], args.get(2).is_some_and(|a| a == "keep-last"))
        }
        Some("loop") if args.len() == 3 => {
            let n: usize = args[1].parse().expect("N is a number");
            let (body, format) = read(&args[2]);
            let keep = keep();
            let mut written = 0;
            for _ in 0..n {
                written += pipeline(&body, format, &keep).out_bytes;
            }
            eprintln!("{n} runs, {written} bytes written");
        }
        _ => {
            eprintln!(
                "usage: expfmt-driver allocs|phases FILE... | big-allocs FILE | rss FILE [keep-last] | loop N FILE"
            );
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
