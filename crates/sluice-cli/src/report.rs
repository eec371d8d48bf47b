//! What several commands print or do with a finished run: the judge they
//! build, the error a stopped run becomes, the progress bar, the text
//! summary, the generator's counts.

use anyhow::Result;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Stats};
use sluice_gen::GenStats;
use sluice_pipeline::{Finished, Judge, JudgeConfig, Observer, Progress, RunError, RunReport, WorkersConfig};
use std::path::Path;
use std::sync::Arc;

/// The judge for `workers` pinned to `cpus` (empty: worker i on CPU i).
pub fn judge(
    published: &Arc<Published<RuleSet>>,
    judge: JudgeConfig,
    workers: usize,
    cpus: &[usize],
    panic_at: Option<(usize, u64)>,
) -> Box<dyn Judge> {
    let cpus = (!cpus.is_empty()).then(|| cpus.to_vec());
    sluice_pipeline::judge(published, WorkersConfig { judge, cpus, panic_at, ..WorkersConfig::new(workers) })
}

/// The run's result, or an error that says what stopped it. After a failed
/// judge the outputs hold, in order, everything judged before.
pub fn finished<E, K: std::fmt::Display>(result: Result<Finished<E>, RunError<K>>) -> Result<Finished<E>> {
    result.map_err(|e| match e {
        RunError::Judge { error, .. } => anyhow::anyhow!(
            "{error}; the run stopped, and the outputs were completed with every packet judged before it, in input order"
        ),
        RunError::Sink(e) => anyhow::anyhow!("{e}"),
    })
}

/// The progress bar as a pipeline observer.
pub struct Bar(pub indicatif::ProgressBar);

impl Observer for Bar {
    fn progress(&mut self, p: &Progress) {
        self.0.set_position(p.source.0);
        self.0.set_message(format!("{} judged, {} dropped", p.judged, p.dropped));
    }
}

/// The text summary of a run (one line per counter).
pub fn summary_text(run: &RunReport) -> String {
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
    let _ = writeln!(t, "elapsed      {:>12.3} s  ({:.2} Mpps, source to sink)", run.elapsed.as_secs_f64(), run.mpps());
    t
}

pub fn stats_json(s: &GenStats, out: Option<&Path>, elapsed_s: f64) -> serde_json::Value {
    serde_json::json!({
        "out": out.map(|p| p.display().to_string()),
        "packets": s.packets,
        "bytes": s.bytes,
        "listed": s.listed,
        "ipv4": s.ipv4,
        "ipv6": s.ipv6,
        "tcp": s.tcp,
        "udp": s.udp,
        "icmp": s.icmp,
        "fragments": s.fragments,
        "fragmented_datagrams": s.fragmented_datagrams,
        "duplicated_fragments": s.duplicated_fragments,
        "vlan_tagged": s.vlan_tagged,
        "qinq_tagged": s.qinq_tagged,
        "encapsulated": s.encapsulated,
        "elapsed_s": elapsed_s,
    })
}
