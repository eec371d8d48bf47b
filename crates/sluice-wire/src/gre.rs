//! GRE headers (RFC 2784 with the key and sequence number of RFC 2890),
//! IP protocol 47.

use crate::{be16, be32, checksum, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::Range;
    pub const FLAGS_VERSION: Range<usize> = 0..2;
    pub const PROTOCOL: Range<usize> = 2..4;
    /// Where the optional words start: checksum, then key, then sequence number.
    pub const OPTIONAL: usize = 4;
}

/// Length of the fixed part (flags, version, protocol type).
pub const MIN_HEADER_LEN: usize = field::OPTIONAL;

const FLAG_CHECKSUM: u16 = 0x8000;
/// RFC 1701 source routing; deprecated by RFC 2784 and not walked.
const FLAG_ROUTING: u16 = 0x4000;
const FLAG_KEY: u16 = 0x2000;
const FLAG_SEQ: u16 = 0x1000;
const VERSION_MASK: u16 = 0x0007;

/// A view of a GRE header whose optional words are all captured.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Check that the fixed part and the words its flags announce are captured.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Gre));
        }
        let p = Packet { buffer };
        if p.buffer.as_ref().len() < p.header_len() {
            return Err(DecodeError::Truncated(Layer::Gre));
        }
        Ok(p)
    }

    fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_VERSION.start)
    }
    /// A checksum word (checksum and reserved) is present. RFC 1701 also
    /// puts it there when only the routing bit is set.
    pub fn checksum_present(&self) -> bool {
        self.flags() & FLAG_CHECKSUM != 0
    }
    pub fn routing_present(&self) -> bool {
        self.flags() & FLAG_ROUTING != 0
    }
    pub fn key_present(&self) -> bool {
        self.flags() & FLAG_KEY != 0
    }
    pub fn seq_present(&self) -> bool {
        self.flags() & FLAG_SEQ != 0
    }
    /// 0 for GRE; 1 is PPTP's enhanced GRE (RFC 2637).
    pub fn version(&self) -> u8 {
        (self.flags() & VERSION_MASK) as u8
    }
    /// EtherType of the payload.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }
    /// Header length: the fixed 4 bytes plus the checksum, key and sequence
    /// words the flags announce (not RFC 1701 routing entries).
    pub fn header_len(&self) -> usize {
        let words = usize::from(self.checksum_present() || self.routing_present())
            + usize::from(self.key_present())
            + usize::from(self.seq_present());
        MIN_HEADER_LEN + 4 * words
    }
    fn optional_word(&self, index: usize) -> u32 {
        be32(self.buffer.as_ref(), field::OPTIONAL + 4 * index)
    }
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present().then(|| (self.optional_word(0) >> 16) as u16)
    }
    pub fn key(&self) -> Option<u32> {
        let before = usize::from(self.checksum_present() || self.routing_present());
        self.key_present().then(|| self.optional_word(before))
    }
    pub fn seq(&self) -> Option<u32> {
        let before = usize::from(self.checksum_present() || self.routing_present()) + usize::from(self.key_present());
        self.seq_present().then(|| self.optional_word(before))
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Whether the checksum (if present) is correct over the whole buffer.
    pub fn verify_checksum(&self) -> bool {
        !self.checksum_present() || checksum::verify(0, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Fill the checksum (when present) over the whole buffer: header and payload.
    pub fn fill_checksum(&mut self) {
        if self.checksum_present() {
            checksum::fill(self.buffer.as_mut(), field::OPTIONAL, 0);
        }
    }
}

/// A parsed version-0 GRE header without routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// EtherType of the payload.
    pub protocol: u16,
    /// A checksum word is present (its value is filled by [`Packet::fill_checksum`]).
    pub checksum: bool,
    pub key: Option<u32>,
    pub seq: Option<u32>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { protocol: p.protocol(), checksum: p.checksum_present(), key: p.key(), seq: p.seq() }
    }

    pub const fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + 4 * (self.checksum as usize + self.key.is_some() as usize + self.seq.is_some() as usize)
    }

    /// Write the header into `buf[..self.buffer_len()]`, checksum word zeroed.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..self.buffer_len()];
        let mut flags = 0u16;
        let mut at = field::OPTIONAL;
        if self.checksum {
            flags |= FLAG_CHECKSUM;
            b[at..at + 4].copy_from_slice(&[0; 4]);
            at += 4;
        }
        if let Some(k) = self.key {
            flags |= FLAG_KEY;
            b[at..at + 4].copy_from_slice(&k.to_be_bytes());
            at += 4;
        }
        if let Some(s) = self.seq {
            flags |= FLAG_SEQ;
            b[at..at + 4].copy_from_slice(&s.to_be_bytes());
        }
        b[field::FLAGS_VERSION].copy_from_slice(&flags.to_be_bytes());
        b[field::PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GRE proto=0x{:04x}", self.protocol)?;
        if let Some(k) = self.key {
            write!(f, " key={k}")?;
        }
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
    fn announced_words_must_be_captured() {
        // Key and sequence announced, only the key captured.
        let b = [0x30, 0x00, 0x08, 0x00, 0, 0, 0, 1];
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Truncated(Layer::Gre));
        assert_eq!(Packet::new_checked(&b[..3]).unwrap_err(), DecodeError::Truncated(Layer::Gre));
        let key_only = [0x20, 0x00, 0x08, 0x00, 0, 0, 0, 9];
        let p = Packet::new_checked(&key_only[..]).unwrap();
        assert_eq!((p.key(), p.seq(), p.header_len()), (Some(9), None, 8));
    }

    proptest! {
        #[test]
        fn round_trip(protocol in any::<u16>(), checksum in any::<bool>(), key in any::<Option<u32>>(), seq in any::<Option<u32>>(),
                      payload in proptest::collection::vec(any::<u8>(), 0..40)) {
            let r = Repr { protocol, checksum, key, seq };
            let mut b = vec![0u8; r.buffer_len() + payload.len()];
            r.emit(&mut b);
            b[r.buffer_len()..].copy_from_slice(&payload);
            Packet::new_unchecked(&mut b[..]).fill_checksum();
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p), r);
            prop_assert_eq!(p.version(), 0);
            prop_assert_eq!(p.header_len(), r.buffer_len());
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert!(p.verify_checksum());
        }
    }
}
