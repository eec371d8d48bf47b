//! `sluice bridge --bgp-peer` on the wire: two namespaces joined through
//! the bridge (AF_PACKET on veths), a real peer on loopback (gobgpd, BIRD
//! 2, ExaBGP, one test each) announcing three FlowSpec rules (UDP to one port: discard; TCP SYN to one prefix:
//! discard; UDP to another port: police to 125,000 bytes/s) and one
//! blackhole route. Frames are sent and counted on the far ends over
//! AF_PACKET (`tests/bgp/wire.py`): exactly the matching frames are
//! dropped, the policed flow arrives within 10% of its rate, and the
//! withdrawals restore forwarding.
//!
//! Needs root, `ip`, python3 and the peer: `SKIPPED` unless
//! `SLUICE_REQUIRE_LIVE=1` / `SLUICE_REQUIRE_TOOLS=1` (CI), when it fails.

mod common;
use sluice_testkit::live;

use common::bridge::Bridge;
use live::{live_or_skip, run, Topology};
use serde_json::Value;
use sluice_testkit::bgp::{birdc, exabgp, free_port, Bird, Gobgpd, GobgpdConfig};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WIRE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bgp/wire.py");

/// Whether some socket listens on TCP `port` (any address), read from
/// /proc/net/tcp so that the peer sees no probe connection.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/tcp").unwrap_or_default().lines().skip(1).any(|l| {
        l.split_whitespace().nth(1).is_some_and(|local| format!("{local} ").ends_with(&want))
            && l.split_whitespace().nth(3) == Some("0A")
    })
}

/// Counts what reaches `iface` in `ns` for `seconds` while `send` runs.
fn counted(topo: &Topology, seconds: f64, send: &[Value]) -> Value {
    let mut counter = Command::new("ip")
        .args(["netns", "exec", &topo.ns_b.name, "python3", WIRE, "count", &topo.b.far, &seconds.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(counter.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let spec = Value::Array(send.to_vec()).to_string();
    run(&["ip", "netns", "exec", &topo.ns_a.name, "python3", WIRE, "send", &topo.a.far, &spec]);
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    counter.wait().unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn udp(dst: &str, dport: u16, count: u32) -> Value {
    serde_json::json!({ "dst": dst, "proto": 17, "dport": dport, "count": count, "size": 64, "pps": 0 })
}

fn tcp(dst: &str, dport: u16, flags: u8, count: u32) -> Value {
    serde_json::json!({ "dst": dst, "proto": 6, "dport": dport, "flags": flags, "count": count, "size": 64, "pps": 0 })
}

fn got(counts: &Value, kind: &str) -> u64 {
    counts[kind][0].as_u64().unwrap_or(0)
}

fn flows_in_force(sock: &std::path::Path) -> usize {
    let out = common::ok(&["ctl", "--socket", sock.to_str().unwrap(), "flows", "--json"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    v["flows"].as_array().map_or(0, Vec::len)
}

fn wait_flows(sock: &std::path::Path, n: usize, bridge: &Bridge) {
    let end = Instant::now() + Duration::from_secs(30);
    while flows_in_force(sock) != n {
        assert!(Instant::now() < end, "not {n} flows in force: {}", bridge.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A peer as the bed drives it: where the bridge connects, how it
/// withdraws (after which `left` flows stay), and whether the UDP/53 flow
/// and the blackhole are among those withdrawn.
struct Peer {
    addr: String,
    withdraw: Box<dyn FnOnce()>,
    left: usize,
}

/// The bed: the bridge between two namespaces peering with `peer`, which
/// announced (before or after the bridge starts) UDP to 10.77.0.2:53
/// discard, TCP SYN without ACK to 10.77.0.0/24 discard, UDP to
/// 10.77.0.2:5000 policed to 125,000 bytes/s, and 10.77.0.3/32 as a
/// blackhole.
fn on_the_wire(topo: &Topology, peer: Peer) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--io",
        "afpacket",
        "--control",
        sock.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--bgp-peer",
        &peer.addr,
        "--bgp-peer-as",
        "65001",
        "--bgp-local-as",
        "65002",
        "--bgp-router-id",
        "192.0.2.2",
        "--json",
    ]);
    wait_flows(&sock, 4, &bridge);

    let c = counted(
        topo,
        2.0,
        &[
            udp("10.77.0.2", 53, 50),
            udp("10.77.0.2", 54, 50),
            tcp("10.77.0.2", 80, 0x02, 50),
            tcp("10.77.0.2", 80, 0x12, 50),
            tcp("10.77.0.2", 80, 0x10, 50),
            udp("10.77.0.3", 9, 50),
            udp("10.77.0.4", 9, 50),
        ],
    );
    let err = bridge.stderr();
    assert_eq!(got(&c, "17:10.77.0.2:53:0"), 0, "{c} {err}");
    assert_eq!(got(&c, "17:10.77.0.2:54:0"), 50, "{c} {err}");
    assert_eq!(got(&c, "6:10.77.0.2:80:2"), 0, "{c} {err}");
    assert_eq!(got(&c, "6:10.77.0.2:80:18"), 50, "{c} {err}");
    assert_eq!(got(&c, "6:10.77.0.2:80:16"), 50, "{c} {err}");
    assert_eq!(got(&c, "17:10.77.0.3:9:0"), 0, "{c} {err}");
    assert_eq!(got(&c, "17:10.77.0.4:9:0"), 50, "{c} {err}");

    // Policed: 4x the rate offered for 4 s (1,000-byte datagrams, 1,014
    // bytes on the wire, 500 a second); what arrives, from the first to
    // the last, is within 10% of 125,000 bytes/s.
    let offered =
        serde_json::json!({ "dst": "10.77.0.2", "proto": 17, "dport": 5000, "count": 2000, "size": 1000, "pps": 500 });
    let c = counted(topo, 6.0, &[offered]);
    let k = &c["17:10.77.0.2:5000:0"];
    let (n, bytes) = (k[0].as_u64().unwrap(), k[1].as_u64().unwrap());
    let span = k[3].as_f64().unwrap() - k[2].as_f64().unwrap();
    let rate = bytes as f64 / span;
    eprintln!("{}: policed: {n} of 2000 frames, {bytes} bytes in {span:.3} s: {rate:.0} bytes/s", peer.addr);
    assert!((rate - 125_000.0).abs() <= 12_500.0, "delivered {rate:.0} bytes/s, not within 10% of 125,000: {c}");

    let f: Value =
        serde_json::from_str(common::ok(&["ctl", "--socket", sock.to_str().unwrap(), "flows", "--json"]).trim())
            .unwrap();
    let by = |flow: &str| {
        f["flows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["flow"] == flow)
            .cloned()
            .unwrap_or_else(|| panic!("{flow}: {f}"))
    };
    assert_eq!(by("destination 10.77.0.2/32 protocol ==17 destination-port ==53")["dropped"], 50, "{f}");
    assert_eq!(by("destination 10.77.0.3/32")["dropped"], 50, "{f}");
    let police = by("destination 10.77.0.2/32 protocol ==17 destination-port ==5000");
    assert_eq!(police["packets"], 2000, "{f}");
    assert_eq!(police["dropped"].as_u64().unwrap() + n, 2000, "{f}");
    let text = common::ok(&["ctl", "--socket", sock.to_str().unwrap(), "bgp"]);
    assert!(text.contains(&format!("{} AS 65001: established", peer.addr)), "{text}");

    // Withdrawn: forwarded again.
    (peer.withdraw)();
    wait_flows(&sock, peer.left, &bridge);
    let c = counted(topo, 1.5, &[udp("10.77.0.2", 53, 50), udp("10.77.0.3", 9, 50), tcp("10.77.0.2", 80, 0x02, 50)]);
    assert_eq!(got(&c, "17:10.77.0.2:53:0"), 50, "{c}");
    assert_eq!(got(&c, "17:10.77.0.3:9:0"), 50, "{c}");
    let syn = if peer.left == 0 { 50 } else { 0 };
    assert_eq!(got(&c, "6:10.77.0.2:80:2"), syn, "{c}");

    let (summary, _) = bridge.stop();
    let syn_drops = if peer.left == 0 { 50 } else { 100 };
    assert_eq!(summary["dropped_by_flow"].as_u64(), Some(50 + syn_drops + (2000 - n) + 50), "{summary}");
}

fn tool_or_skip(test: &str, tool: &str) -> bool {
    if !live_or_skip(test) {
        return false;
    }
    if Command::new(tool).arg("--version").output().is_err() {
        assert!(
            std::env::var("SLUICE_REQUIRE_TOOLS").is_err(),
            "{tool} is missing (apt-get install gobgpd bird2 exabgp)"
        );
        live::skipped(&format!("{test}: {tool} is missing"));
        return false;
    }
    true
}

#[test]
fn flowspec_and_blackholes_from_gobgp_on_the_wire() {
    if !tool_or_skip("flowspec_and_blackholes_from_gobgp_on_the_wire", "gobgpd") {
        return;
    }
    let topo = Topology::new("bgp");
    let port = free_port();
    let d = std::rc::Rc::new(Gobgpd::start(&GobgpdConfig::on(port)));
    d.cli("global rib -a ipv4-flowspec add match destination 10.77.0.2/32 protocol udp destination-port ==53 then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 10.77.0.0/24 protocol tcp tcp-flags =S&!=A then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 10.77.0.2/32 protocol udp destination-port ==5000 then rate-limit 125000");
    d.cli("global rib -a ipv4 add 10.77.0.3/32 nexthop 192.0.2.254 community 65535:666");
    let g = std::rc::Rc::clone(&d);
    let withdraw = Box::new(move || {
        g.cli("global rib -a ipv4-flowspec del match destination 10.77.0.2/32 protocol udp destination-port ==53");
        g.cli("global rib -a ipv4 del 10.77.0.3/32");
    });
    on_the_wire(&topo, Peer { addr: format!("127.0.0.1:{port}"), withdraw, left: 2 });
}

#[test]
fn flowspec_and_blackholes_from_bird_on_the_wire() {
    if !tool_or_skip("flowspec_and_blackholes_from_bird_on_the_wire", "bird") {
        return;
    }
    let topo = Topology::new("bird");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // BIRD's traffic-rate: generic extended communities (125,000.0 as an
    // IEEE float is 0x47f42400); it listens on 127.0.0.2, as it refuses a
    // next hop equal to the neighbor's address.
    let conf = format!(
        "router id 192.0.2.1;\nflow4 table flowtab4;\nprotocol device {{ }}\n\
         protocol static f4 {{\n  flow4;\n\
           route flow4 {{ dst 10.77.0.2/32; proto 17; dport 53; }} {{ bgp_ext_community.add((generic, 0x80060000, 0)); }};\n\
           route flow4 {{ dst 10.77.0.0/24; proto 6; tcp flags 0x02/0x12; }} {{ bgp_ext_community.add((generic, 0x80060000, 0)); }};\n\
           route flow4 {{ dst 10.77.0.2/32; proto 17; dport 5000; }} {{ bgp_ext_community.add((generic, 0x80060000, 0x47f42400)); }};\n}}\n\
         protocol static bh {{\n  ipv4;\n  route 10.77.0.3/32 via \"lo\" {{ bgp_community.add((65535,666)); }};\n}}\n\
         protocol bgp sluice {{\n  local 127.0.0.2 port {port} as 65001;\n  neighbor 127.0.0.1 as 65002;\n  passive on;\n  multihop;\n\
           flow4 {{ import none; export all; }};\n  ipv4 {{ import none; export all; next hop self; }};\n}}\n"
    );
    let log = dir.path().join("bird.log");
    let mut bird = Bird::start(dir.path(), &format!("log \"{}\" all;\n{conf}", log.display()));
    // The bridge retries a refused connection after 5 s, then 10 s: wait
    // for BIRD's listener first, and say what BIRD said if it never comes.
    let end = Instant::now() + Duration::from_secs(20);
    while !listening(port) {
        let exited = bird.process.0.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < end,
            "BIRD is not listening on 127.0.0.2:{port} (exit: {exited:?}); its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ctl = bird.ctl.clone();
    let birdc = move |what: &str| birdc(&ctl, what);
    // Withdrawn: both static protocols disabled, every route goes.
    let withdraw = Box::new(move || {
        birdc("disable bh");
        birdc("disable f4");
    });
    on_the_wire(&topo, Peer { addr: format!("127.0.0.2:{port}"), withdraw, left: 0 });
}

#[test]
fn flowspec_and_blackholes_from_exabgp_on_the_wire() {
    if !tool_or_skip("flowspec_and_blackholes_from_exabgp_on_the_wire", "exabgp") {
        return;
    }
    let topo = Topology::new("exa");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = "neighbor 127.0.0.1 {\n  router-id 192.0.2.1;\n  local-address 127.0.0.1;\n  local-as 65001;\n  peer-as 65002;\n  passive;\n\
         family {\n    ipv4 flow;\n    ipv4 unicast;\n  }\n\
         flow {\n\
           route dns { match { destination 10.77.0.2/32; protocol udp; destination-port =53; } then { discard; } }\n\
           route syn { match { destination 10.77.0.0/24; protocol tcp; tcp-flags [ syn&!ack ]; } then { discard; } }\n\
           route police { match { destination 10.77.0.2/32; protocol udp; destination-port =5000; } then { rate-limit 125000; } }\n\
         }\n\
         static {\n    route 10.77.0.3/32 next-hop 192.0.2.254 community [ 65535:666 ];\n  }\n}\n";
    let exa = exabgp(dir.path(), conf, port);
    // ExaBGP's routes come from its configuration: stopping it withdraws
    // them all (it announced no graceful restart).
    let withdraw = Box::new(move || drop(exa));
    on_the_wire(&topo, Peer { addr: format!("127.0.0.1:{port}"), withdraw, left: 0 });
}
