//! Large zeroed tables on 2 MiB boundaries, advised for transparent huge pages.
//!
//! A 64 MiB table read at random touches 32,768 4-KiB pages: almost every
//! lookup would also miss the TLB. Backed by 2 MiB pages it is 32 entries.
//! We map anonymous memory, trim it to a 2 MiB-aligned window and
//! `madvise(MADV_HUGEPAGE)`; if the kernel refuses (THP disabled) the table
//! still works on small pages and [`Table::huge_pages`] says so.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

pub const HUGE_PAGE: usize = 2 * 1024 * 1024;
/// Below this a table comes from the global allocator (64-byte aligned).
const MAP_THRESHOLD: usize = HUGE_PAGE / 2;

/// Types for which all-zero bytes are a valid value.
///
/// # Safety
/// Implementors must be plain data: every field an integer or array of them.
pub unsafe trait Zeroable: Copy {}

// SAFETY: arrays of plain data are plain data.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}
// SAFETY: integers are plain data; zero is a valid value.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}
// SAFETY: as above.
unsafe impl Zeroable for u128 {}

/// Compile-time check used by [`plain_data!`].
pub const fn assert_zeroable<T: Zeroable>() {}

/// Declare a `Copy` struct whose fields are all [`Zeroable`], and implement
/// `Zeroable` for it. Keeps the one `unsafe impl` it needs in this module.
macro_rules! plain_data {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($fvis:vis $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        $vis struct $name { $($fvis $field: $ty),* }
        const _: () = { $( $crate::mem::assert_zeroable::<$ty>(); )* };
        // SAFETY: every field is Zeroable (checked just above), so the all-zero
        // bit pattern, padding included, is a valid value of the struct.
        #[allow(unsafe_code)]
        unsafe impl $crate::mem::Zeroable for $name {}
    };
}
pub(crate) use plain_data;

enum Storage {
    Empty,
    Heap(Layout),
    Mapped { base: *mut libc::c_void, len: usize },
}

/// A fixed-length, zero-initialised array of `T`.
pub struct Table<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
    backing: Storage,
    huge: bool,
}

// SAFETY: Table owns its memory exclusively, like Vec<T>.
unsafe impl<T: Zeroable + Send> Send for Table<T> {}
// SAFETY: shared access only hands out &[T].
unsafe impl<T: Zeroable + Sync> Sync for Table<T> {}

impl<T: Zeroable> Table<T> {
    /// `len` zeroed elements. Panics only if the size overflows `usize` or
    /// the allocator itself aborts, as `Vec` would.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len.checked_mul(size_of::<T>()).expect("table size overflows usize");
        if bytes == 0 {
            return Table { ptr: NonNull::dangling(), len: 0, backing: Storage::Empty, huge: false };
        }
        if bytes >= MAP_THRESHOLD {
            if let Some(t) = Self::mapped(len, bytes) {
                return t;
            }
        }
        let layout = Layout::from_size_align(bytes, align_of::<T>().max(64)).expect("table layout");
        // SAFETY: layout has non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p.cast::<T>()) else { alloc::handle_alloc_error(layout) };
        Table { ptr, len, backing: Storage::Heap(layout), huge: false }
    }

    fn mapped(len: usize, bytes: usize) -> Option<Self> {
        let rounded = bytes.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let map_len = rounded + HUGE_PAGE;
        // SAFETY: anonymous private mapping with no address hint; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let start = (base as usize).next_multiple_of(HUGE_PAGE);
        let head = start - base as usize;
        let tail = map_len - head - rounded;
        // SAFETY: both ranges lie inside the mapping just made and are page aligned
        // (mmap returns page-aligned memory; HUGE_PAGE is a multiple of the page size).
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + rounded) as *mut libc::c_void, tail);
            }
        }
        // SAFETY: [start, start + rounded) is our mapping; advice cannot corrupt it.
        let huge = unsafe { libc::madvise(start as *mut libc::c_void, rounded, libc::MADV_HUGEPAGE) } == 0;
        Some(Table {
            ptr: NonNull::new(start as *mut T)?,
            len,
            backing: Storage::Mapped { base: start as *mut libc::c_void, len: rounded },
            huge,
        })
    }

    /// Whether the kernel accepted the huge-page advice.
    pub fn huge_pages(&self) -> bool {
        self.huge
    }

    /// Bytes of memory the table occupies.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// Address of element `i`, for prefetching; never dereferenced here.
    #[inline(always)]
    pub fn addr_of(&self, i: usize) -> *const T {
        self.ptr.as_ptr().wrapping_add(i)
    }
}

impl<T: Zeroable> Deref for Table<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr is valid for len initialised (zeroed) elements, or dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for Table<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Drop for Table<T> {
    fn drop(&mut self) {
        match self.backing {
            Storage::Empty => {}
            // SAFETY: allocated in `zeroed` with this layout.
            Storage::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), layout) },
            // SAFETY: the window we kept in `mapped`.
            Storage::Mapped { base, len } => unsafe {
                libc::munmap(base, len);
            },
        }
    }
}

/// Map `file` read-only with its pages populated up front, so a compiled
/// rule file is verified and loaded straight from the page cache: reading
/// it into a buffer first cost as much as the load itself (a 128 MB
/// allocation to fault in and a copy).
pub fn map_file(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: a private read-only mapping. If another process truncates or
    // rewrites the file while it is mapped, reads may see changed bytes or
    // fault (SIGBUS); the mapping lives only while a compiled file is
    // checked and copied into tables, every byte is covered by the file's
    // checksum and every length is bounds-checked, so changed bytes give an
    // error, never an out-of-bounds read. Replace rule files by rename.
    unsafe { memmap2::MmapOptions::new().populate().map(file) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_tables_are_zeroed_aligned_and_writable() {
        for len in [0usize, 1, 1000, 3 * HUGE_PAGE / 8 + 5] {
            let mut t: Table<u64> = Table::zeroed(len);
            assert_eq!(t.len(), len);
            assert!(t.iter().all(|&x| x == 0));
            if len > 0 {
                assert_eq!(t.as_ptr() as usize % 64, 0);
                t[len - 1] = 7;
                assert_eq!(t[len - 1], 7);
            }
            if t.bytes() >= MAP_THRESHOLD {
                assert_eq!(t.as_ptr() as usize % HUGE_PAGE, 0);
            }
        }
    }
}
