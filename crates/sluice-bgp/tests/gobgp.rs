//! The decoder against a real peer: Debian's `gobgpd` (started by the
//! test on loopback, passive, its API on a port of its own) announces
//! FlowSpec rules and a blackhole route added with the `gobgp` CLI, then
//! withdraws one; the test speaks BGP with sluice-bgp's messages (OPEN,
//! KEEPALIVE) and checks what each UPDATE decodes to. Under
//! SLUICE_REQUIRE_TOOLS (CI) a missing gobgpd fails the test.
//!
//! GoBGP 3.10 encodes an IPv6 prefix with an offset as draft-ietf-idr-
//! flow-spec-v6-06 did (every byte up to the length), not as RFC 8956
//! does (only the bits from the offset): such an NLRI is refused, naming
//! the byte, which the last part checks.

use sluice_bgp::flowspec::{Component, Family, Flow};
use sluice_bgp::message::{self, AfiSafi, FlowAction, Message, BLACKHOLE};
use sluice_testkit::bgp::{free_port, Gobgpd, GobgpdConfig};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

/// gobgpd on a free port with IPv4 and IPv6 FlowSpec and IPv4 unicast.
fn config() -> GobgpdConfig {
    GobgpdConfig::on(free_port()).families(&["ipv4-flowspec", "ipv6-flowspec", "ipv4-unicast"])
}

/// Reads whole messages off a session, answering KEEPALIVEs.
struct Session {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Session {
    fn next(&mut self, until: Instant) -> Message {
        let m = self.raw(until);
        let msg =
            message::decode(&m, true).unwrap_or_else(|e| panic!("gobgpd sent what does not decode: {e}: {m:02x?}"));
        if msg == Message::Keepalive {
            self.s.write_all(&message::keepalive()).unwrap();
        }
        msg
    }

    /// The next message's bytes, undecoded.
    fn raw(&mut self, until: Instant) -> Vec<u8> {
        loop {
            if let Some(n) = message::frame_len(&self.buf).unwrap() {
                if self.buf.len() >= n {
                    return self.buf.drain(..n).collect();
                }
            }
            assert!(Instant::now() < until, "gobgpd sent nothing more in time");
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => panic!("gobgpd closed the session"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// UPDATEs until `done` says enough was seen.
    fn updates(&mut self, mut done: impl FnMut(&message::Update) -> bool) {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Message::Update(u) = self.next(until) {
                if done(&u) {
                    return;
                }
            }
        }
    }
}

#[test]
fn gobgp_flowspec_and_blackhole_routes_decode_as_announced() {
    let Some(d) = Gobgpd::start_or_skip(&config()) else { return };
    let s = d.connect();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let fams = [AfiSafi::IPV4_FLOWSPEC, AfiSafi::IPV6_FLOWSPEC, AfiSafi::IPV4_UNICAST];
    let mut sess = Session { s, buf: Vec::new() };
    sess.s.write_all(&message::open(65002, 90, Ipv4Addr::new(192, 0, 2, 2), &fams, 120)).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let Message::Open(o) = sess.next(until) else { panic!("no OPEN") };
    assert_eq!(o.asn(), 65001);
    assert!(o.capabilities.multiprotocol.contains(&AfiSafi::IPV4_FLOWSPEC), "{o:?}");
    sess.s.write_all(&message::keepalive()).unwrap();
    assert_eq!(sess.next(until), Message::Keepalive);

    d.cli_once("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    d.cli_once(
        "global rib -a ipv4-flowspec add match destination 198.51.100.0/24 protocol tcp tcp-flags =S then discard",
    );
    d.cli_once("global rib -a ipv4-flowspec add match protocol gre then rate-limit 125000");
    d.cli_once("global rib -a ipv6-flowspec add match destination 2001:db8::/32 source 2001:db8:7::/48 protocol udp then discard");
    d.cli_once("global rib -a ipv4 add 203.0.113.7/32 nexthop 192.0.2.254 community 65535:666");
    let mut flows: Vec<(Flow, Vec<FlowAction>)> = Vec::new();
    let mut blackholed = Vec::new();
    sess.updates(|u| {
        for f in &u.flows_announced {
            flows.push((f.clone(), u.flow_actions.clone()));
        }
        if u.communities.contains(&BLACKHOLE) {
            blackholed.extend(u.announced.iter().copied());
        }
        flows.len() >= 4 && !blackholed.is_empty()
    });
    let text = |f: &Flow| f.to_string();
    let find = |s: &str| {
        flows
            .iter()
            .find(|(f, _)| text(f) == s)
            .unwrap_or_else(|| panic!("{s} not in {:?}", flows.iter().map(|(f, a)| (text(f), a)).collect::<Vec<_>>()))
    };
    assert_eq!(
        find("destination 192.0.2.0/24 protocol ==17 destination-port ==53").1,
        vec![FlowAction::RateBytes(0.0)]
    );
    assert_eq!(find("destination 198.51.100.0/24 protocol ==6 tcp-flags =0x2").1, vec![FlowAction::RateBytes(0.0)]);
    assert_eq!(find("protocol ==47").1, vec![FlowAction::RateBytes(125000.0)]);
    let v6 = find("destination 2001:db8::/32 source 2001:db8:7::/48 protocol ==17");
    assert_eq!(v6.0.family, Family::V6);
    assert!(matches!(v6.0.components[1], Component::Source(p) if p.offset == 0 && p.len == 48));
    assert_eq!(blackholed, vec![("203.0.113.7".parse().unwrap(), 32)]);

    // Every decoded flow encodes back to bytes that decode to itself.
    for (f, _) in &flows {
        assert_eq!(&Flow::decode(f.family, &f.to_bytes()).unwrap().0, f);
    }
    d.cli_once("global rib -a ipv4-flowspec del match protocol gre then rate-limit 125000");
    sess.updates(|u| u.flows_withdrawn.iter().any(|f| text(f) == "protocol ==47"));

    // An offset, as GoBGP encodes it: 8 pattern bytes where RFC 8956 sends 4.
    d.cli_once("global rib -a ipv6-flowspec add match source ::1:0:0:0/80 32 then discard");
    let until = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match sess.raw(until) {
            m if m[18] != message::UPDATE => continue,
            m => break message::decode(&m, true).unwrap_err(),
        }
    };
    assert_eq!((e.code, e.subcode), (message::UPDATE_ERROR, 9), "{e}");
    assert!(e.message.contains("FlowSpec NLRI, byte"), "{e}");
}

/// `session::run` against gobgpd: ESTABLISHED, flows as events, and the
/// session down (with its reason) when gobgpd goes.
#[test]
fn a_session_to_gobgpd_brings_its_flows_and_reports_it_gone() {
    use sluice_bgp::session::{run, PeerConfig, SessionEvent};
    let Some(d) = Gobgpd::start_or_skip(&config()) else { return };
    let mut cfg = PeerConfig::new(([127, 0, 0, 1], d.port).into(), 65001, 65002, Ipv4Addr::new(192, 0, 2, 2));
    cfg.connect_retry = Duration::from_millis(200);
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || run(cfg, tx, stop, None))
    };
    let next = |what: &str| rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no {what}"));
    // gobgpd may not listen yet: the first tries fail, then it is up.
    let open = loop {
        match next("ESTABLISHED") {
            SessionEvent::Up { open, .. } => break open,
            SessionEvent::Down { .. } => continue,
            e => panic!("{e:?}"),
        }
    };
    assert_eq!(open.asn(), 65001);
    d.cli_once("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    let flow = loop {
        if let SessionEvent::Update { update, .. } = next("UPDATE") {
            if let Some(f) = update.flows_announced.first() {
                break f.to_string();
            }
        }
    };
    assert_eq!(flow, "destination 192.0.2.0/24 protocol ==17 destination-port ==53");
    drop(d);
    let reason = loop {
        if let SessionEvent::Down { reason, .. } = next("the session down") {
            break reason;
        }
    };
    assert!(reason.contains("NOTIFICATION") || reason.contains("closed") || reason.contains("reading"), "{reason}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().unwrap();
}
