use crate::progress;
use crate::reassembly::Reassembly;
use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::defrag::{DefragStats, Limits};
use sluice_engine::pool::{Batch, Pool, PoolConfig, Steer};
use sluice_engine::snapshot::Published;
use sluice_engine::{Engine, Frame, RuleSet, Stats, Verdict};
use sluice_pcap::{CaptureReader, CaptureWriter, Format, OutputFormat, PcapError, Record};
use sluice_rules::{load_list, Prefix};
use sluice_steer::RssInput;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct FilterArgs {
    /// Input capture (pcap or pcapng).
    #[arg(long = "in", value_name = "FILE")]
    pub input: PathBuf,
    /// Drop packets whose source address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_src: Vec<PathBuf>,
    /// Drop packets whose destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_dst: Vec<PathBuf>,
    /// Drop packets whose source or destination address is in LIST (repeatable).
    #[arg(long, value_name = "LIST")]
    pub drop_any: Vec<PathBuf>,
    /// Write passed packets here, in input order.
    #[arg(long, value_name = "OUT")]
    pub pass: Option<PathBuf>,
    /// Write dropped packets here, in input order.
    #[arg(long = "drop", value_name = "OUT")]
    pub drop_out: Option<PathBuf>,
    /// Output container (default: from the output's extension, else the input's).
    #[arg(long, value_enum)]
    pub out_format: Option<FormatArg>,
    /// Skip malformed list lines with a warning instead of stopping.
    #[arg(long)]
    pub lenient: bool,
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
    /// Verdict for fragments of datagrams that never complete (timed out,
    /// evicted, or still incomplete at the end of the input).
    #[arg(long, value_enum, default_value = "drop")]
    pub incomplete: VerdictArg,
    /// Reassembly timeout in seconds of capture time.
    #[arg(long, default_value_t = 30)]
    pub frag_timeout: u64,
    /// Most datagrams being reassembled at once (the oldest is evicted beyond).
    #[arg(long, default_value_t = 4096)]
    pub frag_max_datagrams: usize,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// No progress bar even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Pcap,
    Pcapng,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum VerdictArg {
    Pass,
    Drop,
}

/// The outcome of streaming one capture through the engine.
pub struct FilterRun {
    pub stats: Stats,
    /// Packets judged by each worker (one entry without workers).
    pub per_worker: Vec<u64>,
    pub reassembly: DefragStats,
    pub elapsed: Duration,
    pub input_format: Format,
    /// Where reading stopped early, if it did.
    pub stopped: Option<PcapError>,
}

pub fn run(a: FilterArgs) -> Result<Outcome> {
    let rules = RuleSet::new(
        &load_lists(&a.drop_src, a.lenient)?,
        &load_lists(&a.drop_dst, a.lenient)?,
        &load_lists(&a.drop_any, a.lenient)?,
    );
    if rules.is_empty() {
        eprintln!("sluice: warning: no address lists given (or they are empty); every decodable packet passes");
    }
    let undecodable = match a.undecodable {
        VerdictArg::Pass => Verdict::Pass,
        VerdictArg::Drop => Verdict::Drop,
    };
    if a.workers == 0 || a.workers > 256 {
        bail!("--workers must be between 1 and 256");
    }
    let out_format = a.out_format.map(|f| match f {
        FormatArg::Pcap => OutputFormat::Pcap,
        FormatArg::Pcapng => OutputFormat::Pcapng,
    });
    let sinks = Sinks { pass: a.pass.as_deref(), drop: a.drop_out.as_deref(), format: out_format };
    let mut engine;
    let judge = if a.workers == 1 {
        engine = Engine::new(rules, undecodable);
        Judge::Inline(&mut engine)
    } else {
        let mut config = PoolConfig::new(a.workers);
        config.undecodable = undecodable;
        config.cpus = (!a.cpus.is_empty()).then(|| a.cpus.clone());
        Judge::Workers { rules: Box::new(rules), config, unordered: a.unordered }
    };
    let limits = Limits {
        max_datagrams: a.frag_max_datagrams.max(1),
        timeout_ns: a.frag_timeout.saturating_mul(1_000_000_000),
        ..Limits::default()
    };
    let incomplete = match a.incomplete {
        VerdictArg::Pass => Verdict::Pass,
        VerdictArg::Drop => Verdict::Drop,
    };
    let run = filter_capture(&a.input, judge, &sinks, Reassembly::new(limits, incomplete), !a.no_progress)?;
    report(&a.input, &run, a.json);
    Ok(if run.stopped.is_some() { Outcome::InputDamaged } else { Outcome::Complete })
}

/// Parse lists and concatenate their entries.
pub fn load_lists(paths: &[PathBuf], lenient: bool) -> Result<Vec<Prefix>> {
    let mut all = Vec::new();
    for p in paths {
        let list = load_list(p, lenient)?;
        for skipped in &list.skipped {
            eprintln!("sluice: warning: {skipped} (line skipped)");
        }
        all.extend(list.prefixes);
    }
    Ok(all)
}

/// Records judged together: enough to fill the engine's prefetch batches
/// several times over, few enough to stay in L1/L2.
const RECORDS_PER_BATCH: usize = 256;
/// Batches in flight with workers before the writer waits for the oldest.
const BATCHES_IN_FLIGHT_PER_WORKER: usize = 4;

/// A record's fields without its borrowed bytes.
pub(crate) struct OwnedRecord {
    index: u64,
    offset: u64,
    pub(crate) timestamp: sluice_pcap::Timestamp,
    pub(crate) orig_len: u32,
    interface_id: u32,
    pub(crate) interface: sluice_pcap::Interface,
}

/// Records copied out of the reader's buffer so a batch can be judged at
/// once: their bytes (shared with workers) and the rest of each record.
#[derive(Default)]
pub(crate) struct RecordBatch {
    pub(crate) batch: Batch,
    pub(crate) metas: Vec<OwnedRecord>,
    /// A verdict already decided (by reassembly): the packet is not judged.
    pub(crate) forced: Vec<Option<Verdict>>,
    /// The flow a reassembled datagram's fragment is steered by.
    pub(crate) flow: Vec<Option<RssInput>>,
}

impl RecordBatch {
    pub(crate) fn len(&self) -> usize {
        self.metas.len()
    }
    fn push(&mut self, r: &Record<'_>) {
        self.batch.push(r.interface.link_type, r.data, r.orig_len);
        self.metas.push(OwnedRecord {
            index: r.index,
            offset: r.offset,
            timestamp: r.timestamp,
            orig_len: r.orig_len,
            interface_id: r.interface_id,
            interface: r.interface,
        });
        self.forced.push(None);
        self.flow.push(None);
    }
    /// Append a packet held elsewhere (by reassembly).
    pub(crate) fn push_owned(
        &mut self,
        meta: OwnedRecord,
        data: &[u8],
        forced: Option<Verdict>,
        flow: Option<RssInput>,
    ) {
        self.batch.push(meta.interface.link_type, data, meta.orig_len);
        self.metas.push(meta);
        self.forced.push(forced);
        self.flow.push(flow);
    }
}

fn record<'a>(batch: &'a Batch, metas: &[OwnedRecord], i: usize) -> Record<'a> {
    let r = &metas[i];
    Record {
        index: r.index,
        offset: r.offset,
        timestamp: r.timestamp,
        orig_len: r.orig_len,
        data: batch.frame(i).data,
        interface_id: r.interface_id,
        interface: r.interface,
    }
}

/// Who judges: the engine on this thread, or a pool of workers.
pub enum Judge<'a> {
    Inline(&'a mut Engine),
    Workers {
        rules: Box<RuleSet>,
        config: PoolConfig,
        /// Write each share as it comes back instead of in input order.
        unordered: bool,
    },
}

/// The pass and drop captures.
struct Outputs<'a, W: std::io::Write> {
    pass: Option<(CaptureWriter<W>, &'a Path)>,
    drop: Option<(CaptureWriter<W>, &'a Path)>,
}

impl<W: std::io::Write> Outputs<'_, W> {
    fn write(&mut self, rec: &Record<'_>, verdict: Verdict) -> Result<()> {
        let sink = match verdict {
            Verdict::Pass => &mut self.pass,
            Verdict::Drop => &mut self.drop,
        };
        if let Some((w, p)) = sink {
            w.write(rec).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
    fn finish(self) -> Result<()> {
        for (w, p) in [self.pass, self.drop].into_iter().flatten() {
            w.finish().with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
}

/// A batch with workers: its records and the verdicts that have come back.
struct InFlight {
    batch: Arc<Batch>,
    metas: Vec<OwnedRecord>,
    verdicts: Vec<Verdict>,
    parts_left: usize,
}

pub struct Sinks<'a> {
    pub pass: Option<&'a Path>,
    pub drop: Option<&'a Path>,
    pub format: Option<OutputFormat>,
}

/// Stream `input` through the judge, writing each packet to the sink for its
/// verdict, in input order. On a damaged input, everything read before the
/// damage is judged and written, the outputs are completed, and the position
/// is returned.
pub fn filter_capture(
    input: &Path,
    judge: Judge<'_>,
    sinks: &Sinks<'_>,
    mut reassembly: Reassembly,
    show_progress: bool,
) -> Result<FilterRun> {
    let started = Instant::now();
    check_distinct(input, sinks)?;
    let mut reader = CaptureReader::open(input).with_context(|| input.display().to_string())?;
    for w in reader.warnings() {
        eprintln!("sluice: warning: {}: {w}", input.display());
    }
    let template = reader.pcap_header().copied();
    let input_format = reader.format();
    let open = |path| open_sink(path, sinks.format, input_format, template);
    let mut out = Outputs { pass: open(sinks.pass)?, drop: open(sinks.drop)? };
    let total = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let pb = progress::bar(total, true, show_progress);
    let mut stopped = None;
    // Read the next batch and put it through reassembly; at the end of the
    // input (or at damage), the datagrams still incomplete; then `None`.
    let mut drained = false;
    let mut next_batch = |stopped: &mut Option<PcapError>| -> Option<RecordBatch> {
        if stopped.is_some() || drained {
            if drained {
                return None;
            }
            drained = true;
            let rest = reassembly.finish();
            return (rest.len() > 0).then_some(rest);
        }
        let mut rb = RecordBatch::default();
        while rb.len() < RECORDS_PER_BATCH {
            match reader.next_record() {
                Ok(Some(rec)) => rb.push(&rec),
                Ok(None) => break,
                Err(e) => {
                    *stopped = Some(e);
                    break;
                }
            }
        }
        pb.set_position(reader.bytes_read());
        if rb.len() == 0 {
            drained = true;
            let rest = reassembly.finish();
            return (rest.len() > 0).then_some(rest);
        }
        Some(reassembly.process(rb))
    };
    let (stats, per_worker) = match judge {
        Judge::Inline(engine) => {
            let mut verdicts = Vec::new();
            let mut forced_stats = Stats::default();
            while let Some(rb) = next_batch(&mut stopped) {
                let judged: Vec<usize> = (0..rb.len()).filter(|&i| rb.forced[i].is_none()).collect();
                let frames: Vec<Frame<'_>> = judged.iter().map(|&i| rb.batch.frame(i)).collect();
                verdicts.clear();
                verdicts.resize(frames.len(), Verdict::Pass);
                engine.judge_batch(&frames, &mut verdicts);
                let mut next = judged.iter().zip(&verdicts).peekable();
                for i in 0..rb.len() {
                    let v = match rb.forced[i] {
                        Some(v) => {
                            forced_stats.count_fragment(v, rb.metas[i].orig_len);
                            v
                        }
                        None => *next.next().expect("one verdict per judged packet").1,
                    };
                    out.write(&record(&rb.batch, &rb.metas, i), v)?;
                }
            }
            let mut stats = engine.stats().clone();
            stats.merge(&forced_stats);
            (stats, vec![engine.stats().packets])
        }
        Judge::Workers { rules, config, unordered } => {
            let published = Arc::new(Published::new(*rules));
            let limit = config.workers.max(1) * BATCHES_IN_FLIGHT_PER_WORKER;
            let mut pool = Pool::new(config, &published);
            let mut forced_stats = Stats::default();
            let mut pending: BTreeMap<u64, InFlight> = BTreeMap::new();
            let mut batch_no = 0u64;
            let mut reading = true;
            loop {
                // Write every finished batch at the head, in input order. A
                // batch whose packets all had forced verdicts is finished at once.
                while pending.first_key_value().is_some_and(|(_, f)| f.parts_left == 0) {
                    let (_, f) = pending.pop_first().expect("checked above");
                    if !unordered {
                        for (i, &v) in f.verdicts.iter().enumerate() {
                            out.write(&record(&f.batch, &f.metas, i), v)?;
                        }
                    }
                }
                if reading && pending.len() < limit {
                    match next_batch(&mut stopped) {
                        Some(rb) => {
                            let batch = Arc::new(rb.batch);
                            let plan: Vec<Steer> = rb
                                .forced
                                .iter()
                                .zip(&rb.flow)
                                .map(|(forced, flow)| match (forced, flow) {
                                    (Some(_), _) => Steer::Skip,
                                    (None, Some(input)) => Steer::Flow(*input),
                                    (None, None) => Steer::Auto,
                                })
                                .collect();
                            let parts = pool.submit(batch_no, Arc::clone(&batch), &plan);
                            let mut verdicts = vec![Verdict::Pass; rb.metas.len()];
                            for (i, f) in rb.forced.iter().enumerate() {
                                if let Some(v) = f {
                                    verdicts[i] = *v;
                                    forced_stats.count_fragment(*v, rb.metas[i].orig_len);
                                    if unordered {
                                        out.write(&record(&batch, &rb.metas, i), *v)?;
                                    }
                                }
                            }
                            pending.insert(batch_no, InFlight { batch, metas: rb.metas, verdicts, parts_left: parts });
                            batch_no += 1;
                        }
                        None => reading = false,
                    }
                    continue;
                }
                if pending.is_empty() {
                    break;
                }
                if batch_no % 64 == 0 {
                    let live = pool.live();
                    let packets: u64 = live.iter().map(|(p, _)| p).sum();
                    let dropped: u64 = live.iter().map(|(_, d)| d).sum();
                    pb.set_message(format!("{packets} judged, {dropped} dropped"));
                }
                // The head batch has parts out with workers: wait for one.
                let Some(done) = pool.recv() else { bail!("a worker stopped unexpectedly") };
                let f = pending.get_mut(&done.batch_no).expect("results belong to a batch in flight");
                for (&i, &v) in done.indices.iter().zip(&done.verdicts) {
                    f.verdicts[i as usize] = v;
                    if unordered {
                        out.write(&record(&f.batch, &f.metas, i as usize), v)?;
                    }
                }
                f.parts_left -= 1;
            }
            let per = pool.finish();
            let mut merged = forced_stats;
            for s in &per {
                merged.merge(s);
            }
            (merged, per.iter().map(|s| s.packets).collect())
        }
    };
    pb.finish_and_clear();
    out.finish()?;
    let reassembly = reassembly.stats();
    Ok(FilterRun { stats, per_worker, reassembly, elapsed: started.elapsed(), input_format, stopped })
}

type FileSink<'p> = (CaptureWriter<std::io::BufWriter<std::fs::File>>, &'p Path);

/// Create an output capture: the chosen format, or by extension, or the input's.
fn open_sink<'p>(
    path: Option<&'p Path>,
    chosen: Option<OutputFormat>,
    input_format: Format,
    template: Option<sluice_pcap::PcapHeader>,
) -> Result<Option<FileSink<'p>>> {
    path.map(|p| {
        let format = chosen.unwrap_or_else(|| OutputFormat::for_path(p, input_format));
        let template = if format == OutputFormat::Pcap { template } else { None };
        let w = CaptureWriter::create(p, format, template).with_context(|| format!("cannot create {}", p.display()))?;
        Ok((w, p))
    })
    .transpose()
}

/// Refuse outputs that would overwrite the input or each other before it is read.
fn check_distinct(input: &Path, sinks: &Sinks<'_>) -> Result<()> {
    let same = |a: &Path, b: &Path| a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    for out in [sinks.pass, sinks.drop].into_iter().flatten() {
        if same(out, input) {
            bail!("output {} is the input file; choose another path", out.display());
        }
    }
    if let (Some(a), Some(b)) = (sinks.pass, sinks.drop) {
        if same(a, b) {
            bail!("--pass and --drop name the same file {}", a.display());
        }
    }
    Ok(())
}

fn mpps(packets: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        packets as f64 / s / 1e6
    } else {
        0.0
    }
}

pub fn summary_json(input: &Path, run: &FilterRun) -> serde_json::Value {
    let s = &run.stats;
    let reasons = |counts| {
        Stats::by_reason(counts)
            .map(|(k, n)| (k.to_owned(), serde_json::Value::from(n)))
            .collect::<serde_json::Map<_, _>>()
    };
    serde_json::json!({
        "input": input.display().to_string(),
        "input_format": match run.input_format { Format::Pcap => "pcap", Format::Pcapng => "pcapng" },
        "packets": s.packets,
        "bytes": s.bytes,
        "passed": s.passed,
        "passed_bytes": s.passed_bytes,
        "dropped": s.dropped,
        "dropped_bytes": s.dropped_bytes,
        "dropped_by_src": s.dropped_by_src,
        "dropped_by_dst": s.dropped_by_dst,
        "non_ip": s.non_ip,
        "undecodable": s.undecodable_total(),
        "undecodable_by_reason": reasons(&s.undecodable),
        "anomalies_by_reason": reasons(&s.anomalies),
        "elapsed_s": run.elapsed.as_secs_f64(),
        "mpps": mpps(s.packets, run.elapsed),
        "workers": run.per_worker,
        "dropped_fragments": s.dropped_fragments,
        "reassembly": {
            "fragments": run.reassembly.fragments,
            "completed": run.reassembly.completed,
            "atomic": run.reassembly.atomic,
            "duplicates": run.reassembly.duplicates,
            "overlaps": run.reassembly.overlaps,
            "malformed": run.reassembly.malformed,
            "too_many_fragments": run.reassembly.too_many_fragments,
            "evicted": run.reassembly.evicted,
            "timed_out": run.reassembly.timed_out,
            "incomplete": run.reassembly.incomplete,
            "peak_bytes": run.reassembly.peak_bytes,
        },
        "stopped_at": run.stopped.as_ref().map(|e| serde_json::json!({
            "record": e.record, "offset": e.offset, "error": e.kind.to_string(),
        })),
    })
}

pub fn print_summary(run: &FilterRun) {
    let s = &run.stats;
    let pct = |n: u64| if s.packets == 0 { 0.0 } else { 100.0 * n as f64 / s.packets as f64 };
    println!("packets      {:>12}  ({} bytes)", s.packets, s.bytes);
    println!("passed       {:>12}  ({:.2}%)", s.passed, pct(s.passed));
    println!(
        "dropped      {:>12}  ({:.2}%; by source {}, by destination {})",
        s.dropped,
        pct(s.dropped),
        s.dropped_by_src,
        s.dropped_by_dst
    );
    println!("non-IP       {:>12}", s.non_ip);
    let r = &run.reassembly;
    if r.fragments > 0 {
        println!(
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
    println!("undecodable  {:>12}", s.undecodable_total());
    for (reason, n) in Stats::by_reason(&s.undecodable) {
        println!("  {reason:<24} {n}");
    }
    for (reason, n) in Stats::by_reason(&s.anomalies) {
        println!("anomaly {reason:<20} {n} (classified by address)");
    }
    println!(
        "elapsed      {:>12.3} s  ({:.2} Mpps, read + decode + classify + write)",
        run.elapsed.as_secs_f64(),
        mpps(s.packets, run.elapsed)
    );
}

fn report(input: &Path, run: &FilterRun, json: bool) {
    if json {
        println!("{}", summary_json(input, run));
    } else {
        print_summary(run);
    }
    if let Some(e) = &run.stopped {
        eprintln!(
            "sluice: error: {}: stopped at {e}; the {} packets before it were judged and written",
            input.display(),
            e.record
        );
    }
}
