//! Blocked addresses dropped before a connection exists: an eBPF socket
//! filter on every listening socket of the guard, which the kernel runs on
//! each segment the listener receives (`tcp_v4_rcv`/`tcp_v6_rcv` ->
//! `tcp_filter`), and which drops a SYN from a blocked client's network.
//! No connection is made, nothing is accepted or closed: the client
//! retransmits into nothing, and the guard's loop never hears of it
//! (Tempesta FW drops blocked clients at the IP layer the same way).
//!
//! The blocks are the [`crate::table::ClientTable`]'s: it writes a key here
//! when it blocks a network and deletes it when the block expires or is
//! lifted, under the same shard lock, so the map never holds a block the
//! table does not. A key is the table's own (the client's network by the
//! key prefixes, IPv4 mapped into IPv6: 16 bytes); its value the block's
//! deadline on the kernel's monotonic clock (`bpf_ktime_get_ns`,
//! `CLOCK_MONOTONIC`; `u64::MAX` for good), so a block the guard has not
//! yet swept lets its client's SYNs through the moment it ends, and the
//! guard then drops it at accept as ever.
//!
//! What the program reads: the skb of a socket filter on TCP starts at the
//! transport header (the IP header is pulled by then), so the IP header is
//! read with `bpf_skb_load_bytes_relative(.., BPF_HDR_START_NET)`, which
//! also serves `BPF_PROG_TEST_RUN` (whose skb starts at the network
//! header). The IP version is the header's own (a dual-stack IPv6 listener
//! receives IPv4 SYNs with IPv4 headers). Only a SYN without ACK is
//! judged; everything else passes, and so does anything the program cannot
//! read: the accepted connections inherit the listener's filter, and their
//! segments pass after one read (two for IPv6). Any doubt passes: the guard then refuses
//! the connection at accept, as it did before the filter.
//!
//! The map is a `BPF_MAP_TYPE_HASH` allocated as it fills
//! (`BPF_F_NO_PREALLOC`) with room for every block the table can hold, so
//! it never fills up and costs memory only for the blocks there are (an
//! LRU hash must be preallocated: 1,000,000 entries would take about
//! 100 MB up front). A write that fails anyway is counted and changes
//! nothing else: that address reaches accept and is refused there.
//!
//! Where the filter cannot load (no CAP_BPF, `unprivileged_bpf_disabled`,
//! an old kernel) [`SynFilter::load`] says why and the guard goes on
//! without it.
#![allow(unsafe_code)]

use crate::net::KeyPrefixes;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_TEST_RUN: u32 = 10;

const BPF_ANY: u64 = 0;
const BPF_NOEXIST: u64 = 1;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_F_NO_PREALLOC: u32 = 1;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// `SO_ATTACH_BPF` (asm-generic/socket.h).
const SO_ATTACH_BPF: libc::c_int = 50;

const HELPER_MAP_LOOKUP: i32 = 1;
const HELPER_KTIME_GET_NS: i32 = 5;
const HELPER_SKB_LOAD_BYTES_RELATIVE: i32 = 68;
const BPF_HDR_START_NET: i32 = 1;

/// What the program returns for a SYN it drops, and for everything else
/// (a socket filter's "keep the whole packet").
pub const DROP: u32 = 0;
pub const PASS: u32 = u32::MAX;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// `union bpf_attr`, as bytes: each command's fields at their offsets
/// (linux/bpf.h), the rest zero as the kernel requires.
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 144])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn get_u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.0[at..at + 4].try_into().unwrap_or_default())
    }
    fn name(&mut self, at: usize, name: &str) -> &mut Attr {
        let n = name.len().min(15);
        self.0[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

/// `bpf(cmd, attr)`: the descriptor or value it returns.
fn sys_bpf(cmd: u32, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a live, writable, zero-padded `union bpf_attr` of
    // its full size; every address written into it by the callers points
    // at memory that outlives this call with the length given beside it.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd as libc::c_long, attr.0.as_mut_ptr(), attr.0.len()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel as a new descriptor
    // that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Now on `CLOCK_MONOTONIC` (the clock `bpf_ktime_get_ns` reads), in ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// A tiny assembler: instructions, and jumps to labels patched at the end.
#[derive(Default)]
struct Asm {
    code: Vec<Insn>,
    /// (instruction index, label) of each jump.
    jumps: Vec<(usize, &'static str)>,
    labels: Vec<(&'static str, usize)>,
}

// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;
const R7: u8 = 7;
const R10: u8 = 10;

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(Insn { code, regs: (src << 4) | (dst & 0x0f), off, imm });
    }
    fn mov(&mut self, dst: u8, src: u8) {
        self.op(0xbf, dst, src, 0, 0);
    }
    fn movi(&mut self, dst: u8, imm: i32) {
        self.op(0xb7, dst, 0, 0, imm);
    }
    fn addi(&mut self, dst: u8, imm: i32) {
        self.op(0x07, dst, 0, 0, imm);
    }
    fn andi(&mut self, dst: u8, imm: i32) {
        self.op(0x57, dst, 0, 0, imm);
    }
    fn and32i(&mut self, dst: u8, imm: i32) {
        self.op(0x54, dst, 0, 0, imm);
    }
    fn andr(&mut self, dst: u8, src: u8) {
        self.op(0x5f, dst, src, 0, 0);
    }
    fn lshi(&mut self, dst: u8, imm: i32) {
        self.op(0x67, dst, 0, 0, imm);
    }
    fn rshi(&mut self, dst: u8, imm: i32) {
        self.op(0x77, dst, 0, 0, imm);
    }
    fn ldxb(&mut self, dst: u8, src: u8, off: i16) {
        self.op(0x71, dst, src, off, 0);
    }
    fn ldxw(&mut self, dst: u8, src: u8, off: i16) {
        self.op(0x61, dst, src, off, 0);
    }
    fn ldxdw(&mut self, dst: u8, src: u8, off: i16) {
        self.op(0x79, dst, src, off, 0);
    }
    fn stxw(&mut self, dst: u8, off: i16, src: u8) {
        self.op(0x63, dst, src, off, 0);
    }
    fn stxdw(&mut self, dst: u8, off: i16, src: u8) {
        self.op(0x7b, dst, src, off, 0);
    }
    fn stw(&mut self, dst: u8, off: i16, imm: i32) {
        self.op(0x62, dst, 0, off, imm);
    }
    fn stdw(&mut self, dst: u8, off: i16, imm: i32) {
        self.op(0x7a, dst, 0, off, imm);
    }
    /// A 64-bit immediate (two slots); `src` 1: a map's descriptor.
    fn ld64(&mut self, dst: u8, src: u8, v: u64) {
        self.op(0x18, dst, src, 0, v as u32 as i32);
        self.op(0, 0, 0, 0, (v >> 32) as u32 as i32);
    }
    fn call(&mut self, helper: i32) {
        self.op(0x85, 0, 0, 0, helper);
    }
    fn exit(&mut self) {
        self.op(0x95, 0, 0, 0, 0);
    }
    fn jmp(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: &'static str) {
        self.jumps.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    /// `if dst != imm goto to`.
    fn jnei(&mut self, dst: u8, imm: i32, to: &'static str) {
        self.jmp(0x55, dst, 0, imm, to);
    }
    /// `if dst == imm goto to`.
    fn jeqi(&mut self, dst: u8, imm: i32, to: &'static str) {
        self.jmp(0x15, dst, 0, imm, to);
    }
    /// `if dst >= src goto to` (unsigned).
    fn jge(&mut self, dst: u8, src: u8, to: &'static str) {
        self.jmp(0x3d, dst, src, 0, to);
    }
    fn ja(&mut self, to: &'static str) {
        self.jmp(0x05, 0, 0, 0, to);
    }
    fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.code.len()));
    }
    fn finish(mut self) -> Vec<Insn> {
        for &(at, to) in &self.jumps {
            let target = self.labels.iter().find(|(n, _)| *n == to).map(|&(_, i)| i).expect("a defined label");
            self.code[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.code
    }
    /// `r0 = bpf_skb_load_bytes_relative(r6, off, fp + at, len, NET)`;
    /// `off` an immediate, or (None) already in r2.
    fn load_net(&mut self, off: Option<i32>, at: i16, len: i32) {
        self.mov(R1, R6);
        if let Some(off) = off {
            self.movi(R2, off);
        }
        self.mov(R3, R10);
        self.addi(R3, i32::from(at));
        self.movi(R4, len);
        self.movi(R5, BPF_HDR_START_NET);
        self.call(HELPER_SKB_LOAD_BYTES_RELATIVE);
    }
}

/// Stack layout: the key (16 bytes) at fp-16, the packet's first 40
/// bytes from the IP header on at fp-56 (every TCP segment has them: an
/// IPv4 header and a TCP header of 20 bytes at least, or the 40-byte IPv6
/// header), the TCP flags byte at fp-64 when they are further on.
const KEY: i16 = -16;
const HDR: i16 = -56;
const FLAGS: i16 = -64;

/// The program for the map open at `map_fd`, keying clients by `prefixes`
/// exactly as [`crate::table::ClientTable::key`] does. One read of the
/// packet for an IPv4 segment without IP options (a segment of an open
/// connection passes after it), two for IPv6.
fn program(map_fd: RawFd, prefixes: KeyPrefixes) -> Vec<Insn> {
    let mut a = Asm::default();
    a.mov(R6, R1);
    a.load_net(Some(0), HDR, 40);
    a.jnei(R0, 0, "pass");
    a.ldxb(R7, R10, HDR);
    a.mov(R2, R7);
    a.rshi(R2, 4);
    a.jeqi(R2, 4, "v4");
    a.jeqi(R2, 6, "v6");
    a.ja("pass");

    // IPv4: TCP only; the flags at IHL * 4 + 13 (in what was read when
    // there are no IP options).
    a.label("v4");
    a.ldxb(R2, R10, HDR + 9);
    a.jnei(R2, 6, "pass");
    a.mov(R2, R7);
    a.andi(R2, 0x0f);
    a.jnei(R2, 5, "v4_options");
    a.ldxb(R2, R10, HDR + 20 + 13);
    a.ja("v4_flags");
    a.label("v4_options");
    a.lshi(R2, 2);
    a.addi(R2, 13);
    a.load_net(None, FLAGS, 1);
    a.jnei(R0, 0, "pass");
    a.ldxb(R2, R10, FLAGS);
    a.label("v4_flags");
    a.andi(R2, 0x12);
    a.jnei(R2, 0x02, "pass");
    // The key: ::ffff:a.b.c.d, the address masked by the v4 prefix.
    a.stdw(R10, KEY, 0);
    a.stw(R10, KEY + 8, i32::from_le_bytes([0, 0, 0xff, 0xff]));
    a.ldxw(R2, R10, HDR + 12);
    if prefixes.v4 < 32 {
        let mask = u32::MAX.checked_shl(32 - u32::from(prefixes.v4)).unwrap_or(0);
        a.and32i(R2, i32::from_le_bytes(mask.to_be_bytes()));
    }
    a.stxw(R10, KEY + 12, R2);
    a.ja("lookup");

    // IPv6: TCP as the next header (a SYN with extension headers passes);
    // the source address is in what was read.
    a.label("v6");
    a.ldxb(R2, R10, HDR + 6);
    a.jnei(R2, 6, "pass");
    a.load_net(Some(40 + 13), FLAGS, 1);
    a.jnei(R0, 0, "pass");
    a.ldxb(R2, R10, FLAGS);
    a.andi(R2, 0x12);
    a.jnei(R2, 0x02, "pass");
    let mask = u128::MAX.checked_shl(128 - u32::from(prefixes.v6.clamp(1, 128))).unwrap_or(0).to_be_bytes();
    for (half, at) in [(&mask[..8], 0), (&mask[8..], 8)] {
        a.ldxdw(R2, R10, HDR + 8 + at);
        let m = u64::from_le_bytes(half.try_into().unwrap_or_default());
        if m != u64::MAX {
            a.ld64(R3, 0, m);
            a.andr(R2, R3);
        }
        a.stxdw(R10, KEY + at, R2);
    }

    // Blocked (and not yet expired): drop.
    a.label("lookup");
    a.ld64(R1, 1, map_fd as u64);
    a.mov(R2, R10);
    a.addi(R2, i32::from(KEY));
    a.call(HELPER_MAP_LOOKUP);
    a.jeqi(R0, 0, "pass");
    a.ldxdw(R7, R0, 0);
    a.call(HELPER_KTIME_GET_NS);
    a.jge(R0, R7, "pass");
    a.movi(R0, DROP as i32);
    a.exit();

    a.label("pass");
    // mov32: 0xffffffff, zero-extended.
    a.op(0xb4, R0, 0, 0, PASS as i32);
    a.exit();
    a.finish()
}

/// The loaded filter: its map, its program, what it holds.
#[derive(Debug)]
pub struct SynFilter {
    map: OwnedFd,
    prog: OwnedFd,
    capacity: u32,
    /// Keys in the map now.
    entries: AtomicU64,
    /// Writes the kernel refused (the address is refused at accept instead).
    errors: AtomicU64,
}

/// Why a step failed, for the one log line the guard writes.
fn why(what: &str, e: io::Error) -> String {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (needs CAP_BPF and CAP_NET_ADMIN, or root; or kernel.unprivileged_bpf_disabled)"
        }
        Some(libc::EINVAL) | Some(libc::ENOSYS) => " (a kernel without what the filter needs?)",
        _ => "",
    };
    format!("{what}: {e}{hint}")
}

impl SynFilter {
    /// A map with room for `capacity` blocks and the program reading it,
    /// keying by `prefixes`; or why not.
    pub fn load(capacity: usize, prefixes: KeyPrefixes) -> Result<SynFilter, String> {
        let capacity = capacity.clamp(1, u32::MAX as usize) as u32;
        let mut attr = Attr::new();
        attr.u32(0, BPF_MAP_TYPE_HASH)
            .u32(4, 16)
            .u32(8, 8)
            .u32(12, capacity)
            .u32(16, BPF_F_NO_PREALLOC)
            .name(28, "guard_syn_drop");
        let map = owned(sys_bpf(BPF_MAP_CREATE, &mut attr).map_err(|e| why("BPF_MAP_CREATE", e))?);
        let insns = program(map.as_raw_fd(), prefixes);
        let prog = load_program(&insns)?;
        Ok(SynFilter { map, prog, capacity, entries: AtomicU64::new(0), errors: AtomicU64::new(0) })
    }

    /// Attaches the program to a listening socket (`SO_ATTACH_BPF`); its
    /// accepted connections inherit it (and pass it: they send no SYN).
    pub fn attach(&self, socket: &impl AsRawFd) -> io::Result<()> {
        let fd: libc::c_int = self.prog.as_raw_fd();
        // SAFETY: `fd` is a live c_int for the call, its size given.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_ATTACH_BPF,
                std::ptr::from_ref(&fd).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Drop SYNs from the network keyed `key` (a table key) for `left_ms`
    /// more ms (None: for good). False when the kernel refused the write.
    pub fn add(&self, key: u128, left_ms: Option<u64>) -> bool {
        let until = left_ms.map_or(u64::MAX, |ms| monotonic_ns().saturating_add(ms.saturating_mul(1_000_000)));
        let k = key.to_be_bytes();
        let v = until.to_ne_bytes();
        let write = |flags: u64| {
            let mut attr = Attr::new();
            attr.u32(0, self.map.as_raw_fd() as u32)
                .u64(8, k.as_ptr() as u64)
                .u64(16, v.as_ptr() as u64)
                .u64(24, flags);
            sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
        };
        // BPF_NOEXIST first: a new key is counted; one already there (the
        // table never asks for that, but a failed delete could leave one)
        // is overwritten (BPF_ANY).
        let done = match write(BPF_NOEXIST) {
            Ok(_) => {
                self.entries.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => write(BPF_ANY).is_ok(),
            Err(_) => false,
        };
        if !done {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// Stop dropping SYNs from `key`'s network: whether it was there.
    pub fn remove(&self, key: u128) -> bool {
        let k = key.to_be_bytes();
        let mut attr = Attr::new();
        attr.u32(0, self.map.as_raw_fd() as u32).u64(8, k.as_ptr() as u64);
        let gone = sys_bpf(BPF_MAP_DELETE_ELEM, &mut attr).is_ok();
        if gone {
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        gone
    }

    /// Whether `key` is in the map (expired or not).
    pub fn contains(&self, key: u128) -> bool {
        let k = key.to_be_bytes();
        let mut v = [0u8; 8];
        let mut attr = Attr::new();
        attr.u32(0, self.map.as_raw_fd() as u32).u64(8, k.as_ptr() as u64).u64(16, v.as_mut_ptr() as u64);
        sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).is_ok()
    }

    /// Keys in the map.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Writes the kernel refused.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The blocks the map has room for.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The program's verdict on `frame` (an Ethernet frame, as
    /// `BPF_PROG_TEST_RUN` takes it): [`DROP`] or [`PASS`].
    pub fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        self.test_run_repeat(frame, 1).map(|(verdict, _)| verdict)
    }

    /// [`SynFilter::test_run`] `repeat` times: the verdict and the kernel's
    /// mean time a run in ns.
    pub fn test_run_repeat(&self, frame: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
        let mut out = vec![0u8; frame.len() + 256];
        let mut attr = Attr::new();
        attr.u32(0, self.prog.as_raw_fd() as u32)
            .u32(8, frame.len() as u32)
            .u32(12, out.len() as u32)
            .u64(16, frame.as_ptr() as u64)
            .u64(24, out.as_mut_ptr() as u64)
            .u32(32, repeat.max(1));
        sys_bpf(BPF_PROG_TEST_RUN, &mut attr)?;
        Ok((attr.get_u32(4), attr.get_u32(36)))
    }
}

const LICENSE: &[u8] = b"Dual MIT/GPL\0";

fn load_program(insns: &[Insn]) -> Result<OwnedFd, String> {
    let load = |log: Option<&mut [u8]>| {
        let mut attr = Attr::new();
        attr.u32(0, BPF_PROG_TYPE_SOCKET_FILTER)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, LICENSE.as_ptr() as u64)
            .name(48, "guard_syn_drop");
        if let Some(buf) = log {
            attr.u32(24, 1).u32(28, buf.len() as u32).u64(32, buf.as_mut_ptr() as u64);
        }
        sys_bpf(BPF_PROG_LOAD, &mut attr)
    };
    match load(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let mut log = vec![0u8; 1 << 16];
            if let Ok(fd) = load(Some(&mut log)) {
                return Ok(owned(fd));
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]).trim_end().to_owned();
            let mut msg = why("BPF_PROG_LOAD (socket filter)", e);
            if !text.is_empty() {
                msg.push_str(": ");
                msg.push_str(&text);
            }
            Err(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = program(3, KeyPrefixes::default());
        // Every jump stays inside the program; the last two are the pass path.
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == 0x05 && insn.code != 0x85 && insn.code != 0x95 {
                let to = i as i64 + 1 + i64::from(insn.off);
                assert!((0..p.len() as i64).contains(&to), "jump at {i} to {to}");
            }
        }
        assert_eq!(p[p.len() - 1].code, 0x95);
        assert_eq!(p[p.len() - 2].imm, -1);
    }
}
