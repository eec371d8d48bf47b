//! Tunnels under load (`sluice-bench guard --tunnels`): connections that
//! upgrade like a WebSocket handshake (`101 Switching Protocols`) and then
//! bounce messages off an echo, one in flight per connection, so the
//! messages per second and each round trip say what a front (the guard,
//! nginx, HAProxy) costs once its connections are tunnels. Both ends run
//! here, each on one thread with its own `mio` loop: [`EchoServer`] (the
//! upstream) and [`drive`] (the clients). Every echoed byte is checked.

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The 101 to the clients' handshake: its `Sec-WebSocket-Accept` is the one
/// for their fixed key (RFC 6455's own example), which HAProxy checks.
const SWITCH: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
const LISTENER: Token = Token(usize::MAX);

/// The end of an HTTP head in `buf`, if it is there.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Read what `s` has (edge-triggered: until it would block) onto `buf`;
/// false at EOF or an error.
fn read_all(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 65536];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Write what `out[*pos..]` holds until it would block; false on an error.
fn flush(s: &mut TcpStream, out: &mut Vec<u8>, pos: &mut usize) -> bool {
    while *pos < out.len() {
        match s.write(&out[*pos..]) {
            Ok(n) => *pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    out.clear();
    *pos = 0;
    true
}

/// The upstream: answers a request head with a 101, then echoes every byte.
pub struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

struct Peer {
    sock: TcpStream,
    input: Vec<u8>,
    out: Vec<u8>,
    pos: usize,
    switched: bool,
}

impl EchoServer {
    pub fn start() -> io::Result<EchoServer> {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("an address"))?;
        let addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("echo".into()).spawn(move || serve(poll, listener, &flag))?;
        Ok(EchoServer { addr, stop, thread: Some(thread) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut poll: Poll, listener: TcpListener, stop: &AtomicBool) {
    let mut events = Events::with_capacity(1024);
    let mut peers: Vec<Option<Peer>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if poll.poll(&mut events, Some(Duration::from_millis(50))).is_err() {
            continue;
        }
        for ev in &events {
            if ev.token() == LISTENER {
                while let Ok((mut sock, _)) = listener.accept() {
                    let _ = sock.set_nodelay(true);
                    let i = peers.iter().position(Option::is_none).unwrap_or_else(|| {
                        peers.push(None);
                        peers.len() - 1
                    });
                    if poll.registry().register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE).is_ok() {
                        peers[i] = Some(Peer { sock, input: Vec::new(), out: Vec::new(), pos: 0, switched: false });
                    }
                }
                continue;
            }
            let i = ev.token().0;
            let Some(p) = peers.get_mut(i).and_then(Option::as_mut) else { continue };
            let open = read_all(&mut p.sock, &mut p.input);
            if !p.switched {
                if let Some(end) = head_end(&p.input) {
                    p.input.drain(..end);
                    p.out.extend_from_slice(SWITCH);
                    p.switched = true;
                }
            }
            if p.switched {
                p.out.append(&mut p.input);
            }
            let wrote = flush(&mut p.sock, &mut p.out, &mut p.pos);
            if !open || !wrote {
                if let Some(mut p) = peers[i].take() {
                    let _ = poll.registry().deregister(&mut p.sock);
                }
            }
        }
    }
}

/// What [`drive`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Messages echoed back whole in the timed span, and the span.
    pub messages: u64,
    pub seconds: f64,
    /// Round trips in microseconds: median and 99th percentile.
    pub median_us: f64,
    pub p99_us: f64,
}

impl Outcome {
    pub fn per_second(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
}

struct Client {
    sock: TcpStream,
    input: Vec<u8>,
    out: Vec<u8>,
    pos: usize,
    switched: bool,
    sent_at: Instant,
}

/// `connections` connections to `addr` upgrade (`GET /ws` with the
/// WebSocket handshake's headers), then each sends a `size`-byte message,
/// waits for its echo, checks it and sends the next, for `duration`. An
/// answer other than 101, a changed byte, or a connection closed before
/// the end is an error.
pub fn drive(addr: SocketAddr, connections: usize, size: usize, duration: Duration) -> io::Result<Outcome> {
    let mut poll = Poll::new()?;
    let msg: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let mut clients = Vec::with_capacity(connections);
    for i in 0..connections {
        let mut sock = TcpStream::connect(addr)?;
        poll.registry().register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)?;
        let out = request.as_bytes().to_vec();
        clients.push(Client { sock, input: Vec::new(), out, pos: 0, switched: false, sent_at: Instant::now() });
    }
    let mut events = Events::with_capacity(1024);
    let mut rtts: Vec<u32> = Vec::new();
    let (mut started, mut end) = (None::<Instant>, None::<Instant>);
    let mut messages = 0u64;
    let deadline = Instant::now() + duration + Duration::from_secs(30);
    loop {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        if now >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the tunnels did not all open"));
        }
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        for ev in &events {
            let c = &mut clients[ev.token().0];
            let open = read_all(&mut c.sock, &mut c.input);
            if !c.switched {
                if let Some(e) = head_end(&c.input) {
                    if !c.input.starts_with(b"HTTP/1.1 101 ") {
                        let head = String::from_utf8_lossy(&c.input[..e]).into_owned();
                        return Err(io::Error::other(format!("the upgrade was answered {head:?}")));
                    }
                    c.input.drain(..e);
                    c.switched = true;
                    c.out.extend_from_slice(&msg);
                    c.sent_at = Instant::now();
                    // The timed span starts once every tunnel is open.
                    if started.is_none() && clients_switched(&clients) == connections {
                        let t = Instant::now();
                        (started, end, messages) = (Some(t), Some(t + duration), 0);
                        rtts.clear();
                    }
                }
            }
            let c = &mut clients[ev.token().0];
            while c.switched && c.input.len() >= size {
                if c.input[..size] != msg[..] {
                    return Err(io::Error::other("an echoed message came back changed"));
                }
                c.input.drain(..size);
                messages += 1;
                rtts.push(c.sent_at.elapsed().as_micros().min(u32::MAX as u128) as u32);
                c.out.extend_from_slice(&msg);
                c.sent_at = Instant::now();
            }
            if !flush(&mut c.sock, &mut c.out, &mut c.pos) || !open {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a tunnel closed under load"));
            }
        }
    }
    let seconds = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    rtts.sort_unstable();
    let pick = |q: f64| rtts.get(((rtts.len() as f64 * q) as usize).min(rtts.len().saturating_sub(1))).copied();
    Ok(Outcome { messages, seconds, median_us: pick(0.5).unwrap_or(0) as f64, p99_us: pick(0.99).unwrap_or(0) as f64 })
}

fn clients_switched(clients: &[Client]) -> usize {
    clients.iter().filter(|c| c.switched).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_bounce_off_the_echo_whole() {
        let echo = EchoServer::start().unwrap();
        for (conns, size) in [(1, 1), (8, 128), (4, 100_000)] {
            let o = drive(echo.addr(), conns, size, Duration::from_millis(200)).unwrap();
            assert!(o.messages > 0 && o.seconds >= 0.2, "{o:?}");
            assert!(o.p99_us >= o.median_us, "{o:?}");
        }
    }

    #[test]
    fn an_upgrade_answered_otherwise_is_an_error() {
        let echo = EchoServer::start().unwrap();
        // A front that refuses the upgrade: here, a listener that answers 404.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut buf = [0u8; 1024];
                let _ = std::io::Read::read(&mut s, &mut buf);
                let _ = std::io::Write::write_all(&mut s, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let e = drive(addr, 1, 16, Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("404"), "{e}");
        drop(echo);
    }
}
