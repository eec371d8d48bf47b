//! The shield as a product of the house's one shape: a [`ShieldConfig`],
//! [`start`] (rules loaded into the kernel, then attached), a [`Shield`]
//! that runs until its handle is told to stop, and a [`ShieldSummary`].
//!
//! Order of a start: the rules and sets are read, compiled and loaded
//! (maps written, program verified) before any interface is touched, so no
//! packet is ever judged against a half-built table; then each interface
//! gets the program through a BPF link. If one interface refuses, the
//! links made so far are dropped (the kernel detaches them): nothing is
//! left half-attached. Stopping drops the links: without the shield every
//! packet passes again.

use crate::mirror::{BgpMirror, BgpShown, Kernel, Reread};
use crate::origins::{CrowdsecSeen, OriginCounts};
use crate::{Compiled, Count, Options, ShieldError};
use sluice_control::product::{Handle, Running, Summary};
use sluice_live::bpf::{XdpLink, XdpMode};
use sluice_live::LiveError;
use sluice_policy::spec::RuleSpec;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Which XDP mode to attach in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModeChoice {
    /// In the driver, before any socket buffer exists; refused where the
    /// driver has no XDP.
    Native,
    /// After the socket buffer is built: every interface has it, at a
    /// higher cost per packet.
    Generic,
    /// Native where the driver has it, else generic (said in the log and
    /// the summary).
    #[default]
    Auto,
}

/// Everything a shield is started from.
#[derive(Clone, Debug, Default)]
pub struct ShieldConfig {
    /// The host's interfaces to protect.
    pub ifaces: Vec<String>,
    pub mode: ModeChoice,
    /// Replace another tool's XDP program (attached through netlink).
    pub force: bool,
    /// A bpffs directory where each interface's link is pinned: the
    /// program goes on enforcing after the shield stops, and the next
    /// start with the same directory swaps its program in without a gap.
    pub persist: Option<std::path::PathBuf>,
    pub rules: RuleSpec,
    pub options: Options,
    /// The control socket (`sluice ctl`), when given.
    pub control: Option<std::path::PathBuf>,
    /// Groups that may use it: every command, and add/test/list only.
    pub control_group: Option<String>,
    pub control_add_group: Option<String>,
    /// What runtime adds pass (`--never-block`, `--min-prefix-*`).
    pub safety: Arc<sluice_control::safety::Safety>,
    /// Reload the rules when their files change (as SIGHUP does).
    pub watch: bool,
    /// A CrowdSec bouncer's config (its decisions into a dynamic set).
    pub crowdsec: Option<sluice_policy::crowdsec::BouncerConfig>,
    pub crowdsec_maxelem: Option<u32>,
    /// Serve Prometheus metrics here (`--metrics`, checked by the caller).
    pub metrics: Option<std::net::SocketAddr>,
    /// BGP peers whose blackhole routes and FlowSpec flows the kernel
    /// program enforces (`--bgp-*`; [`crate::flows`]).
    pub bgp: Option<sluice_bgpfeed::BgpConfig>,
    /// `--sample-drops`, `--log-drops` and their knobs, as the bridge's
    /// ([`crate::samples`]).
    pub sample: Option<sluice_pipeline::flags::SampleFlags>,
}

/// One interface the program is attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    pub iface: String,
    /// "native" or "generic".
    pub mode: &'static str,
    /// What `auto` found (None when the mode was asked for).
    pub fell_back: Option<String>,
    /// The program `--force` replaced, as "id N (driver mode)".
    pub replaced: Option<String>,
    /// With `--persist`: the link pinned there, and whether a previous
    /// run's link was taken over (its program replaced in one step).
    pub pinned: Option<std::path::PathBuf>,
    pub adopted: bool,
}

/// The control plane of a shield with `--control`: its socket, and the
/// controller's thread with the channel that ends it.
struct ControlPlane {
    events: std::sync::mpsc::Sender<sluice_policy::Event>,
    thread: std::thread::JoinHandle<()>,
    socket: Option<sluice_control::socket::Serving>,
    /// The CrowdSec bouncer's thread and what stops it.
    bouncer: Option<(std::thread::JoinHandle<()>, Arc<AtomicBool>)>,
    /// What the controller and the socket count, for the metrics.
    state: Arc<sluice_policy::ControlState>,
    socket_counters: Arc<sluice_control::socket::SocketCounters>,
    /// With `--bgp-peer`: the sessions' state and what the kernel holds
    /// of their routes, then, once the program is attached, the feed.
    bgp_seen: Option<(Arc<sluice_bgpfeed::BgpState>, Arc<Mutex<BgpShown>>)>,
    bgp: Option<Feed>,
    /// With `--crowdsec-*`: what the metrics read of the feed.
    crowdsec: Option<Arc<CrowdsecSeen>>,
}

/// A running BGP feed: its sessions and RIB thread, and what stops them.
struct Feed {
    running: sluice_bgpfeed::Bgp,
    stop: Arc<AtomicBool>,
}

impl ControlPlane {
    /// Stops the BGP feed, the bouncer, the socket, then the controller.
    fn stop(self) {
        if let Some(f) = self.bgp {
            f.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            f.running.join();
        }
        if let Some((thread, stop)) = self.bouncer {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = thread.join();
        }
        if let Some(s) = self.socket {
            s.stop();
        }
        let _ = self.events.send(sluice_policy::Event::Quit);
        let _ = self.thread.join();
    }
}

/// A running shield.
pub struct Shield {
    kernel: Arc<Mutex<Kernel>>,
    control: ControlPlane,
    attached: Vec<Attached>,
    warnings: Vec<String>,
    stop: Arc<AtomicBool>,
    started: Instant,
    metrics_addr: Option<std::net::SocketAddr>,
    /// With `--sample-drops`/`--log-drops`: the ring (kept while any
    /// program may write it) and its reader.
    samples: Option<(Arc<crate::samples::SampleRing>, crate::samples::Drain)>,
}

fn mode_name(m: XdpMode) -> &'static str {
    match m {
        XdpMode::Driver => "native",
        XdpMode::Skb => "generic",
    }
}

/// The ring the program samples drops into and the writer they go to,
/// opened before anything is loaded (a file that cannot be created is an
/// error with nothing attached); `None` without sampling.
fn open_samples(
    config: &ShieldConfig,
) -> Result<Option<(crate::samples::SampleRing, sluice_pipeline::sample::Sampler)>, ShieldError> {
    use sluice_pipeline::sample::{Backpressure, Sampler};
    let Some(flags) = &config.sample else { return Ok(None) };
    // A live link: a full queue loses the sample, never time on the reader.
    let Some(cfg) = flags.config(Backpressure::Shed) else { return Ok(None) };
    let ring = crate::samples::SampleRing::new(flags.sample_rate, flags.sample_max_pps)?;
    // The rate is drawn and the cap applied in the kernel: the writer
    // keeps every sample it gets.
    let cfg = sluice_pipeline::sample::SampleConfig { rate: 1, max_pps: 0, port_names: config.ifaces.clone(), ..cfg };
    // Samples come with their rule named (`offer_decided`): the writer
    // explains nothing under rules of its own.
    let rules = Arc::new(sluice_engine::snapshot::Published::new(sluice_engine::RuleSet::empty()));
    let sampler = Sampler::start(cfg, rules).map_err(|e| ShieldError::Config(format!("--sample-drops: {e}")))?;
    Ok(Some((ring, sampler)))
}

/// The thread that reads the sample ring, its counters served as metrics.
fn start_drain(
    sampling: Option<(crate::samples::SampleRing, sluice_pipeline::sample::Sampler)>,
    kernel: &Arc<Mutex<Kernel>>,
    metrics: &crate::metrics::ShieldMetrics,
    ifaces: &[String],
) -> Result<Option<(Arc<crate::samples::SampleRing>, crate::samples::Drain)>, ShieldError> {
    let Some((ring, sampler)) = sampling else { return Ok(None) };
    let ring = Arc::new(ring);
    metrics.samples(sampler.counters(), Arc::clone(&ring));
    let drain = crate::samples::Drain::start(&ring, sampler, Arc::clone(kernel), ifaces)?;
    Ok(Some((ring, drain)))
}

/// Loads the rules into the kernel, then attaches them to every interface.
pub fn start(mut config: ShieldConfig) -> Result<Shield, ShieldError> {
    if config.ifaces.is_empty() {
        return Err(ShieldError::Config("no interface given (--iface IF)".into()));
    }
    let sampling = open_samples(&config)?;
    // Every program built from here on (reloads too) writes into this ring.
    config.options.sample = sampling.as_ref().map(|(ring, _)| ring.tap());
    // And counts the CrowdSec set's drops by origin into these.
    let origins = config.crowdsec.as_ref().map(|c| OriginCounts::new(&c.set)).transpose()?.map(Arc::new);
    config.options.origins = origins.as_ref().map(|o| o.tap());
    let mut spec = config.rules.clone();
    // The CrowdSec feed's set is one of the rules' sets (a dynamic one).
    spec.feed_sets.extend(config.crowdsec.as_ref().map(|c| c.set.clone()));
    let plan = spec.load_plan().map_err(|e| ShieldError::Config(e.to_string()))?;
    // Every interface exists before anything is loaded; each has its row
    // of counters in every program built (by the index it has now, which
    // its link keeps).
    config.options.ifaces =
        config.ifaces.iter().map(|i| sluice_live::sys::ifindex(i)).collect::<Result<Vec<_>, _>>()?;
    if let Some(dir) = &config.persist {
        if !sluice_live::bpf::is_bpffs(dir) {
            return Err(ShieldError::Config(format!(
                "--persist {}: not a bpffs mount (mount -t bpf bpf {0}, or use /sys/fs/bpf/...)",
                dir.display()
            )));
        }
    }
    let bgp_rules = config.bgp.as_ref().map(|b| crate::flows::BgpRules {
        flows: Vec::new(),
        stops: Vec::new(),
        placement: b.placement,
    });
    let compiled = Compiled::with_bgp(&plan.file, &plan.sets, &config.options, bgp_rules.as_ref())?;
    let kernel = Arc::new(Mutex::new(Kernel { compiled, links: Vec::new(), reloads: 0, reloads_failed: 0 }));
    // The control plane before any interface: a socket or a group that
    // fails stops the start with nothing attached. Every shield has one,
    // with or without a socket: it rereads the rules on SIGHUP and puts
    // timed list entries out of force as they expire.
    let status = Arc::new(OnceLock::new());
    let control = start_control(&config, &spec, &kernel, plan.expiring, &status, origins)?;
    // Served before any interface is touched, as the control socket: an
    // address that cannot be bound stops the start with nothing attached.
    let metrics = Arc::new(
        crate::metrics::ShieldMetrics::new(
            Arc::clone(&kernel),
            (Arc::clone(&control.state), Arc::clone(&control.socket_counters)),
            config.options.dry_run,
        )
        .with_bgp(control.bgp_seen.clone())
        .with_crowdsec(control.crowdsec.clone()),
    );
    let metrics_addr = match config.metrics {
        Some(addr) => match sluice_metrics::serve_flag(addr, metrics.registry(), "sluice shield") {
            Ok(bound) => Some(bound),
            Err(e) => {
                control.stop();
                return Err(ShieldError::Config(e));
            }
        },
        None => None,
    };
    let mut links = Vec::new();
    let mut attached: Vec<Attached> = Vec::new();
    for iface in &config.ifaces {
        // On an error here, `links` drops: what was attached is detached,
        // and the pins made by this start are removed.
        let k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        let done = attach(&k.compiled, iface, config.mode, config.force, config.persist.as_deref());
        drop(k);
        match done {
            Ok((link, a)) => {
                links.push(link);
                attached.push(a);
            }
            Err(e) => {
                unpin_new(&attached);
                control.stop();
                return Err(e);
            }
        }
    }
    kernel.lock().unwrap_or_else(PoisonError::into_inner).links = links;
    // The feed only now: a table's new program must find the links to
    // swap into (one built before would replace the program attached
    // above in the mirror but not in the kernel).
    let mut control = control;
    if let (Some(cfg), Some((state, _))) = (&config.bgp, &control.bgp_seen) {
        match spawn_bgp(cfg, &config.safety, &control.events, Arc::clone(state)) {
            Ok((running, stop)) => control.bgp = Some(Feed { running, stop }),
            Err(e) => {
                // Nothing left attached: the links go, with the pins made.
                drop(std::mem::take(&mut kernel.lock().unwrap_or_else(PoisonError::into_inner).links));
                unpin_new(&attached);
                control.stop();
                return Err(ShieldError::Config(format!("starting the BGP sessions (--bgp-listen): {e}")));
            }
        }
    }
    // The reader last: the ring keeps what the program wrote until then.
    let samples = match start_drain(sampling, &kernel, &metrics, &config.ifaces) {
        Ok(s) => s,
        Err(e) => {
            drop(std::mem::take(&mut kernel.lock().unwrap_or_else(PoisonError::into_inner).links));
            unpin_new(&attached);
            control.stop();
            return Err(e);
        }
    };
    let _ = status.set(attached.clone());
    metrics.attached(attached.clone());
    Ok(Shield {
        kernel,
        control,
        attached,
        warnings: plan.warnings,
        stop: Arc::new(AtomicBool::new(false)),
        started: Instant::now(),
        metrics_addr,
        samples,
    })
}

/// Removes the pins this start made (a previous run's, taken over, stay).
fn unpin_new(attached: &[Attached]) {
    for a in attached.iter().filter(|a| !a.adopted) {
        if let Some(p) = &a.pinned {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The bridge's control plane over the same rules (the control socket,
/// the CrowdSec bouncer), its changes written into the kernel before they
/// are answered ([`crate::mirror`]).
fn start_control(
    config: &ShieldConfig,
    spec: &RuleSpec,
    kernel: &Arc<Mutex<Kernel>>,
    read: sluice_policy::Expiring,
    attached: &Arc<OnceLock<Vec<Attached>>>,
    origins: Option<Arc<OriginCounts>>,
) -> Result<ControlPlane, ShieldError> {
    let loading = sluice_policy::Loading::load(
        config.rules.clone(),
        config.crowdsec.clone(),
        config.crowdsec_maxelem,
        config.watch,
        Arc::clone(&config.safety),
        // The guarded interfaces are the ports `iface` may name (the
        // bridge's rule: a name that is none of them is refused).
        &config.ifaces,
    )
    .map_err(|e| ShieldError::Config(e.to_string()))?;
    let first = loading.controller.published().load().value.id();
    let state = Arc::clone(loading.controller.state());
    let (spec, options) = (spec.clone(), config.options.clone());
    let published = Arc::clone(loading.controller.published());
    // The entries of the last read, when it was, and how far the
    // controller has put them out of force, to rebuild from as their
    // timeouts pass or BGP's flows change. A rebuild for flows never goes
    // back before the last expiry: this clock started a little after the
    // controller's, and an entry it expired must not come back.
    let (mut last, mut read_at, mut expired_to) = (read, Instant::now(), 0);
    let rebuild: crate::mirror::Rebuild = Box::new(move |reread, bgp| {
        let (file, sets) = match reread {
            Reread::Expired(elapsed) => {
                expired_to = elapsed;
                last.plan(elapsed)
            }
            Reread::Last => last.plan(read_at.elapsed().as_secs().max(expired_to)),
            Reread::Disk => {
                let plan = spec.load_plan().map_err(|e| ShieldError::Config(e.to_string()))?;
                (last, read_at, expired_to) = (plan.expiring, Instant::now(), 0);
                (plan.file, plan.sets)
            }
        };
        Compiled::with_bgp(&file, &sets, &options, bgp)
    });
    let mut mirror = crate::mirror::Mirror::new(Arc::clone(kernel), first, rebuild);
    let bgp_mirror = config.bgp.as_ref().map(|b| BgpMirror::new(b.placement));
    let shown = bgp_mirror.as_ref().map(|b| Arc::clone(&b.shown));
    if let Some(b) = bgp_mirror {
        mirror = mirror.with_bgp(b);
    }
    let bgp_state = Arc::new(sluice_bgpfeed::BgpState::default());
    let seen = shown.map(|shown| (bgp_state, shown));
    let status = status_fn(config, kernel, attached, seen.clone());
    let mut controller = (loading.controller.without_merges())
        .with_status(status)
        .on_publish(Box::new(move |rules, why| mirror.sync(rules, why)));
    if let Some((st, _)) = &seen {
        let st = Arc::clone(st);
        controller = controller.with_bgp_status(Arc::new(move || st.json()));
    }
    let socket_counters = Arc::new(sluice_control::socket::SocketCounters::default());
    let (events, rx) = std::sync::mpsc::channel();
    let socket = match &config.control {
        Some(path) => {
            let access = sluice_control::socket::Access::owner_and(
                config.control_group.as_deref(),
                config.control_add_group.as_deref(),
            )
            .map_err(|e| ShieldError::Config(e.to_string()))?;
            let serving = sluice_control::socket::serve(
                path,
                access,
                sluice_policy::deliver_to(&events),
                Arc::clone(&socket_counters),
            )
            .map_err(|e| ShieldError::Config(format!("control socket {}: {e}", path.display())))?;
            tracing::info!("control socket at {}", path.display());
            Some(serving)
        }
        None => None,
    };
    // SIGHUP rereads the rules, as the bridge's does.
    let hup = events.clone();
    sluice_control::signals::on_sighup(move || {
        let _ = hup.send(sluice_policy::Event::Reload("SIGHUP"));
    })?;
    // `ctl flows` shows the kernel's counts of the FlowSpec flows' rules.
    let flow_counts = seen.as_ref().map(|(_, shown)| (Arc::clone(kernel), Arc::clone(shown)));
    let dry_run = config.options.dry_run;
    let thread = std::thread::Builder::new().name("sluice-control".into()).spawn(move || {
        controller.run(rx, move || {
            if let Some((kernel, shown)) = &flow_counts {
                crate::mirror::copy_flow_counts(kernel, shown, dry_run);
            }
        })
    })?;
    let (bouncer, crowdsec) = match (loading.crowdsec, origins) {
        (Some(c), Some(origins)) => {
            let stop = Arc::new(AtomicBool::new(false));
            let counters = Arc::new(sluice_policy::crowdsec::BouncerCounters::default());
            let seen = Arc::new(CrowdsecSeen { counters: Arc::clone(&counters), origins, published });
            // The bouncer pushes the kernel's drops by origin, as the
            // bridge's pushes its workers'.
            let usage = Arc::clone(&seen);
            let usage = sluice_policy::usage::UsageSource(Arc::new(move || usage.usage()), "sluice-shield");
            let c = sluice_policy::crowdsec::BouncerConfig { usage: Some(usage), ..c };
            (Some((sluice_policy::crowdsec::spawn(c, events.clone(), &stop, &counters)?, stop)), Some(seen))
        }
        _ => (None, None),
    };
    Ok(ControlPlane { events, thread, socket, bouncer, state, socket_counters, bgp_seen: seen, bgp: None, crowdsec })
}

/// `--bgp-peer`: the sessions, their routes passing the same safety net as
/// runtime adds, their tables sent to the controller as the bridge's are.
fn spawn_bgp(
    cfg: &sluice_bgpfeed::BgpConfig,
    safety: &Arc<sluice_control::safety::Safety>,
    events: &std::sync::mpsc::Sender<sluice_policy::Event>,
    state: Arc<sluice_bgpfeed::BgpState>,
) -> std::io::Result<(sluice_bgpfeed::Bgp, Arc<AtomicBool>)> {
    let guard = sluice_bgpfeed::RouteGuard { safety: Arc::clone(safety), ..cfg.guard.clone() };
    let cfg = sluice_bgpfeed::BgpConfig { guard, ..cfg.clone() };
    let stop = Arc::new(AtomicBool::new(false));
    Ok((sluice_bgpfeed::Bgp::spawn(cfg, events.clone(), &stop, state)?, stop))
}

/// `ctl status` of a shield: each interface with the XDP mode it runs in
/// (what `auto` chose), the program's size, the dry run and the pins.
fn status_fn(
    config: &ShieldConfig,
    kernel: &Arc<Mutex<Kernel>>,
    attached: &Arc<OnceLock<Vec<Attached>>>,
    bgp: Option<(Arc<sluice_bgpfeed::BgpState>, Arc<Mutex<BgpShown>>)>,
) -> sluice_policy::StatusFn {
    let (kernel, attached) = (Arc::clone(kernel), Arc::clone(attached));
    let (dry_run, persist) = (config.options.dry_run, config.persist.clone());
    Arc::new(move || {
        let k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        let ifaces: Vec<serde_json::Value> = (attached.get().map_or(&[][..], Vec::as_slice).iter())
            .map(|a| {
                serde_json::json!({
                    "iface": a.iface, "mode": a.mode, "auto": a.fell_back, "replaced": a.replaced,
                    "pinned": a.pinned.as_ref().map(|p| p.display().to_string()), "adopted": a.adopted,
                })
            })
            .collect();
        let mut status = serde_json::json!({
            "product": "shield",
            "interfaces": ifaces,
            "rules": k.compiled.rule_lines().len(),
            "instructions": k.compiled.instructions(),
            "table_bytes": k.compiled.table_bytes(),
            "dry_run": dry_run,
            "persist": persist.as_ref().map(|p| p.display().to_string()),
            "reloads": k.reloads,
            "reloads_failed": k.reloads_failed,
        });
        // Only with a feed: a shield without one answers as it always did.
        if let Some((state, shown)) = &bgp {
            status["bgp"] = bgp_status(state, shown);
        }
        status
    })
}

/// `ctl status`'s `bgp`: the sessions (as `ctl bgp` shows them), then
/// what the kernel enforces of their routes and what it refused, by reason.
fn bgp_status(state: &sluice_bgpfeed::BgpState, shown: &Mutex<BgpShown>) -> serde_json::Value {
    let s = shown.lock().unwrap_or_else(PoisonError::into_inner).clone();
    serde_json::json!({
        "sessions": state.json()["sessions"],
        "blackholes": s.blackholes,
        "flows_enforced": s.flows_enforced,
        "flow_rules": s.flow_rules,
        "flows_refused": s.refused,
        "programs_failed": s.programs_failed,
    })
}

/// The file an interface's link is pinned as: bpffs refuses names with a
/// dot (`eth0.100` is `xdp_eth0_100`).
pub fn pin_name(iface: &str) -> String {
    format!("xdp_{}", iface.replace('.', "_"))
}

fn attach(
    compiled: &Compiled,
    iface: &str,
    mode: ModeChoice,
    force: bool,
    persist: Option<&std::path::Path>,
) -> Result<(XdpLink, Attached), ShieldError> {
    let pin = persist.map(|d| d.join(pin_name(iface)));
    if let Some(pin) = pin.as_ref().filter(|p| p.exists()) {
        // A previous run's link: its program is replaced in one step, so
        // no packet goes unjudged between the two runs.
        let link = XdpLink::from_pinned(pin, iface)?;
        link.update(compiled.program())?;
        let mode = mode_name(link.mode());
        let a = Attached {
            iface: iface.to_owned(),
            mode,
            fell_back: None,
            replaced: None,
            pinned: Some(pin.clone()),
            adopted: true,
        };
        return Ok((link, a));
    }
    let ifindex = sluice_live::sys::ifindex(iface)?;
    let mut replaced = None;
    if let Ok(Some(q)) = sluice_live::netlink::xdp_query(ifindex) {
        if !force {
            return Err(LiveError::XdpBusy {
                iface: iface.to_owned(),
                detail: format!(" (id {}, {} mode; --force replaces it)", q.prog_id, q.mode),
            }
            .into());
        }
        sluice_live::netlink::xdp_detach(ifindex, q.mode).map_err(|e| {
            ShieldError::Config(format!(
                "{iface}: cannot detach XDP program id {} ({} mode) for --force: {e} (a program held by a BPF link \
                 goes only when its owner lets go)",
                q.prog_id, q.mode
            ))
        })?;
        replaced = Some(format!("id {} ({} mode)", q.prog_id, q.mode));
    }
    let program = compiled.program();
    let (link, fell_back) = match mode {
        ModeChoice::Native => (program.attach(iface, XdpMode::Driver)?, None),
        ModeChoice::Generic => (program.attach(iface, XdpMode::Skb)?, None),
        ModeChoice::Auto => match program.attach(iface, XdpMode::Driver) {
            Ok(l) => (l, None),
            Err(e @ LiveError::XdpAttach { .. }) => {
                (program.attach(iface, XdpMode::Skb)?, Some(format!("native XDP refused ({e}); generic instead")))
            }
            Err(e) => return Err(e.into()),
        },
    };
    if let Some(pin) = &pin {
        link.pin(pin)?;
    }
    let mode = mode_name(link.mode());
    Ok((link, Attached { iface: iface.to_owned(), mode, fell_back, replaced, pinned: pin, adopted: false }))
}

impl Shield {
    /// Where `--metrics` serves (the port bound when 0 was asked).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr
    }

    /// Where the program runs and how.
    pub fn attached(&self) -> &[Attached] {
        &self.attached
    }

    /// Log what the start did: the rules' warnings, and per interface
    /// the program replaced, the pinned link taken over, the mode fallen
    /// back to, and the program's size.
    pub fn log_start(&self) {
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
        let (instructions, table_bytes) = self.program_size();
        for at in &self.attached {
            if let Some(r) = &at.replaced {
                tracing::warn!("{}: replaced XDP program {r} (--force)", at.iface);
            }
            if at.adopted {
                let pin = at.pinned.as_ref().map_or(String::new(), |p| p.display().to_string());
                tracing::info!("{}: took over the pinned link {pin} (new program swapped in)", at.iface);
            }
            if let Some(why) = &at.fell_back {
                tracing::warn!("{}: {why}", at.iface);
            }
            let kib = table_bytes / 1024;
            tracing::info!(
                "shield on {} ({} XDP): {instructions} instructions, {kib} KiB of tables",
                at.iface,
                at.mode
            );
        }
    }

    /// What the user should hear about the rules (lines skipped, no rules).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The program in force: its instructions and its tables' bytes.
    pub fn program_size(&self) -> (usize, u64) {
        let k = self.kernel.lock().unwrap_or_else(PoisonError::into_inner);
        (k.compiled.instructions(), k.compiled.table_bytes())
    }

    /// Each rule's counter now (since the last reload), then the
    /// default's and the undecodable's.
    pub fn counts(&self) -> Result<Vec<Count>, ShieldError> {
        self.kernel.lock().unwrap_or_else(PoisonError::into_inner).compiled.counts()
    }
}

impl Running for Shield {
    type Summary = ShieldSummary;
    type Error = ShieldError;

    fn handle(&self) -> Handle {
        Handle::new(Arc::clone(&self.stop))
    }

    fn wait(self) -> Result<ShieldSummary, ShieldError> {
        self.control.stop();
        // Counted before the links go: after, nothing more is judged.
        let mut k = self.kernel.lock().unwrap_or_else(PoisonError::into_inner);
        let (counts, ifaces) = k.compiled.counts_and_ifaces()?;
        let police_dropped = k.compiled.police_dropped()?;
        let rules = k.compiled.rule_texts().to_vec();
        let (reloads, reloads_failed) = (k.reloads, k.reloads_failed);
        drop(std::mem::take(&mut k.links));
        drop(k);
        // After the links: the last samples are in the ring by now.
        let samples = self.samples.map(|(ring, drain)| {
            let (report, error) = drain.finish();
            if let Some(e) = &error {
                tracing::warn!("{e}");
            }
            // Over the cap in the kernel: the writer's `over_cap`, as on
            // the bridge (where the writer applies the cap).
            let report = report.map(|mut r| {
                r.counts.over_cap += ring.over_cap();
                r.counts.drops_seen += ring.over_cap();
                r
            });
            SampleSummary { report, lost_ring_full: ring.lost() }
        });
        Ok(ShieldSummary {
            attached: self.attached,
            rules,
            counts,
            ifaces,
            police_dropped,
            reloads,
            reloads_failed,
            elapsed: self.started.elapsed(),
            samples,
        })
    }
}

/// What a shield's run ends with.
#[derive(Clone, Debug)]
pub struct ShieldSummary {
    pub attached: Vec<Attached>,
    /// Each rule's text, in order.
    pub rules: Vec<String>,
    /// Per rule (since the last reload), then default and undecodable.
    pub counts: Vec<Count>,
    /// Per interface, as `attached` (since the last reload): what came in
    /// on it by verdict (then the row of frames from any other).
    pub ifaces: Vec<crate::IfaceCount>,
    /// Per rule: a `police` rule's packets over its rate; `None` for the others.
    pub police_dropped: Vec<Option<u64>>,
    /// Reloads swapped into the kernel, and those it refused.
    pub reloads: u64,
    pub reloads_failed: u64,
    pub elapsed: Duration,
    /// With `--sample-drops`/`--log-drops`.
    pub samples: Option<SampleSummary>,
}

/// What the drop samples came to.
#[derive(Clone, Debug)]
pub struct SampleSummary {
    /// The writer's counts and files (`None`: its thread failed).
    pub report: Option<sluice_pipeline::sample::SampleReport>,
    /// Samples the kernel program had no room for in the ring.
    pub lost_ring_full: u64,
}

impl SampleSummary {
    fn text(&self) -> String {
        let mut out = self.report.as_ref().map(|r| r.text()).unwrap_or_default();
        out += &format!("samples      {} lost to a full ring in the kernel\n", self.lost_ring_full);
        out
    }

    fn json(&self) -> serde_json::Value {
        let mut v = self.report.as_ref().map(|r| r.to_json()).unwrap_or_else(|| serde_json::json!({}));
        v["lost_ring_full"] = self.lost_ring_full.into();
        v
    }
}

impl ShieldSummary {
    fn extra(&self, e: crate::program::Extra) -> Count {
        self.counts.get(self.rules.len() + e as usize).copied().unwrap_or_default()
    }
}

impl Summary for ShieldSummary {
    fn text(&self) -> String {
        let mut out = String::new();
        for (i, a) in self.attached.iter().enumerate() {
            let c = self.ifaces.get(i).copied().unwrap_or_default();
            out += &format!(
                "shield on {} ({} XDP): {} passed, {} dropped\n",
                a.iface, a.mode, c.pass.packets, c.drop.packets
            );
            if let Some(p) = &a.pinned {
                out += &format!("  still enforcing: its link is pinned at {} (remove it to detach)\n", p.display());
            }
        }
        for (i, (rule, c)) in self.rules.iter().zip(&self.counts).enumerate() {
            out += &format!("{:>12} packets {:>14} bytes  {rule}", c.packets, c.bytes);
            if let Some(over) = self.police_dropped.get(i).copied().flatten() {
                out += &format!(" ({over} over the rate)");
            }
            out += "\n";
        }
        let d = self.extra(crate::program::Extra::Default);
        let u = self.extra(crate::program::Extra::Undecodable);
        out += &format!("{:>12} packets {:>14} bytes  (default)\n", d.packets, d.bytes);
        out += &format!("{:>12} packets {:>14} bytes  (undecodable)\n", u.packets, u.bytes);
        if self.reloads + self.reloads_failed > 0 {
            out += &format!(
                "reloads {} ({} refused); the counters are the last rules'\n",
                self.reloads, self.reloads_failed
            );
        }
        out += &self.samples.as_ref().map(SampleSummary::text).unwrap_or_default();
        out += &format!("ran {:.1} s\n", self.elapsed.as_secs_f64());
        out
    }

    fn json(&self) -> serde_json::Value {
        let count = |c: &Count| serde_json::json!({ "packets": c.packets, "bytes": c.bytes });
        let mut v = serde_json::json!({
            "interfaces": self.attached.iter().enumerate().map(|(i, a)| {
                // The bridge's `per_port` names.
                let c = self.ifaces.get(i).copied().unwrap_or_default();
                serde_json::json!({
                    "iface": a.iface, "mode": a.mode, "fell_back": a.fell_back, "replaced": a.replaced,
                    "pinned": a.pinned.as_ref().map(|p| p.display().to_string()), "adopted": a.adopted,
                    "passed": c.pass.packets, "passed_bytes": c.pass.bytes,
                    "dropped": c.drop.packets, "dropped_bytes": c.drop.bytes,
                })
            }).collect::<Vec<_>>(),
            "rules": self.rules.iter().zip(&self.counts).enumerate().map(|(i, (r, c))| {
                let mut row = serde_json::json!({ "rule": r, "packets": c.packets, "bytes": c.bytes });
                // As the bridge's row of a police rule.
                if let Some(over) = self.police_dropped.get(i).copied().flatten() {
                    row["police_dropped"] = over.into();
                }
                row
            }).collect::<Vec<_>>(),
            "default": count(&self.extra(crate::program::Extra::Default)),
            "undecodable": count(&self.extra(crate::program::Extra::Undecodable)),
            "reloads": { "ok": self.reloads, "failed": self.reloads_failed },
            "elapsed_s": self.elapsed.as_secs_f64(),
        });
        // Only with sampling (docs/json.md lists it as optional).
        if let Some(s) = &self.samples {
            v["samples"] = s.json();
        }
        v
    }
}
