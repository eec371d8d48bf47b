//! Packets that used to pass unjudged: IPv4 total length 0 (TSO / BIG TCP
//! captures on a sending host) and IPv4 options cut by the snap length with
//! both addresses present. Crafted with scapy; judged by address, with an
//! anomaly counted, and decoded as tshark decodes them.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn craft(out: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scapy/tso.py");
    let o = Command::new("/usr/bin/python3").arg(&script).arg(out).output().unwrap();
    assert!(o.status.success(), "scapy: {}", String::from_utf8_lossy(&o.stderr));
}

/// Source, destination and TCP or UDP ports of one packet, as tshark shows them.
type Fields = (String, String, Option<(u64, u64)>);

fn tshark_fields(capture: &Path) -> Vec<Fields> {
    let out = Command::new("tshark")
        .args(["-n", "-r", p(capture), "-T", "fields", "-E", "separator=/t"])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.dstport",
            "-e",
            "udp.srcport",
            "-e",
            "udp.dstport",
        ])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            let num = |i: usize| c.get(i).and_then(|s| s.parse::<u64>().ok());
            let ports = num(2).zip(num(3)).or(num(4).zip(num(5)));
            (c[0].to_owned(), c[1].to_owned(), ports)
        })
        .collect()
}

#[test]
fn tso_and_cut_options_are_judged_by_address_and_agree_with_tshark() {
    if !have_scapy() || !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("tso.pcap");
    craft(&capture);

    // Decoding: the same addresses (and ports, where tshark finds them) as tshark.
    let ours: Vec<Value> =
        ok(&["decode", "--in", p(&capture), "--json"]).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let theirs = tshark_fields(&capture);
    assert_eq!(ours.len(), 6);
    assert_eq!(theirs.len(), 6);
    for (i, (o, (src, dst, ports))) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(o["src"], src.as_str(), "packet {i} source");
        // On a header cut inside its options tshark stops its tree right
        // after the source address (it throws on the short header before
        // adding the destination), although the destination is among the
        // captured 20 bytes; there we check the crafted value instead.
        let dst = if dst.is_empty() && (i == 2 || i == 3) { "198.51.100.2" } else { dst.as_str() };
        assert_eq!(o["dst"], dst, "packet {i} destination");
        if let Some((sp, dp)) = ports {
            assert_eq!((o["sport"].as_u64(), o["dport"].as_u64()), (Some(*sp), Some(*dp)), "packet {i} ports");
        }
    }
    // tshark takes the captured length for total length 0 and finds the TCP
    // ports; the cut options leave no transport header to either of us.
    assert!(theirs[0].2.is_some() && theirs[1].2.is_some(), "tshark decodes TSO packets' ports: {theirs:?}");
    assert_eq!(ours[0]["anomaly"], "ipv4_total_len_zero");
    assert_eq!(ours[2]["anomaly"], "truncated_ipv4_options");
    assert!(ours[4].get("anomaly").is_none());

    // Filtering: exactly the listed sources drop, none of the six is undecodable.
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "203.0.113.0/24\n").unwrap();
    let (pass, drop) = (dir.path().join("pass.pcap"), dir.path().join("drop.pcap"));
    let v: Value = serde_json::from_str(&ok(&[
        "filter",
        "--in",
        p(&capture),
        "--drop-src",
        p(&list),
        "--pass",
        p(&pass),
        "--drop",
        p(&drop),
        "--undecodable",
        "pass",
        "--json",
    ]))
    .unwrap();
    assert_eq!((v["packets"].as_u64(), v["dropped"].as_u64(), v["undecodable"].as_u64()), (Some(6), Some(3), Some(0)));
    assert_eq!(v["anomalies_by_reason"]["ipv4_total_len_zero"], 2);
    assert_eq!(v["anomalies_by_reason"]["truncated_ipv4_options"], 2);
    let dropped: Vec<String> = tshark_fields(&drop).into_iter().map(|t| t.0).collect();
    assert_eq!(dropped, ["203.0.113.5", "203.0.113.6", "203.0.113.7"]);
}
