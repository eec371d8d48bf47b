//! The pipeline's flag groups that several commands flatten (`filter`,
//! `bridge`, `shield`), each mapped onto the pipeline's own config here.

use crate::reassembly::ReassemblyConfig;
use crate::sample::{Backpressure, SampleConfig, Sampler};
use sluice_defrag::DefragLimits;
use sluice_engine::{snapshot::Published, RuleSet, Verdict};
use std::path::PathBuf;
use std::sync::Arc;

/// A verdict as a flag's value.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum VerdictFlag {
    Pass,
    Drop,
}

impl From<VerdictFlag> for Verdict {
    fn from(v: VerdictFlag) -> Verdict {
        match v {
            VerdictFlag::Pass => Verdict::Pass,
            VerdictFlag::Drop => Verdict::Drop,
        }
    }
}

/// `--workers`: 1 to 256.
pub fn workers(s: &str) -> Result<usize, String> {
    s.parse().ok().filter(|n| (1..=256).contains(n)).ok_or_else(|| format!("`{s}`: give 1 to 256 workers"))
}

/// Samples of the drops, written off the fast path; a full queue loses
/// samples on a live port, never packets, and makes `filter` wait instead.
#[derive(clap::Args, Debug, Clone)]
pub struct SampleFlags {
    /// Write dropped frames to FILE (pcapng), each with a comment naming the
    /// rule (line and text), the set, the ingress port and the worker.
    #[arg(long, value_name = "FILE")]
    pub sample_drops: Option<PathBuf>,
    /// Keep 1 in N drops.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_rate: u64,
    /// At most R samples a second (wall clock; 0: no cap).
    #[arg(long, value_name = "R", default_value_t = 100)]
    pub sample_max_pps: u64,
    /// Start a new file when the current one would pass M MiB (the old one becomes NAME-1.pcapng).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_rotate_mb: Option<u64>,
    /// Files kept when rotating, the current one included.
    #[arg(long, value_name = "K", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_keep: u64,
    /// Write the same samples as JSON lines on stderr.
    #[arg(long)]
    pub log_drops: bool,
}

impl SampleFlags {
    /// The sampler these flags ask for (none without --sample-drops or
    /// --log-drops), before the ports and workers are known.
    pub fn config(&self, backpressure: Backpressure) -> Option<SampleConfig> {
        if self.sample_drops.is_none() && !self.log_drops {
            return None;
        }
        Some(SampleConfig {
            pcapng: self.sample_drops.clone(),
            log: self.log_drops.then(|| Box::new(std::io::stderr()) as Box<dyn std::io::Write + Send>),
            rate: self.sample_rate,
            max_pps: self.sample_max_pps,
            rotate_bytes: self.sample_rotate_mb.map(|m| m << 20),
            keep: self.sample_keep as usize,
            backpressure,
            ..SampleConfig::new()
        })
    }

    /// The sampler these flags ask for, started; `workers` as the judge
    /// runs them, so samples name theirs.
    pub fn start(
        &self,
        rules: &Arc<Published<RuleSet>>,
        ports: Vec<String>,
        workers: usize,
        steer_inner: bool,
        backpressure: Backpressure,
    ) -> anyhow::Result<Option<Sampler>> {
        use anyhow::Context;
        let Some(cfg) = self.config(backpressure) else { return Ok(None) };
        let cfg = cfg.for_run(ports, workers, steer_inner);
        Ok(Some(Sampler::start(cfg, Arc::clone(rules)).context("--sample-drops")?))
    }
}

/// How IP fragments are reassembled.
#[derive(clap::Args, Debug, Clone)]
pub struct ReassemblyFlags {
    /// Verdict for fragments of datagrams that never complete (timed out,
    /// evicted, or still incomplete at the end of the input).
    #[arg(long, value_enum, default_value = "drop")]
    pub incomplete: VerdictFlag,
    /// Reassembly timeout in seconds: of capture time for a file, of wall
    /// clock on a live link.
    #[arg(long, default_value_t = 30)]
    pub frag_timeout: u64,
    /// Most datagrams being reassembled at once (the oldest is evicted beyond).
    #[arg(long, default_value_t = 4096)]
    pub frag_max_datagrams: usize,
}

impl ReassemblyFlags {
    /// The reassembly these flags describe.
    pub fn config(&self) -> ReassemblyConfig {
        let limits = DefragLimits {
            max_datagrams: self.frag_max_datagrams.max(1),
            timeout_ns: self.frag_timeout.saturating_mul(1_000_000_000),
            ..DefragLimits::default()
        };
        ReassemblyConfig { limits, incomplete: self.incomplete.into() }
    }
}
