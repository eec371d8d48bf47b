//! The client a request names in `X-Forwarded-For` (or another
//! `--client-ip-header`), believed only as far as `--trusted-proxies` go.
//!
//! Each proxy appends the address it received the request from, so the
//! list reads left to right from the client to the last proxy. Anyone can
//! write anything at its left end; only what our own trusted proxies
//! appended is known to be true. So the walk starts at the right: the
//! connection's peer (a trusted proxy, or the header is not read at all),
//! then each address from the right while the one before it was trusted.
//! The first untrusted address is the client (nginx's `real_ip_recursive
//! on`, HAProxy's and Traefik's "rightmost untrusted"). A spoofed entry at
//! the left is never reached while a real client stands to its right.

use sluice_rules::Prefix;
use std::net::{IpAddr, SocketAddr};

/// One list entry: `192.0.2.7`, `192.0.2.7:4711`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`, surrounding whitespace allowed.
pub fn entry(s: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?.trim_matches([' ', '\t']);
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip().to_canonical());
    }
    s.strip_prefix('[')?.strip_suffix(']')?.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// The client of a request that came from `peer` (trusted: the caller
/// checked) with these values of the header, in field order.
pub fn client<'a>(values: impl Iterator<Item = &'a [u8]>, peer: IpAddr, trusted: &[Prefix]) -> IpAddr {
    let entries: Vec<&[u8]> = values.flat_map(|v| v.split(|&c| c == b',')).collect();
    let mut client = peer;
    for e in entries.iter().rev() {
        // Garbage ends the walk: nothing to its left can be believed, and
        // the last proxy that wrote a real address is taken as the client.
        let Some(ip) = entry(e) else { break };
        client = ip;
        if !trusted.iter().any(|p| p.contains(ip)) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nets(s: &[&str]) -> Vec<Prefix> {
        s.iter().map(|p| p.parse().unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_in_the_forms_proxies_write() {
        assert_eq!(entry(b" 192.0.2.7"), Some(ip("192.0.2.7")));
        assert_eq!(entry(b"192.0.2.7:4711"), Some(ip("192.0.2.7")));
        assert_eq!(entry(b"2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(entry(b"[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(entry(b"[2001:db8::1]:4711 "), Some(ip("2001:db8::1")));
        assert_eq!(entry(b"::ffff:192.0.2.7"), Some(ip("192.0.2.7")), "IPv4-mapped as IPv4");
        for bad in [&b"unknown"[..], b"", b"192.0.2", b"_hidden", b"192.0.2.7:x", b"\xff"] {
            assert_eq!(entry(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_rightmost_untrusted_address_is_the_client() {
        let t = nets(&["10.0.0.0/8", "127.0.0.1"]);
        let lb = ip("10.0.0.5");
        let c = |vals: &[&str]| client(vals.iter().map(|v| v.as_bytes()), lb, &t);
        assert_eq!(c(&[]), lb, "no header: the peer");
        assert_eq!(c(&["203.0.113.9"]), ip("203.0.113.9"));
        // A client writing its own header: the spoof is left of the real address.
        assert_eq!(c(&["1.2.3.4, 203.0.113.9"]), ip("203.0.113.9"));
        // Through two of our proxies.
        assert_eq!(c(&["1.2.3.4, 203.0.113.9, 10.1.1.1"]), ip("203.0.113.9"));
        // Several field lines are one list, in order.
        assert_eq!(c(&["1.2.3.4", "203.0.113.9", "10.1.1.1"]), ip("203.0.113.9"));
        // All trusted: the leftmost.
        assert_eq!(c(&["10.9.9.9, 10.1.1.1"]), ip("10.9.9.9"));
        // Garbage stops the walk at the last real address.
        assert_eq!(c(&["203.0.113.9, unknown, 10.1.1.1"]), ip("10.1.1.1"));
        assert_eq!(c(&["garbage"]), lb);
    }

    proptest! {
        /// Whatever a client puts at the left, it cannot move the answer
        /// while an untrusted address stands to the right of it.
        #[test]
        fn spoofing_the_left_changes_nothing(spoof in proptest::collection::vec(any::<[u8; 4]>(), 0..5),
                                             real in any::<[u8; 4]>(), hops in 0usize..3) {
            let t = nets(&["10.0.0.0/8"]);
            let real = std::net::Ipv4Addr::from(real);
            prop_assume!(real.octets()[0] != 10);
            let mut list: Vec<String> = spoof.iter().map(|a| std::net::Ipv4Addr::from(*a).to_string()).collect();
            list.push(real.to_string());
            list.extend((0..hops).map(|h| format!("10.0.0.{h}")));
            let joined = list.join(", ");
            prop_assert_eq!(client(std::iter::once(joined.as_bytes()), ip("10.0.0.99"), &t), IpAddr::V4(real));
        }
    }
}
