//! Sets as the kernel program reads them.
//!
//! A large IPv4 set is the engine's own prefix table (`sluice_sets::
//! V4PrefixSet`: a bit per /24 in 32-byte groups, and for each /24 that
//! is partly covered 256 host bits), written into two mmapable BPF array
//! maps and looked up the way the engine looks it up: one group record,
//! and for a partly covered /24 one host record, whatever the prefixes'
//! lengths (no trie walk). A small set (a rule's own prefixes) is a run of
//! compares in the program itself.
//!
//! A set whose IPv4 part is mostly hosts keeps its /32s in the engine's
//! exact table instead (`sluice_sets::V4ExactSet`: 16 one-byte tags per
//! bucket in one array map, the bucket's 16 keys in another), looked up
//! as the engine does: the engine's own hash (two 64-bit multiplies, which
//! eBPF has), the home bucket's tags compared 8 at a time, the key bucket
//! read only when a tag matches. The table records its longest probe, so
//! the walk over full buckets is unrolled that many times and no further.
//! Its other prefixes stay in the prefix table (or compares); both are
//! looked up. A mostly-/128 IPv6 part's hosts are the IPv6 exact table
//! (`V6ExactSet`: 4 tags and 4 keys per bucket) the same way.

use crate::asm::{Alu, Asm, Cond, Label, Size, FP, R0, R1, R2, R3, R4, R5, R7, R8, R9};
use crate::program::KEY_SLOT;
use sluice_live::bpf::{BpfMap, MapType, MappedArray, BPF_F_MMAPABLE};
use sluice_live::LiveError;
use sluice_sets::{ExactLayout, Hasher, V4ExactSet, V4PrefixSet, V6ExactSet, V4_SLOTS, V6_SLOTS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Sets of at most this many prefixes are compares in the program.
pub const INLINE_MAX: usize = 16;

/// How the program tests an address against one set: its IPv4 part (the
/// hosts of a mostly-hosts set apart, in the exact table) and its IPv6
/// part.
pub struct SetCode {
    pub v4_hosts: Option<V4Exact>,
    pub v4: V4Code,
    /// A mostly-/128 IPv6 part's /128s, in the exact table.
    pub v6_hosts: Option<V6Exact>,
    pub v6: V6Code,
    /// A dynamic set's IPv4 and IPv6 hosts (its other elements are in
    /// the tries).
    pub dyn_hosts: Option<DynHosts>,
    pub dyn_hosts6: Option<DynHosts6>,
}

/// Where sets' hosts go (the default: the exact table, filled to
/// [`KERNEL_MAX_LOAD`], the key bucket read early). The bench keeps the
/// layout before the exact table as a contender, and the tests fill tables
/// fuller to walk chains.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Hosts in the exact table when a set is mostly hosts; off: every
    /// prefix in the prefix table.
    pub exact_hosts: bool,
    /// The exact table's most fill (as `V4ExactSet::with_options`;
    /// [`KERNEL_MAX_LOAD`] by default).
    pub max_load: f64,
    /// Load the key bucket's first word before comparing the tags, so its
    /// cache miss overlaps the tag record's (see [`V4Exact::emit`]).
    pub early_keys: bool,
    /// A dynamic set's host table's buckets (None: [`DynHosts::buckets_for`]
    /// its maxelem); the tests make it small to fill buckets into the trie.
    pub dyn_buckets: Option<usize>,
}

/// The kernel's exact tables' most fill: fuller than the engine's (0.5),
/// since in the kernel a smaller table pays more than the rarer walk past a
/// full bucket saves (its pages are 4 KiB, so a larger table also costs TLB
/// misses). `sluice-bench shield --hosts 1000000,10000000 --alt-max-load
/// 0.75`, one run on a loaded 2-vCPU VM: at 10M hosts 374 ns above the
/// floor at 0.75 against 448 at 0.5 (1M against 2M buckets: 80 against
/// 160 MiB), loaded in 717 against 1013 ms; at 1M hosts the same bucket
/// count either way (207 against 222 ns, noise).
pub const KERNEL_MAX_LOAD: f64 = 0.75;

impl Default for Layout {
    fn default() -> Self {
        Layout { exact_hosts: true, max_load: KERNEL_MAX_LOAD, early_keys: true, dyn_buckets: None }
    }
}

/// A set's hosts go to the exact table when at least this share (percent)
/// of its IPv4 prefixes are /32s: below it, one prefix-table lookup
/// answers for all of them, where the exact table would add a lookup to
/// every address.
const EXACT_MIN_HOSTS_PCT: usize = 50;

/// An IPv4 key's bytes in a key bucket.
const KEY_BYTES: usize = 4;
/// Where the program keeps the tag record's address while it reads the
/// key bucket, or the key bucket's while it reads the tags (the lookup
/// helper clobbers R0-R5).
const TAGS_PTR: i16 = -64;
const KEYS_PTR: i16 = -72;
/// An IPv6 lookup's tag, and the tag in every byte of a word.
const TAG6: i16 = -80;
const TAG6_BYTES: i16 = -88;
/// Bytes of an IPv6 key, and of a key bucket (either family).
const KEY6_BYTES: usize = 16;
const BUCKET_BYTES: usize = 64;
/// A byte of ones in every byte of a word, and the high bit of every byte:
/// for comparing 8 tags at once (SWAR).
const BYTES_ONE: u64 = 0x0101_0101_0101_0101;
const BYTES_HIGH: u64 = 0x8080_8080_8080_8080;

/// A [`V4ExactSet`] in two mmapable array maps: per bucket, its tags (one
/// record of [`V4_SLOTS`] bytes) and its keys (one record of 64 bytes).
pub struct V4Exact {
    tags: BpfMap,
    keys: BpfMap,
    layout: ExactLayout,
    hosts: usize,
    early_keys: bool,
}

impl V4Exact {
    /// Builds the engine's exact table of `hosts` (without its front
    /// filter: the kernel program reads the tags directly) and writes it
    /// into new maps through their mappings.
    pub fn new(hosts: &[u32], how: &Layout, name: &str) -> Result<V4Exact, LiveError> {
        let set = V4ExactSet::with_filter(hosts, how.max_load, Hasher::random(), false);
        let layout = set.layout();
        let n = layout.buckets as u32;
        let bucket = (V4_SLOTS * KEY_BYTES) as u32;
        let tags = BpfMap::new(MapType::Array, 4, V4_SLOTS as u32, n, BPF_F_MMAPABLE, &format!("{name}_xt"))?;
        let keys = BpfMap::new(MapType::Array, 4, bucket, n, BPF_F_MMAPABLE, &format!("{name}_xk"))?;
        let (mut tm, mut km) = (tags.mmap()?, keys.mmap()?);
        set.write_layout(tm.bytes_mut(), km.bytes_mut());
        Ok(V4Exact { tags, keys, layout, hosts: set.len(), early_keys: how.early_keys })
    }

    /// How many hosts it holds.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// The most buckets a lookup reads (the unrolled walk's length).
    pub fn longest_probe(&self) -> usize {
        self.layout.longest_probe
    }

    /// Kernel memory its maps take, in bytes.
    pub fn bytes(&self) -> u64 {
        (V4_SLOTS * (1 + KEY_BYTES)) as u64 * self.layout.buckets as u64
    }

    /// `V4ExactSet::contains` of the address in `R9`: jumps to `hit` or
    /// `miss`. Clobbers R0-R5, R7 (the bucket) and R8 (the tag), which the
    /// IPv4 side of a match does not hold.
    pub fn emit(&self, a: &mut Asm, hit: Label, miss: Label) {
        self.emit_home(a);
        for _ in 0..self.layout.longest_probe {
            self.emit_bucket(a, &|_| hit, miss);
            a.alu_imm(Alu::Add, R7, 1);
            a.alu_imm(Alu::And, R7, self.layout.mask as i32);
        }
        // Past the longest probe no key lies (the table says so when built).
        a.ja(miss);
    }

    /// R7 = the home bucket of the address in R9, R8 = its tag (never 0:
    /// 0 is an empty slot). Clobbers R1 and R2.
    fn emit_home(&self, a: &mut Asm) {
        let l = &self.layout;
        // The engine's hash32.
        a.mov(R1, R9);
        a.ld_imm64(R2, l.k0);
        a.alu(Alu::Xor, R1, R2);
        a.ld_imm64(R2, l.mul);
        a.alu(Alu::Mul, R1, R2);
        a.mov(R2, R1);
        a.alu_imm(Alu::Rsh, R2, 32);
        a.alu(Alu::Xor, R1, R2);
        a.ld_imm64(R2, l.k1);
        a.alu(Alu::Mul, R1, R2);
        // R7 = the home bucket; R8 = the tag (never 0: 0 is an empty slot).
        a.mov(R7, R1);
        a.alu_imm(Alu::Rsh, R7, l.shift as i32);
        a.alu_imm(Alu::And, R7, l.mask as i32);
        a.mov(R8, R1);
        a.alu_imm(Alu::Rsh, R8, 32);
        a.alu_imm(Alu::And, R8, i32::from(u8::MAX));
        let tagged = a.label();
        a.jmp_imm(Cond::Ne, R8, 0, tagged);
        a.mov_imm(R8, 1);
        a.bind(tagged);
    }

    /// One bucket of the walk (R7 the bucket, R8 the tag): `hit(slot)` on
    /// a key equal to R9 in that slot, `miss` when the bucket is not full,
    /// else falls through to the next bucket.
    fn emit_bucket(&self, a: &mut Asm, hit: &dyn Fn(usize) -> Label, miss: Label) {
        use std::os::fd::AsRawFd;
        let candidate = a.label();
        let next = a.label();
        a.stx(Size::W, FP, KEY_SLOT, R7);
        if self.early_keys {
            // The key bucket's address does not depend on the tags: a load
            // from it now (its value unused) is in flight while the tags
            // load, so a member waits for one miss instead of two in a row.
            a.lookup(self.keys.as_raw_fd(), KEY_SLOT);
            a.jmp_imm(Cond::Eq, R0, 0, miss);
            a.stx(Size::DW, FP, KEYS_PTR, R0);
            a.ldx(Size::W, R1, R0, 0);
        }
        a.lookup(self.tags.as_raw_fd(), KEY_SLOT);
        a.jmp_imm(Cond::Eq, R0, 0, miss);
        // R3 = the tag in every byte; a word of tags XOR R3 has a zero byte
        // where a slot's tag matches: (x - 0x01..) & !x & 0x80.. is not 0
        // exactly when x has a zero byte.
        a.mov(R3, R8);
        a.ld_imm64(R4, BYTES_ONE);
        a.alu(Alu::Mul, R3, R4);
        a.ld_imm64(R5, BYTES_HIGH);
        for word in 0..(V4_SLOTS / 8) as i16 {
            a.ldx(Size::DW, R1, R0, 8 * word);
            a.alu(Alu::Xor, R1, R3);
            a.mov(R2, R1);
            a.alu(Alu::Sub, R2, R4);
            a.alu_imm(Alu::Xor, R1, -1);
            a.alu(Alu::And, R2, R1);
            a.alu(Alu::And, R2, R5);
            a.jmp_imm(Cond::Ne, R2, 0, candidate);
        }
        // No tag matches: the key can only be further on, past a full bucket.
        a.ldx(Size::B, R1, R0, (V4_SLOTS - 1) as i16);
        a.jmp_imm(Cond::Eq, R1, 0, miss);
        a.ja(next);
        // A tag matches: read the key bucket, compare the keys whose tags match.
        a.bind(candidate);
        if self.early_keys {
            a.mov(R1, R0);
            a.ldx(Size::DW, R0, FP, KEYS_PTR);
        } else {
            a.stx(Size::DW, FP, TAGS_PTR, R0);
            a.lookup(self.keys.as_raw_fd(), KEY_SLOT);
            a.jmp_imm(Cond::Eq, R0, 0, miss);
            a.ldx(Size::DW, R1, FP, TAGS_PTR);
        }
        for slot in 0..V4_SLOTS as i16 {
            let other = a.label();
            a.ldx(Size::B, R2, R1, slot);
            a.jmp(Cond::Ne, R2, R8, other);
            a.ldx(Size::W, R2, R0, slot * KEY_BYTES as i16);
            a.jmp(Cond::Eq, R2, R9, hit(slot as usize));
            a.bind(other);
        }
        a.ldx(Size::B, R2, R1, (V4_SLOTS - 1) as i16);
        a.jmp_imm(Cond::Eq, R2, 0, miss);
        a.bind(next);
    }
}

/// How the program tests an IPv4 address (host order, in `R9`).
pub enum V4Code {
    /// (network, length) compares.
    Inline(Vec<(u32, u8)>),
    /// The engine's two-level prefix table in two array maps.
    Table(V4Table),
    /// A dynamic set's elements that are not in its host table ([`DynHosts`]):
    /// an LPM trie, looked up only while it holds any.
    Dynamic(Trie),
}

/// How the program tests an IPv6 address (its two halves as loaded from
/// the packet, in `R7` and `R8`): compares for a few prefixes, else one
/// hash map per prefix length the set has, each looked up with the
/// address masked to that length (as many lookups as lengths: blocklists
/// have a handful, /32 /48 /64 /128).
pub enum V6Code {
    Inline(Vec<(u128, u8)>),
    Hashed(Vec<(u8, BpfMap)>),
    /// A dynamic set's IPv6 elements: an LPM trie, looked up only while it
    /// holds any.
    Dynamic(Trie),
}

/// An LPM trie key: prefix length, then the address in network order.
fn lpm_key(p: &sluice_rules::Prefix) -> Vec<u8> {
    let (len, bytes) = match *p {
        sluice_rules::Prefix::V4 { addr, len } => (len, addr.to_be_bytes().to_vec()),
        sluice_rules::Prefix::V6 { addr, len } => (len, addr.to_be_bytes().to_vec()),
    };
    let mut key = u32::from(len).to_ne_bytes().to_vec();
    key.extend_from_slice(&bytes);
    key
}

/// A dynamic set's trie of one family, and the word of the set's count
/// map that holds how many elements it has: the program skips the trie's
/// lookup (hundreds of ns) while that is 0, which it is for a set of
/// addresses that all fit its host table.
pub struct Trie {
    map: BpfMap,
    counts: std::sync::Arc<Counts>,
    /// The word's index in the count map (0: IPv4, 1: IPv6).
    word: usize,
}

/// A dynamic set's count map: one record of two words, the IPv4 and the
/// IPv6 trie's elements, written through its mapping.
pub struct Counts {
    map: BpfMap,
    mapped: MappedArray,
}

impl Counts {
    fn new(name: &str) -> Result<Counts, LiveError> {
        let map = BpfMap::new(MapType::Array, 4, 16, 1, BPF_F_MMAPABLE, &format!("{name}_dn"))?;
        let mapped = map.mmap()?;
        Ok(Counts { map, mapped })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        self.mapped.atomic_u64(8 * i)
    }
}

impl Trie {
    fn new(
        key_bytes: u32,
        maxelem: u32,
        counts: &std::sync::Arc<Counts>,
        word: usize,
        name: &str,
    ) -> Result<Trie, LiveError> {
        use sluice_live::bpf::BPF_F_NO_PREALLOC;
        let map = BpfMap::new(MapType::LpmTrie, key_bytes, 1, maxelem.max(1), BPF_F_NO_PREALLOC, name)?;
        Ok(Trie { map, counts: std::sync::Arc::clone(counts), word })
    }

    /// How many elements it holds, as the program reads it.
    pub fn len(&self) -> u64 {
        self.counts.word(self.word).load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `p` with its origin byte (0: none) as its value; an element
    /// present gets the new origin.
    fn insert(&self, p: &sluice_rules::Prefix, origin: u8) -> Result<(), LiveError> {
        self.map.update(&lpm_key(p), &[origin])?;
        // After the element: a program that reads the new count finds it.
        // (An element written twice counts twice: the count may only be
        // high, which costs a lookup, never low, which would miss one.)
        self.counts.word(self.word).fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn remove(&self, p: &sluice_rules::Prefix) -> Result<(), LiveError> {
        if self.map.remove(&lpm_key(p))? {
            let w = self.counts.word(self.word);
            // Never below 0 (see `insert`).
            let _ = w.fetch_update(Ordering::Release, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        Ok(())
    }

    /// Its elements, read from the kernel (a call per element), with
    /// their origin bytes when `origins` (another call each), else 0.
    fn elements(&self, origins: bool) -> Result<Vec<(sluice_rules::Prefix, u8)>, LiveError> {
        let mut all = Vec::new();
        for k in self.map.keys()? {
            let Some(p) = prefix_of_lpm_key(&k) else { continue };
            let origin = if origins {
                // Gone since the keys were read: not an element any more.
                let Some(v) = self.map.lookup(&k)? else { continue };
                v.first().copied().unwrap_or(0)
            } else {
                0
            };
            all.push((p, origin));
        }
        Ok(all)
    }

    /// R0 = the value of the longest element holding the address (in R9
    /// for IPv4, R7/R8 for IPv6), or 0. Clobbers R0-R5.
    fn emit_lookup(&self, a: &mut Asm, v6: bool) {
        use std::os::fd::AsRawFd;
        if v6 {
            a.st_imm(Size::W, FP, LPM_KEY, 128);
            // The address's 16 bytes in four 4-byte stores (the key is
            // not 8-byte aligned past its length).
            for (i, reg) in [R7, R8].into_iter().enumerate() {
                let at = LPM_KEY + 4 + 8 * i as i16;
                a.mov(R1, reg);
                a.stx(Size::W, FP, at, R1);
                a.alu_imm(Alu::Rsh, R1, 32);
                a.stx(Size::W, FP, at + 4, R1);
            }
        } else {
            a.st_imm(Size::W, FP, LPM_KEY, 32);
            a.mov(R1, R9);
            a.from_be(R1, 32);
            a.stx(Size::W, FP, LPM_KEY + 4, R1);
        }
        a.lookup(self.map.as_raw_fd(), LPM_KEY);
    }

    /// R0 = the origin byte of the longest element holding the address,
    /// then `found`; `none` when no element holds it. Clobbers R0-R5.
    fn emit_origin(&self, a: &mut Asm, v6: bool, found: Label, none: Label) {
        self.emit_gate(a, none);
        self.emit_lookup(a, v6);
        a.jmp_imm(Cond::Eq, R0, 0, none);
        a.ldx(Size::B, R0, R0, 0);
        a.ja(found);
    }

    /// Jumps to `miss` when the trie is empty; falls through otherwise.
    /// Clobbers R0-R5.
    fn emit_gate(&self, a: &mut Asm, miss: Label) {
        use std::os::fd::AsRawFd;
        a.st_imm(Size::W, FP, KEY_SLOT, 0);
        a.lookup(self.counts.map.as_raw_fd(), KEY_SLOT);
        a.jmp_imm(Cond::Eq, R0, 0, miss);
        a.ldx(Size::DW, R1, R0, 8 * self.word as i16);
        a.jmp_imm(Cond::Eq, R1, 0, miss);
    }
}

/// A dynamic set's IPv4 hosts: an exact table as [`V4Exact`]'s, empty when
/// made and written element by element through its mappings, so a
/// runtime add is two stores (not a `bpf()` call and a trie insert). Its
/// lookup reads the home bucket only: a host whose home bucket is full goes
/// to the trie instead, as does every prefix that is not a /32 (at the
/// table's half fill, rare: see [`DynHosts::buckets_for`]).
///
/// One writer at a time (the mirror, under the kernel's lock); the program
/// reads meanwhile. An add stores the key, then the tag (release): a
/// program that sees the tag sees the key. A removal clears the tag; its
/// key stays until the slot is reused, and a reader that saw the old tag
/// and then a new key compares unequal (the removed address is passed,
/// which it would be a moment later anyway).
pub struct DynHosts {
    exact: V4Exact,
    tags: MappedArray,
    keys: MappedArray,
    origins: Option<SlotOrigins>,
    hasher: Hasher,
}

/// Per slot of a dynamic set's host table, the origin of the host in it,
/// when the set's drops are counted by origin (the CrowdSec feed's set):
/// one byte per slot, a record per bucket, written through its mapping
/// before the slot's tag. 0 is no origin; origin tag `t` is `t + 1`
/// ([`origin_byte`]).
struct SlotOrigins {
    map: BpfMap,
    mapped: MappedArray,
    /// Bytes per bucket (the slots, rounded up to 8 for an array map).
    record: usize,
}

impl SlotOrigins {
    fn new(buckets: usize, slots: usize, name: &str) -> Result<SlotOrigins, LiveError> {
        let record = slots.next_multiple_of(8);
        let map = BpfMap::new(MapType::Array, 4, record as u32, buckets as u32, BPF_F_MMAPABLE, name)?;
        let mapped = map.mmap()?;
        Ok(SlotOrigins { map, mapped, record })
    }

    fn at(&self, b: usize, s: usize) -> &std::sync::atomic::AtomicU8 {
        self.mapped.atomic_u8(b * self.record + s)
    }

    /// Per slot `s` of a walk's bucket (its index at [`KEY_SLOT`]): R0 =
    /// the origin byte, then `found`; `none` if the record cannot be read.
    fn emit_slots(&self, a: &mut Asm, slots: &[Label], found: Label, none: Label) {
        use std::os::fd::AsRawFd;
        for (s, &l) in slots.iter().enumerate() {
            a.bind(l);
            a.lookup(self.map.as_raw_fd(), KEY_SLOT);
            a.jmp_imm(Cond::Eq, R0, 0, none);
            a.ldx(Size::B, R0, R0, s as i16);
            a.ja(found);
        }
    }

    fn bytes(&self) -> u64 {
        u64::from(self.map.entries()) * self.record as u64
    }
}

/// The byte a host table slot or a trie element holds for origin tag
/// `tag`: `tag + 1`, 0 for none (and for a tag past [`ORIGIN_SLOTS`],
/// which the registry of origins never hands out).
pub fn origin_byte(tag: Option<u16>) -> u8 {
    match tag {
        Some(t) if usize::from(t) < ORIGIN_SLOTS => t as u8 + 1,
        _ => 0,
    }
}

/// Origins the kernel counts drops of: `sluice_policy::usage::MAX_ORIGINS`.
pub const ORIGIN_SLOTS: usize = 32;

/// The most buckets a dynamic set's host table takes (20 MiB of kernel
/// memory, 4M slots): beyond it a set's further hosts go to its trie.
pub const DYN_MAX_BUCKETS: usize = 1 << 18;

impl DynHosts {
    /// Buckets for `maxelem` hosts at half fill (the engine's own fill:
    /// a home bucket of 16 slots then holds 8 on average, and overflows
    /// for about 1 host in 1,000), a power of two, at least 64.
    pub fn buckets_for(maxelem: u32) -> usize {
        (maxelem as usize).div_ceil(V4_SLOTS / 2).next_power_of_two().clamp(64, DYN_MAX_BUCKETS)
    }

    fn new(buckets: usize, name: &str, origins: bool) -> Result<DynHosts, LiveError> {
        let hasher = Hasher::random();
        let (k0, k1) = hasher.keys();
        let bits = buckets.trailing_zeros();
        let layout = ExactLayout {
            buckets,
            k0,
            k1,
            mul: sluice_sets::HASH_MUL,
            mul_hi: 0,
            shift: 64 - bits,
            mask: (buckets - 1) as u32,
            // The home bucket alone (full ones spill to the trie).
            longest_probe: 1,
        };
        let n = buckets as u32;
        let bucket = (V4_SLOTS * KEY_BYTES) as u32;
        let tags = BpfMap::new(MapType::Array, 4, V4_SLOTS as u32, n, BPF_F_MMAPABLE, &format!("{name}_dxt"))?;
        let keys = BpfMap::new(MapType::Array, 4, bucket, n, BPF_F_MMAPABLE, &format!("{name}_dxk"))?;
        let (tm, km) = (tags.mmap()?, keys.mmap()?);
        let exact = V4Exact { tags, keys, layout, hosts: 0, early_keys: true };
        let origins = origins.then(|| SlotOrigins::new(buckets, V4_SLOTS, &format!("{name}_dxo"))).transpose()?;
        Ok(DynHosts { exact, tags: tm, keys: km, origins, hasher })
    }

    /// The home bucket and tag of `addr`, as the program computes them.
    fn place(&self, addr: u32) -> (usize, u8) {
        let l = &self.exact.layout;
        let h = self.hasher.hash32(addr);
        let tag = (h >> 32) as u8;
        (((h >> l.shift) as usize) & l.mask as usize, tag.max(1))
    }

    /// The slots of bucket `b` whose tag is `tag`, from its tag record read
    /// 8 tags a word (as the program compares them): a candidate's tag
    /// checked again, since the zero-byte test can flag a byte above a
    /// match.
    fn slots_tagged(&self, b: usize, tag: u8) -> impl Iterator<Item = usize> + '_ {
        (0..V4_SLOTS / 8).flat_map(move |w| {
            let at = b * V4_SLOTS + 8 * w;
            let word = u64::from_le(self.tags.atomic_u64(at).load(Ordering::Relaxed));
            let x = word ^ (u64::from(tag) * BYTES_ONE);
            let mut hits = x.wrapping_sub(BYTES_ONE) & !x & BYTES_HIGH;
            std::iter::from_fn(move || {
                while hits != 0 {
                    let s = 8 * w + (hits.trailing_zeros() / 8) as usize;
                    hits &= hits - 1;
                    if (word >> (8 * (s % 8))) as u8 == tag {
                        return Some(s);
                    }
                }
                None
            })
        })
    }

    /// The slot of `addr` in bucket `b`, if it is there.
    fn find(&self, b: usize, tag: u8, addr: u32) -> Option<usize> {
        self.slots_tagged(b, tag)
            .find(|&s| self.keys.atomic_u32((b * V4_SLOTS + s) * KEY_BYTES).load(Ordering::Relaxed) == addr)
    }

    /// Gives `addr` origin byte `origin` when it is in the table: false
    /// when it is not.
    fn set_origin(&self, addr: u32, origin: u8) -> bool {
        let (b, tag) = self.place(addr);
        let Some(s) = self.find(b, tag, addr) else { return false };
        if let Some(o) = &self.origins {
            o.at(b, s).store(origin, Ordering::Relaxed);
        }
        true
    }

    /// Adds `addr` of origin byte `origin` ([`origin_byte`]): false when
    /// its home bucket is full (it belongs in the trie then). Adding a
    /// present host changes its origin only.
    pub fn insert(&self, addr: u32, origin: u8) -> bool {
        let (b, tag) = self.place(addr);
        if let Some(s) = self.find(b, tag, addr) {
            if let Some(o) = &self.origins {
                o.at(b, s).store(origin, Ordering::Relaxed);
            }
            return true;
        }
        // An empty slot's tag is 0 (a tag is never 0).
        let Some(s) = self.slots_tagged(b, 0).next() else { return false };
        let slot = b * V4_SLOTS + s;
        self.keys.atomic_u32(slot * KEY_BYTES).store(addr, Ordering::Relaxed);
        if let Some(o) = &self.origins {
            o.at(b, s).store(origin, Ordering::Relaxed);
        }
        self.tags.atomic_u8(slot).store(tag, Ordering::Release);
        true
    }

    /// The origin byte of the address in R9 when it is in the table (R0,
    /// then `found`), else `none`. Clobbers R0-R5, R7 and R8.
    fn emit_origin(&self, a: &mut Asm, found: Label, none: Label) {
        let Some(o) = &self.origins else {
            a.ja(none);
            return;
        };
        let slots: Vec<Label> = (0..V4_SLOTS).map(|_| a.label()).collect();
        self.exact.emit_home(a);
        self.exact.emit_bucket(a, &|s| slots[s], none);
        a.ja(none);
        o.emit_slots(a, &slots, found, none);
    }

    /// Removes `addr`: false when it is not in the table (it may be in
    /// the trie).
    pub fn remove(&self, addr: u32) -> bool {
        let (b, tag) = self.place(addr);
        let Some(s) = self.find(b, tag, addr) else { return false };
        self.tags.atomic_u8(b * V4_SLOTS + s).store(0, Ordering::Release);
        true
    }

    /// Kernel memory its maps take, in bytes.
    pub fn bytes(&self) -> u64 {
        self.exact.bytes() + self.origins.as_ref().map_or(0, SlotOrigins::bytes)
    }

    /// Every host it holds, with its origin byte: a scan of its tags, read
    /// in place 8 at a time (O(slots): 4M slots in well under a
    /// millisecond, what a set going from empty to one element costs the
    /// mirror).
    fn hosts(&self) -> impl Iterator<Item = (u32, u8)> + '_ {
        (0..self.exact.layout.buckets * V4_SLOTS / 8)
            .filter(|&w| self.tags.atomic_u64(8 * w).load(Ordering::Relaxed) != 0)
            .flat_map(|w| 8 * w..8 * w + 8)
            .filter(|&slot| self.tags.atomic_u8(slot).load(Ordering::Relaxed) != 0)
            .map(|slot| {
                let origin =
                    self.origins.as_ref().map_or(0, |o| o.at(slot / V4_SLOTS, slot % V4_SLOTS).load(Ordering::Relaxed));
                (self.keys.atomic_u32(slot * KEY_BYTES).load(Ordering::Relaxed), origin)
            })
    }
}

/// A dynamic set's IPv6 hosts (/128s): [`V6Exact`]'s layout (4 tags and
/// 4 network-order keys per bucket), empty when made and written in place
/// as [`DynHosts`] is, the home bucket only read. A key is 16 bytes, more
/// than one store: its four words are stored, then the tag (release). A
/// reader that saw a removed host's tag before the slot is reused may read
/// a key of both hosts' words; it can equal the removed host only when
/// the new one shares that half (the removed host is then dropped once
/// more, a moment after its removal, which a reader a moment earlier
/// would have done anyway).
pub struct DynHosts6 {
    exact: V6Exact,
    tags: MappedArray,
    keys: MappedArray,
    origins: Option<SlotOrigins>,
    hasher: Hasher,
}

/// The most buckets a dynamic set's IPv6 host table takes (9 MiB, 512k
/// slots): beyond it a set's further IPv6 hosts go to its trie.
pub const DYN6_MAX_BUCKETS: usize = 1 << 17;

impl DynHosts6 {
    /// Buckets for `maxelem` hosts at a quarter fill (a bucket of 4 slots
    /// then holds 1 on average, and overflows for about 1 host in 200), a
    /// power of two, at least 64.
    pub fn buckets_for(maxelem: u32) -> usize {
        (maxelem as usize).next_power_of_two().clamp(64, DYN6_MAX_BUCKETS)
    }

    fn new(buckets: usize, name: &str, origins: bool) -> Result<DynHosts6, LiveError> {
        let hasher = Hasher::random();
        let (k0, k1) = hasher.keys();
        let layout = ExactLayout {
            buckets,
            k0,
            k1,
            mul: sluice_sets::HASH_MUL,
            mul_hi: sluice_sets::HASH_MUL_HI,
            shift: 64 - buckets.trailing_zeros(),
            mask: (buckets - 1) as u32,
            longest_probe: 1,
        };
        let n = buckets as u32;
        let record = V6_SLOTS.next_multiple_of(8);
        let tags = BpfMap::new(MapType::Array, 4, record as u32, n, BPF_F_MMAPABLE, &format!("{name}_d6xt"))?;
        let keys = BpfMap::new(MapType::Array, 4, BUCKET_BYTES as u32, n, BPF_F_MMAPABLE, &format!("{name}_d6xk"))?;
        let (tm, km) = (tags.mmap()?, keys.mmap()?);
        let origins = origins.then(|| SlotOrigins::new(buckets, V6_SLOTS, &format!("{name}_d6xo"))).transpose()?;
        Ok(DynHosts6 { exact: V6Exact { tags, keys, layout }, tags: tm, keys: km, origins, hasher })
    }

    /// The home bucket and tag of `addr`, as the program computes them.
    fn place(&self, addr: u128) -> (usize, u8) {
        let l = &self.exact.layout;
        let h = self.hasher.hash128(addr);
        (((h >> l.shift) as usize) & l.mask as usize, ((h >> 32) as u8).max(1))
    }

    /// Slot `s` of bucket `b`: where its tag and its key's first byte are.
    fn at(b: usize, s: usize) -> (usize, usize) {
        (b * V6_SLOTS.next_multiple_of(8) + s, b * BUCKET_BYTES + s * KEY6_BYTES)
    }

    fn key(&self, b: usize, s: usize) -> u128 {
        let (_, k) = Self::at(b, s);
        let mut bytes = [0u8; 16];
        for w in 0..4 {
            let word = self.keys.atomic_u32(k + 4 * w).load(Ordering::Relaxed);
            bytes[4 * w..4 * w + 4].copy_from_slice(&word.to_ne_bytes());
        }
        u128::from_be_bytes(bytes)
    }

    fn find(&self, b: usize, tag: u8, addr: u128) -> Option<usize> {
        (0..V6_SLOTS)
            .find(|&s| self.tags.atomic_u8(Self::at(b, s).0).load(Ordering::Relaxed) == tag && self.key(b, s) == addr)
    }

    /// Gives `addr` origin byte `origin` when it is in the table: false
    /// when it is not.
    fn set_origin(&self, addr: u128, origin: u8) -> bool {
        let (b, tag) = self.place(addr);
        let Some(s) = self.find(b, tag, addr) else { return false };
        if let Some(o) = &self.origins {
            o.at(b, s).store(origin, Ordering::Relaxed);
        }
        true
    }

    /// Adds `addr` of origin byte `origin`: false when its home bucket is
    /// full (it belongs in the trie then). Adding a present host changes
    /// its origin only.
    pub fn insert(&self, addr: u128, origin: u8) -> bool {
        let (b, tag) = self.place(addr);
        if let Some(s) = self.find(b, tag, addr) {
            if let Some(o) = &self.origins {
                o.at(b, s).store(origin, Ordering::Relaxed);
            }
            return true;
        }
        let free = (0..V6_SLOTS).find(|&s| self.tags.atomic_u8(Self::at(b, s).0).load(Ordering::Relaxed) == 0);
        let Some(s) = free else { return false };
        let (t, k) = Self::at(b, s);
        let bytes = addr.to_be_bytes();
        for w in 0..4 {
            let word = u32::from_ne_bytes(bytes[4 * w..4 * w + 4].try_into().expect("4 bytes"));
            self.keys.atomic_u32(k + 4 * w).store(word, Ordering::Relaxed);
        }
        if let Some(o) = &self.origins {
            o.at(b, s).store(origin, Ordering::Relaxed);
        }
        self.tags.atomic_u8(t).store(tag, Ordering::Release);
        true
    }

    /// The origin byte of the address in R7/R8 when it is in the table
    /// (R0, then `found`), else `none`. Clobbers R0-R5 and R9.
    fn emit_origin(&self, a: &mut Asm, found: Label, none: Label) {
        let Some(o) = &self.origins else {
            a.ja(none);
            return;
        };
        let slots: Vec<Label> = (0..V6_SLOTS).map(|_| a.label()).collect();
        self.exact.emit_home(a);
        self.exact.emit_bucket(a, &|s| slots[s], none);
        a.ja(none);
        o.emit_slots(a, &slots, found, none);
    }

    /// Removes `addr`: false when it is not in the table.
    pub fn remove(&self, addr: u128) -> bool {
        let (b, tag) = self.place(addr);
        let Some(s) = self.find(b, tag, addr) else { return false };
        self.tags.atomic_u8(Self::at(b, s).0).store(0, Ordering::Release);
        true
    }

    /// Every host it holds, with its origin byte (a scan of its tags).
    fn hosts(&self) -> impl Iterator<Item = (u128, u8)> + '_ {
        // A bucket's tag record is one word (4 tags, 4 bytes of padding).
        let record = V6_SLOTS.next_multiple_of(8);
        let full = move |b: usize| self.tags.atomic_u64(b * record).load(Ordering::Relaxed) != 0;
        (0..self.exact.layout.buckets).filter(move |&b| full(b)).flat_map(move |b| {
            (0..V6_SLOTS)
                .filter(move |&s| self.tags.atomic_u8(Self::at(b, s).0).load(Ordering::Relaxed) != 0)
                .map(move |s| (self.key(b, s), self.origins.as_ref().map_or(0, |o| o.at(b, s).load(Ordering::Relaxed))))
        })
    }

    /// Kernel memory its maps take, in bytes.
    pub fn bytes(&self) -> u64 {
        self.exact.bytes() + self.origins.as_ref().map_or(0, SlotOrigins::bytes)
    }
}

/// A dynamic set's tables, which the runtime changes are written to: the
/// host tables, then the tries.
pub struct DynamicMaps<'a> {
    hosts: &'a DynHosts,
    hosts6: &'a DynHosts6,
    v4: &'a Trie,
    v6: &'a Trie,
}

impl DynamicMaps<'_> {
    /// Adds `p` of origin byte `origin` ([`origin_byte`]; 0 for none), or
    /// gives a present `p` that origin (the kernel's trie refuses beyond
    /// the set's maxelem: E2BIG).
    pub fn insert(&self, p: &sluice_rules::Prefix, origin: u8) -> Result<(), LiveError> {
        match *p {
            sluice_rules::Prefix::V4 { addr, len: 32 } if self.hosts.insert(addr, origin) => Ok(()),
            sluice_rules::Prefix::V6 { addr, len: 128 } if self.hosts6.insert(addr, origin) => Ok(()),
            sluice_rules::Prefix::V4 { .. } => self.v4.insert(p, origin),
            sluice_rules::Prefix::V6 { .. } => self.v6.insert(p, origin),
        }
    }

    /// Gives `p`, an element already, origin byte `origin` where it is
    /// (its host slot, else the trie); an element that is not there is
    /// added.
    pub fn retag(&self, p: &sluice_rules::Prefix, origin: u8) -> Result<(), LiveError> {
        let held = match *p {
            sluice_rules::Prefix::V4 { addr, len: 32 } => self.hosts.set_origin(addr, origin),
            sluice_rules::Prefix::V6 { addr, len: 128 } => self.hosts6.set_origin(addr, origin),
            _ => false,
        };
        let trie = if matches!(p, sluice_rules::Prefix::V4 { .. }) { self.v4 } else { self.v6 };
        if held || trie.map.update_existing(&lpm_key(p), &[origin])? {
            return Ok(());
        }
        self.insert(p, origin)
    }

    /// Whether its elements carry origins (the set's drops are counted by
    /// origin).
    pub fn counts_origins(&self) -> bool {
        self.hosts.origins.is_some()
    }

    /// Removes exactly `p`.
    pub fn remove(&self, p: &sluice_rules::Prefix) -> Result<(), LiveError> {
        match *p {
            sluice_rules::Prefix::V4 { addr, len: 32 } if self.hosts.remove(addr) => Ok(()),
            sluice_rules::Prefix::V6 { addr, len: 128 } if self.hosts6.remove(addr) => Ok(()),
            sluice_rules::Prefix::V4 { .. } => self.v4.remove(p),
            sluice_rules::Prefix::V6 { .. } => self.v6.remove(p),
        }
    }

    /// Every element the kernel holds (the host table scanned, the tries
    /// read a call per element): what a writer that keeps no copy of its
    /// own compares a new set of elements with.
    pub fn elements(&self) -> Result<Vec<(sluice_rules::Prefix, u8)>, LiveError> {
        let mut all: Vec<(sluice_rules::Prefix, u8)> =
            self.hosts.hosts().map(|(addr, o)| (sluice_rules::Prefix::V4 { addr, len: 32 }, o)).collect();
        all.extend(self.hosts6.hosts().map(|(addr, o)| (sluice_rules::Prefix::V6 { addr, len: 128 }, o)));
        let origins = self.counts_origins();
        all.extend(self.v4.elements(origins)?);
        all.extend(self.v6.elements(origins)?);
        Ok(all)
    }

    /// Elements in the tries (the rest are in the host table).
    pub fn in_tries(&self) -> (u64, u64) {
        (self.v4.len(), self.v6.len())
    }
}

/// The prefix an LPM trie key of [`lpm_key`]'s holds.
fn prefix_of_lpm_key(k: &[u8]) -> Option<sluice_rules::Prefix> {
    let len = u8::try_from(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?)).ok()?;
    match k.len() {
        8 => Some(sluice_rules::Prefix::V4 { addr: u32::from_be_bytes(k[4..8].try_into().ok()?), len }),
        20 => Some(sluice_rules::Prefix::V6 { addr: u128::from_be_bytes(k[4..20].try_into().ok()?), len }),
        _ => None,
    }
}

/// An IPv6 prefix's mask and network as the program holds the address:
/// two 64-bit halves loaded little-endian from network-order bytes.
fn halves(addr: u128, len: u8) -> ((u64, u64), (u64, u64)) {
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
    let (m, n) = (mask.to_be_bytes(), (addr & mask).to_be_bytes());
    let le = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    ((le(&m[..8]), le(&m[8..])), (le(&n[..8]), le(&n[8..])))
}

impl V6Code {
    pub fn new(prefixes: &[(u128, u8)], name: &str) -> Result<V6Code, LiveError> {
        if prefixes.len() <= INLINE_MAX {
            return Ok(V6Code::Inline(prefixes.to_vec()));
        }
        let mut by_len: std::collections::BTreeMap<u8, Vec<u128>> = std::collections::BTreeMap::new();
        for &(a, l) in prefixes {
            by_len.entry(l).or_default().push(a);
        }
        let mut maps = Vec::new();
        for (len, addrs) in by_len {
            let map = BpfMap::new(MapType::Hash, 16, 1, addrs.len() as u32, 0, &format!("{name}_6_{len}"))?;
            for a in addrs {
                let (_, (hi, lo)) = halves(a, len);
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&hi.to_le_bytes());
                key[8..].copy_from_slice(&lo.to_le_bytes());
                map.update(&key, &[1])?;
            }
            maps.push((len, map));
        }
        Ok(V6Code::Hashed(maps))
    }

    /// Jumps to `hit` when the address in R7/R8 is in the set, else to
    /// `miss`. Clobbers R0-R5.
    pub fn emit(&self, a: &mut Asm, hit: Label, miss: Label) {
        use std::os::fd::AsRawFd;
        match self {
            V6Code::Inline(prefixes) => {
                for &(net, len) in prefixes {
                    let ((mh, ml), (nh, nl)) = halves(net, len);
                    let next = a.label();
                    for (reg, m, n) in [(R7, mh, nh), (R8, ml, nl)] {
                        a.mov(R1, reg);
                        a.ld_imm64(R2, m);
                        a.alu(Alu::And, R1, R2);
                        a.ld_imm64(R2, n);
                        a.jmp(Cond::Ne, R1, R2, next);
                    }
                    a.ja(hit);
                    a.bind(next);
                }
                a.ja(miss);
            }
            V6Code::Hashed(maps) => {
                for (len, map) in maps {
                    let ((mh, ml), _) = halves(0, *len);
                    for (reg, m, at) in [(R7, mh, V6_KEY), (R8, ml, V6_KEY + 8)] {
                        a.mov(R1, reg);
                        a.ld_imm64(R2, m);
                        a.alu(Alu::And, R1, R2);
                        a.stx(Size::DW, FP, at, R1);
                    }
                    a.lookup(map.as_raw_fd(), V6_KEY);
                    a.jmp_imm(Cond::Ne, R0, 0, hit);
                }
                a.ja(miss);
            }
            V6Code::Dynamic(trie) => {
                trie.emit_gate(a, miss);
                trie.emit_lookup(a, true);
                a.jmp_imm(Cond::Ne, R0, 0, hit);
                a.ja(miss);
            }
        }
    }

    /// Kernel memory its maps take, roughly (keys, values, per-entry overhead).
    pub fn bytes(&self) -> u64 {
        match self {
            V6Code::Inline(_) | V6Code::Dynamic(_) => 0,
            V6Code::Hashed(maps) => maps.iter().map(|(_, m)| 80 * u64::from(m.entries())).sum(),
        }
    }
}

/// Where an IPv6 map key is built on the stack (16 bytes).
const V6_KEY: i16 = -32;
/// Where an LPM key is built: 4 bytes of length, then 4 or 16 of address.
const LPM_KEY: i16 = -56;

/// A [`V4PrefixSet`] in BPF maps.
pub struct V4Table {
    /// The summary's words, when the set keeps one (see `sluice_sets`'
    /// prefix module: most addresses of a sparse set end there, in 64 KiB
    /// that stay in cache, instead of at a group record of 8 MiB).
    summary: Option<BpfMap>,
    groups: BpfMap,
    hosts: BpfMap,
    prefixes: usize,
}

impl V4Table {
    /// Builds the engine's table for `prefixes` (host bits clear) and
    /// writes it into new maps through their mappings.
    pub fn new(prefixes: &[(u32, u8)], name: &str) -> Result<V4Table, LiveError> {
        let set = V4PrefixSet::new(prefixes);
        let (g, h) = set.levels_len();
        let groups = BpfMap::new(MapType::Array, 4, 32, g as u32, BPF_F_MMAPABLE, &format!("{name}_g"))?;
        let hosts = BpfMap::new(MapType::Array, 4, 32, h.max(1) as u32, BPF_F_MMAPABLE, &format!("{name}_h"))?;
        let mut gm = groups.mmap()?;
        let mut hm = hosts.mmap()?;
        set.write_levels(&mut gm.bytes_mut()[..g * 32], &mut hm.bytes_mut()[..h * 32]);
        let summary = match set.summary_words() {
            Some(words) => {
                let map = BpfMap::new(MapType::Array, 4, 8, words.len() as u32, BPF_F_MMAPABLE, &format!("{name}_s"))?;
                let mut m = map.mmap()?;
                for (c, w) in m.bytes_mut().chunks_exact_mut(8).zip(words) {
                    c.copy_from_slice(&w.to_le_bytes());
                }
                Some(map)
            }
            None => None,
        };
        Ok(V4Table { summary, groups, hosts, prefixes: prefixes.len() })
    }

    /// How many prefixes it was built from.
    pub fn prefixes(&self) -> usize {
        self.prefixes
    }

    /// Kernel memory its maps take, in bytes.
    pub fn bytes(&self) -> u64 {
        32 * (u64::from(self.groups.entries()) + u64::from(self.hosts.entries()))
            + self.summary.as_ref().map_or(0, |m| 8 * u64::from(m.entries()))
    }
}

/// A [`V6ExactSet`] in two mmapable array maps: per bucket, its
/// [`V6_SLOTS`] tags and its keys (64 bytes: the addresses' network-order
/// bytes, as the program holds them in R7 and R8).
pub struct V6Exact {
    tags: BpfMap,
    keys: BpfMap,
    layout: ExactLayout,
}

impl V6Exact {
    pub fn new(hosts: &[u128], how: &Layout, name: &str) -> Result<V6Exact, LiveError> {
        let set = V6ExactSet::with_filter(hosts, how.max_load, Hasher::random(), false);
        let layout = set.layout();
        let n = layout.buckets as u32;
        // An array map's values are 8-byte aligned: each bucket's 4 tags
        // take a record of 8 (the program reads the first 4).
        let record = V6_SLOTS.next_multiple_of(8);
        let tags = BpfMap::new(MapType::Array, 4, record as u32, n, BPF_F_MMAPABLE, &format!("{name}_6xt"))?;
        let keys = BpfMap::new(MapType::Array, 4, BUCKET_BYTES as u32, n, BPF_F_MMAPABLE, &format!("{name}_6xk"))?;
        let (mut tm, mut km) = (tags.mmap()?, keys.mmap()?);
        let mut packed = vec![0u8; layout.buckets * V6_SLOTS];
        set.write_layout(&mut packed, km.bytes_mut());
        for (to, from) in tm.bytes_mut().chunks_exact_mut(record).zip(packed.chunks_exact(V6_SLOTS)) {
            to[..V6_SLOTS].copy_from_slice(from);
        }
        Ok(V6Exact { tags, keys, layout })
    }

    /// Kernel memory its maps take, in bytes.
    pub fn bytes(&self) -> u64 {
        // Each tag record rounds up to 8 bytes in an array map.
        (V6_SLOTS.next_multiple_of(8) + BUCKET_BYTES) as u64 * self.layout.buckets as u64
    }

    /// `V6ExactSet::contains` of the address in R7/R8 (its halves as
    /// loaded from the packet): jumps to `hit` or `miss`. Clobbers R0-R5
    /// and R9 (the bucket), which the IPv6 side of a match does not hold.
    pub fn emit(&self, a: &mut Asm, hit: Label, miss: Label) {
        self.emit_home(a);
        for _ in 0..self.layout.longest_probe {
            self.emit_bucket(a, &|_| hit, miss);
            a.alu_imm(Alu::Add, R9, 1);
            a.alu_imm(Alu::And, R9, self.layout.mask as i32);
        }
        a.ja(miss);
    }

    /// R9 = the home bucket of the address in R7/R8; its tag (never 0) and
    /// the tag in every byte on the stack. Clobbers R1-R4.
    fn emit_home(&self, a: &mut Asm) {
        let l = &self.layout;
        // The engine's hash128 of the address as a number: its halves
        // byte-swapped.
        a.mov(R1, R8);
        a.from_be(R1, 64);
        a.ld_imm64(R2, l.k0);
        a.alu(Alu::Xor, R1, R2);
        a.ld_imm64(R2, l.mul);
        a.alu(Alu::Mul, R1, R2);
        a.mov(R3, R7);
        a.from_be(R3, 64);
        a.ld_imm64(R2, l.k1);
        a.alu(Alu::Xor, R3, R2);
        a.ld_imm64(R2, l.mul_hi);
        a.alu(Alu::Mul, R3, R2);
        a.mov(R4, R3);
        a.alu_imm(Alu::Lsh, R4, 32);
        a.alu_imm(Alu::Rsh, R3, 32);
        a.alu(Alu::Or, R3, R4);
        a.alu(Alu::Xor, R1, R3);
        a.mov(R2, R1);
        a.alu_imm(Alu::Rsh, R2, 29);
        a.alu(Alu::Xor, R1, R2);
        a.ld_imm64(R2, l.k1);
        a.alu(Alu::Mul, R1, R2);
        // R9 = the home bucket; the tag (never 0) and its word on the stack.
        a.mov(R9, R1);
        a.alu_imm(Alu::Rsh, R9, l.shift as i32);
        a.alu_imm(Alu::And, R9, l.mask as i32);
        a.alu_imm(Alu::Rsh, R1, 32);
        a.alu_imm(Alu::And, R1, i32::from(u8::MAX));
        let tagged = a.label();
        a.jmp_imm(Cond::Ne, R1, 0, tagged);
        a.mov_imm(R1, 1);
        a.bind(tagged);
        a.stx(Size::DW, FP, TAG6, R1);
        a.ld_imm64(R2, BYTES_ONE);
        a.alu(Alu::Mul, R1, R2);
        a.stx(Size::DW, FP, TAG6_BYTES, R1);
    }

    /// One bucket of the walk (R9 the bucket): as [`V4Exact`]'s, the key
    /// bucket loaded first.
    fn emit_bucket(&self, a: &mut Asm, hit: &dyn Fn(usize) -> Label, miss: Label) {
        use std::os::fd::AsRawFd;
        let candidate = a.label();
        let next = a.label();
        a.stx(Size::W, FP, KEY_SLOT, R9);
        a.lookup(self.keys.as_raw_fd(), KEY_SLOT);
        a.jmp_imm(Cond::Eq, R0, 0, miss);
        a.stx(Size::DW, FP, KEYS_PTR, R0);
        a.ldx(Size::W, R1, R0, 0);
        a.lookup(self.tags.as_raw_fd(), KEY_SLOT);
        a.jmp_imm(Cond::Eq, R0, 0, miss);
        // The 4 tags in one word: a zero byte of tags XOR the tag's word
        // is a match (the test of `V4Exact`, on the low 32 bits).
        a.ldx(Size::W, R1, R0, 0);
        a.ldx(Size::DW, R3, FP, TAG6_BYTES);
        a.alu(Alu::Xor, R1, R3);
        a.mov(R2, R1);
        a.ld_imm64(R4, u64::from(BYTES_ONE as u32));
        a.alu(Alu::Sub, R2, R4);
        a.alu_imm(Alu::Xor, R1, -1);
        a.alu(Alu::And, R2, R1);
        a.ld_imm64(R5, u64::from(BYTES_HIGH as u32));
        a.alu(Alu::And, R2, R5);
        a.jmp_imm(Cond::Ne, R2, 0, candidate);
        a.ldx(Size::B, R1, R0, (V6_SLOTS - 1) as i16);
        a.jmp_imm(Cond::Eq, R1, 0, miss);
        a.ja(next);
        a.bind(candidate);
        a.mov(R1, R0);
        a.ldx(Size::DW, R0, FP, KEYS_PTR);
        a.ldx(Size::DW, R4, FP, TAG6);
        for slot in 0..V6_SLOTS as i16 {
            let other = a.label();
            let at = slot * KEY6_BYTES as i16;
            a.ldx(Size::B, R2, R1, slot);
            a.jmp(Cond::Ne, R2, R4, other);
            a.ldx(Size::DW, R2, R0, at);
            a.jmp(Cond::Ne, R2, R7, other);
            a.ldx(Size::DW, R2, R0, at + 8);
            a.jmp(Cond::Eq, R2, R8, hit(slot as usize));
            a.bind(other);
        }
        a.ldx(Size::B, R2, R1, (V6_SLOTS - 1) as i16);
        a.jmp_imm(Cond::Eq, R2, 0, miss);
        a.bind(next);
    }
}

impl SetCode {
    /// The code for `prefixes`: each family's compares when few, else
    /// tables (a mostly-hosts IPv4 part's hosts in the exact table, as
    /// `layout` allows).
    pub fn new(prefixes: &[sluice_rules::Prefix], name: &str, layout: &Layout) -> Result<SetCode, LiveError> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for p in prefixes {
            match *p {
                sluice_rules::Prefix::V4 { addr, len } => v4.push((addr, len)),
                sluice_rules::Prefix::V6 { addr, len } => v6.push((addr, len)),
            }
        }
        let hosts: Vec<u32> = v4.iter().filter(|p| p.1 == 32).map(|p| p.0).collect();
        let mut v4_hosts = None;
        if layout.exact_hosts && hosts.len() > INLINE_MAX && hosts.len() * 100 >= v4.len() * EXACT_MIN_HOSTS_PCT {
            v4_hosts = Some(V4Exact::new(&hosts, layout, name)?);
            v4.retain(|p| p.1 != 32);
        }
        let v4 = if v4.len() <= INLINE_MAX { V4Code::Inline(v4) } else { V4Code::Table(V4Table::new(&v4, name)?) };
        let hosts6: Vec<u128> = v6.iter().filter(|p| p.1 == 128).map(|p| p.0).collect();
        let mut v6_hosts = None;
        if layout.exact_hosts && hosts6.len() > INLINE_MAX && hosts6.len() * 100 >= v6.len() * EXACT_MIN_HOSTS_PCT {
            v6_hosts = Some(V6Exact::new(&hosts6, layout, name)?);
            v6.retain(|p| p.1 != 128);
        }
        Ok(SetCode { v4_hosts, v4, v6_hosts, v6: V6Code::new(&v6, name)?, dyn_hosts: None, dyn_hosts6: None })
    }

    /// A dynamic set: an empty host table for `maxelem` IPv4 hosts and
    /// empty tries of at most `maxelem` elements per family; with
    /// `origins`, each element's origin beside it (for counting drops by
    /// origin: [`SetCode::emit_origin_v4`]).
    pub fn dynamic(maxelem: u32, name: &str, layout: &Layout, origins: bool) -> Result<SetCode, LiveError> {
        let counts = std::sync::Arc::new(Counts::new(name)?);
        let v4 = Trie::new(8, maxelem, &counts, 0, &format!("{name}_d4"))?;
        let v6 = Trie::new(20, maxelem, &counts, 1, &format!("{name}_d6"))?;
        let buckets =
            layout.dyn_buckets.map_or_else(|| DynHosts::buckets_for(maxelem), |b| b.next_power_of_two().max(2));
        let hosts = DynHosts::new(buckets, name, origins)?;
        let buckets6 =
            layout.dyn_buckets.map_or_else(|| DynHosts6::buckets_for(maxelem), |b| b.next_power_of_two().max(2));
        let hosts6 = DynHosts6::new(buckets6, name, origins)?;
        Ok(SetCode {
            v4_hosts: None,
            v4: V4Code::Dynamic(v4),
            v6_hosts: None,
            v6: V6Code::Dynamic(v6),
            dyn_hosts: Some(hosts),
            dyn_hosts6: Some(hosts6),
        })
    }

    /// A dynamic set's tables (None for any other set).
    pub fn dynamic_maps(&self) -> Option<DynamicMaps<'_>> {
        match (&self.dyn_hosts, &self.dyn_hosts6, &self.v4, &self.v6) {
            (Some(hosts), Some(hosts6), V4Code::Dynamic(v4), V6Code::Dynamic(v6)) => {
                Some(DynamicMaps { hosts, hosts6, v4, v6 })
            }
            _ => None,
        }
    }

    /// Kernel memory its tables take, in bytes.
    pub fn bytes(&self) -> u64 {
        let v4 = match &self.v4 {
            V4Code::Table(t) => t.bytes(),
            V4Code::Inline(_) | V4Code::Dynamic(_) => 0,
        };
        v4 + self.v4_hosts.as_ref().map_or(0, V4Exact::bytes)
            + self.dyn_hosts.as_ref().map_or(0, DynHosts::bytes)
            + self.dyn_hosts6.as_ref().map_or(0, DynHosts6::bytes)
            + self.v6_hosts.as_ref().map_or(0, V6Exact::bytes)
            + self.v6.bytes()
    }

    /// Whether it is a dynamic set whose elements carry origins.
    pub fn counts_origins(&self) -> bool {
        self.dyn_hosts.as_ref().is_some_and(|h| h.origins.is_some())
    }

    /// For a set that [`counts_origins`](SetCode::counts_origins): R0 =
    /// the origin byte of the element that holds the IPv4 address in R9
    /// (its host's, else the trie's longest element's), then `found`;
    /// `none` when no element with an origin holds it. Clobbers R0-R5, R7
    /// and R8.
    pub fn emit_origin_v4(&self, a: &mut Asm, found: Label, none: Label) {
        let (Some(hosts), V4Code::Dynamic(trie)) = (&self.dyn_hosts, &self.v4) else {
            a.ja(none);
            return;
        };
        Self::emit_origin(a, found, none, |a, got, rest| hosts.emit_origin(a, got, rest), trie, false);
    }

    /// [`SetCode::emit_origin_v4`] for the IPv6 address in R7/R8.
    /// Clobbers R0-R5 and R9.
    pub fn emit_origin_v6(&self, a: &mut Asm, found: Label, none: Label) {
        let (Some(hosts), V6Code::Dynamic(trie)) = (&self.dyn_hosts6, &self.v6) else {
            a.ja(none);
            return;
        };
        Self::emit_origin(a, found, none, |a, got, rest| hosts.emit_origin(a, got, rest), trie, true);
    }

    /// The host table's origin (0 is none: the trie may hold a prefix with
    /// one), then the trie's.
    fn emit_origin(
        a: &mut Asm,
        found: Label,
        none: Label,
        hosts: impl FnOnce(&mut Asm, Label, Label),
        trie: &Trie,
        v6: bool,
    ) {
        let got = a.label();
        let rest = a.label();
        let in_trie = a.label();
        hosts(a, got, rest);
        a.bind(got);
        a.jmp_imm(Cond::Ne, R0, 0, found);
        a.bind(rest);
        trie.emit_origin(a, v6, in_trie, none);
        a.bind(in_trie);
        a.jmp_imm(Cond::Ne, R0, 0, found);
        a.ja(none);
    }

    /// Jumps to `hit` when the IPv6 address in R7/R8 is in the set, else
    /// to `miss`. Clobbers R0-R5 and R9.
    pub fn emit_v6(&self, a: &mut Asm, hit: Label, miss: Label) {
        let exact = self.v6_hosts.as_ref().or(self.dyn_hosts6.as_ref().map(|d| &d.exact));
        if let Some(hosts) = exact {
            let rest = a.label();
            hosts.emit(a, hit, rest);
            a.bind(rest);
        }
        self.v6.emit(a, hit, miss);
    }

    /// Jumps to `hit` when the address in `R9` is in the set, else to
    /// `miss`. Clobbers R0-R5, R7 and R8.
    pub fn emit_v4(&self, a: &mut Asm, hit: Label, miss: Label) {
        let exact = self.v4_hosts.as_ref().or(self.dyn_hosts.as_ref().map(|d| &d.exact));
        if let Some(hosts) = exact {
            let rest = a.label();
            hosts.emit(a, hit, rest);
            a.bind(rest);
        }
        match &self.v4 {
            V4Code::Inline(prefixes) => {
                for &(net, len) in prefixes {
                    if len == 0 {
                        a.ja(hit);
                        continue;
                    }
                    a.mov(R1, R9);
                    if len < 32 {
                        a.alu32_imm(Alu::And, R1, (u32::MAX << (32 - u32::from(len))) as i32);
                    }
                    a.jmp32_imm(Cond::Eq, R1, net, hit);
                }
                a.ja(miss);
            }
            V4Code::Table(t) => emit_table(a, t, hit, miss),
            V4Code::Dynamic(trie) => {
                trie.emit_gate(a, miss);
                trie.emit_lookup(a, false);
                a.jmp_imm(Cond::Ne, R0, 0, hit);
                a.ja(miss);
            }
        }
    }
}

/// The lookup of `V4PrefixSet::contains`, in eBPF.
fn emit_table(a: &mut Asm, t: &V4Table, hit: Label, miss: Label) {
    use std::os::fd::AsRawFd;
    if let Some(summary) = &t.summary {
        // The group's two summary bits: word g >> 5, bits (g & 31) * 2.
        a.mov(R1, R9);
        a.alu_imm(Alu::Rsh, R1, 19);
        a.stx(Size::W, FP, KEY_SLOT, R1);
        a.lookup(summary.as_raw_fd(), KEY_SLOT);
        a.jmp_imm(Cond::Eq, R0, 0, miss);
        a.ldx(Size::DW, R3, R0, 0);
        a.mov(R1, R9);
        a.alu_imm(Alu::Rsh, R1, 14);
        a.alu_imm(Alu::And, R1, 31);
        a.alu_imm(Alu::Lsh, R1, 1);
        a.alu(Alu::Rsh, R3, R1);
        a.alu_imm(Alu::And, R3, 3);
        a.jmp_imm(Cond::Eq, R3, 1, hit);
        a.jmp_imm(Cond::Ne, R3, 2, miss);
    }
    // Group record: address >> 14.
    a.mov(R1, R9);
    a.alu_imm(Alu::Rsh, R1, 14);
    a.stx(Size::W, FP, KEY_SLOT, R1);
    a.lookup(t.groups.as_raw_fd(), KEY_SLOT);
    a.jmp_imm(Cond::Eq, R0, 0, miss);
    // R3 = the /24's bit in the group.
    a.mov(R3, R9);
    a.alu_imm(Alu::Rsh, R3, 8);
    a.alu_imm(Alu::And, R3, 63);
    // Wholly covered?
    a.ldx(Size::DW, R4, R0, 0);
    a.alu(Alu::Rsh, R4, R3);
    a.alu_imm(Alu::And, R4, 1);
    a.jmp_imm(Cond::Ne, R4, 0, hit);
    // Partly covered? Its host record is rank + the partial /24s below it.
    a.ldx(Size::DW, R4, R0, 8);
    a.mov(R5, R4);
    a.alu(Alu::Rsh, R5, R3);
    a.alu_imm(Alu::And, R5, 1);
    a.jmp_imm(Cond::Eq, R5, 0, miss);
    a.mov_imm(R5, 1);
    a.alu(Alu::Lsh, R5, R3);
    a.alu_imm(Alu::Sub, R5, 1);
    a.alu(Alu::And, R4, R5);
    popcount(a);
    a.ldx(Size::W, R1, R0, 16);
    a.alu(Alu::Add, R4, R1);
    a.stx(Size::W, FP, KEY_SLOT, R4);
    a.lookup(t.hosts.as_raw_fd(), KEY_SLOT);
    a.jmp_imm(Cond::Eq, R0, 0, miss);
    // The host's bit: word (host >> 6), bit (host & 63).
    a.mov(R1, R9);
    a.alu_imm(Alu::And, R1, 0xff);
    a.mov(R2, R1);
    a.alu_imm(Alu::Rsh, R2, 6);
    a.alu_imm(Alu::Lsh, R2, 3);
    a.alu(Alu::Add, R0, R2);
    a.ldx(Size::DW, R3, R0, 0);
    a.alu_imm(Alu::And, R1, 63);
    a.alu(Alu::Rsh, R3, R1);
    a.alu_imm(Alu::And, R3, 1);
    a.jmp_imm(Cond::Ne, R3, 0, hit);
    a.ja(miss);
}

/// `R4 = popcount(R4)` (SWAR; eBPF has no popcount), with R1 and R2.
fn popcount(a: &mut Asm) {
    a.mov(R1, R4);
    a.alu_imm(Alu::Rsh, R1, 1);
    a.ld_imm64(R2, 0x5555_5555_5555_5555);
    a.alu(Alu::And, R1, R2);
    a.alu(Alu::Sub, R4, R1);
    a.mov(R1, R4);
    a.alu_imm(Alu::Rsh, R1, 2);
    a.ld_imm64(R2, 0x3333_3333_3333_3333);
    a.alu(Alu::And, R1, R2);
    a.alu(Alu::And, R4, R2);
    a.alu(Alu::Add, R4, R1);
    a.mov(R1, R4);
    a.alu_imm(Alu::Rsh, R1, 4);
    a.alu(Alu::Add, R4, R1);
    a.ld_imm64(R2, 0x0f0f_0f0f_0f0f_0f0f);
    a.alu(Alu::And, R4, R2);
    a.ld_imm64(R2, 0x0101_0101_0101_0101);
    a.alu(Alu::Mul, R4, R2);
    a.alu_imm(Alu::Rsh, R4, 56);
}
