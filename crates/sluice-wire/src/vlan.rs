//! IEEE 802.1Q / 802.1ad VLAN tags (the 4 bytes after the tag's EtherType).

use crate::{be16, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const TCI: Range<usize> = 0..2;
    pub const ETHERTYPE: Range<usize> = 2..4;
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view of one VLAN tag: TCI then the inner EtherType.
#[derive(Debug, Clone, Copy)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Tag<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Tag { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Vlan));
        }
        Ok(Tag { buffer })
    }

    fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI.start)
    }
    pub fn priority(&self) -> u8 {
        (self.tci() >> 13) as u8
    }
    pub fn drop_eligible(&self) -> bool {
        self.tci() & 0x1000 != 0
    }
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    pub fn set_tci(&mut self, priority: u8, dei: bool, vid: u16) {
        let tci = (u16::from(priority & 7) << 13) | (u16::from(dei) << 12) | (vid & 0x0fff);
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }
    pub fn set_ethertype(&mut self, ty: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&ty.to_be_bytes());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub priority: u8,
    pub drop_eligible: bool,
    pub vlan_id: u16,
    /// EtherType of what follows this tag.
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(tag: &Tag<T>) -> Repr {
        Repr {
            priority: tag.priority(),
            drop_eligible: tag.drop_eligible(),
            vlan_id: tag.vlan_id(),
            ethertype: tag.ethertype(),
        }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut Tag<T>) {
        tag.set_tci(self.priority, self.drop_eligible, self.vlan_id);
        tag.set_ethertype(self.ethertype);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VLAN id={} pcp={} type=0x{:04x}", self.vlan_id, self.priority, self.ethertype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn emit_parse_round_trip(bytes in proptest::array::uniform4(any::<u8>())) {
            let repr = Repr::parse(&Tag::new_checked(&bytes[..]).unwrap());
            let mut out = [0u8; HEADER_LEN];
            repr.emit(&mut Tag::new_unchecked(&mut out[..]));
            prop_assert_eq!(out, bytes);
        }
    }
}
