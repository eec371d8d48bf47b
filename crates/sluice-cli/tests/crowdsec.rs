//! The bridge as a CrowdSec bouncer against a real Local API (Debian's
//! `crowdsec`, run as `crowdsec -c CONFIG -no-cs` on loopback with its own
//! sqlite database): decisions added with `cscli` are enforced on real
//! traffic (ping across the bridge) within the interval + 1 s and stop when
//! deleted, for an IP and a range; with the LAPI killed enforcement goes on
//! and `sluice_crowdsec_up` goes 0, then 1 when it is back.
//!
//! Strings from the LAPI (a decision's type, reason) with `"` and
//! newlines, and a decision with an over-long type, leave `/metrics`
//! parseable by Prometheus' own parser (Python's `prometheus_client`),
//! with no forged series.
//!
//! Needs root and the CrowdSec binaries (`crowdsec`, `cscli` on PATH or in
//! `SLUICE_CROWDSEC_BIN`): `SKIPPED` unless `SLUICE_REQUIRE_LIVE=1` /
//! `SLUICE_REQUIRE_TOOLS=1` (CI installs them), when it fails instead.

use sluice_testkit::lapi;
use sluice_testkit::live;

use lapi::{crowdsec_or_skip, Lapi};
use live::{live_or_skip, run, Topology};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

struct Bridge {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    metrics: String,
}

impl Bridge {
    fn start(args: &[&str]) -> Bridge {
        let mut child = Command::new(SLUICE)
            .arg("bridge")
            .args(args)
            .args(["--io", "afpacket", "--metrics", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut r = BufReader::new(child.stderr.take().unwrap());
        let mut metrics = String::new();
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            assert!(r.read_line(&mut line).unwrap() > 0, "the bridge did not come up: {seen}");
            seen += &line;
            if let Some(m) = line.trim().strip_prefix("sluice: metrics at http://") {
                metrics = m.trim_end_matches("/metrics").to_owned();
            }
            if line.starts_with("sluice: bridging") {
                break;
            }
        }
        let lines = Arc::new(Mutex::new(seen.lines().map(str::to_owned).collect::<Vec<_>>()));
        let l2 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in r.lines().map_while(Result::ok) {
                l2.lock().unwrap().push(line);
            }
        });
        Bridge { child, lines, metrics }
    }

    fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn scrape(&self) -> String {
        let mut s = std::net::TcpStream::connect(&self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// One series' value from /metrics.
    fn metric(&self, name: &str) -> Option<f64> {
        let out = self.scrape();
        out.lines().find(|l| l.split([' ', '{']).next() == Some(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether one ping from ns_a to 10.77.0.2 is answered.
fn ping(topo: &Topology) -> bool {
    Command::new("ip")
        .args(["netns", "exec", &topo.ns_a.name, "ping", "-c", "1", "-W", "1", "-q", "10.77.0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Polls until `ping(topo) == want`; the time it took.
fn until_ping(topo: &Topology, want: bool, limit: Duration, bridge: &Bridge) -> Duration {
    let started = Instant::now();
    while ping(topo) != want {
        assert!(started.elapsed() < limit, "ping still {} after {limit:?}: {}", !want, bridge.stderr());
    }
    started.elapsed()
}

/// Addresses on the far ends, so ping crosses the bridge.
fn addressed(tag: &str) -> Topology {
    let topo = Topology::new(tag);
    run(&["ip", "-n", &topo.ns_a.name, "addr", "add", "10.77.0.1/24", "dev", &topo.a.far]);
    run(&["ip", "-n", &topo.ns_b.name, "addr", "add", "10.77.0.2/24", "dev", &topo.b.far]);
    topo
}

#[test]
fn crowdsec_decisions_are_enforced_and_lifted() {
    if !live_or_skip("crowdsec_decisions_are_enforced_and_lifted") {
        return;
    }
    let Some(bin) = crowdsec_or_skip("crowdsec_decisions_are_enforced_and_lifted") else { return };
    let mut lapi = Lapi::new(bin);
    let key = lapi.bouncer_key("sluice");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let topo = addressed("cs");
    let sock = lapi.dir.path().join("ctl.sock");
    let interval = 1.0;
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--crowdsec-url",
        &lapi.url,
        "--crowdsec-key-file",
        p(&key),
        "--crowdsec-interval",
        "1",
        "--control",
        p(&sock),
    ]);
    let bound = Duration::from_secs_f64(interval + 1.0);
    assert!(until_ping(&topo, true, Duration::from_secs(10), &bridge) < Duration::from_secs(10));
    assert!(!bridge.stderr().contains("readable by group or others"), "{}", bridge.stderr());

    // An IP decision: enforced within the interval + 1 s (measured by the
    // set's state, then seen on the wire), lifted when deleted.
    let test = |addr: &str| {
        let out = Command::new(SLUICE)
            .args(["ctl", "--json", "--socket", p(&sock), "test", "crowdsec", addr])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["match"] == true
    };
    let wait_set = |addr: &str, want: bool| {
        let started = Instant::now();
        while test(addr) != want {
            assert!(started.elapsed() < Duration::from_secs(15), "{addr} never {want}: {}", bridge.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    };
    lapi.cscli(&["decisions", "add", "--ip", "10.77.0.1", "--duration", "1h"]);
    let took = wait_set("10.77.0.1", true);
    println!("ip decision enforced {took:?} after cscli returned");
    assert!(took <= bound, "enforced after {took:?}, over the interval + 1 s");
    until_ping(&topo, false, Duration::from_secs(3), &bridge);
    lapi.cscli(&["decisions", "delete", "--ip", "10.77.0.1"]);
    let took = wait_set("10.77.0.1", false);
    assert!(took <= bound, "lifted after {took:?}");
    until_ping(&topo, true, Duration::from_secs(3), &bridge);

    // A range.
    lapi.cscli(&["decisions", "add", "--range", "10.77.0.0/24", "--duration", "1h"]);
    let took = wait_set("10.77.0.1", true);
    assert!(took <= bound, "range enforced after {took:?}");
    until_ping(&topo, false, Duration::from_secs(3), &bridge);
    lapi.cscli(&["decisions", "delete", "--range", "10.77.0.0/24"]);
    wait_set("10.77.0.1", false);
    until_ping(&topo, true, Duration::from_secs(3), &bridge);

    // The LAPI goes away: enforcement goes on, up goes 0, then 1.
    lapi.cscli(&["decisions", "add", "--ip", "10.77.0.1", "--duration", "1h"]);
    wait_set("10.77.0.1", true);
    assert_eq!(bridge.metric("sluice_crowdsec_up"), Some(1.0));
    lapi.kill();
    let end = Instant::now() + Duration::from_secs(10);
    while bridge.metric("sluice_crowdsec_up") != Some(0.0) {
        assert!(Instant::now() < end, "up did not go 0: {}", bridge.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!ping(&topo), "still dropped while the LAPI is down");
    assert!(bridge.stderr().contains("crowdsec: pull 1 failed"), "{}", bridge.stderr());
    lapi.start();
    let end = Instant::now() + Duration::from_secs(20);
    while bridge.metric("sluice_crowdsec_up") != Some(1.0) {
        assert!(Instant::now() < end, "up did not come back: {}", bridge.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!ping(&topo), "the decision is still enforced after the LAPI came back");
    assert!(bridge.metric("sluice_crowdsec_pulls_total").is_some());

    // The Grafana dashboard queries only metrics this bridge serves (it
    // runs the bouncer and the control socket, so with one change through
    // the socket every family is there).
    let out = Command::new(SLUICE)
        .args(["ctl", "--socket", p(&sock), "add", "crowdsec", "203.0.113.250", "timeout", "60"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/grafana/sluice.json")).unwrap(),
    )
    .unwrap();
    let served: std::collections::BTreeSet<String> = bridge
        .scrape()
        .lines()
        .filter(|l| l.starts_with("sluice_"))
        .filter_map(|l| l.split([' ', '{']).next().map(str::to_owned))
        .collect();
    let mut queried = std::collections::BTreeSet::new();
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("sluice_") {
                let name: String = expr[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                queried.insert(name);
            }
        }
    }
    let missing: Vec<&String> = queried.iter().filter(|q| !served.contains(*q)).collect();
    assert!(queried.len() >= 15, "the dashboard queries {queried:?}");
    assert!(missing.is_empty(), "the dashboard queries {missing:?}, which the bridge does not serve: {served:?}");
}

/// The safety net under a real LAPI's decisions: `cscli decisions add
/// --range 0.0.0.0/1` (wider than --min-prefix-v4's /8) and a range holding
/// a --never-block address are refused by the bouncer, skipped and counted,
/// while a decision beside them is enforced; traffic of the never-blocked
/// address still crosses.
#[test]
fn crowdsec_bans_the_safety_net_refuses_are_skipped_and_counted() {
    if !live_or_skip("crowdsec_bans_the_safety_net_refuses_are_skipped_and_counted") {
        return;
    }
    let Some(bin) = crowdsec_or_skip("crowdsec_bans_the_safety_net_refuses_are_skipped_and_counted") else { return };
    let lapi = Lapi::new(bin);
    let key = lapi.bouncer_key("sluice");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let never = lapi.dir.path().join("never.txt");
    std::fs::write(&never, "10.77.0.1\n").unwrap();
    let topo = addressed("csn");
    let sock = lapi.dir.path().join("ctl.sock");
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--crowdsec-url",
        &lapi.url,
        "--crowdsec-key-file",
        p(&key),
        "--crowdsec-interval",
        "0.5",
        "--control",
        p(&sock),
        "--never-block",
        p(&never),
    ]);
    until_ping(&topo, true, Duration::from_secs(10), &bridge);
    lapi.cscli(&["decisions", "add", "--range", "0.0.0.0/1", "--duration", "1h"]);
    lapi.cscli(&["decisions", "add", "--range", "10.77.0.0/24", "--duration", "1h"]);
    lapi.cscli(&["decisions", "add", "--ip", "192.0.2.9", "--duration", "1h"]);
    let test = |addr: &str| {
        let out = Command::new(SLUICE)
            .args(["ctl", "--json", "--socket", p(&sock), "test", "crowdsec", addr])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["match"] == true
    };
    let end = Instant::now() + Duration::from_secs(15);
    while !test("192.0.2.9") {
        assert!(Instant::now() < end, "the decision beside them was never applied: {}", bridge.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    let series = |reason: &str| format!("sluice_set_refused_total{{set=\"crowdsec\",reason=\"{reason}\"}}");
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let scrape = bridge.scrape();
        let n =
            |name: &str| scrape.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0);
        if n(&series("min_prefix")) >= 1.0 && n(&series("never_block")) >= 1.0 {
            assert!(scrape.contains(r#"action="refused""#), "{scrape}");
            break;
        }
        assert!(Instant::now() < end, "the refusals were not counted: {scrape}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!test("1.2.3.4") && !test("100.1.2.3") && !test("10.77.0.1"), "neither range is in the set");
    assert!(ping(&topo), "the never-blocked address still crosses");
    let log = bridge.stderr();
    assert!(log.contains("refused 0.0.0.0/1 (crowdsec decision for set `crowdsec`): it is wider than /8"), "{log}");
    assert!(
        log.contains("refused 10.77.0.0/24 (crowdsec decision for set `crowdsec`): it overlaps 10.77.0.1/32"),
        "{log}"
    );
}

/// `/metrics` parsed by Python's `prometheus_client` (the OpenMetrics
/// parser, as the bridge serves OpenMetrics): each sample's name and
/// labels (sorted) as a JSON line; None when /usr/bin/python3
/// has no `prometheus_client` (a failure under `SLUICE_REQUIRE_TOOLS=1`).
fn parsed_by_prometheus(body: &str) -> Option<Vec<String>> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append(json.dumps([s.name, sorted(s.labels.items())]))
print("\n".join(out))
"#;
    let has = Command::new("/usr/bin/python3").args(["-c", "import prometheus_client"]).output();
    if !has.is_ok_and(|o| o.status.success()) {
        if std::env::var("SLUICE_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
            panic!("prometheus_client is required: apt-get install python3-prometheus-client");
        }
        println!("SKIPPED: the Prometheus parser check: /usr/bin/python3 has no prometheus_client");
        return None;
    }
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused /metrics: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect())
}

#[test]
fn lapi_strings_cannot_forge_metrics() {
    if !live_or_skip("lapi_strings_cannot_forge_metrics") {
        return;
    }
    let Some(bin) = crowdsec_or_skip("lapi_strings_cannot_forge_metrics") else { return };
    let lapi = Lapi::new(bin);
    // Left as written (0644): a warning at start names it and its mode.
    let key = lapi.bouncer_key("sluice");
    let topo = addressed("csm");
    let sock = lapi.dir.path().join("ctl.sock");
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--crowdsec-url",
        &lapi.url,
        "--crowdsec-key-file",
        p(&key),
        "--crowdsec-interval",
        "0.5",
        "--control",
        p(&sock),
    ]);
    assert!(
        bridge.stderr().contains(&format!("--crowdsec-key-file {}: mode 0644, readable by group or others", p(&key))),
        "{}",
        bridge.stderr()
    );
    let forge = "\"} 1\nsluice_forged_total{a=\"b\"} 2\n# EOF\n";
    lapi.cscli(&["decisions", "add", "--ip", "192.0.2.7", "--type", &format!("ban{forge}"), "--reason", forge]);
    // Too long to be a decision: skipped and counted, the rest applies.
    // (The stream carries scopes Ip and Range only, as the LAPI filters by
    // `scopes`, default `ip,range`: a scope or a value of another scope
    // never reaches the bridge, so the type is what is long here.)
    let long = "x".repeat(300);
    lapi.cscli(&["decisions", "add", "--ip", "192.0.2.8", "--type", &long]);
    lapi.cscli(&["decisions", "add", "--ip", "192.0.2.9", "--duration", "1h"]);
    let series = |action: &str, kind: &str, scope: &str| {
        format!(
            r#"["sluice_crowdsec_decisions_total", [["action", "{action}"], ["origin", "cscli"], ["scope", "{scope}"], ["type", "{kind}"]]]"#
        )
    };
    let want = [series("ignored", "other", "Ip"), series("oversized", "other", "Ip"), series("added", "ban", "Ip")];
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let scrape = bridge.scrape();
        let body = scrape.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(!body.contains("\nsluice_forged"), "{body}");
        let Some(samples) = parsed_by_prometheus(body) else { return };
        assert!(!samples.iter().any(|s| s.contains("sluice_forged")), "{samples:#?}");
        if want.iter().all(|w| samples.contains(w)) {
            break;
        }
        assert!(Instant::now() < end, "never all of {want:#?} in {samples:#?}\n{}", bridge.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(bridge.stderr().contains("skipped 1 decision(s) with a field over 256 bytes"), "{}", bridge.stderr());
    let out = Command::new(SLUICE)
        .args(["ctl", "--json", "--socket", p(&sock), "test", "crowdsec", "192.0.2.9"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["match"], true, "the decision beside the junk is enforced: {v}");
}

/// The firewall bouncer's config, laid out as Debian's package lays it:
/// the shipped file (its firewall and log keys, `mode: ${BACKEND}` and
/// `api_key: ${API_KEY}` left for the installer), and the key and the mode
/// in FILE.local, mode 0600.
fn firewall_bouncer_config(dir: &Path, url: &str, key: &str, extra: &str) -> std::path::PathBuf {
    let config = dir.join("crowdsec-firewall-bouncer.yaml");
    std::fs::write(
        &config,
        format!(
            "mode: ${{BACKEND}}\nupdate_frequency: 500ms\nlog_mode: file\nlog_dir: /var/log/\nlog_level: info\n\
             api_url: {url}/\napi_key: ${{API_KEY}}\ninsecure_skip_verify: false\ndisable_ipv6: false\n\
             deny_action: DROP\ndeny_log: false\nsupported_decisions_types:\n  - ban\n{extra}\
             blacklists_ipv4: crowdsec-blacklists\nblacklists_ipv6: crowdsec6-blacklists\n\
             nftables:\n  ipv4:\n    enabled: true\n    table: crowdsec\n    chain: crowdsec-chain\n\
             prometheus:\n  enabled: false\n  listen_addr: 127.0.0.1\n  listen_port: 60601\n"
        ),
    )
    .unwrap();
    let local = dir.join("crowdsec-firewall-bouncer.yaml.local");
    std::fs::write(&local, format!("mode: nftables\napi_key: {key}\n")).unwrap();
    std::fs::set_permissions(&local, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    config
}

/// `--crowdsec-config` alone makes the bridge the bouncer the firewall
/// bouncer's config describes: its URL, its key (from FILE.local), its
/// `update_frequency` and its `supported_decisions_types` (here `captcha`
/// too, as a file may say); decisions added with cscli are enforced and
/// lifted as with --crowdsec-url, and the key is nowhere in the log.
#[test]
fn crowdsec_config_of_the_firewall_bouncer_is_enough() {
    if !live_or_skip("crowdsec_config_of_the_firewall_bouncer_is_enough") {
        return;
    }
    let Some(bin) = crowdsec_or_skip("crowdsec_config_of_the_firewall_bouncer_is_enough") else { return };
    let lapi = Lapi::new(bin);
    let key = lapi.cscli(&["bouncers", "add", "firewall-bouncer", "-o", "raw"]).trim().to_owned();
    let config = firewall_bouncer_config(lapi.dir.path(), &lapi.url, &key, "  - captcha\n");
    let topo = addressed("csc");
    let sock = lapi.dir.path().join("ctl.sock");
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--crowdsec-config",
        p(&config),
        "--control",
        p(&sock),
    ]);
    until_ping(&topo, true, Duration::from_secs(10), &bridge);
    let log = bridge.stderr();
    assert!(log.contains(&format!("crowdsec bouncer pulling {}/ every 500ms", lapi.url)), "{log}");
    assert!(
        log.contains(&format!(
            "--crowdsec-config {}: ignored, as they set up the firewall bouncer's own firewall, logs or process: \
             mode, log_mode, log_dir, log_level, disable_ipv6, deny_action, deny_log, blacklists_ipv4, \
             blacklists_ipv6, nftables, prometheus",
            p(&config)
        )),
        "{log}"
    );
    assert!(!log.contains("readable by group or others"), "{log}");
    let test = |addr: &str| {
        let out = Command::new(SLUICE)
            .args(["ctl", "--json", "--socket", p(&sock), "test", "crowdsec", addr])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["match"] == true
    };
    let wait_set = |addr: &str, want: bool| {
        let started = Instant::now();
        while test(addr) != want {
            assert!(started.elapsed() < Duration::from_secs(15), "{addr} never {want}: {}", bridge.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    };
    let bound = Duration::from_secs_f64(0.5 + 1.0);
    lapi.cscli(&["decisions", "add", "--ip", "10.77.0.1", "--duration", "1h"]);
    let took = wait_set("10.77.0.1", true);
    assert!(took <= bound, "enforced after {took:?}, over update_frequency + 1 s");
    until_ping(&topo, false, Duration::from_secs(3), &bridge);
    lapi.cscli(&["decisions", "delete", "--ip", "10.77.0.1"]);
    wait_set("10.77.0.1", false);
    until_ping(&topo, true, Duration::from_secs(3), &bridge);
    // A type the file's supported_decisions_types names.
    lapi.cscli(&["decisions", "add", "--ip", "10.77.0.1", "--duration", "1h", "--type", "captcha"]);
    wait_set("10.77.0.1", true);
    until_ping(&topo, false, Duration::from_secs(3), &bridge);
    lapi.cscli(&["decisions", "delete", "--ip", "10.77.0.1"]);
    wait_set("10.77.0.1", false);
    assert!(!bridge.stderr().contains(&key), "the API key is in the log");
}

/// What the bouncer's config cannot be is said before anything opens
/// (no root, no LAPI needed), naming the file and line, never the key;
/// the flags given win over the file.
#[test]
fn crowdsec_config_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = "sEcReT0123456789";
    let config = firewall_bouncer_config(dir.path(), "http://127.0.0.1:9", key, "");
    let run = |extra: &[&str]| {
        let out = Command::new(SLUICE)
            .args(["bridge", "--iface", "sluice-none0", "--iface", "sluice-none1", "--crowdsec-config", p(&config)])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A typo in the local file.
    let local = dir.path().join("crowdsec-firewall-bouncer.yaml.local");
    std::fs::write(&local, format!("mode: nftables\napi_key: {key}\nupdate_frequncy: 1s\n")).unwrap();
    let err = run(&[]);
    assert!(
        err.contains(&format!(
            "--crowdsec-config {}:3: unknown key `update_frequncy` (did you mean `update_frequency`?)",
            p(&local)
        )),
        "{err}"
    );
    std::fs::write(&local, format!("mode: nftables\napi_key: {key}\nupdate_frequency: 10\n")).unwrap();
    let err = run(&[]);
    assert!(
        err.contains(&format!("--crowdsec-config {}:3: `update_frequency`: \"10\" is not a Go duration", p(&local))),
        "{err}"
    );
    // insecure_skip_verify is refused over https; over http it means
    // nothing, and the start gets as far as the interfaces (which do not
    // exist).
    std::fs::write(&local, format!("mode: nftables\napi_key: {key}\ninsecure_skip_verify: true\n")).unwrap();
    let err = run(&["--crowdsec-url", "https://127.0.0.1:9"]);
    assert!(
        err.contains(&format!("--crowdsec-config {}:3: `insecure_skip_verify: true` is refused", p(&local))),
        "{err}"
    );
    let err = run(&[]);
    assert!(err.contains("insecure_skip_verify: true means nothing over http://127.0.0.1:9/"), "{err}");
    assert!(err.contains("sluice-none0"), "{err}");
    // Both a key and a certificate: refused, as the bouncer refuses them.
    std::fs::write(&local, format!("api_key: {key}\ncert_path: /c.pem\nkey_path: /k.pem\n")).unwrap();
    let err = run(&["--crowdsec-url", "https://127.0.0.1:9"]);
    assert!(err.contains(&format!("--crowdsec-config {}:1: `api_key` and a client certificate", p(&local))), "{err}");
    // A key file given replaces the file's credential whole.
    let key_file = dir.path().join("sluice.key");
    std::fs::write(&key_file, "other").unwrap();
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let err = run(&["--crowdsec-key-file", p(&key_file)]);
    assert!(!err.contains("error: --crowdsec-config"), "{err}");
    assert!(err.contains("sluice-none0"), "{err}");
    assert!(!err.contains(key), "{err}");
}
