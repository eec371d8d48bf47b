//! HTTP/2 on a TLS connection whose ALPN chose `h2`: sluice-h2's
//! [`ServerConn`] (sans I/O) reads the plaintext the TLS layer puts in the
//! client's input buffer, and its output goes out through the client's
//! [`OutBuf`](crate::outbuf::OutBuf) as HTTP/1.1 responses do.
//!
//! Each stream is an exchange of its own: its request becomes the HTTP/1.1
//! bytes the guard already forwards ([`RequestBody`]), framed by the same
//! [`RequestFramer`] with the same frang limits and counted against the
//! same client, sent on an upstream connection of the thread's pool (one
//! per stream at a time, as one per HTTP/1.1 client connection); the
//! response is read into the stream's [`ResponseRelay`] and pumped into
//! HEADERS and DATA under flow control. An upstream event drives the
//! client connection, whose turn moves every exchange.
//!
//! A stream the client resets (or the connection resets for breaking a
//! stream rule) cancels its exchange: the upstream connection is closed,
//! so a request half sent is never finished and a response is not read
//! for no one (Rapid Reset costs the upstream a connection close, not a
//! response, and `ServerConn` ends the connection past its reset rate).
//! A flood the connection catches is a breach of its own limit
//! (`Limit::from_h2`): counted, the address blocked if asked.
//!
//! # Memory
//!
//! An HTTP/2 connection holds, besides what any TLS client connection
//! does (input buffer, `--buffer-size` of output, rustls' records):
//! `ServerConn`'s own bound ([`sluice_h2::DEFAULT_MEMORY_BOUND`], 278,009
//! bytes at `--max-head` 16 KiB), and per exchange, at most
//! [`MAX_STREAMS`]: the relay's response head (up to 16 KiB while it
//! arrives) and body ([`PIECE`]), and the request on its way to the
//! upstream (its head, and body bytes only up to the windows the client
//! was given: 128 KiB across the connection), and a GET kept to be sent
//! again ([`MAX_RETRY`]). [`MEMORY_BOUND`] adds them.

use super::client::Client;
use super::response::MAX_IDLE;
use super::upstream::{send_request, MAX_RESPONSE_HEAD};
use super::{add, Next, Phase, Worker};
use crate::frame::{HeadStep, RequestFramer};
use crate::limits::{Limit, Limits as Frang};
use crate::table::Standing;
use crate::timeouts::ProgressWatch;
use sluice_h2::relay::{pump, RequestBody, ResponseRelay};
use sluice_h2::{ErrorCode, Event, Limits, RequestHead, SendError, ServerConn};
use std::io::{self, Read};
use std::time::Instant;

/// Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS;
/// more are refused with REFUSED_STREAM). Each holds an upstream connection
/// and up to [`PER_STREAM`] bytes: 32 keeps a connection within a few
/// dozen HTTP/1.1 connections' memory, and a browser loads a page through
/// 32 streams as fast as through 100 (it queues the rest, as it does
/// HTTP/1.1's six connections' worth).
pub(super) const MAX_STREAMS: u32 = 32;

/// Response body bytes one stream's relay holds, and the most read from
/// its upstream at once.
pub(super) const PIECE: usize = 16 << 10;

/// The longest GET kept to be sent again (see [`Exchange::retry`]): a
/// longer one is sent on a pooled connection only after a peek.
pub(super) const MAX_RETRY: usize = 1 << 10;

/// What one exchange may hold: the relay's head and body, the request
/// head on its way, and a GET kept to be sent again.
pub(super) const PER_STREAM: usize = MAX_RESPONSE_HEAD + PIECE + MAX_RESPONSE_HEAD + MAX_RETRY;

/// The most an HTTP/2 connection holds beyond a TLS client connection's
/// own buffers, at the defaults (`--max-head` 16 KiB): the connection's
/// state, every stream's exchange, and the request bodies the windows let
/// in (the connection window).
pub const MEMORY_BOUND: usize = sluice_h2::DEFAULT_MEMORY_BOUND + MAX_STREAMS as usize * PER_STREAM + (128 << 10);

/// A connection speaking HTTP/2.
pub(super) struct H2 {
    conn: ServerConn,
    exchanges: Vec<Exchange>,
    /// Frames each stream's HTTP/1.1 head against frang's limits.
    framer: RequestFramer,
}

impl H2 {
    /// Streams open or still being answered.
    pub(super) fn busy(&self) -> bool {
        !self.exchanges.is_empty() || self.conn.open_streams() > 0
    }
}

/// One stream's request at an upstream connection, and its response.
struct Exchange {
    stream: u32,
    up: usize,
    body: RequestBody,
    relay: ResponseRelay,
    /// Body bytes queued for the upstream, not yet given back to the
    /// client's window (given back once written: a slow upstream stops
    /// the client's body).
    unreleased: usize,
    body_len: u64,
    /// It holds one of the new clients' slots (`Worker::inflight_new`).
    new: bool,
    /// A GET (no body, at most [`MAX_RETRY`] bytes) on a connection used
    /// before and not peeked at (`take_up`): its bytes, kept until the
    /// response's first byte, to be sent once more on a new connection
    /// if this one closes or fails before answering (the upstream closed
    /// it as it went out), as an HTTP/1.1 GET is.
    retry: Option<Vec<u8>>,
}

/// How an exchange's turn ended.
enum Turn {
    Going,
    /// Answered: the upstream connection may be reused.
    Done {
        reuse: bool,
    },
    /// The upstream failed, or the stream cannot be answered: the
    /// exchange is dropped (its stream answered 502 or reset).
    Failed,
}

impl Worker<'_> {
    /// The handshake chose `h2`: the connection speaks HTTP/2 from here,
    /// its SETTINGS first.
    pub(super) fn start_h2(&mut self, c: &mut Client) {
        let limits = Limits { max_head: self.cfg.max_head, max_concurrent_streams: MAX_STREAMS, ..Limits::default() };
        let now = Instant::now();
        c.h2 = Some(Box::new(H2 {
            conn: ServerConn::new(limits, now),
            exchanges: Vec::new(),
            framer: RequestFramer::new(self.cfg.max_head),
        }));
        c.phase = Phase::H2;
        add(&self.n.h2_connections, 1);
        // No request yet: it waits as a kept-alive HTTP/1.1 connection does.
        c.head_deadline = None;
        c.waiting_since = Some(now);
        c.idle_deadline = self.cfg.timeouts.keepalive.map(|d| now + d);
    }

    /// One turn of an HTTP/2 connection: its input read into frames and
    /// events, every exchange moved, its output queued for the client.
    pub(super) fn h2_turn(&mut self, c: &mut Client, i: usize) -> Next {
        let Some(mut h) = c.h2.take() else { return Next::Go(false) };
        // The turn's clock (`Worker::now`): one vDSO call a loop turn, not
        // one each time a connection is driven.
        let now = self.now;
        let mut moved = false;
        let malformed = h.conn.stats().stream_errors;
        if c.end > c.start && c.phase == Phase::H2 {
            match h.conn.recv(&c.inbuf[c.start..c.end], now) {
                Ok(n) => {
                    c.start += n;
                    moved |= n > 0;
                }
                // GOAWAY is queued; a breach also comes as an event.
                Err(_) => c.start = c.end,
            }
            if c.start == c.end {
                (c.start, c.end) = (0, 0);
            }
        }
        while let Some(ev) = h.conn.poll_event() {
            moved = true;
            match ev {
                Event::Request { stream, head, end_stream } => self.h2_request(c, i, &mut h, stream, &head, end_stream),
                Event::Data { stream, bytes, end_stream } => self.h2_data(c, &mut h, stream, &bytes, end_stream),
                Event::Reset { stream } => {
                    if let Some(k) = h.exchanges.iter().position(|e| e.stream == stream) {
                        add(&self.n.h2_resets, 1);
                        let ex = h.exchanges.swap_remove(k);
                        self.h2_drop(ex);
                    }
                }
                Event::Breach(kind) => self.note(c.ip, c.ja4.as_deref(), Limit::from_h2(kind)),
                Event::Writable { .. } | Event::GoAway { .. } => {}
            }
        }
        // A request HTTP/2 forbids (a smuggling attempt on the way to an
        // HTTP/1.1 upstream, or a body longer than its content-length):
        // reset by the connection, a breach here as HTTP/1.1's framing is.
        if h.conn.stats().stream_errors > malformed {
            self.note_why(c.ip, c.ja4.as_deref(), Limit::HttpParse, "h2-malformed-request");
        }
        let mut k = 0;
        while k < h.exchanges.len() {
            let (turn, m) = self.h2_exchange(c, &mut h.conn, &mut h.exchanges[k]);
            moved |= m;
            match turn {
                Turn::Going => k += 1,
                Turn::Done { reuse } => {
                    let ex = h.exchanges.swap_remove(k);
                    self.h2_answered(c, ex, reuse);
                }
                Turn::Failed => {
                    let ex = h.exchanges.swap_remove(k);
                    self.h2_drop(ex);
                }
            }
        }
        if h.conn.is_closed() {
            // Nothing more is answered: the upstream requests are cancelled.
            for ex in std::mem::take(&mut h.exchanges) {
                self.h2_drop(ex);
            }
        }
        moved |= self.h2_output(c, &mut h);
        h2_clocks(c, &h, self.cfg, now);
        let closed = h.conn.is_closed() && h.conn.pending_output().is_empty();
        c.h2 = Some(h);
        if closed && c.phase == Phase::H2 {
            c.phase = Phase::Closing;
            return Next::Again;
        }
        Next::Go(moved)
    }

    /// The connection's output into the client's buffer, as much as it has room for.
    fn h2_output(&mut self, c: &mut Client, h: &mut H2) -> bool {
        let out = h.conn.pending_output();
        if out.is_empty() {
            return false;
        }
        let room = c.out.room(&mut self.pool);
        let n = out.len().min(room.len());
        room[..n].copy_from_slice(&out[..n]);
        c.out.filled(n);
        c.out.frame(n);
        h.conn.consume_output(n);
        n > 0
    }

    /// A stream's request: checked as an HTTP/1.1 request is, then sent to
    /// an upstream connection; or answered by the guard.
    fn h2_request(&mut self, c: &mut Client, i: usize, h: &mut H2, stream: u32, head: &RequestHead, end_stream: bool) {
        add(&self.n.requests, 1);
        add(&self.n.h2_streams, 1);
        let mut bytes = Vec::new();
        let body = RequestBody::start(head, end_stream, &mut bytes);
        // Frang's per-request limits, met as an HTTP/1.1 request meets them.
        h.framer.reset();
        let no_limits = Frang::default();
        let limits = self.shared.table.limits();
        let framed = h.framer.head(&bytes, if self.cfg.dry_run { &no_limits } else { limits });
        if self.cfg.dry_run {
            let broke = h.framer.over_limits(&bytes, limits);
            let rate = self.request(c).err();
            for limit in [broke, rate].into_iter().flatten() {
                self.note(c.ip, c.ja4.as_deref(), limit);
            }
        } else {
            let refused = match framed {
                Ok(HeadStep::Complete(_)) => self.request(c).err().map(|l| (l, l.status(), l.name())),
                // `to_h1` writes whole heads: a partial one is a bug, refused all the same.
                Ok(HeadStep::Partial) => Some((Limit::HttpParse, 400, "incomplete-head")),
                Err(r) => Some((r.limit, r.status, r.reason)),
            };
            if let Some((limit, status, reason)) = refused {
                self.note_why(c.ip, c.ja4.as_deref(), limit, reason);
                return answer(&mut h.conn, stream, status);
            }
        }
        // `--upstream-max-inflight`: as a new HTTP/1.1 request would wait
        // in the queue, the stream is answered 503 (a browser sends it again).
        let mut new = false;
        if self.max_inflight > 0 {
            new = self.inflight_new < self.max_inflight_new;
            let known = new || self.shared.table.standing(c.ip, self.now_ms()) != Standing::New;
            if self.inflight >= self.max_inflight || !known {
                add(&self.n.h2_refused_busy, 1);
                return answer(&mut h.conn, stream, 503);
            }
        }
        // A pooled connection is peeked at first, unless the request is a
        // short GET (one used within a second is taken as it is: the GET
        // goes again on a new one if it closes unanswered, see `retry`).
        let resendable = end_stream && head.method == b"GET" && bytes.len() <= MAX_RETRY;
        let j = match self.take_up(resendable, true) {
            Ok(j) => j,
            Err(e) => {
                self.upstream_failed(format_args!("connecting: {e}"));
                return answer(&mut h.conn, stream, 502);
            }
        };
        let u = self.ups[j].as_mut().expect("taken");
        u.client = Some(i);
        u.watch = ProgressWatch::new(u.moved, self.now);
        u.out.extend_from_slice(&bytes);
        if end_stream && self.ring.is_some() && !self.flushing && !u.hold {
            // A body-less request goes with the turn's other sends
            // (`flush_sends`), as an HTTP/1.1 one does; a body goes at once.
            u.hold = true;
            self.deferred_ups.push(j);
        }
        add(&self.n.forwarded, 1);
        self.inflight += 1;
        self.inflight_new += usize::from(new);
        let relay = ResponseRelay::for_request(head, MAX_RESPONSE_HEAD, PIECE);
        // A new connection is not sent again: its failure is the upstream's.
        let retry = (resendable && u.moved > 0).then_some(bytes);
        h.exchanges.push(Exchange { stream, up: j, body, relay, unreleased: 0, body_len: 0, new, retry });
    }

    /// Request body bytes: on to the stream's upstream, within
    /// `--http-body-len`.
    fn h2_data(&mut self, c: &mut Client, h: &mut H2, stream: u32, bytes: &[u8], end_stream: bool) {
        let Some(k) = h.exchanges.iter().position(|e| e.stream == stream) else {
            // Answered or refused already: the bytes go nowhere; the
            // window comes back so the connection's does not shrink.
            return h.conn.release(stream, bytes.len());
        };
        let ex = &mut h.exchanges[k];
        ex.body_len += bytes.len() as u64;
        let max = self.shared.table.limits().http_body_len;
        if max.is_some_and(|m| ex.body_len > m && ex.body_len - bytes.len() as u64 <= m) {
            self.note(c.ip, c.ja4.as_deref(), Limit::HttpBodyLen);
            if !self.cfg.dry_run {
                let ex = h.exchanges.swap_remove(k);
                let answered = !ex.relay.head_delivered();
                self.h2_drop(ex);
                if answered {
                    answer(&mut h.conn, stream, Limit::HttpBodyLen.status());
                }
                // The rest of the body is read and dropped (its window given
                // back) rather than refused with RST_STREAM(NO_ERROR), as RFC
                // 9113 8.1 allows: curl 7.88 (Debian 12's) takes that reset
                // after a whole answer as an error and loses the 413.
                return h.conn.release(stream, bytes.len());
            }
        }
        let u = self.ups[ex.up].as_mut().expect("in use");
        ex.body.data(bytes, end_stream, &mut u.out);
        ex.unreleased += bytes.len();
    }

    /// Move one exchange: its request out, its response in and on to the
    /// stream. Whether bytes moved.
    fn h2_exchange(&mut self, c: &mut Client, conn: &mut ServerConn, ex: &mut Exchange) -> (Turn, bool) {
        let u = self.ups[ex.up].as_mut().expect("in use");
        let (mut moved, failed) = send_request(u);
        if let Some(why) = failed {
            return (self.h2_failed(conn, ex, &why), moved);
        }
        if ex.unreleased > 0 && u.out.is_empty() {
            conn.release(ex.stream, ex.unreleased);
            ex.unreleased = 0;
        }
        // One read buffer per thread, zeroed once: a stream with nothing to
        // read costs no memset (a turn visits every stream of the connection).
        let mut buf = std::mem::take(&mut self.h2_buf);
        buf.resize(PIECE, 0);
        let u = self.ups[ex.up].as_mut().expect("in use");
        let mut eof = false;
        let mut broke = None;
        while !ex.relay.ended() && (u.readable || u.read_closed) {
            let want = ex.relay.room().min(PIECE);
            if want == 0 {
                break;
            }
            match (&u.sock).read(&mut buf[..want]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    (u.moved, moved) = (u.moved + n as u64, true);
                    // The response began: it is not sent again.
                    ex.retry = None;
                    // A short read drained the socket: a new edge says when there is more.
                    u.readable = n == want || u.read_closed;
                    match ex.relay.feed(&buf[..n]) {
                        // Bytes past the response no request asked for: not
                        // sent, and the connection is not reused.
                        Ok(took) if took < n => u.last = true,
                        Ok(_) => {}
                        Err(e) => {
                            broke = Some(format!("a bad response: {e}"));
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => u.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    broke = Some(format!("reading the response: {e}"));
                    break;
                }
            }
        }
        self.h2_buf = buf;
        if let Some(why) = broke {
            return (self.h2_failed(conn, ex, &why), moved);
        }
        if eof && ex.retry.is_some() {
            return (self.h2_failed(conn, ex, "the upstream closed before answering"), moved);
        }
        if eof {
            u.last = true;
            if let Err(e) = ex.relay.eof() {
                return (self.h2_lost(conn, ex, &format!("{e}")), moved);
            }
        }
        let status = ex.relay.pending_status();
        match pump(conn, ex.stream, &mut ex.relay) {
            Ok(p) => {
                moved |= p.head_sent || p.body > 0;
                if let (true, Some(status)) = (p.head_sent, status) {
                    self.h2_status(c, conn, status);
                }
                if !p.finished {
                    return (Turn::Going, moved);
                }
                let u = self.ups[ex.up].as_ref().expect("in use");
                let reuse =
                    ex.relay.upstream_closes() == Some(false) && !u.last && u.out.is_empty() && ex.body.finished();
                (Turn::Done { reuse }, moved)
            }
            // Reset meanwhile (its event comes next), or a head too large
            // to send: the stream cannot be answered.
            Err(SendError::NoStream) => (Turn::Failed, moved),
            Err(_) => {
                self.upstream_failed(format_args!("a response head too large for HTTP/2"));
                conn.reset(ex.stream, ErrorCode::InternalError);
                (Turn::Failed, moved)
            }
        }
    }

    /// The upstream failed: a GET none of whose response came is sent once
    /// more on a new connection (`Exchange::retry`); else [`Worker::h2_lost`].
    fn h2_failed(&mut self, conn: &mut ServerConn, ex: &mut Exchange, why: &str) -> Turn {
        let Some(bytes) = ex.retry.take() else { return self.h2_lost(conn, ex, why) };
        let client = self.ups[ex.up].as_ref().and_then(|u| u.client);
        match self.take_up(false, false) {
            Ok(j) => {
                self.close_up(ex.up);
                let u = self.ups[j].as_mut().expect("taken");
                u.client = client;
                u.watch = ProgressWatch::new(u.moved, self.now);
                u.out = bytes;
                ex.up = j;
                add(&self.n.upstream_resent, 1);
                // Sent when its connect is done (its first write edge drives the client).
                Turn::Going
            }
            Err(_) => self.h2_lost(conn, ex, why),
        }
    }

    /// The upstream failed before the stream was answered: 502 if nothing
    /// of the response went out, else the stream is reset.
    fn h2_lost(&mut self, conn: &mut ServerConn, ex: &Exchange, why: &str) -> Turn {
        self.upstream_failed(format_args!("{why}"));
        if ex.relay.head_delivered() {
            conn.reset(ex.stream, ErrorCode::InternalError);
        } else {
            answer(conn, ex.stream, 502);
        }
        Turn::Failed
    }

    /// A response went out: its status counts toward the client's
    /// response-code limit (`--http-resp-code-block`).
    fn h2_status(&mut self, c: &mut Client, conn: &mut ServerConn, status: u16) {
        if let Err(limit) = self.shared.table.on_response(c.ip, status, self.now_ms()) {
            self.note(c.ip, c.ja4.as_deref(), limit);
            if !self.cfg.dry_run {
                // As an HTTP/1.1 client's connection is closed: no new streams.
                conn.goaway(ErrorCode::EnhanceYourCalm);
            }
        }
    }

    /// An exchange answered: its slot is free, its upstream pooled or closed.
    fn h2_answered(&mut self, c: &mut Client, ex: Exchange, reuse: bool) {
        if !c.served || c.forwarded {
            self.shared.table.on_served(c.ip);
        }
        c.served = true;
        self.inflight -= 1;
        self.inflight_new -= usize::from(ex.new);
        let u = self.ups[ex.up].as_mut().expect("in use");
        u.client = None;
        if reuse && self.idle.len() < MAX_IDLE {
            u.idle_since = self.now;
            self.idle.push(ex.up);
        } else {
            self.close_up(ex.up);
        }
    }

    /// An exchange ends before its response did (reset, refused, failed,
    /// timed out, or its connection closing): its upstream connection is
    /// closed, which cancels the request there.
    fn h2_drop(&mut self, ex: Exchange) {
        self.inflight -= 1;
        self.inflight_new -= usize::from(ex.new);
        self.close_up(ex.up);
    }

    /// The client connection goes: every exchange with it.
    pub(super) fn h2_leave(&mut self, c: &mut Client) {
        if let Some(h) = c.h2.as_deref_mut() {
            for ex in std::mem::take(&mut h.exchanges) {
                self.h2_drop(ex);
            }
        }
    }

    /// At a sweep: the connection's timers (`ServerConn::tick`: the
    /// SETTINGS ack, zero-window stalls) and each exchange's upstream
    /// deadlines (504, or a reset once the response began). Whether the
    /// connection must be driven (something changed).
    pub(super) fn h2_sweep(&mut self, c: &mut Client, now: Instant) -> bool {
        let Some(mut h) = c.h2.take() else { return false };
        // A breach waits in the connection's events: its turn handles it.
        let mut changed = h.conn.tick(now).is_err();
        let t = &self.cfg.timeouts;
        let mut k = 0;
        while k < h.exchanges.len() {
            let ex = &h.exchanges[k];
            let u = self.ups[ex.up].as_mut().expect("in use");
            let owing = u.out_pos < u.out.len() || (!ex.relay.ended() && ex.relay.room() > 0);
            let late = u.connect_deadline.is_some_and(|d| now >= d)
                || u.watch.check(owing, u.moved, now, t.upstream_response, None).is_some();
            if !late {
                k += 1;
                continue;
            }
            add(&self.n.upstream_timeouts, 1);
            let ex = h.exchanges.swap_remove(k);
            if ex.relay.head_delivered() {
                h.conn.reset(ex.stream, ErrorCode::Cancel);
            } else {
                answer(&mut h.conn, ex.stream, 504);
            }
            self.h2_drop(ex);
            changed = true;
        }
        c.h2 = Some(h);
        changed
    }

    /// Nothing asked, nothing owed, and the keep-alive wait is over: the
    /// connection is closed as an idle HTTP/1.1 one is.
    pub(super) fn h2_idle(&self, c: &Client, now: Instant) -> bool {
        let Some(h) = c.h2.as_deref() else { return false };
        let quiet = h.exchanges.is_empty() && h.conn.open_streams() == 0 && !h.conn.reading_partial();
        let nothing_owed = !c.out.has_pending() && !c.tls.as_ref().is_some_and(|t| t.wants_write());
        quiet && nothing_owed && c.idle_deadline.is_some_and(|d| now >= d)
    }
}

/// The guard's own answer on a stream: a status and no body (or a reset
/// when it cannot be said: no status fits, or the output is full).
fn answer(conn: &mut ServerConn, stream: u32, status: u16) {
    let said = status != 0 && conn.send_headers(stream, status, &[(b"server", b"sluice-guard")], true).is_ok();
    if !said {
        conn.reset(stream, ErrorCode::RefusedStream);
    }
}

/// The connection's clocks after its turn: the keep-alive wait while no
/// stream is open (and `--max-connections` may shed it), the header
/// timeout while a frame or header block is half read.
fn h2_clocks(c: &mut Client, h: &H2, cfg: &crate::Config, now: Instant) {
    let busy = !h.exchanges.is_empty() || h.conn.open_streams() > 0;
    if busy {
        (c.waiting_since, c.idle_deadline) = (None, None);
    } else if c.waiting_since.is_none() {
        c.waiting_since = Some(now);
        c.idle_deadline = cfg.timeouts.keepalive.map(|d| now + d);
    }
    if !h.conn.reading_partial() {
        c.head_deadline = None;
    } else if c.head_deadline.is_none() {
        c.head_deadline = cfg.timeouts.client_header.map(|d| now + d);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_memory_bound_is_the_documented_one() {
        // docs/http-guard.md ("HTTP/2") gives this number.
        assert_eq!(super::MEMORY_BOUND, 2_014_713);
    }
}
