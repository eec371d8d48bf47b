//! Wire formats: zero-copy views over byte slices and a panic-free decoder.
//!
//! Layout follows smoltcp's `src/wire/`: one module per header, each with a
//! `Packet`/`Frame` view over `T: AsRef<[u8]>`, a private `mod field` of byte
//! ranges, and a `Repr` that can `parse` and `emit`. Untrusted bytes enter only
//! through `new_checked`; after it, accessors cannot panic.
//!
//! [`decode`] walks a whole frame (link layer → VLAN tags → MPLS / PPPoE →
//! IP → extension headers → L4, then through tunnels: GRE, IP in IP, VXLAN,
//! Geneve, GTP-U, to the innermost IP header) and returns a compact [`PacketSummary`] or a [`DecodeError`]
//! saying why not. It never panics and never reads out of bounds, whatever the
//! bytes (fuzzed in `fuzz/fuzz_targets/decode.rs`, property-tested below).
#![deny(unsafe_code)]

pub mod capture;
pub mod checksum;
mod decode;
mod error;
pub mod ethernet;
pub mod fields;
pub mod geneve;
pub mod gre;
pub mod gtpu;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
mod linktype;
pub mod mpls;
pub mod pppoe;
pub mod tcp;
pub mod udp;
pub mod vlan;
pub mod vxlan;

pub use decode::{
    decode, decode_into, Encap, Encaps, FragmentInfo, IpSummary, PacketSummary, ParseEncapError, VlanIds,
    MAX_ENCAP_DEPTH, MAX_EXT_HEADERS, MAX_VLAN_TAGS,
};
pub use error::{DecodeError, DecodeErrorKind, Layer};
pub use linktype::LinkType;

/// IP protocol numbers used by the decoder and the generator.
pub mod ip_proto {
    pub const HOPOPTS: u8 = 0;
    pub const ICMP: u8 = 1;
    /// IPv4 encapsulated (IPIP, RFC 2003; 4in6).
    pub const IPIP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    /// IPv6 encapsulated (6in4, RFC 4213; 6in6).
    pub const IPV6: u8 = 41;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DSTOPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
}

/// EtherType values the decoder dispatches on.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    pub const QINQ: u16 = 0x88a8;
    pub const MPLS_UNICAST: u16 = 0x8847;
    pub const MPLS_MULTICAST: u16 = 0x8848;
    pub const PPPOE_DISCOVERY: u16 = 0x8863;
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// Transparent Ethernet Bridging: an Ethernet frame (GRE, Geneve payloads).
    pub const TEB: u16 = 0x6558;
    /// Pre-standard QinQ outer tag, still seen in the wild.
    pub const QINQ_LEGACY: u16 = 0x9100;

    /// Whether `ty` introduces a 4-byte VLAN tag.
    pub const fn is_vlan(ty: u16) -> bool {
        matches!(ty, VLAN | QINQ | QINQ_LEGACY)
    }
}

/// Read a big-endian u16 at `at`. Callers have already checked the length.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
