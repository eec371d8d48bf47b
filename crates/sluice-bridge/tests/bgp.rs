//! The bridge as a BGP speaker against a real peer: Debian's `gobgpd`
//! (started by the test on loopback, passive) announces FlowSpec rules and
//! a blackhole route with the `gobgp` CLI; frames sent through the bridge
//! over in-memory ports are dropped exactly when a flow says, a policed
//! flow passes its burst and no more, withdrawals restore forwarding, and
//! when the peer goes (no graceful restart) its flows go with it.
//! `ctl flows`, `ctl bgp` and the exporter say so. Under
//! SLUICE_REQUIRE_TOOLS (CI) a missing gobgpd fails the test.

use sluice_bridge::bgp::BgpFlags;
use sluice_bridge::{Bridge, BridgeConfig, MemoryPair, Wire};
use sluice_policy::RuleSpec;
use sluice_testkit::bgp::{birdc, exabgp, free_port, have, Bird, Gobgpd, GobgpdConfig};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Ethernet + IPv4 to `dst`, protocol `proto`, then `l4`; `len` pads the
/// frame's IP datagram to that many bytes.
fn ipv4(dst: [u8; 4], proto: u8, l4: &[u8], len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let total = len.max(20 + l4.len());
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, 1]);
    f.extend_from_slice(&dst);
    f.extend_from_slice(l4);
    f.resize(14 + total, 0);
    f
}

fn udp(dst: [u8; 4], port: u16) -> Vec<u8> {
    let p = port.to_be_bytes();
    ipv4(dst, 17, &[0x9c, 0x40, p[0], p[1], 0, 12, 0, 0, 1, 2, 3, 4], 0)
}

fn tcp(dst: [u8; 4], flags: u8) -> Vec<u8> {
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&40000u16.to_be_bytes());
    h[2..4].copy_from_slice(&80u16.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    ipv4(dst, 6, &h, 0)
}

fn gre(dst: [u8; 4], len: usize) -> Vec<u8> {
    ipv4(dst, 47, &[0, 0, 0x08, 0x00], len)
}

/// Sends each frame on port 0 and returns which of them came out of port 1.
fn through(wire: &Wire, frames: &[Vec<u8>]) -> Vec<bool> {
    for f in frames {
        assert!(wire.send(0, f));
    }
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_millis(700);
    while Instant::now() < end {
        if let Some(f) = wire.recv(1, Duration::from_millis(20)) {
            got.push(f);
        }
    }
    frames.iter().map(|f| got.contains(f)).collect()
}

fn ctl(path: &std::path::Path, cmd: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(cmd.as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn flows(bridge: &Bridge) -> usize {
    bridge.rules().load().value.flows().map_or(0, |f| f.rules().len())
}

fn wait_flows(bridge: &Bridge, n: usize) {
    let end = Instant::now() + Duration::from_secs(30);
    while flows(bridge) != n {
        if Instant::now() >= end {
            let rules = bridge.rules().load();
            let texts: Vec<String> =
                rules.value.flows().map(|f| f.rules().iter().map(|r| r.flow.to_string()).collect()).unwrap_or_default();
            panic!("{} flows in force, not {n}: {texts:?}", texts.len());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The flags every test peers with: the peers (AS 65001) from this side
/// (AS 65002), flows before the rules, RFC 4271's usual timers.
fn flags(peers: Vec<String>) -> BgpFlags {
    BgpFlags {
        peers,
        peer_as: vec![65001],
        local_as: Some(65002),
        router_id: Some("192.0.2.2".parse().unwrap()),
        rules: "first".into(),
        hold_time: 90,
        restart_time: 120,
        ..BgpFlags::default()
    }
}

/// A bridge over in-memory ports peering with `peer` (AS 65001), its
/// control socket in `dir`.
fn bridge_with_peer(peer: &str, dir: &std::path::Path, restart_time: u16) -> (Bridge, Wire) {
    // The peers' GRE policer names no destination.
    let flags = BgpFlags { restart_time, allow_undirected: true, ..flags(vec![peer.into()]) };
    let mut bgp = flags.config().unwrap().unwrap();
    bgp.peers[0].connect_retry = Duration::from_millis(200);
    let cfg = BridgeConfig {
        bgp: Some(bgp),
        control: Some(dir.join("ctl.sock")),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..BridgeConfig::new(RuleSpec::default())
    };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    (Bridge::start(cfg, pair).expect("the bridge starts"), wire)
}

/// The frames every peer's test sends, and whether each should pass, for
/// the three flows and the blackhole every peer announces.
fn the_cases() -> ([Vec<u8>; 8], [bool; 8]) {
    let frames = [
        udp([192, 0, 2, 1], 53),      // dropped
        udp([192, 0, 2, 1], 54),      // passes: another port
        udp([192, 0, 3, 1], 53),      // passes: another /24
        tcp([198, 51, 100, 5], 0x02), // dropped: SYN without ACK
        tcp([198, 51, 100, 5], 0x12), // passes: SYN-ACK
        tcp([198, 51, 100, 5], 0x10), // passes: ACK
        udp([203, 0, 113, 7], 9),     // dropped: blackhole
        udp([203, 0, 113, 8], 9),     // passes: a route without the community
    ];
    (frames, [false, true, true, false, true, true, false, true])
}

/// A peer turned hostile (or mistaken): a blackhole of everything, a
/// discard of the never-blocked address by source and by destination, a
/// destination wider than the /8 floor, a flow with no destination. Each is
/// refused and counted by reason while the session stays up and a narrow
/// flow beside them is enforced.
#[test]
fn gobgp_routes_that_would_turn_the_bridge_against_its_host_are_refused() {
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(free_port())) else { return };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let never = dir.path().join("never.txt");
    std::fs::write(&never, "192.0.2.1\n").unwrap();
    let flags = flags(vec![format!("127.0.0.1:{}", d.port)]);
    let mut bgp = flags.config().unwrap().unwrap();
    bgp.peers[0].connect_retry = Duration::from_millis(200);
    let cfg = BridgeConfig {
        bgp: Some(bgp),
        control: Some(sock.clone()),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        safety: std::sync::Arc::new(sluice_control::safety::Safety::load(Some(&never), 8, 16).unwrap()),
        ..BridgeConfig::new(RuleSpec::default())
    };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).expect("the bridge starts");

    d.cli("global rib -a ipv4 add 0.0.0.0/0 nexthop 192.0.2.254 community 65535:666");
    d.cli("global rib -a ipv4-flowspec add match source 192.0.2.1/32 destination 198.51.100.0/24 then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.1/32 then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 128.0.0.0/1 then discard");
    d.cli("global rib -a ipv4-flowspec add match protocol udp then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 198.51.100.0/24 protocol udp destination-port ==53 then discard");
    wait_flows(&bridge, 1);
    let peer = format!("127.0.0.1:{}", d.port);
    let end = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let b = ctl(&sock, "bgp");
        let r = b["sessions"][0]["refused_by"].clone();
        if r.as_object().map_or(0, |o| o.values().filter_map(|v| v.as_u64()).sum::<u64>()) >= 5 {
            assert_eq!(b["sessions"][0]["state"], "established", "the session stays up: {b}");
            break r;
        }
        assert!(Instant::now() < end, "not every route refused: {b}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused, serde_json::json!({ "min_prefix": 2, "never_block": 2, "undirected": 1 }), "by reason");
    let passed = through(
        &wire,
        &[udp([198, 51, 100, 7], 53), udp([198, 51, 100, 7], 54), udp([192, 0, 2, 1], 9), udp([10, 1, 2, 3], 9)],
    );
    assert_eq!(passed, [false, true, true, true], "only the narrow flow drops");
    let m = scrape(bridge.metrics_addr().unwrap());
    for (reason, n) in [("min_prefix", 2), ("never_block", 2), ("undirected", 1), ("outside_protect", 0)] {
        let line = format!("sluice_bgp_routes_refused_total{{peer=\"{peer}\",reason=\"{reason}\"}} {n}");
        assert!(m.contains(&line), "{line} in {m}");
    }
    let text = sluice_policy::commands::render_text(&ctl(&sock, "bgp"));
    assert!(text.contains("refused: min_prefix 2, never_block 2, undirected 1"), "{text}");
    bridge.stop();
    bridge.wait().unwrap();
}

/// 100 back-to-back GRE frames of 114 bytes through a 10,000 B/s flow:
/// its bucket's 3,028 bytes pass, 26 or 27 frames, and little more.
fn policed_through(wire: &Wire) -> usize {
    let policed: Vec<Vec<u8>> = (0..100u8).map(|i| gre([10, 0, 0, i], 100)).collect();
    let n = through(wire, &policed).into_iter().filter(|&p| p).count();
    assert!((26..=35).contains(&n), "{n} of 100 GRE frames of 100 bytes passed a 10,000 B/s policer");
    n
}

#[test]
fn gobgp_flows_and_blackholes_drop_exactly_their_frames_until_withdrawn() {
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(free_port())) else { return };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    // The GRE policer below names no destination.
    let flags = BgpFlags { allow_undirected: true, ..flags(vec![format!("127.0.0.1:{}", d.port)]) };
    let mut bgp = flags.config().unwrap().unwrap();
    bgp.peers[0].connect_retry = Duration::from_millis(200);
    let cfg = BridgeConfig {
        bgp: Some(bgp),
        control: Some(sock.clone()),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..BridgeConfig::new(RuleSpec::default())
    };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).expect("the bridge starts");

    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    d.cli(
        "global rib -a ipv4-flowspec add match destination 198.51.100.0/24 protocol tcp tcp-flags =S&!=A then discard",
    );
    // 10,000 bytes/s: a back-to-back burst passes its bucket (3,028 bytes
    // by default: 27 frames of 114 bytes on the wire) and little more.
    d.cli("global rib -a ipv4-flowspec add match protocol gre then rate-limit 10000");
    d.cli("global rib -a ipv4 add 203.0.113.7/32 nexthop 192.0.2.254 community 65535:666");
    d.cli("global rib -a ipv4 add 203.0.113.8/32 nexthop 192.0.2.254");
    wait_flows(&bridge, 4);

    let frames = [
        udp([192, 0, 2, 1], 53),      // dropped
        udp([192, 0, 2, 1], 54),      // passes: another port
        udp([192, 0, 3, 1], 53),      // passes: another /24
        tcp([198, 51, 100, 5], 0x02), // dropped: SYN without ACK
        tcp([198, 51, 100, 5], 0x12), // passes: SYN-ACK
        tcp([198, 51, 100, 5], 0x10), // passes: ACK
        udp([203, 0, 113, 7], 9),     // dropped: blackhole
        udp([203, 0, 113, 8], 9),     // passes: a route without the community
    ];
    let passed = through(&wire, &frames);
    assert_eq!(passed, [false, true, true, false, true, true, false, true]);

    let policed: Vec<Vec<u8>> = (0..100u8).map(|i| gre([10, 0, 0, i], 100)).collect();
    let n = through(&wire, &policed).into_iter().filter(|&p| p).count();
    assert!((26..=35).contains(&n), "{n} of 100 GRE frames of 100 bytes passed a 10,000 B/s policer");

    let f = ctl(&sock, "flows");
    assert_eq!(f["ok"], true, "{f}");
    assert_eq!(f["placement"], "first");
    let list = f["flows"].as_array().unwrap();
    assert_eq!(list.len(), 4, "{f}");
    let by = |flow: &str| list.iter().find(|x| x["flow"] == flow).unwrap_or_else(|| panic!("{flow} not in {f}"));
    let dns = by("destination 192.0.2.0/24 protocol ==17 destination-port ==53");
    assert_eq!(
        (dns["action"].as_str(), dns["packets"].as_u64(), dns["dropped"].as_u64()),
        (Some("drop"), Some(1), Some(1))
    );
    assert_eq!(dns["source"], "127.0.0.1");
    let bh = by("destination 203.0.113.7/32");
    assert_eq!(bh["kind"], "blackhole");
    assert_eq!(bh["dropped"], 1);
    let g = by("protocol ==47");
    assert_eq!(g["action"], "police 10000 bytes/s");
    assert_eq!(g["packets"], 100);
    assert_eq!(g["dropped"].as_u64(), Some(100 - n as u64));
    let text = sluice_policy::commands::render_text(&f);
    assert!(text.contains("destination 203.0.113.7/32 => drop (from 127.0.0.1; 1 packets"), "{text}");
    assert!(text.starts_with("# flows from BGP peers, before the rule file's rules"), "{text}");
    let b = ctl(&sock, "bgp");
    let text = sluice_policy::commands::render_text(&b);
    assert!(text.contains("AS 65001: established for"), "{text}");
    assert!(text.contains("ipv4-flowspec 3"), "{text}");
    let bytes = b["sessions"][0]["bytes"].as_u64().unwrap();
    assert!(bytes > 0 && text.contains(&format!(" ({bytes} bytes)")), "{text}");
    assert_eq!(b["sessions"][0]["state"], "established", "{b}");
    assert_eq!(b["sessions"][0]["routes"]["ipv4-flowspec"], 3, "{b}");
    assert_eq!(b["sessions"][0]["routes"]["ipv4-blackhole"], 1, "{b}");
    let m = scrape(bridge.metrics_addr().unwrap());
    let peer = format!("127.0.0.1:{}", d.port);
    assert!(m.contains(&format!("sluice_bgp_session_up{{peer=\"{peer}\"}} 1")), "{m}");
    assert!(m.contains("sluice_flow_rules{family=\"ipv4-flowspec\"} 3"), "{m}");
    assert!(m.contains("sluice_flow_rules{family=\"ipv4-blackhole\"} 1"), "{m}");
    assert!(m.contains("sluice_flow_rule_packets_total{rule=\"protocol ==47\"} 100"), "{m}");
    assert!(m.contains(&format!("sluice_bgp_updates_total{{peer=\"{peer}\",family=\"ipv4-flowspec\"}} 3")), "{m}");

    // Withdrawn: forwarded again.
    d.cli("global rib -a ipv4-flowspec del match destination 192.0.2.0/24 protocol udp destination-port ==53");
    d.cli("global rib -a ipv4 del 203.0.113.7/32");
    wait_flows(&bridge, 2);
    let passed = through(&wire, &[udp([192, 0, 2, 1], 53), udp([203, 0, 113, 7], 9), tcp([198, 51, 100, 5], 0x02)]);
    assert_eq!(passed, [true, true, false]);

    // The peer goes, without graceful restart: its flows go.
    drop(d);
    wait_flows(&bridge, 0);
    assert_eq!(through(&wire, &[tcp([198, 51, 100, 5], 0x02)]), [true]);
    let b = ctl(&sock, "bgp");
    assert_eq!(b["sessions"][0]["state"], "idle", "{b}");
    assert!(b["sessions"][0]["last_error"].as_str().is_some(), "{b}");

    bridge.stop();
    let s = bridge.wait().unwrap();
    assert_eq!(s.json["dropped_by_flow"].as_u64(), Some(3 + (100 - n as u64) + 1), "{}", s.json);
}

/// BIRD 2 exports static flow4 routes (traffic-rate as generic extended
/// communities, as BIRD spells them) and static blackhole routes; disabling
/// the flow protocol withdraws them.
#[test]
fn bird_flows_and_blackholes_are_enforced_and_withdrawn() {
    if !have("bird", "bird2 exabgp") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // 10,000.0 as an IEEE float: 0x461c4000.
    let conf = format!(
        "router id 192.0.2.1;\nflow4 table flowtab4;\nprotocol device {{ }}\n\
         protocol static f4 {{\n  flow4;\n\
           route flow4 {{ dst 192.0.2.0/24; proto 17; dport 53; }} {{ bgp_ext_community.add((generic, 0x80060000, 0)); }};\n\
           route flow4 {{ dst 198.51.100.0/24; proto 6; tcp flags 0x02/0x12; }} {{ bgp_ext_community.add((generic, 0x80060000, 0)); }};\n\
           route flow4 {{ proto 47; }} {{ bgp_ext_community.add((generic, 0x80060000, 0x461c4000)); }};\n}}\n\
         protocol static s4 {{\n  ipv4;\n\
           route 203.0.113.7/32 via \"lo\" {{ bgp_community.add((65535,666)); }};\n\
           route 203.0.113.8/32 via \"lo\";\n}}\n\
         protocol bgp sluice {{\n  local 127.0.0.2 port {port} as 65001;\n  neighbor 127.0.0.1 as 65002;\n  passive on;\n  multihop;\n\
           flow4 {{ import none; export all; }};\n  ipv4 {{ import none; export all; next hop self; }};\n}}\n"
    );
    let bird = Bird::start(dir.path(), &conf);
    // BIRD on 127.0.0.2: the next hop it sends (itself) must not be the
    // neighbor's address, which it refuses.
    let (bridge, wire) = bridge_with_peer(&format!("127.0.0.2:{port}"), dir.path(), 120);
    wait_flows(&bridge, 4);
    let (frames, want) = the_cases();
    assert_eq!(through(&wire, &frames), want);
    policed_through(&wire);
    let f = ctl(&dir.path().join("ctl.sock"), "flows");
    let texts: Vec<&str> = f["flows"].as_array().unwrap().iter().map(|x| x["flow"].as_str().unwrap()).collect();
    assert!(texts.contains(&"destination 192.0.2.0/24 protocol ==17 destination-port ==53"), "{f}");
    // Withdrawn: the flow protocol disabled.
    birdc(&bird.ctl, "disable f4");
    wait_flows(&bridge, 1);
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53), udp([203, 0, 113, 7], 9)]), [true, false]);
    bridge.stop();
    bridge.wait().unwrap();
}

/// ExaBGP 4.2 announces the same from its configuration (its own flow
/// syntax, `rate-limit`), and when it stops its routes go.
#[test]
fn exabgp_flows_and_blackholes_are_enforced_until_it_stops() {
    if !have("exabgp", "bird2 exabgp") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = "neighbor 127.0.0.1 {\n  router-id 192.0.2.1;\n  local-address 127.0.0.1;\n  local-as 65001;\n  peer-as 65002;\n  passive;\n\
         family {\n    ipv4 flow;\n    ipv4 unicast;\n  }\n\
         flow {\n\
           route dns { match { destination 192.0.2.0/24; protocol udp; destination-port =53; } then { discard; } }\n\
           route syn { match { destination 198.51.100.0/24; protocol tcp; tcp-flags [ syn&!ack ]; } then { discard; } }\n\
           route gre { match { protocol gre; } then { rate-limit 10000; } }\n\
         }\n\
         static {\n    route 203.0.113.7/32 next-hop 192.0.2.254 community [ 65535:666 ];\n    route 203.0.113.8/32 next-hop 192.0.2.254;\n  }\n}\n";
    let exa = exabgp(dir.path(), conf, port);
    let (bridge, wire) = bridge_with_peer(&format!("127.0.0.1:{port}"), dir.path(), 120);
    wait_flows(&bridge, 4);
    let (frames, want) = the_cases();
    assert_eq!(
        through(&wire, &frames),
        want,
        "{}",
        std::fs::read_to_string(dir.path().join("exabgp.log")).unwrap_or_default()
    );
    policed_through(&wire);
    drop(exa);
    wait_flows(&bridge, 0);
    bridge.stop();
    bridge.wait().unwrap();
}

/// A peer that announced graceful restart (3 s) and dies: its flows stay
/// enforced through the window and go when it passes; back, it installs
/// again. Without the capability (the first test) they go at once.
#[test]
fn a_restarting_peer_keeps_its_flows_for_its_restart_window() {
    let port = free_port();
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(port).restart(3)) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (bridge, wire) = bridge_with_peer(&format!("127.0.0.1:{port}"), dir.path(), 120);
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    wait_flows(&bridge, 1);
    let mut d = d;
    // Killed, not stopped: no NOTIFICATION, as in a crash.
    d.kill();
    let down = Instant::now();
    let sock = dir.path().join("ctl.sock");
    let end = Instant::now() + Duration::from_secs(10);
    while ctl(&sock, "bgp")["sessions"][0]["state"] != "idle" {
        assert!(Instant::now() < end, "the session did not go down");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [false], "kept during the restart window");
    assert!(down.elapsed() < Duration::from_secs(3));
    assert_eq!(ctl(&sock, "bgp")["sessions"][0]["stale"], true);
    wait_flows(&bridge, 0);
    let gone = down.elapsed();
    assert!(gone >= Duration::from_millis(2900) && gone < Duration::from_secs(6), "removed after {gone:?}");
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [true]);
    // Back on the same port: announced again, enforced again.
    let d = Gobgpd::start_or_skip(&GobgpdConfig::on(port).restart(3)).unwrap();
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    wait_flows(&bridge, 1);
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [false]);
    bridge.stop();
    bridge.wait().unwrap();
}

/// A byte-level peer: what it sends is built here, so it can send what no
/// real speaker would.
struct FakePeer {
    s: std::net::TcpStream,
}

impl FakePeer {
    /// Accepts the bridge's connection on `l` and completes the OPEN exchange.
    fn accept(l: &std::net::TcpListener) -> FakePeer {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut p = FakePeer { s };
        let fams = [sluice_bgp::message::AfiSafi::IPV4_FLOWSPEC, sluice_bgp::message::AfiSafi::IPV4_UNICAST];
        p.s.write_all(&sluice_bgp::message::open(65001, 90, "192.0.2.3".parse().unwrap(), &fams, 0)).unwrap();
        p.s.write_all(&sluice_bgp::message::keepalive()).unwrap();
        // Their OPEN, then their KEEPALIVE.
        assert_eq!(p.next()[18], 1);
        assert_eq!(p.next()[18], 4);
        p
    }

    fn next(&mut self) -> Vec<u8> {
        let mut h = [0u8; 19];
        self.s.read_exact(&mut h).unwrap();
        let len = usize::from(u16::from_be_bytes([h[16], h[17]]));
        let mut body = vec![0u8; len - 19];
        self.s.read_exact(&mut body).unwrap();
        [h.to_vec(), body].concat()
    }

    /// An UPDATE announcing IPv4 FlowSpec `nlri` (raw bytes) with
    /// traffic-rate 0, its ORIGIN `origin` (over 2 is malformed).
    fn announce(&mut self, nlri: &[u8], origin: u8) {
        self.s.write_all(&sluice_bgp::message::flowspec_discard(nlri, origin)).unwrap();
    }
}

/// RFC 7606 over a live session: an UPDATE with a malformed ORIGIN has its
/// flows treated as withdrawn (the session stays); an UPDATE whose FlowSpec
/// NLRI cannot be read resets that session with NOTIFICATION 3/9, its flows
/// go, and the other peer's session and flows are untouched.
#[test]
fn a_malformed_update_resets_only_its_own_session() {
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(free_port())) else { return };
    let fake = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flags = flags(vec![format!("127.0.0.1:{}", d.port), fake_addr.to_string()]);
    let mut bgp = flags.config().unwrap().unwrap();
    for p in &mut bgp.peers {
        p.connect_retry = Duration::from_millis(200);
    }
    let sock = dir.path().join("ctl.sock");
    let cfg = BridgeConfig { bgp: Some(bgp), control: Some(sock.clone()), ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    let mut p = FakePeer::accept(&fake);
    let flow = |a: u8| sluice_bgp::flowspec::Flow {
        family: sluice_bgp::flowspec::Family::V4,
        components: vec![sluice_bgp::flowspec::Component::Destination(sluice_bgp::flowspec::PrefixMatch::new(
            std::net::IpAddr::from([203, 0, 113, a]),
            32,
        ))],
    };
    p.announce(&flow(1).to_bytes(), 0);
    p.announce(&flow(2).to_bytes(), 0);
    wait_flows(&bridge, 3);
    assert_eq!(through(&wire, &[udp([203, 0, 113, 1], 9), udp([203, 0, 113, 2], 9)]), [false, false]);
    // ORIGIN 7: treat-as-withdraw.
    p.announce(&flow(2).to_bytes(), 7);
    wait_flows(&bridge, 2);
    assert_eq!(through(&wire, &[udp([203, 0, 113, 1], 9), udp([203, 0, 113, 2], 9)]), [false, true]);
    // Component type 14 does not exist: the NLRI cannot be read.
    p.announce(&[4, 14, 0x81, 1, 0], 0);
    let mut n = p.next();
    while n[18] == 4 {
        n = p.next();
    }
    assert_eq!((n[18], n[19], n[20]), (3, 3, 9), "NOTIFICATION UPDATE error / malformed NLRI: {n:02x?}");
    wait_flows(&bridge, 1);
    let b = ctl(&sock, "bgp");
    let sessions = b["sessions"].as_array().unwrap();
    assert_eq!(sessions[0]["state"], "established", "{b}");
    assert_eq!(sessions[1]["state"], "idle", "{b}");
    let why = sessions[1]["last_error"].as_str().unwrap();
    assert!(why.contains("NOTIFICATION 3/9") && why.contains("MP_REACH_NLRI"), "{why}");
    assert_eq!(through(&wire, &[udp([203, 0, 113, 1], 9), udp([192, 0, 2, 1], 53)]), [true, false]);
    bridge.stop();
    bridge.wait().unwrap();
}

/// TCP MD5 (RFC 2385): with the peer's password the session comes up and
/// its flows are enforced; with another, the peer's kernel drops every
/// segment and no session forms.
#[test]
fn a_peer_requiring_tcp_md5_is_reached_with_its_password_only() {
    let port = free_port();
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(port).password("s3cret-key")) else { return };
    let dir = tempfile::tempdir().unwrap();
    let session = |password: &str, sub: &str| {
        let sub = dir.path().join(sub);
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("bgp.key");
        std::fs::write(&file, format!("{password}\n")).unwrap();
        let flags = BgpFlags { password_file: Some(file), ..flags(vec![format!("127.0.0.1:{port}")]) };
        let mut bgp = flags.config().unwrap().unwrap();
        bgp.peers[0].connect_retry = Duration::from_millis(200);
        let sock = sub.join("ctl.sock");
        let cfg =
            BridgeConfig { bgp: Some(bgp), control: Some(sock.clone()), ..BridgeConfig::new(RuleSpec::default()) };
        let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
        (Bridge::start(cfg, pair).unwrap(), wire, sock)
    };
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    let (bridge, wire, _) = session("s3cret-key", "good");
    wait_flows(&bridge, 1);
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [false]);
    bridge.stop();
    bridge.wait().unwrap();
    let (bridge, _wire, sock) = session("wrong", "bad");
    std::thread::sleep(Duration::from_secs(3));
    let b = ctl(&sock, "bgp");
    assert_ne!(b["sessions"][0]["state"], "established", "{b}");
    assert_eq!(flows(&bridge), 0);
    bridge.stop();
    bridge.wait().unwrap();
}

/// The routes `peer` holds and what they cost, as `ctl bgp` says, once
/// its refusals add up to `refused` or more (or 10 s passed).
fn settled(sock: &std::path::Path, peer: usize, refused: u64) -> serde_json::Value {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let b = ctl(sock, "bgp");
        let s = b["sessions"][peer].clone();
        let n: u64 = s["refused_by"].as_object().map_or(0, |o| o.values().filter_map(|v| v.as_u64()).sum());
        if n >= refused || Instant::now() >= end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A peer over its budget in bytes: a flow of 60 ports, over the route
/// limit, is refused on its own; past the peer's total, the flows that no
/// longer fit are refused; each counted by reason, the session kept, what
/// the peer holds within its bytes, and its narrow flow still enforced.
#[test]
fn gobgp_a_peer_over_its_byte_budget_is_refused_past_it_and_stays_up() {
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(free_port())) else { return };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    // A flow of a destination, UDP and a port costs about 780 bytes: room
    // for five, and for no flow of 60 ports.
    let (route_max, peer_max) = (1_500, 4_096);
    let flags = BgpFlags {
        max_route_bytes: Some(route_max),
        max_peer_bytes: Some(peer_max),
        ..flags(vec![format!("127.0.0.1:{}", d.port)])
    };
    let mut bgp = flags.config().unwrap().unwrap();
    bgp.peers[0].connect_retry = Duration::from_millis(200);
    let cfg = BridgeConfig {
        bgp: Some(bgp),
        control: Some(sock.clone()),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..BridgeConfig::new(RuleSpec::default())
    };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).expect("the bridge starts");
    d.cli("global rib -a ipv4-flowspec add match destination 198.51.100.0/24 protocol udp destination-port ==53 then discard");
    wait_flows(&bridge, 1);
    let ports: Vec<String> = (1000..1060).map(|p| format!("=={p}")).collect();
    d.cli(&format!(
        "global rib -a ipv4-flowspec add match destination 198.51.100.0/24 protocol tcp destination-port {} then discard",
        ports.join(" ")
    ));
    for i in 1..=10 {
        d.cli(&format!(
            "global rib -a ipv4-flowspec add match destination 203.0.113.{i}/32 protocol udp destination-port =={i} then discard"
        ));
    }
    let s = settled(&sock, 0, 1 + 6);
    assert_eq!(s["state"], "established", "the session stays up: {s}");
    assert_eq!(s["refused_by"]["route_bytes"], 1, "{s}");
    let held = s["routes"]["ipv4-flowspec"].as_u64().unwrap();
    let over = s["refused_by"]["peer_bytes"].as_u64().unwrap();
    assert_eq!((held, held + over), (5, 11), "five flows fit, the rest refused: {s}");
    let bytes = s["bytes"].as_u64().unwrap();
    assert!(bytes <= peer_max as u64 && bytes > 4 * 700, "{bytes} bytes held, within {peer_max}");
    // The RIB holds them (above); the table the control thread publishes
    // from them may come a moment later.
    wait_flows(&bridge, 5);
    // The narrow flow is enforced; the flow of 60 ports is not.
    let syn = |port: u16| {
        let mut l4 = vec![0u8; 20];
        l4[2..4].copy_from_slice(&port.to_be_bytes());
        l4[12] = 0x50;
        l4[13] = 0x02;
        ipv4([198, 51, 100, 7], 6, &l4, 40)
    };
    assert_eq!(
        through(&wire, &[udp([198, 51, 100, 7], 53), syn(1030), udp([198, 51, 100, 7], 54)]),
        [false, true, true]
    );
    let m = scrape(bridge.metrics_addr().unwrap());
    let peer = format!("127.0.0.1:{}", d.port);
    for (reason, n) in [("route_bytes", 1), ("peer_bytes", over)] {
        let line = format!("sluice_bgp_routes_refused_total{{peer=\"{peer}\",reason=\"{reason}\"}} {n}");
        assert!(m.contains(&line), "{line} in {m}");
    }
    assert!(m.contains(&format!("sluice_bgp_route_bytes{{peer=\"{peer}\"}} {bytes}")), "{m}");
    // A withdrawal frees its bytes.
    d.cli("global rib -a ipv4-flowspec del match destination 203.0.113.1/32 protocol udp destination-port ==1 then discard");
    let end = Instant::now() + Duration::from_secs(10);
    while ctl(&sock, "bgp")["sessions"][0]["bytes"].as_u64().unwrap() >= bytes {
        assert!(Instant::now() < end, "the withdrawal freed nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    bridge.stop();
    bridge.wait().unwrap();
}

/// Peer B (a byte-level peer) writes UPDATEs as fast as the bridge takes
/// them, 400 flows each, over and over; peer A (gobgpd) withdraws its flow
/// meanwhile. The withdrawal is in force within 1 s, B's writes are held
/// back (the bridge queues a bounded amount), and both sessions stay up.
#[test]
fn gobgp_a_withdrawal_is_published_within_a_second_while_another_peer_floods() {
    let Some(d) = Gobgpd::start_or_skip(&GobgpdConfig::on(free_port())) else { return };
    let fake = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let flags = flags(vec![format!("127.0.0.1:{}", d.port), fake.local_addr().unwrap().to_string()]);
    let mut bgp = flags.config().unwrap().unwrap();
    for p in &mut bgp.peers {
        p.connect_retry = Duration::from_millis(200);
    }
    let cfg = BridgeConfig { bgp: Some(bgp), control: Some(sock.clone()), ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let bridge = Bridge::start(cfg, pair).unwrap();
    let a_flow = "destination 192.0.2.0/24 protocol udp destination-port ==53 then discard";
    d.cli(&format!("global rib -a ipv4-flowspec add match {a_flow}"));
    let held_by_a = |bridge: &Bridge| {
        bridge.rules().load().value.flows().is_some_and(|t| t.rules().iter().any(|r| r.source == "127.0.0.1"))
    };
    let end = Instant::now() + Duration::from_secs(30);
    while !held_by_a(&bridge) {
        assert!(Instant::now() < end, "A's flow never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = FakePeer::accept(&fake);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let held_back = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flood = {
        let (stop, sent, held_back) = (stop.clone(), sent.clone(), held_back.clone());
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering::Relaxed;
            // 20,000 flows, 400 to an UPDATE (2,800 bytes of NLRI).
            let mut i = 0u32;
            while !stop.load(Relaxed) {
                let nlri: Vec<u8> = (0..400)
                    .flat_map(|_| {
                        i = (i + 1) % 20_000;
                        let [_, _, x, y] = i.to_be_bytes();
                        [6, 1, 32, 10, 9, x, y]
                    })
                    .collect();
                let t = Instant::now();
                // The bridge stopping ends the session, and the flood.
                if b.s.write_all(&sluice_bgp::message::flowspec_discard(&nlri, 0)).is_err() {
                    return;
                }
                if t.elapsed() > Duration::from_millis(20) {
                    held_back.fetch_add(1, Relaxed);
                }
                sent.fetch_add(1, Relaxed);
            }
        })
    };
    // The flood in force: B's flows in the table, then two seconds more.
    let end = Instant::now() + Duration::from_secs(30);
    while bridge.rules().load().value.flows().map_or(0, |t| t.rules().len()) < 10_000 {
        assert!(Instant::now() < end, "B's flood never reached the table");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [false], "A's flow in force");
    // UPDATEs from B the bridge has taken: still rising after A's
    // withdrawal is in force, the flood went on throughout.
    let taken = |sock: &std::path::Path| ctl(sock, "bgp")["sessions"][1]["updates"]["ipv4-flowspec"].as_u64().unwrap();
    let before = taken(&sock);
    let t = Instant::now();
    d.cli(&format!("global rib -a ipv4-flowspec del match {a_flow}"));
    while held_by_a(&bridge) {
        assert!(t.elapsed() < Duration::from_secs(5), "A's withdrawal not published in 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = t.elapsed();
    let during = taken(&sock) - before;
    assert_eq!(through(&wire, &[udp([192, 0, 2, 1], 53)]), [true], "A's flow withdrawn");
    let s = ctl(&sock, "bgp");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (total, waits) =
        (sent.load(std::sync::atomic::Ordering::Relaxed), held_back.load(std::sync::atomic::Ordering::Relaxed));
    eprintln!(
        "A's withdrawal published in {took:?} (the gobgp command included) while the bridge took {during} of B's UPDATEs; \
         B sent {total} UPDATEs of 400 flows, {waits} of them held back over 20 ms"
    );
    assert!(took < Duration::from_secs(1), "A's withdrawal took {took:?}");
    assert!(during > 0, "B flooded while A withdrew: {s}");
    assert!(waits > 0, "B was never held back");
    for i in 0..2 {
        assert_eq!(s["sessions"][i]["state"], "established", "{s}");
    }
    bridge.stop();
    bridge.wait().unwrap();
    flood.join().unwrap();
}
