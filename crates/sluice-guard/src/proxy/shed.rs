//! Making room at `--max-connections`: one connection shed for each new
//! one let in, and no churn among the shed.
//!
//! A scan of every open connection ranks those that may be shed
//! (`Worker::shed_one`); the best [`SCAN_SHARE`] of them wait here and
//! are taken one per new connection, so a flood of connects at the cap
//! pays one scan per that many. Shedding that share at once, as the guard
//! did, let in as many connections behind the one that asked.
//!
//! A client whose connection was shed while not known (never served, or
//! near a limit) does not displace another for [`SHED_COOLDOWN`]: at the
//! cap its new connections are refused. The client is its table key (its
//! address, or the network `--key-prefix-*` keys it by), and only a
//! connection counted against its own address marks it: a load balancer's
//! (before its PROXY header, or naming clients per request) never does. Without that, attackers shed at
//! the cap reconnect at once, each new connection sheds another of them
//! before it can breach a limit and be blocked, and the churn never ends
//! (BENCHMARKS.md, "shedding without churn"). An address never shed (a real
//! client arriving during an idle flood) still displaces the longest
//! waiting, as before.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A shed address's new connections are refused at the cap this long.
pub(super) const SHED_COOLDOWN: Duration = Duration::from_secs(2);

/// Of the open connections, this share (1/64, at least one) is ranked by a
/// scan and kept to be shed one at a time.
pub(super) const SCAN_SHARE: usize = 64;

/// A scan's ranking is used this long at most: past it, who waits longest
/// may have changed.
const QUEUE_FOR: Duration = Duration::from_millis(100);

/// Addresses remembered as shed, at most (a thread's); at the bound the
/// cooled ones are dropped (a pass over all, at most once per
/// [`PRUNE_EVERY`], so a flood of sheds at the bound never pays it each
/// time), and a new one is not remembered until some are.
const RECENT_CAP: usize = 1 << 16;
const PRUNE_EVERY: Duration = Duration::from_millis(100);

type Hasher = foldhash::fast::RandomState;

/// A candidate for shedding: its slot, its serial (the connection the scan
/// saw), and whether it was known then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    pub slot: usize,
    pub serial: u64,
    pub known: bool,
}

#[derive(Default)]
pub(super) struct Shedder {
    /// The last scan's candidates, the next to shed last (popped).
    queue: Vec<Candidate>,
    made: Option<Instant>,
    /// Clients (table keys) shed while not known, and when.
    recent: HashMap<u128, Instant, Hasher>,
    /// When the cooled ones were last dropped at the bound.
    pruned_at: Option<Instant>,
}

impl Shedder {
    /// The next candidate of the last scan, while its ranking holds.
    pub(super) fn next(&mut self, now: Instant) -> Option<Candidate> {
        if self.made.is_none_or(|t| now.saturating_duration_since(t) > QUEUE_FOR) {
            self.queue.clear();
        }
        self.queue.pop()
    }

    /// A new ranking, best first (the first is shed first).
    pub(super) fn refill(&mut self, best_first: impl DoubleEndedIterator<Item = Candidate>, now: Instant) {
        self.queue.clear();
        self.queue.extend(best_first.rev());
        self.made = Some(now);
    }

    /// A connection of client `key` was shed while not known.
    pub(super) fn note_shed(&mut self, key: u128, now: Instant) {
        if self.recent.len() >= RECENT_CAP && !self.recent.contains_key(&key) {
            if self.pruned_at.is_some_and(|t| now.saturating_duration_since(t) < PRUNE_EVERY) {
                return;
            }
            self.pruned_at = Some(now);
            self.recent.retain(|_, &mut at| now.saturating_duration_since(at) < SHED_COOLDOWN);
            if self.recent.len() >= RECENT_CAP {
                return;
            }
        }
        self.recent.insert(key, now);
    }

    /// Whether client `key` had a connection shed (while not known) within
    /// [`SHED_COOLDOWN`].
    pub(super) fn shed_lately(&mut self, key: u128, now: Instant) -> bool {
        match self.recent.get(&key) {
            Some(&at) if now.saturating_duration_since(at) < SHED_COOLDOWN => true,
            Some(_) => {
                self.recent.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Addresses remembered (cooled ones included until looked up or dropped).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(slot: usize) -> Candidate {
        Candidate { slot, serial: slot as u64, known: false }
    }

    #[test]
    fn candidates_come_best_first_until_the_ranking_is_stale() {
        let mut s = Shedder::default();
        let t = Instant::now();
        assert_eq!(s.next(t), None, "no scan yet");
        s.refill([cand(7), cand(3), cand(9)].into_iter(), t);
        assert_eq!(s.next(t).map(|c| c.slot), Some(7));
        assert_eq!(s.next(t + QUEUE_FOR).map(|c| c.slot), Some(3), "still within the ranking's time");
        assert_eq!(s.next(t + QUEUE_FOR + Duration::from_millis(1)), None, "stale: a new scan is owed");
        s.refill([cand(1)].into_iter(), t + QUEUE_FOR * 2);
        assert_eq!(s.next(t + QUEUE_FOR * 2).map(|c| c.slot), Some(1));
        assert_eq!(s.next(t + QUEUE_FOR * 2), None);
    }

    #[test]
    fn a_shed_address_cools_down_for_the_cooldown_only() {
        let mut s = Shedder::default();
        let t = Instant::now();
        let (a, b) = (1u128, 2u128);
        s.note_shed(a, t);
        assert!(s.shed_lately(a, t));
        assert!(s.shed_lately(a, t + SHED_COOLDOWN - Duration::from_millis(1)));
        assert!(!s.shed_lately(b, t), "never shed");
        assert!(!s.shed_lately(a, t + SHED_COOLDOWN), "cooled");
        assert_eq!(s.remembered(), 0, "a cooled address is forgotten when looked up");
        s.note_shed(a, t + SHED_COOLDOWN * 3);
        assert!(s.shed_lately(a, t + SHED_COOLDOWN * 3), "shed again");
    }

    #[test]
    fn the_remembered_addresses_are_bounded() {
        let mut s = Shedder::default();
        let t = Instant::now();
        let ip = u128::from;
        for n in 0..RECENT_CAP as u32 {
            s.note_shed(ip(n), t);
        }
        // Full of fresh ones: the next is not remembered.
        s.note_shed(ip(RECENT_CAP as u32), t);
        assert_eq!(s.remembered(), RECENT_CAP);
        assert!(!s.shed_lately(ip(RECENT_CAP as u32), t));
        assert!(s.shed_lately(ip(0), t), "the first kept");
        // A pass just before they cooled finds none cooled; the next one,
        // once they have, waits PRUNE_EVERY after it.
        let pass = t + SHED_COOLDOWN - Duration::from_millis(10);
        s.note_shed(ip(RECENT_CAP as u32), pass);
        s.note_shed(ip(RECENT_CAP as u32), t + SHED_COOLDOWN);
        assert_eq!(s.remembered(), RECENT_CAP, "at most one pass per PRUNE_EVERY");
        let later = pass + PRUNE_EVERY;
        s.note_shed(ip(RECENT_CAP as u32), later);
        assert_eq!(s.remembered(), 1);
        assert!(s.shed_lately(ip(RECENT_CAP as u32), later));
    }
}
