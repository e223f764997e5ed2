//! The benchmark inputs, shared by the exposition crate's benchmark
//! (`crates/expfmt/benches/expfmt.rs`) and sysport's own (`benches/relabel.rs`): realistic
//! engine pages of several sizes, made by the shared fixture generator when a Python with
//! `prometheus_client` is found, else from the checked-in fixtures replicated per engine (see
//! `crates/expfmt/benches/expfmt.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use sysport_expfmt::{Format, ParseLimits};

pub const SMALL_PROM: &[u8] = include_bytes!("../../../tests/fixtures/small.prom");
pub const SMALL_OM: &[u8] = include_bytes!("../../../tests/fixtures/small.openmetrics.txt");
pub const MEDIUM_PROM: &[u8] = include_bytes!("../../../tests/fixtures/medium.prom");
pub const MEDIUM_OM: &[u8] = include_bytes!("../../../tests/fixtures/medium.openmetrics.txt");

pub const KEEP: [&str; 2] = ["vllm:", "lmcache:"];

/// The generator flags of `medium.prom` (see the fixtures' `make_samples.sh`), engines apart.
pub const MEDIUM_FLAGS: &[&str] = &[
    "--lmcache",
    "--tp",
    "2",
    "--lora-adapters",
    "4",
    "--spec-decode",
    "2",
];

/// Sysport's default limits, with room for the huge input's series.
pub const LIMITS: ParseLimits = ParseLimits {
    max_line_bytes: 1 << 20,
    max_series: 250_000,
    max_families: 20_000,
    max_labels: 64,
    max_label_value_bytes: 512 << 10,
};

/// One benchmark input.
pub struct Input {
    pub name: &'static str,
    pub format: Format,
    pub body: Bytes,
    /// Where the bytes came from, for the log.
    pub source: String,
}

/// A size of input and how to make it.
pub struct Size {
    pub name: &'static str,
    /// Data-parallel engines; `None` for the cut fixture.
    pub engines: Option<usize>,
    /// The generator flags besides `--engines`, and the fixtures replicated without Python.
    pub flags: &'static [&'static str],
    pub fixture: (&'static [u8], &'static [u8]),
}

pub const SIZES: [Size; 4] = [
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

/// Criterion's own rule: `cargo bench` passes `--bench`; `cargo test` does not, or adds `--test`.
pub fn is_test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let test = args.iter().any(|a| a == "--test");
    !bench || test
}

pub fn format_name(f: Format) -> &'static str {
    match f {
        Format::Text => "text",
        Format::OpenMetrics => "openmetrics",
    }
}

/// `gen_vllm_like.py` and a Python that can run it.
pub struct Generator {
    pub python: PathBuf,
    pub script: PathBuf,
    pub http: bool,
}

impl Generator {
    pub fn find() -> Option<Generator> {
        let root = repo_root();
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

pub fn make_input(size: &Size, format: Format, python: Option<&Generator>) -> Input {
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
pub fn cut(fixture: &[u8], at: usize, format: Format) -> Vec<u8> {
    let end = find(&fixture[at..], b"\n# HELP ").map_or(fixture.len(), |i| at + i + 1);
    let mut out = fixture[..end].to_vec();
    if format == Format::OpenMetrics && !out.ends_with(b"# EOF\n") {
        out.extend_from_slice(b"# EOF\n");
    }
    out
}

/// The fixture as its registry would render it with `engines` data-parallel engines.
pub fn replicate(fixture: &[u8], engines: usize, format: Format) -> Vec<u8> {
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
pub fn engine_value(line: &[u8]) -> Option<(usize, usize, usize)> {
    let at = find(line, b"engine=\"")?;
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

pub fn engine_count(fixture: &[u8]) -> usize {
    fixture
        .split(|&b| b == b'\n')
        .filter_map(engine_value)
        .map(|(_, _, n)| n + 1)
        .max()
        .unwrap_or(0)
}

/// The repository root: the nearest directory above the benchmark's package with a
/// `Cargo.lock` (the workspace's).
fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(here)
        .to_path_buf()
}

/// The generator to make inputs with, or `None` for the fixtures (in test mode, or with
/// `EXPFMT_BENCH_INPUTS=fixtures`); says which on stderr.
pub fn generator(test_mode: bool) -> Option<Generator> {
    let python = if test_mode || std::env::var("EXPFMT_BENCH_INPUTS").as_deref() == Ok("fixtures") {
        None
    } else {
        Generator::find()
    };
    match &python {
        Some(g) => eprintln!("inputs: gen_vllm_like.py via {}", g.python.display()),
        None => eprintln!("inputs: checked-in fixtures, replicated per engine"),
    }
    python
}

/// The input of size `name` in `format`.
pub fn input(name: &str, format: Format, python: Option<&Generator>) -> Input {
    let size = SIZES
        .iter()
        .find(|s| s.name == name)
        .expect("one of the sizes");
    make_input(size, format, python)
}

/// Where `needle` first occurs in `hay` (input preparation only: not timed).
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `body` with the last digit of every sample's value changed (`9` becomes `0`): the page a
/// scrape later on an engine whose every series moved, each line the same length as before.
pub fn values_moved(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    let mut start = 0;
    while start < out.len() {
        let end = out[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(out.len(), |i| start + i);
        let line = &out[start..end];
        if line.first() != Some(&b'#')
            && let Some(space) = line.iter().rposition(|&b| b == b' ')
            && let Some(last) = line[space + 1..].iter().rposition(u8::is_ascii_digit)
        {
            let at = start + space + 1 + last;
            out[at] = if out[at] == b'9' { b'0' } else { out[at] + 1 };
        }
        start = end + 1;
    }
    out
}
