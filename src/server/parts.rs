//! A response body made of shared byte runs: the engine families as runs of the upstream bodies
//! (see [`crate::expfmt::Pieces`]), then sysport's own metrics.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The most one frame holds: gzip at its fastest level takes well under a millisecond on it.
pub(super) const FRAME: usize = 64 << 10;

/// The runs, written in order, with their total length declared up front so the response goes
/// out with a `Content-Length` and no chunk framing. A run goes out in frames of at most
/// [`FRAME`] bytes, each a slice of it (no copy): whatever is done with a frame on the front
/// thread (gzip, TLS) is done in steps short enough for the probes to go between them.
#[derive(Debug)]
pub(super) struct Parts {
    parts: VecDeque<Bytes>,
    remaining: u64,
}

impl Parts {
    pub(super) fn new(parts: impl IntoIterator<Item = Bytes>) -> Parts {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        Parts { parts, remaining }
    }
}

impl Body for Parts {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.parts.front_mut() {
            Some(run) if run.len() > FRAME => Some(run.split_to(FRAME)),
            _ => self.parts.pop_front(),
        };
        if let Some(p) = &next {
            self.remaining -= p.len() as u64;
        }
        Poll::Ready(next.map(|p| Ok(Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn parts_come_out_in_order_with_their_exact_length() {
        let body = Parts::new([
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"cde"),
        ]);
        assert_eq!(body.size_hint().exact(), Some(5));
        let all = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(&all[..], b"abcde");
    }

    #[tokio::test]
    async fn a_long_run_goes_out_in_frames_of_at_most_frame_bytes() {
        let run = Bytes::from(vec![7u8; FRAME * 2 + 5]);
        let mut body = Parts::new([run.clone(), Bytes::from_static(b"x")]);
        let mut lengths = Vec::new();
        let mut all = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.expect("infallible").into_data().expect("data");
            lengths.push(data.len());
            all.extend_from_slice(&data);
        }
        assert_eq!(lengths, [FRAME, FRAME, 5, 1]);
        assert_eq!(&all[..run.len()], &run[..]);
    }
}
