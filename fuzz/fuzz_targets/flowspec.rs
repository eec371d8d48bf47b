//! FlowSpec NLRI from a BGP peer: any bytes, as either family, decode or
//! are refused with the byte that was wrong, never a panic; what decodes
//! encodes to bytes that decode to the same flows.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_bgp::flowspec::{Family, Flow};

fuzz_target!(|data: &[u8]| {
    for family in [Family::V4, Family::V6] {
        match Flow::decode_all(family, data) {
            Ok(flows) => {
                for f in flows {
                    let bytes = f.to_bytes();
                    let (back, n) = Flow::decode(family, &bytes).expect("an encoded flow decodes");
                    assert_eq!(n, bytes.len());
                    assert_eq!(back, f);
                    let _ = f.to_string();
                }
            }
            Err(e) => assert!(e.at <= data.len(), "{e} beyond {} bytes", data.len()),
        }
    }
});
