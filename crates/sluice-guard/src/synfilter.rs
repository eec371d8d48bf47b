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
//!
//! The program is written with the shield's eBPF assembler and loaded,
//! like its maps, through `sluice-live`'s `bpf()` wrappers.
#![allow(unsafe_code)]

use crate::net::KeyPrefixes;
use sluice_live::asm::{Alu, Asm, Cond, Label, Size, FP, R0, R1, R2, R3, R4, R5, R6, R7};
use sluice_live::bpf::{BpfMap, Insn, MapType, SocketFilter, BPF_F_NO_PREALLOC};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

const HELPER_KTIME_GET_NS: i32 = 5;
const HELPER_SKB_LOAD_BYTES_RELATIVE: i32 = 68;
const BPF_HDR_START_NET: i32 = 1;

/// What the program returns for a SYN it drops, and for everything else
/// (a socket filter's "keep the whole packet").
pub const DROP: u32 = 0;
pub const PASS: u32 = u32::MAX;

/// Now on `CLOCK_MONOTONIC` (the clock `bpf_ktime_get_ns` reads), in ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Stack layout: the key (16 bytes) at fp-16, the packet's first 40
/// bytes from the IP header on at fp-56 (every TCP segment has them: an
/// IPv4 header and a TCP header of 20 bytes at least, or the 40-byte IPv6
/// header), the TCP flags byte at fp-64 when they are further on.
const KEY: i16 = -16;
const HDR: i16 = -56;
const FLAGS: i16 = -64;

/// `r0 = bpf_skb_load_bytes_relative(r6, off, fp + at, len, NET)`; `off`
/// an immediate, or (None) already in r2.
fn load_net(a: &mut Asm, off: Option<i32>, at: i16, len: i32) {
    a.mov(R1, R6);
    if let Some(off) = off {
        a.mov_imm(R2, off);
    }
    a.mov(R3, FP);
    a.alu_imm(Alu::Add, R3, i32::from(at));
    a.mov_imm(R4, len);
    a.mov_imm(R5, BPF_HDR_START_NET);
    a.call(HELPER_SKB_LOAD_BYTES_RELATIVE);
}

/// R2 = the TCP flags byte's SYN and ACK bits; `pass` unless only SYN.
fn syn_only(a: &mut Asm, pass: Label) {
    a.alu_imm(Alu::And, R2, 0x12);
    a.jmp_imm(Cond::Ne, R2, 0x02, pass);
}

/// The program for the map open at `map_fd`, keying clients by `prefixes`
/// exactly as [`crate::table::ClientTable::key`] does. One read of the
/// packet for an IPv4 segment without IP options (a segment of an open
/// connection passes after it), two for IPv6.
fn program(map_fd: i32, prefixes: KeyPrefixes) -> Vec<Insn> {
    let mut a = Asm::new();
    let (pass, v4, v4_options, v4_flags, v6, lookup) =
        (a.label(), a.label(), a.label(), a.label(), a.label(), a.label());
    a.mov(R6, R1);
    load_net(&mut a, Some(0), HDR, 40);
    a.jmp_imm(Cond::Ne, R0, 0, pass);
    a.ldx(Size::B, R7, FP, HDR);
    a.mov(R2, R7);
    a.alu_imm(Alu::Rsh, R2, 4);
    a.jmp_imm(Cond::Eq, R2, 4, v4);
    a.jmp_imm(Cond::Eq, R2, 6, v6);
    a.ja(pass);

    // IPv4: TCP only; the flags at IHL * 4 + 13 (in what was read when
    // there are no IP options).
    a.bind(v4);
    a.ldx(Size::B, R2, FP, HDR + 9);
    a.jmp_imm(Cond::Ne, R2, 6, pass);
    a.mov(R2, R7);
    a.alu_imm(Alu::And, R2, 0x0f);
    a.jmp_imm(Cond::Ne, R2, 5, v4_options);
    a.ldx(Size::B, R2, FP, HDR + 20 + 13);
    a.ja(v4_flags);
    a.bind(v4_options);
    a.alu_imm(Alu::Lsh, R2, 2);
    a.alu_imm(Alu::Add, R2, 13);
    load_net(&mut a, None, FLAGS, 1);
    a.jmp_imm(Cond::Ne, R0, 0, pass);
    a.ldx(Size::B, R2, FP, FLAGS);
    a.bind(v4_flags);
    syn_only(&mut a, pass);
    // The key: ::ffff:a.b.c.d, the address masked by the v4 prefix.
    a.st_imm(Size::DW, FP, KEY, 0);
    a.st_imm(Size::W, FP, KEY + 8, i32::from_le_bytes([0, 0, 0xff, 0xff]));
    a.ldx(Size::W, R2, FP, HDR + 12);
    if prefixes.v4 < 32 {
        let mask = u32::MAX.checked_shl(32 - u32::from(prefixes.v4)).unwrap_or(0);
        a.alu32_imm(Alu::And, R2, i32::from_le_bytes(mask.to_be_bytes()));
    }
    a.stx(Size::W, FP, KEY + 12, R2);
    a.ja(lookup);

    // IPv6: TCP as the next header (a SYN with extension headers passes);
    // the source address is in what was read.
    a.bind(v6);
    a.ldx(Size::B, R2, FP, HDR + 6);
    a.jmp_imm(Cond::Ne, R2, 6, pass);
    load_net(&mut a, Some(40 + 13), FLAGS, 1);
    a.jmp_imm(Cond::Ne, R0, 0, pass);
    a.ldx(Size::B, R2, FP, FLAGS);
    syn_only(&mut a, pass);
    let mask = u128::MAX.checked_shl(128 - u32::from(prefixes.v6.clamp(1, 128))).unwrap_or(0).to_be_bytes();
    for (half, at) in [(&mask[..8], 0), (&mask[8..], 8)] {
        a.ldx(Size::DW, R2, FP, HDR + 8 + at);
        let m = u64::from_le_bytes(half.try_into().unwrap_or_default());
        if m != u64::MAX {
            a.ld_imm64(R3, m);
            a.alu(Alu::And, R2, R3);
        }
        a.stx(Size::DW, FP, KEY + at, R2);
    }

    // Blocked (and not yet expired): drop.
    a.bind(lookup);
    a.lookup(map_fd, KEY);
    a.jmp_imm(Cond::Eq, R0, 0, pass);
    a.ldx(Size::DW, R7, R0, 0);
    a.call(HELPER_KTIME_GET_NS);
    a.jmp(Cond::Ge, R0, R7, pass);
    a.mov_imm(R0, DROP as i32);
    a.exit();

    a.bind(pass);
    // 32-bit: 0xffffffff, zero-extended.
    a.alu32_imm(Alu::Mov, R0, PASS as i32);
    a.exit();
    a.finish().expect("a program of a few dozen instructions")
}

/// The loaded filter: its map, its program, what it holds.
#[derive(Debug)]
pub struct SynFilter {
    map: BpfMap,
    prog: SocketFilter,
    capacity: u32,
    /// Keys in the map now.
    entries: AtomicU64,
    /// Writes the kernel refused (the address is refused at accept instead).
    errors: AtomicU64,
}

/// Why a step failed, for the one log line the guard writes.
fn why(what: &str, e: &dyn std::fmt::Display, errno: Option<i32>) -> String {
    let hint = match errno {
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
        let map = BpfMap::new(MapType::Hash, 16, 8, capacity, BPF_F_NO_PREALLOC, "guard_syn_drop").map_err(|e| {
            let errno = match &e {
                sluice_live::LiveError::Permission { .. } => Some(libc::EPERM),
                _ => None,
            };
            why("BPF_MAP_CREATE", &e, errno)
        })?;
        let insns = program(map.as_raw_fd(), prefixes);
        let prog = SocketFilter::load_named(&insns, "guard_syn_drop").map_err(|(e, log)| {
            let mut msg = why("BPF_PROG_LOAD (socket filter)", &e, e.raw_os_error());
            if !log.is_empty() {
                msg.push_str(": ");
                msg.push_str(&log);
            }
            msg
        })?;
        Ok(SynFilter { map, prog, capacity, entries: AtomicU64::new(0), errors: AtomicU64::new(0) })
    }

    /// Attaches the program to a listening socket (`SO_ATTACH_BPF`); its
    /// accepted connections inherit it (and pass it: they send no SYN).
    pub fn attach(&self, socket: &impl AsRawFd) -> io::Result<()> {
        self.prog.attach(socket)
    }

    /// Drop SYNs from the network keyed `key` (a table key) for `left_ms`
    /// more ms (None: for good). False when the kernel refused the write.
    pub fn add(&self, key: u128, left_ms: Option<u64>) -> bool {
        let until = left_ms.map_or(u64::MAX, |ms| monotonic_ns().saturating_add(ms.saturating_mul(1_000_000)));
        let (k, v) = (key.to_be_bytes(), until.to_ne_bytes());
        // A new key is counted; one already there (the table never asks
        // for that, but a failed delete could leave one) is overwritten.
        let done = match self.map.insert_new(&k, &v) {
            Ok(true) => {
                self.entries.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(false) => self.map.update(&k, &v).is_ok(),
            Err(_) => false,
        };
        if !done {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// Stop dropping SYNs from `key`'s network: whether it was there.
    pub fn remove(&self, key: u128) -> bool {
        let gone = self.map.remove(&key.to_be_bytes()).unwrap_or(false);
        if gone {
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        gone
    }

    /// Whether `key` is in the map (expired or not).
    pub fn contains(&self, key: u128) -> bool {
        matches!(self.map.lookup(&key.to_be_bytes()), Ok(Some(_)))
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
        self.prog.test_run_repeat(frame, repeat).map_err(|e| io::Error::other(e.to_string()))
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
