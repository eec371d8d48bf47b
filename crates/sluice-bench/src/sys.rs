//! The FFI the memory experiments need, in one place so the rest of the
//! crate stays safe: `posix_memalign`/`free` (libc), `GlobalAlloc` calls on
//! the Rust global allocator and on mimalloc (used directly, not installed),
//! a bump allocation in bumpalo that is written without building a
//! reference to uninitialised memory, and `perf_event_open` with the `read`
//! and `ioctl` calls around it. Each wrapper owns what it hands out, so a
//! caller cannot free twice or read what it did not allocate.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// Where a [`Heap`] gets its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// libc's `posix_memalign` and `free` (glibc here).
    Libc,
    /// `std::alloc::alloc` with the layout: the global allocator, which is
    /// the system allocator in this binary (what `Box` and `Vec` use).
    Rust,
    /// mimalloc through its `MiMalloc` type's `GlobalAlloc` methods.
    Mimalloc,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Libc => "libc",
            Backend::Rust => "rust",
            Backend::Mimalloc => "mimalloc",
        }
    }
}

/// Allocations from one backend, all of one caller, freed when dropped (or
/// one by one, newest first). Stores the pointer and layout of each live
/// allocation, which is the bookkeeping a per-object allocator needs anyway
/// to free at the end.
pub struct Heap {
    backend: Backend,
    live: Vec<(NonNull<u8>, Layout)>,
}

impl Heap {
    pub fn with_capacity(backend: Backend, n: usize) -> Heap {
        Heap { backend, live: Vec::with_capacity(n) }
    }

    /// Allocates `layout`, writes its first bytes (the seed's `touch_obj`:
    /// one 8-byte store, or the whole object if smaller) and keeps it.
    /// Returns the address, for `black_box`; panics when out of memory.
    #[inline]
    pub fn alloc_touch(&mut self, layout: Layout) -> usize {
        assert!(layout.size() > 0, "zero-size allocations are not measured");
        let p = match self.backend {
            Backend::Libc => {
                let mut out: *mut libc::c_void = std::ptr::null_mut();
                // posix_memalign wants at least pointer alignment.
                let align = layout.align().max(std::mem::size_of::<usize>());
                // SAFETY: `out` is a valid out-pointer; a bad alignment is
                // reported as EINVAL, not undefined behaviour.
                let rc = unsafe { libc::posix_memalign(&mut out, align, layout.size()) };
                if rc != 0 {
                    std::ptr::null_mut()
                } else {
                    out.cast::<u8>()
                }
            }
            // SAFETY: the layout has a non-zero size (asserted above).
            Backend::Rust => unsafe { std::alloc::alloc(layout) },
            // SAFETY: as above.
            Backend::Mimalloc => unsafe { mimalloc::MiMalloc.alloc(layout) },
        };
        let Some(p) = NonNull::new(p) else { std::alloc::handle_alloc_error(layout) };
        touch(p, layout.size());
        self.live.push((p, layout));
        p.as_ptr() as usize
    }

    /// Frees the newest live allocation, if any.
    #[inline]
    pub fn free_last(&mut self) {
        if let Some((p, layout)) = self.live.pop() {
            self.release(p, layout);
        }
    }

    #[inline]
    fn release(&self, p: NonNull<u8>, layout: Layout) {
        match self.backend {
            // SAFETY: `p` came from posix_memalign in `alloc_touch` and was
            // removed from `live`, so it is freed exactly once.
            Backend::Libc => unsafe { libc::free(p.as_ptr().cast()) },
            // SAFETY: `p` came from `std::alloc::alloc(layout)` and is freed once.
            Backend::Rust => unsafe { std::alloc::dealloc(p.as_ptr(), layout) },
            // SAFETY: `p` came from `MiMalloc.alloc(layout)` and is freed once.
            Backend::Mimalloc => unsafe { mimalloc::MiMalloc.dealloc(p.as_ptr(), layout) },
        }
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        while let Some((p, layout)) = self.live.pop() {
            self.release(p, layout);
        }
    }
}

/// One 8-byte store at the start of a fresh allocation (bytes if smaller).
#[inline]
fn touch(p: NonNull<u8>, size: usize) {
    if size >= 8 {
        // SAFETY: `p` points to at least 8 writable bytes just allocated;
        // write_unaligned needs no alignment.
        unsafe { p.as_ptr().cast::<u64>().write_unaligned(1) };
    } else {
        // SAFETY: `p` points to `size` writable bytes just allocated.
        unsafe { p.as_ptr().write_bytes(1, size) };
    }
}

/// Allocates `layout` in `bump` and touches it like [`Heap::alloc_touch`].
/// bumpalo frees everything when the `Bump` is reset or dropped.
#[inline]
pub fn bump_alloc_touch(bump: &bumpalo::Bump, layout: Layout) -> usize {
    let p = bump.alloc_layout(layout);
    touch(p, layout.size());
    p.as_ptr() as usize
}

// ---- perf_event_open ----

/// `perf_event_attr` as 16 words: the fields this crate sets all live in
/// the first 64 bytes (PERF_ATTR_SIZE_VER0), the rest stay zero.
pub type PerfAttr = [u64; 16];
const PERF_ATTR_SIZE_VER0: u64 = 64;

/// Builds the attribute: `type_`, `config`, counting (no sampling), starts
/// disabled, inherited by threads created later, reads with the enabled and
/// running times (to scale multiplexed counts).
pub fn perf_attr(type_: u32, config: u64, exclude_kernel: bool) -> PerfAttr {
    let mut a = [0u64; 16];
    a[0] = u64::from(type_) | (PERF_ATTR_SIZE_VER0 << 32);
    a[1] = config;
    // read_format: TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING.
    a[4] = 1 | 2;
    // flags: disabled (bit 0), inherit (bit 1), exclude_kernel (bit 5), exclude_hv (bit 6).
    a[5] = 1 | 2 | if exclude_kernel { (1 << 5) | (1 << 6) } else { 0 };
    a
}

/// Opens one counter for this process's calling thread (and threads it
/// creates afterwards) on any CPU.
pub fn perf_event_open(attr: &PerfAttr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` points to 128 readable bytes, more than the size it
    // declares; pid 0 / cpu -1 / group -1 / flags 0 are plain integers.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            0 as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;

fn ioctl(fd: &OwnedFd, req: libc::c_ulong) -> io::Result<()> {
    // SAFETY: a perf event descriptor we own; these requests take no argument.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn perf_reset(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PERF_EVENT_IOC_RESET)
}

pub fn perf_enable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PERF_EVENT_IOC_ENABLE)
}

pub fn perf_disable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, PERF_EVENT_IOC_DISABLE)
}

/// The raw count: value, time enabled, time running. Counts of inherited
/// threads and processes that have exited are included (the kernel adds
/// them to the value; `PERF_EVENT_IOC_RESET` does not clear them, so a
/// region's count is the difference of two reads).
pub fn perf_read(fd: &OwnedFd) -> io::Result<[u64; 3]> {
    let mut v = [0u64; 3];
    // SAFETY: `v` is 24 writable bytes, the size of this read format.
    let n = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), std::mem::size_of_val(&v)) };
    if n != std::mem::size_of_val(&v) as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}
