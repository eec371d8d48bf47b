//! VXLAN headers (RFC 7348): UDP destination port 4789, an Ethernet frame follows.

use crate::{be32, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const FLAGS: usize = 0;
    /// VNI in the top 24 bits, 8 reserved bits.
    pub const VNI: Range<usize> = 4..8;
    pub const PAYLOAD: RangeFrom<usize> = 8..;
}

pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// The IANA-assigned UDP destination port.
pub const PORT: u16 = 4789;

/// The I flag: the VNI is valid.
const FLAG_VNI: u8 = 0x08;

/// A view of a VXLAN header.
///
/// The I flag is not required: Linux and Wireshark take the inner frame
/// whatever the flags say.
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
            return Err(DecodeError::Truncated(Layer::Vxlan));
        }
        Ok(Packet { buffer })
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    pub fn vni_valid(&self) -> bool {
        self.flags() & FLAG_VNI != 0
    }
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI.start) >> 8
    }
    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// 24 bits.
    pub vni: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr { vni: p.vni() }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header with the I flag set and reserved bits zero.
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[..field::VNI.start].copy_from_slice(&[FLAG_VNI, 0, 0, 0]);
        b[field::VNI].copy_from_slice(&((self.vni & 0xff_ffff) << 8).to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VXLAN vni={}", self.vni)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(vni in 0u32..1 << 24) {
            let mut b = [0u8; HEADER_LEN];
            Repr { vni }.emit(&mut b);
            let p = Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.vni_valid());
            prop_assert_eq!(Repr::parse(&p), Repr { vni });
            prop_assert_eq!(Packet::new_checked(&b[..7]).unwrap_err(), DecodeError::Truncated(Layer::Vxlan));
        }
    }
}
