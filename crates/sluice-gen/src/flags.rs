//! What the generator makes, as flags (`gen`, `send`, `demo`), mapped
//! onto [`GenConfig`] here.

use crate::{Encap, FlowDist, FrameSize, GenConfig, ProtoMix};
use sluice_rules::{load_list, parse_list, Prefix, FIREHOL_LEVEL1};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct TrafficFlags {
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

impl TrafficFlags {
    /// The generator's configuration for `count` frames.
    pub fn config(&self, count: u64) -> anyhow::Result<GenConfig> {
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
pub fn list_or_firehol(path: Option<&Path>) -> anyhow::Result<Vec<Prefix>> {
    Ok(match path {
        Some(p) => load_list(p, false)?.prefixes,
        None => parse_list("firehol_level1.netset (embedded)", FIREHOL_LEVEL1.as_bytes(), false)?.prefixes,
    })
}
