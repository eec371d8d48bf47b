//! Thin, safe wrappers over the system calls the sockets need: `socket`,
//! `setsockopt`/`getsockopt` on plain-data values, `bind`, `mmap`, `poll`,
//! the zero-length `sendto`/`recvfrom` kicks, interface lookups, the
//! memlock limit and `setns`. Every `unsafe` block of this crate that is
//! not ring or BPF specific lives here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use crate::error::{LiveError, Result};

/// Marker for plain-data types the kernel may fill byte by byte: every bit
/// pattern is a valid value and there are no references.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of integers (and arrays of them).
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: integers and these libc `#[repr(C)]` structs of integers accept any bit pattern.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_mmap_offsets {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_statistics {}
// SAFETY: as above.
unsafe impl Pod for libc::xdp_options {}
// SAFETY: as above.
unsafe impl Pod for libc::tpacket_stats_v3 {}

/// `socket(domain, ty | SOCK_CLOEXEC, proto)`.
pub(crate) fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
pub(crate) fn setsockopt<T: Copy>(fd: &impl AsRawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, which lives across the call;
    // the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `getsockopt` into a zeroed `T`; returns the value and the length the
/// kernel wrote (older kernels may write a shorter, older layout).
pub(crate) fn getsockopt<T: Pod>(fd: &impl AsRawFd, level: i32, name: i32) -> io::Result<(T, usize)> {
    // SAFETY: `T: Pod`, so all-zero bytes are a valid value.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `value`; the kernel writes at most `len`
    // bytes, and any bytes are a valid `T` (`Pod`).
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&mut value as *mut T).cast(), &mut len) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok((value, len as usize))
    }
}

/// `bind(fd, &addr, sizeof addr)` for a socket address struct.
pub(crate) fn bind<T: Copy>(fd: &impl AsRawFd, addr: &T) -> io::Result<()> {
    // SAFETY: the pointer and length describe `addr`, a sockaddr_* struct; the kernel reads it.
    let rc =
        unsafe { libc::bind(fd.as_raw_fd(), (addr as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Zero-length `sendto(fd, NULL, 0, flags, NULL, 0)`: tells the kernel to
/// process a TX ring (AF_XDP, AF_PACKET).
pub(crate) fn kick_send(fd: RawFd, flags: i32) -> io::Result<()> {
    // SAFETY: a null buffer of length 0 is never dereferenced.
    let rc = unsafe { libc::sendto(fd, std::ptr::null(), 0, flags, std::ptr::null(), 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Zero-length `recvfrom(fd, NULL, 0, MSG_DONTWAIT)`: wakes an AF_XDP RX path.
pub(crate) fn kick_recv(fd: RawFd) -> io::Result<()> {
    // SAFETY: a null buffer of length 0 is never written.
    let rc = unsafe {
        libc::recvfrom(fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut())
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `poll` on one descriptor; returns the revents (0 on timeout). EINTR counts as a timeout.
pub(crate) fn poll_one(fd: RawFd, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut pfd = libc::pollfd { fd, events, revents: 0 };
    // SAFETY: one valid pollfd, count 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(if rc == 0 { 0 } else { pfd.revents })
}

/// A memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving it between
// threads moves the ownership.
unsafe impl Send for Mmap {}
// SAFETY: `&Mmap` exposes only the address and length, never a reference into the
// mapping; whoever dereferences the address answers for synchronisation.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Private anonymous read-write memory, page aligned, zeroed.
    pub(crate) fn anonymous(len: usize, populate: bool) -> io::Result<Mmap> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a fresh anonymous mapping aliases nothing.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        Self::from_raw(p, len)
    }

    /// A shared mapping of a socket's ring at `offset`.
    pub(crate) fn shared(fd: &impl AsRawFd, len: usize, offset: u64, populate: bool) -> io::Result<Mmap> {
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: maps kernel ring memory of the socket at a fresh address; aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        Self::from_raw(p, len)
    }

    fn from_raw(p: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly one mapping made by `mmap` and not yet unmapped;
        // the owner guarantees no references into it outlive this value.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn c_ifname(name: &str) -> Result<CString> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') || name.contains(char::is_whitespace) {
        return Err(LiveError::BadInterfaceName { name: name.to_owned() });
    }
    CString::new(name).map_err(|_| LiveError::BadInterfaceName { name: name.to_owned() })
}

/// The index of interface `name` in this thread's network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    let c = c_ifname(name)?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) | Some(0) | None => {
                LiveError::NoSuchInterface { name: name.to_owned() }
            }
            _ => LiveError::Io { op: "if_nametoindex", source: e },
        });
    }
    Ok(idx)
}

/// The `IFF_*` flags of interface `name` (SIOCGIFFLAGS).
pub fn if_flags(name: &str) -> Result<u32> {
    let c = c_ifname(name)?;
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)
        .or_else(|_| socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0))
        .map_err(|e| LiveError::Io { op: "socket for SIOCGIFFLAGS", source: e })?;
    // SAFETY: `ifreq` is a C struct of integers and byte arrays: all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(c.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads `ifr_name` and writes `ifr_flags` inside `req`, which lives
    // across the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(LiveError::io_iface("SIOCGIFFLAGS", crate::error::NEEDS_ADMIN, name, e));
    }
    // SAFETY: after SIOCGIFFLAGS the union holds `ifru_flags`.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok(flags as u16 as u32)
}

/// Resolves `name` and checks that it is up: the common preamble of every port.
pub fn iface_up(name: &str) -> Result<u32> {
    let idx = ifindex(name)?;
    let flags = if_flags(name)?;
    if flags & libc::IFF_UP as u32 == 0 {
        return Err(LiveError::InterfaceDown { name: name.to_owned() });
    }
    Ok(idx)
}

/// The soft RLIMIT_MEMLOCK in bytes, `None` when unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into `r`.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc < 0 || r.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(r.rlim_cur)
    }
}

/// Tries to raise RLIMIT_MEMLOCK to at least `bytes` (unlimited if the hard
/// limit allows). Returns a warning when it could not: the kernel may still
/// accept the memory (root has CAP_IPC_LOCK; since 5.11 BPF maps are charged
/// to the memory cgroup instead), so a refusal is not an error here.
pub(crate) fn raise_memlock(bytes: u64) -> Option<String> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into `r`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } < 0 {
        return Some(format!("cannot read RLIMIT_MEMLOCK: {}", io::Error::last_os_error()));
    }
    if r.rlim_cur == libc::RLIM_INFINITY || r.rlim_cur >= bytes {
        return None;
    }
    let want = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads one rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) } == 0 {
        return None;
    }
    let target = if r.rlim_max == libc::RLIM_INFINITY { bytes } else { r.rlim_max.min(bytes.max(r.rlim_cur)) };
    let partial = libc::rlimit { rlim_cur: target, rlim_max: r.rlim_max };
    // SAFETY: setrlimit reads one rlimit.
    if target > r.rlim_cur && unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &partial) } == 0 && target >= bytes {
        return None;
    }
    Some(format!(
        "RLIMIT_MEMLOCK is {} bytes and could not be raised to {bytes}: going on (root's CAP_IPC_LOCK \
         lets the kernel lock it anyway)",
        memlock_limit().unwrap_or(u64::MAX)
    ))
}

/// Moves the calling thread into the network namespace open at `ns`
/// (`setns(fd, CLONE_NEWNET)`). Only this thread moves.
pub(crate) fn setns_net(ns: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: plain system call on a valid descriptor.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The effective uid (0 = root).
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// `send(fd, buf, 0)`.
pub(crate) fn send(fd: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length during the call.
    let rc = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `recv(fd, buf, flags)`.
pub(crate) fn recv(fd: &impl AsRawFd, buf: &mut [u8], flags: i32) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length during the call.
    let rc = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `poll` for readability on several descriptors (at most 16); returns
/// when one is readable or after `timeout_ms`. EINTR counts as a timeout.
/// Waits up to `timeout_ms` for one of `fds` to be readable; true when one
/// reported an error or hang-up instead (its pending error is read, which
/// clears it: a link that went down reports `ENETDOWN` once).
pub(crate) fn poll_many(fds: &[RawFd], timeout_ms: i32) -> io::Result<bool> {
    let mut p = [libc::pollfd { fd: -1, events: 0, revents: 0 }; 16];
    let n = fds.len().min(p.len());
    for (slot, &fd) in p.iter_mut().zip(&fds[..n]) {
        *slot = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    }
    // SAFETY: `p[..n]` are valid pollfds.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
        return Ok(false);
    }
    let mut trouble = false;
    for q in &p[..n] {
        if q.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            trouble = true;
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: `err` and `len` are valid for writes of their sizes.
            unsafe {
                libc::getsockopt(
                    q.fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    (&mut err as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
        }
    }
    Ok(trouble)
}

/// True if capability number `cap` is in this thread's effective set
/// (from `/proc/thread-self/status`; false if that cannot be read).
pub fn has_cap(cap: u32) -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/thread-self/status") else { return false };
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|m| cap < 64 && m & (1u64 << cap) != 0)
}

/// `CAP_NET_ADMIN`.
pub const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`.
pub const CAP_NET_RAW: u32 = 13;
/// `CAP_SYS_ADMIN`.
pub const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_BPF` (Linux 5.8+).
pub const CAP_BPF: u32 = 39;

/// The system's page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(4096)
}
