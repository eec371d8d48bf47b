//! The configs shipped in dist/etc start as shipped (`--config`), only the
//! ports and run-time paths moved so a test can own them: the guard's
//! site.toml in front of a real upstream, serving a request over TLS and
//! redirecting a plain one to it; the bridge's
//! edge.toml on veths named as it names them (eth1, eth2), and the shield's
//! host.toml on a veth named eth0, each in a namespace of the test's own
//! (root; SKIPPED without, a failure under `SLUICE_REQUIRE_LIVE=1`).

mod common;
use sluice_testkit::live;

use common::http_serve;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn dist(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../dist/etc").join(file)
}

/// A log line's message (`log-format = "json"` in the shipped configs).
fn message(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| line.to_owned())
}

#[test]
fn the_shipped_guard_config_starts_and_serves() {
    let up = http_serve(20, &[]);
    // (killed at the end)
    let upstream = up.addr.to_string();
    let config = dist("site.toml");
    let testdata = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sluice-guard/src/testdata");
    let (cert, key, ca) =
        (testdata.join("tls-a.test.pem"), testdata.join("tls-a.test.key"), testdata.join("tls-ca.pem"));
    // As shipped (non-loopback listen addresses among them: TLS and a
    // redirect to it), but any free ports, the test's certificate, and the
    // upstream and metrics this test owns.
    let mut g = Command::new(SLUICE)
        .args(["http-guard", "--config", config.to_str().unwrap()])
        .args(["--listen", "0.0.0.0:0", "--redirect-https", "0.0.0.0:0", "--upstream", &upstream])
        .args(["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()])
        .args(["--metrics", "127.0.0.1:0", "--duration", "3"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(g.stderr.take().unwrap()).lines();
    let mut addr = |prefix: &str| loop {
        let line = lines.next().expect("the guard ended before it was guarding").unwrap();
        if let Some(a) = message(&line).strip_prefix(prefix) {
            break a.trim().parse::<std::net::SocketAddr>().unwrap();
        }
    };
    let (tls, redirect) = (addr("guarding on "), addr("redirecting to https on "));
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "--cacert", ca.to_str().unwrap()])
        .args(["--resolve", &format!("a.test:{}:127.0.0.1", tls.port())])
        .arg(format!("https://a.test:{}/", tls.port()))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{out:?}");
    let mut s = TcpStream::connect(("127.0.0.1", redirect.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /p?q HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n").unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 308 "), "{got}");
    assert!(got.contains(&format!("\r\nLocation: https://a.test:{}/p?q\r\n", tls.port())), "{got}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = g.wait().unwrap();
    let mut up = up;
    let _ = up.child.kill();
    let _ = up.child.wait();
    assert!(status.success(), "site.toml: {status}: {rest:?}");
}

#[test]
fn the_shipped_bridge_config_starts_on_its_interfaces() {
    if !live::live_or_skip("the_shipped_bridge_config_starts_on_its_interfaces") {
        return;
    }
    let ns = live::Netns::new(&live::unique("dist"));
    live::run(&["ip", "-n", &ns.name, "link", "add", "eth1", "type", "veth", "peer", "name", "eth2"]);
    for dev in ["eth1", "eth2"] {
        live::run(&["ip", "-n", &ns.name, "link", "set", "dev", dev, "up"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("edge.sock");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, SLUICE, "bridge", "--config", dist("edge.toml").to_str().unwrap()])
        .args(["--rules", dist("edge.rules").to_str().unwrap(), "--control", sock.to_str().unwrap()])
        .args(["--metrics", "127.0.0.1:0", "--duration", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let messages: Vec<String> = stderr.lines().map(message).collect();
    assert!(out.status.success(), "edge.toml: {}: {stderr}", out.status);
    assert!(messages.iter().any(|m| m.starts_with("bridging")), "{stderr}");
}

/// Whether `dev` in namespace `ns` carries an XDP program (`ip link show`).
fn has_xdp(ns: &str, dev: &str) -> bool {
    let out = Command::new("ip").args(["-n", ns, "link", "show", "dev", dev]).output().unwrap();
    assert!(out.status.success(), "ip link show {dev}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

#[test]
fn the_shipped_shield_config_starts_on_its_interface() {
    if !live::live_or_skip("the_shipped_shield_config_starts_on_its_interface") {
        return;
    }
    let ns = live::Netns::new(&live::unique("dsh"));
    live::run(&["ip", "-n", &ns.name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"]);
    for dev in ["eth0", "eth0p"] {
        live::run(&["ip", "-n", &ns.name, "link", "set", "dev", dev, "up"]);
    }
    assert!(!has_xdp(&ns.name, "eth0"), "eth0 carries XDP before the shield");
    // As shipped, the rules from dist/etc rather than /etc/sluice and the
    // control socket in the test's directory; no --duration: it runs until
    // SIGTERM, as under its unit.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("host.sock");
    let mut s = Command::new("ip")
        .args(["netns", "exec", &ns.name, SLUICE, "shield", "--config", dist("host.toml").to_str().unwrap()])
        .args(["--rules", dist("host.rules").to_str().unwrap(), "--control", sock.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every line of stderr, in order, to this thread (so a shield that
    // hangs instead of coming up fails the test after a while).
    let (tx, rx) = mpsc::channel();
    let err = BufReader::new(s.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                let m = message(&line);
                seen.push(line);
                if m.starts_with("shield on eth0 ") {
                    break;
                }
            }
            Err(e) => {
                let _ = s.kill();
                let _ = s.wait();
                panic!("host.toml: the shield did not come up ({e}): {seen:#?}");
            }
        }
    }
    let on = has_xdp(&ns.name, "eth0");
    // host.rules' dynamic sets take `sluice ctl` as its comments say.
    let ctl =
        |args: &[&str]| Command::new(SLUICE).args(["ctl", "--socket", sock.to_str().unwrap()]).args(args).output();
    let added = ctl(&["add", "f2b", "198.51.100.7", "timeout", "600"]).unwrap();
    let listed = ctl(&["list", "f2b"]).unwrap();
    // `ip netns exec` runs the shield in its own process (exec).
    live::run(&["kill", "-TERM", &s.id().to_string()]);
    let mut out = String::new();
    s.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = s.wait().unwrap();
    reader.join().unwrap();
    seen.extend(rx.try_iter());
    assert!(on, "host.toml: the shield is on, but eth0 carries no XDP: {seen:#?}");
    assert!(added.status.success(), "ctl add: {}", String::from_utf8_lossy(&added.stderr));
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("198.51.100.7"), "ctl list f2b: {listed}");
    assert!(status.success(), "host.toml: {status}: {seen:#?}");
    assert!(out.contains("drop saddr @bogons"), "the summary names the shipped rules: {out}");
    assert!(!has_xdp(&ns.name, "eth0"), "eth0 still carries XDP after the shield stopped: {seen:#?}");
}
