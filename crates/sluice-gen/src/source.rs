//! The generator as a pipeline [`Source`]: frames are generated straight
//! into batches, with the timestamps a pcap of them would hold.

use crate::{GenStats, Generator};
use sluice_pipeline::{Fill, Meta, PacketBatch, Source};
use sluice_wire::capture::{Interface, Timestamp, TsResolution};
use sluice_wire::LinkType;
use std::time::Instant;

/// Snap length the generated frames are described with (what `sluice gen` writes).
pub const SNAPLEN: u32 = 65_535;

pub struct GenSource {
    gen: Generator,
    buf: Vec<u8>,
    nanos: bool,
    count: u64,
}

impl GenSource {
    /// `nanos`: nanosecond timestamps (else microseconds, like `sluice gen`).
    pub fn new(gen: Generator, count: u64, nanos: bool) -> Self {
        GenSource { gen, buf: Vec::with_capacity(16_384), nanos, count }
    }

    pub fn stats(&self) -> &GenStats {
        self.gen.stats()
    }

    /// The interface every generated frame is on.
    pub fn interface(&self) -> Interface {
        Interface {
            link_type: LinkType::ETHERNET,
            snaplen: SNAPLEN,
            ts_resolution: if self.nanos { TsResolution::NANOS } else { TsResolution::MICROS },
        }
    }
}

/// A generated timestamp does not fit a pcap record (past 2106).
#[derive(Debug, thiserror::Error)]
#[error("generated timestamp {0} ns is past what a pcap record can hold")]
pub struct TimestampOverflow(pub u64);

impl Source for GenSource {
    type Error = TimestampOverflow;

    fn fill(&mut self, batch: &mut PacketBatch, _deadline: Option<Instant>) -> Result<Fill, Self::Error> {
        let interface = self.interface();
        while !batch.is_full() {
            let Some(info) = self.gen.next_frame(&mut self.buf) else { return Ok(Fill::End) };
            let sub = info.timestamp_ns % 1_000_000_000;
            let secs =
                u32::try_from(info.timestamp_ns / 1_000_000_000).map_err(|_| TimestampOverflow(info.timestamp_ns))?;
            let frac = if self.nanos { sub } else { sub / 1000 } as u32;
            let meta = Meta {
                index: info.index,
                offset: 0,
                timestamp: Timestamp::Split { secs, frac, nanos: self.nanos },
                wire_len: self.buf.len() as u32,
                port: 0,
                interface,
            };
            batch.push_copy(meta, &self.buf);
        }
        Ok(Fill::More)
    }

    fn progress(&self) -> (u64, u64) {
        (self.gen.stats().packets, self.count)
    }
}
