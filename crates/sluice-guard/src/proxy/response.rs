//! The response's way back: read from the upstream straight into its
//! client's buffer, framed there by `sluice_h1::response::ResponseReader`
//! and relayed as it arrives; a response that ended pools or closes its
//! connection and readies the client for its next request, one that
//! failed is a 502 (or sent again, pipelined and unanswered).

use super::client::{error_response, Client};
use super::upstream::{send_request, Up};
use super::{After, Next, Phase, Worker};
use crate::frame::HttpRefusal;
use crate::timeouts::ProgressWatch;
use sluice_h1::response::Step;
use std::io::{self, Read};
use std::time::Instant;

/// Idle upstream connections kept per thread.
pub(super) const MAX_IDLE: usize = 1024;

impl Worker<'_> {
    /// The upstream: send the request, relay the response.
    #[inline]
    pub(super) fn exchange(&mut self, c: &mut Client, i: usize) -> Next {
        let Some(q) = &c.req else { return Next::Go(false) };
        let j = q.up;
        let mut u = self.ups[j].take().expect("in use");
        // Pipelined behind another's response: the one ahead moves it.
        if u.client != Some(i) {
            self.ups[j] = Some(u);
            return Next::Go(false);
        }
        let r = self.relay(c, &mut u);
        self.ups[j] = Some(u);
        for j in std::mem::take(&mut self.doomed) {
            self.close_up(j);
        }
        match r {
            Ok(moved) => Next::Go(moved),
            Err(After::Keep) => Next::Again,
            Err(after) => Next::End(after),
        }
    }

    /// Move the request to the upstream and its response to the client.
    /// `Ok(progress)`, or how the client must end.
    fn relay(&mut self, c: &mut Client, u: &mut Up) -> Result<bool, After> {
        // Why the upstream connection failed, if it did.
        let (mut progress, mut failed) = send_request(u);
        let mut eof = false;
        if failed.is_none() {
            match self.read_response(c, u) {
                Ok(Some(n)) => progress |= n > 0,
                Ok(None) => eof = true,
                Err(why) => failed = Some(why),
            }
        }
        if failed.is_none() {
            match self.frame_response(c, u) {
                Ok(Some((status, close))) => return self.answered(c, u, status, close, eof),
                Ok(None) => {}
                Err(why) => failed = Some(why),
            }
        }
        if failed.is_none() && eof {
            if let Some(response) = u.reader.eof() {
                // Its body ended with the upstream's close, which is all
                // that says so to the client too: it is closed after it.
                if let Some(q) = c.req.as_mut() {
                    q.keep_alive = false;
                }
                return self.answered(c, u, response.status, true, true);
            }
        }
        if failed.is_some() || eof {
            let i = u.client.expect("relaying its response");
            return self.upstream_lost(c, i, failed);
        }
        Ok(progress)
    }

    /// Read the upstream straight into the client's buffer, only into its
    /// room: a client slower than the upstream stops the reads here, and
    /// the guard holds at most `--buffer-size` for it. `Ok(Some(bytes))`,
    /// `Ok(None)` at EOF, or why it failed.
    fn read_response(&mut self, c: &mut Client, u: &mut Up) -> Result<Option<usize>, String> {
        while u.readable || !u.spill.is_empty() {
            // (A small buffer moves to a full one for a spill it cannot take.)
            let room = c.out.room_for(&mut self.pool, u.spill.len());
            let len = room.len();
            // The spill moves whole (so it is empty whenever a response
            // ends, and the next response's first bytes start it afresh).
            if len == 0 || len < u.spill.len() {
                // The client is not taking its response: the requests
                // pipelined behind it go elsewhere rather than wait for it.
                self.resend(u);
                break;
            }
            if !u.spill.is_empty() {
                // Read already, with the response ahead of it.
                room[..u.spill.len()].copy_from_slice(&u.spill);
                c.out.filled(u.spill.len());
                let n = std::mem::take(&mut u.spill).len();
                return Ok(Some(n));
            }
            match u.sock.read(room) {
                Ok(0) => return Ok(None),
                Ok(n) => {
                    c.out.filled(n);
                    u.moved += n as u64;
                    u.readable = n == len || u.read_closed;
                    // Frame what arrived before reading more.
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => u.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the response: {e}")),
            }
        }
        Ok(Some(0))
    }

    /// Frame what arrived in place: `Ok(Some((status, close)))` once the
    /// response ended, or why it is bad.
    fn frame_response(&mut self, c: &mut Client, u: &mut Up) -> Result<Option<(u16, bool)>, String> {
        while !c.out.unframed().is_empty() {
            let q = c.req.as_mut().expect("relaying a request");
            match u.reader.step(c.out.unframed()) {
                Ok(Step::NeedMore) => {
                    // A head that fills the whole buffer cannot be framed.
                    if c.out.unframed().len() >= self.pool.size() {
                        return Err(format!("a response head longer than --buffer-size ({} bytes)", self.pool.size()));
                    }
                    break;
                }
                Ok(Step::Consumed(n)) => {
                    c.out.frame(n);
                    q.resp_started = true;
                    // Begun: it cannot be sent again.
                    c.start += std::mem::take(&mut q.held);
                }
                Ok(Step::Done { consumed, response }) => {
                    c.out.frame(consumed);
                    return Ok(Some((response.status, response.close)));
                }
                Err(e) => return Err(format!("a bad response: {e}")),
            }
        }
        Ok(None)
    }

    /// A response ended: its upstream is pooled or closed, the client
    /// waits for its next request or is closed, and the status counts
    /// toward the client's response-code limit.
    fn answered(&mut self, c: &mut Client, u: &mut Up, status: u16, close: bool, eof: bool) -> Result<bool, After> {
        // The address is known from its first response on (its next
        // connections are calm at once, `crate::pace`, and its requests
        // queue with the known at `--upstream-max-inflight`; a forwarded
        // connection carries many clients: each is marked).
        if !c.served || c.forwarded {
            self.shared.table.on_served(c.ip);
        }
        c.served = true;
        let q = self.end_req(c).expect("relaying a request");
        let j = q.up;
        if status == 101 {
            self.open_tunnel(c, j);
            return Ok(true);
        }
        u.client = None;
        if close || eof {
            self.resend(u);
        }
        if let (false, Some(&(next, serial))) = (u.last, u.behind.front()) {
            // The next responses' first bytes came with this one's end
            // (the spill is empty: it only ever moves whole).
            debug_assert!(u.spill.is_empty());
            u.spill.extend_from_slice(c.out.unframed());
            c.out.drop_unframed();
            u.behind.pop_front();
            u.client = Some(next);
            u.watch = ProgressWatch::new(u.moved, Instant::now());
            self.wake.push_back((next, serial));
        } else {
            // Extra bytes after the response were never asked for: they
            // are not sent, and the connection is not reused.
            let extra = !c.out.unframed().is_empty() || !u.spill.is_empty();
            c.out.drop_unframed();
            let reusable = !close && !eof && !extra && !u.last && u.out.is_empty() && c.phase == Phase::Await;
            if reusable && self.idle.len() < MAX_IDLE {
                u.idle_since = self.now;
                self.idle.push(j);
            } else {
                self.close_up_later(j);
            }
        }
        c.solo = false;
        match c.phase {
            // Requests it sent before closing its side are answered too.
            Phase::Await if q.keep_alive && !(c.peer_eof && c.start == c.end) => {
                c.phase = Phase::Head;
                self.start_waiting(c, false);
            }
            // Answered before its body ended (the rest cannot be framed
            // without the upstream), or the last request: close.
            Phase::Await | Phase::Body => c.phase = Phase::Closing,
            _ => {}
        }
        c.framer.reset();
        if let Err(limit) = self.shared.table.on_response(c.ip, status, self.now_ms()) {
            if self.cfg.dry_run {
                self.note(c.ip, c.ja4.as_deref(), limit);
            } else {
                return Err(self.refuse(c, HttpRefusal { limit, status: 0, reason: limit.name() }));
            }
        }
        Ok(true)
    }

    /// The upstream failed or closed before the response ended: a 502 if
    /// nothing of it was sent yet, else the client is closed.
    /// A pipelined request none of whose response came is sent again
    /// instead (a pooled connection the upstream closed as it was written).
    fn upstream_lost(&mut self, c: &mut Client, i: usize, failed: Option<String>) -> Result<bool, After> {
        let q = c.req.as_ref().expect("relaying a request");
        if q.held > 0 && !c.solo {
            self.close_up_later(q.up);
            self.send_again(c, i);
            return Ok(true);
        }
        let why = failed.unwrap_or_else(|| match q.resp_started {
            true => "closed in the middle of a response".into(),
            false => "closed before answering".into(),
        });
        self.upstream_failed(format_args!("{why}"));
        let q = self.end_req(c).expect("relaying a request");
        self.close_up_later(q.up);
        if q.resp_started {
            return Err(After::Close);
        }
        error_response(&mut c.out, &mut self.pool, 502);
        c.phase = Phase::Closing;
        Ok(true)
    }
}
