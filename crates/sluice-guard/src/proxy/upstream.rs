//! The upstream side: the thread's keep-alive pool of upstream
//! connections, a checked request sent on one (alone, or pipelined in the
//! turn's batch), and a pipelined request sent again when its connection
//! cannot answer it.

use super::client::{error_response, Client};
use super::{add, Next, Phase, Worker};
use crate::frame::HeadInfo;
use crate::timeouts::ProgressWatch;
use mio::net::TcpStream;
use mio::{Interest, Token};
use sluice_h1::response::ResponseReader;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A pooled upstream connection idle at least this long is peeked at before
/// a request that could not be sent again goes on it (its close may be on
/// its way). One idle for less carries a body-less GET unpeeked: the peek
/// is a fifth system call per request (`recvfrom` answering EAGAIN), and
/// if the upstream did close it the GET is sent once more on another
/// connection. Upstreams close idle connections after seconds (nginx's
/// `keepalive_timeout` 75 s, Node's 5 s), not within a second of a response.
const PEEK_IDLE: Duration = Duration::from_secs(1);

pub(super) const MAX_RESPONSE_HEAD: usize = sluice_h1::response::DEFAULT_MAX_HEAD;

pub(super) struct InFlight {
    pub(super) up: usize,
    pub(super) keep_alive: bool,
    /// Some response bytes went to the client: a reply can no longer be sent.
    pub(super) resp_started: bool,
    pub(super) head: HeadInfo,
    /// A pipelined request's head stays in the client's input buffer
    /// (`inbuf[start..start + held]`) until its response begins: until
    /// then it can be sent again on another connection.
    pub(super) held: usize,
    /// It holds one of the new clients' slots (`Worker::inflight_new`).
    pub(super) new: bool,
}

/// An upstream connection. Its response is read straight into its
/// client's [`OutBuf`](crate::outbuf::OutBuf); `out` holds the request on
/// its way (head and body, the body bounded by `--buffer-size`).
pub(super) struct Up {
    pub(super) sock: TcpStream,
    pub(super) out: Vec<u8>,
    pub(super) out_pos: usize,
    /// An event said it may have input (edge-triggered: read until drained).
    pub(super) readable: bool,
    /// An event said the upstream closed its side: read on past a short
    /// read (the FIN came with the data; a response pipelined behind must
    /// see it, and no new edge will say so).
    pub(super) read_closed: bool,
    pub(super) reader: ResponseReader,
    /// The client whose response is read now.
    pub(super) client: Option<usize>,
    /// Pipelined requests after it, in the order sent: (slot, serial).
    pub(super) behind: std::collections::VecDeque<(usize, u64)>,
    /// Response bytes read past the current response: the start of the
    /// next ones', moved whole into the next client's buffer once it has
    /// room for all (at most `--buffer-size`: they came from one client
    /// buffer; the socket is not read while it holds any).
    pub(super) spill: Vec<u8>,
    /// This turn's batch: written once the turn ends.
    pub(super) hold: bool,
    /// Nothing after the current response is read: closed after it.
    pub(super) last: bool,
    /// Bytes moved either way, for `watch` (`--upstream-timeout`).
    pub(super) moved: u64,
    pub(super) watch: ProgressWatch,
    /// A new connection must be accepted by then (`--upstream-connect-timeout`):
    /// until its first write, a connect is in progress.
    pub(super) connect_deadline: Option<Instant>,
    /// When it went back to the pool (see [`PEEK_IDLE`]).
    pub(super) idle_since: Instant,
}

impl Worker<'_> {
    /// A pooled upstream connection, or a new one (connect in progress).
    /// `resendable`: the request goes again elsewhere if this one closes
    /// before answering it (a body-less GET). `pooled`: a pooled one may
    /// serve it (a request sent again after its connection closed
    /// unanswered takes a new one: a pooled one may be closing the same
    /// way, its close not yet here, and a second loss would be its 502).
    pub(super) fn take_up(&mut self, resendable: bool, pooled: bool) -> io::Result<usize> {
        while let Some(j) = if pooled { self.idle.pop() } else { None } {
            // Still open and quiet? Its close may have come with the last
            // bytes of its response (one edge, already taken), or be queued
            // behind this turn's events: a request sent there is lost.
            let u = self.ups[j].as_ref().expect("an idle upstream");
            if resendable && self.now.saturating_duration_since(u.idle_since) < PEEK_IDLE {
                return Ok(j);
            }
            match u.sock.peek(&mut [0u8; 1]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(j),
                _ => self.close_up(j),
            }
        }
        let mut sock = TcpStream::connect(self.cfg.upstream)?;
        let _ = sock.set_nodelay(true);
        let j = self.free_ups.pop().unwrap_or_else(|| {
            self.ups.push(None);
            self.ups.len() - 1
        });
        if let Err(e) =
            self.poll.registry().register(&mut sock, Token(2 * j + 1), Interest::READABLE | Interest::WRITABLE)
        {
            self.free_ups.push(j);
            return Err(e);
        }
        add(&self.n.upstream_connects, 1);
        self.ups[j] = Some(Up {
            sock,
            out: Vec::new(),
            out_pos: 0,
            readable: true,
            read_closed: false,
            reader: ResponseReader::new(MAX_RESPONSE_HEAD),
            client: None,
            behind: Default::default(),
            spill: Vec::new(),
            hold: false,
            last: false,
            moved: 0,
            watch: ProgressWatch::new(0, Instant::now()),
            connect_deadline: self.cfg.timeouts.upstream_connect.map(|d| Instant::now() + d),
            idle_since: Instant::now(),
        });
        Ok(j)
    }

    /// An event on an upstream connection.
    pub(super) fn up_event(&mut self, j: usize) {
        match self.ups.get(j) {
            Some(Some(Up { client: Some(i), .. })) => {
                let i = *i;
                self.drive(i);
            }
            Some(Some(u)) if u.readable => {
                // Idle: the upstream closed it (EOF), failed, or sent bytes
                // no request asked for. Any of these ends it.
                let mut scratch = [0u8; 512];
                let gone = !matches!((&u.sock).read(&mut scratch), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
                if gone {
                    self.idle.retain(|&k| k != j);
                    self.close_up(j);
                }
            }
            _ => {}
        }
    }

    /// Close upstream `j`; the requests pipelined behind its current one
    /// are sent again elsewhere.
    pub(super) fn close_up(&mut self, j: usize) {
        if let Some(mut u) = self.ups.get_mut(j).and_then(Option::take) {
            self.resend(&mut u);
            let _ = self.poll.registry().deregister(&mut u.sock);
            self.free_ups.push(j);
            self.batch.retain(|&k| k != j);
            self.deferred_ups.retain(|&k| k != j);
        }
    }

    /// Close upstream `j`, which the caller has taken out of its slot and
    /// puts back: mark it so the slot is freed after.
    pub(super) fn close_up_later(&mut self, j: usize) {
        self.doomed.push(j);
    }

    /// The request's upstream exchange ended: its slot is free.
    pub(super) fn end_req(&mut self, c: &mut Client) -> Option<InFlight> {
        let q = c.req.take()?;
        self.inflight -= 1;
        self.inflight_new -= usize::from(q.new);
        c.start += q.held;
        Some(q)
    }

    /// The client's request leaves its upstream connection before its
    /// response ended (the client closed, was refused, or timed out). The
    /// connection closes, unless the request was pipelined behind
    /// another's response: that one goes on, and the connection closes
    /// after it (no one reads what follows).
    pub(super) fn leave_up(&mut self, c: &mut Client) {
        self.h2_leave(c);
        if let Some(t) = c.tunnel.take() {
            return self.close_up(t.up);
        }
        let Some(q) = self.end_req(c) else { return };
        let mut u = match self.ups.get_mut(q.up).and_then(Option::take) {
            Some(u) if u.behind.iter().any(|&(_, s)| s == c.serial) => u,
            Some(u) => {
                self.ups[q.up] = Some(u);
                return self.close_up(q.up);
            }
            None => return,
        };
        u.behind.retain(|&(_, s)| s != c.serial);
        u.last = true;
        self.resend(&mut u);
        self.ups[q.up] = Some(u);
    }

    /// Send a checked head to an upstream connection: this turn's batch
    /// when it is pipelined and the batch has room, else a pooled or new one.
    pub(super) fn start_upstream(&mut self, c: &mut Client, i: usize, h: HeadInfo) -> Next {
        let pipe = self.cfg.upstream_pipeline > 1 && h.pipelinable && !c.solo;
        if let (true, Some(&j)) = (pipe, self.batch.last()) {
            let room = |u: &&mut Up| !u.last && 1 + u.behind.len() < self.cfg.upstream_pipeline;
            if let Some(u) = self.ups[j].as_mut().filter(room) {
                u.behind.push_back((i, c.serial));
                u.out.extend_from_slice(&c.inbuf[c.start..c.start + h.len]);
                add(&self.n.forwarded, 1);
                add(&self.n.upstream_pipelined, 1);
                c.req = Some(InFlight {
                    up: j,
                    keep_alive: h.keep_alive,
                    resp_started: false,
                    head: h,
                    held: h.len,
                    new: c.as_new,
                });
                self.inflight += 1;
                self.inflight_new += usize::from(c.as_new);
                c.phase = Phase::Await;
                return Next::Go(true);
            }
        }
        // Sent again if its connection closes unanswered: see `retry` below.
        let j = match self.take_up(h.pipelinable && !c.solo, !c.solo) {
            Ok(j) => j,
            Err(e) => {
                self.upstream_failed(format_args!("connecting: {e}"));
                error_response(&mut c.out, &mut self.pool, 502);
                c.phase = Phase::Closing;
                return Next::Again;
            }
        };
        let u = self.ups[j].as_mut().expect("taken");
        u.client = Some(i);
        u.watch = ProgressWatch::new(u.moved, self.now);
        if h.head_method {
            // Its answer is a head alone, whatever its Content-Length says.
            u.reader.expect_no_body();
        }
        if h.upgrade {
            // A 101 may answer it (and only it).
            u.reader.expect_upgrade();
        }
        u.out.extend_from_slice(&c.inbuf[c.start..c.start + h.len]);
        // A pipelined request's connection takes the others of this turn,
        // and its head is kept in case it must go again. So is a body-less
        // GET's on a connection used before: the upstream may close it as
        // the request goes out (its keep-alive timeout, a race the peek in
        // `take_up` cannot close), and then it goes once more, alone, on
        // another (as nginx's `proxy_next_upstream error` does).
        let retry = !pipe && h.pipelinable && !c.solo && u.moved > 0;
        let held = if pipe || retry { h.len } else { 0 };
        c.start += h.len - held;
        if pipe {
            u.hold = true;
            self.batch.push(j);
        } else if self.ring.is_some() && !self.flushing && !u.hold && !h.has_body {
            // Sent with the turn's other sends (`flush_sends`). A body
            // goes at once: its room in `out` is freed by sending.
            u.hold = true;
            self.deferred_ups.push(j);
        }
        add(&self.n.forwarded, 1);
        c.req = Some(InFlight { up: j, keep_alive: h.keep_alive, resp_started: false, head: h, held, new: c.as_new });
        self.inflight += 1;
        self.inflight_new += usize::from(c.as_new);
        c.phase = if h.has_body { Phase::Body } else { Phase::Await };
        Next::Go(true)
    }

    /// Write this turn's batches: each one's first client's turn sends it all.
    pub(super) fn flush_batch(&mut self) {
        for j in std::mem::take(&mut self.batch) {
            let Some(u) = self.ups[j].as_mut() else { continue };
            u.hold = false;
            if let Some(i) = u.client {
                self.drive(i);
            }
        }
    }

    /// The turn's end: every request and response it held goes out in one
    /// system call (see `sends`), then each of their clients' turns finishes
    /// what that left (a partial send, an error, a close owed) with plain
    /// calls, as `flush_batch` does for a pipelined batch.
    pub(super) fn flush_sends(&mut self) {
        if self.ring.is_none() || (self.deferred_ups.is_empty() && self.client_sends.is_empty()) {
            return self.flush_batch();
        }
        let mut ups = std::mem::take(&mut self.batch);
        ups.append(&mut self.deferred_ups);
        let clients = std::mem::take(&mut self.client_sends);
        for &(i, serial) in &clients {
            if let Some(c) = self.clients.get_mut(i).and_then(Option::as_mut).filter(|c| c.serial == serial) {
                c.send_queued = false;
            }
        }
        // A TLS client's (HTTP/2's) frames become records now, taken out
        // of rustls to go in this call: one run of records a connection.
        for &(i, serial) in &clients {
            let Some(c) = self.clients.get_mut(i).and_then(Option::as_mut).filter(|c| c.serial == serial) else {
                continue;
            };
            if let Some(t) = c.tls.as_deref_mut() {
                let n = t.encrypt(c.out.pending());
                c.out.consumed(n);
                add(&self.n.bytes_out, n as u64);
                t.stage();
            }
        }
        // What each item is: an upstream's request, or a client's response.
        let mut whose = Vec::with_capacity(ups.len() + clients.len());
        let mut items = Vec::with_capacity(ups.len() + clients.len());
        for &j in &ups {
            if let Some(u) = self.ups.get(j).and_then(Option::as_ref).filter(|u| u.out_pos < u.out.len()) {
                items.push((u.sock.as_raw_fd(), &u.out[u.out_pos..]));
                whose.push(Err(j));
            }
        }
        for &(i, serial) in &clients {
            if let Some(c) = self.clients.get(i).and_then(Option::as_ref).filter(|c| c.serial == serial) {
                let bytes = match c.tls.as_deref() {
                    Some(t) => t.staged(),
                    None => c.out.pending(),
                };
                if !bytes.is_empty() {
                    items.push((c.sock.as_raw_fd(), bytes));
                    whose.push(Ok(i));
                }
            }
        }
        let ring = self.ring.as_mut().expect("checked above");
        if let Err(e) = ring.send_all(&items, &mut self.sent) {
            // What it did not send goes plainly, now and from now on.
            tracing::warn!("io_uring failed ({e}): the guard sends with plain calls from now on");
            self.ring = None;
        }
        drop(items);
        for (k, who) in whose.into_iter().enumerate() {
            let n = self.sent[k];
            if n == 0 {
                continue;
            }
            match who {
                Err(j) => {
                    let u = self.ups[j].as_mut().expect("an item");
                    u.out_pos += n;
                    u.moved += n as u64;
                    // A first write means the connect is done.
                    u.connect_deadline = None;
                    if u.out_pos == u.out.len() {
                        u.out.clear();
                        u.out_pos = 0;
                    }
                }
                Ok(i) => {
                    let c = self.clients[i].as_mut().expect("an item");
                    match c.tls.as_deref_mut() {
                        Some(t) => t.staged_sent(n),
                        None => {
                            c.out.consumed(n);
                            add(&self.n.bytes_out, n as u64);
                        }
                    }
                    c.sent += n as u64;
                    c.progress_at = self.now;
                }
            }
        }
        // Each client once (an HTTP/2 connection's streams hold several
        // of the upstreams), after every upstream's hold is off.
        let mut drive = std::mem::take(&mut self.to_drive);
        drive.clear();
        for j in ups {
            let Some(u) = self.ups[j].as_mut() else { continue };
            u.hold = false;
            drive.extend(u.client);
        }
        for (i, serial) in clients {
            if self.clients.get(i).and_then(Option::as_ref).is_some_and(|c| c.serial == serial) {
                drive.push(i);
            }
        }
        drive.sort_unstable();
        drive.dedup();
        self.flushing = true;
        for &i in &drive {
            self.drive(i);
        }
        self.flushing = false;
        self.to_drive = drive;
    }

    /// The requests pipelined behind `u`'s current one will not be answered
    /// there: each goes back to the front of the line, to be sent alone on
    /// another connection (it is a GET whose response has not begun, so
    /// sending it twice is allowed). Nothing after the current response
    /// is read on `u`.
    pub(super) fn resend(&mut self, u: &mut Up) {
        u.last |= !u.behind.is_empty();
        for (i, serial) in u.behind.drain(..) {
            let Some(mut c) = self.clients.get_mut(i).and_then(Option::take) else { continue };
            if c.serial == serial {
                self.send_again(&mut c, i);
            }
            self.clients[i] = Some(c);
        }
    }

    /// A pipelined request none of whose response came goes back to the
    /// front of the line, to be sent alone; it keeps its slot.
    pub(super) fn send_again(&mut self, c: &mut Client, i: usize) {
        let Some(q) = c.req.take() else { return };
        (c.phase, c.solo, c.as_new) = (Phase::Queued(Instant::now(), q.head), true, q.new);
        self.inflight -= 1;
        self.inflight_new -= usize::from(q.new);
        self.redo.push_back((i, c.serial));
        add(&self.n.upstream_resent, 1);
    }

    /// Drive the clients whose responses now come first on their
    /// upstream connections.
    pub(super) fn wake_next(&mut self) {
        while let Some((i, serial)) = self.wake.pop_front() {
            if self.clients.get(i).and_then(Option::as_ref).is_some_and(|c| c.serial == serial) {
                self.drive(i);
            }
        }
    }

    /// Count an upstream failure and say why: at most one line a second
    /// (an upstream that is down fails every request), with the count of
    /// those not logged.
    pub(super) fn upstream_failed(&mut self, why: std::fmt::Arguments) {
        add(&self.n.upstream_errors, 1);
        let (last, more) = &mut self.up_lines;
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            *more += 1;
            return;
        }
        let upstream = self.cfg.upstream;
        let more = std::mem::take(more);
        *last = Some(Instant::now());
        tracing::warn!(event = "upstream_error", %upstream, not_logged = more, "upstream {upstream}: {why} ({more} more failures since the last line)");
    }
}

/// Send what is queued for the upstream: whether bytes moved, and why the
/// connection failed, if it did.
pub(super) fn send_request(u: &mut Up) -> (bool, Option<String>) {
    if u.hold {
        // This turn's batch: written when the turn ends.
        return (false, None);
    }
    let mut progress = false;
    let mut failed = None;
    while u.out_pos < u.out.len() {
        match u.sock.write(&u.out[u.out_pos..]) {
            Ok(n) => {
                u.out_pos += n;
                u.moved += n as u64;
                // A first write means the connect is done.
                u.connect_deadline = None;
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                failed = Some(format!("sending the request: {e}"));
                break;
            }
        }
    }
    if u.out_pos == u.out.len() {
        u.out.clear();
        u.out_pos = 0;
    }
    (progress, failed)
}
