//! The guard's connection handling as a whole: one client connection per
//! input, its bytes in chunks and with pauses the input chooses, against
//! guards running in this process (plain, `--proxy-protocol`, TLS, TLS
//! behind a PROXY header) in front of an upstream thread whose responses
//! the input chooses too (lengths, chunked, delimited by close, raw bytes,
//! early, late, none). Checked: no guard thread panics or ends; whatever a
//! plaintext client receives frames as HTTP/1.1 responses (with
//! `sluice_h1::response::ResponseReader`), nothing follows the guard's own
//! error replies; well-formed requests (the canned ones) against
//! well-formed responses are all answered, pipelined or not, the write
//! side shut or not, before the guard closes; and every 64 inputs a fresh
//! well-formed request to each guard is answered 200 (a stuck loop, a
//! leaked connection count under `concurrent_connections` or a broken pool
//! would fail it). Each guard holds two requests at the upstream at a
//! time (`--upstream-max-inflight 2`, of which new clients hold one): a
//! request meeting earlier inputs' there waits in the queue, or goes on
//! past the new clients' share once its client is known, and GETs take
//! `--upstream-pipeline`'s path.
//! `GUARD_CONN_TRACE=1` prints each script, its time and
//! what its client received.
//!
//! Input (see `Script::decode`): a config byte (bits 0-2: the guard and
//! client: 0 plain, 1 PROXY, 2 raw bytes to the TLS listener, 3 a rustls
//! client, 4 raw bytes behind a PROXY header to the TLS+PROXY listener,
//! 5 a rustls client behind a PROXY header; bits 3-4: how the client reads:
//! all, slowly through a small receive buffer, nothing, its first bytes
//! only; bit 5: the write side is left open at the end; bits 6-7: 1 the
//! rustls client speaks TLS 1.2 only, 3 the client waits 350 ms for an
//! answer (past the guards' 300 ms deadlines) instead of 10 ms of silence,
//! or reads nothing for 350 ms instead of 2), a byte whose low 3 bits
//! count the upstream response specs (4 bytes each: kind, size as two bytes
//! LE, flags; kind 3 is followed by `size % 4096` raw bytes), then steps
//! (op byte: low 3 bits the kind, high 5 bits `p`): 0 send the next byte's
//! count of bytes (0: the rest), 1 pause `p % 6` ms, 2 shut the write side,
//! 3 read what comes within `p % 4 + 1` ms (pauses and reads: 30 ms at
//! most in all), 4 send canned request `p % 8`, 5 send a canned PROXY
//! header `p % 4`, 6 send `(p + 1) * 64` copies of the next byte, 7 send
//! the next `p + 1` bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::pki_types::pem::PemObject;
use sluice_guard::frame::{HeadStep, RequestFramer};
use sluice_guard::limits::RespCodeBlock;
use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, Guard, GuardThreads, Limits, MinRate, Timeouts};
use sluice_h1::response::{ResponseReader, Step, DEFAULT_MAX_HEAD};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const CA: &[u8] = include_bytes!("../../crates/sluice-guard/src/testdata/tls-ca.pem");
const CERT: &[u8] = include_bytes!("../../crates/sluice-guard/src/testdata/tls-a.test.pem");
const KEY: &[u8] = include_bytes!("../../crates/sluice-guard/src/testdata/tls-a.test.key");
/// The guards' deadlines: short, so an input that stalls ends soon.
const DEADLINE: Duration = Duration::from_millis(300);
const PROBE_EVERY: u64 = 64;
const PROBE_REQUEST: &[u8] = b"GET /probe HTTP/1.1\r\nHost: probe\r\nX-Probe: 1\r\nConnection: close\r\n\r\n";
const PROBE_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nprobe-ok";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Plain,
    Proxy,
    TlsRaw,
    TlsClient,
    ProxyTlsRaw,
    ProxyTlsClient,
}

impl Target {
    const ALL: [Target; 6] =
        [Target::Plain, Target::Proxy, Target::TlsRaw, Target::TlsClient, Target::ProxyTlsRaw, Target::ProxyTlsClient];

    /// Which of the guards (plain, PROXY, TLS, TLS+PROXY) it talks to.
    fn guard(self) -> usize {
        match self {
            Target::Plain => 0,
            Target::Proxy => 1,
            Target::TlsRaw | Target::TlsClient => 2,
            Target::ProxyTlsRaw | Target::ProxyTlsClient => 3,
        }
    }

    fn rustls(self) -> bool {
        matches!(self, Target::TlsClient | Target::ProxyTlsClient)
    }

    /// What the client reads is HTTP (plaintext or decrypted).
    fn sees_http(self) -> bool {
        !matches!(self, Target::TlsRaw | Target::ProxyTlsRaw)
    }
}

struct Guards {
    addrs: [SocketAddr; 4],
    running: Vec<GuardThreads>,
    client_tls: [Arc<rustls::ClientConfig>; 2],
}

static GUARDS: OnceLock<Guards> = OnceLock::new();
static INPUTS: AtomicU64 = AtomicU64::new(0);
/// `GUARD_CONN_TRACE=1`: print each script and what its client received.
static TRACE: OnceLock<bool> = OnceLock::new();

/// The upstream's responses for the current input, taken in turn by the
/// requests it receives.
static SPECS: Mutex<Vec<Spec>> = Mutex::new(Vec::new());
static NEXT_SPEC: AtomicUsize = AtomicUsize::new(0);

fn guards() -> &'static Guards {
    GUARDS.get_or_init(|| {
        // As in any Rust program (libFuzzer's main is not Rust's): a write
        // to a closed socket is an error, not a SIGPIPE that kills the
        // process (rustls writes with writev, which has no MSG_NOSIGNAL).
        // SAFETY: setting a signal's disposition to "ignore" once, before
        // any thread of ours is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        let upstream = start_upstream();
        let dir = std::env::temp_dir().join(format!("sluice-fuzz-guard-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let (cert, key) = (dir.join("a.test.pem"), dir.join("a.test.key"));
        std::fs::write(&cert, CERT).expect("writing the certificate");
        std::fs::write(&key, KEY).expect("writing the key");
        let tls = vec![CertFiles { cert, key }];
        let mut addrs = Vec::new();
        let mut running = Vec::new();
        for (proxy, tls) in [(false, vec![]), (true, vec![]), (false, tls.clone()), (true, tls)] {
            let g = Guard::bind(config(upstream, proxy, tls)).expect("binding a guard");
            addrs.push(g.local_addr());
            running.push(g.start().expect("starting a guard"));
        }
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(CA) {
            roots.add(c.expect("the test CA parses")).expect("the test CA is usable");
        }
        let client = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(versions)
                .expect("protocol versions")
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(c)
        };
        Guards {
            addrs: addrs.try_into().expect("four guards"),
            running,
            client_tls: [
                client(&[&rustls::version::TLS13, &rustls::version::TLS12]),
                client(&[&rustls::version::TLS12]),
            ],
        }
    })
}

fn config(upstream: SocketAddr, proxy: bool, tls: Vec<CertFiles>) -> Config {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), upstream);
    c.pin = false;
    c.buffer_size = sluice_guard::MIN_BUFFER_SIZE;
    c.max_head = 8 << 10;
    c.max_connections = 1024;
    c.limits = Limits {
        request_rate: Some(50_000),
        concurrent_connections: Some(256),
        http_header_cnt: Some(24),
        http_field_len: Some(2048),
        http_uri_len: Some(1024),
        http_body_len: Some(64 << 10),
        http_methods: Some(
            ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"].iter().map(|m| m.to_string()).collect(),
        ),
        http_resp_code_block: Some(RespCodeBlock { codes: vec![418], limit: 4, period_ms: 1000 }),
        ..Limits::default()
    };
    let rate = MinRate::new(240, Duration::from_millis(200));
    c.timeouts = Timeouts {
        client_header: Some(DEADLINE),
        client_body: Some(DEADLINE),
        min_request_body_rate: rate,
        keepalive: Some(DEADLINE),
        send: Some(DEADLINE),
        min_response_rate: rate,
        upstream_connect: Some(DEADLINE),
        upstream_response: Some(DEADLINE),
        upstream_queue: Some(DEADLINE),
        tunnel: Some(DEADLINE),
    };
    // Two requests at the upstream at a time, guard-wide, one of them a
    // new client's: a request arriving while earlier inputs' are still
    // there (their connections not yet closed, their responses late or
    // never) waits in the queue, then is forwarded or answered 503; one
    // arriving while the new clients' share is taken goes on only once its
    // client (127.0.0.1, served before) is known.
    c.upstream_max_inflight = 2;
    // GETs take the pipelined path (their heads held until answered, sent
    // again once when their connection closes unanswered); with two
    // requests at the upstream at a time, each batch holds two at most.
    // The guards behind a PROXY header keep the default (one request per
    // connection; a GET on a reused one sent again once if it closes
    // unanswered), so both paths are played.
    c.upstream_pipeline = if proxy { 1 } else { 4 };
    c.tls_handshake_timeout = DEADLINE;
    // No IP blocks: every input comes from 127.0.0.1 (or a PROXY-named address).
    c.ip_block = None;
    if proxy {
        c.proxy_protocol = true;
        c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    }
    c.tls = tls;
    c
}

// ---------------------------------------------------------------- upstream

/// One upstream response, as the input describes it (after a `100
/// Continue` when `kind / 10 % 3 == 1`). `kind % 10`:
/// 0 `Content-Length: size`; 1 chunked; 2 delimited by close; 3 `raw`;
/// 4 closed unanswered; 5 204 or 304 (size even or odd); 6 as 0, with
/// `Connection: close`, then closed; 7 as 0 `size % 50` ms late, or never
/// (size a multiple of 4); 8 a head of `size` bytes; 9 as 0, answered
/// before the request body is read. `flags`: the constants below, and the
/// status in the top two bits (200, 404, 418, 503). A request that asks to
/// upgrade is answered `101` when `kind / 10 % 3 == 2`, and the connection
/// is then an echo of what follows, behind a `tunnel:` mark.
#[derive(Clone, Debug)]
struct Spec {
    kind: u8,
    size: usize,
    flags: u8,
    raw: Vec<u8>,
}

impl Spec {
    const SPLIT: u8 = 1;
    const EXTRA: u8 = 2;
    const DELAY: u8 = 4;
    /// A body after a HEAD response; a Content-Length on a 204/304.
    const ODD: u8 = 8;
    const HTTP10: u8 = 16;
    const BIG: u8 = 32;

    fn ok() -> Spec {
        Spec { kind: 0, size: 2, flags: 0, raw: Vec::new() }
    }

    fn status(&self) -> u16 {
        [200, 404, 418, 503][usize::from(self.flags >> 6)]
    }

    fn body_len(&self) -> usize {
        if self.flags & Spec::BIG != 0 {
            self.size * 64
        } else {
            self.size
        }
    }
}

fn start_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the upstream");
    let addr = listener.local_addr().expect("the upstream's address");
    std::thread::Builder::new()
        .name("upstream".into())
        .spawn(move || {
            for s in listener.incoming().flatten() {
                let _ = std::thread::Builder::new().stack_size(256 << 10).spawn(move || serve_upstream(s));
            }
        })
        .expect("spawning the upstream");
    addr
}

fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match s.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// Walk (and drop) a request body from the front of `buf`, reading more as needed.
fn skip_body(s: &mut TcpStream, buf: &mut Vec<u8>, framer: &mut RequestFramer) -> bool {
    let limits = Limits::default();
    loop {
        match framer.body(buf, &limits) {
            Ok((n, done)) => {
                buf.drain(..n);
                if done {
                    return true;
                }
            }
            Err(_) => return false,
        }
        if !read_more(s, buf) {
            return false;
        }
    }
}

/// Answer requests on one upstream connection as the input's specs say.
fn serve_upstream(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    // Pooled connections idle here; the guard closes the ones it drops.
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    // It switches to h2c too when asked (the guards do not allow it: 502).
    let mut framer = RequestFramer::new(64 << 10).upgrading(vec!["websocket".into(), "h2c".into()].into());
    let limits = Limits::default();
    loop {
        let head = loop {
            match framer.head(&buf, &limits) {
                Ok(HeadStep::Complete(h)) => break h,
                Ok(HeadStep::Partial) if read_more(&mut s, &mut buf) => {}
                _ => return,
            }
        };
        let probe = buf[..head.len].windows(14).any(|w| w == b"\r\nX-Probe: 1\r\n");
        buf.drain(..head.len);
        let spec = if probe {
            Spec { kind: 255, size: 0, flags: 0, raw: PROBE_RESPONSE.to_vec() }
        } else {
            let specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
            let i = NEXT_SPEC.fetch_add(1, Ordering::Relaxed);
            if specs.is_empty() {
                Spec::ok()
            } else {
                specs[i % specs.len()].clone()
            }
        };
        if head.upgrade && (spec.kind / 10) % 3 == 2 {
            return tunnel(&mut s, &buf);
        }
        let early = spec.kind % 10 == 9;
        if head.has_body && !early && !skip_body(&mut s, &mut buf, &mut framer) {
            return;
        }
        if !respond(&mut s, &spec, head.head_method) {
            return;
        }
        if head.has_body && early && !skip_body(&mut s, &mut buf, &mut framer) {
            return;
        }
        framer.reset();
    }
}

/// Switch protocols: a 101, then an echo until the guard closes its side
/// (then this side closes too).
fn tunnel(s: &mut TcpStream, early: &[u8]) {
    let switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\ntunnel:";
    if s.write_all(switch).is_err() || s.write_all(early).is_err() {
        return;
    }
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = s.read(&mut chunk) {
        if s.write_all(&chunk[..n]).is_err() {
            return;
        }
    }
}

/// Send the response `spec` asks for; false: close the connection after.
fn respond(s: &mut TcpStream, spec: &Spec, head_method: bool) -> bool {
    if spec.kind == 255 {
        return s.write_all(&spec.raw).is_ok();
    }
    let mut kind = spec.kind % 10;
    // A raw response to HEAD could not be framed by the checking client,
    // which knows a HEAD response only by the mark below; nor could one
    // posing as the guard's own reply be told from it.
    if kind == 3 && (head_method || spec.raw.windows(12).any(|w| w.eq_ignore_ascii_case(b"sluice-guard"))) {
        kind = 0;
    }
    if kind == 7 {
        if spec.size.is_multiple_of(4) {
            // Never answer: wait for the guard to give up (its upstream deadline) or close.
            let mut sink = [0u8; 4096];
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            return false;
        }
        // Answer late (an upstream deadline needs a hang: it costs 300 ms).
        std::thread::sleep(Duration::from_millis((spec.size % 50) as u64));
        kind = 0;
    }
    let version = if spec.flags & Spec::HTTP10 != 0 { "HTTP/1.0" } else { "HTTP/1.1" };
    let status = spec.status();
    let body: Vec<u8> = (0..spec.body_len()).map(|i| b'a' + (i % 26) as u8).collect();
    // Every head answering a HEAD carries it: the checking client frames
    // such a response as its head alone, as the guard does.
    let mark = if head_method { "X-Fuzz-Head: 1\r\n" } else { "" };
    let with_body = !head_method || spec.flags & Spec::ODD != 0;
    let mut out = Vec::new();
    let mut keep = true;
    // A `100 Continue` first, for one kind in three of every framing but
    // raw bytes and no answer (marked too when it answers a HEAD, so the
    // checking client knows the final head is all of that response).
    if (spec.kind / 10) % 3 == 1 && !matches!(kind, 3 | 4) {
        out.extend(format!("HTTP/1.1 100 Continue\r\n{mark}\r\n").bytes());
    }
    match kind {
        // Content-Length, optionally Connection: close (then closed).
        0 | 6 | 9 => {
            let close = if kind == 6 { "Connection: close\r\n" } else { "" };
            out.extend(format!("{version} {status} X\r\n{mark}{close}Content-Length: {}\r\n\r\n", body.len()).bytes());
            if with_body {
                out.extend_from_slice(&body);
            }
            keep = kind != 6;
        }
        1 => {
            out.extend(format!("{version} {status} X\r\n{mark}Transfer-Encoding: chunked\r\n\r\n").bytes());
            if with_body {
                if !body.is_empty() {
                    out.extend(format!("{:x}\r\n", body.len()).bytes());
                    out.extend_from_slice(&body);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
        }
        2 => {
            out.extend(format!("{version} {status} X\r\n{mark}\r\n").bytes());
            out.extend_from_slice(&body);
            keep = false;
        }
        3 => out.extend_from_slice(&spec.raw),
        4 => return false,
        5 => {
            let status = if spec.size.is_multiple_of(2) { 204 } else { 304 };
            let length =
                if spec.flags & Spec::ODD != 0 { format!("Content-Length: {}\r\n", spec.size) } else { String::new() };
            out.extend(format!("{version} {status} X\r\n{mark}{length}\r\n").bytes());
        }
        _ => {
            // A head of `size` bytes: beyond the guard's buffer it cannot be framed.
            out.extend(format!("{version} {status} X\r\n").bytes());
            let mut left = spec.size.min(32 << 10);
            while left > 0 {
                let n = left.min(200);
                out.extend_from_slice(b"X-Pad: ");
                out.extend(std::iter::repeat_n(b'p', n));
                out.extend_from_slice(b"\r\n");
                left -= n;
            }
            out.extend(format!("{mark}Content-Length: 0\r\n\r\n").bytes());
        }
    }
    if spec.flags & Spec::EXTRA != 0 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra");
    }
    if spec.flags & Spec::DELAY != 0 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let sent = if spec.flags & Spec::SPLIT != 0 && out.len() >= 3 {
        let (a, b) = (out.len() / 3, 2 * out.len() / 3);
        let mut ok = s.write_all(&out[..a]).is_ok();
        for part in [&out[a..b], &out[b..]] {
            std::thread::sleep(Duration::from_millis(1));
            ok = ok && s.write_all(part).is_ok();
        }
        ok
    } else {
        s.write_all(&out).is_ok()
    };
    sent && keep
}

// ---------------------------------------------------------------- script

#[derive(Debug)]
enum Op {
    Send(Vec<u8>),
    /// One of [`CANNED`].
    Request(usize),
    /// A PROXY header ([`proxy_header`]).
    Proxy(u8),
    Pause(u64),
    ShutWrite,
    Read(u64),
}

#[derive(Debug)]
struct Script {
    target: Target,
    read: u8,
    keep_open: bool,
    long_wait: bool,
    tls12: bool,
    specs: Vec<Spec>,
    ops: Vec<Op>,
}

impl Script {
    /// For a script of whole well-formed requests (canned), answered by
    /// well-formed responses, read to the end: how many responses it must
    /// get. Every request sent before the write side is shut is answered,
    /// up to the first `Connection: close`.
    fn expected_responses(&self) -> Option<usize> {
        let tame_spec = |s: &Spec| {
            // Chunked only in HTTP/1.1 (a transfer coding in 1.0 is refused).
            let framed = matches!(s.kind % 10, 0 | 5 | 6) || (s.kind % 10 == 1 && s.flags & Spec::HTTP10 == 0);
            framed && s.flags & (Spec::EXTRA | Spec::ODD) == 0 && s.status() != 418
        };
        if !self.target.sees_http() || self.read != 0 || self.keep_open || !self.specs.iter().all(tame_spec) {
            return None;
        }
        // Behind --proxy-protocol, nothing is answered without a header first.
        if self.target == Target::Proxy && !matches!(self.ops.first(), Some(Op::Proxy(_))) {
            return None;
        }
        let mut n = 0;
        for (i, op) in self.ops.iter().enumerate() {
            match op {
                Op::Request(r @ 0..=4) => {
                    n += 1;
                    if *r == 4 {
                        break;
                    }
                }
                Op::Proxy(_) if i == 0 && matches!(self.target, Target::Proxy) => {}
                Op::Pause(_) | Op::Read(_) => {}
                Op::ShutWrite => break,
                _ => return None,
            }
        }
        Some(n)
    }
}

const CANNED: [&[u8]; 10] = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET /close HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"PUT /big HTTP/1.1\r\nHost: a\r\nContent-Length: 3000\r\n\r\n",
    b"GET /partial HTTP/1.1\r\nHo",
    b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    // Not an allowed upgrade (the guards allow WebSocket only): a plain GET.
    b"GET /h2 HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
];

fn proxy_header(p: u8) -> Vec<u8> {
    match p % 4 {
        0 => format!("PROXY TCP4 10.0.{}.{} 127.0.0.1 40000 80\r\n", p >> 2, p).into_bytes(),
        1 => b"PROXY TCP6 2001:db8::1 ::1 40000 80\r\n".to_vec(),
        2 => b"PROXY UNKNOWN\r\n".to_vec(),
        _ => {
            let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
            h.extend_from_slice(&[10, 1, 0, p, 127, 0, 0, 1, 0x9c, 0x40, 0, 80]);
            h
        }
    }
}

impl Script {
    fn decode(data: &[u8]) -> Option<Script> {
        let (&cfg, data) = data.split_first()?;
        let (&count, mut data) = data.split_first()?;
        let mut specs = Vec::new();
        for _ in 0..count & 7 {
            let (h, rest) = data.split_at_checked(4)?;
            let size = usize::from(u16::from_le_bytes([h[1], h[2]]));
            let mut spec = Spec { kind: h[0], size, flags: h[3], raw: Vec::new() };
            data = rest;
            if spec.kind % 10 == 3 {
                let n = (size % 4096).min(data.len());
                spec.raw = data[..n].to_vec();
                data = &data[n..];
            }
            specs.push(spec);
        }
        let mut ops = Vec::new();
        // Pauses and reads wait 30 ms at most in all: well within the
        // guards' deadlines (a script of whole requests must be answered).
        let mut waited = 0;
        while let Some((&op, rest)) = data.split_first() {
            data = rest;
            let p = op >> 3;
            let send = |n: usize, data: &mut &[u8]| {
                let (chunk, rest) = data.split_at(n.min(data.len()));
                *data = rest;
                Op::Send(chunk.to_vec())
            };
            let op = match op & 7 {
                0 => {
                    let Some((&n, rest)) = data.split_first() else { break };
                    data = rest;
                    send(if n == 0 { data.len() } else { usize::from(n) }, &mut data)
                }
                1 => {
                    let ms = u64::from(p % 6).min(30 - waited);
                    waited += ms;
                    Op::Pause(ms)
                }
                2 => Op::ShutWrite,
                3 if waited < 30 => {
                    let ms = (u64::from(p % 4) + 1).min(30 - waited);
                    waited += ms;
                    Op::Read(ms)
                }
                3 => Op::Pause(0),
                4 => Op::Request(usize::from(p) % CANNED.len()),
                5 => Op::Proxy(p),
                6 => {
                    let Some((&b, rest)) = data.split_first() else { break };
                    data = rest;
                    Op::Send(vec![b; (usize::from(p) + 1) * 64])
                }
                _ => send(usize::from(p) + 1, &mut data),
            };
            ops.push(op);
            if ops.len() >= 256 {
                break;
            }
        }
        Some(Script {
            target: Target::ALL[usize::from(cfg & 7) % Target::ALL.len()],
            read: (cfg >> 3) & 3,
            keep_open: cfg & 0x20 != 0,
            tls12: cfg >> 6 == 1,
            long_wait: cfg >> 6 == 3,
            specs,
            ops,
        })
    }
}

// ---------------------------------------------------------------- client

enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

/// A connection to `addr`, with a small receive buffer when asked (so a
/// slow reader pushes back on the guard soon).
fn connect(addr: SocketAddr, small_rcvbuf: bool) -> io::Result<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    if small_rcvbuf {
        sock.set_recv_buffer_size(2048)?;
    }
    sock.connect_timeout(&addr.into(), Duration::from_secs(2))?;
    let s: TcpStream = sock.into();
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(Duration::from_millis(200)))?;
    Ok(s)
}

impl Conn {
    fn open(g: &Guards, target: Target, tls12: bool, small_rcvbuf: bool) -> io::Result<Conn> {
        let mut s = connect(g.addrs[target.guard()], small_rcvbuf)?;
        if !target.rustls() {
            return Ok(Conn::Plain(s));
        }
        if target == Target::ProxyTlsClient {
            s.write_all(b"PROXY TCP4 10.7.0.1 127.0.0.1 40000 443\r\n")?;
        }
        let name = rustls::pki_types::ServerName::try_from("a.test").expect("a server name");
        let tls =
            rustls::ClientConnection::new(g.client_tls[usize::from(tls12)].clone(), name).map_err(io::Error::other)?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(tls, s))))
    }

    fn sock(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => &t.sock,
        }
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(bytes),
            Conn::Tls(t) => {
                t.write_all(bytes)?;
                t.flush()
            }
        }
    }

    fn shut_write(&mut self) {
        if let Conn::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.flush();
        }
        let _ = self.sock().shutdown(Shutdown::Write);
    }

    /// Read into `out` until EOF (true), `idle` without a byte, `until`,
    /// or `out` holding `max` bytes; `slow`: small reads with pauses.
    fn recv(&mut self, out: &mut Vec<u8>, idle: Duration, until: Instant, max: usize, slow: bool) -> bool {
        if self.sock().set_read_timeout(Some(idle)).is_err() {
            return true;
        }
        let mut buf = [0u8; 16 << 10];
        while out.len() < max && Instant::now() < until {
            let want = if slow { 256 } else { buf.len() }.min(max - out.len());
            let got = match self {
                Conn::Plain(s) => s.read(&mut buf[..want]),
                Conn::Tls(t) => t.read(&mut buf[..want]),
            };
            match got {
                Ok(0) => return true,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
            if slow {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        false
    }
}

/// Play the script; what the client received, and whether the guard
/// closed the connection (None: it could not be opened).
fn play(g: &Guards, script: &Script, tame: bool) -> Option<(Vec<u8>, bool)> {
    let mut received = Vec::new();
    let mut conn = Conn::open(g, script.target, script.tls12, script.read == 1).ok()?;
    let reads = script.read != 2;
    let mut open = true;
    for op in &script.ops {
        match op {
            Op::Send(bytes) if open => open = conn.send(bytes).is_ok(),
            Op::Request(r) if open => open = conn.send(CANNED[*r]).is_ok(),
            Op::Proxy(p) if open => open = conn.send(&proxy_header(*p)).is_ok(),
            Op::Send(_) | Op::Request(_) | Op::Proxy(_) => {}
            Op::Pause(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Op::ShutWrite => {
                conn.shut_write();
                open = false;
            }
            Op::Read(ms) if reads => {
                let idle = Duration::from_millis(*ms);
                conn.recv(&mut received, idle, Instant::now() + idle, usize::MAX, false);
            }
            Op::Read(_) => {}
        }
    }
    if !script.keep_open && open {
        conn.shut_write();
    }
    let (wait, until) = if tame {
        // It must be answered and closed: wait for it (a guard that does
        // neither fails below).
        (Duration::from_secs(3), Duration::from_secs(6))
    } else if script.long_wait {
        (Duration::from_millis(350), Duration::from_secs(1))
    } else if script.read == 1 {
        (Duration::from_millis(10), Duration::from_millis(150))
    } else {
        (Duration::from_millis(10), Duration::from_millis(300))
    };
    let until = Instant::now() + until;
    let closed = match script.read {
        0 => conn.recv(&mut received, wait, until, usize::MAX, false),
        1 => conn.recv(&mut received, wait, until, usize::MAX, true),
        2 => {
            std::thread::sleep(if script.long_wait { wait } else { Duration::from_millis(2) });
            false
        }
        _ => conn.recv(&mut received, wait, until, 64, false),
    };
    // Dropped: closed (with a RST when input is left unread).
    Some((received, closed))
}

/// What a client received frames as HTTP/1.1 responses, the last one
/// possibly cut short; nothing follows a reply of the guard's own. A `101`
/// ends the responses (what follows is the tunnel's), and comes only when
/// the client sent something that asks to upgrade to WebSocket (the only
/// protocol the guards allow). How many whole
/// responses there are, and whether the last is the guard's own.
fn check_responses(bytes: &[u8], script: &Script) -> (usize, bool) {
    let asked_upgrade = script.ops.iter().any(|op| match op {
        Op::Request(r) => CANNED[*r].starts_with(b"GET /ws "),
        Op::Send(b) => b.windows(9).any(|w| w.eq_ignore_ascii_case(b"websocket")),
        _ => false,
    });
    let mut count = 0;
    let mut own_reply = false;
    let mut reader = ResponseReader::new(DEFAULT_MAX_HEAD);
    // Where the response being framed began, and how far it is framed.
    let (mut start, mut at) = (0, 0);
    let mut ended = |start: usize, end: usize| {
        let own = bytes[start..end].windows(24).any(|w| w == b"\r\nServer: sluice-guard\r\n");
        own_reply = own;
        assert!(
            !own || end == bytes.len(),
            "bytes after the guard's own reply: {:?}\nscript: {script:?}",
            String::from_utf8_lossy(bytes)
        );
    };
    loop {
        // A response to HEAD (the upstream marks them) is its head alone,
        // whatever it says of a body (a length, chunked, or nothing).
        if at == start {
            let rest = &bytes[at..];
            let head = rest.windows(4).position(|w| w == b"\r\n\r\n").map_or(rest, |e| &rest[..e + 4]);
            if head.windows(18).any(|w| w == b"\r\nX-Fuzz-Head: 1\r\n") {
                reader.expect_no_body();
            }
            if head.len() > 12 && head.starts_with(b"HTTP/1.") && &head[8..13] == b" 101 " {
                assert!(
                    asked_upgrade,
                    "a 101 though nothing asked to upgrade: {:?}\nscript: {script:?}",
                    String::from_utf8_lossy(bytes)
                );
                reader.expect_upgrade();
            }
        }
        match reader.step(&bytes[at..]) {
            Ok(Step::NeedMore) => return (count, own_reply),
            Ok(Step::Consumed(n)) => at += n,
            Ok(Step::Done { response, .. }) if response.status == 101 => return (count + 1, false),
            Ok(Step::Done { consumed, .. }) => {
                at += consumed;
                ended(start, at);
                (start, count) = (at, count + 1);
            }
            Err(e) => panic!(
                "the client received something that is not an HTTP/1.1 response ({e}) at {at}: {:?}\nscript: {script:?}",
                String::from_utf8_lossy(bytes)
            ),
        }
    }
}

/// A fresh well-formed request to each guard is answered 200 (a few tries:
/// the guards may still be closing the last inputs' connections).
fn probe(g: &Guards) {
    for target in [Target::Plain, Target::Proxy, Target::TlsClient, Target::ProxyTlsClient] {
        let mut last = Vec::new();
        let ok = (0..5).any(|try_| {
            if try_ > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let Ok(mut conn) = Conn::open(g, target, false, false) else { return false };
            let mut req = Vec::new();
            if target == Target::Proxy {
                req.extend_from_slice(b"PROXY TCP4 10.200.0.1 127.0.0.1 40000 80\r\n");
            }
            req.extend_from_slice(PROBE_REQUEST);
            last.clear();
            if conn.send(&req).is_err() {
                return false;
            }
            let until = Instant::now() + Duration::from_secs(5);
            conn.recv(&mut last, Duration::from_secs(5), until, usize::MAX, false);
            last.starts_with(b"HTTP/1.1 200 ") && last.ends_with(b"probe-ok")
        });
        if !ok {
            let reports: Vec<_> = g.running.iter().map(|r| r.shared().report()).collect();
            panic!(
                "the {target:?} guard no longer answers a well-formed request; last answer {:?}\n{reports:#?}",
                String::from_utf8_lossy(&last)
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let g = guards();
    let n = INPUTS.fetch_add(1, Ordering::Relaxed);
    if n.is_multiple_of(PROBE_EVERY) {
        probe(g);
    }
    let Some(script) = Script::decode(data) else { return };
    *SPECS.lock().unwrap_or_else(|e| e.into_inner()) = script.specs.clone();
    NEXT_SPEC.store(0, Ordering::Relaxed);
    let expected = script.expected_responses();
    let t = Instant::now();
    let Some((received, closed)) = play(g, &script, expected.is_some()) else { return };
    if *TRACE.get_or_init(|| std::env::var_os("GUARD_CONN_TRACE").is_some()) {
        let ms = t.elapsed().as_millis();
        eprintln!("{script:?}\n=> {ms} ms, closed {closed}: {:?}", String::from_utf8_lossy(&received));
    }
    if script.target.sees_http() {
        let (got, own_reply) = check_responses(&received, &script);
        if let Some(n) = expected {
            // Unless the guard said why it stopped (a deadline on a slow
            // machine, an upstream gone): every request answered.
            assert!(
                closed && (got == n || own_reply && got <= n),
                "{n} requests, {got} responses, closed: {closed}: {:?}\nscript: {script:?}",
                String::from_utf8_lossy(&received)
            );
        }
    }
    // A guard thread that ended (an error; a panic aborts on its own).
    assert!(!g.running.iter().any(GuardThreads::any_finished), "a guard thread ended");
});
