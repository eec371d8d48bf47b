//! `sluice filter`: flags onto a `sluice_filter::FilterConfig`;
//! the run, its stop at SIGINT and its summary are the library's.

use crate::report::Bar;
use crate::{progress, Outcome};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_filter::FilterConfig;
use sluice_pcap::OutputFormat;
use sluice_pipeline::flags::{ReassemblyFlags, VerdictFlag};
use sluice_pipeline::{JudgeConfig, ReadMode, RunConfig, WorkersConfig};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng; `-`: standard input).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    #[command(flatten)]
    pub rules: sluice_policy::RuleSpec,
    #[command(flatten)]
    pub sample: sluice_pipeline::flags::SampleFlags,
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
    pub undecodable: VerdictFlag,
    /// Worker threads: packets are steered to them by RSS (Toeplitz on the
    /// 4-tuple, or the IP pair for fragments); output keeps input order.
    #[arg(long, default_value_t = 1, value_parser = sluice_pipeline::flags::workers)]
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
    pub reassembly: ReassemblyFlags,
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
    let outputs = [("--pass", a.pass.as_deref()), ("--drop", a.drop_out.as_deref())];
    let sample = [("--sample-drops", a.sample.sample_drops.as_deref())];
    sluice_pcap::stdio::check_distinct(&a.input, &[&outputs[..], &sample].concat())
        .map_err(|e| sluice_control::product::Usage(e.to_string()))?;
    // SIGINT or SIGTERM ends the input where it is: what was read is judged,
    // written and summed up. A second one ends the process (a pipe that
    // says nothing holds the reader). Both from before the input opens.
    let stop = sluice_control::product::Handle::default();
    sluice_control::signals::exit_on_second_interrupt(stop.flag())?;
    sluice_control::signals::stop_on_interrupt(stop.flag())?;
    let panic_at = a.debug_panic_worker.as_deref().map(parse_panic_at).transpose()?;
    let judge = JudgeConfig { undecodable: a.undecodable.into(), ..JudgeConfig::default() };
    let cpus = (!a.cpus.is_empty()).then(|| a.cpus.clone());
    let config = FilterConfig {
        input: a.input.clone(),
        read: match a.read {
            ReadArg::Chunks => ReadMode::Chunks,
            ReadArg::Map => ReadMode::Map,
        },
        pass: a.pass.clone(),
        drop: a.drop_out.clone(),
        out_format: a.out_format.map(|f| match f {
            FormatArg::Pcap => OutputFormat::Pcap,
            FormatArg::Pcapng => OutputFormat::Pcapng,
        }),
        rules: a.rules.load(&[])?.logged().rules,
        workers: WorkersConfig { judge, cpus, panic_at, steer_inner: a.steer_inner, ..WorkersConfig::new(a.workers) },
        reassembly: a.reassembly.config(),
        run: RunConfig {
            ordered: !a.unordered,
            max_in_flight: a.workers * 4,
            read_ahead: !a.no_read_ahead && sluice_cpus::available_cpus() >= 2,
            ..RunConfig::default()
        },
        sample: a.sample.config(sluice_pipeline::sample::Backpressure::Wait),
        stop: stop.clone(),
    };
    let bar = Bar(progress::bar(0, true, !a.no_progress));
    let filter = sluice_filter::start(config, Box::new(bar.clone()))?;
    let (summary, _) = sluice_control::product::run_to_end(filter, None, false)?;
    bar.0.finish_and_clear();
    let text = sluice_control::product::print(&summary, a.json);
    // With a capture on standard output, the summary goes to stderr.
    if [&a.pass, &a.drop_out].into_iter().flatten().any(|p| sluice_pcap::stdio::is_stdio(p)) {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    if let Some(e) = &summary.sample_error {
        tracing::error!("--sample-drops: {e}");
    }
    if summary.interrupted {
        tracing::warn!("{}: interrupted; the packets read before were judged and written", a.input.display());
    }
    if let Some(e) = &summary.stopped {
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
