//! One mio event loop per thread on its own SO_REUSEPORT socket of each
//! listener (`--listen`, `--listen-plain`, `--redirect-https`). A client
//! connection carries one request at a time to an upstream connection taken
//! from the thread's keep-alive pool: the head (parsed and checked in
//! `frame`) and the body are forwarded verbatim, the response is framed by
//! `sluice_h1::response::ResponseReader` and relayed as it arrives.
//! Pipelined requests wait in the client's input buffer and go in order.
//!
//! `--upstream-pipeline N`: the body-less GETs of one loop turn share
//! upstream connections, up to N on each, written at the end of the turn
//! in one system call (the turn's batch). Their responses come back in
//! order: the one at the head of a connection (`Up::client`) is read into
//! its client's buffer, bytes past it wait in `Up::spill` for the next
//! (`Up::behind`). Those behind are sent again on other connections
//! (`Worker::redo`) when theirs cannot answer them: it closed or failed,
//! a client behind left, or the head's client stopped taking its response.
//!
//! Tokens: client slot `i` is `2i`, upstream slot `j` is `2j + 1`; an event
//! on an upstream in use drives the client it serves.
//!
//! Here: the `Worker`, its loop, and a client connection's turn (`serve`:
//! its phases in order). The connection's parts, each a set of the
//! Worker's methods: `accept` (accepting, shedding at `--max-connections`,
//! admission, the PROXY header, the ClientHello), `client` (its requests
//! read, framed, checked and sent on; what is owed it written), `queue`
//! (waiting for an upstream slot), `upstream` (the pool, sending, sending
//! again), `response` (the response relayed back), `tunnel` (after a
//! 101), `h2` (a connection whose TLS handshake chose HTTP/2: each stream
//! an exchange with an upstream connection of its own), `deadlines`
//! (every phase's), `breach` (counted, blocked, refused).

use crate::frame::HeadInfo;
use crate::outbuf::Pool;
use crate::{Config, Serve, Shared, ThreadCounters};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod accept;
mod breach;
mod client;
mod deadlines;
mod h2;
mod lane;
mod queue;
mod response;
mod sends;
mod shed;
mod tunnel;
mod upstream;

pub use h2::MEMORY_BOUND as H2_MEMORY_BOUND;
pub(crate) use lane::Lane;

use breach::reset;
use client::{drain, Client};
use queue::NEW_SHARE;
use upstream::Up;

/// Listener `k` is token `usize::MAX - 2k`: odd, and above any upstream's.
const LISTENER_TOKENS: usize = usize::MAX - 2 * (crate::MAX_LISTENERS - 1);

fn listener_token(k: usize) -> Token {
    Token(usize::MAX - 2 * k)
}
/// Poll wait: timeouts, blocks and the stop flag are looked at this often.
const TICK: Duration = Duration::from_millis(20);

/// Time a loop turn gives the connections over their calm pace
/// (`crate::pace`), and how many it drives between looks at the clock.
/// A calm client's request waits at most about this, plus the turn's
/// other work, when the loop has more to do than time.
const LATER_SLICE: Duration = Duration::from_millis(1);
const LATER_CHECK: usize = 8;
const IN_CHUNK: usize = 4096;
/// Response buffers kept free per thread for reuse (at most this many
/// times `--buffer-size` held by no connection).
const POOL_KEEP: usize = 256;

fn add(c: &AtomicU64, n: u64) {
    // Only this thread writes its counters: a plain load + store, no locked add.
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `--proxy-protocol`: waiting for the PROXY header; not admitted yet
    /// (its client is not known), not counted against any address.
    Proxy,
    Head,
    Body,
    /// A whole head, checked and counted, waiting since then for a slot
    /// at the upstream (`--upstream-max-inflight`): forwarded in its
    /// queue's turn (`Worker::dispatch_queued`).
    Queued(Instant, HeadInfo),
    /// Request forwarded; waiting for (the rest of) its response.
    Await,
    /// A tunnel to upstream `Client::tunnel` (an upgrade answered 101).
    Tunnel,
    /// HTTP/2 (ALPN `h2`): the connection's streams are its requests (`h2`).
    H2,
    /// Write what is queued, then shut the write side.
    Closing,
    Draining(Instant),
}

enum After {
    Keep,
    Close,
    Reset,
}

/// What one phase of `serve`'s turn says.
enum Next {
    /// Go on to the next phase; whether this one moved bytes.
    Go(bool),
    /// Start the turn over.
    Again,
    /// End the turn, and the connection as said.
    End(After),
}

pub(crate) struct Worker<'a> {
    poll: Poll,
    /// This thread's socket of each listener, and what it serves.
    listeners: Vec<(TcpListener, Serve)>,
    /// Where `--redirect-https` points: the first TLS listener's port, or 443.
    https_port: u16,
    clients: Vec<Option<Box<Client>>>,
    free_clients: Vec<usize>,
    ups: Vec<Option<Up>>,
    free_ups: Vec<usize>,
    idle: Vec<usize>,
    cfg: &'a Config,
    shared: &'a Shared,
    n: &'a ThreadCounters,
    epoch: u64,
    in_cap: usize,
    /// HTTP/2 exchanges read their upstreams through this (`h2::PIECE` bytes).
    h2_buf: Vec<u8>,
    /// The keys blocked since the last look (`close_blocked`), kept for its buffer.
    blocked_keys: Vec<u128>,
    /// Upstreams to close once back in their slots (see `close_up_later`).
    doomed: Vec<usize>,
    /// Client connections open on this thread, and how many it may hold
    /// (its share of `--max-connections`).
    open: usize,
    max_open: usize,
    /// The TLS config new connections get, and the store generation it is from.
    tls: Option<(u64, std::sync::Arc<rustls::ServerConfig>)>,
    /// Judged ClientHellos waiting for rustls, oldest first: (slot, serial).
    hellos: std::collections::VecDeque<(usize, u64)>,
    serials: u64,
    /// The listeners (bit k: listener k) that may hold more connections
    /// than the last turn took (edge-triggered: no new event says so).
    accept_pending: u64,
    /// This second's block lines: when it began, lines logged, blocks not logged.
    block_lines: (Instant, u32, u64),
    /// Upstream failures: when the last line was logged, failures since not logged.
    up_lines: (Option<Instant>, u64),
    /// Response buffers (`--buffer-size` each).
    pool: Pool,
    /// Requests at the upstream (clients with `req`), and this thread's
    /// share of `--upstream-max-inflight` (0: no cap).
    inflight: usize,
    max_inflight: usize,
    /// Of `inflight`, those of clients not known when they were let in,
    /// and the most they may be (a [`NEW_SHARE`] of the cap, at least 1).
    inflight_new: usize,
    max_inflight_new: usize,
    /// Requests waiting for a slot, oldest first: (slot, serial), known
    /// clients and new ones apart; and slots given since the last that
    /// went to a new client.
    queue_known: std::collections::VecDeque<(usize, u64)>,
    queue_new: std::collections::VecDeque<(usize, u64)>,
    since_new: u32,
    /// `--upstream-pipeline`: the upstreams this turn's pipelinable
    /// requests went to, written when the turn ends (`flush_batch`); new
    /// ones join the last while it has room.
    batch: Vec<usize>,
    /// Pipelined requests to send again, alone; they kept their slots.
    redo: std::collections::VecDeque<(usize, u64)>,
    /// `--upgrade-protocols`, shared by every connection's framer.
    upgrades: std::sync::Arc<[Box<str>]>,
    /// Clients whose responses now come first on their connections (the
    /// one ahead ended): driven before the turn ends, as their bytes
    /// may be in the spill already, with no new event to say so.
    wake: std::collections::VecDeque<(usize, u64)>,
    /// The time, read once a loop turn after the poll returns (as nginx's
    /// cached `ngx_current_msec`): a request's path stamps and compares
    /// times about eight times, and each reading of the clock is a vDSO
    /// call; one a turn serves them all, stale by at most the turn.
    /// Deadlines are swept against the real clock.
    now: Instant,
    now_ms: u64,
    /// The turn's sends go out together through this at its end
    /// (`flush_sends`; see `sends`); None: each goes at once, plainly.
    ring: Option<sends::SendRing>,
    /// Upstreams whose requests (`Up::out`) wait for the turn's end, and
    /// clients (slot, serial) whose responses do.
    deferred_ups: Vec<usize>,
    client_sends: Vec<(usize, u64)>,
    /// The turn's end is sending: what it drives sends at once.
    flushing: bool,
    /// `flush_sends`'s results, kept for their buffer.
    sent: Vec<usize>,
    /// The clients `flush_sends` drives after its call, kept for their buffer.
    to_drive: Vec<usize>,
    /// Connections over their calm pace whose events wait, oldest first:
    /// (slot, serial), driven for [`LATER_SLICE`] a turn (`crate::pace`).
    later: std::collections::VecDeque<(usize, u64)>,
    pace_rule: crate::pace::PaceRule,
    /// The next client slot the deadline sweep looks at.
    sweep_at: usize,
    /// Who is shed next at `--max-connections`, and who was lately (`shed`).
    shedder: shed::Shedder,
    /// This thread's index; lane k's is `--threads` + k (`lane`).
    me: usize,
    /// `--calm-lane`: where this thread's calm connections go, or (a
    /// lane) come from.
    lane: Option<&'a Lane>,
    /// Connections were handed to the other side since it was last woken.
    handed: bool,
    /// The inbox taken out, kept for its buffer.
    #[allow(clippy::vec_box)]
    lane_inbox: Vec<Box<Client>>,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        me: usize,
        mut listeners: Vec<(TcpListener, Serve)>,
        https_port: u16,
        cfg: &'a Config,
        shared: &'a Shared,
        n: &'a ThreadCounters,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        for (k, (l, _)) in listeners.iter_mut().enumerate() {
            poll.registry().register(l, listener_token(k), Interest::READABLE)?;
        }
        let max_open = (shared.max_connections / cfg.threads.max(1)).max(1);
        let mut w = Worker {
            poll,
            listeners,
            https_port,
            // Room for every connection the thread may hold, reserved (not
            // touched: the pages come as slots are first used), so a flood
            // of connects never waits for the slots to be copied to a
            // larger allocation (800 bytes a slot: 8 MB at 10,000).
            clients: Vec::with_capacity(max_open.min(1 << 16)),
            free_clients: Vec::new(),
            ups: Vec::new(),
            free_ups: Vec::new(),
            idle: Vec::new(),
            cfg,
            shared,
            n,
            epoch: 0,
            blocked_keys: Vec::new(),
            h2_buf: Vec::new(),
            in_cap: cfg.max_head + IN_CHUNK,
            doomed: Vec::new(),
            open: 0,
            max_open,
            tls: None,
            hellos: Default::default(),
            serials: 0,
            accept_pending: 0,
            block_lines: (Instant::now(), 0, 0),
            up_lines: (None, 0),
            pool: Pool::new(cfg.buffer_size, POOL_KEEP),
            inflight: 0,
            max_inflight: match cfg.upstream_max_inflight {
                0 => 0,
                n => (n / cfg.threads.max(1)).max(1),
            },
            inflight_new: 0,
            max_inflight_new: match cfg.upstream_max_inflight {
                0 => 0,
                n => ((n / cfg.threads.max(1)).max(1) / NEW_SHARE as usize).max(1),
            },
            queue_known: Default::default(),
            queue_new: Default::default(),
            since_new: 0,
            batch: Vec::new(),
            redo: Default::default(),
            upgrades: cfg.upgrade_protocols.iter().map(|p| p.to_ascii_lowercase().into_boxed_str()).collect(),
            wake: Default::default(),
            now: Instant::now(),
            now_ms: shared.started.elapsed().as_millis() as u64,
            // No ring (io_uring disabled, or not in this kernel): plain sends.
            ring: if cfg.plain_sends { None } else { sends::SendRing::new().ok() },
            deferred_ups: Vec::new(),
            client_sends: Vec::new(),
            flushing: false,
            sent: Vec::new(),
            to_drive: Vec::new(),
            later: Default::default(),
            sweep_at: 0,
            shedder: Default::default(),
            pace_rule: crate::pace::PaceRule::new(cfg.limits.request_rate),
            me,
            // Accepting thread k and lane thread `threads + k` share lane k.
            lane: shared.lanes.get(me % cfg.threads.max(1)),
            handed: false,
            lane_inbox: Vec::new(),
        };
        w.start_lane()?;
        Ok(w)
    }

    /// Milliseconds since the guard started, as of this turn (see `now`).
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Read the clock for this turn.
    fn tick(&mut self) {
        self.now = Instant::now();
        self.now_ms = self.now.saturating_duration_since(self.shared.started).as_millis() as u64;
    }

    pub(crate) fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + TICK;
        while !stop.load(Ordering::Relaxed) {
            // Handshakes still queued: look at the sockets and come back at once.
            // (And requests to send again, or responses already read.)
            let busy = !self.hellos.is_empty()
                || self.accept_pending != 0
                || !self.redo.is_empty()
                || !self.wake.is_empty()
                || !self.batch.is_empty()
                || !self.deferred_ups.is_empty()
                || !self.client_sends.is_empty()
                || !self.later.is_empty();
            let wait = if busy { Duration::ZERO } else { TICK };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            self.tick();
            for ev in &events {
                // Input, EOF or an error: reading finds out which. A bare
                // write-ready edge (one after nearly every send) is not
                // read on: that read would fail with EAGAIN, one wasted
                // system call per request.
                let input = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                match ev.token() {
                    lane::LANE_WAKE => {}
                    Token(t) if t >= LISTENER_TOKENS => self.accept_pending |= 1 << ((usize::MAX - t) / 2),
                    Token(t) if t % 2 == 0 => {
                        if let Some(Some(c)) = self.clients.get_mut(t / 2) {
                            c.readable |= input;
                            c.read_closed |= ev.is_read_closed();
                            // Input over its calm pace: its turn comes in
                            // `later`'s slice (a bare write-ready edge only
                            // lets what it is owed go: at once).
                            if c.later {
                                continue;
                            }
                            if input && c.pace.is_some_and(|p| !p.calm(&self.pace_rule, self.now_ms)) {
                                c.later = true;
                                self.later.push_back((t / 2, c.serial));
                                add(&self.n.paced, 1);
                                continue;
                            }
                        }
                        self.drive(t / 2)
                    }
                    Token(t) => {
                        if let Some(Some(u)) = self.ups.get_mut(t / 2) {
                            u.readable |= input;
                            u.read_closed |= ev.is_read_closed();
                        }
                        self.up_event(t / 2)
                    }
                }
            }
            if self.accept_pending != 0 {
                self.accept_all();
            }
            self.lane_turn();
            self.run_hellos();
            self.run_later();
            let epoch = self.shared.table.block_epoch.load(Ordering::Acquire);
            if epoch != self.epoch {
                let since = std::mem::replace(&mut self.epoch, epoch);
                self.close_blocked(since);
            }
            if self.now >= next_sweep {
                next_sweep = self.now + TICK;
                self.sweep_deadlines();
                self.handed_wake();
            }
            self.wake_next();
            self.dispatch_queued();
            self.flush_sends();
        }
        for i in 0..self.clients.len() {
            if self.clients[i].is_some() {
                self.close_client(i, false);
            }
        }
        Ok(())
    }

    /// Drive the connections waiting in `later`, oldest first, for at most
    /// [`LATER_SLICE`] (the clock read every [`LATER_CHECK`] of them): the
    /// calm connections' events of the next turn wait no longer than that.
    fn run_later(&mut self) {
        let start = Instant::now();
        let mut n = 0;
        while let Some((i, serial)) = self.later.pop_front() {
            match self.clients.get_mut(i) {
                Some(Some(c)) if c.serial == serial => c.later = false,
                _ => continue,
            }
            self.drive(i);
            n += 1;
            if n % LATER_CHECK == 0 && start.elapsed() >= LATER_SLICE {
                break;
            }
        }
    }

    fn close_client(&mut self, i: usize, rst: bool) {
        let Some(mut c) = self.clients.get_mut(i).and_then(Option::take) else { return };
        if rst {
            reset(&c.sock);
        }
        let _ = self.poll.registry().deregister(&mut c.sock);
        if c.tracked {
            self.shared.table.on_close(c.ip);
        }
        self.leave_up(&mut c);
        c.out.discard(&mut self.pool);
        self.returned(&c);
        self.open -= 1;
        self.free_clients.push(i);
    }

    fn drive(&mut self, i: usize) {
        let Some(mut c) = self.clients.get_mut(i).and_then(Option::take) else { return };
        let after = self.serve(&mut c, i);
        self.clients[i] = Some(c);
        match after {
            After::Keep => {}
            After::Close => self.close_client(i, false),
            After::Reset => self.close_client(i, true),
        }
    }

    /// Read, frame, forward, relay, write, until nothing moves. One
    /// function per phase; each says whether it moved bytes, or that the
    /// turn starts over, or how the connection ends.
    fn serve(&mut self, c: &mut Client, i: usize) -> After {
        // `Again` restarts the turn (a phase changed what earlier phases see).
        macro_rules! phase {
            ($progress:ident, $e:expr) => {
                match $e {
                    Next::Go(moved) => $progress |= moved,
                    Next::Again => continue,
                    Next::End(after) => return after,
                }
            };
        }
        loop {
            if let Phase::Draining(deadline) = c.phase {
                return drain(c, deadline);
            }
            let mut progress = false;
            phase!(progress, self.read_client(c, i));
            phase!(progress, self.tls_established(c));
            if c.h2.is_some() {
                phase!(progress, self.h2_turn(c, i));
            } else {
                phase!(progress, self.proxy_header(c));
                phase!(progress, self.frame_head(c, i));
                phase!(progress, self.forward_body(c));
                if c.start == c.end {
                    c.start = 0;
                    c.end = 0;
                }
                phase!(progress, self.exchange(c, i));
                phase!(progress, self.tunnel(c));
            }
            phase!(progress, self.write_client(c, i, progress));
            if !progress {
                return After::Keep;
            }
        }
    }
}
