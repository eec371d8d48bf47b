//! `police` in the kernel program: the engine's GCRA token buckets
//! (`sluice_engine::flows::Policer`) as words of one BPF array map.
//!
//! Per bucket one `u64`, the time (ns, `bpf_ktime_get_ns`) at which the
//! bucket would be full again. A packet conforms when that is at most the
//! tolerance (the burst's worth of ns) ahead of now, and then pushes it on
//! by its cost with a 64-bit compare-and-swap, so every CPU charges the
//! one bucket as the engine's workers charge their one `AtomicU64`. A
//! `per saddr|daddr` rule has [`PER_ADDRESS_BUCKETS`] of them, the
//! address chosen into one by the engine's own hash (xxh3 of its 128 bits),
//! computed here in BPF: the same addresses share a bucket in both.
//!
//! The numbers (cost, tolerance) come from the engine's `Policer` built
//! for the rule, so both hold one rate to one burst.

use crate::asm::{Alu, Asm, Cond, Label, Size, FP, R0, R1, R2, R3, R4, R5, R7, R8, R9};
use sluice_engine::flows::PoliceKey;
pub use sluice_engine::flows::PER_ADDRESS_BUCKETS;

/// `bpf_ktime_get_ns`: CLOCK_MONOTONIC, as the engine's clock.
const HELPER_KTIME_GET_NS: i32 = 5;

/// Compare-and-swap attempts before a packet is judged over: each lost
/// race means another CPU charged the same bucket in between, so after
/// this many the bucket is being charged as fast as CPUs can; the packet
/// is dropped rather than passed uncharged, so the rate is never exceeded
/// (the engine retries without limit; the verifier wants a bound).
pub const CAS_ATTEMPTS: usize = 8;

/// What a packet costs, in ns of its bucket's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// The same for every packet (a rate in packets).
    Fixed(u64),
    /// `wire length * ns`: a rate in bytes whose ns per byte is a whole
    /// number, as the engine's float product is then exactly.
    PerByte(u64),
    /// `wire length * 1e9 / bytes per second`: any other byte rate (the
    /// engine multiplies by a rounded float; the two may differ by 1 ns a
    /// packet).
    Divided(u64),
}

/// One `police` rule as the kernel program runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoliceCode {
    /// Its first bucket in the map.
    pub base: u32,
    /// Which address picks the bucket; `None`: one bucket for the rule.
    pub per: Option<PoliceKey>,
    pub tolerance_ns: u64,
    pub cost: Cost,
}

impl PoliceCode {
    /// The rule's buckets from `base` on, with the numbers of the
    /// engine's policer for `p`.
    pub fn new(p: &sluice_rules::Police, base: u32) -> PoliceCode {
        let engine = sluice_engine::rules::policer(p);
        let cost = match p.rate {
            sluice_rules::PoliceRate::Packets(_) => Cost::Fixed(engine.cost_ns(0)),
            sluice_rules::PoliceRate::Bytes(rate) => {
                let npu = engine.ns_per_unit();
                // Exact in f64 for every length a frame has (< 2^53 ns).
                if npu.fract() == 0.0 && npu <= 1e9 {
                    Cost::PerByte(npu as u64)
                } else {
                    Cost::Divided(rate)
                }
            }
        };
        let per = match engine.per {
            PoliceKey::Rule => None,
            k => Some(k),
        };
        PoliceCode { base, per, tolerance_ns: engine.tolerance_ns(), cost }
    }

    /// How many buckets (map words) the rule has.
    pub fn buckets(&self) -> u32 {
        if self.per.is_some() {
            PER_ADDRESS_BUCKETS as u32
        } else {
            1
        }
    }
}

/// The default xxh3 secret's words the 9-16 byte path reads (bytes 24..56,
/// little-endian), as `xxh3_64_9to16` folds them with seed 0.
const FLIP1: u64 = 0x1f67_b3b7_a4a4_4072 ^ 0x78e5_c0cc_4ee6_79cb;
const FLIP2: u64 = 0x2172_ffcc_7dd0_5a82 ^ 0x8e24_43f7_7446_08b8;
/// xxh3's avalanche multiplier.
const AVALANCHE: u64 = 0x1656_6791_9e37_79f9;

/// `R1 = xxh3_64(key as 16 little-endian bytes) % PER_ADDRESS_BUCKETS`
/// with the key's low 64 bits in `R7` and high in `R8` (the engine's
/// `Policer::bucket_of`). Clobbers R0-R5, R7, R8.
///
/// xxh3's 16-byte path multiplies two 64-bit words into 128 bits; eBPF
/// has only the low 64, so the high half is put together from 32-bit
/// halves (schoolbook).
pub(crate) fn emit_bucket_of(a: &mut Asm) {
    a.ld_imm64(R1, FLIP1);
    a.alu(Alu::Xor, R7, R1); // lo
    a.ld_imm64(R1, FLIP2);
    a.alu(Alu::Xor, R8, R1); // hi
    let low32 = |a: &mut Asm, dst, src| {
        a.mov(dst, src);
        a.alu_imm(Alu::Lsh, dst, 32);
        a.alu_imm(Alu::Rsh, dst, 32);
    };
    low32(a, R1, R7); // a0
    a.mov(R2, R7);
    a.alu_imm(Alu::Rsh, R2, 32); // a1
    low32(a, R3, R8); // b0
    a.mov(R4, R8);
    a.alu_imm(Alu::Rsh, R4, 32); // b1
    a.mov(R5, R1);
    a.alu(Alu::Mul, R5, R3); // p00 = a0 b0
    a.mov(R0, R1);
    a.alu(Alu::Mul, R0, R4); // p01 = a0 b1
    a.mov(R1, R2);
    a.alu(Alu::Mul, R1, R3); // p10 = a1 b0
    a.alu(Alu::Mul, R2, R4); // p11 = a1 b1
                             // mid = (p00 >> 32) + low32(p10) + low32(p01): under 3 * 2^32.
    a.mov(R3, R5);
    a.alu_imm(Alu::Rsh, R3, 32);
    low32(a, R4, R1);
    a.alu(Alu::Add, R3, R4);
    low32(a, R4, R0);
    a.alu(Alu::Add, R3, R4);
    // high = p11 + (p10 >> 32) + (p01 >> 32) + (mid >> 32).
    a.alu_imm(Alu::Rsh, R1, 32);
    a.alu(Alu::Add, R2, R1);
    a.alu_imm(Alu::Rsh, R0, 32);
    a.alu(Alu::Add, R2, R0);
    a.alu_imm(Alu::Rsh, R3, 32);
    a.alu(Alu::Add, R2, R3);
    // fold = low ^ high; acc = 16 + swap(lo) + hi + fold.
    a.mov(R1, R7);
    a.alu(Alu::Mul, R1, R8);
    a.alu(Alu::Xor, R1, R2);
    a.mov(R2, R7);
    a.from_be(R2, 64); // a byte swap on the little-endian hosts XDP runs on
    a.alu(Alu::Add, R1, R2);
    a.alu(Alu::Add, R1, R8);
    a.alu_imm(Alu::Add, R1, 16);
    // avalanche: h ^= h >> 37; h *= C; h ^= h >> 32.
    a.mov(R2, R1);
    a.alu_imm(Alu::Rsh, R2, 37);
    a.alu(Alu::Xor, R1, R2);
    a.ld_imm64(R2, AVALANCHE);
    a.alu(Alu::Mul, R1, R2);
    a.mov(R2, R1);
    a.alu_imm(Alu::Rsh, R2, 32);
    a.alu(Alu::Xor, R1, R2);
    const _: () = assert!(PER_ADDRESS_BUCKETS.is_power_of_two());
    a.alu_imm(Alu::And, R1, PER_ADDRESS_BUCKETS as i32 - 1);
}

/// Where the summary keeps what the key is read from (set by the caller,
/// the parser's slots).
pub(crate) struct KeySlots {
    /// 0 not IP, 4, 6.
    pub ipv: i16,
    /// The IPv4 addresses (host order).
    pub v4: [i16; 2],
    /// The IPv6 addresses' halves as loaded from the packet ([hi, lo]).
    pub v6: [[i16; 2]; 2],
}

/// One `police` rule's check: falls through when the packet conforms (it
/// is charged), jumps to `over` when it is over its rate. `R6` the
/// summary; `key_slot` a stack slot for the map key. Clobbers R0-R5, R7-R9.
pub(crate) fn emit(a: &mut Asm, code: &PoliceCode, map_fd: i32, keys: &KeySlots, key_slot: i16, over: Label) {
    let s = crate::asm::R6;
    let conform = a.label();
    match code.per {
        None => a.st_imm(Size::W, FP, key_slot, code.base as i32),
        Some(per) => {
            let side = usize::from(per == PoliceKey::Destination);
            // The key as the engine's `bits_of`: an IPv4 address is its
            // 32 bits at the top of 128, an IPv6 one its 128 (big-endian);
            // a frame without IP is 0.
            let (v4, v6, keyed) = (a.label(), a.label(), a.label());
            a.mov_imm(R7, 0);
            a.mov_imm(R8, 0);
            a.ldx(Size::DW, R1, s, keys.ipv);
            a.jmp_imm(Cond::Eq, R1, 4, v4);
            a.jmp_imm(Cond::Eq, R1, 6, v6);
            a.ja(keyed);
            a.bind(v4);
            a.ldx(Size::DW, R8, s, keys.v4[side]);
            a.alu_imm(Alu::Lsh, R8, 32);
            a.ja(keyed);
            a.bind(v6);
            a.ldx(Size::DW, R8, s, keys.v6[side][0]);
            a.from_be(R8, 64);
            a.ldx(Size::DW, R7, s, keys.v6[side][1]);
            a.from_be(R7, 64);
            a.bind(keyed);
            emit_bucket_of(a);
            a.alu_imm(Alu::Add, R1, code.base as i32);
            a.stx(Size::W, FP, key_slot, R1);
        }
    }
    // R8 = the packet's cost.
    match code.cost {
        Cost::Fixed(ns) => a.ld_imm64(R8, ns),
        Cost::PerByte(ns) => {
            a.ldx(Size::DW, R8, s, crate::program::WIRE_LEN_SLOT);
            a.ld_imm64(R1, ns);
            a.alu(Alu::Mul, R8, R1);
        }
        Cost::Divided(rate) => {
            a.ldx(Size::DW, R8, s, crate::program::WIRE_LEN_SLOT);
            a.ld_imm64(R1, 1_000_000_000);
            a.alu(Alu::Mul, R8, R1);
            a.ld_imm64(R1, rate.max(1));
            a.alu(Alu::Div, R8, R1);
        }
    }
    a.call(HELPER_KTIME_GET_NS);
    a.mov(R7, R0);
    a.lookup(map_fd, key_slot);
    // Every key is inside the map; the verifier wants the check.
    a.jmp_imm(Cond::Eq, R0, 0, conform);
    a.mov(R9, R0);
    a.ldx(Size::DW, R0, R9, 0);
    for _ in 0..CAS_ATTEMPTS {
        // R1 = start = max(tat, now); over when start - now > tolerance.
        let later = a.label();
        a.mov(R1, R0);
        a.jmp(Cond::Ge, R1, R7, later);
        a.mov(R1, R7);
        a.bind(later);
        a.mov(R2, R1);
        a.alu(Alu::Sub, R2, R7);
        a.ld_imm64(R3, code.tolerance_ns);
        a.jmp(Cond::Gt, R2, R3, over);
        // Both under u64::MAX / 4 past a clock that counts from boot: no
        // overflow for the engine's saturating add to guard against.
        a.alu(Alu::Add, R1, R8);
        a.mov(R2, R0);
        a.cmpxchg64(R9, 0, R1);
        a.jmp(Cond::Eq, R0, R2, conform);
        // Lost the race: R0 is the bucket's time now; again.
    }
    a.ja(over);
    a.bind(conform);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants are the default secret's words (xxhash-rust's
    /// `DEFAULT_SECRET`, bytes 24..56 little-endian).
    #[test]
    fn the_flips_are_the_default_secrets() {
        const SECRET_24_56: [u8; 32] = [
            0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a,
            0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e,
        ];
        let w = |i: usize| u64::from_le_bytes(SECRET_24_56[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(FLIP1, w(0) ^ w(1));
        assert_eq!(FLIP2, w(2) ^ w(3));
    }

    #[test]
    fn a_rules_numbers_are_the_engines() {
        let p = |rate, burst, per| sluice_rules::Police { rate, burst, per };
        use sluice_rules::PoliceRate::{Bytes, Packets};
        let c = PoliceCode::new(&p(Packets(10), Some(5), None), 3);
        assert_eq!((c.base, c.per, c.buckets()), (3, None, 1));
        assert_eq!((c.cost, c.tolerance_ns), (Cost::Fixed(100_000_000), 500_000_000));
        let c = PoliceCode::new(&p(Bytes(1000), None, Some(sluice_rules::AddrField::Src)), 0);
        assert_eq!((c.per, c.buckets()), (Some(PoliceKey::Source), PER_ADDRESS_BUCKETS as u32));
        assert_eq!(c.cost, Cost::PerByte(1_000_000));
        assert_eq!(PoliceCode::new(&p(Bytes(3), None, None), 0).cost, Cost::Divided(3));
    }
}
