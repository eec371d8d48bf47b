//! IPv6 prefix membership: a compressed multibit trie in the manner of
//! Poptrie (Asai and Ohara, SIGCOMM 2015), answering "is the address inside
//! any prefix" rather than a longest match.
//!
//! The prefixes are first merged into sorted disjoint ranges (kept: they
//! are what `persist` stores and what the trie is rebuilt from on load),
//! and each range is cut into the fewest aligned blocks, so no block lies
//! inside another. The root is a direct table, one `u32` per /16 (256 KiB),
//! with a bit per /16 beside it (8 KiB) saying which hold anything.
//! A /16 with longer blocks below it has a direct table of its own: rows
//! indexed by the next k bits (k from 1 to 12, one to two rows a block:
//! level compression, as in LC-tries and Poptrie's direct pointing). A row
//! is four 16-byte entries, one 64-byte line, each of which holds a block
//! whole (its bits past the row and its test's shift counts) or says
//! covered, so a row holds up to four blocks and a listed address costs
//! the root and one line, tested branch-free (AVX2: the whole row at once).
//! A row with more blocks names a node instead, rare (0.3% of the rows
//! holding anything on the bench's routing table, 0.1% on its blocklist).
//! Every node
//! consumes six address bits: a 64-bit `covered` vector (children wholly
//! inside a block), a 64-bit `children` vector (children with longer blocks
//! below) and a `leaves` vector (those of them holding a single block), the
//! child records stored contiguously from `base`, found by a popcount of
//! the `children` bits before the chunk, so a record is 32 bytes and a step
//! is one line. A leaf record is the block itself (path compression, as a
//! Patricia trie skips one-way branches).
//!
//! A pipelined lookup is two halves a batch apart. `prepare` keeps the
//! keys whose /16 holds something by a bitmap of the /16s (the others are
//! outside), then reads the kept keys' root entries and prefetches their
//! rows; `or_prepared` tests the rows, without a branch on any key's
//! outcome, and notes the keys at nodes; then it prefetches their records
//! and takes their walks, interleaved (AMAC) so their misses overlap.

use crate::exact::PREPARED_MAX;
const _: () = assert!(PREPARED_MAX <= 256, "key indexes are bytes");
const _: () = assert!(PREPARED_MAX.is_power_of_two(), "kept counts are masked by it");
use crate::mem::{plain_data, Table};
use crate::simd::prefetch;
use std::cell::Cell;

plain_data! {
    /// Six address bits: which of the 64 children are wholly covered and
    /// which have longer blocks below (never both), which of the latter are
    /// leaves, and where their records start.
    ///
    /// A leaf is a child whose subtree holds a single block: its record
    /// stores the block itself (`covered` and `children` the address's high
    /// and low halves, `leaves` the mask of the low half's block bits,
    /// `base` how far the high half shifts right to keep only its block
    /// bits, `pad` the length), so a lone /48 below a shared /28 costs one
    /// line instead of a chain of nodes with one child each, and its test is
    /// a few word operations with no 128-bit shift.
    #[repr(C, align(32))]
    pub(crate) struct Node {
        pub(crate) covered: u64,
        pub(crate) children: u64,
        pub(crate) leaves: u64,
        pub(crate) base: u32,
        pub(crate) pad: u32,
    }
}

impl Node {
    const EMPTY: Node = Node { covered: 0, children: 0, leaves: 0, base: 0, pad: 0 };

    /// The leaf record of a block longer than /16 (every block below the
    /// root is).
    fn leaf((addr, len): (u128, u8)) -> Node {
        debug_assert!(len > 16, "blocks below the root are longer than /16");
        let len = u32::from(len);
        let low_mask = if len > 64 { u64::MAX << (128 - len) } else { 0 };
        Node { covered: (addr >> 64) as u64, children: addr as u64, leaves: low_mask, base: 64 - len.min(64), pad: len }
    }

    /// As a leaf record: is `addr` inside its block?
    #[inline(always)]
    fn leaf_holds(&self, addr: u128) -> bool {
        let high = ((addr >> 64) as u64 ^ self.covered) >> self.base;
        let low = (addr as u64 ^ self.children) & self.leaves;
        high | low == 0
    }
}

const _: () = assert!(size_of::<Node>() == 32);

const ROOT_BITS: u32 = 16;
/// A bit per /16 (8 KiB).
type Present = [u64; (1 << ROOT_BITS) / 64];
/// A /16's direct table indexes at most this many more bits (4,096 rows,
/// 256 KiB).
const DIRECT_MAX_BITS: u32 = 12;
/// Walks in flight in a batch lookup ([`V6PrefixSet::or_batch`]).
const LANES: usize = 16;
/// A walk's "bits consumed" when its record is a leaf.
const AT_LEAF: u32 = u32::MAX;
const STRIDE: u32 = 6;
/// Root entries: `base << 6 | (64 - k)`, the /16's direct table of 2^k
/// rows (k >= 1) from row `base` in `direct`, with the shift that takes a
/// key's k bits after the /16 out of its first 64 bits shifted left by 16.
/// A /16 with nothing below it reads rows 0-1 (outside), one wholly
/// covered rows 2-3: every key reads the root and one row, whatever they
/// say, with no special case for a table of one row.
const ROOT_EMPTY: u32 = 64 - 1;
const ROOT_COVERED: u32 = 2 << 6 | (64 - 1);
plain_data! {
    /// A direct entry, 16 bytes. The low two bits of `word` are its kind:
    /// outside (0), a node (`word = record << 2 | 2`; records start at 1,
    /// record 0 being the sentinel) or a block (3): then `word` holds the
    /// block's first 64 bits shifted left past the bits the entry's row
    /// gives (16 + k, so at least 17 low bits are free) with its test's
    /// shift counts in bits 2-15, and `low` its last 64 bits. A covered
    /// entry is a block with nothing left to test (both counts 64).
    #[repr(C, align(16))]
    pub(crate) struct Direct {
        pub(crate) word: u64,
        pub(crate) low: u64,
    }
}

plain_data! {
    /// Four direct entries, one line: what a key's index in its /16's
    /// table picks. Read whole by `simd::rows`.
    #[repr(C, align(64))]
    pub(crate) struct Row {
        pub(crate) entries: [Direct; 4],
    }
}

const _: () = assert!(size_of::<Direct>() == 16 && size_of::<Row>() == 64);

pub(crate) const NODE: u64 = 2;
pub(crate) const BLOCK: u64 = 3;
/// A block entry's shift counts, in the low bits its position frees, seven
/// bits each: the right shift that keeps its bits in the key's first half
/// past the row (17 to 63), and the one that keeps the length's bits of
/// the second half (`128 - len` for a block longer than /64, else 64). A
/// count of 64 shifts every bit out, as AVX2's `vpsrlvq` does.
pub(crate) const HIGH_SHIFT_AT: u32 = 2;
pub(crate) const LOW_SHIFT_AT: u32 = 9;

/// The record a new node or leaf will take.
fn next_record(nodes: &[Node]) -> u32 {
    u32::try_from(nodes.len()).ok().filter(|&r| r < 1 << 29).expect("fewer than 2^29 records")
}

/// A new node over `blocks`, below their first `bits` bits.
fn push_node(blocks: &[(u128, u8)], bits: u32, nodes: &mut Vec<Node>) -> u32 {
    let r = next_record(nodes);
    nodes.push(Node::EMPTY);
    build(blocks, bits, r as usize, nodes);
    r
}

/// The bits of a /16's table index: the row of `addr` in a table of 2^k.
fn row_of(addr: u128, k: u32) -> usize {
    ((addr << ROOT_BITS) >> (128 - k)) as usize
}

impl Direct {
    /// Whether a key is inside this entry (a block holding it), without a
    /// branch: the key's first 64 bits past the row against the block's,
    /// shifted to keep the block's bits there, and its last 64 bits,
    /// shifted to keep those the length covers (a covered entry keeps
    /// none). `simd::rows` does the same four entries at a time.
    #[inline(always)]
    fn holds(self, rest: u64, low: u64) -> bool {
        let high = (rest ^ self.word).checked_shr((self.word >> HIGH_SHIFT_AT) as u32 & 127).unwrap_or(0);
        let low = (low ^ self.low).checked_shr((self.word >> LOW_SHIFT_AT) as u32 & 127).unwrap_or(0);
        (self.word & 3 == BLOCK) & (high | low == 0)
    }

    const OUTSIDE: Direct = Direct { word: 0, low: 0 };
    const COVERED: Direct = Direct { word: 64 << HIGH_SHIFT_AT | 64 << LOW_SHIFT_AT | BLOCK, low: 0 };

    /// The entry for a single `block` in a row that fixes its first `bits`
    /// bits (`bits` < its length).
    fn block((addr, len): (u128, u8), bits: u32) -> Direct {
        debug_assert!(u32::from(len) > bits && bits > 16 && bits < 64);
        let len = u32::from(len);
        let high_shift = u64::from(64 - (len.min(64) - bits));
        debug_assert!(high_shift >= u64::from(LOW_SHIFT_AT + 7), "the counts are shifted out");
        let low_shift = if len > 64 { u64::from(128 - len) } else { 64 };
        let shifts = high_shift << HIGH_SHIFT_AT | low_shift << LOW_SHIFT_AT;
        Direct { word: ((addr >> 64) as u64) << bits | shifts | BLOCK, low: addr as u64 }
    }

    /// A key's row, without a branch on the outcome: whether the key is
    /// inside, and whether it walks on to a node. `rest`: the key's first
    /// 64 bits past the row's, `low`: its last 64 bits.
    #[inline(always)]
    fn decide(row: &Row, rest: u64, low: u64) -> (bool, bool) {
        let inside = row.entries.iter().fold(false, |inside, d| inside | d.holds(rest, low));
        (inside, row.entries[0].word & 3 == NODE)
    }

    /// The walk of key `i`, whose row `decide` said is a node.
    #[inline(always)]
    fn walk(row: &Row, slot: Slot, i: usize) -> Walk {
        Walk { record: (row.entries[0].word >> 2) as u32, start: slot.start, key: i as u32 }
    }

    /// Fill a /16's table of 2^k rows from its `blocks` (sorted, disjoint,
    /// all longer than /16), its rows indexed by the k bits after the /16:
    /// rows wholly inside a block are covered; a row's up to four longer
    /// blocks are held one an entry; a row with more is a node over the
    /// bits after the first 16 + k, named by its first entry.
    fn fill(blocks: &[(u128, u8)], k: u32, table: &mut [Row], nodes: &mut Vec<Node>) {
        let bits = ROOT_BITS + k;
        let mut i = 0;
        while i < blocks.len() {
            let (addr, len) = blocks[i];
            let e = row_of(addr, k);
            if u32::from(len) <= bits {
                table[e..e + (1 << (bits - u32::from(len)))].fill(Row::COVERED);
                i += 1;
                continue;
            }
            let j = i + blocks[i..].partition_point(|&(a, l)| u32::from(l) > bits && row_of(a, k) == e);
            let row = &mut table[e].entries;
            if j - i > row.len() {
                let r = push_node(&blocks[i..j], bits, nodes);
                row[0] = Direct { word: u64::from(r) << 2 | NODE, low: 0 };
            } else {
                for (d, &b) in row.iter_mut().zip(&blocks[i..j]) {
                    *d = Direct::block(b, bits);
                }
            }
            i = j;
        }
    }
}

impl Row {
    const OUTSIDE: Row = Row { entries: [Direct::OUTSIDE; 4] };
    const COVERED: Row = Row { entries: [Direct::COVERED, Direct::OUTSIDE, Direct::OUTSIDE, Direct::OUTSIDE] };
}

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
    /// A bit per /16: whether its root entry is other than `ROOT_EMPTY`.
    present: Box<Present>,
    /// The /16s' direct tables, one after another.
    direct: Table<Row>,
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
        root.fill(ROOT_EMPTY);
        // Record 0 is the sentinel: no children, so a decided walk that
        // steps on stays decided, without a branch.
        let mut nodes: Vec<Node> = vec![Node::EMPTY];
        let direct = Self::fill_tables(&blocks, &mut root, &mut nodes);
        let mut table = Table::<Node>::zeroed(nodes.len());
        table.copy_from_slice(&nodes);
        let mut present = Box::new([0u64; (1 << ROOT_BITS) / 64]);
        for (top, _) in root.iter().enumerate().filter(|&(_, &r)| r != ROOT_EMPTY) {
            present[top >> 6] |= 1 << (top & 63);
        }
        V6PrefixSet { ranges, prefixes, root, present, direct, nodes: table }
    }

    /// The root entries and the /16s' direct tables of `blocks`.
    fn fill_tables(blocks: &[(u128, u8)], root: &mut [u32], nodes: &mut Vec<Node>) -> Table<Row> {
        let mut direct = vec![Row::OUTSIDE, Row::OUTSIDE, Row::COVERED, Row::COVERED];
        let mut at = 0;
        while at < blocks.len() {
            let (addr, len) = blocks[at];
            let slot = (addr >> (128 - ROOT_BITS)) as usize;
            if u32::from(len) <= ROOT_BITS {
                let n = 1usize << (ROOT_BITS - u32::from(len));
                root[slot..slot + n].fill(ROOT_COVERED);
                at += 1;
                continue;
            }
            // The longer blocks of this /16 get a direct table of one to two
            // rows a block (two for a lone block), fewer at the cap: a row
            // then holds half a block to one on average, and one with more
            // than four (a node) is rare. Two to four blocks a row measured 26% slower
            // on the bench's routing table, 8% on its blocklist (more nodes).
            let end = at + blocks[at..].partition_point(|&(a, _)| (a >> (128 - ROOT_BITS)) as usize == slot);
            let m = end - at;
            let k = (usize::BITS - m.leading_zeros()).clamp(1, DIRECT_MAX_BITS);
            let base = direct.len();
            direct.resize(base + (1 << k), Row::OUTSIDE);
            let base = u32::try_from(base).ok().filter(|&b| b < 1 << 26).expect("fewer than 2^26 direct rows");
            root[slot] = base << 6 | (64 - k);
            Direct::fill(&blocks[at..end], k, &mut direct[base as usize..], nodes);
            at = end;
        }
        let mut table = Table::<Row>::zeroed(direct.len());
        table.copy_from_slice(&direct);
        table
    }

    pub fn prefixes(&self) -> usize {
        self.prefixes
    }

    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Bytes of the trie (root, direct tables and records) and of the
    /// ranges it was built from.
    pub fn bytes(&self) -> usize {
        self.root.bytes() + size_of::<Present>() + self.direct.bytes() + self.nodes.bytes() + self.ranges.len() * 32
    }

    /// Records below the root: nodes and leaves.
    pub fn nodes(&self) -> usize {
        self.nodes.len() - 1
    }

    #[inline]
    pub fn contains(&self, addr: u128) -> bool {
        self.lookup(addr).0
    }

    /// Whether `addr` is inside, and how many records (below the direct
    /// tables) its walk read.
    #[inline(always)]
    fn lookup(&self, addr: u128) -> (bool, u32) {
        let slot = Self::direct_slot(self.root(), addr);
        let row = self.row(slot.row);
        let (inside, on) = Direct::decide(row, slot.rest, addr as u64);
        if inside || !on {
            return (inside, 0);
        }
        let walk = Direct::walk(row, slot, 0);
        let (mut n, mut start, mut steps) = (walk.record as usize, walk.start, 1);
        loop {
            match self.step(n, addr, start) {
                Step::Covered => return (true, steps),
                Step::Outside => return (false, steps),
                Step::Leaf(leaf) => return (self.nodes[leaf].leaf_holds(addr), steps + 1),
                Step::Next(next) => (n, start, steps) = (next, start + STRIDE, steps + 1),
            }
        }
    }

    /// The records a lookup of a listed address reads on average (each
    /// merged range's first address counted once): about 1 for lists
    /// spread thin, more where entries crowd into one /64.
    pub fn mean_steps(&self) -> f64 {
        let steps: u64 = self.ranges.iter().map(|r| u64::from(self.lookup(r.0).1)).sum();
        steps as f64 / self.ranges.len().max(1) as f64
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
            let next = node.base as usize + (node.children & ((1u64 << c) - 1)).count_ones() as usize;
            if node.leaves >> c & 1 != 0 {
                Step::Leaf(next)
            } else {
                Step::Next(next)
            }
        }
    }

    /// Where `key`'s row is. A key whose /16 holds nothing reads an
    /// outside row, one wholly covered a covered row, so every key can read
    /// the root and one row, without a branch.
    #[inline(always)]
    fn direct_slot(root: &[u32; 1 << ROOT_BITS], key: u128) -> Slot {
        let r = root[(key >> (128 - ROOT_BITS)) as usize];
        Self::slot_of(r, (key >> 64) as u64)
    }

    /// Row `row` of the direct tables.
    #[inline(always)]
    fn row(&self, row: u32) -> &Row {
        &self.direct[row as usize]
    }

    /// The direct slot of a key with first 64 bits `high` and root entry `r`.
    #[inline(always)]
    fn slot_of(r: u32, high: u64) -> Slot {
        // The table's k bits index its rows; the key's bits past them are
        // what an entry tests (x86's shift takes -shift as 64 - shift = k).
        let shift = r & 63;
        let sub = ((high << ROOT_BITS) >> shift) as u32;
        let rest = (high << ROOT_BITS).wrapping_shl(shift.wrapping_neg());
        Slot { rest, row: (r >> 6) + sub, start: ROOT_BITS + 64 - shift }
    }

    /// The root as the fixed-size table it is (so indexing it by a key's
    /// first 16 bits needs no bounds check).
    #[inline(always)]
    fn root(&self) -> &[u32; 1 << ROOT_BITS] {
        (&self.root[..]).try_into().expect("the root has an entry per /16")
    }

    /// First half of a pipelined lookup: keep the keys whose /16 holds
    /// something, read their root entries and prefetch their rows. By
    /// [`V6PrefixSet::or_prepared`], a batch later, those lines have
    /// arrived.
    ///
    /// A key whose /16 holds nothing is decided here (outside) and not kept:
    /// the kept keys are packed, without a branch, so the finish reads only
    /// theirs (as the exact tables' front filter keeps only possible
    /// members). Traffic to unlisted /16s costs a bit of the bitmap.
    #[inline]
    pub(crate) fn prepare(&self, keys: &[u128], walks: &mut Walks) {
        assert!(keys.len() <= PREPARED_MAX, "at most {PREPARED_MAX} keys a batch");
        let (root, present) = (self.root(), &*self.present);
        // Two passes: the first keeps the keys whose /16 holds something,
        // by a bit each (8 KiB, where the root is 256 KiB: random traffic
        // would miss it), in a few instructions a key; the second reads the
        // kept keys' root entries (their /16s' lines are few and hot),
        // computes their rows and prefetches them.
        let mut kept = 0;
        for (i, &key) in keys.iter().enumerate() {
            let top = (key >> (128 - ROOT_BITS)) as usize;
            // kept <= i < PREPARED_MAX, a power of two: the mask only tells
            // the compiler so (no bounds check).
            walks.keys[kept & (PREPARED_MAX - 1)] = i as u8;
            kept += (present[top >> 6] >> (top & 63)) as usize & 1;
        }
        walks.kept = kept;
        for (j, &i) in walks.keys[..kept].iter().enumerate() {
            let key = keys[usize::from(i)];
            let slot = Self::slot_of(root[(key >> (128 - ROOT_BITS)) as usize], (key >> 64) as u64);
            walks.rest[j] = slot.rest;
            walks.row[j] = slot.row;
            walks.low[j] = key as u64;
            prefetch(self.direct.addr_of(slot.row as usize));
        }
    }

    /// Second half: `out[i] |= contains(keys[i])`. Test the kept keys'
    /// rows, noting the keys at nodes, then take those through the records,
    /// interleaved.
    ///
    /// Without a branch on any key's outcome until then: in-list and
    /// unlisted keys come mixed at random, and a mispredicted branch per key
    /// cost more than the walk (all keys in-list measured faster than half).
    #[inline]
    pub(crate) fn or_prepared(&self, keys: &[u128], walks: &Walks, out: &mut [bool]) {
        // A row's four entries at once where the CPU has AVX2; elsewhere
        // one entry at a time, below.
        let (done, on) = crate::simd::rows(&self.direct, walks, out);
        self.finish_in(keys, walks, out, done, on)
    }

    /// The finish from kept key `done` on, `on` of the earlier ones noted
    /// as at nodes.
    #[inline(always)]
    fn finish_in(&self, keys: &[u128], walks: &Walks, out: &mut [bool], done: usize, on: usize) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        let (live, noted) = (&walks.live, &walks.on);
        // Most keys are decided by their row: for them this loop only
        // writes the outcome. Those at a node are noted (by their place in
        // the kept list) and their walks taken up below.
        let mut n = on;
        let kept = walks.kept;
        let rows = walks.rest[done..kept].iter().zip(&walks.row[done..kept]).zip(&walks.keys[done..kept]);
        for (j, ((&rest, &row), &i)) in (done..).zip(rows) {
            let i = usize::from(i);
            let (inside, at_node) = Direct::decide(self.row(row), rest, keys[i] as u64);
            out[i] |= inside;
            // n <= j < PREPARED_MAX: the mask only tells the compiler so.
            noted[n & (PREPARED_MAX - 1)].set(j as u8);
            n += usize::from(at_node);
        }
        let root = self.root();
        for (at, j) in noted[..n].iter().enumerate() {
            let i = usize::from(walks.keys[usize::from(j.get())]);
            let slot = Self::direct_slot(root, keys[i]);
            let walk = Direct::walk(self.row(slot.row), slot, i);
            prefetch(self.nodes.addr_of(walk.record as usize));
            live[at].set(walk);
        }
        self.interleave(keys, out, &live[..n]);
    }

    /// `out[i] |= contains(keys[i])`, every walk from the root; without
    /// `prefetch_lines` one key at a time, nothing prefetched (the baseline
    /// the benchmark's `--prefetch none` measures).
    #[inline]
    pub fn or_batch(&self, keys: &[u128], out: &mut [bool], prefetch_lines: bool) {
        assert_eq!(keys.len(), out.len(), "one output per key");
        if !prefetch_lines {
            for (&k, o) in keys.iter().zip(out.iter_mut()) {
                *o |= self.contains(k);
            }
            return;
        }
        let mut walks = Walks::default();
        for (keys, out) in keys.chunks(PREPARED_MAX).zip(out.chunks_mut(PREPARED_MAX)) {
            self.prepare(keys, &mut walks);
            self.or_prepared(keys, &walks, out);
        }
    }

    /// The walks' cold steps, interleaved in the manner of AMAC (Kocberber
    /// et al., VLDB 2015): `LANES` keys walk at once, each visit takes one
    /// step of one key and prefetches its next record, and a key that
    /// finishes hands its lane to the next walk. So about `LANES` misses are
    /// always in flight, however unequal the walks' depths. Each walk's
    /// record is prefetched already. A walk of the batch level by level,
    /// where the last levels have few keys left and wait a whole miss each,
    /// measured the same as 16 lanes before leaves (19.5 against 20.9 Mpps
    /// all in-list, 22.3 against 21.9 half); with the direct tables, 16 and
    /// 32 lanes measured the same.
    #[inline(always)]
    fn interleave(&self, keys: &[u128], out: &mut [bool], walks: &[Cell<Walk>]) {
        let mut pending = walks.iter().map(Cell::get);
        // An idle lane has no walk left. Only as many lanes as walks are
        // visited: in most batches walks at nodes are few.
        let mut lanes = [None; LANES];
        let width = walks.len().min(LANES);
        for lane in lanes[..width].iter_mut() {
            *lane = pending.next();
        }
        let mut live = width;
        while live > 0 {
            for lane in lanes[..width].iter_mut() {
                let Some(walk) = *lane else { continue };
                let i = walk.key as usize;
                let node = &self.nodes[walk.record as usize];
                if walk.start == AT_LEAF {
                    out[i] |= node.leaf_holds(keys[i]);
                } else {
                    let c = chunk(keys[i], walk.start);
                    out[i] |= node.covered >> c & 1 != 0;
                    if node.children >> c & 1 != 0 {
                        let n = node.base + (node.children & ((1u64 << c) - 1)).count_ones();
                        prefetch(self.nodes.addr_of(n as usize));
                        let start = if node.leaves >> c & 1 != 0 { AT_LEAF } else { walk.start + STRIDE };
                        *lane = Some(Walk { record: n, start, key: walk.key });
                        continue;
                    }
                }
                *lane = pending.next();
                live -= usize::from(lane.is_none());
            }
        }
    }
}

/// Where a key's walk stands: at a record, a node with `start` bits
/// consumed or a leaf (`start` is `AT_LEAF`); record 0 when decided.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Walk {
    record: u32,
    start: u32,
    /// The key's index in its batch.
    key: u32,
}

/// What `prepare` hands to `finish`: which keys are inside already, and
/// the walks still to take, in key order.
#[derive(Clone, Debug)]
pub(crate) struct Walks {
    /// The keys `prepare` kept (those whose /16 holds something), packed:
    /// each one's index in the batch, its first 64 bits past its row, that
    /// row and its last 64 bits.
    pub(crate) keys: [u8; PREPARED_MAX],
    pub(crate) rest: [u64; PREPARED_MAX],
    pub(crate) row: [u32; PREPARED_MAX],
    pub(crate) low: [u64; PREPARED_MAX],
    pub(crate) kept: usize,
    /// The finish's own lists, kept here so they are not zeroed on every
    /// batch: the kept keys at nodes (their places in the lists above),
    /// and their walks.
    pub(crate) on: [Cell<u8>; PREPARED_MAX],
    live: [Cell<Walk>; PREPARED_MAX],
}

impl Default for Walks {
    fn default() -> Self {
        Walks {
            keys: [0; PREPARED_MAX],
            rest: [0; PREPARED_MAX],
            row: [0; PREPARED_MAX],
            low: [0; PREPARED_MAX],
            kept: 0,
            on: [const { Cell::new(0) }; PREPARED_MAX],
            live: [const { Cell::new(Walk { record: 0, start: 0, key: 0 }) }; PREPARED_MAX],
        }
    }
}

/// A key's row in the direct tables, the bits it fixes (16 + k, the
/// direct table's k) and the key's first 64 bits past them.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    rest: u64,
    row: u32,
    start: u32,
}

enum Step {
    Covered,
    Outside,
    Leaf(usize),
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
/// contiguously before any is filled, so each node's children sit together;
/// a child with a single block is a leaf.
fn build(blocks: &[(u128, u8)], start: u32, at: usize, nodes: &mut Vec<Node>) {
    let end_bits = start + STRIDE;
    let (mut covered, mut children, mut leaves) = (0u64, 0u64, 0u64);
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
        if j - i == 1 {
            leaves |= 1 << c;
        }
        groups.push((i, j));
        i = j;
    }
    let base = nodes.len();
    nodes.resize(base + groups.len(), Node::EMPTY);
    let base32 = u32::try_from(base).expect("fewer than 2^32 nodes");
    nodes[at] = Node { covered, children, leaves, base: base32, pad: 0 };
    for (k, (i, j)) in groups.into_iter().enumerate() {
        if j - i == 1 {
            nodes[base + k] = Node::leaf(blocks[i]);
        } else {
            build(&blocks[i..j], end_bits, base + k, nodes);
        }
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

    /// Every lookup path against a scan of the prefixes, on `probes`.
    fn check(prefixes: &[(u128, u8)], probes: &[u128], pf: bool) -> Result<(), TestCaseError> {
        check_set(&V6PrefixSet::new(prefixes), prefixes, probes, pf)
    }

    fn check_set(set: &V6PrefixSet, prefixes: &[(u128, u8)], probes: &[u128], pf: bool) -> Result<(), TestCaseError> {
        let mut out = vec![false; probes.len()];
        set.or_batch(probes, &mut out, pf);
        // Pipelined: the walks `prepare` starts, resumed by `or_prepared`.
        let mut walks = Walks::default();
        let mut piped = vec![false; probes.len()];
        // And with every entry read one at a time (as without AVX2).
        let mut scalar = vec![false; probes.len()];
        let chunks =
            probes.chunks(PREPARED_MAX).zip(piped.chunks_mut(PREPARED_MAX)).zip(scalar.chunks_mut(PREPARED_MAX));
        for ((keys, out), one) in chunks {
            set.prepare(keys, &mut walks);
            set.or_prepared(keys, &walks, out);
            set.finish_in(keys, &walks, one, 0, 0);
        }
        for (((&a, &o), &p), &one) in probes.iter().zip(&out).zip(&piped).zip(&scalar) {
            let want = prefixes.iter().any(|&(p, l)| a & mask(l) == p);
            prop_assert_eq!(set.contains(a), want, "{:032x}", a);
            prop_assert_eq!(o, want, "batch {:032x}", a);
            prop_assert_eq!(p, want, "prepared {:032x}", a);
            prop_assert_eq!(one, want, "one at a time {:032x}", a);
            // The ranges (persisted) agree too.
            let i = set.ranges.partition_point(|r| r.0 <= a);
            prop_assert_eq!(i > 0 && a <= set.ranges[i - 1].1, want);
        }
        // The prefixes' own first and last addresses, the trie's edges.
        for &(p, l) in prefixes {
            prop_assert!(set.contains(p) && set.contains(p | !mask(l)));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn agrees_with_linear_scan(prefixes in proptest::collection::vec((arb_addr(), 0u8..=128), 0..60),
                                   probes in proptest::collection::vec(arb_addr(), 1..300),
                                   pf in any::<bool>()) {
            let prefixes: Vec<(u128, u8)> = prefixes.iter().map(|&(a, l)| (a & mask(l), l)).collect();
            check(&prefixes, &probes, pf)?;
        }

        /// Sparse lists, as routing tables and blocklists are: random
        /// addresses in a few /16s, so blocks sit alone as leaves at every
        /// level, the hot ones included, and probes that share a prefix's
        /// first bits and differ after them (near misses walk to its leaf).
        #[test]
        fn sparse_lists_and_near_misses(prefixes in proptest::collection::vec((0u128..3, any::<u128>(), 17u8..=128), 1..40),
                                        flips in proptest::collection::vec((any::<prop::sample::Index>(), 16u32..128, any::<u128>()), 1..300),
                                        pf in any::<bool>()) {
            let prefixes: Vec<(u128, u8)> = prefixes
                .iter()
                .map(|&(top, a, l)| ((top << 112 | a >> 16) & mask(l), l))
                .collect();
            let probes: Vec<u128> = flips
                .iter()
                .map(|(at, from, bits)| prefixes[at.index(prefixes.len())].0 ^ (bits >> from))
                .collect();
            check(&prefixes, &probes, pf)?;
        }
    }

    /// A routing-table-sized list in two /16s, so their direct tables take
    /// the most bits (12), against the scan on near misses and random keys.
    #[test]
    fn full_direct_tables_agree_with_linear_scan() {
        let mut rng = crate::xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = move || u128::from(rng());
        let lens = [29u8, 32, 40, 44, 47, 48, 48, 48, 55, 56, 64, 128];
        let prefixes: Vec<(u128, u8)> = (0..20_000)
            .map(|_| {
                let top = [0x2a00u128, 0x2001][(next() % 2) as usize];
                let len = lens[(next() % lens.len() as u128) as usize];
                ((top << 112 | (next() << 64 | next()) >> 16) & mask(len), len)
            })
            .collect();
        let set = V6PrefixSet::new(&prefixes);
        assert!(64 - (set.root[0x2a00] & 63) == DIRECT_MAX_BITS && 64 - (set.root[0x2001] & 63) == DIRECT_MAX_BITS);
        let probes: Vec<u128> = (0..4_000)
            .map(|i| {
                let (p, _) = prefixes[(next() % prefixes.len() as u128) as usize];
                if i % 4 == 0 {
                    0x2a00u128 << 112 | next() << 48 | next()
                } else {
                    p ^ (next() << 64 | next()) >> (16 + next() % 112)
                }
            })
            .collect();
        check(&prefixes, &probes, true).unwrap();
        // The listed lookups read at most about one record each.
        assert!(set.mean_steps() < 1.5, "{}", set.mean_steps());
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
        // A lone /48 is held in its /16's one row, no record below.
        let set = V6PrefixSet::new(&[(0x2001_0db8_0001u128 << 80, 48)]);
        assert_eq!(set.nodes(), 0);
        assert!(set.contains(0x2001_0db8_0001u128 << 80 | 77) && !set.contains(0x2001_0db8_0002u128 << 80));
    }
}
