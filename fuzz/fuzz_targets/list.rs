//! Any bytes as an address list: parsing never panics; in lenient mode it
//! never fails; every accepted prefix prints and parses back to itself; and
//! the fast `AddressSet` built from the list agrees with the reference
//! `PrefixHashSet` on each prefix's first and last address and neighbours.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_classify::{AddressSet, Hasher, Options};
use sluice_rules::{parse_list, Prefix, PrefixHashSet};
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let _ = parse_list("fuzz", data, false);
    let list = parse_list("fuzz", data, true).expect("lenient parsing cannot fail on in-memory input");
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
