//! The live ports as a pipeline source and sink, through `sluice_pipeline::run`:
//! `ns_a:a0 <-> a1 [run(source, judge, sink)] b1 <-> ns_b:b0`. Every test
//! frame (non-IP, so the rules pass it) must arrive unchanged on the far
//! side, both ways, VLAN tags included; the counters must add up; the stop
//! flag ends the run; and the XDP programs are gone afterwards.

use sluice_testkit::live as common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_same, live_or_skip, test_frames, Endpoint, Topology};
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_live::pipeline::{open_packet, open_xsk, KernelDrops, PortCount, Sent, XskBridgeConfig};
use sluice_live::{PacketConfig, XdpMode};
use sluice_pipeline::{
    Disposition, Judge, JudgeError, LiveStats, PacketBatch, Quiet, Reassembly, RunConfig, Sink, Source, Verdict,
    WorkersConfig,
};
use std::collections::VecDeque;

/// What the ports counted, per port, as they report it.
#[derive(Default)]
struct Counted {
    rx: [(AtomicU64, AtomicU64); 2],
    tx: Mutex<[Sent; 2]>,
    frames_reclaimed: AtomicU64,
}

impl PortCount for Counted {
    fn received(&self, port: usize, _lane: Option<usize>, packets: u64, bytes: u64) {
        self.rx[port].0.fetch_add(packets, Ordering::Relaxed);
        self.rx[port].1.fetch_add(bytes, Ordering::Relaxed);
    }
    fn sent(&self, port: usize, _lane: Option<usize>, s: &Sent) {
        let mut tx = self.tx.lock().unwrap();
        let t = &mut tx[port];
        t.packets += s.packets;
        t.bytes += s.bytes;
        t.ring_full += s.ring_full;
        t.invalid += s.invalid;
        t.no_buffer += s.no_buffer;
        t.errors += s.errors;
    }
    fn kernel_drops(&self, _port: usize, _drops: &KernelDrops) {}
    fn frames_reclaimed(&self, frames: u64) {
        self.frames_reclaimed.fetch_add(frames, Ordering::Relaxed);
    }
}

impl Counted {
    /// Port `port`'s received packets and bytes, and what it sent.
    fn port(&self, port: usize) -> (u64, u64, Sent) {
        let rx = &self.rx[port];
        (rx.0.load(Ordering::Relaxed), rx.1.load(Ordering::Relaxed), self.tx.lock().unwrap()[port])
    }
}

fn judge(workers: usize) -> Box<dyn Judge> {
    sluice_pipeline::judge(&Arc::new(Published::new(RuleSet::empty())), WorkersConfig::new(workers))
}

/// A judge that drops every test frame with an odd sequence number (the
/// test frames are not IP, so no rule could): the sinks' drop handling.
#[derive(Default)]
struct DropOdd(VecDeque<PacketBatch>);

impl Judge for DropOdd {
    fn submit(&mut self, mut batch: PacketBatch) -> Result<(), JudgeError> {
        let odd: Vec<bool> =
            (0..batch.len()).map(|i| common::seq_of(batch.bytes(i)).is_some_and(|s| s % 2 == 1)).collect();
        for (p, odd) in batch.packets_mut().iter_mut().zip(odd) {
            if !matches!(p.disposition, Disposition::Decided(_)) {
                p.verdict = if odd { Verdict::Drop } else { Verdict::Pass };
            }
        }
        self.0.push_back(batch);
        Ok(())
    }
    fn next(&mut self, _wait: bool) -> Result<Option<PacketBatch>, JudgeError> {
        Ok(self.0.pop_front())
    }
    fn in_flight(&self) -> usize {
        self.0.len()
    }
    fn live(&self) -> Vec<(u64, u64)> {
        vec![(0, 0)]
    }
    fn live_stats(&self) -> Vec<LiveStats> {
        Vec::new()
    }
    fn finish(self: Box<Self>) -> Vec<sluice_engine::Stats> {
        vec![sluice_engine::Stats::default()]
    }
}

fn bridge<S, K>(
    source: S,
    sink: K,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<sluice_pipeline::RunReport>
where
    S: Source + Send + 'static,
    S::Error: Send + std::fmt::Debug,
    K: Sink + Send + 'static,
    K::Error: std::fmt::Debug + std::fmt::Display,
{
    bridge_with(source, sink, Box::new(move || judge(workers)), stop)
}

fn bridge_with<S, K>(
    mut source: S,
    mut sink: K,
    judge: Box<dyn FnOnce() -> Box<dyn Judge> + Send>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<sluice_pipeline::RunReport>
where
    S: Source + Send + 'static,
    S::Error: Send + std::fmt::Debug,
    K: Sink + Send + 'static,
    K::Error: std::fmt::Debug + std::fmt::Display,
{
    std::thread::spawn(move || {
        let mut stage = Reassembly::new(Default::default(), sluice_pipeline::Verdict::Drop);
        let cfg = RunConfig { read_ahead: false, live_wait: Duration::from_millis(10), ..RunConfig::default() };
        let done =
            sluice_pipeline::run(&mut source, &mut stage, judge(), &mut sink, &mut Quiet, &cfg).expect("the run");
        assert!(done.stopped.is_none(), "source error: {:?}", done.stopped);
        assert!(stop.load(Ordering::Relaxed), "the run ended only when asked to");
        done.report
    })
}

fn exchange(topo: &Topology, counters: &Counted) {
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let ab = test_frames(0, 400);
    ep_a.send_all(&ab);
    let got_b = ep_b.collect(ab.len(), Duration::from_secs(5));
    let ba = test_frames(10_000, 400);
    ep_b.send_all(&ba);
    let got_a = ep_a.collect(ba.len(), Duration::from_secs(5));
    assert_same("A->B", &ab, &got_b);
    assert_same("B->A", &ba, &got_a);
    let (a, b) = (counters.port(0), counters.port(1));
    println!("a1 {a:?}\nb1 {b:?}");
    assert_eq!((a.0, b.2.packets), (400, 400), "A->B counted");
    assert_eq!((b.0, a.2.packets), (400, 400), "B->A counted");
    let bytes: u64 = ab.iter().map(|f| f.len() as u64).sum();
    assert_eq!((a.1, b.2.bytes), (bytes, bytes));
}

fn xdp_attached(iface: &str) -> bool {
    let out = std::process::Command::new("ip").args(["-d", "link", "show", "dev", iface]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Whether neither interface has an XDP program within 2 s: closing the
/// last descriptor of a BPF link detaches its program from a kernel work
/// queue, not at once (`bpf_link_put` defers the release), so a loaded
/// machine can show it attached for a moment after the run.
fn xdp_detached(ifaces: &[&str]) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if !ifaces.iter().any(|i| xdp_attached(i)) {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn xsk_case(mode: XdpMode, workers: usize, tag: &str) {
    let topo = Topology::new(tag);
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counted::default());
    let cfg = XskBridgeConfig { mode, frames: 4096, ..XskBridgeConfig::default() };
    let (source, sink) =
        open_xsk([&topo.a.near, &topo.b.near], &cfg, stop.clone(), counters.clone() as Arc<dyn PortCount>)
            .expect("open AF_XDP bridge");
    assert_eq!(source.queues(), [1, 1], "veth has one queue");
    assert_eq!(source.xdp_mode(), mode);
    assert!(xdp_attached(&topo.a.near) && xdp_attached(&topo.b.near));
    let run = bridge(source, sink, workers, stop.clone());
    exchange(&topo, &counters);
    stop.store(true, Ordering::Relaxed);
    let report = run.join().expect("bridge thread");
    assert_eq!(report.stats.packets, 800);
    assert_eq!(report.per_worker.len(), workers);
    assert!(xdp_detached(&[&topo.a.near, &topo.b.near]), "XDP detached when the run is over");
}

#[test]
fn pipeline_xsk_skb_inline() {
    if !live_or_skip("pipeline_xsk_skb_inline") {
        return;
    }
    xsk_case(XdpMode::Skb, 1, "ps");
}

#[test]
fn pipeline_xsk_driver_two_workers() {
    if !live_or_skip("pipeline_xsk_driver_two_workers") {
        return;
    }
    xsk_case(XdpMode::Driver, 2, "pd");
}

#[test]
fn pipeline_packet_two_workers() {
    if !live_or_skip("pipeline_packet_two_workers") {
        return;
    }
    let topo = Topology::new("pp");
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counted::default());
    let (source, sink) = open_packet(
        [&topo.a.near, &topo.b.near],
        &PacketConfig::default(),
        stop.clone(),
        counters.clone() as Arc<dyn PortCount>,
    )
    .expect("open AF_PACKET bridge");
    let run = bridge(source, sink, 2, stop.clone());
    exchange(&topo, &counters);
    stop.store(true, Ordering::Relaxed);
    let report = run.join().expect("bridge thread");
    assert_eq!(report.stats.packets, 800);
}

/// Drops free their frames: more frames cross the bridge, half of them
/// dropped, than the UMEM has, so a leak of dropped (or sent) frames would
/// starve it and stop the forwarding. Every passed frame arrives unchanged,
/// no dropped one arrives, and the counters say so.
fn drop_case(xsk: Option<XdpMode>, tag: &str) {
    let topo = Topology::new(tag);
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counted::default());
    let judge: Box<dyn FnOnce() -> Box<dyn Judge> + Send> = Box::new(|| Box::new(DropOdd::default()));
    const UMEM_FRAMES: u32 = 4096;
    let run = match xsk {
        Some(mode) => {
            let cfg = XskBridgeConfig { mode, frames: UMEM_FRAMES, ..XskBridgeConfig::default() };
            let (source, sink) =
                open_xsk([&topo.a.near, &topo.b.near], &cfg, stop.clone(), counters.clone() as Arc<dyn PortCount>)
                    .unwrap();
            bridge_with(source, sink, judge, stop.clone())
        }
        None => {
            let (source, sink) = open_packet(
                [&topo.a.near, &topo.b.near],
                &PacketConfig::default(),
                stop.clone(),
                counters.clone() as Arc<dyn PortCount>,
            )
            .unwrap();
            bridge_with(source, sink, judge, stop.clone())
        }
    };
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let (rounds, per_round) = (12u32, 400u32);
    assert!(2 * rounds * per_round > UMEM_FRAMES * 2, "more frames than the UMEM holds, twice");
    for r in 0..rounds {
        for forward in [true, false] {
            let base = if forward { 0 } else { 100_000 };
            let (from, to) = if forward { (&mut ep_a, &mut ep_b) } else { (&mut ep_b, &mut ep_a) };
            let frames = test_frames(base + r * per_round, per_round);
            let passed: Vec<Vec<u8>> =
                frames.iter().filter(|f| common::seq_of(f).is_some_and(|s| s % 2 == 0)).cloned().collect();
            from.send_all(&frames);
            let got = to.collect(passed.len(), Duration::from_secs(5));
            assert_same(&format!("round {r} from seq {base}"), &passed, &got);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let report = run.join().expect("bridge thread");
    let total = u64::from(2 * rounds * per_round);
    assert_eq!(report.stats.packets, 0, "DropOdd keeps no engine counters");
    let (a, b) = (counters.port(0), counters.port(1));
    println!("a1 {a:?}\nb1 {b:?}");
    assert_eq!(a.0 + b.0, total, "every frame received once");
    assert_eq!(a.2.packets + b.2.packets, total / 2, "every even frame sent, no odd one");
    assert_eq!(a.2.ring_full + b.2.ring_full + a.2.no_buffer + b.2.no_buffer, 0);
}

#[test]
fn pipeline_xsk_drops_free_their_frames() {
    if !live_or_skip("pipeline_xsk_drops_free_their_frames") {
        return;
    }
    drop_case(Some(XdpMode::Driver), "px");
}

#[test]
fn pipeline_packet_drops() {
    if !live_or_skip("pipeline_packet_drops") {
        return;
    }
    drop_case(None, "pq");
}

/// Reassembly copies fragments out of their UMEM frames and sends the
/// copies from free ones; the frames they came in are given back when the
/// pipeline is idle (`Sink::quiescent`), not only when a later whole packet
/// reaches the sink. A stream of nothing but fragments, several times the
/// UMEM's frames, keeps flowing.
#[test]
fn pipeline_xsk_fragments_only_give_their_frames_back() {
    if !live_or_skip("pipeline_xsk_fragments_only_give_their_frames_back") {
        return;
    }
    let topo = Topology::new("pf");
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counted::default());
    const UMEM_FRAMES: u32 = 2048;
    let cfg = XskBridgeConfig { mode: XdpMode::Driver, frames: UMEM_FRAMES, ..XskBridgeConfig::default() };
    let (source, sink) =
        open_xsk([&topo.a.near, &topo.b.near], &cfg, stop.clone(), counters.clone() as Arc<dyn PortCount>).unwrap();
    let run = bridge(source, sink, 1, stop.clone());
    let mut ep_a = Endpoint::open(&topo.ns_a.name, &topo.a.far);
    let mut ep_b = Endpoint::open(&topo.ns_b.name, &topo.b.far);
    let (rounds, per_round) = (6u16, 500u16);
    assert!(u32::from(2 * rounds * per_round) > 2 * UMEM_FRAMES, "more fragments than the UMEM holds, twice");
    for r in 0..rounds {
        let frames: Vec<Vec<u8>> =
            (0..per_round).flat_map(|i| common::ipv4_fragments(r * per_round + i, [192, 0, 2, 1])).collect();
        let mut got = 0usize;
        let receive = |ep_b: &mut Endpoint, wait_ms| {
            let mut n = 0;
            ep_b.sock.poll_rx(wait_ms).unwrap();
            ep_b.sock.rx_batch(4096, |f, _| n += usize::from(frames.iter().any(|s| s.as_slice() == f)));
            n
        };
        // Sent in bursts of 100, the receiver drained between them: a
        // round's 1,000 frames at once can overflow the veth's backlog
        // (netdev_max_backlog, 1,000) or the receiving socket's buffer while
        // other tests run, and this test is about the UMEM's frames.
        for burst in frames.chunks(100) {
            ep_a.send_all(burst);
            got += receive(&mut ep_b, 1);
        }
        let end = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < end {
            got += receive(&mut ep_b, 5);
            if got >= frames.len() {
                break;
            }
        }
        assert_eq!(got, frames.len(), "round {r}: every fragment forwarded");
    }
    stop.store(true, Ordering::Relaxed);
    let report = run.join().expect("bridge thread");
    let total = u64::from(2 * rounds * per_round);
    assert_eq!(report.reassembly.completed, total / 2, "every datagram reassembled");
    assert_eq!(counters.frames_reclaimed.load(Ordering::Relaxed), total, "every fragment's frame came back");
    assert_eq!(counters.port(1).2.no_buffer, 0);
}
