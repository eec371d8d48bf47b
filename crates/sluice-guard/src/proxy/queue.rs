//! `--upstream-max-inflight`: a checked request that finds no free slot at
//! the upstream waits in its client's queue, known clients' apart from new
//! ones', and is forwarded in its turn.

use super::client::Client;
use super::{add, After, Next, Phase, Worker};
use crate::frame::HeadInfo;
use crate::table::Standing;
use std::time::Instant;

/// At `--upstream-max-inflight`, one slot in this many goes to the
/// oldest request of a new client while known clients wait too, and new
/// clients hold at most this share of the slots at once: new addresses
/// never starve, and an attack of new addresses takes at most this share
/// of the upstream from the clients it has served before. The held share
/// matters most: the upstream answers its connections in turn, so a known
/// client's request waits there behind every request in flight, and an
/// attack's first allowed requests would otherwise fill every slot each
/// time the known queue is empty (measured in BENCHMARKS.md).
pub(super) const NEW_SHARE: u32 = 4;

impl Worker<'_> {
    /// A checked request waits for an upstream slot, in its client's queue.
    pub(super) fn enqueue(&mut self, c: &mut Client, i: usize, h: HeadInfo) -> Next {
        add(&self.n.upstream_queued, 1);
        // Entries of clients gone meanwhile are skipped when their turn
        // comes; while no slot frees, they are swept here instead, so the
        // queues stay within about one entry per open connection.
        if self.queue_known.len() + self.queue_new.len() > 2 * self.open + 64 {
            let clients = &self.clients;
            let live = |&(i, serial): &(usize, u64)| {
                clients[i].as_ref().is_some_and(|c| c.serial == serial && matches!(c.phase, Phase::Queued(..)))
            };
            self.queue_known.retain(live);
            self.queue_new.retain(live);
        }
        c.phase = Phase::Queued(Instant::now(), h);
        match self.shared.table.standing(c.ip, self.now_ms()) {
            Standing::Known => self.queue_known.push_back((i, c.serial)),
            Standing::New => {
                add(&self.n.upstream_queued_new, 1);
                self.queue_new.push_back((i, c.serial));
            }
        }
        Next::Go(true)
    }

    /// Give free upstream slots to queued requests: known clients' first,
    /// one slot in [`NEW_SHARE`] to a new client's while both wait.
    /// Pipelined requests to send again go before all, whatever the cap:
    /// they had their slots.
    pub(super) fn dispatch_queued(&mut self) {
        loop {
            // Which queue: None for a request sent again, else whether the new clients'.
            let (entry, queue) = if let Some(e) = self.redo.pop_front() {
                (e, None)
            } else if self.max_inflight == 0 || self.inflight < self.max_inflight {
                // A new client's turn needs room in their share too.
                let room_new = self.max_inflight == 0 || self.inflight_new < self.max_inflight_new;
                let new_turn = room_new && (self.queue_known.is_empty() || self.since_new + 1 >= NEW_SHARE);
                match (new_turn, self.queue_new.front(), self.queue_known.front()) {
                    (true, Some(_), _) => (self.queue_new.pop_front().expect("front"), Some(true)),
                    (_, _, Some(_)) => (self.queue_known.pop_front().expect("front"), Some(false)),
                    (false, _, None) => return,
                    (true, None, None) => return,
                }
            } else {
                return;
            };
            let (i, serial) = entry;
            // Gone meanwhile (closed, blocked, timed out): the slot goes on.
            let Some(mut c) = self.clients.get_mut(i).and_then(Option::take) else { continue };
            let Phase::Queued(since, h) = c.phase else {
                self.clients[i] = Some(c);
                continue;
            };
            if c.serial != serial {
                self.clients[i] = Some(c);
                continue;
            }
            if let Some(new) = queue {
                c.as_new = new && self.max_inflight > 0;
                self.since_new = if new { 0 } else { self.since_new + 1 };
                add(&self.n.upstream_queue_wait_us, since.elapsed().as_micros() as u64);
            }
            let after = match self.start_upstream(&mut c, i, h) {
                Next::End(after) => after,
                Next::Go(_) | Next::Again => After::Keep,
            };
            self.clients[i] = Some(c);
            match after {
                After::Keep => self.drive(i),
                After::Close => self.close_client(i, false),
                After::Reset => self.close_client(i, true),
            }
        }
    }
}
