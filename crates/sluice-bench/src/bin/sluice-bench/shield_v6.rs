//! `sluice-bench shield --hosts6 N,...`: IPv6 hosts (/128s), the shield's
//! IPv6 exact table against a BPF `HASH` of the 16-byte addresses and an
//! `LPM_TRIE`, on IPv6 frames; with `--prefix-layout`, the layout before
//! the exact table (`sluice_prefix`: one hash map per prefix length, here
//! one for /128, looked up with the address masked).

use crate::shield::{empty, fill, measure, report, sluice, Contender, ShieldBenchArgs};
use anyhow::Result;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_live::bpf::{BpfMap, MapType, XdpProgram, BPF_F_NO_PREALLOC};
use sluice_rules::Prefix;
use sluice_shield::asm::{Alu, Asm, Cond, Size, FP, R0, R1, R2, R3, R7, R8};
use sluice_shield::tables::Layout;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Ethernet, IPv6 from `src` to 2001:db8::1, UDP.
fn frame6(src: u128) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&(0x2001_0db8_u128 << 96 | 1).to_be_bytes());
    f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 8, 0, 0]);
    f.resize(f.len().max(60), 0);
    f
}

/// `n` distinct random /128s, sorted.
fn hosts6(n: usize, rng: &mut ChaCha8Rng) -> Vec<u128> {
    let mut seen = std::collections::HashSet::with_capacity(n);
    while seen.len() < n {
        seen.insert(rng.random::<u128>());
    }
    let mut v: Vec<u128> = seen.into_iter().collect();
    v.sort_unstable();
    v
}

/// Where the IPv6 source's 16 bytes start in the frame.
const SRC6_AT: i16 = 22;

/// One lookup of the IPv6 source (`lpm`: prefix length 128 first).
fn lookup6_program(map: &BpfMap, lpm: bool) -> Vec<sluice_live::bpf::Insn> {
    let mut a = Asm::new();
    let pass = a.label();
    a.ldx(Size::W, R7, R1, 0);
    a.ldx(Size::W, R8, R1, 4);
    a.mov(R2, R7);
    a.alu_imm(Alu::Add, R2, i32::from(SRC6_AT) + 16);
    a.jmp(Cond::Gt, R2, R8, pass);
    a.ldx(Size::H, R3, R7, 12);
    a.jmp_imm(Cond::Ne, R3, 0xdd86, pass); // 0x86dd read little-endian
    let key: i16 = if lpm { -20 } else { -16 };
    if lpm {
        a.st_imm(Size::W, FP, key, 128);
    }
    let addr = if lpm { key + 4 } else { key };
    // Four 4-byte words (the LPM key is not 8-byte aligned past its length).
    for w in 0..4 {
        a.ldx(Size::W, R3, R7, SRC6_AT + 4 * w);
        a.stx(Size::W, FP, addr + 4 * w, R3);
    }
    a.lookup(map.as_raw_fd(), key);
    a.jmp_imm(Cond::Eq, R0, 0, pass);
    a.mov_imm(R0, sluice_shield::program::XDP_DROP);
    a.exit();
    a.bind(pass);
    a.mov_imm(R0, sluice_shield::program::XDP_PASS);
    a.exit();
    a.finish().expect("a short program")
}

fn map6(name: &'static str, set: &[u128], lpm: bool) -> Result<Contender> {
    let t = Instant::now();
    let (ty, key_size, flags) = if lpm { (MapType::LpmTrie, 20, BPF_F_NO_PREALLOC) } else { (MapType::Hash, 16, 0) };
    let map = BpfMap::new(ty, key_size, 1, set.len().max(1) as u32, flags, name)?;
    let mut keys = Vec::with_capacity(key_size as usize * set.len());
    for a in set {
        if lpm {
            keys.extend_from_slice(&128u32.to_ne_bytes());
        }
        keys.extend_from_slice(&a.to_be_bytes());
    }
    let how = fill(&map, &keys, key_size as usize)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let program = XdpProgram::load_named(&lookup6_program(&map, lpm), name)?;
    let mut c = Contender::new(if lpm { "lpm_trie" } else { "hash" }, program, load_ms, how);
    c._maps = vec![map];
    Ok(c)
}

/// The IPv6 host rows.
pub fn rows(a: &ShieldBenchArgs, rng: &mut ChaCha8Rng) -> Result<()> {
    for &n in a.hosts6.iter().filter(|&&n| n > 0) {
        let set = hosts6(n, rng);
        let prefixes: Vec<Prefix> = set.iter().map(|&addr| Prefix::V6 { addr, len: 128 }).collect();
        let frames: Vec<Vec<u8>> = (0..a.frames)
            .map(|_| {
                let src = if rng.random_bool(a.listed.clamp(0.0, 1.0)) {
                    set[rng.random_range(0..set.len())]
                } else {
                    rng.random::<u128>()
                };
                frame6(src)
            })
            .collect();
        let mut contenders = vec![sluice("sluice", &prefixes, &Layout::default())?];
        if a.prefix_layout {
            let before = Layout { exact_hosts: false, ..Layout::default() };
            contenders.push(sluice("sluice_prefix", &prefixes, &before)?);
        }
        contenders.push(map6("bench_hash6", &set, false)?);
        contenders.push(map6("bench_lpm6", &set, true)?);
        contenders.push(empty()?);
        let ns = measure(&contenders, &frames, a.reps)?;
        report(a, "hosts6", n, &contenders, &ns, "hash");
    }
    Ok(())
}
