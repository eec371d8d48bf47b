//! Several listeners in one guard, driven by curl: a TLS and a plain one
//! served by the same loops; a `--redirect-https` one answering 308 to the
//! TLS one (curl follows it), 400 without a Host, nothing sent upstream;
//! `curl --http1.0` over TLS (ALPN `http/1.0`) served as HTTP/1.1 is.

mod support;
use support::heads;

use sluice_guard::tls::CertFiles;
use sluice_guard::{Config, Guard, GuardThreads, Listener, Serve};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BODY: &str = "hello from upstream\n";

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata")
}

/// An upstream answering every request [`BODY`], counting them.
fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let addr = heads::upstream(move |_| {
        count.fetch_add(1, Ordering::Relaxed);
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{BODY}", BODY.len()).into_bytes()
    });
    (addr, seen)
}

/// A guard (certificate for a.test) on these listeners, at port 0 each;
/// the listeners as bound.
fn guard(up: SocketAddr, serves: &[Serve], tune: impl FnOnce(&mut Config)) -> (Vec<Listener>, GuardThreads) {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.listeners = serves.iter().map(|&s| Listener::new("127.0.0.1:0".parse().unwrap(), s)).collect();
    c.pin = false;
    c.threads = 2;
    let dir = testdata();
    c.tls = vec![CertFiles { cert: dir.join("tls-a.test.pem"), key: dir.join("tls-a.test.key") }];
    tune(&mut c);
    let g = Guard::bind(c).unwrap();
    let bound = g.listeners().to_vec();
    (bound, g.start().unwrap())
}

/// `curl -si` with `args`, a.test resolving to loopback at `port`: the
/// last response's status line, its headers, its body. (HTTP/1.1 over
/// TLS too: HTTP/2 through the guard is tests/http2.rs's.)
fn curl(port: u16, args: &[&str]) -> (String, String, String) {
    let ca = testdata().join("tls-ca.pem");
    let out = Command::new("curl")
        .args(["-si", "--http1.1", "--max-time", "10", "--cacert", ca.to_str().unwrap()])
        .args(["--resolve", &format!("a.test:{port}:127.0.0.1")])
        .args(args)
        .output()
        .expect("curl (Debian package)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl {args:?}: {}: {text}", String::from_utf8_lossy(&out.stderr));
    // With -L, every response's head is printed: the last one is the answer.
    let last = text.rfind("HTTP/").expect("a response");
    let (head, body) = text[last..].split_once("\r\n\r\n").expect("a whole head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_owned(), body.to_owned())
}

fn stop(g: GuardThreads) {
    g.stop_flag().store(true, Ordering::Relaxed);
    g.wait().unwrap();
}

#[test]
fn one_guard_serves_a_tls_and_a_plain_listener() {
    let (up, seen) = upstream();
    let (l, g) = guard(up, &[Serve::Main, Serve::Plain], |_| {});
    let (tls, plain) = (l[0].addr.port(), l[1].addr.port());
    let (status, _, body) = curl(tls, &[&format!("https://a.test:{tls}/x")]);
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", BODY));
    let (status, _, body) = curl(plain, &[&format!("http://a.test:{plain}/x")]);
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", BODY));
    // TLS bytes to the plain listener are no request; plain HTTP to the TLS
    // one is no handshake.
    let out =
        Command::new("curl").args(["-sk", "--max-time", "5", &format!("https://127.0.0.1:{plain}/")]).output().unwrap();
    assert!(!out.status.success(), "TLS on the plain listener");
    let mut s = TcpStream::connect(l[0].addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(!got.starts_with(b"HTTP/"), "plain HTTP on the TLS listener: {}", String::from_utf8_lossy(&got));
    // Many connections on both at once: every one served by the same loops.
    let clients: Vec<_> = (0..16)
        .map(|k| {
            std::thread::spawn(move || match k % 2 {
                0 => curl(tls, &[&format!("https://a.test:{tls}/{k}")]),
                _ => curl(plain, &[&format!("http://a.test:{plain}/{k}")]),
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap().2, BODY);
    }
    assert_eq!(seen.load(Ordering::Relaxed), 18);
    stop(g);
}

#[test]
fn curl_http10_over_tls_is_served_as_http11_is() {
    let (up, _) = upstream();
    let (l, g) = guard(up, &[Serve::Main], |_| {});
    let port = l[0].addr.port();
    let url = format!("https://a.test:{port}/same");
    let (status11, _, body11) = curl(port, &["--http1.1", &url]);
    let (status10, _, body10) = curl(port, &["--http1.0", &url]);
    assert_eq!(status11, "HTTP/1.1 200 OK");
    assert!(status10.ends_with(" 200 OK"), "{status10}");
    assert_eq!(body10, body11);
    stop(g);
}

/// The answer to `request` sent raw to `to`, read to the close.
fn raw(to: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn the_redirect_listener_answers_308_to_the_tls_listener() {
    let (up, seen) = upstream();
    let (l, g) = guard(up, &[Serve::Main, Serve::RedirectHttps], |_| {});
    let (tls, redirect) = (l[0].addr.port(), l[1].addr.port());
    let (status, headers, body) = curl(redirect, &[&format!("http://a.test:{redirect}/a/b?c=d&e=%20")]);
    assert_eq!(status, "HTTP/1.1 308 Permanent Redirect");
    let location = headers.lines().find_map(|h| h.strip_prefix("Location: ")).expect("a Location");
    assert_eq!(location, format!("https://a.test:{tls}/a/b?c=d&e=%20"), "the Host's port replaced by the TLS one");
    assert!(body.is_empty());
    assert_eq!(seen.load(Ordering::Relaxed), 0, "nothing went upstream");
    // curl follows it to the TLS listener and is served there.
    let also = format!("a.test:{tls}:127.0.0.1");
    let (status, _, body) = curl(redirect, &["-L", "--resolve", &also, &format!("http://a.test:{redirect}/followed")]);
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", BODY));
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    // Kept alive: two requests on one connection, two redirects.
    let two = raw(
        l[1].addr,
        b"GET /1 HTTP/1.1\r\nHost: a.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(two.matches("308 Permanent Redirect").count(), 2, "{two}");
    assert!(two.contains(&format!("Location: https://a.test:{tls}/2\r\n")), "{two}");
    // No Host (HTTP/1.0 may omit it), a malformed one: 400, and closed.
    assert!(raw(l[1].addr, b"GET / HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 400 "));
    assert!(raw(l[1].addr, b"GET / HTTP/1.1\r\nHost: evil.test/x\r\n\r\n").starts_with("HTTP/1.1 400 "));
    assert_eq!(seen.load(Ordering::Relaxed), 1);
    // Counted apart: the first, the one curl followed, the two kept alive
    // (the refusals are not redirects).
    g.stop_flag().store(true, Ordering::Relaxed);
    let report = g.wait().unwrap();
    assert_eq!(report.counts.redirects, 4, "{:?}", report.counts);
}

/// Limits hold on a redirect listener as anywhere: a method not allowed, 405.
#[test]
fn a_redirect_listener_keeps_the_limits() {
    let (up, _) = upstream();
    let (l, g) = guard(up, &[Serve::Main, Serve::RedirectHttps], |c| {
        c.limits.http_methods = Some(vec!["GET".into()]);
    });
    let got = raw(l[1].addr, b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 405 "), "{got}");
    let got = raw(l[1].addr, b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 308 "), "{got}");
    stop(g);
}
