//! A connection's pace (`sluice_guard::pace`): the events of one over its
//! calm pace wait for the loop turn's slice for them, and it is served in
//! full all the same; one from an address served before is calm at once;
//! and at `--max-connections`, of the connections not known, one over its
//! pace is shed before a calm idle one. Each client has a loopback address of its own.

mod support;
use support::running::{connect_from as connect, exchange, one_thread as guard, stop};

use std::io::Read;
use std::time::Duration;

#[test]
fn a_new_address_asking_at_once_is_paced_and_served_in_full() {
    let (addr, g, shared) = guard(|c| c.limits.request_rate = Some(100));
    let mut s = connect("127.9.0.1", addr);
    for _ in 0..20 {
        exchange(&mut s);
    }
    let r = shared.report();
    assert_eq!(r.counts.requests, 20);
    assert!(r.counts.paced >= 19, "every request after the first came as an event over the pace: {:?}", r.counts);
    stop(g);
}

#[test]
fn a_quiet_second_or_an_address_served_before_is_calm() {
    let (addr, g, shared) = guard(|c| c.limits.request_rate = Some(100));
    // Quiet for a second after connecting: calm, though its address is new.
    let mut s = connect("127.9.1.1", addr);
    std::thread::sleep(Duration::from_millis(1200));
    exchange(&mut s);
    exchange(&mut s);
    assert_eq!(shared.report().counts.paced, 0);
    // Its address was served: a new connection from it is calm at once.
    let mut again = connect("127.9.1.1", addr);
    for _ in 0..5 {
        exchange(&mut again);
    }
    let r = shared.report();
    assert_eq!((r.counts.requests, r.counts.paced), (7, 0), "{:?}", r.counts);
    stop(g);
}

#[test]
fn at_the_cap_a_waiting_connection_over_its_pace_is_shed_before_a_calm_idle_one() {
    let (addr, g, shared) = guard(|c| {
        c.max_connections = 2;
        c.limits.request_rate = Some(2);
    });
    // Idle for over a second, never served: calm.
    let mut idle = connect("127.9.2.1", addr);
    std::thread::sleep(Duration::from_millis(1200));
    // Two requests at once from a new address: over its pace, near its
    // limit (so not a known client), waiting for its next request.
    let mut busy = connect("127.9.2.2", addr);
    exchange(&mut busy);
    exchange(&mut busy);
    // A third: at the cap, one waiting connection is shed to make room.
    let mut third = connect("127.9.2.3", addr);
    exchange(&mut third);
    assert_eq!(shared.report().counts.shed_waiting, 1);
    let mut rest = Vec::new();
    assert_eq!(busy.read_to_end(&mut rest).unwrap(), 0, "the connection over its pace was shed");
    exchange(&mut idle);
    stop(g);
}
