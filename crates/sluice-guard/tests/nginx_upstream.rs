//! The guard in front of a real server that answers in chunked coding:
//! nginx compressing static files on the fly (`gzip on`: the compressed
//! length is not known when the head goes out, so nginx sends chunks).
//! Through the guard, each response must be the one nginx gives directly,
//! whole, on a kept-alive connection. nginx is required (CI installs it).

mod support;
use support::heads;

use sluice_guard::{Config, Guard};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct Nginx(Child);

impl Drop for Nginx {
    /// SIGTERM, so the master ends its worker too (a SIGKILL would leave
    /// the worker listening), then SIGKILL after 5 s if it is still there.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// nginx serving `dir`'s files on `port`, gzip on for text.
fn nginx(dir: &std::path::Path, port: u16) -> Nginx {
    let d = dir.display();
    // In the foreground (a child this test can stop); root's workers run
    // as nobody unless told otherwise, and must read the files.
    let user = if is_root() { "user root;\n" } else { "" };
    let conf = format!(
        "daemon off;\n{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
           types {{ text/plain txt; }}\n\
           gzip on; gzip_min_length 0; gzip_types text/plain; gzip_comp_level 1;\n\
           server {{ listen 127.0.0.1:{port}; root {d}/www; }} }}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let conf = dir.join("nginx.conf");
    let mut cmd = Command::new("nginx");
    cmd.args(["-p", &d.to_string(), "-c", &conf.display().to_string()]);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx must be installed for this test (apt-get install nginx)");
    let n = Nginx(child);
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < until,
            "nginx did not listen: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    n
}

/// Whether this process runs as root (`/proc/self` is owned by its user).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

/// One response on `s` to `GET target` with gzip accepted: its head (lower
/// case) and its body's data (chunked or not).
fn get(s: &mut TcpStream, target: &str) -> (String, Vec<u8>) {
    write!(s, "GET {target} HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 65536];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let rest = &got[end + 4..];
            let len = head.lines().find_map(|l| l.strip_prefix("content-length:")).map(|v| v.trim().parse().unwrap());
            match len {
                Some(len) if rest.len() >= len => {
                    assert_eq!(rest.len(), len, "bytes past the response");
                    return (head, rest.to_vec());
                }
                Some(_) => {}
                None => {
                    if let Some((data, took)) = heads::dechunk(rest) {
                        assert_eq!(rest.len(), took, "bytes past the response");
                        return (head, data);
                    }
                }
            }
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got[..got.len().min(300)]));
        got.extend_from_slice(&b[..n]);
    }
}

#[test]
fn nginx_chunked_responses_pass_through_whole() {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    // Text that compresses, but not to nothing: a few bytes to megabytes.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut text = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                b"abcdefgh ijklmnop\n"[(seed % 18) as usize]
            })
            .collect()
    };
    let sizes = [5usize, 4_000, 300_000, 3_000_000];
    for (i, &n) in sizes.iter().enumerate() {
        std::fs::write(www.join(format!("f{i}.txt")), text(n)).unwrap();
    }
    let port = free_port();
    let _nginx = nginx(dir.path(), port);
    let up = SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), up);
    c.pin = false;
    let g = Guard::bind(c).unwrap();
    let addr = g.local_addr();
    let g = g.start().unwrap();

    let mut direct = TcpStream::connect(up).unwrap();
    let mut guarded = TcpStream::connect(addr).unwrap();
    for s in [&direct, &guarded] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    // Twice over, on the same connections.
    for round in 0..2 {
        for i in 0..sizes.len() {
            let target = format!("/f{i}.txt");
            let (want_head, want) = get(&mut direct, &target);
            let (head, body) = get(&mut guarded, &target);
            assert!(want_head.contains("transfer-encoding: chunked"), "nginx did not chunk {target}: {want_head}");
            assert!(head.starts_with("http/1.1 200"), "round {round} {target}: {head}");
            assert!(head.contains("transfer-encoding: chunked"), "{target}: {head}");
            assert!(head.contains("content-encoding: gzip"), "{target}: {head}");
            assert_eq!(body.len(), want.len(), "round {round} {target}: compressed lengths differ");
            assert!(body == want, "round {round} {target}: the compressed data differs");
        }
    }
    let counts = g.shared().report().counts;
    assert_eq!((counts.forwarded, counts.upstream_errors), (2 * sizes.len() as u64, 0), "{counts:?}");
    g.stop_flag().store(true, Ordering::Relaxed);
    g.wait().unwrap();
}
