//! gzip on the worker runtime, made once per shared rendering.
//!
//! A `/metrics` answer is the engine families (one rendering shared by every request of the same
//! fetches) followed by sysport's own families (per request). Its gzip form is one gzip member
//! (RFC 1952) whose deflate stream (RFC 1951) is the engine part compressed once, ended by a
//! sync flush so that it stops on a byte boundary without a final block, then the request's own
//! part compressed afresh with the final block: deflate blocks may follow one another whatever
//! compressor made them, and the own part's back-references reach only its own bytes. The CRC
//! of the whole is combined from the two parts'. So eight gzip scrapers of a 15 MB page
//! compress it once, on the worker, never on the connections' thread.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

/// The gzip header: deflate, no name or comment, no modification time, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Below this an answer goes out as it is: gzip would save nothing worth its header.
pub(super) const MIN_BYTES: usize = 256;

/// A deflate segment that ends on a byte boundary without a final block, with its input's CRC
/// and length.
#[derive(Debug, Clone)]
pub(super) struct Deflated {
    pub(super) data: Bytes,
    crc: crc32fast::Hasher,
    len: u64,
}

impl Deflated {
    /// `runs`, compressed at the fastest level and sync-flushed.
    pub(super) fn of(runs: &[Bytes]) -> Deflated {
        let len: usize = runs.iter().map(Bytes::len).sum();
        let mut c = Compress::new(Compression::fast(), false);
        let mut out = Vec::with_capacity(len / 4 + 1024);
        let mut crc = crc32fast::Hasher::new();
        for run in runs {
            crc.update(run);
            deflate(&mut c, run, &mut out, FlushCompress::None);
        }
        deflate(&mut c, &[], &mut out, FlushCompress::Sync);
        Deflated {
            data: Bytes::from(out),
            crc,
            len: len as u64,
        }
    }

    /// The rest of one gzip member after the header and this segment: `tail` compressed with the
    /// final block, then the CRC and length of this segment's input and `tail` together.
    pub(super) fn finish_with(&self, tail: &[u8]) -> Vec<u8> {
        let mut c = Compress::new(Compression::fast(), false);
        let mut out = Vec::with_capacity(tail.len() / 3 + 64);
        deflate(&mut c, tail, &mut out, FlushCompress::Finish);
        let mut crc = self.crc.clone();
        let mut tail_crc = crc32fast::Hasher::new();
        tail_crc.update(tail);
        crc.combine(&tail_crc);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE: the input's length modulo 2^32.
        let size = (self.len + tail.len() as u64) as u32;
        out.extend_from_slice(&size.to_le_bytes());
        out
    }
}

/// Whether `Accept-Encoding` takes gzip (RFC 9110 §12.5.3): `gzip`, `x-gzip` or `*` with a
/// q-value above 0, unless gzip itself is refused with `q=0`.
pub(super) fn accepted(headers: &axum::http::HeaderMap) -> bool {
    let mut star = false;
    for value in headers.get_all(axum::http::header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            match coding.as_str() {
                "gzip" | "x-gzip" => return q > 0.0,
                "*" => star = q > 0.0,
                _ => {}
            }
        }
    }
    star
}

/// The gzip header, as a run of an answer.
pub(super) fn header() -> Bytes {
    Bytes::from_static(&HEADER)
}

/// `body` as one whole gzip member.
pub(super) fn whole(body: &[u8]) -> Bytes {
    let none = Deflated::of(&[]);
    let mut out = HEADER.to_vec();
    out.extend_from_slice(&none.data);
    out.extend_from_slice(&none.finish_with(body));
    Bytes::from(out)
}

/// Compresses all of `input` into `out` with `flush`, growing `out` as needed.
fn deflate(c: &mut Compress, mut input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) {
    loop {
        if out.capacity() - out.len() < 32 << 10 {
            out.reserve(out.capacity().max(64 << 10));
        }
        let before = c.total_in();
        let status = c
            .compress_vec(input, out, flush)
            .expect("deflating bytes in memory cannot fail");
        let consumed = usize::try_from(c.total_in() - before).expect("fits the input's length");
        input = &input[consumed..];
        let room_left = out.len() < out.capacity();
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // Everything taken and the flush written out: it stopped with room to spare.
            _ => input.is_empty() && room_left,
        };
        if done {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn gunzip_all(member: &[u8]) -> Vec<u8> {
        // A single-member reader: what Python's httpx, reqwest and AIPerf's clients read.
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(member)
            .read_to_end(&mut out)
            .expect("one valid gzip member");
        out
    }

    #[test]
    fn a_shared_segment_and_a_fresh_tail_make_one_valid_member() {
        let engines: Vec<Bytes> = (0..3)
            .map(|i| Bytes::from(format!("vllm:x{{i=\"{i}\"}} 1\n").repeat(5_000)))
            .collect();
        let shared = Deflated::of(&engines);
        for own in [&b""[..], b"dynamo_sysport_uptime_seconds 12.5\n"] {
            let mut member = header().to_vec();
            member.extend_from_slice(&shared.data);
            member.extend_from_slice(&shared.finish_with(own));
            let mut expected: Vec<u8> = engines.iter().flat_map(|b| b.to_vec()).collect();
            expected.extend_from_slice(own);
            assert_eq!(gunzip_all(&member), expected);
            // No trailing member: exactly one gzip member, so single-member readers see it all.
            let mut d = flate2::read::GzDecoder::new(&member[..]);
            std::io::copy(&mut d, &mut std::io::sink()).expect("valid");
            assert!(d.into_inner().is_empty(), "nothing after the member");
        }
        assert!(shared.data.len() * 10 < engines.iter().map(Bytes::len).sum::<usize>());
    }

    #[test]
    fn accept_encoding_is_read_as_rfc_9110_says() {
        let asks = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(
                axum::http::header::ACCEPT_ENCODING,
                v.parse().expect("header"),
            );
            accepted(&h)
        };
        assert!(asks("gzip"));
        assert!(asks("deflate, GZip;q=0.5"));
        assert!(asks("br;q=1.0, *;q=0.1"));
        assert!(!asks("gzip;q=0, *"));
        assert!(!asks("identity"));
        assert!(!asks("br"));
        assert!(!accepted(&axum::http::HeaderMap::new()));
    }

    #[test]
    fn a_whole_body_and_an_empty_one_round_trip() {
        assert_eq!(gunzip_all(&whole(b"")), b"");
        let body = b"{\"status\":\"ready\"}".repeat(100);
        assert_eq!(gunzip_all(&whole(&body)), body);
    }
}
