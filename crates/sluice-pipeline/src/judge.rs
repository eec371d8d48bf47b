//! Who decides: one interface, two implementations.
//!
//! [`Inline`] judges on the calling thread. [`Workers`] steers each packet
//! by software RSS (Toeplitz on the 4-tuple, the IP pair for fragments, the
//! datagram's flow for reassembled fragments) to one of N pinned workers.
//! Batches are shared read-only (`Arc`); each worker gets the indices it
//! owns, so packet bytes are never copied between threads. Channels are
//! bounded, so a slow output holds the source back instead of letting memory
//! grow. Index and verdict buffers travel back and forth and are reused: no
//! allocation per batch once running.
//!
//! Both judge against a rule snapshot they refresh between batches, so every
//! verdict comes from exactly one snapshot.

use crate::batch::{Disposition, PacketBatch};
use sluice_engine::snapshot::{Published, Reader};
use sluice_engine::{judge_decoded, RuleSet, Stats, Verdict};
use sluice_sets::DEFAULT_BATCH;
use sluice_steer::{Indirection, RssInput, Toeplitz, MICROSOFT_KEY};
use sluice_wire::{DecodeError, PacketSummary};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Why judging stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JudgeError {
    /// A worker thread panicked; its batches in flight have no verdicts.
    WorkerDied { worker: usize, cpu: usize, message: String },
    /// Every worker is gone and none said why.
    Stopped,
}

impl std::fmt::Display for JudgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JudgeError::WorkerDied { worker, cpu, message } => {
                write!(f, "worker {worker} (on CPU {cpu}) stopped: it panicked: {message}")
            }
            JudgeError::Stopped => f.write_str("every worker stopped without a word"),
        }
    }
}

impl std::error::Error for JudgeError {}

/// Gives every packet whose disposition is not `Decided` a verdict.
pub trait Judge {
    /// Hand over a batch; may wait for room while earlier batches finish.
    fn submit(&mut self, batch: PacketBatch) -> Result<(), JudgeError>;

    /// A batch whose packets all have verdicts, in the order batches finish.
    /// With `wait`, blocks until one finishes if any are in flight; `None`
    /// when none is ready (or none is in flight).
    fn next(&mut self, wait: bool) -> Result<Option<PacketBatch>, JudgeError>;

    /// Batches submitted and not yet returned by `next`.
    fn in_flight(&self) -> usize;

    /// (packets, dropped) per worker so far; cheap to read while running.
    fn live(&self) -> Vec<(u64, u64)>;

    /// Each worker's counters as of its last batch, for readers on other
    /// threads (metrics): handles to take before `run` owns the judge.
    fn live_stats(&self) -> Vec<LiveStats>;

    /// Stop, and return each worker's counters.
    fn finish(self: Box<Self>) -> Vec<Stats>;

    /// The source is quiet: take the newest rule snapshot now rather than at
    /// the next batch, so a replaced rule set is not held alive by an idle
    /// judge (one lane of a per-queue bridge may see no traffic for hours).
    fn idle(&mut self) {}
}

/// A worker's counters, copied in once per batch (`clone_from`, which
/// reuses the per-rule vector): the worker locks it only for that copy.
pub type LiveStats = Arc<Mutex<Stats>>;

fn publish(to: &LiveStats, stats: &Stats) {
    to.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone_from(stats);
}

/// How judges decide what the rules do not say.
#[derive(Clone, Copy, Debug)]
pub struct JudgeConfig {
    /// Verdict for packets that cannot be decoded.
    pub undecodable: Verdict,
    /// Prefetch batch of the classifier.
    pub batch: usize,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        JudgeConfig { undecodable: Verdict::Pass, batch: DEFAULT_BATCH }
    }
}

/// Judge the packets of `batch` at `indices` (those not decided), writing
/// `verdicts[k]` for `indices[k]`.
fn judge_indices(
    rules: &RuleSet,
    cfg: &JudgeConfig,
    stats: &mut Stats,
    batch: &PacketBatch,
    indices: &[u32],
    verdicts: &mut [Verdict],
) {
    let packets = batch.packets();
    let item = |k: usize| {
        let i = indices[k] as usize;
        (batch.decoded(i), packets[i].meta.wire_len, packets[i].meta.port)
    };
    judge_decoded(rules, cfg.undecodable, cfg.batch, stats, indices.len(), item, verdicts);
}

/// Judges on the calling thread.
pub struct Inline {
    rules: Reader<RuleSet>,
    cfg: JudgeConfig,
    stats: Stats,
    shared: LiveStats,
    done: VecDeque<PacketBatch>,
    indices: Vec<u32>,
    verdicts: Vec<Verdict>,
}

impl Inline {
    pub fn new(rules: &Arc<Published<RuleSet>>, cfg: JudgeConfig) -> Self {
        Inline {
            rules: rules.reader(),
            cfg,
            stats: Stats::default(),
            shared: LiveStats::default(),
            done: VecDeque::new(),
            indices: Vec::new(),
            verdicts: Vec::new(),
        }
    }
}

impl Judge for Inline {
    fn submit(&mut self, mut batch: PacketBatch) -> Result<(), JudgeError> {
        self.indices.clear();
        self.indices.extend(
            batch
                .packets()
                .iter()
                .enumerate()
                .filter(|(_, p)| !matches!(p.disposition, Disposition::Decided(_)))
                .map(|(i, _)| i as u32),
        );
        self.verdicts.clear();
        self.verdicts.resize(self.indices.len(), Verdict::Pass);
        // Rules switch only here, between batches.
        let snapshot = self.rules.refresh();
        judge_indices(&snapshot.value, &self.cfg, &mut self.stats, &batch, &self.indices, &mut self.verdicts);
        let packets = batch.packets_mut();
        for (&i, &v) in self.indices.iter().zip(&self.verdicts) {
            packets[i as usize].verdict = v;
        }
        publish(&self.shared, &self.stats);
        self.done.push_back(batch);
        Ok(())
    }

    fn next(&mut self, _wait: bool) -> Result<Option<PacketBatch>, JudgeError> {
        Ok(self.done.pop_front())
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn live(&self) -> Vec<(u64, u64)> {
        vec![(self.stats.packets, self.stats.dropped)]
    }

    fn live_stats(&self) -> Vec<LiveStats> {
        vec![Arc::clone(&self.shared)]
    }

    fn finish(self: Box<Self>) -> Vec<Stats> {
        vec![self.stats]
    }

    fn idle(&mut self) {
        self.rules.refresh();
    }
}

/// Which worker a packet belongs to.
#[derive(Clone)]
pub struct Steering {
    toeplitz: Toeplitz,
    table: Indirection,
    inner: bool,
}

impl Steering {
    pub fn new(key: &[u8; sluice_steer::KEY_LEN], workers: usize) -> Self {
        Steering {
            toeplitz: Toeplitz::new(key),
            table: Indirection::round_robin(sluice_steer::DEFAULT_TABLE, workers),
            inner: false,
        }
    }

    /// Hash the innermost IP header a tunnel carries (`--steer inner`), so
    /// one tunnel endpoint pair carrying many flows spreads over the
    /// workers; packets without a tunnel hash as before.
    pub fn inner(mut self, on: bool) -> Self {
        self.inner = on;
        self
    }

    /// Fragments and packets without ports hash on the IP pair, so every
    /// fragment of a datagram meets on one worker; others on the 4-tuple.
    /// Packets that do not decode, and non-IP ones, go to worker 0.
    pub fn worker_for(&self, decoded: &Result<PacketSummary, DecodeError>) -> usize {
        let Ok(p) = decoded else { return 0 };
        let chosen = if self.inner { p.inner.as_ref().or(p.ip.as_ref()) } else { p.ip.as_ref() };
        let Some(ip) = chosen else { return 0 };
        let input = match (ip.fragment, ip.ports) {
            (None, Some((sp, dp))) => RssInput::four_tuple(ip.src, ip.dst, sp, dp),
            _ => RssInput::pair(ip.src, ip.dst),
        };
        self.worker_for_input(&input)
    }

    /// The worker for a fragment of a reassembled datagram
    /// ([`Disposition::JudgeAsFlow`]): its own (outer) IP pair with the
    /// datagram's ports.
    pub fn worker_for_flow(&self, decoded: &Result<PacketSummary, DecodeError>, ports: Option<(u16, u16)>) -> usize {
        let Ok(PacketSummary { ip: Some(ip), .. }) = decoded else { return 0 };
        let input = match ports {
            Some((sp, dp)) => RssInput::four_tuple(ip.src, ip.dst, sp, dp),
            None => RssInput::pair(ip.src, ip.dst),
        };
        self.worker_for_input(&input)
    }

    pub fn worker_for_input(&self, input: &RssInput) -> usize {
        self.table.worker(self.toeplitz.hash_input(input))
    }
}

/// One worker's running totals, on its own cache line so workers never
/// write a line another worker writes. Read (and summed) while they run.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct LiveCounters {
    pub packets: AtomicU64,
    pub dropped: AtomicU64,
}

const _: () = assert!(align_of::<LiveCounters>() == 64);

/// A worker's share of a batch, and the buffer for its verdicts.
struct Work {
    slot: usize,
    batch: Arc<PacketBatch>,
    indices: Vec<u32>,
    verdicts: Vec<Verdict>,
}

enum Msg {
    Done { slot: usize, worker: usize, indices: Vec<u32>, verdicts: Vec<Verdict> },
    Died { worker: usize, message: String },
}

/// A batch out with workers.
struct InFlight {
    batch: Arc<PacketBatch>,
    parts_left: usize,
    /// Verdicts as they come back, by packet index.
    verdicts: Vec<Verdict>,
}

/// How to run [`Workers`].
#[derive(Clone, Debug)]
pub struct WorkersConfig {
    pub workers: usize,
    /// CPU for each worker (default: worker i on CPU i modulo the CPUs).
    pub cpus: Option<Vec<usize>>,
    pub judge: JudgeConfig,
    /// Shares each worker may have queued.
    pub queue: usize,
    pub key: [u8; sluice_steer::KEY_LEN],
    /// Fault injection for tests: worker `.0` panics on its share number `.1`.
    pub panic_at: Option<(usize, u64)>,
    /// Steer by the innermost IP header ([`Steering::inner`]).
    pub steer_inner: bool,
}

impl WorkersConfig {
    pub fn new(workers: usize) -> Self {
        WorkersConfig {
            workers,
            cpus: None,
            judge: JudgeConfig::default(),
            queue: 4,
            key: MICROSOFT_KEY,
            panic_at: None,
            steer_inner: false,
        }
    }
}

/// The judge `cfg` describes, reading its rules from `published` (the
/// snapshot a reload publishes into): [`Inline`] on the calling thread for
/// one worker, else a pool of [`Workers`] (also for one worker when a fault
/// is injected, which only the pool has).
pub fn judge(published: &Arc<Published<RuleSet>>, cfg: WorkersConfig) -> Box<dyn Judge> {
    if cfg.workers == 1 && cfg.panic_at.is_none() {
        return Box::new(Inline::new(published, cfg.judge));
    }
    Box::new(Workers::new(cfg, published))
}

/// Judges on N pinned worker threads behind software RSS.
pub struct Workers {
    senders: Vec<SyncSender<Work>>,
    results: Receiver<Msg>,
    handles: Vec<JoinHandle<Stats>>,
    cpus: Vec<usize>,
    steering: Steering,
    /// Shares sent to each worker and not yet back.
    outstanding: Vec<usize>,
    queue: usize,
    live: Arc<[LiveCounters]>,
    shared: Vec<LiveStats>,
    /// Batches out with workers, by slot.
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<usize>,
    done: VecDeque<PacketBatch>,
    /// Reused index and verdict buffers.
    spare_indices: Vec<Vec<u32>>,
    spare_verdicts: Vec<Vec<Verdict>>,
    shares: Vec<Vec<u32>>,
    failed: Option<JudgeError>,
}

impl Workers {
    pub fn new(cfg: WorkersConfig, rules: &Arc<Published<RuleSet>>) -> Self {
        let workers = cfg.workers.max(1);
        let queue = cfg.queue.max(1);
        // Never more than `queue` shares per worker are outstanding (submit
        // makes room first), so neither channel can fill up and block a
        // worker: no deadlock whatever the order of calls. One more slot
        // per worker for its death notice.
        let (done_tx, results) = sync_channel::<Msg>(workers * (queue + 1));
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        let mut cpus = Vec::with_capacity(workers);
        let live: Arc<[LiveCounters]> = (0..workers).map(|_| LiveCounters::default()).collect();
        let shared: Vec<LiveStats> = (0..workers).map(|_| LiveStats::default()).collect();
        for w in 0..workers {
            let (tx, rx) = sync_channel::<Work>(queue);
            senders.push(tx);
            let reader = rules.reader();
            let done_tx = done_tx.clone();
            let cpu = cfg.cpus.as_ref().map_or(w % sluice_cpus::available_cpus(), |c| c[w % c.len()]);
            cpus.push(cpu);
            let (judge, live, mine) = (cfg.judge, Arc::clone(&live), Arc::clone(&shared[w]));
            let panic_at = cfg.panic_at.filter(|(pw, _)| *pw == w).map(|(_, n)| n);
            let spawned = std::thread::Builder::new().name(format!("sluice-worker-{w}")).spawn(move || {
                let notice = done_tx.clone();
                let run = std::panic::AssertUnwindSafe(|| {
                    worker(w, cpu, rx, done_tx, reader, judge, (&live[w], &mine), panic_at)
                });
                match std::panic::catch_unwind(run) {
                    Ok(stats) => stats,
                    Err(payload) => {
                        let message = payload
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".to_owned());
                        let _ = notice.send(Msg::Died { worker: w, message });
                        Stats::default()
                    }
                }
            });
            handles.push(spawned.expect("spawning a worker thread"));
        }
        Workers {
            senders,
            results,
            handles,
            cpus,
            steering: Steering::new(&cfg.key, workers).inner(cfg.steer_inner),
            outstanding: vec![0; workers],
            queue,
            live,
            shared,
            slots: Vec::new(),
            free_slots: Vec::new(),
            done: VecDeque::new(),
            spare_indices: Vec::new(),
            spare_verdicts: Vec::new(),
            shares: vec![Vec::new(); workers],
            failed: None,
        }
    }

    pub fn workers(&self) -> usize {
        self.senders.len()
    }

    /// Take one message from the workers and apply it.
    fn receive(&mut self) -> Result<(), JudgeError> {
        self.take(true).map(drop)
    }

    /// Like `receive`, but with `block` false only a message already
    /// waiting; false when there was none.
    fn take(&mut self, block: bool) -> Result<bool, JudgeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let msg = if block {
            self.results.recv().ok()
        } else {
            match self.results.try_recv() {
                Ok(m) => Some(m),
                Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(false),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
            }
        };
        let Some(msg) = msg else {
            self.failed = Some(JudgeError::Stopped);
            return Err(JudgeError::Stopped);
        };
        match msg {
            Msg::Died { worker, message } => {
                let e = JudgeError::WorkerDied { worker, cpu: self.cpus[worker], message };
                self.failed = Some(e.clone());
                Err(e)
            }
            Msg::Done { slot, worker, indices, verdicts } => {
                self.outstanding[worker] -= 1;
                let f = self.slots[slot].as_mut().expect("results belong to a batch in flight");
                for (&i, &v) in indices.iter().zip(&verdicts) {
                    f.verdicts[i as usize] = v;
                }
                f.parts_left -= 1;
                self.spare_indices.push(indices);
                self.spare_verdicts.push(verdicts);
                if f.parts_left == 0 {
                    let f = self.slots[slot].take().expect("checked above");
                    self.free_slots.push(slot);
                    self.complete(f);
                }
                Ok(true)
            }
        }
    }

    fn complete(&mut self, f: InFlight) {
        // Workers drop their share of the batch before they report, so the
        // last report leaves this the only owner.
        let mut batch = Arc::try_unwrap(f.batch).expect("workers release a batch before reporting it");
        for (p, v) in batch.packets_mut().iter_mut().zip(&f.verdicts) {
            if !matches!(p.disposition, Disposition::Decided(_)) {
                p.verdict = *v;
            }
        }
        self.done.push_back(batch);
    }
}

impl Judge for Workers {
    fn submit(&mut self, batch: PacketBatch) -> Result<(), JudgeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        for s in &mut self.shares {
            s.clear();
        }
        for (i, p) in batch.packets().iter().enumerate() {
            let w = match p.disposition {
                Disposition::Decided(_) => continue,
                Disposition::Judge => self.steering.worker_for(batch.decoded(i)),
                Disposition::JudgeAsFlow(ports) => self.steering.worker_for_flow(batch.decoded(i), ports),
            };
            self.shares[w].push(i as u32);
        }
        let parts = self.shares.iter().filter(|s| !s.is_empty()).count();
        if parts == 0 {
            self.done.push_back(batch);
            return Ok(());
        }
        let mut verdicts = self.spare_verdicts.pop().unwrap_or_default();
        verdicts.clear();
        verdicts.resize(batch.len(), Verdict::Pass);
        let batch = Arc::new(batch);
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[slot] = Some(InFlight { batch: Arc::clone(&batch), parts_left: parts, verdicts });
        for w in 0..self.senders.len() {
            if self.shares[w].is_empty() {
                continue;
            }
            while self.outstanding[w] >= self.queue {
                self.receive()?;
            }
            let mut indices = self.spare_indices.pop().unwrap_or_default();
            indices.clear();
            indices.extend_from_slice(&self.shares[w]);
            let mut verdicts = self.spare_verdicts.pop().unwrap_or_default();
            verdicts.clear();
            verdicts.resize(indices.len(), Verdict::Pass);
            let work = Work { slot, batch: Arc::clone(&batch), indices, verdicts };
            if self.senders[w].send(work).is_err() {
                // It hung up: it died, and its notice is on the way.
                while self.failed.is_none() {
                    let _ = self.receive();
                }
                return Err(self.failed.clone().expect("set above"));
            }
            self.outstanding[w] += 1;
        }
        Ok(())
    }

    fn next(&mut self, wait: bool) -> Result<Option<PacketBatch>, JudgeError> {
        loop {
            if let Some(b) = self.done.pop_front() {
                return Ok(Some(b));
            }
            if self.slots.iter().all(Option::is_none) {
                return Ok(None);
            }
            if !wait {
                // Take what finished meanwhile, without waiting: a live source
                // on a quiet link must not leave finished batches unwritten.
                if !self.take(false)? {
                    return Ok(None);
                }
                continue;
            }
            self.receive()?;
        }
    }

    fn in_flight(&self) -> usize {
        self.done.len() + self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn live(&self) -> Vec<(u64, u64)> {
        self.live.iter().map(|c| (c.packets.load(Ordering::Relaxed), c.dropped.load(Ordering::Relaxed))).collect()
    }

    fn live_stats(&self) -> Vec<LiveStats> {
        self.shared.clone()
    }

    fn finish(self: Box<Self>) -> Vec<Stats> {
        let Workers { senders, results, handles, .. } = *self;
        drop(senders);
        drop(results);
        // A worker that panicked returns empty counters (its panic was reported).
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn worker(
    id: usize,
    cpu: usize,
    rx: Receiver<Work>,
    done: SyncSender<Msg>,
    mut rules: Reader<RuleSet>,
    cfg: JudgeConfig,
    (live, shared): (&LiveCounters, &LiveStats),
    panic_at: Option<u64>,
) -> Stats {
    // Best effort: a worker keeps its caches when it keeps its CPU.
    let _ = sluice_cpus::pin_current_thread(cpu);
    let mut stats = Stats::default();
    let mut shares = 0u64;
    while let Ok(work) = rx.recv() {
        if panic_at == Some(shares) {
            panic!("injected fault on share {shares} (test hook)");
        }
        shares += 1;
        let Work { slot, batch, indices, mut verdicts } = work;
        // Rules switch only here, between batches.
        let snapshot = rules.refresh();
        judge_indices(&snapshot.value, &cfg, &mut stats, &batch, &indices, &mut verdicts);
        // Release the batch before reporting, so the last report leaves the
        // pool its only owner.
        drop(batch);
        // Once per batch, to a line only this worker writes.
        live.packets.store(stats.packets, Ordering::Relaxed);
        live.dropped.store(stats.dropped, Ordering::Relaxed);
        publish(shared, &stats);
        if done.send(Msg::Done { slot, worker: id, indices, verdicts }).is_err() {
            break;
        }
    }
    stats
}
