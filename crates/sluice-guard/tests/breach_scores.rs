//! Breaches weighed before an IP block (`--ip-block-after`): one 405 or a
//! request without Host leaves the address served, enough of them block
//! it; a smuggling attempt (Content-Length with Transfer-Encoding) blocks
//! at once. Each client has a loopback address of its own.

mod support;
use support::{heads, running};

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// The guard's answer to `request` from `from`, read to the close: its
/// status, or `None` when the connection was closed without one or never
/// made (blocked: refused at accept, or its SYN dropped by the SYN filter).
fn status_from(from: &str, to: SocketAddr, request: &[u8]) -> Option<u16> {
    let from: IpAddr = from.parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(from, 0).into()).unwrap();
    s.connect_timeout(&to.into(), Duration::from_millis(500)).ok()?;
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(request);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok())
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
const DELETE: &[u8] = b"DELETE / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
const NO_HOST: &[u8] = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
const SMUGGLE: &[u8] =
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

#[test]
fn mistakes_add_up_to_a_block_and_smuggling_blocks_at_once() {
    let up = heads::upstream(|_| OK.to_vec());
    let (addr, g) = running::start(up, |c| {
        c.limits.http_methods = Some(vec!["GET".into(), "HEAD".into()]);
        c.limits.http_host_required = true;
        c.ip_block = Some(60);
        c.ip_block_after = 3;
    });
    let user = "127.8.0.1";
    assert_eq!(status_from(user, addr, DELETE), Some(405));
    assert_eq!(status_from(user, addr, GET), Some(200), "one 405 does not block");
    assert_eq!(status_from(user, addr, NO_HOST), Some(400));
    assert_eq!(status_from(user, addr, GET), Some(200), "nor a 405 and a request without Host");
    // The third point reaches --ip-block-after 3: answered, then blocked.
    assert_eq!(status_from(user, addr, DELETE), Some(405));
    assert_eq!(status_from(user, addr, GET), None, "blocked at accept");
    // A smuggling attempt: blocked at once.
    let smuggler = "127.8.0.2";
    assert_eq!(status_from(smuggler, addr, GET), Some(200));
    assert_eq!(status_from(smuggler, addr, SMUGGLE), Some(400));
    assert_eq!(status_from(smuggler, addr, GET), None, "blocked at once");
    // Others are served throughout.
    assert_eq!(status_from("127.8.0.3", addr, GET), Some(200));
    running::stop(g);
}

#[test]
fn ip_block_after_1_blocks_at_the_first_breach_as_before() {
    let up = heads::upstream(|_| OK.to_vec());
    let (addr, g) = running::start(up, |c| {
        c.limits.http_methods = Some(vec!["GET".into()]);
        c.ip_block = Some(60);
        c.ip_block_after = 1;
    });
    assert_eq!(status_from("127.8.1.1", addr, DELETE), Some(405));
    assert_eq!(status_from("127.8.1.1", addr, GET), None);
    running::stop(g);
}

/// At the default (5), four mistakes leave a user served.
#[test]
fn the_default_score_forgives_a_few_mistakes() {
    let up = heads::upstream(|_| OK.to_vec());
    let (addr, g) = running::start(up, |c| {
        c.limits.http_uri_len = Some(64);
        c.ip_block = Some(60);
    });
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "x".repeat(100));
    for _ in 0..4 {
        assert_eq!(status_from("127.8.2.1", addr, long.as_bytes()), Some(414));
    }
    assert_eq!(status_from("127.8.2.1", addr, GET), Some(200));
    assert_eq!(status_from("127.8.2.1", addr, long.as_bytes()), Some(414));
    assert_eq!(status_from("127.8.2.1", addr, GET), None, "the fifth blocks");
    running::stop(g);
}
