//! Any bytes as an address list: parsing never panics; in lenient mode it
//! never fails; every accepted prefix prints and parses back to itself;
//! timeouts point at prefixes in order and expiry agrees with them; and the
//! fast `AddressSet` built from the list agrees with the reference
//! `PrefixHashSet` on each prefix's first and last address and neighbours.
//!
//! `parse_list` recognises every format line by line, so raw input reaches
//! them all; a first byte of 1 to 4 wraps the rest's lines in one format
//! (so the fuzzer mutates elements, not syntax), and 5 checks
//! `range_to_prefixes` on two addresses taken from the bytes:
//! - 1: lines paired as ranges `a-b`;
//! - 2: ipset `save` output, `add s LINE`;
//! - 3: an nft `elements = { ... }` block, one element per line;
//! - 4: Spamhaus DROP JSON lines `{"cidr":"LINE"}` and a metadata line.
//!
//! Any other first byte: the input as it is (older seeds stay meaningful).
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_rules::{parse_list, range_to_prefixes, ParsedList, Prefix, PrefixHashSet, RangeError};
use sluice_sets::{AddressSet, Hasher, Options};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fuzz_target!(|data: &[u8]| {
    let input = match data.split_first() {
        Some((1, rest)) => rest
            .split(|&b| b == b'\n')
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|p| p.join(&b'-'))
            .collect::<Vec<_>>()
            .join(&b'\n'),
        Some((2, rest)) => wrap_lines(b"create s hash:net family inet hashsize 1024\n", rest, b"add s ", b"\n", b""),
        Some((3, rest)) => {
            wrap_lines(b"table inet f {\n\tset s {\n\t\telements = { ", rest, b"", b",\n", b" }\n\t}\n}\n")
        }
        Some((4, rest)) => {
            let mut out = wrap_lines(b"", rest, b"{\"cidr\":\"", b"\"}\n", b"");
            let records = rest.split(|&b| b == b'\n').count();
            out.extend_from_slice(format!("{{\"type\":\"metadata\",\"records\":{records}}}\n").as_bytes());
            out
        }
        Some((5, rest)) => return check_range(rest),
        _ => data.to_vec(),
    };
    let _ = parse_list("fuzz", &input[..], false);
    let list = parse_list("fuzz", &input[..], true).expect("lenient parsing cannot fail on in-memory input");
    check_timeouts(&list);
    for p in &list.prefixes {
        assert_eq!(p.to_string().parse::<Prefix>().unwrap(), *p);
    }
    let reference = PrefixHashSet::from_prefixes(&list.prefixes);
    let fast = AddressSet::with_options(&list.prefixes, Options { hasher: Hasher::with_seed(1), ..Options::default() });
    assert_eq!(fast.len(), reference.len());
    for p in &list.prefixes {
        let probes: Vec<IpAddr> = match *p {
            Prefix::V4 { addr, len } => {
                let last = addr | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                [addr.wrapping_sub(1), addr, last, last.wrapping_add(1)].map(|a| IpAddr::from(a.to_be_bytes())).to_vec()
            }
            Prefix::V6 { addr, len } => {
                let last = addr | u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                [addr.wrapping_sub(1), addr, last, last.wrapping_add(1)].map(|a| IpAddr::from(a.to_be_bytes())).to_vec()
            }
        };
        let mut batch = vec![false; probes.len()];
        fast.contains_batch(&probes, &mut batch, 8, true);
        for (ip, b) in probes.iter().zip(&batch) {
            assert!(reference.contains(*ip) == fast.contains(*ip) && fast.contains(*ip) == *b, "{ip}");
        }
        assert!(fast.contains(p.addr()));
    }
});

/// `head`, then each line of `body` between `before` and `after`, then `tail`.
fn wrap_lines(head: &[u8], body: &[u8], before: &[u8], after: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut out = head.to_vec();
    for line in body.split(|&b| b == b'\n') {
        out.extend_from_slice(before);
        out.extend_from_slice(line);
        out.extend_from_slice(after);
    }
    out.extend_from_slice(tail);
    out
}

/// Timeouts name prefixes, in strictly increasing index order, and expiry
/// removes exactly the entries whose time is up.
fn check_timeouts(list: &ParsedList) {
    assert!(list.timeouts.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(list.timeouts.iter().all(|&(i, _)| i < list.prefixes.len()));
    assert_eq!(list.next_expiry(), list.timeouts.iter().map(|t| t.1).min());
    assert_eq!(list.live_after(0).len(), list.prefixes.len() - list.timeouts.iter().filter(|t| t.1 == 0).count());
    if let Some(first) = list.next_expiry() {
        let at = u64::from(first);
        let gone = list.timeouts.iter().filter(|t| u64::from(t.1) <= at).count();
        assert_eq!(list.live_after(at).len(), list.prefixes.len() - gone);
        assert!(list.next_expiry_after(at).is_none_or(|n| n > first));
    }
    assert_eq!(list.live_after(u64::MAX).len(), list.prefixes.len() - list.timeouts.len());
}

/// Two addresses from the bytes (IPv6 if there are 32, else IPv4): the
/// range's prefixes tile it exactly, in order, and each is maximal (its
/// parent block spills out of the range), so none could be merged.
fn check_range(bytes: &[u8]) {
    let (a, b, width) = if let Some(b) = bytes.get(..32) {
        let x = u128::from_be_bytes(b[..16].try_into().unwrap());
        let y = u128::from_be_bytes(b[16..].try_into().unwrap());
        (x, y, 128)
    } else if let Some(b) = bytes.get(..8) {
        let x = u32::from_be_bytes(b[..4].try_into().unwrap());
        let y = u32::from_be_bytes(b[4..].try_into().unwrap());
        (u128::from(x), u128::from(y), 32)
    } else {
        return;
    };
    let ip = |x: u128| if width == 32 { IpAddr::V4(Ipv4Addr::from(x as u32)) } else { IpAddr::V6(Ipv6Addr::from(x)) };
    if a > b {
        assert_eq!(range_to_prefixes(ip(a), ip(b)), Err(RangeError::Reversed));
    }
    let (lo, hi) = (a.min(b), a.max(b));
    let ps = range_to_prefixes(ip(lo), ip(hi)).unwrap();
    assert!(!ps.is_empty() && ps.len() <= 2 * width as usize);
    let mut next = Some(lo);
    for p in &ps {
        let (addr, len) = match *p {
            Prefix::V4 { addr, len } => (u128::from(addr), u32::from(len)),
            Prefix::V6 { addr, len } => (addr, u32::from(len)),
        };
        assert_eq!(Some(addr), next, "gap or overlap at {p}");
        let host_bits = width - len;
        let last = addr | u128::MAX.checked_shr(128 - host_bits).unwrap_or(0);
        assert!(last <= hi);
        if len > 0 {
            let parent = addr & !(1u128 << host_bits);
            let parent_last = last | (1u128 << host_bits);
            assert!(parent < lo || parent_last > hi, "{p} could merge with its sibling");
        }
        next = last.checked_add(1);
    }
    assert_eq!(next.map(|n| n - 1).unwrap_or(u128::MAX), hi);
    let mixed = if width == 32 { IpAddr::V6(Ipv6Addr::from(lo)) } else { IpAddr::V4(Ipv4Addr::from(lo as u32)) };
    assert_eq!(range_to_prefixes(ip(lo), mixed), Err(RangeError::MixedFamilies));
}
