//! `sluice bridge`: forward between two interfaces, dropping what the rules say.
//!
//! The live ports (`sluice_live::open`, `sluice_live::pipeline`) are the
//! pipeline's source and sink; reassembly and the judge are the same as
//! `filter`'s. Around the run: the signal thread and the control thread of
//! `sluice_control` (SIGHUP and `--watch` reloads, expiry, retirement of
//! replaced rule sets off the fast path), this command's status line and
//! `--duration` on the control thread's tick, and the metrics server of
//! `sluice_metrics`.

use crate::args::{ReassemblyArgs, VerdictArg};
use crate::report;
use crate::Outcome;
use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sluice_control::{describe, spawn_signals, total_entries, Controller, Event};
use sluice_live::open::{open_bridge, Io, OpenConfig, Opened, XdpChoice};
use sluice_live::pipeline::BridgeCounters;
use sluice_metrics::bridge::{BridgeMetrics, LiveObserver};
use sluice_pcap::sample::{tap, tap_lane, Sampler};
use sluice_pipeline::lanes::{self, inline_lanes};
use sluice_pipeline::{JudgeConfig, RunConfig};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct BridgeArgs {
    /// Read flags from a TOML file (keys are long flag names; the command line overrides).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// An interface to bridge; give it twice (port 0, port 1).
    #[arg(long = "iface", value_name = "IFACE", required = true)]
    pub ifaces: Vec<String>,
    #[command(flatten)]
    pub rules: crate::rule_source::RuleArgs,
    #[command(flatten)]
    pub sample: crate::args::SampleArgs,
    /// Socket layer: AF_XDP, AF_PACKET, or AF_XDP falling back to AF_PACKET.
    #[arg(long, default_value = "auto", value_parser = PossibleValuesParser::new(Io::NAMES).map(|s| Io::from_name(&s).unwrap()))]
    pub io: Io,
    /// XDP attach mode for AF_XDP: generic (skb), native (drv), or native
    /// falling back to generic.
    #[arg(long, default_value = "auto", value_parser = PossibleValuesParser::new(XdpChoice::NAMES).map(|s| XdpChoice::from_name(&s).unwrap()))]
    pub xdp_mode: XdpChoice,
    /// AF_XDP: queues to bind per port (default: every RX queue, up to 8).
    #[arg(long)]
    pub queues: Option<u32>,
    /// AF_XDP: bytes from one UMEM frame to the next (default 2048). Not a
    /// power of two, such as the seed's 1920, registers unaligned chunks.
    #[arg(long, value_name = "BYTES")]
    pub frame_size: Option<u32>,
    /// Worker threads judging (software RSS: Toeplitz on the 4-tuple), or
    /// `auto`: AF_XDP with a worker per queue that receives, judges and
    /// sends its queue's frames itself (AF_PACKET: one worker).
    #[arg(long, default_value = "1", value_parser = crate::args::bridge_workers)]
    pub workers: ::std::option::Option<usize>,
    /// Software RSS over the workers hashes the outer headers, or the
    /// innermost IP header a tunnel carries (verdicts are the same).
    #[arg(long = "steer", value_name = "outer|inner", default_value = "outer", action = clap::ArgAction::Set,
        value_parser = clap::builder::TypedValueParser::map(clap::builder::PossibleValuesParser::new(["outer", "inner"]), |s| s == "inner"))]
    pub steer_inner: bool,
    /// CPUs to pin workers to, e.g. 0,1 (default: worker i on CPU i).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback only unless
    /// --metrics-allow-remote; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address other than loopback.
    #[arg(long)]
    pub metrics_allow_remote: bool,
    /// Reload the rules when a list file changes (checked every 200 ms;
    /// replace files by rename so no half-written list is read).
    #[arg(long)]
    pub watch: bool,
    /// Print a status line on stderr every 2 s even when it is not a terminal.
    #[arg(long)]
    pub status: bool,
    /// Print the final summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Verdict for frames that cannot be decoded.
    #[arg(long, value_enum, default_value = "pass")]
    pub undecodable: VerdictArg,
    #[command(flatten)]
    pub reassembly: ReassemblyArgs,
    /// Stop by itself after this many seconds (as if sent SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Judge, count and log everything, enforce nothing: every frame is
    /// forwarded; the summary and metrics say what would have been dropped.
    #[arg(long)]
    pub dry_run: bool,
    /// Serve the control socket (`sluice ctl`) at PATH: runtime set
    /// changes, queries, reloads. Mode 0600: root and this user only.
    #[arg(long, value_name = "PATH")]
    pub control: Option<std::path::PathBuf>,
    /// Let members of group G use the control socket too (mode 0660).
    #[arg(long, value_name = "G", requires = "control")]
    pub control_group: Option<String>,
    /// Act as a CrowdSec bouncer: stream ban decisions from this Local API
    /// (e.g. http://127.0.0.1:8080) into --crowdsec-set.
    #[arg(long, value_name = "URL", requires = "crowdsec_key_file")]
    pub crowdsec_url: Option<String>,
    /// A file holding the bouncer's API key (`cscli bouncers add NAME -o raw`).
    #[arg(long, value_name = "FILE", requires = "crowdsec_url")]
    pub crowdsec_key_file: Option<std::path::PathBuf>,
    /// Seconds between pulls of new and deleted decisions.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub crowdsec_interval: f64,
    /// Seconds between full pulls, which repair what the stream missed.
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    pub crowdsec_resync: f64,
    /// The dynamic set the decisions go into: with --rules, define it
    /// (`set crowdsec dynamic`) and use it (`drop saddr @crowdsec`); with
    /// the --drop-* shorthands or no rules, its sources are dropped.
    #[arg(long, value_name = "NAME", default_value = "crowdsec")]
    pub crowdsec_set: String,
    /// The largest answer read from the LAPI, in bytes: a larger one is
    /// refused whole (nothing applied, retried at the next pull).
    #[arg(long, value_name = "BYTES", default_value_t = sluice_control::crowdsec::DEFAULT_MAX_ANSWER)]
    pub crowdsec_max_answer: u64,
    /// The most elements --crowdsec-set holds (default 500000, unless its
    /// definition says `maxelem N`): decisions past it are refused and
    /// counted (sluice_set_refused{reason="full"}), the rest applied.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub crowdsec_maxelem: Option<u32>,
    #[command(flatten)]
    pub safety: crate::args::SafetyArgs,
}

/// The flags that make no sense together, refused before anything opens.
fn check(a: &BridgeArgs) -> Result<(&String, &String)> {
    let [if_a, if_b] = a.ifaces.as_slice() else {
        bail!("give exactly two interfaces: --iface A --iface B (got {})", a.ifaces.len());
    };
    if if_a == if_b {
        bail!("--iface {if_a} given twice: a bridge needs two different interfaces");
    }
    if a.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        bail!("--duration must be a positive number of seconds");
    }
    Ok((if_a, if_b))
}

/// The CrowdSec set's maxelem when its definition gives none:
/// `--crowdsec-maxelem`, else the default. Both given and different is an
/// error: one of them would be silently ignored.
fn crowdsec_maxelem(rules: &sluice_engine::RuleSet, set: &str, flag: Option<u32>) -> Result<usize> {
    let defined = rules.named_index(set).and_then(|i| match rules.named_set_info()[i].kind {
        sluice_engine::SetKind::Dynamic { maxelem, .. } => maxelem,
        _ => None,
    });
    if let (Some(d), Some(f)) = (defined, flag) {
        if d != f {
            bail!("--crowdsec-maxelem {f}, but the rules define set `{set}` with maxelem {d}: give one of them");
        }
    }
    Ok(flag.map_or(sluice_control::sets::DEFAULT_CROWDSEC_MAXELEM, |n| n as usize))
}

pub fn run(a: BridgeArgs) -> Result<Outcome> {
    let (if_a, if_b) = check(&a)?;
    let metrics = a.metrics.as_deref().map(|m| sluice_metrics::check_addr(m, a.metrics_allow_remote)).transpose()?;
    let port_names = vec![if_a.clone(), if_b.clone()];
    let port_names_for_samples = port_names.clone();
    let (url, key) = (a.crowdsec_url.as_deref(), a.crowdsec_key_file.as_deref());
    let crowdsec = sluice_control::crowdsec::BouncerConfig::from_flags(
        url,
        key,
        a.crowdsec_interval,
        a.crowdsec_resync,
        &a.crowdsec_set,
        a.crowdsec_max_answer,
    )
    .map_err(anyhow::Error::msg)?;
    let safety = a.safety.load()?;
    let mut spec = a.rules.spec();
    spec.feed_sets.extend(crowdsec.as_ref().map(|c| c.set.clone()));
    let loaded = crate::rule_source::load(&spec, &port_names).context(if a.rules.rules.is_some() {
        "loading the rules"
    } else {
        "loading the address lists"
    })?;
    let entries = loaded.lists.clone();
    let build_ms = loaded.took.as_secs_f64() * 1e3;
    let feed_maxelem = match &crowdsec {
        Some(c) => Some((c.set.clone(), crowdsec_maxelem(&loaded.rules, &c.set, a.crowdsec_maxelem)?)),
        None => None,
    };
    let mut controller = Controller::new(spec, port_names, loaded, a.watch).with_safety(safety);
    if let Some((set, n)) = feed_maxelem {
        controller.set_maxelem_default(&set, n);
    }
    // The bouncer's bans are checked against the same net, counted in the same place.
    let crowdsec = crowdsec.map(|c| sluice_control::crowdsec::BouncerConfig { gate: controller.gate().clone(), ..c });
    let published = Arc::clone(controller.published());

    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(BridgeCounters::default());
    let shared = Arc::new(BridgeMetrics::new(
        [if_a.clone(), if_b.clone()],
        Arc::clone(&counters),
        Arc::clone(controller.state()),
    ));

    // A live port does not wait for a disk: a full queue sheds samples (counted, logged once).
    let shed = sluice_pcap::sample::Backpressure::Shed;
    let sampler = a.sample.start(&published, port_names_for_samples, a.workers.unwrap_or(1), a.steer_inner, shed)?;
    if let Some(s) = &sampler {
        let _ = shared.samples.set(s.counters());
    }
    // Signals first: a SIGINT while the ports open still ends the run cleanly.
    let (ctl_tx, ctl_rx) = channel();
    let signals = spawn_signals(Arc::clone(&stop), ctl_tx.clone(), Arc::clone(controller.state()))
        .context("installing the signal handlers")?;

    let (io, xdp, per_queue, cpus) = (a.io, a.xdp_mode, a.workers.is_none(), a.cpus.clone());
    let open_cfg = OpenConfig { io, xdp, queues: a.queues, frame_size: a.frame_size, per_queue, cpus };
    let (mut opened, io_desc) = open_bridge([if_a, if_b], &open_cfg, &stop, &counters)?;
    let workers = if let Opened::XskLanes(lanes) = &opened { lanes.len() } else { a.workers.unwrap_or(1) };
    opened.set_dry_run(a.dry_run);
    shared.dry_run.store(a.dry_run, Ordering::Relaxed);
    *shared.io.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = io_desc.clone();

    if let Some(addr) = metrics {
        sluice_metrics::serve_flag(addr, shared.registry(), "sluice bridge").map_err(anyhow::Error::msg)?;
    }

    let control_socket =
        sluice_control::socket::serve_at(a.control.as_deref(), a.control_group.as_deref(), &ctl_tx, &shared.socket)?;
    let bouncer = crowdsec
        .map(|cfg| {
            sluice_control::crowdsec::spawn(cfg, ctl_tx.clone(), &stop, shared.crowdsec.get_or_init(Arc::default))
        })
        .transpose()
        .context("starting the crowdsec thread")?;
    let every_tick = shared.ticker(a.status || std::io::stderr().is_terminal(), a.duration, &stop);
    let control = std::thread::Builder::new()
        .name("sluice-control".into())
        .spawn(move || controller.run(ctl_rx, every_tick))
        .context("starting the control thread")?;

    tracing::info!(
        "bridging {if_a} <-> {if_b} over {io_desc}; {workers} worker(s); {} entries ({}) built in {build_ms:.1} ms",
        total_entries(&entries),
        describe(&entries)
    );
    let judge_cfg = JudgeConfig { undecodable: a.undecodable.into(), ..JudgeConfig::default() };
    *shared.rules.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&published));
    let cfg = RunConfig {
        // In input order: the AF_XDP sink returns frames to the kernel by
        // walking them in the order they were received.
        ordered: true,
        // Source and sink share the ports; both run on this thread.
        read_ahead: false,
        max_in_flight: workers * 4,
        // How long a fill waits on a quiet link before the loop writes what
        // workers finished and expires held fragments.
        live_wait: Duration::from_millis(2),
        ..RunConfig::default()
    };
    let result = match opened.single() {
        Err(ports) => {
            let inboxes = shared.inboxes.get_or_init(|| sluice_pipeline::Inboxes::new(ports.len()));
            let ends = ports.into_iter().enumerate().map(|(i, (p, t))| (p, tap_lane(sampler.as_ref(), t, i))).collect();
            let observer = || Box::new(LiveObserver::new(&shared)) as _;
            let stage = || a.reassembly.stage();
            let (lanes, stats) = inline_lanes(ends, &published, judge_cfg, inboxes, stage, observer, &a.cpus);
            *shared.live_stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = stats;
            lanes::merge(lanes::run_lanes(lanes, &cfg, &|| stop.store(true, Ordering::Relaxed)))
        }
        Ok((mut source, mut sink)) => {
            let judge = report::judge(&published, judge_cfg, workers, &a.cpus, None, a.steer_inner);
            *shared.live_stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = judge.live_stats();
            let mut sink = tap(sampler.as_ref(), &mut *sink);
            let (mut stage, mut observer) = (a.reassembly.stage(), LiveObserver::new(&shared));
            sluice_pipeline::run(&mut *source, &mut stage, judge, &mut sink, &mut observer, &cfg)
        }
    };
    // The ports are closed (and the XDP programs detached) by now.
    let _ = ctl_tx.send(Event::Quit);
    let _ = control.join();
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = control_socket {
        h.stop();
    }
    if let Some(h) = bouncer {
        let _ = h.join();
    }
    signals.close();
    let (samples, sample_error) = sampler.map_or((None, None), Sampler::end);
    let done = report::finished(result)?;
    let rules = published.load();
    let mut summary = shared.summary_json(&done.report, &io_desc);
    crate::rule_source::rules_json(&rules.value, &done.report.stats, &mut summary);
    if let Some(r) = &samples {
        summary["samples"] = r.to_json();
    }
    if a.json {
        println!("{summary}");
    } else {
        print!("{}{}", done.report.text(), shared.summary_text(&done.report, &io_desc));
        print!("{}", crate::rule_source::rules_text(&rules.value, &done.report.stats));
        print!("{}", samples.as_ref().map(|r| r.text()).unwrap_or_default());
    }
    if let Some(e) = sample_error {
        tracing::error!("--sample-drops: {e}");
    }
    match done.stopped {
        Some(e @ sluice_live::LiveError::InterfaceGone { .. }) => {
            tracing::error!("{e}");
            return Ok(Outcome::InterfaceGone);
        }
        Some(e) => return Err(anyhow::Error::new(e).context("the bridge stopped on an error reading the ports")),
        None => {}
    }
    Ok(Outcome::Complete)
}
