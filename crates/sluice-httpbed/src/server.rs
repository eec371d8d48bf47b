//! The server: one thread per `threads`, each with its own listening socket
//! on the same address (SO_REUSEPORT, so the kernel spreads connections and
//! no accept lock is shared) and its own mio event loop. A connection is read
//! into its own buffer, framed request by request (`request::Framer`), and
//! answered in order from a per-connection output buffer that is reused; the
//! body bytes come from one buffer built at start, so a response allocates
//! nothing. Delayed responses wait in a per-thread queue ordered by due time;
//! the poll timeout is the time to the earliest one (no thread or timer per
//! request).

use crate::dist::{Dist, WeightedList};
use crate::request::{FrameError, FramedHead, Framer, Step, Version};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sluice_tcp::{discard_input, make_room, reuseport_listener};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::io::{self, Read};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest response body `--size` may ask for: the body buffer is built once at this size at most.
pub const MAX_BODY: u64 = 64 << 20;

/// How often a thread looks at the stop flag when nothing else wakes it.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// Requests parsed but not yet answered, per connection: past this the
/// connection is not read until some are written (pipelining backpressure).
const MAX_PENDING: usize = 256;
/// Bytes of serialized responses a connection may hold before it stops
/// serializing more (the socket is full; wait for it).
const OUT_HIGH: usize = 256 << 10;
/// Initial input buffer; it grows up to `max_head` + this when a head needs it.
const IN_CHUNK: usize = 4096;
/// After an error response the write side is shut and input discarded until
/// the peer closes, for at most this long. Closing at once with unread input
/// would send a RST that can destroy the error response in flight.
const DRAIN_FOR: Duration = Duration::from_secs(2);
const LISTENER: Token = Token(usize::MAX);

/// Stall once: after `after` requests in total (all threads), the next
/// response each thread sends is delayed by `ms` (once per thread). This is
/// the coordinated-omission test's one-second hiccup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub after: u64,
    pub ms: u64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub threads: usize,
    /// Response body size in bytes.
    pub size: Dist,
    /// Response delay in milliseconds.
    pub delay_ms: Dist,
    pub status_mix: WeightedList<u16>,
    pub stall: Option<Stall>,
    pub max_head: usize,
    /// Thread `i` draws from a ChaCha8 stream seeded with `seed + i`.
    pub seed: u64,
    /// Without it only loopback addresses may be served.
    pub allow_remote: bool,
    /// Pin thread `i` to CPU `i % cpus` (best effort).
    pub pin: bool,
    /// Answer a request only once its whole body came (as an application
    /// reading a form does), not at its head.
    pub after_body: bool,
}

impl Config {
    /// Defaults: one thread, 128-byte 200 responses, no delay, 16 KiB heads.
    pub fn new(listen: SocketAddr) -> Self {
        Config {
            listen,
            threads: 1,
            size: Dist::Fixed(128),
            delay_ms: Dist::Fixed(0),
            status_mix: WeightedList::new(vec![(200, 1)]).expect("one weight"),
            stall: None,
            max_head: crate::request::DEFAULT_MAX_HEAD,
            seed: 0,
            allow_remote: false,
            pin: true,
            after_body: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0}: not a loopback address (the test bed must not expose servers by accident); \
         pass --allow-remote to serve it anyway"
    )]
    NotLoopback(SocketAddr),
    #[error("--size can reach {0} bytes; the largest body served is {MAX_BODY}")]
    BodyTooLarge(u64),
    #[error("status {0} in the status mix: only 200-599 except 204 and 304 (those must not carry a body)")]
    BadStatus(u16),
    #[error("--threads must be at least 1")]
    NoThreads,
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    move |source| ServeError::Io { what: what.into(), source }
}

/// Counters of one thread.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ThreadStats {
    pub thread: usize,
    /// Well-formed requests answered (error responses are counted apart).
    pub requests: u64,
    pub connections: u64,
    /// Bytes written to sockets (heads and bodies).
    pub bytes: u64,
    pub bad_request: u64,
    pub header_too_large: u64,
    /// Distinct peer IP addresses this thread accepted from.
    pub sources: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Errors {
    pub bad_request: u64,
    pub header_too_large: u64,
}

/// The `--json` summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Report {
    pub requests: u64,
    pub connections: u64,
    pub bytes: u64,
    pub errors: Errors,
    /// Distinct peer IP addresses over all threads (the load tester's
    /// `--source` range shows up here).
    pub sources: u64,
    pub per_thread: Vec<ThreadStats>,
}

impl Report {
    /// `sluice http-serve`'s text summary over `elapsed`.
    pub fn text(&self, elapsed: Duration) -> String {
        use std::fmt::Write as _;
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut out = format!(
            "{} requests in {:.1} s ({:.0} req/s over the whole run), {} connections, {} bytes out, {} bad requests, {} heads too large\n",
            self.requests,
            secs,
            self.requests as f64 / secs,
            self.connections,
            self.bytes,
            self.errors.bad_request,
            self.errors.header_too_large
        );
        let _ = writeln!(out, "  {} distinct client addresses", self.sources);
        for t in &self.per_thread {
            let _ = writeln!(
                out,
                "  thread {}: {} requests, {} connections, {} bytes",
                t.thread, t.requests, t.connections, t.bytes
            );
        }
        out
    }
}

impl Report {
    fn from_threads(per_thread: Vec<ThreadStats>, sources: u64) -> Self {
        let sum = |f: fn(&ThreadStats) -> u64| per_thread.iter().map(f).sum();
        Report {
            requests: sum(|t| t.requests),
            connections: sum(|t| t.connections),
            bytes: sum(|t| t.bytes),
            errors: Errors { bad_request: sum(|t| t.bad_request), header_too_large: sum(|t| t.header_too_large) },
            sources,
            per_thread,
        }
    }
}

/// Bound and ready; nothing is accepted until [`Server::start`].
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    addr: SocketAddr,
    config: Config,
}

impl Server {
    pub fn bind(config: Config) -> Result<Server, ServeError> {
        if !config.allow_remote && !config.listen.ip().is_loopback() {
            return Err(ServeError::NotLoopback(config.listen));
        }
        if config.size.max() > MAX_BODY {
            return Err(ServeError::BodyTooLarge(config.size.max()));
        }
        if config.threads == 0 {
            return Err(ServeError::NoThreads);
        }
        if let Some(&(s, _)) =
            config.status_mix.items().iter().find(|(s, _)| !(200..=599).contains(s) || *s == 204 || *s == 304)
        {
            return Err(ServeError::BadStatus(s));
        }
        // The first socket takes the requested address (port 0: the kernel
        // picks one); the others join the port it got, or with port 0 each
        // thread would listen somewhere else.
        let first = reuseport_listener(config.listen).map_err(io_err(format!("binding {}", config.listen)))?;
        let addr = first.local_addr().map_err(io_err("reading the bound address"))?;
        let mut listeners = vec![first];
        for _ in 1..config.threads {
            listeners.push(reuseport_listener(addr).map_err(io_err(format!("binding another socket to {addr}")))?);
        }
        Ok(Server { listeners, addr, config })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Spawn the threads; they serve until [`ServerThreads::stop`].
    pub fn start(self) -> Result<ServerThreads, ServeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let total = Arc::new(AtomicU64::new(0));
        let config = Arc::new(self.config);
        // One shared body buffer: every response body is a prefix of it.
        let body: Arc<[u8]> = (0..config.size.max()).map(|i| b"sluice\n"[(i % 7) as usize]).collect();
        let cpus = sluice_cpus::available_cpus();
        let mut handles = Vec::new();
        for (i, listener) in self.listeners.into_iter().enumerate() {
            let (stop, total, config, body) = (stop.clone(), total.clone(), config.clone(), body.clone());
            let h = std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || {
                    if config.pin {
                        // Best effort: a restricted cpuset just means no pinning.
                        let _ = sluice_cpus::pin_current_thread(i % cpus);
                    }
                    Worker::new(i, TcpListener::from_std(listener), &config, &body, &total)?.run(&stop)
                })
                .map_err(io_err("spawning a server thread"))?;
            handles.push(h);
        }
        Ok(ServerThreads { stop, handles, started: Instant::now() })
    }
}

/// A thread's counters and the distinct peer addresses it saw (merged at join).
type ThreadResult = io::Result<(ThreadStats, HashSet<IpAddr>)>;

pub struct ServerThreads {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<ThreadResult>>,
    started: Instant,
}

/// What `sluice http-serve` ends with: the counters and how long it served.
#[derive(Debug, Clone)]
pub struct ServeSummary {
    pub report: Report,
    pub elapsed: Duration,
}

impl sluice_control::product::Summary for ServeSummary {
    fn text(&self) -> String {
        self.report.text(self.elapsed)
    }
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(&self.report).unwrap_or_default()
    }
}

impl sluice_control::product::Running for ServerThreads {
    type Summary = ServeSummary;
    type Error = io::Error;
    fn handle(&self) -> sluice_control::product::Handle {
        sluice_control::product::Handle::new(self.stop.clone())
    }
    fn finished(&self) -> bool {
        self.handles.iter().all(JoinHandle::is_finished)
    }
    fn wait(self) -> io::Result<ServeSummary> {
        let elapsed = self.started.elapsed();
        Ok(ServeSummary { report: self.join()?, elapsed })
    }
}

impl ServerThreads {
    /// Setting this flag stops the threads (within ~50 ms); signal handlers may set it.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stop, wait for every thread and sum their counters.
    pub fn join(self) -> io::Result<Report> {
        self.stop();
        let (mut per_thread, mut sources) = (Vec::new(), HashSet::new());
        for h in self.handles {
            let (stats, peers) = h.join().map_err(|_| io::Error::other("a server thread panicked"))??;
            per_thread.push(stats);
            sources.extend(peers);
        }
        Ok(Report::from_threads(per_thread, sources.len() as u64))
    }
}

/// A response decided but maybe not due yet.
struct Pending {
    due: Option<Instant>,
    status: u16,
    body: usize,
    /// HEAD: the same head, no body.
    head_only: bool,
    close: bool,
    /// HTTP/1.0 keep-alive must be confirmed in the response.
    keep_alive_10: bool,
}

#[derive(PartialEq, Eq)]
enum State {
    Open,
    /// A request asked to close (or was refused): read nothing more, answer
    /// what is pending, then shut the write side.
    Closing,
    /// Write side shut; discard input until EOF or the deadline.
    Draining(Instant),
}

struct Conn {
    sock: TcpStream,
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    framer: Framer,
    pending: VecDeque<Pending>,
    /// `after_body`: the answer to the request whose body is arriving.
    awaiting_body: Option<Pending>,
    out: Vec<u8>,
    out_pos: usize,
    state: State,
    peer_eof: bool,
    /// The due time a timer is queued for, so a busy connection does not
    /// flood the queue with duplicates.
    timer: Option<Instant>,
}

struct Worker<'a> {
    stats: ThreadStats,
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    rng: ChaCha8Rng,
    config: &'a Config,
    body: &'a [u8],
    total: &'a AtomicU64,
    stalled: bool,
    in_cap: usize,
    /// Peer addresses seen: one hash insert per accepted connection.
    peers: HashSet<IpAddr>,
}

enum After {
    Keep,
    Close,
}

impl<'a> Worker<'a> {
    fn new(
        i: usize,
        mut listener: TcpListener,
        config: &'a Config,
        body: &'a [u8],
        total: &'a AtomicU64,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Worker {
            stats: ThreadStats { thread: i, ..ThreadStats::default() },
            poll,
            listener,
            conns: Vec::new(),
            free: Vec::new(),
            timers: BinaryHeap::new(),
            rng: ChaCha8Rng::seed_from_u64(config.seed.wrapping_add(i as u64)),
            config,
            body,
            total,
            stalled: config.stall.is_none(),
            in_cap: config.max_head + IN_CHUNK,
            peers: HashSet::new(),
        })
    }

    fn run(mut self, stop: &AtomicBool) -> ThreadResult {
        let mut events = Events::with_capacity(1024);
        while !stop.load(Ordering::Relaxed) {
            let timeout = match self.timers.peek() {
                Some(Reverse((due, _))) => due.saturating_duration_since(Instant::now()).min(STOP_CHECK),
                None => STOP_CHECK,
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in &events {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    Token(i) => self.drive(i),
                }
            }
            if !self.timers.is_empty() {
                let now = Instant::now();
                while let Some(&Reverse((due, i))) = self.timers.peek() {
                    if due > now {
                        break;
                    }
                    self.timers.pop();
                    // A stale entry (connection gone or slot reused) just
                    // drives a connection once more, which is harmless.
                    if let Some(Some(c)) = self.conns.get_mut(i) {
                        if c.timer == Some(due) {
                            c.timer = None;
                        }
                        self.drive(i);
                    }
                }
            }
        }
        self.stats.sources = self.peers.len() as u64;
        Ok((self.stats, self.peers))
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut sock, peer)) => {
                    self.peers.insert(peer.ip());
                    // Responses are written whole; Nagle would only hold the
                    // last segment back behind the peer's delayed ACK.
                    let _ = sock.set_nodelay(true);
                    let i = self.free.pop().unwrap_or_else(|| {
                        self.conns.push(None);
                        self.conns.len() - 1
                    });
                    // Edge-triggered, registered once for both directions:
                    // drive() always works until WouldBlock.
                    if self
                        .poll
                        .registry()
                        .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)
                        .is_err()
                    {
                        self.free.push(i);
                        continue;
                    }
                    self.stats.connections += 1;
                    self.conns[i] = Some(Conn {
                        sock,
                        inbuf: vec![0; IN_CHUNK.min(self.in_cap)],
                        in_start: 0,
                        in_end: 0,
                        framer: Framer::new(self.config.max_head),
                        pending: VecDeque::new(),
                        awaiting_body: None,
                        out: Vec::new(),
                        out_pos: 0,
                        state: State::Open,
                        peer_eof: false,
                        timer: None,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: all accepted. Anything else (EMFILE, a reset
                // before accept) also ends this round; the next connection
                // wakes the listener again.
                Err(_) => return,
            }
        }
    }

    fn drive(&mut self, i: usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(Option::take) else { return };
        match self.serve(&mut conn, i) {
            After::Keep => self.conns[i] = Some(conn),
            After::Close => {
                let _ = self.poll.registry().deregister(&mut conn.sock);
                self.free.push(i);
            }
        }
    }

    /// Read, frame, answer, write, until nothing moves.
    fn serve(&mut self, c: &mut Conn, i: usize) -> After {
        loop {
            if let State::Draining(deadline) = c.state {
                return drain(c, deadline);
            }
            let mut progress = false;

            // Read, unless backpressured or done with input.
            if c.state == State::Open
                && !c.peer_eof
                && c.pending.len() < MAX_PENDING
                && c.out.len() - c.out_pos < OUT_HIGH
            {
                make_room(&mut c.inbuf, &mut c.in_start, &mut c.in_end, self.in_cap);
                if c.in_end < c.inbuf.len() {
                    match c.sock.read(&mut c.inbuf[c.in_end..]) {
                        Ok(0) => c.peer_eof = true,
                        Ok(n) => {
                            c.in_end += n;
                            progress = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => return After::Close,
                    }
                }
            }

            progress |= self.frame_all(c);
            if c.in_start == c.in_end {
                c.in_start = 0;
                c.in_end = 0;
            }

            self.serialize_due(c, i);

            // Write.
            match sluice_tcp::write_pending(&mut c.sock, &c.out, &mut c.out_pos) {
                Ok(0) => {}
                Ok(n) => {
                    self.stats.bytes += n as u64;
                    progress = true;
                }
                Err(_) => return After::Close,
            }
            let flushed = c.out_pos == c.out.len();
            if flushed {
                c.out.clear();
                c.out_pos = 0;
            }

            if flushed && c.pending.is_empty() {
                if c.state == State::Closing {
                    let _ = c.sock.shutdown(Shutdown::Write);
                    let deadline = Instant::now() + DRAIN_FOR;
                    c.state = State::Draining(deadline);
                    self.timers.push(Reverse((deadline, i)));
                    continue;
                }
                if c.peer_eof {
                    // The peer is gone and everything it asked is answered
                    // (a partial head at EOF gets no answer).
                    return After::Close;
                }
            }
            if !progress {
                return After::Keep;
            }
        }
    }

    /// Frame whatever is complete; whether a request was framed.
    fn frame_all(&mut self, c: &mut Conn) -> bool {
        let mut progress = false;
        while c.state == State::Open && c.pending.len() < MAX_PENDING {
            match c.framer.step(&c.inbuf[c.in_start..c.in_end]) {
                Ok(Step::NeedMore) => break,
                Ok(Step::Body(n)) => {
                    c.in_start += n;
                    if !c.framer.in_body() {
                        if let Some(p) = c.awaiting_body.take() {
                            if p.close {
                                c.state = State::Closing;
                            }
                            c.pending.push_back(p);
                            progress = true;
                        }
                    }
                }
                Ok(Step::Request(h)) => {
                    let head_only = h.is_head_method(&c.inbuf[c.in_start..c.in_end]);
                    c.in_start += h.len;
                    let p = self.respond_to(&h, head_only);
                    if self.config.after_body && c.framer.in_body() {
                        // Framing goes on (state Open) until the body ends.
                        c.awaiting_body = Some(p);
                    } else {
                        if p.close {
                            c.state = State::Closing;
                        }
                        c.pending.push_back(p);
                    }
                    progress = true;
                }
                Err(e) => {
                    match e {
                        FrameError::BadRequest(_) | FrameError::NotImplemented(_) => self.stats.bad_request += 1,
                        FrameError::HeadTooLarge => self.stats.header_too_large += 1,
                    }
                    c.pending.push_back(Pending {
                        due: None,
                        status: e.status(),
                        body: 0,
                        head_only: false,
                        close: true,
                        keep_alive_10: false,
                    });
                    c.state = State::Closing;
                    progress = true;
                }
            }
        }
        progress
    }

    /// Serialize what is due, in order; a request not yet due sets the
    /// connection's timer.
    fn serialize_due(&mut self, c: &mut Conn, i: usize) {
        let mut closing_written = false;
        let mut now = None;
        while let Some(p) = c.pending.front() {
            if c.out.len() - c.out_pos >= OUT_HIGH {
                break;
            }
            if let Some(due) = p.due {
                let now = *now.get_or_insert_with(Instant::now);
                if due > now {
                    if c.timer != Some(due) {
                        c.timer = Some(due);
                        self.timers.push(Reverse((due, i)));
                    }
                    break;
                }
            }
            let p = c.pending.pop_front().expect("front exists");
            if c.out_pos == c.out.len() {
                c.out.clear();
                c.out_pos = 0;
            }
            write_response(&mut c.out, &p, self.body);
            if p.close {
                closing_written = true;
                c.pending.clear();
                break;
            }
        }
        if closing_written {
            // Nothing after a closing response may be answered.
            c.state = State::Closing;
        }
    }

    /// Decide status, size and delay for one request; count it.
    fn respond_to(&mut self, h: &FramedHead, head_only: bool) -> Pending {
        self.stats.requests += 1;
        let status = *self.config.status_mix.sample(&mut self.rng);
        let body = self.config.size.sample(&mut self.rng) as usize;
        let mut delay_ms = if self.config.delay_ms.is_zero() { 0 } else { self.config.delay_ms.sample(&mut self.rng) };
        if !self.stalled {
            // Only threads that have not stalled yet touch the shared counter.
            let stall = self.config.stall.expect("stalled is preset without a stall");
            if self.total.fetch_add(1, Ordering::Relaxed) + 1 > stall.after {
                self.stalled = true;
                delay_ms += stall.ms;
            }
        }
        Pending {
            due: (delay_ms > 0).then(|| Instant::now() + Duration::from_millis(delay_ms)),
            status,
            body,
            head_only,
            close: !h.keep_alive,
            keep_alive_10: h.keep_alive && h.version == Version::Http10,
        }
    }
}

/// Input after the write side is shut: discard it until EOF or the deadline.
fn drain(c: &mut Conn, deadline: Instant) -> After {
    if Instant::now() < deadline && discard_input(&mut c.sock) {
        After::Keep
    } else {
        After::Close
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Append one response; no allocation once `out` has grown to its working size.
fn write_response(out: &mut Vec<u8>, p: &Pending, body: &[u8]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(p.status));
    out.push(b' ');
    out.extend_from_slice(reason(p.status).as_bytes());
    out.extend_from_slice(b"\r\nServer: sluice\r\nContent-Length: ");
    push_decimal(out, p.body as u64);
    out.extend_from_slice(b"\r\n");
    if p.close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if p.keep_alive_10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !p.head_only {
        out.extend_from_slice(&body[..p.body]);
    }
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream as StdStream;

    fn start(config: Config) -> (SocketAddr, ServerThreads) {
        let server = Server::bind(config).unwrap();
        let addr = server.local_addr();
        (addr, server.start().unwrap())
    }

    /// Read one response: (status, body length), checking the framing.
    fn read_response(r: &mut BufReader<StdStream>) -> (u16, usize, bool) {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let (mut len, mut close) = (None, false);
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            let (k, v) = line.trim_end().split_once(": ").unwrap();
            if k == "Content-Length" {
                len = Some(v.parse().unwrap());
            }
            close |= k == "Connection" && v == "close";
        }
        let len = len.expect("Content-Length always");
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        (status, len, close)
    }

    #[test]
    fn refuses_remote_addresses_without_the_flag() {
        let e = Server::bind(Config::new("0.0.0.0:0".parse().unwrap())).err().unwrap().to_string();
        assert!(e.contains("--allow-remote"), "{e}");
    }

    #[test]
    fn refuses_bodyless_statuses() {
        let mut c = Config::new("127.0.0.1:0".parse().unwrap());
        c.status_mix = "200@1,204@1".parse().unwrap();
        assert!(matches!(Server::bind(c), Err(ServeError::BadStatus(204))));
    }

    #[test]
    fn serves_keep_alive_pipelined_head_and_http10() {
        let mut c = Config::new("127.0.0.1:0".parse().unwrap());
        c.threads = 2;
        c.size = Dist::Fixed(33);
        c.pin = false;
        let (addr, running) = start(c);
        let s = StdStream::connect(addr).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        w.write_all(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcHEAD / HTTP/1.1\r\n\r\n",
        )
        .unwrap();
        assert_eq!(read_response(&mut r), (200, 33, false));
        assert_eq!(read_response(&mut r), (200, 33, false));
        // HEAD: the same Content-Length, no body bytes follow.
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"));
        while line != "\r\n" {
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        w.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut r), (200, 33, true));
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        let report = running.join().unwrap();
        assert_eq!(report.requests, 4);
        assert_eq!(report.connections, 1);
        assert_eq!(report.per_thread.len(), 2);
    }

    #[test]
    fn after_body_answers_once_the_body_came() {
        let mut c = Config::new("127.0.0.1:0".parse().unwrap());
        (c.size, c.pin, c.after_body) = (Dist::Fixed(5), false, true);
        let (addr, running) = start(c);
        let s = StdStream::connect(addr).unwrap();
        let mut w = s.try_clone().unwrap();
        w.write_all(b"POST / HTTP/1.1\r\nContent-Length: 6\r\n\r\nabc").unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_millis(300))).unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        assert!(r.read_line(&mut line).is_err() && line.is_empty(), "answered at the head: {line:?}");
        // The rest of the body, then a request without one (answered at once).
        w.write_all(b"defGET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        r.get_ref().set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        assert_eq!(read_response(&mut r), (200, 5, false));
        assert_eq!(read_response(&mut r), (200, 5, true));
        assert_eq!(running.join().unwrap().requests, 2);
    }

    #[test]
    fn delayed_responses_keep_their_order() {
        let mut c = Config::new("127.0.0.1:0".parse().unwrap());
        c.size = Dist::Uniform(0, 50);
        c.delay_ms = "list:0@1,30@1".parse().unwrap();
        c.pin = false;
        let (addr, running) = start(c);
        let s = StdStream::connect(addr).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut batch = Vec::new();
        for i in 0..40 {
            batch.extend_from_slice(format!("GET /{i} HTTP/1.1\r\n\r\n").as_bytes());
        }
        w.write_all(&batch).unwrap();
        for _ in 0..40 {
            let (status, len, _) = read_response(&mut r);
            assert_eq!(status, 200);
            assert!(len <= 50);
        }
        assert_eq!(running.join().unwrap().requests, 40);
    }
}
