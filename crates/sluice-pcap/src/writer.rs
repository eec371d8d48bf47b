//! Writers for pcap and pcapng that keep timestamps and bytes as read.

use crate::{
    Endian, Format, Interface, PcapError, PcapErrorKind, PcapHeader, Record, Timestamp, TsResolution,
    PCAPNG_BYTE_ORDER_MAGIC, PCAPNG_SHB,
};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

const OPT_COMMENT: u16 = 1;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
/// Fixed part of an Enhanced Packet Block: type, length, interface id,
/// timestamp (2 words), captured and original length, and the trailing length.
const EPB_FIXED: usize = 32;
/// An option's length is 16 bits, padding included.
const MAX_OPTION_LEN: usize = 65_532;

/// Container to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Pcap,
    Pcapng,
}

impl OutputFormat {
    /// `.pcapng` → pcapng, `.pcap`/`.cap` → pcap, anything else → like the input.
    pub fn for_path(path: &Path, input: Format) -> OutputFormat {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("pcapng") | Some("ntar") => OutputFormat::Pcapng,
            Some("pcap") | Some("cap") | Some("dmp") => OutputFormat::Pcap,
            _ => match input {
                Format::Pcap => OutputFormat::Pcap,
                Format::Pcapng => OutputFormat::Pcapng,
            },
        }
    }
}

enum Kind {
    Pcap {
        header: PcapHeader,
        /// The header came from a pcap input and is written unchanged.
        exact: bool,
        header_written: bool,
    },
    Pcapng {
        /// Reader interface id → output interface id.
        map: Vec<Option<u32>>,
        next_id: u32,
    },
}

/// Writes records to pcap or pcapng.
///
/// Written as pcap from a pcap input with the input's header, the output is
/// byte-identical to the input for the records written. pcapng output is
/// little-endian, one section, one interface block per input interface used.
pub struct CaptureWriter<W: Write> {
    inner: W,
    kind: Kind,
    records: u64,
    bytes: u64,
}

impl CaptureWriter<BufWriter<File>> {
    /// Create `path` (`-`: standard output). `template` is the input's pcap
    /// header, if the input was pcap.
    pub fn create(
        path: impl AsRef<Path>,
        format: OutputFormat,
        template: Option<PcapHeader>,
    ) -> Result<Self, PcapError> {
        let file = crate::stdio::create(path.as_ref()).map_err(|e| PcapError::new(e.into(), 0, 0))?;
        CaptureWriter::new(BufWriter::with_capacity(1 << 20, file), format, template)
    }
}

impl<W: Write> CaptureWriter<W> {
    pub fn new(inner: W, format: OutputFormat, template: Option<PcapHeader>) -> Result<Self, PcapError> {
        let kind = match format {
            OutputFormat::Pcap => Kind::Pcap {
                header: template
                    .unwrap_or_else(|| PcapHeader::new(sluice_wire::LinkType::ETHERNET, crate::MAX_PACKET_LEN, true)),
                exact: template.is_some(),
                header_written: false,
            },
            OutputFormat::Pcapng => Kind::Pcapng { map: Vec::new(), next_id: 0 },
        };
        let mut w = CaptureWriter { inner, kind, records: 0, bytes: 0 };
        if format == OutputFormat::Pcapng {
            w.write_section_header()?;
        }
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), PcapError> {
        self.inner.write_all(bytes).map_err(|e| PcapError::new(e.into(), self.records, self.bytes))?;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn write_section_header(&mut self) -> Result<(), PcapError> {
        let mut b = Vec::with_capacity(28);
        b.extend_from_slice(&PCAPNG_SHB.to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        b.extend_from_slice(&PCAPNG_BYTE_ORDER_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
        b.extend_from_slice(&28u32.to_le_bytes());
        self.put(&b)
    }

    /// Whether records stored in the template's pcap file can be copied in
    /// unchanged: pcap output with the input's own header (so the copy is
    /// exactly what [`CaptureWriter::write`] would produce).
    pub fn takes_verbatim(&self) -> bool {
        matches!(self.kind, Kind::Pcap { exact: true, .. })
    }

    /// Append `count` whole records (16-byte headers and data) exactly as
    /// they are stored in a pcap file with this writer's header. Only when
    /// [`CaptureWriter::takes_verbatim`]; one large write instead of two small
    /// ones per record.
    pub fn write_verbatim(&mut self, records: &[u8], count: u64) -> Result<(), PcapError> {
        let Kind::Pcap { header, exact: true, header_written } = &mut self.kind else {
            panic!("write_verbatim needs pcap output with the input's header");
        };
        if !*header_written {
            *header_written = true;
            let bytes = header.to_bytes();
            self.put(&bytes)?;
        }
        self.put(records)?;
        self.records += count;
        Ok(())
    }

    /// Append one record.
    pub fn write(&mut self, rec: &Record<'_>) -> Result<(), PcapError> {
        match &mut self.kind {
            Kind::Pcap { .. } => self.write_pcap(rec)?,
            Kind::Pcapng { .. } => self.write_pcapng(rec)?,
        }
        self.records += 1;
        Ok(())
    }

    fn write_pcap(&mut self, rec: &Record<'_>) -> Result<(), PcapError> {
        let Kind::Pcap { header, exact, header_written } = &mut self.kind else { unreachable!() };
        if !*header_written {
            if !*exact {
                header.linktype_field = rec.interface.link_type.0;
                header.snaplen = rec.interface.snaplen;
            }
            *header_written = true;
            let bytes = header.to_bytes();
            self.put(&bytes)?;
        }
        let Kind::Pcap { header, .. } = &self.kind else { unreachable!() };
        let header = *header;
        if header.link_type() != rec.interface.link_type {
            return Err(PcapError::new(
                PcapErrorKind::LinkTypeMismatch { expected: header.link_type().0, got: rec.interface.link_type.0 },
                self.records,
                self.bytes,
            ));
        }
        let (secs, frac) = match rec.timestamp {
            Timestamp::Split { secs, frac, nanos } if nanos == header.nanos => (secs, frac),
            ts => {
                let ns = ts.as_nanos();
                let per_sec = 1_000_000_000u128;
                let frac = ns % per_sec;
                let secs = u32::try_from(ns / per_sec)
                    .map_err(|_| PcapError::new(PcapErrorKind::TimestampOutOfRange, self.records, self.bytes))?;
                (secs, if header.nanos { frac } else { frac / 1000 } as u32)
            }
        };
        let e = Endian(header.big_endian);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&e.u32_bytes(secs));
        h[4..8].copy_from_slice(&e.u32_bytes(frac));
        h[8..12].copy_from_slice(&e.u32_bytes(rec.data.len() as u32));
        h[12..16].copy_from_slice(&e.u32_bytes(rec.orig_len));
        self.put(&h)?;
        self.put(rec.data)
    }

    fn write_pcapng(&mut self, rec: &Record<'_>) -> Result<(), PcapError> {
        let resolution = match rec.timestamp {
            Timestamp::Units { resolution, .. } => resolution,
            Timestamp::Split { nanos: true, .. } => TsResolution::NANOS,
            Timestamp::Split { nanos: false, .. } => TsResolution::MICROS,
        };
        let out_id = self.pcapng_interface(rec.interface_id as usize, rec.interface, resolution)?;
        let units = match rec.timestamp {
            Timestamp::Units { units, .. } => units,
            Timestamp::Split { secs, frac, nanos } => {
                u64::from(secs) * if nanos { 1_000_000_000 } else { 1_000_000 } + u64::from(frac)
            }
        };
        self.put_packet_block(out_id, units, rec.orig_len, rec.data, None)
    }

    /// One Enhanced Packet Block; without a comment exactly the block
    /// [`CaptureWriter::write`] always wrote (no options at all).
    fn put_packet_block(
        &mut self,
        id: u32,
        units: u64,
        orig_len: u32,
        data: &[u8],
        comment: Option<&str>,
    ) -> Result<(), PcapError> {
        let caplen = data.len() as u32;
        let padded = pad4(data.len());
        let len = packet_block_len(data.len(), comment) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&6u32.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&id.to_le_bytes());
        h[12..16].copy_from_slice(&((units >> 32) as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(units as u32).to_le_bytes());
        h[20..24].copy_from_slice(&caplen.to_le_bytes());
        h[24..28].copy_from_slice(&orig_len.to_le_bytes());
        self.put(&h)?;
        self.put(data)?;
        self.put(&[0u8; 3][..padded - data.len()])?;
        if let Some(c) = comment {
            let mut opts = Vec::with_capacity(options_len(&[c.len()]));
            put_option(&mut opts, OPT_COMMENT, c.as_bytes());
            opts.extend_from_slice(&[0u8; 4]); // opt_endofopt
            self.put(&opts)?;
        }
        self.put(&len.to_le_bytes())
    }

    /// The output id for an input interface, writing its description block on first use.
    fn pcapng_interface(
        &mut self,
        input_id: usize,
        iface: Interface,
        resolution: TsResolution,
    ) -> Result<u32, PcapError> {
        let Kind::Pcapng { map, next_id } = &mut self.kind else { unreachable!() };
        if let Some(Some(id)) = map.get(input_id) {
            return Ok(*id);
        }
        if map.len() <= input_id {
            map.resize(input_id + 1, None);
        }
        let id = *next_id;
        map[input_id] = Some(id);
        *next_id += 1;
        let b = interface_block(iface.link_type, iface.snaplen, resolution, None);
        self.put(&b)?;
        Ok(id)
    }

    /// pcapng output only: describe one more interface, named `name`
    /// (`if_name`) when given, and return the id to write its packets with
    /// ([`CaptureWriter::write_packet`]). Unlike [`CaptureWriter::write`],
    /// which declares an interface per input interface on first use, the
    /// caller chooses when (a new file after a rotation needs them again).
    pub fn add_interface(
        &mut self,
        link_type: sluice_wire::LinkType,
        snaplen: u32,
        resolution: TsResolution,
        name: Option<&str>,
    ) -> Result<u32, PcapError> {
        if name.is_some_and(|n| n.len() > MAX_OPTION_LEN) {
            return Err(self.invalid(format!("an interface name is at most {MAX_OPTION_LEN} bytes")));
        }
        let Kind::Pcapng { next_id, .. } = &mut self.kind else {
            return Err(self.needs_pcapng());
        };
        let id = *next_id;
        *next_id += 1;
        let b = interface_block(link_type, snaplen, resolution, name);
        self.put(&b)?;
        Ok(id)
    }

    /// pcapng output only: one packet on interface `id` (from
    /// [`CaptureWriter::add_interface`]), its timestamp in units of that
    /// interface's resolution, with an `opt_comment` when given.
    pub fn write_packet(
        &mut self,
        id: u32,
        units: u64,
        orig_len: u32,
        data: &[u8],
        comment: Option<&str>,
    ) -> Result<(), PcapError> {
        let Kind::Pcapng { next_id, .. } = &self.kind else {
            return Err(self.needs_pcapng());
        };
        if id >= *next_id {
            return Err(self.invalid(format!("no interface {id} was declared")));
        }
        if comment.is_some_and(|c| c.len() > MAX_OPTION_LEN) {
            return Err(self.invalid(format!("a comment is at most {MAX_OPTION_LEN} bytes")));
        }
        self.put_packet_block(id, units, orig_len, data, comment)?;
        self.records += 1;
        Ok(())
    }

    fn needs_pcapng(&self) -> PcapError {
        self.invalid("named interfaces and comments need pcapng output".into())
    }

    /// A call this writer cannot honour (nothing was written).
    fn invalid(&self, message: String) -> PcapError {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
        PcapError::new(PcapErrorKind::Io(e), self.records, self.bytes)
    }

    /// Bytes written so far (headers included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Packet records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Push what is buffered down to the sink (a file written while a
    /// program runs, readable before it ends).
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.inner.flush().map_err(|e| PcapError::new(e.into(), self.records, self.bytes))
    }

    /// Write a header if nothing was written, flush, and return the sink.
    pub fn finish(mut self) -> Result<W, PcapError> {
        if let Kind::Pcap { header, header_written: false, .. } = &self.kind {
            let bytes = header.to_bytes();
            self.put(&bytes)?;
        }
        self.inner.flush().map_err(|e| PcapError::new(e.into(), self.records, self.bytes))?;
        Ok(self.inner)
    }
}

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Bytes of the options holding values of these lengths, opt_endofopt
/// included (0 without any).
fn options_len(values: &[usize]) -> usize {
    if values.is_empty() {
        return 0;
    }
    values.iter().map(|&v| 4 + pad4(v)).sum::<usize>() + 4
}

/// One option: code, length, value padded to 32 bits.
fn put_option(b: &mut Vec<u8>, code: u16, value: &[u8]) {
    b.extend_from_slice(&code.to_le_bytes());
    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
    b.extend_from_slice(value);
    b.resize(b.len() + pad4(value.len()) - value.len(), 0);
}

/// The length of the Enhanced Packet Block [`CaptureWriter::write_packet`]
/// writes for `data_len` bytes and this comment (to decide on a rotation
/// before writing it).
pub fn packet_block_len(data_len: usize, comment: Option<&str>) -> u64 {
    let opts: &[usize] = match comment {
        Some(c) => &[c.len()],
        None => &[],
    };
    (EPB_FIXED + pad4(data_len) + options_len(opts)) as u64
}

/// The length of the Interface Description Block
/// [`CaptureWriter::add_interface`] writes.
pub fn interface_block_len(resolution: TsResolution, name: Option<&str>) -> u64 {
    let mut opts = Vec::with_capacity(2);
    if let Some(n) = name {
        opts.push(n.len());
    }
    if resolution != TsResolution::MICROS {
        opts.push(1);
    }
    (20 + options_len(&opts)) as u64
}

/// An Interface Description Block. Without a name it is byte for byte the
/// block the writer always wrote: `if_tsresol` only when not microseconds
/// (the default), no options otherwise.
fn interface_block(
    link_type: sluice_wire::LinkType,
    snaplen: u32,
    resolution: TsResolution,
    name: Option<&str>,
) -> Vec<u8> {
    let len = interface_block_len(resolution, name) as u32;
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&(link_type.0 as u16).to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&snaplen.to_le_bytes());
    if let Some(n) = name {
        put_option(&mut b, OPT_IF_NAME, n.as_bytes());
    }
    if resolution != TsResolution::MICROS {
        put_option(&mut b, OPT_IF_TSRESOL, &[resolution.0]);
    }
    if len > 20 {
        b.extend_from_slice(&[0u8; 4]); // opt_endofopt
    }
    b.extend_from_slice(&len.to_le_bytes());
    debug_assert_eq!(b.len(), len as usize);
    b
}
