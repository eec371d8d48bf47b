//! AF_XDP sockets over one shared UMEM.
//!
//! A [`Umem`] is a page-aligned area of `frames x frame_size` bytes (a
//! power of two, or any size in unaligned chunk mode)
//! registered with the kernel (`XDP_UMEM_REG`) on a first AF_XDP socket.
//! [`XskSocket::bind`] binds one socket per (interface, queue): the first
//! one reuses the UMEM's socket, every later one is a new socket bound with
//! `XDP_SHARED_UMEM` and its own fill and completion rings (required when
//! sharing across devices or queues, Linux 5.10+). Every socket therefore
//! has four rings: fill and TX (we produce), RX and completion (we consume).
//!
//! Because all sockets address the same memory, a frame received on port A
//! is forwarded by putting *its address* on port B's TX ring, without a
//! copy; when B's completion ring hands it back it goes to a [`FramePool`]
//! and from there to any fill ring. A dropped frame's address goes straight
//! back to a fill ring.
//!
//! Ring protocol (the kernel side uses `smp_load_acquire` /
//! `smp_store_release` on the same words): the producer writes the
//! descriptors first and publishes the producer index last, with a release
//! store; the consumer reads the producer index with an acquire load, reads
//! the descriptors, and releases them by a release store of the consumer
//! index. Both sides cache the other side's index and reload it only when
//! the cached value says the ring is full (producer) or empty (consumer).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{LiveError, Result, NEEDS_XSK};
use crate::sys::{self, Mmap};

/// One RX or TX descriptor (`struct xdp_desc`): where a frame is in the
/// UMEM and how long it is.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Desc {
    /// Byte address in the UMEM (chunk start plus the data offset).
    pub addr: u64,
    /// Frame length in bytes.
    pub len: u32,
    /// `XDP_PKT_CONTD` etc.; 0 for single-buffer frames.
    pub options: u32,
}

const _: () = assert!(std::mem::size_of::<Desc>() == std::mem::size_of::<libc::xdp_desc>());

/// How the socket moves frames between the driver and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The kernel copies frames (works with every driver; veth has only this).
    Copy,
    /// The NIC DMAs into the UMEM; fails when the driver cannot.
    ZeroCopy,
    /// Zero-copy if the driver has it, else copy.
    Auto,
}

/// Ring sizes and bind options of one socket. Sizes are powers of two.
#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// RX ring entries.
    pub rx_size: u32,
    /// TX ring entries.
    pub tx_size: u32,
    /// Fill ring entries.
    pub fill_size: u32,
    /// Completion ring entries.
    pub comp_size: u32,
    /// Copy or zero-copy. Ignored by every socket but the UMEM's first:
    /// sockets sharing a UMEM inherit its mode (the kernel decides).
    pub mode: BindMode,
    /// `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a syscall, so
    /// a busy loop makes none otherwise. Inherited like `mode`.
    pub need_wakeup: bool,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx_size: 2048,
            tx_size: 2048,
            fill_size: 2048,
            comp_size: 2048,
            mode: BindMode::Auto,
            need_wakeup: true,
        }
    }
}

struct UmemInner {
    area: Mmap,
    /// Bytes from one frame to the next (`--frame-size`).
    frame_size: u32,
    frames: u32,
    /// Registered in unaligned chunk mode: frames at any stride, and RX
    /// addresses carry their data offset in the top 16 bits.
    unaligned: bool,
}

/// Where the kernel puts received data in a frame in copy mode (and most
/// drivers in zero-copy mode): after `XDP_PACKET_HEADROOM`.
pub const XDP_HEADROOM: u32 = 256;
/// The kernel's smallest chunk (`XDP_UMEM_MIN_CHUNK_SIZE`).
const MIN_CHUNK: u32 = 2048;
/// Unaligned mode: the low 48 bits of an RX address are the chunk's, the
/// high 16 the data's offset in it (`XSK_UNALIGNED_BUF_OFFSET_SHIFT`).
const UNALIGNED_OFFSET_SHIFT: u32 = 48;
/// The smallest frame size offered: the kernel's headroom and an 802.1Q
/// tagged 1024-byte frame.
pub const MIN_FRAME_SIZE: u32 = 1280;

/// Where the UMEM's registration is: on a socket not bound yet, or on the
/// first bound socket (which later sockets name in `XDP_SHARED_UMEM`).
enum Registration {
    Unbound(OwnedFd),
    Bound(Weak<OwnedFd>),
}

/// The frame memory shared by a set of AF_XDP sockets.
///
/// Frame bytes are reached through this value only ([`Umem::frame`],
/// [`Umem::frame_mut`]); the sockets share the mapping but never hand out
/// references to it. The kernel writes frames that are on a fill ring and
/// reads frames on a TX ring: read or write only frames you hold (received
/// and not yet given back, or taken from a [`FramePool`]).
///
/// The registration lives on the first socket bound over the UMEM; the
/// others share it through that socket, so bind every port while the first
/// socket is open (its closing does not disturb sockets already bound).
pub struct Umem {
    inner: Arc<UmemInner>,
    reg: Mutex<Registration>,
    warning: Option<String>,
}

impl std::fmt::Debug for Umem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Umem").field("frames", &self.inner.frames).field("frame_size", &self.inner.frame_size).finish()
    }
}

impl Umem {
    /// Maps `frames x frame_size` bytes (page aligned, populated) and
    /// registers them. A power of two from 2048 to the page size is a plain
    /// (aligned) chunk. Any other size from [`MIN_FRAME_SIZE`] to the page
    /// size, such as the seed's 1920 (its DDIO experiment: buffers that do
    /// not all start at the same offset in a page spread over the cache's
    /// sets), is registered in unaligned chunk mode
    /// (`XDP_UMEM_UNALIGNED_CHUNK_FLAG`) and placed `frame_size` apart.
    ///
    /// The kernel's chunks are never smaller than 2048 bytes, so below that
    /// it is told 2048 and may in principle write a received frame up to
    /// 2048 - 256 bytes long into a frame that holds `frame_size - 256`:
    /// [`Umem::max_frame`] says how long a frame may be, and a bridge must
    /// check its interfaces' MTU against it before it binds.
    pub fn new(frames: u32, frame_size: u32) -> Result<Umem> {
        let page = 4096u32;
        if !(MIN_FRAME_SIZE..=page).contains(&frame_size) {
            return Err(LiveError::Config(format!(
                "UMEM frame size {frame_size} is outside {MIN_FRAME_SIZE}..={page} bytes"
            )));
        }
        if frames == 0 {
            return Err(LiveError::Config("a UMEM needs at least one frame".into()));
        }
        let unaligned = !(frame_size.is_power_of_two() && frame_size >= MIN_CHUNK);
        let chunk = frame_size.max(MIN_CHUNK);
        // The last frame's chunk may reach past the frames (chunk > frame_size).
        let len = u64::from(frames) * u64::from(frame_size) + u64::from(chunk - frame_size);
        let warning = sys::raise_memlock(len);
        let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0).map_err(|e| match e.raw_os_error() {
            Some(libc::EAFNOSUPPORT) => LiveError::Config("this kernel has no AF_XDP (CONFIG_XDP_SOCKETS)".into()),
            _ => LiveError::io("socket(AF_XDP)", NEEDS_XSK, e),
        })?;
        let area = Mmap::anonymous(len as usize, true).map_err(|e| LiveError::Io { op: "mmap UMEM", source: e })?;
        let reg = libc::xdp_umem_reg {
            addr: area.as_ptr() as u64,
            len,
            chunk_size: chunk,
            headroom: 0,
            flags: if unaligned { libc::XDP_UMEM_UNALIGNED_CHUNK_FLAG } else { 0 },
            tx_metadata_len: 0,
        };
        sys::setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                LiveError::Memlock { what: "XDP_UMEM_REG", asked: len, limit: crate::error::memlock_limit_text() }
            }
            Some(libc::EINVAL) if unaligned => LiveError::Config(format!(
                "the kernel refused a {frame_size}-byte frame size (unaligned chunks, Linux 5.4+); use a power of two from 2048"
            )),
            _ => LiveError::io("XDP_UMEM_REG", NEEDS_XSK, e),
        })?;
        Ok(Umem {
            inner: Arc::new(UmemInner { area, frame_size, frames, unaligned }),
            reg: Mutex::new(Registration::Unbound(fd)),
            warning,
        })
    }

    /// Whether frames sit at a stride that is not a power of two
    /// (unaligned chunk mode).
    pub fn unaligned(&self) -> bool {
        self.inner.unaligned
    }

    /// The longest frame that fits one of this UMEM's frames after the
    /// kernel's receive headroom.
    pub fn max_frame(&self) -> u32 {
        self.inner.frame_size - XDP_HEADROOM
    }

    /// A warning from setup that did not stop it (RLIMIT_MEMLOCK could not
    /// be raised but the kernel took the memory anyway).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// Frames in the UMEM.
    pub fn frames(&self) -> u32 {
        self.inner.frames
    }

    /// Bytes from one frame to the next.
    pub fn frame_size(&self) -> u32 {
        self.inner.frame_size
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.inner.area.len()
    }

    /// Never true: a UMEM has at least one frame.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start of the frame holding address `addr`.
    pub fn chunk_of(&self, addr: u64) -> u64 {
        frame_start(addr, u64::from(self.inner.frame_size))
    }

    /// True when `len` bytes at `addr` lie inside one frame.
    pub fn valid(&self, addr: u64, len: usize) -> bool {
        let fs = u64::from(self.inner.frame_size);
        let Some(end) = addr.checked_add(len as u64) else { return false };
        end <= u64::from(self.inner.frames) * fs && (len == 0 || (end - 1) / fs == addr / fs)
    }

    /// The `len` bytes at `addr`, if they lie inside one chunk.
    pub fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.valid(addr, len) {
            return None;
        }
        // SAFETY: `addr..addr+len` is inside the mapping (checked above), which lives as long
        // as `self.inner`. The kernel may write this chunk only while it is on a fill ring,
        // which the caller does not do for frames it reads (type-level doc).
        Some(unsafe { std::slice::from_raw_parts(self.inner.area.as_ptr().add(addr as usize), len) })
    }

    /// The bytes of a received descriptor.
    pub fn data(&self, d: &Desc) -> Option<&[u8]> {
        self.frame(d.addr, d.len as usize)
    }

    /// Copies `bytes` to `addr` (a frame taken from a [`FramePool`], so no
    /// ring holds it); false if they do not fit in one chunk there.
    ///
    /// Takes `&self` and writes through the raw mapping rather than a
    /// `&mut [u8]`, because [`UmemView`]s of the whole area may be alive on
    /// other threads (pipeline batches): they never read a frame that is
    /// free, and this writes only a free frame, so no byte is both read and
    /// written at once.
    pub fn write_frame(&self, addr: u64, bytes: &[u8]) -> bool {
        if !self.valid(addr, bytes.len()) {
            return false;
        }
        // SAFETY: `addr..addr + len` lies inside the mapping (checked above), which lives as
        // long as `self.inner`; the caller holds the frame (it is on no ring), so neither the
        // kernel nor a reader of a `UmemView` touches these bytes meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.inner.area.as_ptr().add(addr as usize), bytes.len())
        };
        true
    }

    /// A read-only view of the whole area that can be shared with other
    /// threads (`Send + Sync`), for the pipeline's batches to borrow
    /// received frames from without a copy. It keeps the mapping alive.
    pub fn view(&self) -> UmemView {
        UmemView(Arc::clone(&self.inner))
    }

    /// The `len` bytes at `addr`, writable, if they lie inside one chunk.
    pub fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.valid(addr, len) {
            return None;
        }
        // SAFETY: in bounds as above; `&mut self` is the only way to reach the bytes from
        // Rust (sockets keep raw pointers only), so this slice is not aliased by Rust.
        Some(unsafe { std::slice::from_raw_parts_mut(self.inner.area.as_ptr().add(addr as usize), len) })
    }
}

/// The whole UMEM as bytes, shared read-only with pipeline batches (see
/// [`Umem::view`]). Packets point into it by UMEM address: the slice index
/// of a frame's first byte *is* its address.
///
/// # Memory safety
///
/// The slice covers every frame, and while it is alive the kernel writes
/// frames that sit on a fill ring (it receives into them) and the bridge
/// writes free frames ([`Umem::write_frame`]). That is sound for the same
/// reason reading a memory-mapped file is: the bytes reached through the
/// view are only ever those of frames the reader *holds* — received (taken
/// off an RX ring) and not yet handed back to any ring — and a held frame
/// is written by nobody. A frame goes back to a fill or TX ring only after
/// the last batch that points into it is done with it (the pipeline's sink
/// is the last stage; see `sluice_live::pipeline`). Bytes of frames not
/// held are never read through the view, so the concurrent writes to them
/// race with no read.
pub struct UmemView(Arc<UmemInner>);

impl std::fmt::Debug for UmemView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UmemView").field("len", &self.0.area.len()).finish()
    }
}

impl AsRef<[u8]> for UmemView {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, page aligned, and lives as long as the `Arc`
        // this view holds. Concurrent writes by the kernel and by `Umem::write_frame` touch
        // only frames the reader does not hold and so never reads (type-level doc).
        unsafe { std::slice::from_raw_parts(self.0.area.as_ptr(), self.0.area.len()) }
    }
}

/// An unaligned-mode RX address (chunk in the low 48 bits, the data's
/// offset above) as one UMEM address.
#[inline]
fn unaligned_addr(raw: u64) -> u64 {
    (raw & ((1 << UNALIGNED_OFFSET_SHIFT) - 1)) + (raw >> UNALIGNED_OFFSET_SHIFT)
}

/// The start of the `frame_size`-byte frame holding `addr` (a mask for
/// powers of two, which the compiler sees through only for constants).
#[inline]
fn frame_start(addr: u64, frame_size: u64) -> u64 {
    if frame_size.is_power_of_two() {
        addr & !(frame_size - 1)
    } else {
        addr / frame_size * frame_size
    }
}

/// The frames no ring holds: the allocator behind fill rings and TX.
#[derive(Debug, Clone)]
pub struct FramePool {
    free: Vec<u64>,
    frame_size: u64,
}

impl FramePool {
    /// A pool holding every frame of `umem`.
    pub fn new(umem: &Umem) -> FramePool {
        let fs = u64::from(umem.frame_size());
        FramePool { free: (0..u64::from(umem.frames())).rev().map(|i| i * fs).collect(), frame_size: fs }
    }

    /// A pool holding `umem`'s frames `first..end` (frame numbers): a
    /// lane's share of a UMEM dealt out among lanes.
    pub fn range(umem: &Umem, first: u32, end: u32) -> FramePool {
        let fs = u64::from(umem.frame_size());
        let end = end.min(umem.frames());
        FramePool { free: (u64::from(first)..u64::from(end)).rev().map(|i| i * fs).collect(), frame_size: fs }
    }

    /// An empty pool for `umem`'s frames.
    pub fn empty(umem: &Umem) -> FramePool {
        FramePool { free: Vec::with_capacity(umem.frames() as usize), frame_size: u64::from(umem.frame_size()) }
    }

    /// Takes a free frame (its chunk start).
    pub fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// Gives a frame back (any address inside it).
    pub fn free(&mut self, addr: u64) {
        self.free.push(frame_start(addr, self.frame_size));
    }

    /// Gives frames back.
    pub fn free_all(&mut self, addrs: &[u64]) {
        let fs = self.frame_size;
        self.free.extend(addrs.iter().map(|&a| frame_start(a, fs)));
    }

    /// Free frames.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// True when no frame is free.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

/// One mmap'd ring. `T` is `u64` (fill, completion) or [`Desc`] (RX, TX).
struct Ring<T> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    size: u32,
    /// Our copy of the producer index (ours on producer rings).
    cached_prod: u32,
    /// Our copy of the consumer index; on producer rings it is kept
    /// `size` ahead, so `cached_cons - cached_prod` is the free space.
    cached_cons: u32,
    _t: std::marker::PhantomData<T>,
}

// SAFETY: a ring is mapped memory owned by this value plus plain integers; it is used
// through `&mut self` only, so moving it to another thread is sound.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(
        fd: &impl AsRawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        producer_side: bool,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mmap::shared(fd, len, pgoff, true)?;
        for o in [off.producer, off.consumer, off.flags] {
            if !(o as usize).is_multiple_of(4) || o as usize + 4 > len {
                return Err(io::Error::other("ring offsets out of the mapping"));
            }
        }
        let mut r = Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            mask: size - 1,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _t: std::marker::PhantomData,
        };
        r.cached_prod = r.prod().load(Ordering::Relaxed);
        r.cached_cons = r.cons().load(Ordering::Relaxed);
        if producer_side {
            r.cached_cons = r.cached_cons.wrapping_add(size);
        }
        Ok(r)
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` was checked in `map` to be 4-aligned and inside the mapping, which
        // lives as long as `self`; the kernel accesses the word atomically (READ_ONCE,
        // smp_load_acquire / smp_store_release), so an atomic view is the right one.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    fn prod(&self) -> &AtomicU32 {
        self.word(self.producer)
    }

    fn cons(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    fn needs_wakeup(&self) -> bool {
        // Order our index store before reading the kernel's flag (the kernel sets the flag,
        // then re-checks the ring).
        fence(Ordering::SeqCst);
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, idx: u32) -> *mut T {
        // SAFETY: `idx & mask < size`, and the mapping holds `size` entries of `T` at `desc`.
        unsafe { (self.map.as_ptr().add(self.desc) as *mut T).add((idx & self.mask) as usize) }
    }

    /// Producer side: free slots (reloading the consumer index if fewer than `want`).
    fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        // Acquire: the kernel's reads of the slots it released happen before we reuse them.
        self.cached_cons = self.cons().load(Ordering::Acquire).wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Producer side: writes as many of `items` as fit, then publishes them.
    fn produce(&mut self, items: &[T]) -> usize {
        let n = (self.free(items.len() as u32) as usize).min(items.len());
        if n == 0 {
            return 0;
        }
        for (i, item) in items[..n].iter().enumerate() {
            // SAFETY: the slot is free (between the kernel's consumer and our producer
            // index), so the kernel does not read it until we publish.
            unsafe { self.slot(self.cached_prod.wrapping_add(i as u32)).write_volatile(*item) };
        }
        self.cached_prod = self.cached_prod.wrapping_add(n as u32);
        // Release: the descriptors are written before the kernel can see the new index.
        self.prod().store(self.cached_prod, Ordering::Release);
        n
    }

    /// Consumer side: entries ready (reloading the producer index when none are cached).
    fn ready(&mut self, want: u32) -> u32 {
        let ready = self.cached_prod.wrapping_sub(self.cached_cons);
        if ready >= want.max(1) {
            return ready;
        }
        // Acquire: the kernel's slot writes happen before we read them.
        self.cached_prod = self.prod().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Consumer side: reads up to `out.len()` entries and releases them.
    fn consume(&mut self, out: &mut [T]) -> usize {
        let n = (self.ready(out.len() as u32) as usize).min(out.len());
        if n == 0 {
            return 0;
        }
        for (i, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: the slot is between our consumer and the kernel's producer index:
            // published, and not rewritten until we release it below.
            *o = unsafe { self.slot(self.cached_cons.wrapping_add(i as u32)).read_volatile() };
        }
        self.cached_cons = self.cached_cons.wrapping_add(n as u32);
        // Release: our reads are done before the kernel may reuse the slots.
        self.cons().store(self.cached_cons, Ordering::Release);
        n
    }

    /// Entries the other side has not taken yet (producer rings).
    fn outstanding(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.cons().load(Ordering::Acquire))
    }
}

/// Statistics of one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for reasons other than a full ring or empty fill ring.
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was found empty when kicked.
    pub tx_ring_empty_descs: u64,
}

/// An AF_XDP socket bound to one (interface, queue), with its four rings.
pub struct XskSocket {
    // Drop order: rings unmapped, then our socket closed, then the UMEM released.
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: Arc<OwnedFd>,
    umem: Arc<UmemInner>,
    iface: String,
    ifindex: u32,
    queue: u32,
    zero_copy: bool,
    need_wakeup: bool,
    shared: bool,
}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("iface", &self.iface)
            .field("queue", &self.queue)
            .field("zero_copy", &self.zero_copy)
            .field("shared", &self.shared)
            .finish()
    }
}

fn check_size(what: &str, n: u32) -> Result<()> {
    if n == 0 || !n.is_power_of_two() {
        return Err(LiveError::Config(format!("{what} ring size {n} must be a nonzero power of two")));
    }
    Ok(())
}

impl XskSocket {
    /// Binds a socket to `queue` of `iface` over `umem`. The first socket
    /// of a UMEM decides copy/zero-copy and need-wakeup; the others share it
    /// (`XDP_SHARED_UMEM`) and inherit them. Register the socket in the
    /// port's [`crate::bpf::XdpRedirect`] to receive.
    pub fn bind(iface: &str, queue: u32, umem: &Umem, cfg: &XskConfig) -> Result<XskSocket> {
        for (w, n) in [("RX", cfg.rx_size), ("TX", cfg.tx_size), ("fill", cfg.fill_size), ("completion", cfg.comp_size)]
        {
            check_size(w, n)?;
        }
        let ifindex = sys::iface_up(iface)?;
        let inner = umem.inner.clone();
        let mut reg = umem.reg.lock().unwrap_or_else(|p| p.into_inner());
        let (fd, shared_with) = match &mut *reg {
            Registration::Unbound(_) => {
                let Registration::Unbound(fd) = std::mem::replace(&mut *reg, Registration::Bound(Weak::new())) else {
                    unreachable!()
                };
                (Arc::new(fd), None)
            }
            Registration::Bound(first) => {
                let first = first.upgrade().ok_or_else(|| {
                    LiveError::Config(
                        "the UMEM's first socket is closed: bind every port's socket while it is open".into(),
                    )
                })?;
                let fd = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0)
                    .map_err(|e| LiveError::io("socket(AF_XDP)", NEEDS_XSK, e))?;
                (Arc::new(fd), Some(first))
            }
        };
        let shared_fd = shared_with.as_ref().map(|f| f.as_raw_fd());
        match Self::setup(fd.as_raw_fd(), iface, ifindex, queue, shared_fd, cfg) {
            Ok((rx, tx, fill, comp, zero_copy, need_wakeup)) => {
                if shared_with.is_none() {
                    *reg = Registration::Bound(Arc::downgrade(&fd));
                }
                Ok(XskSocket {
                    rx,
                    tx,
                    fill,
                    comp,
                    fd,
                    umem: inner,
                    iface: iface.to_owned(),
                    ifindex,
                    queue,
                    zero_copy,
                    need_wakeup,
                    shared: shared_with.is_some(),
                })
            }
            Err(e) => {
                if shared_with.is_none() {
                    // Give the registration back (a retry may still fail if the kernel
                    // kept the ring setup of the failed attempt).
                    if let Ok(fd) = Arc::try_unwrap(fd) {
                        *reg = Registration::Unbound(fd);
                    }
                }
                Err(e)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn setup(
        raw: RawFd,
        iface: &str,
        ifindex: u32,
        queue: u32,
        shared_fd: Option<RawFd>,
        cfg: &XskConfig,
    ) -> Result<(Ring<Desc>, Ring<Desc>, Ring<u64>, Ring<u64>, bool, bool)> {
        let fd = RawFdRef(raw);
        let so = |name: i32, what: &'static str, v: u32| {
            sys::setsockopt(&fd, libc::SOL_XDP, name, &v).map_err(|e| LiveError::io(what, NEEDS_XSK, e))
        };
        so(libc::XDP_UMEM_FILL_RING, "XDP_UMEM_FILL_RING", cfg.fill_size)?;
        so(libc::XDP_UMEM_COMPLETION_RING, "XDP_UMEM_COMPLETION_RING", cfg.comp_size)?;
        so(libc::XDP_RX_RING, "XDP_RX_RING", cfg.rx_size)?;
        so(libc::XDP_TX_RING, "XDP_TX_RING", cfg.tx_size)?;
        let (off, len) = sys::getsockopt::<libc::xdp_mmap_offsets>(&fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
            .map_err(|e| LiveError::io("XDP_MMAP_OFFSETS", NEEDS_XSK, e))?;
        if len != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(LiveError::Config("kernel too old: AF_XDP ring flags need Linux 5.4 or later".into()));
        }
        let map_err = |what: &'static str| move |e: io::Error| LiveError::Io { op: what, source: e };
        let rx = Ring::<Desc>::map(&fd, &off.rx, cfg.rx_size, libc::XDP_PGOFF_RX_RING as u64, false)
            .map_err(map_err("mmap RX ring"))?;
        let tx = Ring::<Desc>::map(&fd, &off.tx, cfg.tx_size, libc::XDP_PGOFF_TX_RING as u64, true)
            .map_err(map_err("mmap TX ring"))?;
        let fill = Ring::<u64>::map(&fd, &off.fr, cfg.fill_size, libc::XDP_UMEM_PGOFF_FILL_RING, true)
            .map_err(map_err("mmap fill ring"))?;
        let comp = Ring::<u64>::map(&fd, &off.cr, cfg.comp_size, libc::XDP_UMEM_PGOFF_COMPLETION_RING, false)
            .map_err(map_err("mmap completion ring"))?;

        let bind = |flags: u16| {
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: shared_fd.unwrap_or(0) as u32,
            };
            sys::bind(&fd, &sa)
        };
        let wake = if cfg.need_wakeup { libc::XDP_USE_NEED_WAKEUP } else { 0 };
        let bind_err = |e: io::Error| -> LiveError {
            match e.raw_os_error() {
                Some(libc::EBUSY) => LiveError::Config(format!(
                    "{iface} queue {queue} is already used by another AF_XDP socket (another sluice, or a stale one)"
                )),
                Some(libc::EINVAL) => LiveError::Config(format!(
                    "{iface} has no queue {queue} (see `ethtool -l {iface}`), or a socket over the same \
                     UMEM already has that queue"
                )),
                _ => LiveError::io_iface("bind(AF_XDP)", NEEDS_XSK, iface, e),
            }
        };
        if shared_fd.is_some() {
            bind(libc::XDP_SHARED_UMEM).map_err(bind_err)?;
        } else {
            match cfg.mode {
                BindMode::Copy => bind(libc::XDP_COPY | wake).map_err(bind_err)?,
                BindMode::ZeroCopy => bind(libc::XDP_ZEROCOPY | wake).map_err(|e| match e.raw_os_error() {
                    Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT) => {
                        LiveError::ZeroCopyUnsupported { iface: iface.to_owned(), queue, source: e }
                    }
                    _ => bind_err(e),
                })?,
                BindMode::Auto => match bind(libc::XDP_ZEROCOPY | wake) {
                    Ok(()) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT)) => {
                        bind(libc::XDP_COPY | wake).map_err(bind_err)?
                    }
                    Err(e) => return Err(bind_err(e)),
                },
            }
        }
        let zero_copy = sys::getsockopt::<libc::xdp_options>(&fd, libc::SOL_XDP, libc::XDP_OPTIONS)
            .map(|(o, _)| o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
            .unwrap_or(false);
        Ok((rx, tx, fill, comp, zero_copy, cfg.need_wakeup))
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Its index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// True if the kernel bound it zero-copy (`XDP_OPTIONS_ZEROCOPY`).
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// True if it shares another socket's UMEM registration.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Takes up to `out.len()` received descriptors; returns how many. The
    /// frames are now the caller's: forward them ([`XskSocket::tx`] on any
    /// socket of the UMEM) or give them back ([`XskSocket::fill`] or a [`FramePool`]).
    pub fn rx_batch(&mut self, out: &mut [Desc]) -> usize {
        let n = self.rx.consume(out);
        if self.umem.unaligned {
            // Chunk in the low 48 bits, the data's offset above: one address.
            for d in &mut out[..n] {
                d.addr = unaligned_addr(d.addr);
            }
        }
        n
    }

    /// Frames received and not yet taken.
    pub fn rx_ready(&mut self) -> u32 {
        self.rx.ready(1)
    }

    /// Queues descriptors for transmission; returns how many fit (the rest
    /// stay the caller's). Nothing is sent until [`XskSocket::kick_tx`] or
    /// [`XskSocket::wakeup`]. A descriptor outside the UMEM or crossing a
    /// chunk is refused (the kernel would drop it without ever completing
    /// it, losing the frame).
    pub fn tx(&mut self, descs: &[Desc]) -> Result<usize> {
        let fs = u64::from(self.umem.frame_size);
        let len = u64::from(self.umem.frames) * fs;
        for d in descs {
            let end = d.addr.saturating_add(u64::from(d.len));
            if d.len == 0 || end > len || (end - 1) / fs != d.addr / fs {
                return Err(LiveError::Config(format!(
                    "TX descriptor addr {:#x} len {} is not inside one UMEM frame",
                    d.addr, d.len
                )));
            }
        }
        Ok(self.tx.produce(descs))
    }

    /// Free TX slots.
    pub fn tx_free(&mut self) -> u32 {
        self.tx.free(self.tx.size)
    }

    /// Descriptors on the TX ring the kernel has not taken yet.
    pub fn tx_pending(&self) -> u32 {
        self.tx.outstanding()
    }

    /// Gives frames to the kernel to receive into; returns how many fit.
    pub fn fill(&mut self, addrs: &[u64]) -> usize {
        self.fill.produce(addrs)
    }

    /// Moves up to `max` frames from `pool` to the fill ring; returns how many.
    pub fn fill_from(&mut self, pool: &mut FramePool, max: usize) -> usize {
        let n = (self.fill.free(max as u32) as usize).min(max).min(pool.len());
        if n == 0 {
            return 0;
        }
        let start = pool.free.len() - n;
        let done = self.fill.produce(&pool.free[start..]);
        pool.free.truncate(pool.free.len() - done);
        done
    }

    /// Free slots on the fill ring.
    pub fn fill_free(&mut self) -> u32 {
        self.fill.free(self.fill.size)
    }

    /// Frames on the fill ring the kernel has not taken yet.
    pub fn fill_queued(&mut self) -> u32 {
        self.fill.size - self.fill_free()
    }

    /// Takes up to `out.len()` transmitted frames back; returns how many.
    pub fn complete(&mut self, out: &mut [u64]) -> usize {
        self.comp.consume(out)
    }

    /// Moves every completed frame to `pool`; returns how many.
    pub fn complete_into(&mut self, pool: &mut FramePool) -> usize {
        let mut buf = [0u64; 64];
        let mut total = 0;
        loop {
            let n = self.comp.consume(&mut buf);
            pool.free_all(&buf[..n]);
            total += n;
            if n < buf.len() {
                return total;
            }
        }
    }

    /// True if the kernel asked for a syscall to go on filling (need-wakeup mode).
    pub fn fill_needs_wakeup(&self) -> bool {
        !self.need_wakeup || self.fill.needs_wakeup()
    }

    /// True if the kernel needs a `sendto` to transmit what is queued.
    pub fn tx_needs_wakeup(&self) -> bool {
        !self.need_wakeup || self.tx.needs_wakeup()
    }

    /// Tells the kernel to transmit the TX ring (zero-length `sendto`).
    /// Copy mode sends a bounded batch per call and answers EAGAIN when
    /// more is left, so this kicks until the ring is drained or the device
    /// pushes back.
    pub fn kick_tx(&self) -> Result<()> {
        for _ in 0..(self.tx.size / 16).max(4) {
            match sys::kick_send(self.raw(), libc::MSG_DONTWAIT) {
                Ok(()) => return Ok(()),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => {
                        if self.tx.outstanding() == 0 {
                            return Ok(());
                        }
                    }
                    Some(libc::EBUSY) | Some(libc::ENOBUFS) => return Ok(()),
                    _ => return Err(LiveError::io_iface("sendto(AF_XDP)", NEEDS_XSK, &self.iface, e)),
                },
            }
        }
        Ok(())
    }

    /// Makes the syscalls the kernel asked for: TX if frames wait and the
    /// TX ring wants a kick, RX if the fill ring wants a wakeup.
    pub fn wakeup(&self) -> Result<()> {
        if self.tx.outstanding() > 0 && self.tx_needs_wakeup() {
            self.kick_tx()?;
        }
        if self.need_wakeup && self.fill.needs_wakeup() {
            match sys::kick_recv(self.raw()) {
                Ok(()) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)) => {}
                Err(e) => return Err(LiveError::io_iface("recvfrom(AF_XDP)", NEEDS_XSK, &self.iface, e)),
            }
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` for received frames; true if some are ready.
    pub fn poll_rx(&mut self, timeout_ms: i32) -> Result<bool> {
        if self.rx.ready(1) > 0 {
            return Ok(true);
        }
        let rev = sys::poll_one(self.raw(), libc::POLLIN, timeout_ms)
            .map_err(|e| LiveError::Io { op: "poll(AF_XDP)", source: e })?;
        Ok(rev & libc::POLLIN != 0 || self.rx.ready(1) > 0)
    }

    /// The kernel's counters for this socket.
    pub fn stats(&self) -> Result<XskStats> {
        let (s, _) =
            sys::getsockopt::<libc::xdp_statistics>(&RawFdRef(self.raw()), libc::SOL_XDP, libc::XDP_STATISTICS)
                .map_err(|e| LiveError::io("XDP_STATISTICS", NEEDS_XSK, e))?;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.raw()
    }
}

/// A borrowed raw descriptor, for the `sys` helpers.
struct RawFdRef(RawFd);

impl AsRawFd for RawFdRef {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_bounds() {
        if sys::euid() != 0 {
            return; // AF_XDP needs CAP_NET_RAW; the live tests cover this as root.
        }
        let mut u = Umem::new(16, 2048).unwrap();
        assert!(u.frame(0, 2048).is_some());
        assert!(u.frame(2047, 2).is_none(), "crosses a chunk");
        assert!(u.frame(15 * 2048, 2048).is_some());
        assert!(u.frame(16 * 2048, 1).is_none());
        assert!(u.frame(u64::MAX, 1).is_none());
        u.frame_mut(2048 + 256, 4).unwrap().copy_from_slice(b"abcd");
        assert_eq!(u.frame(2048 + 256, 4).unwrap(), b"abcd");
        assert_eq!(u.chunk_of(2048 + 300), 2048);
        let mut pool = FramePool::new(&u);
        assert_eq!(pool.len(), 16);
        assert_eq!(pool.alloc(), Some(0));
        pool.free(2048 * 3 + 256);
        assert_eq!(pool.alloc(), Some(2048 * 3));
    }

    #[test]
    fn unaligned_frames_sit_at_their_stride() {
        assert_eq!(unaligned_addr((1920 * 5) | (256 << 48)), 1920 * 5 + 256);
        assert_eq!(unaligned_addr(4096), 4096);
        assert_eq!(frame_start(1920 * 3 + 1919, 1920), 1920 * 3);
        assert_eq!(frame_start(2048 * 3 + 5, 2048), 2048 * 3);
        if sys::euid() != 0 {
            return; // AF_XDP needs CAP_NET_RAW; the live tests cover this as root.
        }
        let u = Umem::new(16, 1920).unwrap();
        assert!(u.unaligned() && u.frame_size() == 1920 && u.max_frame() == 1920 - 256);
        assert!(u.frame(0, 1920).is_some());
        assert!(u.frame(1919, 2).is_none(), "crosses into the next frame");
        assert!(u.frame(15 * 1920, 1920).is_some());
        assert!(u.frame(16 * 1920, 1).is_none(), "past the last frame (the chunk slack is not a frame)");
        assert_eq!(u.chunk_of(1920 * 7 + 300), 1920 * 7);
        let mut pool = FramePool::new(&u);
        assert_eq!(pool.alloc(), Some(0));
        assert_eq!(pool.alloc(), Some(1920));
        pool.free(1920 * 9 + 256);
        assert_eq!(pool.alloc(), Some(1920 * 9));
        // A power of two from 2048 stays aligned; 3000 is unaligned with a chunk of its own size.
        assert!(!Umem::new(4, 4096).unwrap().unaligned());
        assert!(Umem::new(4, 3000).unwrap().unaligned());
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(matches!(Umem::new(16, 1000), Err(LiveError::Config(_))));
        assert!(matches!(Umem::new(16, 8192), Err(LiveError::Config(_))));
        assert!(matches!(Umem::new(0, 2048), Err(LiveError::Config(_))));
        assert!(check_size("RX", 1000).is_err());
        assert!(check_size("RX", 1024).is_ok());
    }
}
