//! Per-client-IP state shared by every event-loop thread: sharded by a hash
//! of the address, one mutex per shard (held for a few counter updates).
//!
//! Each shard holds tracked clients (rate slots, open connections) in a
//! bounded table with clock eviction over idle clients, and, apart from
//! them, the blocked addresses in a table of its own, also bounded: evicting
//! a client must never lift its block. Time is passed in (ms since the
//! guard started) so the logic is tested without sleeping.

use crate::limits::{Limit, Limits};
use crate::net::{ClientNet, KeyPrefixes};
use crate::slots::Ring;
use crate::synfilter::SynFilter;
use sluice_control::safety::Safety;
use sluice_rules::{Prefix, Refusal};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

type Hasher = foldhash::fast::RandomState;

/// Shards when the table is big enough to split (fewer locks contended).
const SHARDS: usize = 64;
/// Block events kept for the summary (the first ones).
const BLOCK_LOG: usize = 1024;

const REQ: usize = 0;
const CONN: usize = 1;
const HELLO: usize = 2;

/// A point of a breach score leaks away after this many seconds without
/// a breach taking it (`--ip-block-after`): a real user's few mistakes an
/// hour never add up, a scanner's dozens a minute do.
pub const SCORE_LEAK_SECS: u64 = 60;

/// One tracked client: 84 bytes (a line and a third).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientState {
    /// Requests, new connections and TLS ClientHellos, 125 ms slots.
    rate: Ring<3>,
    /// `--http-resp-code-block` hits, slots of period / 8.
    resp: Ring<1>,
    /// When first seen (ms since start, saturating), for the block log.
    first_ms: u32,
    /// Open connections; a client with any is never evicted.
    concurrent: u16,
    /// Clock bit: touched since the hand last passed.
    referenced: bool,
    /// A response was relayed to it: a known client (`Standing`).
    served: bool,
    /// Its breach score (`Limit::weight`'s points, leaked), and when it
    /// last leaked: seconds since start, modulo 2^16. (Sixteen bits keep
    /// the state small; a score untouched for the 18 hours of a wrap is
    /// read as recent, at worst one block a few points early.)
    score: u8,
    score_at: u16,
}

const _: () = assert!(size_of::<ClientState>() <= 84);

/// A blocked address: until when (ms since start), or for good; why.
#[derive(Debug, Clone)]
struct Block {
    until_ms: Option<u64>,
    reason: &'static str,
    /// The JA4 of the TLS connection that broke the limit.
    ja4: Option<Box<str>>,
}

/// One block as `sluice ctl blocks` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockRow {
    pub client: ClientNet,
    /// Seconds left (rounded up); None: until restart.
    pub expires_in: Option<u64>,
    /// The limit it broke (`manual` for `sluice ctl block`).
    pub limit: &'static str,
    pub ja4: Option<String>,
}

/// One block as it happened (for the summary and tests).
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct BlockEvent {
    /// The address, or the network it was keyed by (`--key-prefix-*`).
    pub ip: ClientNet,
    pub limit: &'static str,
    /// When the client was first seen (since it was last evicted).
    pub first_seen_ms: u64,
    pub blocked_ms: u64,
    /// The JA4 of the TLS connection that broke the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ja4: Option<String>,
}

#[derive(Default)]
struct Shard {
    index: HashMap<u128, u32, Hasher>,
    keys: Vec<u128>,
    states: Vec<ClientState>,
    hand: usize,
    cap: usize,
    blocks: HashMap<u128, Block, Hasher>,
    block_cap: usize,
}

/// What a new connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Tracked: call [`ClientTable::on_close`] once when it closes.
    Ok,
    /// The address is blocked: close before reading.
    Blocked,
    /// Every tracked client has open connections: no room to track this one.
    Full,
    /// A connection limit broke (the connection is not tracked).
    Breach(Limit),
}

/// Where a request waiting for the upstream queues ([`ClientTable::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Known,
    New,
}

/// Live counters of the table.
#[derive(Debug, Default)]
pub struct TableStats {
    pub tracked: AtomicU64,
    pub evicted: AtomicU64,
    pub full: AtomicU64,
    pub blocks_active: AtomicU64,
    pub blocked_total: AtomicU64,
    /// Blocks not recorded because the block table was full.
    pub blocks_dropped: AtomicU64,
    /// Blocks refused by the safety net, by reason: the client's network
    /// overlaps `--never-block`, or is wider than `--min-prefix-*`.
    pub refused_never_block: AtomicU64,
    pub refused_min_prefix: AtomicU64,
}

/// New blocks a loop can be told of by key ([`ClientTable::blocked_since`]):
/// more within one loop turn (a flood of new attackers) and the loop looks
/// up every connection's address instead.
pub const RECENT_BLOCKS: usize = 256;

pub struct ClientTable {
    shards: Vec<Mutex<Shard>>,
    limits: Limits,
    resp_slot_ms: u64,
    pub stats: TableStats,
    /// Set on any change to the blocks (the publisher clears it).
    pub dirty: AtomicBool,
    /// Bumped on each new block, so the loops close that address's connections.
    pub block_epoch: AtomicU64,
    /// The last [`RECENT_BLOCKS`] blocks' keys, each with the epoch it made:
    /// a loop looks only for those addresses' connections
    /// ([`ClientTable::blocked_since`]), not up every connection's block.
    recent: Mutex<std::collections::VecDeque<(u64, u128)>>,
    log: Mutex<Vec<BlockEvent>>,
    /// New blocks not yet taken by whoever forwards them (a bridge's
    /// control socket, a CrowdSec LAPI); None when nothing does.
    outbox: Mutex<Option<Vec<NewBlock>>>,
    /// Blocks lost because the outbox was full (its reader is stuck).
    pub outbox_dropped: AtomicU64,
    /// `--dry-run`: blocks are recorded (so each address counts once per
    /// block period, as an enforcing run would block it once) but enforce
    /// nothing: connections are admitted, none is closed, nothing is
    /// written to the block file or forwarded.
    dry_run: bool,
    /// Clients are keyed by these prefixes of their addresses.
    prefixes: KeyPrefixes,
    /// What a block may not cover (`--never-block`, `--min-prefix-*`).
    safety: Arc<Safety>,
    /// The listeners' SYN filter (`synfilter.rs`): each block in force is
    /// written into it and deleted from it under its shard's lock, with
    /// the change to `blocks`, so it never holds a block the table does not.
    syn: Option<Arc<SynFilter>>,
}

/// A block for forwarding: the address, its seconds (0: until restart),
/// the limit it broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewBlock {
    /// The address, or the network it was keyed by.
    pub ip: ClientNet,
    pub secs: u64,
    pub limit: &'static str,
    /// When it was made: a forwarder sends it with the time it has left.
    pub at: std::time::Instant,
}

/// One row of [`ClientTable::top_clients`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ClientRow {
    pub client: ClientNet,
    pub requests_per_s: u32,
    pub connections: u16,
    pub blocked: bool,
}

/// At most this many blocks wait for their forwarder.
pub const OUTBOX_CAP: usize = 1 << 20;

/// The address as one key (IPv4 mapped into IPv6).
pub fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
        IpAddr::V6(v) => u128::from(v),
    }
}

pub fn unkey(k: u128) -> IpAddr {
    let v6 = Ipv6Addr::from(k);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// One hit of rate counter `k` (125 ms slots); the burst limit is checked
/// first, then the rate.
fn count(
    st: &mut ClientState,
    k: usize,
    now_ms: u64,
    burst: (Option<u32>, Limit),
    rate: (Option<u32>, Limit),
) -> Result<(), Limit> {
    st.referenced = true;
    let hit = st.rate.hit(k, (now_ms / 125) as u32);
    if burst.0.is_some_and(|b| hit.burst > b) {
        return Err(burst.1);
    }
    if rate.0.is_some_and(|r| hit.rate > r) {
        return Err(rate.1);
    }
    Ok(())
}

fn lock(m: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    // A panic under the lock leaves counters, never a broken invariant worth dying for.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClientTable {
    /// `max_clients` tracked clients and as many blocks, at most.
    pub fn new(limits: Limits, max_clients: usize) -> ClientTable {
        let max_clients = max_clients.max(1);
        let n = if max_clients >= SHARDS * 16 { SHARDS } else { 1 };
        let shards = (0..n)
            .map(|i| {
                // Split exactly: the caps add up to max_clients.
                let cap = max_clients / n + usize::from(i < max_clients % n);
                Mutex::new(Shard { cap, block_cap: cap, ..Shard::default() })
            })
            .collect();
        let resp_slot_ms =
            limits.http_resp_code_block.as_ref().map_or(125, |r| (r.period_ms / crate::slots::SLOTS as u64).max(1));
        ClientTable {
            shards,
            limits,
            resp_slot_ms,
            stats: TableStats::default(),
            dirty: AtomicBool::new(false),
            block_epoch: AtomicU64::new(0),
            recent: Mutex::new(Default::default()),
            log: Mutex::new(Vec::new()),
            outbox: Mutex::new(None),
            outbox_dropped: AtomicU64::new(0),
            dry_run: false,
            prefixes: KeyPrefixes { v4: 32, v6: 128 },
            safety: Arc::default(),
            syn: None,
        }
    }

    /// Refuse blocks that the safety net refuses (a new table refuses only
    /// a /0).
    pub fn with_safety(mut self, safety: Arc<Safety>) -> ClientTable {
        self.safety = safety;
        self
    }

    /// The safety net blocks are checked against (reread it with
    /// [`Safety::reload`]).
    pub fn safety(&self) -> &Arc<Safety> {
        &self.safety
    }

    /// Mirror the blocks into `filter` (keyed by this table's prefixes: set
    /// them first). Never in a dry run, which enforces nothing.
    pub fn with_syn_filter(mut self, filter: Arc<SynFilter>) -> ClientTable {
        if !self.dry_run {
            self.syn = Some(filter);
        }
        self
    }

    /// The SYN filter the blocks are mirrored into, if any.
    pub fn syn_filter(&self) -> Option<&Arc<SynFilter>> {
        self.syn.as_ref()
    }

    /// `k`'s block is gone from the table: from the filter too.
    fn syn_remove(&self, k: u128) {
        if let Some(f) = &self.syn {
            f.remove(k);
        }
    }

    /// Key clients by these prefixes (a new table keys by whole addresses).
    pub fn with_key_prefixes(mut self, p: KeyPrefixes) -> ClientTable {
        self.prefixes = p;
        self
    }

    /// The network `ip` is keyed by.
    pub fn net(&self, ip: IpAddr) -> ClientNet {
        self.prefixes.net(ip)
    }

    /// The key of `ip`: its network's address.
    pub fn key(&self, ip: IpAddr) -> u128 {
        key(self.prefixes.net(ip).addr)
    }

    /// The network a key stands for.
    fn net_of(&self, k: u128) -> ClientNet {
        let addr = unkey(k);
        ClientNet { addr, len: self.prefixes.len_of(addr) }
    }

    /// See [`ClientTable::dry_run`]: record blocks, enforce none.
    pub fn with_dry_run(mut self, on: bool) -> ClientTable {
        self.dry_run = on;
        self
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The blocks changed: the block file is rewritten (never in a dry run).
    fn mark_dirty(&self) {
        if !self.dry_run {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// From now on, keep every new block for [`ClientTable::take_blocks`].
    pub fn forward_blocks(&self) {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(Vec::new);
    }

    /// The blocks since the last call (empty unless [`ClientTable::forward_blocks`]).
    pub fn take_blocks(&self) -> Vec<NewBlock> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner).as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn shard(&self, k: u128) -> &Mutex<Shard> {
        let h = ((k as u64) ^ ((k >> 64) as u64).rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(h >> 32) as usize % self.shards.len()]
    }

    /// A new connection from `ip`.
    pub fn on_accept(&self, ip: IpAddr, now_ms: u64) -> Admit {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        if self.blocked_in(&mut s, k, now_ms) && !self.dry_run {
            return Admit::Blocked;
        }
        let Some(i) = self.find_or_insert(&mut s, k, now_ms) else {
            self.stats.full.fetch_add(1, Ordering::Relaxed);
            return Admit::Full;
        };
        let st = &mut s.states[i];
        st.referenced = true;
        let hit = st.rate.hit(CONN, (now_ms / 125) as u32);
        let l = &self.limits;
        let breach = if l.connection_burst.is_some_and(|b| hit.burst > b) {
            Some(Limit::ConnectionBurst)
        } else if l.connection_rate.is_some_and(|r| hit.rate > r) {
            Some(Limit::ConnectionRate)
        } else if l.concurrent_connections.is_some_and(|c| u32::from(st.concurrent) >= c) {
            Some(Limit::ConcurrentConnections)
        } else {
            None
        };
        match breach {
            // Refused: not counted as open.
            Some(limit) if !self.dry_run => Admit::Breach(limit),
            // A dry run admits it: it is open, and tracked like any other.
            _ => {
                st.concurrent = st.concurrent.saturating_add(1);
                breach.map_or(Admit::Ok, Admit::Breach)
            }
        }
    }

    /// A tracked connection closed.
    pub fn on_close(&self, ip: IpAddr) {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        if let Some(&i) = s.index.get(&k) {
            let st = &mut s.states[i as usize];
            st.concurrent = st.concurrent.saturating_sub(1);
        }
    }

    /// A response was relayed to `ip`: from now on it is a known client
    /// (while the guard tracks it).
    pub fn on_served(&self, ip: IpAddr) {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        if let Some(&i) = s.index.get(&k) {
            s.states[i as usize].served = true;
        }
    }

    /// How `ip` stands for a slot at the upstream: known if it was served
    /// before and its request rate over the last second is at most half of
    /// each request limit; else new (never seen, never served, or near a
    /// limit: an attacker's first allowed requests).
    /// Its request rate is over half a limit (`request_rate` or
    /// `request_burst`): an untracked address is not.
    pub fn near_limit(&self, ip: IpAddr, now_ms: u64) -> bool {
        let k = self.key(ip);
        let s = lock(self.shard(k));
        s.index.get(&k).is_some_and(|&i| self.near(&s.states[i as usize], now_ms))
    }

    fn near(&self, st: &ClientState, now_ms: u64) -> bool {
        let rate = st.rate.rate(REQ, (now_ms / 125) as u32);
        let l = &self.limits;
        [l.request_rate, l.request_burst].into_iter().flatten().any(|max| rate * 2 > max)
    }

    pub fn standing(&self, ip: IpAddr, now_ms: u64) -> Standing {
        let k = self.key(ip);
        let s = lock(self.shard(k));
        let Some(&i) = s.index.get(&k) else { return Standing::New };
        let st = &s.states[i as usize];
        if st.served && !self.near(st, now_ms) {
            Standing::Known
        } else {
            Standing::New
        }
    }

    /// A request head from `ip` (a tracked connection's).
    pub fn on_request(&self, ip: IpAddr, now_ms: u64) -> Result<(), Limit> {
        let l = &self.limits;
        self.count_tracked(
            ip,
            now_ms,
            REQ,
            (l.request_burst, Limit::RequestBurst),
            (l.request_rate, Limit::RequestRate),
        )
    }

    /// One hit of counter `k` for a tracked client (none while both limits
    /// are off, or when `ip` has no state: nothing to count against).
    fn count_tracked(
        &self,
        ip: IpAddr,
        now_ms: u64,
        k: usize,
        burst: (Option<u32>, Limit),
        rate: (Option<u32>, Limit),
    ) -> Result<(), Limit> {
        if burst.0.is_none() && rate.0.is_none() {
            return Ok(());
        }
        let key = self.key(ip);
        let mut s = lock(self.shard(key));
        // Present while it has a connection.
        let Some(&i) = s.index.get(&key) else { return Ok(()) };
        count(&mut s.states[i as usize], k, now_ms, burst, rate)
    }

    /// A request head from `ip` as a trusted proxy named it
    /// (`--client-ip-header`): the client has no connection of its own, so
    /// it is tracked from its requests (a full table lets it through,
    /// counted in `full`).
    pub fn on_forwarded_request(&self, ip: IpAddr, now_ms: u64) -> Result<(), Limit> {
        let l = &self.limits;
        if l.request_rate.is_none() && l.request_burst.is_none() {
            return Ok(());
        }
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        let Some(i) = self.find_or_insert(&mut s, k, now_ms) else {
            self.stats.full.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        self.count_request(&mut s.states[i], now_ms)
    }

    fn count_request(&self, st: &mut ClientState, now_ms: u64) -> Result<(), Limit> {
        let l = &self.limits;
        count(st, REQ, now_ms, (l.request_burst, Limit::RequestBurst), (l.request_rate, Limit::RequestRate))
    }

    /// A TLS ClientHello from `ip` (a tracked connection's), counted before
    /// the handshake costs anything.
    pub fn on_hello(&self, ip: IpAddr, now_ms: u64) -> Result<(), Limit> {
        let l = &self.limits;
        let (burst, rate) =
            ((l.tls_handshake_burst, Limit::TlsHandshakeBurst), (l.tls_handshake_rate, Limit::TlsHandshakeRate));
        self.count_tracked(ip, now_ms, HELLO, burst, rate)
    }

    /// An upstream response with `status` relayed to `ip`.
    pub fn on_response(&self, ip: IpAddr, status: u16, now_ms: u64) -> Result<(), Limit> {
        let Some(r) = &self.limits.http_resp_code_block else { return Ok(()) };
        if !r.codes.contains(&status) {
            return Ok(());
        }
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        let Some(&i) = s.index.get(&k) else { return Ok(()) };
        let hit = s.states[i as usize].resp.hit(0, (now_ms / self.resp_slot_ms) as u32);
        if hit.rate >= r.limit {
            return Err(Limit::HttpRespCodeBlock);
        }
        Ok(())
    }

    fn find_or_insert(&self, s: &mut Shard, k: u128, now_ms: u64) -> Option<usize> {
        if let Some(&i) = s.index.get(&k) {
            return Some(i as usize);
        }
        let fresh = ClientState { first_ms: now_ms.min(u64::from(u32::MAX)) as u32, ..ClientState::default() };
        if s.states.len() < s.cap {
            s.index.insert(k, s.states.len() as u32);
            s.keys.push(k);
            s.states.push(fresh);
            self.stats.tracked.fetch_add(1, Ordering::Relaxed);
            return Some(s.states.len() - 1);
        }
        // Clock: two turns at most (the first may only clear reference bits).
        let n = s.states.len();
        for _ in 0..2 * n {
            let i = s.hand;
            s.hand = (s.hand + 1) % n;
            let st = &mut s.states[i];
            if st.concurrent > 0 {
                continue;
            }
            if st.referenced {
                st.referenced = false;
                continue;
            }
            let old = s.keys[i];
            s.index.remove(&old);
            s.index.insert(k, i as u32);
            s.keys[i] = k;
            s.states[i] = fresh;
            self.stats.evicted.fetch_add(1, Ordering::Relaxed);
            return Some(i);
        }
        None
    }

    /// Whether `k` is blocked now; an expired block is dropped on the way.
    fn blocked_in(&self, s: &mut Shard, k: u128, now_ms: u64) -> bool {
        match s.blocks.get(&k) {
            None => false,
            Some(b) if b.until_ms.is_none_or(|u| now_ms < u) => true,
            Some(_) => {
                s.blocks.remove(&k);
                self.syn_remove(k);
                self.stats.blocks_active.fetch_sub(1, Ordering::Relaxed);
                self.mark_dirty();
                false
            }
        }
    }

    /// The keys blocked after `epoch` (a `block_epoch` value seen before),
    /// into `keys`; false when more were blocked since than are kept
    /// (look up every connection's address instead).
    pub fn blocked_since(&self, epoch: u64, keys: &mut Vec<u128>) -> bool {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        match recent.front() {
            Some(&(first, _)) if first <= epoch + 1 => {
                keys.extend(recent.iter().filter(|&&(e, _)| e > epoch).map(|&(_, k)| k));
                true
            }
            // Nothing kept, or the first ones after `epoch` are gone.
            _ => recent.is_empty() && self.block_epoch.load(Ordering::Acquire) == epoch,
        }
    }

    pub fn is_blocked(&self, ip: IpAddr, now_ms: u64) -> bool {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        self.blocked_in(&mut s, k, now_ms)
    }

    /// Block `ip` for `secs` (0: until restart) after `limit` broke.
    /// False if it was already blocked or the block table is full.
    pub fn block(&self, ip: IpAddr, secs: u64, limit: Limit, now_ms: u64) -> bool {
        self.block_for(ip, secs, limit.name(), None, now_ms)
    }

    /// [`ClientTable::block`] of a TLS client: its JA4 goes into the block log.
    pub fn block_tls(&self, ip: IpAddr, secs: u64, limit: Limit, ja4: &str, now_ms: u64) -> bool {
        self.block_for(ip, secs, limit.name(), Some(ja4), now_ms)
    }

    /// Lift `ip`'s block (its network's) now and forget its rates: whether
    /// there was one. The block file follows; blocks already forwarded
    /// elsewhere stay there.
    pub fn unblock(&self, ip: IpAddr, now_ms: u64) -> bool {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        let was = self.blocked_in(&mut s, k, now_ms);
        if was {
            s.blocks.remove(&k);
            self.syn_remove(k);
            self.stats.blocks_active.fetch_sub(1, Ordering::Relaxed);
            self.mark_dirty();
        }
        // A fresh start: the rates that got it blocked would block it again
        // at its next request.
        if let Some(&i) = s.index.get(&k) {
            let st = &mut s.states[i as usize];
            (st.rate, st.resp, st.score) = (Default::default(), Default::default(), 0);
        }
        was
    }

    /// A breach worth `points` by `ip`: whether its score (leaked by a point
    /// per [`SCORE_LEAK_SECS`]) reaches `after`, when the caller blocks it
    /// and the score starts over. An address the full table cannot track
    /// is scored as reaching it: under a flood of addresses, a breach
    /// blocks at once as it always did.
    pub fn score(&self, ip: IpAddr, points: u8, after: u8, now_ms: u64) -> bool {
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        let Some(i) = self.find_or_insert(&mut s, k, now_ms) else { return true };
        let st = &mut s.states[i];
        st.referenced = true;
        let now_s = (now_ms / 1000) as u16;
        let leaked = u64::from(now_s.wrapping_sub(st.score_at)) / SCORE_LEAK_SECS;
        st.score = st.score.saturating_sub(leaked.min(255) as u8);
        // The next point leaks a whole period after the last one did.
        st.score_at = match st.score {
            0 => now_s,
            _ => st.score_at.wrapping_add((leaked * SCORE_LEAK_SECS) as u16),
        };
        st.score = st.score.saturating_add(points);
        if st.score >= after {
            st.score = 0;
            return true;
        }
        false
    }

    /// The `top` tracked clients by request rate (the current window):
    /// their network, requests a second, open connections, blocked or not.
    pub fn top_clients(&self, top: usize, now_ms: u64) -> Vec<ClientRow> {
        let slot = (now_ms / 125) as u32;
        let mut rows = Vec::new();
        for shard in &self.shards {
            let mut s = lock(shard);
            let keys: Vec<(u128, u32)> = s.index.iter().map(|(&k, &i)| (k, i)).collect();
            for (k, i) in keys {
                let st = s.states[i as usize];
                let blocked = self.blocked_in(&mut s, k, now_ms);
                rows.push(ClientRow {
                    client: self.net_of(k),
                    requests_per_s: st.rate.rate(REQ, slot),
                    connections: st.concurrent,
                    blocked,
                });
            }
        }
        rows.sort_by(|a, b| b.requests_per_s.cmp(&a.requests_per_s).then(b.connections.cmp(&a.connections)));
        rows.truncate(top);
        rows
    }

    /// [`ClientTable::block`] with the reason given (a limit's name, or `manual`).
    pub fn block_for(&self, ip: IpAddr, secs: u64, reason: &'static str, ja4: Option<&str>, now_ms: u64) -> bool {
        self.try_block_for(ip, secs, reason, ja4, now_ms).unwrap_or(false)
    }

    /// [`ClientTable::block_for`], saying why the safety net refused it: the
    /// client's network overlaps the never-block list (the client is never
    /// blocked, whatever it breaks; its breaches are counted as ever) or is
    /// wider than the least prefix length. A refusal is counted and logged
    /// (rate-limited: a never-blocked flooder breaches on every request),
    /// in a dry run too, as an enforcing run would not block it either.
    pub fn try_block_for(
        &self,
        ip: IpAddr,
        secs: u64,
        reason: &'static str,
        ja4: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, Refusal> {
        let net = self.net(ip);
        let p = Prefix::new(net.addr, net.len);
        if let Err(r) = self.safety.check(&p) {
            let n = match r {
                Refusal::NeverBlock { .. } => &self.stats.refused_never_block,
                Refusal::MinPrefix { .. } => &self.stats.refused_min_prefix,
            };
            n.fetch_add(1, Ordering::Relaxed);
            let what = if reason == "manual" { "ctl block".to_owned() } else { format!("block for {reason}") };
            self.safety.log_refusal(&what, &p, &r);
            return Err(r);
        }
        let k = self.key(ip);
        let mut s = lock(self.shard(k));
        if self.blocked_in(&mut s, k, now_ms) {
            return Ok(false);
        }
        if s.blocks.len() >= s.block_cap {
            self.expire_in(&mut s, now_ms);
            if s.blocks.len() >= s.block_cap {
                self.stats.blocks_dropped.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
        }
        let until_ms = (secs > 0).then(|| now_ms + secs * 1000);
        s.blocks.insert(k, Block { until_ms, reason, ja4: ja4.map(Into::into) });
        if let Some(f) = self.syn.as_ref().filter(|_| !self.dry_run) {
            // A failed write is counted; the address is refused at accept instead.
            f.add(k, until_ms.map(|u| u - now_ms));
        }
        let first_seen_ms = s.index.get(&k).map_or(now_ms, |&i| u64::from(s.states[i as usize].first_ms));
        drop(s);
        self.stats.blocks_active.fetch_add(1, Ordering::Relaxed);
        self.stats.blocked_total.fetch_add(1, Ordering::Relaxed);
        // A dry run enforces nothing: no connection closed, no forwarding.
        if !self.dry_run {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            // Under the lock: the epochs in `recent` rise in order.
            let epoch = self.block_epoch.fetch_add(1, Ordering::Release) + 1;
            if recent.len() == RECENT_BLOCKS {
                recent.pop_front();
            }
            recent.push_back((epoch, k));
            drop(recent);
            self.mark_dirty();
            if let Some(out) = self.outbox.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                if out.len() < OUTBOX_CAP {
                    out.push(NewBlock { ip: self.net_of(k), secs, limit: reason, at: std::time::Instant::now() });
                } else {
                    self.outbox_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if log.len() < BLOCK_LOG {
            let ja4 = ja4.map(str::to_owned);
            log.push(BlockEvent { ip: self.net_of(k), limit: reason, first_seen_ms, blocked_ms: now_ms, ja4 });
        }
        Ok(true)
    }

    fn expire_in(&self, s: &mut Shard, now_ms: u64) -> bool {
        let before = s.blocks.len();
        s.blocks.retain(|&k, b| {
            let keep = b.until_ms.is_none_or(|u| now_ms < u);
            if !keep {
                self.syn_remove(k);
            }
            keep
        });
        let gone = before - s.blocks.len();
        if gone > 0 {
            self.stats.blocks_active.fetch_sub(gone as u64, Ordering::Relaxed);
            self.mark_dirty();
        }
        gone > 0
    }

    /// Drop expired blocks; whether any were.
    pub fn expire(&self, now_ms: u64) -> bool {
        let mut any = false;
        for s in &self.shards {
            any |= self.expire_in(&mut lock(s), now_ms);
        }
        any
    }

    /// Blocks in force: address and seconds left (rounded up; `None`: permanent).
    pub fn blocks(&self, now_ms: u64) -> Vec<(ClientNet, Option<u64>)> {
        let mut out = Vec::new();
        for s in &self.shards {
            for (&k, b) in &lock(s).blocks {
                match b.until_ms {
                    None => out.push((self.net_of(k), None)),
                    Some(u) if u > now_ms => out.push((self.net_of(k), Some((u - now_ms).div_ceil(1000)))),
                    Some(_) => {}
                }
            }
        }
        out.sort();
        out
    }

    /// The blocks in force, with why: [`ClientTable::blocks`] and the limit and JA4.
    pub fn block_rows(&self, now_ms: u64) -> Vec<BlockRow> {
        let mut out = Vec::new();
        for s in &self.shards {
            for (&k, b) in &lock(s).blocks {
                let left = match b.until_ms {
                    None => None,
                    Some(u) if u > now_ms => Some((u - now_ms).div_ceil(1000)),
                    Some(_) => continue,
                };
                let ja4 = b.ja4.as_deref().map(str::to_owned);
                out.push(BlockRow { client: self.net_of(k), expires_in: left, limit: b.reason, ja4 });
            }
        }
        out.sort_by_key(|r| r.client);
        out
    }

    pub fn block_log(&self) -> Vec<BlockEvent> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Tracked clients (never above `max_clients`).
    pub fn tracked(&self) -> u64 {
        self.stats.tracked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x7f40_0000 + i))
    }

    #[test]
    fn hellos_have_their_own_rate_and_burst() {
        let limits = Limits { tls_handshake_rate: Some(5), tls_handshake_burst: Some(3), ..Limits::default() };
        let t = ClientTable::new(limits, 16);
        let a: IpAddr = "192.0.2.9".parse().unwrap();
        assert_eq!(t.on_hello(a, 0), Ok(()), "an untracked client has nothing to count against");
        t.on_accept(a, 0);
        let burst: Vec<_> = (0..4).map(|_| t.on_hello(a, 0)).collect();
        assert_eq!(burst, [Ok(()), Ok(()), Ok(()), Err(Limit::TlsHandshakeBurst)]);
        // Later slots of the same second: the rate (4 so far) breaks at the 6th.
        assert_eq!((t.on_hello(a, 130), t.on_hello(a, 260)), (Ok(()), Err(Limit::TlsHandshakeRate)));
        // Requests and connections are counted apart.
        assert_eq!(t.on_request(a, 260), Ok(()));
        assert_eq!(t.on_hello(a, 1300), Ok(()), "a second later the window is clear");
    }

    /// Over half its request rate an address is near its limit (shed
    /// first at `--max-connections`, and not known for the upstream queue);
    /// under it, or unknown to the table, it is not.
    #[test]
    fn near_a_limit_is_over_half_of_it() {
        let t = ClientTable::new(Limits { request_rate: Some(10), ..Limits::default() }, 16);
        let (slow, fast) = (ip(1), ip(2));
        assert!(!t.near_limit(slow, 0), "untracked");
        t.on_accept(slow, 0);
        t.on_accept(fast, 0);
        for ms in [0, 200, 400] {
            assert_eq!(t.on_request(slow, ms), Ok(()));
        }
        for ms in (0..6).map(|k| k * 100) {
            assert_eq!(t.on_request(fast, ms), Ok(()));
        }
        assert!(!t.near_limit(slow, 600), "3 a second of 10");
        assert!(t.near_limit(fast, 600), "6 a second of 10");
        t.on_served(slow);
        assert_eq!(t.standing(slow, 600), Standing::Known);
    }

    #[test]
    fn breach_scores_add_up_leak_and_start_over_at_the_block() {
        let t = ClientTable::new(Limits::default(), 16);
        let (a, b) = (ip(1), ip(2));
        // Three points block: two do not, the third does, then it starts over.
        assert!(!t.score(a, 1, 3, 0));
        assert!(!t.score(a, 1, 3, 10_000));
        assert!(t.score(a, 1, 3, 20_000));
        assert!(!t.score(a, 1, 3, 21_000), "blocked, and counted afresh");
        // Another address has its own score.
        assert!(!t.score(b, 2, 3, 21_000));
        // A point leaks per minute without a breach: two in a minute and a
        // half, then one more 61 s after the first leaked.
        assert!(!t.score(b, 0, 3, 111_000), "b at 1 after a leak");
        assert!(!t.score(b, 1, 3, 112_000), "b at 2");
        assert!(!t.score(b, 0, 3, 141_000 + 1_000), "b at 1: the second leak, a period after the first");
        assert!(t.score(b, 2, 3, 143_000));
        // An unblock forgets the score.
        assert!(!t.score(a, 2, 3, 200_000));
        t.unblock(a, 200_000);
        assert!(!t.score(a, 2, 3, 200_000));
        // A single weight of `after` blocks at once (`--ip-block-after 1`: as it always was).
        assert!(t.score(ip(3), 1, 1, 0));
    }

    #[test]
    fn keys_round_trip() {
        for a in ["127.1.2.3", "::1", "2001:db8::7"] {
            let a: IpAddr = a.parse().unwrap();
            assert_eq!(unkey(key(a)), a);
        }
    }

    #[test]
    fn the_table_stays_within_its_cap_and_evicts_idle_clients() {
        for cap in [10usize, 5000] {
            let t = ClientTable::new(Limits::default(), cap);
            // Ten clients hold a connection each: never evicted.
            for i in 0..10 {
                assert_eq!(t.on_accept(ip(i), 0), Admit::Ok);
            }
            for i in 10..(3 * cap as u32 + 10) {
                let a = t.on_accept(ip(i), 0);
                if cap == 10 {
                    assert_eq!(a, Admit::Full, "all ten hold connections");
                    continue;
                }
                assert_eq!(a, Admit::Ok);
                t.on_close(ip(i));
                assert!(t.tracked() <= cap as u64);
            }
            if cap == 10 {
                assert_eq!(t.stats.evicted.load(Ordering::Relaxed), 0);
                t.on_close(ip(3));
                // Now one is idle: it goes (after the clock clears its bit).
                assert_eq!(t.on_accept(ip(99), 0), Admit::Ok);
                assert_eq!(t.stats.evicted.load(Ordering::Relaxed), 1);
                continue;
            }
            assert_eq!(t.tracked(), cap as u64);
            let evicted = t.stats.evicted.load(Ordering::Relaxed);
            assert_eq!(evicted, 3 * cap as u64 + 10 - cap as u64);
            // The ten with open connections survived every sweep: their
            // counters go on (a second connection each is allowed, and on
            // close they are still known).
            for i in 0..10 {
                let k = key(ip(i));
                let s = lock(t.shard(k));
                let at = s.index[&k] as usize;
                assert_eq!(s.states[at].concurrent, 1, "client {i}");
            }
        }
    }

    #[test]
    fn rate_and_concurrency_limits_break_as_frang_counts() {
        let limits = Limits {
            request_rate: Some(10),
            request_burst: Some(4),
            concurrent_connections: Some(2),
            ..Limits::default()
        };
        let t = ClientTable::new(limits, 100);
        let a = ip(1);
        assert_eq!(t.on_accept(a, 0), Admit::Ok);
        assert_eq!(t.on_accept(a, 0), Admit::Ok);
        assert_eq!(t.on_accept(a, 0), Admit::Breach(Limit::ConcurrentConnections));
        t.on_close(a);
        assert_eq!(t.on_accept(a, 0), Admit::Ok);
        // Four per slot pass, the fifth is a burst.
        for _ in 0..4 {
            t.on_request(a, 10).unwrap();
        }
        assert_eq!(t.on_request(a, 20), Err(Limit::RequestBurst));
        // 5 (one refused but counted, as frang does) + 4 + 1 = 10 in the second: fine; the 11th breaks the rate.
        for _ in 0..4 {
            t.on_request(a, 130).unwrap();
        }
        t.on_request(a, 300).unwrap();
        assert_eq!(t.on_request(a, 400), Err(Limit::RequestRate));
        // A second later the window is empty again.
        t.on_request(a, 1400).unwrap();
    }

    #[test]
    fn block_rows_say_why() {
        let t = ClientTable::new(Limits::default(), 100);
        let ja4 = "t13d1516h2_8daaf6152771_e5627efa2ab1";
        assert!(t.block_tls(ip(9), 5, Limit::TlsJa4, ja4, 0));
        assert!(t.block_for(ip(8), 0, "manual", None, 0));
        let rows = t.block_rows(1000);
        let got: Vec<_> = rows.iter().map(|r| (r.expires_in, r.limit, r.ja4.as_deref())).collect();
        assert_eq!(got, [(None, "manual", None), (Some(4), "tls_ja4", Some(ja4))]);
        assert_eq!(t.block_rows(6000).len(), 1, "the timed one expired");
    }

    #[test]
    fn connection_rate_and_burst_count_new_connections() {
        let limits = Limits { connection_rate: Some(5), connection_burst: Some(3), ..Limits::default() };
        let t = ClientTable::new(limits, 100);
        let a = ip(7);
        for _ in 0..3 {
            assert_eq!(t.on_accept(a, 0), Admit::Ok);
            t.on_close(a);
        }
        assert_eq!(t.on_accept(a, 100), Admit::Breach(Limit::ConnectionBurst));
        // Slot 1: 4 (the refused one counted) + 1 = 5 in the window, then 6.
        assert_eq!(t.on_accept(a, 130), Admit::Ok);
        t.on_close(a);
        assert_eq!(t.on_accept(a, 140), Admit::Breach(Limit::ConnectionRate));
        // Another address is not affected.
        assert_eq!(t.on_accept(ip(8), 140), Admit::Ok);
    }

    #[test]
    fn blocks_expire_and_survive_eviction() {
        let t = ClientTable::new(Limits::default(), 4);
        let a = ip(1);
        assert_eq!(t.on_accept(a, 0), Admit::Ok);
        t.on_close(a);
        assert!(t.block(a, 2, Limit::RequestRate, 500));
        assert!(!t.block(a, 2, Limit::RequestRate, 600), "already blocked");
        assert!(t.dirty.swap(false, Ordering::AcqRel));
        // Evict the client's state: the block stays.
        for i in 2..20 {
            assert_eq!(t.on_accept(ip(i), 600), Admit::Ok);
            t.on_close(ip(i));
        }
        assert!(t.stats.evicted.load(Ordering::Relaxed) > 0);
        assert_eq!(t.on_accept(a, 1000), Admit::Blocked);
        let host = ClientNet { addr: a, len: 32 };
        assert_eq!(t.blocks(1000), vec![(host, Some(2))]);
        assert_eq!(t.blocks(1501), vec![(host, Some(1))], "rounded up");
        assert!(!t.expire(2499));
        assert!(t.expire(2500));
        assert!(t.blocks(2500).is_empty());
        assert_eq!(t.stats.blocks_active.load(Ordering::Relaxed), 0);
        assert_eq!(t.on_accept(a, 2500), Admit::Ok);
        // Permanent, and the block table's own cap.
        for i in 100..104 {
            assert!(t.block(ip(i), 0, Limit::HttpParse, 3000));
        }
        assert!(!t.block(ip(200), 0, Limit::HttpParse, 3000), "the block table is full");
        assert_eq!(t.stats.blocks_dropped.load(Ordering::Relaxed), 1);
        assert!(t.is_blocked(ip(100), u64::MAX / 2));
        assert_eq!(t.block_log().len(), 5);
        assert_eq!(t.block_log()[0].blocked_ms, 500);
    }

    /// A loop is told which keys were blocked since the epoch it saw,
    /// while the ring holds them all; past that it must look everywhere.
    #[test]
    fn the_loops_learn_which_addresses_were_blocked() {
        let t = ClientTable::new(Limits::default(), 10_000);
        let mut keys = Vec::new();
        assert!(t.blocked_since(0, &mut keys) && keys.is_empty(), "nothing blocked yet");
        for i in 1..=3 {
            assert!(t.block(ip(i), 10, Limit::RequestRate, 0));
        }
        assert!(t.blocked_since(0, &mut keys));
        assert_eq!(keys, [1, 2, 3].map(|i| t.key(ip(i))));
        keys.clear();
        assert!(t.blocked_since(2, &mut keys));
        assert_eq!(keys, [t.key(ip(3))]);
        keys.clear();
        assert!(t.blocked_since(3, &mut keys) && keys.is_empty());
        // An address blocked already is no new block.
        assert!(!t.block(ip(3), 10, Limit::RequestRate, 0));
        assert!(t.blocked_since(3, &mut keys) && keys.is_empty());
        for i in 0..RECENT_BLOCKS as u32 {
            let a = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(t.block(a, 10, Limit::RequestRate, 0));
        }
        // Epochs 4 to 259 are kept: all after 3, not all after 2.
        assert!(!t.blocked_since(2, &mut keys), "the block of epoch 3 is gone");
        keys.clear();
        assert!(t.blocked_since(3, &mut keys));
        assert_eq!(keys.len(), RECENT_BLOCKS);
    }

    /// A block sets the publisher's flag, bumps the epoch the loops watch
    /// and goes to the outbox; in a dry run it is recorded (once per
    /// address and period, as an enforcing run blocks once) and nothing
    /// else: no refusal at accept, no flag, no epoch, no outbox.
    #[test]
    fn a_dry_run_records_blocks_and_enforces_none() {
        let limits = Limits { concurrent_connections: Some(1), ..Limits::default() };
        let live = ClientTable::new(limits.clone(), 100);
        live.forward_blocks();
        let a = ip(9);
        assert!(live.block(a, 10, Limit::RequestRate, 0));
        assert!(live.dirty.load(Ordering::Acquire));
        assert_eq!(live.block_epoch.load(Ordering::Acquire), 1);
        assert_eq!(live.take_blocks().len(), 1);
        assert_eq!(live.on_accept(a, 1), Admit::Blocked);

        let dry = ClientTable::new(limits, 100).with_dry_run(true);
        dry.forward_blocks();
        assert!(dry.block(a, 10, Limit::RequestRate, 0));
        assert!(!dry.block(a, 10, Limit::RequestRate, 5), "once per block period");
        assert!(!dry.dirty.load(Ordering::Acquire));
        assert_eq!(dry.block_epoch.load(Ordering::Acquire), 0);
        assert!(dry.take_blocks().is_empty());
        assert_eq!(dry.stats.blocked_total.load(Ordering::Relaxed), 1);
        assert_eq!(dry.block_log().len(), 1);
        // Admitted although "blocked", and over the concurrency limit: the
        // breach is reported and the connection counted as open.
        assert_eq!(dry.on_accept(a, 1), Admit::Ok);
        assert_eq!(dry.on_accept(a, 1), Admit::Breach(Limit::ConcurrentConnections));
        dry.on_close(a);
        dry.on_close(a);
        assert_eq!(dry.on_accept(a, 1), Admit::Ok, "both closes were owed");
        // The block ends as an enforcing one would, and may be recorded again.
        assert!(dry.block(a, 10, Limit::RequestRate, 20_000));
        assert_eq!(dry.stats.blocked_total.load(Ordering::Relaxed), 2);
    }

    /// A client on the never-block list is never blocked, whatever it
    /// breaks, nor is a network that holds one; each refusal is counted by
    /// reason and nothing reaches the block file or the forwarder.
    #[test]
    fn the_never_block_list_refuses_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "192.0.2.7\n2001:db8:0:1::9\n").unwrap();
        let safety = Arc::new(Safety::load(Some(&f), 8, 16).unwrap());
        let t = ClientTable::new(Limits::default(), 100)
            .with_key_prefixes(KeyPrefixes { v4: 32, v6: 64 })
            .with_safety(Arc::clone(&safety));
        t.forward_blocks();
        let (listed, other): (IpAddr, IpAddr) = ("192.0.2.7".parse().unwrap(), "192.0.2.8".parse().unwrap());
        assert!(!t.block(listed, 60, Limit::RequestRate, 0));
        let r = t.try_block_for(listed, 0, "manual", None, 0).unwrap_err();
        assert_eq!(r.reason(), "never_block");
        assert!(!t.is_blocked(listed, 1));
        // Keyed by its /64, a neighbour of a listed IPv6 address is refused too.
        assert!(!t.block("2001:db8:0:1::77".parse().unwrap(), 60, Limit::RequestRate, 0));
        assert!(t.block("2001:db8:0:2::77".parse().unwrap(), 60, Limit::RequestRate, 0));
        assert!(t.block(other, 60, Limit::RequestRate, 0));
        assert_eq!(t.stats.refused_never_block.load(Ordering::Relaxed), 3);
        assert_eq!(t.stats.refused_min_prefix.load(Ordering::Relaxed), 0);
        assert_eq!(t.stats.blocked_total.load(Ordering::Relaxed), 2);
        let out: Vec<String> = t.take_blocks().iter().map(|b| b.ip.to_string()).collect();
        assert_eq!(out, ["2001:db8:0:2::/64", "192.0.2.8"]);
        // Reread without it: blocked like anyone.
        std::fs::write(&f, "").unwrap();
        assert_eq!(safety.reload(), Ok(Some(0)));
        assert!(t.block(listed, 60, Limit::RequestRate, 0));
        // Keyed wider than the least prefix length: refused as too wide.
        let wide = ClientTable::new(Limits::default(), 100)
            .with_key_prefixes(KeyPrefixes { v4: 4, v6: 64 })
            .with_safety(Arc::new(Safety::load(None, 8, 16).unwrap()));
        assert_eq!(wide.try_block_for(other, 0, "manual", None, 0).unwrap_err().reason(), "min_prefix");
        assert_eq!(wide.stats.refused_min_prefix.load(Ordering::Relaxed), 1);
    }

    /// Keyed by /64, two addresses of one IPv6 /64 share one request rate
    /// and one block; an address of the next /64 has its own.
    #[test]
    fn addresses_of_one_prefix_share_a_limit() {
        let limits = Limits { request_rate: Some(4), ..Limits::default() };
        let t = ClientTable::new(limits, 100).with_key_prefixes(KeyPrefixes { v4: 32, v6: 64 });
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "2001:db8:0:1::a".parse().unwrap(),
            "2001:db8:0:1:ffff::b".parse().unwrap(),
            "2001:db8:0:2::a".parse().unwrap(),
        );
        for ip in [a, b, c] {
            assert_eq!(t.on_accept(ip, 0), Admit::Ok);
        }
        for i in 0..4 {
            t.on_request(if i % 2 == 0 { a } else { b }, 10 * i).unwrap();
        }
        assert_eq!(t.on_request(b, 50), Err(Limit::RequestRate), "a and b together are over");
        t.on_request(c, 50).unwrap();
        assert!(t.block(a, 10, Limit::RequestRate, 60));
        assert!(t.is_blocked(b, 61) && !t.is_blocked(c, 61));
        assert_eq!(t.blocks(61)[0].0.to_string(), "2001:db8:0:1::/64");
        assert_eq!(t.block_log()[0].ip.to_string(), "2001:db8:0:1::/64");
    }
}
