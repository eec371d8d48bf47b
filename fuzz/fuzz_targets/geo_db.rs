//! Any bytes as a MaxMind DB file: opening it, building a country set and
//! an ASN set from it at known fields and at odd ones, and looking
//! addresses up never panic; an error names the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_geo::{GeoDb, Key, Select};

fuzz_target!(|data: &[u8]| {
    let Ok(db) = GeoDb::from_bytes(data.to_vec(), "fuzz.mmdb".into()) else { return };
    let _ = db.info();
    for (key, values, field) in [
        (Key::Country, vec!["CN".to_owned(), "GB".to_owned()], None),
        (Key::Country, vec!["US".to_owned()], Some("country_code".to_owned())),
        (Key::Asn, vec!["15169".to_owned()], None),
        (Key::Asn, vec!["13335".to_owned()], Some("asn".to_owned())),
        (Key::Country, vec!["CN".to_owned()], Some("country.names.0.x".to_owned())),
    ] {
        match db.networks(&Select { key, values, field }) {
            Ok(n) => assert!(n.prefixes.iter().all(|(a, l)| *l <= if a.is_ipv4() { 32 } else { 128 })),
            Err(e) => assert!(e.to_string().starts_with("fuzz.mmdb")),
        }
    }
    for addr in ["1.0.0.1", "8.8.8.8", "2001:db8::1", "::", "255.255.255.255"] {
        let _ = db.lookup(addr.parse().unwrap(), "country.iso_code");
    }
});
