use crate::progress;
use crate::Outcome;
use anyhow::Result;
use clap::Args;
use sluice_gen::{Encap, FlowDist, FrameSize, GenConfig, GenStats, ProtoMix};
use sluice_rules::{load_list, parse_list, Prefix, FIREHOL_LEVEL1};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Output capture (pcap; `-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Frames to write (each IP fragment is one frame).
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    #[command(flatten)]
    pub traffic: TrafficArgs,
    /// Send each fragmented datagram's fragments in random order.
    #[arg(long)]
    pub frag_shuffle: bool,
    /// Share of fragmented datagrams with one fragment sent twice.
    #[arg(long, default_value_t = 0.0)]
    pub frag_dup: f64,
    /// Write nanosecond timestamps (default: microseconds).
    #[arg(long)]
    pub nanos: bool,
    /// Print what was generated as one JSON object.
    #[arg(long)]
    pub json: bool,
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
    #[arg(long, default_value_t = 0.0)]
    pub ipv6: f64,
    /// Protocol weights TCP:UDP:ICMP.
    #[arg(long, default_value = "6:3:1", value_parser = parse_mix)]
    pub mix: ProtoMix,
    /// Frame size in bytes (without FCS), or "imix" (7x60, 4x590, 1x1514).
    #[arg(long, default_value = "60", value_parser = parse_size)]
    pub size: FrameSize,
    /// Share of frames with one 802.1Q tag.
    #[arg(long, default_value_t = 0.0)]
    pub vlan: f64,
    /// Share of frames with QinQ tags (802.1ad outer, 802.1Q inner).
    #[arg(long, default_value_t = 0.0)]
    pub qinq: f64,
    /// Share of frames whose source comes from the list; all other addresses avoid it.
    #[arg(long, default_value_t = 0.0)]
    pub listed: f64,
    /// Address list for --listed (default: the embedded FireHOL level1 list).
    #[arg(long, value_name = "LIST")]
    pub list: Option<PathBuf>,
    /// Share of datagrams sent as IP fragments.
    #[arg(long, default_value_t = 0.0)]
    pub frag: f64,
    /// Wrap packets in an encapsulation: mpls, pppoe, gre, ipip, 6in4, 4in6,
    /// 6in6, vxlan, geneve, gtpu. The generated packet becomes the inner one;
    /// tunnels' outer addresses avoid the list. ipip and 4in6 make every
    /// packet IPv4, 6in4 and 6in6 every packet IPv6.
    #[arg(long, value_name = "NAME")]
    pub encap: Option<Encap>,
    /// With --encap: share of datagrams wrapped (default: all).
    #[arg(long, value_name = "F", default_value_t = 1.0, requires = "encap")]
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

fn parse_mix(s: &str) -> Result<ProtoMix, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [t, u, i] = parts[..] else {
        return Err("expected TCP:UDP:ICMP weights, e.g. 6:3:1".into());
    };
    let n = |x: &str| x.trim().parse::<u32>().map_err(|_| format!("weight {x:?} is not a whole number"));
    Ok(ProtoMix { tcp: n(t)?, udp: n(u)?, icmp: n(i)? })
}

fn parse_size(s: &str) -> Result<FrameSize, String> {
    if s.eq_ignore_ascii_case("imix") {
        return Ok(FrameSize::Imix);
    }
    match s.parse::<u16>() {
        Ok(n) if (60..=9000).contains(&n) => Ok(FrameSize::Fixed(n)),
        _ => Err(format!("{s:?} is neither \"imix\" nor a frame size from 60 to 9000")),
    }
}

/// Load a list file, or the embedded FireHOL list when `path` is `None`.
pub fn list_or_firehol(path: Option<&Path>) -> Result<Vec<Prefix>> {
    Ok(match path {
        Some(p) => load_list(p, false)?.prefixes,
        None => parse_list("firehol_level1.netset (embedded)", FIREHOL_LEVEL1.as_bytes(), false)?.prefixes,
    })
}

pub fn run(a: GenArgs) -> Result<Outcome> {
    let cfg = GenConfig { frag_shuffle: a.frag_shuffle, frag_dup_share: a.frag_dup, ..a.traffic.config(a.count)? };
    let started = Instant::now();
    let stats = write_capture(cfg, &a.out, a.nanos, true)?;
    let elapsed = started.elapsed().as_secs_f64();
    // With the capture on standard output, what is said about it goes to stderr.
    let to_stdout = sluice_pcap::stdio::is_stdio(&a.out);
    let text = if a.json {
        stats_json(&stats, Some(&a.out), elapsed).to_string()
    } else {
        stats_text(&stats, &a.out, elapsed)
    };
    if to_stdout {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
    Ok(Outcome::Complete)
}

/// Generate `cfg` into a pcap file at `out` (`-`: standard output), with a
/// progress bar on a terminal.
pub fn write_capture(cfg: GenConfig, out: &Path, nanos: bool, show_progress: bool) -> Result<GenStats> {
    let pb = progress::bar(cfg.count, false, show_progress);
    let stats = sluice_gen::write_capture(cfg, out, nanos, |n| pb.set_position(n))?;
    pb.finish_and_clear();
    Ok(stats)
}

pub fn stats_json(s: &GenStats, out: Option<&Path>, elapsed_s: f64) -> serde_json::Value {
    serde_json::json!({
        "out": out.map(|p| p.display().to_string()),
        "packets": s.packets,
        "bytes": s.bytes,
        "listed": s.listed,
        "ipv4": s.ipv4,
        "ipv6": s.ipv6,
        "tcp": s.tcp,
        "udp": s.udp,
        "icmp": s.icmp,
        "fragments": s.fragments,
        "fragmented_datagrams": s.fragmented_datagrams,
        "duplicated_fragments": s.duplicated_fragments,
        "vlan_tagged": s.vlan_tagged,
        "qinq_tagged": s.qinq_tagged,
        "encapsulated": s.encapsulated,
        "elapsed_s": elapsed_s,
    })
}

fn stats_text(s: &GenStats, out: &Path, elapsed_s: f64) -> String {
    let mut t = format!("wrote {} packets ({} bytes) to {} in {:.2} s\n", s.packets, s.bytes, out.display(), elapsed_s);
    t += &format!("  ipv4 {}  ipv6 {}  tcp {}  udp {}  icmp {}\n", s.ipv4, s.ipv6, s.tcp, s.udp, s.icmp);
    t += &format!(
        "  vlan-tagged {} (qinq {})  fragments {} of {} datagrams",
        s.vlan_tagged, s.qinq_tagged, s.fragments, s.fragmented_datagrams
    );
    if s.encapsulated > 0 {
        t += &format!("\n  encapsulated {}", s.encapsulated);
    }
    if s.listed > 0 {
        t += &format!("\n  sources from the list: {} (a filter on the list drops exactly these)", s.listed);
    }
    t
}
