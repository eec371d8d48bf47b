//! Streaming reader for pcap and pcapng.

use crate::{
    Endian, Format, Interface, PcapError, PcapErrorKind, PcapHeader, Record, Timestamp, TsResolution, MAX_BLOCK_LEN,
    MAX_PACKET_LEN, PCAPNG_BYTE_ORDER_MAGIC, PCAPNG_SHB, PCAP_MAGIC_MICROS, PCAP_MAGIC_NANOS,
};
use sluice_wire::LinkType;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

const BLOCK_IDB: u32 = 1;
const BLOCK_PB_OBSOLETE: u32 = 2;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;
const OPT_IF_TSRESOL: u16 = 9;
const MAX_OPTIONS: usize = 256;

/// Where a reader's bytes come from: a stream read into one reused buffer,
/// or bytes already in memory (a mapped file) that records borrow directly.
pub trait Input {
    /// Fill `dst` as far as the input allows; returns how many bytes were read.
    fn read_small(&mut self, dst: &mut [u8]) -> io::Result<usize>;
    /// Make the next `n` bytes the current body ([`Input::body`]); returns
    /// how many there were (fewer only at the end of the input).
    fn read_body(&mut self, n: usize) -> io::Result<usize>;
    /// The bytes of the last [`Input::read_body`].
    fn body(&self) -> &[u8];
    /// The bytes already in memory past the read position, readable
    /// without a copy or a `read()` (none for a stream).
    fn buffered(&self) -> &[u8] {
        &[]
    }
    /// Skip `skip` of the [`Input::buffered`] bytes, then make the next
    /// `n` the body: `read_small` and `read_body` without the copy or the
    /// checks, for a record known to be whole in the buffer. An input that
    /// returns buffered bytes implements this too; it is called only with
    /// `skip + n` within them.
    fn take_buffered(&mut self, skip: usize, n: usize) {
        let _ = (skip, n);
        unreachable!("an input with buffered bytes takes them")
    }
}

/// A stream read through one buffer the size of the largest body seen.
pub struct Streamed<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: Read> Input for Streamed<R> {
    fn read_small(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        read_full(&mut self.inner, dst)
    }
    fn read_body(&mut self, n: usize) -> io::Result<usize> {
        self.buf.resize(n, 0);
        let got = read_full(&mut self.inner, &mut self.buf)?;
        self.buf.truncate(got);
        Ok(got)
    }
    fn body(&self) -> &[u8] {
        &self.buf
    }
}

/// Bytes in memory: bodies are borrowed, never copied.
pub struct InMemory<B> {
    bytes: B,
    pos: usize,
    body: std::ops::Range<usize>,
}

impl<B: AsRef<[u8]>> InMemory<B> {
    pub fn new(bytes: B) -> Self {
        InMemory { bytes, pos: 0, body: 0..0 }
    }
    pub fn bytes(&self) -> &B {
        &self.bytes
    }
}

impl<B: AsRef<[u8]>> Input for InMemory<B> {
    fn read_small(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let all = self.bytes.as_ref();
        let n = dst.len().min(all.len() - self.pos);
        dst[..n].copy_from_slice(&all[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
    fn read_body(&mut self, n: usize) -> io::Result<usize> {
        let n = n.min(self.bytes.as_ref().len() - self.pos);
        self.body = self.pos..self.pos + n;
        self.pos += n;
        Ok(n)
    }
    fn body(&self) -> &[u8] {
        &self.bytes.as_ref()[self.body.clone()]
    }
    fn buffered(&self) -> &[u8] {
        &self.bytes.as_ref()[self.pos..]
    }
    #[inline]
    fn take_buffered(&mut self, skip: usize, n: usize) {
        self.body = self.pos + skip..self.pos + skip + n;
        self.pos = self.body.end;
    }
}

/// A stream read in large chunks that records borrow in place: one
/// `read()` per chunk (a kernel copy at memory speed, no page faults), and a
/// record's bytes are never copied again. A record that straddles the end
/// of a chunk is moved, with the rest of that chunk, to the start of the
/// next. Chunks are shared (`Arc`) so batches can hold on to them; a chunk
/// is reused once nobody else holds it.
pub struct Chunked<R> {
    inner: R,
    /// Its first `end` bytes are the stream's; a reused chunk keeps its
    /// length (the bytes past `end` are stale), so it is zeroed only once,
    /// not before every read: that was a second pass over every byte.
    chunk: Arc<Vec<u8>>,
    end: usize,
    pos: usize,
    body: std::ops::Range<usize>,
    chunk_size: usize,
    spare: Vec<Arc<Vec<u8>>>,
    eof: bool,
}

impl<R: Read> Chunked<R> {
    pub fn new(inner: R, chunk_size: usize) -> Self {
        Chunked {
            inner,
            chunk: Arc::new(Vec::new()),
            end: 0,
            pos: 0,
            body: 0..0,
            chunk_size: chunk_size.max(64),
            spare: Vec::new(),
            eof: false,
        }
    }

    /// The chunk the last body lies in. Index it by the bodies' offsets:
    /// past the bytes read into it, a reused chunk holds stale ones.
    pub fn chunk(&self) -> &Arc<Vec<u8>> {
        &self.chunk
    }

    /// Make `n` bytes from `pos` available in the current chunk, if the
    /// stream has them.
    fn ensure(&mut self, n: usize) -> io::Result<()> {
        if self.end - self.pos >= n || self.eof {
            return Ok(());
        }
        // A chunk no batch holds any more, or a new one.
        let mut next = match self.spare.iter().position(|c| Arc::strong_count(c) == 1) {
            Some(i) => self.spare.swap_remove(i),
            None => Arc::new(Vec::with_capacity(self.chunk_size)),
        };
        // The last body may still be read (a pcapng block's trailer follows
        // it): it moves along with the unread bytes.
        let keep = self.body.start.min(self.pos);
        let buf = Arc::get_mut(&mut next).expect("a spare chunk nobody else holds");
        let carried = self.end - keep;
        let want = self.chunk_size.max(n + (self.pos - keep));
        if buf.len() < want {
            buf.resize(want, 0);
        }
        buf[..carried].copy_from_slice(&self.chunk[keep..self.end]);
        let mut filled = carried;
        while filled < want {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(k) => filled += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            // Enough for this record and a full chunk's worth read: stop
            // here rather than wait on a slow pipe for the rest.
            if filled - (self.pos - keep) >= n && filled >= self.chunk_size / 2 {
                break;
            }
        }
        self.end = filled;
        let old = std::mem::replace(&mut self.chunk, next);
        if self.spare.len() < 64 {
            self.spare.push(old);
        }
        self.body = self.body.start - keep..self.body.end - keep;
        self.pos -= keep;
        Ok(())
    }
}

impl<R: Read> Input for Chunked<R> {
    fn read_small(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        self.ensure(dst.len())?;
        debug_assert!(self.body.end <= self.pos);
        let n = dst.len().min(self.end - self.pos);
        dst[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
    fn read_body(&mut self, n: usize) -> io::Result<usize> {
        self.ensure(n)?;
        let n = n.min(self.end - self.pos);
        self.body = self.pos..self.pos + n;
        self.pos += n;
        Ok(n)
    }
    fn body(&self) -> &[u8] {
        &self.chunk[self.body.clone()]
    }
    fn buffered(&self) -> &[u8] {
        &self.chunk[self.pos..self.end]
    }
    #[inline]
    fn take_buffered(&mut self, skip: usize, n: usize) {
        self.body = self.pos + skip..self.pos + skip + n;
        self.pos = self.body.end;
    }
}

/// The pcap record at the start of `buf`, when it lies whole there with a
/// valid length: its 16-byte header and its captured length. Anything else
/// (cut by the buffer's end, too long) is left to the general path, which
/// reads or reports it.
#[inline]
fn whole_pcap_record(buf: &[u8], e: Endian) -> Option<([u8; 16], usize)> {
    let h = *buf.first_chunk::<16>()?;
    let caplen = e.u32(&h[8..]);
    (caplen <= MAX_PACKET_LEN && buf.len() - 16 >= caplen as usize).then_some((h, caplen as usize))
}

/// Reads packet records one at a time from a pcap or pcapng capture.
///
/// Memory use is one buffer the size of the largest record or block seen
/// (bounded by [`MAX_BLOCK_LEN`]), or none for input already in memory,
/// whose records are borrowed in place; a file is never loaded whole. After
/// an error the reader is finished: further calls return `Ok(None)`.
pub struct CaptureReader<I> {
    inner: I,
    format: Format,
    pcap_header: Option<PcapHeader>,
    /// Byte order of the current pcapng section (or the pcap file).
    endian: Endian,
    /// All interfaces seen, across pcapng sections.
    interfaces: Vec<Interface>,
    /// Index in `interfaces` where the current section's interfaces start.
    section_base: usize,
    offset: u64,
    records: u64,
    warnings: Vec<String>,
    done: bool,
}

impl CaptureReader<Streamed<BufReader<File>>> {
    /// Open a capture file (`-`: standard input), detecting pcap or pcapng
    /// from its magic number.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let file = crate::stdio::open(path.as_ref()).map_err(PcapError::open)?;
        PcapError::check_opened(&file)?;
        CaptureReader::new(BufReader::with_capacity(1 << 20, file))
    }
}

impl<R: Read> CaptureReader<Streamed<R>> {
    /// Read the file header (pcap) or first section header (pcapng) from a stream.
    pub fn new(inner: R) -> Result<Self, PcapError> {
        CaptureReader::with_input(Streamed { inner, buf: Vec::with_capacity(65_536) })
    }
}

impl<R: Read> CaptureReader<Chunked<R>> {
    /// Read a stream in chunks of `chunk_size` bytes that records borrow.
    pub fn chunked(inner: R, chunk_size: usize) -> Result<Self, PcapError> {
        CaptureReader::with_input(Chunked::new(inner, chunk_size))
    }

    /// The chunk the last record's data lies in.
    pub fn chunk(&self) -> &Arc<Vec<u8>> {
        self.inner.chunk()
    }
}

impl<B: AsRef<[u8]>> CaptureReader<InMemory<B>> {
    /// Read a capture held in memory (a mapped file): records borrow it.
    pub fn from_bytes(bytes: B) -> Result<Self, PcapError> {
        CaptureReader::with_input(InMemory::new(bytes))
    }

    /// The whole input, which every record's data is a slice of.
    pub fn input_bytes(&self) -> &[u8] {
        self.inner.bytes().as_ref()
    }
}

impl<I: Input> CaptureReader<I> {
    /// Read the file header (pcap) or first section header (pcapng).
    pub fn with_input(mut inner: I) -> Result<Self, PcapError> {
        let mut magic = [0u8; 4];
        let got = inner.read_small(&mut magic).map_err(|e| PcapError::new(e.into(), 0, 0))?;
        if got < 4 {
            return Err(PcapError::new(PcapErrorKind::TruncatedFileHeader { got }, 0, 0));
        }
        let mut r = CaptureReader {
            inner,
            format: Format::Pcap,
            pcap_header: None,
            endian: Endian(false),
            interfaces: Vec::new(),
            section_base: 0,
            offset: 0,
            records: 0,
            warnings: Vec::new(),
            done: false,
        };
        let le = u32::from_le_bytes(magic);
        match le {
            PCAP_MAGIC_MICROS | PCAP_MAGIC_NANOS => r.read_pcap_header(magic, false)?,
            m if m.swap_bytes() == PCAP_MAGIC_MICROS || m.swap_bytes() == PCAP_MAGIC_NANOS => {
                r.read_pcap_header(magic, true)?
            }
            PCAPNG_SHB => {
                r.format = Format::Pcapng;
                r.read_section_header()?;
            }
            0xa1b2_cd34 | 0x34cd_b2a1 => return Err(PcapError::new(PcapErrorKind::ModifiedPcap, 0, 0)),
            other => return Err(PcapError::new(PcapErrorKind::BadMagic(other.swap_bytes()), 0, 0)),
        }
        Ok(r)
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The global header, for pcap input.
    pub fn pcap_header(&self) -> Option<&PcapHeader> {
        self.pcap_header.as_ref()
    }

    /// Interfaces seen so far (pcapng interfaces appear as the file is read).
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Bytes consumed from the stream so far.
    pub fn bytes_read(&self) -> u64 {
        self.offset
    }

    /// Packet records returned so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    /// Oddities that did not stop reading (for example a snap length of 0).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Pcap only: up to `max` of the records that lie whole in the bytes
    /// already in memory, each handed to `each` as [`next_record`] would
    /// return it; returns how many. It stops before the first record that
    /// is not whole there or has a bad length, which [`next_record`] then
    /// reads (or reports) the general way. A batch is filled from here
    /// without the per-record calls, copies and checks of the general way;
    /// the property tests read every capture both ways.
    ///
    /// [`next_record`]: CaptureReader::next_record
    #[inline]
    pub fn whole_pcap_records(&mut self, max: usize, mut each: impl FnMut(Record<'_>)) -> usize {
        if self.done || self.format != Format::Pcap {
            return 0;
        }
        let (e, nanos) = (self.endian, self.pcap_header.is_some_and(|h| h.nanos));
        let Some(&interface) = self.interfaces.first() else { return 0 };
        let buf = self.inner.buffered();
        let (mut at, mut n, mut body) = (0, 0, 0..0);
        while n < max {
            let Some((h, caplen)) = whole_pcap_record(buf.get(at..).unwrap_or_default(), e) else { break };
            let start = at + 16;
            body = start..start + caplen;
            each(Record {
                index: self.records + n as u64,
                offset: self.offset + at as u64,
                timestamp: Timestamp::Split { secs: e.u32(&h[0..]), frac: e.u32(&h[4..]), nanos },
                orig_len: e.u32(&h[12..]),
                data: &buf[body.clone()],
                interface_id: 0,
                interface,
            });
            at = body.end;
            n += 1;
        }
        if n > 0 {
            self.inner.take_buffered(body.start, body.len());
            self.records += n as u64;
            self.offset += at as u64;
        }
        n
    }

    /// The next packet record, `Ok(None)` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, PcapError> {
        if self.done {
            return Ok(None);
        }
        let result = match self.format {
            Format::Pcap => self.next_pcap(),
            Format::Pcapng => self.next_pcapng(),
        };
        match result {
            Ok(Some(rec)) => {
                self.records += 1;
                let data = &self.inner.body()[rec.data_start..rec.data_start + rec.caplen];
                Ok(Some(Record {
                    index: self.records - 1,
                    offset: rec.offset,
                    timestamp: rec.timestamp,
                    orig_len: rec.orig_len,
                    data,
                    interface_id: rec.interface_id,
                    interface: self.interfaces[rec.interface_id as usize],
                }))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(kind) => {
                self.done = true;
                Err(PcapError::new(kind, self.records, self.offset))
            }
        }
    }

    fn err_at(&self, kind: PcapErrorKind) -> PcapError {
        PcapError::new(kind, self.records, self.offset)
    }

    fn read_pcap_header(&mut self, magic: [u8; 4], big_endian: bool) -> Result<(), PcapError> {
        let mut rest = [0u8; PcapHeader::LEN - 4];
        let got = self.inner.read_small(&mut rest).map_err(|e| self.err_at(e.into()))?;
        if got < rest.len() {
            return Err(self.err_at(PcapErrorKind::TruncatedFileHeader { got: got + 4 }));
        }
        let e = Endian(big_endian);
        let h = PcapHeader {
            big_endian,
            nanos: e.u32(&magic) == PCAP_MAGIC_NANOS,
            version_major: e.u16(&rest[0..]),
            version_minor: e.u16(&rest[2..]),
            thiszone: e.u32(&rest[4..]) as i32,
            sigfigs: e.u32(&rest[8..]),
            snaplen: e.u32(&rest[12..]),
            linktype_field: e.u32(&rest[16..]),
        };
        if h.version_major != 2 {
            return Err(
                self.err_at(PcapErrorKind::UnsupportedVersion { major: h.version_major, minor: h.version_minor })
            );
        }
        if h.snaplen == 0 {
            self.warnings
                .push(format!("pcap header snap length is 0; treating it as {MAX_PACKET_LEN}, as libpcap does"));
        }
        self.offset = PcapHeader::LEN as u64;
        self.endian = e;
        let snaplen = if h.snaplen == 0 { MAX_PACKET_LEN } else { h.snaplen };
        let ts_resolution = if h.nanos { TsResolution::NANOS } else { TsResolution::MICROS };
        self.interfaces.push(Interface { link_type: h.link_type(), snaplen, ts_resolution });
        self.pcap_header = Some(h);
        Ok(())
    }

    fn next_pcap(&mut self) -> Result<Option<RawRecord>, PcapErrorKind> {
        let e = self.endian;
        // The common case, a record whole in memory, read in place; anything
        // else (a stream, a record cut by the buffer's end, a bad length)
        // goes the general way, which reports what is wrong.
        let (hdr, caplen) = if let Some((hdr, caplen)) = whole_pcap_record(self.inner.buffered(), e) {
            self.inner.take_buffered(16, caplen);
            (hdr, caplen)
        } else {
            let mut hdr = [0u8; 16];
            let got = self.inner.read_small(&mut hdr)?;
            if got == 0 {
                return Ok(None);
            }
            if got < hdr.len() {
                return Err(PcapErrorKind::TruncatedRecordHeader { got, need: hdr.len() });
            }
            let caplen = e.u32(&hdr[8..]);
            if caplen > MAX_PACKET_LEN {
                return Err(PcapErrorKind::RecordTooLong { len: caplen, max: MAX_PACKET_LEN });
            }
            let caplen = caplen as usize;
            let got = self.inner.read_body(caplen)?;
            if got < caplen {
                return Err(PcapErrorKind::TruncatedRecordData { got, need: caplen });
            }
            (hdr, caplen)
        };
        let offset = self.offset;
        self.offset += (hdr.len() + caplen) as u64;
        let nanos = self.pcap_header.is_some_and(|h| h.nanos);
        Ok(Some(RawRecord {
            offset,
            timestamp: Timestamp::Split { secs: e.u32(&hdr[0..]), frac: e.u32(&hdr[4..]), nanos },
            orig_len: e.u32(&hdr[12..]),
            data_start: 0,
            caplen,
            interface_id: 0,
        }))
    }

    /// Read the rest of a section header block whose 4 type bytes were consumed.
    fn read_section_header(&mut self) -> Result<(), PcapError> {
        let mut len_and_bom = [0u8; 8];
        let got = self.inner.read_small(&mut len_and_bom).map_err(|e| self.err_at(e.into()))?;
        if got < len_and_bom.len() {
            return Err(self.err_at(PcapErrorKind::TruncatedRecordHeader { got: got + 4, need: 12 }));
        }
        let (len, bom) = len_and_bom.split_at(4);
        self.section_header_body(len, bom)
    }

    /// Set the section's byte order from its magic, then read and check the
    /// rest of the block. Type, length and byte-order magic are consumed.
    fn section_header_body(&mut self, len_bytes: &[u8], bom: &[u8]) -> Result<(), PcapError> {
        let bom_le = u32::from_le_bytes([bom[0], bom[1], bom[2], bom[3]]);
        self.endian = match bom_le {
            PCAPNG_BYTE_ORDER_MAGIC => Endian(false),
            m if m.swap_bytes() == PCAPNG_BYTE_ORDER_MAGIC => Endian(true),
            other => return Err(self.err_at(PcapErrorKind::BadByteOrderMagic(other))),
        };
        let len = self.endian.u32(len_bytes);
        self.check_block_len(len).map_err(|k| self.err_at(k))?;
        if len < 28 {
            return Err(self.err_at(PcapErrorKind::BlockTooShort { block: "section header", len }));
        }
        // Version, section length and options follow; 16 bytes are type,
        // length, byte-order magic and the trailer.
        self.read_block_rest(len, len as usize - 16).map_err(|k| self.err_at(k))?;
        self.offset += u64::from(len);
        self.section_base = self.interfaces.len();
        Ok(())
    }

    fn check_block_len(&self, len: u32) -> Result<(), PcapErrorKind> {
        if len < 12 || !len.is_multiple_of(4) {
            return Err(PcapErrorKind::BadBlockLength(len));
        }
        if len > MAX_BLOCK_LEN {
            return Err(PcapErrorKind::BlockTooLong { len, max: MAX_BLOCK_LEN });
        }
        Ok(())
    }

    /// Read `body_len` body bytes into `buf` and check the 4-byte trailer.
    fn read_block_rest(&mut self, len: u32, body_len: usize) -> Result<(), PcapErrorKind> {
        let got = self.inner.read_body(body_len)?;
        if got < body_len {
            return Err(PcapErrorKind::TruncatedRecordData { got, need: body_len });
        }
        let mut trailer = [0u8; 4];
        let got = self.inner.read_small(&mut trailer)?;
        if got < 4 {
            return Err(PcapErrorKind::TruncatedRecordData { got, need: 4 });
        }
        let trailer = self.endian.u32(&trailer);
        if trailer != len {
            return Err(PcapErrorKind::BlockTrailerMismatch { len, trailer });
        }
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<RawRecord>, PcapErrorKind> {
        loop {
            let mut head = [0u8; 8];
            let got = self.inner.read_small(&mut head)?;
            if got == 0 {
                return Ok(None);
            }
            if got < head.len() {
                return Err(PcapErrorKind::TruncatedRecordHeader { got, need: head.len() });
            }
            let block_type = self.endian.u32(&head[0..]);
            if block_type == PCAPNG_SHB {
                // A new section: it may switch byte order.
                self.read_section_header_after(head).map_err(|e| e.kind)?;
                continue;
            }
            let len = self.endian.u32(&head[4..]);
            self.check_block_len(len)?;
            let body_len = len as usize - 12;
            self.read_block_rest(len, body_len)?;
            let offset = self.offset;
            let parsed = match block_type {
                BLOCK_IDB => self.parse_idb(len).map(|()| None),
                BLOCK_EPB => self.parse_packet_block(len, offset, false).map(Some),
                BLOCK_SPB => self.parse_spb(len, offset).map(Some),
                BLOCK_PB_OBSOLETE => self.parse_packet_block(len, offset, true).map(Some),
                // Name resolution, statistics, custom and unknown blocks: skipped.
                _ => Ok(None),
            };
            let parsed = parsed?;
            self.offset += u64::from(len);
            if let Some(rec) = parsed {
                return Ok(Some(rec));
            }
        }
    }

    /// A section header met mid-stream; its type and length are in `head`.
    fn read_section_header_after(&mut self, head: [u8; 8]) -> Result<(), PcapError> {
        let mut bom = [0u8; 4];
        let got = self.inner.read_small(&mut bom).map_err(|e| self.err_at(e.into()))?;
        if got < bom.len() {
            return Err(self.err_at(PcapErrorKind::TruncatedRecordHeader { got: got + 8, need: 12 }));
        }
        self.section_header_body(&head[4..], &bom)
    }

    fn parse_idb(&mut self, len: u32) -> Result<(), PcapErrorKind> {
        let body = self.inner.body();
        if body.len() < 8 {
            return Err(PcapErrorKind::BlockTooShort { block: "interface description", len });
        }
        let e = self.endian;
        let link_type = LinkType(u32::from(e.u16(&body[0..])));
        let snaplen = e.u32(&body[4..]);
        let mut ts_resolution = TsResolution::MICROS;
        for (code, value) in Options::new(&body[8..], e) {
            if code == OPT_IF_TSRESOL && value.len() == 1 {
                ts_resolution = TsResolution(value[0]);
            }
        }
        if ts_resolution.units_per_sec().is_none() {
            self.warnings.push(format!(
                "interface {} has unusable timestamp resolution byte 0x{:02x}",
                self.interfaces.len(),
                ts_resolution.0
            ));
        }
        let snaplen = if snaplen == 0 { MAX_PACKET_LEN } else { snaplen };
        self.interfaces.push(Interface { link_type, snaplen, ts_resolution });
        Ok(())
    }

    fn interface(&self, local_id: u32) -> Result<u32, PcapErrorKind> {
        let count = self.interfaces.len() - self.section_base;
        if (local_id as usize) < count {
            Ok((self.section_base + local_id as usize) as u32)
        } else {
            Err(PcapErrorKind::UnknownInterface { id: local_id, count })
        }
    }

    /// An Enhanced Packet Block, or the obsolete Packet Block that differs
    /// only in a 16-bit interface id followed by a drop count.
    fn parse_packet_block(&mut self, len: u32, offset: u64, obsolete: bool) -> Result<RawRecord, PcapErrorKind> {
        const FIXED: usize = 20;
        let e = self.endian;
        let body = self.inner.body();
        if body.len() < FIXED {
            let block = if obsolete { "packet" } else { "enhanced packet" };
            return Err(PcapErrorKind::BlockTooShort { block, len });
        }
        let local_id = if obsolete { u32::from(e.u16(&body[0..])) } else { e.u32(&body[0..]) };
        let units = (u64::from(e.u32(&body[4..])) << 32) | u64::from(e.u32(&body[8..]));
        let caplen = e.u32(&body[12..]);
        let orig_len = e.u32(&body[16..]);
        if caplen > MAX_PACKET_LEN {
            return Err(PcapErrorKind::RecordTooLong { len: caplen, max: MAX_PACKET_LEN });
        }
        if caplen as usize > body.len() - FIXED {
            return Err(PcapErrorKind::CaplenOverrunsBlock { caplen });
        }
        let interface_id = self.interface(local_id)?;
        let resolution = self.interfaces[interface_id as usize].ts_resolution;
        Ok(RawRecord {
            offset,
            timestamp: Timestamp::Units { units, resolution },
            orig_len,
            data_start: FIXED,
            caplen: caplen as usize,
            interface_id,
        })
    }

    fn parse_spb(&mut self, len: u32, offset: u64) -> Result<RawRecord, PcapErrorKind> {
        let body = self.inner.body();
        if body.len() < 4 {
            return Err(PcapErrorKind::BlockTooShort { block: "simple packet", len });
        }
        let interface_id = self.interface(0)?;
        let iface = self.interfaces[interface_id as usize];
        let orig_len = self.endian.u32(&body[0..]);
        // The captured length is implied: the original length cut to the snap length.
        let caplen = orig_len.min(iface.snaplen).min(MAX_PACKET_LEN) as usize;
        if caplen > body.len() - 4 {
            return Err(PcapErrorKind::CaplenOverrunsBlock { caplen: caplen as u32 });
        }
        Ok(RawRecord {
            offset,
            timestamp: Timestamp::Units { units: 0, resolution: iface.ts_resolution },
            orig_len,
            data_start: 4,
            caplen,
            interface_id,
        })
    }
}

/// Where a record's fields and bytes sit, before it is lent out.
struct RawRecord {
    offset: u64,
    timestamp: Timestamp,
    orig_len: u32,
    data_start: usize,
    caplen: usize,
    interface_id: u32,
}

/// Iterator over pcapng options (code, value); stops at opt_endofopt, at a
/// malformed option, or after [`MAX_OPTIONS`].
struct Options<'a> {
    bytes: &'a [u8],
    endian: Endian,
    seen: usize,
}

impl<'a> Options<'a> {
    fn new(bytes: &'a [u8], endian: Endian) -> Self {
        Options { bytes, endian, seen: 0 }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.len() < 4 || self.seen >= MAX_OPTIONS {
            return None;
        }
        let code = self.endian.u16(&self.bytes[0..]);
        let len = usize::from(self.endian.u16(&self.bytes[2..]));
        if code == 0 {
            return None;
        }
        let padded = (len + 3) & !3;
        let value = self.bytes.get(4..4 + len)?;
        self.bytes = self.bytes.get(4 + padded..).unwrap_or_default();
        self.seen += 1;
        Some((code, value))
    }
}

/// Fill `buf` as far as the stream allows; returns how many bytes were read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
