//! Encapsulations end to end: scapy-crafted and generated captures of every
//! encapsulation decoded as tshark decodes them (the innermost header's
//! fields and the list of encapsulations walked), and address lists judging
//! what sits behind MPLS and PPPoE (the packet's own header) and behind
//! tunnels (the inner header, with `--inner` only).

mod common;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ENCAPS: [&str; 10] = ["mpls", "pppoe", "gre", "ipip", "6in4", "4in6", "6in6", "vxlan", "geneve", "gtpu"];
const TUNNELS: [&str; 8] = ["gre", "ipip", "6in4", "4in6", "6in6", "vxlan", "geneve", "gtpu"];

/// The list the listed sources come from: IPv4 and IPv6 (for 6in4, 6in6).
const LIST: &str = "203.0.113.0/24\n198.51.100.0/24\n2001:db8:bad::/48\n";

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
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
];

/// The innermost IP header of one packet and the encapsulations around it.
#[derive(Debug, PartialEq, Eq)]
struct Innermost {
    encap: Vec<String>,
    src: Option<String>,
    dst: Option<String>,
    proto: Option<u64>,
    ports: Option<(u64, u64)>,
}

/// tshark's view. It shows every header of a packet, outer ones first, so
/// a field repeated by a tunnel (`ip.src` twice for IPIP) has the inner
/// value last; `frame.protocols` (e.g. `eth:ethertype:ip:udp:vxlan:eth:
/// ethertype:vlan:ethertype:ipv6:tcp`) says which encapsulations there are
/// and which IP version is innermost.
fn tshark_innermost(capture: &Path) -> Vec<Innermost> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r", p(capture), "-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE", "-T", "fields"]);
    cmd.args(["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let f: HashMap<&str, &str> = FIELDS.iter().copied().zip(cols.iter().copied()).collect();
            // The last occurrence of a repeated field: the innermost header's.
            let last = |k: &str| f.get(k).and_then(|s| s.rsplit(',').next()).filter(|s| !s.is_empty());
            let num = |k: &str| last(k).map(|s| s.parse::<u64>().unwrap_or_else(|_| panic!("{k}={s}")));
            let tokens: Vec<&str> = f["frame.protocols"].split(':').collect();
            let mut encap = Vec::new();
            let mut prev = "";
            for &t in &tokens {
                let name = match (prev, t) {
                    ("ip", "ip") => Some("ipip"),
                    ("ip", "ipv6") => Some("6in4"),
                    ("ipv6", "ip") => Some("4in6"),
                    ("ipv6", "ipv6") => Some("6in6"),
                    // A stack of labels is one "mpls".
                    (_, "mpls") if prev != "mpls" => Some("mpls"),
                    (_, "pppoes") => Some("pppoe"),
                    (_, "gre") => Some("gre"),
                    (_, "vxlan") => Some("vxlan"),
                    (_, "geneve") => Some("geneve"),
                    (_, "gtp") => Some("gtpu"),
                    _ => None,
                };
                encap.extend(name.map(String::from));
                prev = t;
            }
            let Some(at) = tokens.iter().rposition(|t| *t == "ip" || *t == "ipv6") else {
                return Innermost { encap, src: None, dst: None, proto: None, ports: None };
            };
            let after = &tokens[at + 1..];
            let v6 = tokens[at] == "ipv6";
            let (src, dst) = if v6 { (last("ipv6.src"), last("ipv6.dst")) } else { (last("ip.src"), last("ip.dst")) };
            let proto = match (v6, after.contains(&"ipv6.fraghdr")) {
                (false, _) => num("ip.proto"),
                (true, true) => num("ipv6.fraghdr.nxt"),
                (true, false) => num("ipv6.nxt"),
            };
            let ports = if after.contains(&"tcp") {
                num("tcp.srcport").zip(num("tcp.dstport"))
            } else if after.contains(&"udp") {
                num("udp.srcport").zip(num("udp.dstport"))
            } else {
                None
            };
            Innermost { encap, src: src.map(String::from), dst: dst.map(String::from), proto, ports }
        })
        .collect()
}

/// `sluice decode --json`'s view: behind a tunnel the inner_* keys, else
/// (MPLS, PPPoE, nothing) the packet's own header.
fn sluice_innermost(capture: &Path) -> Vec<Innermost> {
    ok(&["decode", "--json", "--in", p(capture)])
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let encap: Vec<String> = v["encap"]
                .as_array()
                .unwrap_or_else(|| panic!("no encap list: {v}"))
                .iter()
                .map(|e| e.as_str().unwrap().to_owned())
                .collect();
            let tunnelled = encap.iter().any(|e| TUNNELS.contains(&e.as_str()));
            let k = |name: &str| if tunnelled { format!("inner_{name}") } else { name.to_owned() };
            let s = |name: &str| v.get(k(name)).and_then(Value::as_str).map(String::from);
            let n = |name: &str| v.get(k(name)).and_then(Value::as_u64);
            Innermost { encap, src: s("src"), dst: s("dst"), proto: n("proto"), ports: n("sport").zip(n("dport")) }
        })
        .collect()
}

fn agree(capture: &Path) -> Vec<Innermost> {
    let ours = sluice_innermost(capture);
    let theirs = tshark_innermost(capture);
    assert_eq!(ours.len(), theirs.len(), "{}: packet counts differ", capture.display());
    let differ: Vec<String> = ours
        .iter()
        .zip(&theirs)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("packet {i}\n sluice: {a:?}\n tshark: {b:?}"))
        .collect();
    assert!(
        differ.is_empty(),
        "{}: {} of {} packets differ; first:\n{}",
        capture.display(),
        differ.len(),
        ours.len(),
        differ.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
    ours
}

fn craft(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scapy/encap.py");
    let out = Command::new("/usr/bin/python3").arg(&script).arg(dir).output().unwrap();
    assert!(out.status.success(), "scapy: {}", String::from_utf8_lossy(&out.stderr));
}

fn list_file(dir: &Path) -> PathBuf {
    let path = dir.join("list.txt");
    std::fs::write(&path, LIST).unwrap();
    path
}

fn filter(capture: &Path, list: &Path, inner: bool) -> Value {
    let mut args = vec!["filter", "--in", p(capture), "--drop-src", p(list), "--json"];
    if inner {
        args.push("--inner");
    }
    serde_json::from_str(&ok(&args)).unwrap()
}

/// Generate `count` frames of `encap` with every option that applies on.
fn generate(dir: &Path, encap: &str, count: u64, seed: u64, share: &str) -> (PathBuf, Value) {
    let out = dir.join(format!("gen-{encap}.pcap"));
    let list = list_file(dir);
    let count = count.to_string();
    let seed = seed.to_string();
    #[rustfmt::skip]
    let stats = ok(&[
        "gen", "--out", p(&out), "--count", &count, "--seed", &seed, "--encap", encap, "--encap-share", share,
        "--ipv6", "0.3", "--mix", "5:4:1", "--size", "imix", "--vlan", "0.15", "--qinq", "0.1",
        "--frag", "0.05", "--listed", "0.1", "--list", p(&list), "--json",
    ]);
    (out, serde_json::from_str(&stats).unwrap())
}

#[test]
fn scapy_encapsulations_decode_as_tshark_decodes_them() {
    if !have_scapy() || !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    craft(dir.path());
    let ours = agree(&dir.path().join("all.pcap"));
    // What encap.py crafts, in order (the header variants are in the script).
    #[rustfmt::skip]
    let want = [
        "mpls", "mpls", "mpls", "pppoe", "pppoe", "pppoe", "gre", "gre", "gre", "gre", "ipip", "6in4", "4in6", "6in6",
        "vxlan", "vxlan", "geneve", "geneve", "gtpu", "gtpu", "gtpu", "gtpu",
    ];
    let got: Vec<String> = ours.iter().map(|i| i.encap.join(",")).collect();
    assert_eq!(got, want);
    for (i, inner) in ours.iter().enumerate() {
        assert!(
            inner.src.as_deref().is_some_and(|s| s.starts_with("10.") || s.starts_with("2001:db8:")),
            "packet {i}: {inner:?}"
        );
    }
    for e in ENCAPS {
        agree(&dir.path().join(format!("listed-{e}.pcap")));
    }
}

#[test]
fn generated_encapsulations_decode_as_tshark_decodes_them() {
    if !have_tool("tshark") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (i, e) in ENCAPS.iter().enumerate() {
        let (capture, stats) = generate(dir.path(), e, 4000, 40 + i as u64, "0.9");
        let ours = agree(&capture);
        let wrapped = ours.iter().filter(|x| x.encap == [e.to_string()]).count() as u64;
        let plain = ours.iter().filter(|x| x.encap.is_empty()).count() as u64;
        assert_eq!(wrapped, stats["encapsulated"].as_u64().unwrap(), "{e}: {stats}");
        assert_eq!(wrapped + plain, 4000, "{e}");
        assert!(
            wrapped > 3000 && stats["fragments"].as_u64().unwrap() > 0 && stats["listed"].as_u64().unwrap() > 0,
            "{e}: {stats}"
        );
        eprintln!("{e}: 4000 packets agree with tshark ({wrapped} wrapped, {} fragments)", stats["fragments"]);
    }
}

#[test]
fn listed_sources_behind_mpls_and_pppoe_are_dropped_by_a_plain_list() {
    let dir = tempfile::tempdir().unwrap();
    let list = list_file(dir.path());
    for e in ["mpls", "pppoe"] {
        let (capture, stats) = generate(dir.path(), e, 3000, 7, "1");
        let listed = stats["listed"].as_u64().unwrap();
        assert!(listed > 100, "{e}: {stats}");
        let v = filter(&capture, &list, false);
        assert_eq!(v["dropped"].as_u64(), Some(listed), "{e}: {v}");
        assert_eq!(v["dropped_by_src"].as_u64(), Some(listed), "{e}");
        assert_eq!(v["rules"][0]["packets"].as_u64(), Some(listed), "{e}: counted by its rule");
        // Nothing is tunnelled, so --inner judges the same header.
        assert_eq!(filter(&capture, &list, true)["dropped"].as_u64(), Some(listed), "{e} --inner");
    }
    if !have_scapy() {
        return;
    }
    craft(dir.path());
    for e in ["mpls", "pppoe"] {
        let v = filter(&dir.path().join(format!("listed-{e}.pcap")), &list, false);
        assert_eq!(
            (v["packets"].as_u64(), v["dropped"].as_u64(), v["dropped_by_src"].as_u64()),
            (Some(2), Some(1), Some(1)),
            "{e}: {v}"
        );
    }
}

#[test]
fn listed_inner_sources_pass_a_plain_list_and_are_dropped_with_inner() {
    let dir = tempfile::tempdir().unwrap();
    let list = list_file(dir.path());
    for e in TUNNELS {
        // Every datagram tunnelled: the outer addresses never touch the list.
        let (capture, stats) = generate(dir.path(), e, 3000, 9, "1");
        let listed = stats["listed"].as_u64().unwrap();
        assert!(listed > 100, "{e}: {stats}");
        let plain = filter(&capture, &list, false);
        assert_eq!(plain["dropped"].as_u64(), Some(0), "{e}: the list judges the outer header: {plain}");
        let inner = filter(&capture, &list, true);
        assert_eq!(inner["dropped"].as_u64(), Some(listed), "{e} --inner: {inner}");
        assert_eq!(inner["dropped_by_src"].as_u64(), Some(listed), "{e} --inner");
    }
    if !have_scapy() {
        return;
    }
    craft(dir.path());
    for e in TUNNELS {
        let capture = dir.path().join(format!("listed-{e}.pcap"));
        let plain = filter(&capture, &list, false);
        assert_eq!((plain["packets"].as_u64(), plain["dropped"].as_u64()), (Some(2), Some(0)), "{e}: {plain}");
        let inner = filter(&capture, &list, true);
        assert_eq!(
            (inner["dropped"].as_u64(), inner["dropped_by_src"].as_u64()),
            (Some(1), Some(1)),
            "{e} --inner: {inner}"
        );
    }
}
