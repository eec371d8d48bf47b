//! `--upstream-max-inflight`: at the cap, requests wait; clients served
//! before go first, new addresses get one slot in four while both wait
//! (never starved), and a request that waits past `--upstream-queue-timeout`
//! is answered 503. Checked on the order in which a one-request-at-a-time
//! upstream receives the requests, from distinct loopback source addresses.

mod support;
use support::heads;
use support::running::connect_from as connect;

use sluice_guard::{Config, Guard};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An upstream serving one request at a time (one connection at a time
/// is not enough: the guard may open several), recording the order in
/// which request targets arrive. `/slow` is answered after 400 ms, the
/// rest after 20 ms.
fn upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (log, one) = (seen.clone(), Arc::new(Mutex::new(())));
    let addr = heads::upstream(move |head| {
        let target = head.split(' ').nth(1).unwrap_or("").to_owned();
        let _serial = one.lock().unwrap();
        log.lock().unwrap().push(target.clone());
        let pause = if target == "/slow" { 400 } else { 20 };
        std::thread::sleep(Duration::from_millis(pause));
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    (addr, seen)
}

fn guard(
    max_inflight: usize,
    queue_timeout: Option<Duration>,
) -> (SocketAddr, sluice_guard::GuardThreads, Arc<Mutex<Vec<String>>>) {
    let (up, seen) = upstream();
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    c.upstream_max_inflight = max_inflight;
    c.timeouts.upstream_queue = queue_timeout;
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    (addr, g.start().unwrap(), seen)
}

fn send(s: &mut TcpStream, target: &str) {
    write!(s, "GET {target} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
}

/// One whole response: its status line.
fn answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    loop {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text.lines().next().unwrap().to_owned();
            }
        }
    }
}

fn stop(g: sluice_guard::GuardThreads) {
    g.stop_flag().store(true, std::sync::atomic::Ordering::Relaxed);
    g.wait().unwrap();
}

fn wait_queued(g: &sluice_guard::GuardThreads, n: u64) {
    let end = Instant::now() + Duration::from_secs(5);
    while g.shared().report().counts.upstream_queued < n {
        assert!(Instant::now() < end, "{n} requests never queued: {:?}", g.shared().report().counts);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn known_clients_go_first_and_new_ones_get_their_share() {
    let (addr, g, seen) = guard(1, None);
    // Eight clients are served once: known from then on.
    let mut known: Vec<TcpStream> = (1..=8).map(|k| connect(&format!("127.0.1.{k}"), addr)).collect();
    for (k, s) in known.iter_mut().enumerate() {
        send(s, &format!("/warm-{k}"));
        assert_eq!(answer(s), "HTTP/1.1 200 OK");
    }
    // One slow request holds the only slot; behind it, two new addresses
    // queue first, then the eight known clients.
    let mut slow = connect("127.0.1.100", addr);
    send(&mut slow, "/slow");
    std::thread::sleep(Duration::from_millis(100));
    let mut new: Vec<TcpStream> = (1..=2).map(|k| connect(&format!("127.0.2.{k}"), addr)).collect();
    for (k, s) in new.iter_mut().enumerate() {
        send(s, &format!("/new-{k}"));
    }
    wait_queued(&g, 2);
    for (k, s) in known.iter_mut().enumerate() {
        send(s, &format!("/known-{k}"));
    }
    wait_queued(&g, 10);
    for s in known.iter_mut().chain(new.iter_mut()).chain([&mut slow]) {
        assert_eq!(answer(s), "HTTP/1.1 200 OK");
    }
    let order: Vec<String> = seen.lock().unwrap().iter().skip(9).cloned().collect();
    // Three known, then the oldest new one, three known, the other new one,
    // the rest: new addresses sent first, and still one slot in four.
    let at = |t: &str| order.iter().position(|o| o == t).unwrap_or_else(|| panic!("{t} not in {order:?}"));
    assert_eq!(at("/new-0"), 3, "{order:?}");
    assert_eq!(at("/new-1"), 7, "{order:?}");
    // (Known clients that became ready in one loop turn keep the order the
    // kernel reported them in: their positions, not their names, are fixed.)
    let mut known_at: Vec<usize> = (0..8).map(|k| at(&format!("/known-{k}"))).collect();
    known_at.sort();
    assert_eq!(known_at, [0, 1, 2, 4, 5, 6, 8, 9], "{order:?}");
    let r = g.shared().report();
    assert_eq!((r.counts.upstream_queued, r.counts.upstream_queued_new), (10, 2), "{:?}", r.counts);
    // Ten requests waited at least most of the slow one's 400 ms in all.
    assert!(r.counts.upstream_queue_wait_us > 10 * 200_000, "{:?}", r.counts);
    stop(g);
}

#[test]
fn a_request_waiting_past_the_queue_timeout_is_answered_503() {
    let (addr, g, seen) = guard(1, Some(Duration::from_millis(100)));
    let mut slow = connect("127.0.3.1", addr);
    send(&mut slow, "/slow");
    std::thread::sleep(Duration::from_millis(50));
    let mut waiting = connect("127.0.3.2", addr);
    send(&mut waiting, "/waits");
    assert_eq!(answer(&mut waiting), "HTTP/1.1 503 Service Unavailable");
    assert_eq!(answer(&mut slow), "HTTP/1.1 200 OK");
    assert!(!seen.lock().unwrap().contains(&"/waits".to_owned()), "the 503'd request went upstream too");
    let r = g.shared().report();
    assert_eq!((r.counts.upstream_queue_timeouts, r.counts.upstream_queued), (1, 1), "{:?}", r.counts);
    // Not the client's fault: no breach, no block.
    assert_eq!(r.blocked_total, 0);
    stop(g);
}

#[test]
fn without_a_cap_nothing_waits() {
    let (addr, g, _) = guard(0, None);
    let mut a = connect("127.0.4.1", addr);
    let mut b = connect("127.0.4.2", addr);
    send(&mut a, "/slow");
    send(&mut b, "/x");
    assert_eq!(answer(&mut b), "HTTP/1.1 200 OK");
    assert_eq!(answer(&mut a), "HTTP/1.1 200 OK");
    assert_eq!(g.shared().report().counts.upstream_queued, 0);
    stop(g);
}

/// New clients hold at most a quarter of the cap at once, even while no
/// known client waits: with a cap of 8, ten new addresses' slow requests
/// reach the upstream two at a time, and a known client's request sent
/// while they wait goes straight on instead of behind them all.
#[test]
fn new_clients_hold_at_most_their_share_of_the_slots() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, most, seen) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (n2, m2, s2) = (now.clone(), most.clone(), seen.clone());
    let up = heads::upstream(move |head| {
        let target = head.split(' ').nth(1).unwrap_or("").to_owned();
        s2.lock().unwrap().push(target.clone());
        if target.starts_with("/new") {
            m2.fetch_max(n2.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(150));
            n2.fetch_sub(1, Ordering::SeqCst);
        }
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    c.upstream_max_inflight = 8;
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    let g = g.start().unwrap();
    let mut known = connect("127.0.5.1", addr);
    send(&mut known, "/warm");
    assert_eq!(answer(&mut known), "HTTP/1.1 200 OK");
    let mut new: Vec<TcpStream> = (1..=10).map(|k| connect(&format!("127.0.6.{k}"), addr)).collect();
    for (k, s) in new.iter_mut().enumerate() {
        send(s, &format!("/new-{k}"));
    }
    // Eight of them wait: two are at the upstream.
    wait_queued(&g, 8);
    send(&mut known, "/known");
    assert_eq!(answer(&mut known), "HTTP/1.1 200 OK");
    for s in &mut new {
        assert_eq!(answer(s), "HTTP/1.1 200 OK");
    }
    assert_eq!(most.load(Ordering::SeqCst), 2, "new clients' requests at the upstream at once");
    let order = seen.lock().unwrap().clone();
    let at = order.iter().position(|t| t == "/known").unwrap();
    // Behind the first two new requests (or the next two, had they begun).
    assert!(at <= 5, "the known client's request went behind the new ones: {order:?}");
    let r = g.shared().report();
    // The known one queued too (others waited), and left the queue at once.
    assert_eq!((r.counts.upstream_queued, r.counts.upstream_queued_new), (9, 8), "{:?}", r.counts);
    stop(g);
}
