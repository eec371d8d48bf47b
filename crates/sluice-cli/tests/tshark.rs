//! `sluice decode --json` against tshark, field by field, on every packet of
//! generated captures that exercise every generator option.

mod common;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const FIELDS: &[&str] = &[
    "frame.number",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "ip.proto",
    "ipv6.nxt",
    "ipv6.fraghdr.nxt",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "ieee8021ad.id",
    "vlan.id",
    "ip.frag_offset",
    "ip.flags.mf",
    "ipv6.fraghdr.offset",
    "ipv6.fraghdr.more",
];

/// What tshark says, normalised to the shape of `sluice decode --json`.
fn tshark_packets(capture: &Path) -> Vec<Value> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(capture), "-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE", "-T", "fields"]);
    cmd.args(["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let f: HashMap<&str, &str> = FIELDS.iter().copied().zip(cols.iter().copied()).collect();
            let get = |k: &str| f.get(k).copied().filter(|s| !s.is_empty());
            let num = |k: &str| get(k).map(|s| s.parse::<u64>().unwrap_or_else(|_| panic!("{k}={s}")));
            let flag = |k: &str| get(k).map(|s| s == "1" || s.eq_ignore_ascii_case("true"));
            let mut v = serde_json::json!({ "index": num("frame.number").unwrap() - 1 });
            let v6 = get("ipv6.src").is_some();
            let (src, dst) = if v6 { (get("ipv6.src"), get("ipv6.dst")) } else { (get("ip.src"), get("ip.dst")) };
            v["src"] = src.into();
            v["dst"] = dst.into();
            let proto = if v6 { num("ipv6.fraghdr.nxt").or(num("ipv6.nxt")) } else { num("ip.proto") };
            v["proto"] = proto.into();
            // No encapsulation in these captures (tests/encap.rs covers them).
            v["encap"] = serde_json::json!([]);
            if let Some(sp) = num("tcp.srcport").or(num("udp.srcport")) {
                v["sport"] = sp.into();
                v["dport"] = num("tcp.dstport").or(num("udp.dstport")).into();
            }
            let vlans: Vec<u64> = [get("ieee8021ad.id"), get("vlan.id")]
                .into_iter()
                .flatten()
                .flat_map(|s| s.split(',').map(|x| x.parse::<u64>().unwrap()))
                .collect();
            v["vlan"] = vlans.into();
            // tshark shows fragment offsets in 8-byte units.
            let frag = if v6 {
                num("ipv6.fraghdr.offset").map(|o| (o * 8, flag("ipv6.fraghdr.more").unwrap_or(false)))
            } else {
                let (off, mf) = (num("ip.frag_offset").unwrap_or(0) * 8, flag("ip.flags.mf").unwrap_or(false));
                (off != 0 || mf).then_some((off, mf))
            };
            if let Some((off, more)) = frag {
                v["frag_offset"] = off.into();
                v["more_fragments"] = more.into();
            }
            v
        })
        .collect()
}

fn sluice_packets(capture: &Path) -> Vec<Value> {
    let out = ok(&["decode", "--json", "--in", p(capture)]);
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn compare(capture: &Path, expected_packets: usize) {
    let ours = sluice_packets(capture);
    let theirs = tshark_packets(capture);
    assert_eq!(ours.len(), expected_packets);
    assert_eq!(theirs.len(), expected_packets, "tshark saw a different number of packets");
    let mut mismatches = Vec::new();
    for (a, b) in ours.iter().zip(&theirs) {
        if a != b {
            mismatches.push(format!("sluice: {a}\ntshark: {b}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} packets differ; first:\n{}",
        mismatches.len(),
        ours.len(),
        mismatches.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
    let fragments = ours.iter().filter(|v| v.get("frag_offset").is_some()).count();
    let qinq = ours.iter().filter(|v| v["vlan"].as_array().unwrap().len() == 2).count();
    let v6 = ours.iter().filter(|v| v["src"].as_str().unwrap().contains(':')).count();
    eprintln!(
        "{}: {} packets agree with tshark ({fragments} fragments, {qinq} QinQ, {v6} IPv6)",
        capture.display(),
        ours.len()
    );
    assert!(fragments > 0 && qinq > 0 && v6 > 0, "capture does not exercise the options");
}

#[test]
fn decode_agrees_with_tshark_on_every_packet() {
    if !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Fresh tuple per packet, every option on.
    let a = dir.path().join("all-options.pcap");
    ok(&[
        "gen",
        "--out",
        p(&a),
        "--count",
        "200000",
        "--seed",
        "11",
        "--ipv6",
        "0.3",
        "--mix",
        "5:4:1",
        "--size",
        "imix",
        "--vlan",
        "0.15",
        "--qinq",
        "0.1",
        "--listed",
        "0.05",
        "--frag",
        "0.05",
    ]);
    compare(&a, 200_000);
    // Zipf flows, fixed size, nanosecond timestamps.
    let b = dir.path().join("zipf-flows.pcap");
    ok(&[
        "gen",
        "--out",
        p(&b),
        "--count",
        "50000",
        "--seed",
        "12",
        "--flows",
        "500",
        "--zipf",
        "1.1",
        "--ipv6",
        "0.5",
        "--size",
        "128",
        "--vlan",
        "0.3",
        "--qinq",
        "0.3",
        "--frag",
        "0.1",
        "--nanos",
    ]);
    compare(&b, 50_000);
}

/// `filter --sample-drops`: exactly 1 in N drops is written (no cap), as a
/// pcapng tshark opens, each frame commented with the rule line and text
/// that dropped it and the worker that judged it.
#[test]
fn drop_samples_open_in_tshark_and_name_their_rules() {
    if !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("demo.pcap");
    ok(&["demo", "--packets", "20000", "--seed", "5", "--keep", p(&capture), "--json"]);
    let list = firehol_file(dir.path());
    let rules = dir.path().join("edge.rules");
    let text = format!(
        "# samples\nset fh from {:?}\ncount proto udp\ndrop tcp dport {{ 23, 2323 }}\ndrop saddr @fh\ndrop daddr @fh\n",
        p(&list)
    );
    std::fs::write(&rules, &text).unwrap();
    let samples = dir.path().join("drops.pcapng");
    let v: Value = serde_json::from_str(&ok(&[
        "filter",
        "--in",
        p(&capture),
        "--rules",
        p(&rules),
        "--workers",
        "2",
        "--json",
        "--sample-drops",
        p(&samples),
        "--sample-rate",
        "7",
        "--sample-max-pps",
        "0",
    ]))
    .unwrap();
    let dropped = v["dropped"].as_u64().unwrap();
    let s = &v["samples"];
    assert!(dropped > 100, "{v}");
    assert_eq!(s["drops_seen"].as_u64(), Some(dropped), "{s}");
    assert_eq!(s["written"].as_u64(), Some(dropped.div_ceil(7)), "{s}");
    let comments = sample_comments(&samples);
    assert_eq!(comments.len() as u64, dropped.div_ceil(7));
    assert_comments_name_rule_lines(&comments, &text);
    assert!(comments.iter().all(|(c, iface)| iface == "demo.pcap" && c.contains(" port=demo.pcap ")), "{comments:?}");
    let workers: std::collections::BTreeSet<String> =
        comments.iter().map(|(c, _)| comment_field(c, "worker")).collect();
    assert_eq!(workers.into_iter().collect::<Vec<_>>(), ["0", "1"], "both workers judged drops");
}
