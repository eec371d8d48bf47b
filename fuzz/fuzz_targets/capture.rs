//! Any bytes as a capture file: the reader never panics, never allocates
//! past its bounds, and an error reports a position inside what was read.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_pcap::{CaptureReader, CaptureWriter, OutputFormat};

fuzz_target!(|data: &[u8]| {
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
