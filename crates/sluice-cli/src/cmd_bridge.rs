//! `sluice bridge`: its flags, mapped onto a `sluice_bridge::BridgeConfig`
//! over the live interfaces; the bridge itself is `sluice-bridge`'s.

use crate::Outcome;
use anyhow::Result;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sluice_bridge::{Bridge, BridgeConfig, LivePorts};
use sluice_live::open::{Io, OpenConfig, XdpChoice};
use sluice_pipeline::flags::{ReassemblyFlags, VerdictFlag};
use sluice_pipeline::sample::Backpressure;
use sluice_pipeline::JudgeConfig;
use std::io::IsTerminal;
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
    pub rules: sluice_policy::RuleSpec,
    #[command(flatten)]
    pub sample: sluice_pipeline::flags::SampleFlags,
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
    #[command(flatten)]
    pub metrics: sluice_control::product::MetricsFlags,
    /// Reload the rules when the rule file or a list file changes (checked
    /// every 200 ms; replace files by rename so no half-written file is read).
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
    pub undecodable: VerdictFlag,
    #[command(flatten)]
    pub reassembly: ReassemblyFlags,
    /// Stop by itself after this many seconds (as if sent SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Judge, count and log everything, enforce nothing: every frame is
    /// forwarded; the summary and metrics say what would have been dropped.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub control: sluice_control::socket::ControlFlags,
    #[command(flatten)]
    pub crowdsec: sluice_policy::flags::CrowdsecFlags,
    #[command(flatten)]
    pub safety: sluice_control::safety::SafetyFlags,
    #[command(flatten)]
    pub bgp: sluice_bridge::bgp::BgpFlags,
}

/// The flags that make no sense together, refused before anything opens.
fn check(a: &BridgeArgs) -> Result<[String; 2]> {
    let [if_a, if_b] = a.ifaces.as_slice() else {
        crate::usage!("give exactly two interfaces: --iface A --iface B (got {})", a.ifaces.len());
    };
    if if_a == if_b {
        crate::usage!("--iface {if_a} given twice: a bridge needs two different interfaces");
    }
    if a.duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        crate::usage!("--duration must be a positive number of seconds");
    }
    if a.frame_size.is_some() && a.io == Io::Afpacket {
        // TPACKET_V3 packs received frames back to back in its blocks: there
        // is no per-frame buffer to size.
        crate::usage!("--frame-size sizes AF_XDP's UMEM frames; AF_PACKET's ring has none (use --io afxdp)");
    }
    Ok([if_a.clone(), if_b.clone()])
}

pub fn run(a: BridgeArgs) -> Result<Outcome> {
    let names = check(&a)?;
    let metrics = a.metrics.addr()?;
    let (crowdsec, crowdsec_maxelem) = a.crowdsec.bouncer(&a.rules.geo_db)?;
    // A live port does not wait for a disk: a full queue sheds samples (counted, logged once).
    let sample = a.sample.config(Backpressure::Shed);
    let open = OpenConfig {
        io: a.io,
        xdp: a.xdp_mode,
        queues: a.queues,
        frame_size: a.frame_size,
        per_queue: a.workers.is_none(),
        cpus: a.cpus.clone(),
    };
    let cfg = BridgeConfig {
        watch: a.watch,
        safety: a.safety.load()?,
        crowdsec,
        crowdsec_maxelem,
        bgp: a.bgp.config().map_err(sluice_control::product::Usage)?,
        sample,
        workers: a.workers,
        steer_inner: a.steer_inner,
        cpus: a.cpus,
        judge: JudgeConfig { undecodable: a.undecodable.into(), ..JudgeConfig::default() },
        reassembly: a.reassembly.config(),
        metrics,
        control: a.control.control,
        control_group: a.control.control_group,
        control_add_group: a.control.control_add_group,
        status: a.status || std::io::stderr().is_terminal(),
        duration: a.duration.map(Duration::from_secs_f64),
        dry_run: a.dry_run,
        signals: true,
        ..BridgeConfig::new(a.rules)
    };
    let ports = LivePorts { names, config: open };
    let summary = Bridge::start(cfg, ports)?.wait()?;
    print!("{}", sluice_control::product::print(&summary, a.json));
    if let Some(e) = summary.sample_error {
        tracing::error!("--sample-drops: {e}");
    }
    match summary.stopped {
        Some(e @ sluice_live::LiveError::InterfaceGone { .. }) => {
            tracing::error!("{e}");
            Ok(Outcome::InterfaceGone)
        }
        Some(e) => Err(anyhow::Error::new(e).context("the bridge stopped on an error reading the ports")),
        None => Ok(Outcome::Complete),
    }
}
