//! Prefix membership.
//!
//! IPv4: a two-level bitmap in the spirit of DIR-24-8. Level 1 has two bits
//! per /24 — "wholly covered" and "partly covered" — grouped 64 /24s to a
//! 32-byte record with a running count of partly covered /24s before it.
//! Level 2 holds a 256-bit host bitmap for each partly covered /24, found by
//! that count plus a popcount. A lookup reads one level-1 line and, only for
//! partly covered /24s, one level-2 line. Level 1 is 8 MiB for the whole
//! address space; level 2 is 32 bytes per partly covered /24.
//!
//! IPv6 has its own module, `prefix6` (a compressed multibit trie).

use crate::exact::MAX_BATCH;
use crate::mem::{plain_data, Table};
use crate::simd::prefetch;
use std::collections::BTreeMap;

plain_data! {
    /// 64 /24s: which are wholly and which partly covered, and the number of
    /// partly covered /24s in all groups before this one.
    #[repr(C, align(32))]
    pub(crate) struct Group {
        pub(crate) full: u64,
        pub(crate) partial: u64,
        pub(crate) rank: u32,
        pub(crate) pad: [u32; 3],
    }
}

plain_data! {
    /// One bit per host of a partly covered /24.
    #[repr(C, align(32))]
    pub(crate) struct Hosts {
        pub(crate) bits: [u64; 4],
    }
}

const _: () = assert!(size_of::<Group>() == 32 && size_of::<Hosts>() == 32);

pub(crate) const GROUPS: usize = 1 << 18; // 2^24 /24s, 64 per group

/// Membership of IPv4 addresses in a set of prefixes of any length.
///
/// Invariants (checked by `persist` when loading): `groups` covers all
/// `GROUPS` (2^18); no /24 is both full and partial; each group's `rank` counts
/// the partial /24s before it and the total equals `hosts.len()`.
pub struct V4PrefixSet {
    pub(crate) groups: Table<Group>,
    pub(crate) hosts: Table<Hosts>,
    pub(crate) prefixes: usize,
}

impl V4PrefixSet {
    /// Build from (address, length) pairs; host bits must be clear.
    pub fn new(prefixes: &[(u32, u8)]) -> Self {
        let mut groups: Table<Group> = Table::zeroed(GROUPS);
        let mut partial: BTreeMap<u32, [u64; 4]> = BTreeMap::new();
        for &(addr, len) in prefixes {
            if len <= 24 {
                let first = addr >> 8;
                let count = 1u32 << (24 - u32::from(len));
                set_full_range(&mut groups, first, count);
            } else {
                let hosts = partial.entry(addr >> 8).or_insert([0; 4]);
                let first = addr & 0xff;
                let count = 1u32 << (32 - u32::from(len));
                for h in first..first + count {
                    hosts[(h >> 6) as usize] |= 1 << (h & 63);
                }
            }
        }
        // A /24 that is wholly covered needs no host bitmap.
        partial.retain(|&slash24, _| groups[(slash24 >> 6) as usize].full & (1 << (slash24 & 63)) == 0);
        let mut hosts: Table<Hosts> = Table::zeroed(partial.len());
        for (i, (&slash24, bits)) in partial.iter().enumerate() {
            groups[(slash24 >> 6) as usize].partial |= 1 << (slash24 & 63);
            hosts[i] = Hosts { bits: *bits };
        }
        let mut rank = 0u32;
        for g in groups.iter_mut() {
            g.rank = rank;
            rank += g.partial.count_ones();
        }
        V4PrefixSet { groups, hosts, prefixes: prefixes.len() }
    }

    pub fn prefixes(&self) -> usize {
        self.prefixes
    }

    /// Bytes of both levels.
    pub fn bytes(&self) -> usize {
        self.groups.bytes() + self.hosts.bytes()
    }

    pub fn huge_pages(&self) -> bool {
        self.groups.huge_pages()
    }

    #[inline(always)]
    fn level2(&self, g: &Group, bit: u32) -> Option<usize> {
        (g.partial >> bit & 1 != 0).then(|| g.rank as usize + (g.partial & ((1u64 << bit) - 1)).count_ones() as usize)
    }

    #[inline(always)]
    fn host_bit(&self, idx: usize, addr: u32) -> bool {
        let h = addr & 0xff;
        self.hosts[idx].bits[(h >> 6) as usize] >> (h & 63) & 1 != 0
    }

    #[inline]
    pub fn contains(&self, addr: u32) -> bool {
        let g = &self.groups[(addr >> 14) as usize];
        let bit = (addr >> 8) & 63;
        if g.full >> bit & 1 != 0 {
            return true;
        }
        match self.level2(g, bit) {
            Some(idx) => self.host_bit(idx, addr),
            None => false,
        }
    }

    /// Prefetch the level-1 lines of `keys` (level 2 depends on level 1).
    #[inline]
    pub fn prefetch(&self, keys: &[u32]) {
        for &k in keys {
            prefetch(self.groups.addr_of((k >> 14) as usize));
        }
    }

    /// Three phases per chunk: prefetch level 1 (unless the caller did, a
    /// batch ahead); test it, branch-free, and note the keys whose /24 is
    /// partly covered; only if there are any, prefetch their level-2 lines
    /// and finish them. Lists without prefixes longer than /24 (routing
    /// tables, most blocklists' networks) never take the second pass.
    #[inline]
    pub fn contains_batch(&self, keys: &[u32], out: &mut [bool], batch: usize, prefetch_lines: bool) {
        self.contains_batch_from(keys, out, batch, prefetch_lines, prefetch_lines);
    }

    /// [`V4PrefixSet::contains_batch`] with level 1 already prefetched
    /// ([`V4PrefixSet::prefetch`] a batch ahead).
    #[inline]
    pub fn finish_batch(&self, keys: &[u32], out: &mut [bool]) {
        self.contains_batch_from(keys, out, MAX_BATCH, false, true);
    }

    #[inline(always)]
    fn contains_batch_from(&self, keys: &[u32], out: &mut [bool], batch: usize, prefetch_l1: bool, prefetch_l2: bool) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        let batch = batch.clamp(1, MAX_BATCH);
        let mut partial = [false; MAX_BATCH];
        for (kc, oc) in keys.chunks(batch).zip(out.chunks_mut(batch)) {
            if prefetch_l1 {
                for &k in kc {
                    prefetch(self.groups.addr_of((k >> 14) as usize));
                }
            }
            let mut any_partial = false;
            for ((o, &k), p) in oc.iter_mut().zip(kc).zip(partial.iter_mut()) {
                let g = &self.groups[(k >> 14) as usize];
                let bit = (k >> 8) & 63;
                *o = g.full >> bit & 1 != 0;
                *p = g.partial >> bit & 1 != 0;
                any_partial |= *p;
            }
            if !any_partial {
                continue;
            }
            let mut at = [0usize; MAX_BATCH];
            for ((&k, &p), a) in kc.iter().zip(&partial).zip(at.iter_mut()) {
                if p {
                    *a = self.level2(&self.groups[(k >> 14) as usize], (k >> 8) & 63).unwrap_or(0);
                    if prefetch_l2 {
                        prefetch(self.hosts.addr_of(*a));
                    }
                }
            }
            for (((o, &k), &p), &a) in oc.iter_mut().zip(kc).zip(&partial).zip(&at) {
                if p {
                    *o = self.host_bit(a, k);
                }
            }
        }
    }
}

fn set_full_range(groups: &mut [Group], first: u32, count: u32) {
    let (mut i, end) = (first, first + count);
    while i < end {
        let bit = i & 63;
        let n = (64 - bit).min(end - i);
        let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << bit };
        groups[(i >> 6) as usize].full |= mask;
        i += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mask4(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len)
        }
    }

    fn arb_v4_prefix() -> impl Strategy<Value = (u32, u8)> {
        // Addresses clustered in a few /16s so lookups hit all paths.
        (0u32..4, any::<u16>(), 0u8..=32).prop_map(|(hi, lo, len)| {
            let a = (hi << 30) | (0x0a0b << 16) | u32::from(lo);
            (a & mask4(len), len)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn v4_agrees_with_linear_scan(prefixes in proptest::collection::vec(arb_v4_prefix(), 0..60),
                                      probes in proptest::collection::vec((0u32..4, any::<u16>()), 1..400),
                                      batch in 1usize..70) {
            let set = V4PrefixSet::new(&prefixes);
            let probes: Vec<u32> = probes.iter().map(|&(hi, lo)| (hi << 30) | (0x0a0b << 16) | u32::from(lo)).collect();
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, batch, batch % 2 == 0);
            for (&a, &o) in probes.iter().zip(&out) {
                let want = prefixes.iter().any(|&(p, l)| a & mask4(l) == p);
                prop_assert_eq!(set.contains(a), want, "{:08x}", a);
                prop_assert_eq!(o, want);
            }
        }
    }

    #[test]
    fn whole_space_and_edges() {
        let set = V4PrefixSet::new(&[(0, 0)]);
        assert!(set.contains(0) && set.contains(u32::MAX));
        let set = V4PrefixSet::new(&[(0xffff_ff00, 25), (0x0000_00ff, 32)]);
        assert!(set.contains(0xffff_ff7f) && !set.contains(0xffff_ff80));
        assert!(set.contains(0xff) && !set.contains(0xfe));
    }
}
