//! `sluice-bench rules` and `sluice-bench load` at small sizes: the JSON
//! keys the README names, both sides agreeing where they must, and `--pmc`
//! giving each side its counters.

mod common;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let out = common::bench(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_rules_reports_both_sides_and_their_counters() {
    let v = json(&["rules", "--packets", "20000", "--reps", "1", "--json", "--pmc"]);
    assert!(v["address_only_mpps"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["rules_mpps"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["rules"], 100, "{v}");
    for side in ["address_only", "rules"] {
        assert!(v["pmc"][side]["sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{v}");
    }
}

#[test]
fn bench_load_compiled_answers_as_the_text_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let v = json(&["load", "--entries", "20000", "--reps", "1", "--dir", d, "--json", "--pmc"]);
    assert_eq!(v["same_verdicts"], true, "{v}");
    assert!(v["compiled_ms"].as_f64().unwrap() > 0.0, "{v}");
    for side in ["text", "compiled"] {
        assert!(v["pmc"][side]["sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{v}");
    }
}

#[test]
fn bench_origins_drops_alike_and_counts_every_tagged_drop() {
    // The bench itself refuses to report when the two sides dropped
    // differently or a tagged drop went uncounted.
    let v = json(&["origins", "--packets", "20000", "--elements", "2000", "--lengths", "3", "--reps", "1", "--json"]);
    assert!(v["untagged_mpps"].as_f64().unwrap() > 0.0 && v["tagged_mpps"].as_f64().unwrap() > 0.0, "{v}");
    let by_origin: u64 = v["drops_by_origin"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(by_origin, v["dropped"].as_u64().unwrap(), "{v}");
    assert!(v["dropped"].as_u64().unwrap() > 5_000, "about half the packets are from the set: {v}");
}

#[test]
fn bench_flowspec_reports_every_part() {
    // gobgpd is a CI tool: its part runs there (3 adds), and nft's as root.
    let v = json(&[
        "flowspec",
        "--packets",
        "20000",
        "--flows",
        "100",
        "--install",
        "500",
        "--announce",
        "3",
        "--reps",
        "1",
        "--json",
    ]);
    for base in ["no_rules", "blocklist"] {
        let b = &v["judge"]["bases"][base];
        assert!(b["with_mpps"].as_f64().unwrap() > 0.0 && b["with_over_without"].as_f64().unwrap() > 0.0, "{v}");
        assert!(b["dropped_by_flows"].as_u64().unwrap() > 0, "the flows meet some of the traffic: {v}");
    }
    assert_eq!(v["install"]["flows"], 500, "{v}");
    assert!(v["install"]["installed_ms"].as_f64().unwrap() > 0.0, "{v}");
    if std::env::var("SLUICE_REQUIRE_TOOLS").is_ok() {
        assert!(v["announce"]["add_to_first_drop_ms"]["median"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["nft"]["nft_f_ms"].as_f64().unwrap() > 0.0, "{v}");
    }
}
