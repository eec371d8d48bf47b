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
    // And the dependent-load latency beyond it, beside the seed's ~50 ns.
    let chase = rows.iter().find(|r| r["scenario"] == "probe-chase").expect("probe-chase row");
    assert!(chase["ns_per_load"].as_f64().unwrap() > 1.0, "{chase}");
    assert_eq!(chase["seed_ns_per_load"], 50.0);
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
        // Each round's rate, one per repetition, within min and max.
        let reps = r["mpps_reps"].as_array().expect("mpps_reps");
        assert_eq!(reps.len() as u64, r["reps"].as_u64().unwrap(), "{r}");
        assert!(reps.iter().all(|v| (min..=max).contains(&v.as_f64().unwrap())), "{r}");
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

#[test]
fn bench_classify_measures_prefix_lists_of_either_family_and_list_files() {
    // Issue 23: generated routing-table and blocklist mixes, IPv4 and IPv6,
    // with half the addresses inside a listed prefix.
    for v6 in [false, true] {
        let mut args =
            vec!["--structure", "sluice-prefix,prefix-trie", "--prefix-dist", "bgp,blocklist", "--listed", "0.5"];
        if v6 {
            args.push("--ipv6");
        }
        let rows = small_classify(&args);
        assert_eq!(rows.len(), 4, "{rows:?}");
        for r in &rows {
            assert_eq!(r["ipv6"], v6, "{r}");
            assert!(["bgp", "blocklist"].contains(&r["prefix_dist"].as_str().unwrap()), "{r}");
            // Half the addresses listed, the other half random: at least 3 packets in 4 dropped.
            assert!(r["drop_share"].as_f64().unwrap() >= 0.7, "{r}");
        }
        // sluice and the prefix-trie crate agree on every verdict of the same traffic.
        for dist in ["bgp", "blocklist"] {
            let share = |s: &str| {
                rows.iter().find(|r| r["structure"] == s && r["prefix_dist"] == dist).unwrap()["drop_share"]
                    .as_f64()
                    .unwrap()
            };
            assert_eq!(share("sluice-prefix"), share("prefix-trie"), "{dist}");
        }
    }
    // A list file: its entries of the family, named in the row.
    let dir = std::env::temp_dir().join(format!("sluice-bench-prefixes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("list.txt");
    std::fs::write(&list, "10.0.0.0/8\n192.0.2.0/24\n198.51.100.7\n2001:db8::/32\n").unwrap();
    let rows = small_classify(&["--structure", "sluice-prefix", "--prefixes", common::p(&list), "--listed", "1"]);
    assert_eq!(rows[0]["entries"], 3, "{}", rows[0]);
    assert_eq!(rows[0]["drop_share"], 1.0, "{}", rows[0]);
    assert!(rows[0]["scenario"].as_str().unwrap().ends_with("-file"));
    let rows = small_classify(&["--structure", "sluice-prefix", "--prefixes", common::p(&list), "--ipv6"]);
    assert_eq!(rows[0]["entries"], 1);
    // A file without entries of the family, or not there: a clear error.
    std::fs::write(&list, "2001:db8::/32\n").unwrap();
    let out =
        common::bench(&["classify", "--structure", "sluice-prefix", "--prefixes", common::p(&list), "--no-probe"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no IPv4 entries"), "{err}");
    let out =
        common::bench(&["classify", "--structure", "sluice-prefix", "--prefixes", "/nonexistent/list", "--no-probe"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/list"));
    std::fs::remove_dir_all(&dir).unwrap();
}
