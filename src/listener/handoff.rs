//! Where a plain-HTTP connection of the main port is served, decided by its first request.
//!
//! The kubelet opens a connection for each probe and closes it after the answer; Prometheus
//! and gateways keep one open for their scrapes. So a connection whose first request is a probe
//! stays on the thread that accepted it (which answers probes from what the health checks
//! publish and does nothing heavy), and any other is moved to the worker runtime, where its
//! requests are worked out: a scrape then goes from socket to answer on one thread, with no
//! wake-up of another between its steps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// Whether a request path is a probe's (the configuration in force decides).
pub type IsProbe = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How the main port hands its connections over.
#[derive(Clone)]
pub struct Handoff {
    /// The runtime that serves every connection but the probes'.
    pub worker: tokio::runtime::Handle,
    /// Which paths are the probes'.
    pub is_probe: IsProbe,
}

/// What the first bytes of a connection say about where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum First {
    /// A probe: served where it was accepted.
    Probe,
    /// Anything else, including what is not HTTP at all (the connection's own limits and
    /// hyper answer that wherever it is served).
    Other,
    /// The request-head deadline passed first: closed where it was accepted, and counted.
    Late,
}

/// Most bytes of a request line looked at: a probe's is short.
const LOOK: usize = 256;

/// Judges a connection by its first request line, without taking its bytes; `None` when the
/// client closed first.
pub(super) async fn first(tcp: &TcpStream, is_probe: &IsProbe, deadline: Instant) -> Option<First> {
    let mut buf = [0u8; LOOK];
    let mut pause = Duration::from_millis(1);
    loop {
        let Ok(peeked) = tokio::time::timeout_at(deadline.into(), tcp.peek(&mut buf)).await else {
            return Some(First::Late);
        };
        let n = peeked.ok()?;
        if n == 0 {
            return None;
        }
        if let Some(first) = judge(&buf[..n], is_probe) {
            return Some(first);
        }
        if n == LOOK {
            return Some(First::Other);
        }
        // Part of a request line: peek again once more has had time to come (a head that comes
        // in pieces is rare, and bounded by the head deadline).
        if Instant::now() + pause >= deadline {
            return Some(First::Late);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// `METHOD SP TARGET (SP | ?)`: a probe when the target's path is one; `None` until the path
/// has ended.
fn judge(seen: &[u8], is_probe: &IsProbe) -> Option<First> {
    let line_end = memchr::memchr2(b'\r', b'\n', seen);
    let line = &seen[..line_end.unwrap_or(seen.len())];
    let Some(space) = memchr::memchr(b' ', line) else {
        return line_end.map(|_| First::Other);
    };
    let (method, rest) = (&line[..space], &line[space + 1..]);
    if method != b"GET" && method != b"HEAD" {
        return Some(First::Other);
    }
    match memchr::memchr2(b' ', b'?', rest) {
        Some(end) => {
            let path = std::str::from_utf8(&rest[..end]).ok();
            Some(match path.is_some_and(|p| is_probe(p)) {
                true => First::Probe,
                false => First::Other,
            })
        }
        None => line_end.map(|_| First::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes() -> IsProbe {
        Arc::new(|p: &str| matches!(p, "/live" | "/health" | "/live/engine"))
    }

    #[test]
    fn the_first_request_line_tells_a_probe_from_anything_else() {
        let is = probes();
        let judge = |s: &str| judge(s.as_bytes(), &is);
        assert_eq!(judge("GET /live HTTP/1.1\r\n"), Some(First::Probe));
        assert_eq!(judge("HEAD /health?x=1 HTTP/1.1\r\n"), Some(First::Probe));
        assert_eq!(judge("GET /live/engine "), Some(First::Probe));
        assert_eq!(judge("GET /metrics HTTP/1.1\r\n"), Some(First::Other));
        assert_eq!(judge("GET /livex HTTP/1.1"), Some(First::Other));
        assert_eq!(judge("POST /live HTTP/1.1"), Some(First::Other));
        assert_eq!(judge("\x16\x03\x01"), None);
        assert_eq!(judge("garbage\r\n"), Some(First::Other));
        // Not yet known: the path has not ended.
        assert_eq!(judge("GET /li"), None);
        assert_eq!(judge("GE"), None);
    }
}
