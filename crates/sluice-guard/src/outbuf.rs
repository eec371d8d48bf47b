//! A client's response buffer, bounded on its whole size: the upstream is
//! read straight into it (no second buffer, no copy), the response reader
//! frames it in place, and only framed bytes go to the client.
//!
//! ```text
//!   buf: [ sent | pos..ready: framed, to send | ready..end: read, not framed | room ]
//! ```
//!
//! The bound is the point: the upstream is read only into `room`, so a
//! client that reads slower than the upstream sends holds at most
//! `buf.len()` bytes of the guard's memory (the old buffer counted only its
//! unsent part against its mark and was emptied only when completely
//! flushed, so a slow reader never let it shrink). Buffers come from and go
//! back to the worker's [`Pool`], so an idle connection holds none.
//!
//! A response takes a full buffer (the pool's size, `--buffer-size`) while
//! the pool has one free; when it has none it starts in a small one
//! ([`SMALL`]) and moves to a full one only when it fills it. Most
//! responses and every reply of the guard's own fit the small one, so
//! thousands at once (an attack's allowed requests, a thousand clients)
//! no longer take a newly zeroed 32 KiB each, which the allocator gave
//! back to the kernel and took again (page faults and zeroing were a fifth
//! of the guard's time under the 10,000-address attack, `perf`); while
//! the pool has enough, a large response is still read in one call.

use std::io::{self, Write};

/// A response's first buffer (bytes), when the pool's size is larger.
pub const SMALL: usize = 4096;

/// Free buffers of two sizes, kept for reuse (bounded): full ones (the
/// pool's size) and small ones ([`SMALL`], eight times as many kept).
#[derive(Debug)]
pub struct Pool {
    size: usize,
    free: Vec<Box<[u8]>>,
    free_small: Vec<Box<[u8]>>,
    keep: usize,
}

impl Pool {
    pub fn new(size: usize, keep: usize) -> Pool {
        Pool { size, free: Vec::new(), free_small: Vec::new(), keep }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    fn small(&self) -> usize {
        SMALL.min(self.size)
    }

    fn take(&mut self) -> Box<[u8]> {
        self.free.pop().unwrap_or_else(|| vec![0; self.size].into_boxed_slice())
    }

    /// A response's first buffer: a free full one, else a small one.
    fn take_first(&mut self) -> Box<[u8]> {
        if let Some(b) = self.free.pop() {
            return b;
        }
        let small = self.small();
        self.free_small.pop().unwrap_or_else(|| vec![0; small].into_boxed_slice())
    }

    fn give(&mut self, b: Box<[u8]>) {
        if b.len() == self.size {
            if self.free.len() < self.keep {
                self.free.push(b);
            }
        } else if b.len() == self.small() && self.free_small.len() < 8 * self.keep {
            self.free_small.push(b);
        }
    }
}

#[derive(Debug, Default)]
pub struct OutBuf {
    buf: Option<Box<[u8]>>,
    pos: usize,
    ready: usize,
    end: usize,
    /// The last read filled the buffer to its end: the upstream may have
    /// more, so a small buffer moves to a full one before the next.
    filled_up: bool,
}

impl OutBuf {
    /// Framed bytes not yet sent.
    pub fn pending(&self) -> &[u8] {
        self.buf.as_deref().map_or(&[], |b| &b[self.pos..self.ready])
    }

    pub fn has_pending(&self) -> bool {
        self.pos < self.ready
    }

    /// Read from the upstream, not framed yet.
    pub fn unframed(&self) -> &[u8] {
        self.buf.as_deref().map_or(&[], |b| &b[self.ready..self.end])
    }

    /// Bytes held (sent ones excluded).
    pub fn held(&self) -> usize {
        self.end - self.pos
    }

    /// Room to read into, after sliding what is held to the front; empty
    /// when the buffer is full (the upstream must wait for the client). A
    /// small buffer under a quarter free, or filled to its end by the last
    /// read (a response streamed through it would take a read and a send
    /// per 4 KiB), moves to a full one first.
    pub fn room(&mut self, pool: &mut Pool) -> &mut [u8] {
        self.room_for(pool, 0)
    }

    /// [`OutBuf::room`], a small buffer moving to a full one also when its
    /// room is under `want` bytes (a pipelined response already read, which
    /// moves whole).
    pub fn room_for(&mut self, pool: &mut Pool, want: usize) -> &mut [u8] {
        let b = self.buf.get_or_insert_with(|| pool.take_first());
        // Slide when full, when empty, or when under a quarter is left (so
        // reads stay large; the copy is at most three quarters of a buffer).
        if self.pos > 0 && (self.pos == self.end || b.len() - self.end < b.len() / 4) {
            b.copy_within(self.pos..self.end, 0);
            (self.ready, self.end) = (self.ready - self.pos, self.end - self.pos);
            self.pos = 0;
        }
        let short = b.len() - self.end < (b.len() / 4).max(want);
        if b.len() < pool.size && (self.filled_up || short) {
            let mut full = pool.take();
            full[..self.end].copy_from_slice(&b[..self.end]);
            pool.give(std::mem::replace(b, full));
        }
        &mut b[self.end..]
    }

    /// `n` bytes were read into [`OutBuf::room`].
    pub fn filled(&mut self, n: usize) {
        self.end += n;
        let len = self.buf.as_ref().map_or(0, |b| b.len());
        debug_assert!(self.end <= len);
        self.filled_up = n > 0 && self.end == len;
    }

    /// The next `n` unframed bytes are framed: they may be sent.
    pub fn frame(&mut self, n: usize) {
        debug_assert!(self.ready + n <= self.end);
        self.ready += n;
    }

    /// Forget what was read and not framed (bytes no request asked for, or
    /// a response cut by an upstream error).
    pub fn drop_unframed(&mut self) {
        self.end = self.ready;
    }

    /// Append bytes the guard makes itself (an error reply) as framed. They
    /// follow only what was framed (callers drop the unframed first); a
    /// full buffer gives up its sent prefix first, and a reply that still
    /// does not fit is cut (replies are a few dozen bytes, buffers KiB).
    pub fn push(&mut self, bytes: &[u8], pool: &mut Pool) {
        self.drop_unframed();
        let room = self.room(pool);
        let n = bytes.len().min(room.len());
        room[..n].copy_from_slice(&bytes[..n]);
        self.filled(n);
        self.frame(n);
    }

    /// Write pending bytes to `w` until it would block; the bytes written.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<usize> {
        let Some(b) = self.buf.as_deref() else { return Ok(0) };
        let n = sluice_tcp::write_pending(w, &b[..self.ready], &mut self.pos)?;
        if self.pos == self.end {
            (self.pos, self.ready, self.end) = (0, 0, 0);
        }
        Ok(n)
    }

    /// `n` pending bytes were sent (by the caller, as [`OutBuf::write_to`] would).
    pub fn consumed(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.ready);
        self.pos += n;
        if self.pos == self.end {
            (self.pos, self.ready, self.end) = (0, 0, 0);
        }
    }

    /// Give the buffer back when it holds nothing (a connection waiting for
    /// its next request keeps no buffer).
    pub fn release(&mut self, pool: &mut Pool) {
        if self.pos == self.end {
            if let Some(b) = self.buf.take() {
                pool.give(b);
            }
            (self.pos, self.ready, self.end, self.filled_up) = (0, 0, 0, false);
        }
    }

    /// Forget everything held and give the buffer back (a closed connection).
    pub fn discard(&mut self, pool: &mut Pool) {
        (self.pos, self.ready, self.end) = (0, 0, 0);
        self.release(pool);
    }

    /// The buffer's allocation, if it has one (memory accounting).
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A socket that takes at most `take` bytes per write, then blocks.
    struct Sink {
        got: Vec<u8>,
        take: usize,
    }

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.take == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(self.take);
            self.take -= n;
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Read up to n bytes from the "upstream".
        Read(usize),
        /// Frame up to n of the unframed bytes.
        Frame(usize),
        /// The client takes up to n bytes.
        Write(usize),
        DropUnframed,
        Release,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..9000usize).prop_map(Op::Read),
            (0..9000usize).prop_map(Op::Frame),
            (0..9000usize).prop_map(Op::Write),
            Just(Op::DropUnframed),
            Just(Op::Release),
        ]
    }

    proptest! {
        /// Against a plain model (a queue of framed bytes, a queue of
        /// unframed ones): the client gets exactly the framed bytes in
        /// order, and the buffer never holds more than its size.
        #[test]
        fn matches_a_plain_queue_and_stays_bounded(
            ops in proptest::collection::vec(op(), 1..200),
            size in prop::sample::select(vec![16usize, 4096, 6000, 32 << 10]),
        ) {
            let mut pool = Pool::new(size, 2);
            let mut b = OutBuf::default();
            let (mut next, mut framed, mut unframed) = (0u8, Vec::<u8>::new(), Vec::<u8>::new());
            let mut sink = Sink { got: Vec::new(), take: 0 };
            let mut want = Vec::new();
            for op in ops {
                match op {
                    Op::Read(n) => {
                        let room = b.room(&mut pool);
                        let n = n.min(room.len());
                        for x in &mut room[..n] {
                            *x = next;
                            unframed.push(next);
                            next = next.wrapping_add(1);
                        }
                        b.filled(n);
                    }
                    Op::Frame(n) => {
                        let n = n.min(unframed.len());
                        prop_assert_eq!(b.unframed(), &unframed[..]);
                        framed.extend(unframed.drain(..n));
                        b.frame(n);
                    }
                    Op::Write(n) => {
                        sink.take = n;
                        let before = sink.got.len();
                        let wrote = b.write_to(&mut sink).unwrap();
                        prop_assert_eq!(wrote, sink.got.len() - before);
                        want.extend(framed.drain(..wrote));
                    }
                    Op::DropUnframed => {
                        unframed.clear();
                        b.drop_unframed();
                    }
                    Op::Release => {
                        b.release(&mut pool);
                        if framed.is_empty() && unframed.is_empty() {
                            prop_assert_eq!(b.capacity(), 0);
                        }
                    }
                }
                prop_assert!(b.held() <= size);
                prop_assert_eq!(b.held(), framed.len() + unframed.len());
                prop_assert_eq!(b.pending(), &framed[..]);
                prop_assert_eq!(&sink.got, &want);
            }
        }
    }

    #[test]
    fn with_no_full_buffer_free_a_response_starts_small_and_moves_when_it_fills_it() {
        let mut pool = Pool::new(32 << 10, 4);
        let mut b = OutBuf::default();
        assert_eq!(b.room(&mut pool).len(), SMALL);
        b.filled(SMALL - 100);
        b.frame(SMALL - 100);
        assert_eq!(b.capacity(), SMALL, "three quarters full: still small");
        b.room(&mut pool)[..SMALL / 4 - 100].fill(7);
        b.filled(SMALL / 4 - 100);
        assert_eq!(b.room(&mut pool).len(), (32 << 10) - SMALL * 5 / 4 + 200);
        assert_eq!(b.capacity(), 32 << 10);
        assert_eq!(b.pending().len(), SMALL - 100, "what was framed moved with it");
        assert_eq!(pool.free_small.len(), 1, "the small buffer went back");
        let mut sink = Sink { got: Vec::new(), take: usize::MAX };
        b.frame(SMALL / 4 - 100);
        b.write_to(&mut sink).unwrap();
        b.release(&mut pool);
        assert_eq!((pool.free.len(), b.capacity()), (1, 0));
        assert_eq!(&sink.got[SMALL - 100..], &vec![7; SMALL / 4 - 100][..]);
        // With a full buffer free, the next response starts in it.
        assert_eq!(b.room(&mut pool).len(), 32 << 10);
        assert_eq!((pool.free.len(), pool.free_small.len()), (0, 1));
    }

    #[test]
    fn a_small_buffer_a_read_filled_moves_to_a_full_one_though_the_client_took_it_all() {
        let mut pool = Pool::new(32 << 10, 4);
        let mut b = OutBuf::default();
        let n = b.room(&mut pool).len();
        assert_eq!(n, SMALL);
        b.filled(n);
        b.frame(n);
        let mut sink = Sink { got: Vec::new(), take: usize::MAX };
        assert_eq!(b.write_to(&mut sink).unwrap(), SMALL);
        assert_eq!(b.room(&mut pool).len(), 32 << 10, "the rest of a long response is read at once");
    }

    #[test]
    fn a_small_buffer_moves_to_a_full_one_for_what_would_not_fit() {
        let mut pool = Pool::new(32 << 10, 4);
        let mut b = OutBuf::default();
        assert_eq!(b.room_for(&mut pool, 100).len(), SMALL);
        assert_eq!(b.room_for(&mut pool, SMALL + 1).len(), 32 << 10);
    }

    #[test]
    fn a_full_buffer_has_no_room_until_the_client_takes_some() {
        let mut pool = Pool::new(16, 1);
        let mut b = OutBuf::default();
        let n = b.room(&mut pool).len();
        b.filled(n);
        b.frame(16);
        assert!(b.room(&mut pool).is_empty());
        let mut sink = Sink { got: Vec::new(), take: 6 };
        assert_eq!(b.write_to(&mut sink).unwrap(), 6);
        assert_eq!(b.room(&mut pool).len(), 6, "the sent prefix is given back");
        b.push(b"reply", &mut pool);
        assert_eq!(&b.pending()[10..], b"reply");
    }
}
