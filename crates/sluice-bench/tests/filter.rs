//! `sluice-bench filter --json --pmc`: the shape of its report on a small
//! generated capture. No timing is asserted; only that every ratio is a positive finite
//! number and that the sanity check (packets counted = records) holds.

mod common;
use common::*;
use serde_json::Value;

#[test]
fn bench_filter_json_shape() {
    let dir = tempfile::tempdir().unwrap();
    let tcpdump = have_tool("tcpdump");
    let out = ok(&["filter", "--packets", "20000", "--reps", "1", "--json", "--pmc", "--dir", p(dir.path())]);
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"));

    assert_eq!(v["packets"], 20000);
    assert_eq!(v["reps"], 1);
    assert_eq!(v["warmup"], 1);
    assert!(v["bytes"].as_u64().unwrap() > 20000 * 60);
    assert_eq!(v["sanity"]["ok"], true, "{v}");
    assert_eq!(v["sanity"]["filter_packets"], 20000);
    assert_eq!(v["sanity"]["dropped"], v["sanity"]["expected_dropped"]);

    let mut names = vec!["dd", "cp", "filter", "filter_outputs", "filter_map", "filter_workers"];
    if tcpdump {
        names.push("tcpdump");
    } else {
        assert!(v["contenders"]["tcpdump"]["skipped"].is_string(), "{v}");
    }
    for name in names {
        let c = &v["contenders"][name];
        for key in ["median_s", "min_s", "max_s", "mpps", "mb_s"] {
            let x = c[key].as_f64().unwrap_or_else(|| panic!("contenders.{name}.{key} missing: {v}"));
            assert!(x.is_finite() && x > 0.0, "contenders.{name}.{key} = {x}");
        }
        assert!(c["min_s"].as_f64() <= c["median_s"].as_f64() && c["median_s"].as_f64() <= c["max_s"].as_f64());
        // --pmc: the command's own CPU time (inherited counters), not just
        // the parent's spawn and wait.
        assert!(c["pmc"].is_object() || c["pmc"].is_null(), "{v}");
    }
    let filter_cpu = v["contenders"]["filter_outputs"]["pmc_sw"]["task_clock_ns"].as_u64().unwrap();
    assert!(filter_cpu >= 2_000_000, "sluice filter's CPU time over 20,000 packets: {filter_cpu} ns");
    // Outputs hold the whole capture (sluice: pass + drop) or nearly (tcpdump drops one prefix).
    assert_eq!(v["contenders"]["cp"]["out_bytes"], v["bytes"]);
    assert!(v["contenders"]["filter_outputs"]["out_bytes"].as_u64().unwrap() >= v["bytes"].as_u64().unwrap());

    let mut ratios = vec!["filter_vs_dd", "filter_map_vs_dd", "filter_outputs_vs_cp", "filter_workers_vs_filter"];
    if tcpdump {
        ratios.push("filter_outputs_vs_tcpdump");
    } else {
        assert!(v["ratios"]["filter_outputs_vs_tcpdump"].is_null());
    }
    for r in ratios {
        let x = v["ratios"][r].as_f64().unwrap_or_else(|| panic!("ratios.{r} missing: {v}"));
        assert!(x.is_finite() && x > 0.0, "ratios.{r} = {x}");
    }
    for (t, min) in [("filter_vs_dd", 0.4), ("filter_outputs_vs_cp", 0.8), ("filter_outputs_vs_tcpdump", 3.0)] {
        let target = &v["targets"][t];
        assert_eq!(target["min"].as_f64(), Some(min), "{v}");
        assert_eq!(target["value"], v["ratios"][t]);
        assert!(target["met"].is_boolean() || (t.ends_with("tcpdump") && !tcpdump), "{v}");
    }
    // The temporary directory is removed afterwards.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
