//! What the shield's kernel tests share.

use sluice_live::LiveError;
use sluice_rules::parse_rules;
use sluice_shield::{Compiled, Options, ShieldError};

/// Whether programs load here. An empty rule file: if even that cannot be
/// loaded, we lack the rights (a failure under `SLUICE_REQUIRE_LIVE=1`, as
/// in CI). The verifier refusing one is a bug of ours, never a skip.
pub fn can_load() -> bool {
    let file = parse_rules("probe", "", std::path::Path::new(".")).unwrap();
    match Compiled::new(&file, &[], &Options::default()) {
        Ok(_) => true,
        Err(e @ ShieldError::Kernel(LiveError::XdpRefused { .. })) => panic!("{e}"),
        Err(e) => {
            assert!(std::env::var_os("SLUICE_REQUIRE_LIVE").is_none(), "SLUICE_REQUIRE_LIVE=1 but: {e}");
            eprintln!("SKIPPED: cannot load BPF programs here: {e}");
            false
        }
    }
}

/// A small deterministic generator for the tests' random addresses.
#[allow(dead_code)] // Not every test binary draws numbers.
pub fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Ethernet, IPv4 from `src` to 192.0.2.1, UDP 12345 to 53.
#[allow(dead_code)] // Not every test binary sends IPv4 frames of its own.
pub fn udp_from(src: u32) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&[192, 0, 2, 1, 0x30, 0x39, 0, 53, 0, 8, 0, 0]);
    f
}

/// Ethernet, IPv6 from `src` to 2001:db8::, UDP 12345 to 53.
#[allow(dead_code)] // Not every test binary sends IPv6 frames of its own.
pub fn udp_from6(src: u128) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&(0x2001_0db8_u128 << 96).to_be_bytes());
    f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 8, 0, 0]);
    f
}
