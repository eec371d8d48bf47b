//! `sluice http-parse`: one JSON object, exit 0 when accepted, 1 when
//! refused, and a plain error for a file that cannot be read.

mod common;
use common::*;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn run(bytes: &[u8], extra: &[&str]) -> (i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("req.http");
    std::fs::write(&f, bytes).unwrap();
    let mut args = vec!["http-parse", "--in", p(&f)];
    args.extend_from_slice(extra);
    let out = sluice(&args);
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap(), v)
}

#[test]
fn accepted_request_as_json() {
    let (code, v) = run(b"POST /a?b HTTP/1.1\r\nHost: h\r\nX: \xff\r\nContent-Length: 3\r\n\r\nabcdef", &[]);
    assert_eq!(code, 0);
    assert_eq!(v["ok"], true);
    assert_eq!(v["method"], "POST");
    assert_eq!(v["target"], "/a?b");
    assert_eq!(v["version"], "HTTP/1.1");
    assert_eq!(v["headers"][0], serde_json::json!(["Host", "h"]));
    assert_eq!(v["headers"][1][1], "\u{fffd}");
    assert_eq!(v["framing"], "length");
    assert_eq!(v["content_length"], 3);
    assert_eq!(
        (v["body_len"].as_u64(), v["complete"].as_bool(), v["consumed"].as_u64()),
        (Some(3), Some(true), Some(59))
    );
    assert_eq!(v["signals"], serde_json::json!([]));
}

#[test]
fn refused_request_says_why() {
    let (code, v) = run(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", &[]);
    assert_eq!(code, 1);
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"], "space-before-colon");
    assert_eq!(v["offset"], 20);
    assert!(v["message"].as_str().unwrap().contains("colon"));
    assert_eq!(v["signals"], serde_json::json!(["space-before-colon"]));
    // The same bytes, tolerated.
    let (code, v) = run(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", &["--lenient", "space-before-colon,obs-fold"]);
    assert_eq!(code, 0);
    assert_eq!(v["signals"], serde_json::json!(["space-before-colon"]));
    assert_eq!(v["framing"], "none");
    assert_eq!(v["content_length"], Value::Null);
}

#[test]
fn stdin_and_bad_flags_and_missing_file() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-parse", "--in", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["version"].as_str(), v["signals"][0].as_str()), (Some("HTTP/1.0"), Some("missing-host")));

    let out = sluice(&["http-parse", "--in", "/nonexistent/req", "--lenient", "bogus"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses the flag");
    assert!(String::from_utf8_lossy(&out.stderr).contains("obs-fold"));
    let out = sluice(&["http-parse", "--in", "/nonexistent/req"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/req"));
}
