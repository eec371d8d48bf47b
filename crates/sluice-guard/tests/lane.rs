//! `--calm-lane` (`proxy/lane.rs`): a connection open a second, calm and
//! between requests moves to the lane thread and is served there, TLS and
//! all, and goes back once over its pace; one with a request under way stays; at `--max-connections` the
//! lane's connections still count against the accepting thread, which asks
//! the lane to shed when it has nothing of its own to; and a lent
//! connection that closes gives its room back. Each client has a loopback
//! address of its own.

mod support;
use support::running::{closed, connect_from as connect, exchange, one_thread, stop, tls_client, until, GET, OK};

use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, GuardThreads, Shared};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn lane_guard(tune: impl FnOnce(&mut Config)) -> (SocketAddr, GuardThreads, Arc<Shared>) {
    one_thread(|c| {
        c.calm_lane = true;
        tune(c);
    })
}

/// Requests the lane threads (the counters after the accepting threads') read.
fn lane_requests(shared: &Shared) -> u64 {
    let lanes = &shared.threads[shared.threads.len() / 2..];
    lanes.iter().map(|t| t.requests.load(Ordering::Relaxed)).sum()
}

#[test]
fn a_calm_connection_moves_to_the_lane_and_is_served_there() {
    let (addr, g, shared) = lane_guard(|_| {});
    assert_eq!(shared.threads.len(), 2, "the accepting thread and the lane");
    let mut s = connect("127.12.0.1", addr);
    exchange(&mut s);
    // A connection opened just now is served where it was accepted.
    let mut fresh = connect("127.12.0.2", addr);
    exchange(&mut fresh);
    until(&shared, "both handed over after a second", |c| c.calm_lane_lent == 2);
    assert_eq!(lane_requests(&shared), 0);
    for _ in 0..3 {
        exchange(&mut s);
    }
    assert!(lane_requests(&shared) >= 3, "served by the lane: {}", lane_requests(&shared));
    // Keep-alive and pipelining go on as before.
    s.write_all(&GET.repeat(2)).unwrap();
    let mut got = vec![0; 2 * OK.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, OK.repeat(2));
    drop((s, fresh));
    stop(g);
}

#[test]
fn each_accepting_thread_has_a_lane_of_its_own() {
    let up = support::heads::upstream(|_| OK.to_vec());
    let (addr, g) = support::running::start(up, |c| {
        c.threads = 2;
        c.calm_lane = true;
    });
    let shared = g.shared();
    assert_eq!(shared.threads.len(), 4, "two accepting threads, two lanes");
    // Enough addresses that SO_REUSEPORT gives each thread some.
    let mut all: Vec<TcpStream> = (1..=16).map(|k| connect(&format!("127.12.6.{k}"), addr)).collect();
    all.iter_mut().for_each(exchange);
    until(&shared, "all handed over", |c| c.calm_lane_lent == 16);
    all.iter_mut().for_each(exchange);
    let per_lane: Vec<u64> = shared.threads[2..].iter().map(|t| t.requests.load(Ordering::Relaxed)).collect();
    let handed: Vec<u64> = shared.threads[..2].iter().map(|t| t.calm_lane_lent.load(Ordering::Relaxed)).collect();
    assert_eq!(per_lane, handed, "lane k serves what thread k handed it");
    stop(g);
}

#[test]
fn without_the_flag_nothing_moves() {
    let (addr, g, shared) = one_thread(|_| {});
    assert_eq!(shared.threads.len(), 1);
    let mut s = connect("127.12.1.1", addr);
    exchange(&mut s);
    std::thread::sleep(Duration::from_millis(1300));
    exchange(&mut s);
    assert_eq!(shared.report().counts.calm_lane_lent, 0);
    stop(g);
}

#[test]
fn a_lent_connection_over_its_pace_goes_back_to_its_thread() {
    let (addr, g, shared) = lane_guard(|_| {});
    let mut s = connect("127.12.7.1", addr);
    exchange(&mut s);
    until(&shared, "handed over", |c| c.calm_lane_lent == 1);
    // Lent just under the calm line (two seconds of the default pace
    // rate: 16 requests; the count leaks 1 a second). 5 requests at once:
    // over it, not well over it (24): it stays.
    let burst = |s: &mut TcpStream, n: usize| {
        s.write_all(&GET.repeat(n)).unwrap();
        let mut got = vec![0; n * OK.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, OK.repeat(n));
    };
    burst(&mut s, 5);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(shared.report().counts.calm_lane_returned, 0, "sent back just over the calm line");
    // 7 more: well over (with seconds to spare on a slow machine).
    burst(&mut s, 7);
    until(&shared, "handed back", |c| c.calm_lane_returned == 1);
    let own = || shared.threads[0].requests.load(Ordering::Relaxed);
    let before = own();
    exchange(&mut s);
    assert_eq!(own(), before + 1, "served by its accepting thread again");
    assert_eq!(shared.report().counts.calm_lane_lent, 1, "not lent again while over its pace");
    stop(g);
}

#[test]
fn a_request_under_way_keeps_its_connection_where_it_is() {
    let (addr, g, shared) = lane_guard(|_| {});
    let mut s = connect("127.12.2.1", addr);
    exchange(&mut s);
    // Half a head, held past the lane's age: it stays, and is served whole.
    s.write_all(&GET[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(1400));
    assert_eq!(shared.report().counts.calm_lane_lent, 0, "moved with a head half read");
    s.write_all(&GET[10..]).unwrap();
    let mut got = vec![0; OK.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, OK);
    // Between requests again: now it moves.
    until(&shared, "handed over once idle", |c| c.calm_lane_lent == 1);
    exchange(&mut s);
    stop(g);
}

#[test]
fn at_the_cap_the_lane_sheds_for_the_accepting_thread() {
    let (addr, g, shared) = lane_guard(|c| c.max_connections = 2);
    let mut a = connect("127.12.3.1", addr);
    exchange(&mut a);
    std::thread::sleep(Duration::from_millis(50));
    let mut b = connect("127.12.3.2", addr);
    exchange(&mut b);
    until(&shared, "both handed over", |c| c.calm_lane_lent == 2);
    // The accepting thread holds nothing, but its share is the lane's:
    // the first newcomer is refused and the lane sheds the one that has
    // waited longest for a request (a), which lets the next in.
    let mut c = connect("127.12.3.3", addr);
    let mut byte = [0u8; 1];
    assert!(matches!(c.read(&mut byte), Ok(0) | Err(_)), "over the cap: refused");
    until(&shared, "the lane shed one", |c| c.shed_waiting == 1);
    let mut d = connect("127.12.3.4", addr);
    exchange(&mut d);
    assert!(closed(&mut a), "the longest waiting was shed");
    assert!(!closed(&mut b));
    exchange(&mut b);
    let counts = shared.report().counts;
    assert_eq!(counts.refused_max_connections, 1, "{counts:?}");
    stop(g);
}

#[test]
fn a_lent_connection_that_closes_gives_its_room_back() {
    let (addr, g, shared) = lane_guard(|c| c.max_connections = 1);
    let mut a = connect("127.12.4.1", addr);
    exchange(&mut a);
    until(&shared, "handed over", |c| c.calm_lane_lent == 1);
    drop(a);
    // The lane reads the FIN and closes it; the room is the accepting
    // thread's again (no refusal, nothing shed).
    std::thread::sleep(Duration::from_millis(300));
    let mut b = connect("127.12.4.2", addr);
    exchange(&mut b);
    let counts = shared.report().counts;
    assert_eq!((counts.refused_max_connections, counts.shed_waiting), (0, 0), "{counts:?}");
    stop(g);
}

#[test]
fn a_tls_connection_moves_with_its_session() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
    let (addr, g, shared) =
        lane_guard(|c| c.tls = vec![CertFiles { cert: dir.join("tls-a.test.pem"), key: dir.join("tls-a.test.key") }]);
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let conn = rustls::ClientConnection::new(tls_client(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, connect("127.12.5.1", addr));
    let ask = |tls: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>| {
        tls.write_all(GET).unwrap();
        let mut got = vec![0; OK.len()];
        tls.read_exact(&mut got).unwrap();
        assert_eq!(got, OK);
    };
    ask(&mut tls);
    until(&shared, "handed over", |c| c.calm_lane_lent == 1);
    ask(&mut tls);
    ask(&mut tls);
    assert!(lane_requests(&shared) >= 2);
    stop(g);
}
