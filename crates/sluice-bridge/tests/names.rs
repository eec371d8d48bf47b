//! The names users rely on: every key of the bridge's `--json` summary and
//! every metric it serves, compared with the lists in `tests/names/` (the
//! names as they were before the counters were redefined; a change to one
//! is a change to a published interface, made on purpose with
//! `SLUICE_BLESS=1`), and with docs/json.md and docs/metrics.md, both ways.

use sluice_testkit::names as support;

use sluice_bridge::{Bridge, BridgeConfig, MemoryPair};
use sluice_policy::RuleSpec;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `names` against the list in `tests/names/FILE`.
fn same_as_listed(names: &BTreeSet<String>, file: &str) {
    support::same_as_listed(names, &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/names").join(file));
}

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A bridge with everything that adds names switched on: rules with a
/// list and a dynamic set, the control socket, drop samples, metrics, and
/// a CrowdSec feed (to a LAPI that is not there: its counters exist), a
/// dry run. (A per-queue bridge's lanes add `per_lane`, `per_queue` and
/// `sluice_queue_*`: AF_XDP only, checked by the veth tests.)
fn run_everything() -> (serde_json::Value, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.txt"), "198.51.100.66\n").unwrap();
    let rules = dir.path().join("r.rules");
    let text = "set bad from \"bad.txt\"\nset crowdsec dynamic\ndrop saddr @bad\ndrop saddr @crowdsec\ndefault pass\n";
    std::fs::write(&rules, text).unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "k\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let crowdsec = sluice_policy::crowdsec::BouncerConfig::from_flags(
        Some("http://127.0.0.1:9"),
        Some(&key),
        &sluice_control::lapi::LapiTls::default(),
        10.0,
        300.0,
        "crowdsec",
        1 << 20,
    )
    .unwrap();
    let sample = sluice_pipeline::sample::SampleConfig {
        pcapng: Some(dir.path().join("drops.pcapng")),
        ..sluice_pipeline::sample::SampleConfig::new()
    };
    let cfg = BridgeConfig {
        control: Some(dir.path().join("ctl.sock")),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        sample: Some(sample),
        crowdsec,
        // A peer that never answers: the session families.
        bgp: sluice_bridge::bgp::BgpFlags {
            peers: vec!["127.0.0.1:9".into()],
            peer_as: vec![65001],
            local_as: Some(65002),
            router_id: Some("192.0.2.2".parse().unwrap()),
            ..sluice_bridge::bgp::BgpFlags::default()
        }
        .config()
        .unwrap(),
        // Its own key and metric (`would_drop`).
        dry_run: true,
        ..BridgeConfig::new(RuleSpec { rules: Some(rules), ..RuleSpec::default() })
    };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    let sock = dir.path().join("ctl.sock");
    let bridge = Bridge::start(cfg, pair).unwrap();
    // A flow, as the BGP feed hands one over: the flow families.
    let flow = sluice_bgp::flowspec::Flow {
        family: sluice_bgp::flowspec::Family::V4,
        components: vec![sluice_bgp::flowspec::Component::Destination(sluice_bgp::flowspec::PrefixMatch::new(
            "203.0.113.0".parse().unwrap(),
            24,
        ))],
    };
    let rule = sluice_engine::flows::FlowRule {
        flow,
        verdict: sluice_engine::flows::FlowVerdict::Drop,
        go_on: false,
        blackhole: true,
        source: "192.0.2.1".into(),
        unsupported: Vec::new(),
        counts: Default::default(),
    };
    let table = sluice_engine::flows::FlowTable::new(vec![rule], Default::default());
    bridge.events().send(sluice_policy::Event::Flows(std::sync::Arc::new(table))).unwrap();
    // A runtime change and a reload: the families they start.
    let r = sluice_control::socket::request(&sock, "add crowdsec 192.0.2.0/24\n", Duration::from_secs(10)).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    bridge.reload("test");
    let mut frame = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    frame.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 51, 100, 66, 192, 0, 2, 1]);
    frame.extend_from_slice(&[0, 53, 0, 53, 0, 8, 0, 0]);
    wire.send(0, &frame);
    wire.send(0, &[0u8; 10]); // undecodable
    let end = Instant::now() + Duration::from_secs(10);
    while bridge.metrics().stats().packets < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let metrics = scrape(bridge.metrics_addr().unwrap());
    // The bridge's part of the text summary (the rest is the run's own).
    let text = bridge.metrics().summary_text(&Default::default(), "memory");
    bridge.stop();
    let summary = bridge.wait().unwrap();
    (summary.json, metrics, text)
}

#[test]
fn the_summary_keys_and_metric_names_are_the_published_ones() {
    let (json, metrics, _) = run_everything();
    let mut keys = BTreeSet::new();
    // Maps keyed by what occurred (reasons): their keys are data.
    support::key_paths(&json, "", &["undecodable_by_reason", "anomalies_by_reason"], &mut keys);
    same_as_listed(&keys, "bridge-json.txt");
    same_as_listed(&support::metric_names(&metrics), "bridge-metrics.txt");
}

/// Every metric the bridge serves, every key of its summary and every line
/// of its part of the text summary has a declaration: a counter set's
/// (`counters!`), or a family or key the bridge lists as written by hand.
#[test]
fn every_metric_key_and_line_is_declared() {
    use sluice_bridge::counters::{BridgeTotals, LaneTotals};
    use sluice_bridge::metrics as m;
    use sluice_bridge::summary::{SUMMARY_KEYS, SUMMARY_LINES};
    let (json, metrics, text) = run_everything();
    let families: BTreeSet<&str> =
        sluice_bridge::counters::declared_families().into_iter().chain(m::dynamic_families()).collect();
    let undeclared: Vec<_> =
        support::metric_names(&metrics).into_iter().filter(|f| !families.contains(f.as_str())).collect();
    assert!(undeclared.is_empty(), "served, declared nowhere: {undeclared:?}");
    // The run's report's keys, the rules' rows and the samples are theirs.
    let report = serde_json::to_value(sluice_pipeline::RunReport::default().to_json()).unwrap();
    let mut names: BTreeSet<&str> = report.as_object().unwrap().keys().map(String::as_str).collect();
    names.extend(["rules", "default", "samples"]);
    let sets = [sluice_bridge::counters::PortTotals::NAMES, LaneTotals::NAMES, BridgeTotals::NAMES, SUMMARY_KEYS];
    names.extend(sets.into_iter().flatten());
    let ports = json["per_port"].as_array().unwrap().iter().flat_map(|p| p.as_object().unwrap().keys());
    let keys = json.as_object().unwrap().keys().chain(ports);
    let undeclared: Vec<_> = keys.filter(|k| !names.contains(k.as_str())).collect();
    assert!(undeclared.is_empty(), "summary keys declared nowhere: {undeclared:?}");
    let undeclared: Vec<_> = text.lines().filter(|l| !SUMMARY_LINES.iter().any(|w| l.starts_with(w))).collect();
    assert!(undeclared.is_empty(), "summary lines declared nowhere: {undeclared:?}");
}

/// docs/metrics.md names every metric the bridge serves (and, through the
/// guard's and the shield's lists, every one they serve), and nothing else.
#[test]
fn docs_metrics_lists_every_served_metric_and_no_other() {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let documented: BTreeSet<String> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("sluice_") && w.len() > "sluice_".len())
        .map(str::to_owned)
        .collect();
    let listed = |f: &str| -> BTreeSet<String> {
        let p = ["../sluice-guard/tests/names", "../sluice-shield/tests/names", "tests/names"]
            .iter()
            .map(|d| Path::new(env!("CARGO_MANIFEST_DIR")).join(d).join(f))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no list {f}"));
        std::fs::read_to_string(p).unwrap().lines().map(str::to_owned).collect()
    };
    let served: BTreeSet<String> =
        ["bridge-metrics.txt", "guard-metrics.txt", "shield-metrics.txt", "shield-bgp-metrics.txt"]
            .iter()
            .flat_map(|f| listed(f))
            .collect();
    // Lanes' families (`--workers auto`) are served over AF_XDP queues only:
    // the veth tests check those.
    let lanes_only: BTreeSet<String> =
        ["sluice_queue_packets", "sluice_queue_rx_packets", "sluice_queue_tx_packets", "sluice_fragments_resteered"]
            .map(str::to_owned)
            .into();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).filter(|n| !lanes_only.contains(*n)).collect();
    assert!(undocumented.is_empty(), "served, not in docs/metrics.md: {undocumented:?}");
    assert!(unserved.is_empty(), "in docs/metrics.md, not served: {unserved:?}");
}
