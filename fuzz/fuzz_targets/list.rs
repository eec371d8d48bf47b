//! Any bytes as an address list: parsing never panics; in lenient mode it
//! never fails; every accepted prefix prints and parses back to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_rules::{parse_list, AddressSet, Prefix};

fuzz_target!(|data: &[u8]| {
    let _ = parse_list("fuzz", data, false);
    let list = parse_list("fuzz", data, true).expect("lenient parsing cannot fail on in-memory input");
    for p in &list.prefixes {
        assert_eq!(p.to_string().parse::<Prefix>().unwrap(), *p);
    }
    let set = AddressSet::from_prefixes(&list.prefixes);
    for p in &list.prefixes {
        assert!(set.contains(p.addr()));
    }
});
