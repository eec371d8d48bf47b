//! `sluice filter` through its library alone (no CLI, no root): a capture
//! judged into pass and drop files, and a run stopped by its handle that
//! still writes everything it read and says so.

use sluice_control::product::{Running, Summary};
use sluice_engine::RuleSet;
use sluice_filter::{start, FilterConfig, FilterError};
use sluice_pipeline::{Observer, Progress, Quiet, ReadMode, ReassemblyConfig, RunConfig, WorkersConfig};
use sluice_rules::Prefix;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Ethernet, IPv4, UDP, 8 bytes of payload.
fn udp(src: [u8; 4]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 36, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[192, 0, 2, 1, 0x30, 0x39, 0, 53, 0, 16, 0, 0]);
    f.extend_from_slice(b"sluice!!");
    f
}

/// A classic pcap of `n` frames; every `listed_every`th comes from 10.9.x.x.
fn capture(path: &Path, n: u32, listed_every: u32) -> u64 {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    let mut listed = 0;
    for i in 0..n {
        let src = if i.is_multiple_of(listed_every) {
            listed += 1;
            [10, 9, (i >> 8) as u8, i as u8]
        } else {
            [172, 16, (i >> 8) as u8, i as u8]
        };
        let f = udp(src);
        for v in [i / 1000, (i % 1000) * 1000, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).unwrap();
    listed
}

/// Packet records in a classic pcap.
fn records(path: &Path) -> u64 {
    let b = std::fs::read(path).unwrap();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= b.len() {
        at += 16 + u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        n += 1;
    }
    assert_eq!(at, b.len(), "{}: a record cut short", path.display());
    n
}

fn config(dir: &Path, input: PathBuf, workers: usize) -> FilterConfig {
    let listed: Prefix = "10.9.0.0/16".parse().unwrap();
    FilterConfig {
        input,
        read: ReadMode::Chunks,
        pass: Some(dir.join("pass.pcap")),
        drop: Some(dir.join("drop.pcap")),
        out_format: None,
        rules: RuleSet::new(&[], &[], &[listed]),
        workers: WorkersConfig::new(workers),
        reassembly: ReassemblyConfig::default(),
        run: RunConfig { read_ahead: true, ..RunConfig::default() },
        sample: None,
        stop: Default::default(),
    }
}

#[test]
fn a_capture_is_judged_into_pass_and_drop_and_summed_up() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let listed = capture(&input, 5_000, 7);
    for workers in [1, 2] {
        let filter = start(config(dir.path(), input.clone(), workers), Box::new(Quiet)).unwrap();
        let summary = filter.wait().unwrap();
        assert_eq!(summary.report.stats.packets, 5_000);
        assert_eq!(summary.report.stats.dropped, listed);
        assert!(!summary.interrupted && summary.stopped.is_none());
        assert_eq!(records(&dir.path().join("drop.pcap")), listed);
        assert_eq!(records(&dir.path().join("pass.pcap")), 5_000 - listed);
        let json = summary.json();
        assert_eq!(json["input_format"], "pcap");
        assert_eq!(json["dropped"], listed, "{json}");
        assert!(summary.text().contains("dropped"), "{}", summary.text());
    }
}

/// Tells the test how many packets have a verdict so far.
struct Judged(Arc<AtomicU64>);

impl Observer for Judged {
    fn progress(&mut self, p: &Progress) {
        self.0.store(p.judged, Ordering::Relaxed);
    }
}

#[test]
fn a_stopped_run_writes_what_it_read_and_says_it_was_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let total = 2_000_000;
    capture(&input, total, 3);
    let seen = Arc::new(AtomicU64::new(0));
    let mut cfg = config(dir.path(), input, 1);
    cfg.run.progress_every = Duration::from_millis(1);
    let filter = start(cfg, Box::new(Judged(Arc::clone(&seen)))).unwrap();
    // Stopped mid-run, as SIGINT stops it.
    while seen.load(Ordering::Relaxed) == 0 && !filter.finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    filter.handle().stop();
    let summary = filter.wait().unwrap();
    let judged = summary.report.stats.packets;
    assert!(judged > 0);
    // Stopped before the end, unless the end came first; either way every
    // packet read was judged and written, once.
    assert!(summary.interrupted || judged == u64::from(total), "{judged} of {total}, not interrupted");
    let written = records(&dir.path().join("pass.pcap")) + records(&dir.path().join("drop.pcap"));
    assert_eq!(written, judged);
    let json = summary.json();
    assert_eq!(json["interrupted"], summary.interrupted, "{json}");
    eprintln!("stopped after {judged} of {total} packets (interrupted: {})", summary.interrupted);
}

#[test]
fn an_input_that_cannot_be_opened_is_named_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pcap");
    let Err(e) = start(config(dir.path(), missing, 1), Box::new(Quiet)) else { panic!("started") };
    assert!(matches!(e, FilterError::Input { .. }), "{e}");
    assert!(e.to_string().contains("missing.pcap"), "{e}");
    assert!(!dir.path().join("pass.pcap").exists(), "an output was created before the input opened");
}
