//! Would io_uring pay for the guard (issue 43, item 1)? The guard's
//! per-request work on its default path is four socket calls on loopback
//! TCP (read the client, write the upstream, read the upstream, write the
//! client) and a share of an `epoll_wait`. io_uring's gain is the system
//! call entries it saves by carrying many operations in one
//! `io_uring_enter`; the TCP work inside each send and receive stays. This
//! measures exactly that on the running kernel: `k` connected loopback
//! pairs, each round one message sent on every pair and received on its
//! other end, three ways:
//!
//! - `syscalls`: a `write` and a `read` per message (the guard today);
//! - `uring`: all sends in one `io_uring_enter`, then all receives in a
//!   second (what a guard batching each loop turn's reads and writes would
//!   do);
//! - `uring_linked`: each pair's send linked to its receive, every pair in
//!   one `io_uring_enter` (the most batching there can be).
//!
//! Every operation is non-blocking (`MSG_DONTWAIT`), so each completes
//! inside the call that submits it, as the guard's non-blocking calls do;
//! every byte is checked received. A plain system call (`getppid`) is timed
//! too: the entry cost alone.
#![allow(unsafe_code)]

use io_uring::{opcode, squeue, types, IoUring};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// How messages cross the pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Syscalls,
    Uring,
    UringLinked,
}

impl Way {
    pub const ALL: [Way; 3] = [Way::Syscalls, Way::Uring, Way::UringLinked];

    pub fn name(self) -> &'static str {
        match self {
            Way::Syscalls => "syscalls",
            Way::Uring => "uring",
            Way::UringLinked => "uring_linked",
        }
    }
}

/// `k` connected loopback TCP pairs (Nagle off, non-blocking), a message
/// of `size` bytes, the receive buffers and a ring for `2k` operations.
pub struct Bed {
    send: Vec<TcpStream>,
    recv: Vec<TcpStream>,
    msg: Vec<u8>,
    bufs: Vec<Vec<u8>>,
    ring: IoUring,
}

impl Bed {
    pub fn new(k: usize, size: usize) -> io::Result<Bed> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let (mut send, mut recv) = (Vec::new(), Vec::new());
        for _ in 0..k {
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            for s in [&a, &b] {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
            }
            send.push(a);
            recv.push(b);
        }
        let msg = (0..size).map(|i| (i % 251) as u8).collect();
        let ring = IoUring::new((2 * k).next_power_of_two() as u32)?;
        Ok(Bed { send, recv, msg, bufs: vec![vec![0; size]; k], ring })
    }

    /// `rounds` rounds the given way; nanoseconds per message (its send and
    /// its receive).
    pub fn time(&mut self, way: Way, rounds: usize) -> io::Result<f64> {
        let started = Instant::now();
        for _ in 0..rounds {
            match way {
                Way::Syscalls => self.round_syscalls()?,
                Way::Uring => self.round_uring(false)?,
                Way::UringLinked => self.round_uring(true)?,
            }
        }
        Ok(started.elapsed().as_nanos() as f64 / (rounds * self.send.len()) as f64)
    }

    fn round_syscalls(&mut self) -> io::Result<()> {
        for s in &mut self.send {
            write_rest(s, &self.msg, 0)?;
        }
        for (s, buf) in self.recv.iter_mut().zip(&mut self.bufs) {
            read_rest(s, buf, 0)?;
        }
        self.check()
    }

    fn round_uring(&mut self, linked: bool) -> io::Result<()> {
        let k = self.send.len();
        let len = self.msg.len() as u32;
        let sends: Vec<squeue::Entry> = (0..k)
            .map(|i| {
                let e = opcode::Send::new(types::Fd(self.send[i].as_raw_fd()), self.msg.as_ptr(), len)
                    .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                    .build()
                    .user_data(i as u64);
                if linked {
                    e.flags(squeue::Flags::IO_LINK)
                } else {
                    e
                }
            })
            .collect();
        let recvs: Vec<squeue::Entry> = (0..k)
            .map(|i| {
                opcode::Recv::new(types::Fd(self.recv[i].as_raw_fd()), self.bufs[i].as_mut_ptr(), len)
                    .flags(libc::MSG_DONTWAIT)
                    .build()
                    .user_data((k + i) as u64)
            })
            .collect();
        let mut done = vec![0usize; 2 * k];
        if linked {
            let ops: Vec<squeue::Entry> = sends.into_iter().zip(recvs).flat_map(|(s, r)| [s, r]).collect();
            self.run(&ops, &mut done)?;
        } else {
            self.run(&sends, &mut done)?;
            self.run(&recvs, &mut done)?;
        }
        // What a non-blocking call left (a receive that ran before its
        // bytes arrived, a short send) is finished with plain calls.
        let (sent, received) = done.split_at(k);
        for (s, &from) in self.send.iter_mut().zip(sent) {
            write_rest(s, &self.msg, from)?;
        }
        for ((s, buf), &from) in self.recv.iter_mut().zip(&mut self.bufs).zip(received) {
            read_rest(s, buf, from)?;
        }
        self.check()
    }

    /// Submit `ops` in one `io_uring_enter` and wait for all; the bytes
    /// each moved go to `done[user_data]` (errors such as EAGAIN, or an
    /// operation cancelled by a short one before it in a link, move none).
    fn run(&mut self, ops: &[squeue::Entry], done: &mut [usize]) -> io::Result<()> {
        // SAFETY: every buffer an entry points into (the message and the
        // receive buffers) lives in `self` and is neither moved nor touched
        // until `submit_and_wait` below returns with every entry completed.
        unsafe {
            self.ring.submission().push_multiple(ops).map_err(|_| io::Error::other("the ring is full"))?;
        }
        self.ring.submit_and_wait(ops.len())?;
        for cqe in self.ring.completion() {
            if let Ok(n @ 0..) = usize::try_from(cqe.result()) {
                done[cqe.user_data() as usize] = n;
            }
        }
        Ok(())
    }

    fn check(&self) -> io::Result<()> {
        match self.bufs.iter().all(|b| *b == self.msg) {
            true => Ok(()),
            false => Err(io::Error::other("a message arrived changed")),
        }
    }
}

/// Write `msg[from..]`, waiting out a full socket buffer.
fn write_rest(s: &mut TcpStream, msg: &[u8], mut from: usize) -> io::Result<()> {
    while from < msg.len() {
        match s.write(&msg[from..]) {
            Ok(n) => from += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read until `buf` is full, from `from` on.
fn read_rest(s: &mut TcpStream, buf: &mut [u8], mut from: usize) -> io::Result<()> {
    while from < buf.len() {
        match s.read(&mut buf[from..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => from += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Nanoseconds per `getppid`: a system call's entry and exit alone.
pub fn syscall_ns(calls: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        // SAFETY: getppid has no arguments and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_delivers_every_message_whole() {
        for size in [1, 128, 16 << 10] {
            let mut bed = Bed::new(8, size).unwrap();
            for way in Way::ALL {
                // A changed or lost byte is an error here.
                let ns = bed.time(way, 20).unwrap();
                assert!(ns > 0.0, "{way:?} {size}");
            }
        }
    }

    #[test]
    fn a_changed_message_is_caught() {
        let mut bed = Bed::new(2, 64).unwrap();
        bed.round_syscalls().unwrap();
        bed.bufs[1][7] ^= 1;
        assert!(bed.check().is_err());
    }
}
