//! The seed's classification test bed, in memory (no NIC).
//!
//! A ring of packet buffers at a configurable stride is refilled with random
//! IPv4 source/destination pairs each pass (the NIC's DMA, outside the timed
//! work: a NIC's DMA costs the core nothing) and processed the seed's way:
//! for each batch, optionally prefetch the headers; decap
//! Ethernet/IPv4; optionally prefetch the table lines; look up source and
//! destination; count the verdict. Each scenario is one structure × batch ×
//! prefetch mode × stride × table × threads, repeated; results are the
//! median, minimum and maximum Mpps. The memory-parallelism probe in the same
//! run gives the machine's limit.
#![deny(unsafe_code)]

pub use stats::median;

pub mod cpu;
pub mod flowtable;
pub mod http_parse;
pub mod machine;
mod pico;
pub mod probe;
pub mod queue;
pub mod report;
pub mod ring;
pub mod stats;
pub mod structures;
pub mod svg;
pub mod tunnel;
pub mod uring;

// Issue 13: the memory experiments (aliasing, memalign, pool) and counters.
pub mod aliasing;
pub mod compare;
pub mod memalign;
pub mod pmc;
pub mod pool;
pub mod poolbench;
mod sys;
pub use sys::Backend;

use arc_swap::ArcSwap;
use ring::{ipv4_pair, ipv6_pair, Ring, Rng};
use sluice_engine::snapshot::{Published, Reader};
use sluice_rules::Prefix;
use sluice_sets::simd::prefetch;
use sluice_sets::{Hasher, Prepared, MAX_BATCH};

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use structures::{Chained, Classifier, Hashbrown, Hashbrown6, PrefixTrie, Sluice};

/// Which structure a scenario measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Structure {
    /// The seed's chained table with this many buckets.
    Chained {
        buckets: usize,
    },
    Hashbrown,
    /// sluice's AddressSet over `entries` random IPv4 hosts.
    Sluice,
    /// sluice's AddressSet over a prefix list ([`PrefixDist`]).
    SluicePrefix,
    /// prefix-trie over the same prefixes as `SluicePrefix`.
    PrefixTrie,
}

impl Structure {
    pub fn name(&self) -> &'static str {
        match self {
            Structure::Chained { .. } => "chained",
            Structure::Hashbrown => "hashbrown",
            Structure::Sluice => "sluice",
            Structure::SluicePrefix => "sluice-prefix",
            Structure::PrefixTrie => "prefix-trie",
        }
    }

    /// Whether the structure can be measured with IPv6 traffic.
    pub fn supports_ipv6(&self) -> bool {
        !matches!(self, Structure::Chained { .. })
    }

    /// Whether the structure holds prefixes (its list is a [`PrefixDist`]).
    pub fn holds_prefixes(&self) -> bool {
        matches!(self, Structure::SluicePrefix | Structure::PrefixTrie)
    }

    pub fn parse(s: &str, buckets: usize) -> Option<Structure> {
        Some(match s {
            "chained" => Structure::Chained { buckets },
            "hashbrown" => Structure::Hashbrown,
            "sluice" => Structure::Sluice,
            "sluice-prefix" => Structure::SluicePrefix,
            "prefix-trie" => Structure::PrefixTrie,
            _ => return None,
        })
    }
}

/// Where a prefix structure's list comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PrefixDist {
    /// FireHOL level1 plus `entries` random prefixes, lengths weighted
    /// 2^(L-8) up to /24 and flat beyond ([`prefix_list`]; IPv4 only): the
    /// original scenario, 80% of its prefixes longer than /24.
    Firehol,
    /// `entries` prefixes with the public routing table's length mix
    /// ([`bgp_list`]).
    Bgp,
    /// A FireHOL level1-3-like blocklist: mostly hosts, some short prefixes
    /// ([`blocklist`]).
    Blocklist,
    /// A list file (`--prefixes FILE`): its entries of the scenario's family.
    File(std::path::PathBuf),
}

impl PrefixDist {
    pub fn name(&self) -> String {
        match self {
            PrefixDist::Firehol => "firehol".into(),
            PrefixDist::Bgp => "bgp".into(),
            PrefixDist::Blocklist => "blocklist".into(),
            PrefixDist::File(p) => p.display().to_string(),
        }
    }

    pub fn parse(s: &str) -> Option<PrefixDist> {
        Some(match s {
            "firehol" => PrefixDist::Firehol,
            "bgp" => PrefixDist::Bgp,
            "blocklist" => PrefixDist::Blocklist,
            _ => return None,
        })
    }
}

/// What is prefetched before use: the packet headers, the table lines, both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefetch {
    None,
    Header,
    Bucket,
    Both,
}

impl Prefetch {
    pub const ALL: [Prefetch; 4] = [Prefetch::None, Prefetch::Header, Prefetch::Bucket, Prefetch::Both];
    pub fn name(&self) -> &'static str {
        match self {
            Prefetch::None => "none",
            Prefetch::Header => "header",
            Prefetch::Bucket => "bucket",
            Prefetch::Both => "both",
        }
    }
    pub fn parse(s: &str) -> Option<Prefetch> {
        Prefetch::ALL.into_iter().find(|p| p.name() == s)
    }
    fn header(self) -> bool {
        matches!(self, Prefetch::Header | Prefetch::Both)
    }
    fn bucket(self) -> bool {
        matches!(self, Prefetch::Bucket | Prefetch::Both)
    }
}

/// How worker threads reach the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// No protection: a plain shared reference (unsafe to swap under).
    None,
    /// sluice's rule snapshots: one atomic load per batch (per ring pass
    /// when pipelined, so `prepare` and `finish` see one snapshot).
    Snapshot,
    /// A read lock per packet around its two lookups, as in the seed.
    RwLock,
    /// arc-swap's `load` per batch (`load_full` per pass when pipelined):
    /// the crate sluice did not adopt, measured for comparison.
    ArcSwap,
}

impl SyncMode {
    pub const ALL: [SyncMode; 4] = [SyncMode::None, SyncMode::Snapshot, SyncMode::RwLock, SyncMode::ArcSwap];
    pub fn name(&self) -> &'static str {
        match self {
            SyncMode::None => "none",
            SyncMode::Snapshot => "snapshot",
            SyncMode::RwLock => "rwlock",
            SyncMode::ArcSwap => "arcswap",
        }
    }
    pub fn parse(s: &str) -> Option<SyncMode> {
        SyncMode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// One row of the test bed.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub structure: Structure,
    /// Random hosts (exact structures) or prefixes (prefix structures; for a
    /// list file, its entries of the scenario's family).
    pub entries: usize,
    /// Prefix structures: the list's distribution.
    pub prefix_dist: PrefixDist,
    pub batch: usize,
    pub prefetch: Prefetch,
    pub stride: usize,
    pub threads: usize,
    /// Software pipelining: prefetch the next batch's table lines before
    /// resolving this batch's (only with bucket prefetch).
    pub pipeline: bool,
    /// IPv6 traffic and an IPv6 table instead of IPv4.
    pub ipv6: bool,
    pub sync: SyncMode,
    /// The seed post's figure for this row, Mpps on a Sandy Bridge core.
    pub seed_mpps: Option<f64>,
    /// sluice's exact tables with their front filter (ignored by the others).
    pub filter: bool,
    /// Share of addresses drawn from the table's keys (host structures) or
    /// from inside its prefixes (prefix structures); `None`: all random,
    /// which hits 6M of 2^32 IPv4 hosts 0.14% of the time.
    pub listed: Option<f64>,
}

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub reps: usize,
    /// Packets per repetition per thread.
    pub packets: u64,
    /// Buffers in the ring (NIC ring size).
    pub ring_slots: usize,
    pub seed: u64,
    /// Fill limit of sluice's exact tables (default [`sluice_sets::DEFAULT_MAX_LOAD`]).
    pub max_load: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { reps: 5, packets: 2_000_000, ring_slots: 2048, seed: 1, max_load: sluice_sets::DEFAULT_MAX_LOAD }
    }
}

/// A measured scenario: what `bench classify` learned besides its Mpps.
#[derive(Clone, Debug)]
pub struct Classified {
    pub scenario: Scenario,
    /// Share of packets dropped (source or destination in the table).
    pub drop_share: f64,
    pub table_bytes: usize,
    pub build_s: f64,
    /// The front filter's bytes and its false-positive rate, measured at
    /// build time over random non-member keys (sluice with a filter).
    pub filter: Option<(usize, f64)>,
}

/// `bench classify`'s result row: Mpps per repetition.
pub type Measured = stats::Row<Classified>;

/// The lists the prefix scenarios use: FireHOL level1 plus `extra` random
/// prefixes from /8 to /32. Lengths are drawn with weight 2^(L-8) up to /24
/// and flat beyond, so each length adds a similar share of address space
/// and the union covers about a quarter of IPv4 (uniform lengths would cover
/// all of it with /8s and make every lookup a trivial hit).
pub fn prefix_list(extra: usize, seed: u64) -> Vec<Prefix> {
    let mut list = sluice_rules::parse_list("firehol", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false)
        .expect("embedded list parses")
        .prefixes;
    let weights: Vec<f64> = (8u8..=32).map(|l| 2f64.powi(i32::from(l.min(24)) - 8)).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = Rng::new(seed ^ 0x7072_6566);
    for _ in 0..extra {
        let mut r = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut len = 32u8;
        for (l, w) in (8u8..=32).zip(&weights) {
            if r < *w {
                len = l;
                break;
            }
            r -= w;
        }
        list.push(Prefix::new(std::net::IpAddr::V4((rng.next_u64() as u32).into()), len));
    }
    list
}

/// The global IPv4 routing table's prefix length mix, approximately (per
/// length, of about 920k prefixes, as the CIDR report showed it in 2024-25):
/// /24 is 60%, /22 and /23 most of the rest, nothing longer than /24.
const BGP4_MIX: [(u8, u32); 17] = [
    (8, 15),
    (9, 12),
    (10, 35),
    (11, 100),
    (12, 300),
    (13, 600),
    (14, 1_200),
    (15, 2_000),
    (16, 13_500),
    (17, 8_000),
    (18, 13_500),
    (19, 25_000),
    (20, 40_000),
    (21, 45_000),
    (22, 115_000),
    (23, 95_000),
    (24, 560_000),
];

/// The global IPv6 table's mix, approximately (per length, of about 200k
/// prefixes): /48 about half, /32 an eighth, then /40, /44, /29, /36; few
/// shorter than /29, so a list covers a few percent of its regions, as the
/// real table does.
const BGP6_MIX: [(u8, u32); 31] = [
    (16, 2),
    (19, 5),
    (20, 25),
    (21, 20),
    (22, 30),
    (23, 25),
    (24, 200),
    (25, 75),
    (26, 100),
    (27, 150),
    (28, 700),
    (29, 8_000),
    (30, 1_600),
    (31, 1_200),
    (32, 24_000),
    (33, 2_400),
    (34, 2_000),
    (35, 1_600),
    (36, 6_000),
    (37, 1_000),
    (38, 1_600),
    (39, 1_200),
    (40, 12_000),
    (41, 1_400),
    (42, 4_000),
    (43, 1_200),
    (44, 10_000),
    (45, 3_000),
    (46, 5_000),
    (47, 5_000),
    (48, 92_000),
];

/// A FireHOL level1-3-like IPv4 list beyond level1 itself: 85% hosts, 10%
/// /24, 4% /20-/23, 1% /16-/19.
const BLOCK4_MIX: [(u8, u32); 10] =
    [(16, 25), (17, 25), (18, 25), (19, 25), (20, 100), (21, 100), (22, 100), (23, 100), (24, 1_000), (32, 8_500)];

/// Its IPv6 counterpart: 60% hosts, 25% /64, 12% /48, 3% /32.
const BLOCK6_MIX: [(u8, u32); 4] = [(32, 30), (48, 120), (64, 250), (128, 600)];

/// Where IPv6 lists and in-list traffic live: the regional registries'
/// /12s, so lists concentrate in a few /16s as real ones do.
const V6_REGIONS: [u128; 6] = [0x200, 0x240, 0x260, 0x280, 0x2a0, 0x2c0];

/// A length drawn with the mix's weights.
fn draw_len(mix: &[(u8, u32)], rng: &mut Rng) -> u8 {
    let total: u64 = mix.iter().map(|&(_, w)| u64::from(w)).sum();
    let mut r = rng.next_u64() % total;
    for &(len, w) in mix {
        if r < u64::from(w) {
            return len;
        }
        r -= u64::from(w);
    }
    unreachable!("r < total")
}

fn random_v6(rng: &mut Rng) -> u128 {
    let region = V6_REGIONS[(rng.next_u64() % V6_REGIONS.len() as u64) as usize];
    let low = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
    region << 116 | low >> 12
}

/// `n` prefixes with the lengths of `mix`, at random addresses (IPv6: in the
/// registries' /12s).
fn mixed_list(mix: &[(u8, u32)], n: usize, ipv6: bool, rng: &mut Rng) -> Vec<Prefix> {
    (0..n)
        .map(|_| {
            let len = draw_len(mix, rng);
            if ipv6 {
                Prefix::new(std::net::IpAddr::V6(random_v6(rng).into()), len)
            } else {
                Prefix::new(std::net::IpAddr::V4((rng.next_u64() as u32).into()), len)
            }
        })
        .collect()
}

/// `n` prefixes with the public routing table's length mix.
pub fn bgp_list(n: usize, ipv6: bool, seed: u64) -> Vec<Prefix> {
    let mut rng = Rng::new(seed ^ 0x0062_6770);
    mixed_list(if ipv6 { &BGP6_MIX } else { &BGP4_MIX }, n, ipv6, &mut rng)
}

/// A FireHOL level1-3-like blocklist: level1 itself (IPv4) and `n` entries,
/// mostly hosts, some short prefixes.
pub fn blocklist(n: usize, ipv6: bool, seed: u64) -> Vec<Prefix> {
    let mut rng = Rng::new(seed ^ 0x626c_6f63);
    let mut list = if ipv6 {
        Vec::new()
    } else {
        sluice_rules::parse_list("firehol", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false)
            .expect("embedded list parses")
            .prefixes
    };
    list.extend(mixed_list(if ipv6 { &BLOCK6_MIX } else { &BLOCK4_MIX }, n, ipv6, &mut rng));
    list
}

/// A scenario's prefix list, of its family.
pub fn prefix_table(dist: &PrefixDist, entries: usize, ipv6: bool, seed: u64) -> Result<Vec<Prefix>, String> {
    let list = match dist {
        PrefixDist::Firehol if ipv6 => {
            return Err("the firehol distribution is IPv4 only (try bgp or blocklist)".into())
        }
        PrefixDist::Firehol => prefix_list(entries, seed),
        PrefixDist::Bgp => bgp_list(entries, ipv6, seed),
        PrefixDist::Blocklist => blocklist(entries, ipv6, seed),
        PrefixDist::File(path) => {
            let list = sluice_rules::load_list(path, false).map_err(|e| e.to_string())?.prefixes;
            let family: Vec<Prefix> = list.into_iter().filter(|p| matches!(p, Prefix::V6 { .. }) == ipv6).collect();
            if family.is_empty() {
                return Err(format!("{} has no IPv{} entries", path.display(), if ipv6 { 6 } else { 4 }));
            }
            family
        }
    };
    Ok(list)
}

/// `n` addresses each inside a random prefix of `list` (of the family),
/// its host bits random: in-list traffic for prefix structures.
pub fn inside_keys(list: &[Prefix], n: usize, ipv6: bool, seed: u64) -> ring::Listed {
    let mut rng = Rng::new(seed ^ 0x696e_7369);
    let family: Vec<&Prefix> = list.iter().filter(|p| matches!(p, Prefix::V6 { .. }) == ipv6).collect();
    assert!(!family.is_empty(), "in-list traffic needs prefixes of the family");
    let pick = |rng: &mut Rng| family[(rng.next_u64() % family.len() as u64) as usize];
    if ipv6 {
        ring::Listed::V6(
            (0..n)
                .map(|_| match *pick(&mut rng) {
                    Prefix::V6 { addr, len } => {
                        let host = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
                        addr | host.checked_shr(u32::from(len)).unwrap_or(0)
                    }
                    Prefix::V4 { .. } => unreachable!("filtered"),
                })
                .collect(),
        )
    } else {
        ring::Listed::V4(
            (0..n)
                .map(|_| match *pick(&mut rng) {
                    Prefix::V4 { addr, len } => addr | (rng.next_u64() as u32).checked_shr(u32::from(len)).unwrap_or(0),
                    Prefix::V6 { .. } => unreachable!("filtered"),
                })
                .collect(),
        )
    }
}

/// Random IPv4 hosts for the exact-match scenarios.
pub fn host_keys(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed ^ 0x686f_7374);
    (0..n).map(|_| rng.next_u64() as u32).collect()
}

/// Random IPv6 hosts.
pub fn host_keys6(n: usize, seed: u64) -> Vec<u128> {
    let mut rng = Rng::new(seed ^ 0x686f_7374_3636);
    (0..n).map(|_| (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())).collect()
}

/// Built structures, shared between scenarios that use the same one.
#[derive(Default)]
pub struct Tables {
    /// (structure, entries, IPv6, filter, prefix list) → (table, seconds to
    /// build, filter stats)
    built: HashMap<TableKey, Built>,
    /// (distribution, entries, IPv6) → the prefix list.
    lists: HashMap<(PrefixDist, usize, bool), Arc<Vec<Prefix>>>,
}

type TableKey = (Structure, usize, bool, bool, PrefixDist);
type Built = (Arc<dyn Classifier>, f64, Option<(usize, f64)>);

/// Random keys none of which is in `set`'s list (for false-positive rates).
fn non_members<K: Copy + Eq + std::hash::Hash>(n: usize, listed: &[K], mut draw: impl FnMut() -> K) -> Vec<K> {
    let members: std::collections::HashSet<K> = listed.iter().copied().collect();
    std::iter::repeat_with(&mut draw).filter(|k| !members.contains(k)).take(n).collect()
}

impl Tables {
    /// A prefix scenario's list, made (or read) once; an unreadable file or
    /// one without entries of the family is an error.
    pub fn list(
        &mut self,
        dist: &PrefixDist,
        entries: usize,
        ipv6: bool,
        seed: u64,
    ) -> Result<Arc<Vec<Prefix>>, String> {
        // A file's list is the file's, whatever the scenario's entries.
        let key = (dist.clone(), if matches!(dist, PrefixDist::File(_)) { 0 } else { entries }, ipv6);
        if let Some(l) = self.lists.get(&key) {
            return Ok(l.clone());
        }
        let list = Arc::new(prefix_table(dist, entries, ipv6, seed)?);
        self.lists.insert(key, list.clone());
        Ok(list)
    }

    fn get(&mut self, sc: &Scenario, st: &Settings) -> Built {
        let (s, entries, ipv6) = (sc.structure, sc.entries, sc.ipv6);
        let (seed, max_load) = (st.seed, st.max_load);
        // Only sluice's exact tables have a filter; only prefix structures a list.
        let filter = sc.filter && s == Structure::Sluice;
        let dist = if s.holds_prefixes() { sc.prefix_dist.clone() } else { PrefixDist::Firehol };
        let list = s.holds_prefixes().then(|| self.list(&dist, entries, ipv6, seed).expect("lists are checked first"));
        self.built
            .entry((s, entries, ipv6, filter, dist))
            .or_insert_with(|| {
                let hasher = Hasher::with_seed(seed);
                let started = Instant::now();
                let table: Arc<dyn Classifier> = match s {
                    Structure::Hashbrown if ipv6 => {
                        Arc::new(Hashbrown6(host_keys6(entries, seed).into_iter().collect()))
                    }
                    Structure::Sluice if ipv6 => {
                        let hosts: Vec<Prefix> =
                            host_keys6(entries, seed).into_iter().map(|a| Prefix::V6 { addr: a, len: 128 }).collect();
                        Arc::new(Sluice::with_filter(&hosts, hasher, max_load, filter))
                    }
                    Structure::SluicePrefix => {
                        Arc::new(Sluice::new(list.as_deref().expect("a prefix list"), hasher, max_load))
                    }
                    Structure::PrefixTrie => Arc::new(PrefixTrie::new(list.as_deref().expect("a prefix list"))),
                    _ if ipv6 => panic!("{} has no IPv6 variant", s.name()),
                    Structure::Chained { buckets } => {
                        Arc::new(Chained::new(&host_keys(entries, seed), buckets, hasher))
                    }
                    Structure::Hashbrown => Arc::new(Hashbrown(host_keys(entries, seed).into_iter().collect())),
                    Structure::Sluice => {
                        let hosts: Vec<Prefix> =
                            host_keys(entries, seed).into_iter().map(|a| Prefix::V4 { addr: a, len: 32 }).collect();
                        Arc::new(Sluice::with_filter(&hosts, hasher, max_load, filter))
                    }
                };
                let build_s = started.elapsed().as_secs_f64();
                // The filter's false-positive rate over 1M random non-members.
                let stats = if !filter {
                    None
                } else if ipv6 {
                    let mut rng = Rng::new(seed ^ 0xf9);
                    let probes = non_members(1 << 20, &host_keys6(entries, seed), || {
                        (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
                    });
                    table.filter_stats(&[], &probes)
                } else {
                    let mut rng = Rng::new(seed ^ 0xf9);
                    let probes = non_members(1 << 20, &host_keys(entries, seed), || rng.next_u64() as u32);
                    table.filter_stats(&probes, &[])
                };
                (table, build_s, stats)
            })
            .clone()
    }

    /// Time to build sluice's exact set from `n` hosts (list → set), seconds.
    pub fn time_sluice_build(n: usize, seed: u64) -> f64 {
        let hosts: Vec<Prefix> = host_keys(n, seed).into_iter().map(|a| Prefix::V4 { addr: a, len: 32 }).collect();
        let started = Instant::now();
        let set = Sluice::new(&hosts, Hasher::with_seed(seed), sluice_sets::DEFAULT_MAX_LOAD);
        let t = started.elapsed().as_secs_f64();
        drop(set);
        t
    }
}

/// An address family the test bed can drive: how to decap it and how to
/// hand its keys to a structure.
trait Family: Copy + Default {
    fn decap(frame: &[u8]) -> Option<(Self, Self)>;
    fn lookup(t: &dyn Classifier, keys: &[Self], out: &mut [bool], prefetch: bool);
    fn prepare(t: &dyn Classifier, keys: &[Self], prep: &mut Prepared);
    fn finish(t: &dyn Classifier, keys: &[Self], prep: &Prepared, out: &mut [bool]);
}

impl Family for u32 {
    #[inline(always)]
    fn decap(frame: &[u8]) -> Option<(u32, u32)> {
        ipv4_pair(frame)
    }
    #[inline(always)]
    fn lookup(t: &dyn Classifier, keys: &[u32], out: &mut [bool], prefetch: bool) {
        t.lookup(keys, out, prefetch)
    }
    #[inline(always)]
    fn prepare(t: &dyn Classifier, keys: &[u32], prep: &mut Prepared) {
        t.prepare(keys, prep)
    }
    #[inline(always)]
    fn finish(t: &dyn Classifier, keys: &[u32], prep: &Prepared, out: &mut [bool]) {
        t.finish(keys, prep, out)
    }
}

impl Family for u128 {
    #[inline(always)]
    fn decap(frame: &[u8]) -> Option<(u128, u128)> {
        ipv6_pair(frame)
    }
    #[inline(always)]
    fn lookup(t: &dyn Classifier, keys: &[u128], out: &mut [bool], prefetch: bool) {
        t.lookup6(keys, out, prefetch)
    }
    #[inline(always)]
    fn prepare(t: &dyn Classifier, keys: &[u128], prep: &mut Prepared) {
        t.prepare6(keys, prep)
    }
    #[inline(always)]
    fn finish(t: &dyn Classifier, keys: &[u128], prep: &Prepared, out: &mut [bool]) {
        t.finish6(keys, prep, out)
    }
}

/// Decap `n` frames from `slot` into `keys` (source, destination pairs);
/// returns the number of keys written.
#[inline(always)]
fn decap<K: Family>(ring: &Ring, slot: usize, n: usize, header_pf: bool, keys: &mut [K]) -> usize {
    if header_pf {
        for i in 0..n {
            prefetch(ring.frame(slot + i).as_ptr());
        }
    }
    let mut k = 0;
    for i in 0..n {
        if let Some((src, dst)) = K::decap(ring.frame(slot + i)) {
            keys[k] = src;
            keys[k + 1] = dst;
            k += 2;
        }
    }
    k
}

#[inline(always)]
fn count_drops(hits: &[bool]) -> u64 {
    hits.chunks_exact(2).map(|pair| u64::from(pair[0] | pair[1])).sum()
}

type SharedTable = Arc<dyn Classifier>;

/// A worker's way to the table, per [`SyncMode`].
enum Access<'a> {
    Direct(&'a dyn Classifier),
    Snapshot(Reader<SharedTable>),
    Locked(&'a RwLock<SharedTable>),
    Swap(&'a ArcSwap<SharedTable>),
}

/// Process `packets` packets from `ring`; returns (seconds, dropped). The
/// seconds are those spent processing: each pass's refill (standing in for
/// the NIC's DMA, which costs a core nothing) is left out of the timing.
///
/// Per batch, the seed's steps: optional header prefetch, decap, optional
/// table prefetch, lookups, verdicts. Pipelined, the table lines of batch
/// i+1 are prefetched before batch i is resolved, so the memory system
/// always has a batch of misses in flight (VPP's loops do the same with
/// packet buffers).
fn run_ring<K: Family>(access: &mut Access<'_>, ring: &mut Ring, sc: &Scenario, packets: u64) -> (f64, u64) {
    let batch = sc.batch.clamp(1, MAX_BATCH);
    let header_pf = sc.prefetch.header();
    let mut keys = [[K::default(); 2 * MAX_BATCH]; 2];
    let mut preps = [Prepared::default(), Prepared::default()];
    let mut hits = [false; 2 * MAX_BATCH];
    let (mut done, mut dropped) = (0u64, 0u64);
    let mut busy = std::time::Duration::ZERO;
    while done < packets {
        ring.refill();
        let started = Instant::now();
        let slots = ring.slots();
        // The snapshot for this pass (pipelined) or refreshed per batch below.
        let pass_table: Option<SharedTable> = match access {
            Access::Snapshot(r) if sc.pipeline => Some(r.refresh().value.clone()),
            Access::Swap(a) if sc.pipeline => Some((*a.load_full()).clone()),
            _ => None,
        };
        match access {
            Access::Locked(lock) => {
                let table = lock.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                let bucket_pf = sc.prefetch.bucket() && table.can_prefetch();
                let mut s = 0;
                while s < slots {
                    let n = batch.min(slots - s);
                    let k = decap(ring, s, n, header_pf, &mut keys[0]);
                    // The seed's model: each packet's two lookups under a read lock.
                    for (pair, out) in keys[0][..k].chunks(2).zip(hits[..k].chunks_mut(2)) {
                        let guard = lock.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                        K::lookup(&**guard, pair, out, bucket_pf);
                    }
                    dropped += count_drops(&hits[..k]);
                    s += n;
                }
            }
            _ if sc.pipeline && sc.prefetch.bucket() => {
                let table: &dyn Classifier = match (&*access, &pass_table) {
                    (Access::Direct(t), _) => *t,
                    (_, Some(t)) => &**t,
                    _ => unreachable!("snapshot table taken above"),
                };
                let mut cur = 0;
                let mut k_cur = decap(ring, 0, batch.min(slots), header_pf, &mut keys[0]);
                K::prepare(table, &keys[0][..k_cur], &mut preps[0]);
                let mut s = batch.min(slots);
                loop {
                    let n = batch.min(slots - s);
                    let k_next = decap(ring, s, n, header_pf, &mut keys[1 - cur]);
                    K::prepare(table, &keys[1 - cur][..k_next], &mut preps[1 - cur]);
                    K::finish(table, &keys[cur][..k_cur], &preps[cur], &mut hits[..k_cur]);
                    dropped += count_drops(&hits[..k_cur]);
                    if n == 0 {
                        break;
                    }
                    (cur, k_cur, s) = (1 - cur, k_next, s + n);
                }
            }
            _ => {
                let mut s = 0;
                while s < slots {
                    let guard;
                    let table: &dyn Classifier = match access {
                        Access::Direct(t) => *t,
                        Access::Snapshot(r) => &*r.refresh().value,
                        Access::Swap(a) => {
                            guard = a.load();
                            &***guard
                        }
                        Access::Locked(_) => unreachable!("handled above"),
                    };
                    let bucket_pf = sc.prefetch.bucket() && table.can_prefetch();
                    let n = batch.min(slots - s);
                    let k = decap(ring, s, n, header_pf, &mut keys[0]);
                    K::lookup(table, &keys[0][..k], &mut hits[..k], bucket_pf);
                    dropped += count_drops(&hits[..k]);
                    s += n;
                }
            }
        }
        done += slots as u64;
        busy += started.elapsed();
    }
    (busy.as_secs_f64(), dropped)
}

/// One scenario ready to run: its table, rings and ways to the table.
/// [`Bench::rep`] runs one repetition, so a caller can interleave the
/// repetitions of several scenarios (`bench classify` does: on a shared,
/// noisy machine a slow spell then lands on every row alike, and the
/// same-run ratios stay fair).
pub struct Bench {
    sc: Scenario,
    table: SharedTable,
    rings: Vec<Ring>,
    published: Arc<Published<SharedTable>>,
    locked: RwLock<SharedTable>,
    swapped: ArcSwap<SharedTable>,
    build_s: f64,
    filter: Option<(usize, f64)>,
    mpps: Vec<f64>,
    dropped: u64,
    total: u64,
}

impl Bench {
    /// Build (or take from `tables`) the scenario's table and fill its rings.
    pub fn new(sc: &Scenario, st: &Settings, tables: &mut Tables) -> Bench {
        let (table, build_s, filter) = tables.get(sc, st);
        let threads = sc.threads.max(1);
        let mut rings: Vec<Ring> =
            (0..threads).map(|t| Ring::new(st.ring_slots, sc.stride, st.seed + t as u64, sc.ipv6)).collect();
        let hosts = matches!(sc.structure, Structure::Sluice | Structure::Hashbrown | Structure::Chained { .. });
        if let (Some(share), true) = (sc.listed, sc.structure.holds_prefixes()) {
            let list = tables.list(&sc.prefix_dist, sc.entries, sc.ipv6, st.seed).expect("lists are checked first");
            let keys = inside_keys(&list, 1 << 20, sc.ipv6, st.seed);
            for ring in &mut rings {
                ring.set_listed(keys.clone(), share);
            }
        } else if let (Some(share), true, true) = (sc.listed, hosts, sc.entries > 0) {
            let keys = if sc.ipv6 {
                ring::Listed::V6(host_keys6(sc.entries, st.seed).into())
            } else {
                ring::Listed::V4(host_keys(sc.entries, st.seed).into())
            };
            for ring in &mut rings {
                ring.set_listed(keys.clone(), share);
            }
        }
        Bench {
            sc: sc.clone(),
            published: Arc::new(Published::new(table.clone())),
            locked: RwLock::new(table.clone()),
            swapped: ArcSwap::from_pointee(table.clone()),
            table,
            rings,
            build_s,
            filter,
            mpps: Vec::with_capacity(st.reps),
            dropped: 0,
            total: 0,
        }
    }

    /// One repetition: an untimed warm-up of half as many packets (so the
    /// cache holds what it would in steady traffic, not what the scenario
    /// before left: a 2048-packet warm-up measured a 50M-host table's
    /// 59 MiB filter at 0.73x of none, warm it is 1.06x), then `st.packets`
    /// packets per thread, timed.
    pub fn rep(&mut self, st: &Settings) {
        let sc = &self.sc;
        let run = if sc.ipv6 { run_ring::<u128> } else { run_ring::<u32> };
        let (table, published, locked, swapped) = (&self.table, &self.published, &self.locked, &self.swapped);
        let access = |sync: SyncMode| match sync {
            SyncMode::None => Access::Direct(&**table),
            SyncMode::Snapshot => Access::Snapshot(published.reader()),
            SyncMode::RwLock => Access::Locked(locked),
            SyncMode::ArcSwap => Access::Swap(swapped),
        };
        run(&mut access(sc.sync), &mut self.rings[0], sc, (st.packets / 2).max(st.ring_slots as u64));
        let results: Vec<(f64, u64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .rings
                .iter_mut()
                .enumerate()
                .map(|(t, ring)| {
                    let mut access = access(sc.sync);
                    scope.spawn(move || {
                        // Best effort: a worker per CPU, as NIC queues are.
                        let _ = sluice_cpus::pin_current_thread(t % sluice_cpus::available_cpus());
                        run(&mut access, ring, sc, st.packets)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("bench thread")).collect()
        });
        // Threads run side by side: the slowest one's processing time.
        let wall = results.iter().map(|r| r.0).fold(0.0, f64::max);
        let packets = (st.packets.div_ceil(st.ring_slots as u64) * st.ring_slots as u64) * self.rings.len() as u64;
        self.mpps.push(packets as f64 / wall / 1e6);
        self.dropped += results.iter().map(|r| r.1).sum::<u64>();
        self.total += packets;
    }

    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// The repetitions so far.
    pub fn result(&self) -> Measured {
        let mut m = Measured::new(
            Classified {
                scenario: self.sc.clone(),
                drop_share: self.dropped as f64 / self.total.max(1) as f64,
                table_bytes: self.table.bytes(),
                build_s: self.build_s,
                filter: self.filter,
            },
            "Mpps",
            true,
        );
        m.values = self.mpps.clone();
        m
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} batch {} prefetch {} stride {})",
            self.name,
            self.structure.name(),
            self.batch,
            self.prefetch.name(),
            self.stride
        )?;
        if self.pipeline {
            f.write_str(" pipelined")?;
        }
        if self.ipv6 {
            f.write_str(" IPv6")?;
        }
        if self.structure == Structure::Sluice {
            f.write_str(if self.filter { " filter" } else { " no filter" })?;
        }
        if self.structure.holds_prefixes() {
            write!(f, " list {}", self.prefix_dist.name())?;
        }
        if let Some(l) = self.listed {
            write!(f, " listed {l}")?;
        }
        write!(f, " sync {} threads {}", self.sync.name(), self.threads)?;
        Ok(())
    }
}

impl Scenario {
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(list: &[Prefix]) -> Vec<u8> {
        list.iter().map(|p| p.len()).collect()
    }

    #[test]
    fn bgp_lists_have_the_routing_tables_shape() {
        let v4 = bgp_list(100_000, false, 1);
        assert_eq!(v4.len(), 100_000);
        let l = lens(&v4);
        let share = |f: &dyn Fn(u8) -> bool| l.iter().filter(|&&x| f(x)).count() as f64 / l.len() as f64;
        assert!(l.iter().all(|&x| (8..=24).contains(&x)), "nothing longer than /24");
        assert!((0.58..0.64).contains(&share(&|x| x == 24)), "/24 is about 60%");
        let v6 = bgp_list(50_000, true, 1);
        assert!(v6.iter().all(|p| matches!(p, Prefix::V6 { .. })));
        let l = lens(&v6);
        assert!(l.iter().all(|&x| (16..=48).contains(&x)));
        assert!((0.4..0.55).contains(&(l.iter().filter(|&&x| x == 48).count() as f64 / l.len() as f64)));
        // Inside the registries' /12s.
        for p in &v6 {
            let Prefix::V6 { addr, .. } = *p else { unreachable!() };
            assert!(V6_REGIONS.contains(&(addr >> 116)), "{addr:x}");
        }
    }

    #[test]
    fn blocklists_are_mostly_hosts_beside_firehol() {
        let v4 = blocklist(10_000, false, 2);
        let firehol = v4.len() - 10_000;
        assert!(firehol > 2_000, "FireHOL level1 is in");
        let hosts = v4[firehol..].iter().filter(|p| p.len() == 32).count();
        assert!((8_000..9_000).contains(&hosts));
        let v6 = blocklist(10_000, true, 2);
        assert_eq!(v6.len(), 10_000);
        assert!((5_500..6_500).contains(&v6.iter().filter(|p| p.len() == 128).count()));
    }

    #[test]
    fn in_list_traffic_is_inside_the_list() {
        for ipv6 in [false, true] {
            let list = bgp_list(1_000, ipv6, 3);
            let set = sluice_rules::PrefixHashSet::from_prefixes(&list);
            match inside_keys(&list, 5_000, ipv6, 3) {
                ring::Listed::V4(k) => assert!(k.iter().all(|&a| set.contains(std::net::IpAddr::V4(a.into())))),
                ring::Listed::V6(k) => assert!(k.iter().all(|&a| set.contains(std::net::IpAddr::V6(a.into())))),
            }
        }
    }

    #[test]
    fn list_files_are_read_by_family_and_refused_when_empty_of_it() {
        let dir = std::env::temp_dir().join(format!("sluice-bench-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("l.txt");
        std::fs::write(&path, "10.0.0.0/8\n192.0.2.1\n").unwrap();
        let dist = PrefixDist::File(path.clone());
        assert_eq!(prefix_table(&dist, 0, false, 1).unwrap().len(), 2);
        let err = prefix_table(&dist, 0, true, 1).unwrap_err();
        assert!(err.contains("has no IPv6 entries"), "{err}");
        let missing = prefix_table(&PrefixDist::File(dir.join("none")), 0, false, 1).unwrap_err();
        assert!(missing.contains("none"), "{missing}");
        assert!(prefix_table(&PrefixDist::Firehol, 10, true, 1).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
