//! The safety net under runtime adds (a bridge's `sluice ctl add`, CrowdSec
//! decisions, the HTTP guard's blocks): a never-block list (`--never-block
//! FILE`) whose addresses no runtime add may cover or overlap, and the
//! least prefix length such an add may have (`--min-prefix-v4`,
//! `--min-prefix-v6`). Without it, `0.0.0.0/1` and `128.0.0.0/1` from a
//! LAPI, a watcher or a mistyped line drop everything, and a block of the
//! operator's own network locks the operator out.
//!
//! Only runtime adds are checked: what the operator's rule files and lists
//! say is the operator's decision, wide or not.

use crate::list::load_list;
use crate::prefix::{mask_v4, mask_v6, Prefix};
use std::fmt;
use std::path::Path;

/// `--min-prefix-v4`'s default. A /8 is 16.7 million addresses, a whole
/// legacy allocation or a RIR's block: no attacker, scenario or watcher
/// decision is that wide, while a typo (`/1` for `/21`) or a compromised
/// feed sending `0.0.0.0/1` is. What is legitimately wider (bogons such as
/// `224.0.0.0/3`, a country's whole space) belongs in the rule files,
/// which this does not restrict.
pub const DEFAULT_MIN_PREFIX_V4: u8 = 8;
/// `--min-prefix-v6`'s default. IANA hands the RIRs /12s; the largest
/// allocations to a single network are around /19, and attackers rotate
/// within a /32 to /64. A /16 is wider than any one operator's space.
pub const DEFAULT_MIN_PREFIX_V6: u8 = 16;

/// Why a runtime add was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The element covers, or lies within, this never-block entry.
    NeverBlock { listed: Prefix },
    /// The element is wider than the least prefix length of its family.
    MinPrefix { min: u8, v6: bool },
}

impl Refusal {
    /// Every reason, as [`Refusal::reason`] names it (metric labels).
    pub const REASONS: [&'static str; 2] = ["never_block", "min_prefix"];

    /// The reason as a metric label: `never_block` or `min_prefix`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NeverBlock { .. } => "never_block",
            Refusal::MinPrefix { .. } => "min_prefix",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NeverBlock { listed } => write!(f, "it overlaps {listed}, which is on the never-block list"),
            Refusal::MinPrefix { min, v6 } => write!(
                f,
                "it is wider than /{min}, the widest a runtime add may be (--min-prefix-{} {min})",
                if *v6 { "v6" } else { "v4" }
            ),
        }
    }
}

/// A prefix's first and last address, one family's addresses as numbers.
fn range(p: &Prefix) -> (u128, u128) {
    match *p {
        Prefix::V4 { addr, len } => (u128::from(addr), u128::from(addr | !mask_v4(len))),
        Prefix::V6 { addr, len } => (addr, addr | !mask_v6(len)),
    }
}

/// A never-block list, kept as the outermost of its prefixes, disjoint and
/// sorted per family: prefixes are nested or disjoint, so an element
/// overlaps some listed prefix exactly when it overlaps one of these, and
/// a binary search finds it (a flood of refused blocks costs O(log n)
/// each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeverBlock {
    /// (first, last, the prefix), IPv4 then IPv6.
    v4: Vec<(u128, u128, Prefix)>,
    v6: Vec<(u128, u128, Prefix)>,
    entries: usize,
}

impl NeverBlock {
    pub fn new(prefixes: &[Prefix]) -> NeverBlock {
        let outermost = |v6: bool| {
            let mut r: Vec<(u128, u128, Prefix)> = prefixes
                .iter()
                .filter(|p| matches!(p, Prefix::V6 { .. }) == v6)
                .map(|p| {
                    let (a, b) = range(p);
                    (a, b, *p)
                })
                .collect();
            // At one start, the widest first: it holds the others.
            r.sort_unstable_by_key(|&(a, b, _)| (a, std::cmp::Reverse(b)));
            let mut out: Vec<(u128, u128, Prefix)> = Vec::with_capacity(r.len());
            for e in r {
                // Starting inside the last one kept, it lies within it.
                if out.last().is_none_or(|last| e.0 > last.1) {
                    out.push(e);
                }
            }
            out
        };
        NeverBlock { v4: outermost(false), v6: outermost(true), entries: prefixes.len() }
    }

    /// A never-block file: the list formats every list is read in
    /// ([`load_list`]), strictly (a bad line is an error naming the file
    /// and line). An entry with a timeout is an error: a never-block
    /// entry that expires would let a block through later, unannounced.
    pub fn load(path: &Path) -> Result<NeverBlock, String> {
        let l = load_list(path, false).map_err(|e| e.to_string())?;
        if let Some(&(i, secs)) = l.timeouts.first() {
            return Err(format!(
                "{}: the entry {} has a timeout ({secs} s); a never-block entry must not expire: remove the timeout",
                path.display(),
                l.prefixes[i]
            ));
        }
        Ok(NeverBlock::new(&l.prefixes))
    }

    /// Entries as listed (nested ones included).
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// A listed prefix that `p` covers or lies within (the outermost
    /// such), if any.
    pub fn overlapping(&self, p: &Prefix) -> Option<Prefix> {
        let ranges = if matches!(p, Prefix::V6 { .. }) { &self.v6 } else { &self.v4 };
        let (first, last) = range(p);
        // The last outermost entry starting at or before `p` ends: the
        // ones before it end before it starts, so if any overlaps `p`, it
        // does.
        let i = ranges.partition_point(|r| r.0 <= last);
        let r = ranges.get(i.checked_sub(1)?)?;
        (r.1 >= first).then_some(r.2)
    }
}

/// The never-block list and the least prefix lengths, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetyNet {
    pub never: NeverBlock,
    min_v4: u8,
    min_v6: u8,
}

/// No never-block list, and only a /0 refused: what runtime adds met
/// before the safety net, for a library user that asks for nothing else.
impl Default for SafetyNet {
    fn default() -> SafetyNet {
        SafetyNet { never: NeverBlock::default(), min_v4: 1, min_v6: 1 }
    }
}

impl SafetyNet {
    /// The least prefix lengths are 1-32 and 1-128 (a /0 is always
    /// refused: it would match every address).
    pub fn new(never: NeverBlock, min_v4: u8, min_v6: u8) -> Result<SafetyNet, String> {
        if !(1..=32).contains(&min_v4) {
            return Err(format!("--min-prefix-v4 {min_v4}: give 1 to 32"));
        }
        if !(1..=128).contains(&min_v6) {
            return Err(format!("--min-prefix-v6 {min_v6}: give 1 to 128"));
        }
        Ok(SafetyNet { never, min_v4, min_v6 })
    }

    pub fn min_v4(&self) -> u8 {
        self.min_v4
    }

    pub fn min_v6(&self) -> u8 {
        self.min_v6
    }

    /// Whether a runtime add of `p` may go in. The width is checked first:
    /// it costs nothing and names the likelier mistake.
    pub fn check(&self, p: &Prefix) -> Result<(), Refusal> {
        let v6 = matches!(p, Prefix::V6 { .. });
        let min = if v6 { self.min_v6 } else { self.min_v4 };
        if p.len() < min {
            return Err(Refusal::MinPrefix { min, v6 });
        }
        match self.never.overlapping(p) {
            Some(listed) => Err(Refusal::NeverBlock { listed }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pf(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn net(list: &[&str]) -> NeverBlock {
        NeverBlock::new(&list.iter().map(|s| pf(s)).collect::<Vec<_>>())
    }

    /// The plain definition: same family, and one holds the other's first address.
    fn overlaps(a: &Prefix, b: &Prefix) -> bool {
        a.contains(b.addr()) || b.contains(a.addr())
    }

    #[test]
    fn an_add_covering_or_inside_a_listed_address_is_found() {
        let n = net(&["10.1.2.3", "192.0.2.0/24", "2001:db8::/32"]);
        assert_eq!(n.len(), 3);
        assert_eq!(n.overlapping(&pf("10.0.0.0/8")), Some(pf("10.1.2.3")), "covers it");
        assert_eq!(n.overlapping(&pf("10.1.2.3/32")), Some(pf("10.1.2.3")), "is it");
        assert_eq!(n.overlapping(&pf("0.0.0.0/1")), Some(pf("10.1.2.3")));
        assert_eq!(n.overlapping(&pf("10.1.2.4")), None, "its neighbour");
        assert_eq!(n.overlapping(&pf("10.1.2.2/32")), None);
        assert_eq!(n.overlapping(&pf("192.0.2.77")), Some(pf("192.0.2.0/24")), "inside it");
        assert_eq!(n.overlapping(&pf("192.0.3.0/24")), None);
        assert_eq!(n.overlapping(&pf("2001:db8:7::/48")), Some(pf("2001:db8::/32")));
        assert_eq!(n.overlapping(&pf("2001:db9::/32")), None);
        // Families never meet: ::a01:203 is not 10.1.2.3.
        assert_eq!(n.overlapping(&pf("::a01:203")), None);
        assert_eq!(net(&[]).overlapping(&pf("0.0.0.0/0")), None);
    }

    #[test]
    fn nested_entries_keep_the_outermost() {
        let n = net(&["10.1.2.3", "10.0.0.0/8", "10.200.0.0/16", "11.0.0.1"]);
        assert_eq!(n.len(), 4, "as listed");
        assert_eq!(n.v4.len(), 2, "10.0.0.0/8 holds the other two");
        assert_eq!(n.overlapping(&pf("10.200.3.4")), Some(pf("10.0.0.0/8")));
        assert_eq!(n.overlapping(&pf("11.0.0.1")), Some(pf("11.0.0.1")));
        assert_eq!(n.overlapping(&pf("8.0.0.0/7")), None);
        assert_eq!(n.overlapping(&pf("8.0.0.0/6")), Some(pf("11.0.0.1")), "either of the two");
    }

    #[test]
    fn the_width_is_checked_per_family() {
        let s = SafetyNet::new(net(&["192.0.2.1"]), 8, 16).unwrap();
        assert_eq!(s.check(&pf("10.0.0.0/8")), Ok(()));
        assert_eq!(s.check(&pf("10.0.0.0/7")), Err(Refusal::MinPrefix { min: 8, v6: false }));
        assert_eq!(s.check(&pf("2001::/16")), Ok(()));
        assert_eq!(s.check(&pf("2000::/15")), Err(Refusal::MinPrefix { min: 16, v6: true }));
        let e = s.check(&pf("192.0.0.0/16")).unwrap_err();
        assert_eq!(
            (e.reason(), e.to_string().as_str()),
            ("never_block", "it overlaps 192.0.2.1/32, which is on the never-block list")
        );
        let e = s.check(&pf("0.0.0.0/1")).unwrap_err();
        assert_eq!(e.to_string(), "it is wider than /8, the widest a runtime add may be (--min-prefix-v4 8)");
        // The least length is 1: a /0 is refused whatever is asked.
        let d = SafetyNet::default();
        assert_eq!(d.check(&pf("0.0.0.0/1")), Ok(()));
        assert!(d.check(&pf("0.0.0.0/0")).is_err() && d.check(&pf("::/0")).is_err());
        assert_eq!(SafetyNet::new(NeverBlock::default(), 0, 16).unwrap_err(), "--min-prefix-v4 0: give 1 to 32");
        assert_eq!(SafetyNet::new(NeverBlock::default(), 8, 129).unwrap_err(), "--min-prefix-v6 129: give 1 to 128");
    }

    #[test]
    fn a_file_is_read_as_lists_are_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("never.txt");
        std::fs::write(&f, "# office\n198.51.100.0/24\n192.0.2.10-192.0.2.12 # ranges split\n\n2001:db8::1\n").unwrap();
        let n = NeverBlock::load(&f).unwrap();
        assert_eq!(n.len(), 4);
        assert_eq!(n.overlapping(&pf("192.0.2.11")), Some(pf("192.0.2.10/31")));
        assert_eq!(n.overlapping(&pf("192.0.2.13")), None);
        std::fs::write(&f, "198.51.100.0/24\n10.0.0.300\n").unwrap();
        let e = NeverBlock::load(&f).unwrap_err();
        assert_eq!(e, format!("{}:2: not an IPv4 or IPv6 address: \"10.0.0.300\"", f.display()));
        std::fs::write(&f, "add s 192.0.2.1 timeout 60\n").unwrap();
        let e = NeverBlock::load(&f).unwrap_err();
        assert!(e.contains("the entry 192.0.2.1/32 has a timeout (60 s)"), "{e}");
        assert!(NeverBlock::load(&dir.path().join("missing")).unwrap_err().contains("missing"));
    }

    /// Prefixes from a small corner of each family (10.0.0.0/16,
    /// 2001:db8::/112), so that overlaps are common; mostly long, as
    /// lists hold, a few wide.
    fn prefix() -> impl Strategy<Value = Prefix> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let len4 = prop_oneof![8 => 24u8..=32, 1 => 0u8..24];
        let len6 = prop_oneof![8 => 112u8..=128, 1 => 0u8..112];
        prop_oneof![
            (any::<u16>(), len4)
                .prop_map(|(a, len)| Prefix::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | u32::from(a))), len)),
            (any::<u16>(), len6).prop_map(|(a, len)| {
                Prefix::new(IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(a))), len)
            }),
        ]
    }

    proptest! {
        /// Against the plain definition over the list: found exactly when
        /// some listed prefix overlaps, and what is found is listed and
        /// overlaps.
        #[test]
        fn overlapping_agrees_with_a_plain_scan(
            list in proptest::collection::vec(prefix(), 0..24),
            probes in proptest::collection::vec(prefix(), 1..24),
        ) {
            let n = NeverBlock::new(&list);
            for p in &probes {
                let want = list.iter().any(|l| overlaps(l, p));
                let got = n.overlapping(p);
                prop_assert_eq!(got.is_some(), want, "{} against {:?}", p, list);
                if let Some(l) = got {
                    prop_assert!(list.contains(&l) && overlaps(&l, p), "{} found {}", p, l);
                }
            }
        }
    }
}
