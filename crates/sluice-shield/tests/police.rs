//! `police` and `iface` in the kernel program (`BPF_PROG_TEST_RUN`): a
//! rule's burst passes and the rest is dropped as the engine drops it,
//! per-address buckets are the engine's (the same hash in BPF), `--dry-run`
//! counts and drops nothing; `iface` compares the interface a frame came
//! in on.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use common::can_load;
use sluice_engine::flows::Policer;
use sluice_engine::{CompileOptions, RuleSet, Verdict};
use sluice_rules::{parse_rules, RuleFile};
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::{Compiled, Options, ShieldError};
use sluice_wire::LinkType;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

/// Ethernet, IPv4 or IPv6 from `src` to `dst`, UDP to port 9.
fn udp(src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let l4 = [0x30, 0x39, 0, 9, 0, 8, 0, 0];
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => unreachable!("one family"),
    }
    f.extend_from_slice(&l4);
    f
}

fn v4(d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, d))
}

fn file(text: &str) -> RuleFile {
    parse_rules("x.rules", text, std::path::Path::new(".")).unwrap()
}

fn load(text: &str, dry_run: bool) -> Compiled {
    Compiled::new(&file(text), &[], &Options { dry_run, ..Options::default() }).unwrap()
}

/// 100 frames back to back through `police 10pps burst 5`: the engine on
/// one clock passes 6 (the burst, and the one the empty bucket takes);
/// the kernel, whose clock moves, the same unless the 100 runs took over
/// a packet's 100 ms (then one more per 100 ms, as the engine would on
/// that clock too). Counters: the police rule counts all 100, a later
/// `count` rule those that got past it.
#[test]
fn a_burst_passes_and_the_rest_is_dropped() {
    if !can_load() {
        return;
    }
    let text = "police 10pps burst 5 udp\ncount udp\n";
    let f = udp(v4(1), v4(2));
    let engine = RuleSet::compile(&file(text), &[], &CompileOptions::default()).unwrap();
    let p = sluice_wire::decode(LinkType::ETHERNET, &f).unwrap();
    let engine_passed =
        (0..100).filter(|_| engine.evaluate_reference_at(&p, f.len() as u32, 0, 0, |_| {}).verdict == Verdict::Pass);
    assert_eq!(engine_passed.count(), 6);

    let k = load(text, false);
    let start = Instant::now();
    let verdicts: Vec<u32> = (0..100).map(|_| k.test_run(&f).unwrap()).collect();
    let took = start.elapsed();
    let passed = verdicts.iter().filter(|&&v| v == XDP_PASS as u32).count();
    let late = (took.as_nanos() / 100_000_000) as usize;
    assert!((6..=6 + late).contains(&passed), "{passed} passed in {took:?}");
    if late == 0 {
        assert_eq!(passed, 6, "{took:?}");
    }
    // The burst is the first frames: nothing passes once the bucket is over
    // until time refills it.
    assert!(verdicts[..6].iter().all(|&v| v == XDP_PASS as u32), "{verdicts:?}");
    assert_eq!(verdicts.iter().filter(|&&v| v == XDP_DROP as u32).count(), 100 - passed);
    let c = k.counts().unwrap();
    assert_eq!((c[0].packets, c[0].bytes), (100, 100 * f.len() as u64), "the police rule counts all it sees");
    assert_eq!(c[1].packets, passed as u64, "the later rule sees what conformed");
    assert_eq!(k.police_dropped().unwrap(), [Some(100 - passed as u64), None]);
    // One bucket, charged.
    let b = k.police_buckets(0).unwrap().unwrap();
    assert_eq!(b.len(), 1);
    assert!(b[0] > 0);
    assert_eq!(k.police_buckets(1).unwrap(), None);
}

/// `--dry-run`: the same rule drops nothing; the counters say the same.
#[test]
fn dry_run_counts_what_police_would_drop_and_drops_nothing() {
    if !can_load() {
        return;
    }
    let k = load("police 10pps burst 5 udp\ncount udp\n", true);
    let f = udp(v4(1), v4(2));
    assert!((0..100).all(|_| k.test_run(&f).unwrap() == XDP_PASS as u32));
    let c = k.counts().unwrap();
    assert_eq!(c[0].packets, 100);
    // Over the rate the police rule decided (pass, in a dry run): the later
    // rule saw the conforming ones only, as in the engine.
    assert!((6..=10).contains(&c[1].packets), "{:?}", c[1]);
    assert_eq!(k.police_dropped().unwrap(), [Some(100 - c[1].packets), None], "counted as over, not dropped");
}

/// `per saddr`: two sources keep their buckets apart, each passes its own
/// burst; `per daddr` likewise by destination.
#[test]
fn per_address_buckets_keep_addresses_apart() {
    if !can_load() {
        return;
    }
    let (a, b) = (v4(1), v4(2));
    let bits = |ip| sluice_bgp::flowspec::PrefixMatch::bits_of(ip);
    assert_ne!(Policer::bucket_of(&bits(a)), Policer::bucket_of(&bits(b)), "pick addresses in two buckets");
    for (per, from_a, from_b) in [("saddr", udp(a, v4(9)), udp(b, v4(9))), ("daddr", udp(v4(9), a), udp(v4(9), b))] {
        let k = load(&format!("police 1pps burst 2 per {per} udp\n"), false);
        let mut passed = [0, 0];
        for _ in 0..20 {
            passed[0] += usize::from(k.test_run(&from_a).unwrap() == XDP_PASS as u32);
            passed[1] += usize::from(k.test_run(&from_b).unwrap() == XDP_PASS as u32);
        }
        // A second per packet: 40 runs take far less.
        assert_eq!(passed, [3, 3], "per {per}");
    }
}

/// The kernel picks each address's bucket as the engine does: xxh3 of the
/// address's 128 bits, in BPF. After one frame from each of many IPv4 and
/// IPv6 sources, the charged buckets are exactly the engine's.
#[test]
fn the_kernel_hashes_addresses_into_the_engines_buckets() {
    if !can_load() {
        return;
    }
    let k = load("police 1pps burst 1000 per saddr\n", false);
    let mut want = std::collections::BTreeSet::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..300u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let src = if i % 2 == 0 {
            IpAddr::V4(Ipv4Addr::from(x as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(u128::from(x) << 64 | u128::from(x.rotate_left(17))))
        };
        let dst = if src.is_ipv4() { v4(1) } else { IpAddr::V6(Ipv6Addr::LOCALHOST) };
        assert_eq!(k.test_run(&udp(src, dst)).unwrap(), XDP_PASS as u32);
        want.insert(Policer::bucket_of(&sluice_bgp::flowspec::PrefixMatch::bits_of(src)));
    }
    // A frame without IP is keyed 0, as in the engine.
    let arp = [&[0xffu8; 6][..], &[2, 0, 0, 0, 0, 1, 0x08, 0x06], &[0; 28]].concat();
    assert_eq!(k.test_run(&arp).unwrap(), XDP_PASS as u32);
    want.insert(Policer::bucket_of(&0));
    let buckets = k.police_buckets(0).unwrap().unwrap();
    assert_eq!(buckets.len(), sluice_shield::police::PER_ADDRESS_BUCKETS);
    let got: std::collections::BTreeSet<usize> = (0..buckets.len()).filter(|&i| buckets[i] != 0).collect();
    assert_eq!(got, want);
}

/// A byte rate charges each frame its length: `police 8bit burst 100`
/// (1 byte a second) passes frames while their bytes fit the burst.
#[test]
fn a_byte_rate_charges_by_length() {
    if !can_load() {
        return;
    }
    let f = udp(v4(1), v4(2)); // 42 bytes
    let k = load("police 8bit burst 100 udp\n", false);
    let verdicts: Vec<bool> = (0..10).map(|_| k.test_run(&f).unwrap() == XDP_PASS as u32).collect();
    // 0, 42, 84 bytes ahead are within 100; 126 is not.
    assert_eq!(verdicts, [true, true, true, false, false, false, false, false, false, false]);
    let engine = RuleSet::compile(&file("police 8bit burst 100 udp\n"), &[], &CompileOptions::default()).unwrap();
    let p = sluice_wire::decode(LinkType::ETHERNET, &f).unwrap();
    let e: Vec<bool> =
        (0..10).map(|_| engine.evaluate_reference_at(&p, 42, 0, 0, |_| {}).verdict == Verdict::Pass).collect();
    assert_eq!(e, verdicts);
}

/// `iface`: the interface the frame came in on, by index; `!=` the others.
#[test]
fn iface_matches_the_interface_a_frame_came_in_on() {
    if !can_load() {
        return;
    }
    let lo = sluice_live::sys::ifindex("lo").unwrap();
    // Another interface of this host, whatever it is called.
    let other = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n != "lo");
    let f = udp(v4(1), v4(2));
    let k = load("drop iface lo\n", false);
    assert_eq!(k.test_run_on(&f, lo).unwrap(), XDP_DROP as u32);
    let k2 = load("drop iface != lo udp\n", false);
    assert_eq!(k2.test_run_on(&f, lo).unwrap(), XDP_PASS as u32);
    if let Some(other) = other {
        let i = sluice_live::sys::ifindex(&other).unwrap();
        assert_eq!(k.test_run_on(&f, i).unwrap(), XDP_PASS as u32, "{other}");
        assert_eq!(k2.test_run_on(&f, i).unwrap(), XDP_DROP as u32, "{other}");
        let k3 = load(&format!("drop iface {{ {other}, lo }}\n"), false);
        assert_eq!(k3.test_run_on(&f, i).unwrap(), XDP_DROP as u32);
        assert_eq!(k3.test_run_on(&f, lo).unwrap(), XDP_DROP as u32);
    }
    let c = k.counts().unwrap();
    assert_eq!(c[0].packets, 1);
}

/// A name this host has no interface of is an error where it is written.
#[test]
fn an_unknown_interface_is_refused_with_its_line() {
    if !can_load() {
        return;
    }
    let e = Compiled::new(&file("pass udp\ndrop iface lo\ndrop iface nosuch0\n"), &[], &Options::default())
        .err()
        .expect("refused");
    assert!(matches!(e, ShieldError::Config(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.starts_with("x.rules:3: ") && e.contains("nosuch0"), "{e}");
}

/// One bucket for every CPU: two threads (on the two CPUs, as the
/// scheduler spreads them) run frames through `police 1pps burst 50` at
/// once; exactly the burst and the empty bucket's one pass between them,
/// as through the engine's one `AtomicU64`. A per-CPU bucket would pass
/// 51 on each CPU. (A read-modify-write without the compare-and-swap
/// would let more through only when the two happen to race inside those
/// first 51: this test shows that rarely; the cmpxchg's encoding is
/// `asm`'s unit test.)
#[test]
fn cpus_racing_share_one_bucket() {
    if !can_load() {
        return;
    }
    let k = std::sync::Arc::new(load("police 1pps burst 50 udp\n", false));
    let f = udp(v4(1), v4(2));
    let start = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (k, f) = (std::sync::Arc::clone(&k), f.clone());
            std::thread::spawn(move || (0..400).filter(|_| k.test_run(&f).unwrap() == XDP_PASS as u32).count())
        })
        .collect();
    let passed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let took = start.elapsed();
    assert!(took.as_secs() < 1, "800 runs took {took:?}: a packet's second passed, the count would not be exact");
    assert_eq!(passed, 51, "{took:?}");
    assert_eq!(k.police_dropped().unwrap(), [Some(800 - 51)]);
}

/// Many police rules of every kind, between address and port matches,
/// load (the verifier walks each rule's check once) and each charges only
/// its own buckets.
#[test]
fn many_police_rules_load_and_keep_their_own_buckets() {
    if !can_load() {
        return;
    }
    let heads =
        ["police 1000pps", "police 10mbit burst 64kbyte per saddr", "police 3byte per daddr", "police 7pps burst 3"];
    let text: String =
        (0..64).map(|i| format!("{} udp dport {}\ndrop saddr 198.51.100.{i} tcp\n", heads[i % 4], 1000 + i)).collect();
    let k = load(&text, false);
    assert!(k.police_bytes() == 8 * (32 + 32 * sluice_shield::police::PER_ADDRESS_BUCKETS as u64));
    // A frame to port 1005 meets rule 10 (`police 10mbit ... per saddr`) only.
    let mut f = udp(v4(1), v4(2));
    f[36..38].copy_from_slice(&1005u16.to_be_bytes());
    assert_eq!(k.test_run(&f).unwrap(), XDP_PASS as u32);
    for r in (0..128).step_by(2) {
        let charged = k.police_buckets(r).unwrap().unwrap().iter().filter(|&&b| b != 0).count();
        assert_eq!(charged, usize::from(r == 10), "rule {r}");
    }
    eprintln!("64 police rules: {} instructions", k.instructions());
}
