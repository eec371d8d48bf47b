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
use crate::filter::{block_index, Block, BlockFilter, SALT};

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

/// Indices of the `hashes` whose filter block has all 8 of their bits set
/// (possible members), written to the front of `maybe`; returns how many.
/// AVX2 when the CPU has it, else [`filter_select_scalar`]: same answers.
#[inline(always)]
pub(crate) fn filter_select(blocks: &[Block], hashes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, the one feature the function enables.
        return unsafe { filter_select_avx2(blocks, hashes, maybe) };
    }
    filter_select_scalar(blocks, hashes, maybe)
}

/// The portable [`filter_select`], on [`BlockFilter::masks`].
#[inline(always)]
pub(crate) fn filter_select_scalar(blocks: &[Block], hashes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    let mut n = 0;
    for (i, &h) in hashes[..hashes.len().min(PREPARED_MAX)].iter().enumerate() {
        let b = &blocks[block_index(h, blocks.len())];
        let hit = b.words.iter().zip(BlockFilter::masks(h as u32)).all(|(w, m)| w & m != 0);
        // Branch-free append: write always, advance on a possible member.
        maybe[n] = i as u8;
        n += usize::from(hit);
    }
    n
}

/// Per key: broadcast the low 32 hash bits, multiply by the 8 salts, keep
/// the top 5 bits as a shift count, `1 << count` per lane, and `vptest`
/// that every mask bit is set in the block (CF: `!block & mask == 0`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn filter_select_avx2(blocks: &[Block], hashes: &[u64], maybe: &mut [u8; PREPARED_MAX]) -> usize {
    use std::arch::x86_64::*;
    let salt = _mm256_loadu_si256(SALT.as_ptr().cast::<__m256i>());
    let one = _mm256_set1_epi32(1);
    let mut n = 0;
    for (i, &h) in hashes[..hashes.len().min(PREPARED_MAX)].iter().enumerate() {
        let b = &blocks[block_index(h, blocks.len())];
        let lanes = _mm256_mullo_epi32(_mm256_set1_epi32(h as i32), salt);
        let mask = _mm256_sllv_epi32(one, _mm256_srli_epi32::<27>(lanes));
        // SAFETY: `Block` is 32 bytes aligned to 32 (asserted in filter.rs).
        let words = _mm256_load_si256(b.words.as_ptr().cast::<__m256i>());
        maybe[n] = i as u8;
        n += _mm256_testc_si256(words, mask) as usize;
    }
    n
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
        fn tag_match_matches_scalar(tags in proptest::collection::vec(0u8..4, 16), tag in 0u8..4, len in prop_oneof![Just(4usize), Just(16)]) {
            prop_assert_eq!(match_tags(&tags[..len], tag), match_tags_scalar(&tags[..len], tag));
        }
    }
}
