//! The two ends of a pipeline: where packets come from and where they go.
//! Capture files, live ports and the generator implement these in their own
//! crates; the pipeline itself does no I/O.

use crate::batch::PacketBatch;
use std::time::Instant;

/// How a [`Source::fill`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// More may come: the batch is full, or the deadline passed (a quiet live
    /// link; the batch may be partly filled or empty).
    More,
    /// The source is finished; what it added before the end is in the batch.
    End,
}

/// Where packets come from.
pub trait Source {
    /// Why reading stopped early (a damaged record, a socket error).
    type Error;

    /// Append packets to `batch` until it is full, the deadline passes, or
    /// the source ends. On an error the packets added before it stay in the
    /// batch and are processed; the run then ends.
    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill, Self::Error>;

    /// How far it has got, for progress: (done, total) in its own units
    /// (bytes of a file); total 0 when unknown.
    fn progress(&self) -> (u64, u64) {
        (0, 0)
    }

    /// A live source: time passes without packets, so held fragments expire
    /// on the wall clock, not only on packet timestamps.
    fn is_live(&self) -> bool {
        false
    }
}

/// Where judged packets go.
pub trait Sink {
    type Error;

    /// Take a batch of judged packets, in output order; each packet's
    /// verdict is in `Packet::verdict`.
    fn write(&mut self, batch: &PacketBatch) -> Result<(), Self::Error>;

    /// Flush and complete the output; called once, also after an error
    /// elsewhere, so that what was written is valid.
    fn finish(&mut self) -> Result<(), Self::Error>;

    /// Nothing is between the source and the sink: every packet the source
    /// has handed over so far was written, or copied out by reassembly
    /// (whose copies are written later). A sink that lends the source's
    /// buffers back (a live port's frames) can take back every buffer it
    /// has not been given. Called by [`crate::run`] without read-ahead only,
    /// between a batch's write and the next fill.
    fn quiescent(&mut self) {}
}

/// A sink that keeps nothing.
#[derive(Debug, Default)]
pub struct Discard;

impl Sink for Discard {
    type Error = std::convert::Infallible;
    fn write(&mut self, _: &PacketBatch) -> Result<(), Self::Error> {
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Packets already in memory, as a source (tests, fuzzing, replays).
#[derive(Debug)]
pub struct VecSource {
    packets: std::vec::IntoIter<(crate::batch::Meta, Vec<u8>)>,
}

impl VecSource {
    pub fn new(packets: Vec<(crate::batch::Meta, Vec<u8>)>) -> Self {
        VecSource { packets: packets.into_iter() }
    }
}

impl Source for VecSource {
    type Error = std::convert::Infallible;
    fn fill(&mut self, batch: &mut PacketBatch, _: Option<Instant>) -> Result<Fill, Self::Error> {
        while !batch.is_full() {
            match self.packets.next() {
                Some((meta, bytes)) => batch.push_copy(meta, &bytes),
                None => return Ok(Fill::End),
            }
        }
        Ok(Fill::More)
    }
}

/// A sink that keeps every packet's (index, verdict) in output order.
#[derive(Debug, Default)]
pub struct Collect {
    pub out: Vec<(u64, sluice_engine::Verdict)>,
    pub finished: bool,
}

impl Sink for Collect {
    type Error = std::convert::Infallible;
    fn write(&mut self, batch: &PacketBatch) -> Result<(), Self::Error> {
        self.out.extend(batch.packets().iter().map(|p| (p.meta.index, p.verdict)));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Self::Error> {
        self.finished = true;
        Ok(())
    }
}
