//! A client that pipelines requests and then closes its sending side (a
//! FIN, or a TLS close_notify) is still answered every request it sent:
//! found by the `guard_conn` fuzz target, where the guard answered the
//! first and closed when the FIN had arrived before that first response.

mod support;
use support::heads;

use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, Guard};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// An upstream that answers each request head with [`OK`] after 50 ms (so
/// the client's FIN reaches the guard before the first response does).
fn slow_upstream() -> SocketAddr {
    heads::upstream(|_| {
        std::thread::sleep(Duration::from_millis(50));
        OK.to_vec()
    })
}

fn guard(tls: bool) -> (SocketAddr, sluice_guard::GuardThreads) {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), slow_upstream());
    c.pin = false;
    if tls {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
        c.tls = vec![CertFiles { cert: dir.join("tls-a.test.pem"), key: dir.join("tls-a.test.key") }];
    }
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    (addr, g.start().unwrap())
}

fn responses(got: &[u8]) -> usize {
    got.windows(OK.len()).filter(|w| w == &OK).count()
}

#[test]
fn pipelined_requests_before_a_fin_are_all_answered() {
    let (addr, running) = guard(false);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&GET.repeat(3)).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(responses(&got), 3, "{}", String::from_utf8_lossy(&got));
    // A partial head at EOF still gets nothing (and the connection closes).
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[GET, b"GET / HT"].concat()).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, OK, "{}", String::from_utf8_lossy(&got));
    assert_eq!(running.wait().unwrap().counts.forwarded, 4);
}

#[test]
fn pipelined_requests_before_a_close_notify_are_all_answered() {
    let (addr, running) = guard(true);
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let conn = rustls::ClientConnection::new(support::running::tls_client(), name).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(&GET.repeat(3)).unwrap();
    tls.conn.send_close_notify();
    tls.flush().unwrap();
    let mut got = Vec::new();
    // The guard's close_notify ends it (Ok), or its FIN (UnexpectedEof).
    let _ = tls.read_to_end(&mut got);
    assert_eq!(responses(&got), 3, "{}", String::from_utf8_lossy(&got));
    assert_eq!(running.wait().unwrap().counts.forwarded, 3);
}
