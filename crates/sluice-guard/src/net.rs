//! What the guard keys a client by: its address cut to a prefix
//! (`--key-prefix-v4`, default 32; `--key-prefix-v6`, default 64). An IPv6
//! host gets a /64 from its provider and can use any address in it, so
//! limits and blocks per address would be bypassed by rotating through it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A client's network: the address with the bits past `len` cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientNet {
    pub addr: IpAddr,
    pub len: u8,
}

impl ClientNet {
    /// A single address (a /32 or /128).
    pub fn is_host(&self) -> bool {
        self.len == if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

/// `192.0.2.7` for a host, `2001:db8:1:2::/64` for a network: as ipset,
/// nft and sluice's list parser read them.
impl fmt::Display for ClientNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_host() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

impl serde::Serialize for ClientNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The prefix lengths clients are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPrefixes {
    pub v4: u8,
    pub v6: u8,
}

impl Default for KeyPrefixes {
    fn default() -> Self {
        KeyPrefixes { v4: 32, v6: 64 }
    }
}

impl KeyPrefixes {
    /// Lengths in range (1-32, 1-128), or what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=32).contains(&self.v4) {
            return Err(format!("--key-prefix-v4 {}: give 1 to 32", self.v4));
        }
        if !(1..=128).contains(&self.v6) {
            return Err(format!("--key-prefix-v6 {}: give 1 to 128", self.v6));
        }
        Ok(())
    }

    /// The network `ip` belongs to. An IPv4-mapped IPv6 address (a dual
    /// stack listener's) counts as the IPv4 address it is.
    pub fn net(&self, ip: IpAddr) -> ClientNet {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(v4) => {
                let len = self.v4.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                ClientNet { addr: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)), len }
            }
            IpAddr::V6(v6) => {
                let len = self.v6.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                ClientNet { addr: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)), len }
            }
        }
    }

    /// The length a key of this family has.
    pub fn len_of(&self, addr: IpAddr) -> u8 {
        if addr.is_ipv4() {
            self.v4
        } else {
            self.v6
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn net(p: KeyPrefixes, s: &str) -> String {
        p.net(s.parse().unwrap()).to_string()
    }

    #[test]
    fn defaults_key_v4_hosts_and_v6_slash_64s() {
        let p = KeyPrefixes::default();
        assert_eq!(net(p, "192.0.2.7"), "192.0.2.7");
        assert_eq!(net(p, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(net(p, "::ffff:192.0.2.7"), "192.0.2.7");
        let p = KeyPrefixes { v4: 24, v6: 128 };
        assert_eq!(net(p, "192.0.2.7"), "192.0.2.0/24");
        assert_eq!(net(p, "2001:db8::1"), "2001:db8::1");
        assert!(KeyPrefixes { v4: 0, v6: 64 }.check().is_err());
        assert!(KeyPrefixes { v4: 32, v6: 129 }.check().is_err());
    }

    proptest! {
        /// Two addresses share a key exactly when their first `len` bits agree.
        #[test]
        fn same_key_iff_same_prefix(a: u128, b: u128, len in 1u8..=128) {
            let p = KeyPrefixes { v4: 32, v6: len };
            let (x, y) = (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)));
            prop_assume!(Ipv6Addr::from(a).to_ipv4_mapped().is_none() && Ipv6Addr::from(b).to_ipv4_mapped().is_none());
            let shift = 128 - u32::from(len);
            let same = a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0);
            prop_assert_eq!(p.net(x) == p.net(y), same);
        }
    }
}
