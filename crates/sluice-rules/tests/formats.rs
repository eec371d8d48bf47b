//! Every list format, written to a file and read back with `load_list`,
//! gives the same prefixes as the equivalent plain list.

use proptest::prelude::*;
use sluice_rules::{load_list, range_to_prefixes, ParsedList, Prefix, PrefixHashSet};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn load(text: &str) -> ParsedList {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.flush().unwrap();
    load_list(f.path(), false).unwrap_or_else(|e| panic!("{e}\n--- file ---\n{text}"))
}

fn sorted(mut ps: Vec<Prefix>) -> Vec<Prefix> {
    ps.sort();
    ps
}

/// The same entries, as plain CIDRs (the ranges split by hand).
const PLAIN: &str = "\
1.2.3.4
10.0.0.0/8
192.0.2.1/32
192.0.2.2/31
192.0.2.4/30
192.0.2.8/31
2001:db8::/32
2001:db8:1::/127
5.6.7.8
";

const RANGES: &str = "\
# the same list with ranges
1.2.3.4-1.2.3.4
10.0.0.0 - 10.255.255.255
192.0.2.1-192.0.2.9 ; a range
2001:db8::/32
2001:db8:1::-2001:db8:1::1
5.6.7.8/32
";

const IPSET: &str = "\
create a hash:net family inet hashsize 1024 maxelem 65536 timeout 300 counters comment
add a 1.2.3.4 timeout 120 packets 1 bytes 60 comment \"first; #1\"
add a 10.0.0.0/8 timeout 0 packets 0 bytes 0 comment \"\"
add a 192.0.2.1-192.0.2.9 timeout 300 packets 0 bytes 0 comment \"range\"
create b hash:net family inet6 hashsize 1024 maxelem 65536
add b 2001:db8::/32
add b 2001:db8:1::/127
-A old 5.6.7.8
";

const NFT: &str = "\
table inet filter {
\tset blocked4 {
\t\ttype ipv4_addr
\t\tflags interval,timeout
\t\telements = { 1.2.3.4 timeout 2m expires 1m59s500ms, 10.0.0.0/8,
\t\t\t     192.0.2.1-192.0.2.9 timeout 5m,
\t\t\t     5.6.7.8 counter packets 3 bytes 180 comment \"flood, x\" }
\t}

\tset blocked6 {
\t\ttype ipv6_addr
\t\tflags interval
\t\telements = { 2001:db8::/32, 2001:db8:1::/127 }
\t}

\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\tip saddr @blocked4 drop
\t\tip6 saddr @blocked6 drop
\t}
}
";

const JSON: &str = r#"{"cidr":"1.2.3.4/32","sblid":"SBL1","rir":"ripencc"}
{"cidr":"10.0.0.0/8","sblid":"SBL2","rir":"arin"}
{"cidr":"192.0.2.1/32","sblid":"SBL3","rir":"arin"}
{"cidr":"192.0.2.2/31","sblid":"SBL3","rir":"arin"}
{"cidr":"192.0.2.4/30","sblid":"SBL3","rir":"arin"}
{"cidr":"192.0.2.8/31","sblid":"SBL3","rir":"arin"}
{"cidr":"5.6.7.8/32","sblid":"SBL4","rir":"apnic"}
{"type":"metadata","timestamp":1700000000,"size":400,"records":7,"copyright":"(c) Spamhaus"}
{"cidr":"2001:db8::/32","sblid":"SBL5","rir":"ripencc"}
{"cidr":"2001:db8:1::/127","sblid":"SBL6","rir":"ripencc"}
{"type":"metadata","timestamp":1700000000,"size":120,"records":2}
"#;

#[test]
fn every_format_gives_the_plain_lists_prefixes() {
    let plain = sorted(load(PLAIN).prefixes);
    assert_eq!(plain.len(), 9);
    for (name, text) in [("ranges", RANGES), ("ipset", IPSET), ("nft", NFT), ("json", JSON)] {
        let l = load(text);
        assert!(l.skipped.is_empty(), "{name}");
        assert_eq!(sorted(l.prefixes.clone()), plain, "{name}");
        // Still the same set once nothing has expired.
        assert_eq!(sorted(l.live_after(0)), plain, "{name}");
    }
}

#[test]
fn timeouts_from_ipset_and_nft() {
    let ipset = load(IPSET);
    // 1.2.3.4 for 120 s, the four prefixes of the range for 300 s, 10/8 never (`timeout 0`).
    assert_eq!(ipset.timeouts, [(0, 120), (2, 300), (3, 300), (4, 300), (5, 300)]);
    assert_eq!(ipset.next_expiry(), Some(120));
    assert_eq!(ipset.live_after(120).len(), 8);
    assert_eq!(ipset.next_expiry_after(120), Some(300));
    let left = PrefixHashSet::from_prefixes(&ipset.live_after(300));
    assert_eq!(left.len(), 4);
    assert!(left.contains("10.1.1.1".parse().unwrap()) && left.contains("5.6.7.8".parse().unwrap()));
    assert!(!left.contains("1.2.3.4".parse().unwrap()) && !left.contains("192.0.2.5".parse().unwrap()));

    let nft = load(NFT);
    // `expires 1m59s500ms` rounds up to 120 s and wins over `timeout 2m`.
    assert_eq!(nft.timeouts, [(0, 120), (2, 300), (3, 300), (4, 300), (5, 300)]);
    assert_eq!(nft.next_expiry(), Some(120));
}

/// A random entry: a prefix, or a range of one family.
#[derive(Clone, Debug)]
enum Item {
    Prefix(Prefix),
    Range(IpAddr, IpAddr),
}

fn arb_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        (any::<u32>(), 8u8..=32).prop_map(|(a, l)| Item::Prefix(Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), l))),
        (any::<u128>(), 16u8..=128).prop_map(|(a, l)| Item::Prefix(Prefix::new(IpAddr::V6(Ipv6Addr::from(a)), l))),
        (any::<u32>(), 0u32..5000).prop_map(|(a, d)| {
            Item::Range(IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(a.saturating_add(d))))
        }),
        (any::<u128>(), any::<u64>()).prop_map(|(a, d)| {
            Item::Range(IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(a.saturating_add(u128::from(d)))))
        }),
    ]
}

/// The item as each format writes it.
fn entry(item: &Item) -> String {
    match item {
        Item::Prefix(p) => p.to_string(),
        Item::Range(a, b) => format!("{a}-{b}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Ranges equal their prefixes in every format that takes ranges, and
    /// the JSON list (prefixes only) equals the plain one.
    #[test]
    fn random_lists_agree_across_formats(items in proptest::collection::vec(arb_item(), 1..40)) {
        let mut expected = Vec::new();
        for item in &items {
            match item {
                Item::Prefix(p) => expected.push(*p),
                Item::Range(a, b) => expected.extend(range_to_prefixes(*a, *b).unwrap()),
            }
        }
        let expected = sorted(expected);
        let plain: String = expected.iter().map(|p| format!("{p}\n")).collect();
        let ranges: String = items.iter().map(|i| format!("{}\n", entry(i))).collect();
        let ipset: String = items.iter().enumerate().map(|(n, i)| format!("add s{} {} timeout {}\n", n % 3, entry(i), n + 1)).collect();
        let nft = format!(
            "table ip t {{\n\tset s {{\n\t\telements = {{ {} }}\n\t}}\n}}\n",
            items.iter().map(entry).collect::<Vec<_>>().join(",\n\t\t\t")
        );
        let json: String = expected.iter().map(|p| format!("{{\"cidr\":\"{p}\",\"sblid\":\"SBL1\"}}\n")).collect::<String>()
            + &format!("{{\"type\":\"metadata\",\"records\":{}}}\n", expected.len());
        prop_assert_eq!(sorted(load(&plain).prefixes), expected.clone());
        for text in [&ranges, &ipset, &nft, &json] {
            prop_assert_eq!(sorted(load(text).prefixes), expected.clone(), "{}", text);
        }
        // Every ipset entry expires: item n after n + 1 seconds.
        let l = load(&ipset);
        prop_assert_eq!(l.timeouts.len(), l.prefixes.len());
        prop_assert_eq!(l.next_expiry(), Some(1));
        prop_assert!(l.live_after(items.len() as u64).is_empty());
        // The ranges' membership, address by address at their edges.
        let set = PrefixHashSet::from_prefixes(&expected);
        for item in &items {
            if let Item::Range(a, b) = item {
                prop_assert!(set.contains(*a) && set.contains(*b));
            }
        }
    }
}
