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

#[path = "support/heads.rs"]
mod heads;

use sluice_guard::{Config, Guard};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The response to `GET /<name>/<size>`: a body of `size` bytes that
/// starts with the target; when the name ends in `h`, behind a long head
/// (40 header lines). (The guard frames responses by Content-Length only:
/// chunked ones are 502, docs/http-guard.md.)
fn response(target: &str) -> Vec<u8> {
    let size: usize = target.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or(16);
    let mut body = target.as_bytes().to_vec();
    body.resize(size.max(target.len()), b'.');
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", body.len()).into_bytes();
    if target.split('/').nth(1).is_some_and(|n| n.ends_with('h')) {
        for k in 0..40 {
            r.extend_from_slice(format!("X-Filler-{k}: {target}\r\n").as_bytes());
        }
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(&body);
    r
}

fn target_of(head: &str) -> String {
    head.split(' ').nth(1).unwrap_or("").to_owned()
}

fn guard(up: SocketAddr, pipeline: usize) -> (SocketAddr, sluice_guard::Running) {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    c.upstream_pipeline = pipeline;
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    (addr, g.start().unwrap())
}

fn stop(g: sluice_guard::Running) {
    g.stop_flag().store(true, Ordering::Relaxed);
    g.join().unwrap();
}

fn connect(to: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
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
                None => panic!("no Content-Length: {status}"),
            }
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got[..got.len().min(200)]));
        got.extend_from_slice(&b[..n]);
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
                    let name = if k % 2 == 0 { format!("k{k}r{r}") } else { format!("k{k}r{r}h") };
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
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut chunk) {
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        let _ = s.write_all(&response(&target_of(&head)));
                        return;
                    }
                }
            });
        }
    });
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
