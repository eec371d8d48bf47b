//! A bounded multi-producer multi-consumer work queue in the NatSys style
//! (A. Krizhanovsky, "Lock-free Multi-producer Multi-consumer Queue on Ring
//! Buffer"; its benchmark is the seed's "NatSys Lock-free Queue vs LMAX
//! Disruptor vs boost::lockfree::queue"), and the harness of `sluice-bench
//! queue` ([`bench`]).
//!
//! The algorithm. A ring of `2^k` slots and two global counters: `head`
//! (next position to push) and `tail` (next position to pop), both only ever
//! incremented by a plain atomic fetch-add: no compare-and-swap anywhere on
//! the fast path. A thread owns the position it took and publishes it in its
//! cache line of its index (`ThreadPos`): `u64::MAX` while it holds none. Producers
//! may write position `p` only once every consumer is past `p - capacity`;
//! consumers may read `p` only once every producer is past `p`. Rather than
//! asking on every operation, each side caches the bound it last computed
//! (`last_tail` for producers, `last_head` for consumers) and recomputes it,
//! as the minimum over the other side's published positions and the global
//! counter, only when its own position reaches the cached bound.
//!
//! This module is the crate's one home of `unsafe`: the slots are
//! `UnsafeCell`s that a producer writes and a consumer reads without a lock;
//! the position protocol above is what makes every such access exclusive.
//! Under `--cfg loom` the atomics and cells are loom's, so
//! `tests/queue_loom.rs` can check every interleaving of a small run.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;
use std::sync::Arc;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// "Holds no position": excluded from every minimum.
const NONE: u64 = u64::MAX;

/// One slot: written by exactly one producer, then read by exactly one
/// consumer, per lap of the ring.
struct Slot<T> {
    #[cfg(not(loom))]
    cell: std::cell::UnsafeCell<MaybeUninit<T>>,
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<MaybeUninit<T>>,
}

impl<T> Slot<T> {
    fn new() -> Self {
        #[cfg(not(loom))]
        let cell = std::cell::UnsafeCell::new(MaybeUninit::uninit());
        #[cfg(loom)]
        let cell = loom::cell::UnsafeCell::new(MaybeUninit::uninit());
        Slot { cell }
    }

    /// # Safety
    /// The caller has exclusive access to the slot and it holds no value.
    unsafe fn write(&self, v: T) {
        #[cfg(not(loom))]
        // SAFETY: exclusive by the caller's contract.
        unsafe {
            (*self.cell.get()).write(v);
        }
        #[cfg(loom)]
        // SAFETY: exclusive by the caller's contract (loom checks it).
        self.cell.with_mut(|p| unsafe {
            (*p).write(v);
        });
    }

    /// # Safety
    /// The caller has exclusive access to the slot and it holds a value,
    /// which is moved out (the slot holds none afterwards).
    unsafe fn take(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: exclusive and initialised by the caller's contract.
        unsafe {
            (*self.cell.get()).assume_init_read()
        }
        #[cfg(loom)]
        // SAFETY: exclusive and initialised by the caller's contract.
        self.cell.with(|p| unsafe { (*p).assume_init_read() })
    }
}

/// A value alone in its cache line (two, against the adjacent-line
/// prefetcher), as the seed aligns its hot counters: the producers' and
/// consumers' counters must not share a line.
#[repr(align(128))]
struct Padded<T>(T);

/// What one thread has published: the position it holds, or [`NONE`].
/// A producer uses `head`, a consumer `tail` (as in the seed, one record
/// per thread index serves a producer and a consumer of that index, so
/// producer i and consumer i write one line; records of their own lines
/// made no difference we could see through this machine's noise).
struct ThreadPos {
    head: AtomicU64,
    tail: AtomicU64,
}

/// A bounded MPMC queue of `2^k` slots for a fixed number of producers
/// and consumers, used through handles ([`Producer`], [`Consumer`]) that
/// each own a published position. `push` and `pop` block (spinning, then
/// yielding) while the queue is full or empty, as the seed's do.
pub struct NatsysQueue<T> {
    head: Padded<AtomicU64>,
    tail: Padded<AtomicU64>,
    /// The consumers' cached bound: every position below it has been written.
    last_head: Padded<AtomicU64>,
    /// The producers' cached bound: every position below it has been read.
    last_tail: Padded<AtomicU64>,
    threads: Box<[Padded<ThreadPos>]>,
    producers: usize,
    consumers: usize,
    mask: u64,
    slots: Box<[Slot<T>]>,
}

// SAFETY: values of T are moved from a producer's thread to a consumer's
// (so T: Send); the slots are shared but every access to one is made
// exclusive by the position protocol (see `push` and `pop`).
unsafe impl<T: Send> Sync for NatsysQueue<T> {}
// SAFETY: as above; the queue owns the values still in it.
unsafe impl<T: Send> Send for NatsysQueue<T> {}

/// Spin-wait politely: the seed pauses (`_mm_pause`) and retries. On a
/// machine with fewer cores than threads the holder of the position we
/// wait for may be descheduled, so after a few pauses we give up the CPU.
// Under loom the count is unused: every wait yields.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Default)]
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        {
            // Loom explores spin loops only if they yield.
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        {
            if self.0 < 64 {
                std::hint::spin_loop();
                self.0 += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl<T: Send> NatsysQueue<T> {
    /// A queue of at least `capacity` slots (rounded up to a power of two)
    /// and its handles. Each handle is the only holder of its position
    /// record, which is what the protocol needs; hence no `Clone`.
    pub fn with_handles(capacity: usize, producers: usize, consumers: usize) -> (Vec<Producer<T>>, Vec<Consumer<T>>) {
        assert!(producers >= 1 && consumers >= 1, "a queue needs a producer and a consumer");
        let cap = capacity.max(1).next_power_of_two();
        let threads = (0..producers.max(consumers))
            .map(|_| Padded(ThreadPos { head: AtomicU64::new(NONE), tail: AtomicU64::new(NONE) }))
            .collect();
        let inner = Arc::new(NatsysQueue {
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            last_head: Padded(AtomicU64::new(0)),
            last_tail: Padded(AtomicU64::new(0)),
            threads,
            producers,
            consumers,
            mask: cap as u64 - 1,
            slots: (0..cap).map(|_| Slot::new()).collect(),
        });
        let p = (0..producers).map(|id| Producer { q: Arc::clone(&inner), id }).collect();
        let c = (0..consumers).map(|id| Consumer { q: Arc::clone(&inner), id }).collect();
        (p, c)
    }
}

/// One producer's end of a [`NatsysQueue`].
pub struct Producer<T> {
    q: Arc<NatsysQueue<T>>,
    id: usize,
}

/// One consumer's end of a [`NatsysQueue`].
pub struct Consumer<T> {
    q: Arc<NatsysQueue<T>>,
    id: usize,
}

impl<T> Producer<T> {
    pub fn capacity(&self) -> usize {
        self.q.slots.len()
    }

    /// Appends `v`, waiting while the queue is full.
    pub fn push(&mut self, v: T) {
        let q = &*self.q;
        let me = &q.threads[self.id].0.head;
        // Publish a position no greater than the one about to be taken,
        // before taking it. Without this a consumer could read `head` after
        // our increment but our record before it (still NONE) and take our
        // unwritten slot as ready. `approx` <= the fetch_add's result:
        // both read `head`, in this order, and `head` only grows.
        //
        // Orderings: the store is Release because it also publishes, to a
        // consumer that acquires it, the slot this thread wrote in its
        // previous push (sequenced before; NONE was stored after the write
        // but a consumer may see this later value instead). The fetch_add is
        // Release so that a consumer whose Acquire load of `head` reads our
        // increment, or any later one (they continue the release sequence:
        // every write to `head` is an RMW), is guaranteed to see `approx`,
        // or something later, in our record. The load of `head` needs no
        // ordering: any value it returns is only a lower bound.
        let approx = q.head.0.load(Ordering::Relaxed);
        me.store(approx, Ordering::Release);
        let pos = q.head.0.fetch_add(1, Ordering::Release);
        // Release: it publishes the slots of our earlier pushes, as above.
        me.store(pos, Ordering::Release);

        // Wait until every consumer is past `pos - capacity`: the slot's
        // previous value has been read. Acquire pairs with the Release
        // store of whichever producer computed `last_tail`, which acquired
        // the consumers' records: so their reads of the slot happen before
        // our write.
        let cap = q.slots.len() as u64;
        let mut backoff = Backoff::default();
        while pos >= q.last_tail.0.load(Ordering::Acquire).saturating_add(cap) {
            // The slow path: recompute the bound. `tail` first, then every
            // consumer's record, all Acquire (see `pop` for why `tail`
            // bounds the consumers that hold no published position yet).
            let mut min = q.tail.0.load(Ordering::Acquire);
            for t in q.threads.iter().take(q.consumers) {
                min = min.min(t.0.tail.load(Ordering::Acquire));
            }
            // Several threads may store here in any order, so the value can
            // go down again; any value stored was a true bound when it was
            // computed, and bounds only grow, so a stale one is only
            // conservative.
            q.last_tail.0.store(min, Ordering::Release);
            if pos < min.saturating_add(cap) {
                break;
            }
            backoff.snooze();
        }
        // SAFETY: position `pos` is ours alone (fetch_add hands each
        // position out once); every consumer of position `pos - cap` has
        // finished reading its slot (happens before, via last_tail) and no
        // consumer reads position `pos` before we publish past it.
        unsafe { q.slots[(pos & q.mask) as usize].write(v) };
        // Release: a consumer that acquires NONE (or a later value) sees
        // the slot written.
        me.store(NONE, Ordering::Release);
    }
}

impl<T> Consumer<T> {
    /// Takes the oldest value, waiting while the queue is empty.
    pub fn pop(&mut self) -> T {
        let q = &*self.q;
        let me = &q.threads[self.id].0.tail;
        // The mirror image of `push`: publish a lower bound of the position
        // about to be taken, then take it. A producer that reads `tail`
        // past our increment then sees `approx` or later in our record, so
        // it cannot overwrite the slot we are about to read. Release on
        // both stores: they also publish, to producers, our reads of the
        // slots of earlier pops.
        let approx = q.tail.0.load(Ordering::Relaxed);
        me.store(approx, Ordering::Release);
        let pos = q.tail.0.fetch_add(1, Ordering::Release);
        me.store(pos, Ordering::Release);

        // Wait until every producer is past `pos`: its slot is written.
        let mut backoff = Backoff::default();
        while pos >= q.last_head.0.load(Ordering::Acquire) {
            // `head` first: every producer whose increment precedes the
            // value read has published a bound of its position before it
            // (Release fetch_add, Acquire load), so the minimum below
            // covers it; positions at or above `head` are excluded anyway.
            let mut min = q.head.0.load(Ordering::Acquire);
            for t in q.threads.iter().take(q.producers) {
                min = min.min(t.0.head.load(Ordering::Acquire));
            }
            q.last_head.0.store(min, Ordering::Release);
            if pos < min {
                break;
            }
            backoff.snooze();
        }
        // SAFETY: position `pos` is ours alone; its producer has written
        // the slot (happens before, via last_head), and no producer writes
        // it again before we publish past `pos` (it waits on last_tail).
        let v = unsafe { q.slots[(pos & q.mask) as usize].take() };
        // Release: a producer that acquires NONE (or a later value) sees
        // our read done before it overwrites the slot.
        me.store(NONE, Ordering::Release);
        v
    }
}

impl<T> Drop for NatsysQueue<T> {
    fn drop(&mut self) {
        // Every handle is gone, so every push and pop returned: the
        // positions `tail..head` hold written, unread values.
        let (tail, head) = (self.tail.0.load(Ordering::Relaxed), self.head.0.load(Ordering::Relaxed));
        for pos in tail..head {
            // SAFETY: `&mut self`: no other access; written and unread (above).
            drop(unsafe { self.slots[(pos & self.mask) as usize].take() });
        }
    }
}

#[cfg(not(loom))]
pub mod bench;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs `producers` x `consumers` threads over a queue of `capacity`,
    /// each producer sending `items` (id, seq) pairs, every thread yielding
    /// at random; returns what each consumer received, in order.
    fn deliver(
        producers: usize,
        consumers: usize,
        capacity: usize,
        items: usize,
        seed: u64,
    ) -> Vec<Vec<(usize, usize)>> {
        let (ps, cs) = NatsysQueue::<(usize, usize)>::with_handles(capacity, producers, consumers);
        let total = producers * items;
        // Consumers split the total; the first takes the remainder.
        let quota = |c: usize| total / consumers + if c == 0 { total % consumers } else { 0 };
        std::thread::scope(|s| {
            for (id, mut p) in ps.into_iter().enumerate() {
                s.spawn(move || {
                    let mut rng = crate::ring::Rng::new(seed ^ id as u64);
                    for seq in 0..items {
                        if rng.next_u64().is_multiple_of(8) {
                            std::thread::yield_now();
                        }
                        p.push((id, seq));
                    }
                });
            }
            let hs: Vec<_> = cs
                .into_iter()
                .enumerate()
                .map(|(c, mut q)| {
                    s.spawn(move || {
                        let mut rng = crate::ring::Rng::new(seed.wrapping_mul(31) ^ c as u64);
                        (0..quota(c))
                            .map(|_| {
                                if rng.next_u64().is_multiple_of(8) {
                                    std::thread::yield_now();
                                }
                                q.pop()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn every_item_is_delivered_exactly_once_in_producer_order(
            producers in 1usize..5, consumers in 1usize..5, cap_log in 0u32..6, items in 0usize..400, seed: u64,
        ) {
            let got = deliver(producers, consumers, 1 << cap_log, items, seed);
            let mut seen = vec![vec![false; items]; producers];
            for per_consumer in &got {
                // FIFO: one consumer sees each producer's items in order.
                let mut last = vec![None; producers];
                for &(p, seq) in per_consumer {
                    prop_assert!(!seen[p][seq], "({p}, {seq}) delivered twice");
                    seen[p][seq] = true;
                    prop_assert!(last[p].is_none_or(|l| l < seq), "({p}, {seq}) out of order");
                    last[p] = Some(seq);
                }
            }
            prop_assert!(seen.iter().flatten().all(|&x| x), "an item was lost");
        }
    }

    #[test]
    fn values_left_in_the_queue_are_dropped() {
        let v = Arc::new(());
        let (mut ps, mut cs) = NatsysQueue::with_handles(4, 1, 1);
        for _ in 0..3 {
            ps[0].push(Arc::clone(&v));
        }
        drop(cs[0].pop());
        assert_eq!(Arc::strong_count(&v), 3);
        drop((ps, cs));
        assert_eq!(Arc::strong_count(&v), 1);
    }
}
