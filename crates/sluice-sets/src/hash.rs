//! A keyed hash for table indexing.
//!
//! Two multiplies per key. The keys are drawn at random per table (or given,
//! for reproducible tests and benchmarks), so a sender who does not know
//! them cannot aim traffic at one bucket chain.

use std::hash::{BuildHasher, RandomState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hasher {
    k0: u64,
    k1: u64,
}

pub(crate) const C0: u64 = 0x9e37_79b9_7f4a_7c15;
pub(crate) const C1: u64 = 0xbf58_476d_1ce4_e5b9;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(C0);
    x = (x ^ (x >> 30)).wrapping_mul(C1);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Hasher {
    /// Keys from the OS's randomness (via std's `RandomState`).
    pub fn random() -> Self {
        let s = RandomState::new();
        Self::with_seed(s.hash_one(0x5eed_u64) ^ s.hash_one(0x51_u64).rotate_left(17))
    }

    /// Keys derived from `seed`: the same seed gives the same table layout.
    pub fn with_seed(seed: u64) -> Self {
        Hasher { k0: splitmix(seed), k1: splitmix(seed ^ C1) | 1 }
    }

    /// The two keys, for `persist` to save a table as built (and for readers
    /// of an exported table, [`crate::ExactLayout`]).
    pub fn keys(&self) -> (u64, u64) {
        (self.k0, self.k1)
    }

    /// A hasher with these keys (`k1` must be odd, as `with_seed` makes it:
    /// the final multiply then loses no bits).
    pub(crate) fn from_keys(k0: u64, k1: u64) -> Self {
        Hasher { k0, k1 }
    }

    /// 64 well-mixed bits; take the high ones for a power-of-two table.
    #[inline(always)]
    pub fn hash32(&self, key: u32) -> u64 {
        let h = (u64::from(key) ^ self.k0).wrapping_mul(C0);
        (h ^ (h >> 32)).wrapping_mul(self.k1)
    }

    #[inline(always)]
    pub fn hash128(&self, key: u128) -> u64 {
        let lo = (key as u64 ^ self.k0).wrapping_mul(C0);
        let hi = ((key >> 64) as u64 ^ self.k1).wrapping_mul(C1);
        let h = lo ^ hi.rotate_left(32);
        (h ^ (h >> 29)).wrapping_mul(self.k1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_sequential_keys_over_buckets() {
        let h = Hasher::with_seed(1);
        let bits = 10;
        let mut counts = vec![0u32; 1 << bits];
        for k in 0..(1u32 << 16) {
            counts[(h.hash32(k) >> (64 - bits)) as usize] += 1;
        }
        // 64 per bucket on average; a good hash stays well inside 2x.
        assert!(counts.iter().all(|&c| (20..=120).contains(&c)), "{:?}", counts.iter().max());
        let mut counts = vec![0u32; 1 << bits];
        for k in 0..(1u128 << 16) {
            counts[(h.hash128(k << 64) >> (64 - bits)) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (20..=120).contains(&c)));
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(Hasher::with_seed(1).hash32(5), Hasher::with_seed(2).hash32(5));
        assert_ne!(Hasher::random(), Hasher::random());
    }
}
