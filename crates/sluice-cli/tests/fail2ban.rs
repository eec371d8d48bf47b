//! dist/fail2ban/action.d/sluice.conf under Debian's real fail2ban-server:
//! a bridge between two namespaces with a dynamic set `f2b` dropped by
//! source, fail2ban (foreground, a private copy of /etc/fail2ban) watching
//! two log files with the action as its banaction. Failed logins ban an
//! IPv4 and an IPv6 address into the set with fail2ban's bantime as their
//! timeout (none for a permanent ban), and the bridge drops their frames;
//! `fail2ban-client unbanip` deletes them; an unban of an address no longer
//! in the set is no error, while any other failure of an unban is.
//!
//! Needs root (veths, namespaces) and fail2ban: `SKIPPED` unless
//! `SLUICE_REQUIRE_LIVE=1` / `SLUICE_REQUIRE_TOOLS=1` (CI), when it fails.

mod common;
use sluice_testkit::live;

use common::bridge::Bridge;
use common::fail2ban::{elements, fail_logins, tool_or_skip, Fail2ban};
use common::p;
use live::{Endpoint, Topology};
use serde_json::Value;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn ctl(sock: &Path, args: &[&str]) -> Value {
    let out = Command::new(SLUICE).args(["ctl", "--json", "--socket", p(sock)]).args(args).output().unwrap();
    assert!(out.status.success(), "ctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits until `elem` is in the set (`present`) or not, failing with
/// fail2ban's log and the bridge's stderr after 30 s.
fn wait_for(sock: &Path, elem: &str, present: bool, f2b: &Fail2ban, dir: &Path, bridge: &Bridge) {
    let end = Instant::now() + Duration::from_secs(30);
    while elements(sock).iter().any(|(e, _)| e == elem) != present {
        assert!(
            Instant::now() < end,
            "{elem} {} the set after 30 s: {:?}{}\n--- bridge:\n{}",
            if present { "is not in" } else { "is still in" },
            elements(sock),
            f2b.logs(dir),
            bridge.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Our frames: UDP from `src` (to 198.51.100.1 or 2001:db8:ffff::1), the
/// payload a magic and `seq`.
const MAGIC: &[u8; 8] = b"SLUICEFB";

fn udp_frame(src: IpAddr, seq: u32) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    let udp_len = 8 + payload.len() as u16;
    let mut udp = vec![0x30, 0x39, 0, 53];
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&payload);
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a];
    match src {
        IpAddr::V4(s) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&[198, 51, 100, 1]);
            let sum = sluice_wire::checksum::finish(sluice_wire::checksum::sum(&ip));
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        IpAddr::V6(s) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&udp_len.to_be_bytes());
            f.extend_from_slice(&[17, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&"2001:db8:ffff::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        }
    }
    f.extend_from_slice(&udp);
    f
}

/// The seq of one of our frames.
fn seq_of(f: &[u8]) -> Option<u32> {
    let at = match f.get(12..14)? {
        [0x08, 0x00] => 14 + 20 + 8,
        [0x86, 0xdd] => 14 + 40 + 8,
        _ => return None,
    };
    if f.get(at..at + 8)? != MAGIC {
        return None;
    }
    Some(u32::from_be_bytes(f.get(at + 8..at + 12)?.try_into().ok()?))
}

/// Sends 5 frames from each of `banned` and then 5 from `clean` across the
/// bridge; waits for the clean ones (one worker judges in arrival order, so
/// every banned frame was judged before them) and returns whether any
/// banned frame arrived.
fn banned_frames_arrive(tx: &mut Endpoint, rx: &mut Endpoint, banned: &[IpAddr], clean: IpAddr, round: u32) -> bool {
    let base = round * 1000;
    let mut frames = Vec::new();
    for (i, src) in banned.iter().enumerate() {
        frames.extend((0..5).map(|k| udp_frame(*src, base + i as u32 * 10 + k)));
    }
    let clean_seqs: Vec<u32> = (0..5).map(|k| base + 900 + k).collect();
    frames.extend(clean_seqs.iter().map(|s| udp_frame(clean, *s)));
    tx.send_all(&frames);
    let mut got = std::collections::BTreeSet::new();
    let end = Instant::now() + Duration::from_secs(5);
    while !clean_seqs.iter().all(|s| got.contains(s)) {
        assert!(Instant::now() < end, "round {round}: the clean frames did not cross the bridge: {got:?}");
        rx.sock.poll_rx(5).unwrap();
        rx.sock.rx_batch(256, |f, _| {
            if let Some(s) = seq_of(f) {
                got.insert(s);
            }
        });
    }
    got.iter().any(|s| (base..base + 900).contains(s))
}

#[test]
fn fail2ban_bans_and_unbans_through_ctl() {
    if !tool_or_skip("fail2ban_bans_and_unbans_through_ctl", "fail2ban-server") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set f2b dynamic\ndrop saddr @f2b\n").unwrap();
    let control = dir.path().join("ctl.sock");
    let topo = Topology::new("f2b");
    let bridge = Bridge::start(&[
        "--iface",
        &topo.a.near,
        "--iface",
        &topo.b.near,
        "--io",
        "afpacket",
        "--rules",
        p(&rules),
        "--control",
        p(&control),
    ]);
    let (auth, forever) = (dir.path().join("auth.log"), dir.path().join("forever.log"));
    let f2b = Fail2ban::start(dir.path(), &control, &[("sshd-test", &auth, 600), ("forever", &forever, -1)]);
    let d = dir.path();
    let mut tx = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut rx = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let (v4, v6): (IpAddr, IpAddr) = ("203.0.113.7".parse().unwrap(), "2001:db8::7".parse().unwrap());
    let clean: IpAddr = "192.0.2.55".parse().unwrap();
    assert!(banned_frames_arrive(&mut tx, &mut rx, &[v4, v6], clean, 1), "before any ban, every frame crosses");

    // Failed logins: both families banned, with fail2ban's bantime as their timeout.
    fail_logins(&auth, "203.0.113.7");
    fail_logins(&auth, "2001:db8::7");
    wait_for(&control, "203.0.113.7/32", true, &f2b, d, &bridge);
    wait_for(&control, "2001:db8::7/128", true, &f2b, d, &bridge);
    for (e, left) in elements(&control) {
        let left = left.unwrap_or_else(|| panic!("{e} has no timeout"));
        assert!((590..=600).contains(&left), "{e}: {left} s left, bantime is 600");
    }
    assert!(!banned_frames_arrive(&mut tx, &mut rx, &[v4, v6], clean, 2), "the bridge drops the banned sources");

    // Unbanned by fail2ban: deleted from the set, forwarded again.
    f2b.unban("sshd-test", "203.0.113.7");
    wait_for(&control, "203.0.113.7/32", false, &f2b, d, &bridge);
    assert!(banned_frames_arrive(&mut tx, &mut rx, &[v4], clean, 3), "an unbanned source crosses again");

    // Gone from the set before fail2ban lifts it (a timeout that ran out, a
    // restarted bridge): the unban is no error.
    ctl(&control, &["del", "f2b", "2001:db8::7"]);
    let failed = ctl(&control, &["stats"])["ctl_failed"].clone();
    f2b.unban("sshd-test", "2001:db8::7");
    let end = Instant::now() + Duration::from_secs(30);
    while !f2b.log_text().contains("Unban 2001:db8::7") || ctl(&control, &["stats"])["ctl_failed"] == failed {
        assert!(Instant::now() < end, "fail2ban sent no del of 2001:db8::7: {}", f2b.logs(d));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!f2b.log_text().contains("ERROR"), "an unban of what the set no longer holds is no error: {}", f2b.logs(d));

    // A permanent ban (bantime -1): no timeout of its own.
    fail_logins(&forever, "198.51.100.9");
    wait_for(&control, "198.51.100.9/32", true, &f2b, d, &bridge);
    let all = elements(&control);
    assert_eq!(all, vec![("198.51.100.9/32".to_owned(), None)], "a permanent ban never expires");

    // Any other failure of an unban is one: with the bridge gone, fail2ban
    // says it could not unban.
    drop(bridge);
    f2b.unban("forever", "198.51.100.9");
    let end = Instant::now() + Duration::from_secs(30);
    while !f2b.log_text().contains("Failed to execute unban jail 'forever' action 'sluice'") {
        assert!(Instant::now() < end, "an unban with no bridge did not fail: {}", f2b.logs(d));
        std::thread::sleep(Duration::from_millis(100));
    }
}
