//! `sluice-bench syscalls` at its smallest: the JSON lines users and
//! checks read (the system call's entry cost, then per case the three
//! ways' nanoseconds per message and the ratios), and bad arguments refused.

mod common;
use serde_json::Value;

#[test]
fn every_way_for_every_case_as_json_lines() {
    let out = common::bench(&["syscalls", "--pairs", "1,4", "--sizes", "64,4096", "--messages", "400", "--reps", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // (The machine record, checked and taken off by `common::bench`, came first.)
    assert!(v[0]["getppid_ns_median"].as_f64().unwrap() > 0.0, "{}", v[0]);
    let cases: Vec<&Value> = v.iter().filter(|r| r.get("pairs").is_some()).collect();
    assert_eq!(cases.len(), 4);
    for c in cases {
        for key in ["syscalls_ns_per_message", "uring_ns_per_message", "uring_linked_ns_per_message"] {
            assert!(c[key].as_f64().unwrap() > 0.0, "{key} in {c}");
        }
        let ratio = c["uring_vs_syscalls"].as_f64().unwrap();
        let expect = c["uring_ns_per_message"].as_f64().unwrap() / c["syscalls_ns_per_message"].as_f64().unwrap();
        assert!((ratio - expect).abs() < 1e-9, "{c}");
    }
}

#[test]
fn sizes_past_the_socket_buffers_are_refused() {
    let out = common::bench(&["syscalls", "--sizes", "100000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("over 64 KiB"));
}
