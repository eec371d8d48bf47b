use super::write::{InsertError, Value, Writer};
use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn country(cc: &str) -> Value {
    Value::map([("country", Value::map([("iso_code", Value::str(cc))]))])
}

fn asn(n: u32) -> Value {
    Value::map([("autonomous_system_number", Value::U32(n)), ("autonomous_system_organization", Value::str("x"))])
}

fn sel(key: Key, values: &[&str], field: Option<&str>) -> Select {
    Select {
        key,
        values: values.iter().map(|v| key.parse_value(v).unwrap()).collect(),
        field: field.map(str::to_owned),
    }
}

fn db(w: &Writer) -> GeoDb {
    GeoDb::from_bytes(w.to_bytes(), "test.mmdb".into()).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_country_is_the_networks_its_records_name() {
    let mut w = Writer::new("GeoLite2-Country", 1_700_000_000);
    w.insert(ip("1.0.0.0"), 24, country("CN")).unwrap();
    w.insert(ip("1.0.1.0"), 24, country("AU")).unwrap();
    w.insert(ip("5.0.0.0"), 8, country("CN")).unwrap();
    w.insert(ip("2001:db8::"), 32, country("CN")).unwrap();
    w.insert(ip("2400::"), 12, country("JP")).unwrap();
    let d = db(&w);
    assert_eq!(d.info().database_type, "GeoLite2-Country");
    assert_eq!(d.info().build_epoch, 1_700_000_000);
    let n = d.networks(&sel(Key::Country, &["cn"], None)).unwrap();
    let mut got = n.prefixes.clone();
    got.sort();
    assert_eq!(got, vec![(ip("1.0.0.0"), 24), (ip("5.0.0.0"), 8), (ip("2001:db8::"), 32)]);
    assert_eq!(n.per_value, vec![("CN".to_owned(), 3)]);
    assert_eq!(
        d.values(Key::Country, "country.iso_code").unwrap(),
        vec![("CN".to_owned(), 3), ("AU".to_owned(), 1), ("JP".to_owned(), 1)]
    );
    let both = d.networks(&sel(Key::Country, &["JP", "AU"], None)).unwrap();
    assert_eq!(both.per_value, vec![("JP".to_owned(), 1), ("AU".to_owned(), 1)]);

    let f = d.lookup(ip("5.6.7.8"), "country.iso_code").unwrap().unwrap();
    assert_eq!(f, Found { network: (ip("5.0.0.0"), 8), value: Some("CN".into()) });
    assert_eq!(d.lookup(ip("9.9.9.9"), "country.iso_code").unwrap(), None);
}

#[test]
fn an_asn_is_a_number_and_another_schema_names_its_field() {
    let mut w = Writer::new("GeoLite2-ASN", 1);
    w.insert(ip("8.8.8.0"), 24, asn(15169)).unwrap();
    w.insert(ip("1.1.1.0"), 24, asn(13335)).unwrap();
    w.insert(ip("2606:4700::"), 32, asn(13335)).unwrap();
    let d = db(&w);
    let n = d.networks(&sel(Key::Asn, &["AS13335"], None)).unwrap();
    assert_eq!(n.prefixes.len(), 2);
    assert_eq!(n.per_value, vec![("13335".to_owned(), 2)]);

    // ip-location-db's country files: a flat `country_code`.
    let mut w = Writer::new("ip-location-db", 1);
    w.insert(ip("10.0.0.0"), 8, Value::map([("country_code", Value::str("DE"))])).unwrap();
    let d = db(&w);
    assert_eq!(d.networks(&sel(Key::Country, &["DE"], Some("country_code"))).unwrap().prefixes.len(), 1);
    // Without a field, the one its records have (as --drop-country reads
    // it): a rule file's `set de geo FILE country DE` works on either schema.
    assert_eq!(d.networks(&sel(Key::Country, &["DE"], None)).unwrap().prefixes.len(), 1);
    assert_eq!(
        d.networks(&sel(Key::Country, &["DE"], Some("country.iso_code"))).unwrap_err().to_string(),
        "test.mmdb: no record has a value at field `country.iso_code` (is it this schema's? e.g. `field country_code` for ip-location-db files)"
    );
}

#[test]
fn bad_input_is_named() {
    let mut w = Writer::new("t", 1);
    w.insert(ip("10.0.0.0"), 8, country("DE")).unwrap();
    let d = db(&w);
    assert_eq!(
        d.networks(&sel(Key::Country, &["DE", "FR"], None)).unwrap_err().to_string(),
        "test.mmdb: country FR has no networks at field `country.iso_code`"
    );
    // A field that names a map, not a value.
    let e = d.networks(&sel(Key::Country, &["DE"], Some("country"))).unwrap_err().to_string();
    assert!(e.starts_with("test.mmdb: reading the database: ") && e.contains("a string or a number"), "{e}");
    assert!(Key::Country.parse_value("CHN").unwrap_err().contains("not a country code"));
    assert!(Key::Asn.parse_value("ASX").unwrap_err().contains("not an AS number"));

    let dir = tempfile::tempdir().unwrap();
    let not = dir.path().join("not.mmdb");
    std::fs::write(&not, b"this is not a database").unwrap();
    let e = GeoDb::open(&not).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: not a MaxMind DB file (", not.display())), "{e}");
    let cut = dir.path().join("cut.mmdb");
    let bytes = w.to_bytes();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(GeoDb::open(&cut).unwrap_err().to_string().contains("not a MaxMind DB file"));
    let e = GeoDb::open(&dir.path().join("missing.mmdb")).unwrap_err().to_string();
    assert!(e.contains("missing.mmdb: cannot open: "), "{e}");
}

#[test]
fn the_writer_refuses_overlaps() {
    let mut w = Writer::new("t", 1);
    w.insert(ip("10.0.0.0"), 8, country("DE")).unwrap();
    assert_eq!(w.insert(ip("10.1.0.0"), 16, country("FR")), Err(InsertError::Overlap(ip("10.1.0.0"), 16)));
    assert_eq!(w.insert(ip("10.0.0.0"), 8, country("FR")), Err(InsertError::Overlap(ip("10.0.0.0"), 8)));
    assert_eq!(w.insert(ip("0.0.0.0"), 0, country("FR")), Err(InsertError::Length(0)));
}

/// Whether `addr` is in `net/len`.
fn contains((net, len): (IpAddr, u8), addr: IpAddr) -> bool {
    let bits = |a: IpAddr| match a {
        IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32u32),
        IpAddr::V6(a) => (u128::from(a), 128u32),
    };
    let ((n, nw), (a, aw)) = (bits(net), bits(addr));
    if nw != aw {
        return false;
    }
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
    n & mask == a & mask
}

const CODES: [&str; 6] = ["CN", "RU", "US", "DE", "BR", "IN"];

fn network() -> impl Strategy<Value = (IpAddr, u8)> {
    prop_oneof![
        (any::<u32>(), 4u8..=32).prop_map(|(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l)),
        (any::<u128>(), 8u8..=64).prop_map(|(a, l)| (IpAddr::V6(Ipv6Addr::from(a)), l)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A random database and a random selection: an address is in the
    /// built set exactly when the (plain, linear) reference says the
    /// network holding it belongs to a selected country.
    #[test]
    fn a_built_set_holds_what_a_plain_reader_says(
        nets in prop::collection::vec((network(), 0usize..CODES.len()), 1..60),
        chosen in prop::collection::btree_set(0usize..CODES.len(), 1..4),
        probes in prop::collection::vec(any::<(bool, u128)>(), 200),
    ) {
        let mut w = Writer::new("t", 1);
        let mut kept: Vec<((IpAddr, u8), usize)> = Vec::new();
        for ((addr, len), c) in nets {
            if w.insert(addr, len, country(CODES[c])).is_ok() {
                kept.push(((addr, len), c));
            }
        }
        let d = db(&w);
        let values: Vec<&str> = chosen.iter().map(|&c| CODES[c]).collect();
        let present: Vec<&str> = values.iter().copied().filter(|v| kept.iter().any(|(_, c)| CODES[*c] == *v)).collect();
        let result = d.networks(&sel(Key::Country, &values, None));
        if present.len() < values.len() {
            let no_networks = matches!(result, Err(GeoError::NoNetworks { .. }));
            prop_assert!(no_networks);
            return Ok(());
        }
        let built = result.unwrap();
        // Probe inside the kept networks and anywhere.
        let mut addrs: Vec<IpAddr> = kept.iter().map(|((a, _), _)| *a).collect();
        for (v4, x) in probes {
            addrs.push(if v4 { IpAddr::V4(Ipv4Addr::from(x as u32)) } else { IpAddr::V6(Ipv6Addr::from(x)) });
        }
        for a in addrs {
            let want = kept.iter().any(|(n, c)| contains(*n, a) && chosen.contains(c));
            let got = built.prefixes.iter().any(|n| contains(*n, a));
            prop_assert_eq!(got, want, "{}", a);
            // And the database's own lookup agrees with the reference.
            let found = d.lookup(a, "country.iso_code").unwrap();
            let owner = kept.iter().find(|(n, _)| contains(*n, a)).map(|(_, c)| CODES[*c].to_owned());
            prop_assert_eq!(found.and_then(|f| f.value), owner);
        }
    }
}

/// libmaxminddb's `mmdblookup` reads what the writer wrote the same way
/// (an independent reader; CI installs mmdb-bin).
#[test]
fn mmdblookup_reads_the_written_database() {
    if std::process::Command::new("mmdblookup").arg("--version").output().is_err() {
        assert!(std::env::var("SLUICE_REQUIRE_TOOLS").is_err(), "mmdblookup is missing (apt-get install mmdb-bin)");
        eprintln!("skipped: mmdblookup is missing (apt-get install mmdb-bin)");
        return;
    }
    let mut w = Writer::new("GeoLite2-Country", 1);
    w.insert(ip("81.2.69.0"), 24, country("GB")).unwrap();
    w.insert(ip("2a02:ff00::"), 24, country("IT")).unwrap();
    w.insert(ip("10.0.0.0"), 8, asn(64512)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.mmdb");
    std::fs::write(&file, w.to_bytes()).unwrap();
    let look = |addr: &str, path: &[&str]| -> String {
        let out = std::process::Command::new("mmdblookup")
            .arg("--file")
            .arg(&file)
            .args(["--ip", addr])
            .args(path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(look("81.2.69.160", &["country", "iso_code"]), "\"GB\" <utf8_string>");
    assert_eq!(look("2a02:ff00::1", &["country", "iso_code"]), "\"IT\" <utf8_string>");
    assert_eq!(look("10.1.2.3", &["autonomous_system_number"]), "64512 <uint32>");
    assert!(look("9.9.9.9", &["country", "iso_code"]).is_empty());
}

#[test]
fn the_shorthands_read_each_database_at_the_field_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Writer::new("GeoLite2-Country", 1);
    c.insert(ip("10.0.0.0"), 8, country("DE")).unwrap();
    let mut flat = Writer::new("ip-location-db", 1);
    flat.insert(ip("11.0.0.0"), 8, Value::map([("country_code", Value::str("DE"))])).unwrap();
    let mut a = Writer::new("GeoLite2-ASN", 1);
    a.insert(ip("12.0.0.0"), 8, asn(64500)).unwrap();
    let paths: Vec<_> = [("c.mmdb", &c), ("flat.mmdb", &flat), ("a.mmdb", &a)]
        .iter()
        .map(|(n, w)| {
            let p = dir.path().join(n);
            std::fs::write(&p, w.to_bytes()).unwrap();
            p
        })
        .collect();
    let all: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let (de, info) = select_in(&all, Key::Country, &["DE".into()]).unwrap();
    assert_eq!(info.describe(), "GeoLite2-Country, ip-location-db built 1970-01-01: DE 2 networks");
    assert_eq!(de.per_value, vec![("DE".to_owned(), 2)]);
    assert_eq!(select_in(&all, Key::Asn, &["64500".into()]).unwrap().0.prefixes, vec![(ip("12.0.0.0"), 8)]);
    let index = index_in(&all, Key::Country).unwrap();
    assert_eq!(index.len(), 1);
    assert_eq!(index["DE"].len(), 2);
    assert_eq!(index_in(&all, Key::Asn).unwrap()["64500"], vec![(ip("12.0.0.0"), 8)]);
    let e = select_in(&all, Key::Country, &["DE".into(), "FR".into()]).unwrap_err().to_string();
    assert!(e.ends_with("flat.mmdb (country_code): country FR has no networks"), "{e}");
    let e = select_in(&all[2..], Key::Country, &["DE".into()]).unwrap_err().to_string();
    assert!(e.ends_with("a.mmdb: no record has a country (fields tried: country.iso_code, country_code)"), "{e}");
}

#[test]
fn dates_are_utc_days() {
    assert_eq!(date(0), "1970-01-01");
    assert_eq!(date(951_782_400), "2000-02-29");
    assert_eq!(date(1_795_737_600), "2026-11-27");
    assert_eq!(date(4_107_542_399), "2100-02-28");
}

/// A valid database of one IPv6 /32 (a chain of 32 nodes), and where its
/// last node's record is.
fn chain() -> (Vec<u8>, usize) {
    let mut w = Writer::new("t", 1);
    w.insert(ip("2001:db8::"), 32, country("DE")).unwrap();
    let b = w.to_bytes();
    let rec = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
    // Node 31's two records: the one that is not empty (32) holds the data.
    let last = if rec(62) != 32 { 62 } else { 63 };
    (b, last)
}

fn put(b: &mut [u8], record: usize, v: u32) {
    b[record * 4..record * 4 + 4].copy_from_slice(&v.to_be_bytes());
}

#[test]
fn hostile_databases_are_refused_at_once_by_name() {
    let (good, last) = chain();
    GeoDb::from_bytes(good.clone(), "good.mmdb".into()).unwrap();
    let data = u32::from_be_bytes(good[last * 4..last * 4 + 4].try_into().unwrap());
    // Every node's two children are the next node: 2^32 paths in 32 nodes.
    let mut shared = good.clone();
    for node in 0..31 {
        put(&mut shared, 2 * node, node as u32 + 1);
        put(&mut shared, 2 * node + 1, node as u32 + 1);
    }
    put(&mut shared, 62, data);
    put(&mut shared, 63, data);
    // A record pointing far past the data section.
    let mut outside = good.clone();
    put(&mut outside, last, 32 + 16 + 1_000_000);
    // The data section cut short: its one value loses its last byte.
    let marker = good.windows(14).position(|w| w == b"\xAB\xCD\xEFMaxMind.com").unwrap();
    let mut cut = good[..marker - 1].to_vec();
    cut.extend_from_slice(&good[marker..]);
    // Into the 16 zero bytes between the tree and the data.
    let mut separator = good.clone();
    put(&mut separator, last, 32 + 3);
    if let Ok(dir) = std::env::var("SLUICE_GEO_WRITE_CORPUS") {
        std::fs::write(format!("{dir}/seed-shared-nodes"), &shared).unwrap();
        std::fs::write(format!("{dir}/seed-pointer-outside"), &outside).unwrap();
    }
    for (name, bytes) in
        [("shared.mmdb", shared), ("outside.mmdb", outside), ("cut.mmdb", cut), ("separator.mmdb", separator)]
    {
        let t = std::time::Instant::now();
        // Refused at open, or (data that does not decode) at the walk.
        let e = GeoDb::from_bytes(bytes, name.into())
            .and_then(|d| d.networks(&sel(Key::Country, &["DE"], None)))
            .unwrap_err()
            .to_string();
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{name}: {:?}", t.elapsed());
        assert!(e.starts_with(name), "{e}");
    }
}

/// A walk past its time bound stops with an error naming the file, for
/// the sets and for the CrowdSec index alike; within it, the same file
/// walks as before.
#[test]
fn a_walk_past_its_time_bound_is_refused_by_name() {
    let (good, _) = chain();
    let slow = GeoDb::from_bytes(good.clone(), "slow.mmdb".into()).unwrap().with_walk_limit(std::time::Duration::ZERO);
    std::thread::sleep(std::time::Duration::from_millis(2));
    let e = slow.networks(&sel(Key::Country, &["DE"], None)).unwrap_err();
    assert!(matches!(e, GeoError::TooSlow { .. }) && e.to_string().starts_with("slow.mmdb: walking"), "{e}");
    let e = slow.by_value(Key::Country, "country.iso_code").unwrap_err();
    assert!(matches!(e, GeoError::TooSlow { .. }), "{e}");
    let fine = GeoDb::from_bytes(good, "fine.mmdb".into()).unwrap();
    assert!(fine.by_value(Key::Country, "country.iso_code").is_ok());
}
