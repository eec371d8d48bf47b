//! Rule snapshots published atomically, picked up by workers between batches.
//!
//! The scheme is a generation counter beside a mutex-protected `Arc`:
//! publishing swaps the `Arc` under the mutex and then bumps the counter;
//! a worker, between batches, loads the counter (one atomic load of a line
//! that is only written on publish) and only when it changed takes the mutex
//! to clone the new `Arc`. Per packet there is nothing at all; per batch one
//! load; per publish one short lock per worker. An old snapshot is freed when
//! the last worker holding it moves on (the `Arc` count), so there is no
//! reclamation scheme to get wrong.
//!
//! Chosen over arc-swap, whose `Guard` has an open report of observing a
//! freed-and-reused value on 1.9.x (vorner/arc-swap #210, after #156/#164),
//! and over crossbeam-epoch, whose deferred reclamation buys nothing when
//! readers only switch between batches. Both of those make the per-load path
//! wait-free; here the per-batch path is one uncontended load, which the
//! benchmark (`bench classify --sync snapshot|arcswap|rwlock|none`) measures
//! beside arc-swap, a read lock, and no protection at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A value with the generation it was published as.
#[derive(Debug)]
pub struct Snapshot<T> {
    pub generation: u64,
    pub value: T,
}

/// Keeps the generation counter on its own cache line, away from the mutex
/// that publishers write.
#[repr(align(64))]
struct PaddedGeneration(AtomicU64);

/// The publishing side: holds the current snapshot.
pub struct Published<T> {
    generation: PaddedGeneration,
    current: Mutex<Arc<Snapshot<T>>>,
}

impl<T> Published<T> {
    pub fn new(value: T) -> Self {
        Published {
            generation: PaddedGeneration(AtomicU64::new(0)),
            current: Mutex::new(Arc::new(Snapshot { generation: 0, value })),
        }
    }

    /// Make `value` the current snapshot; returns its generation. Workers
    /// pick it up at their next batch boundary.
    pub fn publish(&self, value: T) -> u64 {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = cur.generation + 1;
        *cur = Arc::new(Snapshot { generation, value });
        // Release: a worker that sees the new number finds the new Arc.
        self.generation.0.store(generation, Ordering::Release);
        generation
    }

    /// The current snapshot (takes the lock; for control-plane use).
    pub fn load(&self) -> Arc<Snapshot<T>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A worker's handle.
    pub fn reader(self: &Arc<Self>) -> Reader<T> {
        let cached = self.load();
        Reader { published: Arc::clone(self), generation: cached.generation, cached }
    }
}

/// A worker's view: the snapshot it is using until its next batch boundary.
pub struct Reader<T> {
    published: Arc<Published<T>>,
    generation: u64,
    cached: Arc<Snapshot<T>>,
}

impl<T> Reader<T> {
    /// Call between batches: switch to the newest snapshot if there is one.
    /// One atomic load when nothing changed.
    #[inline]
    pub fn refresh(&mut self) -> &Snapshot<T> {
        if self.published.generation.0.load(Ordering::Acquire) != self.generation {
            self.cached = self.published.load();
            self.generation = self.cached.generation;
        }
        &self.cached
    }

    /// The snapshot in use (no check for a newer one).
    #[inline]
    pub fn current(&self) -> &Snapshot<T> {
        &self.cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts live values to prove old snapshots are freed.
    struct Counted(Arc<AtomicUsize>, u64);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn readers_switch_between_batches_and_old_snapshots_are_freed() {
        let live = Arc::new(AtomicUsize::new(1));
        let p = Arc::new(Published::new(Counted(live.clone(), 0)));
        let mut r = p.reader();
        assert_eq!(r.refresh().generation, 0);
        live.fetch_add(1, Ordering::SeqCst);
        assert_eq!(p.publish(Counted(live.clone(), 1)), 1);
        assert_eq!(r.current().generation, 0, "no switch inside a batch");
        assert_eq!(live.load(Ordering::SeqCst), 2, "the reader still holds generation 0");
        assert_eq!(r.refresh().generation, 1);
        assert_eq!(r.refresh().value.1, 1);
        assert_eq!(live.load(Ordering::SeqCst), 1, "generation 0 freed once no one holds it");
        drop(r);
        drop(p);
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}
