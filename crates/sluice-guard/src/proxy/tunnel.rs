//! Tunnels: a request that asks to upgrade and is answered `101` turns its
//! client connection into a tunnel (`Phase::Tunnel`) to that upstream
//! connection. Bytes go both ways unframed, each direction through the
//! buffers a request body and a response use (so bounded the same), until
//! either side closes or nothing moves for `--tunnel-timeout`.

use super::client::Client;
use super::upstream::send_request;
use super::{add, Next, Phase, Worker};
use std::io::{self, Read};
use std::net::Shutdown;
use std::time::Instant;

/// An upgraded connection's other end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tunnel {
    pub(super) up: usize,
    /// When a byte last moved either way (`--tunnel-timeout`).
    pub(super) moved_at: Instant,
    /// The client's close was passed on (the upstream's write side is shut).
    up_shut: bool,
}

impl Worker<'_> {
    /// An upgrade was answered 101: the client and upstream `j` (still
    /// serving it, so its events drive the client) become the two ends of a
    /// tunnel. Its request slot is free: a tunnel holds a connection, not a
    /// request in the upstream's work. Bytes the upstream sent after the
    /// 101 are the new protocol's; so are the client's after its request.
    pub(super) fn open_tunnel(&mut self, c: &mut Client, j: usize) {
        let unframed = c.out.unframed().len();
        c.out.frame(unframed);
        c.tunnel = Some(Tunnel { up: j, moved_at: Instant::now(), up_shut: false });
        c.phase = Phase::Tunnel;
        add(&self.n.tunnels, 1);
    }

    /// Move a tunnel's bytes: the client's input to the upstream (at most
    /// `--buffer-size` held), the upstream's into the client's buffer (only
    /// into its room). Either side's close is passed on: the client's as a
    /// shut write side once all it sent went; the upstream's ends the
    /// tunnel, the client's buffer sent first.
    #[inline]
    pub(super) fn tunnel(&mut self, c: &mut Client) -> Next {
        let Some(mut t) = c.tunnel.filter(|_| c.phase == Phase::Tunnel) else { return Next::Go(false) };
        let mut u = self.ups[t.up].take().expect("a tunnel's upstream");
        let mut moved = false;
        if u.out_pos > 0 {
            u.out.drain(..u.out_pos);
            u.out_pos = 0;
        }
        let take = (c.end - c.start).min(self.cfg.buffer_size.saturating_sub(u.out.len()));
        u.out.extend_from_slice(&c.inbuf[c.start..c.start + take]);
        c.start += take;
        let (sent, why) = send_request(&mut u);
        let mut failed = why.is_some();
        moved |= sent;
        if !failed && c.peer_eof && c.start == c.end && u.out.is_empty() && !t.up_shut {
            let _ = u.sock.shutdown(Shutdown::Write);
            t.up_shut = true;
        }
        let mut eof = false;
        while !failed && u.readable {
            let room = c.out.room(&mut self.pool);
            if room.is_empty() {
                break;
            }
            let len = room.len();
            match u.sock.read(room) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    c.out.filled(n);
                    c.out.frame(n);
                    u.moved += n as u64;
                    u.readable = n == len || u.read_closed;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => u.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => failed = true,
            }
        }
        if moved {
            t.moved_at = Instant::now();
        }
        self.ups[t.up] = Some(u);
        c.tunnel = Some(t);
        if failed || eof {
            // The upstream ended it: what it sent goes out, then the close.
            self.leave_up(c);
            c.phase = Phase::Closing;
            return Next::Again;
        }
        Next::Go(moved)
    }
}
