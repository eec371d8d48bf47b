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
    /// Serve Prometheus metrics at http://ADDR/metrics (loopback only unless
    /// --metrics-allow-remote; port 0 picks a free one, printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address other than loopback.
    #[arg(long)]
    pub metrics_allow_remote: bool,
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
    pub bgp: BgpArgs,
}

/// BGP peers whose FlowSpec and blackhole routes become rules (docs/bgp.md).
#[derive(Debug, clap::Args)]
pub struct BgpArgs {
    /// Peer with this router (ADDR or ADDR:PORT, port 179); repeat for more.
    /// sluice only receives routes.
    #[arg(long = "bgp-peer", value_name = "ADDR")]
    pub bgp_peers: Vec<String>,
    /// The peer's AS: one for all peers, or one per --bgp-peer in order.
    #[arg(long = "bgp-peer-as", value_name = "N")]
    pub bgp_peer_as: Vec<u32>,
    /// This side's AS (sent in OPEN; 4-octet ASes are announced).
    #[arg(long = "bgp-local-as", value_name = "N")]
    pub bgp_local_as: Option<u32>,
    /// This side's BGP identifier.
    #[arg(long = "bgp-router-id", value_name = "A.B.C.D")]
    pub bgp_router_id: Option<std::net::Ipv4Addr>,
    /// Wait for the peers to connect here (ADDR or ADDR:PORT) instead of
    /// connecting to them.
    #[arg(long = "bgp-listen", value_name = "ADDR")]
    pub bgp_listen: Option<String>,
    /// Unicast routes with this community are blackholes (default 65535:666); repeatable.
    #[arg(long = "bgp-blackhole-community", value_name = "ASN:VALUE")]
    pub bgp_blackhole_communities: Vec<String>,
    /// Keep a peer's routes while its session is down (default: removed,
    /// or kept for its graceful-restart time).
    #[arg(long = "bgp-keep-on-down")]
    pub bgp_keep_on_down: bool,
    /// Where the flows sit: first (before the rule file's rules) or last.
    #[arg(long = "bgp-rules", value_name = "first|last", default_value = "first")]
    pub bgp_rules: String,
    /// The hold time proposed (the lower of the two sides' is agreed).
    #[arg(long = "bgp-hold-time", value_name = "SECONDS", default_value_t = 90)]
    pub bgp_hold_time: u16,
    /// A file holding the TCP MD5 key (RFC 2385) of the sessions (one line).
    #[arg(long = "bgp-password-file", value_name = "FILE")]
    pub bgp_password_file: Option<std::path::PathBuf>,
    /// Routes one peer may hold, flows and blackholes together (default
    /// 100000); the rest are refused and counted.
    #[arg(long = "bgp-max-routes", value_name = "N")]
    pub bgp_max_routes: Option<usize>,
    /// Bytes one route may cost once decoded and held (default 8192; a
    /// route as operators write them costs under 1 KiB); larger ones are
    /// refused and counted.
    #[arg(long = "bgp-max-route-bytes", value_name = "BYTES")]
    pub bgp_max_route_bytes: Option<usize>,
    /// Bytes one peer's routes may cost together (default 134217728, 128
    /// MiB); announcements past it are refused and counted.
    #[arg(long = "bgp-max-peer-bytes", value_name = "BYTES")]
    pub bgp_max_peer_bytes: Option<usize>,
    /// The longest graceful-restart window granted a peer.
    #[arg(long = "bgp-restart-time", value_name = "SECONDS", default_value_t = 120)]
    pub bgp_restart_time: u16,
    /// Take FlowSpec flows with no destination prefix (source-only, or
    /// protocol and ports alone); refused by default: such a flow reaches
    /// every destination, this host's too.
    #[arg(long = "bgp-allow-undirected")]
    pub bgp_allow_undirected: bool,
    /// The operator's own networks (a list file): flows and blackholes are
    /// taken only for destinations inside them (RFC 8955 section 6).
    #[arg(long = "bgp-protect", value_name = "FILE")]
    pub bgp_protect: Option<std::path::PathBuf>,
}

impl BgpArgs {
    fn config(&self) -> Result<Option<sluice_bridge::bgp::BgpConfig>> {
        let f = sluice_bridge::bgp::BgpFlags {
            peers: self.bgp_peers.clone(),
            peer_as: self.bgp_peer_as.clone(),
            local_as: self.bgp_local_as,
            router_id: self.bgp_router_id,
            listen: self.bgp_listen.clone(),
            blackhole_communities: self.bgp_blackhole_communities.clone(),
            keep_on_down: self.bgp_keep_on_down,
            rules: self.bgp_rules.clone(),
            hold_time: self.bgp_hold_time,
            restart_time: self.bgp_restart_time,
            password_file: self.bgp_password_file.clone(),
            max_routes: self.bgp_max_routes,
            max_route_bytes: self.bgp_max_route_bytes,
            max_peer_bytes: self.bgp_max_peer_bytes,
            allow_undirected: self.bgp_allow_undirected,
            protect_file: self.bgp_protect.clone(),
        };
        f.config().map_err(|e| anyhow::Error::new(sluice_control::product::Usage(e)))
    }
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
    let metrics =
        a.metrics.as_deref().map(|m| sluice_control::product::metrics_addr(m, a.metrics_allow_remote)).transpose()?;
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
        bgp: a.bgp.config()?,
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
    let summary = Bridge::start(cfg, Box::new(ports))?.wait()?;
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
