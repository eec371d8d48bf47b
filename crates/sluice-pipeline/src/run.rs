//! The run loop: source → decode once → reassembly → judge → output step → sink.
//!
//! It owns no I/O: the source and the sink do it. It keeps a bounded number
//! of batches in flight, writes them in input order (or as they finish),
//! counts every packet exactly once, and ends cleanly whatever stops it: the
//! source's end or error (everything read before it is judged and written),
//! a judge that failed (everything finished before it is written, in order),
//! or a sink error. In every case the sink is finished, so its output is
//! valid.

use crate::batch::{Disposition, PacketBatch, Recycler, DEFAULT_BATCH_PACKETS};
use crate::io::{Fill, Sink, Source};
use crate::judge::{Judge, JudgeError};
use crate::reassembly::Reassembly;
use serde::Serialize;
use sluice_defrag::DefragStats;
use sluice_engine::Stats;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Write batches in input order (else as they finish).
    pub ordered: bool,
    /// Packets per batch.
    pub batch_packets: usize,
    /// Batches in flight before the loop waits for the oldest.
    pub max_in_flight: usize,
    /// A live source returns a partly filled batch after this long.
    pub live_wait: Duration,
    /// How often the observer hears of progress.
    pub progress_every: Duration,
    /// Fill and decode on a reader thread of its own, ahead of the rest.
    pub read_ahead: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            ordered: true,
            batch_packets: DEFAULT_BATCH_PACKETS,
            max_in_flight: 16,
            live_wait: Duration::from_millis(1),
            progress_every: Duration::from_millis(100),
            read_ahead: false,
        }
    }
}

/// What the observer is told while the run goes on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// The source's (done, total) in its own units (bytes of a file).
    pub source: (u64, u64),
    /// Packets with a verdict so far, and how many of them dropped.
    pub judged: u64,
    pub dropped: u64,
}

/// Hears of progress (a progress bar, a status line, live metrics).
pub trait Observer {
    fn progress(&mut self, _p: &Progress) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Every packet counted once: judged by a worker or decided by reassembly.
    pub stats: Stats,
    /// Packets judged by each worker (one entry inline).
    pub per_worker: Vec<u64>,
    pub reassembly: DefragStats,
    pub elapsed: Duration,
    /// Batches handed to the judge.
    pub batches: u64,
}

impl RunReport {
    /// Adds another run's report: the lanes of a per-queue bridge ran side
    /// by side, so their workers are listed one after the other and the
    /// elapsed time is the longest.
    pub fn add(&mut self, o: &RunReport) {
        self.stats.add(&o.stats);
        self.per_worker.extend_from_slice(&o.per_worker);
        self.reassembly.add(&o.reassembly);
        self.elapsed = self.elapsed.max(o.elapsed);
        self.batches += o.batches;
    }

    /// The text summary of a run (one line per counter).
    pub fn text(&self) -> String {
        let run = self;
        use std::fmt::Write;
        let mut t = String::new();
        let s = &run.stats;
        let pct = |n: u64| if s.packets == 0 { 0.0 } else { 100.0 * n as f64 / s.packets as f64 };
        let _ = writeln!(t, "packets      {:>12}  ({} bytes)", s.packets, s.bytes);
        let _ = writeln!(t, "passed       {:>12}  ({:.2}%)", s.passed, pct(s.passed));
        let _ = writeln!(
            t,
            "dropped      {:>12}  ({:.2}%; by source {}, by destination {}, by other rules {}, by default {})",
            s.dropped,
            pct(s.dropped),
            s.dropped_by_src,
            s.dropped_by_dst,
            s.dropped_by_rule,
            s.dropped_by_default
        );
        let _ = writeln!(t, "non-IP       {:>12}", s.non_ip);
        let r = &run.reassembly;
        if r.fragments > 0 {
            let _ = writeln!(
                t,
                "fragments    {:>12}  ({} datagrams reassembled, {} atomic; dropped: {} overlapping, {} malformed, {} over limits, {} timed out, {} incomplete)",
                r.fragments,
                r.completed,
                r.atomic,
                r.overlaps,
                r.malformed,
                r.too_many_fragments + r.evicted,
                r.timed_out,
                r.incomplete
            );
        }
        let _ = writeln!(t, "undecodable  {:>12}", s.undecodable_total());
        for (reason, n) in Stats::by_reason(&s.undecodable) {
            let _ = writeln!(t, "  {reason:<24} {n}");
        }
        for (reason, n) in Stats::by_reason(&s.anomalies) {
            let _ = writeln!(t, "anomaly {reason:<20} {n} (classified by address)");
        }
        let _ =
            writeln!(t, "elapsed      {:>12.3} s  ({:.2} Mpps, source to sink)", run.elapsed.as_secs_f64(), run.mpps());
        t
    }
}

/// How a run that did not fail ended.
#[derive(Debug)]
pub struct Finished<E> {
    pub report: RunReport,
    /// The source stopped early with this error (everything before it was written).
    pub stopped: Option<E>,
}

/// Why a run failed; the sink was finished, with everything written before.
#[derive(Debug)]
pub enum RunError<E> {
    Judge { error: JudgeError, report: Box<RunReport> },
    Sink(E),
}

impl<E: std::fmt::Display> std::fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Judge { error, report } => write!(
                f,
                "{error}; the run stopped, and the {} packets judged before were written in order",
                report.stats.packets
            ),
            RunError::Sink(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for RunError<E> {}

/// The output step: batches to the sink in input order (a reorder window
/// keyed by batch number) or as they finish.
struct Output {
    ordered: bool,
    next: u64,
    waiting: BTreeMap<u64, PacketBatch>,
}

impl Output {
    fn put<K: Sink>(&mut self, batch: PacketBatch, sink: &mut K, recycler: &mut Recycler) -> Result<(), K::Error> {
        if !self.ordered {
            let r = sink.write(&batch);
            recycler.put(batch);
            return r;
        }
        self.waiting.insert(batch.seq, batch);
        while let Some(b) = self.waiting.remove(&self.next) {
            self.next += 1;
            let r = sink.write(&b);
            recycler.put(b);
            r?;
        }
        Ok(())
    }
}

/// Run `source` through reassembly and `judge` into `sink` until the source
/// ends (see the module comment).
///
/// With `cfg.read_ahead`, the source fills and decodes batches on a thread
/// of its own, a few batches ahead, while this thread reassembles, steers,
/// judges (inline) and writes: the two halves of the work overlap on two
/// cores. The order of packets is the same either way.
pub fn run<S, K>(
    source: &mut S,
    stage: &mut Reassembly,
    judge: Box<dyn Judge>,
    sink: &mut K,
    observer: &mut dyn Observer,
    cfg: &RunConfig,
) -> Result<Finished<S::Error>, RunError<K::Error>>
where
    S: Source + Send + ?Sized,
    S::Error: Send,
    K: Sink,
{
    let started = Instant::now();
    let mut st = State {
        judge,
        recycler: Recycler::new(cfg.batch_packets),
        output: Output { ordered: cfg.ordered, next: 0, waiting: BTreeMap::new() },
        decided: Stats::default(),
        seq: 0,
        max_in_flight: cfg.max_in_flight.max(1),
    };
    let live = source.is_live();
    let (result, stopped) = if cfg.read_ahead {
        std::thread::scope(|scope| {
            let (full_tx, full_rx) = sync_channel(READ_AHEAD_BATCHES);
            let (spare_tx, spare_rx) = channel();
            let position = Arc::new(AtomicProgress::default());
            let pos = Arc::clone(&position);
            let batch_packets = cfg.batch_packets;
            let wait = cfg.live_wait;
            std::thread::Builder::new()
                .name("sluice-reader".into())
                .spawn_scoped(scope, move || read_ahead(source, full_tx, spare_rx, &pos, batch_packets, live, wait))
                .expect("spawning the reader thread");
            let mut feed: Feed<S> = Feed::Thread { full: full_rx, spare: spare_tx, position, poll: !live };
            let r = main_loop(&mut feed, live, stage, &mut st, sink, observer, cfg);
            // Dropping the feed hangs up on the reader, which then stops.
            drop(feed);
            r
        })
    } else {
        let mut feed = Feed::Direct { source, wait: cfg.live_wait };
        main_loop(&mut feed, live, stage, &mut st, sink, observer, cfg)
    };
    let failure = match result {
        Ok(()) => None,
        Err(Failure::Judge(e)) => {
            // Write what finished before the failure, still in order; the
            // reorder window stops at the first batch that never will.
            while let Ok(Some(b)) = st.judge.next(false) {
                if st.output.put(b, sink, &mut st.recycler).is_err() {
                    break;
                }
            }
            Some(Failure::Judge(e))
        }
        Err(f) => Some(f),
    };
    let finished = sink.finish();
    let per = st.judge.finish();
    let mut stats = st.decided;
    for s in &per {
        stats.add(s);
    }
    let report = RunReport {
        stats,
        per_worker: per.iter().map(|s| s.packets).collect(),
        reassembly: stage.stats(),
        elapsed: started.elapsed(),
        batches: st.seq,
    };
    match failure {
        Some(Failure::Judge(error)) => Err(RunError::Judge { error, report: Box::new(report) }),
        Some(Failure::Sink(e)) => Err(RunError::Sink(e)),
        None => match finished {
            Ok(()) => Ok(Finished { report, stopped }),
            Err(e) => Err(RunError::Sink(e)),
        },
    }
}

/// Batches the reader thread may have filled ahead of the main loop.
const READ_AHEAD_BATCHES: usize = 4;

/// How long either thread of a run over a file polls the channel between
/// them before it sleeps on it. A batch takes 10-20 µs to fill or to judge,
/// so the thread that is ahead waits about that long for the other; asleep,
/// each wait cost a futex wake and two context switches, 6-9% of each
/// thread's samples in `sluice filter` (perf). A live source sleeps at
/// once: its batches come as the link brings them, and polling an idle
/// link would burn a core.
const POLL: Duration = Duration::from_micros(50);

/// Poll `attempt` until it gives a result or `POLL` has passed (`None`).
/// The clock is read every 32 attempts: in a VM a read costs as much as
/// many attempts.
fn poll<T>(mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + POLL;
    loop {
        for _ in 0..32 {
            if let Some(v) = attempt() {
                return Some(v);
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return None;
        }
    }
}

/// What the reader thread publishes: the source's progress, and how many
/// batches it has sent that the main loop has not taken yet.
#[derive(Default)]
struct AtomicProgress {
    done: AtomicU64,
    total: AtomicU64,
    queued: AtomicU64,
}

/// A filled, decoded batch and how the fill ended.
type Filled<E> = (PacketBatch, Result<Fill, E>);

/// A filled batch from the reader thread, and whether it decoded it.
type Sent<E> = (PacketBatch, Result<Fill, E>, bool);

/// Where the main loop gets decoded batches.
enum Feed<'s, S: Source + ?Sized> {
    /// Filled and decoded on this thread.
    Direct { source: &'s mut S, wait: Duration },
    /// From the reader thread; spare batches go back to it. `poll`: poll
    /// for the next batch before sleeping (not live).
    Thread { full: Receiver<Sent<S::Error>>, spare: Sender<PacketBatch>, position: Arc<AtomicProgress>, poll: bool },
}

impl<S: Source + ?Sized> Feed<'_, S> {
    /// The next batch, or `None` when the reader is gone.
    fn next(&mut self, recycler: &mut Recycler, live: bool) -> Option<Filled<S::Error>> {
        match self {
            Feed::Direct { source, wait } => {
                let mut batch = recycler.get();
                let deadline = live.then(|| Instant::now() + *wait);
                let r = source.fill(&mut batch, deadline);
                batch.decode_all();
                Some((batch, r))
            }
            Feed::Thread { full, spare, position, poll: polling } => {
                while let Some(b) = recycler.take_spare() {
                    let _ = spare.send(b);
                }
                let polled = polling
                    .then(|| {
                        poll(|| match full.try_recv() {
                            Ok(v) => Some(Some(v)),
                            Err(TryRecvError::Disconnected) => Some(None),
                            Err(TryRecvError::Empty) => None,
                        })
                    })
                    .flatten();
                let (mut batch, r, decoded) = match polled {
                    Some(got) => got?,
                    None => full.recv().ok()?,
                };
                position.queued.fetch_sub(1, Ordering::Relaxed);
                if !decoded {
                    batch.decode_all();
                }
                Some((batch, r))
            }
        }
    }

    fn progress(&self) -> (u64, u64) {
        match self {
            Feed::Direct { source, .. } => source.progress(),
            Feed::Thread { position, .. } => {
                (position.done.load(Ordering::Relaxed), position.total.load(Ordering::Relaxed))
            }
        }
    }
}

/// The reader thread: fill and decode batches until the source ends or the
/// main loop hangs up.
///
/// Reading a file, the reader leaves a batch for the main loop to decode
/// when the main loop has nothing queued: it is then waiting for the
/// reader, which is the slower of the two. The decoding goes to whichever
/// thread has time, batch by batch (in `sluice filter` the reader, with the
/// kernel's copy of every byte, was the busier thread by about half).
fn read_ahead<S: Source + ?Sized>(
    source: &mut S,
    full: SyncSender<Sent<S::Error>>,
    spare: Receiver<PacketBatch>,
    position: &AtomicProgress,
    batch_packets: usize,
    live: bool,
    wait: Duration,
) {
    loop {
        let mut batch = spare.try_recv().unwrap_or_else(|_| PacketBatch::with_capacity(batch_packets));
        let deadline = live.then(|| Instant::now() + wait);
        let r = source.fill(&mut batch, deadline);
        let decode = live || position.queued.load(Ordering::Relaxed) > 0;
        if decode {
            batch.decode_all();
        }
        let (done, total) = source.progress();
        position.done.store(done, Ordering::Relaxed);
        position.total.store(total, Ordering::Relaxed);
        position.queued.fetch_add(1, Ordering::Relaxed);
        let more = matches!(r, Ok(Fill::More));
        let mut filled = Some((batch, r, decode));
        if !live {
            let sent = poll(|| match full.try_send(filled.take().expect("not yet sent")) {
                Ok(()) => Some(true),
                Err(TrySendError::Disconnected(_)) => Some(false),
                Err(TrySendError::Full(f)) => {
                    filled = Some(f);
                    None
                }
            });
            if sent == Some(false) {
                return;
            }
        }
        if let Some(f) = filled {
            if full.send(f).is_err() {
                return;
            }
        }
        if !more {
            return;
        }
    }
}

/// How the main loop ended, and the source's error if it stopped early.
type LoopEnd<K, S> = (Result<(), Failure<K>>, Option<S>);

/// Everything but the source: reassemble, dispatch, write; ends at the
/// source's end (draining what is in flight) or at the first failure.
fn main_loop<S: Source + ?Sized, K: Sink>(
    feed: &mut Feed<'_, S>,
    live: bool,
    stage: &mut Reassembly,
    st: &mut State,
    sink: &mut K,
    observer: &mut dyn Observer,
    cfg: &RunConfig,
) -> LoopEnd<K::Error, S::Error> {
    let mut stopped = None;
    let mut last_progress = Instant::now();
    let r = (|| {
        loop {
            let Some((batch, filled)) = feed.next(&mut st.recycler, live) else { break };
            let ended = match filled {
                Ok(Fill::More) => false,
                Ok(Fill::End) => true,
                Err(e) => {
                    stopped = Some(e);
                    true
                }
            };
            if live {
                if let Some(expired) = stage.tick(wall_ns(), &mut st.recycler) {
                    st.dispatch(expired, sink)?;
                }
            }
            if batch.is_empty() {
                st.recycler.put(batch);
                if live {
                    // A quiet link: write what the judge finished meanwhile.
                    st.write_finished(sink)?;
                    st.judge.idle();
                }
            } else {
                let batch = stage.process(batch);
                st.dispatch(batch, sink)?;
            }
            if !cfg.read_ahead && st.judge.in_flight() == 0 {
                // Every packet filled so far was written or copied out.
                sink.quiescent();
            }
            if last_progress.elapsed() >= cfg.progress_every {
                last_progress = Instant::now();
                let live = st.judge.live();
                observer.progress(&Progress {
                    source: feed.progress(),
                    judged: live.iter().map(|l| l.0).sum::<u64>() + st.decided.packets,
                    dropped: live.iter().map(|l| l.1).sum::<u64>() + st.decided.dropped,
                });
            }
            if ended {
                break;
            }
        }
        if let Some(rest) = stage.finish(&mut st.recycler) {
            st.dispatch(rest, sink)?;
        }
        while st.judge.in_flight() > 0 {
            match st.judge.next(true).map_err(Failure::Judge)? {
                Some(b) => st.output.put(b, sink, &mut st.recycler).map_err(Failure::Sink)?,
                None => break,
            }
        }
        Ok(())
    })();
    (r, stopped)
}

impl State {
    /// Write every batch the judge has finished, without waiting.
    fn write_finished<K: Sink>(&mut self, sink: &mut K) -> Result<(), Failure<K::Error>> {
        while let Some(b) = self.judge.next(false).map_err(Failure::Judge)? {
            self.output.put(b, sink, &mut self.recycler).map_err(Failure::Sink)?;
        }
        Ok(())
    }
}

enum Failure<E> {
    Judge(JudgeError),
    Sink(E),
}

struct State {
    judge: Box<dyn Judge>,
    recycler: Recycler,
    output: Output,
    /// Packets whose verdict reassembly decided (never judged).
    decided: Stats,
    seq: u64,
    max_in_flight: usize,
}

impl State {
    /// Number the batch, settle decided verdicts, and hand it to the judge,
    /// writing finished batches to keep the number in flight bounded.
    fn dispatch<K: Sink>(&mut self, mut batch: PacketBatch, sink: &mut K) -> Result<(), Failure<K::Error>> {
        if batch.is_empty() {
            self.recycler.put(batch);
            return Ok(());
        }
        batch.seq = self.seq;
        self.seq += 1;
        for p in batch.packets_mut() {
            if let Disposition::Decided(v) = p.disposition {
                p.verdict = v;
                self.decided.count_fragment(v, p.meta.wire_len);
            }
        }
        self.judge.submit(batch).map_err(Failure::Judge)?;
        loop {
            let wait = self.judge.in_flight() >= self.max_in_flight;
            match self.judge.next(wait).map_err(Failure::Judge)? {
                Some(b) => self.output.put(b, sink, &mut self.recycler).map_err(Failure::Sink)?,
                None => return Ok(()),
            }
        }
    }
}

/// Now, in nanoseconds since the epoch: the clock live sources stamp
/// packets with and reassembly's timeouts run on (one clock for both).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The report as one JSON-ready object, the keys `sluice filter --json`
/// prints (the caller adds where the packets came from): the engine's
/// [`Stats`] as they serialise, flattened, and the run's own numbers.
#[derive(Serialize)]
pub struct ReportJson<'a> {
    #[serde(flatten)]
    pub stats: &'a Stats,
    /// Every undecodable frame (the sum of `undecodable_by_reason`).
    pub undecodable: u64,
    pub elapsed_s: f64,
    pub mpps: f64,
    /// Packets judged per worker.
    pub workers: &'a [u64],
    /// Batches handed to the judge.
    pub batches: u64,
    pub reassembly: DefragStats,
}

impl RunReport {
    /// Million packets per second over the whole run.
    pub fn mpps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.stats.packets as f64 / s / 1e6
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> ReportJson<'_> {
        ReportJson {
            stats: &self.stats,
            undecodable: self.stats.undecodable_total(),
            elapsed_s: self.elapsed.as_secs_f64(),
            mpps: self.mpps(),
            workers: &self.per_worker,
            batches: self.batches,
            reassembly: self.reassembly,
        }
    }
}
