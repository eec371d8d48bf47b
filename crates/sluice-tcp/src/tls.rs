//! Non-blocking TLS over a socket, either side (rustls): records out until
//! the socket would block, plaintext in through rustls's bounded queue.

use rustls::ConnectionCommon;
use std::io::{self, Read, Write};

/// Send queued TLS records until the socket would block; the bytes sent.
pub fn flush<D>(conn: &mut ConnectionCommon<D>, sock: &mut impl Write) -> io::Result<usize> {
    let mut sent = 0;
    while conn.wants_write() {
        match conn.write_tls(sock) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

/// Plaintext in, TLS records out (for [`crate::write_pending`]);
/// `WouldBlock` once rustls's queue is at its limit.
pub struct PlainWriter<'a, D, S> {
    pub conn: &'a mut ConnectionCommon<D>,
    pub sock: &'a mut S,
}

impl<D, S: Write> Write for PlainWriter<'_, D, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        flush(self.conn, self.sock)?;
        let n = self.conn.writer().write(buf)?;
        flush(self.conn, self.sock)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        flush(self.conn, self.sock).map(drop)
    }
}

/// Plaintext into `buf`, reading and processing records as needed and
/// sending what processing produced (handshake messages, alerts). `Ok(0)`:
/// the peer closed (with or without a close_notify); `WouldBlock`: nothing
/// more now. A TLS error is `InvalidData`, after its alert is sent.
pub fn read<D>(conn: &mut ConnectionCommon<D>, sock: &mut (impl Read + Write), buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match conn.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) => return Err(e),
        }
        match conn.read_tls(sock) {
            Ok(0) => return Ok(0),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let processed = conn.process_new_packets();
        flush(conn, sock)?;
        processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
}
