use core::fmt;

/// A pcap/pcapng link-layer header type (LINKTYPE_* in the tcpdump.org registry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// BSD loopback: 4-byte address family in the capturing host's byte order.
    pub const NULL: LinkType = LinkType(0);
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP as some BSDs number it (DLT_RAW = 12 or 14).
    pub const RAW_BSD_12: LinkType = LinkType(12);
    pub const RAW_BSD_14: LinkType = LinkType(14);
    /// OpenBSD loopback: like NULL but always big-endian.
    pub const LOOP: LinkType = LinkType(108);
    pub const RAW: LinkType = LinkType(101);
    pub const LINUX_SLL: LinkType = LinkType(113);
    pub const IPV4: LinkType = LinkType(228);
    pub const IPV6: LinkType = LinkType(229);
    pub const LINUX_SLL2: LinkType = LinkType(276);

    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "NULL",
            1 => "ETHERNET",
            12 | 14 | 101 => "RAW",
            108 => "LOOP",
            113 => "LINUX_SLL",
            228 => "IPV4",
            229 => "IPV6",
            276 => "LINUX_SLL2",
            _ => "unknown",
        }
    }

    /// Whether [`crate::decode`] understands this link type.
    pub const fn is_supported(self) -> bool {
        matches!(self.0, 0 | 1 | 12 | 14 | 101 | 108 | 113 | 228 | 229 | 276)
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.0, self.name())
    }
}
