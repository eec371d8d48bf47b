//! The drop sampler: which drops it samples (1 in N by a countdown, under a
//! rate cap), that the sink behind it gets every batch unchanged whatever
//! happens to samples, what the comments and JSON lines say (checked against
//! the rules and the steering the pipeline uses), rotation, and that the
//! files are pcapng this crate's reader and tshark read.

use sluice_defrag::DefragLimits;
use sluice_engine::snapshot::Published;
use sluice_engine::{CompileOptions, RuleSet, Verdict};
use sluice_pcap::{CaptureReader, CaptureWriter, OutputFormat, Timestamp, TsResolution};
use sluice_pipeline::sample::{Backpressure, SampleConfig, SampleReport, Sampled, Sampler};
use sluice_pipeline::{Collect, Disposition, Meta, PacketBatch, Sink, Steering, WorkersConfig};
use sluice_rules::parse_rules;
use sluice_wire::capture::Interface;
use sluice_wire::{decode, LinkType};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RULES: &str = "\
set blocklist { 10.9.0.0/16 }
pass udp dport 53
drop saddr @blocklist
drop daddr { 192.0.2.1 }
count udp
default drop
";

fn compile(text: &str) -> RuleSet {
    let file = parse_rules("t.rules", text, Path::new(".")).unwrap();
    let sets: Vec<_> = file
        .sets
        .iter()
        .map(|s| match &s.source {
            sluice_rules::SetSource::Inline(p) => p.clone(),
            _ => unreachable!("inline sets only"),
        })
        .collect();
    RuleSet::compile(&file, &sets, &CompileOptions::default()).unwrap()
}

/// Ethernet, IPv4, UDP, 8 bytes of payload.
fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 36, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 16, 0, 0]);
    f.extend_from_slice(b"sluice!!");
    f
}

/// A frame that stops inside its IPv4 header.
fn truncated() -> Vec<u8> {
    let mut f = udp([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
    f.truncate(14 + 10);
    f
}

const T0: u64 = 1_700_000_000_000_000_000;

fn meta(index: u64, port: u32, len: usize) -> Meta {
    Meta {
        index,
        offset: 0,
        timestamp: Timestamp::Units { units: T0 + index * 1000 + 7, resolution: TsResolution::NANOS },
        wire_len: len as u32 + 4,
        port,
        interface: Interface { link_type: LinkType::ETHERNET, snaplen: 65_535, ts_resolution: TsResolution::NANOS },
    }
}

/// One packet to put in a batch: its frame, port, and whether reassembly decided it (dropped).
struct P {
    frame: Vec<u8>,
    port: u32,
    decided_drop: bool,
}

fn p(frame: Vec<u8>, port: u32) -> P {
    P { frame, port, decided_drop: false }
}

/// A batch judged as the pipeline would: by the rules, undecodable frames
/// dropped, reassembly's decisions kept.
fn judged(rules: &RuleSet, first_index: u64, pkts: &[P]) -> PacketBatch {
    let mut b = PacketBatch::with_capacity(pkts.len());
    for (i, p) in pkts.iter().enumerate() {
        b.push_copy(meta(first_index + i as u64, p.port, p.frame.len()), &p.frame);
    }
    b.decode_all();
    let decoded: Vec<_> = (0..b.len()).map(|i| *b.decoded(i)).collect();
    for ((p, want), decoded) in b.packets_mut().iter_mut().zip(pkts).zip(&decoded) {
        p.verdict = if want.decided_drop {
            p.disposition = Disposition::Decided(Verdict::Drop);
            Verdict::Drop
        } else {
            match decoded {
                Ok(s) => rules.evaluate_reference(s, p.meta.wire_len, p.meta.port, |_| {}).verdict,
                Err(_) => Verdict::Drop,
            }
        };
    }
    b
}

fn expected_out(batches: &[PacketBatch]) -> Vec<(u64, Verdict)> {
    batches.iter().flat_map(|b| b.packets().iter().map(|p| (p.meta.index, p.verdict))).collect()
}

fn drops(batches: &[PacketBatch]) -> u64 {
    batches.iter().flat_map(|b| b.packets()).filter(|p| p.verdict == Verdict::Drop).count() as u64
}

/// A log that is a shared buffer.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

/// A log whose first write waits until the test opens the gate (a writer
/// thread stuck on slow output), telling the test it got there.
struct Gate {
    entered: Option<SyncSender<()>>,
    open: Option<Receiver<()>>,
    out: Shared,
}

impl Write for Gate {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(e) = self.entered.take() {
            let _ = e.send(());
        }
        if let Some(open) = self.open.take() {
            let _ = open.recv();
        }
        self.out.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (gate log, "entered" receiver, "open" sender, what was logged)
fn gate() -> (Gate, Receiver<()>, SyncSender<()>, Shared) {
    let (entered_tx, entered_rx) = sync_channel(1);
    let (open_tx, open_rx) = sync_channel(1);
    let out = Shared::default();
    (Gate { entered: Some(entered_tx), open: Some(open_rx), out: out.clone() }, entered_rx, open_tx, out)
}

/// A pcapng file as blocks: interface names, the packets, and every packet
/// block's length (to check rotation sizes).
#[derive(Debug, Default)]
struct Ng {
    names: Vec<String>,
    packets: Vec<NgPacket>,
    epb_lens: Vec<usize>,
}

#[derive(Debug)]
struct NgPacket {
    iface: u32,
    units: u64,
    orig_len: u32,
    data: Vec<u8>,
    comment: Option<String>,
}

fn options(b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() {
        let code = u16::from_le_bytes([b[at], b[at + 1]]);
        let len = usize::from(u16::from_le_bytes([b[at + 2], b[at + 3]]));
        if code == 0 {
            break;
        }
        out.push((code, &b[at + 4..at + 4 + len]));
        at += 4 + ((len + 3) & !3);
    }
    out
}

fn parse_ng(bytes: &[u8]) -> Ng {
    let u32at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut ng = Ng::default();
    let mut at = 0;
    let mut sections = 0;
    while at < bytes.len() {
        let (ty, len) = (u32at(at), u32at(at + 4) as usize);
        assert_eq!(u32at(at + len - 4) as usize, len, "trailer of the block at {at}");
        match ty {
            0x0a0d_0d0a => sections += 1,
            1 => {
                assert_eq!(u32at(at + 8) & 0xffff, 1, "Ethernet");
                let opts = options(&bytes[at + 16..at + len - 4]);
                let name = opts.iter().find(|o| o.0 == 2).map(|o| String::from_utf8(o.1.to_vec()).unwrap());
                assert_eq!(opts.iter().find(|o| o.0 == 9).map(|o| o.1), Some(&[9u8][..]), "nanoseconds");
                ng.names.push(name.expect("if_name"));
            }
            6 => {
                let caplen = u32at(at + 20) as usize;
                let data = bytes[at + 28..at + 28 + caplen].to_vec();
                let opts = options(&bytes[at + 28 + ((caplen + 3) & !3)..at + len - 4]);
                let comment = opts.iter().find(|o| o.0 == 1).map(|o| String::from_utf8(o.1.to_vec()).unwrap());
                let units = (u64::from(u32at(at + 12)) << 32) | u64::from(u32at(at + 16));
                ng.packets.push(NgPacket { iface: u32at(at + 8), units, orig_len: u32at(at + 24), data, comment });
                ng.epb_lens.push(len);
            }
            other => panic!("unexpected block type {other}"),
        }
        at += len;
    }
    assert_eq!(sections, 1, "one section per file");
    ng
}

/// Every record of a file through this crate's reader, which must not fail.
fn read_back(path: &Path) -> Vec<(Vec<u8>, u32, u128)> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.data.to_vec(), rec.orig_len, rec.timestamp.as_nanos()));
    }
    assert!(r.warnings().is_empty(), "{:?}", r.warnings());
    out
}

fn config(path: Option<PathBuf>) -> SampleConfig {
    SampleConfig { pcapng: path, max_pps: 0, port_names: vec!["veth0".into(), "veth1".into()], ..SampleConfig::new() }
}

/// Write batches through a sampler into a `Collect`; check the sink got
/// every batch unchanged.
fn through(cfg: SampleConfig, rules: RuleSet, batches: &[PacketBatch]) -> SampleReport {
    let sampler = Sampler::start(cfg, Arc::new(Published::new(rules))).unwrap();
    let mut sink: Sampled<Collect> = sampler.wrap(Collect::default());
    for b in batches {
        sink.write(b).unwrap();
    }
    sink.finish().unwrap();
    let report = sampler.finish().unwrap();
    let inner = sink.into_inner();
    assert!(inner.finished);
    assert_eq!(inner.out, expected_out(batches), "the inner sink gets every batch unchanged");
    assert_eq!(report.counts.drops_seen, drops(batches));
    report
}

/// The mixed traffic: (packet, what its comment must say with `worker=W`
/// standing for the steered worker; None for a pass).
fn mixed() -> Vec<(P, Option<&'static str>)> {
    vec![
        (
            p(udp([10, 9, 1, 1], [198, 51, 100, 1], 1000, 80), 0),
            Some(
                r#"sluice drop reason=rule rule_line=3 rule="drop saddr @blocklist" sets=blocklist port=veth0 worker=W"#,
            ),
        ),
        (p(udp([10, 9, 1, 1], [198, 51, 100, 1], 1000, 53), 0), None),
        (
            p(udp([10, 1, 1, 1], [192, 0, 2, 1], 4000, 80), 1),
            Some(r#"sluice drop reason=rule rule_line=4 rule="drop daddr { 192.0.2.1 }" sets= port=veth1 worker=W"#),
        ),
        (
            p(udp([10, 2, 2, 2], [198, 51, 100, 2], 1000, 80), 0),
            Some(r#"sluice drop reason=default rule_line=- rule="" sets= port=veth0 worker=W"#),
        ),
        (
            p(truncated(), 1),
            Some(r#"sluice drop reason=undecodable:truncated_ipv4 rule_line=- rule="" sets= port=veth1 worker=0"#),
        ),
        (
            P { frame: udp([10, 3, 3, 3], [198, 51, 100, 3], 7, 9), port: 7, decided_drop: true },
            Some(r#"sluice drop reason=fragment rule_line=- rule="" sets= port=port7 worker=-"#),
        ),
        (p(udp([10, 3, 3, 3], [198, 51, 100, 3], 1000, 53), 1), None),
    ]
}

#[test]
fn comments_and_json_name_the_rule_port_and_worker_and_passes_are_never_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let rules = compile(RULES);
    let key = WorkersConfig::new(2).key;
    let steering = Steering::new(&key, 2);
    // Three rounds of the mix, in batches of 4 (batches split it anywhere).
    let all: Vec<(P, Option<&str>)> = (0..3).flat_map(|_| mixed()).collect();
    let pkts: Vec<P> =
        all.iter().map(|(p, _)| P { frame: p.frame.clone(), port: p.port, decided_drop: p.decided_drop }).collect();
    let batches: Vec<PacketBatch> = pkts.chunks(4).enumerate().map(|(i, c)| judged(&rules, i as u64 * 4, c)).collect();
    let log = Shared::default();
    let cfg = SampleConfig {
        log: Some(Box::new(log.clone())),
        steering: Some(Steering::new(&key, 2)),
        ..config(Some(path.clone()))
    };
    let report = through(cfg, compile(RULES), &batches);

    let want: Vec<(usize, String)> = all
        .iter()
        .enumerate()
        .filter_map(|(i, (p, c))| {
            let worker = steering.worker_for(&decode(LinkType::ETHERNET, &p.frame)).to_string();
            c.map(|c| (i, c.replace("worker=W", &format!("worker={worker}"))))
        })
        .collect();
    assert_eq!(want.len(), 15);
    let c = report.counts;
    assert_eq!((c.sampled, c.written, c.lost_queue_full, c.over_cap, c.write_errors), (15, 15, 0, 0, 0));
    assert_eq!(report.files.len(), 1);
    assert_eq!((report.files[0].path.clone(), report.files[0].records), (path.clone(), 15));

    let ng = parse_ng(&std::fs::read(&path).unwrap());
    let names: Vec<&str> = ng.names.iter().map(String::as_str).collect();
    assert_eq!(names, ["veth0", "veth1", "port7"], "one interface block per port, named");
    assert_eq!(ng.packets.len(), 15);
    for ((i, comment), NgPacket { iface, units, orig_len, data, comment: got }) in want.iter().zip(&ng.packets) {
        let m = meta(*i as u64, all[*i].0.port, all[*i].0.frame.len());
        assert_eq!(got.as_deref(), Some(comment.as_str()), "packet {i}");
        assert_eq!(data, &all[*i].0.frame);
        assert_eq!(*orig_len, m.wire_len);
        assert_eq!(u128::from(*units), m.timestamp.as_nanos());
        let name = match m.port {
            0 => "veth0",
            1 => "veth1",
            _ => "port7",
        };
        assert_eq!(ng.names[*iface as usize], name);
    }
    // The crate's own reader skips the comments and names.
    let read = read_back(&path);
    assert_eq!(read.len(), 15);
    for ((i, _), (data, orig_len, ns)) in want.iter().zip(&read) {
        assert_eq!(data, &all[*i].0.frame);
        assert_eq!(*orig_len, all[*i].0.frame.len() as u32 + 4);
        assert_eq!(*ns, u128::from(T0 + *i as u64 * 1000 + 7));
    }

    // The JSON lines say the same.
    let lines = log.lines();
    assert_eq!(lines.len(), 15);
    let first = &lines[0];
    assert_eq!(first["ts"], "2023-11-14T22:13:20.000000007Z");
    assert_eq!(first["reason"], "rule");
    assert_eq!(first["rule_line"], 3);
    assert_eq!(first["rule"], "drop saddr @blocklist");
    assert_eq!(first["sets"], serde_json::json!(["blocklist"]));
    assert_eq!(first["port"], "veth0");
    assert_eq!((first["src"].as_str(), first["dst"].as_str()), (Some("10.9.1.1"), Some("198.51.100.1")));
    assert_eq!(
        (first["proto"].as_u64(), first["sport"].as_u64(), first["dport"].as_u64()),
        (Some(17), Some(1000), Some(80))
    );
    assert_eq!(first["len"], 54);
    for ((i, comment), line) in want.iter().zip(&lines) {
        let reason = comment.split(' ').nth(2).unwrap().strip_prefix("reason=").unwrap();
        assert_eq!(line["reason"], reason, "packet {i}");
        let worker = comment.rsplit("worker=").next().unwrap();
        match worker {
            "-" => assert!(line["worker"].is_null()),
            w => assert_eq!(line["worker"].as_u64(), Some(w.parse().unwrap())),
        }
        if reason.starts_with("undecodable") {
            assert!(line["src"].is_null() && line["proto"].is_null() && line["dport"].is_null());
        }
        if reason != "rule" {
            assert!(line["rule_line"].is_null() && line["rule"].is_null());
            assert_eq!(line["sets"], serde_json::json!([]));
        }
    }
    assert_eq!(lines[1]["rule"], "drop daddr { 192.0.2.1 }");
    assert_eq!(lines[1]["sets"], serde_json::json!([]));
    assert_eq!(lines[4]["port"], "port7");
}

#[test]
fn one_in_n_is_a_countdown_over_drops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let rules = compile(RULES);
    // 100 drops (source in the blocklist) between 50 passes, batches of 13.
    let pkts: Vec<P> = (0..150u32)
        .map(|i| {
            let dport = if i % 3 == 2 { 53 } else { 80 };
            p(udp([10, 9, (i >> 8) as u8, i as u8], [198, 51, 100, 1], 1000, dport), 0)
        })
        .collect();
    let batches: Vec<PacketBatch> =
        pkts.chunks(13).enumerate().map(|(i, c)| judged(&rules, i as u64 * 13, c)).collect();
    assert_eq!(drops(&batches), 100);
    let report = through(SampleConfig { rate: 7, ..config(Some(path.clone())) }, compile(RULES), &batches);
    // The 1st, 8th, 15th, ... drop: ceil(100 / 7).
    assert_eq!((report.counts.sampled, report.counts.written), (15, 15));
    let drop_indices: Vec<u64> =
        batches.iter().flat_map(|b| b.packets()).filter(|p| p.verdict == Verdict::Drop).map(|p| p.meta.index).collect();
    let want: Vec<u128> = drop_indices.iter().step_by(7).map(|&i| u128::from(T0 + i * 1000 + 7)).collect();
    let got: Vec<u128> = read_back(&path).iter().map(|r| r.2).collect();
    assert_eq!(got, want);
}

#[test]
fn the_cap_bounds_samples_per_second() {
    const PPS: u64 = 200;
    let rules = compile(RULES);
    let drop_batch =
        judged(&rules, 0, &(0..64).map(|i| p(udp([10, 9, 0, i], [1, 1, 1, 1], 1, 80), 0)).collect::<Vec<_>>());
    let started = Instant::now();
    let sampler =
        Sampler::start(SampleConfig { max_pps: PPS, ..config(None) }, Arc::new(Published::new(compile(RULES))))
            .unwrap();
    let mut collect = Collect::default();
    let mut sink = sampler.wrap_mut(&mut collect);
    let mut batches = 0;
    while started.elapsed() < Duration::from_millis(600) {
        sink.write(&drop_batch).unwrap();
        batches += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(sink);
    let c = sampler.finish().unwrap().counts;
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(collect.out.len(), batches * 64, "every packet reaches the sink");
    assert_eq!(c.drops_seen, batches as u64 * 64);
    assert_eq!(c.sampled + c.over_cap, c.drops_seen, "rate 1: every drop is a candidate");
    assert!(c.sampled as f64 <= PPS as f64 * elapsed + PPS as f64 + 1.0, "{c:?} in {elapsed} s");
    assert!(c.sampled >= PPS, "the burst is allowed: {c:?}");
    assert!(c.over_cap > 0);
    assert_eq!(c.written, c.sampled, "no output, nothing lost: {c:?}");
}

#[test]
fn a_full_queue_loses_samples_never_packets() {
    let rules = compile(RULES);
    let batches: Vec<PacketBatch> = (0..10u64)
        .map(|b| {
            judged(
                &rules,
                b * 100,
                &(0..100).map(|i| p(udp([10, 9, b as u8, i], [1, 1, 1, 1], 1, 80), 0)).collect::<Vec<_>>(),
            )
        })
        .collect();
    warnings::keep();
    let (log, entered, open, out) = gate();
    let sampler = Sampler::start(
        SampleConfig { log: Some(Box::new(log)), queue: 1, ..config(None) },
        Arc::new(Published::new(compile(RULES))),
    )
    .unwrap();
    let mut sink = sampler.wrap(Collect::default());
    for b in &batches {
        sink.write(b).unwrap();
    }
    // The writer is stuck on its first sample; at most one more fits the queue.
    entered.recv().unwrap();
    let c = sampler.counters().totals();
    assert_eq!(c.sampled, 1000);
    assert!(c.lost_queue_full >= 998, "{c:?}");
    assert_eq!(sink.inner().out, expected_out(&batches), "no packet lost");
    open.send(()).unwrap();
    let c = sampler.finish().unwrap().counts;
    assert_eq!(c.written + c.lost_queue_full, c.sampled);
    assert_eq!(out.lines().len() as u64, c.written);
    assert_eq!(warnings::about("drop samples are being lost"), 1, "said once, not per lost sample");
}

/// What the crate logs at warning level, kept for the tests to read.
mod warnings {
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

    /// Each formatted event, one write per line.
    struct Keep;

    impl std::io::Write for Keep {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            SEEN.lock().unwrap().push(String::from_utf8_lossy(b).into_owned());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Start keeping (every test that reads them calls it first).
    pub fn keep() {
        // Fails when another test installed it first: the same subscriber.
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| Keep)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    }

    /// Warnings so far that contain `text`.
    pub fn about(text: &str) -> usize {
        SEEN.lock().unwrap().iter().filter(|w| w.contains(text)).count()
    }
}

/// Offline ([`Backpressure::Wait`]): with a queue of one and a writer stuck
/// on its first sample, the sink waits instead of losing samples; once the
/// writer moves again every sample is written, in order.
#[test]
fn waiting_loses_nothing_with_a_tiny_queue_and_a_slow_writer() {
    let rules = compile(RULES);
    let batches: Vec<PacketBatch> = (0..10u64)
        .map(|b| {
            judged(
                &rules,
                b * 100,
                &(0..100).map(|i| p(udp([10, 9, b as u8, i], [1, 1, 1, 1], 1, 80), 0)).collect::<Vec<_>>(),
            )
        })
        .collect();
    let (log, entered, open, out) = gate();
    let cfg = SampleConfig { log: Some(Box::new(log)), queue: 1, backpressure: Backpressure::Wait, ..config(None) };
    let sampler = Sampler::start(cfg, Arc::new(Published::new(compile(RULES)))).unwrap();
    let counters = sampler.counters();
    let mut sink = sampler.wrap(Collect::default());
    let feeder = std::thread::spawn(move || {
        for b in &batches {
            sink.write(b).unwrap();
        }
        (sink, batches)
    });
    entered.recv().unwrap();
    // The writer holds one, the queue one, the sink waits with the third.
    std::thread::sleep(Duration::from_millis(200));
    let (went_on, c) = (feeder.is_finished(), counters.totals());
    // Before asserting: a failed test must not leave the writer stuck (the
    // sampler's drop waits for it).
    open.send(()).unwrap();
    assert!(!went_on, "the sink went on while the writer was stuck: {c:?}");
    assert!(c.sampled <= 3 && c.lost_queue_full == 0, "{c:?}");
    let (sink, batches) = feeder.join().unwrap();
    let c = sampler.finish().unwrap().counts;
    assert_eq!((c.sampled, c.written, c.lost_queue_full), (1000, 1000, 0), "{c:?}");
    assert_eq!(sink.inner().out, expected_out(&batches), "no packet lost");
    let order: Vec<String> = out.lines().iter().map(|l| l["src"].as_str().unwrap().to_owned()).collect();
    let want: Vec<String> = (0..10).flat_map(|b| (0..100).map(move |i| format!("10.9.{b}.{i}"))).collect();
    assert_eq!(order, want, "every sample, in order");
}

#[test]
fn rules_replaced_before_the_writer_explains_say_so() {
    let rules = compile(RULES);
    let one = |i: u64| judged(&rules, i, &[p(udp([10, 9, 0, 1], [1, 1, 1, 1], 1, 80), 0)]);
    let (log, entered, open, out) = gate();
    let published = Arc::new(Published::new(compile(RULES)));
    let sampler =
        Sampler::start(SampleConfig { log: Some(Box::new(log)), ..config(None) }, Arc::clone(&published)).unwrap();
    let mut sink = sampler.wrap(Collect::default());
    sink.write(&one(0)).unwrap();
    entered.recv().unwrap(); // the first is explained
    sink.write(&one(1)).unwrap();
    published.publish(compile("set blocklist { 10.9.0.0/16 }\npass saddr @blocklist\n"));
    open.send(()).unwrap();
    let c = sampler.finish().unwrap().counts;
    assert_eq!(c.written, 2);
    let lines = out.lines();
    assert_eq!(lines[0]["reason"], "rule");
    assert_eq!(lines[0]["rule_line"], 3);
    assert_eq!(lines[1]["reason"], "rules_changed");
    assert!(lines[1]["rule_line"].is_null() && lines[1]["rule"].is_null());
}

/// Everything the same size: same rule, port and frame length.
fn same_size_batches(n: u64) -> Vec<PacketBatch> {
    let rules = compile(RULES);
    (0..n).map(|i| judged(&rules, i, &[p(udp([10, 9, 0, i as u8], [1, 1, 1, 1], 1, 80), 0)])).collect()
}

#[test]
fn rotation_keeps_keep_files_each_a_whole_capture() {
    const LIMIT: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let rotated = |i: usize| dir.path().join(format!("drops-{i}.pcapng"));
    // Left by an earlier run beyond what is kept: not ours to list.
    std::fs::write(rotated(7), b"old").unwrap();
    let batches = same_size_batches(40);
    let cfg = SampleConfig { rotate_bytes: Some(LIMIT), keep: 3, ..config(Some(path.clone())) };
    let report = through(cfg, compile(RULES), &batches);
    let c = report.counts;
    assert_eq!((c.written, c.write_errors), (40, 0));
    assert!(c.rotations >= 3, "{c:?}");
    let paths: Vec<PathBuf> = report.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(paths, [path.clone(), rotated(1), rotated(2)]);
    assert!(!rotated(3).exists());
    assert_eq!(std::fs::read(rotated(7)).unwrap(), b"old");

    let mut kept = 0;
    let mut timestamps = Vec::new();
    for f in &report.files {
        let bytes = std::fs::read(&f.path).unwrap();
        let ng = parse_ng(&bytes);
        assert_eq!(ng.names, ["veth0"], "each file declares its interfaces again");
        let records = read_back(&f.path);
        assert_eq!(records.len() as u64, f.records);
        assert!(bytes.len() as u64 <= LIMIT, "{}", f.path.display());
        if f.path != path {
            // Rotated exactly when the next sample would not fit.
            assert!(bytes.len() as u64 + ng.epb_lens[0] as u64 > LIMIT);
        }
        kept += f.records;
        timestamps.splice(0..0, records.iter().map(|r| r.2));
    }
    assert_eq!(kept + report.discarded_records, c.written);
    // Full files hold the same number; the deleted ones were full.
    let full = report.files[1].records;
    assert_eq!(report.files[2].records, full);
    assert_eq!(report.discarded_records, (c.rotations - 2) * full);
    // What is kept is the newest samples, in order.
    let want: Vec<u128> = (40 - kept..40).map(|i| u128::from(T0 + i * 1000 + 7)).collect();
    assert_eq!(timestamps, want);
}

#[test]
fn keep_one_is_the_current_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let cfg = SampleConfig { rotate_bytes: Some(600), keep: 1, ..config(Some(path.clone())) };
    let report = through(cfg, compile(RULES), &same_size_batches(20));
    assert!(report.counts.rotations > 0);
    assert_eq!(report.files.len(), 1);
    assert_eq!(read_back(&path).len() as u64, report.files[0].records);
    assert_eq!(report.files[0].records + report.discarded_records, 20);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_file_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/drops.pcapng");
    let err = Sampler::start(config(Some(path.clone())), Arc::new(Published::new(compile(RULES)))).err().unwrap();
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

/// Samples reach the disk within about a second while the sampler runs.
#[test]
fn samples_are_flushed_while_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let sampler = Sampler::start(config(Some(path.clone())), Arc::new(Published::new(compile(RULES)))).unwrap();
    let mut sink = sampler.wrap(Collect::default());
    for b in same_size_batches(3) {
        sink.write(&b).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while parse_ng(&std::fs::read(&path).unwrap()).packets.len() < 3 {
        assert!(Instant::now() < deadline, "not flushed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(sampler.finish().unwrap().counts.written, 3);
}

/// In a real run with two workers: every packet reaches the sink, every
/// drop is sampled, and the worker named is the one that judged it (the
/// per-worker counts the run reports equal what the same steering says).
#[test]
fn in_a_pipeline_run_with_workers() {
    use sluice_pipeline::{run, Quiet, Reassembly, RunConfig, VecSource};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let frames: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            udp([10, if i % 2 == 0 { 9 } else { 8 }, 0, i as u8], [198, 51, 100, (i % 7) as u8], 1000 + i as u16, 80)
        })
        .collect();
    let packets: Vec<(Meta, Vec<u8>)> =
        frames.iter().enumerate().map(|(i, f)| (meta(i as u64, 0, f.len()), f.clone())).collect();
    let published = Arc::new(Published::new(compile(&RULES.replace("default drop", "default pass"))));
    let key = WorkersConfig::new(2).key;
    let cfg = SampleConfig { steering: Some(Steering::new(&key, 2)), ..config(Some(path.clone())) };
    let sampler = Sampler::start(cfg, Arc::clone(&published)).unwrap();
    let mut collect = Collect::default();
    let mut source = VecSource::new(packets);
    let mut stage = Reassembly::new(DefragLimits::default(), Verdict::Drop);
    let judge = sluice_pipeline::judge(&published, WorkersConfig::new(2));
    let run_cfg = RunConfig { batch_packets: 32, ..RunConfig::default() };
    let done = run(&mut source, &mut stage, judge, &mut sampler.wrap_mut(&mut collect), &mut Quiet, &run_cfg).unwrap();
    let report = sampler.finish().unwrap();
    assert_eq!(collect.out.len(), 300);
    assert_eq!(done.report.stats.dropped, 150);
    assert_eq!((report.counts.drops_seen, report.counts.written), (150, 150));

    let steering = Steering::new(&key, 2);
    let mut per_worker = [0u64; 2];
    for f in &frames {
        per_worker[steering.worker_for(&decode(LinkType::ETHERNET, f))] += 1;
    }
    assert_eq!(done.report.per_worker, per_worker, "the steering the sampler uses is the run's");
    let ng = parse_ng(&std::fs::read(&path).unwrap());
    for NgPacket { data, comment, .. } in &ng.packets {
        let w = steering.worker_for(&decode(LinkType::ETHERNET, data));
        assert!(comment.as_ref().unwrap().ends_with(&format!(" worker={w}")), "{comment:?}");
        assert!(comment.as_ref().unwrap().contains("reason=rule rule_line=3 "));
    }
}

/// tshark opens the file and shows each packet's comment and its
/// interface's name. Skipped without tshark unless SLUICE_REQUIRE_TOOLS=1.
#[test]
fn tshark_shows_comments_and_interface_names() {
    let has_tshark = std::process::Command::new("tshark").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_tshark {
        assert!(
            std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "tshark is required (SLUICE_REQUIRE_TOOLS=1)"
        );
        eprintln!("note: tshark not found; skipping the tshark check of sampled drops");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    let rules = compile(RULES);
    let pkts: Vec<P> = mixed().into_iter().map(|(p, _)| p).collect();
    let batches = [judged(&rules, 0, &pkts)];
    through(config(Some(path.clone())), compile(RULES), &batches);
    let want: Vec<(String, String)> = parse_ng(&std::fs::read(&path).unwrap())
        .packets
        .iter()
        .map(|p| (p.comment.clone().unwrap(), ["veth0", "veth1", "port7"][p.iface as usize].to_owned()))
        .collect();
    assert_eq!(want.len(), 5);
    // Newer tshark calls the comment field `frame.comment`, older `pkt_comment`.
    let mut last_err = String::new();
    for field in ["frame.comment", "pkt_comment"] {
        let out = std::process::Command::new("tshark")
            .args(["-r"])
            .arg(&path)
            .args(["-T", "fields", "-E", "separator=|", "-e", field, "-e", "frame.interface_name"])
            .output()
            .unwrap();
        if !out.status.success() {
            last_err = String::from_utf8_lossy(&out.stderr).into_owned();
            continue;
        }
        let text = String::from_utf8(out.stdout).unwrap();
        let got: Vec<(String, String)> = text
            .lines()
            .map(|l| {
                let (c, n) = l.rsplit_once('|').unwrap();
                (c.to_owned(), n.to_owned())
            })
            .collect();
        assert_eq!(got, want, "tshark -e {field}");
        return;
    }
    panic!("tshark could not read the comments: {last_err}");
}

/// `CaptureWriter::write` to pcapng writes what it always did: the named
/// interfaces and comments are new calls, not changes to the old output.
#[test]
fn pcapng_output_of_write_is_unchanged() {
    let frame = udp([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
    let mut w = CaptureWriter::new(Vec::new(), OutputFormat::Pcapng, None).unwrap();
    let iface = |ts_resolution| Interface { link_type: LinkType::ETHERNET, snaplen: 1500, ts_resolution };
    for (id, res, units) in [(0u32, TsResolution::MICROS, 5u64), (1, TsResolution::NANOS, 1 << 40)] {
        let rec = sluice_pcap::Record {
            index: 0,
            offset: 0,
            timestamp: Timestamp::Units { units, resolution: res },
            orig_len: 99,
            data: &frame[..45],
            interface_id: id,
            interface: iface(res),
        };
        w.write(&rec).unwrap();
    }
    let got = w.finish().unwrap();
    let mut want = Vec::new();
    let le = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
    // Section header.
    for x in [0x0a0d_0d0a, 28, 0x1a2b_3c4d, 1, 0xffff_ffff, 0xffff_ffff, 28] {
        le(&mut want, x);
    }
    // Interface 0, microseconds: no options.
    for x in [1, 20, 1, 1500, 20] {
        le(&mut want, x);
    }
    let epb = |want: &mut Vec<u8>, id: u32, units: u64| {
        for x in [6, 32 + 48, id, (units >> 32) as u32, units as u32, 45, 99] {
            le(want, x);
        }
        want.extend_from_slice(&frame[..45]);
        want.extend_from_slice(&[0, 0, 0]);
        le(want, 32 + 48);
    };
    epb(&mut want, 0, 5);
    // Interface 1, nanoseconds: if_tsresol.
    for x in [1, 32, 1, 1500, 0x0001_0009, 9, 0, 32] {
        le(&mut want, x);
    }
    epb(&mut want, 1, 1 << 40);
    assert_eq!(got, want);
}

/// A log that refuses every write.
struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("broken pipe"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_log_is_counted_and_the_run_goes_on() {
    let batches = same_size_batches(5);
    let sampler = Sampler::start(
        SampleConfig { log: Some(Box::new(Broken)), ..config(None) },
        Arc::new(Published::new(compile(RULES))),
    )
    .unwrap();
    let mut sink = sampler.wrap(Collect::default());
    for b in &batches {
        sink.write(b).unwrap();
    }
    let c = sampler.finish().unwrap().counts;
    assert_eq!((c.sampled, c.written, c.write_errors), (5, 0, 5));
    assert_eq!(sink.inner().out, expected_out(&batches));
}

#[test]
fn a_failed_rotation_stops_the_file_and_finish_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("samples");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("drops.pcapng");
    let cfg = SampleConfig { rotate_bytes: Some(600), ..config(Some(path.clone())) };
    let sampler = Sampler::start(cfg, Arc::new(Published::new(compile(RULES)))).unwrap();
    let mut sink = sampler.wrap(Collect::default());
    // The directory goes away: the first rotation cannot rename the file.
    std::fs::remove_dir_all(&sub).unwrap();
    let batches = same_size_batches(10);
    for b in &batches {
        sink.write(b).unwrap();
    }
    let err = sampler.finish().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()) && msg.contains("renaming"), "{msg}");
    let sluice_pipeline::sample::SampleError::File { report, .. } = err else { panic!("{err}") };
    let c = report.counts;
    assert!(c.written >= 1 && c.write_errors >= 1, "{c:?}");
    assert_eq!(c.written + c.write_errors, 10, "{c:?}");
    assert_eq!(c.rotations, 0);
    assert_eq!(sink.inner().out, expected_out(&batches), "no packet lost");
}
