//! IPv6 headers (RFC 8200) and the extension headers the decoder walks.

use crate::{be16, be32, ip_proto, DecodeError, Layer};
use core::fmt;
use std::net::Ipv6Addr;

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

pub const HEADER_LEN: usize = field::DST.end;

/// A view of an IPv6 packet whose fixed header has been validated.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Ipv6));
        }
        let p = Packet { buffer };
        if p.version() != 6 {
            return Err(DecodeError::BadIpVersion(p.version()));
        }
        Ok(p)
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start) & 0x000f_ffff
    }
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }
    /// The payload: bounded by the payload length, or by the captured bytes.
    /// A payload length of 0 (jumbogram, RFC 2675) means "to the end".
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let len = usize::from(self.payload_len());
        let end = if len == 0 { b.len() } else { (HEADER_LEN + len).min(b.len()) };
        &b[HEADER_LEN..end]
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: u16,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
        }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        let vtf = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff);
        b[field::VER_TC_FLOW].copy_from_slice(&vtf.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&self.payload_len.to_be_bytes());
        b[field::NXT_HDR] = self.next_header;
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv6 src={} dst={} nxt={} len={} hlim={}",
            self.src, self.dst, self.next_header, self.payload_len, self.hop_limit
        )
    }
}

/// Whether `nh` is an extension header the decoder steps over.
pub const fn is_extension_header(nh: u8) -> bool {
    matches!(
        nh,
        ip_proto::HOPOPTS
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::DSTOPTS
            | ip_proto::AH
            | ip_proto::MOBILITY
    )
}

/// A generic view of one extension header: next-header byte and its length.
#[derive(Debug, Clone, Copy)]
pub struct ExtHeader<'a> {
    kind: u8,
    bytes: &'a [u8],
}

impl<'a> ExtHeader<'a> {
    /// Check that the header of type `kind` at the start of `buf` is fully captured.
    pub fn new_checked(kind: u8, buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() < 8 {
            return Err(DecodeError::Truncated(Layer::Ipv6Ext));
        }
        let len = match kind {
            ip_proto::FRAGMENT => 8,
            // AH counts 4-octet units minus 2 (RFC 4302 §2.2).
            ip_proto::AH => (usize::from(buf[1]) + 2) * 4,
            // Everything else counts 8-octet units after the first (RFC 8200 §4).
            _ => (usize::from(buf[1]) + 1) * 8,
        };
        if buf.len() < len {
            return Err(DecodeError::Truncated(Layer::Ipv6Ext));
        }
        Ok(ExtHeader { kind, bytes: &buf[..len] })
    }

    pub fn kind(&self) -> u8 {
        self.kind
    }
    pub fn next_header(&self) -> u8 {
        self.bytes[0]
    }
    /// Length of this header in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The fragment fields, if this is a fragment header.
    pub fn fragment(&self) -> Option<FragmentRepr> {
        (self.kind == ip_proto::FRAGMENT).then(|| FragmentRepr::parse(self.bytes))
    }
}

/// The IPv6 fragment extension header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRepr {
    pub next_header: u8,
    /// Offset in bytes; a multiple of 8.
    pub offset: u16,
    pub more_frags: bool,
    pub ident: u32,
}

impl FragmentRepr {
    pub const LEN: usize = 8;

    /// Parse from at least 8 bytes (checked by [`ExtHeader::new_checked`]).
    fn parse(b: &[u8]) -> FragmentRepr {
        let off_m = be16(b, 2);
        FragmentRepr { next_header: b[0], offset: off_m & 0xfff8, more_frags: off_m & 1 != 0, ident: be32(b, 4) }
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..Self::LEN];
        b[0] = self.next_header;
        b[1] = 0;
        let off_m = (self.offset & 0xfff8) | u16::from(self.more_frags);
        b[2..4].copy_from_slice(&off_m.to_be_bytes());
        b[4..8].copy_from_slice(&self.ident.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ext_header_lengths() {
        let hbh = [ip_proto::TCP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(ExtHeader::new_checked(ip_proto::HOPOPTS, &hbh).unwrap().len(), 16);
        assert_eq!(
            ExtHeader::new_checked(ip_proto::HOPOPTS, &hbh[..15]).unwrap_err(),
            DecodeError::Truncated(Layer::Ipv6Ext)
        );
        let ah = [ip_proto::UDP, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(ExtHeader::new_checked(ip_proto::AH, &ah).unwrap().len(), 24);
    }

    proptest! {
        #[test]
        fn header_round_trip(bytes in proptest::collection::vec(any::<u8>(), HEADER_LEN)) {
            let mut bytes = bytes;
            bytes[0] = (bytes[0] & 0x0f) | 0x60;
            let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap());
            let mut out = [0u8; HEADER_LEN];
            repr.emit(&mut out);
            prop_assert_eq!(&out[..], &bytes[..]);
        }

        #[test]
        fn fragment_round_trip(nh in any::<u8>(), off in 0u16..8192, more in any::<bool>(), ident in any::<u32>()) {
            let f = FragmentRepr { next_header: nh, offset: off << 3, more_frags: more, ident };
            let mut b = [0u8; 8];
            f.emit(&mut b);
            prop_assert_eq!(ExtHeader::new_checked(ip_proto::FRAGMENT, &b).unwrap().fragment(), Some(f));
        }
    }
}
