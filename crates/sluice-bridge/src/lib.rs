//! `sluice bridge` as a library: forward between two ports, dropping what
//! the rules say, while the rules and sets change under traffic.
//!
//! [`BridgeConfig`] -> [`Bridge::start`] (over any [`PortPair`]: the live
//! interfaces of `sluice-live`, or two channels in tests, [`MemoryPair`]) -> a running [`Bridge`]
//! (its [`BridgeMetrics`], reloads, the control socket, stop) ->
//! [`Bridge::wait`] -> a [`BridgeSummary`].
//!
//! What runs, in the order it starts (and stops in reverse):
//! - the drop sampler's writer (`--sample-drops`, `--log-drops`);
//! - the signal thread (SIGINT/SIGTERM stop, SIGHUP reloads), when asked;
//! - the ports, opened once;
//! - the metrics responder (`--metrics`), the control socket (`--control`),
//!   the CrowdSec bouncer (`--crowdsec-url`);
//! - the control thread: reloads, expiry, runtime sets, the status line
//!   and the `--duration` stop on its tick;
//! - the pipeline: one thread reading both ports with the judge's workers,
//!   or one lane per AF_XDP queue, each receiving, judging and sending.
//!
//! The forwarding loop (`Pipeline::run`) is generic over the pair's
//! source and sink; it counts the verdicts around each lane's sink
//! (`counters::Counting`), the ports count their frames into the same
//! [`BridgeCounters`].
#![deny(unsafe_code)]

/// The BGP feed, shared with the shield (`sluice-bgpfeed`); kept under
/// this name so `sluice_bridge::bgp::*` paths stay as they were.
pub use sluice_bgpfeed as bgp;
pub mod counters;
pub mod memory;
pub mod metrics;
pub mod summary;

pub use counters::{BridgeCounters, LaneCounters, PortCounters};
pub use memory::{MemoryPair, Wire};
pub use metrics::{BridgeMetrics, LiveObserver};
pub use sluice_live::open::{LivePorts, PortPair};

use anyhow::{Context, Result};
use counters::Counting;
use sluice_control::safety::Safety;
use sluice_engine::snapshot::Published;
use sluice_engine::RuleSet;
use sluice_live::open::Opened;
use sluice_live::pipeline::PortCount;
use sluice_live::LiveError;
use sluice_pipeline::lanes::{self, inline_lanes};
use sluice_pipeline::sample::{tap, tap_lane, SampleConfig, SampleReport, Sampler};
use sluice_pipeline::{Finished, JudgeConfig, ReassemblyConfig, RunConfig, RunError, Sink, Source, WorkersConfig};
use sluice_policy::crowdsec::BouncerConfig;
use sluice_policy::{describe, spawn_signals, total_entries, Event, ListEntries, RuleSpec, SignalThread};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Everything a bridge is started with (the CLI maps its flags onto this).
pub struct BridgeConfig {
    /// Where the rules come from.
    pub rules: RuleSpec,
    /// Reload when a rule or list file changes.
    pub watch: bool,
    /// What no runtime add may cover, and how wide one may be.
    pub safety: Arc<Safety>,
    /// Pull CrowdSec decisions into a dynamic set (its `gate` is replaced by
    /// the bridge's own).
    pub crowdsec: Option<BouncerConfig>,
    /// The CrowdSec set's maxelem when its definition gives none.
    pub crowdsec_maxelem: Option<u32>,
    /// BGP sessions whose FlowSpec and blackhole routes become flows.
    pub bgp: Option<bgp::BgpConfig>,
    /// Sample dropped frames (the port names and steering are filled in).
    pub sample: Option<SampleConfig>,
    /// Workers judging; `None`: the ports were opened a lane per queue.
    pub workers: Option<usize>,
    /// Software RSS hashes the innermost IP header.
    pub steer_inner: bool,
    /// CPUs to pin workers or lanes to (empty: worker i on CPU i).
    pub cpus: Vec<usize>,
    /// The judge's settings (undecodable frames' verdict).
    pub judge: JudgeConfig,
    pub reassembly: ReassemblyConfig,
    /// Serve Prometheus metrics here (port 0 picks one).
    pub metrics: Option<SocketAddr>,
    /// Serve the control socket here.
    pub control: Option<PathBuf>,
    /// Let this group use the control socket too (every command).
    pub control_group: Option<String>,
    /// Let this group add, test and list (what a guard forwarding its
    /// blocks needs), nothing else.
    pub control_add_group: Option<String>,
    /// A status line on stderr every 2 s.
    pub status: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Judge and count everything, enforce nothing.
    pub dry_run: bool,
    /// Stop on SIGINT/SIGTERM, reload on SIGHUP (a command; not a test).
    pub signals: bool,
}

impl BridgeConfig {
    /// A bridge with `rules` and every other setting at its default.
    pub fn new(rules: RuleSpec) -> BridgeConfig {
        BridgeConfig {
            rules,
            watch: false,
            safety: Arc::default(),
            crowdsec: None,
            crowdsec_maxelem: None,
            bgp: None,
            sample: None,
            workers: Some(1),
            steer_inner: false,
            cpus: Vec::new(),
            judge: JudgeConfig::default(),
            reassembly: ReassemblyConfig::default(),
            metrics: None,
            control: None,
            control_group: None,
            control_add_group: None,
            status: false,
            duration: None,
            dry_run: false,
            signals: false,
        }
    }
}

/// What the pipeline thread hands back: the run, and the sampler it fed.
type PipelineEnd = (Result<Finished<LiveError>, RunError<LiveError>>, Option<Sampler>);

/// A running bridge. Dropping it without [`Bridge::wait`] leaves the
/// threads running; stop it first.
pub struct Bridge {
    metrics: Arc<BridgeMetrics>,
    published: Arc<Published<RuleSet>>,
    stop: Arc<AtomicBool>,
    events: Sender<Event>,
    metrics_addr: Option<SocketAddr>,
    io: String,
    pipeline: JoinHandle<PipelineEnd>,
    control: JoinHandle<()>,
    control_socket: Option<sluice_control::socket::Serving>,
    bouncer: Option<JoinHandle<()>>,
    bgp: Option<bgp::Bgp>,
    signals: Option<SignalThread>,
}

/// How a bridge ended.
#[derive(Debug)]
pub struct BridgeSummary {
    /// The summary object `--json` prints.
    pub json: serde_json::Value,
    /// The text summary.
    pub text: String,
    /// The ports failed: the run stopped on this (everything before it was
    /// forwarded and counted).
    pub stopped: Option<LiveError>,
    /// The drop samples could not all be written.
    pub sample_error: Option<String>,
}

impl sluice_control::product::Summary for BridgeSummary {
    fn text(&self) -> String {
        self.text.clone()
    }
    fn json(&self) -> serde_json::Value {
        self.json.clone()
    }
}

/// The bridge in the shape every product has; its own [`Bridge::wait`]
/// and [`Bridge::stop`] are these.
/// What `ctl status` and `ctl bgp` answer of a bridge: its ports, and
/// its BGP sessions when it has a feed.
fn with_status(
    controller: sluice_policy::Controller,
    ports: Vec<String>,
    bgp: Option<Arc<bgp::BgpState>>,
) -> sluice_policy::Controller {
    let has_bgp = bgp.is_some();
    let controller = controller
        .with_status(Arc::new(move || serde_json::json!({ "product": "bridge", "ports": ports, "bgp": has_bgp })));
    match bgp {
        Some(st) => controller.with_bgp_status(Arc::new(move || st.json())),
        None => controller,
    }
}

impl sluice_control::product::Running for Bridge {
    type Summary = BridgeSummary;
    type Error = anyhow::Error;
    fn handle(&self) -> sluice_control::product::Handle {
        sluice_control::product::Handle::new(Arc::clone(&self.stop))
    }
    fn finished(&self) -> bool {
        self.pipeline.is_finished()
    }
    fn wait(self) -> Result<BridgeSummary> {
        Bridge::wait(self)
    }
}

impl Bridge {
    /// Loads the rules, opens `ports` and starts every thread. Nothing is
    /// left running when it fails.
    pub fn start<P: PortPair>(cfg: BridgeConfig, ports: P) -> Result<Bridge> {
        let names = ports.names();
        let port_names = names.to_vec();
        let sluice_policy::Loading { controller, entries, build_ms, crowdsec } = sluice_policy::Loading::load(
            cfg.rules,
            cfg.crowdsec,
            cfg.crowdsec_maxelem,
            cfg.watch,
            cfg.safety,
            &port_names,
        )?;
        let bgp_state = Arc::new(bgp::BgpState::default());
        // Routes pass the net runtime adds pass (reread with it on SIGHUP).
        let route_safety = Arc::clone(&controller.gate().safety);
        let controller = with_status(controller, port_names.clone(), cfg.bgp.is_some().then(|| Arc::clone(&bgp_state)));
        let published = Arc::clone(controller.published());

        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(BridgeCounters::default());
        let metrics =
            Arc::new(BridgeMetrics::new(names.clone(), Arc::clone(&counters), Arc::clone(controller.state())));

        let sampler = cfg
            .sample
            .map(|s| s.for_run(port_names, cfg.workers.unwrap_or(1), cfg.steer_inner))
            .map(|s| Sampler::start(s, Arc::clone(&published)).context("--sample-drops"))
            .transpose()?;
        let _ = sampler.as_ref().map(|s| metrics.samples.set(s.counters()));
        // Signals first: a SIGINT while the ports open still ends the run cleanly.
        let (events, events_rx) = channel();
        let signals = cfg
            .signals
            .then(|| spawn_signals(Arc::clone(&stop), events.clone(), Arc::clone(controller.state())))
            .transpose()
            .context("installing the signal handlers")?;
        let close_signals = |s: Option<SignalThread>| s.iter().for_each(SignalThread::close);

        let count: Arc<dyn PortCount> = Arc::clone(&counters) as _;
        let opened = match ports.open(&stop, &count, cfg.dry_run) {
            Ok(o) => o,
            Err(e) => {
                close_signals(signals);
                return Err(e.into());
            }
        };
        let io = opened.io.clone();
        let workers = match opened.per_queue {
            true => lane_counters(&counters, &cfg.cpus, opened.lanes.len()),
            false => cfg.workers.unwrap_or(1),
        };
        metrics.dry_run.store(cfg.dry_run, Ordering::Relaxed);
        *metrics.io.lock().unwrap_or_else(PoisonError::into_inner) = io.clone();

        let started = serve_control(
            (cfg.metrics, cfg.control.as_deref(), (cfg.control_group.as_deref(), cfg.control_add_group.as_deref())),
            crowdsec,
            &events,
            &stop,
            &metrics,
        );
        let (metrics_addr, control_socket, bouncer) = match started {
            Ok(s) => s,
            Err(e) => {
                close_signals(signals);
                return Err(e);
            }
        };
        let bgp = match spawn_bgp(cfg.bgp, route_safety, &events, &stop, bgp_state) {
            Ok(b) => b,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                close_signals(signals);
                return Err(e);
            }
        };
        let _ = bgp.as_ref().map(|b| metrics.bgp.set(Arc::clone(&b.state)));
        let every_tick = metrics.ticker(cfg.status, cfg.duration, &stop);
        let control = std::thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || controller.run(events_rx, every_tick))
            .context("starting the control thread")?;

        log_start(&names, &io, workers, (&entries, build_ms), cfg.dry_run);
        *metrics.rules.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&published));
        let run = Pipeline {
            metrics: Arc::clone(&metrics),
            counters,
            published: Arc::clone(&published),
            stop: Arc::clone(&stop),
            judge: cfg.judge,
            reassembly: cfg.reassembly,
            cpus: cfg.cpus,
            steer_inner: cfg.steer_inner,
            workers,
        };
        let pipeline = std::thread::Builder::new()
            .name("sluice-bridge".into())
            .spawn(move || run.run(opened, sampler))
            .context("starting the bridge thread")?;
        Ok(Bridge {
            metrics,
            published,
            stop,
            events,
            metrics_addr,
            io,
            pipeline,
            control,
            control_socket,
            bouncer,
            bgp,
            signals,
        })
    }
}

/// The line that says the bridge is on, and a dry run's warning.
fn log_start(names: &[String; 2], io: &str, workers: usize, (entries, build_ms): (&[ListEntries], f64), dry_run: bool) {
    tracing::info!(
        "bridging {} <-> {} over {io}; {workers} worker(s); {} entries ({}) built in {build_ms:.1} ms",
        names[0],
        names[1],
        total_entries(entries),
        describe(entries)
    );
    if dry_run {
        tracing::warn!("dry run: every frame is forwarded; drops are counted as would_drop, none is enforced");
    }
}

/// A per-queue bridge's lane counters, each lane's queue and the CPU its
/// thread is pinned to: the workers, one a lane.
fn lane_counters(counters: &BridgeCounters, cpus: &[usize], lanes: usize) -> usize {
    let made = lanes::lane_cpus(cpus, lanes)
        .iter()
        .enumerate()
        .map(|(q, &cpu)| LaneCounters { queue: q as u32, cpu: cpu as u32, ..Default::default() })
        .collect();
    let _ = counters.lanes.set(made);
    lanes
}

/// `--bgp-peer`: the sessions, their routes passing the same safety net
/// as runtime adds.
fn spawn_bgp(
    cfg: Option<bgp::BgpConfig>,
    safety: Arc<Safety>,
    events: &Sender<Event>,
    stop: &Arc<AtomicBool>,
    state: Arc<bgp::BgpState>,
) -> Result<Option<bgp::Bgp>> {
    let Some(b) = cfg else { return Ok(None) };
    let cfg = bgp::BgpConfig { guard: bgp::RouteGuard { safety, ..b.guard.clone() }, ..b };
    let spawned = bgp::Bgp::spawn(cfg, events.clone(), stop, state);
    Ok(Some(spawned.context("starting the BGP sessions (--bgp-listen)")?))
}

/// The control plane's servers: the metrics responder (its address), the
/// control socket and the CrowdSec bouncer, each when configured.
type Servers = (Option<SocketAddr>, Option<sluice_control::socket::Serving>, Option<JoinHandle<()>>);

/// The control socket's groups: every command, and add/test/list only.
type Groups<'a> = (Option<&'a str>, Option<&'a str>);

/// Start the control plane's servers; `at`: the metrics address, the
/// control socket's path and the groups that may use it besides its owner.
fn serve_control(
    at: (Option<SocketAddr>, Option<&std::path::Path>, Groups<'_>),
    crowdsec: Option<BouncerConfig>,
    events: &Sender<Event>,
    stop: &Arc<AtomicBool>,
    metrics: &Arc<BridgeMetrics>,
) -> Result<Servers> {
    let (metrics_at, control, (group, add_group)) = at;
    // A group that does not exist stops the start here, where what was
    // started is stopped again.
    let access = sluice_control::socket::Access::owner_and(group, add_group)?;
    let metrics_addr = metrics_at
        .map(|addr| sluice_metrics::serve_flag(addr, metrics.registry(), "sluice bridge"))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let control_socket =
        sluice_control::socket::serve_at(control, access, sluice_policy::deliver_to(events), &metrics.socket)?;
    let bouncer = crowdsec
        .map(|c| {
            // The bouncer pushes the drops by origin the exporter serves.
            let _ = metrics.crowdsec_set.set(c.set.clone());
            let m = Arc::clone(metrics);
            let usage = sluice_policy::usage::UsageSource(Arc::new(move || m.origin_usage()), "sluice-bridge");
            let c = BouncerConfig { usage: Some(usage), ..c };
            sluice_policy::crowdsec::spawn(c, events.clone(), stop, metrics.crowdsec.get_or_init(Arc::default))
        })
        .transpose()
        .context("starting the crowdsec thread")?;
    Ok((metrics_addr, control_socket, bouncer))
}

/// What the pipeline thread needs.
struct Pipeline {
    metrics: Arc<BridgeMetrics>,
    counters: Arc<BridgeCounters>,
    published: Arc<Published<RuleSet>>,
    stop: Arc<AtomicBool>,
    judge: JudgeConfig,
    reassembly: ReassemblyConfig,
    cpus: Vec<usize>,
    steer_inner: bool,
    workers: usize,
}

impl Pipeline {
    /// The forwarding loop: the lanes of a per-queue pair each on a thread
    /// judging inline, else the one lane judged by the workers.
    fn run<S, K>(self, opened: Opened<S, K>, sampler: Option<Sampler>) -> PipelineEnd
    where
        S: Source<Error = LiveError> + Send,
        K: Sink<Error = LiveError> + Send,
    {
        let cfg = RunConfig {
            // In input order: the AF_XDP sink returns frames to the kernel by
            // walking them in the order they were received.
            ordered: true,
            // Source and sink share the ports; both run on this thread.
            read_ahead: false,
            max_in_flight: self.workers * 4,
            // How long a fill waits on a quiet link before the loop writes what
            // workers finished and expires held fragments.
            live_wait: Duration::from_millis(2),
            ..RunConfig::default()
        };
        let m = &self.metrics;
        let result = if opened.per_queue {
            let ports = opened.lanes;
            let inboxes = m.inboxes.get_or_init(|| sluice_pipeline::Inboxes::new(ports.len()));
            let ends = ports
                .into_iter()
                .enumerate()
                .map(|(i, (p, t))| (p, tap_lane(sampler.as_ref(), Counting::new(t, &self.counters, Some(i)), i)))
                .collect();
            let observer = || Box::new(LiveObserver::new(m)) as _;
            let stage = || self.reassembly.stage();
            let (lanes, stats) = inline_lanes(ends, &self.published, self.judge, inboxes, stage, observer, &self.cpus);
            *m.live_stats.lock().unwrap_or_else(PoisonError::into_inner) = stats;
            let stop = &self.stop;
            lanes::combine(lanes::run_lanes(lanes, &cfg, &|| stop.store(true, Ordering::Relaxed)))
        } else {
            let mut lanes = opened.lanes.into_iter();
            let (mut source, sink) = lanes.next().expect("a pair opened on one thread has one lane");
            debug_assert!(lanes.next().is_none(), "a pair opened on one thread has one lane");
            let cpus = (!self.cpus.is_empty()).then(|| self.cpus.clone());
            let workers = WorkersConfig {
                judge: self.judge,
                cpus,
                steer_inner: self.steer_inner,
                ..WorkersConfig::new(self.workers)
            };
            let judge = sluice_pipeline::judge(&self.published, workers);
            *m.live_stats.lock().unwrap_or_else(PoisonError::into_inner) = judge.live_stats();
            let mut sink = Counting::new(sink, &self.counters, None);
            let mut sink = tap(sampler.as_ref(), &mut sink);
            let (mut stage, mut observer) = (self.reassembly.stage(), LiveObserver::new(m));
            sluice_pipeline::run(&mut source, &mut stage, judge, &mut sink, &mut observer, &cfg)
        };
        // The source ended (stop, or the ports failed): the rest stops too.
        self.stop.store(true, Ordering::Relaxed);
        (result, sampler)
    }
}

impl Bridge {
    /// What the bridge counts, live.
    pub fn metrics(&self) -> &Arc<BridgeMetrics> {
        &self.metrics
    }

    /// The rules in force (replaced by each reload or runtime change).
    pub fn rules(&self) -> &Arc<Published<RuleSet>> {
        &self.published
    }

    /// Where `/metrics` is served (the port chosen, when 0 was asked).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// How the ports read ("AF_XDP (drv mode, ...)", "AF_PACKET ...").
    pub fn io(&self) -> &str {
        &self.io
    }

    /// Reload the rules from their files (as SIGHUP does); `why` is logged.
    pub fn reload(&self, why: &'static str) {
        let _ = self.events.send(Event::Reload(why));
    }

    /// Where control events go (runtime set changes, reloads).
    pub fn events(&self) -> &Sender<Event> {
        &self.events
    }

    /// Ask the bridge to stop; [`Bridge::wait`] then returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits until the bridge stops (by [`Bridge::stop`], a signal,
    /// `duration`, or the ports failing), stops every thread, and sums up.
    pub fn wait(self) -> Result<BridgeSummary> {
        let (result, sampler) = self.pipeline.join().map_err(|_| anyhow::anyhow!("the bridge thread panicked"))?;
        // The ports are closed (and the XDP programs detached) by now.
        let _ = self.events.send(Event::Quit);
        let _ = self.control.join();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.control_socket {
            h.stop();
        }
        if let Some(h) = self.bouncer {
            let _ = h.join();
        }
        if let Some(b) = self.bgp {
            b.join();
        }
        if let Some(s) = &self.signals {
            s.close();
        }
        let (samples, sample_error) = sampler.map_or((None, None), Sampler::end);
        let done = result.map_err(|e| match e {
            RunError::Judge { error, .. } => anyhow::anyhow!(
                "{error}; the run stopped, and the outputs were completed with every packet judged before it, in input order"
            ),
            RunError::Sink(e) => anyhow::anyhow!("{e}"),
        })?;
        Ok(self::summary(&self.metrics, &self.published, &self.io, done, samples, sample_error))
    }
}

fn summary(
    metrics: &BridgeMetrics,
    published: &Published<RuleSet>,
    io: &str,
    done: Finished<LiveError>,
    samples: Option<SampleReport>,
    sample_error: Option<String>,
) -> BridgeSummary {
    let rules = published.load();
    let mut json = metrics.summary_json(&done.report, io);
    sluice_engine::hits::json(&rules.value, &done.report.stats, &mut json);
    if let Some(r) = &samples {
        json["samples"] = r.to_json();
    }
    let mut text = done.report.text() + &metrics.summary_text(&done.report, io);
    text += &sluice_engine::hits::text(&rules.value, &done.report.stats);
    text += &samples.as_ref().map(|r| r.text()).unwrap_or_default();
    BridgeSummary { json, text, stopped: done.stopped, sample_error }
}
