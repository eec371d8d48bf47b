//! The machine-level operations of the fast path: compare a key against a
//! whole 64-byte bucket at once, test a batch of keys against the front
//! filter, and prefetch a cache line.
//!
//! x86_64 uses SSE2 (part of the x86_64 baseline, so always present) and,
//! for the filter, AVX2 when the CPU has it (detected at run time); other
//! targets use the scalar references, which the property tests compare
//! against.
#![allow(unsafe_code)]

use crate::exact::PREPARED_MAX;
use crate::filter::{block_of, Block, BlockFilter, SALT};
use crate::hash::{Hasher, C0};
use crate::prefix6::{Row, Walks, BLOCK, HIGH_SHIFT_AT, LOW_SHIFT_AT, NODE};

/// Whether any of the 16 lanes equals `key`.
#[inline(always)]
pub fn any_eq_u32x16(lanes: &[u32; 16], key: u32) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is in the x86_64 baseline; `lanes` is 64 readable bytes,
        // and the unaligned loads have no alignment requirement.
        unsafe {
            let k = _mm_set1_epi32(key as i32);
            let p = lanes.as_ptr().cast::<__m128i>();
            let a = _mm_cmpeq_epi32(_mm_loadu_si128(p), k);
            let b = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(1)), k);
            let c = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(2)), k);
            let d = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(3)), k);
            _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d))) != 0
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        any_eq_u32x16_scalar(lanes, key)
    }
}

/// The plain reference for [`any_eq_u32x16`].
#[inline(always)]
pub fn any_eq_u32x16_scalar(lanes: &[u32; 16], key: u32) -> bool {
    lanes.iter().fold(false, |acc, &l| acc | (l == key))
}

/// A bit per byte of `tags` (16 or fewer) that equals `tag`.
#[inline(always)]
pub fn match_tags(tags: &[u8], tag: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if let Ok(t16) = <&[u8; 16]>::try_from(tags) {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is in the x86_64 baseline; `t16` is 16 readable bytes
        // and the unaligned load has no alignment requirement.
        return unsafe {
            let v = _mm_loadu_si128(t16.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(tag as i8))) as u32
        };
    }
    match_tags_scalar(tags, tag)
}

/// The plain reference for [`match_tags`].
#[inline(always)]
pub fn match_tags_scalar(tags: &[u8], tag: u8) -> u32 {
    tags.iter().enumerate().fold(0, |m, (i, &t)| m | (u32::from(t == tag) << i))
}

/// Indices of the `probes` whose filter block has all 8 of their bits set
/// (possible members), written to the front of `maybe`; returns how many.
/// AVX2 when the CPU has it, else [`filter_select_scalar`]: same answers.
#[inline(always)]
pub(crate) fn filter_select(blocks: &[Block], probes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, the one feature the function enables.
        return unsafe { filter_select_avx2(blocks, probes, maybe) };
    }
    filter_select_scalar(blocks, probes, maybe)
}

/// The portable [`filter_select`], on [`BlockFilter::masks`].
#[inline(always)]
pub(crate) fn filter_select_scalar(blocks: &[Block], probes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    let mut n = 0;
    for (i, &q) in probes[..probes.len().min(PREPARED_MAX)].iter().enumerate() {
        let b = &blocks[block_of(q)];
        let hit = b.words.iter().zip(BlockFilter::masks(q as u32)).all(|(w, m)| w & m != 0);
        // Branch-free append: write always, advance on a possible member.
        maybe[n & (PREPARED_MAX - 1)] = i as u8;
        n += usize::from(hit);
    }
    n
}

/// Per key: broadcast the probe's low 32 bits, multiply by the 8 salts, keep
/// the top 5 bits as a shift count, `1 << count` per lane, and `vptest`
/// that every mask bit is set in the block (CF: `!block & mask == 0`).
///
/// # Safety
///
/// The CPU must support AVX2 (the caller checks with
/// `is_x86_feature_detected!`). Every memory access is through safe slice
/// indexing except the aligned block load, which `Block`'s 32-byte
/// alignment makes sound.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn filter_select_avx2(blocks: &[Block], probes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    use std::arch::x86_64::*;
    let salt = _mm256_loadu_si256(SALT.as_ptr().cast::<__m256i>());
    let one = _mm256_set1_epi32(1);
    let mut n = 0;
    for (i, &q) in probes[..probes.len().min(PREPARED_MAX)].iter().enumerate() {
        let b = &blocks[block_of(q)];
        let lanes = _mm256_mullo_epi32(_mm256_set1_epi32(q as i32), salt);
        let mask = _mm256_sllv_epi32(one, _mm256_srli_epi32::<27>(lanes));
        // SAFETY: `Block` is 32 bytes aligned to 32 (asserted in filter.rs).
        let words = _mm256_load_si256(b.words.as_ptr().cast::<__m256i>());
        maybe[n & (PREPARED_MAX - 1)] = i as u8;
        n += _mm256_testc_si256(words, mask) as usize;
    }
    n
}

/// `walks`' kept keys against their rows of four direct entries, with
/// AVX2 when the CPU has it: `out[i] |= inside`, and the keys whose row is
/// a node noted in `walks.on`. Returns how many keys it did and how many
/// it noted: all or none; without AVX2 the caller does them one entry at a
/// time, with the same test (`Direct::holds`).
#[inline(always)]
pub(crate) fn rows(direct: &[Row], walks: &Walks, out: &mut [bool]) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, the one feature the function enables.
        return unsafe { rows_avx2(direct, walks, out) };
    }
    let _ = (direct, walks, out);
    (0, 0)
}

/// Per key: its row as two vectors of two entries, unpacked into the four
/// words and the four low halves (the lanes' order is the same in both,
/// which is all the test needs), the key broadcast, both tests' shifts per
/// lane with `vpsrlvq` (a count of 64 or more gives 0), the kind folded
/// into the same compare, and "any lane" by one test of the compare's bits.
///
/// # Safety
///
/// The CPU must support AVX2 (the caller checks with
/// `is_x86_feature_detected!`). Every memory access is through safe slice
/// indexing except the row's two aligned loads, which `Row`'s 64-byte
/// alignment makes sound.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2(direct: &[Row], walks: &Walks, out: &mut [bool]) -> (usize, usize) {
    use std::arch::x86_64::*;
    let kept = walks.kept.min(PREPARED_MAX);
    let zero = _mm256_setzero_si256();
    let (kind_bits, block) = (_mm256_set1_epi64x(3), _mm256_set1_epi64x(BLOCK as i64));
    let seven_bits = _mm256_set1_epi64x(127);
    let mut n = 0;
    for j in 0..kept {
        let row = &direct[walks.row[j] as usize].entries;
        // SAFETY: `Row` is 64 bytes aligned to 64 (asserted in prefix6.rs).
        let (a, b) = (_mm256_load_si256(row.as_ptr().cast()), _mm256_load_si256(row[2..].as_ptr().cast()));
        let (word, low) = (_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
        let rest = _mm256_set1_epi64x(walks.rest[j] as i64);
        let key_low = _mm256_set1_epi64x(walks.low[j] as i64);
        let high_shift = _mm256_and_si256(_mm256_srli_epi64::<{ HIGH_SHIFT_AT as i32 }>(word), seven_bits);
        let low_shift = _mm256_and_si256(_mm256_srli_epi64::<{ LOW_SHIFT_AT as i32 }>(word), seven_bits);
        let high = _mm256_srlv_epi64(_mm256_xor_si256(rest, word), high_shift);
        let low = _mm256_srlv_epi64(_mm256_xor_si256(key_low, low), low_shift);
        // Zero where the lane is a block and the key's bits match it.
        let not_block = _mm256_xor_si256(_mm256_and_si256(word, kind_bits), block);
        let miss = _mm256_or_si256(_mm256_or_si256(high, low), not_block);
        let inside = _mm256_testz_si256(_mm256_cmpeq_epi64(miss, zero), _mm256_cmpeq_epi64(miss, zero)) == 0;
        out[usize::from(walks.keys[j])] |= inside;
        // Without a branch: a node row (its first entry) is rare, but a
        // branch per key would still cost its slot in the predictor.
        walks.on[n & (PREPARED_MAX - 1)].set(j as u8);
        n += usize::from(row[0].word & 3 == NODE);
    }
    (kept, n)
}

/// `out[i] = f.probe(h.hash32(keys[i]))`: eight keys per step with AVX-512
/// (F and DQ, for the 64-bit multiplies) when the CPU has it, else one at
/// a time. The hash and the probe are a dozen scalar instructions per key;
/// eight lanes do them in about as many for all eight.
#[inline(always)]
pub(crate) fn probes_v4(h: &Hasher, f: &BlockFilter, keys: &[u32], out: &mut [u64]) {
    let n = keys.len().min(out.len());
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
        let (k0, k1) = h.keys();
        // SAFETY: the CPU has both features the function enables.
        done = unsafe { probes_v4_avx512(k0, k1, f.blocks.len() as u64, &keys[..n], &mut out[..n]) };
    }
    for (q, &k) in out[done..n].iter_mut().zip(&keys[done..n]) {
        *q = f.probe(h.hash32(k));
    }
}

/// [`probes_v4`]'s vector part: whole groups of eight; returns how many
/// keys it did. Lane for lane the same arithmetic as `Hasher::hash32` and
/// `BlockFilter::probe` (`blocks` is below 2^32, asserted when built).
///
/// # Safety
///
/// The CPU must support AVX-512 F and DQ (the caller checks with
/// `is_x86_feature_detected!`). Loads and stores stay within `keys` and
/// `out`: only whole groups of eight below the shorter length are done.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn probes_v4_avx512(k0: u64, k1: u64, blocks: u64, keys: &[u32], out: &mut [u64]) -> usize {
    use std::arch::x86_64::*;
    let (vk0, vc0, vk1) = (_mm512_set1_epi64(k0 as i64), _mm512_set1_epi64(C0 as i64), _mm512_set1_epi64(k1 as i64));
    let vblocks = _mm512_set1_epi64(blocks as i64);
    let mut i = 0;
    while i + 8 <= keys.len().min(out.len()) {
        // SAFETY: lanes i..i+8 are within both slices (loop condition);
        // the loads and stores are unaligned.
        unsafe {
            let k = _mm512_cvtepu32_epi64(_mm256_loadu_si256(keys.as_ptr().add(i).cast::<__m256i>()));
            let x = _mm512_mullo_epi64(_mm512_xor_si512(k, vk0), vc0);
            let h = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64::<32>(x)), vk1);
            // (h >> 32) * blocks: the block sits in the product's high dword.
            let b = _mm512_mul_epu32(_mm512_srli_epi64::<32>(h), vblocks);
            // Probe: the block's dword high, the hash's low dword low.
            let q = _mm512_mask_blend_epi32(0x5555, b, h);
            _mm512_storeu_si512(out.as_mut_ptr().add(i).cast::<__m512i>(), q);
        }
        i += 8;
    }
    i
}

/// Ask for the cache line holding `p` to be brought into all cache levels.
/// A hint only: it never faults, whatever the address.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that does not access memory architecturally
    // and cannot fault, even for invalid addresses.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn simd_matches_scalar(lanes in proptest::array::uniform16(0u32..8), key in 0u32..8) {
            prop_assert_eq!(any_eq_u32x16(&lanes, key), any_eq_u32x16_scalar(&lanes, key));
        }

        #[test]
        fn vector_probes_match_scalar(keys in proptest::collection::vec(any::<u32>(), 0..=PREPARED_MAX),
                                      seed in any::<u64>(), n_keys in 1usize..5_000_000) {
            let h = Hasher::with_seed(seed);
            let f = BlockFilter::with_capacity(n_keys);
            let mut out = vec![0u64; keys.len()];
            probes_v4(&h, &f, &keys, &mut out);
            for (q, &k) in out.iter().zip(&keys) {
                prop_assert_eq!(*q, f.probe(h.hash32(k)));
            }
        }

        #[test]
        fn tag_match_matches_scalar(tags in proptest::collection::vec(0u8..4, 16), tag in 0u8..4, len in prop_oneof![Just(4usize), Just(16)]) {
            prop_assert_eq!(match_tags(&tags[..len], tag), match_tags_scalar(&tags[..len], tag));
        }
    }
}
