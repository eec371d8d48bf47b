//! A dynamic set's kernel tables under runtime changes: random adds and
//! removals of hosts and prefixes (both families) into host tables small
//! enough that their buckets fill and spill into the tries, and after every
//! round each address of the pool (and random ones) run through the
//! program (`BPF_PROG_TEST_RUN`): it drops exactly the addresses a plain
//! list of the elements covers. The tries' counts (which let the program
//! skip them) never fall below what they hold.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use common::{udp_from, udp_from6, xorshift};
use sluice_rules::{parse_rules, Prefix};
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::tables::Layout;
use sluice_shield::{Compiled, Options};

fn covers(elems: &[Prefix], a: &Prefix) -> bool {
    elems.iter().any(|p| match (*p, *a) {
        (Prefix::V4 { addr, len }, Prefix::V4 { addr: x, .. }) => len == 0 || (addr ^ x) >> (32 - u32::from(len)) == 0,
        (Prefix::V6 { addr, len }, Prefix::V6 { addr: x, .. }) => len == 0 || (addr ^ x) >> (128 - u32::from(len)) == 0,
        _ => false,
    })
}

#[test]
fn a_dynamic_set_in_the_kernel_holds_exactly_its_elements_through_changes() {
    let file = parse_rules("dyn.rules", "set d dynamic maxelem 100000\ndrop saddr @d\n", std::path::Path::new("."))
        .expect("the rules parse");
    // 4 buckets: 64 host slots for up to a few hundred hosts, so most
    // buckets fill and the rest spill into the trie.
    let layout = Layout { dyn_buckets: Some(4), ..Layout::default() };
    if !common::can_load() {
        return;
    }
    let kernel = Compiled::with_layout(&file, &[Vec::new()], &Options::default(), &layout).expect("the program loads");
    let (_, maps) = kernel.dynamic_sets().next().expect("the set's tables");
    let mut next = xorshift(0x5eed_1234_abcd);
    // The pool: hosts in a few /16s (so prefixes cover some), and IPv6 hosts.
    let pool4: Vec<u32> = (0..400).map(|_| 0x0a00_0000 | (next() as u32 & 0x0003_ffff)).collect();
    let pool6: Vec<u128> = (0..60).map(|_| (0x2001_0db8_u128 << 96) | u128::from(next() as u16)).collect();
    let mut elems: Vec<Prefix> = Vec::new();
    let (mut spilled, mut spilled6) = (false, false);
    for round in 0..12 {
        for _ in 0..80 {
            let pick = next() % 10;
            if pick < 3 && !elems.is_empty() {
                let i = (next() % elems.len() as u64) as usize;
                let p = elems.swap_remove(i);
                maps.remove(&p).unwrap_or_else(|e| panic!("remove {p}: {e}"));
                continue;
            }
            let p = match pick {
                3 => Prefix::V4 { addr: pool4[(next() % 400) as usize] & !0xff, len: 24 + (next() % 8) as u8 },
                4 => Prefix::V6 { addr: pool6[(next() % 60) as usize], len: 128 },
                5 => Prefix::V6 { addr: pool6[(next() % 60) as usize] & !0xf, len: 124 },
                _ => Prefix::V4 { addr: pool4[(next() % 400) as usize], len: 32 },
            };
            // Host bits clear, as the control plane hands them over.
            let p = match p {
                Prefix::V4 { addr, len } => Prefix::V4 { addr: addr & (u32::MAX << (32 - u32::from(len))), len },
                other => other,
            };
            if elems.contains(&p) {
                continue;
            }
            maps.insert(&p, 0).unwrap_or_else(|e| panic!("insert {p}: {e}"));
            elems.push(p);
        }
        let (t4, t6) = maps.in_tries();
        let hosts4 = elems.iter().filter(|p| matches!(p, Prefix::V4 { len: 32, .. })).count() as u64;
        let rest4 = elems.iter().filter(|p| matches!(p, Prefix::V4 { len, .. } if *len < 32)).count() as u64;
        let hosts6 = elems.iter().filter(|p| matches!(p, Prefix::V6 { len: 128, .. })).count() as u64;
        let rest6 = elems.iter().filter(|p| matches!(p, Prefix::V6 { len, .. } if *len < 128)).count() as u64;
        assert!(t4 >= rest4 && t4 <= rest4 + hosts4, "round {round}: IPv4 trie count {t4}, {rest4} prefixes");
        assert!(t6 >= rest6 && t6 <= rest6 + hosts6, "round {round}: IPv6 trie count {t6}, {rest6} prefixes");
        // What the mirror reads back when no edit list leads on: exactly
        // the elements (the host tables scanned, the tries' keys).
        let mut held: Vec<Prefix> = maps.elements().expect("the tables read back").into_iter().map(|e| e.0).collect();
        let mut want = elems.clone();
        held.sort_unstable();
        want.sort_unstable();
        assert_eq!(held, want, "round {round}: the elements read back");
        spilled |= t4 > rest4;
        spilled6 |= t6 > rest6;
        for &a in &pool4 {
            let want = covers(&elems, &Prefix::V4 { addr: a, len: 32 });
            let got = kernel.test_run(&udp_from(a)).expect("test run");
            assert_eq!(
                got,
                if want { XDP_DROP } else { XDP_PASS } as u32,
                "round {round}: {}",
                std::net::Ipv4Addr::from(a)
            );
        }
        for &a in &pool6 {
            let want = covers(&elems, &Prefix::V6 { addr: a, len: 128 });
            let got = kernel.test_run(&udp_from6(a)).expect("test run");
            assert_eq!(
                got,
                if want { XDP_DROP } else { XDP_PASS } as u32,
                "round {round}: {}",
                std::net::Ipv6Addr::from(a)
            );
        }
        for _ in 0..200 {
            let a = next() as u32;
            let want = covers(&elems, &Prefix::V4 { addr: a, len: 32 });
            assert_eq!(kernel.test_run(&udp_from(a)).unwrap(), if want { XDP_DROP } else { XDP_PASS } as u32);
        }
    }
    assert!(spilled && spilled6, "some hosts of each family went to the trie (the test's point)");
    // Everything removed: both tries empty again, nothing dropped.
    for p in std::mem::take(&mut elems) {
        maps.remove(&p).unwrap_or_else(|e| panic!("remove {p}: {e}"));
    }
    assert_eq!(maps.in_tries(), (0, 0));
    for &a in &pool4 {
        assert_eq!(kernel.test_run(&udp_from(a)).unwrap(), XDP_PASS as u32);
    }
}

/// The origin of the longest element covering `a`, as the engine's tags
/// find it when every element has one.
fn origin_of(elems: &[(Prefix, u16)], a: &Prefix) -> Option<u16> {
    elems
        .iter()
        .filter(|(p, _)| covers(std::slice::from_ref(p), a))
        .max_by_key(|(p, _)| match p {
            Prefix::V4 { len, .. } | Prefix::V6 { len, .. } => *len,
        })
        .map(|e| e.1)
}

/// A set whose elements carry origins (the CrowdSec feed's): through random
/// adds, removals and elements given a new origin, into tables that spill,
/// each element is read back with its origin, and every drop is counted
/// under the origin of the longest element that holds the address.
#[test]
fn a_dynamic_sets_drops_are_counted_by_the_origin_of_the_element_that_matched() {
    use sluice_shield::origins::OriginCounts;
    use sluice_shield::tables::{origin_byte, ORIGIN_SLOTS};
    let file = parse_rules("dyn.rules", "set d dynamic maxelem 100000\ndrop saddr @d\n", std::path::Path::new("."))
        .expect("the rules parse");
    let layout = Layout { dyn_buckets: Some(4), ..Layout::default() };
    if !common::can_load() {
        return;
    }
    let counts = OriginCounts::new("d").expect("the counters");
    let opts = Options { origins: Some(counts.tap()), ..Options::default() };
    let kernel = Compiled::with_layout(&file, &[Vec::new()], &opts, &layout).expect("the program loads");
    let (_, maps) = kernel.dynamic_sets().next().expect("the set's tables");
    assert!(maps.counts_origins());
    let mut next = xorshift(0x0819_1a57);
    let pool4: Vec<u32> = (0..300).map(|_| 0x0a00_0000 | (next() as u32 & 0x0003_ffff)).collect();
    let pool6: Vec<u128> = (0..60).map(|_| (0x2001_0db8_u128 << 96) | u128::from(next() as u16)).collect();
    let mut elems: Vec<(Prefix, u16)> = Vec::new();
    let mut want = vec![[0u64; 2]; ORIGIN_SLOTS];
    let mut retagged = 0;
    for round in 0..8 {
        for _ in 0..80 {
            let pick = next() % 12;
            if pick < 2 && !elems.is_empty() {
                let (p, _) = elems.swap_remove((next() % elems.len() as u64) as usize);
                maps.remove(&p).unwrap_or_else(|e| panic!("remove {p}: {e}"));
                continue;
            }
            let origin = (next() % ORIGIN_SLOTS as u64) as u16;
            if pick < 4 && !elems.is_empty() {
                // A present element, of a new origin.
                let i = (next() % elems.len() as u64) as usize;
                elems[i].1 = origin;
                maps.retag(&elems[i].0, origin_byte(Some(origin))).expect("retag");
                retagged += 1;
                continue;
            }
            let p = match pick {
                4 => Prefix::V4 { addr: pool4[(next() % 300) as usize] & !0xff, len: 24 },
                5 => Prefix::V6 { addr: pool6[(next() % 60) as usize], len: 128 },
                6 => Prefix::V6 { addr: pool6[(next() % 60) as usize] & !0xff, len: 120 },
                _ => Prefix::V4 { addr: pool4[(next() % 300) as usize], len: 32 },
            };
            if elems.iter().any(|e| e.0 == p) {
                continue;
            }
            maps.insert(&p, origin_byte(Some(origin))).unwrap_or_else(|e| panic!("insert {p}: {e}"));
            elems.push((p, origin));
        }
        let mut held = maps.elements().expect("the tables read back");
        let mut model: Vec<(Prefix, u8)> = elems.iter().map(|&(p, o)| (p, origin_byte(Some(o)))).collect();
        held.sort_unstable();
        model.sort_unstable();
        assert_eq!(held, model, "round {round}: the elements and their origins read back");
        for &a in &pool4 {
            let p = Prefix::V4 { addr: a, len: 32 };
            if let Some(o) = origin_of(&elems, &p) {
                want[usize::from(o)][0] += 1;
            }
            kernel.test_run(&udp_from(a)).expect("test run");
        }
        for &a in &pool6 {
            let p = Prefix::V6 { addr: a, len: 128 };
            if let Some(o) = origin_of(&elems, &p) {
                want[usize::from(o)][1] += 1;
            }
            kernel.test_run(&udp_from6(a)).expect("test run");
        }
        let got = counts.read().expect("the counters");
        for (tag, w) in want.iter().enumerate() {
            let g = got.get(tag).map_or([0, 0], |g| [g[0].packets, g[1].packets]);
            assert_eq!(g, *w, "round {round}: drops of origin {tag} (IPv4, IPv6)");
        }
    }
    assert!(retagged > 0);
    assert!(want.iter().filter(|w| w[0] + w[1] > 0).count() > 8, "drops under many origins");
}
