//! TCP headers (RFC 9293). Options are carried, not interpreted.

use crate::{be16, be32, checksum, DecodeError, Layer};
use core::fmt;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const ACK: Range<usize> = 8..12;
    pub const OFF_FLAGS: Range<usize> = 12..14;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

pub const HEADER_LEN: usize = field::URGENT.end;

pub mod flags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
}

#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Check that the fixed header and the options the data offset claims are captured.
    pub fn new_checked(buffer: T) -> Result<Self, DecodeError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(DecodeError::Truncated(Layer::Tcp));
        }
        let p = Packet { buffer };
        let off = p.data_offset_words();
        if off < 5 {
            return Err(DecodeError::BadTcpHeaderLen(off));
        }
        if p.buffer.as_ref().len() < p.header_len() {
            return Err(DecodeError::Truncated(Layer::Tcp));
        }
        Ok(p)
    }
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ.start)
    }
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK.start)
    }
    fn data_offset_words(&self) -> u8 {
        self.buffer.as_ref()[field::OFF_FLAGS.start] >> 4
    }
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset_words()) * 4
    }
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OFF_FLAGS.start) & 0x0fff
    }
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW.start)
    }
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::verify(pseudo, self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Fill the checksum over the whole buffer (header + payload).
    pub fn fill_checksum(&mut self, pseudo: u32) {
        checksum::fill(self.buffer.as_mut(), field::CHECKSUM.start, pseudo);
    }
}

/// A parsed option-less TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub window: u16,
    pub urgent: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq_number(),
            ack: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write a 20-byte header with a zero checksum; see [`Packet::fill_checksum`].
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..HEADER_LEN];
        b[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        b[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::ACK].copy_from_slice(&self.ack.to_be_bytes());
        let off_flags = (5u16 << 12) | (self.flags & 0x0fff);
        b[field::OFF_FLAGS].copy_from_slice(&off_flags.to_be_bytes());
        b[field::WINDOW].copy_from_slice(&self.window.to_be_bytes());
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        b[field::URGENT].copy_from_slice(&self.urgent.to_be_bytes());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TCP src={} dst={} seq={} ack={} flags=0x{:03x} win={}",
            self.src_port, self.dst_port, self.seq, self.ack, self.flags, self.window
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_bad_offsets() {
        let mut b = [0u8; 20];
        b[12] = 0x40;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::BadTcpHeaderLen(4));
        b[12] = 0x60;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), DecodeError::Truncated(Layer::Tcp));
    }

    proptest! {
        #[test]
        fn bytes_round_trip(mut bytes in proptest::array::uniform20(any::<u8>())) {
            bytes[12] = 0x50 | (bytes[12] & 0x0f);
            bytes[16] = 0; bytes[17] = 0;
            let r = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap());
            let mut out = [0u8; 20];
            r.emit(&mut out);
            prop_assert_eq!(out, bytes);
        }
    }
}
