//! The pipeline on arbitrary frames: crafted IPv4/IPv6 fragments (any
//! offsets, flags, lengths, idents, times) mixed with raw bytes, through
//! decode (on a reader thread or not), reassembly with small limits, 1 or 2
//! workers, and ordered or unordered output. Never panics, and every packet
//! comes out exactly once with one verdict, counted once.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_defrag::DefragLimits;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Verdict};
use sluice_pipeline::{run, Collect, JudgeConfig, Meta, Quiet, Reassembly, RunConfig, VecSource, WorkersConfig};
use sluice_rules::Prefix;
use sluice_wire::capture::{Interface, Timestamp, TsResolution};
use sluice_wire::LinkType;
use std::sync::Arc;

fn frame(c: &[u8], rest: &[u8]) -> (LinkType, Vec<u8>) {
    match c[0] % 4 {
        // Raw bytes, as IP or as Ethernet.
        0 => (if c[1] & 1 == 0 { LinkType::RAW } else { LinkType::ETHERNET }, rest.to_vec()),
        // An IPv6 fragment header.
        1 => {
            let len = usize::from(c[5] % 64) + 8;
            let mut f = vec![0x60, 0, 0, 0];
            f.extend_from_slice(&((8 + len) as u16).to_be_bytes());
            f.extend_from_slice(&[44, 64]);
            f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, c[1] % 4]);
            f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
            let off = (u16::from(c[2]) << 3) | u16::from(c[3] & 1);
            f.extend_from_slice(&[17, 0]);
            f.extend_from_slice(&off.to_be_bytes());
            f.extend_from_slice(&u32::from(c[4] % 4).to_be_bytes());
            f.extend(std::iter::repeat_n(c[6], len));
            (LinkType::RAW, f)
        }
        // An IPv4 fragment (or whole datagram).
        _ => {
            let len = usize::from(c[5] % 64) + 8;
            let mut f = vec![0x45, 0];
            f.extend_from_slice(&((20 + len) as u16).to_be_bytes());
            f.extend_from_slice(&[0, c[4] % 4]);
            let flags = (u16::from(c[3] & 1) << 13) | u16::from(c[2]);
            f.extend_from_slice(&flags.to_be_bytes());
            f.extend_from_slice(&[64, 17, 0, 0, 10 * (c[1] & 1), 0, 0, c[1] % 4, 9, 9, 9, 9]);
            f.extend(std::iter::repeat_n(c[6], len));
            (LinkType::RAW, f)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, data)) = data.split_first() else { return };
    let mut packets = Vec::new();
    let mut now = 0u32;
    for (i, c) in data.chunks(8).enumerate() {
        if c.len() < 8 {
            break;
        }
        let rest = &data[(i * 8 + 8).min(data.len())..];
        let (link, bytes) = frame(c, &rest[..rest.len().min(usize::from(c[7] % 96))]);
        now += u32::from(c[7] >> 5);
        let meta = Meta {
            index: i as u64,
            offset: 0,
            timestamp: Timestamp::Split { secs: now, frac: 0, nanos: false },
            wire_len: bytes.len() as u32,
            port: 0,
            interface: Interface { link_type: link, snaplen: 65_535, ts_resolution: TsResolution::MICROS },
        };
        packets.push((meta, bytes));
    }
    let n = packets.len();
    let list: Vec<Prefix> = ["10.0.0.0/8", "2001:db8::1"].iter().map(|s| s.parse().unwrap()).collect();
    let published = Arc::new(Published::new(RuleSet::new(&list, &[], &[])));
    let judge_cfg =
        JudgeConfig { undecodable: if cfg & 1 == 0 { Verdict::Pass } else { Verdict::Drop }, ..JudgeConfig::default() };
    let workers = if cfg & 2 == 0 { 1 } else { 2 };
    let judge =
        sluice_pipeline::judge(&published, WorkersConfig { judge: judge_cfg, queue: 1, ..WorkersConfig::new(workers) });
    let limits = DefragLimits { max_datagrams: 3, max_bytes: 512, max_fragments: 4, timeout_ns: 2_000_000_000 };
    let mut stage = Reassembly::new(limits, Verdict::Drop);
    let run_cfg = RunConfig {
        ordered: cfg & 4 == 0,
        read_ahead: cfg & 8 != 0,
        batch_packets: usize::from(cfg >> 4) + 1,
        max_in_flight: 2,
        ..RunConfig::default()
    };
    let mut sink = Collect::default();
    let done =
        run(&mut VecSource::new(packets), &mut stage, judge, &mut sink, &mut Quiet, &run_cfg).expect("no failure");
    assert!(sink.finished);
    let mut seen = vec![0u8; n];
    for (index, _) in &sink.out {
        seen[*index as usize] += 1;
    }
    assert!(seen.iter().all(|&s| s == 1), "every packet exactly once");
    let s = &done.report.stats;
    assert_eq!(s.packets, n as u64);
    assert_eq!(s.passed + s.dropped, s.packets);
    let dropped = sink.out.iter().filter(|o| o.1 == Verdict::Drop).count() as u64;
    assert_eq!(dropped, s.dropped, "verdicts written agree with the counters");
});
