//! `sluice-bench guard` and `sluice-bench http-load` at one short
//! repetition: the JSON keys the README names, and `--pmc` counting each
//! side (the load tool, and the guard on the guarded side).

mod common;
use serde_json::Value;

fn stdout(args: &[&str]) -> String {
    let out = common::bench(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The guard beside nginx and HAProxy at the same limits (both must be
/// installed: CI installs them), the direct path and a TLS guard, one
/// case, with counters per contender.
#[test]
fn bench_guard_reports_every_contender_and_their_counters() {
    let out =
        stdout(&["guard", "--duration", "1", "--reps", "1", "--connections", "8", "--sizes", "512", "--pmc", "--tls"]);
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |bench: &str| lines.iter().find(|l| l["bench"] == bench).unwrap_or_else(|| panic!("{bench}: {out}"));
    let rep = find("guard");
    assert_eq!((rep["size_bytes"].as_u64(), rep["connections"].as_u64()), (Some(512), Some(8)), "{rep}");
    for k in ["direct_rps", "guarded_rps", "guarded_tls_rps", "guarded_pipelined_rps", "nginx_rps", "haproxy_rps"] {
        assert!(rep[k].as_f64().unwrap() > 0.0, "{k}: {rep}");
    }
    // Each front's CPU per request: its whole process tree (nginx's worker
    // is its master's child).
    for k in ["guarded", "guarded_tls", "guarded_pipelined", "nginx", "haproxy"] {
        let us = rep[format!("{k}_cpu_us_per_req")].as_f64().unwrap();
        assert!(us > 0.0 && us < 10_000.0, "{k}: {rep}");
    }
    assert!(rep.get("direct_cpu_us_per_req").is_none(), "{rep}");
    let case = find("guard_case");
    for k in ["guard_cpu_efficiency_vs_nginx", "pipelined_cpu_efficiency_vs_haproxy", "median_nginx_cpu_us_per_req"] {
        assert!(case[k].as_f64().unwrap() > 0.0, "{k}: {case}");
    }
    let keys = ["median_ratio", "median_tls_vs_plain", "guard_vs_nginx", "guard_vs_haproxy", "median_nginx_p99_us"];
    for k in keys.into_iter().chain(["median_pipelined_vs_plain", "pipelined_vs_nginx", "pipelined_vs_haproxy"]) {
        assert!(case[k].as_f64().unwrap() > 0.0, "{k}: {case}");
    }
    assert_eq!(case["targets"]["guard_vs_nginx"]["min"], 1.5, "{case}");
    assert!(case["targets"]["p99_no_worse_than_peers"]["met"].is_boolean(), "{case}");
    assert!(case["targets"]["pipelined_p99_no_worse_than_peers"]["met"].is_boolean(), "{case}");
    let summary = lines.last().unwrap();
    assert_eq!(summary["bench"], "guard_summary", "{summary}");
    for side in ["direct", "guarded", "guarded_tls", "guarded_pipelined", "nginx", "haproxy"] {
        assert!(summary["pmc"][side]["sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{side}: {summary}");
    }
}

/// Tunnels (WebSocket-style upgrades) through the guard, nginx and
/// HAProxy beside the direct path: every contender's messages checked and
/// counted, two cases.
#[test]
fn bench_guard_tunnels_reports_every_contender() {
    let out =
        stdout(&["guard", "--tunnels", "--duration", "1", "--reps", "1", "--connections", "4", "--sizes", "64,20000"]);
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["bench"] == "guard_tunnels")
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for r in rows {
        for c in ["direct", "guard", "nginx", "haproxy"] {
            assert!(r[format!("median_{c}_msg_per_s")].as_f64().unwrap() > 0.0, "{c}: {r}");
            assert!(r[format!("median_{c}_p99_us")].as_f64().is_some(), "{c}: {r}");
        }
        for k in ["guard_vs_direct", "guard_vs_nginx", "guard_vs_haproxy"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
        }
    }
}

#[test]
fn bench_http_load_reports_each_tool_and_its_counters() {
    let out = stdout(&["http-load", "--duration", "1", "--reps", "1", "--connections", "8", "--json", "--pmc"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["best_rps"]["http_load"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["best_rps"]["http_load_pipelined"].as_f64().unwrap() > 0.0, "{v}");
    for tool in ["http-load", "http-load-pipelined"] {
        assert!(v["pmc"][tool]["sw"]["task_clock_ns"].as_u64().unwrap() > 0, "{v}");
    }
}

/// `bench guard --attack --tls` at a small scale: the legitimate pool is
/// served over TLS beside an attack pool at ten times the per-address
/// limit, and the attack is refused once its addresses are blocked.
#[test]
fn bench_guard_attack_serves_the_legitimate_pool_and_refuses_the_attack() {
    let out = stdout(&[
        "guard",
        "--attack",
        "--duration",
        "3",
        "--legit-clients",
        "20",
        "--legit-rate",
        "20",
        "--attack-clients",
        "50",
        "--limit",
        "2",
        "--attack-factor",
        "10",
        "--tls",
    ]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["bench"].as_str(), v["tls"].as_bool()), (Some("guard_attack"), Some(true)), "{v}");
    assert!(v["legit"]["success_alone"].as_f64().unwrap() > 0.99, "{v}");
    assert!(v["legit"]["success_attacked"].as_f64().unwrap() > 0.95, "{v}");
    assert_eq!(v["attack"]["requests_after_first_second"], 2000.0, "50 x 20/s for 2 s: {v}");
    assert!(v["attack"]["served_after_first_second"].as_u64().unwrap() < 200, "{v}");
    assert!(v["attack"]["refused_after_first_second"].as_f64().unwrap() > 0.9, "{v}");
    for t in ["legit_success", "legit_p99_over_alone", "attack_refused_after_first_second"] {
        assert!(v["targets"][t]["met"].is_boolean(), "{t}: {v}");
    }
}

/// `bench guard --attack --contenders guard,nginx,haproxy --attack-floor`
/// at a small scale (issue 59): a row per front with the keys the issue
/// names, each front's floor, and the summary of the targets over them.
#[test]
fn bench_guard_attack_beside_the_peers_reports_each_front_and_its_floor() {
    let out = stdout(&[
        "guard",
        "--attack",
        "--contenders",
        "guard,nginx,haproxy",
        "--attack-floor",
        "--duration",
        "2",
        "--attack-delay",
        "1",
        "--legit-clients",
        "10",
        "--legit-rate",
        "10",
        "--attack-clients",
        "20",
    ]);
    let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let fronts: Vec<&str> =
        rows.iter().filter(|r| r["bench"] == "guard_attack").filter_map(|r| r["contender"].as_str()).collect();
    assert_eq!(fronts, ["guard", "nginx", "haproxy"], "{out}");
    for r in rows.iter().filter(|r| r["bench"] == "guard_attack") {
        for k in ["p99_us_alone", "p99_us_attacked", "success_attacked"] {
            assert!(r["legit"][k].is_number(), "{k}: {r}");
        }
        assert!(r["floor"]["p99_us"].is_number(), "{r}");
        assert!(r["legit"]["success_alone"].as_f64().unwrap() > 0.9, "served alone: {r}");
    }
    let summary = rows.iter().find(|r| r["bench"] == "guard_attack_summary").expect("a summary row");
    for peer in ["nginx", "haproxy"] {
        assert!(summary["guard_p99_against_peers"][peer]["guard_over_peer"].is_number(), "{summary}");
    }
    assert!(summary["guard_p99_over_floor"]["value"].is_number(), "{summary}");
}

/// `bench guard --http2` at a tiny scale (issue 59): h2load over TLS
/// through the guard, nginx and HAProxy, each row with its numbers and
/// every request of every contender answered 2xx.
#[test]
fn bench_guard_http2_serves_every_request_through_every_contender() {
    if !common::have_tool("h2load") {
        return;
    }
    let out = stdout(&["guard", "--http2", "--reps", "2", "--h2-requests", "500", "--h2-clients", "4"]);
    let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let reps: Vec<&Value> = rows.iter().filter(|r| r["bench"] == "guard_http2").collect();
    assert_eq!(reps.len(), 6, "three contenders, two repetitions: {out}");
    // Repetition 1 starts one contender further along.
    let order: Vec<&str> = reps.iter().filter_map(|r| r["contender"].as_str()).collect();
    assert_eq!(order, ["guard", "nginx", "haproxy", "nginx", "haproxy", "guard"], "{out}");
    for r in &reps {
        assert_eq!((r["requests"].as_u64(), r["failed"].as_u64()), (Some(500), Some(0)), "all served: {r}");
        assert!(r["rps"].as_f64().unwrap() > 0.0 && r["p99_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let s = rows.last().unwrap();
    assert_eq!(
        (s["bench"].as_str(), s["all_2xx"].as_bool(), s["goal"].as_f64()),
        (Some("guard_http2_summary"), Some(true), Some(1.2)),
        "{s}"
    );
    for c in ["guard", "nginx", "haproxy"] {
        assert!(
            s["median_rps"][c].as_f64().unwrap() > 0.0 && s["median_p99_us"][c].as_f64().unwrap() > 0.0,
            "{c}: {s}"
        );
    }
    assert!(s["guard_vs_nginx"].as_f64().unwrap() > 0.0 && s["guard_vs_haproxy"].as_f64().unwrap() > 0.0, "{s}");
}
