//! IPv6 prefix membership: a compressed multibit trie in the manner of
//! Poptrie (Asai and Ohara, SIGCOMM 2015), answering "is the address inside
//! any prefix" rather than a longest match.
//!
//! The prefixes are first merged into sorted disjoint ranges (kept: they are
//! what `persist` stores and what the trie is rebuilt from on load), and each
//! range is cut into the fewest aligned blocks, so no block lies inside
//! another. The root is a direct table, one `u32` per /16 (256 KiB, stays in
//! L2): empty, wholly covered, or a node. Below it every node consumes six
//! address bits: a 64-bit `covered` vector (children wholly inside a block)
//! and a 64-bit `children` vector (children with longer blocks below), the
//! child nodes stored contiguously from `base`, found by a popcount of the
//! `children` bits before the chunk, so a node is one 32-byte record and a
//! step is one line. A /48 is found in at most six steps below the root, a
//! /64 in at most eight; the upper levels are few and stay in cache.
//!
//! Lookups in a batch walk level by level: every key still walking reads its
//! node, then prefetches its next one, so the misses of a batch overlap (the
//! same treatment as the exact tables' phases).

use crate::mem::{plain_data, Table};
use crate::simd::prefetch;

plain_data! {
    /// Six address bits: which of the 64 children are wholly covered and
    /// which have longer blocks below (never both), and where the latter's
    /// nodes start.
    #[repr(C, align(32))]
    pub(crate) struct Node {
        pub(crate) covered: u64,
        pub(crate) children: u64,
        pub(crate) base: u32,
        pub(crate) pad: [u32; 3],
    }
}

const _: () = assert!(size_of::<Node>() == 32);

const ROOT_BITS: u32 = 16;
/// Walks in flight in a batch lookup ([`V6PrefixSet::or_batch`]).
const LANES: usize = 16;
const STRIDE: u32 = 6;
/// Root entries: 0 (nothing below this /16; the zeroed table), all of it,
/// or node `entry - NODE`.
const COVERED: u32 = 1;
const NODE: u32 = 2;

/// The six bits of `addr` after its first `start` bits (`start` <= 124; at
/// 124 the last four bits come out shifted left by two, and the build cuts
/// with the same function, so both agree).
#[inline(always)]
fn chunk(addr: u128, start: u32) -> u32 {
    ((addr << start) >> (128 - STRIDE)) as u32
}

/// Membership of IPv6 addresses in a set of prefixes.
pub struct V6PrefixSet {
    /// Sorted, disjoint, non-adjacent inclusive ranges.
    pub(crate) ranges: Vec<(u128, u128)>,
    pub(crate) prefixes: usize,
    root: Table<u32>,
    nodes: Table<Node>,
}

impl V6PrefixSet {
    /// Build from (address, length) pairs; host bits must be clear.
    pub fn new(prefixes: &[(u128, u8)]) -> Self {
        let mut ranges: Vec<(u128, u128)> =
            prefixes.iter().map(|&(a, len)| (a, a | u128::MAX.checked_shr(u32::from(len)).unwrap_or(0))).collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        Self::from_ranges(merged, prefixes.len())
    }

    /// Build from merged ranges (sorted, disjoint, not adjacent), as `new`
    /// makes them and `persist` checks them.
    pub(crate) fn from_ranges(ranges: Vec<(u128, u128)>, prefixes: usize) -> Self {
        let mut blocks = Vec::with_capacity(ranges.len() * 2);
        for &(first, last) in &ranges {
            cut(first, last, &mut blocks);
        }
        let mut root = Table::<u32>::zeroed(1 << ROOT_BITS);
        let mut nodes: Vec<Node> = Vec::new();
        let mut at = 0;
        while at < blocks.len() {
            let (addr, len) = blocks[at];
            let slot = (addr >> (128 - ROOT_BITS)) as usize;
            if u32::from(len) <= ROOT_BITS {
                let n = 1usize << (ROOT_BITS - u32::from(len));
                root[slot..slot + n].fill(COVERED);
                at += 1;
                continue;
            }
            // Every longer block in this /16 hangs off one node.
            let end = at + blocks[at..].partition_point(|&(a, _)| (a >> (128 - ROOT_BITS)) as usize == slot);
            root[slot] = NODE + u32::try_from(nodes.len()).expect("fewer than 2^32 nodes");
            nodes.push(Node { covered: 0, children: 0, base: 0, pad: [0; 3] });
            build(&blocks[at..end], ROOT_BITS, nodes.len() - 1, &mut nodes);
            at = end;
        }
        let mut table = Table::<Node>::zeroed(nodes.len());
        table.copy_from_slice(&nodes);
        V6PrefixSet { ranges, prefixes, root, nodes: table }
    }

    pub fn prefixes(&self) -> usize {
        self.prefixes
    }

    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Bytes of the trie (root and nodes) and of the ranges it was built from.
    pub fn bytes(&self) -> usize {
        self.root.bytes() + self.nodes.bytes() + self.ranges.len() * 32
    }

    /// Nodes below the root.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    pub fn contains(&self, addr: u128) -> bool {
        let e = self.root[(addr >> (128 - ROOT_BITS)) as usize];
        if e < NODE {
            return e == COVERED;
        }
        let (mut n, mut start) = ((e - NODE) as usize, ROOT_BITS);
        loop {
            match self.step(n, addr, start) {
                Step::Covered => return true,
                Step::Outside => return false,
                Step::Next(next) => (n, start) = (next, start + STRIDE),
            }
        }
    }

    #[inline(always)]
    fn step(&self, n: usize, addr: u128, start: u32) -> Step {
        let node = &self.nodes[n];
        let c = chunk(addr, start);
        if node.covered >> c & 1 != 0 {
            Step::Covered
        } else if node.children >> c & 1 == 0 {
            Step::Outside
        } else {
            Step::Next(node.base as usize + (node.children & ((1u64 << c) - 1)).count_ones() as usize)
        }
    }

    /// Prefetch the root entries of `keys` (the first line each lookup reads).
    #[inline]
    pub fn prefetch(&self, keys: &[u128]) {
        for &k in keys {
            prefetch(self.root.addr_of((k >> (128 - ROOT_BITS)) as usize));
        }
    }

    /// `out[i] |= contains(keys[i])`. Walks are interleaved in the manner of
    /// AMAC (Kocberber et al., VLDB 2015): `LANES` keys walk at once, each
    /// visit takes one step of one key and prefetches its next node, and a
    /// key that finishes hands its lane to the next key of the batch. So
    /// about `LANES` misses are always in flight, however unequal the walks'
    /// depths; a walk of the batch level by level, where the last levels
    /// have few keys left and wait a whole miss each, measured the same on
    /// the bgp mix (19.5 against 20.9 Mpps all in-list, 22.3 against 21.9
    /// half), and 8, 32 or 64 lanes slower than 16.
    #[inline]
    pub fn or_batch(&self, keys: &[u128], out: &mut [bool], prefetch_lines: bool) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        // (key index, node, bits consumed); usize::MAX marks an idle lane.
        let mut lanes = [(usize::MAX, 0u32, 0u32); LANES];
        let mut next = 0;
        let mut live = 0;
        for lane in lanes.iter_mut() {
            match self.admit(keys, out, &mut next, prefetch_lines) {
                Some((i, node)) => {
                    *lane = (i, node, ROOT_BITS);
                    live += 1;
                }
                None => break,
            }
        }
        while live > 0 {
            for lane in lanes.iter_mut() {
                let (i, node, start) = *lane;
                if i == usize::MAX {
                    continue;
                }
                let node = &self.nodes[node as usize];
                let c = chunk(keys[i], start);
                out[i] |= node.covered >> c & 1 != 0;
                if node.children >> c & 1 != 0 {
                    let n = node.base + (node.children & ((1u64 << c) - 1)).count_ones();
                    if prefetch_lines {
                        prefetch(self.nodes.addr_of(n as usize));
                    }
                    *lane = (i, n, start + STRIDE);
                    continue;
                }
                match self.admit(keys, out, &mut next, prefetch_lines) {
                    Some((j, n)) => *lane = (j, n, ROOT_BITS),
                    None => {
                        lane.0 = usize::MAX;
                        live -= 1;
                    }
                }
            }
        }
    }

    /// The next key from `next` that has a node to walk (its first node,
    /// prefetched); keys the root answers are answered on the way.
    #[inline(always)]
    fn admit(&self, keys: &[u128], out: &mut [bool], next: &mut usize, prefetch_lines: bool) -> Option<(usize, u32)> {
        while *next < keys.len() {
            let i = *next;
            *next += 1;
            let e = self.root[(keys[i] >> (128 - ROOT_BITS)) as usize];
            if e >= NODE {
                if prefetch_lines {
                    prefetch(self.nodes.addr_of((e - NODE) as usize));
                }
                return Some((i, e - NODE));
            }
            out[i] |= e == COVERED;
        }
        None
    }
}

enum Step {
    Covered,
    Outside,
    Next(usize),
}

/// Cut `[first, last]` into the fewest aligned blocks, in address order.
fn cut(mut first: u128, last: u128, out: &mut Vec<(u128, u8)>) {
    // The last address of the 2^k-address block at `first` (aligned to it).
    let end = |first: u128, k: u32| if k == 128 { u128::MAX } else { first + ((1u128 << k) - 1) };
    loop {
        // The largest aligned block that starts at `first` and ends by `last`.
        let mut k = if first == 0 { 128 } else { first.trailing_zeros() };
        while end(first, k) > last {
            k -= 1;
        }
        out.push((first, (128 - k) as u8));
        if end(first, k) >= last {
            return;
        }
        first = end(first, k) + 1;
    }
}

/// Fill node `at` from `blocks`: sorted, disjoint, all longer than `start`
/// bits and sharing their first `start` bits. Children are reserved
/// contiguously before any is filled, so each node's children sit together.
fn build(blocks: &[(u128, u8)], start: u32, at: usize, nodes: &mut Vec<Node>) {
    let end_bits = start + STRIDE;
    let (mut covered, mut children) = (0u64, 0u64);
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < blocks.len() {
        let (addr, len) = blocks[i];
        let c = chunk(addr, start);
        if u32::from(len) <= end_bits {
            // Wholly covers 2^(end_bits - len) children from `c`.
            let n = end_bits - u32::from(len);
            covered |= (if n == 6 { u64::MAX } else { (1u64 << (1u32 << n)) - 1 }) << c;
            i += 1;
            continue;
        }
        let j = i + blocks[i..].partition_point(|&(a, l)| u32::from(l) > end_bits && chunk(a, start) == c);
        children |= 1 << c;
        groups.push((i, j));
        i = j;
    }
    let base = nodes.len();
    nodes.resize(base + groups.len(), Node { covered: 0, children: 0, base: 0, pad: [0; 3] });
    nodes[at] = Node { covered, children, base: u32::try_from(base).expect("fewer than 2^32 nodes"), pad: [0; 3] };
    for (k, (i, j)) in groups.into_iter().enumerate() {
        build(&blocks[i..j], end_bits, base + k, nodes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mask(len: u8) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }

    #[test]
    fn cut_is_exact_and_aligned() {
        let mut out = Vec::new();
        cut(0, u128::MAX, &mut out);
        assert_eq!(out, vec![(0, 0)]);
        out.clear();
        cut(1, 6, &mut out);
        assert_eq!(out, vec![(1, 128), (2, 127), (4, 127), (6, 128)]);
        out.clear();
        cut(u128::MAX, u128::MAX, &mut out);
        assert_eq!(out, vec![(u128::MAX, 128)]);
        out.clear();
        cut(1 << 127, u128::MAX, &mut out);
        assert_eq!(out, vec![(1 << 127, 1)]);
    }

    /// Addresses that share long runs of bits, so prefixes nest and overlap
    /// at every depth of the trie.
    fn arb_addr() -> impl Strategy<Value = u128> {
        (0u128..4, 0u128..4, 0u128..4, any::<u16>(), any::<u16>()).prop_map(|(a, b, c, d, e)| {
            a << 126 | 0x2001_0db8 << 94 | b << 70 | c << 40 | u128::from(d) << 20 | u128::from(e)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn agrees_with_linear_scan(prefixes in proptest::collection::vec((arb_addr(), 0u8..=128), 0..60),
                                   probes in proptest::collection::vec(arb_addr(), 1..300),
                                   pf in any::<bool>()) {
            let prefixes: Vec<(u128, u8)> = prefixes.iter().map(|&(a, l)| (a & mask(l), l)).collect();
            let set = V6PrefixSet::new(&prefixes);
            let mut out = vec![false; probes.len()];
            set.or_batch(&probes, &mut out, pf);
            for (&a, &o) in probes.iter().zip(&out) {
                let want = prefixes.iter().any(|&(p, l)| a & mask(l) == p);
                prop_assert_eq!(set.contains(a), want, "{:032x}", a);
                prop_assert_eq!(o, want, "batch {:032x}", a);
                // The ranges (persisted) agree too.
                let i = set.ranges.partition_point(|r| r.0 <= a);
                prop_assert_eq!(i > 0 && a <= set.ranges[i - 1].1, want);
            }
            // The prefixes' own first and last addresses, the trie's edges.
            for &(p, l) in &prefixes {
                prop_assert!(set.contains(p) && set.contains(p | !mask(l)));
            }
        }
    }

    #[test]
    fn whole_space_and_edges() {
        let set = V6PrefixSet::new(&[(0, 0)]);
        assert!(set.contains(u128::MAX) && set.contains(0));
        let set = V6PrefixSet::new(&[(u128::MAX, 128), (0, 1)]);
        assert!(set.contains(u128::MAX) && set.contains(5) && !set.contains(1 << 127));
        assert!(!set.contains(u128::MAX - 1));
        assert_eq!(set.ranges(), 2);
        let set = V6PrefixSet::new(&[]);
        assert!(!set.contains(0) && set.nodes() == 0);
        // A /48 is at most six nodes below the root.
        let set = V6PrefixSet::new(&[(0x2001_0db8_0001u128 << 80, 48)]);
        assert_eq!(set.nodes(), 6);
        assert!(set.contains(0x2001_0db8_0001u128 << 80 | 77) && !set.contains(0x2001_0db8_0002u128 << 80));
    }
}
