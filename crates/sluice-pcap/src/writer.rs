//! Writers for pcap and pcapng that keep timestamps and bytes as read.

use crate::{
    Endian, Format, Interface, PcapError, PcapErrorKind, PcapHeader, Record, Timestamp, TsResolution,
    PCAPNG_BYTE_ORDER_MAGIC, PCAPNG_SHB,
};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

const OPT_IF_TSRESOL: u16 = 9;

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
        let caplen = rec.data.len() as u32;
        let padded = (rec.data.len() + 3) & !3;
        let len = (32 + padded) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&6u32.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&out_id.to_le_bytes());
        h[12..16].copy_from_slice(&((units >> 32) as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(units as u32).to_le_bytes());
        h[20..24].copy_from_slice(&caplen.to_le_bytes());
        h[24..28].copy_from_slice(&rec.orig_len.to_le_bytes());
        self.put(&h)?;
        self.put(rec.data)?;
        self.put(&[0u8; 3][..padded - rec.data.len()])?;
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
        let mut b = Vec::with_capacity(32);
        let with_opt = resolution != TsResolution::MICROS;
        let len: u32 = if with_opt { 32 } else { 20 };
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&(iface.link_type.0 as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&iface.snaplen.to_le_bytes());
        if with_opt {
            b.extend_from_slice(&OPT_IF_TSRESOL.to_le_bytes());
            b.extend_from_slice(&1u16.to_le_bytes());
            b.extend_from_slice(&[resolution.0, 0, 0, 0]);
            b.extend_from_slice(&[0u8; 4]); // opt_endofopt
        }
        b.extend_from_slice(&len.to_le_bytes());
        self.put(&b)?;
        Ok(id)
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
