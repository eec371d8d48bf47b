use crate::progress;
use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::{Engine, Frame, RuleSet, Stats, Verdict};
use sluice_pcap::{CaptureReader, CaptureWriter, Format, OutputFormat, PcapError, Record};
use sluice_rules::{load_list, Prefix};
use std::path::{Path, PathBuf};
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
    let mut engine = Engine::new(rules, undecodable);
    let out_format = a.out_format.map(|f| match f {
        FormatArg::Pcap => OutputFormat::Pcap,
        FormatArg::Pcapng => OutputFormat::Pcapng,
    });
    let sinks = Sinks { pass: a.pass.as_deref(), drop: a.drop_out.as_deref(), format: out_format };
    let run = filter_capture(&a.input, &mut engine, &sinks, !a.no_progress)?;
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

/// Records copied out of the reader's buffer so a batch can be judged at once.
#[derive(Default)]
struct RecordBatch {
    data: Vec<u8>,
    /// (record with its data range in `data`)
    records: Vec<(OwnedRecord, std::ops::Range<usize>)>,
}

/// A record's fields without its borrowed bytes.
struct OwnedRecord {
    index: u64,
    offset: u64,
    timestamp: sluice_pcap::Timestamp,
    orig_len: u32,
    interface_id: u32,
    interface: sluice_pcap::Interface,
}

impl RecordBatch {
    fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
    }
    fn len(&self) -> usize {
        self.records.len()
    }
    fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
    fn push(&mut self, r: &Record<'_>) {
        let start = self.data.len();
        self.data.extend_from_slice(r.data);
        let owned = OwnedRecord {
            index: r.index,
            offset: r.offset,
            timestamp: r.timestamp,
            orig_len: r.orig_len,
            interface_id: r.interface_id,
            interface: r.interface,
        };
        self.records.push((owned, start..self.data.len()));
    }
    fn frames(&self) -> Vec<Frame<'_>> {
        self.records
            .iter()
            .map(|(r, range)| Frame {
                link: r.interface.link_type,
                data: &self.data[range.clone()],
                wire_len: r.orig_len,
            })
            .collect()
    }
    fn record(&self, i: usize) -> Record<'_> {
        let (r, range) = &self.records[i];
        Record {
            index: r.index,
            offset: r.offset,
            timestamp: r.timestamp,
            orig_len: r.orig_len,
            data: &self.data[range.clone()],
            interface_id: r.interface_id,
            interface: r.interface,
        }
    }
}

pub struct Sinks<'a> {
    pub pass: Option<&'a Path>,
    pub drop: Option<&'a Path>,
    pub format: Option<OutputFormat>,
}

/// Stream `input` through `engine`, writing each packet to the sink for its
/// verdict. On a damaged input, everything read before the damage is judged
/// and written, the outputs are completed, and the position is returned.
pub fn filter_capture(input: &Path, engine: &mut Engine, sinks: &Sinks<'_>, show_progress: bool) -> Result<FilterRun> {
    let started = Instant::now();
    check_distinct(input, sinks)?;
    let mut reader = CaptureReader::open(input).with_context(|| input.display().to_string())?;
    for w in reader.warnings() {
        eprintln!("sluice: warning: {}: {w}", input.display());
    }
    let template = reader.pcap_header().copied();
    let input_format = reader.format();
    let open = |path: Option<&Path>| -> Result<Option<CaptureWriter<_>>> {
        path.map(|p| {
            let format = sinks.format.unwrap_or_else(|| OutputFormat::for_path(p, input_format));
            let template = if format == OutputFormat::Pcap { template } else { None };
            CaptureWriter::create(p, format, template).with_context(|| format!("cannot create {}", p.display()))
        })
        .transpose()
    };
    let mut pass = open(sinks.pass)?;
    let mut drop = open(sinks.drop)?;
    let total = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let pb = progress::bar(total, true, show_progress);
    let mut batch = RecordBatch::default();
    let mut verdicts = vec![Verdict::Pass; RECORDS_PER_BATCH];
    let mut stopped = None;
    while stopped.is_none() {
        batch.clear();
        while batch.len() < RECORDS_PER_BATCH {
            match reader.next_record() {
                Ok(Some(rec)) => batch.push(&rec),
                Ok(None) => break,
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        let frames = batch.frames();
        engine.judge_batch(&frames, &mut verdicts[..frames.len()]);
        for (i, verdict) in verdicts[..frames.len()].iter().enumerate() {
            let (sink, path) = match verdict {
                Verdict::Pass => (&mut pass, sinks.pass),
                Verdict::Drop => (&mut drop, sinks.drop),
            };
            if let (Some(w), Some(p)) = (sink.as_mut(), path) {
                w.write(&batch.record(i)).with_context(|| format!("writing {}", p.display()))?;
            }
        }
        pb.set_position(reader.bytes_read());
        if batch.len() < RECORDS_PER_BATCH {
            break;
        }
    }
    pb.finish_and_clear();
    for (w, p) in [(pass, sinks.pass), (drop, sinks.drop)] {
        if let (Some(w), Some(p)) = (w, p) {
            w.finish().with_context(|| format!("writing {}", p.display()))?;
        }
    }
    Ok(FilterRun { stats: engine.stats().clone(), elapsed: started.elapsed(), input_format, stopped })
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
