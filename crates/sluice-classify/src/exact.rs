//! Exact-match sets of IPv4 and IPv6 addresses: open addressing over 64-byte
//! buckets, one cache line per probe.
//!
//! An IPv4 bucket holds 16 keys compared at once with SSE2; an IPv6 bucket
//! holds 4. Slots fill from the front and a bucket that overflows spills into
//! the next one (linear probing over buckets), so a lookup stops at the first
//! bucket whose last slot is empty. Zero marks an empty slot; the address 0
//! itself is kept in a flag. Tables are never modified after building, so
//! there are no tombstones.
//!
//! Building sorts keys by home bucket and fills the table front to back, so
//! it streams through memory instead of taking a cache miss per key.

use crate::hash::Hasher;
use crate::mem::{plain_data, Table, Zeroable};
use crate::simd::{any_eq_u32x16, prefetch};

/// Most keys per lookup batch (stack arrays of this size hold the phases).
pub const MAX_BATCH: usize = 64;

plain_data! {
    #[repr(C, align(64))]
    struct Bucket4 {
        keys: [u32; 16],
    }
}

plain_data! {
    #[repr(C, align(64))]
    struct Bucket6 {
        keys: [u128; 4],
    }
}

const _: () = assert!(size_of::<Bucket4>() == 64 && align_of::<Bucket4>() == 64);
const _: () = assert!(size_of::<Bucket6>() == 64 && align_of::<Bucket6>() == 64);

/// The part shared by both families: which key type, how it hashes, and how
/// a bucket holds it.
trait Slots: Zeroable {
    type Key: Copy + Eq + Ord + Default;
    const SLOTS: usize;
    fn hash(h: &Hasher, k: Self::Key) -> u64;
    fn holds(&self, k: Self::Key) -> bool;
    fn is_full(&self) -> bool;
    fn slot_mut(&mut self, i: usize) -> &mut Self::Key;
}

impl Slots for Bucket4 {
    type Key = u32;
    const SLOTS: usize = 16;
    #[inline(always)]
    fn hash(h: &Hasher, k: u32) -> u64 {
        h.hash32(k)
    }
    #[inline(always)]
    fn holds(&self, k: u32) -> bool {
        any_eq_u32x16(&self.keys, k)
    }
    #[inline(always)]
    fn is_full(&self) -> bool {
        self.keys[15] != 0
    }
    fn slot_mut(&mut self, i: usize) -> &mut u32 {
        &mut self.keys[i]
    }
}

impl Slots for Bucket6 {
    type Key = u128;
    const SLOTS: usize = 4;
    #[inline(always)]
    fn hash(h: &Hasher, k: u128) -> u64 {
        h.hash128(k)
    }
    #[inline(always)]
    fn holds(&self, k: u128) -> bool {
        let b = &self.keys;
        (b[0] == k) | (b[1] == k) | (b[2] == k) | (b[3] == k)
    }
    #[inline(always)]
    fn is_full(&self) -> bool {
        self.keys[3] != 0
    }
    fn slot_mut(&mut self, i: usize) -> &mut u128 {
        &mut self.keys[i]
    }
}

/// The table itself, generic over the bucket kind.
struct OpenTable<B: Slots> {
    buckets: Table<B>,
    shift: u32,
    mask: usize,
    hasher: Hasher,
    has_zero: bool,
    len: usize,
}

impl<B: Slots> OpenTable<B> {
    /// Build from keys (duplicates allowed) at most `max_load` full.
    fn build(keys: &[B::Key], max_load: f64, hasher: Hasher) -> Self {
        let max_load = max_load.clamp(0.05, 0.9);
        let want = ((keys.len() as f64 / (B::SLOTS as f64 * max_load)).ceil() as usize).max(1);
        let n = want.next_power_of_two();
        let bits = n.trailing_zeros();
        let mut t: OpenTable<B> = OpenTable {
            buckets: Table::zeroed(n),
            // A shift of 64 would overflow; a 1-bucket table uses shift 63 and mask 0.
            shift: 64 - bits.max(1),
            mask: n - 1,
            hasher,
            has_zero: false,
            len: 0,
        };
        let zero = B::Key::default();
        // Counting sort by home bucket: O(n) and cache-friendly, where a
        // comparison sort of 6M (bucket, key) pairs costs most of a second.
        let mut homes: Vec<u32> = Vec::with_capacity(keys.len());
        let mut starts = vec![0u32; n + 1];
        for &k in keys {
            if k == zero {
                t.has_zero = true;
                homes.push(u32::MAX);
                continue;
            }
            let h = t.home(k) as u32;
            homes.push(h);
            starts[h as usize + 1] += 1;
        }
        for b in 0..n {
            starts[b + 1] += starts[b];
        }
        let mut grouped = vec![zero; starts[n] as usize];
        let mut next = starts.clone();
        for (&k, &h) in keys.iter().zip(&homes) {
            if h != u32::MAX {
                grouped[next[h as usize] as usize] = k;
                next[h as usize] += 1;
            }
        }
        drop(homes);
        // Fill front to back; `cur`/`used` is the bucket being filled.
        let (mut cur, mut used) = (0usize, 0usize);
        let mut wrapped = Vec::new();
        let mut distinct = 0usize;
        for home in 0..n {
            let group = &mut grouped[starts[home] as usize..starts[home + 1] as usize];
            // Duplicates share a home bucket: drop them within the group.
            group.sort_unstable();
            let mut prev = None;
            for &k in group.iter() {
                if prev == Some(k) {
                    continue;
                }
                prev = Some(k);
                distinct += 1;
                if home > cur {
                    (cur, used) = (home, 0);
                }
                if used == B::SLOTS {
                    (cur, used) = (cur + 1, 0);
                }
                if cur > t.mask {
                    wrapped.push(k);
                    continue;
                }
                *t.buckets[cur].slot_mut(used) = k;
                used += 1;
            }
        }
        t.len = distinct + usize::from(t.has_zero);
        // Keys that spilled past the last bucket wrap to the front.
        for k in wrapped {
            let mut b = 0;
            loop {
                let bucket = &mut t.buckets[b];
                if let Some(i) = (0..B::SLOTS).find(|&i| *bucket.slot_mut(i) == zero) {
                    *bucket.slot_mut(i) = k;
                    break;
                }
                b = (b + 1) & t.mask;
            }
        }
        t
    }

    #[inline(always)]
    fn home(&self, k: B::Key) -> usize {
        (B::hash(&self.hasher, k) >> self.shift) as usize & self.mask
    }

    #[inline(always)]
    fn probe(&self, mut b: usize, k: B::Key) -> bool {
        if k == B::Key::default() {
            return self.has_zero;
        }
        loop {
            let bucket = &self.buckets[b];
            if bucket.holds(k) {
                return true;
            }
            if !bucket.is_full() {
                return false;
            }
            b = (b + 1) & self.mask;
        }
    }

    #[inline(always)]
    fn contains(&self, k: B::Key) -> bool {
        self.probe(self.home(k), k)
    }

    /// Phase 1 hashes the whole chunk and prefetches every home bucket;
    /// phase 2 compares, by which time the lines are (mostly) in cache.
    #[inline(always)]
    fn contains_batch(&self, keys: &[B::Key], out: &mut [bool], batch: usize, prefetch_buckets: bool) {
        let batch = batch.clamp(1, MAX_BATCH);
        let mut homes = [0usize; MAX_BATCH];
        for (kc, oc) in keys.chunks(batch).zip(out.chunks_mut(batch)) {
            for (h, &k) in homes.iter_mut().zip(kc) {
                *h = self.home(k);
                if prefetch_buckets {
                    prefetch(self.buckets.addr_of(*h));
                }
            }
            for ((o, &k), &h) in oc.iter_mut().zip(kc).zip(&homes) {
                *o = self.probe(h, k);
            }
        }
    }

    #[inline(always)]
    fn prefetch(&self, keys: &[B::Key]) {
        for &k in keys {
            prefetch(self.buckets.addr_of(self.home(k)));
        }
    }

    /// Buckets that spilled into their neighbour, and the longest probe.
    fn probe_stats(&self) -> (usize, usize) {
        let full = self.buckets.iter().filter(|b| b.is_full()).count();
        let mut longest = 0;
        let mut run = 0;
        for b in self.buckets.iter().chain(self.buckets.iter()).take(self.buckets.len() * 2) {
            run = if b.is_full() { run + 1 } else { 0 };
            longest = longest.max(run + 1);
        }
        (full, longest.min(self.buckets.len()))
    }
}

/// Layout facts about a built table, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub entries: usize,
    pub buckets: usize,
    pub bytes: usize,
    pub huge_pages: bool,
    /// Buckets that are full (their keys may spill into the next bucket).
    pub full_buckets: usize,
    /// Most buckets any lookup can read.
    pub longest_probe: usize,
}

fn info<B: Slots>(t: &OpenTable<B>) -> TableInfo {
    let (full_buckets, longest_probe) = t.probe_stats();
    TableInfo {
        entries: t.len,
        buckets: t.buckets.len(),
        bytes: t.buckets.bytes(),
        huge_pages: t.buckets.huge_pages(),
        full_buckets,
        longest_probe,
    }
}

/// Default fill: at most half the slots. At 16 keys per bucket that leaves
/// almost no bucket full, so a lookup almost never reads a second line; at
/// 3/4 about one bucket in ten spills, and back-to-back quick benchmarks did
/// 19.5 Mpps at 3/4 against 25.8 at 1/2 (see BENCHMARKS.md).
pub const DEFAULT_MAX_LOAD: f64 = 0.5;

macro_rules! exact_set {
    ($(#[$doc:meta])* $name:ident, $bucket:ty, $key:ty) => {
        $(#[$doc])*
        pub struct $name(OpenTable<$bucket>);

        impl $name {
            /// Build with the default load and random hash keys.
            pub fn new(keys: &[$key]) -> Self {
                Self::with_options(keys, DEFAULT_MAX_LOAD, Hasher::random())
            }
            pub fn with_options(keys: &[$key], max_load: f64, hasher: Hasher) -> Self {
                $name(OpenTable::build(keys, max_load, hasher))
            }
            pub fn len(&self) -> usize {
                self.0.len
            }
            pub fn is_empty(&self) -> bool {
                self.0.len == 0
            }
            #[inline]
            pub fn contains(&self, key: $key) -> bool {
                self.0.contains(key)
            }
            /// `out[i] = contains(keys[i])`, in batches of `batch` with the
            /// home buckets prefetched first when `prefetch` is set.
            #[inline]
            pub fn contains_batch(&self, keys: &[$key], out: &mut [bool], batch: usize, prefetch: bool) {
                assert_eq!(keys.len(), out.len(), "one output per key");
                self.0.contains_batch(keys, out, batch, prefetch)
            }
            /// Prefetch the home buckets of `keys` (see `AddressSet::prefetch_v4`).
            #[inline]
            pub fn prefetch(&self, keys: &[$key]) {
                self.0.prefetch(keys)
            }
            pub fn info(&self) -> TableInfo {
                info(&self.0)
            }
        }
    };
}

exact_set!(
    /// IPv4 addresses, 16 per 64-byte bucket.
    V4ExactSet,
    Bucket4,
    u32
);
exact_set!(
    /// IPv6 addresses, 4 per 64-byte bucket.
    V6ExactSet,
    Bucket6,
    u128
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        #[test]
        fn v4_agrees_with_std(keys in proptest::collection::vec(0u32..5000, 0..3000),
                              probes in proptest::collection::vec(0u32..6000, 1..500),
                              load in 0.3f64..0.9, seed in any::<u64>(), batch in 1usize..70) {
            let reference: HashSet<u32> = keys.iter().copied().collect();
            let set = V4ExactSet::with_options(&keys, load, Hasher::with_seed(seed));
            prop_assert_eq!(set.len(), reference.len());
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, batch, seed % 2 == 0);
            for (k, o) in probes.iter().zip(&out) {
                prop_assert_eq!(set.contains(*k), reference.contains(k));
                prop_assert_eq!(*o, reference.contains(k));
            }
        }

        #[test]
        fn v6_agrees_with_std(keys in proptest::collection::vec(0u128..3000, 0..2000),
                              probes in proptest::collection::vec(0u128..4000, 1..500),
                              load in 0.3f64..0.9, seed in any::<u64>()) {
            let keys: Vec<u128> = keys.iter().map(|k| k.rotate_left(100)).collect();
            let probes: Vec<u128> = probes.iter().map(|k| k.rotate_left(100)).collect();
            let reference: HashSet<u128> = keys.iter().copied().collect();
            let set = V6ExactSet::with_options(&keys, load, Hasher::with_seed(seed));
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, 8, true);
            for (k, o) in probes.iter().zip(&out) {
                prop_assert_eq!(*o, reference.contains(k));
            }
        }
    }

    #[test]
    fn tiny_and_wrapping_tables() {
        // Keys all hashing near the end must wrap to the front and still be found.
        for n in [0usize, 1, 15, 16, 17, 100] {
            let keys: Vec<u32> = (0..n as u32).collect();
            let set = V4ExactSet::with_options(&keys, 0.9, Hasher::with_seed(n as u64));
            for k in 0..(n as u32 + 50) {
                assert_eq!(set.contains(k), k < n as u32, "n={n} k={k}");
            }
        }
    }

    #[test]
    fn six_million_keys_build_and_report() {
        let keys: Vec<u32> = (0..6_000_000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let set = V4ExactSet::with_options(&keys, DEFAULT_MAX_LOAD, Hasher::with_seed(9));
        let info = set.info();
        assert_eq!(info.entries, 6_000_000);
        assert_eq!(info.buckets, 1 << 20);
        assert!(info.full_buckets < info.buckets / 1000, "{info:?}");
        assert!(info.longest_probe < 64, "{info:?}");
        assert!(keys.iter().step_by(997).all(|&k| set.contains(k)));
    }
}
