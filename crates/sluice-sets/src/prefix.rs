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
//! A list that leaves most groups empty or wholly covered (FireHOL level1,
//! country lists, most blocklists' networks) also gets a summary: two bits
//! per group (empty, wholly covered, mixed), 64 KiB, which stays in L2.
//! Only a key in a mixed group reads its level-1 line; the others are
//! decided by the summary, where without it nearly every key missed the
//! cache on a level-1 line that said "nothing here" (perf: over half of
//! `sluice filter`'s lookup time on that load).
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

/// What a summary's two bits say of a group (`MIXED`: read its line).
const WHOLE: u64 = 1;
const MIXED: u64 = 2;

/// A group with nothing in it, read instead of a group the summary has
/// decided, so the batch loop stays branch-free.
static EMPTY_GROUP: Group = Group { full: 0, partial: 0, rank: 0, pad: [0; 3] };

/// A summary is kept when at most this share of groups is mixed (1/8):
/// then most keys skip their level-1 line. Routing tables mix nearly every
/// group, and there the summary would be one more read per key.
const SUMMARY_MAX_MIXED_SHIFT: u32 = 3;

/// Membership of IPv4 addresses in a set of prefixes of any length.
///
/// Invariants (checked by `persist` when loading): `groups` covers all
/// `GROUPS` (2^18); no /24 is both full and partial; each group's `rank` counts
/// the partial /24s before it and the total equals `hosts.len()`.
pub struct V4PrefixSet {
    pub(crate) groups: Table<Group>,
    pub(crate) hosts: Table<Hosts>,
    pub(crate) prefixes: usize,
    /// Two bits per group (see the module comment), derived from `groups`
    /// (not stored in compiled files); `None` for lists that mix most groups.
    pub(crate) summary: Option<Vec<u64>>,
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
        V4PrefixSet::with_summary(groups, hosts, prefixes.len())
    }

    /// The set of these levels, with its summary if the list is sparse.
    pub(crate) fn with_summary(groups: Table<Group>, hosts: Table<Hosts>, prefixes: usize) -> Self {
        let mut summary = vec![0u64; GROUPS / 32];
        let mut mixed = 0;
        for (i, g) in groups.iter().enumerate() {
            let s = if g.partial == 0 && g.full == u64::MAX {
                WHOLE
            } else if g.partial != 0 || g.full != 0 {
                mixed += 1;
                MIXED
            } else {
                0
            };
            summary[i / 32] |= s << (i % 32 * 2);
        }
        let summary = (mixed <= GROUPS >> SUMMARY_MAX_MIXED_SHIFT).then_some(summary);
        V4PrefixSet { groups, hosts, prefixes, summary }
    }

    /// Bytes of the summary (0 without one).
    pub fn summary_bytes(&self) -> usize {
        self.summary.as_ref().map_or(0, |s| s.len() * 8)
    }

    /// The summary's word for `key`'s group, shifted: the low two bits.
    #[inline(always)]
    fn summary_of(summary: &[u64], key: u32) -> u64 {
        let g = key >> 14;
        summary[(g >> 5) as usize] >> ((g & 31) * 2) & 3
    }

    pub fn prefixes(&self) -> usize {
        self.prefixes
    }

    /// Bytes of both levels and the summary.
    pub fn bytes(&self) -> usize {
        self.groups.bytes() + self.hosts.bytes() + self.summary_bytes()
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

    /// The summary (two bits per group of 64 /24s, 32 groups to a word:
    /// 0 empty, 1 wholly covered, 2 mixed), when the set is sparse enough
    /// to keep one.
    pub fn summary_words(&self) -> Option<&[u64]> {
        self.summary.as_deref()
    }

    /// Level 1's record count (always 2^18) and level 2's.
    pub fn levels_len(&self) -> (usize, usize) {
        (self.groups.len(), self.hosts.len())
    }

    /// Both levels as 32-byte little-endian records (level 1: `full`,
    /// `partial`, `rank`, padding; level 2: the four words of host bits),
    /// for a reader that is not this code: `sluice shield`'s kernel
    /// program looks them up as this type does. `groups` and `hosts` are
    /// 32 bytes per record of [`V4PrefixSet::levels_len`].
    pub fn write_levels(&self, groups: &mut [u8], hosts: &mut [u8]) {
        for (c, g) in groups.chunks_exact_mut(32).zip(self.groups.iter()) {
            c[..8].copy_from_slice(&g.full.to_le_bytes());
            c[8..16].copy_from_slice(&g.partial.to_le_bytes());
            c[16..20].copy_from_slice(&g.rank.to_le_bytes());
            c[20..].fill(0);
        }
        for (c, h) in hosts.chunks_exact_mut(32).zip(self.hosts.iter()) {
            for (w, word) in c.chunks_exact_mut(8).zip(h.bits) {
                w.copy_from_slice(&word.to_le_bytes());
            }
        }
    }

    #[inline]
    pub fn contains(&self, addr: u32) -> bool {
        if let Some(summary) = &self.summary {
            match Self::summary_of(summary, addr) {
                WHOLE => return true,
                MIXED => {}
                _ => return false,
            }
        }
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

    /// Prefetch the level-1 lines of `keys` (level 2 depends on level 1);
    /// with a summary, only those of keys in mixed groups.
    #[inline]
    pub fn prefetch(&self, keys: &[u32]) {
        match &self.summary {
            Some(summary) => {
                for &k in keys {
                    if Self::summary_of(summary, k) == MIXED {
                        prefetch(self.groups.addr_of((k >> 14) as usize));
                    }
                }
            }
            None => {
                for &k in keys {
                    prefetch(self.groups.addr_of((k >> 14) as usize));
                }
            }
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
                self.prefetch(kc);
            }
            let mut any_partial = false;
            if let Some(summary) = &self.summary {
                for ((o, &k), p) in oc.iter_mut().zip(kc).zip(partial.iter_mut()) {
                    let s = Self::summary_of(summary, k);
                    // A select, not a branch: decided groups read the
                    // empty group, which is always cached.
                    let g = if s == MIXED { &self.groups[(k >> 14) as usize] } else { &EMPTY_GROUP };
                    let bit = (k >> 8) & 63;
                    *o = s == WHOLE || g.full >> bit & 1 != 0;
                    *p = g.partial >> bit & 1 != 0;
                    any_partial |= *p;
                }
            } else {
                for ((o, &k), p) in oc.iter_mut().zip(kc).zip(partial.iter_mut()) {
                    let g = &self.groups[(k >> 14) as usize];
                    let bit = (k >> 8) & 63;
                    *o = g.full >> bit & 1 != 0;
                    *p = g.partial >> bit & 1 != 0;
                    any_partial |= *p;
                }
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

    /// Eight /16s whose low bits differ, so the summary's word index and
    /// the bits within a word both vary.
    const SIXTEENS: [u32; 8] = [0x0a0b, 0x0a1c, 0xc0a8, 0x1237, 0x7ffe, 0x8001, 0xac15, 0x0203];

    /// An address in one of a few /16s (`hi` picks which), so lookups hit
    /// all paths.
    fn clustered(hi: u32, lo: u16) -> u32 {
        (SIXTEENS[hi as usize % SIXTEENS.len()] << 16) | u32::from(lo)
    }

    fn arb_v4_prefix() -> impl Strategy<Value = (u32, u8)> {
        (0u32..8, any::<u16>(), 0u8..=32).prop_map(|(hi, lo, len)| (clustered(hi, lo) & mask4(len), len))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn v4_agrees_with_linear_scan(prefixes in proptest::collection::vec(arb_v4_prefix(), 0..60),
                                      probes in proptest::collection::vec((0u32..8, any::<u16>()), 1..400),
                                      batch in 1usize..70) {
            let probes: Vec<u32> = probes.iter().map(|&(hi, lo)| clustered(hi, lo)).collect();
            // These lists touch a few groups: the summary is kept. The same
            // lookups run without it too (the path of dense lists).
            let set = V4PrefixSet::new(&prefixes);
            prop_assert!(set.summary.is_some());
            let mut plain = V4PrefixSet::new(&prefixes);
            plain.summary = None;
            for set in [&set, &plain] {
                let mut out = vec![false; probes.len()];
                set.contains_batch(&probes, &mut out, batch, batch % 2 == 0);
                let mut finished = vec![false; probes.len()];
                for (kc, fc) in probes.chunks(MAX_BATCH).zip(finished.chunks_mut(MAX_BATCH)) {
                    set.prefetch(kc);
                    set.finish_batch(kc, fc);
                }
                for ((&a, &o), &f) in probes.iter().zip(&out).zip(&finished) {
                    let want = prefixes.iter().any(|&(p, l)| a & mask4(l) == p);
                    prop_assert_eq!(set.contains(a), want, "{:08x}", a);
                    prop_assert_eq!(o, want);
                    prop_assert_eq!(f, want);
                }
            }
        }
    }

    #[test]
    fn summary_only_for_lists_that_leave_most_groups_decided() {
        // 1/8 of the groups mixed keeps it; one more drops it.
        let mixed = |n: u32| -> Vec<(u32, u8)> { (0..n).map(|g| (g << 14, 24)).collect() };
        let limit = (GROUPS >> SUMMARY_MAX_MIXED_SHIFT) as u32;
        assert!(V4PrefixSet::new(&mixed(limit)).summary.is_some());
        assert!(V4PrefixSet::new(&mixed(limit + 1)).summary.is_none());
        // Whole groups (prefixes of /18 and shorter) are not mixed.
        let whole: Vec<(u32, u8)> = (0..4u32).map(|i| (i << 30, 2)).collect();
        let set = V4PrefixSet::new(&whole);
        assert!(set.summary.is_some() && set.contains(0x8000_0001) && set.contains(u32::MAX));
        assert_eq!(set.summary_bytes(), 64 << 10);
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
