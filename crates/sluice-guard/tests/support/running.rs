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

/// Waits (5 s at most) until `f` holds of the guard's counts.
pub fn until(shared: &Shared, what: &str, f: impl Fn(&sluice_guard::CountTotals) -> bool) {
    let t = std::time::Instant::now();
    while !f(&shared.report().counts) {
        assert!(t.elapsed() < Duration::from_secs(5), "{what}: {:?}", shared.report().counts);
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the guard closed `s` (its FIN or RST came); a connection still
/// open has nothing to read.
pub fn closed(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    let r = s.read(&mut b);
    s.set_nonblocking(false).unwrap();
    match r {
        Ok(0) => true,
        Ok(n) => panic!("{n} bytes from an idle connection"),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// A TLS client config trusting the test CA of `src/testdata` (whose
/// `tls-a.test` certificate the TLS guards of the tests serve).
pub fn tls_client() -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/tls-ca.pem");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}
