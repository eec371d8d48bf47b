//! `--calm-lane`: beside each accepting thread, a thread with no listener
//! of its own that takes over that thread's connections of calm clients
//! between their requests.
//!
//! Why a thread and not an order within one: under a flood of new
//! addresses the accepting thread is the busiest process on the machine,
//! and however it orders its turn, a calm client's request waits for the
//! turn to come round, and for the scheduler to give the busy thread the
//! CPU back (BENCHMARKS.md, "the calm lane": the turns of a connect storm
//! take 10-17 ms of wall time for under 1 ms of CPU). A thread that serves
//! only calm connections is idle most of the time, so it runs as soon as
//! one of them speaks, as a second guard serving only them would: the
//! machine's floor.
//!
//! Which connections: open for [`LANE_AGE`], counted against their own
//! address, under their calm pace (`crate::pace`), and between requests
//! with nothing owed either way (no input, no response, no TLS record, no
//! HTTP/2, no tunnel). A flood's connections are new, so they stay with
//! the accepting thread, which blocks and sheds them as before; a site's
//! clients on kept-alive connections, opened before the flood, are in the
//! lane when it comes. Handed over in the deadline sweep, so a connection
//! is looked at every 100 ms; deadlines, pace and counts go with it.
//!
//! A lent connection that climbs a second of the limit over its calm pace
//! (`Pace::well_over`) goes back, at the lane's sweep, once between
//! requests (`calm_lane_returned`): the lane
//! holds only calm clients, so an attack that opens connections, waits a
//! second and then floods them does not make the lane its own; in the
//! accepting thread it is paced as before. It comes again once calm.
//!
//! A connection the lane holds still counts against its accepting
//! thread's share of `--max-connections` (`Lane::lent`). Each accepting
//! thread has a lane of its own, so `--threads N` spreads the calm
//! clients' work over N lanes as it spreads the connections. At the cap,
//! when that thread has nothing of its own to shed, it asks the lane to shed
//! the connection that has waited longest for a request, never served
//! first (`Lane::shed`): an attack of connections that open and then hold
//! still is shed as it would be without the lane, one new connection
//! later (that one is refused).

use super::client::Client;
use super::{add, Phase, Worker};
use mio::{Interest, Token, Waker};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// A connection is handed to the lane once open this long: a flood's
/// connections are blocked or shed before (an attacker over the limit
/// breaches within its first second), a site's clients keep theirs open
/// for many.
pub(super) const LANE_AGE: Duration = Duration::from_secs(1);

/// The token of a thread's waker (the lane's, and its accepting thread's):
/// odd and below every listener's token; the loop's match looks at it first.
pub(super) const LANE_WAKE: Token = Token(usize::MAX - 2 * crate::MAX_LISTENERS);

/// What an accepting thread and its lane share.
pub(crate) struct Lane {
    /// Connections on their way to the lane, and back to the accepting
    /// thread, not yet registered in either loop (boxed as in
    /// `Worker::clients`: the pointer moves, not the state).
    #[allow(clippy::vec_box)]
    to_lane: Mutex<Vec<Box<Client>>>,
    #[allow(clippy::vec_box)]
    to_thread: Mutex<Vec<Box<Client>>>,
    /// Something waits in `to_lane` / `to_thread` (looked at each turn
    /// without the lock).
    for_lane: AtomicBool,
    for_thread: AtomicBool,
    /// The lane's waker and its accepting thread's, set once each loop is
    /// up (before, what waits is found on the loop's first turn).
    lane_waker: OnceLock<Waker>,
    thread_waker: OnceLock<Waker>,
    /// The accepting thread's connections the lane holds now, or that are
    /// on their way either side (they count against that thread's share of
    /// `--max-connections`).
    lent: AtomicUsize,
    /// Connections the lane is asked to shed (an accepting thread at its
    /// cap with nothing of its own to shed).
    shed: AtomicUsize,
}

impl Lane {
    pub(crate) fn new() -> Lane {
        Lane {
            to_lane: Mutex::new(Vec::new()),
            to_thread: Mutex::new(Vec::new()),
            for_lane: AtomicBool::new(false),
            for_thread: AtomicBool::new(false),
            lane_waker: OnceLock::new(),
            thread_waker: OnceLock::new(),
            lent: AtomicUsize::new(0),
            shed: AtomicUsize::new(0),
        }
    }

    fn wake(waker: &OnceLock<Waker>) {
        if let Some(w) = waker.get() {
            let _ = w.wake();
        }
    }
}

impl Worker<'_> {
    /// The thread's waker registered with its loop (`--calm-lane` only).
    pub(super) fn start_lane(&mut self) -> std::io::Result<()> {
        if let Some(lane) = self.lane {
            let waker = if self.is_lane() { &lane.lane_waker } else { &lane.thread_waker };
            let _ = waker.set(Waker::new(self.poll.registry(), LANE_WAKE)?);
        }
        Ok(())
    }

    /// This thread is a lane (its index is past the accepting threads').
    pub(super) fn is_lane(&self) -> bool {
        self.lane.is_some() && self.me >= self.cfg.threads
    }

    /// This accepting thread's connections the lane holds now.
    pub(super) fn lent(&self) -> usize {
        match self.lane {
            Some(lane) if !self.is_lane() => lane.lent.load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Whether `c` moves now: from an accepting thread to its lane when
    /// a second old and calm, from the lane back when well over its pace
    /// (`Pace::well_over`).
    pub(super) fn moves(&self, c: &Client) -> bool {
        if self.lane.is_none() || !self.between_requests(c) {
            return false;
        }
        let (rule, now_ms) = (&self.pace_rule, self.now_ms);
        match self.is_lane() {
            false => {
                self.now.saturating_duration_since(c.accepted) >= LANE_AGE
                    && c.pace.is_some_and(|p| p.calm(rule, now_ms))
            }
            true => c.pace.is_some_and(|p| p.well_over(rule, now_ms)),
        }
    }

    /// A connection of its own address between requests, nothing owed
    /// either way (see the module's list).
    fn between_requests(&self, c: &Client) -> bool {
        c.pace.is_some()
            && c.tracked
            && !c.forwarded
            && !c.redirect
            && matches!(c.phase, Phase::Head)
            && c.start == c.end
            && c.req.is_none()
            && c.tunnel.is_none()
            && c.h2.is_none()
            && !c.hello_queued
            && !c.later
            && !c.send_queued
            && !c.readable
            && !c.read_closed
            && !c.peer_eof
            && !c.out.has_pending()
            && c.tls.as_ref().is_none_or(|t| !t.is_handshaking() && !t.wants_write())
    }

    /// Hand slot `i`'s connection, taken out of it, to the other side:
    /// an accepting thread's to its lane, the lane's back.
    pub(super) fn hand_over(&mut self, i: usize, mut c: Box<Client>) {
        let Some(lane) = self.lane else { return };
        let _ = self.poll.registry().deregister(&mut c.sock);
        self.open -= 1;
        self.free_clients.push(i);
        let (queue, waiting) = if self.is_lane() {
            add(&self.n.calm_lane_returned, 1);
            (&lane.to_thread, &lane.for_thread)
        } else {
            c.lent = true;
            lane.lent.fetch_add(1, Ordering::Relaxed);
            add(&self.n.calm_lane_lent, 1);
            (&lane.to_lane, &lane.for_lane)
        };
        queue.lock().unwrap_or_else(|e| e.into_inner()).push(c);
        waiting.store(true, Ordering::Release);
        self.handed = true;
    }

    /// After a sweep that handed connections over: the other side looks.
    pub(super) fn handed_wake(&mut self) {
        if let (true, Some(lane)) = (std::mem::take(&mut self.handed), self.lane) {
            Lane::wake(if self.is_lane() { &lane.thread_waker } else { &lane.lane_waker });
        }
    }

    /// A lent connection closed: its room goes back to its accepting thread.
    pub(super) fn returned(&self, c: &Client) {
        if let (true, Some(lane)) = (c.lent, self.lane) {
            lane.lent.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// An accepting thread at its cap, with nothing of its own to shed:
    /// the lane sheds one of the connections it holds for it.
    pub(super) fn ask_lane_to_shed(&self) {
        if let Some(lane) = self.lane.filter(|_| self.lent() > 0) {
            lane.shed.fetch_add(1, Ordering::Relaxed);
            Lane::wake(&lane.lane_waker);
        }
    }

    /// Each turn: register what was handed over to this thread (each gets
    /// a slot and serial of its own, and is read at once: input may have
    /// come while it moved); in a lane, shed what it was asked to.
    pub(super) fn lane_turn(&mut self) {
        let Some(lane) = self.lane else { return };
        let is_lane = self.is_lane();
        let (queue, waiting) =
            if is_lane { (&lane.to_lane, &lane.for_lane) } else { (&lane.to_thread, &lane.for_thread) };
        // A load first: the flag's line stays shared while nothing moves.
        if waiting.load(Ordering::Relaxed) && waiting.swap(false, Ordering::Acquire) {
            let mut moved = std::mem::take(&mut self.lane_inbox);
            std::mem::swap(&mut moved, &mut *queue.lock().unwrap_or_else(|e| e.into_inner()));
            self.take_in(&mut moved, lane);
            self.lane_inbox = moved;
        }
        if is_lane && lane.shed.load(Ordering::Relaxed) > 0 {
            let asked = lane.shed.swap(0, Ordering::Relaxed);
            self.lane_shed(asked);
        }
    }

    #[allow(clippy::vec_box)]
    fn take_in(&mut self, moved: &mut Vec<Box<Client>>, lane: &Lane) {
        for mut c in moved.drain(..) {
            // Back in its accepting thread: its own again.
            if !self.is_lane() && std::mem::take(&mut c.lent) {
                lane.lent.fetch_sub(1, Ordering::Relaxed);
            }
            let i = self.free_clients.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.clients.len() - 1
            });
            c.serial = self.serials;
            self.serials += 1;
            c.readable = true;
            let registered =
                self.poll.registry().register(&mut c.sock, Token(2 * i), Interest::READABLE | Interest::WRITABLE);
            self.open += 1;
            self.clients[i] = Some(c);
            match registered {
                Ok(()) => self.drive(i),
                Err(_) => self.close_client(i, false),
            }
        }
    }

    /// Close the `k` connections that have waited longest for a request
    /// (idle between requests; the lane holds no other kind for long).
    fn lane_shed(&mut self, k: usize) {
        // Never served first, as the accepting threads shed.
        let mut waiting: Vec<(bool, std::time::Instant, usize)> = (self.clients.iter().enumerate())
            .filter_map(|(i, c)| {
                let c = c.as_ref()?;
                (matches!(c.phase, Phase::Head) && c.req.is_none()).then_some((c.served, c.waiting_since?, i))
            })
            .collect();
        let k = k.min(waiting.len());
        if k == 0 {
            return;
        }
        waiting.select_nth_unstable(k - 1);
        for &(_, _, i) in &waiting[..k] {
            add(&self.n.shed_waiting, 1);
            self.close_client(i, false);
        }
    }
}
