//! `sluice-bench http` at its smallest: the JSON lines users and checks
//! read (`parser`, `input`, `mreq_per_s`, the ratio lines), every parser on
//! every input, and `--pmc` that reports counters or says why not.

mod common;
use serde_json::Value;

fn lines(args: &[&str]) -> Vec<Value> {
    let out = common::bench(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn every_parser_on_every_input_as_json_lines() {
    let v = lines(&["http", "--reps", "1", "--ms", "5", "--json"]);
    let rows: Vec<&Value> = v.iter().filter(|r| r.get("parser").is_some()).collect();
    let parsers =
        ["sluice", "sluice-avx2", "sluice-sse42", "sluice-portable", "sluice-reference", "httparse", "picohttpparser"];
    let inputs = ["request-line", "header-lines", "big-header-line", "req-703"];
    assert_eq!(rows.len(), parsers.len() * inputs.len());
    for p in parsers {
        for i in inputs {
            let r = rows.iter().find(|r| r["parser"] == p && r["input"] == i).unwrap_or_else(|| panic!("{p} on {i}"));
            assert!(r["mreq_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let ratio = v.iter().find(|r| r["ratio"] == true && r["input"] == "req-703").expect("a ratio line for req-703");
    for key in
        ["sluice_vs_httparse", "sluice_vs_picohttpparser", "best_sluice_vs_httparse", "best_sluice_vs_picohttpparser"]
    {
        assert!(ratio[key].as_f64().unwrap() > 0.0, "{key} in {ratio}");
    }
    assert_eq!(ratio["target_vs_httparse"], 1.25);
    let seed = v.iter().find(|r| r["ratio"] == true && r["input"] == "request-line").unwrap();
    assert!((seed["seed_goto_vs_nginx"].as_f64().unwrap() - 730.0 / 470.0).abs() < 1e-9);
}

#[test]
fn pmc_reports_counters_or_why_not() {
    let out = common::bench(&["http", "--reps", "1", "--ms", "5", "--input", "req-703", "--json", "--pmc"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        if r.get("parser").is_none() {
            continue;
        }
        // Hardware counters, or none and the one line saying so; software
        // counters work in any VM.
        assert!(r["pmc"].is_object() || err.contains("hardware counters unavailable"), "{r} / {err}");
        assert!(r["pmc_sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn an_unknown_input_is_refused_by_name() {
    let out = common::bench(&["http", "--input", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--input nope: no such input"));
}
