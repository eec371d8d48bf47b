//! What several commands print or do with a finished run: the judge they
//! build, the error a stopped run becomes, the progress bar, the text
//! summary.

use anyhow::Result;
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_pipeline::{Finished, Judge, JudgeConfig, Observer, Progress, RunError, WorkersConfig};
use std::sync::Arc;

/// The judge for `workers` pinned to `cpus` (empty: worker i on CPU i).
pub fn judge(
    published: &Arc<Published<RuleSet>>,
    judge: JudgeConfig,
    workers: usize,
    cpus: &[usize],
    panic_at: Option<(usize, u64)>,
    steer_inner: bool,
) -> Box<dyn Judge> {
    let cpus = (!cpus.is_empty()).then(|| cpus.to_vec());
    sluice_pipeline::judge(
        published,
        WorkersConfig { judge, cpus, panic_at, steer_inner, ..WorkersConfig::new(workers) },
    )
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
