//! A guard for the tests, in this process: started on a free loopback
//! port in front of `up`, stopped and joined; and a client connection to it.

use sluice_guard::{Config, Guard, GuardThreads};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
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
