//! Exact-match sets of IPv4 and IPv6 addresses: open addressing over 64-byte
//! key buckets, filtered by a one-byte tag per slot.
//!
//! An IPv4 bucket holds 16 keys, an IPv6 bucket 4. Every slot also has a
//! one-byte tag (8 hash bits, never 0; 0 marks an empty slot) kept apart in a
//! tag array, 64 tags to a cache line, so one line of tags covers 4 IPv4 or
//! 16 IPv6 buckets and is an eighth (IPv4) or a sixteenth (IPv6) of the
//! table's size. A lookup compares the home bucket's tags with SSE2 and reads
//! the key bucket only for slots whose tag matches: an address that is not
//! in the set (the common case for most traffic) costs one line of an array
//! small enough to stay in the last-level cache, and a member one more line.
//! Swiss tables (hashbrown) use the same control-byte idea; here the tags
//! and keys are laid out per bucket so both lines can be prefetched in
//! batches.
//!
//! Slots fill from the front and a bucket that overflows spills into the next
//! one (linear probing over buckets), so a lookup stops at the first bucket
//! whose last tag is empty. Tables are never modified after building, so
//! there are no tombstones. Building sorts keys by home bucket (a counting
//! sort) and fills the table front to back, streaming through memory.

use crate::filter::BlockFilter;
use crate::hash::Hasher;
use crate::mem::{plain_data, Table};
use crate::simd::{match_tags, prefetch};
use std::cell::Cell;

/// Most keys per lookup batch (stack arrays of this size hold the phases).
pub const MAX_BATCH: usize = 64;
pub(crate) const TAGS_PER_LINE: usize = 64;

plain_data! {
    #[repr(C, align(64))]
    pub(crate) struct Bucket4 {
        pub(crate) keys: [u32; 16],
    }
}

plain_data! {
    #[repr(C, align(64))]
    pub(crate) struct Bucket6 {
        pub(crate) keys: [u128; 4],
    }
}

const _: () = assert!(size_of::<Bucket4>() == 64 && align_of::<Bucket4>() == 64);
const _: () = assert!(size_of::<Bucket6>() == 64 && align_of::<Bucket6>() == 64);

/// What differs between the IPv4 and IPv6 tables.
pub(crate) trait Slots: crate::mem::Zeroable {
    type Key: Copy + Eq + Ord + Default;
    /// Keys per bucket; divides 64 so a bucket's tags never straddle lines.
    const SLOTS: usize;
    fn hash(h: &Hasher, k: Self::Key) -> u64;
    /// Each key's filter probe: its hash, then [`BlockFilter::probe`].
    #[inline(always)]
    fn probes(h: &Hasher, f: &BlockFilter, keys: &[Self::Key], out: &mut [u64]) {
        for (q, &k) in out.iter_mut().zip(keys) {
            *q = f.probe(Self::hash(h, k));
        }
    }
    fn key(&self, i: usize) -> Self::Key;
    fn slot_mut(&mut self, i: usize) -> &mut Self::Key;
}

impl Slots for Bucket4 {
    type Key = u32;
    const SLOTS: usize = 16;
    #[inline(always)]
    fn hash(h: &Hasher, k: u32) -> u64 {
        h.hash32(k)
    }
    /// Eight keys at a time with AVX-512 where the CPU has it.
    #[inline(always)]
    fn probes(h: &Hasher, f: &BlockFilter, keys: &[u32], out: &mut [u64]) {
        crate::simd::probes_v4(h, f, keys, out)
    }
    #[inline(always)]
    fn key(&self, i: usize) -> u32 {
        self.keys[i]
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
    fn key(&self, i: usize) -> u128 {
        self.keys[i]
    }
    fn slot_mut(&mut self, i: usize) -> &mut u128 {
        &mut self.keys[i]
    }
}

/// The table itself, generic over the bucket kind.
///
/// Fields are crate-visible for `persist`, which rebuilds a table from its
/// saved bytes and checks there every invariant lookups rely on: `buckets`
/// a power of two (at least a line of tags, below 2^31), `mask`/`shift`
/// derived from it, `tags` one per slot, a bucket's used slots at its front
/// with nonzero tags, every key reachable from its home bucket through full
/// buckets, and at least one bucket not full (so a probe ends).
pub(crate) struct OpenTable<B: Slots> {
    /// One tag per slot, bucket after bucket (64-byte aligned, so a
    /// bucket's tags never straddle a line).
    pub(crate) tags: Table<u8>,
    pub(crate) buckets: Table<B>,
    pub(crate) shift: u32,
    pub(crate) mask: usize,
    pub(crate) hasher: Hasher,
    pub(crate) len: usize,
    /// The front filter, when built with one (see [`crate::filter`]); not
    /// saved, rebuilt from the keys on load.
    pub(crate) filter: Option<BlockFilter>,
}

/// Where a key lives: its home bucket and its tag (8 bytes: tables have
/// fewer than 2^32 buckets).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Place {
    pub(crate) bucket: u32,
    pub(crate) tag: u8,
}

/// Most keys one [`Prepared`] holds.
pub const PREPARED_MAX: usize = 2 * MAX_BATCH;

/// Keys over which the share of filter positives is judged.
const FILTER_WINDOW: u32 = 256;
/// Above this share of positives (in percent) the filter stops paying: a
/// positive costs the filter line and then the table's two lines. Below it
/// the filter pays even for members, since it lets a positive's tag line
/// and key bucket be fetched together rather than one after the other.
/// `bench classify --listed 0.3,...,0.9` with the skip on and off (6M
/// hosts, pipelined): never skipping gave 32 against 26 Mpps at 30%
/// listed, 25-26 against 22 at 50%, 23.7 against 22 at 60%, but 21.5
/// against 23.4 at 70% and 18.4 against 24-25 at 90%.
const FILTER_MAX_POSITIVE_PCT: u32 = 65;
/// Keys looked up without the filter before it is tried again.
const FILTER_SKIP_KEYS: u32 = 16 * 1024;

/// Tables whose filter statistics one thread keeps between
/// `contains_batch` calls (direct-mapped by address).
const ADAPT_TABLES: usize = 8;

/// One table's filter statistics between `contains_batch` calls.
#[derive(Clone, Copy, Default)]
struct AdaptState {
    table: usize,
    skip: u32,
    seen: u32,
    passed: u32,
}

thread_local! {
    static LOOKUP_SCRATCH: std::cell::RefCell<(Prepared, [AdaptState; ADAPT_TABLES])> =
        std::cell::RefCell::new((Prepared::default(), [AdaptState::default(); ADAPT_TABLES]));
}

/// The hashed form of a batch of keys, made by `prepare` and consumed by
/// `finish`: the two halves of a software-pipelined lookup, so a key is
/// hashed once even when its lines are prefetched a batch ahead.
///
/// It also carries the lookup context's filter statistics: each caller (a
/// thread) owns its `Prepared`s, so counting needs no shared atomics. When
/// more than 65% of a window's keys pass the filter, the next 16k keys skip
/// it (prefetching the table's tag lines at once, as without a filter),
/// then it is tried again.
#[derive(Clone, Debug)]
pub struct Prepared {
    places: [Place; PREPARED_MAX],
    /// With the filter: each key's filter probe ([`BlockFilter::probe`]:
    /// block and bits); its place is computed only if the filter passes it.
    probes: [u64; PREPARED_MAX],
    /// With the filter: the keys it passed (indices), which `finish` looks up.
    maybe: [u8; PREPARED_MAX],
    n_maybe: usize,
    len: usize,
    /// Whether `prepare` went through the filter (prefetched filter lines).
    filtered: bool,
    /// Keys left to look up without the filter.
    skip: Cell<u32>,
    /// Keys tested by the filter in this window, and those that passed.
    seen: Cell<u32>,
    passed: Cell<u32>,
    /// Off: never skip the filter (for tests and measurement).
    adaptive: bool,
    /// IPv6 prefix walks, as far as `prepare` took them ([`crate::prefix6`]).
    pub(crate) walks: crate::prefix6::Walks,
}

impl Default for Prepared {
    fn default() -> Self {
        Prepared {
            places: [Place::default(); PREPARED_MAX],
            probes: [0; PREPARED_MAX],
            maybe: [0; PREPARED_MAX],
            n_maybe: 0,
            len: 0,
            filtered: false,
            skip: Cell::new(0),
            seen: Cell::new(0),
            passed: Cell::new(0),
            adaptive: true,
            walks: crate::prefix6::Walks::default(),
        }
    }
}

impl Prepared {
    /// Whether the filter may be skipped when it stops paying (default on).
    pub fn set_adaptive(&mut self, on: bool) {
        self.adaptive = on;
        if !on {
            self.skip.set(0);
        }
    }

    /// Skip the filter for the next `keys` keys, as if it had stopped paying.
    pub fn skip_filter_for(&mut self, keys: u32) {
        self.skip.set(keys);
    }

    /// Whether the last `prepare` used the filter.
    pub fn used_filter(&self) -> bool {
        self.filtered
    }

    /// Count a filtered batch: `n` keys, `passed` of them possible members.
    #[inline(always)]
    fn account(&self, n: usize, passed: usize) {
        if !self.adaptive {
            return;
        }
        let (seen, pos) = (self.seen.get() + n as u32, self.passed.get() + passed as u32);
        if seen < FILTER_WINDOW {
            self.seen.set(seen);
            self.passed.set(pos);
            return;
        }
        if pos * 100 > seen * FILTER_MAX_POSITIVE_PCT {
            self.skip.set(FILTER_SKIP_KEYS);
        }
        self.seen.set(0);
        self.passed.set(0);
    }
}

impl<B: Slots> OpenTable<B> {
    /// Build from keys (duplicates allowed) at most `max_load` full.
    fn build(keys: &[B::Key], max_load: f64, hasher: Hasher, filter: bool) -> Self {
        let max_load = max_load.clamp(0.05, 0.9);
        let want = ((keys.len() as f64 / (B::SLOTS as f64 * max_load)).ceil() as usize).max(1);
        // At least one full line of tags; fewer than 2^32 buckets.
        let n = want.next_power_of_two().max(TAGS_PER_LINE / B::SLOTS);
        assert!(n <= 1 << 31, "table of {n} buckets is too large");
        let bits = n.trailing_zeros();
        let mut t: OpenTable<B> = OpenTable {
            tags: Table::zeroed(n * B::SLOTS),
            buckets: Table::zeroed(n),
            shift: 64 - bits,
            mask: n - 1,
            hasher,
            len: 0,
            filter: None,
        };
        // Counting sort by home bucket: O(n) and cache-friendly, where a
        // comparison sort of 6M (bucket, key) pairs costs most of a second.
        let mut homes: Vec<u32> = Vec::with_capacity(keys.len());
        let mut starts = vec![0u32; n + 1];
        for &k in keys {
            let h = t.place(k).bucket;
            homes.push(h);
            starts[h as usize + 1] += 1;
        }
        for b in 0..n {
            starts[b + 1] += starts[b];
        }
        let mut grouped = vec![B::Key::default(); keys.len()];
        let mut next = starts.clone();
        for (&k, &h) in keys.iter().zip(&homes) {
            grouped[next[h as usize] as usize] = k;
            next[h as usize] += 1;
        }
        drop(homes);
        // Fill front to back; `cur`/`used` is the bucket being filled.
        let (mut cur, mut used) = (0usize, 0usize);
        let mut wrapped = Vec::new();
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
                t.len += 1;
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
                t.put(cur, used, k);
                used += 1;
            }
        }
        // Keys that spilled past the last bucket wrap to the front, into the
        // first free slot (every bucket before it is full, as lookups expect).
        for k in wrapped {
            let mut b = 0;
            loop {
                if let Some(i) = (0..B::SLOTS).find(|&i| t.tag_at(b, i) == 0) {
                    t.put(b, i, k);
                    break;
                }
                b = (b + 1) & t.mask;
            }
        }
        if filter {
            t.rebuild_filter();
        }
        t
    }

    /// Build the front filter from the stored keys (after building, and on
    /// load: the filter is not saved).
    pub(crate) fn rebuild_filter(&mut self) {
        let mut f = BlockFilter::with_capacity(self.len);
        for (b, bucket) in self.buckets.iter().enumerate() {
            for i in 0..B::SLOTS {
                if self.tags[b * B::SLOTS + i] != 0 {
                    f.insert(f.probe(B::hash(&self.hasher, bucket.key(i))));
                }
            }
        }
        self.filter = Some(f);
    }

    fn put(&mut self, b: usize, i: usize, k: B::Key) {
        *self.buckets[b].slot_mut(i) = k;
        self.tags[b * B::SLOTS + i] = self.place(k).tag;
    }

    fn tag_at(&self, b: usize, i: usize) -> u8 {
        self.tags[b * B::SLOTS + i]
    }

    #[inline(always)]
    pub(crate) fn place(&self, k: B::Key) -> Place {
        self.place_of(B::hash(&self.hasher, k))
    }

    #[inline(always)]
    fn place_of(&self, h: u64) -> Place {
        // Bucket from the top bits, tag from bits 32-39: independent of each
        // other for any table of up to 2^24 buckets.
        let tag = (h >> 32) as u8;
        Place { bucket: ((h >> self.shift) as usize & self.mask) as u32, tag: tag | u8::from(tag == 0) }
    }

    /// The tags of bucket `b`.
    #[inline(always)]
    fn bucket_tags(&self, b: usize) -> &[u8] {
        &self.tags[b * B::SLOTS..][..B::SLOTS]
    }

    #[inline(always)]
    fn tag_line_addr(&self, b: usize) -> *const u8 {
        self.tags.addr_of(b * B::SLOTS)
    }

    /// Matching slots of the home bucket (a bit per slot), and whether that
    /// bucket is full (the key may have spilled onward).
    #[inline(always)]
    fn first_look(&self, p: Place) -> (u32, bool) {
        let tags = self.bucket_tags(p.bucket as usize);
        (match_tags(tags, p.tag), tags[B::SLOTS - 1] != 0)
    }

    #[inline(always)]
    fn keys_match(&self, b: usize, mut m: u32, k: B::Key) -> bool {
        let bucket = &self.buckets[b];
        while m != 0 {
            if bucket.key(m.trailing_zeros() as usize) == k {
                return true;
            }
            m &= m - 1;
        }
        false
    }

    /// Full lookup from the home bucket onward.
    #[inline(always)]
    fn probe(&self, p: Place, k: B::Key) -> bool {
        let mut b = p.bucket as usize;
        loop {
            let tags = self.bucket_tags(b);
            if self.keys_match(b, match_tags(tags, p.tag), k) {
                return true;
            }
            if tags[B::SLOTS - 1] == 0 {
                return false;
            }
            b = (b + 1) & self.mask;
        }
    }

    #[inline(always)]
    fn contains(&self, k: B::Key) -> bool {
        self.probe(self.place(k), k)
    }

    /// Phase 1: hash `keys` (at most [`PREPARED_MAX`]) and, when asked,
    /// prefetch each home bucket's tag line; with the filter, see
    /// [`OpenTable::prepare_filtered`].
    #[inline(always)]
    fn prepare(&self, keys: &[B::Key], prep: &mut Prepared, prefetch_lines: bool) {
        assert!(keys.len() <= PREPARED_MAX, "at most {PREPARED_MAX} keys per prepared batch");
        prep.len = keys.len();
        let skip = prep.skip.get_mut();
        prep.filtered = false;
        if let Some(f) = &self.filter {
            if *skip == 0 {
                return self.prepare_filtered(f, keys, prep, prefetch_lines);
            }
            *skip = skip.saturating_sub(keys.len() as u32);
        }
        for (p, &k) in prep.places.iter_mut().zip(keys) {
            *p = self.place(k);
            if prefetch_lines {
                prefetch(self.tag_line_addr(p.bucket as usize));
            }
        }
    }

    /// Phases 1 and 2 with the filter, both in `prepare`: hash every key
    /// and prefetch its filter block; then test the filter (a batch at a
    /// time, [`BlockFilter::select`]) and, only for possible members,
    /// compute the place and prefetch the tag line and the key bucket. The
    /// filter blocks come from the last-level cache, so the test waits
    /// about one LLC latency; the table lines (DRAM) get a whole pipelined
    /// batch before `finish` (phase 3) reads them. (Testing the filter in
    /// `finish` instead, a whole batch after the prefetch, left a
    /// positive's DRAM lines no time to arrive: 27-29 against 36-53 Mpps
    /// at 6M hosts, alternating runs.)
    #[inline(always)]
    fn prepare_filtered(&self, f: &BlockFilter, keys: &[B::Key], prep: &mut Prepared, pf: bool) {
        prep.filtered = true;
        B::probes(&self.hasher, f, keys, &mut prep.probes[..keys.len()]);
        if pf {
            for &q in &prep.probes[..keys.len()] {
                prefetch(f.line_addr(q));
            }
        }
        let n = f.select(&prep.probes[..keys.len()], &mut prep.maybe);
        for &i in &prep.maybe[..n] {
            let i = usize::from(i);
            // Hashed again: cheaper for the few positives than keeping
            // every key's hash beside its probe.
            let p = self.place(keys[i]);
            prep.places[i] = p;
            if pf {
                prefetch(self.tag_line_addr(p.bucket as usize));
                prefetch(self.buckets.addr_of(p.bucket as usize));
            }
        }
        prep.n_maybe = n;
        prep.account(keys.len(), n);
    }

    /// Phase 3 with the filter: only the keys it passed touch the table.
    #[inline(always)]
    fn finish_filtered(&self, keys: &[B::Key], prep: &Prepared, out: &mut [bool]) {
        out.fill(false);
        for &i in &prep.maybe[..prep.n_maybe] {
            let i = usize::from(i);
            out[i] = self.probe(prep.places[i], keys[i]);
        }
    }

    /// Phase 2 compares every key's home tags and prefetches the key bucket
    /// of each key with a candidate slot; phase 3 compares those keys and
    /// probes onward from full buckets. (Queueing only the keys with a
    /// candidate, so phase 3 skips the rest, measured ~8% slower: two
    /// branch-free passes beat one pass with a data-dependent branch.)
    #[inline(always)]
    fn finish(&self, keys: &[B::Key], prep: &Prepared, out: &mut [bool], prefetch_lines: bool) {
        assert!(keys.len() == prep.len && out.len() == prep.len, "finish the keys that were prepared");
        if prep.filtered {
            return self.finish_filtered(keys, prep, out);
        }
        let mut masks = [0u32; PREPARED_MAX];
        let mut full = [false; PREPARED_MAX];
        for ((p, m), f) in prep.places[..prep.len].iter().zip(masks.iter_mut()).zip(full.iter_mut()) {
            (*m, *f) = self.first_look(*p);
            if prefetch_lines && *m != 0 {
                prefetch(self.buckets.addr_of(p.bucket as usize));
            }
        }
        for i in 0..prep.len {
            let p = prep.places[i];
            let b = p.bucket as usize;
            out[i] = (masks[i] != 0 && self.keys_match(b, masks[i], keys[i]))
                || (full[i] && self.probe(Place { bucket: ((b + 1) & self.mask) as u32, tag: p.tag }, keys[i]));
        }
    }

    /// Batched lookup. Callers such as the engine look a set up a batch at
    /// a time, each call too short for the filter's skip to judge, so the
    /// filter statistics carry over between calls: per thread, in a small
    /// cache keyed by the table's address (the `Prepared` itself is reused
    /// too, not rebuilt per call). A table that reuses a dropped one's
    /// address inherits its statistics, which only steers the path taken.
    #[inline(always)]
    fn contains_batch(&self, keys: &[B::Key], out: &mut [bool], batch: usize, prefetch_lines: bool) {
        let id = std::ptr::from_ref(self) as usize;
        LOOKUP_SCRATCH.with_borrow_mut(|(prep, states)| {
            let state = &mut states[(id >> 6) % ADAPT_TABLES];
            if state.table != id {
                *state = AdaptState { table: id, ..AdaptState::default() };
            }
            prep.skip.set(state.skip);
            prep.seen.set(state.seen);
            prep.passed.set(state.passed);
            let chunk = batch.clamp(1, MAX_BATCH);
            for (kc, oc) in keys.chunks(chunk).zip(out.chunks_mut(chunk)) {
                self.prepare(kc, prep, prefetch_lines);
                self.finish(kc, prep, oc, prefetch_lines);
            }
            (state.skip, state.seen, state.passed) = (prep.skip.get(), prep.seen.get(), prep.passed.get());
        });
    }

    /// Buckets that are full, and the most buckets any lookup can read.
    fn probe_stats(&self) -> (usize, usize) {
        let n = self.buckets.len();
        let full = (0..n).filter(|&b| self.tag_at(b, B::SLOTS - 1) != 0).count();
        let (mut longest, mut run) = (0, 0);
        for b in 0..2 * n {
            run = if self.tag_at(b % n, B::SLOTS - 1) != 0 { run + 1 } else { 0 };
            longest = longest.max(run + 1);
        }
        (full, longest.min(n))
    }
}

/// Layout facts about a built table, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub entries: usize,
    pub buckets: usize,
    /// Tags and keys together.
    pub bytes: usize,
    /// The tag array alone: what a lookup of an absent key reads.
    pub tag_bytes: usize,
    pub huge_pages: bool,
    /// Buckets that are full (their keys may spill into the next bucket).
    pub full_buckets: usize,
    /// Most buckets any lookup can read.
    pub longest_probe: usize,
    /// The front filter's bytes (0 without one).
    pub filter_bytes: usize,
}

fn info<B: Slots>(t: &OpenTable<B>) -> TableInfo {
    let (full_buckets, longest_probe) = t.probe_stats();
    TableInfo {
        entries: t.len,
        buckets: t.buckets.len(),
        bytes: t.buckets.bytes() + t.tags.bytes(),
        tag_bytes: t.tags.bytes(),
        huge_pages: t.buckets.huge_pages(),
        full_buckets,
        longest_probe,
        filter_bytes: t.filter.as_ref().map_or(0, BlockFilter::bytes),
    }
}

/// Default fill: at most half the slots, so almost no bucket is full and a
/// lookup almost never reads a second bucket. Alternating runs of
/// `bench classify --structure sluice --max-load 0.5|0.75|0.85` gave 38.9
/// and 39.3 Mpps at 0.5 against 35.2-35.6 at 0.75 and 0.85.
pub const DEFAULT_MAX_LOAD: f64 = 0.5;

macro_rules! exact_set {
    ($(#[$doc:meta])* $name:ident, $bucket:ty, $key:ty) => {
        $(#[$doc])*
        pub struct $name(pub(crate) OpenTable<$bucket>);

        impl $name {
            /// Build with the default load, random hash keys and a front filter.
            pub fn new(keys: &[$key]) -> Self {
                Self::with_options(keys, DEFAULT_MAX_LOAD, Hasher::random())
            }
            /// With a front filter ([`crate::filter`]).
            pub fn with_options(keys: &[$key], max_load: f64, hasher: Hasher) -> Self {
                Self::with_filter(keys, max_load, hasher, true)
            }
            pub fn with_filter(keys: &[$key], max_load: f64, hasher: Hasher, filter: bool) -> Self {
                $name(OpenTable::build(keys, max_load, hasher, filter))
            }
            /// Whether the table has a front filter.
            pub fn has_filter(&self) -> bool {
                self.0.filter.is_some()
            }
            /// The share of `keys` (meant to be non-members) the filter lets
            /// through: its false-positive rate. `None` without a filter.
            pub fn filter_positive_share(&self, keys: &[$key]) -> Option<f64> {
                let f = self.0.filter.as_ref()?;
                let h = &self.0.hasher;
                let pass = keys.iter().filter(|&&k| f.may_contain(f.probe(<$bucket>::hash(h, k)))).count();
                Some(pass as f64 / keys.len().max(1) as f64)
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
            /// Hash `keys` into `prep` and prefetch their tag lines (with the
            /// filter: test it and prefetch only possible members' table
            /// lines): the first half of a pipelined lookup (see [`Prepared`]).
            #[inline]
            pub fn prepare(&self, keys: &[$key], prep: &mut Prepared) {
                self.0.prepare(keys, prep, true)
            }
            /// The second half: `out[i] = contains(keys[i])` for the keys
            /// given to `prepare`, prefetching candidate key buckets.
            #[inline]
            pub fn finish(&self, keys: &[$key], prep: &Prepared, out: &mut [bool]) {
                self.0.finish(keys, prep, out, true)
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

/// An IPv4 exact table as a reader that is not this code sees it:
/// `sluice shield`'s kernel program looks addresses up in the bytes of
/// [`V4ExactSet::write_layout`] exactly as [`V4ExactSet::contains`] does.
///
/// The hash of an address `a` is `h = (u64(a) ^ k0) * mul; h = (h ^ (h >>
/// 32)) * k1` (wrapping; 64-bit multiplies, which eBPF has). The home
/// bucket is `(h >> shift) & mask`, the tag `(h >> 32) as u8`, or 1 when
/// that is 0 (0 marks an empty slot). A lookup reads the home bucket's 16
/// tags, compares the key of each slot whose tag matches, and goes on to
/// the next bucket (`(b + 1) & mask`) while the last tag of the bucket it
/// read is not empty: never more than `longest_probe` buckets.
///
/// An IPv6 table ([`V6ExactSet::layout`]) hashes an address `a` as `lo =
/// (u64(a) ^ k0) * mul; hi = (u64(a >> 64) ^ k1) * mul_hi; h = lo ^
/// hi.rotate_left(32); h = (h ^ (h >> 29)) * k1`, with [`V6_SLOTS`] tags
/// and keys per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExactLayout {
    pub buckets: usize,
    pub k0: u64,
    pub k1: u64,
    pub mul: u64,
    /// IPv6 only: the high half's multiplier.
    pub mul_hi: u64,
    pub shift: u32,
    pub mask: u32,
    pub longest_probe: usize,
}

/// Keys (and tags) per IPv4 bucket.
pub const V4_SLOTS: usize = <Bucket4 as Slots>::SLOTS;
/// Keys (and tags) per IPv6 bucket.
pub const V6_SLOTS: usize = <Bucket6 as Slots>::SLOTS;

fn layout_of<B: Slots>(t: &OpenTable<B>) -> ExactLayout {
    let (k0, k1) = t.hasher.keys();
    ExactLayout {
        buckets: t.buckets.len(),
        k0,
        k1,
        mul: crate::hash::C0,
        mul_hi: crate::hash::C1,
        shift: t.shift,
        mask: t.mask as u32,
        longest_probe: t.probe_stats().1,
    }
}

impl V6ExactSet {
    /// How [`V6ExactSet::write_layout`]'s bytes are looked up.
    pub fn layout(&self) -> ExactLayout {
        layout_of(&self.0)
    }

    /// The tags ([`V6_SLOTS`] bytes per bucket) and the key buckets (64
    /// bytes each: [`V6_SLOTS`] addresses as their 16 bytes in network
    /// order, unused slots 0), into `tags` and `buckets` of at least those
    /// lengths.
    pub fn write_layout(&self, tags: &mut [u8], buckets: &mut [u8]) {
        let t = &self.0;
        tags[..t.tags.len()].copy_from_slice(&t.tags);
        for (c, b) in buckets.chunks_exact_mut(size_of::<Bucket6>()).zip(t.buckets.iter()) {
            for (w, k) in c.chunks_exact_mut(16).zip(b.keys) {
                w.copy_from_slice(&k.to_be_bytes());
            }
        }
    }
}

impl V4ExactSet {
    /// How [`V4ExactSet::write_layout`]'s bytes are looked up.
    pub fn layout(&self) -> ExactLayout {
        layout_of(&self.0)
    }

    /// The tags (one byte per slot, [`V4_SLOTS`] per bucket, bucket after
    /// bucket) and the key buckets (64 bytes each: [`V4_SLOTS`]
    /// little-endian addresses in host order, unused slots 0), into
    /// `tags` and `buckets` of at least those lengths.
    pub fn write_layout(&self, tags: &mut [u8], buckets: &mut [u8]) {
        let t = &self.0;
        tags[..t.tags.len()].copy_from_slice(&t.tags);
        for (c, b) in buckets.chunks_exact_mut(size_of::<Bucket4>()).zip(t.buckets.iter()) {
            for (w, k) in c.chunks_exact_mut(4).zip(b.keys) {
                w.copy_from_slice(&k.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    proptest! {
        #[test]
        fn v4_agrees_with_std(keys in proptest::collection::vec(0u32..5000, 0..3000),
                              probes in proptest::collection::vec(0u32..6000, 1..500),
                              load in 0.3f64..0.9, seed in any::<u64>(), batch in 1usize..70,
                              filter in any::<bool>(), adaptive in any::<bool>(), skip in prop_oneof![Just(0u32), 1u32..600]) {
            let reference: HashSet<u32> = keys.iter().copied().collect();
            let set = V4ExactSet::with_filter(&keys, load, Hasher::with_seed(seed), filter);
            prop_assert_eq!(set.len(), reference.len());
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, batch, seed % 2 == 0);
            // Pipelined as the bench drives it: two contexts alternating,
            // batches of `batch` keys, the adaptive skip on or off or forced.
            let mut piped = vec![false; probes.len()];
            let mut preps = [Prepared::default(), Prepared::default()];
            for p in &mut preps {
                p.set_adaptive(adaptive);
                p.skip_filter_for(skip);
            }
            for (i, (kc, oc)) in probes.chunks(batch.min(PREPARED_MAX)).zip(piped.chunks_mut(batch.min(PREPARED_MAX))).enumerate() {
                set.prepare(kc, &mut preps[i % 2]);
                set.finish(kc, &preps[i % 2], oc);
            }
            for ((k, o), p) in probes.iter().zip(&out).zip(&piped) {
                prop_assert_eq!(set.contains(*k), reference.contains(k));
                prop_assert_eq!(*o, reference.contains(k));
                prop_assert_eq!(*p, reference.contains(k));
            }
        }

        #[test]
        fn v6_agrees_with_std(keys in proptest::collection::vec(0u128..3000, 0..2000),
                              probes in proptest::collection::vec(0u128..4000, 1..500),
                              load in 0.3f64..0.9, seed in any::<u64>(), batch in 1usize..=MAX_BATCH,
                              filter in any::<bool>(), adaptive in any::<bool>(), skip in prop_oneof![Just(0u32), 1u32..600]) {
            let keys: Vec<u128> = keys.iter().map(|k| k.rotate_left(100)).collect();
            let probes: Vec<u128> = probes.iter().map(|k| k.rotate_left(100)).collect();
            let reference: HashSet<u128> = keys.iter().copied().collect();
            let set = V6ExactSet::with_filter(&keys, load, Hasher::with_seed(seed), filter);
            prop_assert_eq!(set.has_filter(), filter);
            let mut out = vec![false; probes.len()];
            set.contains_batch(&probes, &mut out, batch, seed % 2 == 0);
            let mut piped = vec![false; probes.len()];
            let mut prep = Prepared::default();
            prep.set_adaptive(adaptive);
            prep.skip_filter_for(skip);
            for (kc, oc) in probes.chunks(batch).zip(piped.chunks_mut(batch)) {
                set.prepare(kc, &mut prep);
                set.finish(kc, &prep, oc);
            }
            for ((k, o), p) in probes.iter().zip(&out).zip(&piped) {
                prop_assert_eq!(*o, reference.contains(k));
                prop_assert_eq!(*p, reference.contains(k));
            }
        }
    }

    /// A reader of [`V4ExactSet::write_layout`]'s bytes that knows only
    /// [`ExactLayout`]: what the kernel program does, in plain Rust.
    fn layout_contains(l: &ExactLayout, tags: &[u8], buckets: &[u8], a: u32) -> bool {
        let h = (u64::from(a) ^ l.k0).wrapping_mul(l.mul);
        let h = (h ^ (h >> 32)).wrapping_mul(l.k1);
        let tag = ((h >> 32) as u8).max(1);
        let mut b = (h >> l.shift) as usize & l.mask as usize;
        for _ in 0..l.longest_probe {
            let t = &tags[b * V4_SLOTS..][..V4_SLOTS];
            let keys = &buckets[b * 64..][..64];
            let key = |i: usize| u32::from_le_bytes(keys[4 * i..4 * i + 4].try_into().unwrap());
            if (0..V4_SLOTS).any(|i| t[i] == tag && key(i) == a) {
                return true;
            }
            if t[V4_SLOTS - 1] == 0 {
                return false;
            }
            b = (b + 1) & l.mask as usize;
        }
        false
    }

    /// [`layout_contains`] for an IPv6 table.
    fn layout_contains6(l: &ExactLayout, tags: &[u8], buckets: &[u8], a: u128) -> bool {
        let lo = (a as u64 ^ l.k0).wrapping_mul(l.mul);
        let hi = ((a >> 64) as u64 ^ l.k1).wrapping_mul(l.mul_hi);
        let h = lo ^ hi.rotate_left(32);
        let h = (h ^ (h >> 29)).wrapping_mul(l.k1);
        let tag = ((h >> 32) as u8).max(1);
        let mut b = (h >> l.shift) as usize & l.mask as usize;
        for _ in 0..l.longest_probe {
            let t = &tags[b * V6_SLOTS..][..V6_SLOTS];
            let keys = &buckets[b * 64..][..64];
            let key = |i: usize| u128::from_be_bytes(keys[16 * i..16 * i + 16].try_into().unwrap());
            if (0..V6_SLOTS).any(|i| t[i] == tag && key(i) == a) {
                return true;
            }
            if t[V6_SLOTS - 1] == 0 {
                return false;
            }
            b = (b + 1) & l.mask as usize;
        }
        false
    }

    proptest! {
        #[test]
        fn written_v6_layout_agrees_with_the_table(keys in proptest::collection::vec(any::<u128>(), 0..2000),
                                                   near in proptest::collection::vec(0u128..64, 0..500),
                                                   load in 0.3f64..0.9, seed in any::<u64>()) {
            let probes: Vec<u128> = keys.iter().zip(&near).map(|(k, d)| k.wrapping_add(*d)).chain([0, 1]).collect();
            let set = V6ExactSet::with_filter(&keys, load, Hasher::with_seed(seed), false);
            let l = set.layout();
            let mut tags = vec![0u8; l.buckets * V6_SLOTS];
            let mut buckets = vec![0u8; l.buckets * 64];
            set.write_layout(&mut tags, &mut buckets);
            let reference: HashSet<u128> = keys.iter().copied().collect();
            for &p in keys.iter().chain(&probes) {
                prop_assert_eq!(layout_contains6(&l, &tags, &buckets, p), reference.contains(&p));
            }
        }

        #[test]
        fn written_layout_agrees_with_the_table(keys in proptest::collection::vec(any::<u32>(), 0..3000),
                                                near in proptest::collection::vec(0u32..64, 0..500),
                                                load in 0.3f64..0.9, seed in any::<u64>()) {
            // Keys and their neighbours (most absent), zero among them: an
            // empty slot's key is 0, which must not be found unless added.
            let probes: Vec<u32> = keys.iter().zip(&near).map(|(k, d)| k.wrapping_add(*d)).chain([0, 1]).collect();
            let set = V4ExactSet::with_filter(&keys, load, Hasher::with_seed(seed), false);
            let l = set.layout();
            let mut tags = vec![0u8; l.buckets * V4_SLOTS];
            let mut buckets = vec![0u8; l.buckets * 64];
            set.write_layout(&mut tags, &mut buckets);
            let reference: HashSet<u32> = keys.iter().copied().collect();
            for &p in keys.iter().chain(&probes) {
                prop_assert_eq!(layout_contains(&l, &tags, &buckets, p), reference.contains(&p), "{}", p);
                prop_assert_eq!(set.contains(p), reference.contains(&p));
            }
        }
    }

    #[test]
    fn filter_is_skipped_when_most_keys_pass_and_tried_again() {
        let keys: Vec<u32> = (0..10_000).collect();
        let set = V4ExactSet::with_options(&keys, 0.5, Hasher::with_seed(1));
        let mut prep = Prepared::default();
        let mut out = [false; 32];
        // Every key a member: after a window the filter is skipped...
        let mut used = 0;
        for round in 0..200u32 {
            let kc: Vec<u32> = (round * 32..round * 32 + 32).collect();
            set.prepare(&kc, &mut prep);
            used += usize::from(prep.used_filter());
            set.finish(&kc, &prep, &mut out);
            assert!(out.iter().all(|&o| o));
        }
        assert!(used <= 2 * (FILTER_WINDOW as usize / 32), "filter used in {used} of 200 batches");
        // ...and tried again once the skip runs out; non-members keep it on.
        let absent: Vec<u32> = (1_000_000..1_000_032).collect();
        for _ in 0..FILTER_SKIP_KEYS / 32 + 1 {
            set.prepare(&absent, &mut prep);
            set.finish(&absent, &prep, &mut out);
        }
        for _ in 0..100 {
            set.prepare(&absent, &mut prep);
            assert!(prep.used_filter());
            set.finish(&absent, &prep, &mut out);
            assert!(out.iter().all(|&o| !o));
        }
    }

    #[test]
    fn contains_batch_keeps_the_filter_statistics_between_calls() {
        let keys: Vec<u32> = (0..10_000).collect();
        let set = V4ExactSet::with_options(&keys, 0.5, Hasher::with_seed(2));
        let state = |set: &V4ExactSet| {
            let id = std::ptr::from_ref(&set.0) as usize;
            LOOKUP_SCRATCH.with_borrow(|(_, states)| states[(id >> 6) % ADAPT_TABLES])
        };
        let mut out = [false; 32];
        // Calls of 32 members each, far shorter than the 256-key window:
        // the statistics add up across calls and the filter gets skipped.
        for round in 0..20u32 {
            let kc: Vec<u32> = (round * 32..round * 32 + 32).collect();
            set.contains_batch(&kc, &mut out, 32, true);
            assert!(out.iter().all(|&o| o));
        }
        let s = state(&set);
        assert_eq!(s.table, std::ptr::from_ref(&set.0) as usize);
        assert!(s.skip > 0, "skip never engaged");
        // Non-members: once the skip runs out the filter is used again and
        // stays in use.
        let absent: Vec<u32> = (1_000_000..1_000_032).collect();
        for _ in 0..FILTER_SKIP_KEYS / 32 + 20 {
            set.contains_batch(&absent, &mut out, 32, true);
            assert!(out.iter().all(|&o| !o));
        }
        assert_eq!(state(&set).skip, 0);
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
