//! The structures under test, behind one batch-lookup interface.

use hashbrown::HashSet;
use sluice_rules::Prefix;
use sluice_sets::simd::prefetch;
use sluice_sets::{AddressSet, Hasher, Options, Prepared, MAX_BATCH};

/// Look up `keys`, writing membership to `out`; `prefetch` asks for the
/// structure's own lines to be prefetched for the whole slice first.
pub trait Classifier: Send + Sync {
    fn lookup(&self, keys: &[u32], out: &mut [bool], prefetch: bool);
    /// IPv6 keys; only structures built for IPv6 are asked.
    fn lookup6(&self, _keys: &[u128], _out: &mut [bool], _prefetch: bool) {
        unreachable!("structure was not built for IPv6")
    }
    /// Bytes the structure occupies (its main table).
    fn bytes(&self) -> usize;
    /// Pipelining, first half: hash and prefetch what looking `keys` up will
    /// read; `finish` resolves them a batch later. Structures without a
    /// two-phase API just prefetch (or do nothing) and look up in `finish`.
    fn prepare(&self, _keys: &[u32], _prep: &mut Prepared) {}
    fn finish(&self, keys: &[u32], _prep: &Prepared, out: &mut [bool]) {
        self.lookup(keys, out, false)
    }
    fn prepare6(&self, _keys: &[u128], _prep: &mut Prepared) {}
    fn finish6(&self, keys: &[u128], _prep: &Prepared, out: &mut [bool]) {
        self.lookup6(keys, out, false)
    }
    /// The front filter's bytes and the share of `probes` (IPv4) or
    /// `probes6` it passes, where the structure has one.
    fn filter_stats(&self, _probes: &[u32], _probes6: &[u128]) -> Option<(usize, f64)> {
        None
    }
    /// Whether the structure can prefetch its lines at all.
    fn can_prefetch(&self) -> bool {
        true
    }
}

/// The seed's "traditional" hash table: B buckets, each pointing to its own
/// heap array of IPv4 addresses searched linearly. A lookup reads the bucket
/// head, then the array it points to: two dependent misses. Heads are 16
/// bytes (pointer and length) where the seed's C heads were 8.
pub struct Chained {
    buckets: Vec<Box<[u32]>>,
    hasher: Hasher,
    shift: u32,
}

impl Chained {
    pub fn new(keys: &[u32], buckets: usize, hasher: Hasher) -> Self {
        let n = buckets.next_power_of_two();
        let mut t = Chained { buckets: Vec::new(), hasher, shift: 64 - n.trailing_zeros().max(1) };
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &k in keys {
            let b = (hasher.hash32(k) >> t.shift) as usize & (n - 1);
            if !lists[b].contains(&k) {
                lists[b].push(k);
            }
        }
        t.buckets = lists.into_iter().map(Vec::into_boxed_slice).collect();
        t
    }

    #[inline(always)]
    fn bucket(&self, k: u32) -> usize {
        (self.hasher.hash32(k) >> self.shift) as usize & (self.buckets.len() - 1)
    }
}

impl Classifier for Chained {
    fn prepare(&self, keys: &[u32], _: &mut Prepared) {
        for &k in keys {
            prefetch(&self.buckets[self.bucket(k)]);
        }
    }
    fn lookup(&self, keys: &[u32], out: &mut [bool], pf: bool) {
        let mut idx = [0usize; 2 * MAX_BATCH];
        for (kc, oc) in keys.chunks(2 * MAX_BATCH).zip(out.chunks_mut(2 * MAX_BATCH)) {
            for (i, &k) in idx.iter_mut().zip(kc) {
                *i = self.bucket(k);
                if pf {
                    prefetch(&self.buckets[*i]);
                }
            }
            for ((o, &k), &i) in oc.iter_mut().zip(kc).zip(&idx) {
                *o = self.buckets[i].contains(&k);
            }
        }
    }
    fn bytes(&self) -> usize {
        self.buckets.len() * size_of::<Box<[u32]>>() + self.buckets.iter().map(|b| b.len() * 4).sum::<usize>()
    }
}

/// `hashbrown::HashSet`: the well-kept general-purpose peer. It has no
/// prefetch API, so it is always looked up one key at a time.
pub struct Hashbrown(pub HashSet<u32>);

/// The IPv6 variant.
pub struct Hashbrown6(pub HashSet<u128>);

impl Classifier for Hashbrown {
    fn lookup(&self, keys: &[u32], out: &mut [bool], _: bool) {
        for (o, k) in out.iter_mut().zip(keys) {
            *o = self.0.contains(k);
        }
    }
    fn bytes(&self) -> usize {
        // Buckets of 4 bytes plus one control byte each.
        self.0.capacity() * 8 / 7 * 5
    }
    fn can_prefetch(&self) -> bool {
        false
    }
}

impl Classifier for Hashbrown6 {
    fn lookup(&self, _: &[u32], _: &mut [bool], _: bool) {
        unreachable!("IPv6 table")
    }
    fn lookup6(&self, keys: &[u128], out: &mut [bool], _: bool) {
        for (o, k) in out.iter_mut().zip(keys) {
            *o = self.0.contains(k);
        }
    }
    fn bytes(&self) -> usize {
        self.0.capacity() * 8 / 7 * 17
    }
    fn can_prefetch(&self) -> bool {
        false
    }
}

/// sluice's own [`AddressSet`].
pub struct Sluice(pub AddressSet);

impl Sluice {
    pub fn new(prefixes: &[Prefix], hasher: Hasher, max_load: f64) -> Self {
        Self::with_filter(prefixes, hasher, max_load, true)
    }
    pub fn with_filter(prefixes: &[Prefix], hasher: Hasher, max_load: f64, filter: bool) -> Self {
        Sluice(AddressSet::with_options(prefixes, Options { hasher, max_load, filter, ..Options::default() }))
    }
}

impl Classifier for Sluice {
    fn lookup(&self, keys: &[u32], out: &mut [bool], pf: bool) {
        self.0.contains_v4_batch(keys, out, keys.len().min(MAX_BATCH), pf);
    }
    fn prepare(&self, keys: &[u32], prep: &mut Prepared) {
        self.0.prepare_v4(keys, prep);
    }
    fn finish(&self, keys: &[u32], prep: &Prepared, out: &mut [bool]) {
        self.0.finish_v4(keys, prep, out);
    }
    fn lookup6(&self, keys: &[u128], out: &mut [bool], pf: bool) {
        self.0.contains_v6_batch(keys, out, keys.len().min(MAX_BATCH), pf);
    }
    fn prepare6(&self, keys: &[u128], prep: &mut Prepared) {
        self.0.prepare_v6(keys, prep);
    }
    fn finish6(&self, keys: &[u128], prep: &Prepared, out: &mut [bool]) {
        self.0.finish_v6(keys, prep, out);
    }
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
    fn filter_stats(&self, probes: &[u32], probes6: &[u128]) -> Option<(usize, f64)> {
        let share = self.0.filter_positive_share_v4(probes).or_else(|| self.0.filter_positive_share_v6(probes6))?;
        Some((self.0.filter_bytes(), share))
    }
}

/// `prefix_trie::PrefixSet` (IPv4 and IPv6): a well-kept prefix-trie peer,
/// answering membership by shortest-prefix match.
pub struct PrefixTrie(pub prefix_trie::PrefixSet<ipnet::Ipv4Net>, pub prefix_trie::PrefixSet<ipnet::Ipv6Net>);

impl PrefixTrie {
    pub fn new(prefixes: &[Prefix]) -> Self {
        let (mut v4, mut v6) = (prefix_trie::PrefixSet::new(), prefix_trie::PrefixSet::new());
        for p in prefixes {
            match *p {
                Prefix::V4 { addr, len } => {
                    if let Ok(net) = ipnet::Ipv4Net::new(addr.into(), len) {
                        v4.insert(net);
                    }
                }
                Prefix::V6 { addr, len } => {
                    if let Ok(net) = ipnet::Ipv6Net::new(addr.into(), len) {
                        v6.insert(net);
                    }
                }
            }
        }
        PrefixTrie(v4, v6)
    }
}

impl Classifier for PrefixTrie {
    fn lookup(&self, keys: &[u32], out: &mut [bool], _: bool) {
        for (o, &k) in out.iter_mut().zip(keys) {
            let host = ipnet::Ipv4Net::new(k.into(), 32).expect("/32 is valid");
            *o = self.0.get_spm(&host).is_some();
        }
    }
    fn lookup6(&self, keys: &[u128], out: &mut [bool], _: bool) {
        for (o, &k) in out.iter_mut().zip(keys) {
            let host = ipnet::Ipv6Net::new(k.into(), 128).expect("/128 is valid");
            *o = self.1.get_spm(&host).is_some();
        }
    }
    fn bytes(&self) -> usize {
        (self.0.len() + self.1.len()) * 40
    }
    fn can_prefetch(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Rng;
    use std::collections::HashSet as StdSet;

    #[test]
    fn all_structures_agree_with_the_reference() {
        let mut rng = Rng::new(5);
        let keys: Vec<u32> = (0..20_000).map(|_| rng.next_u64() as u32 & 0x00ff_ffff).collect();
        let reference: StdSet<u32> = keys.iter().copied().collect();
        let hosts: Vec<Prefix> = keys.iter().map(|&k| Prefix::V4 { addr: k, len: 32 }).collect();
        let structures: Vec<Box<dyn Classifier>> = vec![
            Box::new(Chained::new(&keys, 1024, Hasher::with_seed(1))),
            Box::new(Hashbrown(keys.iter().copied().collect())),
            Box::new(Sluice::new(&hosts, Hasher::with_seed(2), 0.5)),
            Box::new(PrefixTrie::new(&hosts)),
        ];
        let probes: Vec<u32> =
            (0..5000).map(|_| rng.next_u64() as u32 & 0x00ff_ffff).chain(keys[..500].iter().copied()).collect();
        for (i, s) in structures.iter().enumerate() {
            for pf in [false, true] {
                let mut out = vec![false; probes.len()];
                for (kc, oc) in probes.chunks(8).zip(out.chunks_mut(8)) {
                    s.lookup(kc, oc, pf);
                }
                for (k, o) in probes.iter().zip(&out) {
                    assert_eq!(*o, reference.contains(k), "structure {i} key {k:08x}");
                }
            }
        }
    }

    #[test]
    fn ipv6_structures_agree_with_the_reference() {
        let mut rng = Rng::new(6);
        let keys: Vec<u128> = (0..5000).map(|_| u128::from(rng.next_u64() & 0xffff) << 64).collect();
        let reference: StdSet<u128> = keys.iter().copied().collect();
        let hosts: Vec<Prefix> = keys.iter().map(|&k| Prefix::V6 { addr: k, len: 128 }).collect();
        let structures: Vec<Box<dyn Classifier>> = vec![
            Box::new(Hashbrown6(keys.iter().copied().collect())),
            Box::new(Sluice::new(&hosts, Hasher::with_seed(2), 0.5)),
        ];
        let probes: Vec<u128> = (0..3000).map(|_| u128::from(rng.next_u64() & 0xffff) << 64).collect();
        for s in &structures {
            let mut out = vec![false; probes.len()];
            let mut prep = Prepared::default();
            for (kc, oc) in probes.chunks(16).zip(out.chunks_mut(16)) {
                s.prepare6(kc, &mut prep);
                s.finish6(kc, &prep, oc);
            }
            for (k, o) in probes.iter().zip(&out) {
                assert_eq!(*o, reference.contains(k));
            }
        }
    }

    #[test]
    fn prefix_peers_agree() {
        let list = sluice_rules::parse_list("f", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false).unwrap().prefixes;
        let a = Sluice::new(&list, Hasher::with_seed(3), 0.5);
        let b = PrefixTrie::new(&list);
        let mut rng = Rng::new(9);
        let probes: Vec<u32> = (0..20_000).map(|_| rng.next_u64() as u32).collect();
        let (mut oa, mut ob) = (vec![false; probes.len()], vec![false; probes.len()]);
        a.lookup(&probes, &mut oa, true);
        b.lookup(&probes, &mut ob, false);
        assert_eq!(oa, ob);
        assert!(oa.iter().filter(|&&x| x).count() > 1000, "FireHOL covers a good share of IPv4");
    }
}
