//! What a capture records about a packet besides its bytes: when it was
//! seen (exactly as stored, so it can be written back unchanged) and on
//! which interface. Shared by capture files, live ports and the pipeline.

use crate::LinkType;

/// The pcapng `if_tsresol` byte: 10^-n seconds, or 2^-n when the top bit is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsResolution(pub u8);

impl TsResolution {
    pub const MICROS: TsResolution = TsResolution(6);
    pub const NANOS: TsResolution = TsResolution(9);

    /// Units per second, or `None` when it does not fit a u64.
    pub fn units_per_sec(self) -> Option<u64> {
        if self.0 & 0x80 != 0 {
            1u64.checked_shl(u32::from(self.0 & 0x7f))
        } else {
            10u64.checked_pow(u32::from(self.0))
        }
    }
}

/// A packet timestamp exactly as stored, convertible between forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timestamp {
    /// pcap: seconds and a fraction in micro- or nanoseconds.
    Split { secs: u32, frac: u32, nanos: bool },
    /// pcapng: a count of units of the interface's resolution.
    Units { units: u64, resolution: TsResolution },
}

impl Timestamp {
    /// Nanoseconds since the epoch (saturating for exotic resolutions).
    pub fn as_nanos(&self) -> u128 {
        match *self {
            Timestamp::Split { secs, frac, nanos } => {
                u128::from(secs) * 1_000_000_000 + u128::from(frac) * if nanos { 1 } else { 1000 }
            }
            Timestamp::Units { units, resolution } => match resolution.units_per_sec() {
                Some(per_sec) => u128::from(units) * 1_000_000_000 / u128::from(per_sec),
                None => 0,
            },
        }
    }
}

/// A capture interface: one for pcap, one per Interface Description Block for pcapng.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    pub link_type: LinkType,
    pub snaplen: u32,
    pub ts_resolution: TsResolution,
}
