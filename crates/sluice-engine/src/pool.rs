//! Workers behind software RSS: each packet goes to the worker its flow
//! hashes to, workers judge against their current rule snapshot, and the
//! caller gets every batch's verdicts back to write in input order.
//!
//! No I/O here: the caller reads batches, submits them, and writes what
//! comes back. Batches are shared read-only (`Arc`), each worker gets the
//! indices it owns, so packet bytes are never copied between threads.
//! Channels are bounded, so a slow writer holds the reader back instead of
//! letting memory grow.

use crate::snapshot::{Published, Reader};
use crate::{judge_batch, Frame, RuleSet, Stats, Verdict};
use sluice_classify::DEFAULT_BATCH;
use sluice_steer::{affinity, Indirection, RssInput, Toeplitz, MICROSOFT_KEY};
use sluice_wire::{decode, LinkType};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Packets to judge: their bytes in one arena.
#[derive(Default, Debug)]
pub struct Batch {
    pub data: Vec<u8>,
    /// (link type, byte range in `data`, length on the wire) per packet.
    pub frames: Vec<(LinkType, Range<usize>, u32)>,
}

impl Batch {
    pub fn push(&mut self, link: LinkType, bytes: &[u8], wire_len: u32) {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.frames.push((link, start..self.data.len(), wire_len));
    }
    pub fn len(&self) -> usize {
        self.frames.len()
    }
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    pub fn frame(&self, i: usize) -> Frame<'_> {
        let (link, range, wire_len) = &self.frames[i];
        Frame { link: *link, data: &self.data[range.clone()], wire_len: *wire_len }
    }
}

/// How [`Pool::submit`] steers one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    /// By the packet's own headers.
    Auto,
    /// By this flow (the 4-tuple of the datagram a fragment belongs to).
    Flow(RssInput),
    /// Not at all: its verdict is already decided.
    Skip,
}

/// Which worker a packet belongs to.
pub struct Steering {
    toeplitz: Toeplitz,
    table: Indirection,
}

impl Steering {
    pub fn new(key: &[u8; sluice_steer::KEY_LEN], workers: usize) -> Self {
        Steering { toeplitz: Toeplitz::new(key), table: Indirection::round_robin(sluice_steer::DEFAULT_TABLE, workers) }
    }

    /// Fragments and packets without ports hash on the IP pair, so every
    /// fragment of a datagram meets on one worker; others on the 4-tuple.
    /// Packets that do not decode, and non-IP ones, go to worker 0.
    pub fn worker_for(&self, frame: &Frame<'_>) -> usize {
        let Ok(Some(ip)) = decode(frame.link, frame.data).map(|s| s.ip) else {
            return 0;
        };
        let input = match (ip.fragment, ip.ports) {
            (None, Some((sp, dp))) => RssInput::four_tuple(ip.src, ip.dst, sp, dp),
            _ => RssInput::pair(ip.src, ip.dst),
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

/// A worker's share of a batch.
struct Work {
    batch_no: u64,
    batch: Arc<Batch>,
    indices: Vec<u32>,
}

/// A worker's verdicts for its share, and the rule generation that made them.
pub struct Done {
    pub batch_no: u64,
    pub worker: usize,
    pub indices: Vec<u32>,
    pub verdicts: Vec<Verdict>,
    pub generation: u64,
}

pub struct Pool {
    senders: Vec<SyncSender<Work>>,
    results: Receiver<Done>,
    handles: Vec<JoinHandle<Stats>>,
    steering: Steering,
    /// Shares sent to each worker and not yet received back.
    outstanding: Vec<usize>,
    /// Results taken early to make room for a submit, in arrival order.
    buffered: VecDeque<Done>,
    queue: usize,
    live: Arc<[LiveCounters]>,
}

/// How to run the pool.
pub struct PoolConfig {
    pub workers: usize,
    /// CPU for each worker (default: worker i on CPU i modulo the CPUs).
    pub cpus: Option<Vec<usize>>,
    pub undecodable: Verdict,
    pub batch: usize,
    /// Batches each worker may have queued.
    pub queue: usize,
    pub key: [u8; sluice_steer::KEY_LEN],
}

impl PoolConfig {
    pub fn new(workers: usize) -> Self {
        PoolConfig {
            workers,
            cpus: None,
            undecodable: Verdict::Pass,
            batch: DEFAULT_BATCH,
            queue: 4,
            key: MICROSOFT_KEY,
        }
    }
}

impl Pool {
    pub fn new(cfg: PoolConfig, rules: &Arc<Published<RuleSet>>) -> Self {
        let workers = cfg.workers.max(1);
        let queue = cfg.queue.max(1);
        // Never more than `queue` shares per worker are outstanding (submit
        // makes room first), so neither channel can fill up and block a
        // worker: no deadlock whatever the caller's order of calls.
        let (done_tx, results) = sync_channel::<Done>(workers * queue);
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        let live: Arc<[LiveCounters]> = (0..workers).map(|_| LiveCounters::default()).collect();
        for w in 0..workers {
            let (tx, rx) = sync_channel::<Work>(queue);
            senders.push(tx);
            let reader = rules.reader();
            let done_tx = done_tx.clone();
            let cpu = cfg.cpus.as_ref().map_or(w % affinity::available_cpus(), |c| c[w % c.len()]);
            let (undecodable, batch, live) = (cfg.undecodable, cfg.batch, Arc::clone(&live));
            handles.push(std::thread::spawn(move || worker(w, cpu, rx, done_tx, reader, undecodable, batch, &live[w])));
        }
        Pool {
            senders,
            results,
            handles,
            steering: Steering::new(&cfg.key, workers),
            outstanding: vec![0; workers],
            buffered: VecDeque::new(),
            queue,
            live,
        }
    }

    pub fn workers(&self) -> usize {
        self.senders.len()
    }

    /// (packets, dropped) per worker so far, read while they run.
    pub fn live(&self) -> Vec<(u64, u64)> {
        self.live.iter().map(|c| (c.packets.load(Ordering::Relaxed), c.dropped.load(Ordering::Relaxed))).collect()
    }

    /// Steer `batch` to the workers and return how many parts to expect
    /// back. `plan[i]` (when given) decides for packet i: `Skip` leaves it
    /// out (its verdict is already decided), `Flow` steers it by that input
    /// (a reassembled datagram's fragments, by the datagram's flow), `Auto`
    /// by its own headers. When a worker has a full queue, waits for results
    /// (kept for `recv`).
    pub fn submit(&mut self, batch_no: u64, batch: Arc<Batch>, plan: &[Steer]) -> usize {
        let mut shares: Vec<Vec<u32>> = vec![Vec::new(); self.senders.len()];
        for i in 0..batch.len() {
            let w = match plan.get(i).copied().unwrap_or(Steer::Auto) {
                Steer::Skip => continue,
                Steer::Auto => self.steering.worker_for(&batch.frame(i)),
                Steer::Flow(input) => self.steering.worker_for_input(&input),
            };
            shares[w].push(i as u32);
        }
        let mut parts = 0;
        for (w, indices) in shares.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            parts += 1;
            while self.outstanding[w] >= self.queue {
                match self.take_result() {
                    Some(d) => self.buffered.push_back(d),
                    None => return parts, // a worker died; finish() reports it
                }
            }
            // A worker only hangs up by panicking; its join reports that.
            if self.senders[w].send(Work { batch_no, batch: Arc::clone(&batch), indices }).is_ok() {
                self.outstanding[w] += 1;
            }
        }
        parts
    }

    fn take_result(&mut self) -> Option<Done> {
        let d = self.results.recv().ok()?;
        self.outstanding[d.worker] -= 1;
        Some(d)
    }

    /// The next finished share (from any worker, in any order); `None` only
    /// if every worker has stopped.
    pub fn recv(&mut self) -> Option<Done> {
        self.buffered.pop_front().or_else(|| self.take_result())
    }

    /// Stop the workers and return each one's counters.
    pub fn finish(self) -> Vec<Stats> {
        drop(self.senders);
        drop(self.results);
        self.handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn worker(
    id: usize,
    cpu: usize,
    rx: Receiver<Work>,
    done: SyncSender<Done>,
    mut rules: Reader<RuleSet>,
    undecodable: Verdict,
    batch: usize,
    live: &LiveCounters,
) -> Stats {
    // Best effort: a worker keeps its caches when it keeps its CPU.
    let _ = affinity::pin_current_thread(cpu);
    let mut stats = Stats::default();
    while let Ok(work) = rx.recv() {
        // Rules switch only here, between batches.
        let snapshot = rules.refresh();
        // Two allocations per batch share (the views and the verdicts sent
        // back), none per packet.
        let frames: Vec<Frame<'_>> = work.indices.iter().map(|&i| work.batch.frame(i as usize)).collect();
        let mut verdicts = vec![Verdict::Pass; frames.len()];
        judge_batch(&snapshot.value, undecodable, batch, &mut stats, &frames, &mut verdicts);
        let generation = snapshot.generation;
        drop(frames);
        // Once per batch, to a line only this worker writes.
        live.packets.store(stats.packets, Ordering::Relaxed);
        live.dropped.store(stats.dropped, Ordering::Relaxed);
        let msg = Done { batch_no: work.batch_no, worker: id, indices: work.indices, verdicts, generation };
        if done.send(msg).is_err() {
            break;
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_rules::Prefix;

    fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, frag: bool) -> Vec<u8> {
        let mut f = vec![0x45, 0, 0, 28, 0, 1, if frag { 0x20 } else { 0 }, 0, 64, 17, 0, 0];
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
        f
    }

    #[test]
    fn every_packet_comes_back_once_with_the_single_thread_verdict() {
        let list: Vec<Prefix> = ["10.0.0.0/8", "192.0.2.7"].iter().map(|s| s.parse().unwrap()).collect();
        let published = Arc::new(Published::new(RuleSet::new(&[], &[], &list)));
        let mut pool = Pool::new(PoolConfig::new(3), &published);
        let mut reference = crate::Engine::new(RuleSet::new(&[], &[], &list), Verdict::Pass);
        let mut expected = Vec::new();
        let mut outstanding = 0;
        for b in 0..20u64 {
            let mut batch = Batch::default();
            for i in 0..100u32 {
                let x = (b as u32 * 100 + i) as u8;
                let f = v4([10 + (x % 3), x, 1, 2], [192, 0, 2, x % 9], 1000 + x as u16, x % 5 == 0);
                expected.push(reference.judge(LinkType::IPV4, &f, 28));
                batch.push(LinkType::IPV4, &f, 28);
            }
            outstanding += pool.submit(b, Arc::new(batch), &[]);
        }
        let mut got = vec![None; expected.len()];
        let mut workers_seen = std::collections::HashSet::new();
        while outstanding > 0 {
            let d = pool.recv().unwrap();
            workers_seen.insert(d.worker);
            for (i, v) in d.indices.iter().zip(d.verdicts) {
                let slot = &mut got[d.batch_no as usize * 100 + *i as usize];
                assert!(slot.is_none(), "a packet came back twice");
                *slot = Some(v);
            }
            outstanding -= 1;
        }
        let live: u64 = pool.live().iter().map(|(p, _)| p).sum();
        assert_eq!(live, 2000, "live counters merged on read");
        let stats = pool.finish();
        assert_eq!(workers_seen.len(), 3, "steering used every worker");
        assert_eq!(stats.iter().map(|s| s.packets).sum::<u64>(), 2000);
        let got: Vec<Verdict> = got.into_iter().map(|v| v.expect("every packet judged")).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn planned_flows_go_to_their_owner_and_skipped_packets_nowhere() {
        let published = Arc::new(Published::new(RuleSet::empty()));
        let mut pool = Pool::new(PoolConfig::new(4), &published);
        let flow = RssInput::four_tuple("1.2.3.4".parse().unwrap(), "5.6.7.8".parse().unwrap(), 4444, 53);
        let owner = Steering::new(&MICROSOFT_KEY, 4).worker_for_input(&flow);
        let mut batch = Batch::default();
        for x in 0..12u8 {
            batch.push(LinkType::IPV4, &v4([1, 2, 3, x], [5, 6, 7, 8], 1000 + u16::from(x), x % 2 == 0), 28);
        }
        let plan: Vec<Steer> = (0..12)
            .map(|i| {
                if i < 6 {
                    Steer::Flow(flow)
                } else if i < 9 {
                    Steer::Skip
                } else {
                    Steer::Auto
                }
            })
            .collect();
        let mut parts = pool.submit(0, Arc::new(batch), &plan);
        let mut seen = Vec::new();
        while parts > 0 {
            let d = pool.recv().unwrap();
            for &i in &d.indices {
                if i < 6 {
                    assert_eq!(d.worker, owner, "packet {i} steered by its planned flow");
                }
                seen.push(i);
            }
            parts -= 1;
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5, 9, 10, 11], "skipped packets are not judged");
        pool.finish();
    }

    #[test]
    fn fragments_of_a_datagram_meet_on_one_worker() {
        let s = Steering::new(&MICROSOFT_KEY, 8);
        let first = v4([1, 2, 3, 4], [5, 6, 7, 8], 4444, true);
        let mut later = first.clone();
        later[6] = 0x00;
        later[7] = 0x10; // offset 128, last fragment: no ports visible
        let at = |f: &Vec<u8>| s.worker_for(&Frame { link: LinkType::IPV4, data: f, wire_len: 28 });
        assert_eq!(at(&first), at(&later));
    }
}
