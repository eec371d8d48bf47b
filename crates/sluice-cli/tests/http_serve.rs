//! `sluice http-serve` end to end: the binary on 127.0.0.1:0, driven by plain
//! std sockets, its JSON summary read at exit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;

use std::time::{Duration, Instant};

mod common;
use common::Served;

/// Start the server for 5 s with `extra` flags.
fn serve(extra: &[&str]) -> Served {
    common::http_serve(5, extra)
}

/// A connection to the server: a writer and a buffered reader.
fn connect(s: &Served) -> (TcpStream, BufReader<TcpStream>) {
    let c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (c.try_clone().unwrap(), BufReader::new(c))
}

struct Response {
    status: u16,
    body: Vec<u8>,
    close: bool,
}

/// One response, framed by its Content-Length (which must be present).
fn read_response(r: &mut BufReader<TcpStream>) -> Response {
    read_response_to(r, false)
}

/// A response to HEAD has the Content-Length of a GET but no body.
fn read_response_to(r: &mut BufReader<TcpStream>, head: bool) -> Response {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 ") && line.ends_with("\r\n"), "{line:?}");
    let status = line[9..12].parse().unwrap();
    let (mut len, mut close) = (None, false);
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        let (k, v) = line.trim_end().split_once(": ").unwrap_or_else(|| panic!("{line:?}"));
        if k.eq_ignore_ascii_case("content-length") {
            len = Some(v.parse::<usize>().unwrap());
        }
        close |= k.eq_ignore_ascii_case("connection") && v == "close";
    }
    let len = len.expect("Content-Length in every response");
    let mut body = vec![0; if head { 0 } else { len }];
    r.read_exact(&mut body).unwrap();
    Response { status, body, close }
}

fn assert_closed(r: &mut BufReader<TcpStream>) {
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "bytes after the closing response: {rest:?}");
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";

#[test]
fn keep_alive_and_pipelining_are_counted_in_the_summary() {
    let s = serve(&["--size", "fixed:777"]);
    // (1) 100 sequential requests on one connection.
    let (mut w, mut r) = connect(&s);
    for _ in 0..100 {
        w.write_all(GET).unwrap();
        let resp = read_response(&mut r);
        assert_eq!((resp.status, resp.body.len(), resp.close), (200, 777, false));
    }
    // (2) 50 requests in one write, 50 responses in order. Every third is a
    // HEAD, whose response has no body: answered out of order, the framing
    // below would break. One carries a body the server must skip.
    let (mut w2, mut r2) = connect(&s);
    let method = |i: usize| if i.is_multiple_of(3) { "HEAD" } else { "GET" };
    let mut batch: Vec<u8> = Vec::new();
    for i in 0..50 {
        let body = if i == 7 { "Content-Length: 11\r\n\r\nhello world" } else { "\r\n" };
        batch.extend(format!("{} /{i} HTTP/1.1\r\nHost: t\r\n{body}", method(i)).into_bytes());
    }
    w2.write_all(&batch).unwrap();
    for i in 0..50 {
        let resp = read_response_to(&mut r2, method(i) == "HEAD");
        assert_eq!((resp.status, resp.body.len()), (200, if method(i) == "HEAD" { 0 } else { 777 }));
    }
    // The last one asks to close: answered, then the connection ends.
    w2.write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    assert!(read_response(&mut r2).close);
    assert_closed(&mut r2);
    drop((w, r, w2, r2));
    // (7) the summary counts exactly what was sent.
    let j = s.summary();
    assert_eq!(j["requests"], 151, "{j}");
    assert_eq!(j["connections"], 2, "{j}");
    assert_eq!(j["errors"]["bad_request"], 0);
    assert_eq!(j["per_thread"].as_array().unwrap().len(), 2);
    let per_thread: u64 = j["per_thread"].as_array().unwrap().iter().map(|t| t["requests"].as_u64().unwrap()).sum();
    assert_eq!(per_thread, 151);
    // 134 responses carry a body (17 of the 151 were HEAD).
    assert!(j["bytes"].as_u64().unwrap() > 134 * 777, "{j}");
}

#[test]
fn list_sizes_give_only_those_sizes() {
    // (3)
    let s = serve(&["--size", "list:10@1,1000@1"]);
    let (mut w, mut r) = connect(&s);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        w.write_all(GET).unwrap();
        seen.insert(read_response(&mut r).body.len());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![10, 1000]);
    drop((w, r));
    assert_eq!(s.summary()["requests"], 200);
}

#[test]
fn malformed_and_oversized_requests_are_refused_and_closed() {
    let s = serve(&[]);
    // (4) a malformed request line: 400, then the connection closes, even
    // though a good request follows on it.
    let (mut w, mut r) = connect(&s);
    w.write_all(GET).unwrap();
    assert_eq!(read_response(&mut r).status, 200);
    w.write_all(b"GET /  HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n").unwrap();
    let resp = read_response(&mut r);
    assert_eq!((resp.status, resp.close), (400, true));
    assert_closed(&mut r);
    // (5) a head over 16 KiB: 431 and closed.
    let (mut w, mut r) = connect(&s);
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    w.write_all(big.as_bytes()).unwrap();
    let resp = read_response(&mut r);
    assert_eq!((resp.status, resp.close), (431, true));
    assert_closed(&mut r);
    let j = s.summary();
    assert_eq!(j["requests"], 1, "{j}");
    assert_eq!(j["errors"]["bad_request"], 1, "{j}");
    assert_eq!(j["errors"]["header_too_large"], 1, "{j}");
}

#[test]
fn stall_delays_one_response_once() {
    // (6) after 10 requests the next response on this connection's thread
    // waits a second; the others are fast.
    let s = serve(&["--stall-after", "10", "--stall-ms", "1000"]);
    let (mut w, mut r) = connect(&s);
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        w.write_all(GET).unwrap();
        assert_eq!(read_response(&mut r).status, 200);
        times.push(t.elapsed());
    }
    let slow: Vec<usize> = (0..20).filter(|&i| times[i] >= Duration::from_secs(1)).collect();
    assert_eq!(slow, vec![10], "{times:?}");
    assert!(times.iter().enumerate().all(|(i, t)| i == 10 || *t < Duration::from_millis(500)), "{times:?}");
    drop((w, r));
    assert_eq!(s.summary()["requests"], 20);
}

#[test]
fn refuses_a_remote_address_without_allow_remote() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-serve", "--listen", "0.0.0.0:0", "--duration", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
}

#[test]
fn bad_distribution_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["http-serve", "--listen", "127.0.0.1:0", "--size", "uniform:9-3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("above upper bound"));
}

/// SIGHUP does not end the server (its default action would: exit 129, no
/// summary): it answers after the signal and still reports at the end.
#[test]
fn sighup_leaves_the_server_serving() {
    let mut s = serve(&[]);
    let (mut w1, mut r1) = connect(&s);
    w1.write_all(GET).unwrap();
    assert_eq!(read_response(&mut r1).status, 200);
    let hup = Command::new("kill").args(["-HUP", &s.child.id().to_string()]).status().unwrap();
    assert!(hup.success());
    std::thread::sleep(Duration::from_millis(200));
    assert!(s.child.try_wait().unwrap().is_none(), "SIGHUP ended http-serve");
    w1.write_all(GET).unwrap();
    assert_eq!(read_response(&mut r1).status, 200, "the same connection, served after SIGHUP");
    let (mut w, mut r) = connect(&s);
    w.write_all(GET).unwrap();
    assert_eq!(read_response(&mut r).status, 200, "a new connection, served after SIGHUP");
    drop((w, r, w1, r1));
    assert_eq!(s.summary()["requests"], 3);
}
