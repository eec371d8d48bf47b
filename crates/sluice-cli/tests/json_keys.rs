//! docs/json.md is the promise scripts rely on: every key it lists for
//! `filter --json` is in what filter prints (the bridge's are checked by
//! tests/bridge.rs on a live bed).

mod common;
use common::*;
use std::collections::BTreeSet;

#[test]
fn filter_json_has_every_documented_key() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("g.pcap");
    ok(&["gen", "--count", "2000", "--listed", "0.2", "--frag", "0.1", "--out", p(&capture)]);
    let list = firehol_file(dir.path());
    let out = ok(&["filter", "--in", p(&capture), "--drop-any", p(&list), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_documented_keys("sluice filter --json", &v);
    // The counters drift used to lose (issue 19): present, and consistent.
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(
        n("dropped"),
        n("dropped_by_src")
            + n("dropped_by_dst")
            + n("dropped_by_rule")
            + n("dropped_by_default")
            + n("dropped_fragments"),
        "{v}"
    );
}

#[test]
fn the_key_lists_are_read_from_the_doc() {
    let filter = documented_keys("sluice filter --json");
    assert!(filter.contains(&"dropped_by_default".to_owned()) && filter.contains(&"passed_bytes".to_owned()));
    assert!(documented_keys("sluice bridge --json").contains(&"per_port".to_owned()));
}

/// The top-level keys of `v`.
fn top_keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// `printed` and the keys docs/json.md lists under `command`: each printed
/// key is listed, and each listed key printed unless `absent_here` says
/// why it is not in this run.
fn same_keys(command: &str, printed: &BTreeSet<String>, extra_listed: &[&str], absent_here: &[&str]) {
    let listed: BTreeSet<String> =
        documented_keys(command).into_iter().chain(extra_listed.iter().map(|s| s.to_string())).collect();
    let unlisted: Vec<_> = printed.difference(&listed).collect();
    let unprinted: Vec<_> = listed.difference(printed).filter(|k| !absent_here.contains(&k.as_str())).collect();
    assert!(unlisted.is_empty(), "`{command}` prints {unlisted:?}, not in docs/json.md");
    assert!(unprinted.is_empty(), "docs/json.md lists {unprinted:?} under `{command}`, not printed");
}

/// A list of names kept by a crate's tests/names.rs (`a.b` paths): the
/// top-level ones.
fn listed_names(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    text.lines().filter(|l| !l.contains('.') && !l.contains('[') && !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn every_printed_key_is_documented_and_every_documented_key_printed() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("g.pcap");
    let gen = ok(&[
        "gen",
        "--count",
        "500",
        "--frag",
        "0.1",
        "--encap",
        "vxlan",
        "--encap-share",
        "0.3",
        "--out",
        p(&capture),
        "--json",
    ]);
    same_keys("sluice gen --json", &top_keys(&serde_json::from_str(&gen).unwrap()), &[], &[]);

    let list = firehol_file(dir.path());
    let filter = ok(&["filter", "--in", p(&capture), "--drop-any", p(&list), "--json"]);
    let filter_keys = top_keys(&serde_json::from_str(&filter).unwrap());
    // `samples` needs --sample-drops (checked in tests/sample.rs).
    same_keys("sluice filter --json", &filter_keys, &[], &["samples"]);

    let out = dir.path().join("c.sluice");
    let c = ok(&["compile", "--drop-src", p(&list), "--out", p(&out), "--json"]);
    same_keys("sluice compile --json", &top_keys(&serde_json::from_str(&c).unwrap()), &[], &[]);
    let i = ok(&["inspect", p(&out), "--json"]);
    same_keys("sluice inspect --json", &top_keys(&serde_json::from_str(&i).unwrap()), &[], &[]);
    let r = ok(&["rss", "--src", "192.0.2.1", "--dst", "198.51.100.2", "--json"]);
    same_keys("sluice rss --json", &top_keys(&serde_json::from_str(&r).unwrap()), &[], &[]);

    // decode: one object per packet; every key printed is listed.
    let d = ok(&["decode", "--in", p(&capture), "--json"]);
    let mut printed = BTreeSet::new();
    for line in d.lines() {
        printed.extend(top_keys(&serde_json::from_str(line).unwrap()));
    }
    // Keys of packets this capture has none of: damaged, non-IP, anomalous.
    let rare = ["error", "ethertype", "anomaly", "inner_sport", "inner_dport"];
    same_keys("sluice decode --json", &printed, &[], &rare);

    // The bridge and the guard: their lists, kept by the crates' own tests
    // from a running bridge (in memory) and guard.
    let bridge = listed_names("sluice-bridge/tests/names/bridge-json.txt");
    // A per-queue bridge's lanes (AF_XDP only: tests/bridge.rs).
    let lanes = ["per_lane", "per_queue", "fragments_resteered", "fragments_resteer_full"];
    let from_filter: Vec<String> = documented_keys("sluice filter --json")
        .into_iter()
        .filter(|k| !["input", "input_format", "stopped_at", "interrupted"].contains(&k.as_str()))
        .collect();
    let from_filter: Vec<&str> = from_filter.iter().map(String::as_str).collect();
    same_keys("sluice bridge --json", &bridge, &from_filter, &lanes);
    let guard = listed_names("sluice-guard/tests/names/guard-json.txt");
    same_keys("sluice http-guard --json", &guard, &[], &[]);
}
