//! Smoke tests of `sluice-bench aliasing`, `memalign` and `pool` with their
//! smallest settings: the JSON shape (every row has `seed` and `ours`), the
//! SVG, and `--pmc` working with or without hardware counters.

mod common;
use common::{bench, ok, p};
use serde_json::Value;

fn rows(out: &str, experiment: &str) -> Vec<Value> {
    let all: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let verdict = all.iter().find(|r| r.get("verdict").is_some()).expect("a verdict object");
    assert_eq!(verdict["experiment"], experiment);
    let rows: Vec<Value> = all.into_iter().filter(|r| r.get("verdict").is_none()).collect();
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r["experiment"], experiment);
        let o = r.as_object().unwrap();
        assert!(o.contains_key("seed"), "seed missing in {r}");
        assert!(r["ours"].as_f64().unwrap() > 0.0, "{r}");
        for key in ["group", "name", "unit", "ours_min", "ours_max", "ratio", "seed_ratio"] {
            assert!(o.contains_key(key), "{key} missing in {r}");
        }
    }
    rows
}

#[test]
fn bench_aliasing_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("a.svg");
    let out = ok(&[
        "aliasing",
        "--pad",
        "0,64,127",
        "--grid",
        "9,9,17",
        "--iters",
        "1",
        "--triad-len",
        "512",
        "--triad-passes",
        "2",
        "--reps",
        "2",
        "--format",
        "json",
        "--svg",
        p(&svg),
    ]);
    let rows = rows(&out, "aliasing");
    assert_eq!(rows.len(), 6);
    let seeded = rows.iter().find(|r| r["group"] == "himeno" && r["name"] == "pad=64").unwrap();
    assert_eq!(seeded["seed"].as_f64(), Some(1624.296713));
    assert!(rows.iter().any(|r| r["seed"].is_null()));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

#[test]
fn bench_memalign_json_with_pmc() {
    let out = bench(&[
        "memalign",
        "--n",
        "200",
        "--loop-n",
        "200",
        "--reps",
        "1",
        "--backend",
        "libc,rust",
        "--json",
        "--pmc",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rows = rows(&String::from_utf8(out.stdout).unwrap(), "memalign");
    assert_eq!(rows.len(), 8);
    for r in &rows {
        let o = r.as_object().unwrap();
        assert!(o.contains_key("pmc") && o.contains_key("pmc_sw"), "{r}");
        if r["pmc"].is_null() {
            // Said once, not per row.
            assert_eq!(stderr.matches("pmc: hardware counters unavailable here (").count(), 1, "{stderr}");
        }
    }
    let libc = rows.iter().find(|r| r["group"] == "batch" && r["name"] == "libc-4096").unwrap();
    assert_eq!(libc["seed"].as_f64(), Some(2030.0));
}

#[test]
fn bench_pool_json() {
    let out = ok(&["pool", "--n", "1000", "--reps", "1", "--format", "json"]);
    let rows = rows(&out, "pool");
    // 6 workloads x 4 allocators, less bumpalo's two -free rows.
    assert_eq!(rows.len(), 22);
    let tfw = rows.iter().find(|r| r["group"] == "small" && r["name"] == "pool").unwrap();
    assert_eq!(tfw["seed"].as_f64(), Some(273.0 * 1e6 / 20e6));
    assert!(rows.iter().any(|r| r["name"] == "mimalloc" && r["seed"].is_null()));
}

#[test]
fn bench_classify_and_rss_take_pmc() {
    let out = ok(&[
        "classify",
        "--structure",
        "sluice",
        "--entries",
        "1000",
        "--packets",
        "2000",
        "--reps",
        "1",
        "--ring",
        "64",
        "--no-probe",
        "--format",
        "json",
        "--pmc",
    ]);
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(row.as_object().unwrap().contains_key("pmc"), "{row}");
    assert!(row["pmc_sw"]["task_clock_ns"].as_u64().is_some() || row["pmc_sw"].is_null(), "{row}");
    let out = ok(&["rss", "--hashes", "1000", "--reps", "1", "--json", "--pmc"]);
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert!(row.as_object().unwrap().contains_key("pmc"), "{row}");
}
