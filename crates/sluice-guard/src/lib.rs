//! `sluice http-guard`: a reverse proxy that enforces Tempesta FW's "frang"
//! limits per client IP and turns HTTP-level verdicts into IP-level blocks.
//!
//! - `slots`: frang's 8 x 1/8-period rate accounting;
//! - `limits`: the limits, their names and the statuses they answer;
//! - `table`: per-client state shared by the threads (sharded, bounded,
//!   clock eviction) and the blocked addresses (a table of their own);
//! - `frame`: the only user of the request parser (`sluice-h1`);
//! - `proxy`: one mio loop per thread on SO_REUSEPORT listeners, keep-alive
//!   upstream pools, responses framed by `sluice_h1::response`;
//! - `publish`: the blocks as an `ipset save` file, written atomically;
//! - `proxyproto`: the PROXY protocol header (v1, v2) a trusted load
//!   balancer sends first, naming the real client; `forwarded`: the client
//!   an `X-Forwarded-For` names;
//! - `tls`: TLS termination (rustls), certificates by SNI, reloads;
//! - `ja4`: the TLS ClientHello and its JA4 fingerprint; `ja4list`: the
//!   `--block-ja4` list and the fingerprints seen;
//! - `control`: the guard's answers on its control socket (`sluice ctl
//!   blocks`, `block`, `unblock`, `clients`) and its SIGHUP rereads;
//!   `block_forward`: new blocks pushed to a bridge's control socket or a
//!   CrowdSec LAPI; `exporter`: the counters as Prometheus metrics;
//!   `service`: all of it started, run and stopped as `sluice http-guard`
//!   runs it.

pub mod block_forward;
pub mod control;
pub mod exporter;
pub mod flags;
pub mod forwarded;
pub mod frame;
pub mod ja4;
pub mod ja4list;
pub mod limits;
pub mod net;
pub mod outbuf;
pub mod pace;
pub mod proxyproto;
pub mod publish;
pub mod service;
pub mod slots;
pub mod synfilter;
pub mod table;
pub mod timeouts;
pub mod tls;

mod proxy;

pub use limits::{Limit, Limits, RespCodeBlock, Weight};
pub use net::{ClientNet, KeyPrefixes};
/// What an HTTP/2 connection holds beyond a TLS connection's own buffers (docs/http-guard.md, "HTTP/2").
pub use proxy::H2_MEMORY_BOUND;
pub use table::{BlockEvent, ClientRow, ClientTable, NewBlock};
pub use timeouts::{MinRate, Timeouts};

use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a breach does to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockAction {
    /// Answer with the fitting status (429, 400, 408, ...), then close.
    Reply,
    /// Close with a RST (SO_LINGER 0), no answer.
    Reset,
}

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// The guarded site, over TLS when the guard has certificates
    /// (`--listen`, as it always was).
    Main,
    /// The guarded site in plain HTTP, certificates or not (`--listen-plain`).
    Plain,
    /// Plain HTTP answering every request with a 308 to its https URL,
    /// nothing forwarded (`--redirect-https`).
    RedirectHttps,
}

/// One address the guard accepts on, and what it serves there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub addr: SocketAddr,
    pub serve: Serve,
}

impl Listener {
    pub fn new(addr: SocketAddr, serve: Serve) -> Listener {
        Listener { addr, serve }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Every listener, served by every thread's loop (each thread binds
    /// its own SO_REUSEPORT socket to each address); the first is the one
    /// [`Guard::local_addr`] names.
    pub listeners: Vec<Listener>,
    pub upstream: SocketAddr,
    pub threads: usize,
    /// Beside each thread, a calm lane: a thread that takes over its
    /// connections open a second or more and calm, between their
    /// requests: their requests no longer wait behind a flood's work in
    /// the accepting threads (docs/http-guard.md, "The calm lane").
    pub calm_lane: bool,
    pub limits: Limits,
    /// A deadline on every phase of a connection (on by default).
    pub timeouts: Timeouts,
    /// Bytes held per direction per connection: the response on its way
    /// to the client, the request body on its way to the upstream. The
    /// guard's memory is at most about `max_connections` times twice this
    /// plus the request head buffer (docs/http-guard.md).
    pub buffer_size: usize,
    /// Requests at the upstream at once, all threads together (0: no cap).
    /// Beyond, requests wait in a queue that serves known clients (served
    /// before, not near a limit) first and gives new ones a share of the
    /// slots (see `proxy::queue::NEW_SHARE`).
    pub upstream_max_inflight: usize,
    /// Body-less GETs written together on one upstream connection, at most
    /// this many per connection (1: one request per connection at a time).
    /// They are taken from one loop turn and written in one system call;
    /// the responses, read in order, are split between their clients
    /// (docs/http-guard.md, "Upstream pipelining").
    pub upstream_pipeline: usize,
    /// Each send its own system call (`--plain-sends`); else a loop turn's
    /// plain-connection sends go together in one io_uring call where the
    /// kernel allows it (proxy/sends.rs says why).
    pub plain_sends: bool,
    /// The protocols a request may ask to upgrade to (lowercase; WebSocket
    /// by default). Such a request may be answered `101`: the connection
    /// then becomes a tunnel to its upstream connection, each direction
    /// bounded by `buffer_size`, closed after `timeouts.tunnel` without a
    /// byte either way. A 101 to any other request is a 502 (empty: every
    /// 101 is).
    pub upgrade_protocols: Vec<String>,
    pub action: BlockAction,
    /// Block a breaching address for this many seconds (0: until restart); `None`: no IP blocks.
    pub ip_block: Option<u64>,
    /// The breach score that blocks an address: each breach adds its
    /// limit's points (`Limit::weight`), or blocks at once (1: every
    /// breach blocks, as before scores).
    pub ip_block_after: u8,
    pub block_file: Option<PathBuf>,
    pub max_clients: usize,
    pub max_head: usize,
    /// Without it the listeners and the upstream must be loopback.
    pub allow_remote: bool,
    pub pin: bool,
    /// Keep new blocks for [`ClientTable::take_blocks`] (something forwards them).
    pub forward_blocks: bool,
    /// Open client connections, all threads together; beyond, the ones
    /// waiting longest for a request head are closed. 0: from the file
    /// limit ([`default_max_connections`]).
    pub max_connections: usize,
    /// Clients are keyed (limited, blocked, published) by these prefixes.
    pub key_prefixes: KeyPrefixes,
    /// Judge, count and record blocks, enforce nothing: every request is
    /// forwarded, no address is refused, nothing is written or forwarded
    /// (`would_block` in the report).
    pub dry_run: bool,
    /// Every connection starts with a PROXY protocol header (v1 or v2)
    /// naming the client; connections from outside `trusted_proxies` are
    /// refused.
    pub proxy_protocol: bool,
    /// The load balancers whose PROXY headers (and `client_ip_header`) are believed.
    pub trusted_proxies: Vec<sluice_rules::Prefix>,
    /// A request from a trusted proxy names its client in this header
    /// (`X-Forwarded-For`): the rightmost untrusted address.
    pub client_ip_header: Option<String>,
    /// Terminate TLS with these certificates (chosen by SNI; the first is
    /// the default). Empty: plain HTTP.
    pub tls: Vec<tls::CertFiles>,
    /// A TLS handshake must finish this soon after accept.
    pub tls_handshake_timeout: Duration,
    /// ALPN offers `h2` on TLS listeners: each HTTP/2 stream goes to the
    /// upstream as an HTTP/1.1 request (`proxy::h2`).
    pub http2: bool,
    /// JA4 fingerprints refused at the ClientHello (one per line).
    pub block_ja4: Option<PathBuf>,
    /// What no block may cover: `--never-block`, `--min-prefix-*`.
    pub safety: Arc<sluice_control::safety::Safety>,
    /// Drop blocked clients' SYNs in the kernel (`synfilter.rs`), where it
    /// loads; false: `--no-syn-filter`.
    pub syn_filter: bool,
}

impl Config {
    /// A guard of one [`Serve::Main`] listener at `listen`.
    pub fn new(listen: SocketAddr, upstream: SocketAddr) -> Config {
        Config {
            listeners: vec![Listener::new(listen, Serve::Main)],
            upstream,
            threads: 1,
            calm_lane: false,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            buffer_size: DEFAULT_BUFFER_SIZE,
            upstream_max_inflight: 0,
            upstream_pipeline: 1,
            plain_sends: false,
            upgrade_protocols: vec!["websocket".into()],
            action: BlockAction::Reply,
            ip_block: None,
            ip_block_after: DEFAULT_IP_BLOCK_AFTER,
            block_file: None,
            max_clients: 1_000_000,
            max_head: 16 << 10,
            allow_remote: false,
            pin: true,
            forward_blocks: false,
            max_connections: 0,
            key_prefixes: KeyPrefixes::default(),
            dry_run: false,
            proxy_protocol: false,
            trusted_proxies: Vec::new(),
            client_ip_header: None,
            tls: Vec::new(),
            tls_handshake_timeout: Duration::from_secs(10),
            http2: true,
            block_ja4: None,
            safety: Arc::default(),
            syn_filter: true,
        }
    }
}

/// `--ip-block-after`'s default: a real user's mistakes (a mistyped URL
/// answered 405 or 414, a form posted twice, a stalled phone) come one or
/// two at a time, and a point leaks away each minute; a scanner's come by
/// the dozen a minute. Five is past the first and well short of the second.
pub const DEFAULT_IP_BLOCK_AFTER: u8 = 5;

/// `--buffer-size`'s default: HAProxy's `tune.bufsize` is 16 KiB per
/// direction; 32 KiB holds a whole response head (16 KiB at most) with
/// room to read behind it, and halves the reads of a large response.
pub const DEFAULT_BUFFER_SIZE: usize = 32 << 10;
/// The most `--upstream-pipeline` takes: a deeper batch waits longer for
/// the response at its head and saves no more system calls than it costs.
pub const MAX_PIPELINE: usize = 64;
/// The smallest `--buffer-size`: a response head longer than the buffer
/// cannot be framed (502).
pub const MIN_BUFFER_SIZE: usize = 4 << 10;

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("refusing {0}: not a loopback address (pass --allow-remote to use it anyway)")]
    NotLoopback(SocketAddr),
    #[error("{0}")]
    BadLimit(String),
    #[error("--tls-cert: {0}")]
    Tls(String),
    // The cause is part of the message (not a `source`), so a printed
    // error chain does not repeat it.
    #[error("{what}: {error}")]
    Io { what: String, error: io::Error },
}

sluice_metrics::counters! {
    /// A guard thread's counts: declared once here, summed over threads
    /// into the summary's keys (the field names) and the exporter's
    /// families (the names after `=>`; the rest are in the summary only).
    pub struct Counts / CountTotals {
        /// Request heads received.
        requests => "sluice_guard_requests",
        /// Requests forwarded upstream.
        forwarded => "sluice_guard_forwarded",
        /// Bytes read from clients.
        bytes_in => "sluice_guard_bytes_in",
        /// Bytes written to clients.
        bytes_out => "sluice_guard_bytes_out",
        /// Upstream connects, writes or responses that failed.
        upstream_errors => "sluice_guard_upstream_errors",
        /// Upstreams that did not connect (`--upstream-connect-timeout`) or
        /// answer (`--upstream-timeout`) in time: 504, or the client closed
        /// when its response had begun.
        upstream_timeouts => "sluice_guard_upstream_timeouts",
        /// Upstream connections opened.
        upstream_connects,
        /// Requests written behind another on one upstream connection (`--upstream-pipeline`).
        upstream_pipelined => "sluice_guard_upstream_pipelined",
        /// Of those, sent again on another connection: the one they were
        /// written on could not answer them (it closed, failed, or the
        /// response ahead of them was stuck behind a slow client).
        upstream_resent => "sluice_guard_upstream_resent",
        /// Requests that waited for an upstream slot (`--upstream-max-inflight`).
        upstream_queued => "sluice_guard_upstream_queued",
        /// Of those, from new clients (not served before, or near a limit).
        upstream_queued_new => "sluice_guard_upstream_queued_new",
        /// Microseconds those requests waited in all.
        upstream_queue_wait_us => "sluice_guard_upstream_queue_wait_us",
        /// Requests that waited `--upstream-queue-timeout` for a slot: 503.
        upstream_queue_timeouts => "sluice_guard_upstream_queue_timeouts",
        /// `--calm-lane`: connections handed to the calm lanes (open a
        /// second or more, calm, between requests).
        calm_lane_lent => "sluice_guard_calm_lane_lent",
        /// Of those, handed back to their accepting thread (well over
        /// their calm pace since; they come again once calm).
        calm_lane_returned => "sluice_guard_calm_lane_returned",
        /// TLS connections on which ALPN chose HTTP/2.
        h2_connections => "sluice_guard_h2_connections",
        /// Requests that came as HTTP/2 streams (counted in `requests` too).
        h2_streams => "sluice_guard_h2_streams",
        /// HTTP/2 streams the client reset (or the connection reset for
        /// breaking a stream rule) before their response ended: their
        /// upstream request was cancelled (its connection closed).
        h2_resets => "sluice_guard_h2_resets",
        /// HTTP/2 streams answered 503 at `--upstream-max-inflight` (a
        /// stream does not wait in the queue: the client may send it again).
        h2_refused_busy => "sluice_guard_h2_refused_busy",
        /// Requests answered 308 to their https URL on a `--redirect-https` listener.
        redirects => "sluice_guard_redirects",
        /// Connections that became tunnels (an upgrade answered 101: WebSocket).
        tunnels => "sluice_guard_tunnels",
        /// Tunnels closed for moving no byte either way for `--tunnel-timeout`.
        tunnels_idle_closed => "sluice_guard_tunnels_idle_closed",
        /// Connections closed at accept (blocked, or no room to track).
        refused_at_accept => "sluice_guard_refused_at_accept",
        /// Of those, for no room in the client table.
        refused_table_full,
        /// Client connections accepted.
        connections => "sluice_guard_connections",
        /// Open connections closed because their address was blocked meanwhile.
        closed_blocked,
        /// Connections that sent no byte of a request within the header
        /// timeout (from accept, or since their last response), closed.
        closed_idle => "sluice_guard_closed_idle",
        /// Connections waiting for a request head, closed (oldest first) to
        /// make room under `--max-connections`.
        shed_waiting => "sluice_guard_shed_waiting",
        /// Events of connections over their calm pace (`pace`), put off
        /// to the loop turn's slice for them.
        paced => "sluice_guard_paced",
        /// New connections closed at once: at `--max-connections` with none
        /// waiting to shed.
        refused_max_connections => "sluice_guard_refused_max_connections",
        /// Of those, from an address shed at the cap within the last 2 s
        /// (while not known): it does not displace another so soon.
        refused_shed_lately => "sluice_guard_refused_shed_lately",
        /// `--proxy-protocol`: connections from outside `--trusted-proxies`, closed at accept.
        refused_untrusted_proxy => "sluice_guard_refused_untrusted_proxy",
        /// `--client-ip-header`: requests whose client (named by a trusted
        /// proxy) was blocked, answered 403 and their connection closed.
        refused_forwarded_blocked => "sluice_guard_refused_forwarded_blocked",
        /// `--proxy-protocol`: connections whose first bytes were not a valid
        /// PROXY header, or that sent none within the header timeout, closed.
        proxy_header_errors => "sluice_guard_proxy_header_errors",
        /// TLS handshakes finished.
        tls_handshakes => "sluice_guard_tls_handshakes",
        /// TLS connections that failed before their handshake finished.
        tls_handshake_errors => "sluice_guard_tls_handshake_errors",
        /// TLS connections closed at `--tls-handshake-timeout`, their handshake unfinished.
        tls_handshake_timeouts => "sluice_guard_tls_handshake_timeouts",
    }
}

/// One thread's counters: only that thread writes them (a cache line of
/// its own, so threads do not share lines); scrapes and the summary read.
#[derive(Debug)]
#[repr(align(128))]
pub struct ThreadCounters {
    pub counts: Counts,
    /// Breaches by limit (`Limit::index`).
    pub breaches: [AtomicU64; Limit::COUNT],
}

// (Arrays derive `Default` only up to 32 elements.)
impl Default for ThreadCounters {
    fn default() -> Self {
        ThreadCounters { counts: Counts::default(), breaches: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

impl std::ops::Deref for ThreadCounters {
    type Target = Counts;
    fn deref(&self) -> &Counts {
        &self.counts
    }
}

/// What the threads share.
pub struct Shared {
    pub table: Arc<ClientTable>,
    /// `--max-connections` as applied (the default resolved).
    pub max_connections: usize,
    pub threads: Vec<ThreadCounters>,
    pub started: Instant,
    pub block_file_writes: Arc<AtomicU64>,
    /// `--tls-cert`: the certificates served (reloadable).
    pub tls: Option<Arc<tls::TlsStore>>,
    /// `--block-ja4`: the fingerprints refused (reloadable).
    pub ja4_block: Option<Arc<ja4list::Ja4Block>>,
    /// ClientHellos by JA4.
    pub ja4_stats: ja4list::Ja4Stats,
    /// The SYN filter on every listener, or why there is none.
    pub syn_filter: Result<Arc<synfilter::SynFilter>, String>,
    /// `--calm-lane`: where each accepting thread hands its calm
    /// connections (one lane each; none without the flag).
    pub(crate) lanes: Vec<proxy::Lane>,
}

sluice_metrics::counters! {
    /// The guard's numbers besides its threads' counts, read from the
    /// table, the TLS store and the JA4 list when a report is made:
    /// declared once, as [`Counts`] are (summary keys, families, help).
    pub struct GuardTotals {
        /// Client IPs blocked.
        blocked_total => "sluice_guard_blocks",
        /// Client IPs blocked now.
        blocked_active => gauge "sluice_guard_blocks_active",
        /// `--dry-run`: client IPs an enforcing run would have blocked.
        ///
        /// `blocked_*` stay 0.
        would_block => "sluice_guard_would_block",
        /// `--max-connections` as applied.
        max_connections => gauge "sluice_guard_max_connections",
        /// Certificate reloads (SIGHUP) that worked.
        tls_reloads_ok => "sluice_guard_tls_reloads" { "result" = "ok" },
        /// Certificate reloads that failed (the certificates in force stay).
        tls_reloads_failed => "sluice_guard_tls_reloads" { "result" = "failed" },
        /// Distinct JA4s seen (at most 10,000 counted).
        ja4_distinct => gauge "sluice_guard_ja4_distinct",
        /// `--block-ja4`: fingerprints listed.
        ja4_list_entries => gauge "sluice_guard_ja4_list_entries",
        /// `--block-ja4` rereads that worked.
        ja4_list_reloads_ok => "sluice_guard_ja4_list_reloads" { "result" = "ok" },
        /// `--block-ja4` rereads that failed.
        ja4_list_reloads_failed => "sluice_guard_ja4_list_reloads" { "result" = "failed" },
        /// Client IPs with state.
        clients_tracked => gauge "sluice_guard_clients_tracked",
        /// Idle client states evicted for room.
        clients_evicted => "sluice_guard_clients_evicted",
        /// Blocks not recorded because the block table was full.
        blocks_dropped => "sluice_guard_blocks_dropped",
        /// Rewrites of `--block-file`.
        block_file_writes => "sluice_guard_block_file_writes",
        syn_filter_on => gauge "sluice_guard_syn_filter" { "state" = "on" },
        syn_filter_off => gauge "sluice_guard_syn_filter" { "state" = "off" },
        /// Blocked networks in the SYN filter now.
        syn_filter_entries => gauge "sluice_guard_syn_filter_entries",
        /// Blocks the kernel refused to write into the SYN filter (their
        /// clients are refused at accept instead).
        syn_filter_errors => "sluice_guard_syn_filter_errors",
    }
    families {
        /// 1 for the SYN filter's state: on (blocked clients' SYNs dropped
        /// in the kernel, before a connection exists) or off.
        "sluice_guard_syn_filter",
        /// Certificate reloads (SIGHUP), by result.
        "sluice_guard_tls_reloads",
        /// `--block-ja4` rereads (SIGHUP), by result.
        "sluice_guard_ja4_list_reloads",
    }
}

/// The counters summed: the `--json` summary and the metrics. Its numbers
/// are declared ([`CountTotals`], [`GuardTotals`]); the rest are keyed by
/// what occurred (limits, reasons, JA4s, blocks) or a flag.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    /// The threads' counts, summed (each a key of its own).
    #[serde(flatten)]
    pub counts: CountTotals,
    pub breaches: BTreeMap<&'static str, u64>,
    /// The rest of the numbers (each a key of its own; `report.blocked_total` reads through).
    #[serde(flatten)]
    pub totals: GuardTotals,
    /// `--dry-run`: nothing was enforced, `blocked_*` are 0 and the blocks
    /// an enforcing run would have made are counted in `would_block`.
    pub dry_run: bool,
    /// The 10 most frequent JA4 fingerprints of ClientHellos.
    pub ja4_top: Vec<ja4list::Ja4Row>,
    /// Blocks the safety net refused, by reason (`never_block`,
    /// `min_prefix`): those clients were not blocked.
    pub blocks_refused: BTreeMap<&'static str, u64>,
    /// The first blocks (at most 1024): address, limit, times in ms since start.
    pub blocks: Vec<BlockEvent>,
    /// `on`, or `off: ` and why (the SYN filter).
    pub syn_filter: String,
}

/// The report's keys no counter set declares (the names test checks that
/// there is no other).
pub const REPORT_KEYS: &[&str] = &["breaches", "dry_run", "ja4_top", "blocks_refused", "blocks", "syn_filter"];

impl std::ops::Deref for Report {
    type Target = GuardTotals;
    fn deref(&self) -> &GuardTotals {
        &self.totals
    }
}

/// How each line of the text summary begins (a line's leading count set
/// aside): the names test fails for a line that begins otherwise.
pub const SUMMARY_LINES: &[&str] = &[" requests in ", "dry run: ", "  breaches: "];

impl Report {
    /// The text summary `sluice http-guard` prints: counts, then the
    /// breaches by limit.
    pub fn text(&self, elapsed: std::time::Duration) -> String {
        let broken: Vec<String> =
            self.breaches.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k} x{n}")).collect();
        format!(
            "{}{} requests in {:.1} s, {} forwarded; {} connections, {} refused at accept; {} blocked ({} active); \
             {} clients tracked, {} evicted; {} upstream errors; {} bytes in, {} bytes out\n  breaches: {}\n",
            if self.dry_run {
                format!("dry run: {} would have been blocked; ", self.would_block)
            } else {
                String::new()
            },
            self.counts.requests,
            elapsed.as_secs_f64(),
            self.counts.forwarded,
            self.counts.connections,
            self.counts.refused_at_accept,
            self.blocked_total,
            self.blocked_active,
            self.clients_tracked,
            self.clients_evicted,
            self.counts.upstream_errors,
            self.counts.bytes_in,
            self.counts.bytes_out,
            if broken.is_empty() { "none".into() } else { broken.join(", ") }
        )
    }
}

impl Shared {
    pub fn report(&self) -> Report {
        let mut counts = CountTotals::default();
        for t in &self.threads {
            counts.add(&t.counts.totals());
        }
        let breaches = Limit::ALL
            .iter()
            .map(|l| (l.name(), self.threads.iter().map(|t| t.breaches[l.index()].load(Ordering::Relaxed)).sum()))
            .collect();
        let s = &self.table.stats;
        let dry = self.table.dry_run();
        let totals = GuardTotals {
            blocked_total: if dry { 0 } else { s.blocked_total.load(Ordering::Relaxed) },
            blocked_active: if dry { 0 } else { s.blocks_active.load(Ordering::Relaxed) },
            would_block: if dry { s.blocked_total.load(Ordering::Relaxed) } else { 0 },
            max_connections: self.max_connections as u64,
            tls_reloads_ok: self.tls.as_ref().map_or(0, |t| t.reloads_ok.load(Ordering::Relaxed)),
            tls_reloads_failed: self.tls.as_ref().map_or(0, |t| t.reloads_failed.load(Ordering::Relaxed)),
            ja4_distinct: self.ja4_stats.distinct() as u64,
            ja4_list_entries: self.ja4_block.as_ref().map_or(0, |b| b.len() as u64),
            ja4_list_reloads_ok: self.ja4_block.as_ref().map_or(0, |b| b.reloads_ok.load(Ordering::Relaxed)),
            ja4_list_reloads_failed: self.ja4_block.as_ref().map_or(0, |b| b.reloads_failed.load(Ordering::Relaxed)),
            clients_tracked: s.tracked.load(Ordering::Relaxed),
            clients_evicted: s.evicted.load(Ordering::Relaxed),
            blocks_dropped: s.blocks_dropped.load(Ordering::Relaxed),
            block_file_writes: self.block_file_writes.load(Ordering::Relaxed),
            syn_filter_on: u64::from(self.syn_filter.is_ok()),
            syn_filter_off: u64::from(self.syn_filter.is_err()),
            syn_filter_entries: self.syn_filter.as_ref().map_or(0, |f| f.entries()),
            syn_filter_errors: self.syn_filter.as_ref().map_or(0, |f| f.errors()),
        };
        Report {
            counts,
            breaches,
            totals,
            dry_run: dry,
            ja4_top: self.ja4_stats.top(10),
            blocks_refused: BTreeMap::from([
                ("never_block", s.refused_never_block.load(Ordering::Relaxed)),
                ("min_prefix", s.refused_min_prefix.load(Ordering::Relaxed)),
            ]),
            blocks: self.table.block_log(),
            syn_filter: match &self.syn_filter {
                Ok(_) => "on".into(),
                Err(why) => format!("off: {why}"),
            },
        }
    }
}

/// The most listeners a guard takes (each costs a socket per thread).
pub const MAX_LISTENERS: usize = 64;

/// Bound and ready; nothing is accepted until [`Guard::start`].
pub struct Guard {
    /// Per thread, a socket for each of `bound`.
    sockets: Vec<Vec<std::net::TcpListener>>,
    /// The listeners with the addresses bound (a port 0 resolved).
    bound: Vec<Listener>,
    config: Config,
    tls: Option<Arc<tls::TlsStore>>,
    ja4_block: Option<Arc<ja4list::Ja4Block>>,
}

impl Guard {
    pub fn bind(config: Config) -> Result<Guard, GuardError> {
        if config.listeners.is_empty() || config.listeners.len() > MAX_LISTENERS {
            return Err(GuardError::BadLimit(format!("between 1 and {MAX_LISTENERS} listeners, please")));
        }
        for a in config.listeners.iter().map(|l| l.addr).chain([config.upstream]) {
            if !config.allow_remote && !a.ip().is_loopback() {
                return Err(GuardError::NotLoopback(a));
            }
        }
        config.limits.check().map_err(GuardError::BadLimit)?;
        if (config.proxy_protocol || config.client_ip_header.is_some()) && config.trusted_proxies.is_empty() {
            // Believing every peer's header would let anyone name any client.
            return Err(GuardError::BadLimit(format!(
                "{} needs --trusted-proxies (the load balancers whose headers are believed)",
                if config.proxy_protocol { "--proxy-protocol" } else { "--client-ip-header" }
            )));
        }
        if config.threads == 0 {
            return Err(GuardError::BadLimit("--threads must be at least 1".into()));
        }
        if config.ip_block_after == 0 {
            return Err(GuardError::BadLimit("--ip-block-after must be 1..=255".into()));
        }
        if !(1..=MAX_PIPELINE).contains(&config.upstream_pipeline) {
            return Err(GuardError::BadLimit(format!("--upstream-pipeline must be 1..={MAX_PIPELINE}")));
        }
        if !(MIN_BUFFER_SIZE..=64 << 20).contains(&config.buffer_size) {
            return Err(GuardError::BadLimit(format!(
                "--buffer-size must be {MIN_BUFFER_SIZE}..=67108864 bytes (a response head must fit in it)"
            )));
        }
        // Before binding: a bad certificate is named before anything listens.
        let tls = (!config.tls.is_empty())
            .then(|| tls::TlsStore::load(config.tls.clone(), config.http2).map(Arc::new))
            .transpose()
            .map_err(GuardError::Tls)?;
        if config.block_ja4.is_some() && tls.is_none() {
            return Err(GuardError::BadLimit(
                "--block-ja4 needs --tls-cert (JA4 is read from the TLS ClientHello)".into(),
            ));
        }
        let ja4_block = config
            .block_ja4
            .clone()
            .map(|p| ja4list::Ja4Block::load(p).map(Arc::new))
            .transpose()
            .map_err(|e| GuardError::BadLimit(format!("--block-ja4: {e}")))?;
        if tls.is_some() && !config.listeners.iter().any(|l| l.serve == Serve::Main) {
            // Certificates no listener serves are a mistake, not a choice.
            return Err(GuardError::BadLimit(
                "--tls-cert needs a --listen to serve it (--listen-plain and --redirect-https are plain HTTP)".into(),
            ));
        }
        let io_err = |what: String| move |error| GuardError::Io { what, error };
        let mut sockets: Vec<Vec<std::net::TcpListener>> = (0..config.threads).map(|_| Vec::new()).collect();
        let mut bound = Vec::new();
        for l in &config.listeners {
            let privileged = l.addr.port() < 1024 && l.addr.port() != 0;
            let hint = if privileged { " (a port below 1024 needs CAP_NET_BIND_SERVICE)" } else { "" };
            let first = sluice_tcp::reuseport_listener(l.addr).map_err(|error| {
                let hint = if error.kind() == io::ErrorKind::PermissionDenied { hint } else { "" };
                GuardError::Io { what: format!("binding {}{hint}", l.addr), error }
            })?;
            let addr = first.local_addr().map_err(io_err("reading the bound address".into()))?;
            sockets[0].push(first);
            for thread in &mut sockets[1..] {
                thread.push(
                    sluice_tcp::reuseport_listener(addr)
                        .map_err(io_err(format!("binding another socket to {addr}")))?,
                );
            }
            bound.push(Listener::new(addr, l.serve));
        }
        Ok(Guard { sockets, bound, config, tls, ja4_block })
    }

    /// The first listener's address (the port chosen, when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.bound[0].addr
    }

    /// Every listener, with the address bound.
    pub fn listeners(&self) -> &[Listener] {
        &self.bound
    }

    /// Spawn the loops and the block publisher.
    pub fn start(self) -> Result<GuardThreads, GuardError> {
        let config = Arc::new(self.config);
        config.key_prefixes.check().map_err(GuardError::BadLimit)?;
        // Every block is a client's network: keyed wider than the safety
        // net allows, every one would be refused (and the key prefix is
        // more likely the typo: `--key-prefix-v4 3` for 32).
        let net = config.safety.net();
        for (flag, key, min) in
            [("v4", config.key_prefixes.v4, net.min_v4()), ("v6", config.key_prefixes.v6, net.min_v6())]
        {
            if key < min {
                return Err(GuardError::BadLimit(format!(
                    "--key-prefix-{flag} {key} is wider than --min-prefix-{flag} {min}: every block would be refused"
                )));
            }
        }
        let syn_filter = syn_filter(&config, &self.sockets);
        let mut table = ClientTable::new(config.limits.clone(), config.max_clients)
            .with_dry_run(config.dry_run)
            .with_key_prefixes(config.key_prefixes)
            .with_safety(Arc::clone(&config.safety));
        if let Ok(f) = &syn_filter {
            table = table.with_syn_filter(Arc::clone(f));
        }
        let table = Arc::new(table);
        if config.forward_blocks {
            table.forward_blocks();
        }
        let max_connections =
            if config.max_connections == 0 { default_max_connections() } else { config.max_connections };
        let shared = Arc::new(Shared {
            table: table.clone(),
            max_connections,
            // The calm lanes' counts come after the accepting threads'.
            threads: (0..config.threads * (1 + usize::from(config.calm_lane)))
                .map(|_| ThreadCounters::default())
                .collect(),
            started: Instant::now(),
            block_file_writes: Arc::new(AtomicU64::new(0)),
            tls: self.tls,
            ja4_block: self.ja4_block,
            ja4_stats: ja4list::Ja4Stats::default(),
            syn_filter,
            lanes: (0..if config.calm_lane { config.threads } else { 0 }).map(|_| proxy::Lane::new()).collect(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let spawn_err = |error| GuardError::Io { what: "spawning a guard thread".into(), error };
        if let Some(p) = &config.block_file {
            publish::start(p, &shared.block_file_writes)
                .map_err(|error| GuardError::Io { what: format!("writing the block file {}", p.display()), error })?;
        }
        let publisher = {
            let (table, path, started, stop, writes) =
                (table, config.block_file.clone(), shared.started, stop.clone(), shared.block_file_writes.clone());
            std::thread::Builder::new()
                .name("guard-publish".into())
                .spawn(move || publish::run(table, path, started, stop, writes))
                .map_err(spawn_err)?
        };
        let cpus = sluice_cpus::available_cpus();
        let mut handles = Vec::new();
        let https_port = https_port(&self.bound, shared.tls.is_some());
        for (i, sockets) in self.sockets.into_iter().enumerate() {
            let (config, shared, stop) = (config.clone(), shared.clone(), stop.clone());
            let serves: Vec<Serve> = self.bound.iter().map(|l| l.serve).collect();
            let h = std::thread::Builder::new()
                .name(format!("guard-{i}"))
                .spawn(move || {
                    if config.pin {
                        let _ = sluice_cpus::pin_current_thread(i % cpus);
                    }
                    let listeners =
                        sockets.into_iter().map(mio::net::TcpListener::from_std).zip(serves).collect::<Vec<_>>();
                    let n = &shared.threads[i];
                    proxy::Worker::new(i, listeners, https_port, &config, &shared, n)?.run(&stop)
                })
                .map_err(spawn_err)?;
            handles.push(h);
        }
        for k in 0..shared.lanes.len() {
            // No listener of its own: it serves what thread k hands it.
            let (config, shared, stop) = (config.clone(), shared.clone(), stop.clone());
            let i = config.threads + k;
            let h = std::thread::Builder::new()
                .name(format!("guard-lane-{k}"))
                .spawn(move || {
                    if config.pin {
                        let _ = sluice_cpus::pin_current_thread(i % cpus);
                    }
                    let n = &shared.threads[i];
                    proxy::Worker::new(i, Vec::new(), https_port, &config, &shared, n)?.run(&stop)
                })
                .map_err(spawn_err)?;
            handles.push(h);
        }
        Ok(GuardThreads { stop, handles, publisher, shared })
    }
}

pub struct GuardThreads {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<io::Result<()>>>,
    publisher: JoinHandle<io::Result<()>>,
    shared: Arc<Shared>,
}

impl GuardThreads {
    /// Setting it stops the threads (within ~50 ms); signal handlers may set it.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The live counters (metrics read them while it runs).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Whether a thread ended early (an error: `wait` says which).
    pub fn any_finished(&self) -> bool {
        self.publisher.is_finished() || self.handles.iter().any(JoinHandle::is_finished)
    }

    /// Stop, wait for every thread, and sum the counters.
    pub fn wait(self) -> Result<Report, GuardError> {
        self.stop.store(true, Ordering::Relaxed);
        let panicked = || GuardError::Io { what: "a guard thread".into(), error: io::Error::other("panicked") };
        for h in self.handles {
            h.join().map_err(|_| panicked())?.map_err(|error| GuardError::Io { what: "proxying".into(), error })?;
        }
        self.publisher
            .join()
            .map_err(|_| panicked())?
            .map_err(|error| GuardError::Io { what: "writing the block file".into(), error })?;
        Ok(self.shared.report())
    }
}

/// The port a redirect to https names: the first TLS listener's (as
/// bound), else 443 (TLS is terminated by another guard, or in front).
/// The SYN filter (`synfilter.rs`) loaded and attached to every listening
/// socket of every thread, or why not (said once in the log). Off in a dry
/// run (which enforces nothing) and behind `--trusted-proxies` (the
/// clients the guard blocks are then named by headers, their packets come
/// from the proxies).
fn syn_filter(config: &Config, sockets: &[Vec<std::net::TcpListener>]) -> Result<Arc<synfilter::SynFilter>, String> {
    let why = if !config.syn_filter {
        Err("--no-syn-filter".to_owned())
    } else if config.dry_run {
        Err("--dry-run".to_owned())
    } else if !config.trusted_proxies.is_empty() {
        Err("--trusted-proxies (clients are named by their proxies)".to_owned())
    } else {
        Ok(())
    };
    let loaded = why.and_then(|()| {
        let f = synfilter::SynFilter::load(config.max_clients, config.key_prefixes)?;
        for s in sockets.iter().flatten() {
            f.attach(s).map_err(|e| format!("SO_ATTACH_BPF: {e}"))?;
        }
        Ok(Arc::new(f))
    });
    match &loaded {
        Ok(f) => {
            tracing::info!(capacity = f.capacity(), "SYN filter on: blocked clients' SYNs are dropped in the kernel")
        }
        Err(why) if config.syn_filter => {
            tracing::warn!("SYN filter off ({why}): blocked clients are refused at accept");
        }
        Err(_) => {}
    }
    loaded
}

fn https_port(bound: &[Listener], tls: bool) -> u16 {
    bound.iter().find(|l| tls && l.serve == Serve::Main).map_or(443, |l| l.addr.port())
}

/// Open client connections allowed when `--max-connections` is not given:
/// half the soft file limit (each client may hold an upstream connection
/// too) less a reserve for listeners, pools and files; 1,024 when the
/// limit cannot be read.
pub fn default_max_connections() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("Max open files"))?.to_owned();
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    soft.map_or(1024, |n| (n.saturating_sub(256) / 2).max(16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_name_the_first_tls_listeners_port_else_443() {
        let l = |port, serve| Listener::new(SocketAddr::from(([127, 0, 0, 1], port)), serve);
        let bound = [l(80, Serve::RedirectHttps), l(8080, Serve::Plain), l(8443, Serve::Main), l(9443, Serve::Main)];
        assert_eq!(https_port(&bound, true), 8443);
        assert_eq!(https_port(&bound, false), 443, "no certificates: --listen is plain, TLS is elsewhere");
        assert_eq!(https_port(&bound[..2], true), 443);
    }
}
