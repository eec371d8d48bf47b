//! Arbitrary bytes through sluice-h2's HPACK decoder (h2 0.4.18's,
//! adapted), as two blocks on one decoder so the dynamic table carries
//! over: never panics, the table stays within its size, the decoded list
//! within its bound, the memory within the decoder's stated bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_h2::hpack::{Decoder, ENTRY_OVERHEAD};

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (a, b) = data.split_at(cut);
    let mut d = Decoder::new(4096);
    for block in [a, b] {
        let mut list = 0;
        let _ = d.decode(block, 16_384, |n, v| list += n.len() + v.len() + ENTRY_OVERHEAD);
        assert!(list <= 16_384);
        assert!(d.table_size() <= 4096);
        assert!(d.memory_in_use() <= Decoder::memory_bound(4096));
    }
});
