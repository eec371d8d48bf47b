//! Every phase's deadline, swept every [`SWEEP_PARTS`] [`TICK`](super::TICK)s
//! (a share of the slots each tick): the TLS
//! handshake, the PROXY header, the request head, an idle keep-alive, the
//! body and the response (a slow or stalled client), the upstream queue,
//! the upstream's connect and answer, and an idle tunnel.

use super::client::{error_response, Client};
use super::{add, After, Phase, Worker};
use crate::frame::HttpRefusal;
use crate::limits::Limit;
use crate::timeouts::Stalled;
use crate::{Config, ThreadCounters};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// What a connection's deadlines say at a sweep.
#[derive(Clone, Copy)]
enum Due<'c> {
    Nothing,
    /// Closed without a word, counted here if anywhere.
    Close(Option<&'c AtomicU64>),
    /// A breach of the client's (a slow or stalled client).
    Breach(Limit),
    /// The upstream did not connect or answer in time.
    Upstream,
    /// A request waited too long for an upstream slot.
    Queue,
    /// Something changed (an HTTP/2 stream timed out, a breach waits in
    /// its connection's events): the connection's turn handles it.
    Drive,
}

/// Each tick the sweep looks at this share of the client slots, so a
/// connection's deadlines are looked at every 100 ms: every timeout is
/// met within that (they are seconds, or hundreds of ms at the least),
/// and the guard at 10,000 connections does not spend a fifth of its time
/// reading every connection's state 50 times a second (`perf`, BENCHMARKS.md).
pub(super) const SWEEP_PARTS: usize = 5;

impl<'a> Worker<'a> {
    pub(super) fn sweep_deadlines(&mut self) {
        let now = Instant::now();
        for _ in 0..self.clients.len().div_ceil(SWEEP_PARTS) {
            if self.sweep_at >= self.clients.len() {
                self.sweep_at = 0;
            }
            let i = self.sweep_at;
            self.sweep_at += 1;
            let Some(mut c) = self.clients[i].take() else { continue };
            let due = self.due(&mut c, now);
            if matches!(due, Due::Nothing) && self.moves(&c) {
                self.hand_over(i, c);
                continue;
            }
            let after = match due {
                Due::Nothing => After::Keep,
                Due::Close(counter) => {
                    if let Some(counter) = counter {
                        add(counter, 1);
                    }
                    After::Close
                }
                Due::Upstream => self.upstream_timed_out(&mut c),
                Due::Drive => After::Keep,
                Due::Queue => {
                    // Not the client's fault: answered, not counted against it.
                    add(&self.n.upstream_queue_timeouts, 1);
                    error_response(&mut c.out, &mut self.pool, 503);
                    c.phase = Phase::Closing;
                    After::Keep
                }
                Due::Breach(limit) if self.cfg.dry_run => {
                    // Counted once; the client may go on as slowly as it likes.
                    self.note(c.ip, c.ja4.as_deref(), limit);
                    (c.head_deadline, c.slow_noted) = (None, true);
                    After::Keep
                }
                Due::Breach(limit) => {
                    self.refuse(&mut c, HttpRefusal { limit, status: limit.status(), reason: limit.name() })
                }
            };
            self.clients[i] = Some(c);
            match (due, after) {
                (Due::Nothing, _) => {}
                (_, After::Keep) => self.drive(i),
                (_, After::Close) => self.close_client(i, false),
                (_, After::Reset) => self.close_client(i, true),
            }
        }
    }

    /// Which of a connection's deadlines has passed, if any.
    fn due(&mut self, c: &mut Client, now: Instant) -> Due<'a> {
        let (cfg, n): (&'a Config, &'a ThreadCounters) = (self.cfg, self.n);
        let t = &cfg.timeouts;
        if c.handshake_deadline.is_some_and(|d| now >= d) {
            return Due::Close(Some(&n.tls_handshake_timeouts));
        }
        let head_due = c.head_deadline.is_some_and(|d| now >= d);
        let nothing_owed = !c.out.has_pending() && !c.tls.as_ref().is_some_and(|t| t.wants_write());
        match c.phase {
            Phase::Draining(d) if now >= d => return Due::Close(None),
            Phase::Draining(_) => return Due::Nothing,
            // No whole PROXY header within the header timeout.
            Phase::Proxy if head_due => return Due::Close(Some(&n.proxy_header_errors)),
            // Not a byte of a request: an idle connection (never used, or
            // kept alive), closed without a word and not a breach (once
            // its last response is all sent: the send watch judges that).
            Phase::Head
                if c.end == c.start && nothing_owed && (head_due || c.idle_deadline.is_some_and(|d| now >= d)) =>
            {
                return Due::Close(Some(&n.closed_idle))
            }
            Phase::Head if head_due && c.end > c.start => return Due::Breach(Limit::ClientHeaderTimeout),
            Phase::Queued(since, _) if t.upstream_queue.is_some_and(|d| now.duration_since(since) >= d) => {
                return Due::Queue
            }
            Phase::H2 if self.h2_idle(c, now) => return Due::Close(Some(&n.closed_idle)),
            Phase::H2 if head_due => return Due::Breach(Limit::ClientHeaderTimeout),
            Phase::Tunnel
                if c.tunnel.is_some_and(|tn| t.tunnel.is_some_and(|d| now.duration_since(tn.moved_at) >= d)) =>
            {
                return Due::Close(Some(&n.tunnels_idle_closed))
            }
            _ => {}
        }
        if !c.slow_noted {
            // The body: owed while the guard would read it (its input
            // buffer and the upstream's have room).
            let up_room = c
                .req
                .as_ref()
                .and_then(|q| self.ups[q.up].as_ref())
                .is_some_and(|u| u.out.len() - u.out_pos < self.cfg.buffer_size);
            let owing = c.phase == Phase::Body && up_room && c.end - c.start < self.in_cap;
            match c.body_watch.check(owing, c.received, now, t.client_body, t.min_request_body_rate) {
                Some(Stalled::NoProgress) => return Due::Breach(Limit::ClientBodyTimeout),
                Some(Stalled::TooSlow) => return Due::Breach(Limit::MinRequestBodyRate),
                None => {}
            }
            // The response: owed while anything waits for the client.
            match c.send_watch.check(!nothing_owed, c.sent, now, t.send, t.min_response_rate) {
                Some(Stalled::NoProgress) => return Due::Breach(Limit::SendTimeout),
                Some(Stalled::TooSlow) => return Due::Breach(Limit::MinResponseRate),
                None => {}
            }
        }
        // The upstream: owes the request's acceptance, and its response
        // while the client has room for it.
        // (Its own, once its response comes first on a pipelined connection.)
        let up = c.req.as_ref().and_then(|q| self.ups[q.up].as_mut());
        if let Some(u) = up.filter(|u| !u.behind.iter().any(|&(_, s)| s == c.serial)) {
            if u.connect_deadline.is_some_and(|d| now >= d) {
                return Due::Upstream;
            }
            let owing = u.out_pos < u.out.len() || (c.phase == Phase::Await && c.out.held() < self.cfg.buffer_size);
            if u.watch.check(owing, u.moved, now, t.upstream_response, None).is_some() {
                return Due::Upstream;
            }
        }
        if self.h2_sweep(c, now) {
            return Due::Drive;
        }
        Due::Nothing
    }

    /// The upstream did not connect or answer in time: 504 if nothing of
    /// the response was sent yet, else the client is closed (its response
    /// cannot be completed).
    fn upstream_timed_out(&mut self, c: &mut Client) -> After {
        add(&self.n.upstream_timeouts, 1);
        let Some(q) = self.end_req(c) else { return After::Keep };
        self.close_up(q.up);
        if q.resp_started {
            return After::Close;
        }
        error_response(&mut c.out, &mut self.pool, 504);
        c.phase = Phase::Closing;
        After::Keep
    }
}
