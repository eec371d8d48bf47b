use crate::progress;
use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::defrag::Limits;
use sluice_engine::snapshot::Published;
use sluice_engine::{RuleSet, Stats, Verdict};
use sluice_pcap::{CaptureSinks, CaptureSource, Format, OutputFormat, PcapError, ReadMode};
use sluice_pipeline::{
    Finished, Judge, JudgeConfig, Observer, Progress, Reassembly, RunConfig, RunError, RunReport, Source, WorkersConfig,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng; `-`: standard input).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    #[command(flatten)]
    pub rules: crate::rule_source::RuleArgs,
    /// Write passed packets here, in input order (`-`: standard output).
    #[arg(long, value_name = "OUT")]
    pub pass: Option<PathBuf>,
    /// Write dropped packets here, in input order (`-`: standard output).
    #[arg(long = "drop", value_name = "OUT")]
    pub drop_out: Option<PathBuf>,
    /// Output container (default: from the output's extension, else the input's).
    #[arg(long, value_enum)]
    pub out_format: Option<FormatArg>,
    /// Verdict for frames that cannot be decoded.
    #[arg(long, value_enum, default_value = "pass")]
    pub undecodable: VerdictArg,
    /// Worker threads: packets are steered to them by RSS (Toeplitz on the
    /// 4-tuple, or the IP pair for fragments); output keeps input order.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// CPUs to pin workers to, e.g. 0,1 (default: worker i on CPU i).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// With workers: write packets as their verdicts arrive, not in input order.
    #[arg(long)]
    pub unordered: bool,
    #[command(flatten)]
    pub reassembly: ReassemblyArgs,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// No progress bar even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// How to read the input: `chunks` (large reads that records borrow in
    /// place) or `map` (memory-map a regular file).
    #[arg(long, value_enum, default_value = "chunks")]
    pub read: ReadArg,
    /// Read and decode on the calling thread instead of a reader thread of
    /// its own (the default when there are at least two CPUs).
    #[arg(long)]
    pub no_read_ahead: bool,
    /// Test hook: worker W panics on its share number N ("W:N").
    #[arg(long, hide = true, value_name = "W:N")]
    pub debug_panic_worker: Option<String>,
}

/// How IP fragments are reassembled (shared by `filter` and `bridge`).
#[derive(Args, Debug, Clone)]
pub struct ReassemblyArgs {
    /// Verdict for fragments of datagrams that never complete (timed out,
    /// evicted, or still incomplete at the end of the input).
    #[arg(long, value_enum, default_value = "drop")]
    pub incomplete: VerdictArg,
    /// Reassembly timeout in seconds: of capture time for a file, of wall
    /// clock on a live link.
    #[arg(long, default_value_t = 30)]
    pub frag_timeout: u64,
    /// Most datagrams being reassembled at once (the oldest is evicted beyond).
    #[arg(long, default_value_t = 4096)]
    pub frag_max_datagrams: usize,
}

impl ReassemblyArgs {
    /// The reassembly stage these flags describe.
    pub fn stage(&self) -> Reassembly {
        let limits = Limits {
            max_datagrams: self.frag_max_datagrams.max(1),
            timeout_ns: self.frag_timeout.saturating_mul(1_000_000_000),
            ..Limits::default()
        };
        Reassembly::new(limits, self.incomplete.into())
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Pcap,
    Pcapng,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ReadArg {
    Chunks,
    Map,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum VerdictArg {
    Pass,
    Drop,
}

pub fn run(a: FilterArgs) -> Result<Outcome> {
    let rules = a.rules.load(&[])?.rules;
    let undecodable = a.undecodable.into();
    if a.workers == 0 || a.workers > 256 {
        bail!("--workers must be between 1 and 256");
    }
    let panic_at = a.debug_panic_worker.as_deref().map(parse_panic_at).transpose()?;
    let out_format = a.out_format.map(|f| match f {
        FormatArg::Pcap => OutputFormat::Pcap,
        FormatArg::Pcapng => OutputFormat::Pcapng,
    });
    check_distinct(&a.input, a.pass.as_deref(), a.drop_out.as_deref())?;
    let mode = match a.read {
        ReadArg::Chunks => ReadMode::Chunks,
        ReadArg::Map => ReadMode::Map,
    };
    let mut source = CaptureSource::open(&a.input, mode).with_context(|| a.input.display().to_string())?;
    for w in source.warnings() {
        eprintln!("sluice: warning: {}: {w}", a.input.display());
    }
    let input_format = source.format();
    let mut sinks =
        CaptureSinks::create(a.pass.as_deref(), a.drop_out.as_deref(), out_format, input_format, source.pcap_header())?;
    let rules = Arc::new(Published::new(rules));
    let judge = judge(&rules, JudgeConfig { undecodable, ..JudgeConfig::default() }, a.workers, &a.cpus, panic_at);
    let mut stage = a.reassembly.stage();
    let cfg = RunConfig {
        ordered: !a.unordered,
        max_in_flight: a.workers * 4,
        read_ahead: !a.no_read_ahead && sluice_steer::affinity::available_cpus() >= 2,
        ..RunConfig::default()
    };
    let mut bar = Bar(progress::bar(source.progress().1, true, !a.no_progress));
    let result = sluice_pipeline::run(&mut source, &mut stage, judge, &mut sinks, &mut bar, &cfg);
    bar.0.finish_and_clear();
    let done = finished(result)?;
    let rule_set = rules.load();
    let summary = Summary {
        input: &a.input,
        input_format,
        report: &done.report,
        stopped: done.stopped.as_ref(),
        rules: &rule_set.value,
    };
    let text = if a.json {
        summary.json().to_string()
    } else {
        summary_text(&done.report) + &crate::rule_source::rules_text(&rule_set.value, &done.report.stats)
    };
    // With a capture on standard output, the summary goes to stderr.
    let to_stdout = [&a.pass, &a.drop_out].into_iter().flatten().any(|p| sluice_pcap::stdio::is_stdio(p));
    if to_stdout {
        eprint!("{}", text.trim_end().to_owned() + "\n");
    } else {
        print!("{}", text.trim_end().to_owned() + "\n");
    }
    if let Some(e) = &done.stopped {
        eprintln!(
            "sluice: error: {}: stopped at {e}; the {} packets before it were judged and written",
            a.input.display(),
            e.record
        );
        return Ok(Outcome::InputDamaged);
    }
    Ok(Outcome::Complete)
}

impl From<VerdictArg> for Verdict {
    fn from(v: VerdictArg) -> Verdict {
        match v {
            VerdictArg::Pass => Verdict::Pass,
            VerdictArg::Drop => Verdict::Drop,
        }
    }
}

fn parse_panic_at(s: &str) -> Result<(usize, u64)> {
    let (w, n) = s.split_once(':').context("--debug-panic-worker takes W:N")?;
    Ok((w.parse().context("worker number")?, n.parse().context("share number")?))
}

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

/// Refuse outputs that would overwrite the input or each other before it is read.
fn check_distinct(input: &Path, pass: Option<&Path>, drop: Option<&Path>) -> Result<()> {
    use sluice_pcap::stdio::is_stdio;
    let same = |a: &Path, b: &Path| a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    if let (Some(a), Some(b)) = (pass, drop) {
        if is_stdio(a) && is_stdio(b) {
            bail!("--pass - and --drop - both name standard output; choose a file for one of them");
        }
    }
    for out in [pass, drop].into_iter().flatten() {
        // `-` in and out are two streams.
        if !is_stdio(out) && same(out, input) {
            bail!("output {} is the input file; choose another path", out.display());
        }
    }
    if let (Some(a), Some(b)) = (pass, drop) {
        if same(a, b) {
            bail!("--pass and --drop name the same file {}", a.display());
        }
    }
    Ok(())
}

/// What `--json` prints: the run report plus where the packets came from.
pub struct Summary<'a> {
    pub input: &'a Path,
    pub input_format: Format,
    pub report: &'a RunReport,
    pub stopped: Option<&'a PcapError>,
    pub rules: &'a RuleSet,
}

impl Summary<'_> {
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self.report.to_json()).expect("the report serialises");
        v["input"] = self.input.display().to_string().into();
        v["input_format"] = match self.input_format {
            Format::Pcap => "pcap",
            Format::Pcapng => "pcapng",
        }
        .into();
        crate::rule_source::rules_json(self.rules, &self.report.stats, &mut v);
        v["stopped_at"] = self
            .stopped
            .map(|e| serde_json::json!({ "record": e.record, "offset": e.offset, "error": e.kind.to_string() }))
            .into();
        v
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
