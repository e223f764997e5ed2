//! An upstream body's `Content-Encoding`, undone as the body arrives and within the body limit.
//!
//! sysport asks for gzip and decodes it itself rather than leaving it to the HTTP client, which
//! looks at the first `Content-Encoding` value only: `gzip, gzip` (or two header lines) came
//! back still compressed once, and a coding it did not know (`deflate`, `br`) came back as it
//! was, so the page parsed as nothing and the upstream looked up with its series gone. Here
//! every coding listed is undone, last applied first (RFC 9110 §8.4); one that cannot be
//! (`br`, `zstd`, `compress`) is an error naming it.

use std::io::{self, Write};

use bytes::BytesMut;
use flate2::write::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};

/// A content coding sysport can undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    /// `gzip` (or its old name `x-gzip`).
    Gzip,
    /// `deflate`: a zlib stream (RFC 1950), or a bare deflate stream as some servers send.
    Deflate,
}

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("Content-Encoding {0:?} cannot be decoded: sysport decodes gzip and deflate only")]
    Unsupported(String),
    #[error("the body does not decode as Content-Encoding {encoding:?}: {reason}")]
    Corrupt { encoding: String, reason: String },
    #[error("decoded body over the limit")]
    OverLimit,
}

/// The codings of a response in the order they were applied, from all its `Content-Encoding`
/// lines (two lines are one list, RFC 9110 §5.3); `identity` is no coding.
pub(super) fn codings<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<Coding>, DecodeError> {
    let mut out = Vec::new();
    let mut listed = Vec::new();
    for value in values {
        listed.push(String::from_utf8_lossy(value).into_owned());
        for coding in value.split(|&b| b == b',') {
            let coding = coding.trim_ascii();
            if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
                out.push(Coding::Gzip);
            } else if coding.eq_ignore_ascii_case(b"deflate") {
                out.push(Coding::Deflate);
            } else if !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity") {
                return Err(DecodeError::Unsupported(listed.join(", ")));
            }
        }
    }
    Ok(out)
}

/// A decoder for a body with `codings`, appending what it decodes to a buffer.
pub(super) struct Decoder<'a> {
    layers: Box<dyn Layer + 'a>,
    /// The header's text, for errors.
    encoding: String,
}

impl<'a> Decoder<'a> {
    /// Decodes into `out`, which may hold at most `limit` bytes.
    pub(super) fn new(codings: &[Coding], out: &'a mut BytesMut, limit: usize) -> Decoder<'a> {
        let mut layers: Box<dyn Layer + 'a> = Box::new(Sink { out, limit });
        // The last coding applied is the first to undo: the outermost layer.
        for coding in codings {
            layers = match coding {
                Coding::Gzip => Box::new(MultiGzDecoder::new(layers)),
                Coding::Deflate => Box::new(Inflate::Sniffing(Vec::new(), Some(layers))),
            };
        }
        let encoding: Vec<&str> = codings
            .iter()
            .map(|c| match c {
                Coding::Gzip => "gzip",
                Coding::Deflate => "deflate",
            })
            .collect();
        Decoder {
            layers,
            encoding: encoding.join(", "),
        }
    }

    /// Decodes the next piece of the body.
    pub(super) fn write(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        let result = self.layers.write_all(chunk);
        result.map_err(|err| self.error(err))
    }

    /// Ends the body: an incomplete stream is an error.
    pub(super) fn finish(mut self) -> Result<(), DecodeError> {
        let result = self.layers.finish_all();
        result.map_err(|err| self.error(err))
    }

    fn error(&self, err: io::Error) -> DecodeError {
        if err.get_ref().is_some_and(|e| e.is::<OverLimit>()) {
            return DecodeError::OverLimit;
        }
        let reason = match err.kind() {
            io::ErrorKind::WriteZero => "data after the end of the stream".to_string(),
            _ => err.to_string(),
        };
        DecodeError::Corrupt {
            encoding: self.encoding.clone(),
            reason,
        }
    }
}

/// A decoding layer: writing feeds it, `finish_all` ends it and every layer inside it.
trait Layer: Write + Send {
    fn finish_all(&mut self) -> io::Result<()>;
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn finish_all(&mut self) -> io::Result<()> {
        (**self).finish_all()
    }
}

impl<L: Layer> Layer for MultiGzDecoder<L> {
    fn finish_all(&mut self) -> io::Result<()> {
        self.try_finish()?;
        self.get_mut().finish_all()
    }
}

/// The marker of the error the sink gives past the limit.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decoded body over the limit")
    }
}

impl std::error::Error for OverLimit {}

/// The innermost layer: the decoded body, refused past the limit so a small compressed body
/// cannot grow without bound.
struct Sink<'a> {
    out: &'a mut BytesMut,
    limit: usize,
}

impl Write for Sink<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.out.len() + data.len() > self.limit {
            return Err(io::Error::other(OverLimit));
        }
        self.out.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Layer for Sink<'_> {
    fn finish_all(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `deflate`: zlib-wrapped as RFC 9110 says, or bare, as some servers send it; the first two
/// bytes tell which (a zlib header is a multiple of 31 with compression method 8).
enum Inflate<L: Layer> {
    Sniffing(Vec<u8>, Option<L>),
    Zlib(ZlibDecoder<L>),
    Raw(DeflateDecoder<L>),
}

impl<L: Layer> Write for Inflate<L> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Inflate::Zlib(d) => d.write(data),
            Inflate::Raw(d) => d.write(data),
            Inflate::Sniffing(head, inner) => {
                let take = data.len().min(2 - head.len());
                head.extend_from_slice(&data[..take]);
                if head.len() == 2 {
                    let head = std::mem::take(head);
                    let inner = inner.take().expect("sniffing holds the inner layer");
                    *self = if is_zlib_header(&head) {
                        Inflate::Zlib(ZlibDecoder::new(inner))
                    } else {
                        Inflate::Raw(DeflateDecoder::new(inner))
                    };
                    self.write_all(&head)?;
                }
                Ok(take)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Inflate::Zlib(d) => d.flush(),
            Inflate::Raw(d) => d.flush(),
            Inflate::Sniffing(..) => Ok(()),
        }
    }
}

impl<L: Layer> Layer for Inflate<L> {
    fn finish_all(&mut self) -> io::Result<()> {
        match self {
            Inflate::Zlib(d) => {
                d.try_finish()?;
                d.get_mut().finish_all()
            }
            Inflate::Raw(d) => {
                d.try_finish()?;
                d.get_mut().finish_all()
            }
            Inflate::Sniffing(..) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "incomplete deflate stream",
            )),
        }
    }
}

fn is_zlib_header(head: &[u8]) -> bool {
    let [cmf, flg] = [head[0], head[1]];
    cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};

    use super::*;

    const PAGE: &[u8] = b"# TYPE vllm:a gauge\nvllm:a{engine=\"0\"} 1\n";

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).expect("in memory");
        e.finish().expect("in memory")
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).expect("in memory");
        e.finish().expect("in memory")
    }

    fn raw_deflate(data: &[u8]) -> Vec<u8> {
        let mut e = DeflateEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).expect("in memory");
        e.finish().expect("in memory")
    }

    /// Decodes `body` fed in pieces of `step` bytes.
    fn decode(
        codings: &[Coding],
        body: &[u8],
        limit: usize,
        step: usize,
    ) -> Result<Vec<u8>, DecodeError> {
        let mut out = BytesMut::new();
        let mut d = Decoder::new(codings, &mut out, limit);
        for piece in body.chunks(step) {
            d.write(piece)?;
        }
        d.finish()?;
        Ok(out.to_vec())
    }

    fn listed(values: &[&str]) -> Result<Vec<Coding>, DecodeError> {
        codings(values.iter().map(|v| v.as_bytes()))
    }

    #[test]
    fn every_content_encoding_line_and_list_item_counts() {
        use Coding::*;
        assert_eq!(listed(&[]), Ok(vec![]));
        assert_eq!(listed(&["identity"]), Ok(vec![]));
        assert_eq!(listed(&["GZIP"]), Ok(vec![Gzip]));
        assert_eq!(listed(&["x-gzip"]), Ok(vec![Gzip]));
        assert_eq!(listed(&["gzip, gzip"]), Ok(vec![Gzip, Gzip]));
        assert_eq!(listed(&["gzip", "gzip"]), Ok(vec![Gzip, Gzip]));
        assert_eq!(listed(&["deflate ,gzip"]), Ok(vec![Deflate, Gzip]));
        assert_eq!(
            listed(&["gzip", "br"]),
            Err(DecodeError::Unsupported("gzip, br".into()))
        );
        let err = listed(&["zstd"]).expect_err("zstd");
        assert_eq!(
            err.to_string(),
            "Content-Encoding \"zstd\" cannot be decoded: sysport decodes gzip and deflate only"
        );
    }

    #[test]
    fn gzip_deflate_and_their_stacks_decode_in_any_pieces() {
        for step in [1, 7, 4096] {
            let twice = gzip(&gzip(PAGE));
            for (codings, body) in [
                (vec![Coding::Gzip], gzip(PAGE)),
                (vec![Coding::Deflate], zlib(PAGE)),
                (vec![Coding::Deflate], raw_deflate(PAGE)),
                (vec![Coding::Gzip, Coding::Gzip], twice),
                (vec![Coding::Deflate, Coding::Gzip], gzip(&zlib(PAGE))),
                (vec![], PAGE.to_vec()),
            ] {
                assert_eq!(
                    decode(&codings, &body, 1 << 20, step).as_deref(),
                    Ok(PAGE),
                    "{codings:?} in pieces of {step}"
                );
            }
        }
    }

    #[test]
    fn a_body_that_is_not_its_encoding_is_an_error_naming_it() {
        // Said twice, applied once.
        match decode(&[Coding::Gzip, Coding::Gzip], &gzip(PAGE), 1 << 20, 4096) {
            Err(DecodeError::Corrupt { encoding, .. }) => assert_eq!(encoding, "gzip, gzip"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(&[Coding::Gzip], PAGE, 1 << 20, 4096),
            Err(DecodeError::Corrupt { .. })
        ));
        // Cut short, or followed by something else.
        let whole = gzip(PAGE);
        let err = decode(&[Coding::Gzip], &whole[..whole.len() - 4], 1 << 20, 4096)
            .expect_err("truncated");
        assert!(err.to_string().contains("\"gzip\""), "{err}");
        let z = zlib(PAGE);
        assert!(decode(&[Coding::Deflate], &z[..z.len() - 3], 1 << 20, 4096).is_err());
        assert!(decode(&[Coding::Deflate], &z[..1], 1 << 20, 4096).is_err());
        let mut trailing = zlib(PAGE);
        trailing.extend_from_slice(b"junk");
        assert!(decode(&[Coding::Deflate], &trailing, 1 << 20, 4096).is_err());
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 8 << 20];
        let bomb = gzip(&gzip(&zeros));
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        assert_eq!(
            decode(&[Coding::Gzip, Coding::Gzip], &bomb, 1 << 20, 4096),
            Err(DecodeError::OverLimit)
        );
        assert_eq!(
            decode(&[Coding::Deflate], &zlib(&zeros), 1 << 20, 4096),
            Err(DecodeError::OverLimit)
        );
        assert_eq!(
            decode(&[Coding::Gzip], &gzip(&zeros), 8 << 20, 4096).map(|v| v.len()),
            Ok(8 << 20),
            "exactly at the limit is within it"
        );
    }
}
