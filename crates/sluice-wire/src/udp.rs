//! UDP headers (RFC 768).

use crate::{be16, checksum, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

pub const HEADER_LEN: usize = field::CHECKSUM.end;

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
            return Err(DecodeError::Truncated(Layer::Udp));
        }
        Ok(Packet { buffer })
    }
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Verify against a pseudo-header partial sum, over the whole buffer.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        self.checksum() == 0 || checksum::verify(pseudo, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Fill the checksum over the whole buffer (header + payload) given the
    /// pseudo-header partial sum. A computed 0 is sent as 0xffff (RFC 768).
    pub fn fill_checksum(&mut self, pseudo: u32) {
        let b = self.buffer.as_mut();
        if checksum::fill(b, field::CHECKSUM.start, pseudo) == 0 {
            b[field::CHECKSUM].copy_from_slice(&0xffffu16.to_be_bytes());
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Length field: header plus payload.
    pub length: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { src_port: p.src_port(), dst_port: p.dst_port(), length: p.len() }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header with a zero checksum; see [`Packet::fill_checksum`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        b[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&self.length.to_be_bytes());
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UDP src={} dst={} len={}", self.src_port, self.dst_port, self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(s in any::<u16>(), d in any::<u16>(), l in any::<u16>()) {
            let r = Repr { src_port: s, dst_port: d, length: l };
            let mut b = [0u8; 8];
            r.emit(&mut b);
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), r);
        }

        #[test]
        fn filled_checksum_verifies(payload in proptest::collection::vec(any::<u8>(), 0..64), pseudo in 0u32..0x3_0000) {
            let mut b = vec![0u8; 8 + payload.len()];
            b[8..].copy_from_slice(&payload);
            Repr { src_port: 1, dst_port: 2, length: b.len() as u16 }.emit(&mut b);
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.fill_checksum(pseudo);
            prop_assert!(Packet::new_checked(&b[..]).unwrap().verify_checksum(pseudo));
        }
    }
}
