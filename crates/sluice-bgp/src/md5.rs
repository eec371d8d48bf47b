//! TCP MD5 signatures (RFC 2385), which BGP peers commonly require: the
//! key for a peer is set on the socket before it connects, or on the
//! listener before the peer connects to it. Linux only (`TCP_MD5SIG`).

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The longest key the kernel takes (`TCP_MD5SIG_MAXKEYLEN`).
pub const MAX_KEY: usize = 80;

/// `struct tcp_md5sig` of linux/tcp.h.
#[repr(C)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    ifindex: libc::c_int,
    key: [u8; MAX_KEY],
}

/// Sign (and require signed) segments to and from `peer` on `fd` with `key`.
pub fn set_key(fd: &impl AsRawFd, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a TCP MD5 key is 1 to {MAX_KEY} bytes")));
    }
    let addr = socket2::SockAddr::from(SocketAddr::new(peer, 0));
    // SAFETY: all-zero is a valid `sockaddr_storage` and `TcpMd5Sig`.
    let mut sig: TcpMd5Sig = unsafe { std::mem::zeroed() };
    // SAFETY: `SockAddr` holds at most a `sockaddr_storage` (its `len()`
    // bytes), copied into one.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.as_ptr().cast::<u8>(),
            std::ptr::addr_of_mut!(sig.addr).cast::<u8>(),
            addr.len() as usize,
        );
    }
    sig.keylen = key.len() as u16;
    sig.key[..key.len()].copy_from_slice(key);
    // SAFETY: a valid fd, and a pointer to a whole `tcp_md5sig` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            std::ptr::addr_of!(sig).cast(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Connect to `addr` with segments signed by `key`.
pub fn connect(addr: SocketAddr, key: &[u8], timeout: Duration) -> io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    set_key(&s, addr.ip(), key).map_err(|e| io::Error::new(e.kind(), format!("TCP MD5 (TCP_MD5SIG): {e}")))?;
    s.connect_timeout(&addr.into(), timeout)?;
    Ok(s.into())
}
