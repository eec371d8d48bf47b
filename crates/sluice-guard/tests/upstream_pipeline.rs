//! `--upstream-pipeline`: the body-less GETs of one loop turn share
//! upstream connections. Each client must get its own response, whole
//! (heads and bodies split across reads), and a pipelined
//! request the connection cannot answer is sent again: behind a response
//! its client stopped reading, or on a connection the upstream closed
//! without saying so.
//!
//! Which requests share a turn depends on timing, so the tests that need
//! a request behind another repeat their round until the counters show it
//! happened (and fail if it never does); every round checks every answer.

mod support;
use support::{heads, running};

use running::{connect, stop};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The response to `GET /<name>/<size>`: a body of `size` bytes that
/// starts with the target; when the name ends in `h`, behind a long head
/// (40 header lines); when it starts with `c`, in chunked coding (chunks
/// of up to 1,500 bytes with an extension, then a trailer).
fn response(target: &str) -> Vec<u8> {
    let size: usize = target.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(16);
    let mut body = target.as_bytes().to_vec();
    body.resize(size.max(target.len()), b'.');
    let name = target.split('/').nth(1).unwrap_or("");
    let chunked = name.starts_with('c');
    let mut r = match chunked {
        true => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n".to_vec(),
        false => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", body.len()).into_bytes(),
    };
    if name.ends_with('h') {
        for k in 0..40 {
            r.extend_from_slice(format!("X-Filler-{k}: {target}\r\n").as_bytes());
        }
    }
    r.extend_from_slice(b"\r\n");
    if !chunked {
        r.extend_from_slice(&body);
        return r;
    }
    for piece in body.chunks(1500) {
        r.extend_from_slice(format!("{:x};n=\"{}\"\r\n", piece.len(), piece.len()).as_bytes());
        r.extend_from_slice(piece);
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(b"0\r\nX-Checksum: none\r\n\r\n");
    r
}

fn target_of(head: &str) -> String {
    head.split(' ').nth(1).unwrap_or("").to_owned()
}

fn guard(up: SocketAddr, pipeline: usize) -> (SocketAddr, sluice_guard::GuardThreads) {
    running::start(up, |c| c.upstream_pipeline = pipeline)
}

/// One whole response: its status line and its body.
fn read_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut got = Vec::new();
    let mut b = [0u8; 65536];
    // Once the head is in: where it ends, its status line, its Content-Length.
    let mut head: Option<(usize, String, Option<usize>)> = None;
    loop {
        if head.is_none() {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let status = text.lines().next().unwrap().to_owned();
                let len =
                    text.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().unwrap());
                head = Some((end + 4, status, len));
            }
        }
        if let Some((start, status, len)) = &head {
            let rest = &got[*start..];
            match len {
                Some(len) if rest.len() >= *len => {
                    assert_eq!(rest.len(), *len, "bytes past the response");
                    return (status.clone(), rest.to_vec());
                }
                Some(_) => {}
                None => {
                    if let Some((data, took)) = heads::dechunk(rest) {
                        assert_eq!(rest.len(), took, "bytes past the response");
                        return (status.clone(), data);
                    }
                }
            }
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got[..got.len().min(200)]));
        got.extend_from_slice(&b[..n]);
    }
}

/// A barrier whose wait fails after 20 s instead of hanging the test
/// when one of its threads failed.
struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    turned: Condvar,
}

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier { n, state: Mutex::new((0, 0)), turned: Condvar::new() }
    }

    fn wait(&self) {
        let mut st = self.state.lock().unwrap();
        let generation = st.1;
        st.0 += 1;
        if st.0 == self.n {
            *st = (0, generation + 1);
            self.turned.notify_all();
            return;
        }
        let (st, timeout) =
            self.turned.wait_timeout_while(st, Duration::from_secs(20), |st| st.1 == generation).unwrap();
        assert!(!timeout.timed_out() || st.1 != generation, "a client thread did not come (it failed)");
    }
}

fn get(s: &mut TcpStream, target: &str) {
    write!(s, "GET {target} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
}

#[test]
fn every_client_gets_its_own_response() {
    let up = heads::upstream(|head| response(&target_of(head)));
    let (addr, g) = guard(up, 8);
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 40;
    // All clients ask at once each round, so one loop turn sees many.
    let start = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let start = start.clone();
            std::thread::spawn(move || {
                let mut s = connect(addr);
                for r in 0..ROUNDS {
                    // Sizes from a few bytes to several times a read,
                    // every other client's behind a long head.
                    let size = [3, 100, 1000, 5000, 70_000][(k + r) % 5];
                    // Every third client's in chunked coding.
                    let chunked = if k % 3 == 0 { "c" } else { "" };
                    let name = if k % 2 == 0 { format!("{chunked}k{k}r{r}") } else { format!("{chunked}k{k}r{r}h") };
                    let target = format!("/{name}/{size}");
                    start.wait();
                    get(&mut s, &target);
                    let (status, body) = read_response(&mut s);
                    assert_eq!(status, "http/1.1 200 ok");
                    assert_eq!(body.len(), size.max(target.len()), "{target}");
                    assert!(
                        body.starts_with(target.as_bytes()),
                        "{target} got {:?}",
                        String::from_utf8_lossy(&body[..40])
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = g.shared().report().counts;
    assert_eq!(c.forwarded, (CLIENTS * ROUNDS) as u64, "{c:?}");
    assert!(c.upstream_pipelined > 0, "no request was pipelined: {c:?}");
    // Fewer connections than requests in flight at once: they were shared.
    assert!(c.upstream_connects < CLIENTS as u64, "{c:?}");
    assert_eq!(c.upstream_errors, 0, "{c:?}");
    stop(g);
}

/// Rounds of `clients` GETs at once through a guard in front of `up`,
/// until `seen` holds of the guard's counters (at most 30 rounds); every
/// answer must be its own 200.
fn rounds_until(up: SocketAddr, clients: usize, seen: impl Fn(&sluice_guard::CountTotals) -> bool) {
    let (addr, g) = guard(up, 8);
    for round in 0..30 {
        let start = Arc::new(Barrier::new(clients));
        let threads: Vec<_> = (0..clients)
            .map(|k| {
                let start = start.clone();
                std::thread::spawn(move || {
                    let mut s = connect(addr);
                    let target = format!("/r{round}k{k}/64");
                    start.wait();
                    get(&mut s, &target);
                    let (status, body) = read_response(&mut s);
                    assert_eq!(status, "http/1.1 200 ok", "{target}");
                    assert!(body.starts_with(target.as_bytes()), "{target}");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let c = g.shared().report().counts;
        assert_eq!(c.upstream_errors, 0, "{c:?}");
        if seen(&c) {
            return stop(g);
        }
    }
    panic!("never seen in 30 rounds: {:?}", g.shared().report().counts);
}

#[test]
fn a_connection_closed_without_a_word_has_its_pipelined_requests_sent_again() {
    // An upstream that answers one request per connection, then closes
    // (no `Connection: close`): the requests behind the first on a shared
    // connection get no answer there.
    let up = heads::upstream_with(|head| heads::Reply::SendAndClose(response(&target_of(head))));
    rounds_until(up, 16, |c| c.upstream_resent > 0);
}

#[test]
fn requests_behind_a_response_its_client_does_not_read_are_sent_again() {
    // `/big/..` is 16 MiB: its client stops reading, the guard's buffer for
    // it fills, and the requests written behind it on its connection go
    // to other connections.
    let up = heads::upstream(|head| response(&target_of(head)));
    let (addr, g) = guard(up, 8);
    let answered = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(30);
    let mut stuck = Vec::new();
    while g.shared().report().counts.upstream_resent == 0 {
        assert!(Instant::now() < end, "never resent: {:?}", g.shared().report().counts);
        const BEHIND: usize = 12;
        let start = Arc::new(Barrier::new(BEHIND + 1));
        let mut big = connect(addr);
        let threads: Vec<_> = (0..BEHIND)
            .map(|k| {
                let (start, answered) = (start.clone(), answered.clone());
                std::thread::spawn(move || {
                    let mut s = connect(addr);
                    let target = format!("/small{k}/64");
                    start.wait();
                    // Just after the big one.
                    std::thread::sleep(Duration::from_micros(50));
                    get(&mut s, &target);
                    let (status, body) = read_response(&mut s);
                    assert_eq!(status, "http/1.1 200 ok", "{target}");
                    assert!(body.starts_with(target.as_bytes()), "{target}");
                    answered.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        start.wait();
        get(&mut big, &format!("/big/{}", 16 << 20));
        // Every small one is answered while the big one is not read.
        for t in threads {
            t.join().unwrap();
        }
        stuck.push(big);
    }
    assert!(answered.load(Ordering::Relaxed) > 0);
    // The big responses' clients still get theirs, whole, when they read.
    for mut s in stuck {
        let (status, body) = read_response(&mut s);
        assert_eq!((status.as_str(), body.len()), ("http/1.1 200 ok", 16 << 20));
        assert!(body.starts_with(b"/big/"));
    }
    stop(g);
}

/// A small deterministic generator (xorshift64*), one per client thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Clients asking at once, some leaving before their answer, in front of
/// an upstream that, as each target asks (`/<id>/<size>/<how>`): answers
/// (`n`), answers after a pause (`s`), answers with `Connection: close`
/// and closes (`c`), answers and closes without a word (`k`), or closes
/// without answering (`x`). Every answer a client reads is its own
/// request's (its body starts with its target), or a 502 for `x` alone:
/// never another client's bytes, and nothing lost behind a connection
/// that closed.
#[test]
fn random_clients_and_upstream_behaviours_never_cross_responses() {
    let up = heads::upstream_with(|head| {
        let target = target_of(head);
        // The body starts with `/<id>/<size>`.
        let mut r = response(target.rsplit_once('/').map_or(target.as_str(), |(t, _)| t));
        match target.rsplit('/').next().unwrap_or("n") {
            "x" => heads::Reply::Close,
            "s" => {
                std::thread::sleep(Duration::from_millis(5 + target.len() as u64 % 20));
                heads::Reply::Send(r)
            }
            "c" => {
                let head_end = r.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
                r.splice(head_end..head_end, b"Connection: close\r\n".iter().copied());
                heads::Reply::SendAndClose(r)
            }
            "k" => heads::Reply::SendAndClose(r),
            _ => heads::Reply::Send(r),
        }
    });
    let (addr, g) = guard(up, 8);
    const CLIENTS: u64 = 24;
    const ROUNDS: usize = 30;
    // One client in six reads slowly, at its own pace (not in the rounds).
    let slow = |k: u64| k % 6 == 5;
    let start = Arc::new(Barrier::new((0..CLIENTS).filter(|&k| !slow(k)).count()));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let start = start.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (k + 1));
                let mut s = connect(addr);
                for r in 0..ROUNDS {
                    if slow(k) {
                        // It sends two requests at once: its second answer
                        // is read from the spill into a buffer still holding
                        // the first one's end.
                        slow_pair(addr, k, r);
                        continue;
                    }
                    let size = [8, 300, 3000, 40_000][rng.below(4) as usize];
                    let how = ["n", "n", "n", "s", "c", "k", "x"][rng.below(7) as usize];
                    let target = format!("/k{k}r{r}/{size}/{how}");
                    start.wait();
                    get(&mut s, &target);
                    if rng.below(10) == 0 {
                        // Leaves before its answer.
                        s = connect(addr);
                        continue;
                    }
                    let (status, body) = read_response(&mut s);
                    if how == "x" {
                        assert_eq!(status, "http/1.1 502 bad gateway", "{target}");
                    } else {
                        assert_eq!(status, "http/1.1 200 ok", "{target}");
                        let own = format!("/k{k}r{r}/{size}");
                        let start = String::from_utf8_lossy(&body[..40.min(body.len())]).into_owned();
                        assert!(body.starts_with(own.as_bytes()), "{target} got {start:?}");
                    }
                    // The guard closes after a 502 and after `Connection: close`.
                    if matches!(how, "x" | "c") {
                        s = connect(addr);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = g.shared().report().counts;
    assert!(c.upstream_pipelined > 0 && c.upstream_resent > 0, "{c:?}");
    stop(g);
}

/// One round of the slow client above: a small receive buffer, two GETs
/// sent together (a 40,000-byte answer, then an 8-byte one), a pause, then
/// both answers read, each its own.
fn slow_pair(addr: SocketAddr, k: u64, r: usize) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (first, second) = (format!("/k{k}r{r}a/40000/n"), format!("/k{k}r{r}b/8/n"));
    write!(s, "GET {first} HTTP/1.1\r\nHost: a\r\n\r\nGET {second} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // The two answers, byte for byte, in order.
    let want: Vec<u8> = [response(&format!("/k{k}r{r}a/40000")), response(&format!("/k{k}r{r}b/8"))].concat();
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert!(got == want, "{first} and {second}: got {:?}", String::from_utf8_lossy(&got[..200]));
}

/// At the defaults (no pipelining), chunked responses are relayed whole:
/// a large one to a client reading it slowly (the guard holds at most its
/// buffer), then the next request on the same connections, client and
/// upstream.
#[test]
fn chunked_responses_are_relayed_whole_and_the_connections_reused() {
    let up = heads::upstream(|head| response(&target_of(head)));
    let (addr, g) = guard(up, 1);
    let mut s = connect(addr);
    for (r, size) in [3usize, 1_000, 2_000_000, 40].into_iter().enumerate() {
        let target = format!("/cslow{r}/{size}");
        get(&mut s, &target);
        if size > 1_000_000 {
            // Let the guard fill its buffer and wait on this client.
            std::thread::sleep(Duration::from_millis(300));
        }
        let (status, body) = read_response(&mut s);
        assert_eq!(status, "http/1.1 200 ok", "{target}");
        assert_eq!(body.len(), size.max(target.len()), "{target}");
        assert!(body.starts_with(target.as_bytes()), "{target}");
    }
    let c = g.shared().report().counts;
    assert_eq!((c.forwarded, c.upstream_errors), (4, 0), "{c:?}");
    assert_eq!(c.upstream_connects, 1, "the upstream connection was not reused: {c:?}");
    stop(g);
}

/// An interim `100 Continue` goes to the client before its final
/// response; a body the upstream ends by closing (no length, not chunked)
/// is relayed whole, and then the client is closed too (the close is all
/// that tells it the body ended).
#[test]
fn interim_and_close_delimited_responses_are_relayed() {
    let body: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let close_delimited = [b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\n".as_slice(), &body].concat();
    let up = {
        let close_delimited = close_delimited.clone();
        heads::upstream_with(move |head| match target_of(head).as_str() {
            "/continue" => heads::Reply::Send(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
            ),
            _ => heads::Reply::SendAndClose(close_delimited.clone()),
        })
    };
    let (addr, g) = guard(up, 1);
    let mut s = connect(addr);
    let want = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    get(&mut s, "/continue");
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    // The same connection, a body up to the close.
    get(&mut s, "/old");
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the guard closes the client after the body");
    assert!(
        got == close_delimited,
        "got {} bytes: {:?}",
        got.len(),
        String::from_utf8_lossy(&got[..got.len().min(80)])
    );
    let c = g.shared().report().counts;
    assert_eq!((c.forwarded, c.upstream_errors), (2, 0), "{c:?}");
    stop(g);
}

/// At the defaults, a body-less GET sent on a reused connection that the
/// upstream closes without answering (its keep-alive timeout firing as
/// the request goes out) is sent once more on another connection; a POST
/// is not (it may have been acted on), and gets a 502.
#[test]
fn a_get_on_a_reused_connection_the_upstream_closed_is_sent_again() {
    // Each upstream connection answers its first request and closes
    // without a word at its second.
    let up = {
        let n = std::cell::Cell::new(0u32);
        heads::upstream_with(move |head| {
            n.set(n.get() + 1);
            match n.get() {
                1 => heads::Reply::Send(response(&target_of(head))),
                _ => heads::Reply::Close,
            }
        })
    };
    let (addr, g) = guard(up, 1);
    let mut s = connect(addr);
    for r in 0..5 {
        let target = format!("/again{r}/100");
        get(&mut s, &target);
        let (status, body) = read_response(&mut s);
        assert_eq!(status, "http/1.1 200 ok", "{target}");
        assert!(body.starts_with(target.as_bytes()), "{target}");
    }
    let c = g.shared().report().counts;
    // The first request on a fresh connection, each later one on the
    // reused connection, then again on a fresh one.
    assert_eq!((c.upstream_resent, c.upstream_connects), (4, 5), "{c:?}");
    // A POST (its head alone: the upstream reads no body) on the reused
    // connection is not sent again.
    write!(s, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").unwrap();
    let (status, _) = read_response(&mut s);
    assert_eq!(status, "http/1.1 502 bad gateway");
    stop(g);
}
