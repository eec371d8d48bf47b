//! One mio event loop per thread on its own SO_REUSEPORT listener. A client
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

use crate::frame::{HeadInfo, HeadStep, Refusal, RequestFramer};
use crate::limits::{Limit, Limits};
use crate::outbuf::{OutBuf, Pool};
use crate::table::Standing;
use crate::timeouts::Watch;
use crate::tls::{Input, TlsConn};
use crate::{Config, Shared, ThreadCounters};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod accept;
mod breach;
mod deadlines;
mod queue;
mod response;
mod tunnel;
mod upstream;

use breach::reset;
use queue::NEW_SHARE;
use tunnel::Tunnel;
use upstream::{InFlight, Up};

const LISTENER: Token = Token(usize::MAX);
/// Poll wait: timeouts, blocks and the stop flag are looked at this often.
const TICK: Duration = Duration::from_millis(20);
const IN_CHUNK: usize = 4096;
/// Response buffers kept free per thread for reuse (at most this many
/// times `--buffer-size` held by no connection).
const POOL_KEEP: usize = 256;
/// After an error reply the write side is shut and input discarded this long
/// at most: closing with unread input would send a RST that can destroy the reply.
const DRAIN_FOR: Duration = Duration::from_secs(1);

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
    /// Write what is queued, then shut the write side.
    Closing,
    Draining(Instant),
}

struct Client {
    sock: TcpStream,
    /// The client: the peer, the one a PROXY header named, or (`forwarded`)
    /// the one the current request names.
    ip: IpAddr,
    /// The connection's peer as far as the guard knows it (after any PROXY header).
    peer: IpAddr,
    /// The peer is a trusted proxy and `--client-ip-header` is set: each
    /// request names its client; the connection itself is not counted
    /// against any address.
    forwarded: bool,
    /// Counted in the table's open connections (on_close owed).
    tracked: bool,
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    framer: RequestFramer,
    phase: Phase,
    req: Option<InFlight>,
    /// The response (and the guard's own replies) on its way to the client.
    out: OutBuf,
    /// Bytes written to the client, and request body bytes forwarded: the
    /// watches below compare them over time.
    sent: u64,
    received: u64,
    send_watch: Watch,
    body_watch: Watch,
    /// A slow-client breach was noted in a dry run: not noted again.
    slow_noted: bool,
    /// A kept-alive connection waiting for its next request's first byte
    /// is closed then (`--keepalive-timeout`).
    idle_deadline: Option<Instant>,
    /// The last byte moved for this client either way: shedding at
    /// `--max-connections` takes the stalled ones oldest progress first.
    progress_at: Instant,
    /// Since when it waits for a request head (accepted, or its last
    /// response sent on a kept-alive connection); None while a request is
    /// on. The header timeout runs from here, and `--max-connections`
    /// sheds the longest waiting first.
    waiting_since: Option<Instant>,
    head_deadline: Option<Instant>,
    peer_eof: bool,
    /// An event said the peer closed its side: read on past a short read
    /// (the FIN came with the data, and no new edge will say so).
    read_closed: bool,
    /// An event said it may have input (edge-triggered: read until drained).
    readable: bool,
    /// A dry run counted this request's body length already (its head's
    /// Content-Length): the body crossing the limit is not counted again.
    body_len_noted: bool,
    /// `--tls-cert`: the connection's TLS (plaintext flows through `inbuf` and `out`).
    tls: Option<Box<TlsConn>>,
    /// The handshake must be done by then (`--tls-handshake-timeout`).
    handshake_deadline: Option<Instant>,
    /// The JA4 of its ClientHello, once read.
    ja4: Option<Box<str>>,
    /// Its ClientHello waits in the worker's queue: not read further until its turn.
    hello_queued: bool,
    /// Tells this connection from a later one in the same slot.
    serial: u64,
    /// A response was relayed on it: a client that has been served, shed
    /// after those that never were.
    served: bool,
    /// Its request was pipelined and sent again: this time alone.
    solo: bool,
    /// Its next upstream exchange holds one of the new clients' slots
    /// (`--upstream-max-inflight`): it was not known when it was let in.
    as_new: bool,
    /// `Phase::Tunnel`: its upstream connection, which serves it alone.
    tunnel: Option<Tunnel>,
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
    listener: TcpListener,
    clients: Vec<Option<Client>>,
    free_clients: Vec<usize>,
    ups: Vec<Option<Up>>,
    free_ups: Vec<usize>,
    idle: Vec<usize>,
    cfg: &'a Config,
    shared: &'a Shared,
    n: &'a ThreadCounters,
    epoch: u64,
    in_cap: usize,
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
    /// The listener may hold more connections than the last turn took
    /// (edge-triggered: no new event says so).
    accept_pending: bool,
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
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

fn error_response(out: &mut OutBuf, pool: &mut Pool, status: u16) {
    let reply = format!(
        "HTTP/1.1 {status} {}\r\nServer: sluice-guard\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        reason(status)
    );
    out.push(reply.as_bytes(), pool);
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        mut listener: TcpListener,
        cfg: &'a Config,
        shared: &'a Shared,
        n: &'a ThreadCounters,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Worker {
            poll,
            listener,
            clients: Vec::new(),
            free_clients: Vec::new(),
            ups: Vec::new(),
            free_ups: Vec::new(),
            idle: Vec::new(),
            cfg,
            shared,
            n,
            epoch: 0,
            in_cap: cfg.max_head + IN_CHUNK,
            doomed: Vec::new(),
            open: 0,
            max_open: (shared.max_connections / cfg.threads.max(1)).max(1),
            tls: None,
            hellos: Default::default(),
            serials: 0,
            accept_pending: false,
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
        })
    }

    fn now_ms(&self) -> u64 {
        self.shared.started.elapsed().as_millis() as u64
    }

    pub(crate) fn run(mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = Instant::now() + TICK;
        while !stop.load(Ordering::Relaxed) {
            // Handshakes still queued: look at the sockets and come back at once.
            // (And requests to send again, or responses already read.)
            let busy = !self.hellos.is_empty() || self.accept_pending || !self.redo.is_empty() || !self.wake.is_empty();
            let wait = if busy { Duration::ZERO } else { TICK };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in &events {
                // Input, EOF or an error: reading finds out which. A bare
                // write-ready edge (one after nearly every send) is not
                // read on: that read would fail with EAGAIN, one wasted
                // system call per request.
                let input = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                match ev.token() {
                    LISTENER => self.accept_pending = true,
                    Token(t) if t % 2 == 0 => {
                        if let Some(Some(c)) = self.clients.get_mut(t / 2) {
                            c.readable |= input;
                            c.read_closed |= ev.is_read_closed();
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
            if self.accept_pending {
                self.accept_all();
            }
            self.run_hellos();
            let epoch = self.shared.table.block_epoch.load(Ordering::Acquire);
            if epoch != self.epoch {
                self.epoch = epoch;
                self.close_blocked();
            }
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + TICK;
                self.sweep_deadlines();
            }
            self.wake_next();
            self.dispatch_queued();
            self.flush_batch();
        }
        for i in 0..self.clients.len() {
            if self.clients[i].is_some() {
                self.close_client(i, false);
            }
        }
        Ok(())
    }

    /// Count a request against its client (named by a trusted proxy, or
    /// the connection's own).
    fn request(&self, c: &Client) -> Result<(), Limit> {
        if c.forwarded {
            self.shared.table.on_forwarded_request(c.ip, self.now_ms())
        } else {
            self.shared.table.on_request(c.ip, self.now_ms())
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
        self.open -= 1;
        self.free_clients.push(i);
    }

    /// The connection now waits for a request head. A new one (`fresh`):
    /// the header timeout starts at accept (as nginx's
    /// `client_header_timeout`, so a connection that never sends a byte is
    /// closed too). A kept-alive one: the keep-alive timeout runs until its
    /// next request's first byte, the header timeout from there.
    fn start_waiting(&mut self, c: &mut Client, fresh: bool) {
        // Until the next request names its client, a breach is the proxy's.
        if c.forwarded {
            c.ip = c.peer;
        }
        let now = Instant::now();
        c.waiting_since = Some(now);
        let t = &self.cfg.timeouts;
        if fresh {
            (c.head_deadline, c.idle_deadline) = (t.client_header.map(|d| now + d), None);
        } else {
            (c.head_deadline, c.idle_deadline) = (None, t.keepalive.map(|d| now + d));
        }
        // Nothing owed it while it waits: its buffer goes back to the pool.
        c.out.release(&mut self.pool);
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
            phase!(progress, self.proxy_header(c));
            phase!(progress, self.frame_head(c, i));
            phase!(progress, self.forward_body(c));
            if c.start == c.end {
                c.start = 0;
                c.end = 0;
            }
            phase!(progress, self.exchange(c, i));
            phase!(progress, self.tunnel(c));
            phase!(progress, self.write_client(c, progress));
            if !progress {
                return After::Keep;
            }
        }
    }

    /// Read the client, unless it is done sending, its buffer is full, or
    /// its hello waits its turn.
    #[inline]
    fn read_client(&mut self, c: &mut Client, i: usize) -> Next {
        if matches!(c.phase, Phase::Closing) || c.peer_eof || !c.readable || c.hello_queued {
            return Next::Go(false);
        }
        sluice_tcp::make_room(&mut c.inbuf, &mut c.start, &mut c.end, self.in_cap);
        if c.end == c.inbuf.len() {
            return Next::Go(false);
        }
        let room = c.inbuf.len() - c.end;
        // Bytes read, and whether more may be there without a new edge.
        let more = |n| n == room || c.read_closed;
        let got = match &mut c.tls {
            // A short read drained the socket; new input brings a
            // new edge (but an EOF already signalled does not).
            // A PROXY header comes before any TLS.
            None => c.sock.read(&mut c.inbuf[c.end..]).map(|n| (n, more(n))),
            Some(_) if c.phase == Phase::Proxy => c.sock.read(&mut c.inbuf[c.end..]).map(|n| (n, more(n))),
            Some(t) => match t.read(&mut c.sock, &mut c.inbuf[c.end..]) {
                Ok(Input::Data(n)) => Ok((n, true)),
                Ok(Input::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
                // Admitted hellos queue, so handshakes are worked through
                // after the established connections' requests (see
                // `run_hellos`).
                Ok(Input::Hello(hello)) => {
                    return match self.hello(c, hello.as_deref()) {
                        After::Keep => {
                            c.hello_queued = true;
                            self.hellos.push_back((i, c.serial));
                            Next::End(After::Keep)
                        }
                        after => Next::End(after),
                    }
                }
                Err(_) => {
                    if !t.established {
                        add(&self.n.tls_handshake_errors, 1);
                    }
                    return Next::End(After::Close);
                }
            },
        };
        match got {
            Ok((0, _)) => c.peer_eof = true,
            Ok((n, more)) => {
                c.readable = more;
                c.end += n;
                c.received += n as u64;
                c.progress_at = Instant::now();
                add(&self.n.bytes_in, n as u64);
                return Next::Go(true);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Next::Again,
            Err(_) => return Next::End(After::Close),
        }
        Next::Go(false)
    }

    /// Frame a head; a whole one is checked, then sent to an upstream.
    #[inline]
    fn frame_head(&mut self, c: &mut Client, i: usize) -> Next {
        if c.phase != Phase::Head || c.end == c.start {
            return Next::Go(false);
        }
        let limits = self.shared.table.limits();
        // A dry run frames with no limits and checks them after.
        let no_limits = Limits::default();
        let framing = if self.cfg.dry_run { &no_limits } else { limits };
        match c.framer.head(&c.inbuf[c.start..c.end], framing) {
            Err(r) => {
                // A head over a limit parsed whole and names its
                // client; a malformed one is the proxy's (never blocked).
                if let (true, Some(header)) = (c.forwarded, self.cfg.client_ip_header.as_deref()) {
                    let head = &c.inbuf[c.start..c.end];
                    c.ip = c.framer.forwarded_client(head, header, c.peer, &self.cfg.trusted_proxies);
                }
                self.refused(c, r)
            }
            Ok(HeadStep::Partial) => {
                // A kept-alive connection's next request began: the
                // keep-alive wait ends, the header timeout starts.
                if c.idle_deadline.take().is_some() || c.head_deadline.is_none() {
                    c.head_deadline = self.cfg.timeouts.client_header.map(|d| Instant::now() + d);
                }
                Next::Go(false)
            }
            Ok(HeadStep::Complete(h)) => self.forward_head(c, i, h),
        }
    }

    /// A whole head: named, checked against the limits, and sent to an
    /// upstream connection.
    fn forward_head(&mut self, c: &mut Client, i: usize, h: HeadInfo) -> Next {
        (c.head_deadline, c.idle_deadline, c.waiting_since) = (None, None, None);
        add(&self.n.requests, 1);
        if let (true, Some(header)) = (c.forwarded, self.cfg.client_ip_header.as_deref()) {
            let head = &c.inbuf[c.start..c.end];
            c.ip = c.framer.forwarded_client(head, header, c.peer, &self.cfg.trusted_proxies);
            // Its connection was not refused at accept: a
            // blocked client is refused here, request by request.
            if !self.cfg.dry_run && self.shared.table.is_blocked(c.ip, self.now_ms()) {
                add(&self.n.refused_forwarded_blocked, 1);
                error_response(&mut c.out, &mut self.pool, 403);
                c.phase = Phase::Closing;
                return Next::Again;
            }
        }
        if self.cfg.dry_run {
            let broke = c.framer.over_limits(&c.inbuf[c.start..c.end], self.shared.table.limits());
            c.body_len_noted = broke == Some(Limit::HttpBodyLen);
            let rate = self.request(c).err();
            for limit in [broke, rate].into_iter().flatten() {
                self.note(c.ip, c.ja4.as_deref(), limit);
            }
        } else if let Err(limit) = self.request(c) {
            return self.refused(c, Refusal { limit, status: limit.status(), reason: limit.name() });
        }
        // At the cap, or others already wait: the request waits its turn.
        let full = self.max_inflight > 0 && self.inflight >= self.max_inflight;
        if full || !self.queue_known.is_empty() || !self.queue_new.is_empty() {
            return self.enqueue(c, i, h);
        }
        if self.max_inflight > 0 {
            // While the new clients' share has room, a request takes it
            // unasked (one lookup fewer while nothing waits); past it, only
            // a known client's goes on.
            c.as_new = self.inflight_new < self.max_inflight_new;
            if !c.as_new && self.shared.table.standing(c.ip, self.now_ms()) == Standing::New {
                return self.enqueue(c, i, h);
            }
        }
        self.start_upstream(c, i, h)
    }

    /// The body goes on only while the upstream's buffer has room
    /// (`--buffer-size`): a slow upstream stops the client's reads.
    #[inline]
    fn forward_body(&mut self, c: &mut Client) -> Next {
        let j = match (&c.req, c.phase) {
            (Some(q), Phase::Body) if c.end > c.start => q.up,
            _ => return Next::Go(false),
        };
        let u = self.ups[j].as_mut().expect("in use");
        if u.out_pos > 0 {
            u.out.drain(..u.out_pos);
            u.out_pos = 0;
        }
        let body_room = self.cfg.buffer_size.saturating_sub(u.out.len());
        if body_room == 0 {
            return Next::Go(false);
        }
        let (no_limits, before) = (Limits::default(), c.framer.body_len());
        let framing = if self.cfg.dry_run { &no_limits } else { self.shared.table.limits() };
        let take = (c.end - c.start).min(body_room);
        let step = c.framer.body(&c.inbuf[c.start..c.start + take], framing);
        let max = self.shared.table.limits().http_body_len;
        if self.cfg.dry_run && !c.body_len_noted && max.is_some_and(|m| before <= m && c.framer.body_len() > m) {
            c.body_len_noted = true;
            self.note(c.ip, c.ja4.as_deref(), Limit::HttpBodyLen);
        }
        match step {
            Err(r) => self.refused(c, r),
            Ok((n, done)) => {
                let u = self.ups[j].as_mut().expect("in use");
                u.out.extend_from_slice(&c.inbuf[c.start..c.start + n]);
                c.start += n;
                if done {
                    c.phase = Phase::Await;
                }
                Next::Go(n > 0)
            }
        }
    }

    /// Write to the client (over TLS: plaintext in, and any records queued,
    /// a handshake's too, out); once flushed, close if that is what is left.
    /// `progress`: whether this turn moved anything before.
    #[inline]
    fn write_client(&mut self, c: &mut Client, progress: bool) -> Next {
        let wrote = match &mut c.tls {
            None => c.out.write_to(&mut c.sock).map(|n| (n, n)),
            Some(t) => c.out.write_to(&mut t.writer(&mut c.sock)).and_then(|n| Ok((n, n + t.flush(&mut c.sock)?))),
        };
        let Ok((plain, moved)) = wrote else { return Next::End(After::Close) };
        add(&self.n.bytes_out, plain as u64);
        if moved > 0 {
            c.sent += moved as u64;
            c.progress_at = Instant::now();
        }
        let flushed = !c.out.has_pending() && !c.tls.as_ref().is_some_and(|t| t.wants_write());
        if flushed {
            if c.req.is_none() {
                c.out.release(&mut self.pool);
            }
            if c.phase == Phase::Closing {
                // TLS ends with a close_notify, sent before the FIN.
                if c.tls.as_mut().is_some_and(|t| t.close()) {
                    return Next::Again;
                }
                let _ = c.sock.shutdown(Shutdown::Write);
                c.phase = Phase::Draining(Instant::now() + DRAIN_FOR);
                return Next::Again;
            }
            let queued = matches!(c.phase, Phase::Queued(..));
            if c.peer_eof && c.req.is_none() && !queued && c.tunnel.is_none() && !progress && moved == 0 {
                // Gone, and everything it asked is answered (a partial
                // head at EOF gets nothing; a whole one is framed on the
                // next turn, so only once nothing moved).
                return Next::End(After::Close);
            }
        }
        Next::Go(moved > 0)
    }
}

/// Input after the write side is shut: discard it until EOF or the deadline.
fn drain(c: &mut Client, deadline: Instant) -> After {
    if Instant::now() < deadline && sluice_tcp::discard_input(&mut c.sock) {
        After::Keep
    } else {
        After::Close
    }
}
