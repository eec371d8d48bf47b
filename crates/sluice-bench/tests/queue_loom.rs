//! Model check of `NatsysQueue` with loom: every interleaving (up to a
//! preemption bound) of a small run, with loom's atomics (so the model
//! allows exactly what the memory orderings argued in `queue.rs` allow)
//! and loom's cells (so a slot read that does not happen after its write,
//! or a write that does not happen after the previous lap's read, fails).
//!
//! RUSTFLAGS="--cfg loom" cargo test -p sluice-bench --release --test queue_loom
#![cfg(loom)]

use loom::thread;
use sluice_bench::queue::NatsysQueue;

fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Bugs in algorithms like this one show up within a few preemptions;
    // unbounded exploration of the wait loops does not finish. Every pass
    // of a wait loop is a handful of loads loom may branch on, hence more
    // branches than loom's default.
    // LOOM_MAX_PREEMPTIONS, when set, wins (a deeper search by hand).
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b.max_branches = 100_000;
    b.check(f);
}

/// 2 producers, 1 consumer, capacity 2, an item each: the consumer may
/// find the ring empty and wait on either producer, whose positions it
/// must take in order.
#[test]
fn two_producers_one_consumer() {
    model(2, || {
        let (mut ps, mut cs) = NatsysQueue::<(usize, usize)>::with_handles(2, 2, 1);
        let mut p1 = ps.pop().unwrap();
        let mut p0 = ps.pop().unwrap();
        let mut c = cs.pop().unwrap();
        let a = thread::spawn(move || p0.push((0, 0)));
        let b = thread::spawn(move || p1.push((1, 0)));
        let mut got = [c.pop(), c.pop()];
        a.join().unwrap();
        b.join().unwrap();
        got.sort();
        assert_eq!(got, [(0, 0), (1, 0)]);
    });
}

/// 1 producer, 1 consumer, capacity 2, 3 items: the third push reuses the
/// first slot, so it must wait until the consumer has read it.
#[test]
fn a_full_ring_waits_for_the_reader() {
    // Both sides may wait here; with two preemptions the search takes
    // minutes, with one a few seconds.
    model(1, || {
        let (mut ps, mut cs) = NatsysQueue::<usize>::with_handles(2, 1, 1);
        let mut p = ps.pop().unwrap();
        let mut c = cs.pop().unwrap();
        let a = thread::spawn(move || {
            for v in [10, 20, 30] {
                p.push(v);
            }
        });
        let got = [c.pop(), c.pop(), c.pop()];
        a.join().unwrap();
        assert_eq!(got, [10, 20, 30]);
    });
}
