//! Memory-mapping a capture file: the one place this crate uses `unsafe`.
#![allow(unsafe_code)]

use memmap2::{Advice, Mmap, MmapOptions};
use std::fs::File;
use std::io;

/// Map `file` read-only for one front-to-back pass.
pub fn map_file(file: &File) -> io::Result<Mmap> {
    // SAFETY: the mapping is read-only and private to this process. If
    // another process truncates or rewrites the file while it is mapped, the
    // bytes we read may change or the read may fault (SIGBUS); that is the
    // accepted contract of reading a capture by mmap (ripgrep, tcpdump's
    // libpcap readers and Wireshark make the same trade). Every length read
    // from the bytes is still bounds-checked by the reader, so changed bytes
    // can only produce a parse error, never an out-of-bounds read.
    let map = unsafe { MmapOptions::new().map(file)? };
    // Read-ahead for one sequential pass; a failure only costs speed.
    let _ = map.advise(Advice::Sequential);
    Ok(map)
}

/// Ask the CPU to start loading the cache line at `bytes[at]` (no effect
/// past the end). Reading a capture hops from record header to record
/// header, each found only by reading the one before: left alone, that is
/// one dependent DRAM miss per record. Prefetching the lines ahead of the
/// reader turns the hops into hits.
#[inline]
pub fn prefetch(bytes: &[u8], at: usize) {
    if let Some(b) = bytes.get(at) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint; it never faults and the pointer is
        // to a byte inside `bytes` anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>((b as *const u8).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = b;
    }
}
