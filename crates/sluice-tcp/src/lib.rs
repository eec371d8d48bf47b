//! Non-blocking TCP plumbing that the HTTP guard (the product) and the HTTP
//! test bed (`http-serve`, `http-load`) share: a listener per thread on one
//! port, an input buffer that makes room without copying on every read,
//! writes that keep what the socket did not take, and a close that drains
//! the peer's last bytes so they do not turn into a reset; `tls`: the same
//! over rustls.
#![deny(unsafe_code)]

pub mod tls;

use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read, Write};
use std::net::SocketAddr;

/// A non-blocking listener on `addr` with SO_REUSEADDR and SO_REUSEPORT, so
/// each event-loop thread can have its own socket on the same port and the
/// kernel spreads connections over them.
pub fn reuseport_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

/// Room at the end of a connection's input buffer `buf[start..end]` when it
/// is full: slide the unconsumed bytes to the front, or, when there are none
/// to drop, double the buffer up to `cap` (a larger head or pipeline waits).
pub fn make_room(buf: &mut Vec<u8>, start: &mut usize, end: &mut usize, cap: usize) {
    if *end < buf.len() {
        return;
    }
    if *start > 0 {
        buf.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
    } else if buf.len() < cap {
        let n = (buf.len() * 2).min(cap);
        buf.resize(n, 0);
    }
}

/// Write `out[*pos..]` to a non-blocking socket until it is all written or
/// the socket would block, advancing `*pos`; returns the bytes written now.
/// An error other than would-block or an interrupt ends the connection.
pub fn write_pending(sock: &mut impl Write, out: &[u8], pos: &mut usize) -> io::Result<usize> {
    let mut written = 0;
    while *pos < out.len() {
        match sock.write(&out[*pos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                *pos += n;
                written += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Reads and throws away what a non-blocking socket holds (after our side
/// shut its writes, so the peer's last bytes do not turn our close into a
/// reset that loses the response). True while the peer has not closed.
pub fn discard_input(sock: &mut impl Read) -> bool {
    let mut scratch = [0u8; 4096];
    loop {
        match sock.read(&mut scratch) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes `chunks[i]` bytes on its i-th write, then blocks.
    struct Slow {
        chunks: Vec<io::Result<usize>>,
        got: Vec<u8>,
    }

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            match self.chunks.pop() {
                Some(Ok(n)) => {
                    let n = n.min(b.len());
                    self.got.extend_from_slice(&b[..n]);
                    Ok(n)
                }
                Some(Err(e)) => Err(e),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let out = b"0123456789";
        let mut pos = 0;
        let mut s = Slow { chunks: vec![Ok(4), Err(io::ErrorKind::Interrupted.into()), Ok(3)], got: Vec::new() };
        assert_eq!(write_pending(&mut s, out, &mut pos).unwrap(), 7);
        assert_eq!(pos, 7);
        s.chunks = vec![Ok(100)];
        assert_eq!(write_pending(&mut s, out, &mut pos).unwrap(), 3);
        assert_eq!((pos, &s.got[..]), (10, &out[..]));
        assert_eq!(write_pending(&mut s, out, &mut pos).unwrap(), 0, "nothing left to write");
        let mut broken = Slow { chunks: vec![Err(io::ErrorKind::ConnectionReset.into())], got: Vec::new() };
        assert!(write_pending(&mut broken, out, &mut 0).is_err());
    }

    #[test]
    fn make_room_slides_then_grows_up_to_the_cap() {
        let mut buf = b"abcdefgh".to_vec();
        let (mut start, mut end) = (5, 8);
        make_room(&mut buf, &mut start, &mut end, 32);
        assert_eq!((start, end, &buf[..3]), (0, 3, &b"fgh"[..]));
        let (mut start, mut end) = (0, 8);
        make_room(&mut buf, &mut start, &mut end, 12);
        assert_eq!(buf.len(), 12, "doubled, but not past the cap");
        make_room(&mut buf, &mut start, &mut 12, 12);
        assert_eq!(buf.len(), 12);
    }

    #[test]
    fn listeners_share_a_port() {
        let a = reuseport_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = a.local_addr().unwrap();
        let b = reuseport_listener(addr).unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
    }
}
