//! `sluice-bench queue`: the seed's queue benchmark (producers push a fixed
//! number of items, consumers pop them, wall time of the whole run) over
//! [`NatsysQueue`](super::NatsysQueue) and its peers, every delivery checked.

use super::{Backoff, NatsysQueue};
use crate::median;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::Instant;

/// The seed's run (i7-4650U: 2 cores, 4 hardware threads; its published
/// benchmark has 2 producers x 2 consumers, 2 x 32 Mi items, 32 Ki slots).
/// These are the post's figures, constants, not measured here.
pub const SEED_NATSYS_S: f64 = 13.969;
pub const SEED_BOOST_S: f64 = 20.240;
pub const SEED_LOCKED_S: f64 = 69.357;
pub const SEED_PRODUCERS: usize = 2;
pub const SEED_CONSUMERS: usize = 2;
pub const SEED_ITEMS: u64 = 2 * 32 * 1024 * 1024;
pub const SEED_CAPACITY: usize = 32 * 1024;

/// The queues compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`NatsysQueue`]: fetch-add positions, no CAS.
    Natsys,
    /// crossbeam's `ArrayQueue`: a bounded MPMC ring that takes a slot by
    /// CAS, standing in for the seed's boost::lockfree::queue.
    ArrayQueue,
    /// crossbeam-channel `bounded`: blocks (parks) instead of spinning.
    Channel,
    /// A `Mutex<VecDeque>` with two condition variables: the seed's
    /// NaiveQueue.
    Mutex,
    /// rtrb, a single-producer single-consumer ring (1x1 only).
    Rtrb,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Natsys, Kind::ArrayQueue, Kind::Channel, Kind::Mutex, Kind::Rtrb];
    pub fn name(self) -> &'static str {
        match self {
            Kind::Natsys => "natsys",
            Kind::ArrayQueue => "arrayqueue",
            Kind::Channel => "channel",
            Kind::Mutex => "mutex",
            Kind::Rtrb => "rtrb",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
    /// The seed's figure for this queue, at the seed's thread counts.
    pub fn seed_s(self, producers: usize, consumers: usize) -> Option<f64> {
        if (producers, consumers) != (SEED_PRODUCERS, SEED_CONSUMERS) {
            return None;
        }
        match self {
            Kind::Natsys => Some(SEED_NATSYS_S),
            Kind::ArrayQueue => Some(SEED_BOOST_S),
            Kind::Mutex => Some(SEED_LOCKED_S),
            _ => None,
        }
    }
    fn applies(self, producers: usize, consumers: usize) -> bool {
        self != Kind::Rtrb || (producers, consumers) == (1, 1)
    }
}

/// What the consumers received, checked against what was sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    pub sent: u64,
    pub delivered: u64,
    pub duplicates: u64,
    pub missing: u64,
    /// Items a consumer got from one producer after a later one of the
    /// same producer (a FIFO queue never does this).
    pub out_of_order: u64,
}

impl Delivery {
    pub fn exactly_once(&self) -> bool {
        self.delivered == self.sent && self.duplicates == 0 && self.missing == 0 && self.out_of_order == 0
    }
}

/// One consumer's record: a bit per item (global index) and the last
/// sequence number seen per producer. Cheap enough to keep inside the
/// timed run: a bit set and a compare per item, in memory of its own.
struct Record {
    bits: Vec<u64>,
    last: Vec<u64>,
    delivered: u64,
    duplicates: u64,
    out_of_order: u64,
}

const SEQ_BITS: u32 = 40;

fn encode(producer: usize, seq: u64) -> u64 {
    ((producer as u64) << SEQ_BITS) | seq
}

impl Record {
    fn new(total: u64, producers: usize) -> Self {
        Record {
            bits: vec![0; total.div_ceil(64) as usize],
            last: vec![u64::MAX; producers],
            delivered: 0,
            duplicates: 0,
            out_of_order: 0,
        }
    }
    #[inline]
    fn note(&mut self, v: u64, starts: &[u64]) {
        let p = (v >> SEQ_BITS) as usize;
        let seq = v & ((1 << SEQ_BITS) - 1);
        let g = starts[p] + seq;
        let (w, b) = ((g / 64) as usize, 1u64 << (g % 64));
        self.duplicates += u64::from(self.bits[w] & b != 0);
        self.bits[w] |= b;
        let last = self.last[p];
        self.out_of_order += u64::from(last != u64::MAX && seq <= last);
        self.last[p] = seq;
        self.delivered += 1;
    }
}

fn merge(records: Vec<Record>, sent: u64) -> Delivery {
    let mut d = Delivery { sent, ..Delivery::default() };
    let mut all = vec![0u64; sent.div_ceil(64) as usize];
    for r in records {
        d.delivered += r.delivered;
        d.duplicates += r.duplicates;
        d.out_of_order += r.out_of_order;
        for (a, b) in all.iter_mut().zip(&r.bits) {
            d.duplicates += u64::from((*a & b).count_ones());
            *a |= b;
        }
    }
    let got: u64 = all.iter().map(|w| u64::from(w.count_ones())).sum();
    d.missing = sent - got;
    d
}

/// Items per producer: the total split, the remainder to the first.
fn shares(total: u64, n: usize) -> Vec<u64> {
    (0..n as u64).map(|i| total / n as u64 + if i == 0 { total % n as u64 } else { 0 }).collect()
}

/// Runs producers and consumers (closures made by `ends`) over `total`
/// items; returns the wall time from the start barrier to the last join.
fn drive<P, C>(producers: Vec<P>, consumers: Vec<C>, total: u64) -> (f64, Delivery)
where
    P: FnMut(u64) + Send,
    C: FnMut() -> u64 + Send,
{
    let np = producers.len();
    let sent = shares(total, np);
    let starts: Vec<u64> = sent.iter().scan(0, |acc, &n| Some(std::mem::replace(acc, *acc + n))).collect();
    let quotas = shares(total, consumers.len());
    let barrier = Barrier::new(np + consumers.len() + 1);
    let (barrier, starts) = (&barrier, &starts);
    std::thread::scope(|s| {
        let mut hp = Vec::new();
        for (id, (mut push, n)) in producers.into_iter().zip(sent.iter().copied()).enumerate() {
            hp.push(s.spawn(move || {
                barrier.wait();
                for seq in 0..n {
                    push(encode(id, seq));
                }
            }));
        }
        let hc: Vec<_> = consumers
            .into_iter()
            .zip(quotas)
            .map(|(mut pop, quota)| {
                let mut rec = Record::new(total, np);
                s.spawn(move || {
                    barrier.wait();
                    for _ in 0..quota {
                        rec.note(pop(), starts);
                    }
                    rec
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        for h in hp {
            h.join().expect("producer panicked");
        }
        let records: Vec<Record> = hc.into_iter().map(|h| h.join().expect("consumer panicked")).collect();
        let secs = started.elapsed().as_secs_f64();
        (secs, merge(records, total))
    })
}

/// The seed's NaiveQueue: one lock, a condition variable per direction.
struct Locked {
    q: Mutex<VecDeque<u64>>,
    not_full: Condvar,
    not_empty: Condvar,
    cap: usize,
}

impl Locked {
    fn push(&self, v: u64) {
        let mut q = self.not_full.wait_while(self.q.lock().unwrap(), |q| q.len() >= self.cap).unwrap();
        q.push_back(v);
        self.not_empty.notify_one();
    }
    fn pop(&self) -> u64 {
        let mut q = self.not_empty.wait_while(self.q.lock().unwrap(), |q| q.is_empty()).unwrap();
        let v = q.pop_front().expect("not empty");
        self.not_full.notify_one();
        v
    }
}

/// One run of `kind` with `producers` x `consumers` threads.
pub fn run_once(kind: Kind, producers: usize, consumers: usize, total: u64, capacity: usize) -> (f64, Delivery) {
    match kind {
        Kind::Natsys => {
            let (ps, cs) = NatsysQueue::<u64>::with_handles(capacity, producers, consumers);
            let ps: Vec<_> = ps.into_iter().map(|mut p| move |v| p.push(v)).collect();
            let cs: Vec<_> = cs.into_iter().map(|mut c| move || c.pop()).collect();
            drive(ps, cs, total)
        }
        Kind::ArrayQueue => {
            let q = Arc::new(crossbeam_queue::ArrayQueue::<u64>::new(capacity));
            // Retry with the same backoff as NatsysQueue's waits (the seed's
            // Boost wrapper spins with a pause).
            let ps: Vec<_> = (0..producers)
                .map(|_| {
                    let q = Arc::clone(&q);
                    move |mut v| {
                        let mut b = Backoff::default();
                        while let Err(back) = q.push(v) {
                            v = back;
                            b.snooze();
                        }
                    }
                })
                .collect();
            let cs: Vec<_> = (0..consumers)
                .map(|_| {
                    let q = Arc::clone(&q);
                    move || {
                        let mut b = Backoff::default();
                        loop {
                            if let Some(v) = q.pop() {
                                return v;
                            }
                            b.snooze();
                        }
                    }
                })
                .collect();
            drive(ps, cs, total)
        }
        Kind::Channel => {
            let (tx, rx) = crossbeam_channel::bounded::<u64>(capacity);
            let ps: Vec<_> = (0..producers)
                .map(|_| {
                    let tx = tx.clone();
                    move |v| tx.send(v).expect("receivers live")
                })
                .collect();
            let cs: Vec<_> = (0..consumers)
                .map(|_| {
                    let rx = rx.clone();
                    move || rx.recv().expect("senders live")
                })
                .collect();
            drop((tx, rx));
            drive(ps, cs, total)
        }
        Kind::Mutex => {
            let q = Arc::new(Locked {
                q: Mutex::new(VecDeque::with_capacity(capacity)),
                not_full: Condvar::new(),
                not_empty: Condvar::new(),
                cap: capacity,
            });
            let ps: Vec<_> = (0..producers)
                .map(|_| {
                    let q = Arc::clone(&q);
                    move |v| q.push(v)
                })
                .collect();
            let cs: Vec<_> = (0..consumers)
                .map(|_| {
                    let q = Arc::clone(&q);
                    move || q.pop()
                })
                .collect();
            drive(ps, cs, total)
        }
        Kind::Rtrb => {
            assert_eq!((producers, consumers), (1, 1), "rtrb is single-producer single-consumer");
            let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(capacity);
            let push = move |v| {
                let mut b = Backoff::default();
                let mut v = v;
                while let Err(rtrb::PushError::Full(back)) = tx.push(v) {
                    v = back;
                    b.snooze();
                }
            };
            let pop = move || {
                let mut b = Backoff::default();
                loop {
                    if let Ok(v) = rx.pop() {
                        return v;
                    }
                    b.snooze();
                }
            };
            drive(vec![push], vec![pop], total)
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// (producers, consumers) pairs.
    pub threads: Vec<(usize, usize)>,
    pub kinds: Vec<Kind>,
    /// Items per run (all producers together).
    pub items: u64,
    pub capacity: usize,
    pub reps: usize,
}

impl Settings {
    /// The default: 1x1, 2x2, 4x4, every queue, 2 Mi items, the seed's
    /// 32 Ki slots, 5 reps. Under a minute on 2 cores.
    pub fn quick() -> Self {
        Settings {
            threads: vec![(1, 1), (2, 2), (4, 4)],
            kinds: Kind::ALL.to_vec(),
            items: 2 << 20,
            capacity: SEED_CAPACITY,
            reps: 5,
        }
    }
}

/// One queue at one thread count, and what it delivered over every rep.
#[derive(Clone, Debug)]
pub struct Case {
    pub kind: Kind,
    pub producers: usize,
    pub consumers: usize,
    /// Every rep's delivery, summed.
    pub delivery: Delivery,
    pub all_exactly_once: bool,
}

/// The queue experiment's result row: seconds per rep (the threads the run
/// spawns included in the counters).
pub type Row = crate::stats::Row<Case>;

/// Measures every (threads, queue), alternating the queues within each rep
/// (each rep starts with a different queue) so drift in the machine's
/// load spreads over all of them.
pub fn measure(st: &Settings, pmc: &mut Option<crate::pmc::Pmc>, mut progress: impl FnMut(&Row)) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for &(p, c) in &st.threads {
        let kinds: Vec<Kind> = st.kinds.iter().copied().filter(|k| k.applies(p, c)).collect();
        let first = rows.len();
        for &kind in &kinds {
            rows.push(Row::new(
                Case { kind, producers: p, consumers: c, delivery: Delivery::default(), all_exactly_once: true },
                "s",
                false,
            ));
        }
        for rep in 0..st.reps.max(1) {
            for i in 0..kinds.len() {
                let r = &mut rows[first + (i + rep) % kinds.len()];
                let ((secs, d), reading) = crate::pmc::maybe(pmc, || run_once(r.kind, p, c, st.items, st.capacity));
                r.add_pmc(reading);
                r.values.push(secs);
                r.all_exactly_once &= d.exactly_once();
                r.delivery.sent += d.sent;
                r.delivery.delivered += d.delivered;
                r.delivery.duplicates += d.duplicates;
                r.delivery.missing += d.missing;
                r.delivery.out_of_order += d.out_of_order;
            }
        }
        for r in &rows[first..] {
            progress(r);
        }
    }
    rows
}

/// A same-run ratio: `num`'s time over `den`'s, per rep (the reps are
/// paired: run back to back), median and spread; > 1 means `den` is faster.
#[derive(Clone, Debug)]
pub struct Ratio {
    pub name: String,
    pub producers: usize,
    pub consumers: usize,
    pub seed: Option<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Ratio {
    /// The seed's direction (NatSys faster) held in every rep, in the
    /// median only (by more than 5%), within 5% either way, or not.
    pub fn verdict(&self) -> &'static str {
        if self.min > 1.0 {
            "holds"
        } else if self.median > 1.05 {
            "holds in the median"
        } else if self.median >= 0.95 {
            "no clear difference"
        } else {
            "does not hold"
        }
    }
}

pub fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let natsys: Vec<&Row> = rows.iter().filter(|r| r.kind == Kind::Natsys).collect();
    for n in natsys {
        for other in
            rows.iter().filter(|r| r.kind != Kind::Natsys && (r.producers, r.consumers) == (n.producers, n.consumers))
        {
            let per_rep: Vec<f64> = other.values.iter().zip(&n.values).map(|(o, n)| o / n).collect();
            let seed = other.kind.seed_s(n.producers, n.consumers).map(|s| s / SEED_NATSYS_S);
            out.push(Ratio {
                name: format!("{}/natsys", other.kind.name()),
                producers: n.producers,
                consumers: n.consumers,
                seed,
                median: median(&per_rep),
                min: crate::stats::min(&per_rep),
                max: crate::stats::max(&per_rep),
            });
        }
    }
    out
}

fn cfg(p: usize, c: usize) -> String {
    format!("{p}x{c}")
}

pub fn oversubscribed(p: usize, c: usize, cpus: usize) -> bool {
    p + c > cpus
}

pub fn row_json(r: &Row, st: &Settings, cpus: usize) -> Value {
    let mut v = row_json_plain(r, st, cpus);
    if let Some(reading) = &r.pmc {
        let (hw, sw) = crate::pmc::Reading::json_fields(Some(reading));
        v["pmc"] = hw;
        v["pmc_sw"] = sw;
    }
    v
}

fn row_json_plain(r: &Row, st: &Settings, cpus: usize) -> Value {
    let med = r.median();
    let seed = r.kind.seed_s(r.producers, r.consumers);
    json!({
        "bench": "queue",
        "row": "queue",
        "queue": r.kind.name(),
        "threads": cfg(r.producers, r.consumers),
        "producers": r.producers,
        "consumers": r.consumers,
        "items": st.items,
        "capacity": st.capacity,
        "reps": r.values.len(),
        "seed": seed,
        "seed_items": seed.map(|_| SEED_ITEMS),
        "ours": med,
        "ours_min": r.min(),
        "ours_max": r.max(),
        "unit": "s",
        "ns_per_item": med * 1e9 / st.items as f64,
        "seed_ns_per_item": seed.map(|s| s * 1e9 / SEED_ITEMS as f64),
        "oversubscribed": oversubscribed(r.producers, r.consumers, cpus),
        "exactly_once": r.all_exactly_once,
        "sent": r.delivery.sent,
        "delivered": r.delivery.delivered,
        "duplicates": r.delivery.duplicates,
        "missing": r.delivery.missing,
        "out_of_order": r.delivery.out_of_order,
    })
}

pub fn ratio_json(r: &Ratio) -> Value {
    json!({
        "bench": "queue",
        "row": "ratio",
        "ratio": r.name,
        "threads": cfg(r.producers, r.consumers),
        "seed": r.seed,
        "ours": r.median,
        "ours_min": r.min,
        "ours_max": r.max,
        "verdict": r.verdict(),
    })
}

pub fn table_header() -> String {
    format!(
        "{:<8} {:<11} {:>9} {:>19} {:>8} {:>9} {:>9} {:>12}",
        "threads", "queue", "ours s", "[min-max]", "ns/item", "seed s", "seed ns", "exactly-once"
    )
}

pub fn table_row(r: &Row, st: &Settings) -> String {
    let med = r.median();
    let seed = r.kind.seed_s(r.producers, r.consumers);
    let min = r.min();
    let max = r.max();
    format!(
        "{:<8} {:<11} {:>9.3} {:>19} {:>8.1} {:>9} {:>9} {:>12}",
        cfg(r.producers, r.consumers),
        r.kind.name(),
        med,
        format!("[{min:.3}-{max:.3}]"),
        med * 1e9 / st.items as f64,
        seed.map_or("-".into(), |s| format!("{s:.2}")),
        seed.map_or("-".into(), |s| format!("{:.0}", s * 1e9 / SEED_ITEMS as f64)),
        if r.all_exactly_once {
            "yes".to_owned()
        } else {
            format!("NO (dup {} miss {} ooo {})", r.delivery.duplicates, r.delivery.missing, r.delivery.out_of_order)
        },
    )
}

pub fn ratio_line(r: &Ratio) -> String {
    format!(
        "{:<8} {:<18} ours {:>6.2} [{:.2}-{:.2}]  seed {:>6}  -> NatSys faster: {}",
        cfg(r.producers, r.consumers),
        r.name,
        r.median,
        r.min,
        r.max,
        r.seed.map_or("-".into(), |s| format!("{s:.2}")),
        r.verdict()
    )
}

/// Bars of M items/s per queue, grouped by thread count, with min-max
/// whiskers; the seed's rate (its items over its seconds) as a red tick.
pub fn svg(rows: &[Row], st: &Settings, title: &str) -> String {
    let rate = |s: f64| st.items as f64 / s / 1e6;
    let bars: Vec<crate::svg::Bar> = rows
        .iter()
        .map(|r| crate::svg::Bar {
            label: format!("{} {}", cfg(r.producers, r.consumers), r.kind.name()),
            median: rate(r.median()),
            // The fastest run is the highest rate.
            min: rate(crate::stats::max(&r.values)),
            max: rate(crate::stats::min(&r.values)),
            seed: r.kind.seed_s(r.producers, r.consumers).map(|s| SEED_ITEMS as f64 / s / 1e6),
            value: format!("{:.1}", rate(r.median())),
        })
        .collect();
    let legend = "bars: median M items/s, whiskers: min-max; red tick: the seed post's rate (its items / its seconds)";
    crate::svg::bars(title, 170.0, &bars, legend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_delivers_exactly_once() {
        for kind in Kind::ALL {
            for (p, c) in [(1, 1), (2, 3), (3, 2)] {
                if !kind.applies(p, c) {
                    continue;
                }
                let (_, d) = run_once(kind, p, c, 5_000, 16);
                assert!(d.exactly_once(), "{kind:?} {p}x{c}: {d:?}");
                assert_eq!(d.delivered, 5_000);
            }
        }
    }

    #[test]
    fn the_record_catches_duplicates_losses_and_reordering() {
        let starts = [0, 3];
        let mut a = Record::new(6, 2);
        let mut b = Record::new(6, 2);
        for v in [encode(0, 0), encode(0, 2), encode(0, 1), encode(1, 0)] {
            a.note(v, &starts);
        }
        b.note(encode(1, 0), &starts);
        let d = merge(vec![a, b], 6);
        assert_eq!((d.delivered, d.duplicates, d.missing, d.out_of_order), (5, 1, 2, 1));
        assert!(!d.exactly_once());
    }

    #[test]
    fn seed_ratios_are_the_posts() {
        assert!((Kind::ArrayQueue.seed_s(2, 2).unwrap() / SEED_NATSYS_S - 1.449).abs() < 0.001);
        assert!((Kind::Mutex.seed_s(2, 2).unwrap() / SEED_NATSYS_S - 4.965).abs() < 0.001);
        assert_eq!(Kind::Natsys.seed_s(4, 4), None);
    }
}
