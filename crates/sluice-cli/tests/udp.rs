//! `sluice udp-echo` and `sluice udp-load` end to end on loopback, the seed's
//! RSS UDP test: two echo workers on one SO_REUSEPORT port, 32 flows whose
//! source ports were spread by Toeplitz hash. Everything sent is echoed or
//! counted lost, both workers answer, every flow stays on one worker, and the
//! server's per-worker counts add up to what the client got back.
//!
//! Bounded: the load stops by count, the server by SIGINT (with a duration as
//! a backstop), and only 127.0.0.1 is ever a target.

mod common;

use common::sluice;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Starts `udp-echo` on a kernel-picked port; returns it and the port.
fn start_echo(workers: &str, extra: &[&str]) -> (Child, u16) {
    let mut args = vec!["udp-echo", "--listen", "127.0.0.1:0", "--workers", workers, "--duration", "60", "--json"];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start udp-echo");
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().unwrap()).read_line(&mut line).unwrap();
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

/// SIGINT ends the server cleanly; it prints its counters on the way out.
fn stop_echo(child: Child) -> Value {
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "udp-echo: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("udp-echo JSON")
}

fn load(port: u16, extra: &[&str]) -> Value {
    let target = format!("127.0.0.1:{port}");
    let mut args = vec!["udp-load", "--target", &target, "--json"];
    args.extend_from_slice(extra);
    let out = sluice(&args);
    assert!(out.status.success(), "udp-load: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("udp-load JSON")
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn two_workers_echo_every_flow_on_one_worker() {
    let (echo, port) = start_echo("2", &[]);
    let client = load(port, &["--flows", "32", "--workers-hint", "2", "--count", "20000", "--rate", "20000"]);
    let server = stop_echo(echo);

    // Every datagram sent is echoed or counted lost; on an idle loopback at
    // this modest rate none is lost.
    let (sent, echoed, lost) = (n(&client["sent"]), n(&client["echoed"]), n(&client["lost"]));
    assert_eq!(sent, 20_000);
    assert_eq!(sent, echoed + lost, "{client}");
    assert_eq!(lost, 0, "loss on loopback at 20k pps: {client}");
    assert_eq!(n(&client["unmatched"]), 0);

    // The server saw exactly what came back, split over its two workers.
    let workers = server["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    let per_worker: Vec<u64> = workers.iter().map(|w| n(&w["datagrams"])).collect();
    assert_eq!(per_worker.iter().sum::<u64>(), echoed, "{server}");
    assert_eq!(n(&server["datagrams"]), echoed);
    assert!(server["incoming_cpu"].is_boolean());

    // Both workers answered some flows, and every flow exactly one worker.
    let flows = client["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 32);
    let mut flows_per_worker = [0u64; 2];
    for f in flows {
        let by = f["answered_by"].as_array().unwrap();
        assert_eq!(by.len(), 1, "flow answered by {by:?}: {f}");
        flows_per_worker[n(&by[0]) as usize] += 1;
        assert!(n(&f["predicted_bucket"]) < 2);
    }
    assert!(flows_per_worker.iter().all(|&c| c > 0), "a worker answered no flow: {flows_per_worker:?}");
    // Client and server agree on who answered what.
    for w in client["per_worker"].as_array().unwrap() {
        let i = n(&w["worker"]) as usize;
        assert_eq!(n(&w["echoed"]), per_worker[i]);
        assert_eq!(n(&w["flows"]), flows_per_worker[i]);
        assert_eq!(n(&workers[i]["flows"]), flows_per_worker[i], "distinct sources per worker");
    }

    // The Toeplitz spreading: 32 flows over 2 predicted buckets, 16 each.
    let predicted = flows.iter().filter(|f| n(&f["predicted_bucket"]) == 0).count();
    assert_eq!(predicted, 16);
    let latency = &client["latency_us"];
    for k in ["p50", "p90", "p99", "p999", "max"] {
        assert!(latency[k].as_f64().unwrap() > 0.0, "{latency}");
    }
}

#[test]
fn load_stops_by_duration_and_counts_a_missing_server_as_lost() {
    // Nothing listens on this port once the probe socket is closed.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = load(port, &["--flows", "4", "--duration", "0.3", "--rate", "1000", "--grace-ms", "100"]);
    let (sent, echoed, lost) = (n(&client["sent"]), n(&client["echoed"]), n(&client["lost"]));
    assert_eq!(echoed, 0);
    assert_eq!(sent, lost);
    // The kernel refuses sends after a port-unreachable: those are counted
    // as send errors, not as sent; together they are what was attempted.
    let attempted = sent + n(&client["send_errors"]);
    assert!((200..=400).contains(&attempted), "paced at 1000 pps for 0.3 s: {client}");
}

#[test]
fn refuses_a_remote_target_without_allow_remote() {
    let out = sluice(&["udp-load", "--target", "192.0.2.1:9", "--count", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address") && err.contains("--allow-remote"), "{err}");
}

#[test]
fn echo_with_incoming_cpu_reports_whether_the_kernel_took_it() {
    let (echo, port) = start_echo("2", &["--incoming-cpu", "on", "--cpus", "0"]);
    let client = load(port, &["--flows", "4", "--count", "200", "--rate", "2000"]);
    let server = stop_echo(echo);
    assert_eq!(n(&client["sent"]), n(&client["echoed"]) + n(&client["lost"]));
    assert!(server["incoming_cpu"].is_boolean(), "{server}");
    // Both workers on CPU 0 (cycled list).
    for w in server["workers"].as_array().unwrap() {
        assert_eq!(n(&w["cpu"]), 0);
    }
}
