//! `sluice http-load` end to end against `sluice http-serve`, both the
//! binary: the server listens on 127.0.0.1:0 and its port is read from
//! stderr; both print their JSON summaries.

use serde_json::Value;
use std::process::Command;

mod common;
use common::http_serve as serve;

/// Run `http-load --json` with `args`; its JSON.
fn load(url: &str, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-load", "--url", url, "--json"])
        .args(args)
        .output()
        .expect("run sluice");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

fn u(j: &Value) -> u64 {
    j.as_u64().unwrap_or_else(|| panic!("not a count: {j}"))
}

fn assert_no_errors(j: &Value) {
    for kind in ["connect", "read", "write", "timeout", "bad_response"] {
        assert_eq!(u(&j["errors"][kind]), 0, "{kind}: {j}");
    }
    assert!(j["errors"]["status"].as_object().unwrap().is_empty(), "{j}");
}

fn assert_ordered(p: &Value) {
    let v: Vec<u64> = ["p50", "p90", "p99", "p999", "max"].iter().map(|k| u(&p[k])).collect();
    assert!(v.windows(2).all(|w| w[0] <= w[1]) && v[0] > 0, "{p}");
}

#[test]
fn closed_loop_counts_every_request_once() {
    let s = serve(4, &[]);
    let j = load(&s.url(), &["--connections", "8", "--threads", "2", "--requests", "5000"]);
    assert_eq!(u(&j["requests"]), 5000, "{j}");
    assert_eq!(u(&j["issued"]), 5000, "{j}");
    // Second by second: every response once, all of them 2xx.
    let seconds = j["per_second"].as_array().unwrap();
    let col = |k: usize| seconds.iter().map(|s| u(&s[k])).sum::<u64>();
    assert_eq!((col(0), col(1), col(2)), (5000, 0, 0), "{j}");
    assert_no_errors(&j);
    assert_ordered(&j["latency_us"]);
    assert!(j.get("corrected").is_none(), "closed loop has no corrected figures: {j}");
    assert_eq!((u(&j["connections"]), u(&j["threads"]), u(&j["pipeline"])), (8, 2, 1));
    // 128-byte bodies plus the head: every byte of every response counted.
    assert!(u(&j["bytes"]) > 5000 * 128, "{j}");
    assert!(j["rps"].as_f64().unwrap() > 0.0);
    let server = s.summary();
    assert_eq!(server["requests"], 5000, "{server}");
    assert_eq!(server["connections"], 8, "{server}");
}

#[test]
fn pipelined_responses_are_matched_in_order() {
    // Mixed sizes: a response framed wrongly would desynchronise the rest
    // of its connection into bad responses.
    let s = serve(4, &["--size", "list:0@1,10@1,3000@1"]);
    let j = load(&s.url(), &["--pipeline", "16", "--connections", "4", "--threads", "2", "--requests", "8000"]);
    assert_eq!(u(&j["requests"]), 8000, "{j}");
    assert_no_errors(&j);
    assert_ordered(&j["latency_us"]);
    assert_eq!(s.summary()["requests"], 8000);
}

#[test]
fn open_loop_corrects_coordinated_omission() {
    // One connection: the server's one-second stall holds up the schedule.
    // About 500 requests fall due during it; measured from their intended
    // times they waited up to a second (a quarter of the 2000), while from
    // their actual send times only the stalled one was slow.
    let s = serve(7, &["--stall-after", "200", "--stall-ms", "1000"]);
    let j = load(&s.url(), &["--rate", "500", "--duration", "4", "--connections", "1", "--threads", "1"]);
    assert_no_errors(&j);
    let (c, un) = (&j["corrected"], &j["uncorrected"]);
    assert_ordered(c);
    assert_ordered(un);
    assert_eq!(j["latency_us"], *c, "latency_us is the corrected histogram in open loop");
    assert!(u(&c["p99"]) >= 500_000, "{j}");
    assert!(u(&un["p99"]) < u(&c["p99"]) / 4, "{j}");
    // The stalled response itself shows in both maxima.
    assert!(u(&un["max"]) >= 900_000 && u(&c["max"]) >= 900_000, "{j}");
    // On schedule: 500/s for 4 s is 2000 intended sends; all sent ones answered.
    let n = u(&j["requests"]);
    assert!((1900..=2000).contains(&n), "{j}");
    assert_eq!(u(&j["issued"]), n, "{j}");
    assert_eq!(u(&s.summary()["requests"]), n);
}

#[test]
fn source_range_looks_like_many_clients() {
    let s = serve(5, &[]);
    let j =
        load(&s.url(), &["--source", "127.1.0.0/16", "--connections", "256", "--threads", "2", "--requests", "2560"]);
    assert_eq!(u(&j["requests"]), 2560, "{j}");
    assert_no_errors(&j);
    assert!(u(&j["sources"]) >= 200, "{j}");
    let server = s.summary();
    assert!(u(&server["sources"]) >= 200, "{server}");
    assert_eq!(server["requests"], 2560, "{server}");
}

#[test]
fn non_2xx_statuses_are_counted_by_code_and_url_files_are_used() {
    let s = serve(4, &["--status-mix", "200@1,404@1"]);
    let dir = tempfile::tempdir().unwrap();
    let urls = dir.path().join("urls");
    std::fs::write(&urls, "/a 3\n/b\n# comment\n").unwrap();
    let j = load(&s.url(), &["--urls", urls.to_str().unwrap(), "--zipf", "1.1", "--requests", "1000"]);
    assert_eq!(u(&j["requests"]), 1000, "{j}");
    let not_found = u(&j["errors"]["status"]["404"]);
    assert!((300..=700).contains(&not_found), "{j}");
    assert_eq!(u(&j["errors"]["bad_response"]), 0);
    s.summary();
}

#[test]
fn refuses_a_remote_target_without_allow_remote() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-load", "--url", "http://192.0.2.1:80/", "--requests", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-remote"), "{err}");
}

#[test]
fn request_bodies_and_client_pools() {
    let s = serve(8, &[]);
    // POSTs with bodies of 100-2000 bytes: each framed by the server, none
    // taken for the next request (which would be a bad request).
    let body = ["--connections", "4", "--requests", "2000", "--method", "POST", "--body-size", "uniform:100-2000"];
    let j = load(&s.url(), &body);
    assert_eq!(u(&j["requests"]), 2000, "{j}");
    assert_no_errors(&j);
    let head = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: sluice\r\nContent-Length: 1000\r\n\r\n".len() as u64;
    let sent = u(&j["bytes_sent"]);
    assert!(sent > 2000 * (head + 100) && sent < 2000 * (head + 2000), "bodies of 100-2000 bytes: {j}");
    // Two pools at once: browsers from 8 addresses at a rate, uploads closed loop.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pools.toml");
    std::fs::write(
        &file,
        "[[pool]]\nname = \"browsers\"\nsource = \"127.4.0.0/28\"\nconnections = 8\nrate = 200\n\n\
         [[pool]]\nname = \"uploads\"\nconnections = 2\nrequests = 300\nmethod = \"PUT\"\nbody-size = \"fixed:4096\"\n",
    )
    .unwrap();
    let j = load(&s.url(), &["--pool", file.to_str().unwrap(), "--duration", "1.5"]);
    let (b, up) = (&j["pools"]["browsers"], &j["pools"]["uploads"]);
    assert_no_errors(b);
    assert_no_errors(up);
    assert_eq!(u(&up["requests"]), 300, "{up}");
    assert!(u(&up["bytes_sent"]) >= 300 * 4096, "{up}");
    assert!((150..=320).contains(&u(&b["requests"])), "200/s for 1.5 s: {b}");
    assert_eq!(b["open_loop"], true);
    assert!(b.get("corrected").is_some(), "{b}");
    assert_eq!(u(&b["sources"]), 8, "{b}");
    assert_eq!(u(&j["requests"]), u(&b["requests"]) + u(&up["requests"]), "the sum: {j}");
    assert_eq!(u(&j["connections"]), 10);
    let server = s.summary();
    assert_eq!(u(&server["requests"]), 2000 + u(&j["requests"]), "{server}");
    assert_eq!(server["errors"]["bad_request"], 0, "{server}");
    // A pool file with a typo says where.
    std::fs::write(&file, "[[pool]]\nname = \"a\"\nconections = 3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-load", "--url", "http://127.0.0.1:9/", "--pool", file.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("pools.toml") && err.contains("conections"), "{err}");
}
