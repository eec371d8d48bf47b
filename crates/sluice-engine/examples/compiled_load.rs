//! How long a compiled rule set takes to load, against building it.
//!
//! Builds an [`AddressSet`] of 6M random IPv4 hosts and a few prefixes,
//! saves it inside a [`container`] file (in memory: the engine does no
//! I/O), then times `container::decode` (checksum included) plus
//! `AddressSet::load`, best of 5, against parsing the same list as text and
//! building from the parsed prefixes. Prints one JSON object.
//!
//! `cargo run --release -p sluice-engine --example compiled_load [HOSTS]`

use sluice_engine::container::{self, Section};
use sluice_rules::Prefix;
use sluice_sets::AddressSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let (mut best, mut first, mut last) = (Duration::MAX, Duration::ZERO, None);
    for i in 0..runs {
        let t = Instant::now();
        let v = f();
        let d = t.elapsed();
        if i == 0 {
            first = d;
        }
        best = best.min(d);
        last = Some(v);
    }
    (best, first, last.expect("at least one run"))
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn main() {
    let hosts: usize = std::env::args().nth(1).map_or(6_000_000, |a| a.parse().expect("HOSTS: a number"));
    // xorshift64: reproducible and needs no dependency.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut text = String::with_capacity(hosts * 16);
    for _ in 0..hosts {
        text.push_str(&Ipv4Addr::from(next() as u32).to_string());
        text.push('\n');
    }
    for i in 0..16u32 {
        text.push_str(&format!("{}/{}\n", Ipv4Addr::from(next() as u32 & (u32::MAX << (8 + i))), 24 - i));
    }

    let (parse, _, list) =
        best(3, || sluice_rules::parse_list("hosts", text.as_bytes(), false).expect("list parses").prefixes);
    let (build, _, built) = best(3, || AddressSet::new(&list));
    let mut blob = Vec::new();
    built.save(&mut blob);
    let file = container::encode(&[Section { name: "drop-any", bytes: &blob }]);
    drop(blob);
    let (load, first_load, loaded) = best(5, || {
        let sections = container::decode(&file).expect("file decodes");
        AddressSet::load(container::find(&sections, "drop-any").expect("section")).expect("set loads")
    });
    let (decode, _, _) = best(5, || container::decode(&file).map(|s| s.len()));

    // The same verdicts: every listed address, and as many random ones.
    let mut probes: Vec<IpAddr> = list.iter().map(Prefix::addr).collect();
    probes.extend((0..list.len()).map(|_| IpAddr::V4(Ipv4Addr::from(next() as u32))));
    let (mut a, mut b) = (vec![false; probes.len()], vec![false; probes.len()]);
    built.contains_batch(&probes, &mut a, 16, true);
    loaded.contains_batch(&probes, &mut b, 16, true);
    let same = a == b && probes.iter().step_by(101).all(|ip| loaded.contains(*ip) == built.contains(*ip));
    assert!(same, "loaded set answers differently");
    assert_eq!(loaded.len(), built.len());

    println!(
        "{{\"entries\": {}, \"text_bytes\": {}, \"file_bytes\": {}, \"parse_ms\": {}, \"build_ms\": {}, \
         \"load_ms\": {}, \"first_load_ms\": {}, \"decode_checksum_ms\": {}, \"load_vs_parse\": {:.4}, \
         \"load_vs_parse_build\": {:.4}, \"huge_pages\": {}, \"same_verdicts\": {}, \"probes\": {}}}",
        loaded.len(),
        text.len(),
        file.len(),
        ms(parse),
        ms(build),
        ms(load),
        ms(first_load),
        ms(decode),
        load.as_secs_f64() / parse.as_secs_f64(),
        load.as_secs_f64() / (parse + build).as_secs_f64(),
        loaded.huge_pages(),
        same,
        probes.len(),
    );
}
