use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 prefix with host bits cleared. A host is a /32 or /128.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prefix {
    V4 { addr: u32, len: u8 },
    V6 { addr: u128, len: u8 },
}

/// Why a token is not an address or prefix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixParseError {
    #[error("not an IPv4 or IPv6 address")]
    BadAddress,
    #[error("prefix length {len} is out of range for {family} (0-{max})")]
    BadLength { len: String, family: &'static str, max: u8 },
    #[error("address ranges (a-b) are not supported; use CIDR prefixes")]
    Range,
}

pub(crate) const fn mask_v4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

pub(crate) const fn mask_v6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

impl Prefix {
    /// A prefix from an address and length; host bits are cleared.
    /// Panics if `len` exceeds the family's width (a programming error).
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        match addr {
            IpAddr::V4(a) => {
                assert!(len <= 32, "IPv4 prefix length {len}");
                Prefix::V4 { addr: u32::from(a) & mask_v4(len), len }
            }
            IpAddr::V6(a) => {
                assert!(len <= 128, "IPv6 prefix length {len}");
                Prefix::V6 { addr: u128::from(a) & mask_v6(len), len }
            }
        }
    }

    pub fn host(addr: IpAddr) -> Prefix {
        match addr {
            IpAddr::V4(_) => Prefix::new(addr, 32),
            IpAddr::V6(_) => Prefix::new(addr, 128),
        }
    }

    pub fn len(&self) -> u8 {
        match *self {
            Prefix::V4 { len, .. } | Prefix::V6 { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// A /0: every address of its family.
    pub fn covers_all(&self) -> bool {
        matches!(*self, Prefix::V4 { len: 0, .. } | Prefix::V6 { len: 0, .. })
    }

    pub fn is_host(&self) -> bool {
        matches!(*self, Prefix::V4 { len: 32, .. } | Prefix::V6 { len: 128, .. })
    }

    pub fn addr(&self) -> IpAddr {
        match *self {
            Prefix::V4 { addr, .. } => IpAddr::V4(Ipv4Addr::from(addr)),
            Prefix::V6 { addr, .. } => IpAddr::V6(Ipv6Addr::from(addr)),
        }
    }

    /// Whether `ip` lies inside this prefix (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (*self, ip) {
            (Prefix::V4 { addr, len }, IpAddr::V4(a)) => u32::from(a) & mask_v4(len) == addr,
            (Prefix::V6 { addr, len }, IpAddr::V6(a)) => u128::from(a) & mask_v6(len) == addr,
            _ => false,
        }
    }

    /// Whether every address of `other` lies inside this prefix (never
    /// across families).
    pub fn contains_prefix(&self, other: &Prefix) -> bool {
        self.len() <= other.len() && self.contains(other.addr())
    }
}

impl FromStr for Prefix {
    type Err = PrefixParseError;

    /// `a.b.c.d`, `a.b.c.d/n`, `x::y`, `x::y/n`. Host bits set under the mask
    /// are cleared, as ipset does (`10.1.2.3/8` is `10.0.0.0/8`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| {
            if s.contains('-') {
                PrefixParseError::Range
            } else {
                PrefixParseError::BadAddress
            }
        })?;
        let (family, max) = match addr {
            IpAddr::V4(_) => ("IPv4", 32u8),
            IpAddr::V6(_) => ("IPv6", 128u8),
        };
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max && !l.starts_with('+') => n,
                _ => return Err(PrefixParseError::BadLength { len: l.chars().take(16).collect(), family, max }),
            },
        };
        Ok(Prefix::new(addr, len))
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_and_cidrs() {
        assert_eq!("1.2.3.4".parse::<Prefix>().unwrap(), Prefix::V4 { addr: 0x01020304, len: 32 });
        assert_eq!("10.1.2.3/8".parse::<Prefix>().unwrap(), Prefix::V4 { addr: 0x0a000000, len: 8 });
        assert_eq!("0.0.0.0/0".parse::<Prefix>().unwrap(), Prefix::V4 { addr: 0, len: 0 });
        assert_eq!("2001:db8::/32".parse::<Prefix>().unwrap().to_string(), "2001:db8::/32");
        assert!(matches!("1.2.3.4/33".parse::<Prefix>(), Err(PrefixParseError::BadLength { .. })));
        assert!(matches!("1.2.3.4/+8".parse::<Prefix>(), Err(PrefixParseError::BadLength { .. })));
        assert!(matches!("::/129".parse::<Prefix>(), Err(PrefixParseError::BadLength { .. })));
        assert_eq!("1.2.3.4-1.2.3.9".parse::<Prefix>(), Err(PrefixParseError::Range));
        assert_eq!("1.2.3".parse::<Prefix>(), Err(PrefixParseError::BadAddress));
    }

    #[test]
    fn contains_respects_family_and_mask() {
        let p: Prefix = "192.168.0.0/16".parse().unwrap();
        assert!(p.contains("192.168.255.1".parse().unwrap()));
        assert!(!p.contains("192.169.0.1".parse().unwrap()));
        assert!(!p.contains("::ffff:192.168.0.1".parse().unwrap()));
        let all: Prefix = "::/0".parse().unwrap();
        assert!(all.contains("2001:db8::1".parse().unwrap()));
        assert!(!all.contains("1.1.1.1".parse().unwrap()));
    }
}
