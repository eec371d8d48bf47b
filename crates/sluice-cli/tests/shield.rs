//! `sluice shield` on a host: a namespace stands for the host, its veth
//! end carries the program; frames are sent from the peer's end and
//! counted on the host's own interface (an AF_PACKET socket there sees
//! what XDP passed, never what it dropped). Native and generic mode;
//! after the shield stops, everything passes again. Bad input: a rule the
//! kernel cannot run, a missing interface, an interface that already
//! carries an XDP program: each a clear error, nothing left attached.
//!
//! Needs root: `SKIPPED` unless `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use sluice_testkit::lapi;
use sluice_testkit::live;
use sluice_testkit::names;

use live::{live_or_skip, run, unique, Endpoint, Netns, Veth};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const MARK: &[u8; 8] = b"SHIELD!!";

/// The host (`host` namespace, or this one, interface `dev`) and its
/// peer (`peer` namespace, interface `far`), joined by a veth pair.
struct Host {
    // Drop order: the link, then the namespaces.
    _veth: Veth,
    dev: String,
    far: String,
    host: Option<Netns>,
    peer: Netns,
}

impl Host {
    fn new(tag: &str) -> Host {
        let mut h = Host::here(tag);
        let host = Netns::new(&format!("{}h", h.dev));
        run(&["ip", "link", "set", "dev", &h.dev, "netns", &host.name]);
        run(&["ip", "-n", &host.name, "link", "set", "dev", &h.dev, "up"]);
        h.host = Some(host);
        h
    }

    /// The host's end in this namespace (where a LAPI on 127.0.0.1 is).
    fn here(tag: &str) -> Host {
        let p = unique(tag);
        let peer = Netns::new(&format!("{p}p"));
        let (dev, far) = (format!("{p}d"), format!("{p}f"));
        let veth = Veth::new(&dev, &far, Some(&peer.name));
        Host { _veth: veth, dev, far, host: None, peer }
    }

    /// `ip netns exec NS` for the host's namespace, or nothing.
    fn exec(&self) -> Vec<String> {
        match &self.host {
            Some(ns) => vec!["ip".into(), "netns".into(), "exec".into(), ns.name.clone()],
            None => Vec::new(),
        }
    }

    /// The host's namespace for an endpoint (this one).
    fn ns(&self) -> &str {
        self.host.as_ref().map_or("/proc/self/ns/net", |n| n.name.as_str())
    }

    /// Whether the host's interface carries an XDP program.
    fn has_xdp(&self) -> bool {
        let mut cmd = Command::new("ip");
        if let Some(ns) = &self.host {
            cmd.args(["-n", &ns.name]);
        }
        let out = cmd.args(["link", "show", "dev", &self.dev]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("xdp")
    }
}

/// `program args...` run in the host's namespace.
fn in_host(h: &Host, program: &str) -> Command {
    let mut words = h.exec();
    words.push(program.to_owned());
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]);
    cmd
}

/// Ethernet + IPv4 + UDP from `src` to 192.0.2.1:`dport`, our mark and `seq`.
fn udp(src: [u8; 4], dport: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 20 + 8 + 12;
    f.extend_from_slice(&[0x45, 0, 0, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[192, 0, 2, 1]);
    f.extend_from_slice(&[0x30, 0x39]);
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 20, 0, 0]);
    f.extend_from_slice(MARK);
    f.extend_from_slice(&seq.to_be_bytes());
    f
}

fn seq_of(f: &[u8]) -> Option<u32> {
    let at = 14 + 20 + 8;
    (f.get(at..at + 8)? == MARK).then(|| u32::from_be_bytes(f[at + 8..at + 12].try_into().unwrap()))
}

/// Sends `frames` from the peer and returns the sequence numbers that
/// reached the host's interface.
fn through(h: &Host, frames: &[Vec<u8>]) -> BTreeSet<u32> {
    let mut rx = Endpoint::open(h.ns(), &h.dev);
    let mut tx = Endpoint::open(&h.peer.name, &h.far);
    tx.send_all(frames);
    let mut got = BTreeSet::new();
    let end = std::time::Instant::now() + Duration::from_millis(800);
    while std::time::Instant::now() < end {
        rx.sock.poll_rx(20).unwrap();
        rx.sock.rx_batch(4096, |f, _| {
            if let Some(s) = seq_of(f) {
                got.insert(s);
            }
        });
    }
    got
}

/// A shield running in the host's namespace, killed on drop.
struct Shield {
    child: Child,
    /// What it logged until it was on.
    log: String,
}

impl Shield {
    /// Starts it and waits until it says it is on.
    fn start(h: &Host, args: &[&str]) -> Shield {
        let mut cmd = in_host(h, SLUICE);
        cmd.args(["shield", "--iface", &h.dev, "--json"]).args(args);
        Shield::spawn(cmd)
    }

    /// `sluice shield --json ARGS` in this namespace (the interfaces in `args`).
    fn start_here(args: &[&str]) -> Shield {
        let mut cmd = Command::new(SLUICE);
        cmd.args(["shield", "--json"]).args(args);
        Shield::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Shield {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            assert!(err.read_line(&mut line).unwrap() > 0, "the shield did not come up: {seen}");
            seen += &line;
            if line.contains("shield on ") {
                break;
            }
        }
        std::thread::spawn(move || for _ in err.lines() {});
        Shield { child, log: seen }
    }

    /// Where `--metrics` serves, as its log says.
    fn metrics_addr(&self) -> String {
        let at = self.log.split("metrics at http://").nth(1).unwrap_or_else(|| panic!("no metrics line: {}", self.log));
        at.split("/metrics").next().unwrap().to_owned()
    }

    /// SIGTERM, then its JSON summary.
    fn stop(mut self) -> Value {
        run(&["kill", "-TERM", &self.child.id().to_string()]);
        let mut out = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "shield exited {status}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rules(dir: &Path) -> std::path::PathBuf {
    // 1,000 hosts (the kernel table) and one /16 (compares).
    let hosts: String = (0..1000u32).map(|i| format!("10.8.{}.{}\n", i / 250, 1 + i % 250)).collect();
    std::fs::write(dir.join("hosts.txt"), hosts).unwrap();
    let file = dir.join("shield.rules");
    std::fs::write(
        &file,
        "set big from \"hosts.txt\"\nset small { 10.9.0.0/16 }\ndrop saddr @big\ndrop saddr @small\ndrop udp dport 7\n",
    )
    .unwrap();
    file
}

fn enforces(mode: &str) {
    let h = Host::new(&format!("sh{}", &mode[..1]));
    let dir = tempfile::tempdir().unwrap();
    let file = rules(dir.path());
    let frames = vec![
        udp([10, 8, 0, 5], 53, 0),   // big: dropped
        udp([10, 8, 3, 250], 53, 1), // big: dropped
        udp([10, 8, 3, 251], 53, 2), // not in big: passes
        udp([10, 9, 77, 1], 53, 3),  // small: dropped
        udp([10, 7, 0, 1], 53, 4),   // passes
        udp([10, 7, 0, 1], 7, 5),    // dport 7: dropped
        udp([203, 0, 113, 9], 80, 6),
    ];
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--xdp-mode", mode]);
    assert!(h.has_xdp());
    let got = through(&h, &frames);
    assert_eq!(got, BTreeSet::from([2, 4, 6]), "{mode}: what reached the host");
    let summary = shield.stop();
    // docs/json.md lists exactly what it prints.
    let printed: BTreeSet<String> = summary.as_object().unwrap().keys().cloned().collect();
    let listed: BTreeSet<String> = (common::documented_keys("sluice shield --json").into_iter())
        .filter(|k| !common::FLAG_KEYS.contains(&k.as_str()))
        .collect();
    assert_eq!(printed, listed, "docs/json.md against the summary");
    assert_eq!(summary["interfaces"][0]["mode"], mode, "{summary}");
    let packets: Vec<u64> =
        summary["rules"].as_array().unwrap().iter().map(|r| r["packets"].as_u64().unwrap()).collect();
    assert_eq!(packets, vec![2, 1, 1], "{summary}");
    assert!(summary["default"]["packets"].as_u64().unwrap() >= 3, "{summary}");
    // Stopped: detached, and everything passes.
    assert!(!h.has_xdp(), "the program stayed attached after the shield stopped");
    assert_eq!(through(&h, &frames).len(), frames.len(), "{mode}: after the stop");
}

#[test]
fn native_mode_drops_what_the_rules_say_and_nothing_after_it_stops() {
    if live_or_skip("native_mode_drops_what_the_rules_say_and_nothing_after_it_stops") {
        enforces("native");
    }
}

#[test]
fn generic_mode_drops_what_the_rules_say_and_nothing_after_it_stops() {
    if live_or_skip("generic_mode_drops_what_the_rules_say_and_nothing_after_it_stops") {
        enforces("generic");
    }
}

/// An IPv4 header (checksum 0: nothing checks it before the program)
/// from `src` to 192.0.2.1 of protocol `proto` around `payload`.
fn ipv4_around(src: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&[192, 0, 2, 1]);
    p.extend_from_slice(payload);
    p
}

/// `inner` frame (an Ethernet frame of ours) in GRE (its IP packet) or
/// VXLAN (the whole frame), from `outer` to 192.0.2.1, as an Ethernet
/// frame.
fn tunnelled(inner: &[u8], outer: [u8; 4], vxlan: bool) -> Vec<u8> {
    let packet = if vxlan {
        let mut v = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        v.extend_from_slice(inner);
        let mut u = vec![0xc0, 0x00, 0x12, 0xb5];
        u.extend_from_slice(&((8 + v.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(&v);
        ipv4_around(outer, 17, &u)
    } else {
        let mut g = vec![0, 0, 0x08, 0x00];
        g.extend_from_slice(&inner[14..]);
        ipv4_around(outer, 47, &g)
    };
    let mut f = inner[..14].to_vec();
    f.extend_from_slice(&packet);
    f
}

/// `drop inner saddr`: the source behind GRE and VXLAN is dropped in
/// XDP, as is the same source without a tunnel (its own innermost
/// header); an outer source alone in the set does not drop.
#[test]
fn inner_matches_drop_sources_behind_tunnels_in_xdp() {
    if !live_or_skip("inner_matches_drop_sources_behind_tunnels_in_xdp") {
        return;
    }
    let h = Host::new("shi");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("inner.rules");
    std::fs::write(&file, "drop inner saddr 10.0.0.0/8\n").unwrap();
    let frames = vec![
        udp([10, 1, 2, 3], 53, 0),
        tunnelled(&udp([10, 1, 2, 3], 53, 1), [198, 51, 100, 7], false),
        tunnelled(&udp([10, 1, 2, 3], 53, 2), [198, 51, 100, 7], true),
        tunnelled(&udp([203, 0, 113, 9], 53, 3), [10, 9, 9, 9], true),
        tunnelled(&udp([203, 0, 113, 9], 53, 4), [10, 9, 9, 9], false),
        udp([203, 0, 113, 9], 53, 5),
    ];
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--xdp-mode", "generic"]);
    let mut rx = Endpoint::open(h.ns(), &h.dev);
    let mut tx = Endpoint::open(&h.peer.name, &h.far);
    tx.send_all(&frames);
    let mut got = BTreeSet::new();
    let end = std::time::Instant::now() + Duration::from_millis(800);
    while std::time::Instant::now() < end {
        rx.sock.poll_rx(20).unwrap();
        rx.sock.rx_batch(4096, |f, _| {
            // The mark anywhere: tunnelled frames carry it deeper.
            if let Some(at) = f.windows(MARK.len()).position(|w| w == MARK) {
                if let Some(seq) = f.get(at + 8..at + 12) {
                    got.insert(u32::from_be_bytes(seq.try_into().unwrap()));
                }
            }
        });
    }
    assert_eq!(got, BTreeSet::from([3, 4, 5]), "what reached the host");
    let summary = shield.stop();
    assert_eq!(summary["rules"][0]["packets"], 3, "{summary}");
}

/// Runs a shield that must not start: its stderr.
fn refused(h: &Host, args: &[&str]) -> String {
    let out = in_host(h, SLUICE).args(["shield"]).args(args).args(["--duration", "1"]).output().unwrap();
    assert!(!out.status.success(), "started: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_input_is_a_clear_error_and_nothing_is_left_attached() {
    if !live_or_skip("bad_input_is_a_clear_error_and_nothing_is_left_attached") {
        return;
    }
    let h = Host::new("shb");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.rules");
    // (A rule the kernel program cannot run is refused the same way, with
    // its line: sluice-shield's tests.)
    std::fs::write(&bad, "drop udp dport 7\ndrop inner saddr 10.0.0.0/8 sport 7\n").unwrap();
    let e = refused(&h, &["--iface", &h.dev, "--rules", bad.to_str().unwrap()]);
    assert!(e.contains("bad.rules:2:"), "{e}");
    assert!(!h.has_xdp());
    // `iface` names one of the guarded interfaces, as on the bridge (`lo`
    // exists, but is not guarded).
    std::fs::write(&bad, "drop udp dport 7\ndrop iface lo\n").unwrap();
    let e = refused(&h, &["--iface", &h.dev, "--rules", bad.to_str().unwrap()]);
    assert!(e.contains("bad.rules:2: `iface lo`"), "{e}");
    assert!(!h.has_xdp());

    let good = rules(dir.path());
    let e = refused(&h, &["--iface", &h.dev, "--iface", "nosuchif0", "--rules", good.to_str().unwrap()]);
    assert!(e.contains("nosuchif0"), "{e}");
    assert!(!h.has_xdp(), "half-attached after an unknown interface");

    // A control socket that cannot be served stops the start before any
    // interface is touched.
    let sock = dir.path().join("ctl.sock");
    let e = refused(
        &h,
        &["--iface", &h.dev, "--rules", good.to_str().unwrap(), "--control", sock.to_str().unwrap()]
            .into_iter()
            .chain(["--control-group", "no-such-group-sluice"])
            .collect::<Vec<_>>(),
    );
    assert!(e.contains("no-such-group-sluice"), "{e}");
    assert!(!h.has_xdp(), "attached though the control socket failed");

    // A BGP listener that cannot be bound (an address the host lacks)
    // stops the start, said with its flag; nothing stays attached.
    let bgp = ["--bgp-peer", "192.0.2.1", "--bgp-peer-as", "65001", "--bgp-local-as", "65002"];
    let e = refused(
        &h,
        &["--iface", &h.dev, "--rules", good.to_str().unwrap(), "--bgp-router-id", "192.0.2.2"]
            .into_iter()
            .chain(bgp)
            .chain(["--bgp-listen", "192.0.2.77"])
            .collect::<Vec<_>>(),
    );
    assert!(e.contains("--bgp-listen"), "{e}");
    assert!(!h.has_xdp(), "attached though the BGP listener failed");

    // Another program on the interface (here: another shield's) is not replaced.
    let first = Shield::start(&h, &["--rules", good.to_str().unwrap()]);
    let e = refused(&h, &["--iface", &h.dev, "--rules", good.to_str().unwrap()]);
    assert!(e.contains(&h.dev) && e.contains("id "), "{e}");
    drop(first);
}

fn ctl(sock: &Path, args: &[&str]) -> Value {
    let out =
        Command::new(SLUICE).args(["ctl", "--socket", sock.to_str().unwrap(), "--json"]).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ctl {args:?}: {text} {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn ctl_changes_are_in_the_kernel_when_answered_and_timeouts_lift_them() {
    if !live_or_skip("ctl_changes_are_in_the_kernel_when_answered_and_timeouts_lift_them") {
        return;
    }
    let h = Host::new("shc");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dyn.rules");
    std::fs::write(&file, "set blocks dynamic\ndrop saddr @blocks\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--control", sock.to_str().unwrap()]);
    let a = |seq| udp([10, 5, 0, 1], 53, seq);
    let b = |seq| udp([10, 6, 3, 3], 53, seq);
    assert_eq!(through(&h, &[a(0), b(1)]), BTreeSet::from([0, 1]), "before any add");
    // The mode `auto` chose, as the log said it.
    let status = ctl(&sock, &["status"]);
    let iface = &status["status"]["interfaces"][0];
    assert_eq!((&status["status"]["product"], &iface["iface"]), (&"shield".into(), &h.dev.clone().into()), "{status}");
    let mode = iface["mode"].as_str().unwrap_or_default();
    assert!(matches!(mode, "native" | "generic") && shield.log.contains(mode), "{status} {}", shield.log);

    ctl(&sock, &["add", "blocks", "10.5.0.1"]);
    let added = std::time::Instant::now();
    ctl(&sock, &["add", "blocks", "10.6.0.0/16", "timeout", "3"]);
    let listed = ctl(&sock, &["list", "blocks"]);
    assert_eq!(listed["elements"].as_array().unwrap().len(), 2, "{listed}");
    // Answered: in force (no wait between the answer and the frames).
    assert_eq!(through(&h, &[a(2), b(3)]), BTreeSet::new(), "after the adds");
    assert!(added.elapsed() < Duration::from_secs(3), "too slow to see the /16 before its timeout");

    // The /16 times out; the host stays until deleted.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(added.elapsed()));
    assert_eq!(through(&h, &[a(4), b(5)]), BTreeSet::from([5]), "after the timeout");
    ctl(&sock, &["del", "blocks", "10.5.0.1"]);
    assert_eq!(through(&h, &[a(6), b(7)]), BTreeSet::from([6, 7]), "after the delete");

    let summary = shield.stop();
    assert_eq!(summary["rules"][0]["packets"], 3, "{summary}");
    assert!(!sock.exists(), "the control socket stayed");
}

/// A reload that changes only a list (the rule text the same) reaches the
/// kernel, and a list entry's timeout lifts it there: both are new tables,
/// not a set's runtime delta.
#[test]
fn a_list_reloaded_and_a_list_entry_timed_out_reach_the_kernel() {
    if !live_or_skip("a_list_reloaded_and_a_list_entry_timed_out_reach_the_kernel") {
        return;
    }
    let h = Host::new("shl");
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "10.5.0.1\n").unwrap();
    let file = dir.path().join("list.rules");
    std::fs::write(&file, "set bad from \"list.txt\"\ndrop saddr @bad\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--control", sock.to_str().unwrap()]);
    let a = |seq| udp([10, 5, 0, 1], 53, seq);
    let b = |seq| udp([10, 6, 3, 3], 53, seq);
    assert_eq!(through(&h, &[a(0), b(1)]), BTreeSet::from([1]), "as started");

    // The same rule text, another list: b listed, a no more.
    std::fs::write(&list, "10.6.3.3\n").unwrap();
    ctl(&sock, &["reload"]);
    assert_eq!(through(&h, &[a(2), b(3)]), BTreeSet::from([2]), "after the list's reload");

    // An ipset save with a timeout: b for 2 s more, then out by itself.
    std::fs::write(&list, "add bad 10.6.3.3 timeout 2\nadd bad 10.5.0.1\n").unwrap();
    ctl(&sock, &["reload"]);
    let reloaded = std::time::Instant::now();
    assert_eq!(through(&h, &[a(4), b(5)]), BTreeSet::new(), "after the timed reload");
    assert!(reloaded.elapsed() < Duration::from_secs(2), "too slow to see the entry before its timeout");
    std::thread::sleep(Duration::from_secs(4).saturating_sub(reloaded.elapsed()));
    assert_eq!(through(&h, &[a(6), b(7)]), BTreeSet::from([7]), "after the entry's timeout");

    let summary = shield.stop();
    assert_eq!(summary["reloads"]["ok"], 3, "{summary}");
    assert_eq!(summary["reloads"]["failed"], 0, "{summary}");
}

/// Without `--control`, `--watch` or CrowdSec the shield still has its
/// control plane: a list entry's timeout takes it out of the kernel, and
/// SIGHUP rereads the rules.
#[test]
fn a_shield_without_a_socket_expires_entries_and_reloads_on_sighup() {
    if !live_or_skip("a_shield_without_a_socket_expires_entries_and_reloads_on_sighup") {
        return;
    }
    let h = Host::new("shn");
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "add bad 10.6.3.3 timeout 3\nadd bad 10.5.0.1\n").unwrap();
    let file = dir.path().join("list.rules");
    std::fs::write(&file, "set bad from \"list.txt\"\ndrop saddr @bad\n").unwrap();
    let started = std::time::Instant::now();
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap()]);
    let a = |seq| udp([10, 5, 0, 1], 53, seq);
    let b = |seq| udp([10, 6, 3, 3], 53, seq);
    let c = |seq| udp([10, 7, 0, 9], 53, seq);
    if started.elapsed() < Duration::from_secs(2) {
        assert_eq!(through(&h, &[a(0), b(1)]), BTreeSet::new(), "both listed at the start");
    }
    std::thread::sleep(Duration::from_secs(5).saturating_sub(started.elapsed()));
    assert_eq!(through(&h, &[a(2), b(3)]), BTreeSet::from([3]), "b's entry timed out");

    std::fs::write(&list, "10.7.0.9\n").unwrap();
    let pid = shield.child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut seq = 4;
    loop {
        let passed = through(&h, &[a(seq), c(seq + 1)]);
        if passed == BTreeSet::from([seq]) {
            break;
        }
        assert!(std::time::Instant::now() < end, "SIGHUP never reloaded the list: {passed:?}");
        std::thread::sleep(Duration::from_millis(200));
        seq += 2;
    }
    let summary = shield.stop();
    assert_eq!(summary["reloads"]["ok"], 2, "{summary}: the expiry and the SIGHUP");
}

/// A shield on `h` fed by `lapi` as bouncer `bouncer` (pulling every
/// second), with a control socket and `extra` flags; the socket's path.
fn crowdsec_shield(h: &Host, lapi: &lapi::Lapi, bouncer: &str, extra: &[&str]) -> (Shield, std::path::PathBuf) {
    let key = lapi.bouncer_key(bouncer);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let sock = lapi.dir.path().join("ctl.sock");
    let mut args = vec![
        "--crowdsec-url",
        &lapi.url,
        "--crowdsec-key-file",
        key.to_str().unwrap(),
        "--crowdsec-interval",
        "1",
        "--control",
        sock.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (Shield::start(h, &args), sock)
}

#[test]
fn crowdsec_bans_reach_the_kernel_and_their_deletes_lift_them() {
    if !live_or_skip("crowdsec_bans_reach_the_kernel_and_their_deletes_lift_them") {
        return;
    }
    let Some(bin) = lapi::crowdsec_or_skip("crowdsec_bans_reach_the_kernel_and_their_deletes_lift_them") else {
        return;
    };
    let lapi = lapi::Lapi::new(bin);
    // In this namespace: the LAPI listens on its loopback.
    let h = Host::here("shcs");
    let (shield, sock) = crowdsec_shield(&h, &lapi, "shield", &[]);
    let banned = |want: bool| {
        let end = std::time::Instant::now() + Duration::from_secs(15);
        while ctl(&sock, &["test", "crowdsec", "10.5.0.1"])["match"] != want {
            assert!(std::time::Instant::now() < end, "10.5.0.1 never {want}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let a = |seq| udp([10, 5, 0, 1], 53, seq);
    assert_eq!(through(&h, &[a(0)]), BTreeSet::from([0]));
    lapi.cscli(&["decisions", "add", "--ip", "10.5.0.1", "--duration", "1h"]);
    banned(true);
    assert_eq!(through(&h, &[a(1), udp([10, 5, 0, 2], 53, 2)]), BTreeSet::from([2]), "the ban in the kernel");
    lapi.cscli(&["decisions", "delete", "--ip", "10.5.0.1"]);
    banned(false);
    assert_eq!(through(&h, &[a(3)]), BTreeSet::from([3]), "the delete in the kernel");
    let summary = shield.stop();
    assert_eq!(summary["rules"][0]["rule"], "drop saddr @crowdsec", "{summary}");
    assert_eq!(summary["rules"][0]["packets"], 1, "{summary}");
}

/// Each CrowdSec ban's drops are counted in the kernel under its
/// decision's origin: `/metrics` serves them by origin as the bridge's
/// exporter does, and the bouncer pushes the same numbers to the LAPI's
/// usage metrics (`cscli metrics show bouncers`, CrowdSec >= 1.6.3).
#[test]
fn crowdsec_drops_are_counted_by_origin_in_the_kernel_and_pushed_to_the_lapi() {
    let name = "crowdsec_drops_are_counted_by_origin_in_the_kernel_and_pushed_to_the_lapi";
    if !live_or_skip(name) {
        return;
    }
    let Some(bin) = lapi::crowdsec17_or_skip(name) else { return };
    let lapi = lapi::Lapi::with_metrics(bin);
    let h = Host::here("shcu");
    let (shield, sock) =
        crowdsec_shield(&h, &lapi, "shieldusage", &["--crowdsec-metrics-interval", "2", "--metrics", "127.0.0.1:0"]);
    // Two origins: cscli's own decision, and one imported from a file.
    lapi.cscli(&["decisions", "add", "--ip", "10.5.0.1", "--duration", "1h"]);
    let csv = lapi.dir.path().join("import.csv");
    std::fs::write(&csv, "value,duration\n10.5.0.9,1h\n").unwrap();
    lapi.cscli(&["decisions", "import", "-i", csv.to_str().unwrap(), "--format", "csv"]);
    for ip in ["10.5.0.1", "10.5.0.9"] {
        let end = std::time::Instant::now() + Duration::from_secs(15);
        while ctl(&sock, &["test", "crowdsec", ip])["match"] != true {
            assert!(std::time::Instant::now() < end, "{ip} never banned");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let manual = (0..20).map(|i| udp([10, 5, 0, 1], 53, i));
    let imported = (0..10).map(|i| udp([10, 5, 0, 9], 53, 100 + i));
    let others = (0..5).map(|i| udp([10, 5, 0, 2], 53, 200 + i));
    let frames: Vec<_> = manual.chain(imported).chain(others).collect();
    assert_eq!(through(&h, &frames), (200..205).collect::<BTreeSet<u32>>(), "only the unbanned address passes");
    let m = scrape(&h, &shield.metrics_addr());
    let want = lapi::exported_usage(&m);
    assert_eq!(want.len(), 6, "two origins, three series each: {m}");
    let (dropped, packet) = ("dropped".to_owned(), "packet".to_owned());
    assert_eq!(want[&("cscli".to_owned(), dropped.clone(), packet.clone())], 20, "{m}");
    let imported: Vec<_> = want.iter().filter(|(k, _)| k.0 != "cscli" && k.1 == dropped && k.2 == packet).collect();
    assert_eq!(imported.len(), 1, "{m}");
    assert_eq!(*imported[0].1, 10, "{m}");
    assert_eq!(want[&("cscli".to_owned(), dropped, "byte".to_owned())], 20 * frames[0].len() as i64, "{m}");
    // The LAPI's view after the next pushes (every 2 s): the same counts.
    let end = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = lapi.usage("shieldusage");
        if got == want {
            break;
        }
        assert!(std::time::Instant::now() < end, "cscli metrics show bouncers: {got:?}, /metrics: {want:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    shield.stop();
}

/// Starts `sluice ARGS` in the host's namespace and returns it with what
/// its first stderr line says after `prefix`, and its log from then on.
fn serve_in_host(h: &Host, args: &[&str], prefix: &str) -> (Served, String, Arc<Mutex<String>>) {
    let mut child = Served(in_host(h, SLUICE).args(args).stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap());
    let mut r = BufReader::new(child.0.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "sluice {args:?} did not come up");
        if let Some(at) = line.trim().strip_prefix(prefix) {
            let log = Arc::new(Mutex::new(String::new()));
            let l2 = Arc::clone(&log);
            std::thread::spawn(move || {
                for l in r.lines().map_while(Result::ok) {
                    l2.lock().unwrap().push_str(&(l + "\n"));
                }
            });
            return (child, at.to_owned(), log);
        }
    }
}

/// A child process killed (and reaped) on drop.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether an HTTP GET from the peer to `url` gets an answer within 2 s.
fn peer_gets(h: &Host, url: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", &h.peer.name, "curl", "-s", "-o", "/dev/null", "--max-time", "2", url])
        .status()
        .unwrap()
        .success()
}

/// The guard on the host blocks a flooding client; the block goes to the
/// shield's socket (`--block-ctl`) and the client's packets are dropped in
/// XDP from then on: its next connection never reaches the guard.
#[test]
fn the_guards_blocks_are_dropped_by_the_shield_on_the_same_host() {
    if !live_or_skip("the_guards_blocks_are_dropped_by_the_shield_on_the_same_host") {
        return;
    }
    let h = Host::new("shgd");
    run(&["ip", "-n", &h.host.as_ref().unwrap().name, "addr", "add", "10.88.0.1/24", "dev", &h.dev]);
    run(&["ip", "-n", &h.peer.name, "addr", "add", "10.88.0.2/24", "dev", &h.far]);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("guard.rules");
    std::fs::write(&rules, "set guard dynamic\ndrop saddr @guard\n").unwrap();
    let sock = dir.path().join("host.sock");
    let shield = Shield::start(&h, &["--rules", rules.to_str().unwrap(), "--control", sock.to_str().unwrap()]);

    let (upstream, up, _) = serve_in_host(
        &h,
        &["http-serve", "--listen", "127.0.0.1:0", "--threads", "1", "--no-pin", "--duration", "60"],
        "sluice: serving on ",
    );
    let (guard, at, log) = serve_in_host(
        &h,
        &[
            "http-guard",
            "--listen",
            "10.88.0.1:0",
            "--allow-remote",
            "--upstream",
            &up,
            "--no-pin",
            "--duration",
            "60",
            "--request-rate",
            "20",
            "--ip-block",
            "300",
            "--block-ctl",
            sock.to_str().unwrap(),
        ],
        "sluice: guarding on ",
    );
    let url = format!("http://{at}/");
    assert!(peer_gets(&h, &url), "the client cannot reach the guard before any block");

    // Over the rate: the guard blocks 10.88.0.2 and tells the shield.
    let flood = Command::new("ip")
        .args(["netns", "exec", &h.peer.name, SLUICE, "http-load", "--url", &url, "--allow-remote"])
        .args(["--connections", "4", "--requests", "400", "--duration", "5"])
        .output()
        .unwrap();
    let flood = format!("{}{}", String::from_utf8_lossy(&flood.stdout), String::from_utf8_lossy(&flood.stderr));
    let end = std::time::Instant::now() + Duration::from_secs(15);
    while ctl(&sock, &["test", "guard", "10.88.0.2"])["match"] != true {
        assert!(
            std::time::Instant::now() < end,
            "the guard's block never reached the shield: {}\nhttp-load: {flood}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!peer_gets(&h, &url), "a blocked client still reached the guard");
    drop((guard, upstream));
    let summary = shield.stop();
    assert!(summary["rules"][0]["packets"].as_u64().unwrap() > 0, "nothing dropped in XDP: {summary}");
}

/// A stream from the peer while something happens on the host: listed
/// frames (from 10.9.3.3, even sequence numbers) and unlisted ones (from
/// 10.7.3.3, odd), one every `gap`.
struct Stream {
    stop: Arc<std::sync::atomic::AtomicBool>,
    sender: std::thread::JoinHandle<u32>,
    receiver: std::thread::JoinHandle<BTreeSet<u32>>,
}

impl Stream {
    fn start(h: &Host, gap: Duration) -> Stream {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let mut rx = Endpoint::open(h.ns(), &h.dev);
        let mut tx = Endpoint::open(&h.peer.name, &h.far);
        let sender = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut seq = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let src = if seq.is_multiple_of(2) { [10, 9, 3, 3] } else { [10, 7, 3, 3] };
                    tx.send_all(&[udp(src, 53, seq)]);
                    seq += 1;
                    std::thread::sleep(gap);
                }
                seq
            })
        };
        let receiver = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut got = BTreeSet::new();
                let mut quiet = None;
                loop {
                    rx.sock.poll_rx(20).unwrap();
                    let n = rx.sock.rx_batch(4096, |f, _| {
                        if let Some(s) = seq_of(f) {
                            got.insert(s);
                        }
                    });
                    if stop.load(Ordering::Relaxed) {
                        let since = *quiet.get_or_insert_with(std::time::Instant::now);
                        if n == 0 && since.elapsed() > Duration::from_millis(300) {
                            return got;
                        }
                    }
                }
            })
        };
        Stream { stop, sender, receiver }
    }

    /// Stops it and checks that no listed frame arrived and at least 90%
    /// of the unlisted ones did (`during` names what happened).
    fn check(self, during: &str) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = self.sender.join().unwrap();
        let got = self.receiver.join().unwrap();
        let leaked: Vec<u32> = got.iter().copied().filter(|s| s.is_multiple_of(2)).collect();
        assert!(leaked.is_empty(), "listed frames passed {during}: {leaked:?}");
        let unlisted = (0..sent).filter(|s| !s.is_multiple_of(2)).count();
        assert!(got.len() * 10 >= unlisted * 9, "only {} of {unlisted} unlisted frames arrived {during}", got.len());
    }
}

/// Unmounts on drop.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// With `--persist`, the program goes on dropping while no shield runs,
/// and a new shield takes the pinned link over with no gap: a stream of
/// listed frames sent across the restart never gets through, the frames
/// of an unlisted source beside them do. Removing the pin detaches.
#[test]
fn a_persisted_shield_enforces_across_a_restart_with_no_gap() {
    if !live_or_skip("a_persisted_shield_enforces_across_a_restart_with_no_gap") {
        return;
    }
    let h = Host::new("shp");
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("bpf");
    std::fs::create_dir(&pins).unwrap();
    run(&["mount", "-t", "bpf", "bpf", pins.to_str().unwrap()]);
    let _mounted = Mounted(pins.clone());
    let rules = dir.path().join("p.rules");
    std::fs::write(&rules, "drop saddr 10.9.0.0/16\n").unwrap();
    let args = ["--rules", rules.to_str().unwrap(), "--persist", pins.to_str().unwrap()];

    let first = Shield::start(&h, &args);
    assert_eq!(through(&h, &[udp([10, 9, 0, 1], 53, 0), udp([10, 7, 0, 1], 53, 1)]), BTreeSet::from([1]));
    let summary = first.stop();
    assert_eq!(summary["interfaces"][0]["adopted"], false, "{summary}");
    assert!(h.has_xdp(), "a persisted shield's program left with the shield");
    assert_eq!(through(&h, &[udp([10, 9, 0, 1], 53, 2)]), BTreeSet::new(), "nothing enforced between the runs");

    // Across the second start: a stream of listed and unlisted frames.
    let stream = Stream::start(&h, Duration::from_micros(200));
    std::thread::sleep(Duration::from_millis(200));
    let second = Shield::start(&h, &args);
    std::thread::sleep(Duration::from_millis(300));
    stream.check("across the restart");
    let summary = second.stop();
    assert_eq!(summary["interfaces"][0]["adopted"], true, "{summary}");

    std::fs::remove_file(pins.join(sluice_shield::service::pin_name(&h.dev))).unwrap();
    assert!(live::wait_until(Duration::from_secs(5), || !h.has_xdp()), "removing the pin left the program attached");
    assert_eq!(through(&h, &[udp([10, 9, 0, 1], 53, 3)]), BTreeSet::from([3]));
}

#[test]
fn a_dry_run_counts_what_it_would_drop_and_drops_nothing() {
    if !live_or_skip("a_dry_run_counts_what_it_would_drop_and_drops_nothing") {
        return;
    }
    let h = Host::new("shd");
    let dir = tempfile::tempdir().unwrap();
    let file = rules(dir.path());
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--dry-run"]);
    let frames = [udp([10, 8, 0, 5], 53, 0), udp([10, 9, 77, 1], 53, 1), udp([10, 7, 0, 1], 53, 2)];
    assert_eq!(through(&h, &frames), BTreeSet::from([0, 1, 2]));
    let summary = shield.stop();
    let packets: Vec<u64> =
        summary["rules"].as_array().unwrap().iter().map(|r| r["packets"].as_u64().unwrap()).collect();
    assert_eq!(packets, vec![1, 1, 0], "{summary}");
}

/// 1,000 reloads (`sluice ctl reload`, the rule file changed each time)
/// while listed and unlisted frames stream in: no listed frame passes, the
/// unlisted ones do, and the last reload's new drop is in force.
#[test]
fn a_thousand_reloads_under_traffic_let_no_listed_packet_through() {
    if !live_or_skip("a_thousand_reloads_under_traffic_let_no_listed_packet_through") {
        return;
    }
    let h = Host::new("shr");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    let write = |n: u32| std::fs::write(&rules, format!("drop saddr 10.9.0.0/16\ncount udp dport {n}\n")).unwrap();
    write(0);
    let sock = dir.path().join("ctl.sock");
    let shield = Shield::start(&h, &["--rules", rules.to_str().unwrap(), "--control", sock.to_str().unwrap()]);

    let stream = Stream::start(&h, Duration::from_micros(100));
    for n in 1..=1000 {
        write(n);
        let r = sluice_control::socket::request(&sock, "reload", Duration::from_secs(10)).unwrap();
        assert_eq!(r["ok"], true, "{r}");
    }
    stream.check("during the reloads");

    // The last reload drops 10.7.0.0/16 too.
    std::fs::write(&rules, "drop saddr 10.9.0.0/16\ndrop saddr 10.7.0.0/16\n").unwrap();
    assert_eq!(ctl(&sock, &["reload"])["ok"], true);
    assert_eq!(through(&h, &[udp([10, 7, 0, 1], 53, 0), udp([10, 6, 0, 1], 53, 1)]), BTreeSet::from([1]));
    let summary = shield.stop();
    assert_eq!(summary["reloads"]["ok"], 1001, "{summary}");
    assert_eq!(summary["rules"][1]["rule"], "drop saddr 10.7.0.0/16", "{summary}");
    assert_eq!(summary["rules"][1]["packets"], 1, "{summary}");
}

/// `GET /metrics` at `addr`, from the host's namespace.
fn scrape(h: &Host, addr: &str) -> String {
    let out = in_host(h, "curl").args(["-sf", "--max-time", "5", &format!("http://{addr}/metrics")]).output().unwrap();
    assert!(out.status.success(), "scraping {addr}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The one sample of `series` (name and labels as the exposition writes them).
fn sample(metrics: &str, series: &str) -> u64 {
    let found: Vec<_> = metrics.lines().filter_map(|l| l.strip_prefix(series)?.strip_prefix(' ')).collect();
    assert_eq!(found.len(), 1, "{series} in:\n{metrics}");
    found[0].parse().unwrap()
}

/// `--metrics`: the drop rule's counters are exactly the listed frames
/// sent (the kernel counts every packet, per CPU; nothing is sampled), the
/// mode gauge says the mode the summary says was attached, a dynamic set's
/// elements and the control plane are there, and the families are the
/// published ones (`crates/sluice-shield/tests/names/shield-metrics.txt`).
#[test]
fn metrics_count_every_dropped_frame_and_say_the_mode() {
    if !live_or_skip("metrics_count_every_dropped_frame_and_say_the_mode") {
        return;
    }
    let h = Host::new("shm");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.rules");
    std::fs::write(&file, "set blocks dynamic\ndrop saddr 10.9.0.0/16\ndrop saddr @blocks\n").unwrap();
    let sock = dir.path().join("ctl.sock");
    let shield = Shield::start(
        &h,
        &["--rules", file.to_str().unwrap(), "--control", sock.to_str().unwrap(), "--metrics", "127.0.0.1:0"],
    );
    let addr = shield.metrics_addr();
    assert!(addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"), "the bound port is logged: {addr}");
    ctl(&sock, &["add", "blocks", "10.5.0.1"]);
    ctl(&sock, &["add", "blocks", "10.5.0.2"]);

    const N: u32 = 50;
    let listed = (0..N).map(|i| udp([10, 9, 0, 1], 53, i));
    let unlisted = (0..20).map(|i| udp([10, 7, 0, 1], 53, 1000 + i));
    let frames: Vec<_> = listed.chain(unlisted).collect();
    assert_eq!(through(&h, &frames), (1000..1020).collect::<BTreeSet<u32>>(), "what reached the host");
    let m = scrape(&h, &addr);
    let rule = r#"{line="2",rule="drop saddr 10.9.0.0/16",action="drop"}"#;
    assert_eq!(sample(&m, &format!("sluice_rule_packets_total{rule}")), u64::from(N));
    assert_eq!(sample(&m, &format!("sluice_rule_bytes_total{rule}")), u64::from(N) * frames[0].len() as u64);
    let set = r#"{line="3",rule="drop saddr @blocks",action="drop"}"#;
    assert_eq!(sample(&m, &format!("sluice_rule_packets_total{set}")), 0);
    assert!(sample(&m, "sluice_shield_default_packets_total{}") >= 20, "{m}");
    assert_eq!(sample(&m, r#"sluice_set_entries{set="blocks",part="live"}"#), 2);
    assert_eq!(sample(&m, r#"sluice_control_requests_total{result="ok"}"#), 2);
    assert_eq!(sample(&m, r#"sluice_reloads_total{result="ok"}"#), 0);
    assert_eq!(sample(&m, "sluice_dry_run{}"), 0);
    names::same_as_listed(
        &names::metric_names(&m),
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../sluice-shield/tests/names/shield-metrics.txt"),
    );

    // A reload the kernel takes (a rule more: a new program) counts as the
    // bridge's do; the rule counters restart with the new program.
    std::fs::write(&file, "set blocks dynamic\ndrop saddr 10.9.0.0/16\ndrop saddr @blocks\ncount udp dport 9\n")
        .unwrap();
    assert_eq!(ctl(&sock, &["reload"])["ok"], true);
    let m = scrape(&h, &addr);
    assert_eq!(sample(&m, r#"sluice_reloads_total{result="ok"}"#), 1);
    assert_eq!(sample(&m, &format!("sluice_rule_packets_total{rule}")), 0);
    assert_eq!(through(&h, &frames[..3]), BTreeSet::new());
    let m = scrape(&h, &addr);
    assert_eq!(sample(&m, &format!("sluice_rule_packets_total{rule}")), 3);

    let summary = shield.stop();
    let mode = summary["interfaces"][0]["mode"].as_str().unwrap().to_owned();
    let gauge = format!(r#"sluice_shield_xdp_mode{{iface="{}",mode="{mode}"}}"#, h.dev);
    assert_eq!(sample(&m, &gauge), 1);
    assert_eq!(m.matches("sluice_shield_xdp_mode{").count(), 1, "one interface, one mode: {m}");
    assert_eq!(summary["rules"][0]["packets"], 3, "{summary}");
}

/// `--metrics` is loopback only: another address is a usage error (exit
/// 2) before anything is loaded, unless `--metrics-allow-remote`; then the
/// peer scrapes it across the protected interface.
#[test]
fn metrics_are_loopback_only_unless_allowed_remote() {
    for (addr, says) in [("0.0.0.0:9100", "not a loopback address"), ("localhost", "expected ADDRESS:PORT")] {
        let out = Command::new(SLUICE)
            .args(["shield", "--iface", "lo", "--drop-src", "/nonexistent", "--metrics", addr])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--metrics {addr}: {err}");
        assert!(err.contains(says), "--metrics {addr}: {err}");
    }
    if !live_or_skip("metrics_are_loopback_only_unless_allowed_remote") {
        return;
    }
    let h = Host::new("shmr");
    run(&["ip", "-n", &h.host.as_ref().unwrap().name, "addr", "add", "10.88.1.1/24", "dev", &h.dev]);
    run(&["ip", "-n", &h.peer.name, "addr", "add", "10.88.1.2/24", "dev", &h.far]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.rules");
    std::fs::write(&file, "drop saddr 10.9.0.0/16\n").unwrap();
    let shield =
        Shield::start(&h, &["--rules", file.to_str().unwrap(), "--metrics", "0.0.0.0:0", "--metrics-allow-remote"]);
    let port = shield.metrics_addr().rsplit(':').next().unwrap().to_owned();
    let out = Command::new("ip")
        .args(["netns", "exec", &h.peer.name, "curl", "-sf", "--max-time", "5"])
        .arg(format!("http://10.88.1.1:{port}/metrics"))
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && m.contains("sluice_rule_packets_total{"), "from the peer: {m}");
    shield.stop();
}

/// Debian's fail2ban banning through dist/fail2ban's action into a
/// shield's set: the banned source is dropped in the kernel, and passes
/// again once fail2ban unbans it.
#[test]
fn fail2ban_bans_into_the_shield_and_unbans() {
    use common::fail2ban::{elements, fail_logins, tool_or_skip, Fail2ban};
    if !tool_or_skip("fail2ban_bans_into_the_shield_and_unbans", "fail2ban-server") {
        return;
    }
    let h = Host::new("shf");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("f2b.rules");
    std::fs::write(&file, "set f2b dynamic\ndrop saddr @f2b\n").unwrap();
    let sock = d.join("ctl.sock");
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap(), "--control", sock.to_str().unwrap()]);
    let auth = d.join("auth.log");
    let f2b = Fail2ban::start(d, &sock, &[("sshd-test", &auth, 600)]);
    let banned = |seq| udp([203, 0, 113, 7], 22, seq);
    let clean = |seq| udp([198, 51, 100, 9], 22, seq);
    assert_eq!(through(&h, &[banned(0), clean(1)]), BTreeSet::from([0, 1]), "before the ban");
    let wait = |present: bool| {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while elements(&sock).iter().any(|(e, _)| e == "203.0.113.7/32") != present {
            assert!(std::time::Instant::now() < end, "ban present {present}: {:?}{}", elements(&sock), f2b.logs(d));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    fail_logins(&auth, "203.0.113.7");
    wait(true);
    let timeout = elements(&sock)[0].1;
    assert!(timeout.is_some_and(|t| t > 500 && t <= 600), "fail2ban's bantime as the timeout: {timeout:?}");
    assert_eq!(through(&h, &[banned(2), clean(3)]), BTreeSet::from([3]), "banned: dropped in the kernel");
    f2b.unban("sshd-test", "203.0.113.7");
    wait(false);
    assert_eq!(through(&h, &[banned(4), clean(5)]), BTreeSet::from([4, 5]), "unbanned: passed");
    let summary = shield.stop();
    assert_eq!(summary["rules"][0]["packets"], 1, "{summary}");
}

/// `udp` to `dst` instead of 192.0.2.1.
fn udp_to(src: [u8; 4], dst: [u8; 4], dport: u16, seq: u32) -> Vec<u8> {
    let mut f = udp(src, dport, seq);
    f[30..34].copy_from_slice(&dst);
    f
}

/// `--bgp-peer` on a host: a GoBGP peer on loopback announces a blackhole
/// route (192.0.2.9/32), a FlowSpec discard (UDP to 192.0.2.0/24 port 53)
/// and a flow the kernel program cannot run (a rate limit); the first two
/// are dropped in XDP, the third is refused and counted, everything else
/// passes; withdrawn, both drops are lifted.
#[test]
fn bgp_blackholes_and_flowspec_discards_are_dropped_in_xdp_until_withdrawn() {
    if !live_or_skip("bgp_blackholes_and_flowspec_discards_are_dropped_in_xdp_until_withdrawn") {
        return;
    }
    // A failure, not a skip, under SLUICE_REQUIRE_TOOLS.
    if !sluice_testkit::bgp::Gobgpd::installed() {
        return;
    }
    let port = sluice_testkit::bgp::free_port();
    let d = sluice_testkit::bgp::Gobgpd::start(&sluice_testkit::bgp::GobgpdConfig::on(port));
    d.cli("global rib -a ipv4 add 192.0.2.9/32 nexthop 192.0.2.254 community 65535:666");
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==53 then discard");
    d.cli("global rib -a ipv4-flowspec add match destination 192.0.2.0/24 protocol udp destination-port ==5000 then rate-limit 125000");
    // In this namespace: gobgpd listens on its loopback.
    let h = Host::here("shbgp");
    let dir = tempfile::tempdir().unwrap();
    let (file, sock) = (rules(dir.path()), dir.path().join("ctl.sock"));
    let peer = format!("127.0.0.1:{port}");
    let shield = Shield::start(
        &h,
        &[
            "--rules",
            file.to_str().unwrap(),
            "--control",
            sock.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
            "--bgp-peer",
            &peer,
            "--bgp-peer-as",
            "65001",
            "--bgp-local-as",
            "65002",
            "--bgp-router-id",
            "192.0.2.2",
        ],
    );
    let in_kernel = |blackholes: u64, flows: u64| {
        let end = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = ctl(&sock, &["status"]);
            let bgp = &s["status"]["bgp"];
            if bgp["blackholes"] == blackholes && bgp["flows_enforced"] == flows {
                return s;
            }
            assert!(std::time::Instant::now() < end, "not {blackholes} blackholes and {flows} flows: {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The discard and the rate-limit (a police rule: 20 small frames are
    // well within 125,000 bytes a second) both run in the kernel.
    let s = in_kernel(1, 2);
    assert_eq!(s["status"]["bgp"]["flows_refused"], serde_json::json!({}), "{s}");
    assert_eq!(s["status"]["bgp"]["sessions"][0]["state"], "established", "{s}");
    let src = [10, 1, 0, 1];
    let frames = |base: u32| -> Vec<Vec<u8>> {
        (0..20)
            .flat_map(|i| {
                [
                    udp_to(src, [192, 0, 2, 9], 9, base + i),
                    udp_to(src, [192, 0, 2, 1], 53, base + 100 + i),
                    udp_to(src, [192, 0, 2, 1], 54, base + 200 + i),
                    udp_to(src, [192, 0, 2, 1], 5000, base + 300 + i),
                ]
            })
            .collect()
    };
    let passed: BTreeSet<u32> = (200..220).chain(300..320).collect();
    assert_eq!(through(&h, &frames(0)), passed, "the blackhole and the discard in the kernel");
    let m = scrape(&h, &shield.metrics_addr());
    assert_eq!(sample(&m, "sluice_bgp_blackholes{}"), 1);
    assert_eq!(sample(&m, "sluice_bgp_flows_enforced{}"), 2);
    assert_eq!(sample(&m, "sluice_bgp_flows_refused{reason=\"rate\"}"), 0);
    assert_eq!(sample(&m, &format!("sluice_bgp_session_up{{peer=\"{peer}\"}}")), 1);
    // The families BGP adds to a shield's are the published ones.
    let listed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sluice-shield/tests/names");
    let without: BTreeSet<String> =
        std::fs::read_to_string(listed.join("shield-metrics.txt")).unwrap().lines().map(str::to_owned).collect();
    let added: BTreeSet<String> = names::metric_names(&m).difference(&without).cloned().collect();
    names::same_as_listed(&added, &listed.join("shield-bgp-metrics.txt"));
    let rule = |text: &str| format!("sluice_rule_packets_total{{line=\"0\",rule=\"{text}\",action=\"drop\"}}");
    assert_eq!(sample(&m, &rule("drop daddr @bgp-blackholes (BGP blackhole routes)")), 20);
    assert_eq!(sample(&m, &rule("drop bgp destination 192.0.2.0/24 protocol ==17 destination-port ==53")), 20);
    let police = "sluice_rule_packets_total{line=\"0\",rule=\"police bgp destination 192.0.2.0/24 protocol ==17 destination-port ==5000\",action=\"police\"}";
    assert_eq!(sample(&m, police), 20);
    // `ctl flows` counts the discard's drops from the kernel's counters
    // (copied every control-plane tick); the refused rate flow, none.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let flows = loop {
        let f = ctl(&sock, &["flows"]);
        let discard =
            f["flows"].as_array().unwrap().iter().find(|x| x["flow"].as_str().unwrap().contains("==53")).cloned();
        if discard.as_ref().is_some_and(|d| d["packets"] == 20) || std::time::Instant::now() > end {
            break f;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let by_port =
        |p: &str| flows["flows"].as_array().unwrap().iter().find(|x| x["flow"].as_str().unwrap().contains(p)).cloned();
    let discard = by_port("==53").unwrap_or_else(|| panic!("no discard flow: {flows}"));
    assert_eq!((discard["packets"].as_u64(), discard["dropped"].as_u64()), (Some(20), Some(20)), "{flows}");
    assert!(discard["bytes"].as_u64().unwrap() >= 20 * 42, "{flows}");
    let rate = by_port("==5000").unwrap();
    assert_eq!((rate["packets"].as_u64(), rate["dropped"].as_u64()), (Some(20), Some(0)), "{flows}");

    // A reload builds the program again: the routes stay in force.
    ctl(&sock, &["reload"]);
    let after: BTreeSet<u32> = (700..720).chain(800..820).collect();
    assert_eq!(through(&h, &frames(500)), after, "the routes across a reload");
    assert_eq!(ctl(&sock, &["status"])["status"]["reloads"], 1);

    d.cli("global rib -a ipv4 del 192.0.2.9/32");
    d.cli("global rib -a ipv4-flowspec del match destination 192.0.2.0/24 protocol udp destination-port ==53");
    in_kernel(0, 1);
    let all: BTreeSet<u32> = (1000..1020).chain(1100..1120).chain(1200..1220).chain(1300..1320).collect();
    assert_eq!(through(&h, &frames(1000)), all, "the withdrawals in the kernel");
    let summary = shield.stop();
    assert_eq!(summary["rules"][0]["rule"], "drop daddr @bgp-blackholes (BGP blackhole routes)", "{summary}");
}

/// `--sample-drops` on the shield: each dropped frame (1 in 1, no cap) is
/// in the pcapng, read back by our reader (bytes, wire length) and by
/// tshark (the comment names the rule's line and text, the interface);
/// passed frames are not; the summary counts them.
#[test]
fn sampled_drops_reach_a_pcapng_with_the_rule_in_each_comment() {
    if !live_or_skip("sampled_drops_reach_a_pcapng_with_the_rule_in_each_comment") {
        return;
    }
    let h = Host::new("shs");
    let dir = tempfile::tempdir().unwrap();
    let file = rules(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let samples = dir.path().join("drops.pcapng");
    let frames = vec![
        udp([10, 8, 0, 5], 53, 0),  // big (line 3)
        udp([10, 7, 0, 1], 53, 1),  // passes
        udp([10, 9, 77, 1], 53, 2), // small (line 4)
        udp([10, 7, 0, 1], 7, 3),   // dport 7 (line 5)
    ];
    let (file_arg, samples_arg) = (file.to_str().unwrap(), samples.to_str().unwrap());
    let args =
        ["--rules", file_arg, "--sample-drops", samples_arg, "--sample-max-pps", "0", "--metrics", "127.0.0.1:0"];
    let shield = Shield::start(&h, &args);
    assert_eq!(through(&h, &frames), BTreeSet::from([1]));
    // The reader polls every 20 ms, then the writer writes: give it time.
    let addr = shield.metrics_addr();
    let mut m = String::new();
    for _ in 0..50 {
        m = scrape(&h, &addr);
        if sample(&m, r#"sluice_drop_samples_total{result="written"}"#) == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sample(&m, r#"sluice_drop_samples_total{result="written"}"#), 3, "{m}");
    assert_eq!(sample(&m, r#"sluice_drop_samples_total{result="ring_full"}"#), 0, "{m}");
    let summary = shield.stop();
    common::assert_documented_keys("sluice shield --json", &summary);
    let s = &summary["samples"];
    assert_eq!((s["written"].as_u64(), s["lost_ring_full"].as_u64()), (Some(3), Some(0)), "{summary}");

    let mut reader = sluice_pcap::CaptureReader::open(&samples).unwrap();
    let mut got = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        got.push((r.data.to_vec(), r.orig_len));
    }
    let dropped: Vec<_> = [0, 2, 3].iter().map(|&i| (frames[i].clone(), frames[i].len() as u32)).collect();
    assert_eq!(got, dropped, "the dropped frames, in order, whole (under 128 bytes)");
    if common::have_tool("tshark") {
        let comments = common::sample_comments(&samples);
        assert_eq!(comments.len(), 3, "{comments:?}");
        common::assert_comments_name_rule_lines(&comments, &text);
        let lines: Vec<String> = comments.iter().map(|(c, _)| common::comment_field(c, "rule_line")).collect();
        assert_eq!(lines, ["3", "4", "5"], "{comments:?}");
        for (c, iface) in &comments {
            assert_eq!((iface, common::comment_field(c, "port")), (&h.dev, h.dev.clone()), "{c}");
        }
    }
}

/// `--log-drops` alone: one JSON line per dropped frame on stderr, with
/// the rule's line and text, the interface and the frame's addresses.
#[test]
fn log_drops_writes_a_json_line_per_sampled_drop() {
    if !live_or_skip("log_drops_writes_a_json_line_per_sampled_drop") {
        return;
    }
    let h = Host::new("shl");
    let dir = tempfile::tempdir().unwrap();
    let file = rules(dir.path());
    let mut child = in_host(&h, SLUICE)
        .args(["shield", "--iface", &h.dev, "--rules", file.to_str().unwrap(), "--log-drops", "--sample-max-pps", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("shield on ") {
        assert!(err.read_line(&mut seen).unwrap() > 0, "the shield did not come up: {seen}");
    }
    let frames = [udp([10, 8, 0, 5], 53, 0), udp([10, 7, 0, 1], 53, 1), udp([10, 7, 0, 1], 7, 2)];
    assert_eq!(through(&h, &frames), BTreeSet::from([1]));
    run(&["kill", "-TERM", &child.id().to_string()]);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{seen}{rest}");
    let logged: Vec<Value> = rest.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let got: Vec<_> = logged.iter().map(|v| (v["rule_line"].as_u64(), v["src"].as_str(), v["port"].as_str())).collect();
    let dev = Some(h.dev.as_str());
    assert_eq!(got, [(Some(3), Some("10.8.0.5"), dev), (Some(5), Some("10.7.0.1"), dev)], "{rest}");
    assert_eq!(logged[0]["rule"], "drop saddr @big", "{rest}");
}

/// `police` and `iface` in the kernel on a veth: a UDP stream from each of
/// two sources held to its own burst (`per saddr`: 1 packet a second after
/// 10, so 11 of each 100 sent back to back pass), and `iface` rules that
/// name the guarded interface or not.
#[test]
fn police_and_iface_rules_are_enforced_on_a_veth() {
    if !live_or_skip("police_and_iface_rules_are_enforced_on_a_veth") {
        return;
    }
    let h = Host::new("shp");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("police.rules");
    let dev = &h.dev;
    std::fs::write(
        &file,
        format!(
            "police 1pps burst 10 per saddr udp dport 9\ndrop iface {dev} udp dport 7\ndrop iface != {dev} udp dport 8\n"
        ),
    )
    .unwrap();
    let shield = Shield::start(&h, &["--rules", file.to_str().unwrap()]);
    let mut frames: Vec<Vec<u8>> = (0..100).map(|i| udp([10, 7, 0, 1], 9, i)).collect();
    frames.extend((100..200).map(|i| udp([10, 7, 0, 2], 9, i)));
    frames.push(udp([10, 7, 0, 3], 7, 200));
    frames.push(udp([10, 7, 0, 3], 8, 201));
    let started = std::time::Instant::now();
    let got = through(&h, &frames);
    let first = got.iter().filter(|&&s| s < 100).count();
    let second = got.iter().filter(|&&s| (100..200).contains(&s)).count();
    // Sent in far less than the second one more packet would take.
    assert_eq!((first, second), (11, 11), "{got:?} ({:?})", started.elapsed());
    assert!(!got.contains(&200) && got.contains(&201), "{got:?}");
    let summary = shield.stop();
    let packets: Vec<u64> =
        summary["rules"].as_array().unwrap().iter().map(|r| r["packets"].as_u64().unwrap()).collect();
    assert_eq!(packets, vec![200, 1, 0], "{summary}");
    assert_eq!(summary["rules"][0]["police_dropped"], 178, "{summary}");
    assert!(summary["rules"][1].get("police_dropped").is_none(), "{summary}");
}

/// `--metrics` per interface: a shield on two interfaces (`--iface a
/// --iface b`), frames sent into each that a drop rule, a pass rule and
/// the default decide; `sluice_packets` and `sluice_bytes` by port,
/// interface and verdict are exactly what was sent to each (the veths are
/// quiet: no IPv6 of the kernel's own), and the rule counters are their
/// sums over both.
#[test]
fn metrics_count_each_interfaces_packets_by_verdict() {
    if !live_or_skip("metrics_count_each_interfaces_packets_by_verdict") {
        return;
    }
    let topo = live::Topology::new("shif");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ifaces.rules");
    std::fs::write(&file, "drop udp dport 7\npass udp dport 8\ndefault drop\n").unwrap();
    let (a, b) = (topo.a.near.as_str(), topo.b.near.as_str());
    let shield = Shield::start_here(&[
        "--iface",
        a,
        "--iface",
        b,
        "--rules",
        file.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    let addr = shield.metrics_addr();
    // Per interface: frames to drop (dport 7), to pass (8), for the default (9: drop).
    let sends = [(&topo.ns_a.name, &topo.a.far, [5u32, 3, 2]), (&topo.ns_b.name, &topo.b.far, [4, 6, 0])];
    let mut want = Vec::new();
    let mut seq = 0;
    for (ns, far, [drop, pass, default]) in sends {
        let frames: Vec<Vec<u8>> = [(7, drop), (8, pass), (9, default)]
            .into_iter()
            .flat_map(|(dport, n)| (0..n).map(move |_| dport))
            .map(|dport| {
                seq += 1;
                udp([10, 7, 0, 1], dport, seq)
            })
            .collect();
        let len = frames[0].len() as u64;
        Endpoint::open(ns, far).send_all(&frames);
        want.push((u64::from(pass), u64::from(drop + default), len));
    }
    let total: u64 = want.iter().map(|(p, d, _)| p + d).sum();
    let m = |addr: &str| {
        let out = Command::new("curl").args(["-sf", "--max-time", "5", &format!("http://{addr}/metrics")]).output();
        String::from_utf8(out.unwrap().stdout).unwrap()
    };
    let series =
        |port: usize, iface: &str, verdict: &str| format!(r#"{{port="{port}",iface="{iface}",verdict="{verdict}"}}"#);
    let counted = |text: &str| {
        [a, b]
            .iter()
            .enumerate()
            .flat_map(|(p, i)| {
                ["pass", "drop"].map(|v| sample(text, &format!("sluice_packets_total{}", series(p, i, v))))
            })
            .sum::<u64>()
    };
    let mut text = m(&addr);
    assert!(
        live::wait_until(Duration::from_secs(5), || {
            text = m(&addr);
            counted(&text) >= total
        }),
        "{text}"
    );
    for (p, (iface, (pass, drop, len))) in [a, b].iter().zip(&want).enumerate() {
        assert_eq!(sample(&text, &format!("sluice_packets_total{}", series(p, iface, "pass"))), *pass, "{text}");
        assert_eq!(sample(&text, &format!("sluice_packets_total{}", series(p, iface, "drop"))), *drop, "{text}");
        assert_eq!(sample(&text, &format!("sluice_bytes_total{}", series(p, iface, "pass"))), pass * len, "{text}");
        assert_eq!(sample(&text, &format!("sluice_bytes_total{}", series(p, iface, "drop"))), drop * len, "{text}");
    }
    assert_eq!(text.matches("sluice_packets_total{").count(), 4, "two interfaces, two verdicts: {text}");
    let rule = |line: usize, rule: &str, action: &str| {
        sample(&text, &format!(r#"sluice_rule_packets_total{{line="{line}",rule="{rule}",action="{action}"}}"#))
    };
    assert_eq!(rule(1, "drop udp dport 7", "drop"), 9);
    assert_eq!(rule(2, "pass udp dport 8", "pass"), 9);
    assert_eq!(sample(&text, "sluice_shield_default_packets_total{}"), 2);
    let summary = shield.stop();
    assert_eq!(summary["interfaces"].as_array().unwrap().len(), 2, "{summary}");
    for (i, (pass, drop, len)) in want.iter().enumerate() {
        let at = &summary["interfaces"][i];
        let got = [&at["passed"], &at["passed_bytes"], &at["dropped"], &at["dropped_bytes"]].map(|v| v.as_u64());
        assert_eq!(got, [pass, &(pass * len), drop, &(drop * len)].map(|&n| Some(n)), "{summary}");
    }
}

/// `--sample-max-pps` in the kernel: a flood of 300 dropped frames at a
/// cap of 5 a second leaves at most the burst and the rate's worth of
/// samples over the time it took written, and every other drop counted
/// `over_cap` (the metric and the summary), none lost to the ring.
#[test]
fn a_drop_flood_is_sampled_no_faster_than_max_pps() {
    if !live_or_skip("a_drop_flood_is_sampled_no_faster_than_max_pps") {
        return;
    }
    let h = Host::new("shc");
    let dir = tempfile::tempdir().unwrap();
    let file = rules(dir.path());
    let samples = dir.path().join("flood.pcapng");
    let args = [
        "--rules",
        file.to_str().unwrap(),
        "--sample-drops",
        samples.to_str().unwrap(),
        "--sample-max-pps",
        "5",
        "--metrics",
        "127.0.0.1:0",
    ];
    let started = std::time::Instant::now();
    let shield = Shield::start(&h, &args);
    const N: u64 = 300;
    let frames: Vec<_> = (0..N as u32).map(|i| udp([10, 8, 0, 5], 53, i)).collect();
    assert_eq!(through(&h, &frames), BTreeSet::new());
    let addr = shield.metrics_addr();
    let count = |m: &str, result: &str| sample(m, &format!(r#"sluice_drop_samples_total{{result="{result}"}}"#));
    let mut m = String::new();
    for _ in 0..50 {
        m = scrape(&h, &addr);
        if count(&m, "written") + count(&m, "over_cap") >= N {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed().as_secs_f64();
    let written = count(&m, "written");
    assert_eq!(written + count(&m, "over_cap"), N, "{m}");
    assert!((5..=5 + (5.0 * took).ceil() as u64 + 1).contains(&written), "{written} written in {took:.2} s: {m}");
    assert_eq!(count(&m, "ring_full"), 0, "{m}");
    let summary = shield.stop();
    let s = &summary["samples"];
    assert_eq!(s["over_cap"].as_u64(), Some(N - written), "{summary}");
    assert_eq!(s["lost_ring_full"].as_u64(), Some(0), "{summary}");
}
