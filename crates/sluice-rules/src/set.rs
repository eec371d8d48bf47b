use crate::prefix::{mask_v4, mask_v6, Prefix};
use std::collections::HashSet;
use std::net::IpAddr;

/// Membership of addresses in a mixed list of IPv4/IPv6 hosts and prefixes.
///
/// The simple correct structure: one hash set per prefix length present,
/// probed longest first. Cost per lookup is one hash probe per distinct
/// length (about 20 for FireHOL level1). The cache-conscious sets of the
/// classification core replace it on the fast path and are tested against it.
#[derive(Clone, Debug, Default)]
pub struct PrefixHashSet {
    v4: Vec<(u8, HashSet<u32>)>,
    v6: Vec<(u8, HashSet<u128>)>,
    entries: usize,
}

impl PrefixHashSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_prefixes<'a>(prefixes: impl IntoIterator<Item = &'a Prefix>) -> Self {
        let mut s = PrefixHashSet::new();
        for p in prefixes {
            s.insert(*p);
        }
        s
    }

    /// Add a prefix; duplicates are ignored.
    pub fn insert(&mut self, p: Prefix) {
        let added = match p {
            Prefix::V4 { addr, len } => slot(&mut self.v4, len).insert(addr),
            Prefix::V6 { addr, len } => slot(&mut self.v6, len).insert(addr),
        };
        self.entries += usize::from(added);
    }

    /// Distinct prefixes held.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Whether `ip` is inside any prefix of the set.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|(len, set)| set.contains(&(a & mask_v4(*len))))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|(len, set)| set.contains(&(a & mask_v6(*len))))
            }
        }
    }
}

/// The set for `len`, created in longest-first order if missing.
fn slot<K>(by_len: &mut Vec<(u8, HashSet<K>)>, len: u8) -> &mut HashSet<K> {
    let i = match by_len.binary_search_by(|(l, _)| len.cmp(l)) {
        Ok(i) => i,
        Err(i) => {
            by_len.insert(i, (len, HashSet::new()));
            i
        }
    };
    &mut by_len[i].1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn arb_prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            // Short prefixes and a small address pool so random probes hit.
            (0u32..64, 0u8..=32).prop_map(|(a, l)| Prefix::new(IpAddr::V4(Ipv4Addr::from(a << 26 | a)), l)),
            (0u128..64, 0u8..=128).prop_map(|(a, l)| Prefix::new(IpAddr::V6(Ipv6Addr::from(a << 122 | a)), l)),
        ]
    }

    fn arb_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u32..64, any::<u32>()).prop_map(|(a, noise)| IpAddr::V4(Ipv4Addr::from(a << 26 | (noise & 0xff) | a))),
            (0u128..64, any::<u32>())
                .prop_map(|(a, n)| IpAddr::V6(Ipv6Addr::from(a << 122 | u128::from(n & 0xff) | a))),
        ]
    }

    proptest! {
        #[test]
        fn agrees_with_linear_scan(prefixes in proptest::collection::vec(arb_prefix(), 0..40),
                                   probes in proptest::collection::vec(arb_ip(), 1..60)) {
            let set = PrefixHashSet::from_prefixes(&prefixes);
            for ip in probes {
                let expected = prefixes.iter().any(|p| p.contains(ip));
                prop_assert_eq!(set.contains(ip), expected, "{}", ip);
            }
        }
    }

    #[test]
    fn counts_distinct_prefixes() {
        let ps: Vec<Prefix> =
            ["1.2.3.4", "1.2.3.4/32", "10.0.0.0/8", "10.9.9.9/8", "::1"].iter().map(|s| s.parse().unwrap()).collect();
        let s = PrefixHashSet::from_prefixes(&ps);
        assert_eq!(s.len(), 3);
        assert!(s.contains("10.200.0.1".parse().unwrap()));
        assert!(!s.contains("11.0.0.1".parse().unwrap()));
        assert!(s.contains("::1".parse().unwrap()));
    }
}
