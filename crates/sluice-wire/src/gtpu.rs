//! GTP-U headers (3GPP TS 29.281): UDP port 2152, version 1. A G-PDU
//! (message type 255) carries a user packet, here IPv4 or IPv6.

use crate::{be16, be32, DecodeError, Layer, MAX_EXT_HEADERS};
use core::fmt;

mod field {
    use core::ops::Range;
    /// Version (3 bits), protocol type, spare, E, S, PN.
    pub const FLAGS: usize = 0;
    pub const MSG_TYPE: usize = 1;
    /// Bytes after the mandatory header: optional word, extensions, T-PDU.
    pub const LENGTH: Range<usize> = 2..4;
    pub const TEID: Range<usize> = 4..8;
    /// Present when any of E, S, PN is set.
    pub const SEQ: Range<usize> = 8..10;
    pub const NPDU: usize = 10;
    pub const NEXT_EXT: usize = 11;
}

/// The mandatory header.
pub const MIN_HEADER_LEN: usize = field::TEID.end;
/// The mandatory header plus the optional word (sequence number, N-PDU
/// number, next extension header type).
pub const LONG_HEADER_LEN: usize = field::NEXT_EXT + 1;
/// The IANA-assigned UDP port of GTP-U.
pub const PORT: u16 = 2152;
/// Message type of a G-PDU: a user packet follows.
pub const MSG_G_PDU: u8 = 255;

const FLAG_PT: u8 = 0x10;
const FLAG_E: u8 = 0x04;
const FLAG_S: u8 = 0x02;
const FLAG_PN: u8 = 0x01;

/// A view of a GTP-U header whose optional word (if announced) is captured.
/// Extension headers are walked by [`Packet::header_len`].
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::GtpU));
        }
        let p = Packet { buffer };
        if p.has_optional_word() && p.buffer.as_ref().len() < LONG_HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::GtpU));
        }
        Ok(p)
    }
    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn version(&self) -> u8 {
        self.flags() >> 5
    }
    /// Protocol type: 1 for GTP, 0 for GTP'.
    pub fn protocol_type(&self) -> u8 {
        u8::from(self.flags() & FLAG_PT != 0)
    }
    pub fn ext_present(&self) -> bool {
        self.flags() & FLAG_E != 0
    }
    pub fn seq_present(&self) -> bool {
        self.flags() & FLAG_S != 0
    }
    pub fn npdu_present(&self) -> bool {
        self.flags() & FLAG_PN != 0
    }
    /// Any of E, S, PN brings the 4-byte optional word.
    pub fn has_optional_word(&self) -> bool {
        self.flags() & (FLAG_E | FLAG_S | FLAG_PN) != 0
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::MSG_TYPE]
    }
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn teid(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TEID.start)
    }
    pub fn seq(&self) -> Option<u16> {
        self.seq_present().then(|| be16(self.buffer.as_ref(), field::SEQ.start))
    }
    pub fn npdu(&self) -> Option<u8> {
        self.npdu_present().then(|| self.buffer.as_ref()[field::NPDU])
    }

    /// Length of the header with its extension headers: where the T-PDU starts.
    ///
    /// Each extension header gives its length in 4-byte words and ends with
    /// the next one's type (0: none). A length of 0, or more than
    /// [`MAX_EXT_HEADERS`] of them, is [`DecodeError::BadGtpUExtHeader`];
    /// a chain past the captured bytes is truncated.
    pub fn header_len(&self) -> Result<usize, DecodeError> {
        if !self.has_optional_word() {
            return Ok(MIN_HEADER_LEN);
        }
        let b = self.buffer.as_ref();
        let mut at = LONG_HEADER_LEN;
        // The next-type byte means something only with the E flag.
        let mut next = if self.ext_present() { b[field::NEXT_EXT] } else { 0 };
        let mut walked = 0;
        while next != 0 {
            if walked == MAX_EXT_HEADERS {
                return Err(DecodeError::BadGtpUExtHeader);
            }
            let words = usize::from(*b.get(at).ok_or(DecodeError::Truncated(Layer::GtpU))?);
            if words == 0 {
                return Err(DecodeError::BadGtpUExtHeader);
            }
            let end = at + 4 * words;
            next = *b.get(end - 1).ok_or(DecodeError::Truncated(Layer::GtpU))?;
            at = end;
            walked += 1;
        }
        Ok(at)
    }
}

/// A parsed GTP-U header without extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub msg_type: u8,
    /// The length field: bytes after the mandatory 8-byte header.
    pub length: u16,
    pub teid: u32,
    /// A sequence number (S flag): brings the optional word.
    pub seq: Option<u16>,
}

impl Repr {
    /// Parse a checked header; extension headers are not represented.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { msg_type: p.msg_type(), length: p.len(), teid: p.teid(), seq: p.seq() }
    }
    pub const fn buffer_len(&self) -> usize {
        if self.seq.is_some() {
            LONG_HEADER_LEN
        } else {
            MIN_HEADER_LEN
        }
    }
    /// Write a version-1 GTP header (protocol type 1) into `buf[..self.buffer_len()]`.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..self.buffer_len()];
        b[field::FLAGS] = (1 << 5) | FLAG_PT | if self.seq.is_some() { FLAG_S } else { 0 };
        b[field::MSG_TYPE] = self.msg_type;
        b[field::LENGTH].copy_from_slice(&self.length.to_be_bytes());
        b[field::TEID].copy_from_slice(&self.teid.to_be_bytes());
        if let Some(s) = self.seq {
            b[field::SEQ].copy_from_slice(&s.to_be_bytes());
            b[field::NPDU] = 0;
            b[field::NEXT_EXT] = 0;
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GTP-U type={} teid=0x{:08x} len={}", self.msg_type, self.teid, self.length)?;
        if let Some(s) = self.seq {
            write!(f, " seq={s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn extension_chain() {
        // E flag, next type 0x85 (PDU session container, 1 word), then none.
        let mut b = vec![0x34, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 1, 0x10, 0x09, 0];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), Ok(16));
        // The chain goes on past the captured bytes.
        b[15] = 0x85;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().header_len(), Err(DecodeError::Truncated(Layer::GtpU)));
        // A zero length would never advance.
        b[12] = 0;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().header_len(), Err(DecodeError::BadGtpUExtHeader));
        // A chain longer than the bound.
        let mut long = vec![0x34, 0xff, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x85];
        for _ in 0..=MAX_EXT_HEADERS {
            long.extend_from_slice(&[1, 0, 0, 0x85]);
        }
        assert_eq!(Packet::new_checked(&long[..]).unwrap().header_len(), Err(DecodeError::BadGtpUExtHeader));
        // The optional word announced but not captured.
        assert_eq!(Packet::new_checked(&b[..11]).unwrap_err(), DecodeError::Truncated(Layer::GtpU));
    }

    proptest! {
        #[test]
        fn round_trip(msg_type in any::<u8>(), length in any::<u16>(), teid in any::<u32>(), seq in any::<Option<u16>>()) {
            let r = Repr { msg_type, length, teid, seq };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!((p.version(), p.protocol_type()), (1, 1));
            prop_assert_eq!(p.header_len(), Ok(r.buffer_len()));
            prop_assert_eq!(Repr::parse(&p), r);
        }

        #[test]
        fn any_chain_walks_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                if let Ok(len) = p.header_len() {
                    prop_assert!(len <= bytes.len());
                }
            }
        }
    }
}
