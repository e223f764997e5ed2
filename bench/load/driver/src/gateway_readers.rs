//! `gateway-readers`: the load inference gateways put on one model server's metrics endpoint,
//! for bench/gateway.sh.
//!
//! - N readers (default 20), each one gateway replica's endpoint picker: one GET every
//!   `--period-ms` (default 50) on a fixed schedule, the readers' first ticks spread evenly over
//!   one period. Each reader has its own keep-alive connection and never more than one request
//!   outstanding. Ticks behave as Go's `time.Ticker`, which the picker's refresh loop uses: a tick
//!   that fires while a read is outstanding waits and is taken as soon as the read ends (counted
//!   `late`); any further tick in that time is dropped (counted `skipped`). Requests are sent as
//!   Go's default `http.Client` sends them (`User-Agent: Go-http-client/1.1`,
//!   `Accept-Encoding: gzip`, no `Accept`), with the picker's 5 s fetch timeout.
//! - One Prometheus-like scraper: a full scrape every `--scrape-period-ms` (default 5000) with
//!   Prometheus 2.x's headers (OpenMetrics-first `Accept`, `Accept-Encoding: gzip`,
//!   `X-Prometheus-Scrape-Timeout-Seconds`), same ticker rules.
//!
//! A read fails on a connection or I/O error, a timeout, a status other than 200, a gzip body
//! that does not decode, or a body that lacks any `--expect` string (default
//! `vllm:num_requests_waiting`). A keep-alive connection the server closed while idle is
//! reopened and the request sent again once, as Go's transport does (counted `retries`).
//! Latency runs from the first byte written (or the connect, on a new connection) to the last
//! body byte read. When a response has a `Sysport-Age` header (seconds, decimal), its values are
//! summarised too.
//!
//! Usage:
//!   gateway-readers --reader-url URL --scrape-url URL [--readers 20] [--period-ms 50]
//!                   [--scrape-period-ms 5000] [--duration-s 60] [--timeout-s 5]
//!                   [--reader-gzip 1|0] [--expect STRING]...
//!
//! Prints one JSON object on stdout. Every run is bounded: no request starts after
//! `--duration-s`, and each one ends within `--timeout-s`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Prometheus 2.x's `Accept` header for a scrape (before `scrape_protocols` existed).
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = rest
        .find('/')
        .map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let with_port = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    Ok(Target {
        addr,
        host: host.to_owned(),
        path: path.to_owned(),
    })
}

struct Args {
    reader: Target,
    scrape: Target,
    readers: u32,
    period: Duration,
    scrape_period: Duration,
    duration: Duration,
    timeout: Duration,
    reader_gzip: bool,
    expect: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut reader = None;
    let mut scrape = None;
    let mut readers = 20u32;
    let mut period_ms = 50u64;
    let mut scrape_period_ms = 5000u64;
    let mut duration_s = 60f64;
    let mut timeout_s = 5f64;
    let mut reader_gzip = true;
    let mut expect = Vec::new();
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--reader-url" => reader = Some(parse_url(value)?),
            "--scrape-url" => scrape = Some(parse_url(value)?),
            "--readers" => readers = num(value)? as u32,
            "--period-ms" => period_ms = num(value)? as u64,
            "--scrape-period-ms" => scrape_period_ms = num(value)? as u64,
            "--duration-s" => duration_s = num(value)?,
            "--timeout-s" => timeout_s = num(value)?,
            "--reader-gzip" => reader_gzip = value != "0",
            "--expect" => expect.push(value.clone()),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if expect.is_empty() {
        expect.push("vllm:num_requests_waiting".to_owned());
    }
    if !(0.1..=3600.0).contains(&duration_s) || !(0.01..=60.0).contains(&timeout_s) {
        return Err("--duration-s must be in 0.1..=3600, --timeout-s in 0.01..=60".into());
    }
    if period_ms == 0 || scrape_period_ms == 0 || readers > 10_000 {
        return Err("periods must be > 0, --readers at most 10000".into());
    }
    Ok(Args {
        reader: reader.ok_or("--reader-url is required")?,
        scrape: scrape.ok_or("--scrape-url is required")?,
        readers,
        period: Duration::from_millis(period_ms),
        scrape_period: Duration::from_millis(scrape_period_ms),
        duration: Duration::from_secs_f64(duration_s),
        timeout: Duration::from_secs_f64(timeout_s),
        reader_gzip,
        expect,
    })
}

/// Why a read failed: the key in `failures`.
enum Fail {
    Connect(String),
    Timeout,
    Io(String),
    Status(u16),
    Body(String),
}

impl Fail {
    fn key(&self) -> &'static str {
        match self {
            Fail::Connect(_) => "connect",
            Fail::Timeout => "timeout",
            Fail::Io(_) => "io",
            Fail::Status(_) => "status",
            Fail::Body(_) => "body",
        }
    }

    fn describe(&self) -> String {
        match self {
            Fail::Connect(e) => format!("connect: {e}"),
            Fail::Timeout => "timeout".into(),
            Fail::Io(e) => format!("io: {e}"),
            Fail::Status(code) => format!("status {code}"),
            Fail::Body(e) => format!("body: {e}"),
        }
    }

    fn io(e: std::io::Error) -> Fail {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Fail::Timeout,
            _ => Fail::Io(e.to_string()),
        }
    }
}

struct Response {
    status: u16,
    gzip: bool,
    age: Option<f64>,
    body: Vec<u8>,
    close: bool,
}

/// One keep-alive HTTP/1.1 connection, reopened when the server closes it.
struct Client {
    addr: SocketAddr,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
    connects: u64,
    retries: u64,
}

impl Client {
    fn new(addr: SocketAddr, timeout: Duration) -> Client {
        Client {
            addr,
            timeout,
            conn: None,
            connects: 0,
            retries: 0,
        }
    }

    fn request(&mut self, req: &[u8]) -> Result<Response, Fail> {
        for attempt in 0..2 {
            let reused = self.conn.is_some();
            if !reused {
                let stream = TcpStream::connect_timeout(&self.addr, self.timeout)
                    .map_err(|e| Fail::Connect(e.to_string()))?;
                stream.set_nodelay(true).map_err(Fail::io)?;
                stream
                    .set_read_timeout(Some(self.timeout))
                    .map_err(Fail::io)?;
                stream
                    .set_write_timeout(Some(self.timeout))
                    .map_err(Fail::io)?;
                self.connects += 1;
                self.conn = Some(BufReader::with_capacity(64 << 10, stream));
            }
            let conn = self.conn.as_mut().expect("connected above");
            match exchange(conn, req) {
                Ok(resp) => {
                    if resp.close {
                        self.conn = None;
                    }
                    return Ok(resp);
                }
                Err((fail, answered)) => {
                    self.conn = None;
                    // An idle connection the server closed: nothing was answered, send again.
                    if reused && !answered && attempt == 0 && !matches!(fail, Fail::Timeout) {
                        self.retries += 1;
                        continue;
                    }
                    return Err(fail);
                }
            }
        }
        unreachable!("the second attempt always returns")
    }
}

/// Writes `req` and reads one response; the error says whether any response byte had come.
fn exchange(conn: &mut BufReader<TcpStream>, req: &[u8]) -> Result<Response, (Fail, bool)> {
    conn.get_mut()
        .write_all(req)
        .map_err(|e| (Fail::io(e), false))?;
    let mut line = String::new();
    match conn.read_line(&mut line) {
        Ok(0) => {
            return Err((
                Fail::Io("connection closed before a response".into()),
                false,
            ));
        }
        Ok(_) => {}
        Err(e) => {
            let reset = matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            );
            return Err((Fail::io(e), !reset));
        }
    }
    let err = |e: std::io::Error| (Fail::io(e), true);
    let mut parts = line.split_ascii_whitespace();
    let version = parts.next().unwrap_or("");
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| (Fail::Io(format!("bad status line {line:?}")), true))?;
    let mut close = version == "HTTP/1.0";
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut gzip = false;
    let mut age = None;
    loop {
        line.clear();
        if conn.read_line(&mut line).map_err(err)? == 0 {
            return Err((Fail::Io("connection closed in the headers".into()), true));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().ok(),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-encoding" => gzip = value.eq_ignore_ascii_case("gzip"),
            "connection" => close |= value.to_ascii_lowercase().contains("close"),
            "sysport-age" => age = value.parse::<f64>().ok(),
            _ => {}
        }
    }
    let mut body = Vec::with_capacity(length.unwrap_or(4096));
    if chunked {
        loop {
            line.clear();
            if conn.read_line(&mut line).map_err(err)? == 0 {
                return Err((Fail::Io("connection closed in a chunk size".into()), true));
            }
            let size_text = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| (Fail::Io(format!("bad chunk size {line:?}")), true))?;
            if size == 0 {
                // Trailers, then the blank line.
                loop {
                    line.clear();
                    if conn.read_line(&mut line).map_err(err)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            conn.read_exact(&mut body[start..]).map_err(err)?;
            line.clear();
            conn.read_line(&mut line).map_err(err)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body).map_err(err)?;
    } else {
        conn.read_to_end(&mut body).map_err(err)?;
        close = true;
    }
    Ok(Response {
        status,
        gzip,
        age,
        body,
        close,
    })
}

/// What one reader (or the scraper) saw.
#[derive(Default)]
struct Stats {
    /// Ticks that fired before the end: taken (a request) + skipped.
    ticks: u64,
    requests: u64,
    ok: u64,
    failures: BTreeMap<&'static str, u64>,
    errors: Vec<String>,
    skipped: u64,
    late: u64,
    latency_us: Vec<u64>,
    /// Time from a taken tick to its request's start.
    delay_us: Vec<u64>,
    ages: Vec<f64>,
    wire_bytes: u64,
    body_bytes: u64,
    connects: u64,
    retries: u64,
}

impl Stats {
    fn merge(&mut self, other: Stats) {
        self.ticks += other.ticks;
        self.requests += other.requests;
        self.ok += other.ok;
        for (k, v) in other.failures {
            *self.failures.entry(k).or_default() += v;
        }
        for e in other.errors {
            if self.errors.len() < 8 {
                self.errors.push(e);
            }
        }
        self.skipped += other.skipped;
        self.late += other.late;
        self.latency_us.extend(other.latency_us);
        self.delay_us.extend(other.delay_us);
        self.ages.extend(other.ages);
        self.wire_bytes += other.wire_bytes;
        self.body_bytes += other.body_bytes;
        self.connects += other.connects;
        self.retries += other.retries;
    }

    fn fail(&mut self, f: Fail) {
        *self.failures.entry(f.key()).or_default() += 1;
        if self.errors.len() < 8 {
            self.errors.push(f.describe());
        }
    }
}

/// Checks a response; returns the decoded body length.
fn check(resp: &Response, expect: &[String]) -> Result<usize, Fail> {
    if resp.status != 200 {
        return Err(Fail::Status(resp.status));
    }
    let decoded;
    let body: &[u8] = if resp.gzip {
        let mut out = Vec::with_capacity(resp.body.len() * 8);
        flate2::read::GzDecoder::new(&resp.body[..])
            .read_to_end(&mut out)
            .map_err(|e| Fail::Body(format!("gzip: {e}")))?;
        decoded = out;
        &decoded
    } else {
        &resp.body
    };
    for needle in expect {
        if memchr::memmem::find(body, needle.as_bytes()).is_none() {
            return Err(Fail::Body(format!(
                "{} bytes without {needle:?}",
                body.len()
            )));
        }
    }
    Ok(body.len())
}

/// Runs one ticker from `first` every `period` until `end`, one request per taken tick.
fn run_ticker(
    client: &mut Client,
    req: &[u8],
    expect: &[String],
    first: Instant,
    period: Duration,
    end: Instant,
) -> Stats {
    let mut s = Stats::default();
    let tick = |k: u64| first + period * k as u32;
    // Ticks before `end` from index `k` on.
    let before_end = |k: u64| -> u64 {
        if tick(k) >= end {
            0
        } else {
            ((end - tick(k)).as_nanos().div_ceil(period.as_nanos())) as u64
        }
    };
    let mut next = 0u64;
    let mut busy_until = first;
    loop {
        let t = tick(next);
        if t >= end {
            break;
        }
        let now = Instant::now();
        if now < t {
            thread::sleep(t - now);
            continue;
        }
        if now >= end {
            // The last read ended after the run: the ticks still due are dropped.
            let n = before_end(next);
            s.ticks += n;
            s.skipped += n;
            break;
        }
        // Ticks `next..=last` have fired: `next` waited in the channel, the rest were dropped.
        let last = ((now - first).as_nanos() / period.as_nanos()) as u64;
        s.ticks += last - next + 1;
        s.skipped += last - next;
        if t < busy_until {
            s.late += 1;
        }
        s.delay_us.push((now - t).as_micros() as u64);
        next = last + 1;
        s.requests += 1;
        let started = Instant::now();
        let result = client.request(req);
        let done = Instant::now();
        busy_until = done;
        match result {
            Ok(resp) => {
                let elapsed = done - started;
                if elapsed > client.timeout {
                    s.fail(Fail::Timeout);
                    continue;
                }
                match check(&resp, expect) {
                    Ok(n) => {
                        s.ok += 1;
                        s.wire_bytes += resp.body.len() as u64;
                        s.body_bytes += n as u64;
                        s.latency_us.push(elapsed.as_micros() as u64);
                        if let Some(age) = resp.age {
                            s.ages.push(age);
                        }
                    }
                    Err(f) => s.fail(f),
                }
            }
            Err(f) => s.fail(f),
        }
    }
    s.connects = client.connects;
    s.retries = client.retries;
    s
}

fn pct_u(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        "null".into()
    }
}

fn summary_ms(values: &mut [u64]) -> String {
    values.sort_unstable();
    let mean = if values.is_empty() {
        f64::NAN
    } else {
        values.iter().sum::<u64>() as f64 / values.len() as f64
    };
    let over_1ms = values.len() - values.partition_point(|&v| v <= 1000);
    format!(
        "{{\"n\": {}, \"p50\": {}, \"p90\": {}, \"p99\": {}, \"p999\": {}, \"max\": {}, \"mean\": {}, \"over_1ms\": {over_1ms}}}",
        values.len(),
        num(pct_u(values, 0.50) / 1e3),
        num(pct_u(values, 0.90) / 1e3),
        num(pct_u(values, 0.99) / 1e3),
        num(pct_u(values, 0.999) / 1e3),
        num(values.last().map_or(f64::NAN, |&v| v as f64) / 1e3),
        num(mean / 1e3),
    )
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn stats_json(name: &str, url: &str, mut s: Stats) -> String {
    let failed: u64 = s.failures.values().sum();
    let failures = s
        .failures
        .iter()
        .map(|(k, v)| format!("{}: {v}", json_str(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let errors = s
        .errors
        .iter()
        .map(|e| json_str(e))
        .collect::<Vec<_>>()
        .join(", ");
    s.ages.sort_by(f64::total_cmp);
    let per_ok = |v: u64| {
        if s.ok == 0 {
            "null".to_owned()
        } else {
            num(v as f64 / s.ok as f64)
        }
    };
    let age = |p: f64| {
        if s.ages.is_empty() {
            "null".to_owned()
        } else {
            let i = ((p * s.ages.len() as f64).ceil() as usize).clamp(1, s.ages.len()) - 1;
            num(s.ages[i])
        }
    };
    format!(
        "{{\"kind\": {}, \"url\": {}, \"ticks\": {}, \"requests\": {}, \"ok\": {}, \"failed\": {failed}, \
         \"failures\": {{{failures}}}, \"errors\": [{errors}], \"skipped\": {}, \"late\": {}, \
         \"latency_ms\": {}, \"tick_delay_ms\": {}, \"wire_bytes_per_ok_read\": {}, \
         \"body_bytes_per_ok_read\": {}, \"age_s\": {{\"n\": {}, \"p50\": {}, \"p99\": {}, \"max\": {}}}, \
         \"connects\": {}, \"retries\": {}}}",
        json_str(name),
        json_str(url),
        s.ticks,
        s.requests,
        s.ok,
        s.skipped,
        s.late,
        summary_ms(&mut s.latency_us),
        summary_ms(&mut s.delay_us),
        per_ok(s.wire_bytes),
        per_ok(s.body_bytes),
        s.ages.len(),
        age(0.5),
        age(0.99),
        age(1.0),
        s.connects,
        s.retries,
    )
}

/// utime + stime of this process in clock ticks, from /proc/self/stat.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn request_bytes(t: &Target, extra: &str) -> Arc<Vec<u8>> {
    Arc::new(format!("GET {} HTTP/1.1\r\nHost: {}\r\n{extra}\r\n", t.path, t.host).into_bytes())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gateway-readers: {e}");
            eprintln!(
                "usage: gateway-readers --reader-url URL --scrape-url URL [--readers N] [--period-ms MS] \
                 [--scrape-period-ms MS] [--duration-s S] [--timeout-s S] [--reader-gzip 1|0] [--expect STR]..."
            );
            return ExitCode::from(2);
        }
    };
    let reader_req = request_bytes(
        &args.reader,
        &format!(
            "User-Agent: Go-http-client/1.1\r\n{}",
            if args.reader_gzip {
                "Accept-Encoding: gzip\r\n"
            } else {
                ""
            }
        ),
    );
    let timeout_header = args.timeout.as_secs_f64();
    let scrape_req = request_bytes(
        &args.scrape,
        &format!(
            "User-Agent: Prometheus/2.53.0\r\nAccept: {PROMETHEUS_ACCEPT}\r\nAccept-Encoding: gzip\r\n\
             X-Prometheus-Scrape-Timeout-Seconds: {timeout_header}\r\n"
        ),
    );
    let expect = Arc::new(args.expect.clone());
    let cpu0 = cpu_ticks();
    // Threads start first; the schedule begins a little later so none misses its first tick.
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + args.duration;
    let mut handles = Vec::new();
    for i in 0..args.readers {
        let (req, expect) = (reader_req.clone(), expect.clone());
        let (addr, timeout, period) = (args.reader.addr, args.timeout, args.period);
        let first = start + period * i / args.readers;
        handles.push(thread::spawn(move || {
            let mut client = Client::new(addr, timeout);
            run_ticker(&mut client, &req, &expect, first, period, end)
        }));
    }
    let scraper = {
        let (req, expect) = (scrape_req.clone(), expect.clone());
        let (addr, timeout, period) = (args.scrape.addr, args.timeout, args.scrape_period);
        let first = start + (period / 10).min(Duration::from_millis(500));
        thread::spawn(move || {
            let mut client = Client::new(addr, timeout);
            run_ticker(&mut client, &req, &expect, first, period, end)
        })
    };
    let mut reads = Stats::default();
    for h in handles {
        reads.merge(h.join().expect("reader thread"));
    }
    let scrapes = scraper.join().expect("scraper thread");
    let wall = start.elapsed().as_secs_f64();
    let cpu = match (cpu0, cpu_ticks()) {
        (Some(a), Some(b)) => (b - a).to_string(),
        _ => "null".into(),
    };
    let secs = args.duration.as_secs_f64();
    let reader_url = format!("http://{}{}", args.reader.host, args.reader.path);
    let scrape_url = format!("http://{}{}", args.scrape.host, args.scrape.path);
    let served = reads.ok as f64 / secs;
    println!(
        "{{\"readers\": {}, \"period_ms\": {}, \"scrape_period_ms\": {}, \"duration_s\": {}, \"wall_s\": {}, \
         \"reader_gzip\": {}, \"offered_reads_per_s\": {}, \"served_reads_per_s\": {}, \"cpu_ticks\": {cpu}, \
         \"reads\": {}, \"scrapes\": {}}}",
        args.readers,
        args.period.as_millis(),
        args.scrape_period.as_millis(),
        num(secs),
        num(wall),
        args.reader_gzip,
        num(args.readers as f64 / args.period.as_secs_f64()),
        num(served),
        stats_json("reads", &reader_url, reads),
        stats_json("scrapes", &scrape_url, scrapes),
    );
    ExitCode::SUCCESS
}
