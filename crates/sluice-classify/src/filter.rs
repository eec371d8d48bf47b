//! A blocked Bloom filter in front of an exact table: one 64-byte line per
//! query, small enough to stay in the last-level cache.
//!
//! Most traffic is not on the list, yet every lookup of an absent key reads
//! a line of the table's tag array (16 MB for 6M hosts): a DRAM miss. The
//! filter answers "not listed" from a line of an array about half that size
//! (10 bits per key), which the last-level cache holds, and sends only
//! possible members on to the table.
//!
//! The layout is the "split block" filter of Impala and Parquet, widened to
//! a whole line: a block of 8 `u64` words, one bit set in each, the bit of
//! word `i` the top 6 bits of `low32 * SALT[i]`. The block comes from the
//! key hash's high 32 bits (multiply-shift, so any block count works), the
//! bits from its low 32: the filter reuses the hash the table computes and
//! adds none. With 10 bits per key the false-positive rate is about 1%
//! (measured: `sluice bench classify` reports it per table).

use crate::mem::{plain_data, Table};

plain_data! {
    #[repr(C, align(64))]
    pub(crate) struct Block {
        pub(crate) words: [u64; 8],
    }
}

const _: () = assert!(size_of::<Block>() == 64 && align_of::<Block>() == 64);

/// Filter bits per key: 6M keys take 7.5 MB, a quarter of this machine's
/// 32 MB last-level cache.
pub const BITS_PER_KEY: usize = 10;

/// Odd multipliers, one per word (Parquet's split-block salts).
const SALT: [u32; 8] =
    [0x47b6_137b, 0x4497_4d91, 0x8824_ad5b, 0xa2b7_289d, 0x7054_95c7, 0x2df1_424b, 0x9efc_4947, 0x5c6b_fb31];

/// Where a key's bits are: its block and the hash bits that pick a bit per word.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Probe {
    pub(crate) block: u32,
    pub(crate) bits: u32,
}

pub(crate) struct BlockFilter {
    pub(crate) blocks: Table<Block>,
}

impl BlockFilter {
    /// An empty filter sized for `keys` keys.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let n = (keys * BITS_PER_KEY).div_ceil(512).max(1);
        assert!(n <= u32::MAX as usize, "filter of {n} blocks is too large");
        BlockFilter { blocks: Table::zeroed(n) }
    }

    /// The probe for a key whose table hash is `h`.
    #[inline(always)]
    pub(crate) fn probe(&self, h: u64) -> Probe {
        // Multiply-shift maps the high 32 bits onto 0..blocks.
        let block = ((h >> 32) * self.blocks.len() as u64) >> 32;
        Probe { block: block as u32, bits: h as u32 }
    }

    #[inline(always)]
    fn masks(bits: u32) -> [u64; 8] {
        let mut m = [0u64; 8];
        for (w, s) in m.iter_mut().zip(SALT) {
            *w = 1u64 << (bits.wrapping_mul(s) >> 26);
        }
        m
    }

    pub(crate) fn insert(&mut self, p: Probe) {
        let b = &mut self.blocks[p.block as usize];
        for (w, m) in b.words.iter_mut().zip(Self::masks(p.bits)) {
            *w |= m;
        }
    }

    /// Whether the key may be in the set (`false`: certainly not).
    /// Branch-free over the 8 words so it compiles to vector ANDs/compares.
    #[inline(always)]
    pub(crate) fn may_contain(&self, p: Probe) -> bool {
        let b = &self.blocks[p.block as usize];
        let m = Self::masks(p.bits);
        let mut missing = 0u64;
        for (w, m) in b.words.iter().zip(m) {
            missing |= u64::from(w & m == 0);
        }
        missing == 0
    }

    #[inline(always)]
    pub(crate) fn line_addr(&self, p: Probe) -> *const Block {
        self.blocks.addr_of(p.block as usize)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.blocks.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // About 1% expected at 10 bits per key; allow room.
        assert!(fp < 200_000 / 40, "false positives {fp} of 200000");
    }
}
