//! Upgrades (WebSocket): a request that asks to upgrade and is answered
//! `101` turns its connection into a tunnel to its upstream connection.
//! Bytes go both ways whole and in order (those sent early too), closes
//! pass through, an idle tunnel is closed, a 101 nobody asked for is a
//! 502, and a declined upgrade leaves the connection speaking HTTP.
//! The last test puts a real WebSocket client and server (Python's
//! `websockets`) on either side of the guard.

mod support;
use support::running;

use running::{connect, start as guard, stop};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const SWITCH: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

fn upgrade_request(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").into_bytes()
}

/// An upstream: `/ws` is answered 101 and "hello", then every byte is
/// echoed until the guard closes its side, then "bye" and the close.
/// `/rogue` is answered 101 whatever was asked; `/decline` 426; anything
/// else 200 "ok"; `/flood` is answered 101, then 64 KiB writes until one
/// fails. Each connection's upstream side reports what it wrote after its
/// 101 on `eofs` when it ends.
fn upstream() -> (SocketAddr, std::sync::mpsc::Receiver<usize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, eofs) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk) {
                            Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
                            _ => break,
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let target = head.split(' ').nth(1).unwrap_or("").to_owned();
                    match target.as_str() {
                        "/flood" => {
                            s.write_all(SWITCH).unwrap();
                            let _ = s.set_write_timeout(Some(Duration::from_secs(20)));
                            let mut wrote = 0;
                            while s.write_all(&[b'f'; 65536]).is_ok() {
                                wrote += 65536;
                            }
                            let _ = tx.send(wrote);
                            return;
                        }
                        "/ws" | "/rogue" => {
                            s.write_all(&[SWITCH, b"hello"].concat()).unwrap();
                            // The tunnel: an echo (bytes the client sent
                            // with its request first).
                            if s.write_all(&buf).is_err() {
                                break;
                            }
                            while let Ok(n @ 1..) = s.read(&mut chunk) {
                                if s.write_all(&chunk[..n]).is_err() {
                                    break;
                                }
                            }
                            let _ = s.write_all(b"bye");
                            break;
                        }
                        "/decline" => {
                            s.write_all(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 4\r\n\r\nnope").unwrap()
                        }
                        _ => s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap(),
                    }
                }
                let _ = tx.send(0);
            });
        }
    });
    (addr, eofs)
}

/// Read exactly `n` bytes.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    s.read_exact(&mut v).unwrap();
    v
}

/// One response with a Content-Length: its status and body.
fn read_response(s: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.extend(read_n(s, 1));
    }
    let text = String::from_utf8(head).unwrap();
    let status = text[9..12].parse().unwrap();
    let len = text
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    (status, read_n(s, len))
}

#[test]
fn an_upgrade_answered_101_becomes_a_tunnel_both_ways_until_the_closes() {
    let (up, eofs) = upstream();
    let (addr, g) = guard(up, |_| {});
    let mut s = connect(addr);
    // Bytes sent right behind the request wait for the 101, then go through.
    s.write_all(&[upgrade_request("/ws"), b"early".to_vec()].concat()).unwrap();
    assert_eq!(read_n(&mut s, SWITCH.len()), SWITCH);
    assert_eq!(read_n(&mut s, 5), b"hello", "the upstream's first bytes, sent with its 101");
    assert_eq!(read_n(&mut s, 5), b"early");
    // 4 MiB each way at once, far past --buffer-size: whole and in order.
    let data: Vec<u8> = (0..4u32 << 20).map(|k| (k.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        for piece in sent.chunks(100_003) {
            w.write_all(piece).unwrap();
        }
        // The client's close goes through as the upstream's EOF.
        w.shutdown(Shutdown::Write).unwrap();
    });
    assert!(read_n(&mut s, data.len()) == data, "the echo differs");
    writer.join().unwrap();
    assert_eq!(read_n(&mut s, 3), b"bye", "the upstream saw the client's close and answered");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "then its close ends the client's connection: {rest:?}");
    eofs.recv_timeout(Duration::from_secs(5)).unwrap();
    let c = g.shared().report().counts;
    assert_eq!((c.tunnels, c.upstream_errors), (1, 0), "{c:?}");
    stop(g);
}

#[test]
fn a_tunnel_client_that_stops_reading_holds_the_upstream_back_and_is_cut() {
    // The upstream writes as fast as it can into a tunnel whose client
    // reads nothing: the guard reads the upstream only into the client's
    // buffer, so the upstream is held back by full socket buffers (the
    // guard holds --buffer-size), and the send timeout cuts the client.
    let (up, eofs) = upstream();
    let (addr, g) = guard(up, |c| c.timeouts.send = Some(Duration::from_millis(800)));
    let mut s = connect(addr);
    s.write_all(&upgrade_request("/flood")).unwrap();
    assert_eq!(read_n(&mut s, SWITCH.len()), SWITCH);
    let t0 = Instant::now();
    let wrote =
        eofs.recv_timeout(Duration::from_secs(15)).expect("the upstream's writes failed: the tunnel was closed");
    // Loopback socket buffers grow to a few MiB each (tcp_wmem, tcp_rmem):
    // four of them lie between the upstream and the client.
    eprintln!("upstream wrote {wrote} bytes in {:?}", t0.elapsed());
    assert!(wrote < 48 << 20, "the upstream wrote {} MiB into a tunnel nobody read", wrote >> 20);
    assert!(t0.elapsed() < Duration::from_secs(10), "cut at the send timeout, not later: {:?}", t0.elapsed());
    let c = g.shared().report();
    assert_eq!((c.counts.tunnels, c.breaches["send_timeout"]), (1, 1), "{c:?}");
    stop(g);
}

#[test]
fn a_declined_upgrade_leaves_the_connection_speaking_http() {
    let (up, _eofs) = upstream();
    let (addr, g) = guard(up, |_| {});
    let mut s = connect(addr);
    s.write_all(&upgrade_request("/decline")).unwrap();
    assert_eq!(read_response(&mut s), (426, b"nope".to_vec()));
    s.write_all(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s), (200, b"ok".to_vec()));
    assert_eq!(g.shared().report().counts.tunnels, 0);
    stop(g);
}

#[test]
fn a_101_nobody_asked_for_is_a_502_and_so_is_any_101_with_no_upgrade() {
    let (up, _eofs) = upstream();
    let (addr, g) = guard(up, |_| {});
    let mut s = connect(addr);
    s.write_all(b"GET /rogue HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s).0, 502, "a 101 to a plain GET would be a tunnel nobody asked for");
    stop(g);
    let (addr, g) = guard(up, |c| c.upgrade_protocols.clear());
    let mut s = connect(addr);
    s.write_all(&upgrade_request("/ws")).unwrap();
    assert_eq!(read_response(&mut s).0, 502);
    assert_eq!(g.shared().report().counts.tunnels, 0);
    stop(g);
}

#[test]
fn an_h2c_upgrade_is_no_tunnel_unless_allowed() {
    // h2c through a proxy smuggles HTTP/2 requests past it: by default
    // only WebSocket upgrades become tunnels; an upstream that switches to
    // h2c anyway gets the client a 502.
    let h2c = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n\
                HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
    let (up, _eofs) = upstream();
    let (addr, g) = guard(up, |_| {});
    let mut s = connect(addr);
    s.write_all(h2c).unwrap();
    assert_eq!(read_response(&mut s).0, 502);
    assert_eq!(g.shared().report().counts.tunnels, 0);
    stop(g);
    let (addr, g) = guard(up, |c| c.upgrade_protocols = vec!["websocket".into(), "H2C".into()]);
    let mut s = connect(addr);
    s.write_all(h2c).unwrap();
    assert_eq!(read_n(&mut s, SWITCH.len() + 5), [SWITCH, b"hello"].concat(), "named, it is let through");
    assert_eq!(g.shared().report().counts.tunnels, 1);
    stop(g);
}

#[test]
fn an_idle_tunnel_is_closed_after_the_tunnel_timeout_and_a_busy_one_is_not() {
    let (up, eofs) = upstream();
    let (addr, g) = guard(up, |c| c.timeouts.tunnel = Some(Duration::from_millis(600)));
    let mut busy = connect(addr);
    let mut idle = connect(addr);
    for s in [&mut busy, &mut idle] {
        s.write_all(&upgrade_request("/ws")).unwrap();
        assert_eq!(read_n(s, SWITCH.len() + 5), [SWITCH, b"hello"].concat());
    }
    // The busy one talks every 150 ms for 2.4 s: four times the timeout.
    let t0 = Instant::now();
    for k in 0..16u8 {
        std::thread::sleep(Duration::from_millis(150));
        busy.write_all(&[k]).unwrap();
        assert_eq!(read_n(&mut busy, 1), [k]);
    }
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "closed without a byte: {rest:?}");
    eofs.recv_timeout(Duration::from_secs(5)).expect("the idle tunnel's upstream side was closed too");
    assert!(t0.elapsed() >= Duration::from_millis(600));
    let c = g.shared().report().counts;
    assert_eq!((c.tunnels, c.tunnels_idle_closed), (2, 1), "{c:?}");
    stop(g);
}

#[test]
fn a_tunnel_frees_its_request_slot() {
    // One request at the upstream at a time: a tunnel holding the slot
    // would leave the next request queued until its 503.
    let (up, _eofs) = upstream();
    let (addr, g) = guard(up, |c| {
        c.upstream_max_inflight = 1;
        c.timeouts.upstream_queue = Some(Duration::from_secs(3));
    });
    let mut ws = connect(addr);
    ws.write_all(&upgrade_request("/ws")).unwrap();
    assert_eq!(read_n(&mut ws, SWITCH.len() + 5), [SWITCH, b"hello"].concat());
    let mut s = connect(addr);
    for _ in 0..3 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s), (200, b"ok".to_vec()));
    }
    ws.write_all(b"still here").unwrap();
    assert_eq!(read_n(&mut ws, 10), b"still here");
    stop(g);
}

/// Python's `websockets` (Debian's python3-websockets), the library many
/// WebSocket services and their tests use: an echo server behind the
/// guard, and a client through it sending text and binary messages up to
/// 1 MiB, a ping, and a clean close handshake; over TLS too (`wss:`).
fn a_real_websocket_client_and_server_talk_through_the_guard(tls: bool) {
    let python = "/usr/bin/python3";
    let ok = std::process::Command::new(python).args(["-c", "import websockets"]).status();
    assert!(
        ok.is_ok_and(|s| s.success()),
        "python3-websockets is required (apt-get install python3-websockets; .ci/run installs it)"
    );
    let server = r#"
import asyncio, sys, websockets
async def echo(ws, path=None):
    async for m in ws:
        await ws.send(m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", 0, max_size=None) as srv:
        print(srv.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()
asyncio.run(main())
"#;
    let mut srv =
        std::process::Command::new(python).args(["-c", server]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(srv.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("server port: {line:?}"));
    let testdata = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata");
    let (addr, g) = guard(SocketAddr::from(([127, 0, 0, 1], port)), |c| {
        if tls {
            let (cert, key) = (testdata.join("tls-a.test.pem"), testdata.join("tls-a.test.key"));
            c.tls = vec![sluice_guard::tls::CertFiles { cert, key }];
        }
    });
    let client = r#"
import asyncio, os, ssl, sys, websockets
async def main():
    addr, ca = sys.argv[1], sys.argv[2]
    tls = {}
    if ca:
        tls = {"ssl": ssl.create_default_context(cafile=ca), "server_hostname": "a.test"}
    uri = ("wss://" if ca else "ws://") + addr + "/echo"
    async with websockets.connect(uri, max_size=None, **tls) as ws:
        n = 0
        for size in [0, 1, 125, 126, 65535, 65536, 1 << 20]:
            for m in ["t" * size, os.urandom(size)]:
                await ws.send(m)
                back = await ws.recv()
                assert back == m, (size, type(m))
                n += 1
        await (await ws.ping(b"are you there"))
        print("echoed", n)
    assert ws.close_code == 1000, ws.close_code
asyncio.run(asyncio.wait_for(main(), 60))
"#;
    let ca = if tls { testdata.join("tls-ca.pem").display().to_string() } else { String::new() };
    let out = std::process::Command::new(python).args(["-c", client, &addr.to_string(), &ca]).output().unwrap();
    let _ = srv.kill();
    let _ = srv.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.trim(), "echoed 14");
    let c = g.shared().report().counts;
    assert_eq!((c.tunnels, c.upstream_errors, c.tls_handshakes), (1, 0, u64::from(tls)), "{c:?}");
    stop(g);
}

#[test]
fn a_real_websocket_client_and_server_talk_through_the_guard_in_plain_http() {
    a_real_websocket_client_and_server_talk_through_the_guard(false);
}

#[test]
fn a_real_websocket_client_and_server_talk_through_the_guard_over_tls() {
    a_real_websocket_client_and_server_talk_through_the_guard(true);
}
