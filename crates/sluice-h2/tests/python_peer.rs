//! Conformance against a real peer: Debian's python3-h2 drives a client
//! `H2Connection` in a subprocess over stdin/stdout pipes (no sockets;
//! tests/h2_client.py). A GET and a POST with a 100 000-byte body are
//! answered, the GET with 200 000 bytes so both directions' flow control
//! matters; the client checks the responses (its h2 library also checks
//! every frame we send). Then Rapid Reset from the same client: HEADERS +
//! RST_STREAM 1000 times, caught as a breach with GOAWAY(ENHANCE_YOUR_CALM).
//! Without python3-h2 the tests skip, or fail when SLUICE_REQUIRE_TOOLS is
//! set (CI).

use sluice_h2::{BreachKind, ConnError, Event, Limits, ServerConn};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

fn have_python_h2() -> bool {
    let found = Command::new(PYTHON).args(["-c", "import h2.connection"]).output().is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("SLUICE_REQUIRE_TOOLS").is_some() {
            panic!("python3-h2 is required (SLUICE_REQUIRE_TOOLS is set) but {PYTHON} cannot import h2");
        }
        eprintln!("SKIPPED: python3-h2 not found");
    }
    found
}

/// What the application side of the test does with events.
#[derive(Default)]
struct App {
    /// Response bytes not yet taken by send_data, per stream.
    owed: HashMap<u32, Vec<u8>>,
    posted: HashMap<u32, usize>,
    h1_heads: Vec<Vec<u8>>,
    breaches: Vec<BreachKind>,
}

impl App {
    fn on(&mut self, c: &mut ServerConn, e: Event) {
        match e {
            Event::Request { stream, head, end_stream } => {
                self.h1_heads.push(head.to_h1());
                if end_stream {
                    c.send_headers(stream, 200, &[(b"content-type", b"application/octet-stream")], false).unwrap();
                    self.owed.insert(stream, (0..200_000u32).map(|i| (i % 253) as u8).collect());
                } else {
                    self.posted.insert(stream, 0);
                }
            }
            Event::Data { stream, bytes, end_stream } => {
                c.release(stream, bytes.len());
                let n = self.posted.entry(stream).or_default();
                *n += bytes.len();
                if end_stream {
                    c.send_headers(stream, 201, &[(b"Content-Type", b"text/plain")], false).unwrap();
                    self.owed.insert(stream, format!("received {n} bytes").into_bytes());
                }
            }
            Event::Breach(k) => self.breaches.push(k),
            _ => {}
        }
    }

    fn push(&mut self, c: &mut ServerConn) {
        for (&stream, bytes) in self.owed.iter_mut() {
            let n = c.send_data(stream, bytes, true);
            bytes.drain(..n);
        }
        self.owed.retain(|_, b| !b.is_empty());
    }
}

/// Runs the client in `mode` against a ServerConn until the client closes
/// its end; returns the app's record, the connection's end, and the
/// client's exit status and report.
fn run(mode: &str) -> (App, Option<ConnError>, bool, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2_client.py");
    let mut child = Command::new(PYTHON)
        .args([script, mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_client = child.stdin.take().unwrap();
    let mut from_client = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = from_client.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut c = ServerConn::new(Limits::default(), Instant::now());
    let mut app = App::default();
    let mut end = None;
    let mut pending = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "timed out");
        let got = rx.recv_timeout(Duration::from_millis(50));
        if let Ok(bytes) = &got {
            pending.extend_from_slice(bytes);
        }
        if end.is_none() {
            match c.recv(&pending, Instant::now()) {
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(e) => end = Some(e),
            }
            while let Some(e) = c.poll_event() {
                app.on(&mut c, e);
            }
            app.push(&mut c);
        }
        let out = c.pending_output().len();
        if out > 0 {
            // The client may have gone after a GOAWAY; its pipe closing is
            // then expected.
            let _ = to_client.write_all(c.pending_output()).and_then(|()| to_client.flush());
            c.consume_output(out);
        }
        if matches!(got, Err(mpsc::RecvTimeoutError::Disconnected)) {
            break;
        }
    }
    drop(to_client);
    reader.join().unwrap();
    let mut report = String::new();
    child.stderr.take().unwrap().read_to_string(&mut report).unwrap();
    let ok = child.wait().unwrap().success();
    eprintln!("python3-h2 client ({mode}):\n{report}");
    (app, end, ok, report)
}

#[test]
fn conformance_with_python_h2() {
    if !have_python_h2() {
        return;
    }
    let (app, end, ok, report) = run("conformance");
    assert!(ok, "client failed: {report}");
    assert!(report.contains("conformance ok"));
    assert!(report.contains("stream 1 status 200 content-type application/octet-stream bytes 200000"), "{report}");
    assert!(report.contains("stream 3 status 201 content-type text/plain bytes 21"), "{report}");
    assert_eq!(app.posted.get(&3), Some(&100_000));
    assert_eq!(end, None);
    assert!(app.breaches.is_empty());
    // The heads, as the guard would hand them to sluice-h1.
    assert_eq!(app.h1_heads[0], b"GET /get HTTP/1.1\r\nhost: example.test\r\naccept: */*\r\n\r\n");
    assert_eq!(app.h1_heads[1], b"POST /post HTTP/1.1\r\nhost: example.test\r\ncontent-length: 100000\r\n\r\n");
}

#[test]
fn rapid_reset_from_python_h2() {
    if !have_python_h2() {
        return;
    }
    let (app, end, ok, report) = run("rapid_reset");
    assert!(ok, "client failed: {report}");
    assert_eq!(end, Some(ConnError::Breach(BreachKind::RapidReset)));
    assert_eq!(app.breaches, vec![BreachKind::RapidReset]);
    assert!(report.contains("goaway 11"), "{report}");
}
