//! Any bytes as the first a TLS client sends: the ClientHello parser never
//! panics, says "not yet" for every prefix of a hello it accepts (never an
//! error or another answer), and the JA4 of what it accepts is well formed
//! (passes the `--block-ja4` list's own check). The same bytes as a
//! `--block-ja4` file: its parser never panics, and every entry it keeps
//! passes that check.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_guard::ja4::parse;
use sluice_guard::ja4list;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(set) = ja4list::parse(text) {
            assert!(set.iter().all(|e| ja4list::check(e).is_ok()));
        }
    }
    let Ok(Some(h)) = parse(data) else { return };
    let ja4 = h.ja4();
    assert_eq!(ja4.len(), 36, "{ja4}");
    assert!(ja4.starts_with('t') && ja4.as_bytes()[10] == b'_' && ja4.as_bytes()[23] == b'_');
    ja4list::check(&ja4).unwrap_or_else(|e| panic!("{ja4}: {e}"));
    let _ = h.ja4_raw();
    for n in [data.len() / 3, data.len() / 2] {
        if let Ok(Some(p)) = parse(&data[..n]) {
            // A shorter prefix can only be a whole hello if the hello ends there.
            assert_eq!(p, h);
        }
    }
});
