//! `sluice-bench queue` and `sluice-bench flowtable` at their smallest
//! settings: the JSON rows' shape, the seed's figures beside ours, and the
//! queue's exactly-once check reported.

mod common;
use common::*;
use serde_json::Value;

fn parse(out: &str) -> Vec<Value> {
    out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[test]
fn bench_queue_json_rows_carry_seed_ours_and_the_delivery_check() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("q.svg");
    let out = ok(&[
        "queue",
        "--threads",
        "1x1,2x2",
        "--items",
        "20000",
        "--capacity",
        "64",
        "--reps",
        "2",
        "--json",
        "--svg",
        p(&svg),
    ]);
    let rows = parse(&out);
    let queues: Vec<&Value> = rows.iter().filter(|r| r["row"] == "queue").collect();
    // 5 queues at 1x1 (rtrb only there), 4 at 2x2.
    assert_eq!(queues.len(), 9, "{out}");
    for r in &queues {
        assert_eq!(r["bench"], "queue");
        assert!(r["ours"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r.get("seed").is_some(), "{r}");
        assert_eq!(r["exactly_once"], true, "{r}");
        assert_eq!(r["sent"], 40_000, "{r}");
        assert_eq!(r["delivered"], 40_000, "{r}");
        assert_eq!(r["duplicates"], 0);
        assert_eq!(r["missing"], 0);
    }
    let natsys22 = queues.iter().find(|r| r["queue"] == "natsys" && r["threads"] == "2x2").unwrap();
    assert_eq!(natsys22["seed"], 13.969);
    assert_eq!(queues.iter().find(|r| r["queue"] == "mutex" && r["threads"] == "1x1").unwrap()["seed"], Value::Null);
    let ratio = rows.iter().find(|r| r["row"] == "ratio" && r["ratio"] == "mutex/natsys" && r["threads"] == "2x2");
    let ratio = ratio.expect("mutex/natsys ratio at 2x2");
    assert!((ratio["seed"].as_f64().unwrap() - 4.965).abs() < 0.001);
    assert!(ratio["ours"].as_f64().unwrap() > 0.0);
    let summary = rows.iter().find(|r| r["row"] == "summary").unwrap();
    assert_eq!(summary["exactly_once"], true);
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // --format json is the same as --json.
    let out =
        ok(&["queue", "--threads", "1x1", "--queues", "natsys", "--items", "1000", "--reps", "1", "--format", "json"]);
    assert_eq!(parse(&out).iter().filter(|r| r["row"] == "queue").count(), 1);
}

#[test]
fn bench_flowtable_json_rows_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("f.svg");
    let out = ok(&[
        "flowtable",
        "--flows",
        "1000,4000",
        "--reps",
        "2",
        "--packets",
        "20000",
        "--per-tick",
        "100",
        "--format",
        "json",
        "--svg",
        p(&svg),
    ]);
    let rows = parse(&out);
    let flows: Vec<&Value> = rows.iter().filter(|r| r["row"] == "flowtable").collect();
    // ordered and walk at both sizes, the O(n^2) walk at the quick preset's 10k limit and below.
    assert_eq!(flows.len(), 6, "{out}");
    for r in &flows {
        assert_eq!(r["bench"], "flowtable");
        assert_eq!(r["seed"], Value::Null, "the PMC post has no figures");
        assert!(r["ours"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["live"].as_u64().unwrap() <= r["capacity"].as_u64().unwrap());
    }
    assert!(rows.iter().any(|r| r["row"] == "ratio" && r["ratio"] == "walk/ordered"));
    let summary = rows.iter().find(|r| r["row"] == "summary").unwrap();
    assert!(summary["seed_effect"].is_boolean(), "{summary}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
    // --json is the same as --format json.
    let out = ok(&["flowtable", "--flows", "500", "--reps", "1", "--packets", "2000", "--per-tick", "100", "--json"]);
    assert!(parse(&out).iter().any(|r| r["row"] == "flowtable"));
}

/// `--pmc`: every row carries the counters (software ones at least, which
/// any VM has; the queue's include the threads each run spawns).
#[test]
fn pmc_rows_carry_counters() {
    for args in [
        &["queue", "--threads", "2x2", "--queues", "natsys", "--items", "20000", "--reps", "1", "--json", "--pmc"][..],
        &["flowtable", "--flows", "10000", "--reps", "1", "--json", "--pmc"][..],
    ] {
        let rows = parse(&ok(args));
        let measured: Vec<&Value> = rows.iter().filter(|r| r["row"] == r["bench"]).collect();
        assert!(!measured.is_empty(), "{args:?}");
        for r in measured {
            assert!(r["pmc_sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{args:?}: {r}");
            assert!(r["pmc"].is_object() || r["pmc"].is_null(), "{r}");
        }
    }
}
