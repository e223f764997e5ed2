//! The blocks an upstream's bodies are read into, reused from one fetch of a URL to the next.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};

/// The blocks of one URL's last bodies, newest first, for the next body to take one that
/// nothing points into any more (the responses that served it have been sent, and it is not
/// the prior): a fresh 16 MB block costs four thousand page faults on every fetch.
#[derive(Debug, Default)]
pub(crate) struct BodyBlocks {
    /// Decoded length of the last body of unknown length (a compressed one), 0 before it.
    last_len: AtomicUsize,
    spare: Mutex<Vec<BytesMut>>,
}

/// Blocks kept in [`BodyBlocks`]: the prior's, and the one before it, free again.
const SPARE_BLOCKS: usize = 2;

/// The first block for a body of unknown length, before any body of that URL was read.
const FIRST_GUESS: usize = 64 << 10;

impl BodyBlocks {
    /// An empty buffer for a body of `expected` bytes (at most `max_body`), or of unknown
    /// length: a spare block nothing points into any more when there is one, else a new one.
    pub(crate) fn take(&self, expected: Option<usize>, max_body: usize) -> BytesMut {
        // A compressed body's decoded length is not known before it has been read: start from
        // the last body of the same URL, with room to grow, so that a 16 MB page is not built
        // by doubling a 64 KiB buffer eight times, each step a new block and a copy.
        let last = self.last_len.load(Ordering::Relaxed);
        let guess = (last > 0).then(|| last + last / 64);
        let want = expected.or(guess).unwrap_or(FIRST_GUESS).min(max_body);
        let mut buf = {
            let mut spare = self.spare.lock().expect("spare buffer lock");
            match spare.iter_mut().position(|b| b.try_reclaim(want)) {
                Some(i) => spare.swap_remove(i),
                None => BytesMut::new(),
            }
        };
        if buf.capacity() > 4 * want.max(FIRST_GUESS) {
            // The page shrank a lot: do not hold on to the old block.
            buf = BytesMut::new();
        }
        buf.reserve(want);
        buf
    }

    /// The body read into `buf`, frozen; its block is kept for a later [`BodyBlocks::take`]
    /// once the body is dropped. `unknown_length`: the response did not say how long the body
    /// would be, so its length is the next such body's first guess.
    pub(crate) fn give_back(&self, mut buf: BytesMut, unknown_length: bool) -> Bytes {
        if unknown_length {
            self.last_len.store(buf.len(), Ordering::Relaxed);
        }
        let body = buf.split().freeze();
        let mut spare = self.spare.lock().expect("spare buffer lock");
        spare.insert(0, buf);
        spare.truncate(SPARE_BLOCKS);
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `len` bytes into a block of `blocks`, as a fetch does.
    fn read(blocks: &BodyBlocks, len: usize, unknown_length: bool) -> Bytes {
        let mut buf = blocks.take((!unknown_length).then_some(len), 1 << 30);
        buf.resize(len, b'x');
        blocks.give_back(buf, unknown_length)
    }

    #[test]
    fn a_block_is_reused_once_its_body_is_dropped_and_never_while_it_is_held() {
        let blocks = BodyBlocks::default();
        let first = read(&blocks, 1 << 20, false);
        let at = first.as_ptr();
        // The first body is still held (a response is being sent): the next one gets a block
        // of its own, and the first body's bytes stay as they were.
        let mut second = blocks.take(Some(1 << 20), 1 << 30);
        assert_ne!(second.as_ptr(), at);
        second.resize(1 << 20, b'y');
        let second = blocks.give_back(second, false);
        assert!(first.iter().all(|&b| b == b'x'));
        drop(first);
        // Now nothing points into the first block: the third body is read into it.
        let third = blocks.take(Some(1 << 20), 1 << 30);
        assert_eq!(third.as_ptr(), at);
        assert!(third.is_empty());
        assert!(second.iter().all(|&b| b == b'y'));
    }

    #[test]
    fn a_body_of_unknown_length_starts_from_the_last_ones_size() {
        let blocks = BodyBlocks::default();
        assert!(blocks.take(None, 1 << 30).capacity() >= FIRST_GUESS);
        drop(read(&blocks, 3 << 20, true));
        let next = blocks.take(None, 1 << 30);
        assert!(next.capacity() >= 3 << 20, "{}", next.capacity());
        // Never beyond the body limit.
        let capped = BodyBlocks::default();
        assert!(capped.take(None, 1000).capacity() < FIRST_GUESS);
    }

    #[test]
    fn a_much_smaller_page_lets_the_old_block_go() {
        let blocks = BodyBlocks::default();
        drop(read(&blocks, 16 << 20, false));
        let small = blocks.take(Some(1000), 1 << 30);
        assert!(small.capacity() < 1 << 20, "{}", small.capacity());
    }
}
