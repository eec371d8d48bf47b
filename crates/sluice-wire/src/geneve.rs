//! Geneve headers (RFC 8926): UDP destination port 6081, options, then a
//! payload named by an EtherType (0x6558 for Ethernet).

use crate::{be16, be32, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::Range;
    /// Version (2 bits), options length in 4-byte words (6 bits).
    pub const VER_OPT_LEN: usize = 0;
    /// OAM flag, critical-options flag, 6 reserved bits.
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: Range<usize> = 2..4;
    /// VNI in the top 24 bits, 8 reserved bits.
    pub const VNI: Range<usize> = 4..8;
    pub const OPTIONS: usize = 8;
}

/// Length of the fixed header, without options.
pub const MIN_HEADER_LEN: usize = field::OPTIONS;
/// The IANA-assigned UDP destination port.
pub const PORT: u16 = 6081;

const FLAG_OAM: u8 = 0x80;
const FLAG_CRITICAL: u8 = 0x40;

/// A view of a Geneve header whose options are all captured.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Check that the fixed header and the options it announces are captured.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Geneve));
        }
        let p = Packet { buffer };
        if p.buffer.as_ref().len() < p.header_len() {
            return Err(DecodeError::Truncated(Layer::Geneve));
        }
        Ok(p)
    }
    /// 0 is the only version defined.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPT_LEN] >> 6
    }
    /// Length of the options in bytes.
    pub fn options_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_OPT_LEN] & 0x3f) * 4
    }
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options_len()
    }
    pub fn oam(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_OAM != 0
    }
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_CRITICAL != 0
    }
    /// EtherType of the payload.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI.start) >> 8
    }
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// A parsed version-0 Geneve header; options are not represented, only their length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Bytes of options that follow the fixed header (a multiple of 4, at most 252).
    pub options_len: usize,
    pub protocol: u16,
    /// 24 bits.
    pub vni: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { options_len: p.options_len(), protocol: p.protocol(), vni: p.vni() }
    }
    pub const fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.options_len
    }
    /// Write the fixed header into `buf[..8]` (flags clear); the caller writes the options.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..MIN_HEADER_LEN];
        b[field::VER_OPT_LEN] = ((self.options_len / 4) & 0x3f) as u8;
        b[field::FLAGS] = 0;
        b[field::PROTOCOL].copy_from_slice(&self.protocol.to_be_bytes());
        b[field::VNI].copy_from_slice(&((self.vni & 0xff_ffff) << 8).to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Geneve vni={} proto=0x{:04x} opt_len={}", self.vni, self.protocol, self.options_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(words in 0usize..64, protocol in any::<u16>(), vni in 0u32..1 << 24) {
            let r = Repr { options_len: words * 4, protocol, vni };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(p.version(), 0);
            prop_assert_eq!(Repr::parse(&p), r);
            prop_assert!(p.payload().is_empty());
            prop_assert_eq!(Packet::new_checked(&b[..b.len() - 1]).unwrap_err(), DecodeError::Truncated(Layer::Geneve));
        }
    }
}
