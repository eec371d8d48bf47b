//! An upstream for the guard's tests: each request head it receives (no
//! bodies) goes to `answer`, which may take its time and returns the
//! response bytes; a thread per connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

pub fn upstream(answer: impl Fn(&str) -> Vec<u8> + Clone + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut chunk) {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        if s.write_all(&answer(&head)).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}
