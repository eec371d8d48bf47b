//! A guard for the tests, in this process: started on a free loopback
//! port in front of `up`, stopped and joined; and a client connection to it.

use sluice_guard::{Config, Guard, GuardThreads, Shared};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A guard in front of `up`, at its defaults but for what `tune` sets
/// (not pinned to a CPU: tests run side by side).
pub fn start(up: SocketAddr, tune: impl FnOnce(&mut Config)) -> (SocketAddr, GuardThreads) {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    tune(&mut c);
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    (addr, g.start().unwrap())
}

pub fn stop(g: GuardThreads) {
    g.stop_flag().store(true, Ordering::Relaxed);
    g.wait().unwrap();
}

/// A connection to `to` whose reads give up after 10 s (a test fails, not hangs).
#[allow(dead_code)] // each test binary uses some of these
pub fn connect(to: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// [`connect`] from source address `from` (a loopback address of its own:
/// the guard counts and paces each client by its address).
#[allow(dead_code)] // each test binary uses some of these
pub fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0).into()).unwrap();
    s.connect(&to.into()).unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// What [`one_thread`]'s upstream answers every request.
pub const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
pub const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

/// A one-thread guard (so one loop sees every connection) in front of an
/// upstream answering [`OK`], at its defaults but for what `tune` sets; and
/// its shared state, for its counts.
#[allow(dead_code)] // each test binary uses some of these
pub fn one_thread(tune: impl FnOnce(&mut Config)) -> (SocketAddr, GuardThreads, Arc<Shared>) {
    let up = super::heads::upstream(|_| OK.to_vec());
    let (addr, g) = start(up, |c| {
        c.threads = 1;
        tune(c);
    });
    let shared = g.shared();
    (addr, g, shared)
}

/// One [`GET`] on `s`, its whole response read: [`OK`].
#[allow(dead_code)] // each test binary uses some of these
pub fn exchange(s: &mut TcpStream) {
    s.write_all(GET).unwrap();
    let mut got = vec![0; OK.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, OK);
}
