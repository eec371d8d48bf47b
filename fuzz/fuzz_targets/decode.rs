//! Any bytes, any link type: decode never panics, and every offset it
//! reports lies inside the frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::{decode, LinkType};

const LINKS: [u32; 10] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else { return };
    let link = LinkType(LINKS[usize::from(selector) % LINKS.len()]);
    if let Ok(s) = decode(link, frame) {
        if let Some(ip) = s.ip {
            for off in [Some(ip.l3_offset), ip.l4_offset, ip.payload_offset, Some(ip.l3_end)].into_iter().flatten() {
                assert!(off as usize <= frame.len());
            }
            if let Some(l4) = ip.l4_offset {
                assert!(l4 <= ip.l3_end);
            }
        }
        let _ = s.to_string();
    }
});
