//! `sluice compile` / `inspect`, and compiled files loaded by `filter`:
//! the same verdicts and counters as the text they came from; damage refused.

mod common;
use common::*;
use serde_json::Value;

fn filter_json(args: &[&str]) -> Value {
    let mut v: Value = serde_json::from_str(&ok(args)).unwrap();
    // Timing and the input's path differ from run to run.
    for k in ["elapsed_s", "mpps", "input"] {
        v[k] = Value::Null;
    }
    v
}

#[test]
fn compiled_rules_and_lists_judge_like_their_text() {
    let dir = tempfile::tempdir().unwrap();
    let fh = firehol_file(dir.path());
    let capture = dir.path().join("in.pcap");
    ok(&[
        "gen",
        "--out",
        p(&capture),
        "--count",
        "20000",
        "--seed",
        "3",
        "--ipv6",
        "0.2",
        "--vlan",
        "0.1",
        "--listed",
        "0.2",
    ]);
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "set fh from \"firehol_level1.netset\"\nset few { 10.0.0.0/8, 2001:db8::/32 }\ncount proto udp\npass tcp dport 0-1023\ndrop saddr @fh\ndrop daddr @few\ndefault pass\n",
    )
    .unwrap();
    let snap = dir.path().join("r.snap");
    let out: Value = serde_json::from_str(&ok(&["compile", "--rules", p(&rules), "-o", p(&snap), "--json"])).unwrap();
    assert_eq!(out["rules"], 4);
    let text = filter_json(&["filter", "--in", p(&capture), "--rules", p(&rules), "--json"]);
    let compiled = filter_json(&["filter", "--in", p(&capture), "--rules", p(&snap), "--json"]);
    assert_eq!(text, compiled, "a compiled file judges exactly like its text");
    assert!(text["dropped"].as_u64().unwrap() > 1000);

    // The shorthands compile too.
    let snap2 = dir.path().join("fh.snap");
    ok(&["compile", "--drop-src", p(&fh), "-o", p(&snap2)]);
    let a = filter_json(&["filter", "--in", p(&capture), "--drop-src", p(&fh), "--json"]);
    let b = filter_json(&["filter", "--in", p(&capture), "--rules", p(&snap2), "--json"]);
    assert_eq!(a, b);

    // inspect shows the sets and the rule file.
    let shown = ok(&["inspect", p(&snap)]);
    assert!(shown.contains("checksum good") && shown.contains("fh") && shown.contains("drop saddr @fh"), "{shown}");
    let j: Value = serde_json::from_str(&ok(&["inspect", p(&snap), "--json"])).unwrap();
    assert_eq!(j["meta"]["sets"][0]["name"], "fh");

    // Damage is refused: a flipped byte anywhere, a truncation.
    let bytes = std::fs::read(&snap).unwrap();
    for at in [40, bytes.len() / 3, bytes.len() / 2, bytes.len() - 3] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        let damaged = dir.path().join("damaged.snap");
        std::fs::write(&damaged, &bad).unwrap();
        let r = sluice(&["filter", "--in", p(&capture), "--rules", p(&damaged)]);
        assert!(!r.status.success(), "flipped byte {at} accepted");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("refused"), "{err}");
        assert!(!sluice(&["inspect", p(&damaged)]).status.success());
    }
    let cut = dir.path().join("cut.snap");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let r = sluice(&["filter", "--in", p(&capture), "--rules", p(&cut)]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("truncated"), "{}", String::from_utf8_lossy(&r.stderr));
}

/// `compile --json` and `inspect --json` give a set the same size (both
/// read it from the file written), and lists whose entries carry a timeout
/// are named when they cannot be compiled.
#[test]
fn compile_and_inspect_agree_and_timeouts_name_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("l.txt");
    std::fs::write(&list, "10.0.0.0/8\n192.0.2.1\n2001:db8::/32\n").unwrap();
    let out = dir.path().join("c.sluice");
    let c: Value = serde_json::from_str(&ok(&["compile", "--drop-src", p(&list), "--out", p(&out), "--json"])).unwrap();
    let i: Value = serde_json::from_str(&ok(&["inspect", p(&out), "--json"])).unwrap();
    assert_eq!(c["sets"], i["meta"]["sets"], "compile: {c}\ninspect: {i}");
    assert_eq!(c["sets"][0]["entries"], 3);
    let timed = dir.path().join("timed.txt");
    std::fs::write(&timed, "create x hash:net\nadd x 198.51.100.0/24 timeout 30\n").unwrap();
    let (code, _, err) = stderr_of(&["compile", "--drop-src", p(&list), "--drop-dst", p(&timed), "--out", p(&out)]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("{}: 1 list entries carry a timeout", timed.display())), "{err}");
    assert!(!err.contains(p(&list)), "only the list with timeouts is named: {err}");
}
