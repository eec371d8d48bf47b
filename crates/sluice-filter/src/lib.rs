//! `sluice filter` as a product: a capture judged against rules into a
//! pass file and a drop file, in the one shape every product has
//! ([`start`] → [`Filter`], a [`Running`] whose [`Running::wait`] gives a
//! [`FilterSummary`]). The run goes on a thread of its own, so a handle
//! (SIGINT, a test) can stop it: the source then ends where it is, and
//! everything read before is judged, written and summed up.

use sluice_control::product::{Handle, Running, Summary};
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_pcap::{Format, OutputFormat, PcapError};
use sluice_pipeline::sample::{tap, Backpressure, SampleConfig, SampleReport, Sampler};
use sluice_pipeline::{judge, PacketBatch, WorkersConfig};
use sluice_pipeline::{CaptureSinks, CaptureSource, ReadMode, SinkError};
use sluice_pipeline::{Fill, Source};
use sluice_pipeline::{Observer, ReassemblyConfig, RunConfig, RunError, RunReport};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Everything a filter run is started with.
pub struct FilterConfig {
    /// The capture (pcap or pcapng; `-`: standard input).
    pub input: PathBuf,
    pub read: ReadMode,
    /// Where passed and dropped packets go, in input order unless
    /// `run.ordered` is off.
    pub pass: Option<PathBuf>,
    pub drop: Option<PathBuf>,
    /// The outputs' container (default: by extension, else the input's).
    pub out_format: Option<OutputFormat>,
    pub rules: RuleSet,
    pub workers: WorkersConfig,
    pub reassembly: ReassemblyConfig,
    pub run: RunConfig,
    /// Samples of the drops; a file waits for them (the same input gives
    /// the same samples).
    pub sample: Option<SampleConfig>,
    /// What stops the run (the product's [`Running::handle`]): made before
    /// the start, so a signal while the input opens (a pipe that has not
    /// spoken yet) already counts.
    pub stop: Handle,
}

/// Why a filter run could not start, or stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{path}: {error}")]
    Input { path: String, error: PcapError },
    #[error(transparent)]
    Output(#[from] SinkError),
    #[error("--sample-drops: {0}")]
    Sample(std::io::Error),
    /// A worker failed, or an output refused a write; the outputs hold, in
    /// order, everything judged before.
    #[error("{0}")]
    Run(String),
    #[error("the filter thread panicked")]
    Panicked,
}

/// A started filter run.
pub struct Filter {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<FilterSummary, FilterError>>,
}

/// What a filter run did.
pub struct FilterSummary {
    pub input: PathBuf,
    pub input_format: Format,
    pub report: RunReport,
    /// The input was damaged here: everything before was judged and written.
    pub stopped: Option<PcapError>,
    /// A handle stopped the run before the input's end.
    pub interrupted: bool,
    pub samples: Option<SampleReport>,
    /// The sample file failed (the run itself went on).
    pub sample_error: Option<String>,
    rules: Arc<Published<RuleSet>>,
}

/// Open the input and outputs (an error here leaves nothing running) and
/// start judging; `observer` hears of progress on the run's thread.
pub fn start(config: FilterConfig, mut observer: Box<dyn Observer + Send>) -> Result<Filter, FilterError> {
    let path = config.input.display().to_string();
    let source = CaptureSource::open(&config.input, config.read)
        .map_err(|error| FilterError::Input { path: path.clone(), error })?;
    for w in source.warnings() {
        tracing::warn!("{path}: {w}");
    }
    let input_format = source.format();
    let mut sinks = CaptureSinks::create(
        config.pass.as_deref(),
        config.drop.as_deref(),
        config.out_format,
        input_format,
        source.pcap_header(),
    )?;
    let rules = Arc::new(Published::new(config.rules));
    let name = config.input.file_name().map_or("capture".into(), |n| n.to_string_lossy().into_owned());
    let (workers, steer_inner) = (config.workers.workers, config.workers.steer_inner);
    let sampler = config
        .sample
        .map(|s| {
            let s = SampleConfig { backpressure: Backpressure::Wait, ..s };
            Sampler::start(s.for_run(vec![name], workers, steer_inner), Arc::clone(&rules))
        })
        .transpose()
        .map_err(FilterError::Sample)?;
    let stop = Arc::clone(config.stop.flag());
    let mut source = UntilStopped { inner: source, stop: Arc::clone(&stop), stopped: false };
    let input = config.input;
    let thread = std::thread::Builder::new()
        .name("sluice-filter".into())
        .spawn(move || {
            // The judge is made here: its workers answer to this thread.
            let judge = judge(&rules, config.workers);
            let mut stage = config.reassembly.stage();
            let mut sink = tap(sampler.as_ref(), &mut sinks);
            let result = sluice_pipeline::run(&mut source, &mut stage, judge, &mut sink, observer.as_mut(), &config.run);
            let (samples, sample_error) = sampler.map_or((None, None), Sampler::end);
            let done = result.map_err(|e| match e {
                RunError::Judge { error, .. } => FilterError::Run(format!(
                    "{error}; the run stopped, and the outputs were completed with every packet judged before it, in input order"
                )),
                RunError::Sink(e) => FilterError::Output(e),
            })?;
            Ok(FilterSummary {
                input,
                input_format,
                report: done.report,
                stopped: done.stopped,
                interrupted: source.stopped,
                samples,
                sample_error,
                rules,
            })
        })
        .map_err(|e| FilterError::Run(format!("starting the filter thread: {e}")))?;
    Ok(Filter { stop, thread })
}

impl Running for Filter {
    type Summary = FilterSummary;
    type Error = FilterError;

    fn handle(&self) -> Handle {
        Handle::new(Arc::clone(&self.stop))
    }

    fn finished(&self) -> bool {
        self.thread.is_finished()
    }

    fn wait(self) -> Result<FilterSummary, FilterError> {
        self.thread.join().map_err(|_| FilterError::Panicked)?
    }
}

impl From<std::io::Error> for FilterError {
    fn from(e: std::io::Error) -> Self {
        FilterError::Run(e.to_string())
    }
}

impl Summary for FilterSummary {
    fn text(&self) -> String {
        let rules = self.rules.load();
        self.report.text()
            + &sluice_engine::hits::text(&rules.value, &self.report.stats)
            + &self.samples.as_ref().map(|r| r.text()).unwrap_or_default()
    }

    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self.report.to_json()).expect("the report serialises");
        v["input"] = self.input.display().to_string().into();
        v["input_format"] = match self.input_format {
            Format::Pcap => "pcap",
            Format::Pcapng => "pcapng",
        }
        .into();
        sluice_engine::hits::json(&self.rules.load().value, &self.report.stats, &mut v);
        v["stopped_at"] = self
            .stopped
            .as_ref()
            .map(|e| serde_json::json!({ "record": e.record, "offset": e.offset, "error": e.kind.to_string() }))
            .into();
        v["interrupted"] = self.interrupted.into();
        if let Some(r) = &self.samples {
            v["samples"] = r.to_json();
        }
        v
    }
}

/// A source that ends when its flag is set: what stops a run at a
/// signal, with everything read before judged and written.
struct UntilStopped<S> {
    inner: S,
    stop: Arc<AtomicBool>,
    stopped: bool,
}

impl<S: Source> Source for UntilStopped<S> {
    type Error = S::Error;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill, S::Error> {
        if self.stop.load(Ordering::Relaxed) {
            self.stopped = true;
            return Ok(Fill::End);
        }
        self.inner.fill(batch, deadline)
    }

    fn progress(&self) -> (u64, u64) {
        self.inner.progress()
    }

    fn is_live(&self) -> bool {
        self.inner.is_live()
    }
}
