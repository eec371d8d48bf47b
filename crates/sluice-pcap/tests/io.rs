use proptest::prelude::*;
use sluice_pcap::{
    CaptureReader, CaptureWriter, Format, OutputFormat, PcapErrorKind, PcapHeader, Timestamp, TsResolution,
};
use sluice_wire::LinkType;
use std::io::Cursor;

/// Records as (secs, frac, data).
fn pcap_bytes(header: PcapHeader, recs: &[(u32, u32, Vec<u8>)]) -> Vec<u8> {
    let mut v = header.to_bytes().to_vec();
    for (s, f, d) in recs {
        let w = |x: u32| {
            if header.big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            }
        };
        v.extend_from_slice(&w(*s));
        v.extend_from_slice(&w(*f));
        v.extend_from_slice(&w(d.len() as u32));
        v.extend_from_slice(&w(d.len() as u32 + 4));
        v.extend_from_slice(d);
    }
    v
}

fn sample_records(n: usize) -> Vec<(u32, u32, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                1_700_000_000 + i as u32,
                (i as u32 * 7919) % 1_000_000,
                (0..(14 + i % 50)).map(|b| (b * 31 + i) as u8).collect(),
            )
        })
        .collect()
}

fn copy_all(input: &[u8], format: OutputFormat) -> Vec<u8> {
    let mut r = CaptureReader::new(Cursor::new(input)).unwrap();
    let template = r.pcap_header().copied();
    let mut w = CaptureWriter::new(Vec::new(), format, template).unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        w.write(&rec).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn pcap_round_trip_is_byte_identical_in_all_variants() {
    for big_endian in [false, true] {
        for nanos in [false, true] {
            let mut h = PcapHeader::new(LinkType::ETHERNET, 65535, nanos);
            h.big_endian = big_endian;
            let input = pcap_bytes(h, &sample_records(100));
            assert_eq!(copy_all(&input, OutputFormat::Pcap), input, "be={big_endian} ns={nanos}");
        }
    }
}

#[test]
fn empty_pcap_round_trips() {
    let input = PcapHeader::new(LinkType::RAW, 1500, false).to_bytes().to_vec();
    assert_eq!(copy_all(&input, OutputFormat::Pcap), input);
}

/// A small pcapng builder, either byte order.
struct Ng {
    be: bool,
    out: Vec<u8>,
}

impl Ng {
    fn u16(&self, v: u16) -> [u8; 2] {
        if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn u32(&self, v: u32) -> [u8; 4] {
        if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn block(&mut self, ty: u32, body: &[u8]) {
        let len = 12 + body.len() as u32;
        assert_eq!(len % 4, 0);
        let (t, l) = (self.u32(ty), self.u32(len));
        self.out.extend_from_slice(&t);
        self.out.extend_from_slice(&l);
        self.out.extend_from_slice(body);
        self.out.extend_from_slice(&l);
    }
    fn shb(&mut self) {
        let mut b = self.u32(0x1a2b3c4d).to_vec();
        b.extend_from_slice(&self.u16(1));
        b.extend_from_slice(&self.u16(0));
        b.extend_from_slice(&[0xff; 8]);
        self.block(0x0a0d0d0a, &b);
    }
    fn idb(&mut self, link: u16, tsresol: Option<u8>) {
        let mut b = self.u16(link).to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.u32(65535));
        if let Some(r) = tsresol {
            b.extend_from_slice(&self.u16(9));
            b.extend_from_slice(&self.u16(1));
            b.extend_from_slice(&[r, 0, 0, 0]);
            b.extend_from_slice(&[0; 4]);
        }
        self.block(1, &b);
    }
    fn epb(&mut self, iface: u32, units: u64, data: &[u8]) {
        let mut b = self.u32(iface).to_vec();
        b.extend_from_slice(&self.u32((units >> 32) as u32));
        b.extend_from_slice(&self.u32(units as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(&self.u32(data.len() as u32));
        b.extend_from_slice(data);
        b.resize((b.len() + 3) & !3, 0);
        self.block(6, &b);
    }
    fn spb(&mut self, data: &[u8]) {
        let mut b = self.u32(data.len() as u32).to_vec();
        b.extend_from_slice(data);
        b.resize((b.len() + 3) & !3, 0);
        self.block(3, &b);
    }
}

fn ipv4_frame(seed: u8) -> Vec<u8> {
    let mut f = vec![seed; 14];
    f[12] = 0x08;
    f[13] = 0x00;
    f.extend_from_slice(&[0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, seed, 10, 0, 0, 1]);
    f
}

fn multi_interface_pcapng() -> Vec<u8> {
    let mut ng = Ng { be: false, out: Vec::new() };
    ng.shb();
    ng.idb(1, None);
    ng.idb(101, Some(9));
    ng.epb(0, 1_700_000_000_000_001, &ipv4_frame(1));
    ng.block(0x0bad, &[1, 2, 3, 4]); // unknown block: skipped
    ng.epb(1, 1_700_000_000_000_000_007, &ipv4_frame(2)[14..]);
    ng.block(5, &[0; 8]); // interface statistics: skipped
                          // A second section, big-endian, with its own interface numbering.
    let mut be = Ng { be: true, out: Vec::new() };
    be.shb();
    be.idb(1, Some(3));
    be.epb(0, 1_700_000_000_123, &ipv4_frame(3));
    be.spb(&ipv4_frame(4));
    ng.out.extend(be.out);
    ng.out
}

#[test]
fn pcapng_sections_interfaces_and_unknown_blocks() {
    let input = multi_interface_pcapng();
    let mut r = CaptureReader::new(Cursor::new(&input)).unwrap();
    assert_eq!(r.format(), Format::Pcapng);
    let mut seen = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        seen.push((rec.index, rec.interface_id, rec.interface.link_type, rec.timestamp.as_nanos(), rec.data.to_vec()));
    }
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].2, LinkType::ETHERNET);
    assert_eq!(seen[0].3, 1_700_000_000_000_001_000);
    assert_eq!(seen[1].2, LinkType::RAW);
    assert_eq!(seen[1].3, 1_700_000_000_000_000_007);
    assert_eq!(seen[2].1, 2, "second section's interface 0 gets a fresh id");
    assert_eq!(seen[2].3, 1_700_000_000_123_000_000);
    assert_eq!(seen[3].4, ipv4_frame(4));
    assert_eq!(r.interfaces().len(), 3);
}

#[test]
fn pcapng_to_pcapng_keeps_every_packet_and_timestamp() {
    let input = multi_interface_pcapng();
    let out = copy_all(&input, OutputFormat::Pcapng);
    let collect = |bytes: &[u8]| {
        let mut r = CaptureReader::new(Cursor::new(bytes)).unwrap();
        let mut v = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            v.push((rec.interface.link_type, rec.timestamp.as_nanos(), rec.orig_len, rec.data.to_vec()));
        }
        v
    };
    assert_eq!(collect(&out), collect(&input));
}

#[test]
fn pcapng_to_pcap_keeps_every_packet() {
    let mut ng = Ng { be: false, out: Vec::new() };
    ng.shb();
    ng.idb(1, Some(9));
    ng.idb(1, None);
    for i in 0..50u8 {
        let ns = 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000_123;
        // Interface 0 counts nanoseconds, interface 1 microseconds.
        ng.epb(u32::from(i % 2), if i % 2 == 0 { ns } else { ns / 1000 }, &ipv4_frame(i));
    }
    let out = copy_all(&ng.out, OutputFormat::Pcap);
    let mut a = CaptureReader::new(Cursor::new(&ng.out)).unwrap();
    let mut b = CaptureReader::new(Cursor::new(&out)).unwrap();
    assert_eq!(b.format(), Format::Pcap);
    assert!(b.pcap_header().unwrap().nanos, "pcap output from pcapng keeps nanoseconds");
    let mut n = 0;
    loop {
        let (ra, rb) = (
            a.next_record().unwrap().map(|r| (r.data.to_vec(), r.timestamp.as_nanos() / 1000)),
            b.next_record().unwrap().map(|r| (r.data.to_vec(), r.timestamp.as_nanos() / 1000)),
        );
        assert_eq!(ra, rb);
        if ra.is_none() {
            break;
        }
        n += 1;
    }
    assert_eq!(n, 50);
}

#[test]
fn pcap_output_refuses_mixed_link_types() {
    let input = multi_interface_pcapng();
    let mut r = CaptureReader::new(Cursor::new(&input)).unwrap();
    let mut w = CaptureWriter::new(Vec::new(), OutputFormat::Pcap, None).unwrap();
    w.write(&r.next_record().unwrap().unwrap()).unwrap();
    let err = w.write(&r.next_record().unwrap().unwrap()).unwrap_err();
    assert!(matches!(err.kind, PcapErrorKind::LinkTypeMismatch { expected: 1, got: 101 }), "{err}");
}

// ---- Bad inputs: each stops with a position, and everything before it is returned.

fn read_until_error(bytes: &[u8]) -> (usize, Option<sluice_pcap::PcapError>) {
    let mut r = match CaptureReader::new(Cursor::new(bytes)) {
        Ok(r) => r,
        Err(e) => return (0, Some(e)),
    };
    let mut n = 0;
    loop {
        match r.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, None),
            Err(e) => return (n, Some(e)),
        }
    }
}

#[test]
fn truncated_pcap_returns_every_whole_record_then_the_position() {
    let input = pcap_bytes(PcapHeader::new(LinkType::ETHERNET, 65535, false), &sample_records(10));
    // Cut inside the data of record 7.
    let rec_start: usize = 24 + sample_records(7).iter().map(|r| 16 + r.2.len()).sum::<usize>();
    let (n, err) = read_until_error(&input[..rec_start + 20]);
    let err = err.unwrap();
    assert_eq!(n, 7);
    assert_eq!(err.record, 7);
    assert_eq!(err.offset, rec_start as u64);
    assert!(matches!(err.kind, PcapErrorKind::TruncatedRecordData { got: 4, .. }), "{err}");
    // Cut inside a record header.
    let (n, err) = read_until_error(&input[..rec_start + 5]);
    assert_eq!(n, 7);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::TruncatedRecordHeader { got: 5, need: 16 }));
}

#[test]
fn wrong_magic_and_short_header() {
    let (_, err) = read_until_error(b"GIF89a and then some bytes......");
    let err = err.unwrap();
    assert!(matches!(err.kind, PcapErrorKind::BadMagic(0x47494638)), "{err}");
    assert!(err.to_string().contains("not a pcap or pcapng file"));
    let (_, err) = read_until_error(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::TruncatedFileHeader { got: 6 }));
    let (_, err) = read_until_error(&[]);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::TruncatedFileHeader { got: 0 }));
}

#[test]
fn snaplen_zero_warns_and_reads() {
    let input = pcap_bytes(PcapHeader::new(LinkType::ETHERNET, 0, false), &sample_records(3));
    let mut r = CaptureReader::new(Cursor::new(&input)).unwrap();
    assert!(r.warnings()[0].contains("snap length is 0"), "{:?}", r.warnings());
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn record_longer_than_file_and_absurd_lengths() {
    let mut input = pcap_bytes(PcapHeader::new(LinkType::ETHERNET, 65535, false), &sample_records(2));
    // A third record claiming 1000 bytes with only 10 present.
    input.extend_from_slice(&[0; 8]);
    input.extend_from_slice(&1000u32.to_le_bytes());
    input.extend_from_slice(&1000u32.to_le_bytes());
    input.extend_from_slice(&[0xaa; 10]);
    let (n, err) = read_until_error(&input);
    assert_eq!(n, 2);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::TruncatedRecordData { got: 10, need: 1000 }));
    // A record claiming 4 GiB must not be allocated.
    let len = input.len();
    input[len - 18..len - 14].copy_from_slice(&u32::MAX.to_le_bytes());
    let (n, err) = read_until_error(&input);
    assert_eq!(n, 2);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::RecordTooLong { .. }));
}

#[test]
fn pcapng_corruptions_are_positioned() {
    let good = multi_interface_pcapng();
    // Flip the trailer of the first EPB (after 28-byte SHB and two IDBs: 20 + 32).
    let epb_at = 28 + 20 + 32;
    let epb_len = u32::from_le_bytes(good[epb_at + 4..epb_at + 8].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    bad[epb_at + epb_len - 4] ^= 0xff;
    let (n, err) = read_until_error(&bad);
    let err = err.unwrap();
    assert_eq!(n, 0);
    assert_eq!(err.offset, epb_at as u64);
    assert!(matches!(err.kind, PcapErrorKind::BlockTrailerMismatch { .. }), "{err}");
    // A packet for an interface that was never described.
    let mut ng = Ng { be: false, out: Vec::new() };
    ng.shb();
    ng.epb(0, 0, &[1, 2, 3, 4]);
    let (_, err) = read_until_error(&ng.out);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::UnknownInterface { id: 0, count: 0 }));
    // Block length not a multiple of 4.
    let mut bad = good.clone();
    bad[epb_at + 4] = bad[epb_at + 4].wrapping_add(1);
    let (n, err) = read_until_error(&bad);
    assert_eq!(n, 0);
    assert!(matches!(err.unwrap().kind, PcapErrorKind::BadBlockLength(_)));
    // Truncated in the middle of the last block: the first three packets survive.
    let (n, err) = read_until_error(&good[..good.len() - 6]);
    assert_eq!(n, 3);
    assert_eq!(err.unwrap().record, 3);
}

#[test]
fn pcap_output_refuses_timestamps_past_2106() {
    let mut ng = Ng { be: false, out: Vec::new() };
    ng.shb();
    ng.idb(1, None);
    ng.epb(0, u64::MAX / 2, &ipv4_frame(1));
    let mut r = CaptureReader::new(Cursor::new(&ng.out)).unwrap();
    let mut w = CaptureWriter::new(Vec::new(), OutputFormat::Pcap, None).unwrap();
    let err = w.write(&r.next_record().unwrap().unwrap()).unwrap_err();
    assert!(matches!(err.kind, PcapErrorKind::TimestampOutOfRange), "{err}");
}

#[test]
fn timestamps_convert() {
    assert_eq!(Timestamp::Split { secs: 2, frac: 5, nanos: false }.as_nanos(), 2_000_005_000);
    assert_eq!(Timestamp::Units { units: 3 << 20, resolution: TsResolution(0x80 | 20) }.as_nanos(), 3_000_000_000);
    assert_eq!(TsResolution(200).units_per_sec(), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]
    #[test]
    fn arbitrary_bytes_never_panic(prefix in prop_oneof![Just(vec![0xd4u8, 0xc3, 0xb2, 0xa1]), Just(vec![0x0a, 0x0d, 0x0d, 0x0a]), Just(vec![])],
                                   bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut input = prefix;
        input.extend(bytes);
        let _ = read_until_error(&input);
    }

    #[test]
    fn mutated_pcapng_never_panics(pos in 0usize..400, byte in any::<u8>()) {
        let mut input = multi_interface_pcapng();
        let p = pos % input.len();
        input[p] = byte;
        let _ = read_until_error(&input);
    }

    /// Records borrowed in place from memory (the mapped path) or from
    /// chunks are exactly the records read through a stream, up to the same
    /// error at the same position, on valid, mutated and cut captures of
    /// both formats.
    #[test]
    fn in_memory_reading_equals_streamed_reading(ng in any::<bool>(), pos in 0usize..600, byte in any::<u8>(), mutate in any::<bool>(), cut in 0usize..600, chunk in 0usize..1000) {
        let mut input = if ng { multi_interface_pcapng() } else { pcap_bytes(PcapHeader::new(LinkType::ETHERNET, 65_535, false), &sample_records(12)) };
        if mutate {
            let p = pos % input.len();
            input[p] = byte;
        }
        input.truncate(input.len() - cut % input.len());
        let streamed = all_records(CaptureReader::new(Cursor::new(&input)));
        let in_memory = all_records(CaptureReader::from_bytes(&input[..]));
        prop_assert_eq!(&streamed, &in_memory);
        // Chunks small enough that records and blocks straddle them.
        let chunked = all_records(CaptureReader::chunked(Cursor::new(&input), 64 + chunk % 200));
        prop_assert_eq!(&streamed, &chunked);
        // Runs of records taken in place (`whole_pcap_records`, how a batch
        // is filled) between single ones, from chunks and from memory.
        let runs = [1 + pos % 5, cut % 3, 1 + byte as usize % 9];
        let walked = all_records_walked(CaptureReader::chunked(Cursor::new(&input), 64 + chunk % 200), runs);
        prop_assert_eq!(&streamed, &walked);
        let walked = all_records_walked(CaptureReader::from_bytes(&input[..]), runs);
        prop_assert_eq!(&streamed, &walked);
    }
}

type Fields = (u64, u64, u128, u32, u32, Vec<u8>);
type Seen = (Vec<Fields>, Option<(u64, u64, String)>);

fn fields(rec: &sluice_pcap::Record<'_>) -> Fields {
    (rec.index, rec.offset, rec.timestamp.as_nanos(), rec.orig_len, rec.interface_id, rec.data.to_vec())
}

/// Every record's fields, then the error that stopped reading, if any.
fn all_records<I: sluice_pcap::Input>(r: Result<CaptureReader<I>, sluice_pcap::PcapError>) -> Result<Seen, String> {
    all_records_walked(r, [0; 3])
}

/// As [`all_records`], alternating runs of up to `runs[i]` records taken
/// with `whole_pcap_records` (none for a run of 0) with one `next_record`.
fn all_records_walked<I: sluice_pcap::Input>(
    r: Result<CaptureReader<I>, sluice_pcap::PcapError>,
    runs: [usize; 3],
) -> Result<Seen, String> {
    let mut r = r.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for turn in 0.. {
        r.whole_pcap_records(runs[turn % runs.len()], |rec| out.push(fields(&rec)));
        match r.next_record() {
            Ok(Some(rec)) => out.push(fields(&rec)),
            Ok(None) => return Ok((out, None)),
            Err(e) => return Ok((out, Some((e.record, e.offset, e.kind.to_string())))),
        }
    }
    unreachable!("the loop returns")
}

/// A file that cannot be opened is said so, without a record position
/// (none was read): not "record 0 at byte offset 0: I/O error".
#[test]
fn a_file_that_cannot_be_opened_names_no_position() {
    let msg = |p: &std::path::Path| match CaptureReader::open(p) {
        Ok(_) => panic!("{} opened", p.display()),
        Err(e) => e.to_string(),
    };
    let e = msg(std::path::Path::new("/nonexistent/x.pcap"));
    assert!(e.starts_with("cannot open: ") && e.contains("No such file"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(msg(dir.path()), "cannot open: is a directory");
    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    assert!(msg(&empty).starts_with("record 0 at byte offset 0: file is shorter"), "read, then found short");
}
