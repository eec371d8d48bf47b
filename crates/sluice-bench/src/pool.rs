//! `Pool`: a region allocator in the style of Tempesta's TfwPool (the
//! seed's "Fast Memory Pool Allocators" post).
//!
//! - Memory comes in chunks of 4 KiB pages (4 KiB << order, page aligned),
//!   taken from a per-thread cache of free chunks before the system
//!   allocator: TfwPool's own per-CPU page cache, which is what made
//!   create-and-destroy cheap in the kernel.
//! - Chunks are chained through a 16-byte header at their start; each new
//!   chunk is twice the last up to 256 KiB (boost::pool's exponential
//!   growth, which the seed credits for boost's Small figure).
//! - Allocation bumps an offset. The last allocation can be freed (stack
//!   like: TfwPool's alloc/use/free and grow-in-place cases).
//! - Big allocations (2 KiB and up, or too large for the biggest chunk) get
//!   chunks of their own, chained apart, so the current chunk keeps filling.
//! - Dropping or resetting the pool gives every chunk back at once.
//!
//! The API is safe: allocations borrow the pool, so `free_last` and `reset`
//! (which take `&mut self`) cannot run while any allocation is in use. The
//! pool never runs destructors, so typed allocations are `Copy` types only.
//! The unsafe code (raw chunk memory) is all in this module.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

pub const PAGE: usize = 4096;
/// Chunk header: the previous chunk in the chain and this chunk's order.
const HEAD: usize = 16;
/// Growth stops at 4 KiB << 6 = 256 KiB.
pub const MAX_ORDER: u32 = 6;
/// Allocations this big get a chunk of their own.
pub const BIG: usize = PAGE / 2;
/// The per-thread cache keeps at most this many bytes of free chunks; the
/// rest goes back to the system allocator.
pub const CACHE_BYTES: usize = 16 << 20;

struct Cache {
    free: [Vec<NonNull<u8>>; MAX_ORDER as usize + 1],
    bytes: usize,
}

impl Drop for Cache {
    fn drop(&mut self) {
        for (order, list) in self.free.iter_mut().enumerate() {
            for p in list.drain(..) {
                // SAFETY: cached chunks came from `sys_alloc(order)` and are
                // owned by the cache alone.
                unsafe { std::alloc::dealloc(p.as_ptr(), chunk_layout(order as u32)) };
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { free: [const { Vec::new() }; MAX_ORDER as usize + 1], bytes: 0 }) };
}

fn chunk_layout(order: u32) -> Layout {
    Layout::from_size_align(PAGE << order, PAGE).expect("chunk sizes are small powers of two")
}

fn chunk_get(order: u32) -> NonNull<u8> {
    if order <= MAX_ORDER {
        let cached = CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let p = c.free[order as usize].pop();
            if p.is_some() {
                c.bytes -= PAGE << order;
            }
            p
        });
        if let Some(p) = cached {
            return p;
        }
    }
    let layout = chunk_layout(order);
    // SAFETY: the layout's size is at least one page.
    let p = unsafe { std::alloc::alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// Gives a chunk back: to this thread's cache if it fits, else to the system.
///
/// # Safety
///
/// The caller must own `p`, allocated by `chunk_get(order)`, and never use it again.
unsafe fn chunk_put(p: NonNull<u8>, order: u32) {
    let kept = order <= MAX_ORDER
        && CACHE
            .try_with(|c| {
                let mut c = c.borrow_mut();
                if c.bytes + (PAGE << order) > CACHE_BYTES {
                    return false;
                }
                c.bytes += PAGE << order;
                c.free[order as usize].push(p);
                true
            })
            .unwrap_or(false);
    if !kept {
        // SAFETY: per this function's contract.
        unsafe { std::alloc::dealloc(p.as_ptr(), chunk_layout(order)) };
    }
}

/// The smallest order whose chunk holds `bytes`.
fn order_for(bytes: usize) -> u32 {
    bytes.div_ceil(PAGE).next_power_of_two().trailing_zeros()
}

/// Writes a chunk's header: the previous chunk and this one's order.
///
/// # Safety
///
/// `chunk` is the start of a live chunk of at least HEAD bytes, page
/// aligned, owned by the pool.
unsafe fn header_write(chunk: NonNull<u8>, prev: *mut u8, order: u32) {
    let h = chunk.as_ptr().cast::<usize>();
    // SAFETY: per the contract above; page alignment covers usize alignment.
    unsafe {
        h.write(prev as usize);
        h.add(1).write(order as usize);
    }
}

/// Reads what [`header_write`] wrote.
///
/// # Safety
///
/// As for [`header_write`], and the header was written by it.
unsafe fn header_read(chunk: NonNull<u8>) -> (*mut u8, u32) {
    let h = chunk.as_ptr().cast::<usize>();
    // SAFETY: per the contract above; the header was written by header_write.
    unsafe { (h.read() as *mut u8, h.add(1).read() as u32) }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Last {
    None,
    /// The last allocation was bumped in the current chunk; undoing it
    /// sets the offset back to this.
    Bump {
        prev_off: usize,
    },
    /// The last allocation is the newest chunk of the big chain.
    Big,
}

/// A region allocator; see the module documentation.
pub struct Pool {
    /// Current chunk (null before the first allocation); its header links
    /// to the previous, full ones.
    cur: Cell<*mut u8>,
    order: Cell<u32>,
    /// First free byte of the current chunk.
    off: Cell<usize>,
    /// Newest chunk of the big-allocation chain (null when none).
    big: Cell<*mut u8>,
    last: Cell<Last>,
    /// Not Send or Sync: chunks go back to the creating thread's cache.
    _local: PhantomData<*mut u8>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new()
    }
}

// Allocations hand out `&mut` from `&self` as bumpalo does: each is a
// disjoint range no other allocation overlaps, and memory is reused only
// through `&mut self` (free_last, reset, drop), which ends every borrow.
#[allow(clippy::mut_from_ref)]
impl Pool {
    /// An empty pool; the first allocation takes a page.
    pub const fn new() -> Pool {
        Pool {
            cur: Cell::new(std::ptr::null_mut()),
            order: Cell::new(0),
            off: Cell::new(0),
            big: Cell::new(std::ptr::null_mut()),
            last: Cell::new(Last::None),
            _local: PhantomData,
        }
    }

    /// `size` bytes aligned to `align` (a power of two up to 4096), not
    /// initialised. Panics on a bad alignment.
    #[inline]
    pub fn alloc_uninit(&self, size: usize, align: usize) -> &mut [MaybeUninit<u8>] {
        let p = self.alloc_raw(size, align);
        // SAFETY: `alloc_raw` returned `size` bytes inside a live chunk that
        // no other allocation overlaps; they stay valid until `free_last`,
        // `reset` or drop, all of which need `&mut self`, i.e. the end of
        // this borrow. MaybeUninit needs no initialisation.
        unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<MaybeUninit<u8>>(), size) }
    }

    /// `size` zeroed bytes aligned to `align`.
    pub fn alloc_zeroed(&self, size: usize, align: usize) -> &mut [u8] {
        let s = self.alloc_uninit(size, align);
        s.fill(MaybeUninit::new(0));
        // SAFETY: every byte was just initialised.
        unsafe { &mut *(s as *mut [MaybeUninit<u8>] as *mut [u8]) }
    }

    /// A copy of `src`.
    pub fn alloc_copy(&self, src: &[u8]) -> &mut [u8] {
        let s = self.alloc_uninit(src.len(), 1);
        for (d, &b) in s.iter_mut().zip(src) {
            d.write(b);
        }
        // SAFETY: every byte was just initialised from `src`.
        unsafe { &mut *(s as *mut [MaybeUninit<u8>] as *mut [u8]) }
    }

    /// `n` copies of `fill`, aligned for `T`.
    pub fn alloc_slice<T: Copy>(&self, n: usize, fill: T) -> &mut [T] {
        let size = std::mem::size_of::<T>().checked_mul(n).expect("allocation size overflows");
        let p = self.alloc_raw(size, std::mem::align_of::<T>()).as_ptr().cast::<T>();
        for i in 0..n {
            // SAFETY: `p` is aligned for T with room for n of them (above).
            unsafe { p.add(i).write(fill) };
        }
        // SAFETY: initialised above; valid for the borrow as in alloc_uninit.
        unsafe { std::slice::from_raw_parts_mut(p, n) }
    }

    /// One `T`.
    pub fn alloc_value<T: Copy>(&self, v: T) -> &mut T {
        &mut self.alloc_slice(1, v)[0]
    }

    fn alloc_raw(&self, size: usize, align: usize) -> NonNull<u8> {
        assert!(align.is_power_of_two() && align <= PAGE, "alignment {align} is not a power of two up to {PAGE}");
        let cur = self.cur.get();
        if let Some(chunk) = NonNull::new(cur) {
            let start = self.off.get().next_multiple_of(align);
            let cap = PAGE << self.order.get();
            if start <= cap && size <= cap - start {
                self.last.set(Last::Bump { prev_off: self.off.get() });
                self.off.set(start + size);
                // SAFETY: start + size is within the current chunk (checked).
                return unsafe { chunk.add(start) };
            }
        }
        self.alloc_slow(size, align)
    }

    #[cold]
    fn alloc_slow(&self, size: usize, align: usize) -> NonNull<u8> {
        let start = HEAD.next_multiple_of(align);
        let need = start.checked_add(size).expect("allocation size overflows");
        if size >= BIG || need > PAGE << MAX_ORDER {
            let order = order_for(need);
            let chunk = chunk_get(order);
            // SAFETY: a fresh chunk of at least `need` >= HEAD bytes.
            unsafe { header_write(chunk, self.big.get(), order) };
            self.big.set(chunk.as_ptr());
            self.last.set(Last::Big);
            // SAFETY: start + size <= chunk size.
            return unsafe { chunk.add(start) };
        }
        // Exponential growth: twice the current chunk, or what `need` takes.
        let grown = if self.cur.get().is_null() { 0 } else { (self.order.get() + 1).min(MAX_ORDER) };
        let order = grown.max(order_for(need));
        let chunk = chunk_get(order);
        // SAFETY: a fresh chunk of at least HEAD bytes.
        unsafe { header_write(chunk, self.cur.get(), order) };
        self.cur.set(chunk.as_ptr());
        self.order.set(order);
        self.off.set(start + size);
        self.last.set(Last::Bump { prev_off: start });
        // SAFETY: start + size <= chunk size.
        unsafe { chunk.add(start) }
    }

    /// Frees the most recent allocation (one level: a second call without
    /// an allocation in between does nothing). Returns whether it freed.
    pub fn free_last(&mut self) -> bool {
        match self.last.replace(Last::None) {
            Last::None => false,
            Last::Bump { prev_off } => {
                self.off.set(prev_off);
                true
            }
            Last::Big => {
                let Some(chunk) = NonNull::new(self.big.get()) else { return false };
                // SAFETY: `chunk` heads the big chain and is owned by the pool;
                // `&mut self` means nothing borrows its memory.
                let (prev, order) = unsafe { header_read(chunk) };
                self.big.set(prev);
                // SAFETY: unlinked above, never used again.
                unsafe { chunk_put(chunk, order) };
                true
            }
        }
    }

    /// Gives every chunk back (to the cache first) and starts over.
    pub fn reset(&mut self) {
        for head in [self.cur.replace(std::ptr::null_mut()), self.big.replace(std::ptr::null_mut())] {
            let mut p = head;
            while let Some(chunk) = NonNull::new(p) {
                // SAFETY: every chunk in a chain is owned by the pool; nothing
                // borrows them (`&mut self`), and each is released once.
                let (prev, order) = unsafe { header_read(chunk) };
                // SAFETY: as above.
                unsafe { chunk_put(chunk, order) };
                p = prev;
            }
        }
        self.order.set(0);
        self.off.set(0);
        self.last.set(Last::None);
    }

    /// Bytes of chunks the pool holds (for tests and reports).
    pub fn chunk_bytes(&self) -> usize {
        let mut total = 0;
        for head in [self.cur.get(), self.big.get()] {
            let mut p = head;
            while let Some(chunk) = NonNull::new(p) {
                // SAFETY: a chunk of this pool's chains (see reset).
                let (prev, order) = unsafe { header_read(chunk) };
                total += PAGE << order;
                p = prev;
            }
        }
        total
    }

    /// Reads back bytes the caller allocated from this pool, by address.
    ///
    /// # Safety
    /// `[addr, addr + len)` must lie in one live allocation of this pool.
    #[cfg(test)]
    unsafe fn peek(&self, addr: usize, len: usize) -> &[u8] {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Alloc { size: usize, align_log2: u32 },
        FreeLast,
        Reset,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (prop_oneof![0usize..64, 64usize..2100, 2000usize..20_000], 0u32..=12)
                .prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
            2 => Just(Op::FreeLast),
            1 => Just(Op::Reset),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// The model: the live allocations as (address, contents). After
        /// every step no two overlap, each is aligned as asked, and each
        /// still holds the pattern written into its full length.
        #[test]
        fn pool_matches_a_plain_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut pool = Pool::new();
            let mut live: Vec<(usize, usize, Vec<u8>)> = Vec::new(); // addr, align, bytes
            let mut last_freeable = false;
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Alloc { size, align_log2 } => {
                        let align = 1usize << align_log2;
                        let pattern: Vec<u8> = (0..size).map(|i| (i * 31 + step * 7) as u8).collect();
                        let s = pool.alloc_uninit(size, align);
                        prop_assert_eq!(s.len(), size);
                        for (d, &b) in s.iter_mut().zip(&pattern) {
                            d.write(b);
                        }
                        let addr = s.as_ptr() as usize;
                        prop_assert_eq!(addr % align, 0);
                        live.push((addr, align, pattern));
                        last_freeable = true;
                    }
                    Op::FreeLast => {
                        let freed = pool.free_last();
                        prop_assert_eq!(freed, last_freeable);
                        if freed {
                            live.pop();
                        }
                        last_freeable = false;
                    }
                    Op::Reset => {
                        pool.reset();
                        live.clear();
                        last_freeable = false;
                    }
                }
                let mut ranges: Vec<(usize, usize)> =
                    live.iter().filter(|l| !l.2.is_empty()).map(|l| (l.0, l.0 + l.2.len())).collect();
                ranges.sort_unstable();
                for w in ranges.windows(2) {
                    prop_assert!(w[0].1 <= w[1].0, "overlap {:x?}", w);
                }
                for (addr, align, bytes) in &live {
                    prop_assert_eq!(addr % align, 0);
                    // SAFETY: the model says this allocation is live.
                    let got = unsafe { pool.peek(*addr, bytes.len()) };
                    prop_assert_eq!(got, &bytes[..]);
                }
            }
        }
    }

    #[test]
    fn typed_allocations_and_growth() {
        let pool = Pool::new();
        let a = pool.alloc_slice(10, 7u64);
        let b = pool.alloc_value(3u32);
        let c = pool.alloc_copy(b"hello");
        assert_eq!(a, &[7u64; 10]);
        assert_eq!(*b, 3);
        assert_eq!(c, b"hello");
        assert_eq!(a.as_ptr() as usize % 8, 0);
        for _ in 0..10_000 {
            pool.alloc_zeroed(24, 8);
        }
        // 240 KB in 4, 8, 16, ... KiB chunks: far fewer than 60 pages.
        assert!(pool.chunk_bytes() >= 240_000 && pool.chunk_bytes() < 1 << 20, "{}", pool.chunk_bytes());
        let big = pool.alloc_zeroed(8305, 16);
        assert_eq!(big.len(), 8305);
    }

    #[test]
    fn big_allocation_freed_last_goes_back() {
        let mut pool = Pool::new();
        pool.alloc_zeroed(24, 8);
        let before = pool.chunk_bytes();
        pool.alloc_zeroed(8305, 8);
        assert!(pool.chunk_bytes() > before);
        assert!(pool.free_last());
        assert_eq!(pool.chunk_bytes(), before);
        assert!(!pool.free_last());
    }
}
