//! MPLS label stack entries (RFC 3032), after EtherType 0x8847 / 0x8848.
//!
//! The stack carries no payload type: after the entry with the
//! bottom-of-stack bit the decoder guesses IPv4 or IPv6 from the first
//! nibble, as tcpdump and Wireshark do; anything else (a pseudowire control
//! word, Ethernet over MPLS) is left as non-IP.

use crate::{be32, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const ENTRY: Range<usize> = 0..4;
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

/// Length of one label stack entry.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

const BOTTOM_OF_STACK: u32 = 0x100;

/// A view of one label stack entry: label (20 bits), traffic class (3),
/// bottom of stack (1), TTL (8).
#[derive(Debug, Clone, Copy)]
pub struct Entry<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Entry<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Entry { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Mpls));
        }
        Ok(Entry { buffer })
    }

    fn word(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ENTRY.start)
    }
    pub fn label(&self) -> u32 {
        self.word() >> 12
    }
    pub fn traffic_class(&self) -> u8 {
        ((self.word() >> 9) & 7) as u8
    }
    pub fn bottom_of_stack(&self) -> bool {
        self.word() & BOTTOM_OF_STACK != 0
    }
    pub fn ttl(&self) -> u8 {
        self.word() as u8
    }
    /// What follows this entry: the next entry, or the payload after the bottom.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

/// One parsed label stack entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// 20 bits.
    pub label: u32,
    /// 3 bits.
    pub traffic_class: u8,
    pub bottom_of_stack: bool,
    pub ttl: u8,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(e: &Entry<T>) -> Repr {
        Repr { label: e.label(), traffic_class: e.traffic_class(), bottom_of_stack: e.bottom_of_stack(), ttl: e.ttl() }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the entry into `buf[..4]`; the label and class are masked to their widths.
    pub fn emit(&self, buf: &mut [u8]) {
        let w = ((self.label & 0xf_ffff) << 12)
            | (u32::from(self.traffic_class & 7) << 9)
            | if self.bottom_of_stack { BOTTOM_OF_STACK } else { 0 }
            | u32::from(self.ttl);
        buf[field::ENTRY].copy_from_slice(&w.to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MPLS label={} tc={} s={} ttl={}",
            self.label,
            self.traffic_class,
            u8::from(self.bottom_of_stack),
            self.ttl
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(Entry::new_checked(&[0u8; 3][..]).unwrap_err(), DecodeError::Truncated(Layer::Mpls));
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(bytes in proptest::array::uniform4(any::<u8>())) {
            let repr = Repr::parse(&Entry::new_checked(&bytes[..]).unwrap());
            let mut out = [0u8; HEADER_LEN];
            repr.emit(&mut out);
            prop_assert_eq!(out, bytes);
        }
    }
}
