//! Least privilege, measured: `sluice bridge` as uid 65534 under `setpriv`
//! with only the ambient capabilities its I/O path needs forwards exactly
//! what the same bridge run as root forwards; with any one of them taken
//! away it exits non-zero with an error naming that capability. The guard
//! (`sluice http-guard`) needs none on a port from 1024 up, and only
//! CAP_NET_BIND_SERVICE below.
//!
//! ```text
//! ns_a:a0 <-> a1 [sluice bridge] b1 <-> ns_b:b0
//! ```
//!
//! The unprivileged runs have RLIMIT_MEMLOCK at 8 MiB at most (the
//! kernel's default since Linux 5.16), below the bridge's 16 MiB UMEM, so
//! AF_XDP needs CAP_IPC_LOCK whatever this machine's limit is.
//!
//! These tests need root (to build namespaces and to change uid) and
//! `setpriv` (util-linux): without them they print `SKIPPED: <reason>` and
//! pass, unless `SLUICE_REQUIRE_LIVE=1`, when they fail instead.

mod common;
use common::xdp_detached;
use sluice_testkit::live;

use common::bridge::Bridge;
use common::p;
use live::{live_or_skip, skipped, Endpoint, Topology};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const NOBODY: &str = "65534";

/// `--io afpacket`: the AF_PACKET sockets.
const AFPACKET: &[&str] = &["net_raw"];
/// `--io afxdp`: the AF_XDP sockets, the XSKMAP and XDP program, the UMEM.
const AFXDP: &[&str] = &["net_raw", "net_admin", "bpf", "ipc_lock"];

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Root and `setpriv` are here, and for `netns` also `ip`; otherwise
/// skip (or fail when `SLUICE_REQUIRE_LIVE=1`).
fn ready(test: &str, netns: bool) -> bool {
    let reason = if netns && !live_or_skip(test) {
        return false;
    } else if sluice_live::sys::euid() != 0 {
        "not root (setpriv needs root to change uid)"
    } else if !Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success()) {
        "setpriv (util-linux) is missing"
    } else {
        return true;
    };
    if std::env::var("SLUICE_REQUIRE_LIVE").as_deref() == Ok("1") {
        panic!("{test}: cannot run: {reason} (SLUICE_REQUIRE_LIVE=1)");
    }
    skipped(&format!("{test}: {reason}"));
    false
}

/// `setpriv` dropping to uid/gid 65534 with exactly `caps` (setpriv's
/// names: `net_raw`, ...) as the ambient, inheritable and bounding sets,
/// under RLIMIT_MEMLOCK of at most 8 MiB; the command follows.
fn as_nobody(caps: &[&str]) -> Command {
    let set = std::iter::once("-all".to_owned()).chain(caps.iter().map(|c| format!("+{c}"))).collect::<Vec<_>>();
    let set = set.join(",");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("ulimit -l {} && exec \"$0\" \"$@\"", memlock_kib()), "setpriv"]);
    cmd.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--no-new-privs"]);
    cmd.args(["--inh-caps", &set, "--ambient-caps", &set, "--bounding-set", &set]);
    cmd
}

/// 8 MiB in KiB, or the hard RLIMIT_MEMLOCK if that is lower.
fn memlock_kib() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse::<u64>().ok());
    hard.map_or(8192, |h| (h / 1024).min(8192))
}

/// The capability bits of setpriv's names, as /proc/PID/status shows them.
fn cap_mask(caps: &[&str]) -> u64 {
    caps.iter()
        .map(|c| match *c {
            "net_bind_service" => 1u64 << 10,
            "net_admin" => 1 << 12,
            "net_raw" => 1 << 13,
            "ipc_lock" => 1 << 14,
            "bpf" => 1 << 39,
            other => panic!("no bit for {other}"),
        })
        .sum()
}

/// Asserts that process `pid` runs as uid 65534 with exactly `caps` effective.
fn assert_runs_as_nobody(pid: u32, caps: &[&str]) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap().trim().to_owned();
    let uids: Vec<String> = field("Uid:").split_whitespace().map(str::to_owned).collect();
    assert_eq!(uids, [NOBODY; 4], "{status}");
    let eff = u64::from_str_radix(&field("CapEff:"), 16).unwrap();
    assert_eq!(eff, cap_mask(caps), "effective capabilities of {pid}, expected {caps:?}");
}

/// 400 generated frames (IPv4 and IPv6, some VLAN-tagged, imix sizes),
/// 30% of them from sources in `list`; those a 1500-byte MTU link carries.
fn frames(dir: &Path, name: &str, seed: u64, list: &Path) -> Vec<Vec<u8>> {
    let cap = dir.join(format!("{name}.pcap"));
    let seed = seed.to_string();
    common::ok(&[
        "gen",
        "--out",
        p(&cap),
        "--count",
        "400",
        "--seed",
        &seed,
        "--listed",
        "0.3",
        "--list",
        p(list),
        "--ipv6",
        "0.3",
        "--vlan",
        "0.2",
        "--size",
        "imix",
    ]);
    let mut r = sluice_pcap::CaptureReader::open(&cap).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        let tagged = rec.data[12..14] == [0x81, 0x00];
        if rec.data.len() <= 1514 + if tagged { 4 } else { 0 } {
            out.push(rec.data.to_vec());
        }
    }
    out
}

fn multiset(frames: &[Vec<u8>]) -> BTreeMap<&[u8], usize> {
    let mut m = BTreeMap::new();
    for f in frames {
        *m.entry(f.as_slice()).or_default() += 1;
    }
    m
}

/// Sends `frames` from `from` in bursts of 32 (the receiving veth's backlog
/// holds 1000) while reading `to`, until `want` have arrived or 10 s pass;
/// then 150 ms more for anything extra. Everything that arrived.
fn send_and_capture(from: &mut Endpoint, to: &mut Endpoint, frames: &[Vec<u8>], want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let take = |to: &mut Endpoint, got: &mut Vec<Vec<u8>>| to.sock.rx_batch(4096, |f, _| got.push(f.to_vec()));
    for chunk in frames.chunks(32) {
        from.send_all(chunk);
        std::thread::sleep(Duration::from_millis(2));
        take(to, &mut got);
    }
    let end = Instant::now() + Duration::from_secs(10);
    while got.len() < want && Instant::now() < end {
        to.sock.poll_rx(5).unwrap();
        take(to, &mut got);
    }
    std::thread::sleep(Duration::from_millis(150));
    take(to, &mut got);
    got
}

/// What crosses a bridge started by `cmd`, both ways: (A to B, B to A).
fn crossing(
    cmd: Command,
    topo: &Topology,
    traffic: &[Vec<Vec<u8>>; 2],
    want: [usize; 2],
    check: impl FnOnce(&Bridge),
) -> [Vec<Vec<u8>>; 2] {
    let bridge = Bridge::spawn(cmd);
    check(&bridge);
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let ab = send_and_capture(&mut ep_a, &mut ep_b, &traffic[0], want[0]);
    let ba = send_and_capture(&mut ep_b, &mut ep_a, &traffic[1], want[1]);
    bridge.stop_output();
    [ab, ba]
}

/// One series of the bridge's `/metrics` (the first line starting with `series`).
fn metric(b: &Bridge, series: &str) -> Option<u64> {
    b.scrape().lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The capability named as missing in the error when `cap` is taken away.
fn named(cap: &str) -> String {
    match cap {
        // The UMEM is over RLIMIT_MEMLOCK: the error gives the limit and names CAP_IPC_LOCK.
        "ipc_lock" => "run with CAP_IPC_LOCK".to_owned(),
        _ => format!("(this process lacks CAP_{})", cap.to_uppercase()),
    }
}

/// The bridge over `io` as root and as uid 65534 with `caps`: the same
/// frames arrive; then without each one of `caps` it fails naming it.
fn least_privilege(test: &str, io: &[&str], caps: &[&str], tag: &str) {
    if !ready(test, true) {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "198.51.100.0/24\n203.0.113.0/25\n2001:db8:1::/48\n").unwrap();
    // The unprivileged bridge reads the list and serves its control socket here.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let list_copy = shared.join("list.txt");
    std::fs::copy(&list, &list_copy).unwrap();
    let traffic = [frames(dir.path(), "ab", 11, &list), frames(dir.path(), "ba", 12, &list)];

    // What `sluice filter` passes of each direction: how many to wait for.
    let want = [0, 1].map(|i| {
        let cap = dir.path().join(format!("{i}.pcap"));
        let pass = dir.path().join(format!("{i}.pass.pcap"));
        std::fs::write(&cap, common::pcap(&traffic[i])).unwrap();
        common::ok(&["filter", "--in", p(&cap), "--pass", p(&pass), "--drop-src", p(&list)]);
        let mut r = sluice_pcap::CaptureReader::open(&pass).unwrap();
        let mut n = 0;
        while r.next_record().unwrap().is_some() {
            n += 1;
        }
        n
    });

    let topo = Topology::new(tag);
    let (a1, b1) = (topo.a.near.clone(), topo.b.near.clone());
    let mut args: Vec<&str> = vec!["bridge", "--iface", &a1, "--iface", &b1];
    args.extend(io);

    let mut root = Command::new(SLUICE);
    root.args(&args).args(["--drop-src", p(&list)]);
    let by_root = crossing(root, &topo, &traffic, want, |_| {});
    for (i, dir) in ["A->B", "B->A"].iter().enumerate() {
        assert!(!by_root[i].is_empty() && by_root[i].len() < traffic[i].len(), "{dir}: the root run dropped some");
        assert_eq!(by_root[i].len(), want[i], "{dir}: the root run forwards what `sluice filter` passes");
    }

    // As uid 65534 with `caps`, with the metrics and the control socket on
    // (they need no capability).
    let sock = shared.join("ctl.sock");
    let mut nobody = as_nobody(caps);
    nobody.arg(SLUICE).args(&args).args(["--drop-src", p(&list_copy)]);
    nobody.args(["--metrics", "127.0.0.1:0", "--control", p(&sock)]);
    let by_nobody = crossing(nobody, &topo, &traffic, want, |b| {
        assert_runs_as_nobody(b.child.id(), caps);
        assert_eq!(metric(b, "sluice_dry_run{}"), Some(0), "metrics served");
        common::ok(&["ctl", "--socket", p(&sock), "sets"]);
    });
    for (i, dir) in ["A->B", "B->A"].iter().enumerate() {
        println!(
            "{dir}: {} sent, {} arrived as root, {} as uid 65534",
            traffic[i].len(),
            by_root[i].len(),
            by_nobody[i].len()
        );
        assert!(
            multiset(&by_nobody[i]) == multiset(&by_root[i]),
            "{dir}: as uid 65534 with {caps:?}, {} frames arrived; as root, {}",
            by_nobody[i].len(),
            by_root[i].len()
        );
    }
    if io.contains(&"afxdp") {
        assert!(xdp_detached(&[&a1, &b1]), "the unprivileged bridge detached its XDP programs");
    }

    // Without any one of them: an error naming it, at once.
    for cap in caps {
        let fewer: Vec<&str> = caps.iter().copied().filter(|c| c != cap).collect();
        let mut cmd = as_nobody(&fewer);
        cmd.arg(SLUICE).args(&args).args(["--drop-src", p(&list_copy), "--duration", "10"]);
        let started = Instant::now();
        let out: Output = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        println!("without {cap}: {err}");
        assert!(!out.status.success(), "without {cap} the bridge ran: {err}");
        assert!(started.elapsed() < Duration::from_secs(5) && !err.contains("sluice: bridging"), "{err}");
        assert!(err.contains(&named(cap)), "without {cap} the error does not say {:?}: {err}", named(cap));
        if io.contains(&"afxdp") {
            assert!(xdp_detached(&[&a1, &b1]), "nothing left attached without {cap}");
        }
    }
}

#[test]
fn afpacket_bridge_as_nobody_with_cap_net_raw_forwards_as_root() {
    least_privilege(
        "afpacket_bridge_as_nobody_with_cap_net_raw_forwards_as_root",
        &["--io", "afpacket"],
        AFPACKET,
        "pp",
    );
}

#[test]
fn afxdp_bridge_as_nobody_with_four_capabilities_forwards_as_root() {
    least_privilege(
        "afxdp_bridge_as_nobody_with_four_capabilities_forwards_as_root",
        &["--io", "afxdp", "--xdp-mode", "skb"],
        AFXDP,
        "px",
    );
}

/// `http-guard` as uid 65534 with `caps` on `listen`: the child and the
/// address it listens on, or what it printed before it exited non-zero.
fn guard(caps: &[&str], listen: &str, upstream: std::net::SocketAddr) -> Result<(Child, String), String> {
    let mut child = as_nobody(caps)
        .arg(SLUICE)
        .args(["http-guard", "--listen", listen, "--upstream", &upstream.to_string()])
        .args(["--threads", "2", "--no-pin", "--duration", "10", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(addr) = line.trim().strip_prefix("sluice: guarding on ") {
            let addr = addr.to_owned();
            // Keep draining its stderr so it never blocks on a full pipe.
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            return Ok((child, addr));
        }
        seen.push_str(&line);
        line.clear();
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the guard exited 0 without listening: {seen}");
    Err(seen)
}

/// One `GET /` through the guard at `addr`: the status.
fn get(addr: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    std::str::from_utf8(&resp[9..12]).unwrap().parse().unwrap()
}

/// SIGTERM, then exit 0 required.
fn stop_guard(child: Child) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The upstream, stopped now rather than at its --duration.
fn stop_upstream(up: common::Served) {
    assert!(Command::new("kill").args(["-TERM", &up.child.id().to_string()]).status().unwrap().success());
    up.summary();
}

#[test]
fn guard_as_nobody_needs_no_capability_from_port_1024() {
    let test = "guard_as_nobody_needs_no_capability_from_port_1024";
    if !ready(test, false) {
        return;
    }
    let _serial = serial();
    let up = common::http_serve(20, &[]);
    // Port 0: the kernel picks one from the ephemeral range, above 1024.
    let (child, addr) = guard(&[], "127.0.0.1:0", up.addr).expect("the guard starts with no capability");
    assert!(addr.rsplit(':').next().unwrap().parse::<u16>().unwrap() >= 1024, "{addr}");
    assert_runs_as_nobody(child.id(), &[]);
    assert_eq!(get(&addr), 200, "served through the guard");
    stop_guard(child);

    // Below net.ipv4.ip_unprivileged_port_start (1024 by default) it takes
    // CAP_NET_BIND_SERVICE, and nothing else.
    let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024);
    let Some(port) = (600..start.min(1024)).find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) else {
        skipped(&format!("{test}: no privileged port below {start} to try"));
        stop_upstream(up);
        return;
    };
    let low = format!("127.0.0.1:{port}");
    match guard(&[], &low, up.addr) {
        Ok((child, _)) => {
            stop_guard(child);
            panic!("the guard listened on {low} without a capability");
        }
        Err(err) => assert!(
            err.contains("Permission denied")
                && err.contains("needs CAP_NET_BIND_SERVICE")
                && err.matches("Permission denied").count() == 1,
            "{err}"
        ),
    }
    let (child, addr) = guard(&["net_bind_service"], &low, up.addr).expect("the guard with CAP_NET_BIND_SERVICE");
    assert_runs_as_nobody(child.id(), &["net_bind_service"]);
    assert_eq!(get(&addr), 200, "served through the guard on {addr}");
    stop_guard(child);
    stop_upstream(up);
}
