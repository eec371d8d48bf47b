//! `sluice http-load`: an HTTP/1.1 load generator on raw sockets, one mio
//! event loop per thread, connections split across the threads.
//!
//! Open loop (`rate`): every connection has a fixed schedule, request `k`
//! intended at `start + (phase + k) * connections / rate`. A request is sent
//! when its time has come and the connection has fewer than `pipeline`
//! outstanding; latency is recorded twice, from the intended time
//! (*corrected*, as wrk2 does: a stalled server delays the requests that
//! should have been sent meanwhile, and their wait counts) and from the
//! actual send (*uncorrected*, what a closed-loop tool would report).
//! Closed loop (no rate): each connection keeps `pipeline` requests
//! outstanding, optionally waiting a `think` time after each response.
//!
//! Every issued request ends as exactly one response or one error (read,
//! write, timeout, bad response); connect failures are counted per attempt.
//! Runs are bounded: a duration or a request budget, a per-request timeout,
//! and a connection gives up after `MAX_CONNECT_FAILURES` failed connects in a row.

use crate::dist::{Dist, WeightedList};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use sluice_h1::response::{ResponseReader, Step, DEFAULT_MAX_HEAD};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest poll wait: the stop flag and the deadline are looked at this often.
const TICK: Duration = Duration::from_millis(20);
/// Below a millisecond to the next send, sleep at most this long at a time
/// (so events wait no longer than this either).
const FINE_WAIT: Duration = Duration::from_micros(50);
/// A connection that failed to connect this many times in a row gives up,
/// so a run against a dead target ends even without a duration.
const MAX_CONNECT_FAILURES: u32 = 10;
/// Pause before reconnecting after a failed connect.
const RECONNECT_AFTER: Duration = Duration::from_millis(100);
/// Read size; the buffer holds at most one partial head beyond this.
const IN_CHUNK: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "target {0} is not a loopback address; the load test only aims at this host unless --allow-remote is given"
    )]
    NotLoopback(SocketAddr),
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

/// The one I/O a run's driver does itself: installing the signal handlers
/// (`product::run_to_end`).
impl From<io::Error> for LoadError {
    fn from(source: io::Error) -> LoadError {
        LoadError::Io { what: "installing the signal handlers".into(), source }
    }
}

fn invalid(m: impl Into<String>) -> LoadError {
    LoadError::Invalid(m.into())
}

/// Where `--url` points: the socket address, the `Host` header and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
    /// `https://`
    pub tls: bool,
}

/// `http://HOST[:PORT][/PATH]` or `https://...`; HOST an IP literal (IPv6
/// in brackets) or a name resolved once here.
pub fn parse_url(url: &str) -> Result<Target, LoadError> {
    let scheme = |s: &str| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
    let (rest, tls) = if scheme("http://") {
        (&url[7..], false)
    } else if scheme("https://") {
        (&url[8..], true)
    } else {
        return Err(invalid(format!("{url:?}: only http:// and https:// URLs are supported")));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid(format!("{url:?}: expected http://HOST[:PORT]/PATH")));
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(invalid(format!("{url:?}: the path has spaces or control characters")));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => {
            (h, p.parse::<u16>().map_err(|_| invalid(format!("{url:?}: bad port {p:?}")))?)
        }
        _ => (authority, if tls { 443 } else { 80 }),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = match bare.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => (bare, port)
            .to_socket_addrs()
            .map_err(|e| invalid(format!("{url:?}: cannot resolve {bare:?}: {e}")))?
            .next()
            .ok_or_else(|| invalid(format!("{url:?}: {bare:?} has no address")))?,
    };
    Ok(Target { addr, host: authority.to_string(), path: path.to_string(), tls })
}

/// The paths a run requests: the URL's own, or a `--urls` file's lines
/// (weighted by Zipf rank with `zipf`).
pub fn request_paths(
    target: &Target,
    urls: Option<&std::path::Path>,
    zipf: Option<f64>,
) -> Result<Vec<(String, u64)>, LoadError> {
    let mut paths = match urls {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|source| LoadError::Io { what: format!("reading {}", f.display()), source })?;
            parse_url_file(&text, target).map_err(|e| invalid(format!("{}: {e}", f.display())))?
        }
        None => vec![(target.path.clone(), 1)],
    };
    if let Some(s) = zipf {
        if !(s.is_finite() && s >= 0.0) {
            return Err(invalid("--zipf must be a non-negative number"));
        }
        let weights = zipf_weights(paths.len(), s);
        for ((_, w), z) in paths.iter_mut().zip(weights) {
            *w = z;
        }
    }
    Ok(paths)
}

/// How long a run issues: `duration` seconds; with only a request count,
/// until it is done; with neither, 10 s (a load test always stops by itself).
pub fn run_length(duration: Option<f64>, requests: Option<u64>) -> Result<Option<Duration>, LoadError> {
    match (duration, requests) {
        (Some(d), _) => Duration::try_from_secs_f64(d)
            .ok()
            .filter(|d| !d.is_zero())
            .map(Some)
            .ok_or_else(|| invalid("--duration must be positive")),
        (None, Some(_)) => Ok(None),
        (None, None) => Ok(Some(Duration::from_secs(10))),
    }
}

/// A `--urls` file: one `PATH [WEIGHT]` per line (weight 1 if absent; `#`
/// comments and blank lines skipped). PATH is `/...` or a full URL on the
/// same host and port as the target.
pub fn parse_url_file(text: &str, target: &Target) -> Result<Vec<(String, u64)>, LoadError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |m: String| invalid(format!("line {}: {m}", n + 1));
        let mut words = line.split_whitespace();
        let word = words.next().expect("non-empty line");
        let path = if word.starts_with('/') {
            word.to_string()
        } else {
            let t = parse_url(word).map_err(|e| at(e.to_string()))?;
            if t.addr != target.addr {
                return Err(at(format!("{word} is not on {} (one host:port per run)", target.addr)));
            }
            t.path
        };
        let weight = match words.next() {
            Some(w) => w.parse::<u64>().map_err(|_| at(format!("weight {w:?} is not a non-negative integer")))?,
            None => 1,
        };
        if let Some(extra) = words.next() {
            return Err(at(format!("unexpected {extra:?} after PATH WEIGHT")));
        }
        out.push((path, weight));
    }
    if out.is_empty() {
        return Err(invalid("the URL file lists no paths"));
    }
    Ok(out)
}

/// Zipf weights by rank (the first line most popular): `1 / k^s`, scaled to
/// integers (at least 1) for `WeightedList`.
pub fn zipf_weights(n: usize, s: f64) -> Vec<u64> {
    (1..=n).map(|k| ((1e12 / (k as f64).powf(s)).round() as u64).max(1)).collect()
}

/// `--source ADDR[/LEN]`: the local addresses connections are bound to,
/// connection `j` taking host `j` of the range (wrapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceRange {
    network: IpAddr,
    len: u8,
}

impl FromStr for SourceRange {
    type Err = LoadError;

    fn from_str(s: &str) -> Result<Self, LoadError> {
        let (a, l) = s.split_once('/').unwrap_or((s, ""));
        let ip: IpAddr = a.parse().map_err(|_| invalid(format!("--source {s:?}: bad address")))?;
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        let len = if l.is_empty() {
            bits
        } else {
            l.parse::<u8>().ok().filter(|&n| n <= bits).ok_or_else(|| invalid(format!("--source {s:?}: bad length")))?
        };
        let mask = |n: u128| if len == 0 { 0 } else { n & (u128::MAX << (bits - len)) };
        let network = match ip {
            IpAddr::V4(v) => IpAddr::V4(Ipv4Addr::from(mask(u128::from(u32::from(v))) as u32)),
            IpAddr::V6(v) => IpAddr::V6(Ipv6Addr::from(mask(u128::from(v)))),
        };
        Ok(SourceRange { network, len })
    }
}

impl SourceRange {
    fn bits(&self) -> u8 {
        if self.network.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// Usable hosts: the network and broadcast addresses are skipped when
    /// the range has more than two (saturates for huge IPv6 ranges).
    pub fn hosts(&self) -> u128 {
        let host_bits = u32::from(self.bits() - self.len);
        match host_bits {
            0 | 1 => 1 << host_bits,
            127.. => u128::MAX,
            _ => (1u128 << host_bits) - 2,
        }
    }

    pub fn nth(&self, i: usize) -> IpAddr {
        let skip = u128::from(self.bits() - self.len >= 2);
        let offset = skip + (i as u128) % self.hosts();
        match self.network {
            IpAddr::V4(v) => IpAddr::V4(Ipv4Addr::from(u32::from(v).wrapping_add(offset as u32))),
            IpAddr::V6(v) => IpAddr::V6(Ipv6Addr::from(u128::from(v).wrapping_add(offset))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: SocketAddr,
    /// The `Host` header.
    pub host: String,
    /// Request paths with weights (one entry: every request the same).
    pub paths: Vec<(String, u64)>,
    pub connections: usize,
    pub threads: usize,
    /// Stop issuing after this long.
    pub duration: Option<Duration>,
    /// Stop after issuing this many requests in total.
    pub requests: Option<u64>,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    /// Requests outstanding per connection, at most.
    pub pipeline: usize,
    pub source: Option<SourceRange>,
    /// Closed loop: milliseconds a connection waits after a response before its next request.
    pub think_ms: Option<Dist>,
    /// A request unanswered this long is a timeout (the connection is reopened).
    pub timeout: Duration,
    pub seed: u64,
    pub allow_remote: bool,
    /// The request method (`GET` unless told).
    pub method: String,
    /// Request body sizes in bytes, one draw per request (`Content-Length`
    /// bodies); `None`: no body (`Content-Length: 0` for POST and PUT).
    pub body_size: Option<Dist>,
    /// `https://`: every connection speaks TLS.
    pub tls: Option<crate::tls::ClientTls>,
    /// How TLS targets are checked (a pool's own `url` too).
    pub tls_options: crate::tls::TlsOptions,
    /// Start this long after the run does (a pool joining a run under way);
    /// the duration, the schedule and `per_second` count from then.
    pub start_delay: Duration,
    /// A progress line a second on stderr while the run lasts (a person
    /// is watching).
    pub progress: bool,
}

impl LoadConfig {
    /// A closed-loop `GET` of `target` with the defaults `http-load` has.
    pub fn new(target: SocketAddr, host: String, path: String) -> LoadConfig {
        LoadConfig {
            target,
            host,
            paths: vec![(path, 1)],
            connections: 16,
            threads: 2,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            rate: None,
            pipeline: 1,
            source: None,
            think_ms: None,
            timeout: Duration::from_secs(2),
            seed: 0,
            allow_remote: false,
            method: "GET".into(),
            body_size: None,
            tls: None,
            tls_options: Default::default(),
            start_delay: Duration::ZERO,
            progress: false,
        }
    }
}

/// The largest body a request is given (a draw above is cut to it).
pub const MAX_BODY: u64 = 64 << 20;

/// Counters every thread adds to once per loop turn, for the progress line.
#[derive(Debug, Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub bad_response: u64,
    /// TLS failures (a handshake refused, a bad record): the connection's
    /// outstanding requests, or the connection itself when none was.
    pub tls: u64,
    /// What the first TLS failure was (a user's first question).
    pub first_tls: Option<String>,
}

impl Errors {
    /// Every failure, of any kind.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.bad_response + self.tls
    }

    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.bad_response += o.bad_response;
        self.tls += o.tls;
        if self.first_tls.is_none() {
            self.first_tls.clone_from(&o.first_tls);
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Responses received (any status).
    pub requests: u64,
    pub issued: u64,
    pub errors: Errors,
    /// Responses outside 2xx, by status.
    pub status: BTreeMap<u16, u64>,
    /// Bytes received and sent.
    pub bytes: u64,
    pub bytes_sent: u64,
    pub elapsed: Duration,
    pub connections: usize,
    pub threads: usize,
    pub pipeline: usize,
    pub rate: Option<f64>,
    /// Microseconds from the intended send time (open loop only).
    pub corrected: Option<Histogram<u64>>,
    /// Microseconds from the actual send time.
    pub uncorrected: Histogram<u64>,
    /// Distinct local addresses of connections that were established.
    pub sources: usize,
    /// Second by second of the run: [2xx, other status, errors] of the
    /// requests that ended in it.
    pub per_second: Vec<Second>,
}

impl LoadReport {
    /// `sluice http-load`'s text summary.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let j = self.to_json();
        let mut out = format!(
            "{} requests in {:.2} s: {:.0} req/s, {} bytes in, {} bytes out; {} connections on {} threads, pipeline {}, {} source addresses\n",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.rps(),
            self.bytes,
            self.bytes_sent,
            self.connections,
            self.threads,
            self.pipeline,
            self.sources
        );
        let line = |out: &mut String, name: &str, p: &serde_json::Value| {
            let _ = writeln!(
                out,
                "  {name:<34} p50 {} p90 {} p99 {} p99.9 {} p99.99 {} max {} (µs)",
                p["p50"], p["p90"], p["p99"], p["p999"], p["p9999"], p["max"]
            );
        };
        match self.rate {
            Some(rate) => {
                let _ = writeln!(out, "  open loop at {rate} req/s");
                line(&mut out, "latency from intended send time", &j["corrected"]);
                line(&mut out, "uncorrected (from actual send)", &j["uncorrected"]);
            }
            None => line(&mut out, "latency", &j["latency_us"]),
        }
        let e = &self.errors;
        let non2xx = if self.status.is_empty() {
            "none".to_string()
        } else {
            self.status.iter().map(|(s, n)| format!("{s} x{n}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            out,
            "  errors: connect {}, read {}, write {}, timeout {}, bad response {}, tls {}; non-2xx: {non2xx}",
            e.connect, e.read, e.write, e.timeout, e.bad_response, e.tls
        );
        if let Some(why) = &e.first_tls {
            let _ = writeln!(out, "  first TLS error: {why}");
        }
        out
    }
}

fn new_histogram() -> Histogram<u64> {
    // 1 µs to 10 min at 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

pub fn percentiles(h: &Histogram<u64>) -> Value {
    json!({
        "p50": h.value_at_quantile(0.5),
        "p75": h.value_at_quantile(0.75),
        "p90": h.value_at_quantile(0.9),
        "p99": h.value_at_quantile(0.99),
        "p999": h.value_at_quantile(0.999),
        "p9999": h.value_at_quantile(0.9999),
        "max": h.max(),
        "mean": (h.mean() * 10.0).round() / 10.0,
        "count": h.len(),
    })
}

impl LoadReport {
    /// Add another run's report that ran at the same time (a pool): counts
    /// and histograms add, the duration is the longer, rates add up.
    /// `sources` adds too (pools are meant to use ranges of their own).
    pub fn add(&mut self, o: &LoadReport) {
        self.requests += o.requests;
        self.issued += o.issued;
        self.errors.add(&o.errors);
        for (s, n) in &o.status {
            *self.status.entry(*s).or_default() += n;
        }
        self.bytes += o.bytes;
        self.bytes_sent += o.bytes_sent;
        self.elapsed = self.elapsed.max(o.elapsed);
        self.connections += o.connections;
        self.threads += o.threads;
        self.pipeline = self.pipeline.max(o.pipeline);
        self.rate = match (self.rate, o.rate) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        // The sum is open loop where any part is: its corrected histogram
        // takes the closed-loop parts' own latencies.
        match (&mut self.corrected, &o.corrected) {
            (Some(a), Some(b)) => a.add(b).expect("histograms of one bound"),
            (Some(a), None) => a.add(&o.uncorrected).expect("histograms of one bound"),
            (None, Some(b)) => {
                let mut c = self.uncorrected.clone();
                c.add(b).expect("histograms of one bound");
                self.corrected = Some(c);
            }
            (None, None) => {}
        }
        self.uncorrected.add(&o.uncorrected).expect("histograms of one bound");
        self.sources += o.sources;
        add_seconds(&mut self.per_second, &o.per_second);
    }

    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The histogram `latency_us` shows: corrected in open loop.
    pub fn latency(&self) -> &Histogram<u64> {
        self.corrected.as_ref().unwrap_or(&self.uncorrected)
    }

    pub fn to_json(&self) -> Value {
        let status: serde_json::Map<String, Value> =
            self.status.iter().map(|(s, n)| (s.to_string(), json!(n))).collect();
        let mut j = json!({
            "requests": self.requests,
            "issued": self.issued,
            "errors": {
                "connect": self.errors.connect,
                "read": self.errors.read,
                "write": self.errors.write,
                "timeout": self.errors.timeout,
                "bad_response": self.errors.bad_response,
                "tls": self.errors.tls,
                "status": status,
            },
            "tls_error": self.errors.first_tls,
            "rps": (self.rps() * 10.0).round() / 10.0,
            "latency_us": percentiles(self.latency()),
            "open_loop": self.rate.is_some(),
            "rate": self.rate,
            "sources": self.sources,
            "bytes": self.bytes,
            "bytes_sent": self.bytes_sent,
            "duration_s": (self.elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            "connections": self.connections,
            "threads": self.threads,
            "pipeline": self.pipeline,
            "per_second": self.per_second,
        });
        if let Some(c) = &self.corrected {
            j["corrected"] = percentiles(c);
            j["uncorrected"] = percentiles(&self.uncorrected);
        }
        j
    }
}

/// Write `h` (microseconds) as an HdrHistogram percentile distribution
/// (`.hgrm`, values in milliseconds), the format HdrHistogram's plotter reads.
pub fn write_hgrm(h: &Histogram<u64>, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "{:>12} {:>14} {:>10} {:>14}\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)")?;
    let mut total = 0;
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        total += v.count_since_last_iteration();
        let inv = if q < 1.0 { format!("{:>14.2}", 1.0 / (1.0 - q)) } else { format!("{:>14}", "") };
        writeln!(out, "{:>12.3} {q:>14.12} {total:>10} {inv}", v.value_iterated_to() as f64 / 1000.0)?;
    }
    writeln!(out, "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]", h.mean() / 1000.0, h.stdev() / 1000.0)?;
    writeln!(out, "#[Max     = {:>12.3}, Total count    = {:>12}]", h.max() as f64 / 1000.0, h.len())?;
    Ok(())
}

/// The threads are running; [`Running::wait`] (with a progress line when
/// the config asks) or [`LoadRun::join`] waits for the report.
pub struct LoadRun {
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    started: Instant,
    handles: Vec<JoinHandle<ThreadOut>>,
    config: LoadConfig,
}

impl LoadRun {
    /// Wait for the run to end, with a progress line a second on stderr
    /// when `progress` (a person is watching), then the report.
    fn wait_with_progress(self, progress: bool) -> Result<LoadReport, LoadError> {
        let mut next = self.started + Duration::from_secs(1);
        let mut last = 0;
        while !self.is_finished() {
            std::thread::sleep(Duration::from_millis(20));
            if progress && Instant::now() >= next {
                let (req, err) = (self.live.requests.load(Ordering::Relaxed), self.live.errors.load(Ordering::Relaxed));
                let secs = self.started.elapsed().as_secs_f64();
                eprint!("\r[{secs:>4.0} s] {req} requests, {} req/s, {err} errors   ", req - last);
                last = req;
                next += Duration::from_secs(1);
            }
        }
        if progress {
            eprintln!();
        }
        self.join()
    }

    /// Setting it ends the run early (issuing stops, outstanding requests are awaited).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn live(&self) -> &Live {
        &self.live
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn is_finished(&self) -> bool {
        self.handles.iter().all(JoinHandle::is_finished)
    }

    pub fn join(self) -> Result<LoadReport, LoadError> {
        let mut outs = Vec::new();
        for h in self.handles {
            outs.push(
                h.join().map_err(|_| LoadError::Io {
                    what: "a load thread".into(),
                    source: io::Error::other("panicked"),
                })?,
            );
        }
        let elapsed = outs.iter().map(|o| o.finished).max().unwrap_or(self.started) - self.started;
        let c = &self.config;
        let mut r = LoadReport {
            requests: 0,
            issued: 0,
            errors: Errors::default(),
            status: BTreeMap::new(),
            bytes: 0,
            bytes_sent: 0,
            elapsed,
            connections: c.connections,
            threads: c.threads,
            pipeline: c.pipeline,
            rate: c.rate,
            corrected: c.rate.map(|_| new_histogram()),
            uncorrected: new_histogram(),
            sources: 0,
            per_second: Vec::new(),
        };
        let mut sources = HashSet::new();
        for o in outs {
            r.requests += o.requests;
            r.issued += o.issued;
            r.errors.add(&o.errors);
            for (s, n) in o.status {
                *r.status.entry(s).or_default() += n;
            }
            r.bytes += o.bytes;
            r.bytes_sent += o.bytes_sent;
            if let Some(h) = &mut r.corrected {
                h.add(&o.corrected).expect("same bounds");
            }
            r.uncorrected.add(&o.uncorrected).expect("same bounds");
            sources.extend(o.sources);
            add_seconds(&mut r.per_second, &o.per_second);
        }
        r.sources = sources.len();
        Ok(r)
    }
}

impl sluice_control::product::Running for LoadRun {
    type Summary = LoadReport;
    type Error = LoadError;
    fn handle(&self) -> sluice_control::product::Handle {
        sluice_control::product::Handle::new(self.stop.clone())
    }
    fn finished(&self) -> bool {
        self.is_finished()
    }
    /// Waits for the run's end (its duration or request count, or the
    /// handle), with the progress line when the config asks for it.
    fn wait(self) -> Result<LoadReport, LoadError> {
        let progress = self.config.progress;
        self.wait_with_progress(progress)
    }
}

impl sluice_control::product::Summary for LoadReport {
    fn text(&self) -> String {
        LoadReport::text(self)
    }
    fn json(&self) -> serde_json::Value {
        self.to_json()
    }
}

/// Check the config and start the threads.
pub fn start(config: LoadConfig) -> Result<LoadRun, LoadError> {
    let c = &config;
    if !c.allow_remote && !c.target.ip().is_loopback() {
        return Err(LoadError::NotLoopback(c.target));
    }
    if c.connections == 0 || c.threads == 0 || c.pipeline == 0 {
        return Err(invalid("--connections, --threads and --pipeline must be at least 1"));
    }
    if c.duration.is_none() && c.requests.is_none() {
        return Err(invalid("give a duration or a request count: a load test must stop by itself"));
    }
    if c.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(invalid("--rate must be positive"));
    }
    if let Some(s) = c.source {
        if s.network.is_ipv4() != c.target.is_ipv4() {
            return Err(invalid("--source and the target must be the same address family"));
        }
    }
    let mut config = config;
    // More threads than connections would idle.
    config.threads = config.threads.min(config.connections);
    let paths = WeightedList::new((0..config.paths.len()).map(|i| (i, config.paths[i].1)).collect())
        .map_err(|e| invalid(format!("URL weights: {e}")))?;
    if !config.method.bytes().all(|b| b.is_ascii_uppercase()) || config.method.is_empty() {
        return Err(invalid(format!("--method {:?} is not an upper-case token", config.method)));
    }
    // Whole requests, or with a body size to draw, the head up to the
    // Content-Length the draw fills in.
    let body_methods = matches!(config.method.as_str(), "POST" | "PUT" | "PATCH");
    let end = match (&config.body_size, body_methods) {
        (Some(_), _) => "",
        (None, true) => "Content-Length: 0\r\n\r\n",
        (None, false) => "\r\n",
    };
    let requests: Arc<[Vec<u8>]> = config
        .paths
        .iter()
        .map(|(p, _)| {
            format!("{} {p} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice\r\n{end}", config.method, config.host)
                .into_bytes()
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let live = Arc::new(Live::default());
    // Connections wait in `State::Idle(started)` until then.
    let started = Instant::now() + config.start_delay;
    let (threads, conns) = (config.threads, config.connections);
    let mut handles = Vec::new();
    for t in 0..threads {
        // Connection j runs on thread j % threads; the request budget is
        // split in proportion to the connections.
        let mine: Vec<usize> = (t..conns).step_by(threads).collect();
        let budget = config.requests.map(|n| {
            let share = |upto: usize| n as u128 * upto as u128 / conns as u128;
            let first = (0..t).map(|u| (u..conns).step_by(threads).count()).sum::<usize>();
            (share(first + mine.len()) - share(first)) as u64
        });
        let ctx = ThreadCtx {
            config: config.clone(),
            paths: paths.clone(),
            requests: requests.clone(),
            stop: stop.clone(),
            live: live.clone(),
            started,
            budget,
            seed: config.seed.wrapping_add(t as u64),
        };
        let h = std::thread::Builder::new()
            .name(format!("load-{t}"))
            .spawn(move || ctx.run(&mine))
            .map_err(|source| LoadError::Io { what: "spawning a load thread".into(), source })?;
        handles.push(h);
    }
    Ok(LoadRun { stop, live, started, handles, config })
}

struct ThreadCtx {
    config: LoadConfig,
    paths: WeightedList<usize>,
    requests: Arc<[Vec<u8>]>,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    started: Instant,
    budget: Option<u64>,
    seed: u64,
}

struct ThreadOut {
    requests: u64,
    issued: u64,
    errors: Errors,
    status: BTreeMap<u16, u64>,
    bytes: u64,
    bytes_sent: u64,
    corrected: Histogram<u64>,
    uncorrected: Histogram<u64>,
    sources: HashSet<IpAddr>,
    finished: Instant,
    per_second: Vec<Second>,
}

/// What became of the requests of one second of a run, by when they ended:
/// 2xx responses, other responses, and errors (read, write, timeout,
/// unframeable).
pub type Second = [u64; 3];

fn add_seconds(to: &mut Vec<Second>, from: &[Second]) {
    if to.len() < from.len() {
        to.resize(from.len(), [0; 3]);
    }
    for (t, f) in to.iter_mut().zip(from) {
        for k in 0..3 {
            t[k] += f[k];
        }
    }
}

/// Count one outcome (0: 2xx, 1: other status, 2: error) at `now`.
fn at_second(v: &mut Vec<Second>, started: Instant, now: Instant, kind: usize, n: u64) {
    let s = now.saturating_duration_since(started).as_secs() as usize;
    if v.len() <= s {
        v.resize(s + 1, [0; 3]);
    }
    v[s][kind] += n;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket; (re)connect at this time.
    Idle(Instant),
    /// Connect in progress since.
    Connecting(Instant),
    Open,
    /// Gave up after too many failed connects.
    Dead,
}

struct Conn {
    sock: Option<TcpStream>,
    tls: Option<rustls::ClientConnection>,
    state: State,
    source: Option<IpAddr>,
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    reader: ResponseReader,
    out: Vec<u8>,
    out_pos: usize,
    /// (intended, actually sent) of each request awaiting its response, in order.
    outstanding: VecDeque<(Instant, Instant)>,
    /// Open loop: the schedule's offset (in intervals) and the next request's number.
    phase: f64,
    next_k: u64,
    /// Closed loop: not before this (think time).
    next_at: Instant,
    connect_failures: u32,
}

impl ThreadCtx {
    fn run(self, mine: &[usize]) -> ThreadOut {
        let c = &self.config;
        let mut out = ThreadOut {
            requests: 0,
            issued: 0,
            errors: Errors::default(),
            status: BTreeMap::new(),
            bytes: 0,
            bytes_sent: 0,
            corrected: new_histogram(),
            uncorrected: new_histogram(),
            sources: HashSet::new(),
            finished: self.started,
            per_second: Vec::new(),
        };
        let poll = match Poll::new() {
            Ok(p) => p,
            Err(_) => {
                out.errors.connect += mine.len() as u64;
                out.finished = Instant::now();
                return out;
            }
        };
        let interval = c.rate.map(|r| c.connections as f64 / r);
        let mut conns: Vec<Conn> = mine
            .iter()
            .map(|&j| Conn {
                sock: None,
                tls: None,
                state: State::Idle(self.started),
                source: c.source.map(|s| s.nth(j)),
                inbuf: vec![0; IN_CHUNK],
                in_start: 0,
                in_end: 0,
                reader: ResponseReader::new(DEFAULT_MAX_HEAD),
                out: Vec::new(),
                out_pos: 0,
                outstanding: VecDeque::new(),
                // Spread the connections' schedules evenly over one interval.
                phase: j as f64 / c.connections as f64,
                next_k: 0,
                next_at: self.started,
                connect_failures: 0,
            })
            .collect();
        let mut w = Worker {
            ctx: &self,
            poll,
            out,
            budget: self.budget,
            rng: ChaCha8Rng::seed_from_u64(self.seed),
            interval,
            deadline: c.duration.map(|d| self.started + d),
        };
        let mut events = Events::with_capacity(1024);
        let (mut reported_req, mut reported_err) = (0u64, 0u64);
        loop {
            let now = Instant::now();
            let issuing = w.issuing(now);
            let mut wake = now + TICK;
            let mut busy = false;
            for (i, conn) in conns.iter_mut().enumerate() {
                w.maintain(conn, i, now, issuing, &mut wake);
                busy |= !conn.outstanding.is_empty();
            }
            let all_dead = conns.iter().all(|c| c.state == State::Dead);
            // Push the counters once per turn: one atomic add, not one per response.
            let (r, e) = (w.out.requests, w.out.errors.total());
            if r != reported_req || e != reported_err {
                self.live.requests.fetch_add(r - reported_req, Ordering::Relaxed);
                self.live.errors.fetch_add(e - reported_err, Ordering::Relaxed);
                (reported_req, reported_err) = (r, e);
            }
            if all_dead || (!issuing && !busy) {
                break;
            }
            // epoll waits whole milliseconds (mio rounds up), which would
            // make every scheduled send up to 1 ms late and charge that to
            // the server in the corrected figures: wait the whole
            // milliseconds there, the last fraction in short sleeps.
            let left = wake.saturating_duration_since(Instant::now()).min(TICK);
            let coarse = Duration::from_millis(left.as_millis() as u64);
            match w.poll.poll(&mut events, Some(coarse)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
            if coarse.is_zero() && events.is_empty() && !left.is_zero() {
                std::thread::sleep(left.min(FINE_WAIT));
            }
            for ev in &events {
                let i = ev.token().0;
                if let Some(conn) = conns.get_mut(i) {
                    w.drive(conn);
                }
            }
        }
        for conn in &mut conns {
            if let Some(mut s) = conn.sock.take() {
                let _ = w.poll.registry().deregister(&mut s);
            }
        }
        w.out.finished = Instant::now();
        w.out
    }
}

struct Worker<'a> {
    ctx: &'a ThreadCtx,
    poll: Poll,
    out: ThreadOut,
    budget: Option<u64>,
    rng: ChaCha8Rng,
    interval: Option<f64>,
    deadline: Option<Instant>,
}

/// Why a connection is dropped: every request still outstanding on it is
/// counted under this kind.
#[derive(Clone, Copy)]
enum Fail {
    Read,
    Write,
    Timeout,
    BadResponse,
    Tls,
}

impl Worker<'_> {
    fn issuing(&self, now: Instant) -> bool {
        !self.ctx.stop.load(Ordering::Relaxed)
            && self.deadline.is_none_or(|d| now < d)
            && self.budget.is_none_or(|b| b > 0)
    }

    /// Per loop turn: connect, time out, issue what is due, flush.
    fn maintain(&mut self, c: &mut Conn, i: usize, now: Instant, issuing: bool, wake: &mut Instant) {
        match c.state {
            State::Dead => return,
            State::Idle(at) => {
                if !issuing {
                    return;
                }
                if at > now {
                    *wake = (*wake).min(at);
                    return;
                }
                self.connect(c, i, now);
                return;
            }
            State::Connecting(since) => {
                if now.duration_since(since) >= self.ctx.config.timeout {
                    self.connect_failed(c, now);
                }
                return;
            }
            State::Open => {}
        }
        if let Some(&(_, sent)) = c.outstanding.front() {
            if now.duration_since(sent) >= self.ctx.config.timeout {
                self.fail(c, Fail::Timeout, now);
                return;
            }
        }
        if issuing {
            self.issue(c, now, wake);
        }
        if c.out_pos < c.out.len() || c.tls.as_ref().is_some_and(|t| t.wants_write()) {
            self.flush(c, now);
        }
    }

    fn issue(&mut self, c: &mut Conn, now: Instant, wake: &mut Instant) {
        let pipeline = self.ctx.config.pipeline;
        while c.outstanding.len() < pipeline && self.budget.is_none_or(|b| b > 0) {
            let intended = match self.interval {
                Some(iv) => self.ctx.started + Duration::from_secs_f64((c.phase + c.next_k as f64) * iv),
                None => c.next_at.max(self.ctx.started),
            };
            if intended > now {
                *wake = (*wake).min(intended);
                break;
            }
            let path = if self.ctx.requests.len() == 1 { 0 } else { *self.ctx.paths.sample(&mut self.rng) };
            if c.out_pos == c.out.len() {
                c.out.clear();
                c.out_pos = 0;
            }
            c.out.extend_from_slice(&self.ctx.requests[path]);
            if let Some(d) = &self.ctx.config.body_size {
                let n = d.sample(&mut self.rng).min(MAX_BODY) as usize;
                c.out.extend_from_slice(format!("Content-Length: {n}\r\n\r\n").as_bytes());
                c.out.resize(c.out.len() + n, b'x');
            }
            c.outstanding.push_back((intended, now));
            c.next_k += 1;
            self.out.issued += 1;
            if let Some(b) = &mut self.budget {
                *b -= 1;
            }
        }
    }

    fn connect(&mut self, c: &mut Conn, i: usize, now: Instant) {
        match open_socket(self.ctx.config.target, c.source) {
            Ok(mut sock) => {
                if self.poll.registry().register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE).is_err()
                {
                    self.connect_failed(c, now);
                    return;
                }
                c.sock = Some(sock);
                c.state = State::Connecting(now);
                if let Some(t) = &self.ctx.config.tls {
                    match rustls::ClientConnection::new(t.config.clone(), t.name.clone()) {
                        Ok(conn) => c.tls = Some(conn),
                        Err(_) => self.fail(c, Fail::Tls, now),
                    }
                }
            }
            Err(_) => self.connect_failed(c, now),
        }
    }

    fn connect_failed(&mut self, c: &mut Conn, now: Instant) {
        self.out.errors.connect += 1;
        self.close(c);
        c.connect_failures += 1;
        c.state =
            if c.connect_failures >= MAX_CONNECT_FAILURES { State::Dead } else { State::Idle(now + RECONNECT_AFTER) };
    }

    fn close(&mut self, c: &mut Conn) {
        if let Some(mut s) = c.sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.tls = None;
        c.in_start = 0;
        c.in_end = 0;
        c.out.clear();
        c.out_pos = 0;
        c.reader = ResponseReader::new(DEFAULT_MAX_HEAD);
    }

    /// Drop the connection; its outstanding requests count as errors of `kind`.
    fn fail(&mut self, c: &mut Conn, kind: Fail, now: Instant) {
        let n = c.outstanding.len() as u64;
        c.outstanding.clear();
        let e = &mut self.out.errors;
        let n = match kind {
            Fail::BadResponse | Fail::Tls => n.max(1),
            _ => n,
        };
        match kind {
            Fail::Read => e.read += n,
            Fail::Write => e.write += n,
            Fail::Timeout => e.timeout += n,
            Fail::BadResponse => e.bad_response += n,
            Fail::Tls => e.tls += n,
        }
        at_second(&mut self.out.per_second, self.ctx.started, now, 2, n);
        self.close(c);
        c.state = State::Idle(now);
    }

    /// An event on the connection: finish connecting, read, flush.
    fn drive(&mut self, c: &mut Conn) {
        let now = Instant::now();
        if let State::Connecting(_) = c.state {
            let Some(sock) = &c.sock else { return };
            match sock.take_error() {
                Ok(None) => match sock.peer_addr() {
                    Ok(_) => {
                        c.state = State::Open;
                        c.connect_failures = 0;
                        // Requests are written whole; Nagle would hold a
                        // pipelined tail behind the server's delayed ACK.
                        let _ = sock.set_nodelay(true);
                        if let Ok(local) = sock.local_addr() {
                            self.out.sources.insert(local.ip());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                    Err(_) => return self.connect_failed(c, now),
                },
                Ok(Some(_)) | Err(_) => return self.connect_failed(c, now),
            }
        }
        if c.state != State::Open {
            return;
        }
        self.read(c, now);
        // Over TLS there may be handshake records to send with no request yet.
        if c.state == State::Open && (c.out_pos < c.out.len() || c.tls.as_ref().is_some_and(|t| t.wants_write())) {
            self.flush(c, now);
        }
    }

    fn read(&mut self, c: &mut Conn, now: Instant) {
        loop {
            let Some(sock) = c.sock.as_mut() else { return };
            if c.in_end == c.inbuf.len() {
                // Only an unfinished head can be left over: move it to the front.
                c.inbuf.copy_within(c.in_start..c.in_end, 0);
                c.in_end -= c.in_start;
                c.in_start = 0;
                if c.in_end == c.inbuf.len() {
                    return self.fail(c, Fail::BadResponse, now);
                }
            }
            let got = match &mut c.tls {
                None => sock.read(&mut c.inbuf[c.in_end..]),
                Some(t) => sluice_tcp::tls::read(t, sock, &mut c.inbuf[c.in_end..]),
            };
            match got {
                Ok(0) => {
                    // The server closed: it ended a body delimited by the
                    // close, if one was coming in; whatever else it still
                    // owed is lost.
                    if let Some(response) = c.reader.eof() {
                        if !self.completed(c, response, now) {
                            return;
                        }
                    }
                    return self.fail(c, Fail::Read, now);
                }
                Ok(n) => {
                    c.in_end += n;
                    self.out.bytes += n as u64;
                    if !self.frame(c, now) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    self.out.errors.first_tls.get_or_insert_with(|| e.to_string());
                    return self.fail(c, Fail::Tls, now);
                }
                Err(_) => return self.fail(c, Fail::Read, now),
            }
        }
    }

    /// A response ended: counted against its request; false if the
    /// connection was dropped (a response nobody asked for, or one that
    /// closes it).
    fn completed(&mut self, c: &mut Conn, response: sluice_h1::response::Response, now: Instant) -> bool {
        let Some((intended, sent)) = c.outstanding.pop_front() else {
            // A response nobody asked for.
            self.fail(c, Fail::BadResponse, now);
            return false;
        };
        self.out.requests += 1;
        let us = |from: Instant| now.saturating_duration_since(from).as_micros().max(1) as u64;
        self.out.uncorrected.saturating_record(us(sent));
        if self.interval.is_some() {
            self.out.corrected.saturating_record(us(intended));
        }
        let ok = (200..300).contains(&response.status);
        if !ok {
            *self.out.status.entry(response.status).or_default() += 1;
        }
        at_second(&mut self.out.per_second, self.ctx.started, now, usize::from(!ok), 1);
        if let Some(think) = &self.ctx.config.think_ms {
            let ms = think.sample(&mut self.rng);
            c.next_at = now + Duration::from_millis(ms);
        }
        if response.close {
            // Requests pipelined behind a closing response are lost.
            self.fail(c, Fail::Read, now);
            return false;
        }
        true
    }

    /// Consume complete responses; false if the connection was dropped.
    fn frame(&mut self, c: &mut Conn, now: Instant) -> bool {
        loop {
            match c.reader.step(&c.inbuf[c.in_start..c.in_end]) {
                Ok(Step::NeedMore) => break,
                Ok(Step::Consumed(n)) => c.in_start += n,
                Ok(Step::Done { consumed, response }) => {
                    c.in_start += consumed;
                    if !self.completed(c, response, now) {
                        return false;
                    }
                }
                Err(_) => {
                    self.fail(c, Fail::BadResponse, now);
                    return false;
                }
            }
        }
        if c.in_start == c.in_end {
            c.in_start = 0;
            c.in_end = 0;
        }
        true
    }

    fn flush(&mut self, c: &mut Conn, now: Instant) {
        if let (Some(t), Some(sock)) = (&mut c.tls, &mut c.sock) {
            let mut w = sluice_tcp::tls::PlainWriter { conn: t, sock };
            let wrote = sluice_tcp::write_pending(&mut w, &c.out, &mut c.out_pos).and_then(|n| {
                sluice_tcp::tls::flush(t, sock)?;
                Ok(n)
            });
            match wrote {
                Ok(n) => self.out.bytes_sent += n as u64,
                Err(_) => return self.fail(c, Fail::Write, now),
            }
            if c.out_pos == c.out.len() {
                c.out.clear();
                c.out_pos = 0;
            }
            return;
        }
        while c.out_pos < c.out.len() {
            let Some(sock) = c.sock.as_mut() else { return };
            match sock.write(&c.out[c.out_pos..]) {
                Ok(n) => {
                    c.out_pos += n;
                    self.out.bytes_sent += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.fail(c, Fail::Write, now),
            }
        }
        c.out.clear();
        c.out_pos = 0;
    }
}

/// A non-blocking connect, bound first to `source` (port 0: the kernel
/// picks a free port per source address). socket2 0.5 has no setter for
/// IP_BIND_ADDRESS_NO_PORT, and setting it by hand would need `unsafe`;
/// with one address per connection the early port choice costs nothing.
fn open_socket(target: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(target), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    if let Some(ip) = source {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    match s.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let t = parse_url("http://127.0.0.1:8080/a/b?c=d").unwrap();
        assert_eq!(
            (t.addr, t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:8080".parse().unwrap(), "127.0.0.1:8080", "/a/b?c=d")
        );
        let t = parse_url("HTTP://[::1]").unwrap();
        assert_eq!((t.addr, t.path.as_str()), ("[::1]:80".parse().unwrap(), "/"));
        assert!(!t.tls);
        let t = parse_url("https://127.0.0.1/").unwrap();
        assert_eq!((t.addr, t.tls), ("127.0.0.1:443".parse().unwrap(), true));
        assert!(parse_url("ftp://127.0.0.1/").is_err());
        assert!(parse_url("http://127.0.0.1:99999/").is_err());
    }

    #[test]
    fn the_tls_side_checks_the_name_it_is_given() {
        use crate::tls::{client, TlsOptions};
        use rustls::pki_types::ServerName;
        let insecure = TlsOptions { insecure: true, ..TlsOptions::default() };
        assert_eq!(client("[::1]:8443", &insecure).unwrap().name, ServerName::try_from("::1").unwrap());
        let named = TlsOptions { server_name: Some("shop.example".into()), ..insecure };
        assert_eq!(client("127.0.0.1:8443", &named).unwrap().name, ServerName::try_from("shop.example").unwrap());
        let err =
            client("a:1", &TlsOptions { ca: Some("/nonexistent.pem".into()), ..TlsOptions::default() }).unwrap_err();
        assert!(err.to_string().contains("/nonexistent.pem"), "{err}");
    }

    #[test]
    fn run_length_defaults_to_ten_seconds_unless_counted() {
        assert_eq!(run_length(None, None).unwrap(), Some(Duration::from_secs(10)));
        assert_eq!(run_length(None, Some(5)).unwrap(), None);
        assert_eq!(run_length(Some(0.5), Some(5)).unwrap(), Some(Duration::from_millis(500)));
        assert!(run_length(Some(0.0), None).is_err());
    }

    #[test]
    fn url_files_parse_with_weights() {
        let t = parse_url("http://127.0.0.1:8080/").unwrap();
        let f = "# comment\n/a 3\n\nhttp://127.0.0.1:8080/b\n/c 0 # never\n";
        assert_eq!(parse_url_file(f, &t).unwrap(), vec![("/a".into(), 3), ("/b".into(), 1), ("/c".into(), 0)]);
        let e = parse_url_file("/a x\n", &t).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(parse_url_file("http://127.0.0.2:8080/x\n", &t).is_err());
        let z = zipf_weights(4, 1.0);
        assert!(z.windows(2).all(|w| w[0] > w[1]) && z[0] / z[3] == 4);
    }

    #[test]
    fn source_ranges_skip_network_and_broadcast() {
        let r: SourceRange = "127.1.2.3/16".parse().unwrap();
        assert_eq!(r.hosts(), 65_534);
        assert_eq!(r.nth(0), "127.1.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.nth(65_534), "127.1.0.1".parse::<IpAddr>().unwrap());
        let one: SourceRange = "127.0.0.5".parse().unwrap();
        assert_eq!((one.hosts(), one.nth(7)), (1, "127.0.0.5".parse().unwrap()));
        assert!("127.0.0.1/33".parse::<SourceRange>().is_err());
        let v6: SourceRange = "::1/128".parse().unwrap();
        assert_eq!(v6.nth(3), "::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn refuses_a_remote_target() {
        let config = LoadConfig::new("192.0.2.1:80".parse().unwrap(), "x".into(), "/".into());
        let e = start(config).err().unwrap().to_string();
        assert!(e.contains("--allow-remote"), "{e}");
    }
}

#[cfg(test)]
mod framing_tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server answering every request with `answer`, closing after it
    /// when `close`; a thread per connection.
    fn server(answer: &'static [u8], close: bool) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut chunk) {
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            if s.write_all(answer).is_err() || close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Chunked, interim-then-final and close-delimited responses are all
    /// whole responses, no error.
    #[test]
    fn every_framing_counts_as_a_response() {
        let cases: [(&'static [u8], bool); 3] = [
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false),
            (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false),
            (b"HTTP/1.0 200 OK\r\n\r\nuntil the close", true),
        ];
        for (answer, close) in cases {
            let mut config = LoadConfig::new(server(answer, close), "a".into(), "/".into());
            config.connections = 2;
            config.requests = Some(20);
            config.duration = None;
            let r = start(config).unwrap().join().unwrap();
            let what = String::from_utf8_lossy(answer);
            assert_eq!(r.requests, 20, "{what}: {:?}", r.errors);
            assert_eq!(r.errors.total(), 0, "{what}: {:?}", r.errors);
        }
    }
}
