//! Making room at `--max-connections` (`proxy/shed.rs`): a new connection
//! sheds exactly one waiting connection, not a share of them; and an
//! address shed lately is refused at the cap rather than let displace
//! another, until its cooldown ends. Each client has a loopback address of
//! its own.

mod support;
use support::running::{closed, connect_from as connect, exchange, one_thread, stop, until, OK};

use sluice_guard::{Config, GuardThreads, Shared};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn guard(max_connections: usize) -> (SocketAddr, GuardThreads, Arc<Shared>) {
    guard_with(max_connections, |_| {})
}

fn guard_with(max_connections: usize, tune: impl FnOnce(&mut Config)) -> (SocketAddr, GuardThreads, Arc<Shared>) {
    one_thread(|c| {
        c.max_connections = max_connections;
        tune(c);
    })
}

#[test]
fn a_new_connection_at_the_cap_sheds_one_not_a_share() {
    // 130 open: a share of 1/64 would be two.
    let cap = 130;
    let (addr, g, shared) = guard(cap);
    let mut idle: Vec<TcpStream> =
        (0..cap).map(|i| connect(&format!("127.11.{}.{}", i / 200, 1 + i % 200), addr)).collect();
    until(&shared, "all accepted", |c| c.connections == cap as u64);
    // Three newcomers (shedding two at a time would make it four: two for
    // the first, none for the second, let into the room left, two for the third).
    let newcomers: Vec<TcpStream> = (1..=3)
        .map(|k| {
            let mut s = connect(&format!("127.11.9.{k}"), addr);
            exchange(&mut s);
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let gone = idle.iter_mut().map(closed).filter(|&c| c).count();
    let c = shared.report().counts;
    assert_eq!((c.shed_waiting, gone), (3, 3), "one shed for each newcomer: {c:?}");
    drop(newcomers);
    assert_eq!(c.refused_max_connections, 0);
    stop(g);
}

#[test]
fn an_address_shed_lately_is_refused_at_the_cap_until_its_cooldown_ends() {
    let (addr, g, shared) = guard(2);
    let mut a = connect("127.11.20.1", addr);
    std::thread::sleep(Duration::from_millis(20));
    let mut b = connect("127.11.20.2", addr);
    until(&shared, "both accepted", |c| c.connections == 2);
    // A third address: the longest waiting (a) is shed for it.
    let mut c = connect("127.11.20.3", addr);
    exchange(&mut c);
    let shed_at = Instant::now();
    until(&shared, "a shed", |c| c.shed_waiting == 1);
    assert!(
        closed(&mut a) || {
            std::thread::sleep(Duration::from_millis(100));
            closed(&mut a)
        }
    );
    // a again, at once: refused, and nobody is shed for it.
    let mut again = connect("127.11.20.1", addr);
    until(&shared, "a refused", |c| c.refused_shed_lately == 1);
    let counts = shared.report().counts;
    assert_eq!((counts.shed_waiting, counts.refused_max_connections), (1, 1), "{counts:?}");
    let mut rest = Vec::new();
    assert!(again.read_to_end(&mut rest).map_or(true, |n| n == 0), "refused, so closed unanswered");
    assert!(!closed(&mut b), "b kept");
    // A new address still makes room (b, now the longest waiting).
    let mut d = connect("127.11.20.4", addr);
    exchange(&mut d);
    assert!(shed_at.elapsed() < super_cooldown(), "the test was too slow to show the cooldown");
    // Once its cooldown is over, a may displace one again.
    std::thread::sleep(super_cooldown().saturating_sub(shed_at.elapsed()) + Duration::from_millis(200));
    let mut back = connect("127.11.20.1", addr);
    exchange(&mut back);
    let counts = shared.report().counts;
    assert_eq!((counts.shed_waiting, counts.refused_shed_lately), (3, 1), "{counts:?}");
    stop(g);
}

/// A load balancer's connections (behind it, each request names its
/// client) speak for many clients: shedding one never keeps the balancer
/// from making room for its next.
#[test]
fn a_trusted_proxy_shed_at_the_cap_still_makes_room() {
    let (addr, g, shared) = guard_with(2, |c| {
        c.trusted_proxies = vec!["127.11.40.0/24".parse().unwrap()];
        c.client_ip_header = Some("X-Forwarded-For".into());
    });
    let balancer = "127.11.40.1";
    let _idle: Vec<TcpStream> = (0..2).map(|_| connect(balancer, addr)).collect();
    until(&shared, "both accepted", |c| c.connections == 2);
    let mut served = Vec::new();
    for k in 1..=2 {
        let mut s = connect(balancer, addr);
        write!(s, "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 198.51.100.{k}\r\n\r\n").unwrap();
        let mut got = vec![0; OK.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, OK, "connection {k} from the balancer");
        served.push(s);
    }
    let counts = shared.report().counts;
    assert_eq!((counts.shed_waiting, counts.refused_shed_lately), (2, 0), "{counts:?}");
    stop(g);
}

/// `proxy::shed::SHED_COOLDOWN` (crate-private), as docs/http-guard.md says it.
fn super_cooldown() -> Duration {
    Duration::from_secs(2)
}
