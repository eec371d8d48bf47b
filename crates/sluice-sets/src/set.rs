//! [`AddressSet`]: membership in a mixed list of IPv4/IPv6 hosts and prefixes.

use crate::exact::{Prepared, V4ExactSet, V6ExactSet, DEFAULT_MAX_LOAD, MAX_BATCH, PREPARED_MAX};
use crate::hash::Hasher;
use crate::prefix::V4PrefixSet;
use crate::prefix6::V6PrefixSet;
use sluice_rules::Prefix;
use std::fmt;
use std::net::IpAddr;

/// Packets per batch when the caller does not choose. Measured with
/// `sluice-bench classify --structure sluice --batch 16,32,64 --filter both`
/// at 6M and 250k hosts (issue 12): with the front filter, 32 packets (64
/// lookups) gave 51-52 and 74-75 Mpps against 34-45 and 65 at 16: the
/// filter test of a batch starts only after all its keys were hashed and
/// their filter blocks prefetched, so a longer batch gives the blocks more
/// time to arrive, and it spreads each batch's fixed costs over more keys.
/// 64 was 0-8% faster still, but leaves no room below [`MAX_BATCH`].
/// Without the filter 32 also beat 16 (41-42 against 39-40 Mpps at 6M).
pub const DEFAULT_BATCH: usize = 32;

/// IPv6 hosts folded into the prefix trie stay there if a listed address's
/// lookup reads at most this many records on average. A host alone below
/// its direct table entry is one leaf (one line, 32 bytes: the exact
/// table's cost), but hosts packed into one /64 share a chain of nodes down
/// to where they part, up to 19 deep; such a list keeps its own table.
const V6_FOLD_STEPS: f64 = 2.0;

/// How to build an [`AddressSet`].
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Most of the exact tables' slots to fill (0.05-0.9).
    pub max_load: f64,
    pub hasher: Hasher,
    /// When a list has prefixes too, hosts up to this many go into the prefix
    /// structure (one lookup per address) instead of their own table (IPv6:
    /// unless a lookup in the trie would read more than two records).
    pub fold_hosts_up_to: usize,
    /// Put a front filter ([`crate::filter`]) before each exact table (on
    /// by default). `bench classify --preset filter` measures it against
    /// none per table size and listed share (BENCHMARKS.md, issue 12); it
    /// costs 10 bits per host.
    pub filter: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_load: DEFAULT_MAX_LOAD, hasher: Hasher::random(), fold_hosts_up_to: 1 << 20, filter: true }
    }
}

/// The fast membership structure. Built once, then read-only and shareable.
///
/// Hosts go to an exact-match table (one cache line per lookup); prefixes to
/// the IPv4 bitmap levels or the IPv6 ranges. A list with a few hosts among
/// its prefixes (FireHOL) is one prefix structure; a list of millions of
/// hosts is one exact table.
pub struct AddressSet {
    pub(crate) v4_hosts: Option<V4ExactSet>,
    pub(crate) v4_prefixes: Option<V4PrefixSet>,
    pub(crate) v6_hosts: Option<V6ExactSet>,
    pub(crate) v6_prefixes: Option<V6PrefixSet>,
    pub(crate) entries: usize,
}

impl AddressSet {
    pub fn new(prefixes: &[Prefix]) -> Self {
        Self::with_options(prefixes, Options::default())
    }

    pub fn with_options(prefixes: &[Prefix], o: Options) -> Self {
        let (mut h4, mut p4, mut h6, mut p6) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for p in prefixes {
            match *p {
                Prefix::V4 { addr, len: 32 } => h4.push(addr),
                Prefix::V4 { addr, len } => p4.push((addr, len)),
                Prefix::V6 { addr, len: 128 } => h6.push(addr),
                Prefix::V6 { addr, len } => p6.push((addr, len)),
            }
        }
        if !p4.is_empty() && h4.len() <= o.fold_hosts_up_to {
            p4.extend(h4.drain(..).map(|a| (a, 32)));
        }
        let mut v6_prefixes = None;
        if !p6.is_empty() && !h6.is_empty() && h6.len() <= o.fold_hosts_up_to {
            let with_hosts: Vec<(u128, u8)> = p6.iter().copied().chain(h6.iter().map(|&a| (a, 128))).collect();
            let trie = V6PrefixSet::new(&with_hosts);
            if trie.mean_steps() <= V6_FOLD_STEPS {
                (p6, h6) = (with_hosts, Vec::new());
                v6_prefixes = Some(trie);
            }
        }
        // Exact tables count their distinct keys as they build; prefix lists
        // are usually short enough to sort.
        let distinct = |mut v: Vec<(u128, u8)>| {
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        let v4_hosts = (!h4.is_empty()).then(|| V4ExactSet::with_filter(&h4, o.max_load, o.hasher, o.filter));
        let v6_hosts = (!h6.is_empty()).then(|| V6ExactSet::with_filter(&h6, o.max_load, o.hasher, o.filter));
        let entries = v4_hosts.as_ref().map_or(0, V4ExactSet::len)
            + v6_hosts.as_ref().map_or(0, V6ExactSet::len)
            + distinct(p4.iter().map(|&(a, l)| (u128::from(a), l)).collect())
            + distinct(p6.clone());
        AddressSet {
            v4_hosts,
            v4_prefixes: (!p4.is_empty()).then(|| V4PrefixSet::new(&p4)),
            v6_hosts,
            v6_prefixes: v6_prefixes.or_else(|| (!p6.is_empty()).then(|| V6PrefixSet::new(&p6))),
            entries,
        }
    }

    /// Distinct entries of the list.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    #[inline]
    pub fn contains_v4(&self, a: u32) -> bool {
        self.v4_prefixes.as_ref().is_some_and(|p| p.contains(a))
            || self.v4_hosts.as_ref().is_some_and(|h| h.contains(a))
    }

    #[inline]
    pub fn contains_v6(&self, a: u128) -> bool {
        self.v6_prefixes.as_ref().is_some_and(|p| p.contains(a))
            || self.v6_hosts.as_ref().is_some_and(|h| h.contains(a))
    }

    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.contains_v4(u32::from(a)),
            IpAddr::V6(a) => self.contains_v6(u128::from(a)),
        }
    }

    /// First half of a pipelined lookup of up to [`PREPARED_MAX`] IPv4 keys:
    /// hash them into `prep` and prefetch the lines the lookup starts from.
    /// Call [`AddressSet::finish_v4`] with the same keys a batch later.
    #[inline]
    pub fn prepare_v4(&self, keys: &[u32], prep: &mut Prepared) {
        if let Some(p) = &self.v4_prefixes {
            p.prefetch(keys);
        }
        if let Some(h) = &self.v4_hosts {
            h.prepare(keys, prep);
        }
    }

    /// Second half: `out[i] = contains_v4(keys[i])` for the prepared keys.
    #[inline]
    pub fn finish_v4(&self, keys: &[u32], prep: &Prepared, out: &mut [bool]) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        match &self.v4_hosts {
            Some(h) => h.finish(keys, prep, out),
            None => out.fill(false),
        }
        if let Some(p) = &self.v4_prefixes {
            if self.v4_hosts.is_none() {
                p.finish_batch(keys, out);
                return;
            }
            let mut hit = [false; PREPARED_MAX];
            p.finish_batch(keys, &mut hit[..keys.len()]);
            for (o, h) in out.iter_mut().zip(&hit) {
                *o |= *h;
            }
        }
    }

    /// [`AddressSet::prepare_v4`] for IPv6 keys.
    #[inline]
    pub fn prepare_v6(&self, keys: &[u128], prep: &mut Prepared) {
        if let Some(p) = &self.v6_prefixes {
            p.prepare(keys, &mut prep.walks);
        }
        if let Some(h) = &self.v6_hosts {
            h.prepare(keys, prep);
        }
    }

    /// [`AddressSet::finish_v4`] for IPv6 keys.
    #[inline]
    pub fn finish_v6(&self, keys: &[u128], prep: &Prepared, out: &mut [bool]) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        match &self.v6_hosts {
            Some(h) => h.finish(keys, prep, out),
            None => out.fill(false),
        }
        if let Some(p) = &self.v6_prefixes {
            p.or_prepared(keys, &prep.walks, out);
        }
    }

    /// `out[i] = contains_v6(keys[i])`, batched and (optionally) prefetched.
    #[inline]
    pub fn contains_v6_batch(&self, keys: &[u128], out: &mut [bool], batch: usize, prefetch: bool) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        match &self.v6_hosts {
            Some(h) => h.contains_batch(keys, out, batch, prefetch),
            None => out.fill(false),
        }
        if let Some(p) = &self.v6_prefixes {
            p.or_batch(keys, out, prefetch);
        }
    }

    /// `out[i] = contains_v4(keys[i])`, batched and (optionally) prefetched.
    #[inline]
    pub fn contains_v4_batch(&self, keys: &[u32], out: &mut [bool], batch: usize, prefetch: bool) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        match (&self.v4_prefixes, &self.v4_hosts) {
            (None, None) => out.fill(false),
            (Some(p), None) => p.contains_batch(keys, out, batch, prefetch),
            (None, Some(h)) => h.contains_batch(keys, out, batch, prefetch),
            (Some(p), Some(h)) => {
                let mut tmp = [false; MAX_BATCH];
                for (kc, oc) in keys.chunks(MAX_BATCH).zip(out.chunks_mut(MAX_BATCH)) {
                    p.contains_batch(kc, oc, batch, prefetch);
                    h.contains_batch(kc, &mut tmp[..kc.len()], batch, prefetch);
                    for (o, t) in oc.iter_mut().zip(&tmp) {
                        *o |= *t;
                    }
                }
            }
        }
    }

    /// `out[i] = contains(addrs[i])` for mixed families: the keys of each
    /// family are gathered and looked up through their batched path.
    pub fn contains_batch(&self, addrs: &[IpAddr], out: &mut [bool], batch: usize, prefetch: bool) {
        assert_eq!(addrs.len(), out.len(), "one output per key");
        let mut k4 = [0u32; MAX_BATCH];
        let mut k6 = [0u128; MAX_BATCH];
        let (mut at4, mut at6) = ([0usize; MAX_BATCH], [0usize; MAX_BATCH]);
        let (mut f4, mut f6) = ([false; MAX_BATCH], [false; MAX_BATCH]);
        for (chunk_no, chunk) in addrs.chunks(MAX_BATCH).enumerate() {
            let base = chunk_no * MAX_BATCH;
            let (mut n4, mut n6) = (0, 0);
            for (i, ip) in chunk.iter().enumerate() {
                match ip {
                    IpAddr::V4(a) => {
                        (k4[n4], at4[n4]) = (u32::from(*a), base + i);
                        n4 += 1;
                    }
                    IpAddr::V6(a) => {
                        (k6[n6], at6[n6]) = (u128::from(*a), base + i);
                        n6 += 1;
                    }
                }
            }
            self.contains_v4_batch(&k4[..n4], &mut f4[..n4], batch, prefetch);
            self.contains_v6_batch(&k6[..n6], &mut f6[..n6], batch, prefetch);
            for j in 0..n4 {
                out[at4[j]] = f4[j];
            }
            for j in 0..n6 {
                out[at6[j]] = f6[j];
            }
        }
    }

    /// Bytes of all tables.
    pub fn bytes(&self) -> usize {
        self.v4_hosts.as_ref().map_or(0, |h| h.info().bytes)
            + self.v4_prefixes.as_ref().map_or(0, V4PrefixSet::bytes)
            + self.v6_hosts.as_ref().map_or(0, |h| h.info().bytes)
            + self.v6_prefixes.as_ref().map_or(0, V6PrefixSet::bytes)
    }

    /// Bytes of the exact tables' front filters (0 without any).
    pub fn filter_bytes(&self) -> usize {
        self.v4_hosts.as_ref().map_or(0, |h| h.info().filter_bytes)
            + self.v6_hosts.as_ref().map_or(0, |h| h.info().filter_bytes)
    }

    /// The share of `keys` the IPv4 host table's filter lets through (its
    /// false-positive rate when they are non-members); `None` without one.
    pub fn filter_positive_share_v4(&self, keys: &[u32]) -> Option<f64> {
        self.v4_hosts.as_ref()?.filter_positive_share(keys)
    }

    /// [`AddressSet::filter_positive_share_v4`] for the IPv6 host table.
    pub fn filter_positive_share_v6(&self, keys: &[u128]) -> Option<f64> {
        self.v6_hosts.as_ref()?.filter_positive_share(keys)
    }

    /// Whether every large table got the huge-page advice accepted.
    pub fn huge_pages(&self) -> bool {
        self.v4_hosts.as_ref().is_none_or(|h| h.info().huge_pages || h.info().bytes < (1 << 20))
            && self.v4_prefixes.as_ref().is_none_or(V4PrefixSet::huge_pages)
    }
}

impl fmt::Display for AddressSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} entries:", self.entries)?;
        if let Some(h) = &self.v4_hosts {
            let i = h.info();
            write!(f, " v4 hosts {} in {} buckets ({} MiB)", i.entries, i.buckets, i.bytes >> 20)?;
        }
        if let Some(p) = &self.v4_prefixes {
            write!(f, " v4 prefixes {} ({} MiB)", p.prefixes(), p.bytes() >> 20)?;
        }
        if let Some(h) = &self.v6_hosts {
            write!(f, " v6 hosts {}", h.len())?;
        }
        if let Some(p) = &self.v6_prefixes {
            write!(f, " v6 prefixes {} as {} ranges, {} trie nodes", p.prefixes(), p.ranges(), p.nodes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn arb_prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            (0u32..8, any::<u8>(), prop_oneof![Just(32u8), 0u8..=32])
                .prop_map(|(a, b, l)| Prefix::new(IpAddr::V4(Ipv4Addr::from(a << 29 | u32::from(b))), l)),
            (0u128..8, any::<u8>(), prop_oneof![Just(128u8), 0u8..=128])
                .prop_map(|(a, b, l)| Prefix::new(IpAddr::V6(Ipv6Addr::from(a << 125 | u128::from(b))), l)),
        ]
    }

    fn arb_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u32..8, any::<u8>()).prop_map(|(a, b)| IpAddr::V4(Ipv4Addr::from(a << 29 | u32::from(b)))),
            (0u128..8, any::<u8>()).prop_map(|(a, b)| IpAddr::V6(Ipv6Addr::from(a << 125 | u128::from(b)))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The differential test of issue 3: the fast set, its batch path and
        /// the simple per-length hash sets against a linear prefix scan.
        #[test]
        fn agrees_with_reference(prefixes in proptest::collection::vec(arb_prefix(), 0..80),
                                 probes in proptest::collection::vec(arb_ip(), 1..300),
                                 fold in prop_oneof![Just(0usize), Just(1 << 20)],
                                 batch in 1usize..70, seed in any::<u64>(),
                                 filter in any::<bool>(), adaptive in any::<bool>(), skip in prop_oneof![Just(0u32), 1u32..400]) {
            let set = AddressSet::with_options(&prefixes, Options { max_load: 0.75, hasher: Hasher::with_seed(seed), fold_hosts_up_to: fold, filter });
            let simple = sluice_rules::PrefixHashSet::from_prefixes(&prefixes);
            prop_assert_eq!(set.len(), simple.len(), "distinct entries");
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, batch, seed % 2 == 0);
            let (v4, v6): (Vec<u32>, Vec<u128>) = (
                probes.iter().filter_map(|ip| match ip { IpAddr::V4(a) => Some(u32::from(*a)), _ => None }).collect(),
                probes.iter().filter_map(|ip| match ip { IpAddr::V6(a) => Some(u128::from(*a)), _ => None }).collect(),
            );
            let mut prep = Prepared::default();
            prep.set_adaptive(adaptive);
            prep.skip_filter_for(skip);
            for chunk in v4.chunks(PREPARED_MAX) {
                let mut piped = vec![false; chunk.len()];
                set.prepare_v4(chunk, &mut prep);
                set.finish_v4(chunk, &prep, &mut piped);
                for (&a, &p) in chunk.iter().zip(&piped) {
                    prop_assert_eq!(p, prefixes.iter().any(|x| x.contains(IpAddr::V4(a.into()))));
                }
            }
            for chunk in v6.chunks(PREPARED_MAX) {
                let mut piped = vec![false; chunk.len()];
                set.prepare_v6(chunk, &mut prep);
                set.finish_v6(chunk, &prep, &mut piped);
                for (&a, &p) in chunk.iter().zip(&piped) {
                    prop_assert_eq!(p, prefixes.iter().any(|x| x.contains(IpAddr::V6(a.into()))));
                }
            }
            for (ip, o) in probes.iter().zip(&out) {
                let want = prefixes.iter().any(|p| p.contains(*ip));
                prop_assert_eq!(set.contains(*ip), want, "{}", ip);
                prop_assert_eq!(*o, want, "batch {}", ip);
                prop_assert_eq!(simple.contains(*ip), want);
            }
        }
    }

    #[test]
    fn long_ipv6_host_lists_keep_their_own_table_beside_prefixes() {
        let mut list: Vec<Prefix> =
            (0..5_000u128).map(|i| Prefix::V6 { addr: 0x2001_0db8u128 << 96 | i << 20 | 1, len: 128 }).collect();
        list.push(Prefix::V6 { addr: 0x2001_0db9u128 << 96, len: 32 });
        let set = AddressSet::new(&list);
        assert!(set.v6_hosts.is_some() && set.v6_prefixes.is_some());
        assert!(set.contains("2001:db8::10:1".parse().unwrap()) && set.contains("2001:db9::7".parse().unwrap()));
        assert!(!set.contains("2001:db8::10:2".parse().unwrap()));
        // Packed into a /32 they would cost a chain of nodes each: even 100
        // keep their table.
        list.truncate(100);
        list.push(Prefix::V6 { addr: 0x2001_0db9u128 << 96, len: 32 });
        assert!(AddressSet::new(&list).v6_hosts.is_some());
        // Spread out, 5,000 hosts fold into the trie, a leaf each.
        let mut list: Vec<Prefix> = (0..5_000u128)
            .map(|i| Prefix::V6 { addr: 0x2001u128 << 112 | (i * 0x9e37_79b9_7f4a_7c15) << 32 | 1, len: 128 })
            .collect();
        list.push(Prefix::V6 { addr: 0x2001_0db9u128 << 96, len: 32 });
        let set = AddressSet::new(&list);
        assert!(set.v6_hosts.is_none(), "hosts spread out fold into the trie");
        assert!(set.contains(Ipv6Addr::from(0x2001u128 << 112 | (77 * 0x9e37_79b9_7f4a_7c15) << 32 | 1).into()));
        assert!(!set.contains(Ipv6Addr::from(0x2001u128 << 112 | (77 * 0x9e37_79b9_7f4a_7c15) << 32 | 2).into()));
    }

    #[test]
    fn firehol_as_one_prefix_structure() {
        let list = sluice_rules::parse_list("f", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false).unwrap().prefixes;
        let set = AddressSet::new(&list);
        assert_eq!(set.len(), 2574);
        assert!(set.v4_hosts.is_none() && set.v4_prefixes.is_some());
        assert!(set.contains("10.1.2.3".parse().unwrap()));
        assert!(!set.contains("8.8.8.8".parse().unwrap()));
    }
}
