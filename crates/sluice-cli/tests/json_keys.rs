//! docs/json.md is the promise scripts rely on: every key it lists for
//! `filter --json` is in what filter prints (the bridge's are checked by
//! tests/bridge.rs on a live bed).

mod common;
use common::*;

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
