//! The bridge's lifecycle over two in-memory ports, without root: judging
//! and forwarding, dry run, reloads under traffic, runtime set changes
//! through the control socket, sampled drops and the exporter. (The rings
//! themselves are tested over veths in sluice-live and sluice-cli.)

use sluice_bridge::{Bridge, BridgeConfig, MemoryPair, Wire};
use sluice_policy::RuleSpec;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An Ethernet + IPv4 + UDP frame from `src` to 192.0.2.1, numbered `n`
/// in its payload.
fn frame(src: [u8; 4], n: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    let ip = f.len();
    f.extend_from_slice(&[0x45, 0, 0, 20 + 8 + 4, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[192, 0, 2, 1]);
    let mut s = 0u32;
    for c in f[ip..ip + 20].chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    f[ip + 10..ip + 12].copy_from_slice(&(!(s as u16)).to_be_bytes());
    f.extend_from_slice(&[0x4e, 0x20, 0, 53, 0, 12, 0, 0]);
    f.extend_from_slice(&n.to_be_bytes());
    f
}

fn src_of(f: &[u8]) -> [u8; 4] {
    f[26..30].try_into().unwrap()
}

fn start(cfg: BridgeConfig) -> (Bridge, Wire) {
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    (Bridge::start(cfg, pair).expect("the bridge starts"), wire)
}

/// Every frame transmitted on `port` until `n` have come or `wait` passed.
fn collect(wire: &Wire, port: u32, n: usize, wait: Duration) -> Vec<Vec<u8>> {
    let end = Instant::now() + wait;
    let mut got = Vec::new();
    while got.len() < n {
        let left = end.saturating_duration_since(Instant::now());
        match wire.recv(port, left.max(Duration::from_millis(1))) {
            Some(f) => got.push(f),
            None if Instant::now() >= end => break,
            None => {}
        }
    }
    got
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    p
}

fn rules(path: std::path::PathBuf) -> RuleSpec {
    RuleSpec { rules: Some(path), ..RuleSpec::default() }
}

const BAD: [u8; 4] = [198, 51, 100, 66];
const GOOD: [u8; 4] = [203, 0, 113, 7];

#[test]
fn judges_forwards_both_ways_and_counts_by_port() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(dir.path(), "bad.txt", "198.51.100.0/24\n");
    let spec = RuleSpec { drop_src: vec![list], ..RuleSpec::default() };
    let (bridge, wire) = start(BridgeConfig::new(spec));
    for i in 0..100 {
        assert!(wire.send(0, &frame(GOOD, i)));
        assert!(wire.send(1, &frame(BAD, i)));
        assert!(wire.send(0, &frame(BAD, i)));
    }
    let on1 = collect(&wire, 1, 100, Duration::from_secs(10));
    let on0 = collect(&wire, 0, 1, Duration::from_millis(300));
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert_eq!(on1.len(), 100, "every good frame from port 0 left on port 1");
    assert!(on1.iter().all(|f| src_of(f) == GOOD));
    assert!(on0.is_empty(), "nothing from the listed source left on port 0");
    let p = &s.json["per_port"];
    assert_eq!(p[0]["passed"], 100, "{}", s.json);
    assert_eq!(p[0]["dropped"], 100, "{}", s.json);
    assert_eq!(p[1]["dropped"], 100, "{}", s.json);
    assert_eq!(p[1]["tx_packets"], 100, "{}", s.json);
    assert_eq!(s.json["dropped"], 200, "{}", s.json);
    assert_eq!(s.json["dry_run"], false);
    assert!(s.stopped.is_none());
    assert!(s.text.contains("mem0"), "{}", s.text);
}

#[test]
fn a_dry_run_forwards_everything_and_says_what_it_would_drop() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(dir.path(), "bad.txt", "198.51.100.66\n");
    let cfg =
        BridgeConfig { dry_run: true, ..BridgeConfig::new(RuleSpec { drop_src: vec![list], ..Default::default() }) };
    let (bridge, wire) = start(cfg);
    for i in 0..50 {
        wire.send(0, &frame(BAD, i));
        wire.send(0, &frame(GOOD, i));
    }
    let on1 = collect(&wire, 1, 100, Duration::from_secs(10));
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert_eq!(on1.len(), 100, "a dry run enforces nothing");
    assert_eq!(s.json["dry_run"], true);
    assert_eq!(s.json["would_drop"], 50, "{}", s.json);
}

/// Reloads while traffic flows: every frame is judged by the old rules or
/// the new, never by none, so a source listed in both leaks not once.
#[test]
fn reloads_under_traffic_leak_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad.txt", "198.51.100.66\n");
    let file = write(dir.path(), "r.rules", "set bad from \"bad.txt\"\ndrop saddr @bad\ndefault pass\n");
    let (bridge, wire) = start(BridgeConfig::new(rules(file)));
    let sender = {
        let wire = wire.clone();
        std::thread::spawn(move || {
            let mut sent = 0u32;
            let end = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < end {
                wire.send(0, &frame(BAD, sent));
                wire.send(0, &frame(GOOD, sent));
                sent += 1;
                if sent.is_multiple_of(64) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            sent
        })
    };
    let mut reloads = 0;
    for i in 0..20 {
        // A new list each time (another unrelated entry), the bad one kept.
        write(dir.path(), "bad.txt", &format!("198.51.100.66\n10.{i}.0.0/16\n"));
        bridge.reload("test");
        reloads += 1;
        std::thread::sleep(Duration::from_millis(60));
    }
    let sent = sender.join().unwrap() as usize;
    let got = collect(&wire, 1, sent, Duration::from_secs(20));
    let ok = bridge.metrics().control.reloads_ok.load(std::sync::atomic::Ordering::Relaxed);
    bridge.stop();
    let s = bridge.wait().unwrap();
    let leaked = got.iter().filter(|f| src_of(f) == BAD).count();
    assert_eq!(leaked, 0, "a listed source was forwarded during a reload");
    assert_eq!(got.len(), sent, "every good frame arrived");
    assert_eq!(ok, reloads, "{}", s.json);
    assert_eq!(s.json["reloads"]["ok"], reloads);
    assert_eq!(s.json["dropped"], sent as u64);
}

fn ctl(path: &Path, text: &str) -> serde_json::Value {
    sluice_control::socket::request(path, text, Duration::from_secs(10)).expect("the control socket answers")
}

#[test]
fn ctl_adds_and_deletes_take_effect_on_the_next_frames() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "r.rules", "set blocks dynamic\ndrop saddr @blocks\ndefault pass\n");
    let sock = dir.path().join("ctl.sock");
    let cfg = BridgeConfig { control: Some(sock.clone()), ..BridgeConfig::new(rules(file)) };
    let (bridge, wire) = start(cfg);
    let pass = |n: u32| {
        wire.send(0, &frame(BAD, n));
        collect(&wire, 1, 1, Duration::from_millis(500)).len()
    };
    assert_eq!(pass(0), 1, "not blocked yet");
    let r = ctl(&sock, "add blocks 198.51.100.0/24\n");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(pass(1), 0, "blocked once the add is answered");
    let sets = ctl(&sock, "sets\n");
    assert!(sets.to_string().contains("blocks"), "{sets}");
    assert_eq!(ctl(&sock, "add blocks 203.0.113.99\n")["ok"], true);
    // A dynamic set's size is its live size in the lists too.
    let lists = bridge.metrics().control.lists();
    let blocks = lists.iter().find(|l| l.kind == "set blocks").expect("the set's row");
    assert_eq!(blocks.entries, 2, "{lists:?}");
    let r = ctl(&sock, "del blocks 198.51.100.0/24\n");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(pass(2), 1, "let through once the delete is answered");
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert_eq!(s.json["dropped"], 1, "{}", s.json);
    assert_eq!(s.json["lists"][0]["entries"], 1, "{}", s.json);
    assert!(!sock.exists(), "the socket is removed at stop");
}

/// A writer the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn drops_are_sampled_with_their_rule_and_port() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad.txt", "198.51.100.66\n");
    let file = write(dir.path(), "r.rules", "set bad from \"bad.txt\"\ndrop saddr @bad\ndefault pass\n");
    let log = Shared::default();
    let pcap = dir.path().join("drops.pcapng");
    let sample = sluice_pipeline::sample::SampleConfig {
        pcapng: Some(pcap.clone()),
        log: Some(Box::new(log.clone())),
        max_pps: 0,
        ..sluice_pipeline::sample::SampleConfig::new()
    };
    let (bridge, wire) = start(BridgeConfig { sample: Some(sample), ..BridgeConfig::new(rules(file)) });
    for i in 0..5 {
        wire.send(1, &frame(BAD, i));
    }
    wire.send(1, &frame(GOOD, 9));
    assert_eq!(collect(&wire, 0, 1, Duration::from_secs(10)).len(), 1);
    bridge.stop();
    let s = bridge.wait().unwrap();
    assert!(s.sample_error.is_none(), "{:?}", s.sample_error);
    assert_eq!(s.json["samples"]["written"], 5, "{}", s.json);
    let lines = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(lines.lines().count(), 5, "{lines}");
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["port"], "mem1", "{first}");
    assert_eq!(first["rule_line"], 2, "{first}");
    assert!(std::fs::metadata(&pcap).unwrap().len() > 0);
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_exporter_serves_what_the_ports_counted() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(dir.path(), "bad.txt", "198.51.100.66\n");
    let cfg = BridgeConfig {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..BridgeConfig::new(RuleSpec { drop_src: vec![list], ..Default::default() })
    };
    let (bridge, wire) = start(cfg);
    for i in 0..7 {
        wire.send(0, &frame(BAD, i));
        wire.send(0, &frame(GOOD, i));
    }
    assert_eq!(collect(&wire, 1, 7, Duration::from_secs(10)).len(), 7);
    let addr = bridge.metrics_addr().expect("a bound address");
    // The sink counts once per batch: wait for the drops to be counted.
    let end = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let body = scrape(addr);
        if body.contains(r#"sluice_packets_total{port="0",iface="mem0",verdict="drop"} 7"#) || Instant::now() > end {
            break body;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    bridge.stop();
    bridge.wait().unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains(r#"sluice_packets_total{port="0",iface="mem0",verdict="drop"} 7"#), "{body}");
    assert!(body.contains(r#"sluice_packets_total{port="0",iface="mem0",verdict="pass"} 7"#), "{body}");
}

#[test]
fn duration_stops_the_bridge_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "r.rules", "default pass\n");
    let cfg = BridgeConfig { duration: Some(Duration::from_millis(300)), ..BridgeConfig::new(rules(file)) };
    let t = Instant::now();
    let (bridge, _wire) = start(cfg);
    let s = bridge.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(s.json["packets"], 0, "{}", s.json);
}

/// A country database: 198.51.100.0/24 is RU, 203.0.113.0/24 is FI (or,
/// with `moved`, RU too).
fn geo_db(path: &Path, moved: bool) {
    use sluice_geo::write::{Value, Writer};
    let cc = |c: &str| Value::map([("country", Value::map([("iso_code", Value::str(c))]))]);
    let mut w = Writer::new("GeoLite2-Country", 1_795_737_600);
    w.insert("198.51.100.0".parse().unwrap(), 24, cc("RU")).unwrap();
    w.insert("203.0.113.0".parse().unwrap(), 24, cc(if moved { "RU" } else { "FI" })).unwrap();
    w.insert("2001:db8::".parse().unwrap(), 32, cc("RU")).unwrap();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, w.to_bytes()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn drop_country_names_the_country_of_an_address_it_tests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("country.mmdb");
    geo_db(&db, false);
    let sock = dir.path().join("ctl.sock");
    let spec = RuleSpec { drop_country: vec!["RU".into()], geo_db: vec![db.clone()], ..RuleSpec::default() };
    let cfg = BridgeConfig { control: Some(sock.clone()), ..BridgeConfig::new(spec) };
    let (bridge, wire) = start(cfg);
    wire.send(0, &frame(BAD, 0));
    wire.send(0, &frame(GOOD, 1));
    assert_eq!(collect(&wire, 1, 2, Duration::from_millis(500)).len(), 1, "RU dropped, FI passed");
    let t = ctl(&sock, "test drop-src 198.51.100.66\n");
    assert_eq!(t["match"], true, "{t}");
    assert_eq!(
        (t["geo"]["network"].as_str(), t["geo"]["country"].as_str()),
        (Some("198.51.100.0/24"), Some("RU")),
        "{t}"
    );
    assert_eq!(t["geo"]["database"], db.display().to_string(), "{t}");
    let t = ctl(&sock, "test drop-src 203.0.113.7\n");
    assert_eq!((t["match"].clone(), t["geo"]["country"].clone()), (false.into(), "FI".into()), "{t}");
    let t = ctl(&sock, "test drop-src 192.0.2.1\n");
    assert!(t["geo"]["network"].is_null() && t["geo"]["country"].is_null(), "{t}");
    bridge.stop();
    bridge.wait().unwrap();
}

#[test]
fn a_country_set_drops_its_networks_and_says_where_they_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("country.mmdb");
    geo_db(&db, false);
    let file = write(dir.path(), "r.rules", "set ru geo country.mmdb country RU\ndrop saddr @ru\n");
    let sock = dir.path().join("ctl.sock");
    let cfg = BridgeConfig { control: Some(sock.clone()), watch: true, ..BridgeConfig::new(rules(file)) };
    let (bridge, wire) = start(cfg);
    let through = |src: [u8; 4], n: u32| {
        wire.send(0, &frame(src, n));
        collect(&wire, 1, 1, Duration::from_millis(500)).len()
    };
    assert_eq!(through(BAD, 0), 0, "198.51.100.66 is in RU");
    assert_eq!(through(GOOD, 1), 1, "203.0.113.7 is in FI");

    let sets = ctl(&sock, "sets\n");
    let geo = &sets["sets"][0]["geo"][0];
    assert_eq!(geo["database_type"], "GeoLite2-Country", "{sets}");
    assert_eq!(geo["build_epoch"], 1_795_737_600u64, "{sets}");
    assert_eq!(geo["networks"], serde_json::json!([["RU", 2]]), "{sets}");
    let text = sluice_policy::commands::render_text(&sets);
    assert!(text.contains("# ru: country GeoLite2-Country built 2026-11-27 ("), "{text}");
    assert!(text.contains("): RU 2 networks"), "{text}");

    let t = ctl(&sock, "test ru 198.51.100.66\n");
    assert_eq!(t["match"], true, "{t}");
    assert_eq!(t["geo"]["network"], "198.51.100.0/24", "{t}");
    assert_eq!(t["geo"]["country"], "RU", "{t}");
    let t = ctl(&sock, "test ru 203.0.113.7\n");
    assert_eq!((t["match"].clone(), t["geo"]["country"].clone()), (false.into(), "FI".into()), "{t}");

    // The database is replaced: --watch reloads it, and FI's network moved to RU.
    std::thread::sleep(Duration::from_millis(1100));
    geo_db(&db, true);
    let end = Instant::now() + Duration::from_secs(10);
    let mut n = 2;
    while through(GOOD, n) == 1 {
        assert!(Instant::now() < end, "the new database was not loaded");
        n += 1;
    }
    // A damaged database at reload: the sets in force stay.
    std::fs::write(dir.path().join("bad.tmp"), b"not a database").unwrap();
    std::fs::rename(dir.path().join("bad.tmp"), &db).unwrap();
    let r = ctl(&sock, "reload\n");
    assert_eq!(r["ok"], false, "{r}");
    assert!(r["error"].as_str().unwrap().contains("reload failed"), "{r}");
    assert_eq!(through(GOOD, n + 1), 0, "the sets in force stay");
    bridge.stop();
    bridge.wait().unwrap();
}

/// A control group that does not exist stops the start, naming it, and
/// leaves nothing running (the socket's file is not made).
#[test]
fn an_unknown_control_group_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(dir.path(), "r.rules", "drop saddr 192.0.2.1\n");
    for (group, add_group) in [(Some("sluice-no-such-group"), None), (None, Some("sluice-no-such-group"))] {
        let sock = dir.path().join("ctl.sock");
        let cfg = BridgeConfig {
            control: Some(sock.clone()),
            control_group: group.map(str::to_owned),
            control_add_group: add_group.map(str::to_owned),
            ..BridgeConfig::new(rules(list.clone()))
        };
        let (pair, _wire) = MemoryPair::new(["mem0", "mem1"]);
        let e = match Bridge::start(cfg, pair) {
            Ok(_) => panic!("started with an unknown group"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains("sluice-no-such-group: no such group"), "{e}");
        assert!(!sock.exists());
    }
}
