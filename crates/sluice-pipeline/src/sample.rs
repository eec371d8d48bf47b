//! A sample of what the filter dropped, written off the fast path.
//!
//! [`Sampler::wrap`] puts a [`Sampled`] sink in front of the real one. For
//! every batch it counts the drops, picks 1 in [`SampleConfig::rate`] of them
//! (the 1st, the (N+1)th, ...: a countdown, no randomness, so a test knows
//! exactly which), lets at most [`SampleConfig::max_pps`] a second through a
//! token bucket, copies those frames and hands them to a bounded queue, then
//! passes the batch on unchanged. What a full queue does is the caller's
//! choice ([`Backpressure`]): on a live port ([`Backpressure::Shed`]) it
//! loses the sample (counted in [`SampleCounters::lost_queue_full`], and
//! said once in the log), never a packet and never time on the sink's
//! thread; reading a file ([`Backpressure::Wait`]) the sink waits for room,
//! so every sample is written and a run writes the same samples every time.
//! The only work per drop is a countdown; the clock is read and bytes are
//! copied only for the 1-in-N candidates.
//!
//! The writer thread (`sluice-samples`) explains each sample. The pipeline
//! records only a packet's verdict, not the rule that decided it, so the
//! writer evaluates the frame's summary again with
//! [`RuleSet::evaluate_reference`] under the rules current when it writes the
//! sample (a reload may have replaced them since; if they now pass the frame
//! the reason says `rules_changed`). It then writes the frame to a pcapng
//! file (an Enhanced Packet Block with an `opt_comment`, one Interface
//! Description Block per port with its `if_name`), rotated by size, and/or one
//! JSON object per line to a log.
//!
//! The comment, every key always present (`-`, `""` or empty when it does
//! not apply):
//!
//! ```text
//! sluice drop reason=rule rule_line=12 rule="drop saddr @blocklist" sets=blocklist port=veth0 worker=1
//! ```
//!
//! `reason` is `rule` (a `drop` rule decided), `default` (no rule decided and
//! the default is drop), `undecodable:<kind>` (the frame could not be decoded
//! and undecodable frames are dropped; `<kind>` is [`DecodeErrorKind::as_str`]),
//! `fragment` (reassembly gave the datagram up) or `rules_changed` (the rules
//! in force now pass the frame). `rule` is the rule's text (its first 1000
//! bytes and `...` when longer) with `\` and `"` escaped by a backslash;
//! `sets` the named set the rule reads when it reads exactly one
//! ([`RuleInfo::list`]); `worker` the software-RSS worker that judged it,
//! or the lane of a per-queue bridge ([`tap_lane`]) (`-` for fragments
//! reassembly decided: no worker judged them).
//!
//! The log gets one JSON object per line per sample, the same fields and
//! the packet's headers:
//!
//! ```text
//! {"ts":"2024-05-06T07:08:09.123456789Z","port":"veth0","worker":1,"reason":"rule",
//!  "rule_line":12,"rule":"drop saddr @blocklist","sets":["blocklist"],"len":60,
//!  "src":"10.9.0.1","dst":"192.0.2.1","proto":17,"sport":1000,"dport":80}
//! ```
//!
//! `ts` is the packet's timestamp, RFC 3339 in UTC with nanoseconds.
//! `worker`, `rule_line` and `rule` are `null` when they do not apply, `sets`
//! empty. `len` is the wire length. `src`, `dst` and `proto` are the outer IP
//! header's (the one on the wire; `null` for non-IP and undecodable frames),
//! `sport`/`dport` its TCP or UDP ports (`null` when there are none). Key
//! order is not significant (serde_json's map sorts them).

use crate::{Disposition, Meta, PacketBatch, Sink, Steering};
use sluice_engine::snapshot::{Published, Reader};
use sluice_engine::{RuleInfo, RuleSet, Verdict};
use sluice_pcap::{interface_block_len, packet_block_len};
use sluice_pcap::{CaptureWriter, OutputFormat, PcapError, PcapErrorKind, TsResolution};
use sluice_wire::capture::{Interface, Timestamp};
use sluice_wire::{DecodeError, DecodeErrorKind, LinkType, PacketSummary};
use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a written sample waits in buffers before it is flushed to disk.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What to sample and where to write it.
pub struct SampleConfig {
    /// The pcapng file (`--sample-drops`); `None`: no file.
    pub pcapng: Option<PathBuf>,
    /// One JSON object per line per sample (`--log-drops`; standard error in practice).
    pub log: Option<Box<dyn Write + Send>>,
    /// Keep 1 in `rate` drops (0 is taken as 1).
    pub rate: u64,
    /// At most this many samples a second (token bucket on the wall clock,
    /// burst `max_pps`); 0: no cap.
    pub max_pps: u64,
    /// Start a new file when the current one would grow past this many bytes.
    pub rotate_bytes: Option<u64>,
    /// Files kept in all, the current one included (0 is taken as 1).
    pub keep: usize,
    /// Samples the queue between the sink and the writer thread holds (0 is taken as 1).
    pub queue: usize,
    /// What a sink does when the queue is full.
    pub backpressure: Backpressure,
    /// Ingress port names by [`Meta::port`] (`veth0`); for files the input's
    /// name or `capture`. A port beyond the list is named `port<N>`.
    pub port_names: Vec<String>,
    /// How packets were spread over workers (`None`: one worker, worker 0).
    pub steering: Option<Steering>,
}

impl SampleConfig {
    /// The run these samples come from: its ports' names, and its `workers`
    /// as the judge steers packets to them (software RSS on the outer or
    /// the innermost header), so each sample names its worker.
    pub fn for_run(self, port_names: Vec<String>, workers: usize, steer_inner: bool) -> Self {
        let key = crate::WorkersConfig::new(workers).key;
        let steering = (workers > 1).then(|| Steering::new(&key, workers).inner(steer_inner));
        SampleConfig { port_names, steering, ..self }
    }

    /// No outputs, every drop a candidate, at most 100 a second, 5 files, a
    /// queue of 1024 that sheds samples when full.
    pub fn new() -> Self {
        SampleConfig {
            pcapng: None,
            log: None,
            rate: 1,
            max_pps: 100,
            rotate_bytes: None,
            keep: 5,
            queue: 1024,
            backpressure: Backpressure::Shed,
            port_names: Vec::new(),
            steering: None,
        }
    }
}

/// What a sink does with a sample when the writer's queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backpressure {
    /// Lose it (counted in [`SampleCounters::lost_queue_full`]; the writer
    /// logs a warning the first time): a live port's sink must not wait
    /// on a disk while the ring fills.
    Shed,
    /// Wait for room: the run goes at the writer's pace when it has to, and
    /// loses nothing (offline, nobody else is waiting for the packets).
    Wait,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig::new()
    }
}

sluice_metrics::counters! {
    /// Running counts, readable while the sampler runs (relaxed: each is exact
    /// on its own; after [`Sampler::finish`] they are final and
    /// `sampled == written + lost_queue_full + write_errors` unless a flush failed).
    pub struct SampleCounters / SampleCounts {
        /// Dropped packets the sinks saw (added once per batch).
        drops_seen,
        /// 1-in-N candidates the rate cap let through and that were offered to the queue.
        sampled,
        /// Samples written to every configured output.
        written => "sluice_drop_samples" { "result" = "written" },
        /// Samples lost because the queue was full ([`Backpressure::Shed`]) or
        /// the writer had already finished.
        lost_queue_full => "sluice_drop_samples" { "result" = "queue_full" },
        /// 1-in-N candidates the rate cap refused.
        over_cap => "sluice_drop_samples" { "result" = "over_cap" },
        /// Samples an output failed to take (a stopped capture file included), and failed flushes.
        write_errors => "sluice_drop_samples" { "result" = "write_error" },
        /// Times the capture file was rotated.
        rotations => "sluice_drop_sample_rotations",
    }
    families {
        /// Dropped frames sampled (`--sample-drops`, `--log-drops`), by what became of them.
        "sluice_drop_samples",
    }
}

/// A capture file the sampler left on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleFile {
    pub path: PathBuf,
    /// Samples in it.
    pub records: u64,
}

/// What a sampler did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleReport {
    pub counts: SampleCounts,
    /// The capture files kept, newest first: the configured path, then
    /// `NAME-1.pcapng`, `NAME-2.pcapng`, ... (empty without a file).
    pub files: Vec<SampleFile>,
    /// Samples written to files that rotation deleted (beyond `keep`).
    pub discarded_records: u64,
}

impl SampleReport {
    /// The `samples` object of a `--json` summary (docs/json.md).
    pub fn to_json(&self) -> serde_json::Value {
        // The counts as declared, then what the files hold.
        let mut v = serde_json::to_value(self.counts).expect("counts serialize");
        v["discarded"] = self.discarded_records.into();
        v["files"] = self
            .files
            .iter()
            .map(|f| serde_json::json!({"path": f.path.display().to_string(), "records": f.records}))
            .collect();
        v
    }

    /// One line for a text summary.
    pub fn text(&self) -> String {
        let c = &self.counts;
        format!(
            "samples      {} written of {} drops ({} over the rate cap, {} lost to a full queue, {} write errors){}\n",
            c.written,
            c.drops_seen,
            c.over_cap,
            c.lost_queue_full,
            c.write_errors,
            self.files.first().map(|f| format!(" in {}", f.path.display())).unwrap_or_default()
        )
    }
}

/// Why [`Sampler::finish`] failed.
#[derive(Debug)]
pub enum SampleError {
    /// Writing the capture file failed; it was not written after the first
    /// error (the log went on). The report says what was done.
    File { path: PathBuf, error: io::Error, report: Box<SampleReport> },
    /// The writer thread panicked.
    WriterPanicked(String),
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SampleError::File { path, error, report } => write!(
                f,
                "writing drop samples to {}: {error} (stopped after {} samples)",
                path.display(),
                report.counts.written
            ),
            SampleError::WriterPanicked(m) => write!(f, "the drop sample writer panicked: {m}"),
        }
    }
}

// No `source()`: the message includes the cause.
impl std::error::Error for SampleError {}

/// One sampled drop on its way to the writer thread.
struct Sample {
    meta: Meta,
    decoded: Result<PacketSummary, DecodeError>,
    disposition: Disposition,
    bytes: Vec<u8>,
    /// The worker whose sink sampled it, when each worker has its own sink
    /// (a lane of a per-queue bridge); else the steering says.
    worker: Option<usize>,
    /// Why it was dropped, when whoever dropped it said so ([`DecidedDrop`]):
    /// not explained again under the rules.
    known: Option<(Reason, Option<RuleInfo>)>,
}

/// A drop judged where the sampler cannot see it (the shield's XDP
/// program), handed over with its reason: [`Sampler::offer_decided`].
#[derive(Clone, Debug)]
pub struct DecidedDrop {
    /// Its port, named by [`SampleConfig::port_names`].
    pub port: u32,
    /// When it was taken, in nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// The frame's length; `bytes` may be its first bytes only.
    pub wire_len: u32,
    pub bytes: Vec<u8>,
    pub reason: Reason,
    /// The rule that dropped it (its line and text), for [`Reason::Rule`].
    pub rule: Option<RuleInfo>,
    /// Shown as the worker (the shield: the receive queue).
    pub worker: Option<usize>,
}

enum Msg {
    // Boxed: a summary is a few hundred bytes, and the queue holds `queue` messages.
    Sample(Box<Sample>),
    /// Sent by [`Sampler::finish`]: the sinks may outlive the sampler, so
    /// the writer cannot wait for every sender to go.
    Close,
}

/// The rate cap: `per_sec` tokens a second, at most `per_sec` saved up.
#[derive(Debug)]
struct Bucket {
    per_sec: u64,
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    fn new(per_sec: u64) -> Self {
        Bucket { per_sec, tokens: per_sec as f64, last: None }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let burst = self.per_sec as f64;
        if let Some(last) = self.last {
            self.tokens = (self.tokens + now.duration_since(last).as_secs_f64() * burst).min(burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Samples drops and writes them on a thread of its own.
pub struct Sampler {
    tx: SyncSender<Msg>,
    counters: Arc<SampleCounters>,
    rate: u64,
    backpressure: Backpressure,
    /// Shared by every [`Sampled`] sink, so the cap holds for all of them together.
    bucket: Option<Arc<Mutex<Bucket>>>,
    handle: Option<JoinHandle<Outcome>>,
}

impl Sampler {
    /// Open the capture file (an error names it) and start the writer
    /// thread, which explains samples with the rules `rules` holds when it
    /// writes them.
    pub fn start(cfg: SampleConfig, rules: Arc<Published<RuleSet>>) -> io::Result<Sampler> {
        let file = match &cfg.pcapng {
            Some(path) => Some(Rotating::open(path.clone(), cfg.rotate_bytes, cfg.keep.max(1))?),
            None => None,
        };
        let counters = Arc::new(SampleCounters::default());
        let (tx, rx) = sync_channel(cfg.queue.max(1));
        let writer = Writer {
            queue: cfg.queue.max(1),
            warned_loss: false,
            rules: rules.reader(),
            steering: cfg.steering,
            port_names: cfg.port_names,
            file,
            log: cfg.log,
            counters: Arc::clone(&counters),
            dirty: false,
            last_flush: Instant::now(),
        };
        let handle = std::thread::Builder::new().name("sluice-samples".into()).spawn(move || writer.run(rx))?;
        Ok(Sampler {
            tx,
            counters,
            rate: cfg.rate.max(1),
            backpressure: cfg.backpressure,
            bucket: (cfg.max_pps > 0).then(|| Arc::new(Mutex::new(Bucket::new(cfg.max_pps)))),
            handle: Some(handle),
        })
    }

    pub fn counters(&self) -> Arc<SampleCounters> {
        Arc::clone(&self.counters)
    }

    /// A drop sampled elsewhere, already 1 in N (the shield's kernel
    /// program draws it): counted in `drops_seen`, through the rate cap,
    /// onto the queue (shed when full, whatever the backpressure: the
    /// caller is draining a ring the kernel keeps filling). True when queued.
    pub fn offer_decided(&self, d: DecidedDrop) -> bool {
        self.counters.drops_seen.fetch_add(1, Relaxed);
        if let Some(bucket) = &self.bucket {
            if !bucket.lock().unwrap_or_else(PoisonError::into_inner).take() {
                self.counters.over_cap.fetch_add(1, Relaxed);
                return false;
            }
        }
        self.counters.sampled.fetch_add(1, Relaxed);
        let decoded = sluice_wire::decode(LinkType::ETHERNET, &d.bytes);
        let meta = Meta {
            index: 0,
            offset: 0,
            timestamp: Timestamp::Units { units: d.timestamp_ns, resolution: TsResolution::NANOS },
            wire_len: d.wire_len,
            port: d.port,
            interface: Interface { link_type: LinkType::ETHERNET, snaplen: 0, ts_resolution: TsResolution::NANOS },
        };
        let sample = Sample {
            meta,
            decoded,
            disposition: Disposition::Judge,
            bytes: d.bytes,
            worker: d.worker,
            known: Some((d.reason, d.rule)),
        };
        let sent = self.tx.try_send(Msg::Sample(Box::new(sample))).is_ok();
        if !sent {
            self.counters.lost_queue_full.fetch_add(1, Relaxed);
        }
        sent
    }

    /// `inner` with drops sampled before each batch reaches it (take it
    /// back with [`Sampled::into_inner`]). Each sink counts its own 1 in N;
    /// the rate cap is shared by all.
    pub fn wrap<S: Sink>(&self, inner: S) -> Sampled<S> {
        Sampled {
            inner,
            tap: Some(Tap {
                tx: self.tx.clone(),
                counters: Arc::clone(&self.counters),
                bucket: self.bucket.clone(),
                rate: self.rate,
                backpressure: self.backpressure,
                skip: 0,
                worker: None,
            }),
        }
    }

    /// [`Sampler::wrap`] for a sink the caller keeps: `run(.., &mut
    /// sampler.wrap_mut(&mut sink), ..)`.
    pub fn wrap_mut<'a, S: Sink + ?Sized>(&self, inner: &'a mut S) -> Sampled<SinkMut<'a, S>> {
        self.wrap(SinkMut(inner))
    }

    /// Close the queue (what is in it is still written), wait for the
    /// writer, finish the file.
    pub fn finish(mut self) -> Result<SampleReport, SampleError> {
        let outcome = self.close();
        let counts = self.counters.totals();
        let outcome = match outcome {
            Some(Ok(o)) => o,
            Some(Err(panic)) => {
                let m = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                return Err(SampleError::WriterPanicked(m));
            }
            None => return Err(SampleError::WriterPanicked("already finished".into())),
        };
        let report = SampleReport { counts, files: outcome.files, discarded_records: outcome.discarded };
        match outcome.error {
            None => Ok(report),
            Some((path, error)) => Err(SampleError::File { path, error, report: Box::new(report) }),
        }
    }

    /// [`Sampler::finish`] for a command's summary: what was done (also
    /// when writing failed part way) and the error, as a message, if any.
    /// Sampling never changes how a run ends; the caller logs the error.
    pub fn end(self) -> (Option<SampleReport>, Option<String>) {
        match self.finish() {
            Ok(r) => (Some(r), None),
            Err(e) => {
                let message = e.to_string();
                let report = match e {
                    SampleError::File { report, .. } => Some(*report),
                    SampleError::WriterPanicked(_) => None,
                };
                (report, Some(message))
            }
        }
    }

    fn close(&mut self) -> Option<std::thread::Result<Outcome>> {
        let handle = self.handle.take()?;
        // Blocks while the queue is full; the writer is draining it. An
        // error means the writer is gone (panicked): join says why.
        let _ = self.tx.send(Msg::Close);
        Some(handle.join())
    }
}

impl Drop for Sampler {
    /// Not finished: still close the file properly.
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The sink side: which drops to sample, and the hand-over.
struct Tap {
    tx: SyncSender<Msg>,
    counters: Arc<SampleCounters>,
    bucket: Option<Arc<Mutex<Bucket>>>,
    rate: u64,
    backpressure: Backpressure,
    /// Drops to let by before the next candidate (0: the next drop is one).
    skip: u64,
    /// The worker that judged every packet this sink sees (a lane's).
    worker: Option<usize>,
}

impl Tap {
    fn batch(&mut self, batch: &PacketBatch) {
        let mut drops = 0u64;
        for (i, p) in batch.packets().iter().enumerate() {
            if p.verdict != Verdict::Drop {
                continue;
            }
            drops += 1;
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            self.skip = self.rate - 1;
            self.offer(batch, i);
        }
        if drops > 0 {
            self.counters.drops_seen.fetch_add(drops, Relaxed);
        }
    }

    /// A 1-in-N candidate: through the cap, copied, queued (if there is
    /// room, or once there is: [`Backpressure`]).
    fn offer(&mut self, batch: &PacketBatch, i: usize) {
        if let Some(bucket) = &self.bucket {
            if !bucket.lock().unwrap_or_else(PoisonError::into_inner).take() {
                self.counters.over_cap.fetch_add(1, Relaxed);
                return;
            }
        }
        self.counters.sampled.fetch_add(1, Relaxed);
        let p = &batch.packets()[i];
        let sample = Sample {
            meta: p.meta,
            decoded: *batch.decoded(i),
            disposition: p.disposition,
            bytes: batch.bytes(i).to_vec(),
            worker: self.worker,
            known: None,
        };
        let msg = Msg::Sample(Box::new(sample));
        // Err: full (shedding), or disconnected: the sampler finished before
        // this sink; the sample is lost all the same.
        let sent = match self.backpressure {
            Backpressure::Shed => self.tx.try_send(msg).is_ok(),
            Backpressure::Wait => self.tx.send(msg).is_ok(),
        };
        if !sent {
            self.counters.lost_queue_full.fetch_add(1, Relaxed);
        }
    }
}

/// A sink that samples each batch's drops, then hands the batch on unchanged.
pub struct Sampled<S> {
    inner: S,
    /// None: no sampler ([`tap`] without one), the batches pass untouched.
    tap: Option<Tap>,
}

/// `sink` for a run, sampled by `sampler` when there is one (the CLI's
/// `--sample-drops`, `--log-drops`), else passed through untouched: one
/// type either way, so a command calls the pipeline once.
pub fn tap<'a, S: Sink + ?Sized>(sampler: Option<&Sampler>, sink: &'a mut S) -> Sampled<SinkMut<'a, S>> {
    match sampler {
        Some(s) => s.wrap_mut(sink),
        None => Sampled { inner: SinkMut(sink), tap: None },
    }
}

/// [`tap`] for the sink of lane `lane` of a per-queue bridge, which the
/// run owns: its samples name the lane as the worker that judged them.
pub fn tap_lane<S: Sink>(sampler: Option<&Sampler>, sink: S, lane: usize) -> Sampled<S> {
    match sampler {
        Some(s) => {
            let mut sampled = s.wrap(sink);
            if let Some(t) = &mut sampled.tap {
                t.worker = Some(lane);
            }
            sampled
        }
        None => Sampled { inner: sink, tap: None },
    }
}

impl<S> Sampled<S> {
    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Sink> Sink for Sampled<S> {
    type Error = S::Error;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), S::Error> {
        // Before the inner sink: a live port's sink hands frames back to the
        // ring, after which their bytes are not ours to read.
        if let Some(tap) = &mut self.tap {
            tap.batch(batch);
        }
        self.inner.write(batch)
    }

    fn finish(&mut self) -> Result<(), S::Error> {
        self.inner.finish()
    }

    fn quiescent(&mut self) {
        self.inner.quiescent();
    }
}

/// A sink borrowed for a run ([`Sampler::wrap_mut`]): the caller keeps the
/// sink and looks at it afterwards. (`Sink for &mut S` cannot be written
/// here: the trait and `&mut` are both foreign to this crate.)
pub struct SinkMut<'a, S: ?Sized>(pub &'a mut S);

impl<S: Sink + ?Sized> Sink for SinkMut<'_, S> {
    type Error = S::Error;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), S::Error> {
        self.0.write(batch)
    }

    fn finish(&mut self) -> Result<(), S::Error> {
        self.0.finish()
    }

    fn quiescent(&mut self) {
        self.0.quiescent();
    }
}

/// Why a sampled packet was dropped, as the writer thread sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A `drop` rule decided (its index in [`RuleSet::rules`]).
    Rule(usize),
    /// No rule decided; the default is drop.
    Default,
    /// The frame could not be decoded (and undecodable frames are dropped).
    Undecodable(DecodeErrorKind),
    /// Reassembly gave the datagram up.
    Fragment,
    /// The rules in force now pass the frame: they were replaced after it was judged.
    RulesChanged,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Rule(_) => f.write_str("rule"),
            Reason::Default => f.write_str("default"),
            Reason::Undecodable(k) => write!(f, "undecodable:{}", k.as_str()),
            Reason::Fragment => f.write_str("fragment"),
            Reason::RulesChanged => f.write_str("rules_changed"),
        }
    }
}

/// Why `rules` drops a packet the pipeline dropped, mirroring the engine's
/// own reasons (`judge_decoded`): a decided disposition is reassembly's, a
/// decode error the undecodable verdict's, else the first `pass`/`drop`
/// rule or the default.
pub fn explain(
    rules: &RuleSet,
    decoded: &Result<PacketSummary, DecodeError>,
    disposition: Disposition,
    wire_len: u32,
    port: u32,
) -> Reason {
    if let Disposition::Decided(_) = disposition {
        return Reason::Fragment;
    }
    match decoded {
        Err(e) => Reason::Undecodable(e.kind()),
        Ok(p) => {
            let d = rules.evaluate_reference(p, wire_len, port, |_| {});
            match (d.verdict, d.rule) {
                (Verdict::Pass, _) => Reason::RulesChanged,
                (Verdict::Drop, None) => Reason::Default,
                (Verdict::Drop, Some(r)) => Reason::Rule(usize::from(r)),
            }
        }
    }
}

/// A sample explained: what the comment and the JSON line say.
struct Described<'a> {
    reason: Reason,
    rule: Option<&'a RuleInfo>,
    port: &'a str,
    worker: Option<usize>,
}

impl Described<'_> {
    fn sets(&self) -> &str {
        self.rule.map_or("", |r| r.list.as_str())
    }

    /// The pcapng comment (see the module's documentation).
    fn comment(&self) -> String {
        let line = self.rule.map_or_else(|| "-".to_owned(), |r| r.line.to_string());
        let text = shorten(self.rule.map_or("", |r| r.text.as_str()));
        let worker = self.worker.map_or_else(|| "-".to_owned(), |w| w.to_string());
        format!(
            "sluice drop reason={} rule_line={line} rule=\"{}\" sets={} port={} worker={worker}",
            self.reason,
            escape(&text),
            self.sets(),
            self.port
        )
    }
}

/// Longest rule text a sample quotes: a rule with a long inline set can
/// be a very long line, and a pcapng comment is at most 64 KiB.
const MAX_RULE_TEXT: usize = 1000;

/// `text`, cut to [`MAX_RULE_TEXT`] bytes (at a character boundary) and
/// marked `...` when longer.
fn shorten(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_RULE_TEXT {
        return text.into();
    }
    let mut end = MAX_RULE_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end]).into()
}

/// `\` and `"` behind a backslash, line breaks as `\n`/`\r`, so the quoted
/// rule text cannot end early.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// One sample as a JSON object, no line break (the format is in the module
/// documentation).
fn json_line(d: &Described<'_>, meta: &Meta, decoded: &Result<PacketSummary, DecodeError>) -> String {
    let ip = decoded.as_ref().ok().and_then(|p| p.ip);
    let ports = ip.and_then(|ip| ip.ports);
    let sets: Vec<&str> = if d.sets().is_empty() { Vec::new() } else { vec![d.sets()] };
    serde_json::json!({
        "ts": rfc3339_nanos(meta.timestamp.as_nanos()),
        "port": d.port,
        "worker": d.worker,
        "reason": d.reason.to_string(),
        "rule_line": d.rule.map(|r| r.line),
        "rule": d.rule.map(|r| shorten(&r.text)),
        "sets": sets,
        "len": meta.wire_len,
        "src": ip.map(|ip| ip.src.to_string()),
        "dst": ip.map(|ip| ip.dst.to_string()),
        "proto": ip.map(|ip| ip.protocol),
        "sport": ports.map(|p| p.0),
        "dport": ports.map(|p| p.1),
    })
    .to_string()
}

/// Nanoseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
pub fn rfc3339_nanos(ns: u128) -> String {
    let secs = ns / 1_000_000_000;
    let nanos = ns % 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day)
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `dir/NAME.ext` → `dir/NAME-i.ext` (`NAME-i` without an extension).
pub fn rotated_path(path: &Path, i: usize) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{i}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{i}"),
    };
    path.with_file_name(name)
}

fn io_error(e: PcapError) -> io::Error {
    match e.kind {
        PcapErrorKind::Io(e) => e,
        kind => io::Error::other(kind.to_string()),
    }
}

/// The capture file, rotated by size.
struct Rotating {
    path: PathBuf,
    rotate_bytes: Option<u64>,
    keep: usize,
    /// `None` once an error stopped the file.
    out: Option<CaptureWriter<BufWriter<File>>>,
    /// LivePorts declared in the current file: (port, link type, id).
    ifaces: Vec<(u32, LinkType, u32)>,
    /// Samples in the kept rotated files, `NAME-1` first.
    rotated: VecDeque<u64>,
    /// Samples in the current file.
    records: u64,
    discarded: u64,
    error: Option<io::Error>,
}

impl Rotating {
    fn open(path: PathBuf, rotate_bytes: Option<u64>, keep: usize) -> io::Result<Self> {
        let out = Self::create(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Rotating {
            path,
            rotate_bytes,
            keep,
            out: Some(out),
            ifaces: Vec::new(),
            rotated: VecDeque::new(),
            records: 0,
            discarded: 0,
            error: None,
        })
    }

    /// A new file with its section header.
    fn create(path: &Path) -> io::Result<CaptureWriter<BufWriter<File>>> {
        let file = File::create(path)?;
        let mut out = CaptureWriter::new(BufWriter::with_capacity(64 * 1024, file), OutputFormat::Pcapng, None)
            .map_err(io_error)?;
        // A valid (empty) capture from the start, and a full disk found now.
        out.flush().map_err(io_error)?;
        Ok(out)
    }

    /// Write one sample; false when the file is stopped (by this error or an earlier one).
    fn write(&mut self, s: &Sample, port: &str, comment: &str, counters: &SampleCounters) -> bool {
        if self.out.is_none() {
            return false;
        }
        match self.try_write(s, port, comment, counters) {
            Ok(()) => true,
            Err(e) => {
                self.stop(e);
                false
            }
        }
    }

    fn try_write(&mut self, s: &Sample, port: &str, comment: &str, counters: &SampleCounters) -> io::Result<()> {
        let link = s.meta.interface.link_type;
        let known = |ifaces: &[(u32, LinkType, u32)]| {
            ifaces.iter().find(|&&(p, l, _)| p == s.meta.port && l == link).map(|&(_, _, id)| id)
        };
        if let (Some(limit), Some(out)) = (self.rotate_bytes, &self.out) {
            let mut need = packet_block_len(s.bytes.len(), Some(comment));
            if known(&self.ifaces).is_none() {
                need += interface_block_len(TsResolution::NANOS, Some(port));
            }
            // A file holds at least one sample, however small the limit.
            if self.records > 0 && out.bytes_written() + need > limit {
                self.rotate(counters)?;
            }
        }
        let out = self.out.as_mut().ok_or_else(|| io::Error::other("the capture file is closed"))?;
        let id = match known(&self.ifaces) {
            Some(id) => id,
            None => {
                // Snap length 0: no limit (samples are frames as received).
                let id = out.add_interface(link, 0, TsResolution::NANOS, Some(port)).map_err(io_error)?;
                self.ifaces.push((s.meta.port, link, id));
                id
            }
        };
        let units = s.meta.time_ns();
        out.write_packet(id, units, s.meta.wire_len, &s.bytes, Some(comment)).map_err(io_error)?;
        self.records += 1;
        Ok(())
    }

    /// Finish the current file, shift `NAME-i` to `NAME-(i+1)` (the oldest
    /// beyond `keep` deleted), the current to `NAME-1`, and start anew.
    fn rotate(&mut self, counters: &SampleCounters) -> io::Result<()> {
        if let Some(out) = self.out.take() {
            out.finish().map_err(io_error)?;
        }
        let kept = self.keep - 1;
        let ctx = |what: String| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        if kept == 0 {
            // Nothing rotated is kept: the new file replaces the old one.
            self.discarded += self.records;
        } else {
            // Someone may have removed an old sample file: no reason to stop.
            let gone = |r: io::Result<()>| match r {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                r => r,
            };
            if self.rotated.len() == kept {
                // The oldest we wrote goes (a file an earlier run left
                // beyond `keep` is not ours to delete).
                let oldest = rotated_path(&self.path, kept);
                gone(std::fs::remove_file(&oldest)).map_err(ctx(format!("removing {}", oldest.display())))?;
                self.discarded += self.rotated.pop_back().unwrap_or(0);
            }
            for i in (1..self.rotated.len() + 1).rev() {
                let (from, to) = (rotated_path(&self.path, i), rotated_path(&self.path, i + 1));
                gone(std::fs::rename(&from, &to)).map_err(ctx(format!(
                    "renaming {} to {}",
                    from.display(),
                    to.display()
                )))?;
            }
            let first = rotated_path(&self.path, 1);
            std::fs::rename(&self.path, &first).map_err(ctx(format!(
                "renaming {} to {}",
                self.path.display(),
                first.display()
            )))?;
            self.rotated.push_front(self.records);
        }
        self.records = 0;
        self.ifaces.clear();
        self.out = Some(Self::create(&self.path)?);
        counters.rotations.fetch_add(1, Relaxed);
        Ok(())
    }

    fn flush(&mut self) -> bool {
        let Some(out) = &mut self.out else { return true };
        match out.flush() {
            Ok(()) => true,
            Err(e) => {
                self.stop(io_error(e));
                false
            }
        }
    }

    /// The first error stops the file: a block half written leaves nothing
    /// a reader could use after it.
    fn stop(&mut self, e: io::Error) {
        self.out = None;
        self.error.get_or_insert(e);
    }

    fn finish(mut self) -> (Vec<SampleFile>, u64, Option<(PathBuf, io::Error)>) {
        if let Some(out) = self.out.take() {
            if let Err(e) = out.finish() {
                self.stop(io_error(e));
            }
        }
        let mut files = vec![SampleFile { path: self.path.clone(), records: self.records }];
        files.extend(
            self.rotated
                .iter()
                .enumerate()
                .map(|(i, &records)| SampleFile { path: rotated_path(&self.path, i + 1), records }),
        );
        (files, self.discarded, self.error.map(|e| (self.path, e)))
    }
}

/// What the writer thread hands back.
struct Outcome {
    files: Vec<SampleFile>,
    discarded: u64,
    error: Option<(PathBuf, io::Error)>,
}

/// The writer thread's state.
struct Writer {
    rules: Reader<RuleSet>,
    steering: Option<Steering>,
    port_names: Vec<String>,
    file: Option<Rotating>,
    log: Option<Box<dyn Write + Send>>,
    counters: Arc<SampleCounters>,
    /// The queue's size, for the warning.
    queue: usize,
    /// Whether the first lost sample was logged.
    warned_loss: bool,
    /// Written since the last flush.
    dirty: bool,
    last_flush: Instant,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) -> Outcome {
        loop {
            // Quiet for FLUSH_EVERY after a write: flush, so samples reach
            // the disk soon after they are taken.
            let msg = if self.dirty {
                match rx.recv_timeout(FLUSH_EVERY.saturating_sub(self.last_flush.elapsed())) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => {
                        self.flush();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => None,
                }
            } else {
                rx.recv().ok()
            };
            match msg {
                Some(Msg::Sample(s)) => {
                    self.write(&s);
                    self.warn_of_loss();
                    // Busy: still flush once a second.
                    if self.last_flush.elapsed() >= FLUSH_EVERY {
                        self.flush();
                    }
                }
                Some(Msg::Close) | None => break,
            }
        }
        self.warn_of_loss();
        if let Some(log) = &mut self.log {
            if log.flush().is_err() {
                self.counters.write_errors.fetch_add(1, Relaxed);
            }
        }
        match self.file.take() {
            Some(f) => {
                let (files, discarded, error) = f.finish();
                Outcome { files, discarded, error }
            }
            None => Outcome { files: Vec::new(), discarded: 0, error: None },
        }
    }

    fn write(&mut self, s: &Sample) {
        let Writer { rules, steering, port_names, file, log, counters, .. } = self;
        let rules = &rules.refresh().value;
        let port = s.meta.port;
        let fallback;
        let port_name = match port_names.get(port as usize) {
            Some(n) => n.as_str(),
            None => {
                fallback = format!("port{port}");
                fallback.as_str()
            }
        };
        // The worker that judged it, as `Workers::submit` steers; fragments
        // reassembly decided never reached one.
        let worker = match (s.disposition, steering) {
            (Disposition::Decided(_), _) => None,
            (_, _) if s.worker.is_some() => s.worker,
            (_, None) => Some(0),
            (Disposition::JudgeAsFlow(ports), Some(st)) => Some(st.worker_for_flow(&s.decoded, ports)),
            (Disposition::Judge, Some(st)) => Some(st.worker_for(&s.decoded)),
        };
        let (reason, rule) = match &s.known {
            Some((reason, rule)) => (*reason, rule.as_ref()),
            None => {
                let reason = explain(rules, &s.decoded, s.disposition, s.meta.wire_len, port);
                let rule = match reason {
                    Reason::Rule(r) => rules.rules().get(r),
                    _ => None,
                };
                (reason, rule)
            }
        };
        let d = Described { reason, rule, port: port_name, worker };
        let mut ok = true;
        if let Some(f) = file {
            ok &= f.write(s, port_name, &d.comment(), counters);
        }
        if let Some(log) = log {
            let mut line = json_line(&d, &s.meta, &s.decoded);
            line.push('\n');
            // One write per line: lines from several writers do not interleave.
            ok &= log.write_all(line.as_bytes()).is_ok();
        }
        if ok {
            counters.written.fetch_add(1, Relaxed);
        } else {
            counters.write_errors.fetch_add(1, Relaxed);
        }
        self.dirty = true;
    }

    /// The first lost sample, said once: a summary comes only at the end,
    /// and a bridge may run for months. Here, not on the sink's thread,
    /// which must not wait on a log; a full queue means this thread is busy
    /// and comes by again soon.
    fn warn_of_loss(&mut self) {
        if self.warned_loss {
            return;
        }
        let lost = self.counters.lost_queue_full.load(Relaxed);
        if lost > 0 {
            self.warned_loss = true;
            tracing::warn!(
                "drop samples are being lost: the sample writer cannot keep up with a queue of {} \
                 (counted in lost_queue_full; frames are not affected; said once)",
                self.queue
            );
        }
    }

    fn flush(&mut self) {
        let mut ok = true;
        if let Some(f) = &mut self.file {
            ok &= f.flush();
        }
        if let Some(log) = &mut self.log {
            ok &= log.flush().is_ok();
        }
        if !ok {
            self.counters.write_errors.fetch_add(1, Relaxed);
        }
        self.dirty = false;
        self.last_flush = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339_nanos(1_700_000_000_123_456_789), "2023-11-14T22:13:20.123456789Z");
        // A leap day, and the last second of a leap year.
        assert_eq!(rfc3339_nanos(951_782_400 * 1_000_000_000), "2000-02-29T00:00:00.000000000Z");
        assert_eq!(rfc3339_nanos(1_483_228_799 * 1_000_000_000 + 5), "2016-12-31T23:59:59.000000005Z");
    }

    #[test]
    fn rotated_names() {
        assert_eq!(rotated_path(Path::new("/d/drops.pcapng"), 1), Path::new("/d/drops-1.pcapng"));
        assert_eq!(rotated_path(Path::new("a.b.pcapng"), 12), Path::new("a.b-12.pcapng"));
        assert_eq!(rotated_path(Path::new("/d/drops"), 2), Path::new("/d/drops-2"));
    }

    #[test]
    fn comment_quotes_the_rule_text() {
        let rule = RuleInfo {
            line: 3,
            text: r#"drop saddr @x # "odd" \ text"#.into(),
            action: sluice_rules::Action::Drop,
            side: None,
            list: "x".into(),
        };
        let d = Described { reason: Reason::Rule(0), rule: Some(&rule), port: "veth0", worker: Some(1) };
        assert_eq!(
            d.comment(),
            r#"sluice drop reason=rule rule_line=3 rule="drop saddr @x # \"odd\" \\ text" sets=x port=veth0 worker=1"#
        );
        let d = Described { reason: Reason::Fragment, rule: None, port: "capture", worker: None };
        assert_eq!(d.comment(), r#"sluice drop reason=fragment rule_line=- rule="" sets= port=capture worker=-"#);
    }

    #[test]
    fn long_rule_texts_are_cut() {
        assert_eq!(shorten("drop saddr @x"), "drop saddr @x");
        let long = "é".repeat(MAX_RULE_TEXT);
        let cut = shorten(&long);
        assert!(cut.len() <= MAX_RULE_TEXT + 3 && cut.ends_with("é..."), "{}", cut.len());
    }

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let mut b = Bucket::new(10);
        let first = (0..100).filter(|_| b.take()).count();
        assert!((10..=11).contains(&first), "{first}");
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(300));
        let more = (0..100).filter(|_| b.take()).count();
        let refilled = t.elapsed().as_secs_f64() * 10.0;
        assert!(more >= 2 && more as f64 <= refilled + 1.0, "{more} after {refilled} tokens' time");
    }
}
