//! Tags: which source put an element in a runtime set (a CrowdSec
//! decision's origin: `crowdsec`, `cscli`, `CAPI`, `lists:NAME`), so the
//! packets a set drops are counted by it, as CrowdSec's own firewall
//! bouncer counts them with a set per origin.
//!
//! One set with tagged elements costs the judge nothing until it drops: the
//! base tables and the delta say whether an address is in the set, as
//! before, and only a packet a rule over the set dropped is looked up here,
//! one hash probe per element length present (longest first), to find
//! whose element it was. The control side ([`crate::dynamic::SetState`])
//! keeps the tags with the elements (an element that leaves loses its tag)
//! and publishes a copy with the set's delta when they changed: a copy of
//! hash tables of `Copy` keys, at memory speed, once per feed answer.

use crate::dynamic::{mask4, mask6};
use foldhash::fast::RandomState;
use sluice_rules::Prefix;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

type Map<K> = HashMap<K, u16, RandomState>;

/// Elements with their tags, by length, longest first; the tags' names and
/// how many elements carry each (IPv4, IPv6).
#[derive(Clone, Debug, Default)]
pub struct Tags {
    v4: Vec<(u8, Map<u32>)>,
    v6: Vec<(u8, Map<u128>)>,
    counts: Vec<[u64; 2]>,
    names: Arc<[String]>,
}

fn slot<K>(by_len: &mut Vec<(u8, Map<K>)>, len: u8) -> &mut Map<K> {
    let i = match by_len.binary_search_by(|(l, _)| len.cmp(l)) {
        Ok(i) => i,
        Err(i) => {
            by_len.insert(i, (len, Map::default()));
            i
        }
    };
    &mut by_len[i].1
}

fn take<K: std::hash::Hash + Eq>(by_len: &mut Vec<(u8, Map<K>)>, len: u8, k: &K) -> Option<u16> {
    let i = by_len.iter().position(|(l, _)| *l == len)?;
    let gone = by_len[i].1.remove(k);
    if by_len[i].1.is_empty() {
        // An empty length would cost every lookup a probe.
        by_len.remove(i);
    }
    gone
}

impl Tags {
    pub fn new() -> Tags {
        Tags::default()
    }

    /// Tags `p` with `tag` (replacing its tag, if it had one).
    pub fn set(&mut self, p: Prefix, tag: u16) {
        let old = match p {
            Prefix::V4 { addr, len } => slot(&mut self.v4, len).insert(addr, tag),
            Prefix::V6 { addr, len } => slot(&mut self.v6, len).insert(addr, tag),
        };
        let v6 = usize::from(matches!(p, Prefix::V6 { .. }));
        if let Some(o) = old {
            self.counts[usize::from(o)][v6] -= 1;
        }
        let t = usize::from(tag);
        if self.counts.len() <= t {
            self.counts.resize(t + 1, [0; 2]);
        }
        self.counts[t][v6] += 1;
    }

    /// Forgets `p`'s tag; true when it had one.
    pub fn remove(&mut self, p: &Prefix) -> bool {
        let gone = match *p {
            Prefix::V4 { addr, len } => take(&mut self.v4, len, &addr),
            Prefix::V6 { addr, len } => take(&mut self.v6, len, &addr),
        };
        if let Some(t) = gone {
            self.counts[usize::from(t)][usize::from(matches!(p, Prefix::V6 { .. }))] -= 1;
        }
        gone.is_some()
    }

    /// Exactly `p`'s tag.
    pub fn get(&self, p: &Prefix) -> Option<u16> {
        match *p {
            Prefix::V4 { addr, len } => self.v4.iter().find(|(l, _)| *l == len)?.1.get(&addr).copied(),
            Prefix::V6 { addr, len } => self.v6.iter().find(|(l, _)| *l == len)?.1.get(&addr).copied(),
        }
    }

    /// The tag of the longest tagged element covering `ip`.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Option<u16> {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().find_map(|(len, m)| m.get(&(a & mask4(*len))).copied())
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().find_map(|(len, m)| m.get(&(a & mask6(*len))).copied())
            }
        }
    }

    /// How many elements carry each tag, by tag: IPv4, IPv6.
    pub fn counts(&self) -> &[[u64; 2]] {
        &self.counts
    }

    /// How many elements are tagged.
    pub fn len(&self) -> usize {
        self.counts.iter().map(|c| c[0] + c[1]).sum::<u64>() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The tags' names, by tag.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Tag `tag`'s name, or `other` for one not named.
    pub fn name(&self, tag: u16) -> &str {
        self.names.get(usize::from(tag)).map_or("other", String::as_str)
    }

    /// Names the tags (index = tag); true when they changed.
    pub fn set_names(&mut self, names: &[String]) -> bool {
        if *self.names == *names {
            return false;
        }
        self.names = names.into();
        true
    }

    pub fn clear(&mut self) {
        self.v4.clear();
        self.v6.clear();
        self.counts.iter_mut().for_each(|c| *c = [0; 2]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn the_longest_tagged_element_names_the_address() {
        let mut t = Tags::new();
        t.set(p("10.0.0.0/8"), 1);
        t.set(p("10.1.0.0/16"), 2);
        t.set(p("2001:db8::/32"), 3);
        assert_eq!(t.lookup("10.1.2.3".parse().unwrap()), Some(2));
        assert_eq!(t.lookup("10.2.2.3".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("11.0.0.1".parse().unwrap()), None);
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()), Some(3));
        t.set(p("10.1.0.0/16"), 1);
        assert_eq!(t.counts(), &[[0, 0], [2, 0], [0, 0], [0, 1]]);
        assert!(t.remove(&p("10.1.0.0/16")));
        assert!(!t.remove(&p("10.1.0.0/16")));
        assert_eq!(t.lookup("10.1.2.3".parse().unwrap()), Some(1));
        assert_eq!((t.counts(), t.len()), (&[[0u64, 0], [1, 0], [0, 0], [0, 1]][..], 2));
        assert_eq!(t.name(7), "other");
    }

    /// A tag per element, and a lookup as a linear scan of them.
    #[derive(Default)]
    struct Plain(Vec<(Prefix, u16)>);

    impl Plain {
        fn set(&mut self, p: Prefix, tag: u16) {
            self.0.retain(|(q, _)| *q != p);
            self.0.push((p, tag));
        }
        fn lookup(&self, ip: IpAddr) -> Option<u16> {
            let best = self.0.iter().filter(|(q, _)| q.contains(ip)).max_by_key(|(q, _)| q.len());
            best.map(|(_, t)| *t)
        }
    }

    fn prefix() -> impl Strategy<Value = Prefix> {
        prop_oneof![
            (any::<u32>(), 0u8..=32).prop_map(|(a, len)| Prefix::V4 { addr: a & mask4(len), len }),
            (any::<u128>(), 0u8..=128).prop_map(|(a, len)| Prefix::V6 { addr: a & mask6(len), len }),
        ]
    }

    proptest! {
        #[test]
        fn lookups_match_a_scan(
            ops in proptest::collection::vec((prefix(), 0u16..4, any::<bool>()), 0..200),
            probes in proptest::collection::vec(any::<u32>(), 0..100),
        ) {
            let mut t = Tags::new();
            let mut plain = Plain::default();
            for (q, tag, add) in &ops {
                if *add {
                    t.set(*q, *tag);
                    plain.set(*q, *tag);
                } else {
                    let had = plain.0.iter().any(|(x, _)| x == q);
                    plain.0.retain(|(x, _)| x != q);
                    prop_assert_eq!(t.remove(q), had);
                }
            }
            for a in probes {
                let ip = IpAddr::V4(a.into());
                prop_assert_eq!(t.lookup(ip), plain.lookup(ip));
            }
            // Every element's own first address, v6 too.
            for (q, _) in &plain.0 {
                prop_assert_eq!(t.lookup(q.addr()), plain.lookup(q.addr()));
            }
            prop_assert_eq!(t.len(), plain.0.len());
        }
    }
}
