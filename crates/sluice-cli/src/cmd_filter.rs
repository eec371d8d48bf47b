use crate::args::{ReassemblyArgs, VerdictArg};
use crate::report::{finished, judge, Bar};
use crate::{progress, Outcome};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_pcap::{Format, OutputFormat, PcapError};
use sluice_pipeline::{CaptureSinks, CaptureSource, ReadMode};
use sluice_pipeline::{JudgeConfig, RunConfig, RunReport, Source};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng; `-`: standard input).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    #[command(flatten)]
    pub rules: crate::rule_source::RuleArgs,
    #[command(flatten)]
    pub sample: crate::args::SampleArgs,
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
    #[arg(long, default_value_t = 1, value_parser = crate::args::workers)]
    pub workers: usize,
    /// Software RSS over the workers hashes the outer headers, or the
    /// innermost IP header a tunnel carries (verdicts are the same).
    #[arg(long = "steer", value_name = "outer|inner", default_value = "outer", action = clap::ArgAction::Set,
        value_parser = clap::builder::TypedValueParser::map(clap::builder::PossibleValuesParser::new(["outer", "inner"]), |s| s == "inner"))]
    pub steer_inner: bool,
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

pub fn run(a: FilterArgs) -> Result<Outcome> {
    let rules = a.rules.load(&[])?.rules;
    let undecodable = a.undecodable.into();
    let panic_at = a.debug_panic_worker.as_deref().map(parse_panic_at).transpose()?;
    let out_format = a.out_format.map(|f| match f {
        FormatArg::Pcap => OutputFormat::Pcap,
        FormatArg::Pcapng => OutputFormat::Pcapng,
    });
    let outputs = [("--pass", a.pass.as_deref()), ("--drop", a.drop_out.as_deref())];
    let sample = [("--sample-drops", a.sample.sample_drops.as_deref())];
    sluice_pcap::stdio::check_distinct(&a.input, &[&outputs[..], &sample].concat())
        .map_err(|e| crate::Usage(e.to_string()))?;
    let mode = match a.read {
        ReadArg::Chunks => ReadMode::Chunks,
        ReadArg::Map => ReadMode::Map,
    };
    let mut source = CaptureSource::open(&a.input, mode).with_context(|| a.input.display().to_string())?;
    for w in source.warnings() {
        tracing::warn!("{}: {w}", a.input.display());
    }
    let input_format = source.format();
    let mut sinks =
        CaptureSinks::create(a.pass.as_deref(), a.drop_out.as_deref(), out_format, input_format, source.pcap_header())?;
    let rules = Arc::new(Published::new(rules));
    let judge = judge(
        &rules,
        JudgeConfig { undecodable, ..JudgeConfig::default() },
        a.workers,
        &a.cpus,
        panic_at,
        a.steer_inner,
    );
    let mut stage = a.reassembly.stage();
    let cfg = RunConfig {
        ordered: !a.unordered,
        max_in_flight: a.workers * 4,
        read_ahead: !a.no_read_ahead && sluice_cpus::available_cpus() >= 2,
        ..RunConfig::default()
    };
    let name = a.input.file_name().map_or("capture".into(), |n| n.to_string_lossy().into_owned());
    // A file waits for us: the run slows to the sample writer's pace rather
    // than lose samples, so the same input gives the same samples.
    let backpressure = sluice_pipeline::sample::Backpressure::Wait;
    let sampler = a.sample.start(&rules, vec![name], a.workers, a.steer_inner, backpressure)?;
    let mut bar = Bar(progress::bar(source.progress().1, true, !a.no_progress));
    let mut sink = sluice_pipeline::sample::tap(sampler.as_ref(), &mut sinks);
    let result = sluice_pipeline::run(&mut source, &mut stage, judge, &mut sink, &mut bar, &cfg);
    bar.0.finish_and_clear();
    let (samples, sample_error) = sampler.map_or((None, None), sluice_pipeline::sample::Sampler::end);
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
        let mut v = summary.json();
        if let Some(r) = &samples {
            v["samples"] = r.to_json();
        }
        v.to_string()
    } else {
        done.report.text()
            + &sluice_engine::hits::text(&rule_set.value, &done.report.stats)
            + &samples.as_ref().map(|r| r.text()).unwrap_or_default()
    };
    // With a capture on standard output, the summary goes to stderr.
    let to_stdout = [&a.pass, &a.drop_out].into_iter().flatten().any(|p| sluice_pcap::stdio::is_stdio(p));
    if to_stdout {
        eprint!("{}", text.trim_end().to_owned() + "\n");
    } else {
        print!("{}", text.trim_end().to_owned() + "\n");
    }
    if let Some(e) = sample_error {
        tracing::error!("--sample-drops: {e}");
    }
    if let Some(e) = &done.stopped {
        tracing::error!(
            "{}: stopped at {e}; the {} packets before it were judged and written",
            a.input.display(),
            e.record
        );
        return Ok(Outcome::InputDamaged);
    }
    Ok(Outcome::Complete)
}

fn parse_panic_at(s: &str) -> Result<(usize, u64)> {
    let (w, n) = s.split_once(':').context("--debug-panic-worker takes W:N")?;
    Ok((w.parse().context("worker number")?, n.parse().context("share number")?))
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
        sluice_engine::hits::json(self.rules, &self.report.stats, &mut v);
        v["stopped_at"] = self
            .stopped
            .map(|e| serde_json::json!({ "record": e.record, "offset": e.offset, "error": e.kind.to_string() }))
            .into();
        v
    }
}
