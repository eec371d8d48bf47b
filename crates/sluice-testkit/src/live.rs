//! Test topology: network namespaces and veth pairs built with `ip`, torn
//! down by guards on drop (also when the test panics).
//!
//! Tests that need root or `ip` print `SKIPPED: <reason>` and return,
//! unless `SLUICE_REQUIRE_LIVE=1`, when they fail instead (CI is root).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// True when the live tests can run here; otherwise prints why and returns
/// false (or panics when `SLUICE_REQUIRE_LIVE=1`).
pub fn live_or_skip(test: &str) -> bool {
    let reason = if sluice_live::sys::euid() != 0 {
        Some("not root (needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_SYS_ADMIN for netns)".to_owned())
    } else if Command::new("ip").arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
        Some("the `ip` command (iproute2) is missing".to_owned())
    } else {
        None
    };
    match reason {
        None => true,
        Some(r) => {
            if std::env::var("SLUICE_REQUIRE_LIVE").as_deref() == Ok("1") {
                panic!("{test}: cannot run live test: {r} (SLUICE_REQUIRE_LIVE=1)");
            }
            skipped(&format!("{test}: {r}"));
            false
        }
    }
}

/// Prints `SKIPPED: <reason>` straight to the process's stderr, past the
/// test harness's output capture, so a skip shows in every log.
pub fn skipped(reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {reason}");
}

/// Runs a command, panicking with its stderr on failure.
pub fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs a command, ignoring failure (cleanup).
pub fn run_quiet(args: &[&str]) {
    let _ = Command::new(args[0]).args(&args[1..]).output();
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A short unique prefix for interface and namespace names: `s<pid hex><n>`,
/// so parallel tests and parallel runs never collide (names stay under 15 bytes).
pub fn unique(tag: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("s{:x}{n}{tag}", std::process::id())
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        run(&["ip", "netns", "add", name]);
        let ns = Netns { name: name.to_owned() };
        run(&["ip", "-n", name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        run_quiet(&["ip", "netns", "del", &self.name]);
    }
}

/// Turns IPv6 off on `dev` (in `ns`, or the current namespace) so the
/// kernel sends nothing of its own on it (no DAD, RS or MLD).
fn quiet(ns: Option<&str>, dev: &str) {
    let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
    match ns {
        Some(ns) => run(&["ip", "netns", "exec", ns, "sysctl", "-qw", &key]),
        None => run(&["sysctl", "-qw", &key]),
    }
    let mut args = vec!["ip"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["link", "set", "dev", dev, "addrgenmode", "none"]);
    run_quiet(&args);
}

/// A veth pair `near` (current namespace) <-> `far` (in `far_ns`, or the
/// current namespace), both up and quiet. Deleting `near` on drop deletes both.
pub struct Veth {
    pub near: String,
    pub far: String,
    pub far_ns: Option<String>,
}

impl Veth {
    pub fn new(near: &str, far: &str, far_ns: Option<&str>) -> Veth {
        Veth::with_queues(near, far, far_ns, 1)
    }

    /// A pair whose ends have `queues` TX and RX queues each.
    pub fn with_queues(near: &str, far: &str, far_ns: Option<&str>, queues: u32) -> Veth {
        let q = queues.to_string();
        let mut args = vec!["ip", "link", "add", near];
        if queues > 1 {
            args.extend(["numtxqueues", &q, "numrxqueues", &q]);
        }
        args.extend(["type", "veth", "peer", "name", far]);
        if queues > 1 {
            args.extend(["numtxqueues", &q, "numrxqueues", &q]);
        }
        if let Some(ns) = far_ns {
            args.extend(["netns", ns]);
        }
        run(&args);
        let v = Veth { near: near.to_owned(), far: far.to_owned(), far_ns: far_ns.map(str::to_owned) };
        quiet(None, near);
        quiet(far_ns, far);
        run(&["ip", "link", "set", "dev", near, "up"]);
        match far_ns {
            Some(ns) => run(&["ip", "-n", ns, "link", "set", "dev", far, "up"]),
            None => run(&["ip", "link", "set", "dev", far, "up"]),
        }
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        run_quiet(&["ip", "link", "del", "dev", &self.near]);
    }
}

/// `ns_a:a0 <-> a1 [bridge here] b1 <-> ns_b:b0`.
pub struct Topology {
    // Drop order: links first, then namespaces.
    pub a: Veth,
    pub b: Veth,
    pub ns_a: Netns,
    pub ns_b: Netns,
}

impl Topology {
    pub fn new(tag: &str) -> Topology {
        Topology::with_queues(tag, 1)
    }

    /// The same with `queues` queues on every veth end (a multi-queue NIC's
    /// stand-in: driver-mode XDP sees the peer's TX queue as its RX queue).
    pub fn with_queues(tag: &str, queues: u32) -> Topology {
        let p = unique(tag);
        let ns_a = Netns::new(&format!("{p}na"));
        let ns_b = Netns::new(&format!("{p}nb"));
        let a = Veth::with_queues(&format!("{p}a1"), &format!("{p}a0"), Some(&ns_a.name), queues);
        let b = Veth::with_queues(&format!("{p}b1"), &format!("{p}b0"), Some(&ns_b.name), queues);
        Topology { a, b, ns_a, ns_b }
    }
}

/// Ethertype for the test payloads (IEEE local experimental).
pub const ETH_TEST: u16 = 0x88b5;
/// Marks our frames among anything else a link might carry.
pub const MAGIC: &[u8; 8] = b"SLUICE!!";

/// A test frame: Ethernet (optionally one 802.1Q tag) with a marked payload
/// carrying `seq`, `len` bytes in all.
pub fn frame(seq: u32, vlan: Option<u16>, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    if let Some(vid) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&(vid & 0x0fff | 0x2000).to_be_bytes()); // PCP 1
    }
    f.extend_from_slice(&ETH_TEST.to_be_bytes());
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761);
    while f.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        f.push(x as u8);
    }
    f
}

/// The sequence number of one of our frames, or None for anything else.
pub fn seq_of(f: &[u8]) -> Option<u32> {
    let at = if f.get(12..14)? == [0x81, 0x00] { 16 } else { 12 };
    if f.get(at..at + 2)? != ETH_TEST.to_be_bytes() || f.get(at + 2..at + 10)? != MAGIC {
        return None;
    }
    Some(u32::from_be_bytes(f.get(at + 10..at + 14)?.try_into().ok()?))
}

/// The frames a test sends: plain, VLAN-tagged, small and full-size.
pub fn test_frames(first_seq: u32, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let seq = first_seq + i;
            let vlan = if i % 3 == 1 { Some(100 + (i % 7) as u16) } else { None };
            let len = [60usize, 128, 1514, 333, 1000][i as usize % 5];
            frame(seq, vlan, len)
        })
        .collect()
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f()
}

use sluice_live::{PacketConfig, PacketSocket};
use std::collections::BTreeMap;

/// An AF_PACKET socket on a far end (inside a namespace), for sending
/// test frames and capturing what arrives.
pub struct Endpoint {
    pub sock: PacketSocket,
}

impl Endpoint {
    pub fn open(ns: &str, iface: &str) -> Endpoint {
        let iface = iface.to_owned();
        let sock = sluice_live::netns::run_in(ns, move || PacketSocket::open(&iface, &PacketConfig::default()))
            .expect("enter netns")
            .expect("endpoint socket");
        Endpoint { sock }
    }

    /// Sends every frame, waiting for the ring when it is full.
    pub fn send_all(&mut self, frames: &[Vec<u8>]) {
        for f in frames {
            let mut tries = 0;
            while !self.sock.send(f).expect("send") {
                self.sock.flush_wait().expect("flush");
                tries += 1;
                assert!(tries < 1000, "TX ring stays full");
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        self.sock.flush_wait().expect("flush");
    }

    /// Collects our frames (by sequence number) until `want` have arrived
    /// or `timeout` passes; other frames are ignored. Duplicates panic.
    pub fn collect(&mut self, want: usize, timeout: Duration) -> BTreeMap<u32, Vec<u8>> {
        let mut got = BTreeMap::new();
        let end = Instant::now() + timeout;
        while got.len() < want && Instant::now() < end {
            self.sock.poll_rx(5).expect("poll");
            self.sock.rx_batch(256, |f, _| {
                if let Some(seq) = seq_of(f) {
                    assert!(got.insert(seq, f.to_vec()).is_none(), "frame {seq} arrived twice");
                }
            });
        }
        // Anything late and extra?
        std::thread::sleep(Duration::from_millis(20));
        self.sock.rx_batch(4096, |f, _| {
            if let Some(seq) = seq_of(f) {
                assert!(got.insert(seq, f.to_vec()).is_none(), "frame {seq} arrived twice");
            }
        });
        got
    }
}

/// Asserts that `got` holds exactly `sent`, byte for byte.
pub fn assert_same(what: &str, sent: &[Vec<u8>], got: &BTreeMap<u32, Vec<u8>>) {
    let missing: Vec<u32> = sent.iter().filter_map(|f| seq_of(f)).filter(|s| !got.contains_key(s)).collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} frames missing, e.g. {:?}",
        missing.len(),
        sent.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(got.len(), sent.len(), "{what}: extra frames");
    for f in sent {
        let seq = seq_of(f).unwrap();
        assert_eq!(&got[&seq], f, "{what}: frame {seq} changed on the way");
    }
}

/// An Ethernet + IPv4 + UDP datagram `id` from `src` to 198.51.100.1, 64
/// payload bytes in two fragments of 32 (the first carries the UDP header).
pub fn ipv4_fragments(id: u16, src: [u8; 4]) -> [Vec<u8>; 2] {
    let piece = |offset: u16, more: bool| {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
        let mut ip = vec![0x45, 0, 0, 52];
        ip.extend_from_slice(&id.to_be_bytes());
        ip.extend_from_slice(&((u16::from(more) << 13) | (offset / 8)).to_be_bytes());
        ip.extend_from_slice(&[64, 17, 0, 0]);
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&[198, 51, 100, 1]);
        let sum = sluice_wire::checksum::finish(sluice_wire::checksum::sum(&ip));
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&ip);
        if offset == 0 {
            f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 64, 0, 0]);
        }
        while f.len() < 14 + 52 {
            f.push((id as u8).wrapping_add(f.len() as u8));
        }
        f
    };
    [piece(0, true), piece(32, false)]
}
