//! `sluice shield`: flags onto `sluice_shield::ShieldConfig`, run to the end.

use crate::Outcome;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_pipeline::flags::VerdictFlag;
use sluice_policy::RuleSpec;
use sluice_shield::{ModeChoice, ShieldConfig};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum XdpModeArg {
    /// In the driver (refused where the driver has no XDP).
    Native,
    /// After the kernel built the packet: every interface has it.
    Generic,
    /// Native where the driver has it, else generic.
    Auto,
}

#[derive(Args, Debug)]
pub struct ShieldArgs {
    /// Read flags from a TOML file (keys are long flag names; the command line overrides).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// An interface of this host to protect (repeatable): its incoming
    /// packets are judged in XDP, before the kernel's stack.
    #[arg(long = "iface", value_name = "IF", required = true)]
    pub ifaces: Vec<String>,
    #[command(flatten)]
    pub rules: RuleSpec,
    /// How the program is attached (auto: native where the driver has it).
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// Replace another tool's XDP program on the interfaces (xdp-filter,
    /// `ip link set .. xdp`); without it, one found there is an error.
    #[arg(long)]
    pub force: bool,
    /// Pin each interface's link in this bpffs directory (e.g.
    /// /sys/fs/bpf/sluice): the program goes on enforcing after the shield
    /// stops or restarts, and the next start with the same directory swaps
    /// its program in without a gap. Remove DIR/xdp_IF to detach.
    #[arg(long, value_name = "DIR")]
    pub persist: Option<std::path::PathBuf>,
    /// Reload the rules when the rule file or a list changes (as SIGHUP
    /// and `sluice ctl reload` do): the new program is swapped in at once.
    #[arg(long)]
    pub watch: bool,
    /// Judge and count everything, drop nothing: the summary says what
    /// would have been dropped.
    #[arg(long)]
    pub dry_run: bool,
    /// What happens to frames whose addresses cannot be known.
    #[arg(long, value_enum, default_value = "pass")]
    pub undecodable: VerdictFlag,
    #[command(flatten)]
    pub control: sluice_control::socket::ControlFlags,
    #[command(flatten)]
    pub crowdsec: sluice_policy::flags::CrowdsecFlags,
    #[command(flatten)]
    pub safety: sluice_control::safety::SafetyFlags,
    #[command(flatten)]
    pub metrics: sluice_control::product::MetricsFlags,
    /// The bridge's drop samples: 1 in N drawn in the kernel program,
    /// written here off the fast path.
    #[command(flatten)]
    pub sample: sluice_pipeline::flags::SampleFlags,
    /// The same `--bgp-*` flags as `sluice bridge` (docs/bgp.md).
    #[command(flatten)]
    pub bgp: sluice_bgpfeed::BgpFlags,
    /// Stop after this many seconds (default: on SIGINT or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ShieldArgs) -> Result<Outcome> {
    // Checked before anything is loaded: a wrong address is a usage error.
    let metrics = a.metrics.addr()?;
    let (crowdsec, crowdsec_maxelem) = a.crowdsec.bouncer(&a.rules.geo_db)?;
    let bgp = a.bgp.config().map_err(sluice_control::product::Usage)?;
    let options = sluice_shield::Options {
        undecodable_drop: matches!(a.undecodable, VerdictFlag::Drop),
        v4mapped: a.rules.v4mapped,
        dry_run: a.dry_run,
        // Filled in by the shield: its ring's maps, its counters of drops
        // by origin, its interfaces' indexes.
        sample: None,
        origins: None,
        ifaces: Vec::new(),
    };
    let config = ShieldConfig {
        ifaces: a.ifaces,
        mode: match a.xdp_mode {
            XdpModeArg::Native => ModeChoice::Native,
            XdpModeArg::Generic => ModeChoice::Generic,
            XdpModeArg::Auto => ModeChoice::Auto,
        },
        force: a.force,
        persist: a.persist,
        watch: a.watch,
        rules: a.rules,
        options,
        control: a.control.control,
        control_group: a.control.control_group,
        control_add_group: a.control.control_add_group,
        safety: a.safety.load()?,
        crowdsec,
        crowdsec_maxelem,
        metrics,
        bgp,
        sample: Some(a.sample),
    };
    let shield = sluice_shield::start(config).context("shield")?;
    shield.log_start();
    let duration = a.duration.map(std::time::Duration::from_secs_f64);
    let (summary, _) = sluice_control::product::run_to_end(shield, duration, true).context("shield")?;
    print!("{}", sluice_control::product::print(&summary, a.json));
    Ok(Outcome::Complete)
}
