//! `sluice filter --rules` against an independent evaluation: tshark reads
//! the header fields of every packet of a generated capture, and a plain
//! evaluator written here (first match decides, `count` goes on) applies the
//! same rule file to them. Drops, the dropped packets themselves and every
//! rule's counter must be equal.

mod common;
use common::*;
use serde_json::Value;
use sluice_rules::{parse_list, Prefix};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

const FIELDS: &[&str] = &[
    "frame.len",
    "ieee8021ad.id",
    "vlan.id",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "ip.proto",
    "ipv6.nxt",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "tcp.flags",
    "icmp.type",
    "icmpv6.type",
];

/// One packet as tshark sees it.
#[derive(Debug, Default)]
struct Fields {
    len: u32,
    vlan: Option<u16>,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: Option<u8>,
    sport: Option<u16>,
    dport: Option<u16>,
    flags: Option<u8>,
    icmp_type: Option<u8>,
}

fn tshark(capture: &Path) -> Vec<Fields> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(capture), "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let f: HashMap<&str, &str> = FIELDS.iter().copied().zip(line.split('\t')).collect();
            let get = |k: &str| f.get(k).copied().filter(|s| !s.is_empty());
            let num = |k: &str| get(k).map(|s| s.parse::<u64>().unwrap_or_else(|_| panic!("{k}={s}")));
            let hex = |k: &str| get(k).map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap());
            let v6 = get("ipv6.src").is_some();
            let addr = |k: &str| get(k).map(|s| s.parse::<IpAddr>().unwrap());
            Fields {
                len: num("frame.len").unwrap() as u32,
                // The outermost tag: the S-tag of QinQ, else the 802.1Q tag.
                vlan: num("ieee8021ad.id").or(num("vlan.id")).map(|v| v as u16),
                src: if v6 { addr("ipv6.src") } else { addr("ip.src") },
                dst: if v6 { addr("ipv6.dst") } else { addr("ip.dst") },
                proto: if v6 { num("ipv6.nxt") } else { num("ip.proto") }.map(|v| v as u8),
                sport: num("tcp.srcport").or(num("udp.srcport")).map(|v| v as u16),
                dport: num("tcp.dstport").or(num("udp.dstport")).map(|v| v as u16),
                flags: hex("tcp.flags").map(|v| v as u8),
                icmp_type: num("icmp.type").or(num("icmpv6.type")).map(|v| v as u8),
            }
        })
        .collect()
}

/// The rule file under test, and the same rules as closures over tshark's
/// fields: (is it a count rule, verdict if decisive, does it match).
type Check = Box<dyn Fn(&Fields) -> bool>;

fn in_list(list: &[Prefix], a: Option<IpAddr>) -> bool {
    a.is_some_and(|a| list.iter().any(|p| p.contains(a)))
}

#[test]
fn filter_rules_agree_with_an_independent_evaluation() {
    if !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let firehol = firehol_file(dir.path());
    let capture = dir.path().join("in.pcap");
    ok(&[
        "gen",
        "--out",
        p(&capture),
        "--count",
        "20000",
        "--seed",
        "21",
        "--ipv6",
        "0.3",
        "--mix",
        "5:3:2",
        "--size",
        "imix",
        "--vlan",
        "0.2",
        "--qinq",
        "0.05",
        "--listed",
        "0.2",
    ]);
    let rules_path = dir.path().join("test.rules");
    std::fs::write(
        &rules_path,
        format!(
            "# every kind of match, in an order where first-match matters\n\
             set fh from \"{}\"\n\
             set low {{ 0.0.0.0/1, 2000::/4 }}\n\
             count proto udp\n\
             count vlan != 5\n\
             pass tcp dport 0-1023\n\
             drop saddr @fh\n\
             count daddr {{ 0.0.0.0/2, 4000::/2 }}\n\
             drop udp sport {{ 0-9999, 60000-65535 }}\n\
             count icmp type 8\n\
             drop icmpv6 type 128\n\
             drop tcp flags syn,!ack tcp dport 30000-65535\n\
             pass len 1000-1514 proto udp\n\
             drop daddr @low tcp sport 40000-49999\n\
             count addr != @low\n\
             default pass\n",
            firehol.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    let fh = parse_list("fh", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false).unwrap().prefixes;
    let low: Vec<Prefix> = vec!["0.0.0.0/1".parse().unwrap(), "2000::/4".parse().unwrap()];
    let quarter: Vec<Prefix> = vec!["0.0.0.0/2".parse().unwrap(), "4000::/2".parse().unwrap()];
    let (fh2, low2, low3) = (fh.clone(), low.clone(), low.clone());
    // (action, matches) in file order.
    let rules: Vec<(&str, Check)> = vec![
        ("count", Box::new(|f: &Fields| f.proto == Some(17))),
        ("count", Box::new(|f: &Fields| f.vlan.is_some_and(|v| v != 5))),
        ("pass", Box::new(|f: &Fields| f.proto == Some(6) && f.dport.is_some_and(|d| d <= 1023))),
        ("drop", Box::new(move |f: &Fields| in_list(&fh2, f.src))),
        ("count", Box::new(move |f: &Fields| in_list(&quarter, f.dst))),
        ("drop", Box::new(|f: &Fields| f.proto == Some(17) && f.sport.is_some_and(|s| s <= 9999 || s >= 60000))),
        ("count", Box::new(|f: &Fields| f.proto == Some(1) && f.icmp_type == Some(8))),
        ("drop", Box::new(|f: &Fields| f.proto == Some(58) && f.icmp_type == Some(128))),
        (
            "drop",
            Box::new(|f: &Fields| {
                f.proto == Some(6)
                    && f.flags.is_some_and(|x| x & 0x02 != 0 && x & 0x10 == 0)
                    && f.dport.is_some_and(|d| d >= 30000)
            }),
        ),
        ("pass", Box::new(|f: &Fields| (1000..=1514).contains(&f.len) && f.proto == Some(17))),
        (
            "drop",
            Box::new(move |f: &Fields| {
                in_list(&low2, f.dst) && f.proto == Some(6) && f.sport.is_some_and(|s| (40000..=49999).contains(&s))
            }),
        ),
        ("count", Box::new(move |f: &Fields| f.src.is_some() && !(in_list(&low3, f.src) || in_list(&low3, f.dst)))),
    ];
    let packets = tshark(&capture);
    assert_eq!(packets.len(), 20000);
    let mut counts = vec![0u64; rules.len()];
    let mut dropped = Vec::new();
    for (i, f) in packets.iter().enumerate() {
        for (r, (action, m)) in rules.iter().enumerate() {
            if !m(f) {
                continue;
            }
            counts[r] += 1;
            match *action {
                "count" => continue,
                "drop" => dropped.push(i),
                _ => {}
            }
            break;
        }
    }

    let drop_out = dir.path().join("drop.pcap");
    let v: Value = serde_json::from_str(&ok(&[
        "filter",
        "--in",
        p(&capture),
        "--rules",
        p(&rules_path),
        "--drop",
        p(&drop_out),
        "--json",
    ]))
    .unwrap();
    let got: Vec<u64> = v["rules"].as_array().unwrap().iter().map(|r| r["packets"].as_u64().unwrap()).collect();
    assert_eq!(got, counts, "per-rule counters");
    assert_eq!(v["dropped"].as_u64().unwrap(), dropped.len() as u64);
    assert_eq!(v["rules"][3]["line"], 7);
    assert_eq!(v["rules"][3]["text"], "drop saddr @fh");
    // Every rule matched something, so the test exercises them all.
    assert!(counts.iter().all(|&c| c > 0), "a rule never matched: {counts:?}");

    // The drop capture holds exactly those packets, in order.
    let mut input = sluice_pcap::CaptureReader::open(&capture).unwrap();
    let mut all = Vec::new();
    while let Some(r) = input.next_record().unwrap() {
        all.push(r.data.to_vec());
    }
    let mut out = sluice_pcap::CaptureReader::open(&drop_out).unwrap();
    let mut k = 0;
    while let Some(r) = out.next_record().unwrap() {
        assert_eq!(r.data, &all[dropped[k]][..], "dropped packet {k} is input packet {}", dropped[k]);
        k += 1;
    }
    assert_eq!(k, dropped.len());

    // Workers judge alike.
    let w: Value = serde_json::from_str(&ok(&[
        "filter",
        "--in",
        p(&capture),
        "--rules",
        p(&rules_path),
        "--workers",
        "2",
        "--json",
    ]))
    .unwrap();
    assert_eq!(w["rules"], v["rules"]);
}

#[test]
fn rule_file_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("in.pcap");
    ok(&["gen", "--out", p(&capture), "--count", "10"]);
    let rules = dir.path().join("bad.rules");
    std::fs::write(&rules, "set a { 10.0.0.0/8 }\ndrop saddr @a\ndrop tcp dport 99999\n").unwrap();
    let out = sluice(&["filter", "--in", p(&capture), "--rules", p(&rules)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3:16: expected a port", rules.display())), "{err}");
    // A list named by the rule file with a bad line: both places named.
    std::fs::write(dir.path().join("l.txt"), "10.0.0.1\nbogus\n").unwrap();
    std::fs::write(&rules, "\nset l from \"l.txt\"\ndrop saddr @l\n").unwrap();
    let out = sluice(&["filter", "--in", p(&capture), "--rules", p(&rules)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:2: set `l`:", rules.display())) && err.contains("l.txt:2"), "{err}");
    // `iface` matches live ports only.
    std::fs::write(&rules, "drop iface eth0\n").unwrap();
    let out = sluice(&["filter", "--in", p(&capture), "--rules", p(&rules)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("live ports only"));
    // --rules and --drop-src are alternatives.
    let out = sluice(&["filter", "--in", p(&capture), "--rules", p(&rules), "--drop-src", p(&rules)]);
    assert!(!out.status.success());
}

#[test]
fn a_port_rule_judges_a_reassembled_datagram_whole() {
    // Fragmented UDP to random ports: `drop udp dport 0-32767` must drop
    // every fragment of a matching datagram (the later ones carry no ports
    // of their own) and no fragment of the others.
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("frags.pcap");
    ok(&[
        "gen",
        "--out",
        p(&capture),
        "--count",
        "3000",
        "--seed",
        "5",
        "--mix",
        "0:1:0",
        "--size",
        "imix",
        "--frag",
        "0.5",
    ]);
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "drop udp dport 0-32767\ncount frag later\n").unwrap();
    let v: Value = serde_json::from_str(&ok(&["filter", "--in", p(&capture), "--rules", p(&rules), "--json"])).unwrap();
    let later = v["rules"][1]["packets"].as_u64().unwrap();
    assert!(later > 100, "later fragments: {later}");
    // Per datagram: all fragments share a verdict. Decode the outputs and
    // check no datagram appears in both (a fresh random address pair per
    // datagram identifies it).
    let pass = dir.path().join("pass.pcap");
    let drop = dir.path().join("drop.pcap");
    ok(&["filter", "--in", p(&capture), "--rules", p(&rules), "--pass", p(&pass), "--drop", p(&drop)]);
    let keys = |f: &Path| -> std::collections::HashSet<String> {
        ok(&["decode", "--in", p(f), "--json"])
            .lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v.get("frag_offset").map(|_| format!("{} {}", v["src"], v["dst"]))
            })
            .collect()
    };
    let (kp, kd) = (keys(&pass), keys(&drop));
    assert!(!kd.is_empty() && !kp.is_empty());
    assert!(kp.is_disjoint(&kd), "a datagram split across pass and drop");
}

#[test]
fn v4mapped_matches_ipv4_entries() {
    let dir = tempfile::tempdir().unwrap();
    let v6 = |src: std::net::Ipv6Addr| {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 59, 64];
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&"2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        f
    };
    let capture = dir.path().join("mapped.pcap");
    std::fs::write(
        &capture,
        pcap(&[
            v6("::ffff:10.1.2.3".parse().unwrap()),
            v6("::ffff:192.0.2.1".parse().unwrap()),
            v6("2001:db8::7".parse().unwrap()),
        ]),
    )
    .unwrap();
    let list = dir.path().join("l.txt");
    std::fs::write(&list, "10.0.0.0/8\n").unwrap();
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["filter", "--in", p(&capture), "--drop-src", p(&list), "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    assert_eq!(run(&[])["dropped"], 0, "an IPv4 entry does not match a mapped address by default");
    assert_eq!(run(&["--v4mapped"])["dropped"], 1);
}
