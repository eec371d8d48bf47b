//! A breach: counted, its address blocked if asked (a line logged per new
//! block), its client answered and closed or reset; and a new block closes
//! the thread's connections from blocked addresses.

use super::client::{error_response, Client};
use super::{add, After, Next, Phase, Worker};
use crate::frame::HttpRefusal;
use crate::limits::{Limit, Weight};
use crate::BlockAction;
use mio::net::TcpStream;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Block lines logged per second per thread; beyond, one line says how
/// many more were made (a flood of new attackers must not flood the log).
const BLOCK_LINES: u32 = 50;

/// Close with a RST instead of a FIN (SO_LINGER 0), as `--block-action reset` asks.
pub(super) fn reset(sock: &TcpStream) {
    let _ = socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO));
}

impl Worker<'_> {
    /// A breach: count it, block the address if asked, then reply and close
    /// or reset. Any upstream connection in use is dropped (its request or
    /// response is cut).
    pub(super) fn refuse(&mut self, c: &mut Client, r: HttpRefusal) -> After {
        self.note_why(c.ip, c.ja4.as_deref(), r.limit, r.reason);
        // (A tunnel's 101 went out: no reply can follow it either.)
        let started = c.req.as_ref().is_some_and(|q| q.resp_started) || c.tunnel.is_some();
        self.leave_up(c);
        (c.head_deadline, c.idle_deadline) = (None, None);
        // HTTP/2: nothing to say in HTTP/1.1, and a GOAWAY would wait
        // behind what a stalled client does not read.
        if c.h2.is_some() {
            return if self.cfg.action == BlockAction::Reset { After::Reset } else { After::Close };
        }
        // A slow reader is reset: closed with its response still queued in
        // the kernel, the connection would live on (FIN_WAIT1, holding the
        // socket buffer) for as long as the client keeps reading slowly.
        if matches!(r.limit, Limit::SendTimeout | Limit::MinResponseRate) {
            return After::Reset;
        }
        // Before the handshake is done nothing can be said: just close.
        let mute = c.tls.as_ref().is_some_and(|t| !t.established);
        if self.cfg.action == BlockAction::Reset || started || mute {
            return if self.cfg.action == BlockAction::Reset { After::Reset } else { After::Close };
        }
        if r.status != 0 {
            error_response(&mut c.out, &mut self.pool, r.status);
        }
        c.phase = Phase::Closing;
        After::Keep
    }

    /// A refusal: answered and the turn starts over, or the connection ends.
    pub(super) fn refused(&mut self, c: &mut Client, r: HttpRefusal) -> Next {
        match self.refuse(c, r) {
            After::Keep => Next::Again,
            after => Next::End(after),
        }
    }

    /// Count a breach and block the address if asked (in a dry run, the
    /// table records the block and enforces nothing).
    pub(super) fn note(&mut self, ip: IpAddr, ja4: Option<&str>, limit: Limit) {
        self.note_why(ip, ja4, limit, limit.name());
    }

    /// [`Worker::note`], `reason` the parser's error for `http_parse`:
    /// blocked at once, or when its weight brings the address's score to
    /// `--ip-block-after` (`Limit::weight`).
    pub(super) fn note_why(&mut self, ip: IpAddr, ja4: Option<&str>, limit: Limit, reason: &str) {
        add(&self.n.breaches[limit.index()], 1);
        // A trusted proxy speaks for many clients: it is never blocked.
        if let (Some(secs), false) = (self.cfg.ip_block, self.trusted(ip)) {
            let (table, now) = (&self.shared.table, self.now_ms());
            let reached = match limit.weight(reason) {
                Weight::AtOnce => true,
                Weight::Points(p) => table.score(ip, p, self.cfg.ip_block_after, now),
            };
            if !reached {
                return;
            }
            let new = match ja4 {
                Some(ja4) => table.block_tls(ip, secs, limit, ja4, now),
                None => table.block(ip, secs, limit, now),
            };
            if new && !self.cfg.dry_run {
                self.log_block(ip, ja4, limit, secs);
            }
        }
    }

    /// One log line per new block (at most [`BLOCK_LINES`] a second).
    fn log_block(&mut self, ip: IpAddr, ja4: Option<&str>, limit: Limit, secs: u64) {
        let (since, lines, more) = &mut self.block_lines;
        if since.elapsed() >= Duration::from_secs(1) {
            if *more > 0 {
                tracing::info!(
                    event = "blocks_not_logged",
                    count = *more,
                    "{more} more clients blocked in that second"
                );
            }
            (*since, *lines, *more) = (Instant::now(), 0, 0);
        }
        if *lines >= BLOCK_LINES {
            *more += 1;
            return;
        }
        *lines += 1;
        let client = self.shared.table.net(ip);
        tracing::info!(
            event = "block",
            client = %client,
            limit = limit.name(),
            ja4 = ja4.unwrap_or("-"),
            secs,
            "blocked {client} ({}) for {secs} s", limit.name()
        );
    }

    /// New blocks (after block epoch `since`): close this thread's
    /// connections from the addresses blocked (those already closing
    /// finish their reply). Each connection's key is compared with the new
    /// blocks' (no lock); only a match is looked up in the table (the block
    /// may be lifted already). A flood of new blocks, each its address's
    /// only connection, costs a pass over the connections per loop turn,
    /// not a locked lookup per connection per block.
    pub(super) fn close_blocked(&mut self, since: u64) {
        let now = self.now_ms();
        let table = &self.shared.table;
        let mut keys = std::mem::take(&mut self.blocked_keys);
        keys.clear();
        let known = table.blocked_since(since, &mut keys);
        keys.sort_unstable();
        for i in 0..self.clients.len() {
            let blocked = match &self.clients[i] {
                // A forwarded connection carries many clients: checked per request.
                Some(c) if c.forwarded || matches!(c.phase, Phase::Proxy | Phase::Closing | Phase::Draining(_)) => {
                    false
                }
                Some(c) if known => keys.binary_search(&table.key(c.ip)).is_ok() && table.is_blocked(c.ip, now),
                Some(c) => table.is_blocked(c.ip, now),
                None => false,
            };
            if blocked {
                add(&self.n.closed_blocked, 1);
                self.close_client(i, self.cfg.action == BlockAction::Reset);
            }
        }
        self.blocked_keys = keys;
    }
}
