//! Geo sets end to end: a country database written here, `sluice filter`
//! with a geo set in a rule file, with `--drop-country`, and from a
//! compiled file, each drops exactly the packets whose source the
//! database itself (the `maxminddb` reader's lookup, not the prefix
//! tables) puts in the chosen countries. Bad databases, codes and flags
//! are named.

mod common;
use common::*;
use serde_json::Value;
use sluice_geo::write::{Value as V, Writer};
use sluice_geo::GeoDb;
use sluice_pcap::CaptureReader;
use sluice_wire::decode;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Most of the address space, in five countries (holes at 224.0.0.0/3
/// and 0::/2, where IPv4 lives in the tree).
fn country_db(dir: &Path) -> PathBuf {
    let cc = |c: &str| V::map([("country", V::map([("iso_code", V::str(c))]))]);
    let mut w = Writer::new("GeoLite2-Country", 1_795_737_600);
    for (net, len, c) in [
        ("0.0.0.0", 3, "CN"),
        ("32.0.0.0", 3, "RU"),
        ("64.0.0.0", 2, "US"),
        ("128.0.0.0", 2, "DE"),
        ("192.0.0.0", 4, "CN"),
        ("208.0.0.0", 4, "BR"),
        ("4000::", 2, "CN"),
        ("8000::", 2, "RU"),
        ("c000::", 2, "US"),
    ] {
        w.insert(net.parse().unwrap(), len, cc(c)).unwrap();
    }
    let path = dir.join("country.mmdb");
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}

/// The source of each record, in order.
fn sources(capture: &Path) -> Vec<Option<IpAddr>> {
    let mut r = CaptureReader::open(capture).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(decode(rec.interface.link_type, rec.data).ok().and_then(|s| s.ip.map(|ip| ip.src)));
    }
    out
}

fn dropped(args: &[&str]) -> u64 {
    let v: Value = serde_json::from_str(&ok(args)).unwrap();
    v["dropped"].as_u64().unwrap()
}

#[test]
fn a_country_set_drops_what_the_database_says() {
    let dir = tempfile::tempdir().unwrap();
    let db = country_db(dir.path());
    let capture = dir.path().join("in.pcap");
    ok(&["gen", "--out", p(&capture), "--count", "20000", "--seed", "5", "--ipv6", "0.3"]);
    let reader = GeoDb::open(&db).unwrap();
    let want: Vec<bool> = sources(&capture)
        .iter()
        .map(|s| {
            s.and_then(|a| reader.lookup(a, "country.iso_code").unwrap())
                .and_then(|f| f.value)
                .is_some_and(|c| c == "CN" || c == "RU")
        })
        .collect();
    let want_drops = want.iter().filter(|&&d| d).count() as u64;
    assert!(want_drops > 2000 && want_drops < 18000, "{want_drops}: the capture should have both");

    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "set east geo country.mmdb country CN, RU\ndrop saddr @east\n").unwrap();
    let drop = dir.path().join("drop.pcap");
    let args = ["filter", "--in", p(&capture), "--rules", p(&rules), "--drop", p(&drop), "--json"];
    assert_eq!(dropped(&args), want_drops);
    // Exactly those packets, in order.
    let all = sources(&capture);
    let expected: Vec<Option<IpAddr>> = all.iter().zip(&want).filter(|(_, d)| **d).map(|(s, _)| *s).collect();
    assert_eq!(sources(&drop), expected);

    // The shorthand, and a compiled file, drop the same.
    let short = ["filter", "--in", p(&capture), "--drop-country", "cn,RU", "--geo-db", p(&db), "--json"];
    assert_eq!(dropped(&short), want_drops);
    let compiled = dir.path().join("east.sluice");
    ok(&["compile", "--rules", p(&rules), "--out", p(&compiled)]);
    let shown = ok(&["inspect", p(&compiled)]);
    assert!(shown.contains("geo: GeoLite2-Country built 2026-11-27: CN 3, RU 2 networks"), "{shown}");
    assert_eq!(dropped(&["filter", "--in", p(&capture), "--rules", p(&compiled), "--json"]), want_drops);
}

#[test]
fn bad_databases_codes_and_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = country_db(dir.path());
    let capture = dir.path().join("in.pcap");
    ok(&["gen", "--out", p(&capture), "--count", "10"]);
    let run = |rules: &str| {
        let file = dir.path().join("r.rules");
        std::fs::write(&file, rules).unwrap();
        stderr_of(&["filter", "--in", p(&capture), "--rules", p(&file)])
    };
    let (code, _, err) = run("# countries\nset x geo country.mmdb country XX\ndrop saddr @x\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("r.rules:2: set `x`: ") && err.contains("country.mmdb: country XX has no networks"), "{err}");
    let (code, _, err) = run("set x geo country.mmdb country CHN\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("r.rules:1:32: `CHN` is not a country code"), "{err}");
    let (_, _, err) = run("set x geo country.mmdb country CN field country_code\ndrop saddr @x\n");
    assert!(err.contains("no record has a value at field `country_code`"), "{err}");
    std::fs::write(dir.path().join("junk.mmdb"), b"junk").unwrap();
    let (_, _, err) = run("set x geo junk.mmdb country CN\ndrop saddr @x\n");
    assert!(err.contains("r.rules:1: set `x`: ") && err.contains("junk.mmdb: not a MaxMind DB file"), "{err}");

    let (code, _, err) = stderr_of(&["filter", "--in", p(&capture), "--drop-country", "CHN", "--geo-db", p(&db)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`CHN` is not a country code"), "{err}");
    let (code, _, err) = stderr_of(&["filter", "--in", p(&capture), "--drop-country", "CN"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--geo-db"), "{err}");
    let (code, _, err) = stderr_of(&["filter", "--in", p(&capture), "--drop-asn", "4134", "--geo-db", p(&db)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no record has a asn (fields tried: autonomous_system_number, asn)"), "{err}");
}
