//! An upstream for the guard's tests: each request head it receives (no
//! bodies) goes to `answer`, which may take its time and says what to
//! send; a thread per connection. And the tests' own reader of chunked
//! bodies.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

/// What the upstream does with one request head.
#[allow(dead_code)] // each test binary uses some of these
pub enum Reply {
    /// Send these bytes and read the next request.
    Send(Vec<u8>),
    /// Send these bytes, then close the connection.
    SendAndClose(Vec<u8>),
    /// Close the connection without answering.
    Close,
}

/// An upstream answering every request head with `answer`'s bytes.
#[allow(dead_code)]
pub fn upstream(answer: impl Fn(&str) -> Vec<u8> + Clone + Send + 'static) -> SocketAddr {
    upstream_with(move |head| Reply::Send(answer(head)))
}

/// An upstream doing what `reply` says with each request head.
pub fn upstream_with(reply: impl Fn(&str) -> Reply + Clone + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let reply = reply.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut chunk) {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let (bytes, close) = match reply(&head) {
                            Reply::Send(b) => (b, false),
                            Reply::SendAndClose(b) => (b, true),
                            Reply::Close => return,
                        };
                        if s.write_all(&bytes).is_err() || close {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// The data of a whole chunked body at the start of `bytes`, and the bytes
/// it took; `None` while it is not whole. (The test's own reader, simpler
/// than the guard's: sizes, data, CRLFs, trailer lines.)
#[allow(dead_code)] // each test binary uses some of these
pub fn dechunk(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&bytes[at..line_end]).unwrap();
        let size = usize::from_str_radix(line.split(';').next().unwrap(), 16).unwrap();
        at = line_end + 2;
        if size == 0 {
            // Trailer lines up to the empty one.
            loop {
                let end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((data, at));
                }
            }
        }
        let chunk = bytes.get(at..at + size + 2)?;
        assert_eq!(&chunk[size..], b"\r\n", "chunk data not followed by CRLF");
        data.extend_from_slice(&chunk[..size]);
        at += size + 2;
    }
}
