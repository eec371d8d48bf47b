//! The client side: a client connection's state, its requests read,
//! framed and checked (frang's limits, its client counted) and sent on,
//! its body forwarded, and what is owed it (the response, or the guard's
//! own reply) written; then a kept-alive wait for the next request, or
//! the close.

use super::tunnel::Tunnel;
use super::upstream::InFlight;
use super::{add, After, Next, Phase, Worker};
use crate::frame::{HeadInfo, HeadStep, HttpRefusal, RequestFramer};
use crate::limits::{Limit, Limits};
use crate::outbuf::{OutBuf, Pool};
use crate::table::Standing;
use crate::timeouts::ProgressWatch;
use crate::tls::{Input, TlsConn};
use mio::net::TcpStream;
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown};
use std::time::{Duration, Instant};

/// A client connection.
pub(super) struct Client {
    pub(super) sock: TcpStream,
    /// The client: the peer, the one a PROXY header named, or (`forwarded`)
    /// the one the current request names.
    pub(super) ip: IpAddr,
    /// The connection's peer as far as the guard knows it (after any PROXY header).
    pub(super) peer: IpAddr,
    /// The peer is a trusted proxy and `--client-ip-header` is set: each
    /// request names its client; the connection itself is not counted
    /// against any address.
    pub(super) forwarded: bool,
    /// Counted in the table's open connections (on_close owed).
    pub(super) tracked: bool,
    pub(super) inbuf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) framer: RequestFramer,
    pub(super) phase: Phase,
    pub(super) req: Option<InFlight>,
    /// The response (and the guard's own replies) on its way to the client.
    pub(super) out: OutBuf,
    /// Bytes written to the client, and request body bytes forwarded: the
    /// watches below compare them over time.
    pub(super) sent: u64,
    pub(super) received: u64,
    pub(super) send_watch: ProgressWatch,
    pub(super) body_watch: ProgressWatch,
    /// A slow-client breach was noted in a dry run: not noted again.
    pub(super) slow_noted: bool,
    /// A kept-alive connection waiting for its next request's first byte
    /// is closed then (`--keepalive-timeout`).
    pub(super) idle_deadline: Option<Instant>,
    /// The last byte moved for this client either way: shedding at
    /// `--max-connections` takes the stalled ones oldest progress first.
    pub(super) progress_at: Instant,
    /// Since when it waits for a request head (accepted, or its last
    /// response sent on a kept-alive connection); None while a request is
    /// on. The header timeout runs from here, and `--max-connections`
    /// sheds the longest waiting first.
    pub(super) waiting_since: Option<Instant>,
    pub(super) head_deadline: Option<Instant>,
    pub(super) peer_eof: bool,
    /// An event said the peer closed its side: read on past a short read
    /// (the FIN came with the data, and no new edge will say so).
    pub(super) read_closed: bool,
    /// An event said it may have input (edge-triggered: read until drained).
    pub(super) readable: bool,
    /// When it was accepted: the calm lane takes only connections this old (`lane`).
    pub(super) accepted: Instant,
    /// `--calm-lane`: its accepting thread handed it to its lane; it holds
    /// a place of that thread's share of `--max-connections`.
    pub(super) lent: bool,
    /// A dry run counted this request's body length already (its head's
    /// Content-Length): the body crossing the limit is not counted again.
    pub(super) body_len_noted: bool,
    /// `--tls-cert`: the connection's TLS (plaintext flows through `inbuf` and `out`).
    pub(super) tls: Option<Box<TlsConn>>,
    /// The handshake must be done by then (`--tls-handshake-timeout`).
    pub(super) handshake_deadline: Option<Instant>,
    /// The JA4 of its ClientHello, once read.
    pub(super) ja4: Option<Box<str>>,
    /// Its ClientHello waits in the worker's queue: not read further until its turn.
    pub(super) hello_queued: bool,
    /// Tells this connection from a later one in the same slot.
    pub(super) serial: u64,
    /// A response was relayed on it: a client that has been served, shed
    /// after those that never were.
    pub(super) served: bool,
    /// Its request was pipelined and sent again: this time alone.
    pub(super) solo: bool,
    /// Its next upstream exchange holds one of the new clients' slots
    /// (`--upstream-max-inflight`): it was not known when it was let in.
    pub(super) as_new: bool,
    /// `Phase::Tunnel`: its upstream connection, which serves it alone.
    pub(super) tunnel: Option<Tunnel>,
    /// Accepted on a `--redirect-https` listener: every request is
    /// answered with a 308 to its https URL, none goes upstream.
    pub(super) redirect: bool,
    /// ALPN chose `h2`: the connection's HTTP/2 state and its streams' exchanges.
    pub(super) h2: Option<Box<super::h2::H2>>,
    /// Its response waits in `Worker::client_sends` for the turn's end.
    pub(super) send_queued: bool,
    /// Its leaky request count (`crate::pace`); None: never waits in
    /// `Worker::later` (a connection that speaks for many clients, behind
    /// a trusted proxy or a PROXY header).
    pub(super) pace: Option<crate::pace::Pace>,
    /// Its events wait in `Worker::later`.
    pub(super) later: bool,
}

/// After an error reply the write side is shut and input discarded this long
/// at most: closing with unread input would send a RST that can destroy the reply.
const DRAIN_FOR: Duration = Duration::from_secs(1);

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

pub(super) fn error_response(out: &mut OutBuf, pool: &mut Pool, status: u16) {
    let reply = format!(
        "HTTP/1.1 {status} {}\r\nServer: sluice-guard\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        reason(status)
    );
    out.push(reply.as_bytes(), pool);
}

/// Input after the write side is shut: discard it until EOF or the deadline.
pub(super) fn drain(c: &mut Client, deadline: Instant) -> After {
    if Instant::now() < deadline && sluice_tcp::discard_input(&mut c.sock) {
        After::Keep
    } else {
        After::Close
    }
}

impl Worker<'_> {
    /// The connection now waits for a request head. A new one (`fresh`):
    /// the header timeout starts at accept (as nginx's
    /// `client_header_timeout`, so a connection that never sends a byte is
    /// closed too). A kept-alive one: the keep-alive timeout runs until its
    /// next request's first byte, the header timeout from there.
    pub(super) fn start_waiting(&mut self, c: &mut Client, fresh: bool) {
        // Until the next request names its client, a breach is the proxy's.
        if c.forwarded {
            c.ip = c.peer;
        }
        let now = self.now;
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

    /// Read the client, unless it is done sending, its buffer is full, or
    /// its hello waits its turn.
    #[inline]
    pub(super) fn read_client(&mut self, c: &mut Client, i: usize) -> Next {
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
                c.progress_at = self.now;
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
    pub(super) fn frame_head(&mut self, c: &mut Client, i: usize) -> Next {
        // On a redirect listener, the next request waits until the last
        // answer is out: a client pipelining requests it never reads
        // would make the guard queue answers without end.
        if c.phase != Phase::Head || c.end == c.start || (c.redirect && c.out.has_pending()) {
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
            return self.refused(c, HttpRefusal { limit, status: limit.status(), reason: limit.name() });
        }
        if c.redirect {
            return self.redirect(c, h);
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

    /// `--redirect-https`: a 308 to the request's https URL, limits and
    /// rates counted as for any request; a request naming no host to send
    /// it to is a breach of `http_host_required` (400).
    fn redirect(&mut self, c: &mut Client, h: HeadInfo) -> Next {
        let Some(location) = c.framer.https_location(&c.inbuf[c.start..c.end], self.https_port) else {
            let limit = Limit::HttpHostRequired;
            return self.refused(c, HttpRefusal { limit, status: limit.status(), reason: "no host to redirect to" });
        };
        // A body would have to be read through to find the next request:
        // the connection closes after the answer instead.
        let close = !h.keep_alive || h.has_body;
        let reply = format!(
            "HTTP/1.1 308 Permanent Redirect\r\nServer: sluice-guard\r\nLocation: {location}\r\n\
             Content-Length: 0\r\n{}\r\n",
            if close { "Connection: close\r\n" } else { "" }
        );
        c.out.push(reply.as_bytes(), &mut self.pool);
        add(&self.n.redirects, 1);
        c.start += h.len;
        c.framer.reset();
        if close {
            c.phase = Phase::Closing;
        } else {
            self.start_waiting(c, false);
        }
        Next::Again
    }

    /// Count a request against its client (named by a trusted proxy, or
    /// the connection's own), and on the connection's pace.
    pub(super) fn request(&self, c: &mut Client) -> Result<(), Limit> {
        if let Some(p) = &mut c.pace {
            p.hit(&self.pace_rule, self.now_ms());
        }
        if c.forwarded {
            self.shared.table.on_forwarded_request(c.ip, self.now_ms())
        } else {
            self.shared.table.on_request(c.ip, self.now_ms())
        }
    }

    /// The body goes on only while the upstream's buffer has room
    /// (`--buffer-size`): a slow upstream stops the client's reads.
    #[inline]
    pub(super) fn forward_body(&mut self, c: &mut Client) -> Next {
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
    pub(super) fn write_client(&mut self, c: &mut Client, i: usize, progress: bool) -> Next {
        // A plain connection's whole response waits for the turn's end, to
        // go with the turn's other sends (`flush_sends`). One still coming
        // goes at once: its buffer's room is what the upstream is read
        // into, and a pipelined response behind it needs that room now.
        // An HTTP/2 connection's frames wait too, whatever its streams
        // owe: the turn's frames go as one run of records in one send.
        if self.ring.is_some()
            && !self.flushing
            && c.req.is_none()
            && c.out.has_pending()
            && (c.tls.is_none() || c.h2.is_some())
            && c.tunnel.is_none()
        {
            if !c.send_queued {
                c.send_queued = true;
                self.client_sends.push((i, c.serial));
            }
            return Next::Go(false);
        }
        let wrote = match &mut c.tls {
            None => c.out.write_to(&mut c.sock).map(|n| (n, n)),
            Some(t) => c.out.write_to(&mut t.writer(&mut c.sock)).and_then(|n| Ok((n, n + t.flush(&mut c.sock)?))),
        };
        let Ok((plain, moved)) = wrote else { return Next::End(After::Close) };
        add(&self.n.bytes_out, plain as u64);
        if moved > 0 {
            c.sent += moved as u64;
            c.progress_at = self.now;
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
            let streams = c.h2.as_ref().is_some_and(|h| h.busy());
            if c.peer_eof && c.req.is_none() && !queued && c.tunnel.is_none() && !streams && !progress && moved == 0 {
                // Gone, and everything it asked is answered (a partial
                // head at EOF gets nothing; a whole one is framed on the
                // next turn, so only once nothing moved).
                return Next::End(After::Close);
            }
        }
        Next::Go(moved > 0)
    }
}
