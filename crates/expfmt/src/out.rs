//! Where the writers put their bytes: a plain buffer, or [`Pieces`], which points into the
//! upstream bodies wherever the output repeats them.
//!
//! A kept family of a canonical text upstream comes out byte for byte as it went in, so most of
//! a text response is a few long runs of the bodies already in memory. Pointing at them instead of
//! copying them saves a copy of every kept byte per scrape and, for a 16 MB page, a 16 MB buffer
//! that would otherwise live as long as the slowest scraper takes to read it.

use bytes::Bytes;

/// The output of a writer.
pub trait Sink {
    /// The buffer the writer appends the bytes it makes to.
    fn made(&mut self) -> &mut Vec<u8>;

    /// Bytes made by the writer.
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.made().extend_from_slice(b);
    }

    /// A line of a source body (without its newline), then a newline.
    fn put_line(&mut self, line: &[u8]) {
        self.put(line);
        self.put(b"\n");
    }

    /// Bytes made by the writer from `parts`, which may repeat the source bytes that follow the
    /// last line written with [`Sink::put_line`] (a TYPE line under its HELP line).
    fn put_parts(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.put(p);
        }
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn made(&mut self) -> &mut Vec<u8> {
        self
    }

    #[inline]
    fn put_line(&mut self, line: &[u8]) {
        self.extend_from_slice(line);
        self.push(b'\n');
    }
}

/// Runs of source bytes shorter than this are copied: a piece costs a frame and an I/O vector
/// entry when the response is written, a copy of a few lines costs less.
const MIN_RUN: usize = 4 << 10;

/// Output as runs of the source bodies and of bytes the writer made.
#[derive(Debug)]
pub struct Pieces {
    bodies: Vec<Bytes>,
    /// Bytes made by the writer, and copies of short source runs.
    own: Vec<u8>,
    /// Committed runs: bytes of `own` before the run, body, start, end.
    runs: Vec<(usize, usize, usize, usize)>,
    /// The run being extended: body, start, end.
    open: Option<(usize, usize, usize)>,
    min_run: usize,
}

impl Pieces {
    /// Output that may point into `bodies` (the bodies of the merged expositions).
    pub fn new(bodies: Vec<Bytes>) -> Pieces {
        Pieces::with_min_run(bodies, MIN_RUN)
    }

    /// The same, keeping runs of `min_run` bytes or more as pieces (tests use 1).
    pub fn with_min_run(bodies: Vec<Bytes>, min_run: usize) -> Pieces {
        Pieces {
            bodies,
            own: Vec::new(),
            runs: Vec::new(),
            open: None,
            min_run: min_run.max(1),
        }
    }

    /// The output, in order.
    pub fn finish(mut self) -> Vec<Bytes> {
        self.close();
        let own = Bytes::from(self.own);
        let mut out = Vec::with_capacity(2 * self.runs.len() + 1);
        let mut from = 0;
        for (before, body, start, end) in self.runs {
            if before > from {
                out.push(own.slice(from..before));
            }
            out.push(self.bodies[body].slice(start..end));
            from = before;
        }
        if own.len() > from {
            out.push(own.slice(from..));
        }
        out
    }

    /// Which body `b` lies in, and where.
    fn locate(&self, b: &[u8]) -> Option<(usize, usize)> {
        let p = b.as_ptr() as usize;
        let within = |body: &Bytes| {
            let base = body.as_ptr() as usize;
            (p >= base && p + b.len() <= base + body.len()).then(|| p - base)
        };
        if let Some((i, _, _)) = self.open
            && let Some(at) = within(&self.bodies[i])
        {
            return Some((i, at));
        }
        self.bodies
            .iter()
            .enumerate()
            .find_map(|(i, body)| within(body).map(|at| (i, at)))
    }

    /// Ends the open run: kept as a piece when long enough, copied otherwise.
    fn close(&mut self) {
        if let Some((body, start, end)) = self.open.take() {
            if end - start >= self.min_run {
                self.runs.push((self.own.len(), body, start, end));
            } else {
                self.own.extend_from_slice(&self.bodies[body][start..end]);
            }
        }
    }

    fn extend(&mut self, body: usize, start: usize, end: usize) {
        match &mut self.open {
            Some((b, _, e)) if *b == body && *e == start => *e = end,
            _ => {
                self.close();
                self.open = Some((body, start, end));
            }
        }
    }
}

impl Sink for Pieces {
    fn made(&mut self) -> &mut Vec<u8> {
        self.close();
        &mut self.own
    }

    fn put_line(&mut self, line: &[u8]) {
        match self.locate(line) {
            Some((body, at)) => {
                let end = at + line.len();
                if self.bodies[body].get(end) == Some(&b'\n') {
                    self.extend(body, at, end + 1);
                } else {
                    self.extend(body, at, end);
                    self.put(b"\n");
                }
            }
            None => {
                self.put(line);
                self.put(b"\n");
            }
        }
    }

    fn put_parts(&mut self, parts: &[&[u8]]) {
        if let Some((body, start, end)) = self.open {
            let next = &self.bodies[body][end..];
            let len: usize = parts.iter().map(|p| p.len()).sum();
            if next.len() >= len && {
                let mut at = 0;
                parts.iter().all(|p| {
                    at += p.len();
                    next[at - p.len()..at] == **p
                })
            } {
                self.open = Some((body, start, end + len));
                return;
            }
        }
        for p in parts {
            self.put(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_of_a_body_are_pointed_at_and_short_ones_copied() {
        let line = [b'a'; 100];
        let mut text = Vec::new();
        for _ in 0..100 {
            text.extend_from_slice(&line);
            text.push(b'\n');
        }
        let body = Bytes::from(text.clone());
        let mut p = Pieces::new(vec![body.clone()]);
        p.put(b"# head\n");
        // One short line (copied), a gap, then 60 contiguous lines (one piece).
        p.put_line(&body[0..100]);
        for i in 40..100 {
            p.put_line(&body[i * 101..i * 101 + 100]);
        }
        p.put(b"tail\n");
        let out = p.finish();
        let mut want = b"# head\n".to_vec();
        want.extend_from_slice(&text[0..101]);
        want.extend_from_slice(&text[40 * 101..]);
        want.extend_from_slice(b"tail\n");
        assert_eq!(out.concat(), want);
        assert_eq!(out.len(), 3, "own bytes, one run of the body, own bytes");
        assert_eq!(out[1].as_ptr(), body[40 * 101..].as_ptr(), "not copied");
    }

    #[test]
    fn a_line_without_its_newline_in_the_body_gets_one() {
        let body = Bytes::from_static(b"x 1\r\ny 2");
        let mut p = Pieces::new(vec![body.clone()]);
        p.put_line(&body[0..3]);
        p.put_line(&body[5..8]);
        assert_eq!(p.finish().concat(), b"x 1\ny 2\n");
    }

    #[test]
    fn made_bytes_equal_to_what_follows_extend_the_run() {
        let mut text = b"# HELP x h\n# TYPE x gauge\n".to_vec();
        text.extend(std::iter::repeat_n(b"x 1\n".as_slice(), 2000).flatten());
        let body = Bytes::from(text.clone());
        let mut p = Pieces::new(vec![body.clone()]);
        p.put_line(&body[0..10]);
        p.put_parts(&[b"# TYPE ", b"x", b" ", b"gauge", b"\n"]);
        p.put_parts(&[b"# TYPE ", b"x", b" ", b"counter", b"\n"]);
        let out = p.finish();
        let mut want = text[..26].to_vec();
        want.extend_from_slice(b"# TYPE x counter\n");
        assert_eq!(out.concat(), want);
        // Short, so copied: both lines that matched the body and the one that did not.
        assert_eq!(out.len(), 1);

        let mut p = Pieces::new(vec![body.clone()]);
        p.put_line(&body[0..10]);
        p.put_parts(&[b"# TYPE ", b"x", b" ", b"gauge", b"\n"]);
        for i in 0..2000 {
            let at = 26 + 4 * i;
            p.put_line(&body[at..at + 3]);
        }
        let out = p.finish();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ptr(), body.as_ptr(), "the whole body, not a copy");
        assert_eq!(out[0].len(), body.len());
    }

    #[test]
    fn runs_from_two_bodies_stay_apart() {
        let a = Bytes::from(vec![b'a'; 5000]);
        let b = Bytes::from(vec![b'b'; 5000]);
        let mut p = Pieces::new(vec![a.clone(), b.clone()]);
        p.put_line(&a[..4999]);
        p.put_line(&b[..4999]);
        let out = p.finish();
        assert_eq!(out.len(), 4);
        let mut want = vec![b'a'; 4999];
        want.push(b'\n');
        want.extend(vec![b'b'; 4999]);
        want.push(b'\n');
        assert_eq!(out.concat(), want);
    }
}
