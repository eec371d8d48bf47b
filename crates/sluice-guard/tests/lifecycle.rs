//! The guard through its library alone, in the shape every product has
//! (`service::start` -> a running product, its handle, `wait` -> a
//! summary), in memory and without root: a request served, the control
//! socket answering, stopped by its handle, summed up as text and JSON,
//! and nothing left behind.

mod support;
use support::heads;

use sluice_control::product::{print, Running, Summary};
use sluice_control::socket::Access;
use sluice_guard::service::{self, Services};
use sluice_guard::Config;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn the_guard_starts_serves_stops_by_its_handle_and_sums_up() {
    let up = heads::upstream(|_| b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec());
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("guard.sock");
    let services =
        Services { control: Some((sock.clone(), Access::owner_and(None, None).unwrap())), ..Services::default() };
    let guard = service::start(c, services).unwrap();

    let mut s = TcpStream::connect(guard.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 200 OK"), "{}", String::from_utf8_lossy(&answer));
    let r = sluice_control::socket::request(&sock, "blocks", Duration::from_secs(5)).unwrap();
    assert_eq!(r, serde_json::json!({ "ok": true, "blocks": [] }));

    let handle = guard.handle();
    assert!(!guard.finished());
    handle.stop();
    let summary = guard.wait().unwrap();
    assert_eq!((summary.report.counts.requests, summary.report.counts.forwarded), (1, 1));
    assert!(summary.text().starts_with("1 requests in "), "{}", summary.text());
    assert_eq!(summary.json()["requests"], 1);
    assert_eq!(print(&summary, true), format!("{}\n", summary.json()));
    assert!(!sock.exists(), "the control socket is removed when the guard stops");
}
