//! A split-block Bloom filter in front of an exact table: one 32-byte block
//! (half a cache line) per query, small enough to stay in the last-level
//! cache, tested with a handful of AVX2 instructions.
//!
//! Most traffic is not on the list, yet every lookup of an absent key reads
//! a line of the table's tag array (16 MB for 6M hosts): a DRAM miss when
//! the table does not fit the cache. The filter answers "not listed" from a
//! block of an array about half that size (10 bits per key), which the
//! last-level cache holds, and sends only possible members on to the table.
//!
//! The layout is the split-block filter of Impala, Kudu and Parquet: a
//! block of 8 `u32` words, one bit set in each, the bit of word `i` the top
//! 5 bits of `low32 * SALT[i]`. The block comes from the key hash's high 32
//! bits (multiply-shift, so any block count works), the bits from its low
//! 32, both kept in one `u64` probe per key: the filter reuses the hash the
//! table computes and adds none. A query is a broadcast, a multiply, a
//! shift, a variable shift and a `vptest` with AVX2 (chosen at run time,
//! [`crate::simd::filter_select`]); the
//! scalar [`BlockFilter::may_contain`] is the reference it is tested
//! against. With 10 bits per key the false-positive rate is about 1.3%
//! (measured: `sluice-bench classify` reports it per table).
//!
//! An earlier version used 64-byte blocks of 8 `u64` words: about 1.0%
//! false positives, but without AVX-512 its test compiled to ~60 scalar
//! instructions per key (callgrind), the largest single cost of a lookup.

use crate::mem::{plain_data, Table};

plain_data! {
    #[repr(C, align(32))]
    pub(crate) struct Block {
        pub(crate) words: [u32; 8],
    }
}

const _: () = assert!(size_of::<Block>() == 32 && align_of::<Block>() == 32);

/// Filter bits per key: 6M keys take 7.5 MB (7.1 MiB), a quarter of a
/// 32 MB last-level cache.
pub const BITS_PER_KEY: usize = 10;

/// Odd multipliers, one per word (the split-block filter's salts).
pub(crate) const SALT: [u32; 8] =
    [0x47b6_137b, 0x4497_4d91, 0x8824_ad5b, 0xa2b7_289d, 0x7054_95c7, 0x2df1_424b, 0x9efc_4947, 0x5c6b_fb31];

pub(crate) struct BlockFilter {
    pub(crate) blocks: Table<Block>,
}

impl BlockFilter {
    /// An empty filter sized for `keys` keys.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let n = (keys * BITS_PER_KEY).div_ceil(256).max(1);
        assert!(n <= u32::MAX as usize, "filter of {n} blocks is too large");
        BlockFilter { blocks: Table::zeroed(n) }
    }

    /// A key's probe, from its table hash `h`: the block in the high 32
    /// bits (multiply-shift maps the hash's high 32 bits onto
    /// `0..blocks`), the bits that pick a bit per word (the hash's low 32)
    /// in the low. Computed once per key: the prefetch and the test share it.
    #[inline(always)]
    pub(crate) fn probe(&self, h: u64) -> u64 {
        let block = ((h >> 32) * self.blocks.len() as u64) >> 32;
        block << 32 | (h & 0xffff_ffff)
    }

    /// The bit of each word a key whose probe's low 32 bits are `bits` sets.
    #[inline(always)]
    pub(crate) fn masks(bits: u32) -> [u32; 8] {
        SALT.map(|s| 1u32 << (bits.wrapping_mul(s) >> 27))
    }

    pub(crate) fn insert(&mut self, probe: u64) {
        let b = block_of(probe);
        for (w, m) in self.blocks[b].words.iter_mut().zip(Self::masks(probe as u32)) {
            *w |= m;
        }
    }

    /// Whether the key may be in the set (`false`: certainly not): the
    /// scalar reference of [`crate::simd::filter_select`].
    #[inline(always)]
    pub(crate) fn may_contain(&self, probe: u64) -> bool {
        let b = &self.blocks[block_of(probe)];
        b.words.iter().zip(Self::masks(probe as u32)).all(|(w, m)| w & m != 0)
    }

    /// Indices (into `probes`) of the keys that may be in the set, written
    /// to the front of `maybe`; returns how many.
    #[inline(always)]
    pub(crate) fn select(&self, probes: &[u64], maybe: &mut [u8; crate::exact::PREPARED_MAX]) -> usize {
        crate::simd::filter_select(&self.blocks, probes, maybe)
    }

    #[inline(always)]
    pub(crate) fn line_addr(&self, probe: u64) -> *const Block {
        self.blocks.addr_of(block_of(probe))
    }

    pub(crate) fn bytes(&self) -> usize {
        self.blocks.bytes()
    }
}

/// The block a probe names.
#[inline(always)]
pub(crate) fn block_of(probe: u64) -> usize {
    (probe >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_false_negatives_and_a_low_false_positive_rate() {
        let h = crate::Hasher::with_seed(4);
        let n = 100_000u32;
        let mut f = BlockFilter::with_capacity(n as usize);
        for k in 0..n {
            f.insert(f.probe(h.hash32(k)));
        }
        assert!((0..n).all(|k| f.may_contain(f.probe(h.hash32(k)))));
        let fp = (n..n + 200_000).filter(|&k| f.may_contain(f.probe(h.hash32(k)))).count();
        // About 1.3% expected at 10 bits per key; allow room.
        assert!(fp < 200_000 / 40, "false positives {fp} of 200000");
    }

    proptest! {
        /// The batched test (AVX2 where the CPU has it) selects exactly the
        /// keys the scalar reference says may be members.
        #[test]
        fn select_agrees_with_may_contain(inserted in proptest::collection::vec(any::<u64>(), 0..400),
                                          queries in proptest::collection::vec(any::<u64>(), 0..=crate::exact::PREPARED_MAX),
                                          members in any::<u128>()) {
            let mut f = BlockFilter::with_capacity(inserted.len());
            let inserted: Vec<u64> = inserted.iter().map(|&h| f.probe(h)).collect();
            for &q in &inserted {
                f.insert(q);
            }
            // Some queries are inserted hashes, so both answers occur.
            let queries: Vec<u64> = queries.iter().enumerate()
                .map(|(i, &q)| if members >> (i % 128) & 1 == 1 && !inserted.is_empty() { inserted[i % inserted.len()] } else { f.probe(q) })
                .collect();
            let mut maybe = [0u8; crate::exact::PREPARED_MAX];
            let n = f.select(&queries, &mut maybe);
            let want: Vec<u8> = (0..queries.len()).filter(|&i| f.may_contain(queries[i])).map(|i| i as u8).collect();
            prop_assert_eq!(&maybe[..n], &want[..]);
            let mut scalar = [0u8; crate::exact::PREPARED_MAX];
            let m = crate::simd::filter_select_scalar(&f.blocks, &queries, &mut scalar);
            prop_assert_eq!(&scalar[..m], &want[..]);
        }
    }
}
