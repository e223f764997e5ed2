//! `static-serve ADDR FILE`: answers every GET with FILE's bytes as text 0.0.4, keep-alive,
//! one thread per connection. The upstream for load tests: as fast as a loopback server gets,
//! so what a proxy in front of it adds is what the proxy costs.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

fn serve(stream: TcpStream, get: Arc<Vec<u8>>, head: Arc<Vec<u8>>) -> std::io::Result<()> {
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
        }
        writer.write_all(if is_head { &head } else { &get })?;
        if close {
            return Ok(());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, file] = args.as_slice() else {
        eprintln!("usage: static-serve ADDR FILE");
        std::process::exit(2);
    };
    let body = std::fs::read(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let header = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let head = Arc::new(header.clone().into_bytes());
    let mut get = header.into_bytes();
    get.extend_from_slice(&body);
    let get = Arc::new(get);
    let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    eprintln!("static-serve: {} bytes on {addr}", body.len());
    for stream in listener.incoming().flatten() {
        let (get, head) = (get.clone(), head.clone());
        std::thread::spawn(move || {
            let _ = serve(stream, get, head);
        });
    }
}
