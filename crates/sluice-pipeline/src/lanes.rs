//! Lanes: several whole pipelines side by side, one per NIC queue.
//!
//! A per-queue bridge gives each RX queue index its own source (that
//! queue's sockets on both ports) and sink (the same queues' TX), and runs
//! [`run`] for each on a pinned thread of its own: each lane receives,
//! reassembles, judges inline and transmits with no hand-off to another
//! thread. Lanes share only the rule snapshot (read-only), the counters,
//! and the fragment inboxes of their [`Reassembly`] stages (see
//! [`crate::reassembly`]). When one lane ends, `on_end` is called so the
//! caller can stop the others (a live source ends on a stop flag).

use crate::io::{Sink, Source};
use crate::judge::{Inline, Judge, JudgeConfig, LiveStats};
use crate::reassembly::Inboxes;
use crate::reassembly::Reassembly;
use crate::run::{run, Finished, Observer, RunConfig, RunError};
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;

use std::sync::Arc;

/// The CPUs this process may run on.
pub fn available_cpus() -> usize {
    sluice_cpus::available_cpus()
}

/// Lane i's CPU: `cpus[i % len]` when CPUs are given, else i modulo the
/// CPUs this process may use; for `lanes` lanes.
pub fn lane_cpus(cpus: &[usize], lanes: usize) -> Vec<usize> {
    let n = sluice_cpus::available_cpus().max(1);
    (0..lanes).map(|i| if cpus.is_empty() { i % n } else { cpus[i % cpus.len()] }).collect()
}

/// One lane: its ends, its stage, its judge and its observer.
pub struct Lane<S, K> {
    pub source: S,
    pub sink: K,
    pub stage: Reassembly,
    /// Built on the lane's own thread (judges need not be `Send`).
    pub judge: Box<dyn FnOnce() -> Box<dyn Judge> + Send>,
    pub observer: Box<dyn Observer + Send>,
    /// The CPU the lane's thread is pinned to.
    pub cpu: usize,
}

/// Lanes over `ends`, one (source, sink) per lane: each judges inline
/// against `published`, reassembles in a stage from `stage` routed by
/// `inboxes` (so a datagram split over queues still meets in one lane),
/// reports to an observer from `observer`, and runs on its CPU of
/// [`lane_cpus`]`(cpus)`.
/// Returns them with each judge's counters, for the metrics.
pub fn inline_lanes<S, K>(
    ends: Vec<(S, K)>,
    published: &Arc<Published<RuleSet>>,
    judge: JudgeConfig,
    inboxes: &Arc<Inboxes>,
    stage: impl Fn() -> Reassembly,
    observer: impl Fn() -> Box<dyn Observer + Send>,
    cpus: &[usize],
) -> (Vec<Lane<S, K>>, Vec<LiveStats>) {
    let mut stats = Vec::with_capacity(ends.len());
    let cpus = lane_cpus(cpus, ends.len());
    let lanes = ends
        .into_iter()
        .enumerate()
        .map(|(i, (source, sink))| {
            let inline = Inline::new(published, judge);
            stats.extend(inline.live_stats());
            Lane {
                source,
                sink,
                stage: stage().routed(inboxes.router(i)),
                judge: Box::new(move || Box::new(inline) as Box<dyn Judge>),
                observer: observer(),
                cpu: cpus[i],
            }
        })
        .collect();
    (lanes, stats)
}

/// A lane's outcome.
pub type LaneResult<S, K> = Result<Finished<<S as Source>::Error>, RunError<<K as Sink>::Error>>;

/// Runs every lane to its end on a thread of its own (scoped: the lanes may
/// borrow), pinned to its CPU; returns each lane's outcome, in lane order.
/// `on_end` is called as each lane ends, whatever ended it.
pub fn run_lanes<S, K>(lanes: Vec<Lane<S, K>>, cfg: &RunConfig, on_end: &(dyn Fn() + Sync)) -> Vec<LaneResult<S, K>>
where
    S: Source + Send,
    S::Error: Send,
    K: Sink + Send,
    K::Error: Send,
{
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(i, lane)| {
                std::thread::Builder::new()
                    .name(format!("sluice-lane{i}"))
                    .spawn_scoped(scope, move || {
                        // Not pinned is slower, not wrong (a CPU set may forbid it).
                        let _ = sluice_cpus::pin_current_thread(lane.cpu);
                        let Lane { mut source, mut sink, mut stage, judge, mut observer, .. } = lane;
                        let r = run(&mut source, &mut stage, judge(), &mut sink, observer.as_mut(), cfg);
                        on_end();
                        r
                    })
                    .expect("spawning a lane thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// The lanes' outcomes as one: the reports added, the first source error
/// kept (the others are logged by the caller if it wants them), the first
/// failure returned as the run's (its report holds only that lane).
pub fn combine<SE, KE>(results: Vec<Result<Finished<SE>, RunError<KE>>>) -> Result<Finished<SE>, RunError<KE>> {
    let mut combined: Option<Finished<SE>> = None;
    let mut failure = None;
    for r in results {
        match r {
            Ok(f) => match &mut combined {
                None => combined = Some(f),
                Some(m) => {
                    m.report.add(&f.report);
                    if m.stopped.is_none() {
                        m.stopped = f.stopped;
                    }
                }
            },
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    match (failure, combined) {
        (Some(e), _) => Err(e),
        (None, Some(m)) => Ok(m),
        (None, None) => Ok(Finished { report: Default::default(), stopped: None }),
    }
}
