//! [`PSet`]: a persistent hash set (a hash array mapped trie, Bagwell's
//! HAMT) for a runtime set's delta. A clone is one reference count, and a
//! change to a clone copies only the nodes on its path (O(log32 n) nodes of
//! at most 32 slots), never the whole set. That is what lets a commit
//! publish a delta of a million elements in O(change): the published copy
//! and the control side's share every node the change did not touch, and
//! the published one never changes (a node shared with it is copied before
//! it is written, `Arc::make_mut`).
//!
//! A lookup walks at most one node per 5 bits of a 64-bit seeded hash
//! (a million elements: 4 or 5 nodes, the top ones in cache), without
//! allocating or locking. Keys whose 64-bit hashes are equal (never seen in
//! practice; the seed is random per set) share a collision node.
//!
//! `Elements`' tests compare it with `HashSet` on random operations, and
//! `tests::equals_a_btreeset` compares it with a `BTreeSet`, old clones
//! included.

use foldhash::fast::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// Bits of the hash consumed per level.
const BITS: u32 = 5;

#[derive(Clone, Debug)]
enum Slot<K> {
    Leaf(K),
    Sub(Arc<Node<K>>),
}

#[derive(Clone, Debug)]
enum Node<K> {
    /// Slot `i` of 32 is present when bit `i` is set; `slots` holds the
    /// present ones in bit order (a node holds only what it has).
    Branch { bitmap: u32, slots: Box<[Slot<K>]> },
    /// Keys whose hashes are equal in all 64 bits.
    Collision(Vec<K>),
}

/// A persistent hash set of small `Copy` keys (see the module comment).
/// `S` is the hasher (seeded per set; the tests use a poor one to make
/// collisions).
#[derive(Clone, Debug)]
pub struct PSet<K, S = RandomState> {
    root: Arc<Node<K>>,
    len: usize,
    hasher: S,
}

impl<K, S: Default> Default for PSet<K, S> {
    fn default() -> Self {
        PSet { root: Arc::new(Node::Branch { bitmap: 0, slots: Box::new([]) }), len: 0, hasher: S::default() }
    }
}

fn index(h: u64, shift: u32) -> u32 {
    ((h >> shift) & 31) as u32
}

/// The slot position of bit `bit` in a node whose bitmap is `bitmap`.
fn pos(bitmap: u32, bit: u32) -> usize {
    (bitmap & (bit - 1)).count_ones() as usize
}

impl<K: Copy + Eq + Hash, S: BuildHasher + Clone + Default> PSet<K, S> {
    pub fn new() -> Self {
        PSet::default()
    }

    fn hash(&self, k: &K) -> u64 {
        self.hasher.hash_one(k)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `k` is in the set. No allocation, no lock: the judge's probe.
    #[inline]
    pub fn contains(&self, k: &K) -> bool {
        if self.len == 0 {
            return false;
        }
        let h = self.hash(k);
        let mut node = &*self.root;
        let mut shift = 0;
        loop {
            match node {
                Node::Branch { bitmap, slots } => {
                    let bit = 1u32 << index(h, shift);
                    if bitmap & bit == 0 {
                        return false;
                    }
                    match &slots[pos(*bitmap, bit)] {
                        Slot::Leaf(x) => return x == k,
                        Slot::Sub(n) => node = n,
                    }
                    shift += BITS;
                }
                Node::Collision(v) => return v.contains(k),
            }
        }
    }

    /// Adds `k`; false if it was there (then nothing is copied).
    pub fn insert(&mut self, k: K) -> bool {
        if self.contains(&k) {
            return false;
        }
        let h = self.hash(&k);
        let hasher = &self.hasher;
        insert_at(Arc::make_mut(&mut self.root), k, h, 0, &|x: &K| hasher.hash_one(x));
        self.len += 1;
        true
    }

    /// Removes `k`; false if it was not there (then nothing is copied).
    pub fn remove(&mut self, k: &K) -> bool {
        if !self.contains(k) {
            return false;
        }
        let h = self.hash(k);
        remove_at(Arc::make_mut(&mut self.root), k, h, 0);
        self.len -= 1;
        true
    }

    /// Every key, in no particular order.
    pub fn iter(&self) -> Iter<'_, K> {
        Iter { stack: vec![(&*self.root, 0)] }
    }

    pub fn clear(&mut self) {
        *self = PSet { hasher: self.hasher.clone(), ..PSet::default() };
    }
}

/// Inserts `k` (known absent) below `node`, at `shift` bits into its hash.
fn insert_at<K: Copy + Eq>(node: &mut Node<K>, k: K, h: u64, shift: u32, hash: &dyn Fn(&K) -> u64) {
    match node {
        Node::Collision(v) => v.push(k),
        Node::Branch { bitmap, slots } => {
            let bit = 1u32 << index(h, shift);
            let at = pos(*bitmap, bit);
            if *bitmap & bit == 0 {
                let mut v = Vec::with_capacity(slots.len() + 1);
                v.extend_from_slice(&slots[..at]);
                v.push(Slot::Leaf(k));
                v.extend_from_slice(&slots[at..]);
                *slots = v.into_boxed_slice();
                *bitmap |= bit;
                return;
            }
            match &mut slots[at] {
                Slot::Sub(n) => insert_at(Arc::make_mut(n), k, h, shift + BITS, hash),
                Slot::Leaf(x) => {
                    let x = *x;
                    slots[at] = Slot::Sub(Arc::new(pair(x, hash(&x), k, h, shift + BITS)));
                }
            }
        }
    }
}

/// A node holding `a` and `b` (different keys) at `shift` bits.
fn pair<K>(a: K, ha: u64, b: K, hb: u64, shift: u32) -> Node<K> {
    if shift >= 64 {
        return Node::Collision(vec![a, b]);
    }
    let (ia, ib) = (index(ha, shift), index(hb, shift));
    if ia == ib {
        let sub = Slot::Sub(Arc::new(pair(a, ha, b, hb, shift + BITS)));
        return Node::Branch { bitmap: 1 << ia, slots: Box::new([sub]) };
    }
    let slots = if ia < ib { [Slot::Leaf(a), Slot::Leaf(b)] } else { [Slot::Leaf(b), Slot::Leaf(a)] };
    Node::Branch { bitmap: (1 << ia) | (1 << ib), slots: Box::new(slots) }
}

/// Removes `k` (known present) below `node`.
fn remove_at<K: Copy + Eq>(node: &mut Node<K>, k: &K, h: u64, shift: u32) {
    match node {
        Node::Collision(v) => {
            if let Some(i) = v.iter().position(|x| x == k) {
                v.swap_remove(i);
            }
        }
        Node::Branch { bitmap, slots } => {
            let bit = 1u32 << index(h, shift);
            let at = pos(*bitmap, bit);
            match &mut slots[at] {
                Slot::Sub(n) => {
                    let n = Arc::make_mut(n);
                    remove_at(n, k, h, shift + BITS);
                    // A node left with one key becomes that key again, so
                    // deletes keep the trie as shallow as inserts made it.
                    let single = match n {
                        Node::Branch { slots, .. } if slots.len() == 1 => match slots[0] {
                            Slot::Leaf(x) => Some(x),
                            Slot::Sub(_) => None,
                        },
                        Node::Collision(v) if v.len() == 1 => Some(v[0]),
                        _ => None,
                    };
                    if let Some(x) = single {
                        slots[at] = Slot::Leaf(x);
                    }
                }
                Slot::Leaf(_) => {
                    let mut v = Vec::with_capacity(slots.len() - 1);
                    v.extend_from_slice(&slots[..at]);
                    v.extend_from_slice(&slots[at + 1..]);
                    *slots = v.into_boxed_slice();
                    *bitmap &= !bit;
                }
            }
        }
    }
}

/// [`PSet::iter`].
pub struct Iter<'a, K> {
    stack: Vec<(&'a Node<K>, usize)>,
}

impl<K: Copy> Iterator for Iter<'_, K> {
    type Item = K;
    fn next(&mut self) -> Option<K> {
        loop {
            let (node, i) = self.stack.last_mut()?;
            match node {
                Node::Branch { slots, .. } => match slots.get(*i) {
                    None => {
                        self.stack.pop();
                    }
                    Some(s) => {
                        *i += 1;
                        match s {
                            Slot::Leaf(k) => return Some(*k),
                            Slot::Sub(n) => self.stack.push((n, 0)),
                        }
                    }
                },
                Node::Collision(v) => match v.get(*i) {
                    None => {
                        self.stack.pop();
                    }
                    Some(k) => {
                        *i += 1;
                        return Some(*k);
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A hasher that keeps only `k % 7` and `k % 3` of a key, so that keys
    /// meet at every level and in collision nodes.
    #[derive(Clone, Default)]
    struct Poor;
    struct PoorHasher(u64);
    impl std::hash::Hasher for PoorHasher {
        fn finish(&self) -> u64 {
            // Keys part at the first level (7 ways) and again at the
            // ninth (3 ways); the other bits are equal, so those that meet
            // there go all the way down to a collision node.
            (self.0 % 7) | ((self.0 % 3) << 40) | 0xdead_0000_0000_0000
        }
        fn write(&mut self, b: &[u8]) {
            for &x in b {
                self.0 = self.0.wrapping_mul(31).wrapping_add(u64::from(x));
            }
        }
    }
    impl BuildHasher for Poor {
        type Hasher = PoorHasher;
        fn build_hasher(&self) -> PoorHasher {
            PoorHasher(0)
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        /// Keep a clone and the reference's copy, to check later that
        /// changes made since did not reach it.
        Snapshot,
    }

    fn arb_op(space: u32) -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..space).prop_map(Op::Insert),
            3 => (0..space).prop_map(Op::Remove),
            1 => Just(Op::Snapshot),
        ]
    }

    fn check<S: BuildHasher + Clone + Default>(ops: &[Op], space: u32) -> Result<(), TestCaseError> {
        let mut s: PSet<u32, S> = PSet::new();
        let mut model = BTreeSet::new();
        let mut snaps: Vec<(PSet<u32, S>, BTreeSet<u32>)> = Vec::new();
        for op in ops {
            match *op {
                Op::Insert(k) => prop_assert_eq!(s.insert(k), model.insert(k), "insert {}", k),
                Op::Remove(k) => prop_assert_eq!(s.remove(&k), model.remove(&k), "remove {}", k),
                Op::Snapshot => snaps.push((s.clone(), model.clone())),
            }
            prop_assert_eq!(s.len(), model.len());
        }
        snaps.push((s, model));
        for (s, model) in &snaps {
            for k in 0..space {
                prop_assert_eq!(s.contains(&k), model.contains(&k), "contains {}", k);
            }
            let mut got: Vec<u32> = s.iter().collect();
            got.sort_unstable();
            prop_assert_eq!(got, model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(s.len(), model.len());
        }
        Ok(())
    }

    proptest! {
        /// Random inserts and removes: membership, length and iteration
        /// equal a BTreeSet's, and every clone taken on the way still
        /// equals the BTreeSet as it was then (nothing written through).
        #[test]
        fn equals_a_btreeset(ops in prop::collection::vec(arb_op(4096), 1..600)) {
            check::<RandomState>(&ops, 4096)?;
        }

        /// The same with a hasher that makes most keys collide: deep
        /// paths, collision nodes, and their collapse on removal.
        #[test]
        fn equals_a_btreeset_when_hashes_collide(ops in prop::collection::vec(arb_op(64), 1..300)) {
            check::<Poor>(&ops, 64)?;
        }
    }

    #[test]
    fn a_large_set_and_its_clone_part() {
        let mut a: PSet<u32> = PSet::new();
        for k in 0..100_000u32 {
            a.insert(k.wrapping_mul(2_654_435_761));
        }
        let b = a.clone();
        for k in 0..50_000u32 {
            assert!(a.remove(&k.wrapping_mul(2_654_435_761)));
        }
        assert_eq!((a.len(), b.len()), (50_000, 100_000));
        assert!(b.contains(&0) && !a.contains(&0));
        assert_eq!(b.iter().count(), 100_000);
        assert_eq!(a.iter().count(), 50_000);
    }
}
