//! The reader thread's work alone: fill batches from a capture and decode
//! them (`CaptureSource::fill` and `PacketBatch::decode_all`, what `sluice
//! filter`'s reader thread does), printing the best of 7 passes in ns per
//! packet. Used for A/B comparisons of the read path (BENCHMARKS.md, "The
//! reader thread"), where `sluice-bench filter` also times the judging
//! thread and the machine's other tenants:
//!
//! ```sh
//! sluice-bench filter --keep --reps 1    # prints where it kept bench.pcap
//! cargo run --release -p sluice-pcap --example read_loop -- DIR/bench.pcap
//! cargo run --release -p sluice-pcap --example read_loop -- DIR/bench.pcap map
//! ```

use sluice_pipeline::{CaptureSource, ReadMode};
use sluice_pipeline::{Fill, PacketBatch, Source, DEFAULT_BATCH_PACKETS};
use std::path::Path;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: read_loop CAPTURE [chunks|map]");
        std::process::exit(2);
    };
    let mode = match args.next().as_deref() {
        None | Some("chunks") => ReadMode::Chunks,
        Some("map") => ReadMode::Map,
        Some(other) => {
            eprintln!("{other}: no such read mode (have: chunks, map)");
            std::process::exit(2);
        }
    };
    let mut best = f64::MAX;
    for _ in 0..7 {
        let started = Instant::now();
        let mut source = CaptureSource::open(Path::new(&path), mode).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        });
        let (mut batch, mut packets) = (PacketBatch::with_capacity(DEFAULT_BATCH_PACKETS), 0u64);
        loop {
            batch.clear();
            let fill = source.fill(&mut batch, None).unwrap_or_else(|e| {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            });
            batch.decode_all();
            packets += batch.len() as u64;
            std::hint::black_box(&batch);
            if !matches!(fill, Fill::More) {
                break;
            }
        }
        best = best.min(started.elapsed().as_secs_f64() * 1e9 / packets.max(1) as f64);
    }
    println!("{path}: {best:.1} ns per packet (best of 7 passes)");
}
