//! Reading a `BPF_MAP_TYPE_RINGBUF` map from user space, as the kernel's
//! Documentation/bpf/ringbuf.rst lays it out and libbpf's `ringbuf.c`
//! reads it: the consumer position's page mapped read-write (we advance
//! it), the producer position's page and the data area mapped read-only,
//! the data area twice in a row, so a record that wraps around the end is
//! still one contiguous slice.
//!
//! Each record starts with an 8-byte header: its length (bit 31: still
//! being written; bit 30: discarded by the program) and the kernel's page
//! offset; records are rounded up to 8 bytes.

use crate::error::{LiveError, Result, NEEDS_BPF};
use crate::BpfMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: usize = 8;

/// A ring buffer map, mapped for reading.
#[derive(Debug)]
pub struct RingReader {
    /// The consumer position's page (read-write).
    consumer: *mut u8,
    /// The producer position's page, then the data area twice (read-only).
    producer: *mut u8,
    page: usize,
    /// The data area's size (a power of two).
    size: usize,
}

// SAFETY: the mappings are shared memory owned by this value; the kernel
// writes them concurrently, which every access below goes through atomics
// (the positions, the record headers) or reads behind them.
unsafe impl Send for RingReader {}

impl RingReader {
    /// Maps `map`, a [`crate::MapType::RingBuf`] of `size` bytes.
    pub fn new(map: &BpfMap) -> Result<RingReader> {
        let size = map.entries() as usize;
        if map.map_type() != crate::MapType::RingBuf || !size.is_power_of_two() {
            return Err(LiveError::Config("only a ring buffer map of a power of two bytes can be read".into()));
        }
        let page = crate::sys::page_size();
        let fd = map.as_raw_fd();
        let mapping = |len: usize, prot: i32, offset: usize| {
            // SAFETY: a shared mapping of the map's descriptor at the offsets the kernel documents.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, offset as i64) };
            if p == libc::MAP_FAILED {
                Err(LiveError::io("mmap (BPF ring buffer)", NEEDS_BPF, io::Error::last_os_error()))
            } else {
                Ok(p.cast::<u8>())
            }
        };
        let consumer = mapping(page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = match mapping(page + 2 * size, libc::PROT_READ, page) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: unmaps what was just mapped.
                unsafe { libc::munmap(consumer.cast(), page) };
                return Err(e);
            }
        };
        Ok(RingReader { consumer, producer, page, size })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the page starts with the kernel's `unsigned long consumer_pos`, 8-aligned.
        unsafe { &*self.consumer.cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as `consumer_pos`, on the producer's page.
        unsafe { &*self.producer.cast::<AtomicU64>() }
    }

    /// Hands every committed record to `each` (its bytes, without the
    /// header), skipping discarded ones, and frees their room for the
    /// kernel; stops at a record still being written. Returns how many
    /// records `each` saw.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        let mask = (self.size - 1) as u64;
        let mut seen = 0;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        loop {
            let prod = self.producer_pos().load(Ordering::Acquire);
            if cons >= prod {
                return seen;
            }
            while cons < prod {
                let at = self.page + (cons & mask) as usize;
                // SAFETY: `at` is inside the first copy of the data area; the
                // header is 8-aligned (records are rounded to 8).
                let len = unsafe { &*self.producer.add(at).cast::<AtomicU32>() }.load(Ordering::Acquire);
                if len & BUSY != 0 {
                    return seen;
                }
                let data = (len & !(BUSY | DISCARD)) as usize;
                if len & DISCARD == 0 {
                    // SAFETY: the data area is mapped twice, so `data` bytes
                    // (at most the area's size) after the header are mapped.
                    let bytes = unsafe { std::slice::from_raw_parts(self.producer.add(at + HEADER), data) };
                    each(bytes);
                    seen += 1;
                }
                cons += (data + HEADER).next_multiple_of(8) as u64;
                self.consumer_pos().store(cons, Ordering::Release);
            }
        }
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe {
            libc::munmap(self.consumer.cast(), self.page);
            libc::munmap(self.producer.cast(), self.page + 2 * self.size);
        }
    }
}
