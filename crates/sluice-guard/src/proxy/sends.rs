//! A loop turn's sends in one system call (io_uring).
//!
//! Why: on the default path every request costs the guard two sends (the
//! request to its upstream, the response to its client), and each send
//! wakes the process at the other end. On a machine where the guard, its
//! clients and its upstream share the CPUs, that wakeup preempts the guard
//! as the send returns (the kernel switches on the way back to user
//! space): the woken process finds one message, handles it, sleeps, and
//! the guard resumes for its next send. Issued together in one
//! `io_uring_enter`, a turn's sends wake each peer once, before any
//! switch: the peer then finds the whole turn's messages waiting, and the
//! guard pays one entry instead of one per send. (`BENCHMARKS.md`, "With
//! limits on, 64 addresses", has the measurement.)
//!
//! Every send is non-blocking (`MSG_DONTWAIT`: io_uring answers EAGAIN
//! instead of parking it), so each completes inside the call that submits
//! it, as a plain `send` would: no buffer is lent to the kernel past
//! [`SendRing::send_all`], which waits for every completion before it
//! returns. What a send leaves (a full socket buffer, an error) the caller
//! finishes with its plain calls, which see the same state.
#![allow(unsafe_code)]

use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::RawFd;

/// Entries of the ring: a turn with more sends takes several calls.
const ENTRIES: u32 = 256;

pub(super) struct SendRing {
    ring: IoUring,
}

impl SendRing {
    /// A ring, or why there is none (io_uring disabled or unsupported:
    /// the guard then sends with plain calls).
    pub(super) fn new() -> io::Result<SendRing> {
        Ok(SendRing { ring: IoUring::new(ENTRIES)? })
    }

    /// Send each `bytes` on its socket; `sent[k]` is the bytes item `k`
    /// sent (0 when it sent none: would block, failed, or the ring could
    /// not take it; the caller's plain call then finds out which). An
    /// `Err` means the ring failed and must not be used again; every item
    /// it did not report sent reads 0.
    pub(super) fn send_all(&mut self, items: &[(RawFd, &[u8])], sent: &mut Vec<usize>) -> io::Result<()> {
        sent.clear();
        sent.resize(items.len(), 0);
        let cap = self.ring.params().sq_entries() as usize;
        for (c, chunk) in items.chunks(cap).enumerate() {
            let base = c * cap;
            {
                let mut sq = self.ring.submission();
                for (k, (fd, bytes)) in chunk.iter().enumerate() {
                    let len = bytes.len().min(u32::MAX as usize) as u32;
                    let e = opcode::Send::new(types::Fd(*fd), bytes.as_ptr(), len)
                        .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                        .build()
                        .user_data((base + k) as u64);
                    // SAFETY: `bytes` is borrowed for this whole call, and
                    // the call returns only once every entry pushed has
                    // completed (below), or after the ring failed with the
                    // entries it did not take unread (the kernel reads the
                    // queue only inside `io_uring_enter`, and the ring is
                    // not entered again: see the `Err` contract).
                    if unsafe { sq.push(&e) }.is_err() {
                        // A chunk is at most the ring's size, and each
                        // chunk is drained before the next.
                        unreachable!("a chunk fits the ring");
                    }
                }
            }
            let mut done = 0;
            while done < chunk.len() {
                match self.ring.submit_and_wait(chunk.len() - done) {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
                    Err(e) => {
                        // Entries it took completed inside the call (each is
                        // non-blocking); reap them, leave the rest unread.
                        for cqe in self.ring.completion() {
                            sent[cqe.user_data() as usize] = usize::try_from(cqe.result()).unwrap_or(0);
                        }
                        return Err(e);
                    }
                }
                for cqe in self.ring.completion() {
                    sent[cqe.user_data() as usize] = usize::try_from(cqe.result()).unwrap_or(0);
                    done += 1;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// A ring; where io_uring is off (a sandbox's seccomp, a sysctl) the
    /// guard sends with plain calls and these tests have nothing to test,
    /// except under `SLUICE_REQUIRE_LIVE=1` (CI), where that is a failure.
    fn ring() -> Option<SendRing> {
        match SendRing::new() {
            Ok(r) => Some(r),
            Err(e) => {
                assert!(
                    std::env::var_os("SLUICE_REQUIRE_LIVE").is_none(),
                    "SLUICE_REQUIRE_LIVE=1 but no io_uring: {e}"
                );
                eprintln!("SKIPPED: no io_uring here: {e}");
                None
            }
        }
    }

    /// Reference: what plain sends would have delivered. Every byte of
    /// every item arrives at its own socket's other end, in order, and the
    /// counts say so; more items than the ring holds take several calls.
    #[test]
    fn every_item_arrives_on_its_own_socket() {
        let Some(mut ring) = ring() else { return };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let n = ENTRIES as usize + 7;
        let mut pairs = Vec::new();
        for _ in 0..n {
            let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (b, _) = l.accept().unwrap();
            a.set_nonblocking(true).unwrap();
            pairs.push((a, b));
        }
        let msgs: Vec<Vec<u8>> = (0..n).map(|k| format!("message {k} ").repeat(k % 5 + 1).into_bytes()).collect();
        let items: Vec<(RawFd, &[u8])> = pairs.iter().zip(&msgs).map(|((a, _), m)| (a.as_raw_fd(), &m[..])).collect();
        let mut sent = Vec::new();
        ring.send_all(&items, &mut sent).unwrap();
        for (k, ((_, b), m)) in pairs.iter_mut().zip(&msgs).enumerate() {
            assert_eq!(sent[k], m.len());
            let mut got = vec![0; m.len()];
            b.read_exact(&mut got).unwrap();
            assert_eq!(&got, m);
        }
    }

    /// A send that cannot go (the peer closed and reset) reports 0 sent,
    /// and the others of the call are not disturbed.
    #[test]
    fn a_failed_send_reports_none_sent() {
        let Some(mut ring) = ring() else { return };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let good = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut good_peer, _) = l.accept().unwrap();
        let bad = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (bad_peer, _) = l.accept().unwrap();
        bad.shutdown(std::net::Shutdown::Write).unwrap();
        drop(bad_peer);
        // Its first send draws the reset; the second finds the socket dead.
        let _ = std::io::Write::write(&mut &bad, b"x");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut sent = Vec::new();
        ring.send_all(&[(bad.as_raw_fd(), b"after"), (good.as_raw_fd(), b"fine")], &mut sent).unwrap();
        assert_eq!(sent, vec![0, 4]);
        let mut got = [0; 4];
        good_peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"fine");
    }
}
