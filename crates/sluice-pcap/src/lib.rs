//! Streaming pcap and pcapng I/O.
//!
//! Written by hand rather than taken from a crate because the product needs
//! three things at once: records borrowed from one reused buffer (no
//! allocation per packet), errors that say which record and byte offset
//! reading stopped at (so callers keep everything before it), and hard bounds
//! on every length read from the file (hostile captures cannot make us
//! allocate more than [`MAX_BLOCK_LEN`]). Fuzzed in `fuzz/fuzz_targets/capture.rs`.
#![deny(unsafe_code)]

mod error;
pub mod map;
mod reader;
pub mod stdio;
mod writer;

pub use error::{PcapError, PcapErrorKind};
pub use reader::{CaptureReader, Chunked, InMemory, Input, Streamed};
pub use writer::{interface_block_len, packet_block_len, CaptureWriter, OutputFormat};

pub use sluice_wire::capture::{Interface, Timestamp, TsResolution};
use sluice_wire::LinkType;

/// Largest packet accepted (libpcap's MAXIMUM_SNAPLEN).
pub const MAX_PACKET_LEN: u32 = 262_144;
/// Largest pcapng block accepted (libpcap's limit too).
pub const MAX_BLOCK_LEN: u32 = 16 * 1024 * 1024;

pub(crate) const PCAP_MAGIC_MICROS: u32 = 0xa1b2_c3d4;
pub(crate) const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;
pub(crate) const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
pub(crate) const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// Which container a capture file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Pcap,
    Pcapng,
}

/// The 24-byte global header of a classic pcap file, kept whole so that a
/// file written with it is byte-identical to the one it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapHeader {
    pub big_endian: bool,
    /// Fractions of a second are nanoseconds (magic 0xa1b23c4d) rather than microseconds.
    pub nanos: bool,
    pub version_major: u16,
    pub version_minor: u16,
    pub thiszone: i32,
    pub sigfigs: u32,
    pub snaplen: u32,
    /// The raw link-type field: link type in the low 16 bits, FCS info above.
    pub linktype_field: u32,
}

impl PcapHeader {
    pub const LEN: usize = 24;

    /// A little-endian version 2.4 header.
    pub fn new(link_type: LinkType, snaplen: u32, nanos: bool) -> Self {
        PcapHeader {
            big_endian: false,
            nanos,
            version_major: 2,
            version_minor: 4,
            thiszone: 0,
            sigfigs: 0,
            snaplen,
            linktype_field: link_type.0,
        }
    }

    pub fn link_type(&self) -> LinkType {
        LinkType(self.linktype_field & 0xffff)
    }

    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let magic = if self.nanos { PCAP_MAGIC_NANOS } else { PCAP_MAGIC_MICROS };
        let mut b = [0u8; Self::LEN];
        let e = Endian(self.big_endian);
        b[0..4].copy_from_slice(&e.u32_bytes(magic));
        b[4..6].copy_from_slice(&e.u16_bytes(self.version_major));
        b[6..8].copy_from_slice(&e.u16_bytes(self.version_minor));
        b[8..12].copy_from_slice(&e.u32_bytes(self.thiszone as u32));
        b[12..16].copy_from_slice(&e.u32_bytes(self.sigfigs));
        b[16..20].copy_from_slice(&e.u32_bytes(self.snaplen));
        b[20..24].copy_from_slice(&e.u32_bytes(self.linktype_field));
        b
    }
}

/// One packet record, borrowed from the reader's buffer until the next read.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// 0-based index among packet records.
    pub index: u64,
    /// Byte offset of the record (pcap) or block (pcapng) in the file.
    pub offset: u64,
    pub timestamp: Timestamp,
    /// Length on the wire; `data` may be shorter (snap length).
    pub orig_len: u32,
    pub data: &'a [u8],
    /// Index into [`CaptureReader::interfaces`] (unique across pcapng sections).
    pub interface_id: u32,
    pub interface: Interface,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Endian(pub bool);

impl Endian {
    pub fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.0 {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }
    pub fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
    pub fn u16_bytes(self, v: u16) -> [u8; 2] {
        if self.0 {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    pub fn u32_bytes(self, v: u32) -> [u8; 4] {
        if self.0 {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
}
