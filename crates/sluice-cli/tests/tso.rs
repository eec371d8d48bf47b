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
    assert_eq!(ours.len(), 7);
    assert_eq!(theirs.len(), 7);
    for (i, (o, (src, dst, ports))) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(o["src"], src.as_str(), "packet {i} source");
        // On a header cut inside its options tshark stops its tree right
        // after the source address (it throws on the short header before
        // adding the destination), although the destination is among the
        // captured 20 bytes; there we check the crafted value instead.
        let dst = if dst.is_empty() && (i == 2 || i == 3) { "198.51.100.2" } else { dst.as_str() };
        assert_eq!(o["dst"], dst, "packet {i} destination");
        match ports {
            Some((sp, dp)) => {
                assert_eq!((o["sport"].as_u64(), o["dport"].as_u64()), (Some(*sp), Some(*dp)), "packet {i} ports")
            }
            None => assert!(o.get("sport").is_none(), "packet {i}: ports tshark does not see: {o}"),
        }
    }
    // tshark takes the captured length for total length 0 ("Total Length:
    // 3040 bytes (reported as 0, presumed to be because of TCP segmentation
    // offload (TSO))", 70040 for BIG TCP: more than the field can hold) and
    // finds the TCP ports, as we do; it raises no expert warning there,
    // where we count an anomaly. The cut options leave no transport header
    // to either of us.
    for i in [0, 1, 6] {
        assert!(theirs[i].2.is_some(), "tshark decodes TSO packet {i}'s ports: {theirs:?}");
    }
    let anomalies: Vec<Option<&str>> = ours.iter().map(|o| o.get("anomaly").and_then(Value::as_str)).collect();
    let (tso, cut) = (Some("ipv4_total_len_zero"), Some("truncated_ipv4_options"));
    assert_eq!(anomalies, [tso, tso, cut, cut, None, None, tso]);

    // Filtering: exactly the listed sources drop, none of the seven is undecodable.
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
    assert_eq!((v["packets"].as_u64(), v["dropped"].as_u64(), v["undecodable"].as_u64()), (Some(7), Some(4), Some(0)));
    assert_eq!(v["anomalies_by_reason"]["ipv4_total_len_zero"], 3);
    assert_eq!(v["anomalies_by_reason"]["truncated_ipv4_options"], 2);
    let sources = |c: &Path| tshark_fields(c).into_iter().map(|t| t.0).collect::<Vec<_>>();
    assert_eq!(sources(&drop), ["203.0.113.5", "203.0.113.6", "203.0.113.7", "203.0.113.8"]);
    assert_eq!(sources(&pass), ["192.0.2.7", "192.0.2.8", "192.0.2.9"]);
}
