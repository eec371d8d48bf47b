//! Capture files as a pipeline source and sinks.
//!
//! The source memory-maps a regular file and lends each record's bytes to
//! the pipeline in place (no copy); anything else (a pipe, a FIFO) is
//! streamed and copied into the batch. The sinks write each packet to the
//! capture for its verdict; when the output is pcap with the input's own
//! header, stored records are copied whole, and consecutive ones in a single
//! write, which is byte-for-byte what writing them one by one would give.

use crate::{Backing, Fill, PacketBatch, Sink, Source, Verdict};
use sluice_pcap::{
    CaptureReader, CaptureWriter, Chunked, Format, InMemory, OutputFormat, PcapError, PcapHeader, Record,
};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of a pcap record header, which precede its data in the file.
const PCAP_RECORD_HEADER: u8 = 16;

/// A mapped file shared by the reader and every batch that borrows it.
struct Shared(Backing);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        (*self.0).as_ref()
    }
}

/// How far ahead of the reader the mapping is prefetched: enough lines in
/// flight to cover DRAM latency at the rate records are consumed.
const PREFETCH_AHEAD: usize = 8192;
const LINE: usize = 64;

enum Reader {
    Mapped {
        reader: CaptureReader<InMemory<Shared>>,
        backing: Backing,
        /// Everything before this offset has been prefetched.
        prefetched: usize,
    },
    Chunked(CaptureReader<Chunked<File>>),
}

/// How a capture file is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Memory-map a regular file (anything else is read in chunks).
    Map,
    /// `read()` large chunks that records borrow in place.
    Chunks,
}

/// Bytes per `read()` in [`ReadMode::Chunks`]: small enough that the
/// chunk the kernel has just copied is still in the reader's L2 when the
/// record walk reads it (512 KiB to 2 MiB per core on the CPUs we measure).
/// With 1 MiB (this Zen 4 host's whole L2) the walk missed on every
/// record's length and the filter was 8% slower, though `read()` alone is
/// faster with 1 MiB (BENCHMARKS.md, "The filter's chunk size").
pub const CHUNK_BYTES: usize = 256 << 10;

/// A pcap or pcapng file as a [`Source`].
pub struct CaptureSource {
    reader: Reader,
    total: u64,
}

impl CaptureSource {
    /// Open `path` to be read as `mode` says.
    pub fn open(path: &Path, mode: ReadMode) -> Result<Self, PcapError> {
        let file = sluice_pcap::stdio::open(path).map_err(PcapError::open)?;
        PcapError::check_opened(&file)?;
        let meta = file.metadata().map_err(PcapError::open)?;
        let total = meta.len();
        if mode == ReadMode::Map && meta.is_file() && total > 0 {
            if let Ok(map) = sluice_pcap::map::map_file(&file) {
                let backing: Backing = Arc::new(map);
                let reader = CaptureReader::from_bytes(Shared(Arc::clone(&backing)))?;
                return Ok(CaptureSource { reader: Reader::Mapped { reader, backing, prefetched: 0 }, total });
            }
        }
        let reader = CaptureReader::chunked(file, CHUNK_BYTES)?;
        Ok(CaptureSource { reader: Reader::Chunked(reader), total })
    }

    /// Whether records are lent in place from a mapping (else from chunks read).
    pub fn is_mapped(&self) -> bool {
        matches!(self.reader, Reader::Mapped { .. })
    }

    pub fn format(&self) -> Format {
        match &self.reader {
            Reader::Mapped { reader, .. } => reader.format(),
            Reader::Chunked(r) => r.format(),
        }
    }

    /// The input's global header, for pcap input.
    pub fn pcap_header(&self) -> Option<PcapHeader> {
        match &self.reader {
            Reader::Mapped { reader, .. } => reader.pcap_header().copied(),
            Reader::Chunked(r) => r.pcap_header().copied(),
        }
    }

    pub fn warnings(&self) -> Vec<String> {
        match &self.reader {
            Reader::Mapped { reader, .. } => reader.warnings().to_vec(),
            Reader::Chunked(r) => r.warnings().to_vec(),
        }
    }
}

fn meta_of(rec: &Record<'_>) -> crate::Meta {
    crate::Meta {
        index: rec.index,
        offset: rec.offset,
        timestamp: rec.timestamp,
        wire_len: rec.orig_len,
        port: rec.interface_id,
        interface: rec.interface,
    }
}

impl Source for CaptureSource {
    type Error = PcapError;

    fn fill(&mut self, batch: &mut PacketBatch, _deadline: Option<Instant>) -> Result<Fill, PcapError> {
        match &mut self.reader {
            Reader::Mapped { reader, backing, prefetched } => {
                batch.set_backing(backing);
                let pcap = reader.format() == Format::Pcap;
                let bytes = (**backing).as_ref();
                let base = bytes.as_ptr() as usize;
                while !batch.is_full() {
                    let room = batch.capacity() - batch.len();
                    let taken = reader.whole_pcap_records(room, |rec| {
                        let start = rec.data.as_ptr() as usize - base;
                        let ahead = start + PREFETCH_AHEAD;
                        while *prefetched < ahead {
                            sluice_pcap::map::prefetch(bytes, *prefetched);
                            *prefetched += LINE;
                        }
                        batch.push_backed(meta_of(&rec), start, rec.data.len(), PCAP_RECORD_HEADER);
                    });
                    if taken > 0 {
                        continue;
                    }
                    let ahead = reader.bytes_read() as usize + PREFETCH_AHEAD;
                    while *prefetched < ahead {
                        sluice_pcap::map::prefetch(bytes, *prefetched);
                        *prefetched += LINE;
                    }
                    let Some(rec) = reader.next_record()? else { return Ok(Fill::End) };
                    // The record's data is a slice of the mapping: its offset
                    // there is all the batch needs.
                    let start = rec.data.as_ptr() as usize - base;
                    let header = if pcap { PCAP_RECORD_HEADER } else { 0 };
                    let (meta, len) = (meta_of(&rec), rec.data.len());
                    batch.push_backed(meta, start, len, header);
                }
            }
            Reader::Chunked(reader) => {
                let pcap = reader.format() == Format::Pcap;
                while !batch.is_full() {
                    // Records whole in the current chunk, when the batch
                    // borrows it (or nothing yet).
                    let chunk = Arc::clone(reader.chunk());
                    let shared =
                        batch.backing().is_some_and(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&chunk)));
                    if pcap && (shared || batch.is_empty()) {
                        let base = chunk.as_ptr() as usize;
                        let room = batch.capacity() - batch.len();
                        let mut lent = shared;
                        let taken = reader.whole_pcap_records(room, |rec| {
                            if !lent {
                                batch.set_backing(&(Arc::clone(&chunk) as Backing));
                                lent = true;
                            }
                            let start = rec.data.as_ptr() as usize - base;
                            batch.push_backed(meta_of(&rec), start, rec.data.len(), PCAP_RECORD_HEADER);
                        });
                        if taken > 0 {
                            continue;
                        }
                    }
                    let Some(rec) = reader.next_record()? else { return Ok(Fill::End) };
                    let (meta, len, data) = (meta_of(&rec), rec.data.len(), rec.data.as_ptr() as usize);
                    let chunk = reader.chunk();
                    let start = data - chunk.as_ptr() as usize;
                    let shared = batch.backing().is_some_and(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(chunk)));
                    if !shared && !batch.is_empty() && batch.backing().is_some() {
                        // The record is in a new chunk and the batch already
                        // borrows the last one: copy this one record (once
                        // per chunk), the next batch borrows the new chunk.
                        batch.push_copy(meta, &chunk[start..start + len]);
                        return Ok(Fill::More);
                    }
                    if !shared {
                        let backing: Backing = Arc::clone(chunk) as Backing;
                        batch.set_backing(&backing);
                    }
                    batch.push_backed(meta, start, len, if pcap { PCAP_RECORD_HEADER } else { 0 });
                }
            }
        }
        Ok(Fill::More)
    }

    fn progress(&self) -> (u64, u64) {
        let done = match &self.reader {
            Reader::Mapped { reader, .. } => reader.bytes_read(),
            Reader::Chunked(r) => r.bytes_read(),
        };
        (done, self.total)
    }
}

/// Packet `i` of `batch` as a capture record.
fn record(batch: &PacketBatch, i: usize) -> Record<'_> {
    let m = &batch.packets()[i].meta;
    Record {
        index: m.index,
        offset: m.offset,
        timestamp: m.timestamp,
        orig_len: m.wire_len,
        data: batch.bytes(i),
        interface_id: m.port,
        interface: m.interface,
    }
}

/// Writing an output capture failed.
#[derive(Debug, thiserror::Error)]
#[error("writing {}: {error}", path.display())]
pub struct SinkError {
    pub path: PathBuf,
    pub error: PcapError,
}

/// One output capture.
struct Output {
    writer: CaptureWriter<std::io::BufWriter<File>>,
    path: PathBuf,
    verbatim: bool,
    /// Stored records waiting to be copied in one write: the backing, the
    /// byte range in it, and how many records.
    run: Option<(Backing, usize, usize, u64)>,
}

impl Output {
    fn err(&self, error: PcapError) -> SinkError {
        SinkError { path: self.path.clone(), error }
    }

    fn flush_run(&mut self) -> Result<(), SinkError> {
        if let Some((backing, start, end, count)) = self.run.take() {
            let bytes = &(*backing).as_ref()[start..end];
            self.writer.write_verbatim(bytes, count).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn write(&mut self, batch: &PacketBatch, i: usize) -> Result<(), SinkError> {
        if self.verbatim {
            if let (Some((start, stored)), Some(backing)) = (batch.stored_record(i), batch.backing()) {
                let end = start + stored.len();
                if let Some((b, _, run_end, count)) = &mut self.run {
                    if Arc::ptr_eq(b, backing) && *run_end == start {
                        *run_end = end;
                        *count += 1;
                        return Ok(());
                    }
                }
                self.flush_run()?;
                self.run = Some((Arc::clone(backing), start, end, 1));
                return Ok(());
            }
        }
        self.flush_run()?;
        self.writer.write(&record(batch, i)).map_err(|e| self.err(e))
    }
}

/// The pass and drop captures as a [`Sink`]: each packet goes to the one for
/// its verdict (either may be absent).
pub struct CaptureSinks {
    pass: Option<Output>,
    drop: Option<Output>,
}

impl CaptureSinks {
    /// Create the outputs. `format` chooses the container (default: by the
    /// path's extension, else the input's); `template` is a pcap input's
    /// header, written unchanged to pcap outputs.
    pub fn create(
        pass: Option<&Path>,
        drop: Option<&Path>,
        format: Option<OutputFormat>,
        input_format: Format,
        template: Option<PcapHeader>,
    ) -> Result<Self, SinkError> {
        let open = |path: Option<&Path>| -> Result<Option<Output>, SinkError> {
            let Some(p) = path else { return Ok(None) };
            let format = format.unwrap_or_else(|| OutputFormat::for_path(p, input_format));
            let template = if format == OutputFormat::Pcap { template } else { None };
            let writer = CaptureWriter::create(p, format, template)
                .map_err(|error| SinkError { path: p.to_path_buf(), error })?;
            let verbatim = writer.takes_verbatim() && input_format == Format::Pcap;
            Ok(Some(Output { writer, path: p.to_path_buf(), verbatim, run: None }))
        };
        Ok(CaptureSinks { pass: open(pass)?, drop: open(drop)? })
    }
}

impl Sink for CaptureSinks {
    type Error = SinkError;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), SinkError> {
        if self.pass.is_none() && self.drop.is_none() {
            return Ok(());
        }
        for (i, p) in batch.packets().iter().enumerate() {
            let out = match p.verdict {
                Verdict::Pass => &mut self.pass,
                Verdict::Drop => &mut self.drop,
            };
            if let Some(o) = out {
                o.write(batch, i)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        let mut first_err = None;
        for out in [self.pass.take(), self.drop.take()].into_iter().flatten() {
            let mut out = out;
            let r = out.flush_run().and_then(|()| {
                let Output { writer, path, .. } = out;
                writer.finish().map(|_| ()).map_err(|error| SinkError { path, error })
            });
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// A source that also writes every packet it yields, in the order it yields
/// them, to a capture (the demo's `--keep FILE`).
pub struct WriteThrough<S> {
    inner: S,
    writer: Option<CaptureWriter<std::io::BufWriter<File>>>,
    path: PathBuf,
}

/// The inner source failed, or writing the copy did.
#[derive(Debug, thiserror::Error)]
pub enum WriteThroughError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Source(E),
    #[error(transparent)]
    Write(SinkError),
}

impl<S> WriteThrough<S> {
    /// Write to `path` as pcap with `header`.
    pub fn new(inner: S, path: &Path, header: PcapHeader) -> Result<Self, SinkError> {
        let writer = CaptureWriter::create(path, OutputFormat::Pcap, Some(header))
            .map_err(|error| SinkError { path: path.to_path_buf(), error })?;
        Ok(WriteThrough { inner, writer: Some(writer), path: path.to_path_buf() })
    }

    /// Pass packets through without writing a copy.
    pub fn without_copy(inner: S) -> Self {
        WriteThrough { inner, writer: None, path: PathBuf::new() }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Finish the copy.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        match self.writer.take() {
            Some(w) => w.finish().map(|_| ()).map_err(|error| SinkError { path: self.path.clone(), error }),
            None => Ok(()),
        }
    }
}

impl<S: Source> Source for WriteThrough<S>
where
    S::Error: std::error::Error + 'static,
{
    type Error = WriteThroughError<S::Error>;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill, Self::Error> {
        let before = batch.len();
        let filled = self.inner.fill(batch, deadline);
        if let Some(w) = &mut self.writer {
            for i in before..batch.len() {
                w.write(&record(batch, i))
                    .map_err(|error| WriteThroughError::Write(SinkError { path: self.path.clone(), error }))?;
            }
        }
        filled.map_err(WriteThroughError::Source)
    }

    fn progress(&self) -> (u64, u64) {
        self.inner.progress()
    }

    fn is_live(&self) -> bool {
        self.inner.is_live()
    }
}
