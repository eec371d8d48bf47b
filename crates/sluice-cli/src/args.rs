//! Flag groups that several commands share, and how each maps onto the
//! libraries' types.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_defrag::DefragLimits;
use sluice_engine::Verdict;
use sluice_engine::{snapshot::Published, RuleSet};
use sluice_gen::{Encap, FlowDist, FrameSize, GenConfig, ProtoMix};
use sluice_pipeline::sample::{Backpressure, SampleConfig, Sampler};
use sluice_pipeline::Reassembly;
use sluice_rules::{load_list, parse_list, Prefix, FIREHOL_LEVEL1};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The safety net under runtime adds (shared by `bridge` and
/// `http-guard`): what no `ctl add`, CrowdSec decision or guard block may
/// cover, and how wide one may be. The rule files are not restricted.
#[derive(Args, Debug, Clone)]
pub struct SafetyArgs {
    /// Never block these addresses and prefixes (a list file: one per line,
    /// # comments): a runtime add that covers or overlaps one is refused.
    /// Reread on SIGHUP (a bridge's `ctl reload` too); a bad file keeps the
    /// list in force.
    #[arg(long, value_name = "FILE")]
    pub never_block: Option<PathBuf>,
    /// Refuse runtime adds (`ctl`, a feed, the guard's blocks) of IPv4
    /// prefixes wider than /N; the operator's own files are not restricted.
    #[arg(long, value_name = "N", default_value_t = sluice_rules::safety::DEFAULT_MIN_PREFIX_V4)]
    pub min_prefix_v4: u8,
    /// Refuse runtime adds of IPv6 prefixes wider than /N.
    #[arg(long, value_name = "N", default_value_t = sluice_rules::safety::DEFAULT_MIN_PREFIX_V6)]
    pub min_prefix_v6: u8,
}

impl SafetyArgs {
    /// The never-block file read (a bad line stops the start, named), the
    /// widths checked.
    pub fn load(&self) -> Result<Arc<sluice_control::safety::Safety>> {
        let s =
            sluice_control::safety::Safety::load(self.never_block.as_deref(), self.min_prefix_v4, self.min_prefix_v6)
                .map_err(anyhow::Error::msg)?;
        if let Some(p) = &self.never_block {
            tracing::info!("--never-block {}: {} entries", p.display(), s.net().never.len());
        }
        Ok(Arc::new(s))
    }
}

/// Samples of the drops (shared by `filter` and `bridge`), written off the
/// fast path; a full queue loses samples on a live port, never packets, and
/// makes `filter` wait instead.
#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// Write dropped frames to FILE (pcapng), each with a comment naming the
    /// rule (line and text), the set, the ingress port and the worker.
    #[arg(long, value_name = "FILE")]
    pub sample_drops: Option<PathBuf>,
    /// Keep 1 in N drops.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_rate: u64,
    /// At most R samples a second (wall clock; 0: no cap).
    #[arg(long, value_name = "R", default_value_t = 100)]
    pub sample_max_pps: u64,
    /// Start a new file when the current one would pass M MiB (the old one becomes NAME-1.pcapng).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_rotate_mb: Option<u64>,
    /// Files kept when rotating, the current one included.
    #[arg(long, value_name = "K", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub sample_keep: u64,
    /// Write the same samples as JSON lines on stderr.
    #[arg(long)]
    pub log_drops: bool,
}

impl SampleArgs {
    /// The sampler these flags ask for (none without --sample-drops or
    /// --log-drops), before the ports and workers are known.
    pub fn config(&self, backpressure: Backpressure) -> Option<SampleConfig> {
        if self.sample_drops.is_none() && !self.log_drops {
            return None;
        }
        Some(SampleConfig {
            pcapng: self.sample_drops.clone(),
            log: self.log_drops.then(|| Box::new(std::io::stderr()) as Box<dyn std::io::Write + Send>),
            rate: self.sample_rate,
            max_pps: self.sample_max_pps,
            rotate_bytes: self.sample_rotate_mb.map(|m| m << 20),
            keep: self.sample_keep as usize,
            backpressure,
            ..SampleConfig::new()
        })
    }

    /// The sampler these flags ask for, started; `workers` as the judge
    /// runs them, so samples name theirs.
    pub fn start(
        &self,
        rules: &Arc<Published<RuleSet>>,
        ports: Vec<String>,
        workers: usize,
        steer_inner: bool,
        backpressure: Backpressure,
    ) -> Result<Option<Sampler>> {
        let Some(cfg) = self.config(backpressure) else { return Ok(None) };
        let cfg = cfg.for_run(ports, workers, steer_inner);
        Ok(Some(Sampler::start(cfg, Arc::clone(rules)).context("--sample-drops")?))
    }
}

/// `--metrics ADDR`, checked: an address that is not loopback without
/// `--metrics-allow-remote` is a wrong command line.
pub fn metrics_addr(s: &str, allow_remote: bool) -> Result<std::net::SocketAddr> {
    Ok(sluice_metrics::check_addr(s, allow_remote).map_err(|e| crate::Usage(e.to_string()))?)
}

/// `--workers` of bridge: `auto` (a worker per AF_XDP queue: `None`) or 1 to 256.
pub fn bridge_workers(s: &str) -> Result<Option<usize>, String> {
    (s != "auto").then(|| workers(s)).transpose().map_err(|e| format!("{e}, or auto (a worker per queue)"))
}

/// `--workers` of filter and bridge: 1 to 256.
pub fn workers(s: &str) -> Result<usize, String> {
    s.parse().ok().filter(|n| (1..=256).contains(n)).ok_or_else(|| format!("`{s}`: give 1 to 256 workers"))
}

/// How IP fragments are reassembled (shared by `filter` and `bridge`).
#[derive(Args, Debug, Clone)]
pub struct ReassemblyArgs {
    /// Verdict for fragments of datagrams that never complete (timed out,
    /// evicted, or still incomplete at the end of the input).
    #[arg(long, value_enum, default_value = "drop")]
    pub incomplete: VerdictArg,
    /// Reassembly timeout in seconds: of capture time for a file, of wall
    /// clock on a live link.
    #[arg(long, default_value_t = 30)]
    pub frag_timeout: u64,
    /// Most datagrams being reassembled at once (the oldest is evicted beyond).
    #[arg(long, default_value_t = 4096)]
    pub frag_max_datagrams: usize,
}

impl ReassemblyArgs {
    /// The reassembly stage these flags describe.
    pub fn stage(&self) -> Reassembly {
        let c = self.config();
        Reassembly::new(c.limits, c.incomplete)
    }

    /// The reassembly these flags describe, as the bridge takes it.
    pub fn config(&self) -> sluice_bridge::ReassemblyConfig {
        let limits = DefragLimits {
            max_datagrams: self.frag_max_datagrams.max(1),
            timeout_ns: self.frag_timeout.saturating_mul(1_000_000_000),
            ..DefragLimits::default()
        };
        sluice_bridge::ReassemblyConfig { limits, incomplete: self.incomplete.into() }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum VerdictArg {
    Pass,
    Drop,
}

impl From<VerdictArg> for Verdict {
    fn from(v: VerdictArg) -> Verdict {
        match v {
            VerdictArg::Pass => Verdict::Pass,
            VerdictArg::Drop => Verdict::Drop,
        }
    }
}

/// What the generator makes (shared by `gen` and `send`).
#[derive(Args, Debug, Clone)]
pub struct TrafficArgs {
    /// Generator seed: the same seed gives the same frames.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Draw packets from K flows instead of a fresh 5-tuple per packet.
    #[arg(long, value_name = "K")]
    pub flows: Option<u32>,
    /// With --flows: pick flows by Zipf with this exponent (default: uniform).
    #[arg(long, value_name = "S", requires = "flows")]
    pub zipf: Option<f64>,
    /// Share of IPv6 packets (0-1).
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub ipv6: f64,
    /// Protocol weights TCP:UDP:ICMP.
    #[arg(long, default_value = "6:3:1", value_parser = ProtoMix::parse)]
    pub mix: ProtoMix,
    /// Frame size in bytes (without FCS), or "imix" (7x60, 4x590, 1x1514).
    #[arg(long, default_value = "60", value_parser = FrameSize::parse)]
    pub size: FrameSize,
    /// Share of frames with one 802.1Q tag.
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub vlan: f64,
    /// Share of frames with QinQ tags (802.1ad outer, 802.1Q inner).
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub qinq: f64,
    /// Share of frames whose source comes from the list; all other addresses avoid it.
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub listed: f64,
    /// Address list for --listed (default: the embedded FireHOL level1 list).
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
    /// Share of datagrams sent as IP fragments.
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub frag: f64,
    /// Wrap packets in an encapsulation: mpls, pppoe, gre, ipip, 6in4, 4in6,
    /// 6in6, vxlan, geneve, gtpu. The generated packet becomes the inner one;
    /// tunnels' outer addresses avoid the list. ipip and 4in6 make every
    /// packet IPv4, 6in4 and 6in6 every packet IPv6.
    #[arg(long, value_name = "NAME")]
    pub encap: Option<Encap>,
    /// With --encap: share of datagrams wrapped (default: all).
    #[arg(long, value_name = "F", default_value_t = 1.0, requires = "encap", value_parser = share)]
    pub encap_share: f64,
}

impl TrafficArgs {
    /// The generator's configuration for `count` frames.
    pub fn config(&self, count: u64) -> Result<GenConfig> {
        let list =
            if self.listed > 0.0 || self.list.is_some() { list_or_firehol(self.list.as_deref())? } else { Vec::new() };
        Ok(GenConfig {
            count,
            seed: self.seed,
            flows: self.flows.map(|k| (k, self.zipf.map_or(FlowDist::Uniform, FlowDist::Zipf))),
            ipv6_share: self.ipv6,
            mix: self.mix,
            size: self.size,
            vlan_share: self.vlan,
            qinq_share: self.qinq,
            listed_share: self.listed,
            list,
            frag_share: self.frag,
            encap: self.encap,
            encap_share: self.encap_share,
            ..GenConfig::default()
        })
    }
}

/// A share: a number from 0 to 1 (a flag's value; out of range is a
/// usage error, exit 2).
pub fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is not a share: give a number from 0 to 1")),
        Err(_) => Err(format!("`{s}` is not a number from 0 to 1")),
    }
}

/// Load a list file, or the embedded FireHOL list when `path` is `None`.
pub fn list_or_firehol(path: Option<&Path>) -> Result<Vec<Prefix>> {
    Ok(match path {
        Some(p) => load_list(p, false)?.prefixes,
        None => parse_list("firehol_level1.netset (embedded)", FIREHOL_LEVEL1.as_bytes(), false)?.prefixes,
    })
}

/// https to a CrowdSec LAPI: the bridge's bouncer and the guard's watcher
/// (each command puts what names the LAPI in the group `crowdsec_lapi`).
#[derive(Args, Debug, Clone)]
pub struct LapiTlsArgs {
    /// https: the CA certificate(s) the LAPI's certificate must chain to (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "crowdsec_lapi")]
    pub crowdsec_ca: Option<PathBuf>,
    /// https: authenticate with this client certificate (PEM) instead of an API key or a password.
    #[arg(long, value_name = "FILE", requires = "crowdsec_key", group = "crowdsec_auth")]
    pub crowdsec_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "crowdsec_cert")]
    pub crowdsec_key: Option<PathBuf>,
}

impl LapiTlsArgs {
    pub fn lapi_tls(self) -> sluice_control::lapi::LapiTls {
        sluice_control::lapi::LapiTls { ca: self.crowdsec_ca, cert: self.crowdsec_cert, key: self.crowdsec_key }
    }
}

/// A CrowdSec bouncer's flags (`bridge`, `shield`): where the LAPI is (a
/// flag, or the firewall bouncer's config), how to authenticate (likewise;
/// either gives both), which decisions, into which set.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("crowdsec_lapi").multiple(true).args(["crowdsec_url", "crowdsec_config"])))]
#[command(group(
    clap::ArgGroup::new("crowdsec_creds").multiple(true).args(["crowdsec_key_file", "crowdsec_cert", "crowdsec_config"])
))]
pub struct CrowdsecArgs {
    /// Act as a CrowdSec bouncer: stream ban decisions from this Local API
    /// (http://127.0.0.1:8080, or https://...) into --crowdsec-set.
    #[arg(long, value_name = "URL", requires = "crowdsec_creds")]
    pub crowdsec_url: Option<String>,
    /// Act as a CrowdSec bouncer as CrowdSec's firewall bouncer's config
    /// says (/etc/crowdsec/bouncers/crowdsec-firewall-bouncer.yaml, with
    /// FILE.local over it): its api_url, api_key, update_frequency, TLS
    /// paths, origins, scopes, scenario filters and decision types. The
    /// --crowdsec-* flags given win over the file's keys; its firewall and
    /// log keys are ignored (one warning), an unknown key is an error.
    #[arg(long, value_name = "FILE")]
    pub crowdsec_config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub lapi_tls: LapiTlsArgs,
    /// A file holding the bouncer's API key (`cscli bouncers add NAME -o raw`).
    #[arg(long, value_name = "FILE", requires = "crowdsec_lapi", group = "crowdsec_auth")]
    pub crowdsec_key_file: Option<std::path::PathBuf>,
    /// Seconds between pulls of new and deleted decisions (default 10).
    #[arg(long, value_name = "S")]
    pub crowdsec_interval: Option<f64>,
    /// Seconds between full pulls, which repair what the stream missed.
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    pub crowdsec_resync: f64,
    /// Seconds between pushes of drops by origin to the LAPI's usage metrics (0: none).
    #[arg(long, value_name = "S", default_value_t = sluice_policy::usage::DEFAULT_METRICS_INTERVAL)]
    pub crowdsec_metrics_interval: f64,
    /// The dynamic set the decisions go into: with --rules, define it
    /// (`set crowdsec dynamic`) and use it (`drop saddr @crowdsec`); with
    /// the --drop-* shorthands or no rules, its sources are dropped.
    #[arg(long, value_name = "NAME", default_value = "crowdsec")]
    pub crowdsec_set: String,
    /// The largest answer read from the LAPI, in bytes: a larger one is
    /// refused whole (nothing applied, retried at the next pull).
    #[arg(long, value_name = "BYTES", default_value_t = sluice_policy::crowdsec::DEFAULT_MAX_ANSWER)]
    pub crowdsec_max_answer: u64,
    /// Only decisions of these origins (crowdsec, cscli, CAPI, lists, ...;
    /// comma-separated), as the LAPI filters its stream.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_origins: Vec<String>,
    /// Only decisions of these scopes (ip, range; comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scopes: Vec<String>,
    /// Only decisions whose scenario contains one of these (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scenarios_containing: Vec<String>,
    /// Only decisions whose scenario contains none of these (comma-separated).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_scenarios_not_containing: Vec<String>,
    /// The decision types enforced as bans (comma-separated; default ban;
    /// the firewall bouncer's supported_decisions_types); others are counted.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "crowdsec_lapi")]
    pub crowdsec_types: Vec<String>,
    /// The most elements --crowdsec-set holds (default 500000, unless its
    /// definition says `maxelem N`): decisions past it are refused and
    /// counted (sluice_set_refused{reason="full"}), the rest applied.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub crowdsec_maxelem: Option<u32>,
}

impl CrowdsecArgs {
    /// The bouncer these flags (and the bouncer's config file, when given)
    /// ask for, its Country and AS bans read from `geo_db`; and the
    /// feed set's `--crowdsec-maxelem`.
    pub fn bouncer(
        &self,
        geo_db: &[std::path::PathBuf],
    ) -> Result<(Option<sluice_policy::crowdsec::BouncerConfig>, Option<u32>)> {
        use sluice_policy::crowdsec::{ApiKey, BouncerConfig, GeoScopes, StreamFilters};
        let a = self.clone();
        let flags = sluice_policy::crowdsec_config::BouncerFlags {
            url: a.crowdsec_url,
            key: a.crowdsec_key_file.map(ApiKey::File),
            tls: a.lapi_tls.lapi_tls(),
            interval: a.crowdsec_interval,
            filters: StreamFilters {
                origins: a.crowdsec_origins,
                scopes: a.crowdsec_scopes,
                scenarios_containing: a.crowdsec_scenarios_containing,
                scenarios_not_containing: a.crowdsec_scenarios_not_containing,
            },
            types: a.crowdsec_types,
            maxelem: a.crowdsec_maxelem,
            from_file: Vec::new(),
        };
        // The firewall bouncer's config fills in what the flags do not give.
        let flags = match &a.crowdsec_config {
            Some(file) => sluice_policy::crowdsec_config::CrowdsecFile::load(file)
                .and_then(|f| f.apply(flags))
                .map_err(anyhow::Error::msg)?,
            None => flags,
        };
        let maxelem = flags.maxelem;
        let metrics_interval =
            sluice_policy::usage::metrics_interval(a.crowdsec_metrics_interval).map_err(anyhow::Error::msg)?;
        let crowdsec = flags
            .bouncer(a.crowdsec_resync, &a.crowdsec_set, a.crowdsec_max_answer)
            .map_err(anyhow::Error::msg)?
            .map(|c| BouncerConfig { geo: GeoScopes::for_files(geo_db), metrics_interval, ..c });
        Ok((crowdsec, maxelem))
    }
}

/// The control socket's flags (`bridge`, `shield`).
#[derive(Args, Debug, Clone)]
pub struct ControlArgs {
    /// Serve the control socket (`sluice ctl`) at PATH: runtime set
    /// changes, queries, reloads. Mode 0600: root and this user only.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Let members of group G use every command of the control socket
    /// too (mode 0660).
    #[arg(long, value_name = "G", requires = "control")]
    pub control_group: Option<String>,
    /// Let members of group G add, test and list only (what a guard
    /// forwarding its blocks, or a fail2ban action that only bans, needs).
    #[arg(long, value_name = "G", requires = "control")]
    pub control_add_group: Option<String>,
}
