//! The seed's RSS UDP test: `rss-udp-srv` (one echo thread per RSS bucket,
//! each on its own CPU) and `udp-clt` (flows whose Toeplitz hash lands in
//! chosen buckets).
//!
//! Every datagram the client sends starts with a [`HEADER`]-byte header:
//! flow-local sequence number, send time, flow index, and a field the server
//! overwrites with its worker index. The echo carries everything back, so the
//! client can match each echo to its datagram (exactly once: a bitmap per
//! flow), measure the round trip, and see which worker answered.
//!
//! Accounting: `sent == echoed + lost`, where `echoed` counts distinct
//! datagrams whose echo came back before the grace period ended.

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use sluice_steer::{Indirection, RssInput, Toeplitz, DEFAULT_TABLE, MICROSOFT_KEY};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Bytes of the header every load datagram starts with:
/// `seq: u64 | sent_ns: u64 | flow: u32 | worker: u32`, little-endian.
pub const HEADER: usize = 24;
/// Offset of the field the echo server overwrites with its worker index.
const WORKER_AT: usize = 20;
/// What the client puts in the worker field: "no worker wrote here".
const NO_WORKER: u32 = u32::MAX;
/// Largest datagram either side handles (a UDP payload over IPv4).
pub const MAX_SIZE: usize = 65_507;
/// How often a blocked receive wakes up to look at the stop flag and clock.
const POLL: Duration = Duration::from_millis(20);
/// Socket buffers: large enough that a burst from the paced sender is not
/// dropped by the kernel before the worker gets to it.
const SOCKET_BUFFER: usize = 4 << 20;
/// Most flows one load run opens (each has a receiving thread).
pub const MAX_FLOWS: usize = 1024;

// ---------------------------------------------------------------- echo server

/// Whether to set `SO_INCOMING_CPU` on each worker's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncomingCpu {
    /// On unless the listen address is loopback. With `SO_INCOMING_CPU` set,
    /// the kernel's `SO_REUSEPORT` choice prefers the socket whose CPU is the
    /// one the packet arrived on. With a NIC that is the RSS queue's CPU (the
    /// seed's point); on loopback it is the *sender's* CPU, so flows would
    /// follow the client thread around instead of staying on one worker.
    Auto,
    On,
    Off,
}

#[derive(Clone, Debug)]
pub struct EchoConfig {
    pub listen: SocketAddr,
    pub workers: usize,
    /// CPU per worker (cycled); empty: worker `i` on CPU `i % available`.
    pub cpus: Vec<usize>,
    pub incoming_cpu: IncomingCpu,
    /// Stop after this long (None: only the stop flag ends the run).
    pub duration: Option<Duration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    pub worker: usize,
    pub cpu: usize,
    /// Whether `sched_setaffinity` accepted the CPU.
    pub pinned: bool,
    pub datagrams: u64,
    pub bytes: u64,
    /// Distinct sources (address and port) this worker answered.
    pub flows: u64,
    /// Echoes the kernel refused to send (counted, never retried).
    pub send_errors: u64,
}

#[derive(Clone, Debug)]
pub struct EchoReport {
    pub listen: SocketAddr,
    pub workers: Vec<WorkerReport>,
    /// `SO_INCOMING_CPU` was asked for and every socket accepted it.
    pub incoming_cpu: bool,
    pub elapsed: Duration,
}

impl EchoReport {
    /// The text summary `sluice udp-echo` prints: the run, then a line per worker.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "udp-echo {}: {} datagrams in {:.1} s, SO_INCOMING_CPU {}\n",
            self.listen,
            self.datagrams(),
            self.elapsed.as_secs_f64(),
            if self.incoming_cpu { "set" } else { "not set" }
        );
        for w in &self.workers {
            let pinned = if w.pinned { "" } else { " (not pinned)" };
            let _ = writeln!(
                out,
                "  worker {} cpu {}{pinned}: {} datagrams, {} bytes, {} flows",
                w.worker, w.cpu, w.datagrams, w.bytes, w.flows
            );
        }
        out
    }

    pub fn datagrams(&self) -> u64 {
        self.workers.iter().map(|w| w.datagrams).sum()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "listen": self.listen.to_string(),
            "workers": self.workers.iter().map(|w| json!({
                "worker": w.worker,
                "cpu": w.cpu,
                "pinned": w.pinned,
                "datagrams": w.datagrams,
                "bytes": w.bytes,
                "flows": w.flows,
                "send_errors": w.send_errors,
            })).collect::<Vec<_>>(),
            "datagrams": self.datagrams(),
            "incoming_cpu": self.incoming_cpu,
            "elapsed_s": self.elapsed.as_secs_f64(),
        })
    }
}

/// The bound sockets, one per worker, before the workers start.
pub struct EchoServer {
    config: EchoConfig,
    sockets: Vec<UdpSocket>,
    cpus: Vec<usize>,
    incoming_cpu: bool,
    local: SocketAddr,
}

fn reuseport_socket(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    // Best effort: a smaller buffer than asked for still works, just drops sooner.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    Ok(socket)
}

impl EchoServer {
    /// Binds every worker's socket to the same address. Port 0 works: the
    /// first socket gets a port from the kernel and the others join it.
    pub fn bind(config: EchoConfig) -> io::Result<EchoServer> {
        if config.workers == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "at least one worker"));
        }
        let available = sluice_cpus::available_cpus();
        let cpus: Vec<usize> = (0..config.workers)
            .map(|i| if config.cpus.is_empty() { i % available } else { config.cpus[i % config.cpus.len()] })
            .collect();
        let want_incoming = match config.incoming_cpu {
            IncomingCpu::On => true,
            IncomingCpu::Off => false,
            IncomingCpu::Auto => !config.listen.ip().is_loopback(),
        };
        let mut incoming_cpu = want_incoming;
        let mut addr = config.listen;
        let mut sockets = Vec::with_capacity(config.workers);
        for &cpu in &cpus {
            let socket = reuseport_socket(addr)?;
            if want_incoming && socket.set_cpu_affinity(cpu).is_err() {
                incoming_cpu = false;
            }
            socket.bind(&SockAddr::from(addr))?;
            addr = socket.local_addr()?.as_socket().expect("an IP socket has an IP address");
            socket.set_read_timeout(Some(POLL))?;
            sockets.push(UdpSocket::from(socket));
        }
        Ok(EchoServer { config, sockets, cpus, incoming_cpu, local: addr })
    }

    /// The address every worker's socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Runs the workers until `stop` is set or the duration has passed.
    pub fn run(self, stop: Arc<AtomicBool>) -> io::Result<EchoReport> {
        let start = Instant::now();
        let deadline = self.config.duration.map(|d| start + d);
        let handles: Vec<_> = self
            .sockets
            .into_iter()
            .zip(self.cpus.iter().copied())
            .enumerate()
            .map(|(worker, (socket, cpu))| {
                let stop = Arc::clone(&stop);
                thread::Builder::new()
                    .name(format!("udp-echo-{worker}"))
                    .spawn(move || echo_worker(worker, cpu, socket, &stop, deadline))
            })
            .collect::<io::Result<_>>()?;
        let mut workers = Vec::with_capacity(handles.len());
        for h in handles {
            workers.push(h.join().map_err(|_| io::Error::other("an echo worker panicked"))??);
        }
        Ok(EchoReport { listen: self.local, workers, incoming_cpu: self.incoming_cpu, elapsed: start.elapsed() })
    }
}

fn echo_worker(
    worker: usize,
    cpu: usize,
    socket: UdpSocket,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> io::Result<WorkerReport> {
    let pinned = sluice_cpus::pin_current_thread(cpu).is_ok();
    let mut report = WorkerReport { worker, cpu, pinned, ..WorkerReport::default() };
    let mut sources = HashSet::new();
    let mut buf = vec![0u8; MAX_SIZE];
    let id = (worker as u32).to_le_bytes();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let (len, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        report.datagrams += 1;
        report.bytes += len as u64;
        sources.insert(from);
        // Datagrams too short for the header are echoed as they came: this is
        // an echo server first; only our own client reads the worker field.
        if len >= HEADER {
            buf[WORKER_AT..WORKER_AT + 4].copy_from_slice(&id);
        }
        if socket.send_to(&buf[..len], from).is_err() {
            report.send_errors += 1;
        }
    }
    report.flows = sources.len() as u64;
    Ok(report)
}

// ---------------------------------------------------------------- flow choice

/// One load flow: its source port and the worker the Toeplitz hash predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowChoice {
    pub sport: u16,
    pub hash: u32,
    pub predicted_bucket: usize,
}

/// Where RSS would steer a 4-tuple: Toeplitz with the Microsoft key, then
/// the NIC-style indirection table (128 entries, round robin over workers).
pub fn predicted_bucket(toeplitz: &Toeplitz, src: SocketAddr, dst: SocketAddr, workers: usize) -> (u32, usize) {
    let hash = toeplitz.hash_input(&RssInput::four_tuple(src.ip(), dst.ip(), src.port(), dst.port()));
    (hash, Indirection::round_robin(DEFAULT_TABLE, workers).worker(hash))
}

/// Picks `flows` source ports so that their predicted buckets go round robin
/// over `workers` (flow `i` lands in bucket `i % workers`), as the seed chose
/// its client addresses. Ports are tried upward from `first_port`; `usable`
/// says whether a port can be taken (the caller binds it). Fails if the
/// ports run out first.
pub fn choose_flows(
    source: IpAddr,
    target: SocketAddr,
    flows: usize,
    workers: usize,
    first_port: u16,
    mut usable: impl FnMut(u16) -> bool,
) -> io::Result<Vec<FlowChoice>> {
    assert!(workers > 0, "at least one worker");
    let toeplitz = Toeplitz::new(&MICROSOFT_KEY);
    let mut chosen = Vec::with_capacity(flows);
    // Ports whose bucket is not the one wanted next are kept for later
    // flows, so no usable port is wasted.
    let mut spare: Vec<Vec<FlowChoice>> = vec![Vec::new(); workers];
    let mut ports = first_port..=u16::MAX;
    while chosen.len() < flows {
        let want = chosen.len() % workers;
        if let Some(f) = spare[want].pop() {
            chosen.push(f);
            continue;
        }
        let Some(sport) = ports.next() else {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no free source port left for bucket {want} after {} flows", chosen.len()),
            ));
        };
        let (hash, bucket) = predicted_bucket(&toeplitz, SocketAddr::new(source, sport), target, workers);
        if !usable(sport) {
            continue;
        }
        let f = FlowChoice { sport, hash, predicted_bucket: bucket };
        if bucket == want {
            chosen.push(f);
        } else {
            spare[bucket].push(f);
        }
    }
    Ok(chosen)
}

// ---------------------------------------------------------------- load client

/// When the load stops sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAfter {
    Count(u64),
    Duration(Duration),
}

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub target: SocketAddr,
    /// Local address the flows' sockets bind to.
    pub source: IpAddr,
    pub flows: usize,
    /// Workers the Toeplitz spreading aims at.
    pub workers_hint: usize,
    /// Datagrams per second over all flows; 0: as fast as the sender goes.
    pub rate: u64,
    /// Datagram payload size (at least [`HEADER`]).
    pub size: usize,
    pub limit: StopAfter,
    /// How long to wait for echoes after the last send.
    pub grace: Duration,
    /// First source port tried.
    pub first_port: u16,
    /// Allow a target that is not a loopback address.
    pub allow_remote: bool,
}

#[derive(Clone, Debug)]
pub struct FlowReport {
    pub sport: u16,
    pub predicted_bucket: usize,
    pub sent: u64,
    pub echoed: u64,
    /// Worker indices seen in this flow's echoes, sorted.
    pub answered_by: Vec<u32>,
}

#[derive(Clone, Debug)]
pub struct LoadReport {
    pub target: SocketAddr,
    pub source: IpAddr,
    pub sent: u64,
    /// Distinct datagrams whose echo came back.
    pub echoed: u64,
    pub lost: u64,
    /// Echoes seen twice, or not from a datagram we sent (not in `echoed`).
    pub unmatched: u64,
    pub send_errors: u64,
    pub send_time: Duration,
    pub latency: Histogram<u64>,
    /// Per worker that answered (by the worker field of the echoes).
    pub per_worker: Vec<WorkerEchoes>,
    pub flows: Vec<FlowReport>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerEchoes {
    pub worker: u32,
    pub echoed: u64,
    /// Flows this worker answered at least once.
    pub flows: u64,
}

impl LoadReport {
    /// The text summary `sluice udp-load` prints: rates and round trips,
    /// then each worker's echoes and how the flows spread.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let j = self.to_json();
        let l = &j["latency_us"];
        let mut out = format!(
            "udp-load {} -> {}: sent {} echoed {} lost {} at {} pps; round trip us p50 {} p90 {} p99 {} p999 {} max {}\n",
            self.source, self.target, self.sent, self.echoed, self.lost, j["rate_pps"], l["p50"], l["p90"], l["p99"], l["p999"], l["max"]
        );
        for w in &self.per_worker {
            let _ = writeln!(out, "  worker {}: {} echoes, {} flows", w.worker, w.echoed, w.flows);
        }
        let split = self.flows.iter().filter(|f| f.answered_by.len() > 1).count();
        let _ = writeln!(out, "  {} flows, {} answered by more than one worker", self.flows.len(), split);
        out
    }

    pub fn rate_pps(&self) -> f64 {
        let s = self.send_time.as_secs_f64();
        if s > 0.0 {
            self.sent as f64 / s
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> Value {
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        let q = |p: f64| us(self.latency.value_at_quantile(p));
        let per_worker: Vec<Value> =
            self.per_worker.iter().map(|w| json!({"worker": w.worker, "echoed": w.echoed, "flows": w.flows})).collect();
        json!({
            "target": self.target.to_string(),
            "source": self.source.to_string(),
            "sent": self.sent,
            "echoed": self.echoed,
            "lost": self.lost,
            "unmatched": self.unmatched,
            "send_errors": self.send_errors,
            "rate_pps": self.rate_pps().round(),
            "latency_us": {
                "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999),
                "max": us(self.latency.max()),
            },
            "per_worker": per_worker,
            "flows": self.flows.iter().map(|f| json!({
                "sport": f.sport,
                "predicted_bucket": f.predicted_bucket,
                "sent": f.sent,
                "echoed": f.echoed,
                "answered_by": f.answered_by,
            })).collect::<Vec<_>>(),
        })
    }
}

/// What one flow's receiving thread saw.
struct Received {
    echoed: u64,
    unmatched: u64,
    /// Echo count per worker index (index = worker).
    by_worker: Vec<u64>,
    latency: Histogram<u64>,
}

fn new_histogram() -> Histogram<u64> {
    // 1 ns to 60 s at 3 significant digits: every plausible round trip.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Refuse a config the load cannot run (or must not: a remote target
/// without `allow_remote`).
fn validate(config: &LoadConfig) -> io::Result<()> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if !config.allow_remote && !config.target.ip().is_loopback() {
        return Err(invalid(format!(
            "target {} is not a loopback address; the load test only sends to this host unless --allow-remote is given",
            config.target
        )));
    }
    if config.source.is_ipv4() != config.target.is_ipv4() {
        return Err(invalid(format!(
            "source {} and target {} are different IP versions",
            config.source, config.target
        )));
    }
    if !(HEADER..=MAX_SIZE).contains(&config.size) {
        return Err(invalid(format!("datagram size must be {HEADER} to {MAX_SIZE} bytes")));
    }
    if config.flows == 0 || config.flows > MAX_FLOWS {
        return Err(invalid(format!("flows must be 1 to {MAX_FLOWS}")));
    }
    if config.workers_hint == 0 {
        return Err(invalid("--workers-hint must be at least 1".into()));
    }
    Ok(())
}

/// Choose the flows' source ports and bind a connected socket for each.
/// Ports are bound while choosing, so a port in use is skipped rather than
/// fatal.
fn bind_flows(config: &LoadConfig) -> io::Result<(Vec<FlowChoice>, Vec<UdpSocket>)> {
    let mut bound: Vec<(u16, UdpSocket)> = Vec::new();
    let mut bind_error = None;
    let choices =
        choose_flows(config.source, config.target, config.flows, config.workers_hint, config.first_port, |p| {
            match UdpSocket::bind(SocketAddr::new(config.source, p)) {
                Ok(s) => {
                    bound.push((p, s));
                    true
                }
                Err(e) => {
                    bind_error.get_or_insert(e);
                    false
                }
            }
        })
        .map_err(|e| match bind_error.take() {
            Some(b) => io::Error::new(e.kind(), format!("{e} (last bind error: {b})")),
            None => e,
        })?;
    // Sockets bound for ports kept spare but not used are closed here.
    let mut sockets = Vec::with_capacity(choices.len());
    for c in &choices {
        let i = bound.iter().position(|(p, _)| *p == c.sport).expect("every chosen port was bound");
        let (_, s) = bound.swap_remove(i);
        s.connect(config.target)?;
        s.set_read_timeout(Some(POLL))?;
        let s = Socket::from(s);
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
        sockets.push(UdpSocket::from(s));
    }
    drop(bound);
    Ok((choices, sockets))
}

/// Runs the load: sends, waits `grace` for the last echoes, reports.
pub fn run_load(config: &LoadConfig, stop: Arc<AtomicBool>) -> io::Result<LoadReport> {
    validate(config)?;
    let (choices, sockets) = bind_flows(config)?;

    let epoch = Instant::now();
    // Set when the grace period is over: receivers stop.
    let done = Arc::new(AtomicBool::new(false));
    let sent_per_flow: Arc<Vec<AtomicU64>> = Arc::new((0..sockets.len()).map(|_| AtomicU64::new(0)).collect());
    let receivers: Vec<_> = sockets
        .iter()
        .enumerate()
        .map(|(flow, s)| {
            let s = s.try_clone()?;
            let done = Arc::clone(&done);
            thread::Builder::new()
                .name(format!("udp-load-rx-{flow}"))
                .spawn(move || receive_flow(flow as u32, &s, epoch, &done))
        })
        .collect::<io::Result<_>>()?;

    let (sent, send_errors, send_time) = send_loop(config, &sockets, epoch, &stop, &sent_per_flow);

    // Grace: wait for echoes in flight, but no longer than needed.
    let grace_end = Instant::now() + config.grace;
    thread::sleep(config.grace.min(Duration::from_millis(50)));
    while Instant::now() < grace_end && !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(10));
    }
    done.store(true, Ordering::Relaxed);

    let mut latency = new_histogram();
    let mut flows = Vec::with_capacity(choices.len());
    let mut per_worker: Vec<WorkerEchoes> = Vec::new();
    let (mut echoed, mut unmatched) = (0, 0);
    for (i, (h, c)) in receivers.into_iter().zip(&choices).enumerate() {
        let r = h.join().map_err(|_| io::Error::other("a receiving thread panicked"))?;
        latency.add(&r.latency).expect("same bounds");
        echoed += r.echoed;
        unmatched += r.unmatched;
        let mut answered_by = Vec::new();
        for (w, &n) in r.by_worker.iter().enumerate() {
            if n > 0 {
                answered_by.push(w as u32);
                match per_worker.iter_mut().find(|e| e.worker == w as u32) {
                    Some(e) => {
                        e.echoed += n;
                        e.flows += 1;
                    }
                    None => per_worker.push(WorkerEchoes { worker: w as u32, echoed: n, flows: 1 }),
                }
            }
        }
        flows.push(FlowReport {
            sport: c.sport,
            predicted_bucket: c.predicted_bucket,
            sent: sent_per_flow[i].load(Ordering::Relaxed),
            echoed: r.echoed,
            answered_by,
        });
    }
    per_worker.sort_unstable_by_key(|w| w.worker);
    Ok(LoadReport {
        target: config.target,
        source: config.source,
        sent,
        echoed,
        lost: sent - echoed,
        unmatched,
        send_errors,
        send_time,
        latency,
        per_worker,
        flows,
    })
}

/// Sends round robin over the flows, paced to the total rate: at any moment
/// the datagrams due are `elapsed * rate`; those are sent (in bursts of at
/// most 64), then the sender sleeps until the next is due. Sleeping instead
/// of spinning leaves the CPUs to the echo server on small machines.
/// Returns (sent, send errors, time spent sending).
fn send_loop(
    config: &LoadConfig,
    sockets: &[UdpSocket],
    epoch: Instant,
    stop: &AtomicBool,
    sent_per_flow: &[AtomicU64],
) -> (u64, u64, Duration) {
    let mut buf = vec![0u8; config.size];
    // Recognisable filler after the header.
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER) {
        *b = i as u8;
    }
    buf[WORKER_AT..WORKER_AT + 4].copy_from_slice(&NO_WORKER.to_le_bytes());
    let mut seq = vec![0u64; sockets.len()];
    let start = Instant::now();
    let (count, until) = match config.limit {
        StopAfter::Count(n) => (n, None),
        StopAfter::Duration(d) => (u64::MAX, Some(start + d)),
    };
    let (mut sent, mut errors, mut next_flow) = (0u64, 0u64, 0usize);
    'send: while sent + errors < count && !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            break;
        }
        let due = if config.rate == 0 { count } else { ((now - start).as_secs_f64() * config.rate as f64) as u64 };
        let burst = due.saturating_sub(sent + errors).min(64).min(count - sent - errors);
        if burst == 0 {
            let next = Duration::from_secs_f64((sent + errors + 1) as f64 / config.rate as f64);
            let wait = (start + next).saturating_duration_since(Instant::now());
            thread::sleep(wait.min(Duration::from_millis(5)));
            continue;
        }
        for _ in 0..burst {
            let f = next_flow;
            next_flow = (next_flow + 1) % sockets.len();
            buf[0..8].copy_from_slice(&seq[f].to_le_bytes());
            let ns = epoch.elapsed().as_nanos() as u64;
            buf[8..16].copy_from_slice(&ns.to_le_bytes());
            buf[16..20].copy_from_slice(&(f as u32).to_le_bytes());
            match sockets[f].send(&buf) {
                Ok(_) => {
                    // Sequence numbers advance only on a send the kernel
                    // took, so a flow's `sent` is exactly its numbers 0..sent.
                    seq[f] += 1;
                    sent += 1;
                    sent_per_flow[f].fetch_add(1, Ordering::Relaxed);
                }
                // ECONNREFUSED (a port-unreachable came back) and a full
                // buffer are counted, not fatal: the echo server may be gone.
                Err(_) => errors += 1,
            }
            if stop.load(Ordering::Relaxed) {
                break 'send;
            }
        }
    }
    (sent, errors, start.elapsed())
}

fn receive_flow(flow: u32, socket: &UdpSocket, epoch: Instant, done: &AtomicBool) -> Received {
    let mut r = Received { echoed: 0, unmatched: 0, by_worker: Vec::new(), latency: new_histogram() };
    // One bit per sequence number of this flow: an echo counts once.
    let mut seen: Vec<u64> = Vec::new();
    let mut buf = vec![0u8; MAX_SIZE];
    while !done.load(Ordering::Relaxed) {
        let len = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(_) => continue, // timeout (look at `done`), or a refused send reported here
        };
        let now = epoch.elapsed().as_nanos() as u64;
        if len < HEADER || u32::from_le_bytes(buf[16..20].try_into().unwrap()) != flow {
            r.unmatched += 1;
            continue;
        }
        let seq = u64::from_le_bytes(buf[0..8].try_into().unwrap());
        let sent_ns = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        let worker = u32::from_le_bytes(buf[WORKER_AT..WORKER_AT + 4].try_into().unwrap());
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        // A sequence number far beyond anything sent is not ours: do not let
        // it grow the bitmap.
        if word > 1 << 24 {
            r.unmatched += 1;
            continue;
        }
        if word >= seen.len() {
            seen.resize(word + 1, 0);
        }
        if seen[word] & (1 << bit) != 0 {
            r.unmatched += 1;
            continue;
        }
        seen[word] |= 1 << bit;
        r.echoed += 1;
        r.latency.saturating_record(now.saturating_sub(sent_ns).max(1));
        if worker != NO_WORKER && (worker as usize) < 4096 {
            let w = worker as usize;
            if w >= r.by_worker.len() {
                r.by_worker.resize(w + 1, 0);
            }
            r.by_worker[w] += 1;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(flows: usize, workers: usize) -> Vec<usize> {
        let target: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let chosen = choose_flows("127.0.0.2".parse().unwrap(), target, flows, workers, 20_000, |_| true).unwrap();
        let toeplitz = Toeplitz::new(&MICROSOFT_KEY);
        let mut counts = vec![0; workers];
        for c in &chosen {
            // The reported bucket is what the hash says, not just the slot.
            let src = SocketAddr::new("127.0.0.2".parse().unwrap(), c.sport);
            assert_eq!(predicted_bucket(&toeplitz, src, target, workers), (c.hash, c.predicted_bucket));
            counts[c.predicted_bucket] += 1;
        }
        let ports: HashSet<u16> = chosen.iter().map(|c| c.sport).collect();
        assert_eq!(ports.len(), flows, "distinct source ports");
        counts
    }

    #[test]
    fn toeplitz_choice_spreads_flows_evenly() {
        for workers in [2, 4] {
            for flows in [1, 7, 32, 33] {
                let c = spread(flows, workers);
                let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
                assert!(hi - lo <= 1, "{flows} flows over {workers} workers: {c:?}");
                assert_eq!(c.iter().sum::<usize>(), flows);
            }
        }
    }

    #[test]
    fn unusable_ports_are_skipped_and_exhaustion_is_an_error() {
        let target: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let src = "127.0.0.1".parse().unwrap();
        let c = choose_flows(src, target, 8, 2, 30_000, |p| p % 2 == 0).unwrap();
        assert!(c.iter().all(|f| f.sport % 2 == 0));
        assert!(choose_flows(src, target, 8, 2, u16::MAX - 2, |_| true).is_err());
    }

    #[test]
    fn refuses_a_remote_target() {
        let config = LoadConfig {
            target: "192.0.2.1:9".parse().unwrap(),
            source: "0.0.0.0".parse().unwrap(),
            flows: 1,
            workers_hint: 1,
            rate: 10,
            size: 64,
            limit: StopAfter::Count(1),
            grace: Duration::ZERO,
            first_port: 20_000,
            allow_remote: false,
        };
        let e = run_load(&config, Arc::new(AtomicBool::new(false))).unwrap_err();
        assert!(e.to_string().contains("--allow-remote"), "{e}");
    }

    #[test]
    fn echo_and_load_in_process() {
        let server = EchoServer::bind(EchoConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            workers: 2,
            cpus: vec![],
            incoming_cpu: IncomingCpu::Auto,
            duration: Some(Duration::from_secs(20)),
        })
        .unwrap();
        let target = server.local_addr();
        assert_ne!(target.port(), 0);
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || server.run(stop).unwrap())
        };
        let config = LoadConfig {
            target,
            source: "127.0.0.1".parse().unwrap(),
            flows: 8,
            workers_hint: 2,
            rate: 5_000,
            size: 64,
            limit: StopAfter::Count(1_000),
            grace: Duration::from_millis(300),
            first_port: 41_000,
            allow_remote: false,
        };
        let load = run_load(&config, Arc::new(AtomicBool::new(false))).unwrap();
        stop.store(true, Ordering::Relaxed);
        let echo = server.join().unwrap();
        assert_eq!(load.sent, 1_000);
        assert_eq!(load.sent, load.echoed + load.lost);
        // The server answered everything it saw; an echo lost on the way
        // back is the only way it saw more than came back.
        assert!(echo.datagrams() >= load.echoed);
        if load.lost == 0 {
            assert_eq!(echo.datagrams(), load.sent);
        }
        assert_eq!(load.per_worker.iter().map(|w| w.echoed).sum::<u64>(), load.echoed);
        assert!(load.flows.iter().all(|f| f.answered_by.len() <= 1), "flow affinity");
        assert!(!echo.incoming_cpu, "auto leaves SO_INCOMING_CPU off on loopback");
        let json = load.to_json();
        assert_eq!(json["flows"].as_array().unwrap().len(), 8);
        assert_eq!(json["sent"], 1_000);
    }
}
