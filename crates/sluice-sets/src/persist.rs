//! A built [`AddressSet`] as bytes, and back, without re-hashing or
//! re-sorting: the tables are written as they are in memory and loaded by
//! copying them into freshly allocated [`Table`]s.
//!
//! Building 6M hosts hashes and sorts every key; loading copies about 80 MB
//! and checks it, which is what makes a compiled rule file worth having.
//!
//! # Layout (version 1)
//!
//! All integers little-endian. Every block below starts at a multiple of 64
//! bytes from the start of the blob and is padded with zeros to the next
//! multiple of 64, so the arrays keep the alignment they have in memory
//! (a bucket to a cache line) and a later version could map them in place.
//!
//! ```text
//! header, 64 bytes:
//!   0  [u8; 8]  magic "SLADDRS\0"
//!   8  u32      layout version (1)
//!   12 u32      parts present: 1 v4 hosts, 2 v4 prefixes, 4 v6 hosts, 8 v6 prefixes
//!   16 u64      distinct entries of the list
//!   24 u64      length of the whole blob
//!   32 u32      flags: 1 = the exact tables have front filters (not saved:
//!               rebuilt from the keys on load, ~0.1 s for 6M keys)
//!   36 ..64     zero
//! then each present part, in that order:
//! exact table (v4 or v6 hosts): a 64-byte header
//!   0 u64 hash key k0 | 8 u64 hash key k1 (odd) | 16 u64 buckets n (power of two)
//!   24 u64 mask (n - 1) | 32 u32 shift (64 - log2 n) | 36 u32 slots per bucket (16 or 4)
//!   40 u64 keys stored | 48 u64 tag bytes (n * slots) | 56 u64 key bytes (n * 64)
//!   then the tag array (one byte per slot, 0 = empty), then the buckets:
//!   n * 64 bytes of keys, u32 (v4) or u128 (v6), empty slots zero
//! v4 prefixes: a 64-byte header
//!   0 u64 groups (2^18) | 8 u64 host bitmaps h | 16 u64 prefixes given | 24..64 zero
//!   then 2^18 groups of 32 bytes (u64 full, u64 partial, u32 rank, 12 zero bytes),
//!   then h host bitmaps of 32 bytes (4 x u64)
//! v6 prefixes: a 64-byte header
//!   0 u64 ranges r | 8 u64 prefixes given | 16..64 zero
//!   then r ranges of 32 bytes (u128 first, u128 last; sorted, disjoint, not adjacent)
//! ```
//!
//! A loaded set is checked as thoroughly as it is cheap to: every length,
//! count and mask, padding and reserved bytes zero, and every invariant a
//! lookup relies on (see [`AddressSet::load`]). The file container around
//! the blob has a checksum against accidents; these checks are what make a
//! lookup safe whatever the bytes were.

use crate::exact::{Bucket4, Bucket6, OpenTable, Slots, V4ExactSet, V6ExactSet, TAGS_PER_LINE};
use crate::hash::Hasher;
use crate::mem::Table;
use crate::prefix::{Group, Hosts, V4PrefixSet, GROUPS};
use crate::prefix6::V6PrefixSet;
use crate::set::AddressSet;

/// The first bytes of a saved [`AddressSet`].
pub const MAGIC: [u8; 8] = *b"SLADDRS\0";
/// The layout this build writes and reads.
pub const LAYOUT_VERSION: u32 = 1;

const ALIGN: u64 = 64;
const HEADER: u64 = 64;
const BUCKET_BYTES: u64 = 64;
const RECORD_BYTES: u64 = 32;

const V4_HOSTS: u32 = 1;
const V4_PREFIXES: u32 = 2;
const V6_HOSTS: u32 = 4;
const V6_PREFIXES: u32 = 8;

const FLAG_FILTERS: u32 = 1;

/// Why bytes are not a saved [`AddressSet`] this build can load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    #[error("not a saved address set (magic bytes are {found}, expected {expected})")]
    NotAnAddressSet { found: String, expected: String },
    #[error("address set layout {found}, this build reads layout {supported}")]
    Version { found: u32, supported: u32 },
    #[error("truncated {what}: needs {need} bytes, {have} left")]
    Truncated { what: &'static str, need: u64, have: u64 },
    #[error("bad length of {what}: {found}, expected {expected}")]
    BadLength { what: &'static str, expected: u64, found: u64 },
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
}

fn invalid(what: &'static str, why: impl Into<String>) -> PersistError {
    PersistError::Invalid { what, why: why.into() }
}

fn escaped(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

impl AddressSet {
    /// Append this set to `out` in the layout of [`crate::persist`]: the
    /// tables' bytes as they are, so [`AddressSet::load`] need not rebuild.
    pub fn save(&self, out: &mut Vec<u8>) {
        let mut w = Writer { start: out.len(), out };
        let parts = [
            (self.v4_hosts.is_some(), V4_HOSTS),
            (self.v4_prefixes.is_some(), V4_PREFIXES),
            (self.v6_hosts.is_some(), V6_HOSTS),
            (self.v6_prefixes.is_some(), V6_PREFIXES),
        ]
        .iter()
        .filter(|p| p.0)
        .fold(0, |all, p| all | p.1);
        let mut h = [0u8; HEADER as usize];
        h[..8].copy_from_slice(&MAGIC);
        put32(&mut h, 8, LAYOUT_VERSION);
        put32(&mut h, 12, parts);
        put64(&mut h, 16, self.entries as u64);
        let filters = self.v4_hosts.as_ref().is_some_and(V4ExactSet::has_filter)
            || self.v6_hosts.as_ref().is_some_and(V6ExactSet::has_filter);
        put32(&mut h, 32, if filters { FLAG_FILTERS } else { 0 });
        // The total length (offset 24) is filled in at the end.
        w.block(&h);
        if let Some(t) = &self.v4_hosts {
            save_exact(&t.0, &mut w);
        }
        if let Some(p) = &self.v4_prefixes {
            save_v4_prefixes(p, &mut w);
        }
        if let Some(t) = &self.v6_hosts {
            save_exact(&t.0, &mut w);
        }
        if let Some(p) = &self.v6_prefixes {
            save_v6_prefixes(p, &mut w);
        }
        let total = (w.out.len() - w.start) as u64;
        put64(&mut w.out[w.start..], 24, total);
    }

    /// Load a set written by [`AddressSet::save`].
    ///
    /// Never panics, and a set it returns never panics or loops in a lookup,
    /// whatever `bytes` hold: every length is checked against what is left
    /// before anything is allocated, and every invariant lookups rely on is
    /// checked (exact tables: a power-of-two bucket count with its mask and
    /// shift, one tag per slot, used slots at the front of their bucket,
    /// each key's tag its hash's, each key reachable from its home bucket,
    /// a bucket that is not full; v4 prefixes: the level-2 ranks; v6
    /// prefixes: sorted, disjoint ranges). Reserved and padding bytes must
    /// be zero, so a blob that loads saves back to the same bytes.
    pub fn load(bytes: &[u8]) -> Result<AddressSet, PersistError> {
        let magic = &bytes[..bytes.len().min(MAGIC.len())];
        if magic != &MAGIC[..magic.len()] || bytes.is_empty() {
            return Err(PersistError::NotAnAddressSet { found: escaped(magic), expected: escaped(&MAGIC) });
        }
        let mut r = Reader { buf: bytes, at: 0 };
        let h = r.block("address set header", HEADER)?;
        let version = get32(h, 8);
        if version != LAYOUT_VERSION {
            return Err(PersistError::Version { found: version, supported: LAYOUT_VERSION });
        }
        let parts = get32(h, 12);
        if parts & !(V4_HOSTS | V4_PREFIXES | V6_HOSTS | V6_PREFIXES) != 0 {
            return Err(invalid("address set header", format!("unknown parts {parts:#x}")));
        }
        let entries = get64(h, 16);
        let total = get64(h, 24);
        let flags = get32(h, 32);
        if flags & !FLAG_FILTERS != 0 {
            return Err(invalid("address set header", format!("unknown flags {flags:#x}")));
        }
        reserved("address set header", &h[36..])?;
        let have = bytes.len() as u64;
        if total > have {
            return Err(PersistError::Truncated { what: "address set", need: total, have });
        }
        if total != have {
            return Err(PersistError::BadLength { what: "address set", expected: total, found: have });
        }
        let v4_hosts = (parts & V4_HOSTS != 0).then(|| load_exact::<Bucket4>(&mut r, "v4 host table")).transpose()?;
        let v4_prefixes = (parts & V4_PREFIXES != 0).then(|| load_v4_prefixes(&mut r)).transpose()?;
        let v6_hosts = (parts & V6_HOSTS != 0).then(|| load_exact::<Bucket6>(&mut r, "v6 host table")).transpose()?;
        let v6_prefixes = (parts & V6_PREFIXES != 0).then(|| load_v6_prefixes(&mut r)).transpose()?;
        if r.at != bytes.len() {
            return Err(PersistError::BadLength { what: "address set parts", expected: total, found: r.at as u64 });
        }
        // Entries count distinct hosts exactly and prefixes as given (with
        // duplicates), so the count lies between the two.
        let hosts = v4_hosts.as_ref().map_or(0, |t| t.len) as u64 + v6_hosts.as_ref().map_or(0, |t| t.len) as u64;
        // (Prefix counts come from the blob: add without overflow.)
        let most = hosts
            .saturating_add(v4_prefixes.as_ref().map_or(0, |p| p.prefixes) as u64)
            .saturating_add(v6_prefixes.as_ref().map_or(0, |p| p.prefixes) as u64);
        if entries < hosts || entries > most {
            return Err(invalid("entry count", format!("{entries}, but the tables hold {hosts} to {most}")));
        }
        // Built from keys just checked to be in their places, so the filter
        // has no false negatives whatever the blob held.
        let (mut v4_hosts, mut v6_hosts) = (v4_hosts, v6_hosts);
        if flags & FLAG_FILTERS != 0 {
            v4_hosts.iter_mut().for_each(OpenTable::rebuild_filter);
            v6_hosts.iter_mut().for_each(OpenTable::rebuild_filter);
        }
        Ok(AddressSet {
            v4_hosts: v4_hosts.map(V4ExactSet),
            v4_prefixes,
            v6_hosts: v6_hosts.map(V6ExactSet),
            v6_prefixes,
            entries: to_usize("entry count", entries)?,
        })
    }
}

/// Appends 64-aligned blocks (relative to `start`, where the blob begins).
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl Writer<'_> {
    fn block(&mut self, bytes: &[u8]) {
        self.block_with(bytes.len(), |o| o.copy_from_slice(bytes));
    }

    /// A block of `len` bytes written by `fill`, then zeros to alignment.
    fn block_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) {
        let at = self.out.len();
        self.out.resize(at + len, 0);
        fill(&mut self.out[at..]);
        let used = (self.out.len() - self.start) as u64;
        self.out.resize(self.start + used.next_multiple_of(ALIGN) as usize, 0);
    }
}

/// Takes blocks off the front of the blob, checking lengths first.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// The next `len` bytes of `what`; its padding must be zero.
    fn block(&mut self, what: &'static str, len: u64) -> Result<&'a [u8], PersistError> {
        let have = (self.buf.len() - self.at) as u64;
        let padded = len.checked_next_multiple_of(ALIGN).unwrap_or(u64::MAX);
        if padded > have {
            return Err(PersistError::Truncated { what, need: padded, have });
        }
        // Both fit: padded <= have, which is a slice length.
        let (len, padded) = (len as usize, padded as usize);
        let block = &self.buf[self.at..][..padded];
        self.at += padded;
        if block[len..].iter().any(|&b| b != 0) {
            return Err(invalid(what, "nonzero padding"));
        }
        Ok(&block[..len])
    }
}

/// The little-endian `u32` at `b[at..]` (the file formats' byte order;
/// shared with `sluice_engine::container`). Callers check lengths first: out
/// of bounds is a bug, and panics.
pub fn get32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// The little-endian `u64` at `b[at..]` (see [`get32`]).
pub fn get64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn get128(b: &[u8], at: usize) -> u128 {
    let mut a = [0; 16];
    a.copy_from_slice(&b[at..at + 16]);
    u128::from_le_bytes(a)
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn reserved(what: &'static str, b: &[u8]) -> Result<(), PersistError> {
    match b.iter().all(|&x| x == 0) {
        true => Ok(()),
        false => Err(invalid(what, "reserved bytes are not zero")),
    }
}

fn to_usize(what: &'static str, v: u64) -> Result<usize, PersistError> {
    usize::try_from(v).map_err(|_| invalid(what, format!("{v} does not fit this machine's usize")))
}

/// A bucket's keys as little-endian bytes.
trait SavedBucket: Slots {
    /// Write the 64 bytes of this bucket's keys to `out`.
    fn write_le(&self, out: &mut [u8]);
    /// Set the keys from 64 bytes.
    fn read_le(&mut self, bytes: &[u8]);
}

impl SavedBucket for Bucket4 {
    fn write_le(&self, out: &mut [u8]) {
        for (o, k) in out.chunks_exact_mut(4).zip(&self.keys) {
            o.copy_from_slice(&k.to_le_bytes());
        }
    }
    #[inline]
    fn read_le(&mut self, bytes: &[u8]) {
        for (k, b) in self.keys.iter_mut().zip(bytes.chunks_exact(4)) {
            *k = get32(b, 0);
        }
    }
}

impl SavedBucket for Bucket6 {
    fn write_le(&self, out: &mut [u8]) {
        for (o, k) in out.chunks_exact_mut(16).zip(&self.keys) {
            o.copy_from_slice(&k.to_le_bytes());
        }
    }
    #[inline]
    fn read_le(&mut self, bytes: &[u8]) {
        for (k, b) in self.keys.iter_mut().zip(bytes.chunks_exact(16)) {
            *k = get128(b, 0);
        }
    }
}

fn save_exact<B: SavedBucket>(t: &OpenTable<B>, w: &mut Writer<'_>) {
    let (k0, k1) = t.hasher.keys();
    let n = t.buckets.len() as u64;
    let mut h = [0u8; HEADER as usize];
    put64(&mut h, 0, k0);
    put64(&mut h, 8, k1);
    put64(&mut h, 16, n);
    put64(&mut h, 24, t.mask as u64);
    put32(&mut h, 32, t.shift);
    put32(&mut h, 36, B::SLOTS as u32);
    put64(&mut h, 40, t.len as u64);
    put64(&mut h, 48, t.tags.len() as u64);
    put64(&mut h, 56, n * BUCKET_BYTES);
    w.block(&h);
    w.block(&t.tags);
    w.block_with(t.buckets.len() * BUCKET_BYTES as usize, |o| {
        for (c, b) in o.chunks_exact_mut(BUCKET_BYTES as usize).zip(t.buckets.iter()) {
            b.write_le(c);
        }
    });
}

fn load_exact<B: SavedBucket>(r: &mut Reader<'_>, what: &'static str) -> Result<OpenTable<B>, PersistError> {
    let h = r.block(what, HEADER)?;
    let (k0, k1, n, mask) = (get64(h, 0), get64(h, 8), get64(h, 16), get64(h, 24));
    let (shift, slots, len) = (get32(h, 32), get32(h, 36), get64(h, 40));
    let (tag_bytes, key_bytes) = (get64(h, 48), get64(h, 56));
    let s = B::SLOTS as u64;
    if u64::from(slots) != s {
        return Err(PersistError::BadLength { what: "slots per bucket", expected: s, found: slots.into() });
    }
    // At least a line of tags, as `OpenTable::build` makes; below 2^32
    // buckets so a `Place` holds any bucket number.
    let fewest = (TAGS_PER_LINE / B::SLOTS) as u64;
    if !n.is_power_of_two() || n < fewest || n > 1 << 31 {
        return Err(invalid(what, format!("{n} buckets: not a power of two from {fewest} to 2^31")));
    }
    if mask != n - 1 {
        return Err(invalid(what, format!("mask {mask:#x} for {n} buckets")));
    }
    if shift != 64 - n.trailing_zeros() {
        return Err(invalid(what, format!("shift {shift} for {n} buckets")));
    }
    if tag_bytes != n * s {
        return Err(PersistError::BadLength { what: "tag array", expected: n * s, found: tag_bytes });
    }
    if key_bytes != n * BUCKET_BYTES {
        return Err(PersistError::BadLength { what: "key buckets", expected: n * BUCKET_BYTES, found: key_bytes });
    }
    // `with_seed` makes k1 odd so the final multiply is a bijection.
    if k1 & 1 == 0 {
        return Err(invalid(what, "the second hash key is even"));
    }
    // Both arrays are in the blob, so their sizes are bounded by it before
    // anything is allocated.
    let tag_src = r.block("tag array", tag_bytes)?;
    let key_src = r.block("key buckets", key_bytes)?;
    let n = to_usize(what, n)?;
    let mut t: OpenTable<B> = OpenTable {
        tags: Table::zeroed(tag_src.len()),
        buckets: Table::zeroed(n),
        shift,
        mask: n - 1,
        hasher: Hasher::from_keys(k0, k1),
        len: to_usize(what, len)?,
        filter: None,
    };
    t.tags.copy_from_slice(tag_src);
    // A probe stops at the first bucket that is not full; with none, a
    // lookup of an absent key would never end.
    let slots = B::SLOTS;
    let full = |b: usize| tag_src[b * slots + slots - 1] != 0;
    let mut run = (0..n).rev().take_while(|&b| full(b)).count();
    if run == n {
        return Err(invalid(what, "every bucket is full"));
    }
    // Copy and check each bucket while it is in cache: one pass over the
    // memory. `run` counts the full buckets just before `b` (round the end
    // of the table, for the first ones).
    let mut count = 0;
    for (b, src) in key_src.chunks_exact(BUCKET_BYTES as usize).enumerate() {
        t.buckets[b].read_le(src);
        let used = match bucket_ok(&t, b, run) {
            Some(used) => used,
            None => {
                let why = check_bucket(&t, b, run).err().unwrap_or_else(|| "inconsistent".into());
                return Err(invalid(what, format!("bucket {b}: {why}")));
            }
        };
        count += used;
        run = if used == slots { run + 1 } else { 0 };
    }
    if count != t.len {
        return Err(PersistError::BadLength { what: "exact table keys", expected: count as u64, found: t.len as u64 });
    }
    Ok(t)
}

/// The checks of [`check_bucket`] folded into one flag, `None` if any
/// fails; `check_bucket` then words the error. Without early exits and with
/// one data-dependent branch per bucket (the end of its used slots), 6M
/// keys check in about 23 ms against 33 ms for `check_bucket`. (Hashing
/// every slot instead, empty or not, with no branch at all, took 70 ms.)
#[inline]
fn bucket_ok<B: Slots>(t: &OpenTable<B>, b: usize, run: usize) -> Option<usize> {
    let tags = &t.tags[b * B::SLOTS..][..B::SLOTS];
    let bucket = &t.buckets[b];
    let used_mask = !crate::simd::match_tags(tags, 0) & ((1u32 << B::SLOTS) - 1);
    let used = used_mask.trailing_ones() as usize;
    let mut bad = used_mask >> used != 0;
    for s in 0..B::SLOTS {
        bad |= (s >= used) & (bucket.key(s) != B::Key::default());
    }
    for (s, &tag) in tags[..used].iter().enumerate() {
        let p = t.place(bucket.key(s));
        let reach = b.wrapping_sub(p.bucket as usize) & t.mask;
        bad |= (p.tag != tag) | (reach > run);
    }
    (!bad).then_some(used)
}

/// Check bucket `b` of `t` as lookups rely on it (see [`OpenTable`]),
/// given the number of full buckets just before it; returns its used slots.
#[inline]
fn check_bucket<B: Slots>(t: &OpenTable<B>, b: usize, run: usize) -> Result<usize, String> {
    let tags = &t.tags[b * B::SLOTS..][..B::SLOTS];
    let bucket = &t.buckets[b];
    let used = tags.iter().take_while(|&&x| x != 0).count();
    if let Some(s) = (used..B::SLOTS).find(|&s| tags[s] != 0) {
        return Err(format!("slot {s} used after an empty slot"));
    }
    if let Some(s) = (used..B::SLOTS).find(|&s| bucket.key(s) != B::Key::default()) {
        return Err(format!("empty slot {s} holds a key"));
    }
    for (s, &tag) in tags[..used].iter().enumerate() {
        let p = t.place(bucket.key(s));
        if p.tag != tag {
            return Err(format!("slot {s}'s tag is not its key's"));
        }
        // Lookups start at the home bucket and go on through full ones.
        if b.wrapping_sub(p.bucket as usize) & t.mask > run {
            return Err(format!("slot {s}'s key is out of reach of its home bucket"));
        }
    }
    Ok(used)
}

fn save_v4_prefixes(p: &V4PrefixSet, w: &mut Writer<'_>) {
    let mut h = [0u8; HEADER as usize];
    put64(&mut h, 0, p.groups.len() as u64);
    put64(&mut h, 8, p.hosts.len() as u64);
    put64(&mut h, 16, p.prefixes as u64);
    w.block(&h);
    w.block_with(p.groups.len() * RECORD_BYTES as usize, |o| {
        for (c, g) in o.chunks_exact_mut(RECORD_BYTES as usize).zip(p.groups.iter()) {
            put64(c, 0, g.full);
            put64(c, 8, g.partial);
            put32(c, 16, g.rank);
            for (i, &pad) in g.pad.iter().enumerate() {
                put32(c, 20 + 4 * i, pad);
            }
        }
    });
    w.block_with(p.hosts.len() * RECORD_BYTES as usize, |o| {
        for (c, hs) in o.chunks_exact_mut(RECORD_BYTES as usize).zip(p.hosts.iter()) {
            for (i, &word) in hs.bits.iter().enumerate() {
                put64(c, 8 * i, word);
            }
        }
    });
}

fn load_v4_prefixes(r: &mut Reader<'_>) -> Result<V4PrefixSet, PersistError> {
    const WHAT: &str = "v4 prefix set";
    let h = r.block(WHAT, HEADER)?;
    let (groups_n, hosts_n, prefixes) = (get64(h, 0), get64(h, 8), get64(h, 16));
    reserved(WHAT, &h[24..])?;
    if groups_n != GROUPS as u64 {
        return Err(PersistError::BadLength { what: "v4 prefix groups", expected: GROUPS as u64, found: groups_n });
    }
    let group_src = r.block("v4 prefix groups", groups_n * RECORD_BYTES)?;
    let host_bytes = hosts_n.saturating_mul(RECORD_BYTES);
    let host_src = r.block("v4 host bitmaps", host_bytes)?;
    let mut groups: Table<Group> = Table::zeroed(GROUPS);
    // Level 2 is found by rank + popcount: ranks must count the partial
    // /24s before each group exactly, ending at the number of bitmaps.
    let mut rank = 0u64;
    for (i, (g, c)) in groups.iter_mut().zip(group_src.chunks_exact(RECORD_BYTES as usize)).enumerate() {
        *g = Group { full: get64(c, 0), partial: get64(c, 8), rank: get32(c, 16), pad: [0; 3] };
        if u64::from(g.rank) != rank {
            return Err(invalid(WHAT, format!("group {i} has rank {}, {rank} partial /24s precede it", g.rank)));
        }
        if g.full & g.partial != 0 {
            return Err(invalid(WHAT, format!("group {i}: a /24 both wholly and partly covered")));
        }
        reserved(WHAT, &c[20..])?;
        rank += u64::from(g.partial.count_ones());
    }
    if rank != hosts_n {
        return Err(PersistError::BadLength { what: "v4 host bitmaps", expected: rank, found: hosts_n });
    }
    let mut hosts: Table<Hosts> = Table::zeroed(to_usize(WHAT, hosts_n)?);
    for (i, (hs, c)) in hosts.iter_mut().zip(host_src.chunks_exact(RECORD_BYTES as usize)).enumerate() {
        hs.bits = [get64(c, 0), get64(c, 8), get64(c, 16), get64(c, 24)];
        // A /24 with no host listed is not partly covered.
        if hs.bits == [0; 4] {
            return Err(invalid(WHAT, format!("host bitmap {i} is empty")));
        }
    }
    Ok(V4PrefixSet::with_summary(groups, hosts, to_usize(WHAT, prefixes)?))
}

fn save_v6_prefixes(p: &V6PrefixSet, w: &mut Writer<'_>) {
    let mut h = [0u8; HEADER as usize];
    put64(&mut h, 0, p.ranges.len() as u64);
    put64(&mut h, 8, p.prefixes as u64);
    w.block(&h);
    w.block_with(p.ranges.len() * RECORD_BYTES as usize, |o| {
        for (c, &(first, last)) in o.chunks_exact_mut(RECORD_BYTES as usize).zip(&p.ranges) {
            c[..16].copy_from_slice(&first.to_le_bytes());
            c[16..].copy_from_slice(&last.to_le_bytes());
        }
    });
}

fn load_v6_prefixes(r: &mut Reader<'_>) -> Result<V6PrefixSet, PersistError> {
    const WHAT: &str = "v6 prefix ranges";
    let h = r.block(WHAT, HEADER)?;
    let (n, prefixes) = (get64(h, 0), get64(h, 8));
    reserved(WHAT, &h[16..])?;
    let src = r.block(WHAT, n.saturating_mul(RECORD_BYTES))?;
    let mut ranges: Vec<(u128, u128)> = Vec::with_capacity(src.len() / RECORD_BYTES as usize);
    for (i, c) in src.chunks_exact(RECORD_BYTES as usize).enumerate() {
        let (first, last) = (get128(c, 0), get128(c, 16));
        if first > last {
            return Err(invalid(WHAT, format!("range {i} ends before it starts")));
        }
        // Merged as `V6PrefixSet::new` merges: sorted, with a gap between.
        if let Some(&(_, prev)) = ranges.last() {
            if prev.checked_add(1).is_none_or(|next| next >= first) {
                return Err(invalid(WHAT, format!("range {i} is not after range {} with a gap", i - 1)));
            }
        }
        ranges.push((first, last));
    }
    // The trie is rebuilt from the checked ranges (as the front filter is).
    Ok(V6PrefixSet::from_ranges(ranges, to_usize(WHAT, prefixes)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::{Prepared, PREPARED_MAX};
    use crate::set::Options;
    use proptest::prelude::*;
    use sluice_rules::{Prefix, PrefixHashSet};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// Addresses from a few clusters so hosts, prefixes and probes meet.
    fn v4(a: u32, b: u16) -> u32 {
        a << 29 | u32::from(b)
    }
    fn v6(a: u128, b: u16) -> u128 {
        a << 125 | u128::from(b)
    }

    fn arb_prefix(hosts: bool, prefixes: bool) -> impl Strategy<Value = Prefix> {
        let (l4, l6) = match (hosts, prefixes) {
            (true, false) => (Just(32u8).boxed(), Just(128u8).boxed()),
            (false, true) => ((0u8..=31).boxed(), (0u8..=127).boxed()),
            _ => (prop_oneof![Just(32u8), 0u8..=32].boxed(), prop_oneof![Just(128u8), 0u8..=128].boxed()),
        };
        prop_oneof![
            (0u32..8, any::<u16>(), l4).prop_map(|(a, b, l)| Prefix::new(IpAddr::V4(Ipv4Addr::from(v4(a, b))), l)),
            (0u128..8, any::<u16>(), l6).prop_map(|(a, b, l)| Prefix::new(IpAddr::V6(Ipv6Addr::from(v6(a, b))), l)),
        ]
    }

    fn arb_list() -> impl Strategy<Value = Vec<Prefix>> {
        prop_oneof![
            Just(Vec::new()),
            proptest::collection::vec(arb_prefix(true, false), 0..600),
            proptest::collection::vec(arb_prefix(false, true), 0..100),
            proptest::collection::vec(arb_prefix(true, true), 0..600),
        ]
    }

    fn arb_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u32..8, any::<u16>()).prop_map(|(a, b)| IpAddr::V4(Ipv4Addr::from(v4(a, b)))),
            (0u128..8, any::<u16>()).prop_map(|(a, b)| IpAddr::V6(Ipv6Addr::from(v6(a, b)))),
        ]
    }

    fn saved(s: &AddressSet) -> Vec<u8> {
        let mut out = Vec::new();
        s.save(&mut out);
        out
    }

    /// Every lookup path of `set` for `probes`: single, batch (mixed and per
    /// family) and pipelined.
    fn answers(set: &AddressSet, probes: &[IpAddr]) -> Vec<[bool; 4]> {
        let mut batch = vec![false; probes.len()];
        set.contains_batch(probes, &mut batch, 8, true);
        let mut fam = vec![false; probes.len()];
        let mut piped = vec![false; probes.len()];
        let mut prep = Prepared::default();
        for (i, ip) in probes.iter().enumerate() {
            match ip {
                IpAddr::V4(a) => {
                    let k = [u32::from(*a)];
                    set.contains_v4_batch(&k, &mut fam[i..=i], 4, false);
                    set.prepare_v4(&k, &mut prep);
                    set.finish_v4(&k, &prep, &mut piped[i..=i]);
                }
                IpAddr::V6(a) => {
                    let k = [u128::from(*a)];
                    set.contains_v6_batch(&k, &mut fam[i..=i], 4, true);
                    set.prepare_v6(&k, &mut prep);
                    set.finish_v6(&k, &prep, &mut piped[i..=i]);
                }
            }
        }
        // Pipelined in full chunks too, per family.
        let k4: Vec<u32> =
            probes.iter().filter_map(|ip| if let IpAddr::V4(a) = ip { Some(u32::from(*a)) } else { None }).collect();
        for c in k4.chunks(PREPARED_MAX) {
            let mut o = vec![false; c.len()];
            set.prepare_v4(c, &mut prep);
            set.finish_v4(c, &prep, &mut o);
            for (&k, &o) in c.iter().zip(&o) {
                assert_eq!(o, set.contains_v4(k));
            }
        }
        probes.iter().enumerate().map(|(i, ip)| [set.contains(*ip), batch[i], fam[i], piped[i]]).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn round_trip_answers_like_the_original(list in arb_list(),
                                                probes in proptest::collection::vec(arb_ip(), 1..300),
                                                fold in prop_oneof![Just(0usize), Just(1 << 20)],
                                                load in 0.3f64..0.9, seed in any::<u64>()) {
            let set = AddressSet::with_options(&list, Options { max_load: load, hasher: Hasher::with_seed(seed), fold_hosts_up_to: fold, filter: seed % 3 != 0 });
            let blob = saved(&set);
            let back = AddressSet::load(&blob).unwrap();
            prop_assert_eq!(back.len(), set.len());
            prop_assert_eq!(back.to_string(), set.to_string());
            prop_assert_eq!(saved(&back), blob, "save(load(b)) == b");
            let reference = PrefixHashSet::from_prefixes(&list);
            // Probe the listed addresses themselves as well as random ones.
            let probes: Vec<IpAddr> = probes.into_iter().chain(list.iter().map(|p| p.addr())).collect();
            let (a, b) = (answers(&set, &probes), answers(&back, &probes));
            for ((ip, a), b) in probes.iter().zip(&a).zip(&b) {
                let want = reference.contains(*ip);
                prop_assert_eq!(*a, [want; 4], "original {}", ip);
                prop_assert_eq!(*b, [want; 4], "loaded {}", ip);
            }
        }
    }

    /// Sets of every shape: all four parts, and each alone.
    fn shapes() -> Vec<AddressSet> {
        let mixed: Vec<Prefix> = (0..3000u32)
            .map(|i| Prefix::new(IpAddr::V4(Ipv4Addr::from(v4(i % 3, (i * 7) as u16))), 32))
            // Spread over the space, so they fold into the trie (one leaf each).
            .chain((0..500u128).map(|i| {
                let spread = (i * 0x9e37_79b9_7f4a_7c15) << 64;
                Prefix::new(IpAddr::V6(Ipv6Addr::from(v6(i % 5, (i * 11) as u16) ^ spread)), 128)
            }))
            .chain([
                Prefix::new("10.0.0.0".parse().unwrap(), 8),
                Prefix::new("192.168.1.128".parse().unwrap(), 25),
                Prefix::new("2001:db8::".parse().unwrap(), 32),
                Prefix::new("2001:db9::".parse().unwrap(), 48),
            ])
            .collect();
        let o = |fold| Options { max_load: 0.8, hasher: Hasher::with_seed(7), fold_hosts_up_to: fold, filter: true };
        let hosts: Vec<Prefix> = mixed.iter().copied().filter(|p| p.is_host()).collect();
        let v6: Vec<Prefix> = mixed.iter().copied().filter(|p| matches!(p, Prefix::V6 { .. })).collect();
        vec![
            AddressSet::with_options(&mixed, o(0)),
            AddressSet::with_options(&mixed, o(1 << 20)),
            AddressSet::with_options(&hosts, o(0)),
            AddressSet::with_options(&v6, o(0)),
            AddressSet::with_options(&[], o(0)),
        ]
    }

    #[derive(Clone, Debug)]
    enum Damage {
        Flip(Vec<(usize, u8)>),
        Truncate(usize),
        Extend(Vec<u8>),
    }

    fn arb_damage() -> impl Strategy<Value = Damage> {
        // Positions as fractions of the blob, some aimed at the headers and
        // the end, where the lengths and counts are.
        let pos = prop_oneof![any::<usize>(), 0usize..256, (0usize..64).prop_map(|i| usize::MAX - i)];
        prop_oneof![
            proptest::collection::vec((pos, 1u8..=255), 1..4).prop_map(Damage::Flip),
            any::<usize>().prop_map(Damage::Truncate),
            proptest::collection::vec(any::<u8>(), 1..130).prop_map(Damage::Extend),
        ]
    }

    fn damage(blob: &[u8], d: &Damage) -> Vec<u8> {
        let mut b = blob.to_vec();
        match d {
            Damage::Flip(flips) => {
                for &(p, x) in flips {
                    // usize::MAX - i counts back from the end.
                    let i = if p > usize::MAX - 64 { b.len().saturating_sub(usize::MAX - p + 1) } else { p % b.len() };
                    b[i] ^= x;
                }
            }
            Damage::Truncate(n) => b.truncate(n % b.len()),
            Damage::Extend(extra) => b.extend_from_slice(extra),
        }
        b
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Damaged blobs load as an error or as a set whose lookups all work
        /// (and that saves back to exactly the damaged bytes).
        #[test]
        fn damaged_blobs_never_panic(shape in 0usize..5, d in arb_damage(),
                                     probes in proptest::collection::vec(arb_ip(), 1..200)) {
            thread_local!(static BLOBS: Vec<Vec<u8>> = shapes().iter().map(saved).collect());
            let bad = BLOBS.with(|b| damage(&b[shape], &d));
            if let Ok(set) = AddressSet::load(&bad) {
                let a = answers(&set, &probes);
                prop_assert!(a.iter().all(|x| x.iter().all(|&y| y == x[0])), "every path agrees");
                prop_assert_eq!(saved(&set), bad);
            }
        }
    }

    #[test]
    fn every_bit_flip_of_small_blobs_is_safe() {
        // Small sets without v4 prefixes (whose level 1 alone is 8 MiB):
        // every bit of the blob can be tried.
        let small: Vec<Prefix> = (0..200u32)
            .map(|i| Prefix::new(IpAddr::V4(Ipv4Addr::from(v4(i % 3, (i * 7) as u16))), 32))
            .chain((0..40u128).map(|i| Prefix::new(IpAddr::V6(Ipv6Addr::from(v6(i % 5, (i * 11) as u16))), 128)))
            .chain([Prefix::new("2001:db8::".parse().unwrap(), 32), Prefix::new("2001:db9::".parse().unwrap(), 48)])
            .collect();
        let o = Options { max_load: 0.8, hasher: Hasher::with_seed(3), fold_hosts_up_to: 0, filter: true };
        let small = [AddressSet::with_options(&small, o), AddressSet::with_options(&small[..200], o)];
        for set in &small {
            let blob = saved(set);
            let (mut loaded, mut b) = (0, blob.clone());
            for i in 0..blob.len() {
                for bit in 0..8 {
                    b[i] ^= 1 << bit;
                    match AddressSet::load(&b) {
                        Ok(s) => {
                            loaded += 1;
                            let _ = answers(&s, &[IpAddr::V4(Ipv4Addr::from(v4(1, 7))), "::5".parse().unwrap()]);
                            assert!(saved(&s) == b);
                        }
                        // The fast and the wording checks of a bucket agree.
                        Err(e) => assert!(!e.to_string().contains("inconsistent"), "{e}"),
                    }
                    b[i] ^= 1 << bit;
                }
            }
            // Only flips that yield another valid set load: key bits whose
            // new hash keeps the tag and home (about 1 in 256), entry counts.
            assert!(loaded < blob.len() * 8 / 50, "{loaded} of {} flips loaded", blob.len() * 8);
        }
        // V4 prefixes (the other parts are tried above): every bit of both
        // headers.
        let blob = saved(&shapes()[0]);
        let headers =
            [0, 64 + 64 + get64(&blob[64..], 48).next_multiple_of(64) as usize + get64(&blob[64..], 56) as usize];
        assert_eq!(get64(&blob[headers[1]..], 0), GROUPS as u64);
        let mut b = blob.clone();
        for &h in &headers {
            for i in h..h + 64 {
                for bit in 0..8 {
                    // In place (and back): a copy of 8 MiB per flip is slow.
                    b[i] ^= 1 << bit;
                    if let Ok(s) = AddressSet::load(&b) {
                        let _ = answers(&s, &[IpAddr::V4(Ipv4Addr::from(v4(1, 7)))]);
                        assert!(saved(&s) == b);
                    }
                    b[i] ^= 1 << bit;
                }
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let blob = saved(&shapes()[3]);
        for n in 0..blob.len() {
            assert!(AddressSet::load(&blob[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let blob = saved(&shapes()[0]);
        let err = |b: &[u8]| AddressSet::load(b).err().expect("refused").to_string();
        assert!(err(b"").starts_with("not a saved address set"), "{}", err(b""));
        assert!(
            err(b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00").contains(r#""\xd4\xc3\xb2\xa1"#),
            "{}",
            err(b"\xd4\xc3\xb2\xa1")
        );
        let mut b = blob.clone();
        b[8] = 2;
        assert_eq!(err(&b), "address set layout 2, this build reads layout 1");
        assert!(err(&blob[..100]).starts_with("truncated address set: needs"), "{}", err(&blob[..100]));
        let mut b = blob.clone();
        b.push(0);
        assert!(err(&b).starts_with("bad length of address set"), "{}", err(&b));
        let mut b = blob.clone();
        b[64 + 16] ^= 1; // v4 host buckets: 2^k ^ 1
        assert!(err(&b).contains("not a power of two"), "{}", err(&b));
        // Prefix counts near u64::MAX in both families add up without overflow.
        let shape = saved(&shapes()[1]); // v4 prefixes, then v6 prefixes
        let v6_at = 64 + 64 + GROUPS * 32 + (get64(&shape[64..], 8) as usize * 32).next_multiple_of(64);
        let mut b = shape.clone();
        put64(&mut b[64..], 16, u64::MAX);
        put64(&mut b[v6_at..], 8, u64::MAX);
        assert!(AddressSet::load(&b).is_ok());
    }

    #[test]
    fn large_lists_round_trip() {
        let mut next = crate::xorshift(0x1234_5678_9abc_def0);
        let mut list: Vec<Prefix> =
            (0..300_000).map(|_| Prefix::new(IpAddr::V4(Ipv4Addr::from(next() as u32)), 32)).collect();
        list.extend((0..30_000).map(|_| Prefix::new(IpAddr::V6(Ipv6Addr::from(u128::from(next()) << 64)), 128)));
        list.extend(
            (0..2000).map(|_| Prefix::new(IpAddr::V4(Ipv4Addr::from(next() as u32)), 20 + (next() % 12) as u8)),
        );
        list.extend(
            (0..500)
                .map(|_| Prefix::new(IpAddr::V6(Ipv6Addr::from(u128::from(next()) << 64)), 40 + (next() % 60) as u8)),
        );
        let set = AddressSet::new(&list);
        let back = AddressSet::load(&saved(&set)).unwrap();
        assert_eq!(back.len(), set.len());
        let reference = PrefixHashSet::from_prefixes(&list);
        let mut probes: Vec<IpAddr> = list.iter().step_by(7).map(|p| p.addr()).collect();
        probes.extend((0..20_000).map(|_| IpAddr::V4(Ipv4Addr::from(next() as u32))));
        probes.extend((0..5_000).map(|_| IpAddr::V6(Ipv6Addr::from(u128::from(next()) << 64 | 1))));
        let mut out = vec![false; probes.len()];
        back.contains_batch(&probes, &mut out, 16, true);
        for (ip, o) in probes.iter().zip(&out) {
            let want = reference.contains(*ip);
            assert_eq!(back.contains(*ip), want, "{ip}");
            assert_eq!(*o, want, "{ip}");
        }
    }
}
