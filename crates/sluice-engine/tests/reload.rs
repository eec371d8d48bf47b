//! Rule swaps under load: workers judge batches while a publisher swaps rule
//! snapshots thousands of times. Every verdict must be the one its recorded
//! snapshot gives, every packet must get one, and every old snapshot must be
//! freed.

use sluice_engine::snapshot::Published;
use sluice_engine::{judge_batch, RawFrame, RuleSet, Stats, Verdict};
use sluice_rules::Prefix;
use sluice_wire::LinkType;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Generation g drops sources 10.0.0.x with (x + g) % 3 == 0.
fn dropped(g: u64, x: u8) -> bool {
    (u64::from(x) + g).is_multiple_of(3)
}

struct Rules {
    set: RuleSet,
    live: Arc<AtomicUsize>,
}

impl Rules {
    fn new(g: u64, live: &Arc<AtomicUsize>) -> Self {
        let hosts: Vec<Prefix> = (0..=255u8)
            .filter(|&x| dropped(g, x))
            .map(|x| Prefix::host(IpAddr::V4(Ipv4Addr::new(10, 0, 0, x))))
            .collect();
        live.fetch_add(1, Ordering::SeqCst);
        Rules { set: RuleSet::new(&hosts, &[], &[]), live: live.clone() }
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn frame(x: u8) -> Vec<u8> {
    let mut f = vec![0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, x, 192, 0, 2, 1];
    f.truncate(20);
    f
}

#[test]
fn every_verdict_matches_its_snapshot_while_rules_are_swapped() {
    const PUBLISHES: u64 = 3000;
    const WORKERS: usize = 2;
    let live = Arc::new(AtomicUsize::new(0));
    let published = Arc::new(Published::new(Rules::new(0, &live)));
    let stop = Arc::new(AtomicBool::new(false));
    let frames: Vec<Vec<u8>> = (0..=255u8).map(frame).collect();
    let results: Vec<(u64, u64, usize)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let mut reader = published.reader();
                let (stop, frames) = (stop.clone(), &frames);
                s.spawn(move || {
                    let mut stats = Stats::default();
                    let mut generations = std::collections::HashSet::new();
                    let (mut judged, mut batches) = (0u64, 0u64);
                    let mut verdicts = [Verdict::Pass; 64];
                    while !stop.load(Ordering::Relaxed) || batches < 100 {
                        let snap = reader.refresh();
                        let start = (batches as usize * 37 + w * 101) % 256;
                        let xs: Vec<u8> = (0..64).map(|i| ((start + i * 7) % 256) as u8).collect();
                        let batch: Vec<RawFrame<'_>> = xs
                            .iter()
                            .map(|&x| RawFrame { link: LinkType::IPV4, data: &frames[usize::from(x)], wire_len: 20 })
                            .collect();
                        judge_batch(&snap.value.set, Verdict::Pass, 16, &mut stats, &batch, &mut verdicts);
                        for (&x, v) in xs.iter().zip(&verdicts) {
                            let want = if dropped(snap.generation, x) { Verdict::Drop } else { Verdict::Pass };
                            assert_eq!(*v, want, "worker {w}: 10.0.0.{x} under generation {}", snap.generation);
                        }
                        generations.insert(snap.generation);
                        judged += 64;
                        batches += 1;
                    }
                    assert_eq!(stats.packets, judged, "every packet got exactly one verdict");
                    assert_eq!(stats.passed + stats.dropped, judged);
                    (judged, batches, generations.len())
                })
            })
            .collect();
        for g in 1..=PUBLISHES {
            let rules = Rules::new(g, &live);
            assert_eq!(published.publish(rules), g);
            if g % 64 == 0 {
                std::thread::yield_now();
            }
        }
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (judged, batches, seen) in &results {
        eprintln!("worker: {judged} packets in {batches} batches under {seen} distinct snapshots");
        assert!(*seen > 1, "a worker never saw a swap; the test would prove nothing");
    }
    // Only the current snapshot is still alive.
    assert_eq!(live.load(Ordering::SeqCst), 1, "old snapshots leaked");
    drop(published);
    assert_eq!(live.load(Ordering::SeqCst), 0);
}
