//! `sluice-bench classify`: its JSON rows (keys read by checks outside this
//! repository), presets and their scenario flags, on small tables.

mod common;
use common::ok;
use serde_json::Value;

#[test]
fn bench_classify_prints_one_json_object_per_scenario() {
    let out = ok(&[
        "classify",
        "--structure",
        "chained,sluice,hashbrown",
        "--batch",
        "1,4",
        "--prefetch",
        "none,bucket",
        "--entries",
        "20000",
        "--packets",
        "20000",
        "--reps",
        "2",
        "--ring",
        "256",
        "--format",
        "json",
    ]);
    let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let probe = rows.iter().find(|r| r["scenario"] == "probe").expect("probe row");
    assert!(probe["mlines_per_s"].as_f64().unwrap() > 0.0);
    // The cache-resident probe: 8 MiB, its own row.
    let llc = rows.iter().find(|r| r["scenario"] == "probe-llc").expect("probe-llc row");
    assert!(llc["mlines_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(llc["bytes"], 8 << 20);
    // And one beyond the last-level cache: DRAM.
    let dram = rows.iter().find(|r| r["scenario"] == "probe-dram").expect("probe-dram row");
    assert!(dram["mlines_per_s"].as_f64().unwrap() > 0.0);
    assert!(dram["bytes"].as_u64().unwrap() >= 256 << 20);
    let scenarios: Vec<&Value> =
        rows.iter().filter(|r| !r["scenario"].as_str().unwrap().starts_with("probe")).collect();
    // Every structure in every mode given (hashbrown has no prefetch of its
    // own but is still measured in both): 3 structures x 2 batches x 2 modes.
    assert_eq!(scenarios.len(), 12);
    assert!(scenarios.iter().any(|r| r["structure"] == "sluice" && r["prefetch"] == "none"));
    for r in scenarios {
        for key in [
            "scenario",
            "structure",
            "batch",
            "prefetch",
            "stride",
            "entries",
            "threads",
            "mpps_median",
            "mpps_min",
            "mpps_max",
        ] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
        let (min, med, max) =
            (r["mpps_min"].as_f64().unwrap(), r["mpps_median"].as_f64().unwrap(), r["mpps_max"].as_f64().unwrap());
        assert!(min > 0.0 && min <= med && med <= max, "{r}");
    }
}

/// `sluice-bench classify` with `args` on 20k-entry tables, a short run without
/// probes, as JSON rows.
fn small_classify(args: &[&str]) -> Vec<Value> {
    let tail = ["--entries", "20000", "--packets", "4096", "--reps", "1", "--ring", "256", "--no-probe"];
    let all: Vec<&str> = ["classify"].iter().chain(args).chain(&tail).chain(&["--format", "json"]).copied().collect();
    ok(&all).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn bench_classify_preset_applies_scenario_flags_and_reports_the_filter() {
    // Issue 12: a preset with --threads (and the other scenario flags) used
    // to ignore them silently; they now replace the preset's values.
    let rows = small_classify(&["--preset", "quick", "--threads", "1,2", "--filter", "both", "--listed", "0.5"]);
    let get = |n: &str| rows.iter().find(|r| r["scenario"] == n).unwrap_or_else(|| panic!("{n} missing"));
    for (name, threads, filter) in [("sluice-t1", 1, "on"), ("sluice-t2", 2, "on"), ("sluice-t2-nofilter", 2, "off")] {
        let r = get(name);
        assert_eq!(r["threads"], threads, "{r}");
        assert_eq!(r["entries"], 20000, "{r}");
        assert_eq!(r["filter"], filter, "{r}");
        assert_eq!(r["listed_share"], 0.5, "{r}");
        // Half of all addresses listed: about 3 packets in 4 dropped.
        assert!((0.6..0.9).contains(&r["drop_share"].as_f64().unwrap()), "{r}");
    }
    let on = get("sluice-t1");
    assert!(on["filter_bytes"].as_u64().unwrap() > 0, "{on}");
    assert!(on["filter_fpr"].as_f64().unwrap() < 0.05, "{on}");
    assert!(get("sluice-t1-nofilter")["filter_bytes"].is_null());
    assert!(get("hashbrown-t2")["filter"].is_null());
}

#[test]
fn bench_classify_filter_preset_runs_the_grid_and_its_ratios() {
    // Issue 12's grid, on small tables (--entries replaces the preset's sizes).
    let rows = small_classify(&["--preset", "filter"]);
    let get = |n: &str| rows.iter().find(|r| r["scenario"] == n).unwrap_or_else(|| panic!("{n} missing"));
    for tag in ["250k", "1M", "6M", "50M"] {
        assert_eq!(get(&format!("sluice-{tag}"))["filter"], "on");
        assert_eq!(get(&format!("sluice-{tag}-nofilter"))["filter"], "off");
        assert_eq!(get(&format!("hashbrown-{tag}"))["structure"], "hashbrown");
    }
    for (l, share) in [("0.1", 0.001), ("1", 0.01), ("10", 0.1), ("50", 0.5)] {
        let on = get(&format!("sluice-6M-l{l}"));
        assert_eq!(on["listed_share"], share, "{on}");
        assert!(on["filter_fpr"].as_f64().unwrap() < 0.05, "{on}");
        assert_eq!(get(&format!("sluice-6M-l{l}-nofilter"))["listed_share"], share);
    }
    // More listed traffic, more drops: 50% listed drops about 3 packets in 4.
    let drops = |n: &str| get(n)["drop_share"].as_f64().unwrap();
    assert!(drops("sluice-6M-l0.1") < drops("sluice-6M-l10") && drops("sluice-6M-l10") < drops("sluice-6M-l50"));
    assert!((0.6..0.9).contains(&drops("sluice-6M-l50")));
    let ratios = get("ratios");
    let by_row = ratios["filter_on_vs_off_by_row"].as_object().expect("by-row ratios");
    assert_eq!(by_row.len(), 8, "{ratios}");
    assert!(by_row.values().all(|v| v.as_f64().unwrap() > 0.0));
    assert!(ratios["sluice_vs_hashbrown"].as_f64().unwrap() > 0.0);
}
