//! What the bridge counts of its ports, declared once: [`BridgeCounters`]
//! (with the families `/metrics` shows them under). The ports count what
//! they receive, send and lose into it through [`PortCount`] (the I/O
//! layer names no metric); `Counting`, around each lane's sink, counts
//! every packet's verdict and the fragments by outcome.

use sluice_live::pipeline::{KernelDrops, PortCount, Sent};
use sluice_pipeline::{Disposition, PacketBatch, Sink, Verdict};
use sluice_wire::PacketSummary;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

sluice_metrics::counters! {
    /// One port's counters, written by the source and the sink once per batch
    /// and read by whoever reports them (metrics, a status line). Each is
    /// declared once here, with where `/metrics` shows it; its name is its
    /// key in the summary's `per_port`.
    pub struct PortCounters / PortTotals {
        /// Frames received on this port.
        rx_packets,
        /// Their bytes on the wire.
        rx_bytes,
        /// Frames transmitted on this port (passed packets from the other one).
        tx_packets => "sluice_tx_packets",
        /// Bytes transmitted on this port.
        tx_bytes => "sluice_tx_bytes",
        /// Passed frames lost because this port's TX ring stayed full.
        tx_ring_full => "sluice_ring_drops" { "ring" = "tx_ring_full" },
        /// Passed frames that cannot be sent: larger than a slot or frame, or
        /// shorter than an Ethernet header.
        tx_invalid => "sluice_ring_drops" { "ring" = "tx_invalid" },
        /// Passed frames copied by reassembly that found no free UMEM frame.
        tx_no_buffer => "sluice_ring_drops" { "ring" = "tx_no_buffer" },
        /// Failed transmit system calls (the frames stay queued for the next).
        tx_errors => "sluice_ring_drops" { "ring" = "tx_error" },
        /// Frames the kernel dropped before we saw them: the RX ring was full
        /// (AF_PACKET `tp_drops`; AF_XDP `rx_dropped + rx_ring_full`).
        rx_ring_drops => "sluice_ring_drops" { "ring" = "rx_ring_full" },
        /// AF_XDP: times the kernel found the fill ring empty.
        rx_fill_empty => "sluice_ring_drops" { "ring" = "rx_fill_ring_empty" },
        /// AF_PACKET: frames the ring cut short (skipped).
        rx_truncated => "sluice_ring_drops" { "ring" = "rx_truncated" },
        /// Frames received on this port that the pipeline passed (sent on, or
        /// lost on the way out: see the `tx_*` counters of the other port).
        passed => "sluice_packets" { "verdict" = "pass" },
        /// Their bytes on the wire.
        passed_bytes => "sluice_bytes" { "verdict" = "pass" },
        /// Frames received on this port that the pipeline dropped.
        dropped => "sluice_packets" { "verdict" = "drop" },
        /// Their bytes on the wire.
        dropped_bytes => "sluice_bytes" { "verdict" = "drop" },
    }
    families {
        /// Packets received on a port, by verdict.
        "sluice_packets",
        /// Bytes (on the wire) received on a port, by verdict.
        "sluice_bytes",
        /// Frames lost at a ring: the kernel's RX ring full or fill ring
        /// empty, our TX ring full, a frame that cannot be sent, no free
        /// buffer, a failed send (fill_ring_empty counts events, not frames).
        "sluice_ring_drops",
    }
}

/// The counters of both ports, shared by the source, the sink and readers.
/// The lanes of a per-queue bridge all add into the same port counters
/// (once per batch each), and each counts its own share in [`LaneCounters`].
#[derive(Debug, Default)]
pub struct BridgeCounters {
    /// Port 0 (the first interface) and port 1.
    pub ports: [PortCounters; 2],
    /// AF_XDP: frames whose packets reassembly copied out, given back.
    pub frames_reclaimed: AtomicU64,
    /// IP fragments written, by outcome (see [`FRAGMENT_OUTCOMES`]).
    pub fragments: [AtomicU64; 3],
    /// A per-queue bridge's lanes, in lane order (set when it opens).
    pub lanes: std::sync::OnceLock<Vec<LaneCounters>>,
}

/// One lane of a per-queue bridge: what its queue received and sent. Each
/// on its own cache line: a lane writes only its own.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct LaneCounters {
    /// The RX queue index the lane owns (on both ports).
    pub queue: u32,
    /// The CPU its thread is pinned to.
    pub cpu: u32,
    /// Frames received on the lane's queues (both ports).
    pub rx_packets: AtomicU64,
    /// Frames the lane transmitted (both ports).
    pub tx_packets: AtomicU64,
    /// Frames the lane passed.
    pub passed: AtomicU64,
    /// Frames the lane dropped.
    pub dropped: AtomicU64,
}

/// Fragment outcomes, the index of [`BridgeCounters::fragments`]: judged
/// with their datagram, or given up by reassembly and passed or dropped.
pub const FRAGMENT_OUTCOMES: [&str; 3] = ["judged", "reassembly_passed", "reassembly_dropped"];

fn add(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// What `Counting` counts of every packet it is given, once per batch:
/// the verdicts per receiving port, and the fragments by outcome. A lane's
/// sink sees every packet exactly once, so this is where the bridge counts
/// them. Returns the packets passed and dropped.
fn count_verdicts(batch: &PacketBatch, counters: &BridgeCounters) -> (u64, u64) {
    let mut v = [[(0u64, 0u64); 2]; 2];
    let mut frags = [0u64; 3];
    for (i, p) in batch.packets().iter().enumerate() {
        let port = (p.meta.port as usize).min(1);
        let cell = &mut v[port][usize::from(p.verdict == Verdict::Drop)];
        cell.0 += 1;
        cell.1 += u64::from(p.meta.wire_len);
        if matches!(batch.decoded(i), Ok(PacketSummary { ip: Some(ip), .. }) if ip.fragment.is_some()) {
            frags[match (p.disposition, p.verdict) {
                (Disposition::Decided(_), Verdict::Pass) => 1,
                (Disposition::Decided(_), Verdict::Drop) => 2,
                _ => 0,
            }] += 1;
        }
    }
    for (c, [(pn, pb), (dn, db)]) in counters.ports.iter().zip(v) {
        add(&c.passed, pn);
        add(&c.passed_bytes, pb);
        add(&c.dropped, dn);
        add(&c.dropped_bytes, db);
    }
    for (c, n) in counters.fragments.iter().zip(frags) {
        add(c, n);
    }
    (v[0][0].0 + v[1][0].0, v[0][1].0 + v[1][1].0)
}

impl BridgeCounters {
    /// Lane `lane`'s counters, once the lanes are set.
    fn lane(&self, lane: Option<usize>) -> Option<&LaneCounters> {
        self.lanes.get()?.get(lane?)
    }
}

impl PortCount for BridgeCounters {
    fn received(&self, port: usize, lane: Option<usize>, packets: u64, bytes: u64) {
        let c = &self.ports[port];
        add(&c.rx_packets, packets);
        add(&c.rx_bytes, bytes);
        if let Some(l) = self.lane(lane) {
            add(&l.rx_packets, packets);
        }
    }

    fn sent(&self, port: usize, lane: Option<usize>, s: &Sent) {
        self.ports[port].add(&PortTotals {
            tx_packets: s.packets,
            tx_bytes: s.bytes,
            tx_ring_full: s.ring_full,
            tx_invalid: s.invalid,
            tx_no_buffer: s.no_buffer,
            tx_errors: s.errors,
            ..PortTotals::default()
        });
        if let Some(l) = self.lane(lane) {
            add(&l.tx_packets, s.packets);
        }
    }

    fn kernel_drops(&self, port: usize, d: &KernelDrops) {
        let c = &self.ports[port];
        add(&c.rx_ring_drops, d.rx_ring_full);
        add(&c.rx_fill_empty, d.fill_empty);
        add(&c.rx_truncated, d.truncated);
    }

    fn frames_reclaimed(&self, frames: u64) {
        add(&self.frames_reclaimed, frames);
    }
}

/// A lane's sink, counting each batch's verdicts before the ports send it.
pub(crate) struct Counting<K> {
    sink: K,
    counters: Arc<BridgeCounters>,
    /// The lane, in a per-queue bridge.
    lane: Option<usize>,
}

impl<K> Counting<K> {
    pub(crate) fn new(sink: K, counters: &Arc<BridgeCounters>, lane: Option<usize>) -> Counting<K> {
        Counting { sink, counters: Arc::clone(counters), lane }
    }
}

impl<K: Sink> Sink for Counting<K> {
    type Error = K::Error;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), K::Error> {
        let (passed, dropped) = count_verdicts(batch, &self.counters);
        if let Some(l) = self.counters.lane(self.lane) {
            add(&l.passed, passed);
            add(&l.dropped, dropped);
        }
        self.sink.write(batch)
    }

    fn finish(&mut self) -> Result<(), K::Error> {
        self.sink.finish()
    }

    fn quiescent(&mut self) {
        self.sink.quiescent()
    }
}

sluice_metrics::counters! {
    /// One lane of a per-queue bridge as it is shown (`per_lane` in the
    /// summary, its `queue` lines, `sluice_queue_*`), read from its
    /// [`LaneCounters`].
    pub struct LaneTotals {
        /// Frames the lane passed.
        passed => "sluice_queue_packets" { "verdict" = "pass" },
        /// Frames the lane dropped.
        dropped => "sluice_queue_packets" { "verdict" = "drop" },
        /// Packets received on a queue (both ports).
        rx_packets => "sluice_queue_rx_packets",
        /// Packets a queue's worker transmitted (both ports).
        tx_packets => "sluice_queue_tx_packets",
    }
    families {
        /// Packets a queue's worker handled, by verdict.
        "sluice_queue_packets",
    }
}

sluice_metrics::counters! {
    /// The bridge's numbers besides its ports', its lanes' and its control
    /// plane's counts, read from their owners for a scrape or a summary
    /// (the summary's keys are the field names).
    pub struct BridgeTotals {
        /// Packets judged so far (the pipeline's progress; may run ahead of what was written).
        judged => "sluice_judged_packets",
        /// IP fragments judged with their datagram.
        fragments_judged => "sluice_fragments" { "outcome" = "judged" },
        /// IP fragments reassembly gave up on and passed.
        fragments_reassembly_passed => "sluice_fragments" { "outcome" = "reassembly_passed" },
        /// IP fragments reassembly gave up on and dropped.
        fragments_reassembly_dropped => "sluice_fragments" { "outcome" = "reassembly_dropped" },
        /// AF_XDP frames whose packets reassembly copied out, given back to the pool.
        frames_reclaimed => "sluice_frames_reclaimed",
        /// Fragments moved to the queue their IP pair is reassembled on.
        fragments_resteered => "sluice_fragments_resteered" { "result" = "moved" },
        /// Fragments given up with the incomplete verdict: that queue's inbox was full.
        fragments_resteer_full => "sluice_fragments_resteered" { "result" = "inbox_full" },
        /// Unix time the rules in force were loaded.
        last_reload_ms => gauge "sluice_last_reload_timestamp_seconds" / 1000,
        /// Generation of the rules in force (0 at start, +1 per publication:
        /// reload, expiry, runtime change, merge).
        generation => gauge "sluice_rules_generation",
        /// 1 under --dry-run: nothing is enforced, and the drop counters
        /// count what would have been dropped.
        dry_run => gauge "sluice_dry_run",
        /// --dry-run: packets the rules would have dropped (all were forwarded).
        would_drop => "sluice_would_drop_packets",
    }
    families {
        /// IP fragments: judged with their datagram, or decided by
        /// reassembly (given up: passed or dropped).
        "sluice_fragments",
        /// Fragments that arrived on another queue than the one their IP
        /// pair is reassembled on: moved, or given up with the incomplete
        /// verdict when that queue's inbox was full.
        "sluice_fragments_resteered",
    }
}

impl LaneTotals {
    /// A lane's counts now.
    pub fn of(c: &LaneCounters) -> LaneTotals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LaneTotals {
            passed: l(&c.passed),
            dropped: l(&c.dropped),
            rx_packets: l(&c.rx_packets),
            tx_packets: l(&c.tx_packets),
        }
    }
}

/// Every family the declared sets the bridge serves declare.
pub fn declared_families() -> Vec<&'static str> {
    use sluice_policy::{controller::ControlTotals, crowdsec::BouncerTotals};
    let sets = [
        PortTotals::FAMILIES,
        LaneTotals::FAMILIES,
        BridgeTotals::FAMILIES,
        ControlTotals::FAMILIES,
        sluice_control::socket::SocketTotals::FAMILIES,
        BouncerTotals::FAMILIES,
        sluice_pipeline::sample::SampleCounts::FAMILIES,
    ];
    sets.into_iter().flat_map(sluice_metrics::counters::families).collect()
}
