//! A bounded flow table with an idle timeout, expiring in O(1) amortised
//! per packet, and the two expiry walks it replaces (`sluice-bench
//! flowtable` measures them: [`bench`]).
//!
//! Every flow has the same idle timeout, so the flow that expires first is
//! always the one seen least recently. The table keeps its flows on one
//! intrusive list in the order they were last seen (a packet moves its
//! flow to the back), and expiry pops from the front while the front is
//! stale: each flow is popped at most once per life, so the cost is O(1)
//! amortised per packet and nothing is walked. (A timer wheel would be
//! needed for per-flow timeouts; one timeout makes the ordered list exact
//! and simpler.) The same list gives the bounded memory: when the table is
//! full, a new flow evicts the front, the oldest.
//!
//! The walks, for comparison: [`FlowTable::expire_walk`] visits every slot
//! (the O(n) fix of the PMC post), [`FlowTable::expire_walk_quadratic`]
//! finds each next used slot by scanning the used-slot bitmap from its
//! start, a byte at a time (the post's O(n^2) flowcleaner).
//!
//! Time is a `u64` in any unit the caller likes (the bench uses ticks) and
//! must not go backwards; a flow last seen at `t` is stale from
//! `t + timeout` on.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::{BuildHasher, Hash};

pub mod bench;

const NIL: u32 = u32::MAX;

/// A flow's 5-tuple; IPv4 addresses are stored IPv4-mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}

impl FlowKey {
    pub fn v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        let map = |a: u32| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        FlowKey { src: map(src), dst: map(dst), sport, dport, proto }
    }
}

/// What a packet did to its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// A live flow, refreshed.
    Hit,
    /// No flow: a new one.
    New,
    /// A flow that had gone stale but was not yet reaped: counted as
    /// expired and started anew.
    Restarted,
}

/// Lifetime counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub inserted: u64,
    /// Stale flows removed (by expiry, by a packet of theirs, or to make
    /// room).
    pub expired: u64,
    /// Live flows removed to make room for a new one (the table was full).
    pub evicted: u64,
}

struct Entry<K, V> {
    kv: Option<(K, V)>,
    last_seen: u64,
    /// Least recently seen toward `prev`; free slots chain through `next`.
    prev: u32,
    next: u32,
}

/// A flow table of at most `capacity` flows with one idle timeout.
pub struct FlowTable<K, V> {
    entries: Vec<Entry<K, V>>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    /// A bit per slot, set while it holds a flow: what the walks read.
    used: Vec<u8>,
    /// The least recently seen flow, and the most.
    front: u32,
    back: u32,
    free: u32,
    len: usize,
    capacity: usize,
    timeout: u64,
    now: u64,
    stats: Stats,
}

impl<K: Hash + Eq + Clone, V> FlowTable<K, V> {
    /// Memory for `capacity` flows is reserved up front and never grows.
    pub fn new(capacity: usize, timeout: u64) -> Self {
        let capacity = capacity.clamp(1, NIL as usize - 1);
        FlowTable {
            entries: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
            hasher: DefaultHashBuilder::default(),
            used: Vec::with_capacity(capacity.div_ceil(8)),
            front: NIL,
            back: NIL,
            free: NIL,
            len: 0,
            capacity,
            timeout,
            now: 0,
            stats: Stats::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Bytes the table holds at capacity (slots, index, bitmap).
    pub fn memory_bytes(&self) -> usize {
        self.capacity * (std::mem::size_of::<Entry<K, V>>() + std::mem::size_of::<u32>() + 1) + self.capacity / 8
    }

    fn stale(&self, last_seen: u64, now: u64) -> bool {
        last_seen.saturating_add(self.timeout) <= now
    }

    fn find(&self, key: &K) -> Option<u32> {
        let h = self.hasher.hash_one(key);
        self.index.find(h, |&i| self.entries[i as usize].kv.as_ref().is_some_and(|(k, _)| k == key)).copied()
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.entries[i as usize].prev, self.entries[i as usize].next);
        match p {
            NIL => self.front = n,
            p => self.entries[p as usize].next = n,
        }
        match n {
            NIL => self.back = p,
            n => self.entries[n as usize].prev = p,
        }
    }

    fn link_back(&mut self, i: u32) {
        let e = &mut self.entries[i as usize];
        e.prev = self.back;
        e.next = NIL;
        match self.back {
            NIL => self.front = i,
            b => self.entries[b as usize].next = i,
        }
        self.back = i;
    }

    /// Removes slot `i`'s flow from every structure and frees the slot.
    fn remove(&mut self, i: u32) -> (K, V) {
        self.unlink(i);
        let (k, v) = self.entries[i as usize].kv.take().expect("slot holds a flow");
        let h = self.hasher.hash_one(&k);
        self.index.find_entry(h, |&j| j == i).expect("indexed").remove();
        self.used[i as usize / 8] &= !(1 << (i % 8));
        self.entries[i as usize].next = self.free;
        self.free = i;
        self.len -= 1;
        (k, v)
    }

    /// A packet of flow `key` at `now`: refreshes the flow, or starts it
    /// with `init()`. When the table is full, a new flow first removes the
    /// least recently seen one (counted as expired if it was stale, else as
    /// evicted).
    pub fn touch(&mut self, key: K, now: u64, init: impl FnOnce() -> V) -> (&mut V, Touch) {
        let now = now.max(self.now);
        self.now = now;
        let mut how = Touch::New;
        if let Some(i) = self.find(&key) {
            if !self.stale(self.entries[i as usize].last_seen, now) {
                self.entries[i as usize].last_seen = now;
                if self.back != i {
                    self.unlink(i);
                    self.link_back(i);
                }
                let v = &mut self.entries[i as usize].kv.as_mut().expect("slot holds a flow").1;
                return (v, Touch::Hit);
            }
            self.remove(i);
            self.stats.expired += 1;
            how = Touch::Restarted;
        }
        if self.len == self.capacity {
            let oldest = self.front;
            let stale = self.stale(self.entries[oldest as usize].last_seen, now);
            self.remove(oldest);
            if stale {
                self.stats.expired += 1;
            } else {
                self.stats.evicted += 1;
            }
        }
        let i = match self.free {
            NIL => {
                self.entries.push(Entry { kv: None, last_seen: 0, prev: NIL, next: NIL });
                if self.used.len() * 8 < self.entries.len() {
                    self.used.push(0);
                }
                (self.entries.len() - 1) as u32
            }
            f => {
                self.free = self.entries[f as usize].next;
                f
            }
        };
        let h = self.hasher.hash_one(&key);
        self.entries[i as usize].kv = Some((key, init()));
        self.entries[i as usize].last_seen = now;
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(h, i, |&j| {
            hasher.hash_one(&entries[j as usize].kv.as_ref().expect("indexed slots hold a flow").0)
        });
        self.used[i as usize / 8] |= 1 << (i % 8);
        self.link_back(i);
        self.len += 1;
        self.stats.inserted += 1;
        (&mut self.entries[i as usize].kv.as_mut().expect("just set").1, how)
    }

    /// The flow's state if it is live at `now` (a stale flow not yet reaped
    /// is not returned).
    pub fn get(&self, key: &K, now: u64) -> Option<&V> {
        let i = self.find(key)?;
        let e = &self.entries[i as usize];
        (!self.stale(e.last_seen, now)).then(|| &e.kv.as_ref().expect("slot holds a flow").1)
    }

    /// Removes every flow stale at `now`, oldest first, handing each to
    /// `f`: O(1) per flow removed, nothing else visited.
    pub fn expire(&mut self, now: u64, mut f: impl FnMut(K, V)) -> usize {
        self.now = self.now.max(now);
        let mut n = 0;
        while self.front != NIL && self.stale(self.entries[self.front as usize].last_seen, now) {
            let (k, v) = self.remove(self.front);
            f(k, v);
            n += 1;
        }
        self.stats.expired += n as u64;
        n as usize
    }

    /// The same result as [`expire`](Self::expire) (in slot order) by
    /// visiting every slot: O(capacity) per call.
    pub fn expire_walk(&mut self, now: u64, mut f: impl FnMut(K, V)) -> usize {
        self.now = self.now.max(now);
        let mut n = 0;
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if e.kv.is_some() && self.stale(e.last_seen, now) {
                let (k, v) = self.remove(i as u32);
                f(k, v);
                n += 1;
            }
        }
        self.stats.expired += n as u64;
        n
    }

    /// The same result again, the way the PMC post's flowcleaner found it:
    /// each next flow to check is found by scanning the used-slot bitmap
    /// from its first byte. O(capacity^2 / 8) byte reads per call.
    pub fn expire_walk_quadratic(&mut self, now: u64, mut f: impl FnMut(K, V)) -> usize {
        self.now = self.now.max(now);
        let mut n = 0;
        let mut after = 0usize;
        loop {
            // The first used slot at `after` or beyond, from byte 0 on.
            let mut found = None;
            for (b, &byte) in self.used.iter().enumerate() {
                if byte == 0 {
                    continue;
                }
                // Bits below `after` were checked already: mask them off.
                let skip = after.saturating_sub(b * 8).min(8);
                let bits = (u32::from(byte) >> skip) << skip;
                if bits != 0 {
                    found = Some(b * 8 + bits.trailing_zeros() as usize);
                    break;
                }
            }
            let Some(i) = found else { break };
            if self.stale(self.entries[i].last_seen, now) {
                let (k, v) = self.remove(i as u32);
                f(k, v);
                n += 1;
            }
            after = i + 1;
        }
        self.stats.expired += n as u64;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The plain reference: a map scanned in full for everything.
    struct Model {
        flows: BTreeMap<u8, (u64, u64, u32)>, // key -> (last_seen, order, packets)
        order: u64,
        capacity: usize,
        timeout: u64,
        stats: Stats,
    }

    impl Model {
        fn stale(&self, t: u64, now: u64) -> bool {
            t + self.timeout <= now
        }
        fn touch(&mut self, k: u8, now: u64) -> Touch {
            self.order += 1;
            let mut how = Touch::New;
            if let Some(&(t, _, n)) = self.flows.get(&k) {
                if !self.stale(t, now) {
                    self.flows.insert(k, (now, self.order, n + 1));
                    return Touch::Hit;
                }
                self.flows.remove(&k);
                self.stats.expired += 1;
                how = Touch::Restarted;
            }
            if self.flows.len() == self.capacity {
                let (&oldest, &(t, _, _)) = self.flows.iter().min_by_key(|(_, &(t, o, _))| (t, o)).unwrap();
                self.flows.remove(&oldest);
                if self.stale(t, now) {
                    self.stats.expired += 1;
                } else {
                    self.stats.evicted += 1;
                }
            }
            self.flows.insert(k, (now, self.order, 1));
            self.stats.inserted += 1;
            how
        }
        fn expire(&mut self, now: u64) -> Vec<(u8, u32)> {
            let mut gone: Vec<(u64, u64, u8, u32)> = self
                .flows
                .iter()
                .filter(|(_, &(t, _, _))| self.stale(t, now))
                .map(|(&k, &(t, o, n))| (t, o, k, n))
                .collect();
            gone.sort();
            for g in &gone {
                self.flows.remove(&g.2);
            }
            self.stats.expired += gone.len() as u64;
            gone.into_iter().map(|g| (g.2, g.3)).collect()
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Packet(u8),
        Tick(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![4 => (0u8..24).prop_map(Op::Packet), 1 => (0u8..4).prop_map(Op::Tick)],
            0..300,
        )
    }

    proptest! {
        #[test]
        fn expiry_matches_a_map_scanned_in_full(
            ops in ops(), capacity in 1usize..20, timeout in 1u64..8, walk in 0u8..3,
        ) {
            let mut t: FlowTable<u8, u32> = FlowTable::new(capacity, timeout);
            let mut m = Model { flows: BTreeMap::new(), order: 0, capacity, timeout, stats: Stats::default() };
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Packet(k) => {
                        let (v, how) = t.touch(k, now, || 0);
                        *v += 1;
                        prop_assert_eq!(how, m.touch(k, now));
                    }
                    Op::Tick(dt) => {
                        now += u64::from(dt);
                        let mut got = Vec::new();
                        match walk {
                            0 => t.expire(now, |k, v| got.push((k, v))),
                            1 => t.expire_walk(now, |k, v| got.push((k, v))),
                            _ => t.expire_walk_quadratic(now, |k, v| got.push((k, v))),
                        };
                        let want = m.expire(now);
                        if walk != 0 {
                            // The walks go in slot order; only the ordered list is oldest first.
                            got.sort();
                            let mut w = want.clone();
                            w.sort();
                            prop_assert_eq!(got, w);
                        } else {
                            prop_assert_eq!(got, want);
                        }
                    }
                }
                // Every lookup agrees after every step (stale flows are not live).
                for k in 0u8..24 {
                    let want = m.flows.get(&k).filter(|&&(tt, _, _)| !m.stale(tt, now)).map(|x| x.2);
                    prop_assert_eq!(t.get(&k, now).copied(), want, "key {}", k);
                }
                prop_assert_eq!(t.len(), m.flows.len());
                prop_assert!(t.len() <= capacity);
                prop_assert_eq!(t.stats(), m.stats);
            }
        }
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_seen() {
        let mut t: FlowTable<u32, ()> = FlowTable::new(3, 100);
        for k in 0..3 {
            t.touch(k, k as u64, || ());
        }
        t.touch(0, 5, || ()); // 1 is now the oldest
        assert_eq!(t.touch(9, 6, || ()).1, Touch::New);
        assert!(t.get(&1, 6).is_none());
        assert!(t.get(&0, 6).is_some() && t.get(&2, 6).is_some() && t.get(&9, 6).is_some());
        assert_eq!(t.stats(), Stats { inserted: 4, expired: 0, evicted: 1 });
    }
}
