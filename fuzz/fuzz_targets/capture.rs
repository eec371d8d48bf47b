//! Any bytes as a capture file: the reader never panics, never allocates
//! past its bounds, and an error reports a position inside what was read.
//! Reading from memory (records borrowed in place) and in small chunks,
//! one record at a time or in runs, gives exactly what reading the stream
//! gives.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_pcap::{CaptureReader, CaptureWriter, Input, OutputFormat, PcapError};

type Seen = (Vec<(u64, u64, u32, u32, Vec<u8>)>, Option<(u64, u64)>);

/// Every record's bytes and fields, then where and why reading stopped.
fn all<I: Input>(r: Result<CaptureReader<I>, PcapError>) -> Seen {
    walked(r, 0)
}

/// As [`all`], taking runs of up to `run` records in place
/// (`whole_pcap_records`, how a batch is filled) between single ones.
fn walked<I: Input>(r: Result<CaptureReader<I>, PcapError>, run: usize) -> Seen {
    let Ok(mut r) = r else { return (Vec::new(), Some((u64::MAX, u64::MAX))) };
    let mut out = Vec::new();
    loop {
        r.whole_pcap_records(run, |rec| {
            out.push((rec.index, rec.offset, rec.orig_len, rec.interface_id, rec.data.to_vec()))
        });
        match r.next_record() {
            Ok(Some(rec)) => out.push((rec.index, rec.offset, rec.orig_len, rec.interface_id, rec.data.to_vec())),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some((e.record, e.offset))),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let streamed = all(CaptureReader::new(data));
    assert!(streamed == all(CaptureReader::from_bytes(data)), "in-memory reading differs");
    assert!(streamed == all(CaptureReader::chunked(data, 64 + data.len() % 97)), "chunked reading differs");
    let run = 1 + data.len() % 7;
    assert!(streamed == walked(CaptureReader::from_bytes(data), run), "runs read in memory differ");
    assert!(streamed == walked(CaptureReader::chunked(data, 64 + data.len() % 89), run), "runs read in chunks differ");
    let Ok(mut r) = CaptureReader::new(data) else { return };
    let template = r.pcap_header().copied();
    let mut ng = CaptureWriter::new(Vec::new(), OutputFormat::Pcapng, None).unwrap();
    loop {
        match r.next_record() {
            Ok(Some(rec)) => {
                assert!(rec.data.len() <= sluice_pcap::MAX_PACKET_LEN as usize);
                let _ = rec.timestamp.as_nanos();
                let _ = sluice_wire::decode(rec.interface.link_type, rec.data);
                ng.write(&rec).unwrap();
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.offset <= data.len() as u64);
                let _ = e.to_string();
                break;
            }
        }
    }
    let _ = template;
    // What we wrote must read back.
    let out = ng.finish().unwrap();
    let mut back = CaptureReader::new(&out[..]).unwrap();
    while back.next_record().unwrap().is_some() {}
});
