//! `static-serve ADDR FILE [FILE.gz]`: answers every GET with FILE's bytes as text 0.0.4,
//! keep-alive, one thread per connection. With FILE.gz (FILE compressed beforehand, e.g. with
//! `gzip -k`), requests that accept gzip get those bytes with `Content-Encoding: gzip`, as an
//! engine that compresses its answers would send them. The upstream for load tests: as fast as
//! a loopback server gets, so what a proxy in front of it adds is what the proxy costs.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// A rendered response: for GET, for HEAD.
struct Answer {
    get: Vec<u8>,
    head: Vec<u8>,
}

impl Answer {
    fn new(body: &[u8], encoding: Option<&str>) -> Answer {
        let encoding = encoding.map_or(String::new(), |e| format!("Content-Encoding: {e}\r\n"));
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n{encoding}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        let mut get = head.clone();
        get.extend_from_slice(body);
        Answer { get, head }
    }
}

fn serve(stream: TcpStream, plain: Arc<Answer>, gzip: Option<Arc<Answer>>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let is_head = line.starts_with("HEAD ");
        let mut close = line.ends_with("HTTP/1.0\r\n");
        let mut accepts_gzip = false;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
            if lower.starts_with("accept-encoding:") && lower.contains("gzip") {
                accepts_gzip = true;
            }
        }
        let answer = match &gzip {
            Some(g) if accepts_gzip => g,
            _ => &plain,
        };
        writer.write_all(if is_head { &answer.head } else { &answer.get })?;
        if close {
            return Ok(());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, file, gz) = match args.as_slice() {
        [addr, file] => (addr, file, None),
        [addr, file, gz] => (addr, file, Some(gz)),
        _ => {
            eprintln!("usage: static-serve ADDR FILE [FILE.gz]");
            std::process::exit(2);
        }
    };
    let body = std::fs::read(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let plain = Arc::new(Answer::new(&body, None));
    let gzip = gz.map(|gz| {
        let bytes = std::fs::read(gz).unwrap_or_else(|e| panic!("{gz}: {e}"));
        Arc::new(Answer::new(&bytes, Some("gzip")))
    });
    let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    eprintln!(
        "static-serve: {} bytes on {addr}{}",
        body.len(),
        gz.map_or(String::new(), |g| format!(", gzip from {g}"))
    );
    for stream in listener.incoming().flatten() {
        let (plain, gzip) = (plain.clone(), gzip.clone());
        std::thread::spawn(move || {
            let _ = serve(stream, plain, gzip);
        });
    }
}
