//! ICMP (RFC 792) and ICMPv6 (RFC 4443) share a 4-byte type/code/checksum
//! header followed by 4 message-specific bytes; echo is what the generator emits.

use crate::{be16, checksum, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const SEQ: Range<usize> = 6..8;
}

/// Type, code, checksum and the 4-byte "rest of header".
pub const HEADER_LEN: usize = field::SEQ.end;

pub const V4_ECHO_REPLY: u8 = 0;
pub const V4_ECHO_REQUEST: u8 = 8;
pub const V6_ECHO_REQUEST: u8 = 128;
pub const V6_ECHO_REPLY: u8 = 129;

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
            return Err(DecodeError::Truncated(Layer::Icmp));
        }
        Ok(Packet { buffer })
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }
    pub fn echo_seq(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SEQ.start)
    }
    /// Verify; `pseudo` is 0 for ICMPv4 and the IPv6 pseudo-header sum for ICMPv6.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::verify(pseudo, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn fill_checksum(&mut self, pseudo: u32) {
        checksum::fill(self.buffer.as_mut(), field::CHECKSUM.start, pseudo);
    }
}

/// An echo request or reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRepr {
    pub msg_type: u8,
    pub ident: u16,
    pub seq: u16,
}

impl EchoRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> EchoRepr {
        EchoRepr { msg_type: p.msg_type(), ident: p.echo_ident(), seq: p.echo_seq() }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header with a zero checksum; see [`Packet::fill_checksum`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::TYPE] = self.msg_type;
        b[field::CODE] = 0;
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        b[field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
    }
}

impl fmt::Display for EchoRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ICMP echo type={} id={} seq={}", self.msg_type, self.ident, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn echo_round_trip(t in any::<u8>(), id in any::<u16>(), seq in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..32)) {
            let r = EchoRepr { msg_type: t, ident: id, seq };
            let mut b = vec![0u8; HEADER_LEN + payload.len()];
            b[HEADER_LEN..].copy_from_slice(&payload);
            r.emit(&mut b);
            Packet::new_unchecked(&mut b[..]).fill_checksum(0);
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum(0));
            prop_assert_eq!(EchoRepr::parse(&p), r);
        }
    }
}
