//! Any bytes as the start of a connection behind `--proxy-protocol`: the
//! PROXY header parser never panics, a header it accepts lies within the
//! bytes given, and reading the same bytes in two parts (as they arrive)
//! gives the same answer as reading them whole. The same bytes as an
//! `X-Forwarded-For` value (`--client-ip-header`): the walk never panics
//! and answers the peer or an address written in them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_guard::proxyproto::{parse, Parsed};
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    if let Ok(Parsed::Header { len, .. }) = whole {
        assert!(len <= data.len() && len >= 8);
        // Nothing after the header changes it.
        assert_eq!(parse(&data[..len]), whole);
    }
    // Every shorter prefix is incomplete or the same error, never a
    // different header.
    for n in [data.len() / 2, data.len().saturating_sub(1)] {
        match (parse(&data[..n]), whole) {
            (Ok(Parsed::Header { len, source }), Ok(Parsed::Header { len: l2, source: s2 })) => {
                assert_eq!((len, source), (l2, s2));
            }
            (Ok(Parsed::Header { .. }), _) => panic!("a prefix parsed where the whole did not"),
            _ => {}
        }
    }
    let peer: IpAddr = [10, 0, 0, 1].into();
    let trusted: Vec<sluice_rules::Prefix> = vec!["10.0.0.0/8".parse().unwrap()];
    let c = sluice_guard::forwarded::client(std::iter::once(data), peer, &trusted);
    assert!(c == peer || data.split(|&b| b == b',').any(|e| sluice_guard::forwarded::entry(e) == Some(c)));
});
