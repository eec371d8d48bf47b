//! Address ranges `first-last` as the prefixes that cover them exactly.

use crate::prefix::Prefix;
use std::net::IpAddr;

/// Why two addresses do not make a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("range start is after its end")]
    Reversed,
    #[error("range mixes IPv4 and IPv6")]
    MixedFamilies,
}

/// The fewest prefixes that together hold exactly the addresses `first..=last`
/// (both included), in address order and without overlap: the largest
/// aligned blocks inside the range. At most 62 for IPv4 and 254 for IPv6.
pub fn range_to_prefixes(first: IpAddr, last: IpAddr) -> Result<Vec<Prefix>, RangeError> {
    Ok(RangePrefixes::new(first, last)?.collect())
}

/// The iterator behind [`range_to_prefixes`]; the list parser extends its
/// output with it directly, so a range costs no allocation of its own.
#[derive(Clone, Debug)]
pub(crate) struct RangePrefixes {
    next: u128,
    last: u128,
    /// 32 or 128: both families share the arithmetic on `u128`.
    width: u32,
    done: bool,
}

impl RangePrefixes {
    pub(crate) fn new(first: IpAddr, last: IpAddr) -> Result<Self, RangeError> {
        let (next, last, width) = match (first, last) {
            (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
            (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
            _ => return Err(RangeError::MixedFamilies),
        };
        if next > last {
            return Err(RangeError::Reversed);
        }
        Ok(RangePrefixes { next, last, width, done: false })
    }
}

impl Iterator for RangePrefixes {
    type Item = Prefix;

    fn next(&mut self) -> Option<Prefix> {
        if self.done {
            return None;
        }
        let lo = self.next;
        // The block starting at `lo` may be as large as `lo`'s alignment
        // allows (trailing zeros; 128 for zero, capped at the width) and as
        // the addresses left allow: 2^k - 1 <= last - lo.
        let align = lo.trailing_zeros().min(self.width);
        let span = self.last - lo;
        let fits = match span.checked_add(1) {
            Some(count) => 127 - count.leading_zeros(),
            None => 128, // the whole IPv6 space
        };
        let k = align.min(fits);
        // `k == 0` shifts by 128: no host bits.
        let mask = u128::MAX.checked_shr(128 - k).unwrap_or(0);
        let end = lo | mask;
        if end == self.last {
            self.done = true;
        } else {
            // `end < last`, so this cannot overflow.
            self.next = end + 1;
        }
        // `k <= width`, so the length fits the family.
        let len = (self.width - k) as u8;
        Some(if self.width == 32 { Prefix::V4 { addr: lo as u32, len } } else { Prefix::V6 { addr: lo, len } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    fn v6(a: u128) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(a))
    }

    /// First and last address of a prefix, as `u128`.
    fn bounds(p: &Prefix) -> (u128, u128) {
        match *p {
            Prefix::V4 { addr, len } => {
                (u128::from(addr), u128::from(addr | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0)))
            }
            Prefix::V6 { addr, len } => (addr, addr | u128::MAX.checked_shr(u32::from(len)).unwrap_or(0)),
        }
    }

    /// The plain reference: walk the prefix tree from the root, keep a node
    /// wholly inside the range, drop one wholly outside, split the others.
    /// The kept nodes are the maximal aligned blocks inside the range, which
    /// is the unique smallest exact cover.
    fn reference(lo: u128, hi: u128, width: u32) -> Vec<Prefix> {
        fn walk(base: u128, len: u32, width: u32, lo: u128, hi: u128, out: &mut Vec<Prefix>) {
            let host_bits = width - len;
            let last = base | u128::MAX.checked_shr(128 - host_bits).unwrap_or(0);
            if last < lo || base > hi {
                return;
            }
            if lo <= base && last <= hi {
                out.push(if width == 32 {
                    Prefix::V4 { addr: base as u32, len: len as u8 }
                } else {
                    Prefix::V6 { addr: base, len: len as u8 }
                });
                return;
            }
            let half = 1u128 << (host_bits - 1);
            walk(base, len + 1, width, lo, hi, out);
            walk(base | half, len + 1, width, lo, hi, out);
        }
        let mut out = Vec::new();
        walk(0, 0, width, lo, hi, &mut out);
        out
    }

    /// The prefixes, in order, tile `[lo, hi]` with no gap and no overlap.
    fn check_tiles(ps: &[Prefix], lo: u128, hi: u128) {
        let mut expect = lo;
        for (i, p) in ps.iter().enumerate() {
            let (a, b) = bounds(p);
            assert_eq!(a, expect, "prefix {i} ({p}) does not start where the last ended");
            if i + 1 == ps.len() {
                assert_eq!(b, hi, "last prefix {p} does not end at the range's end");
            } else {
                expect = b + 1;
            }
        }
        assert!(!ps.is_empty());
    }

    fn check(lo: u128, hi: u128, width: u32) {
        let (a, b) = if width == 32 { (v4(lo as u32), v4(hi as u32)) } else { (v6(lo), v6(hi)) };
        let got = range_to_prefixes(a, b).unwrap();
        check_tiles(&got, lo, hi);
        assert_eq!(got, reference(lo, hi, width), "{a}-{b}");
        // Address by address on small ranges, with neighbours outside.
        if hi - lo < 600 {
            let from = lo.saturating_sub(2);
            let to = if width == 32 { hi.saturating_add(2).min(u128::from(u32::MAX)) } else { hi.saturating_add(2) };
            for x in from..=to {
                let ip = if width == 32 { v4(x as u32) } else { v6(x) };
                let n = got.iter().filter(|p| p.contains(ip)).count();
                assert_eq!(n, usize::from(lo <= x && x <= hi), "{ip} in {a}-{b}");
            }
        }
    }

    #[test]
    fn known_ranges() {
        let r = |a: &str, b: &str| -> Vec<String> {
            range_to_prefixes(a.parse().unwrap(), b.parse().unwrap()).unwrap().iter().map(|p| p.to_string()).collect()
        };
        assert_eq!(r("1.2.3.4", "1.2.3.9"), ["1.2.3.4/30", "1.2.3.8/31"]);
        assert_eq!(r("1.2.3.4", "1.2.3.4"), ["1.2.3.4/32"]);
        assert_eq!(r("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
        assert_eq!(r("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), ["::/0"]);
        assert_eq!(r("2001:db8::1", "2001:db8::1"), ["2001:db8::1/128"]);
        assert_eq!(r("10.0.0.0", "10.255.255.255"), ["10.0.0.0/8"]);
        assert_eq!(r("255.255.255.255", "255.255.255.255"), ["255.255.255.255/32"]);
        assert_eq!(r("0.0.0.1", "255.255.255.254").len(), 62);
        assert_eq!(r("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe").len(), 254);
    }

    #[test]
    fn rejects_reversed_and_mixed() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(range_to_prefixes(ip("1.2.3.5"), ip("1.2.3.4")), Err(RangeError::Reversed));
        assert_eq!(range_to_prefixes(ip("::2"), ip("::1")), Err(RangeError::Reversed));
        assert_eq!(range_to_prefixes(ip("1.2.3.4"), ip("::1")), Err(RangeError::MixedFamilies));
        assert_eq!(range_to_prefixes(ip("::1"), ip("1.2.3.4")), Err(RangeError::MixedFamilies));
    }

    #[test]
    fn edges_of_both_spaces() {
        for (lo, hi) in [(0, 0), (0, 1), (0, 5), (u128::from(u32::MAX) - 3, u128::from(u32::MAX))] {
            check(lo, hi, 32);
        }
        check(0, u128::from(u32::MAX), 32);
        for (lo, hi) in
            [(0, 0), (0, 7), (u128::MAX - 9, u128::MAX), (u128::MAX, u128::MAX), (0, u128::MAX), (1, u128::MAX)]
        {
            check(lo, hi, 128);
        }
    }

    /// A start anywhere (often near the ends or on round boundaries) and a
    /// small span, so the address-by-address check runs too.
    fn arb_range(width: u32) -> impl Strategy<Value = (u128, u128)> {
        let max = if width == 32 { u128::from(u32::MAX) } else { u128::MAX };
        let start = prop_oneof![
            any::<u128>().prop_map(move |x| x & max),
            (0u128..64),
            (0u128..64).prop_map(move |x| max - x),
            (1u32..width, 0u128..4).prop_map(|(b, d)| (1u128 << b).wrapping_sub(2) + d),
        ];
        let span = prop_oneof![0u128..600, any::<u128>()];
        (start, span).prop_map(move |(s, d)| (s.min(max), s.min(max).saturating_add(d).min(max)))
    }

    proptest! {
        #[test]
        fn v4_ranges_match_reference((lo, hi) in arb_range(32)) {
            check(lo, hi, 32);
        }

        #[test]
        fn v6_ranges_match_reference((lo, hi) in arb_range(128)) {
            check(lo, hi, 128);
        }
    }
}
