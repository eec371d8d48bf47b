//! The pipeline end to end on packets in memory: every packet comes out
//! exactly once with the verdict a single-threaded engine gives it, in input
//! order for any number of workers; a worker that panics ends the run with
//! an error and everything finished before it written in order.

use proptest::prelude::*;
use sluice_defrag::DefragLimits;
use sluice_engine::snapshot::Published;
use sluice_engine::{Engine, RuleSet, Verdict};
use sluice_pipeline::*;
use sluice_rules::Prefix;
use sluice_wire::capture::{Interface, Timestamp, TsResolution};
use sluice_wire::LinkType;
use std::sync::Arc;

fn meta(index: u64) -> Meta {
    Meta {
        index,
        offset: 0,
        timestamp: Timestamp::Split { secs: 1_000 + (index / 1000) as u32, frac: (index % 1000) as u32, nanos: false },
        wire_len: 28,
        port: 0,
        interface: Interface { link_type: LinkType::IPV4, snaplen: 65_535, ts_resolution: TsResolution::MICROS },
    }
}

/// IPv4 UDP, optionally a first fragment (MF set) or a later one.
fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, frag: Option<(u16, bool)>) -> Vec<u8> {
    let (off, mf) = frag.unwrap_or((0, false));
    let flags = (u16::from(mf) << 13) | (off / 8);
    let mut f = vec![0x45, 0, 0, 28, 0, 7];
    f.extend_from_slice(&flags.to_be_bytes());
    f.extend_from_slice(&[64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
    f
}

fn rules() -> RuleSet {
    let list: Vec<Prefix> = ["10.0.0.0/8", "192.0.2.7"].iter().map(|s| s.parse().unwrap()).collect();
    RuleSet::new(&[], &[], &list)
}

fn judge_for(workers: usize, published: &Arc<Published<RuleSet>>, panic_at: Option<(usize, u64)>) -> Box<dyn Judge> {
    sluice_pipeline::judge(published, WorkersConfig { panic_at, ..WorkersConfig::new(workers) })
}

fn run_all(packets: Vec<(Meta, Vec<u8>)>, workers: usize, batch: usize) -> (Vec<(u64, Verdict)>, RunReport) {
    let direct = run_with(packets.clone(), workers, batch, false);
    let ahead = run_with(packets, workers, batch, true);
    assert_eq!(direct.0, ahead.0, "a reader thread changes nothing in the output");
    assert_eq!(direct.1.stats, ahead.1.stats);
    direct
}

fn run_with(
    packets: Vec<(Meta, Vec<u8>)>,
    workers: usize,
    batch: usize,
    read_ahead: bool,
) -> (Vec<(u64, Verdict)>, RunReport) {
    let published = Arc::new(Published::new(rules()));
    let mut source = VecSource::new(packets);
    let mut sink = Collect::default();
    let mut stage = Reassembly::new(DefragLimits::default(), Verdict::Drop);
    let cfg = RunConfig { batch_packets: batch, max_in_flight: 3, read_ahead, ..RunConfig::default() };
    let done = run(&mut source, &mut stage, judge_for(workers, &published, None), &mut sink, &mut Quiet, &cfg)
        .expect("run completes");
    assert!(sink.finished, "the sink is finished");
    (sink.out, done.report)
}

#[test]
fn every_packet_once_with_the_single_thread_verdict_in_input_order() {
    let mut reference = Engine::new(rules(), Verdict::Pass);
    let mut packets = Vec::new();
    let mut expected = Vec::new();
    for i in 0..3000u64 {
        let x = i as u8;
        let f = v4([10 + (x % 3), x, 1, 2], [192, 0, 2, x % 9], 1000 + x as u16, None);
        expected.push((i, reference.judge(LinkType::IPV4, &f, 28)));
        packets.push((meta(i), f));
    }
    for workers in [1, 2, 3] {
        let (out, report) = run_all(packets.clone(), workers, 100);
        assert_eq!(out, expected, "{workers} workers");
        assert_eq!(report.stats, *reference.stats(), "{workers} workers count like the engine");
        assert_eq!(report.per_worker.len(), workers);
        assert_eq!(report.per_worker.iter().sum::<u64>(), 3000);
        if workers > 1 {
            assert!(report.per_worker.iter().all(|&n| n > 0), "steering used every worker: {:?}", report.per_worker);
        }
    }
}

#[test]
fn reassembled_fragments_come_out_together_where_the_datagram_completes() {
    // Packet 1 is a first fragment, packet 3 completes it; 0, 2, 4 are whole.
    let packets = vec![
        (meta(0), v4([1, 1, 1, 1], [2, 2, 2, 2], 1, None)),
        (meta(1), v4([10, 9, 9, 9], [2, 2, 2, 2], 7, Some((0, true)))),
        (meta(2), v4([1, 1, 1, 2], [2, 2, 2, 2], 2, None)),
        (meta(3), v4([10, 9, 9, 9], [2, 2, 2, 2], 7, Some((8, false)))),
        (meta(4), v4([1, 1, 1, 3], [2, 2, 2, 2], 3, None)),
    ];
    for workers in [1, 2] {
        let (out, report) = run_all(packets.clone(), workers, 2);
        let order: Vec<u64> = out.iter().map(|o| o.0).collect();
        assert_eq!(order, vec![0, 2, 1, 3, 4]);
        assert_eq!(out[2].1, Verdict::Drop, "listed source");
        assert_eq!(out[3].1, Verdict::Drop);
        assert_eq!(report.reassembly.completed, 1);
    }
}

#[test]
fn a_reassembled_datagram_is_steered_by_its_four_tuple() {
    // Fragments carry no ports of their own: steered by the IP pair, both
    // pieces of each datagram would go to one worker whatever the ports.
    // Reassembled, each datagram goes where its 4-tuple goes.
    let key = WorkersConfig::new(4).key;
    let steering = Steering::new(&key, 4);
    for sport in [1u16, 2, 3, 4, 5, 6, 7, 8] {
        let (src, dst) = ([10, 9, 9, 9], [2, 2, 2, 2]);
        let packets =
            vec![(meta(0), v4(src, dst, sport, Some((0, true)))), (meta(1), v4(src, dst, sport, Some((8, false))))];
        let (_, report) = run_all(packets, 4, 8);
        let flow = sluice_steer::RssInput::four_tuple(src.into(), dst.into(), sport, 53);
        let mut expected = vec![0u64; 4];
        expected[steering.worker_for_input(&flow)] = 2;
        assert_eq!(report.per_worker, expected, "source port {sport}");
    }
}

#[test]
fn incomplete_datagrams_are_decided_at_the_end_and_counted_once() {
    let packets = vec![
        (meta(0), v4([1, 1, 1, 1], [2, 2, 2, 2], 1, Some((0, true)))),
        (meta(1), v4([1, 1, 1, 2], [2, 2, 2, 2], 2, None)),
    ];
    let (out, report) = run_all(packets, 2, 1);
    assert_eq!(out, vec![(1, Verdict::Pass), (0, Verdict::Drop)]);
    assert_eq!(report.stats.packets, 2);
    assert_eq!(report.stats.dropped_fragments, 1);
    assert_eq!(report.reassembly.incomplete, 1);
}

#[test]
fn a_worker_that_panics_ends_the_run_with_an_error_and_a_valid_prefix() {
    let packets: Vec<(Meta, Vec<u8>)> =
        (0..5000u64).map(|i| (meta(i), v4([1, 2, (i >> 8) as u8, i as u8], [5, 6, 7, 8], i as u16, None))).collect();
    let published = Arc::new(Published::new(rules()));
    let mut source = VecSource::new(packets);
    let mut sink = Collect::default();
    let mut stage = Reassembly::new(DefragLimits::default(), Verdict::Drop);
    let cfg = RunConfig { batch_packets: 50, max_in_flight: 4, read_ahead: true, ..RunConfig::default() };
    let judge = judge_for(2, &published, Some((1, 10)));
    let err = run(&mut source, &mut stage, judge, &mut sink, &mut Quiet, &cfg).expect_err("the run fails");
    let RunError::Judge { error, .. } = &err else { panic!("a judge error, got {err}") };
    assert!(matches!(error, JudgeError::WorkerDied { worker: 1, .. }), "{error}");
    assert!(err.to_string().contains("worker 1"), "{err}");
    assert!(sink.finished, "the sink is finished after the failure");
    let order: Vec<u64> = sink.out.iter().map(|o| o.0).collect();
    assert!(!order.is_empty() && order.len() < 5000, "a prefix was written: {}", order.len());
    assert_eq!(order, (0..order.len() as u64).collect::<Vec<_>>(), "in input order, no gaps");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary packets, whole or fragments of a few datagrams, in any
    /// order, with duplicates and overlaps: each comes out exactly once with
    /// one verdict, and 1, 2 and 3 workers write the same sequence.
    #[test]
    fn every_packet_exactly_once_for_any_worker_count(
        items in proptest::collection::vec((0u8..4, 0u16..6, any::<bool>(), any::<bool>()), 0..120),
        batch in 1usize..40,
    ) {
        let packets: Vec<(Meta, Vec<u8>)> = items
            .iter()
            .enumerate()
            .map(|(i, &(host, off, mf, frag))| {
                let f = frag.then_some((off * 8, mf));
                (meta(i as u64), v4([10 * (host % 2) + 1, 0, 0, host], [9, 9, 9, 9], 5, f))
            })
            .collect();
        let (one, r1) = run_all(packets.clone(), 1, batch);
        let mut seen: Vec<u64> = one.iter().map(|o| o.0).collect();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..packets.len() as u64).collect::<Vec<_>>());
        prop_assert_eq!(r1.stats.packets, packets.len() as u64);
        prop_assert_eq!(r1.stats.passed + r1.stats.dropped, r1.stats.packets);
        for workers in [2, 3] {
            let (many, _) = run_all(packets.clone(), workers, batch);
            prop_assert_eq!(&many, &one);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Reassembly edits each batch in place: whatever the batch size, the
    /// output is every whole packet where it came, and each datagram's
    /// pieces together, in arrival order, where its last piece arrived
    /// (computed here from the stream, not by the pipeline); datagrams
    /// never completed come out at the end.
    #[test]
    fn datagrams_come_out_where_they_complete_for_any_batch_size(
        datagrams in proptest::collection::vec((1usize..5, any::<bool>()), 0..24),
        whole in 0usize..60,
        order in proptest::collection::vec(any::<u32>(), 200),
        batch in 1usize..40,
    ) {
        // (datagram or None, piece, pieces) per packet, shuffled by `order`
        // (a datagram's pieces keep their relative order only by chance).
        let mut items: Vec<(Option<usize>, usize, usize)> = Vec::new();
        for (d, &(pieces, complete)) in datagrams.iter().enumerate() {
            let sent = if complete || pieces == 1 { pieces } else { pieces - 1 };
            items.extend((0..sent).map(|k| (Some(d), k, pieces)));
        }
        items.extend((0..whole).map(|_| (None, 0, 0)));
        let mut keyed: Vec<(u32, usize)> = (0..items.len()).map(|i| (order[i % order.len()] ^ i as u32, i)).collect();
        // Runs of one datagram's pieces back to back are the common case:
        // keep the generated order for about half the streams.
        if order[0] % 2 == 0 {
            keyed.sort_unstable();
        }
        let items: Vec<_> = keyed.iter().map(|&(_, i)| items[i]).collect();
        let packets: Vec<(Meta, Vec<u8>)> = items
            .iter()
            .enumerate()
            .map(|(i, &(d, k, pieces))| {
                let f = match d {
                    Some(d) => {
                        let mut f = v4([1, 0, 0, d as u8], [9, 9, 9, 9], 5, Some(((k * 8) as u16, k + 1 < pieces)));
                        f[5] = d as u8;
                        f
                    }
                    None => v4([1, 2, 3, i as u8], [9, 9, 9, 9], 5, None),
                };
                (meta(i as u64), f)
            })
            .collect();
        let mut expected = Vec::new();
        let mut seen: Vec<Vec<u64>> = vec![Vec::new(); datagrams.len()];
        for (i, &(d, _, pieces)) in items.iter().enumerate() {
            match d {
                None => expected.push(i as u64),
                Some(d) => {
                    seen[d].push(i as u64);
                    if seen[d].len() == pieces {
                        expected.append(&mut seen[d]);
                    }
                }
            }
        }
        let (out, report) = run_all(packets, 1, batch);
        let got: Vec<u64> = out.iter().map(|o| o.0).collect();
        prop_assert_eq!(&got[..expected.len()], &expected[..]);
        let mut rest = got[expected.len()..].to_vec();
        rest.sort_unstable();
        let mut never: Vec<u64> = seen.concat();
        never.sort_unstable();
        prop_assert_eq!(rest, never);
        prop_assert_eq!(report.reassembly.completed as usize, datagrams.iter().filter(|d| d.1 && d.0 > 1).count());
    }
}

/// A live source: one first fragment stamped with the wall clock, then
/// quiet until `quiet` has passed.
struct QuietLink {
    sent: bool,
    until: std::time::Instant,
}

impl Source for QuietLink {
    type Error = std::convert::Infallible;
    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<std::time::Instant>) -> Result<Fill, Self::Error> {
        if !self.sent {
            self.sent = true;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
            let mut m = meta(0);
            m.timestamp = Timestamp::Split { secs: now.as_secs() as u32, frac: now.subsec_nanos(), nanos: true };
            batch.push_copy(m, &v4([1, 1, 1, 1], [2, 2, 2, 2], 9, Some((0, true))));
            return Ok(Fill::More);
        }
        if std::time::Instant::now() >= self.until {
            return Ok(Fill::End);
        }
        std::thread::sleep(
            deadline.expect("a live source gets a deadline").saturating_duration_since(std::time::Instant::now()),
        );
        Ok(Fill::More)
    }
    fn is_live(&self) -> bool {
        true
    }
}

#[test]
fn held_fragments_expire_on_the_wall_clock_when_the_link_is_quiet() {
    for read_ahead in [false, true] {
        let published = Arc::new(Published::new(rules()));
        let mut source =
            QuietLink { sent: false, until: std::time::Instant::now() + std::time::Duration::from_millis(400) };
        let mut sink = Collect::default();
        let limits = DefragLimits { timeout_ns: 100_000_000, ..DefragLimits::default() };
        let mut stage = Reassembly::new(limits, Verdict::Pass);
        let cfg = RunConfig { read_ahead, live_wait: std::time::Duration::from_millis(5), ..RunConfig::default() };
        let judge = judge_for(1, &published, None);
        let done = run(&mut source, &mut stage, judge, &mut sink, &mut Quiet, &cfg).unwrap();
        assert_eq!(sink.out, vec![(0, Verdict::Pass)], "given up, with the incomplete verdict");
        assert_eq!(done.report.reassembly.timed_out, 1, "by the clock, not at the end of the input");
        assert_eq!(done.report.reassembly.incomplete, 0);
    }
}

/// A sink whose output the test keeps after the lane that owned it is gone.
struct Logged(Arc<std::sync::Mutex<Vec<(u64, Verdict)>>>);

impl Sink for Logged {
    type Error = std::convert::Infallible;
    fn write(&mut self, batch: &PacketBatch) -> Result<(), Self::Error> {
        self.0.lock().unwrap().extend(batch.packets().iter().map(|p| (p.meta.index, p.verdict)));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Runs `lanes` (each its own packets) side by side, reassembly routed by
/// shared inboxes; returns every lane's output, the merged report and the
/// fragments moved between lanes.
fn run_in_lanes(lanes: Vec<Vec<(Meta, Vec<u8>)>>, batch: usize) -> (Vec<Vec<(u64, Verdict)>>, RunReport, u64) {
    let published = Arc::new(Published::new(rules()));
    let inboxes = Inboxes::new(lanes.len());
    let logs: Vec<_> = lanes.iter().map(|_| Arc::new(std::sync::Mutex::new(Vec::new()))).collect();
    let ends = lanes.into_iter().zip(&logs).map(|(p, log)| (VecSource::new(p), Logged(Arc::clone(log)))).collect();
    let stage = || Reassembly::new(DefragLimits::default(), Verdict::Drop);
    let observer = || Box::new(Quiet) as Box<dyn Observer + Send>;
    let (lanes, stats) = lanes::inline_lanes(ends, &published, JudgeConfig::default(), &inboxes, stage, observer, &[0]);
    assert_eq!(stats.len(), lanes.len(), "one judge's counters per lane");
    let cfg = RunConfig { batch_packets: batch, ..RunConfig::default() };
    let done = lanes::combine(lanes::run_lanes(lanes, &cfg, &|| {})).expect("every lane completes");
    let outs = logs.iter().map(|l| l.lock().unwrap().clone()).collect();
    (outs, done.report, inboxes.moved.load(std::sync::atomic::Ordering::Relaxed))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Datagrams cut into pieces (some left incomplete) and whole packets,
    /// dealt to 2 or 3 lanes at random, as a NIC that does not keep a
    /// datagram's fragments on one queue would: every packet comes out of
    /// exactly one lane, with the verdict one pipeline gives it, and every
    /// complete datagram is reassembled wherever its pieces arrived.
    #[test]
    fn lanes_reassemble_datagrams_split_over_queues(
        datagrams in proptest::collection::vec((0u8..6, 1usize..5, any::<bool>()), 1..20),
        whole in 0usize..40,
        deal in proptest::collection::vec(0usize..3, 200),
        lanes in 2usize..4,
        batch in 1usize..16,
    ) {
        let mut packets = Vec::new();
        for (d, &(host, pieces, complete)) in datagrams.iter().enumerate() {
            for k in 0..pieces {
                let last = k + 1 == pieces;
                if last && !complete && pieces > 1 {
                    continue;
                }
                let mut f = v4([10 * (host % 2) + 1, 0, d as u8, host], [9, 9, 9, 9], 5, Some(((k * 8) as u16, !last)));
                f[5] = d as u8; // the datagram's IP ID
                packets.push(f);
            }
        }
        for w in 0..whole {
            packets.push(v4([1, 2, 3, w as u8], [9, 9, 9, 9], 5, None));
        }
        let packets: Vec<(Meta, Vec<u8>)> =
            packets.into_iter().enumerate().map(|(i, f)| (meta(i as u64), f)).collect();
        let (single, one) = run_all(packets.clone(), 1, batch);
        let mut dealt = vec![Vec::new(); lanes];
        for (i, p) in packets.iter().enumerate() {
            dealt[deal[i % deal.len()] % lanes].push(p.clone());
        }
        let (outs, many, _moved) = run_in_lanes(dealt, batch);
        let mut all: Vec<(u64, Verdict)> = outs.into_iter().flatten().collect();
        all.sort_unstable_by_key(|o| o.0);
        let mut single = single;
        single.sort_unstable_by_key(|o| o.0);
        prop_assert_eq!(all, single);
        prop_assert_eq!(many.reassembly.completed, one.reassembly.completed);
        prop_assert_eq!(many.stats.packets, one.stats.packets);
        prop_assert_eq!(many.per_worker.len(), lanes);
    }
}

#[test]
fn a_fragment_that_arrived_on_another_lane_is_moved_to_its_own() {
    // One datagram, its first piece on lane 0 and its last on lane 1: one
    // of the two lanes owns the IP pair, the other moves its piece there.
    let first = (meta(0), v4([10, 9, 9, 9], [2, 2, 2, 2], 7, Some((0, true))));
    let last = (meta(1), v4([10, 9, 9, 9], [2, 2, 2, 2], 7, Some((8, false))));
    let (outs, report, moved) = run_in_lanes(vec![vec![first], vec![last]], 4);
    assert_eq!(moved, 1, "exactly the piece on the wrong lane moved");
    assert_eq!(report.reassembly.completed, 1, "the datagram completed in the lane that owns it");
    let owner: Vec<_> = outs.iter().filter(|o| !o.is_empty()).collect();
    assert_eq!(owner.len(), 1, "both pieces come out of one lane: {outs:?}");
    assert_eq!(owner[0].iter().map(|o| o.1).collect::<Vec<_>>(), vec![Verdict::Drop; 2], "10/8 is listed");
}
