//! PPPoE session stage (RFC 2516, EtherType 0x8864) and the PPP protocol
//! field that follows it, full (2 bytes) or compressed (1 byte, RFC 1661
//! protocol field compression: an odd first byte).

use crate::{be16, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const VER_TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const SESSION_ID: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    /// 2 bytes, or 1 when compressed.
    pub const PPP_PROTOCOL: Range<usize> = 6..8;
    pub const PAYLOAD: RangeFrom<usize> = 8..;
}

/// The PPPoE header (6 bytes) plus a full 2-byte PPP protocol field.
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// The PPPoE header plus a compressed 1-byte PPP protocol field.
pub const MIN_HEADER_LEN: usize = field::PPP_PROTOCOL.start + 1;

/// PPP protocol numbers the decoder follows.
pub mod ppp_proto {
    pub const IPV4: u16 = 0x0021;
    pub const IPV6: u16 = 0x0057;
}

/// A view of a PPPoE session header and its PPP protocol field.
///
/// Version, type and code are not checked: the EtherType already says this
/// is session data, and Wireshark dissects the PPP payload whatever they hold.
#[derive(Debug, Clone, Copy)]
pub struct Session<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Session<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Session { buffer }
    }

    /// Check that the PPPoE header and the PPP protocol field (1 or 2 bytes) are captured.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Pppoe));
        }
        let s = Session { buffer };
        if s.buffer.as_ref().len() < s.header_len() {
            return Err(DecodeError::Truncated(Layer::Pppoe));
        }
        Ok(s)
    }

    /// A protocol field whose first byte is odd is compressed to that byte.
    fn compressed(&self) -> bool {
        self.buffer.as_ref()[field::PPP_PROTOCOL.start] & 1 != 0
    }
    /// Header length up to the PPP payload: 8, or 7 with a compressed protocol field.
    pub fn header_len(&self) -> usize {
        if self.compressed() {
            MIN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE] >> 4
    }
    pub fn pppoe_type(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TYPE] & 0x0f
    }
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn session_id(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SESSION_ID.start)
    }
    /// The PPPoE payload length: the PPP protocol field plus what follows.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The PPP protocol, decompressed (0x21 is 0x0021).
    pub fn ppp_protocol(&self) -> u16 {
        if self.compressed() {
            u16::from(self.buffer.as_ref()[field::PPP_PROTOCOL.start])
        } else {
            be16(self.buffer.as_ref(), field::PPP_PROTOCOL.start)
        }
    }
    /// The PPP payload: everything captured after the protocol field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub session_id: u16,
    /// PPPoE length field: the PPP protocol field (2) plus the PPP payload.
    pub length: u16,
    pub ppp_protocol: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(s: &Session<T>) -> Repr {
        Repr { session_id: s.session_id(), length: s.len(), ppp_protocol: s.ppp_protocol() }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write version 1, type 1, code 0 (session data) and the fields into
    /// `buf[..8]`, the protocol field uncompressed.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::VER_TYPE] = 0x11;
        b[field::CODE] = 0;
        b[field::SESSION_ID].copy_from_slice(&self.session_id.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&self.length.to_be_bytes());
        b[field::PPP_PROTOCOL].copy_from_slice(&self.ppp_protocol.to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PPPoE session={} len={} ppp=0x{:04x}", self.session_id, self.length, self.ppp_protocol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Session::new_checked(&[0x11u8, 0, 0, 1, 0, 2][..]).unwrap_err(),
            DecodeError::Truncated(Layer::Pppoe)
        );
        // A full protocol field cut after its first byte.
        assert_eq!(
            Session::new_checked(&[0x11u8, 0, 0, 1, 0, 2, 0][..]).unwrap_err(),
            DecodeError::Truncated(Layer::Pppoe)
        );
    }

    #[test]
    fn compressed_protocol_field() {
        let b = [0x11u8, 0, 0, 1, 0, 2, 0x21, 0x45];
        let s = Session::new_checked(&b[..]).unwrap();
        assert_eq!((s.ppp_protocol(), s.header_len(), s.payload()), (ppp_proto::IPV4, 7, &[0x45][..]));
    }

    proptest! {
        #[test]
        // PPP protocol numbers have an even first byte (RFC 1661).
        fn round_trip(session_id in any::<u16>(), length in any::<u16>(), ppp_protocol in any::<u16>().prop_map(|p| p & !0x0100)) {
            let r = Repr { session_id, length, ppp_protocol };
            let mut b = [0u8; HEADER_LEN];
            r.emit(&mut b);
            let s = Session::new_checked(&b[..]).unwrap();
            prop_assert_eq!((s.version(), s.pppoe_type(), s.code()), (1, 1, 0));
            prop_assert_eq!(Repr::parse(&s), r);
        }
    }
}
