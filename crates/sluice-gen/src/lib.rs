//! A deterministic traffic generator in the spirit of netmap's pkt-gen.
//!
//! Frames are Ethernet II with optional 802.1Q / QinQ tags, IPv4 or IPv6,
//! carrying TCP, UDP or ICMP echo with correct checksums. Addresses and ports
//! are drawn per packet (uniform) or from K flows (uniform or Zipf). A share
//! of packets can take their source from an address list; every other address
//! is drawn outside that list, so the number of packets a filter on the list
//! must drop is known exactly ([`GenStats::listed`]). A share of datagrams is
//! sent as IP fragments. A share of frames can be wrapped in an
//! encapsulation ([`GenConfig::encap`]): the generated packet becomes the
//! inner one. The same config and seed give the same bytes.
//!
//! The generator does no I/O: it fills a caller's buffer, one frame per
//! call, or a pipeline batch ([`GenSource`]).
#![deny(unsafe_code)]

mod capture;
pub mod demo;
pub mod flags;
pub mod send;
mod source;
pub use capture::{demo_config, write_capture, CaptureError, PROGRESS_EVERY};
pub use source::{GenSource, TimestampOverflow, SNAPLEN};

use rand::distr::{Distribution, Uniform};
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_rules::{Prefix, PrefixHashSet};
use sluice_wire::{
    checksum, ethernet, ethertype, geneve, gre, gtpu, icmp, ip_proto, ipv4, ipv6, mpls, pppoe, tcp, udp, vlan, vxlan,
};

pub use sluice_wire::Encap;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Frame length without FCS below which Ethernet pads.
const MIN_FRAME: usize = 60;
/// Largest IP datagram the generator fragments, and fragment data sizes.
const FRAG_DATAGRAM: (usize, usize) = (600, 4000);
const FRAG_DATA: (usize, usize) = (8, 185); // in 8-byte units: 64..1480 bytes

/// Frame sizes (bytes on the wire without FCS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameSize {
    /// Every frame this long, or as short as its headers allow.
    Fixed(u16),
    /// Simple IMIX: 7 × 60, 4 × 590, 1 × 1514 (64/594/1518 with FCS).
    Imix,
}

/// How flows are picked when the generator uses K flows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FlowDist {
    Uniform,
    /// Zipf with this exponent (1.0 is classic; higher is more skewed).
    Zipf(f64),
}

impl FrameSize {
    /// `imix`, or a frame size from 60 to 9000 bytes (`gen --size`).
    pub fn parse(s: &str) -> Result<FrameSize, String> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(FrameSize::Imix);
        }
        match s.parse::<u16>() {
            Ok(n) if (60..=9000).contains(&n) => Ok(FrameSize::Fixed(n)),
            _ => Err(format!("{s:?} is neither \"imix\" nor a frame size from 60 to 9000")),
        }
    }
}

/// Relative weights of the upper-layer protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtoMix {
    pub tcp: u32,
    pub udp: u32,
    pub icmp: u32,
}

impl ProtoMix {
    /// `TCP:UDP:ICMP` weights, e.g. `6:3:1` (`gen --mix`).
    pub fn parse(s: &str) -> Result<ProtoMix, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let [t, u, i] = parts[..] else {
            return Err("expected TCP:UDP:ICMP weights, e.g. 6:3:1".into());
        };
        let n = |x: &str| x.trim().parse::<u32>().map_err(|_| format!("weight {x:?} is not a whole number"));
        Ok(ProtoMix { tcp: n(t)?, udp: n(u)?, icmp: n(i)? })
    }
}

#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Frames to produce (fragments count one each).
    pub count: u64,
    pub seed: u64,
    /// `Some((k, dist))`: draw packets from K flows; `None`: fresh tuple per packet.
    pub flows: Option<(u32, FlowDist)>,
    /// Share of IPv6 packets among those not taken from the list.
    pub ipv6_share: f64,
    pub mix: ProtoMix,
    pub size: FrameSize,
    /// Share of frames with one 802.1Q tag.
    pub vlan_share: f64,
    /// Share of frames with two tags (802.1ad S-tag then 802.1Q C-tag).
    pub qinq_share: f64,
    /// Share of frames whose source comes from `list`.
    pub listed_share: f64,
    /// The address list for `listed_share`; all other addresses avoid it.
    pub list: Vec<Prefix>,
    /// Share of datagrams sent as fragments.
    pub frag_share: f64,
    /// Send each fragmented datagram's fragments in random order.
    pub frag_shuffle: bool,
    /// Share of fragmented datagrams with one fragment sent twice (the copy
    /// before the datagram's last fragment).
    pub frag_dup_share: f64,
    /// First timestamp, nanoseconds since the epoch, and the gap between frames.
    pub start_ns: u64,
    pub interval_ns: u64,
    /// Wrap frames in this encapsulation; the generated packet (listed
    /// source, ports, fragments) becomes the inner one, and all of a
    /// datagram's fragments are wrapped alike.
    ///
    /// - `mpls`: one or two labels between the Ethernet (and VLAN tags) and
    ///   the IP header; `pppoe`: a session header there.
    /// - `ipip`, `6in4`, `gre` (key and sequence number each present half
    ///   the time), `gtpu`: an outer IPv4 header (UDP 2152 to 2152 for
    ///   GTP-U); `4in6`, `6in6`: an outer IPv6 header. VLAN tags stay on
    ///   the outer Ethernet.
    /// - `vxlan`, `geneve`: outer Ethernet, IPv4, UDP (ephemeral source
    ///   port) and the header; then the generated frame, VLAN tags
    ///   included, as the inner Ethernet frame.
    ///
    /// Outer addresses are drawn outside the list, so a plain address list
    /// judges tunnelled packets by addresses it never holds. `ipip` and
    /// `4in6` carry only IPv4, so with them every packet is IPv4 (and with
    /// `6in4`, `6in6` every packet IPv6), `ipv6_share` notwithstanding.
    /// Frame sizes include the encapsulation: the payload shrinks to make room.
    pub encap: Option<Encap>,
    /// Share of datagrams wrapped in `encap` (default 1: all of them).
    /// Ignored without `encap`.
    pub encap_share: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            count: 1000,
            seed: 1,
            flows: None,
            ipv6_share: 0.0,
            mix: ProtoMix { tcp: 1, udp: 0, icmp: 0 },
            size: FrameSize::Fixed(60),
            vlan_share: 0.0,
            qinq_share: 0.0,
            listed_share: 0.0,
            list: Vec::new(),
            frag_share: 0.0,
            frag_shuffle: false,
            frag_dup_share: 0.0,
            // 2026-01-01T00:00:00Z
            start_ns: 1_767_225_600_000_000_000,
            interval_ns: 1_000,
            encap: None,
            encap_share: 1.0,
        }
    }
}

/// A configuration the generator cannot honour.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("{name} must be between 0 and 1, got {value}")]
    Share { name: &'static str, value: f64 },
    #[error("vlan share plus qinq share exceeds 1")]
    TagShares,
    #[error("protocol mix weights are all zero")]
    EmptyMix,
    #[error("a listed share needs a non-empty address list")]
    EmptyList,
    #[error("the number of flows must be at least 1")]
    NoFlows,
    #[error("Zipf exponent must be positive and finite, got {0}")]
    ZipfExponent(f64),
    #[error("the address list covers all of {0}; no address outside it can be drawn")]
    ListCoversFamily(&'static str),
    #[error("{encap} carries only {family}, but the address list has no {family} entries to draw listed sources from")]
    ListLacksFamily { encap: Encap, family: &'static str },
}

/// What was generated, for checking a filter's result against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenStats {
    pub packets: u64,
    pub bytes: u64,
    /// Frames whose source address was taken from the list (the inner
    /// source for tunnelled frames).
    pub listed: u64,
    pub ipv4: u64,
    pub ipv6: u64,
    pub tcp: u64,
    pub udp: u64,
    pub icmp: u64,
    /// Frames that are IP fragments, and datagrams they came from.
    pub fragments: u64,
    pub fragmented_datagrams: u64,
    /// Fragments sent a second time (counted in `fragments` too).
    pub duplicated_fragments: u64,
    pub vlan_tagged: u64,
    pub qinq_tagged: u64,
    /// Frames wrapped in the configured encapsulation.
    pub encapsulated: u64,
}

impl GenStats {
    /// The counts as `sluice gen --json` prints them (docs/json.md), with
    /// where they went and how long it took.
    pub fn to_json(&self, out: Option<&std::path::Path>, elapsed_s: f64) -> serde_json::Value {
        let s = self;
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
}

/// Per-frame facts the caller may want (for example to write a pcap record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    pub index: u64,
    pub timestamp_ns: u64,
    pub listed: bool,
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    proto: u8,
}

/// How one datagram's frames are wrapped: drawn once per datagram, so its
/// fragments share the outer headers.
#[derive(Clone, Copy, Debug)]
struct Wrap {
    encap: Encap,
    /// Outer addresses of a tunnel, outside the list.
    outer_src: IpAddr,
    outer_dst: IpAddr,
    /// MPLS label, PPPoE session id, VXLAN / Geneve VNI or GTP-U TEID.
    id: u32,
    /// A second MPLS label, or the GRE key.
    extra: Option<u32>,
    /// The GRE sequence number.
    seq: Option<u32>,
    /// Outer UDP source port (VXLAN, Geneve, GTP-U).
    sport: u16,
}

impl Wrap {
    /// Bytes the wrapping adds to a frame.
    fn overhead(&self) -> usize {
        let outer_ip = if self.outer_src.is_ipv6() { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
        match self.encap {
            Encap::Mpls => mpls::HEADER_LEN * (1 + usize::from(self.extra.is_some())),
            Encap::Pppoe => pppoe::HEADER_LEN,
            Encap::Ipip | Encap::SixIn4 | Encap::FourIn6 | Encap::SixIn6 => outer_ip,
            Encap::Gre => outer_ip + self.gre().buffer_len(),
            Encap::Vxlan => outer_ip + udp::HEADER_LEN + vxlan::HEADER_LEN + ethernet::HEADER_LEN,
            Encap::Geneve => outer_ip + udp::HEADER_LEN + geneve::MIN_HEADER_LEN + ethernet::HEADER_LEN,
            Encap::GtpU => outer_ip + udp::HEADER_LEN + gtpu::MIN_HEADER_LEN,
        }
    }

    fn gre(&self) -> gre::Repr {
        // The protocol is set per frame from the inner family.
        gre::Repr { protocol: 0, checksum: false, key: self.extra, seq: self.seq }
    }
}

/// The only IP version an encapsulation carries, if it is particular.
fn carried_family(encap: Option<Encap>) -> Option<bool> {
    match encap? {
        Encap::Ipip | Encap::FourIn6 => Some(false),
        Encap::SixIn4 | Encap::SixIn6 => Some(true),
        _ => None,
    }
}

/// A datagram's frames waiting to be handed out, and whether it was listed.
struct Pending {
    frames: VecDeque<Vec<u8>>,
    listed: bool,
}

pub struct Generator {
    cfg: GenConfig,
    rng: ChaCha8Rng,
    avoid: PrefixHashSet,
    listed_v4: Vec<Prefix>,
    listed_v6: Vec<Prefix>,
    flows: Vec<Flow>,
    zipf: Option<rand_distr::Zipf<f64>>,
    pending: Option<Pending>,
    produced: u64,
    stats: GenStats,
}

impl Generator {
    pub fn new(cfg: GenConfig) -> Result<Self, ConfigError> {
        for (name, value) in [
            ("ipv6 share", cfg.ipv6_share),
            ("vlan share", cfg.vlan_share),
            ("qinq share", cfg.qinq_share),
            ("listed share", cfg.listed_share),
            ("fragment share", cfg.frag_share),
            ("duplicate fragment share", cfg.frag_dup_share),
            ("encapsulation share", cfg.encap_share),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::Share { name, value });
            }
        }
        if cfg.vlan_share + cfg.qinq_share > 1.0 {
            return Err(ConfigError::TagShares);
        }
        if cfg.mix.tcp == 0 && cfg.mix.udp == 0 && cfg.mix.icmp == 0 {
            return Err(ConfigError::EmptyMix);
        }
        if cfg.listed_share > 0.0 && cfg.list.is_empty() {
            return Err(ConfigError::EmptyList);
        }
        let mut cfg = cfg;
        if let (Some(encap), Some(v6)) = (cfg.encap, carried_family(cfg.encap)) {
            cfg.ipv6_share = if v6 { 1.0 } else { 0.0 };
            let family = if v6 { "IPv6" } else { "IPv4" };
            if cfg.listed_share > 0.0 && !cfg.list.iter().any(|p| matches!(p, Prefix::V6 { .. }) == v6) {
                return Err(ConfigError::ListLacksFamily { encap, family });
            }
        }
        let avoid = PrefixHashSet::from_prefixes(&cfg.list);
        let zipf = match cfg.flows {
            Some((0, _)) => return Err(ConfigError::NoFlows),
            Some((k, FlowDist::Zipf(s))) => {
                if !(s.is_finite() && s > 0.0) {
                    return Err(ConfigError::ZipfExponent(s));
                }
                Some(rand_distr::Zipf::new(f64::from(k), s).map_err(|_| ConfigError::ZipfExponent(s))?)
            }
            _ => None,
        };
        let listed_v4 = cfg.list.iter().filter(|p| matches!(p, Prefix::V4 { .. })).copied().collect();
        let listed_v6 = cfg.list.iter().filter(|p| matches!(p, Prefix::V6 { .. })).copied().collect();
        let mut g = Generator {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            avoid,
            listed_v4,
            listed_v6,
            flows: Vec::new(),
            zipf,
            pending: None,
            produced: 0,
            stats: GenStats::default(),
            cfg,
        };
        // Rejection sampling must be able to find addresses outside the list:
        // require at least 1 in 256 random draws to succeed.
        for (v6, family) in [(false, "IPv4"), (true, "IPv6")] {
            let outside = (0..4096)
                .filter(|_| {
                    let a = g.draw_addr(v6);
                    !g.avoid.contains(a)
                })
                .count();
            if outside < 16 {
                return Err(ConfigError::ListCoversFamily(family));
            }
        }
        if let Some((k, _)) = g.cfg.flows {
            g.flows = (0..k).map(|_| g.random_flow()).collect();
        }
        Ok(g)
    }

    pub fn stats(&self) -> &GenStats {
        &self.stats
    }

    /// Write the next frame into `buf` (cleared first). `None` when done.
    pub fn next_frame(&mut self, buf: &mut Vec<u8>) -> Option<FrameInfo> {
        if self.produced >= self.cfg.count {
            return None;
        }
        buf.clear();
        let listed = match self.pending.as_mut().and_then(|p| p.frames.pop_front().map(|f| (f, p.listed))) {
            Some((frame, listed)) => {
                buf.extend_from_slice(&frame);
                listed
            }
            None => self.new_datagram(buf),
        };
        if self.pending.as_ref().is_some_and(|p| p.frames.is_empty()) {
            self.pending = None;
        }
        let info = FrameInfo {
            index: self.produced,
            timestamp_ns: self.cfg.start_ns + self.produced * self.cfg.interval_ns,
            listed,
        };
        self.produced += 1;
        self.stats.packets += 1;
        self.stats.bytes += buf.len() as u64;
        self.stats.listed += u64::from(listed);
        Some(info)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p)
    }

    /// Any IPv4 address, or an IPv6 global unicast one (2000::/3).
    fn draw_addr(&mut self, v6: bool) -> IpAddr {
        if v6 {
            let bits: u128 = self.rng.random();
            IpAddr::V6(Ipv6Addr::from((bits >> 3) | (1u128 << 125)))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.rng.next_u32()))
        }
    }

    /// A random address outside the list.
    fn random_addr(&mut self, v6: bool) -> IpAddr {
        loop {
            let a = self.draw_addr(v6);
            if !self.avoid.contains(a) {
                return a;
            }
        }
    }

    /// A random host inside a random list entry of the family, or of any family.
    fn listed_addr(&mut self, v6: Option<bool>) -> IpAddr {
        let pool = match v6 {
            Some(true) if !self.listed_v6.is_empty() => &self.listed_v6,
            Some(false) if !self.listed_v4.is_empty() => &self.listed_v4,
            _ => &self.cfg.list,
        };
        let p = pool[self.rng.random_range(0..pool.len())];
        let host: u128 = self.rng.random();
        match p {
            Prefix::V4 { addr, len } => {
                let hostmask = if len == 32 { 0 } else { u32::MAX >> len };
                IpAddr::V4(Ipv4Addr::from(addr | (host as u32 & hostmask)))
            }
            Prefix::V6 { addr, len } => {
                let hostmask = if len == 128 { 0 } else { u128::MAX >> len };
                IpAddr::V6(Ipv6Addr::from(addr | (host & hostmask)))
            }
        }
    }

    fn random_proto(&mut self) -> u8 {
        let m = self.cfg.mix;
        let r = self.rng.random_range(0..m.tcp + m.udp + m.icmp);
        if r < m.tcp {
            ip_proto::TCP
        } else if r < m.tcp + m.udp {
            ip_proto::UDP
        } else {
            ip_proto::ICMP
        }
    }

    fn random_flow(&mut self) -> Flow {
        let v6 = self.chance(self.cfg.ipv6_share);
        let proto = self.random_proto();
        const SERVICES: [u16; 6] = [80, 443, 53, 123, 22, 8080];
        let dport = if self.rng.random_bool(0.7) {
            SERVICES[self.rng.random_range(0..SERVICES.len())]
        } else {
            self.rng.random_range(1..=u16::MAX)
        };
        // The decoder walks UDP to these ports as tunnels (tshark either
        // port): random payload there would read as a damaged tunnel header.
        let off_tunnel_ports = |port: u16| match port {
            vxlan::PORT | geneve::PORT | gtpu::PORT => port + 1,
            other => other,
        };
        Flow {
            src: self.random_addr(v6),
            dst: self.random_addr(v6),
            sport: off_tunnel_ports(self.rng.random_range(1024..=u16::MAX)),
            dport: off_tunnel_ports(dport),
            proto,
        }
    }

    fn pick_flow(&mut self) -> Flow {
        if self.flows.is_empty() {
            return self.random_flow();
        }
        let i = match self.zipf {
            Some(z) => (z.sample(&mut self.rng) as usize).saturating_sub(1).min(self.flows.len() - 1),
            None => Uniform::new(0, self.flows.len()).map(|u| u.sample(&mut self.rng)).unwrap_or(0),
        };
        self.flows[i]
    }

    fn frame_target(&mut self) -> usize {
        match self.cfg.size {
            FrameSize::Fixed(n) => usize::from(n),
            FrameSize::Imix => match self.rng.random_range(0..12) {
                0..=6 => 60,
                7..=10 => 590,
                _ => 1514,
            },
        }
    }

    /// Build one datagram; write its first frame to `buf`, queue the rest.
    fn new_datagram(&mut self, buf: &mut Vec<u8>) -> bool {
        let mut flow = self.pick_flow();
        let listed = self.chance(self.cfg.listed_share);
        if listed {
            let want_v6 = match carried_family(self.cfg.encap) {
                Some(v6) => Some(v6),
                None if self.flows.is_empty() => None,
                None => Some(flow.src.is_ipv6()),
            };
            flow.src = self.listed_addr(want_v6);
            if flow.src.is_ipv6() != flow.dst.is_ipv6() {
                flow.dst = self.random_addr(flow.src.is_ipv6());
            }
        }
        let v6 = flow.src.is_ipv6();
        let tags = self.random_tags();
        // Drawn only with an encapsulation configured, so that seeds
        // without one give the frames they always gave.
        let encap = self.cfg.encap;
        let wrap = match encap {
            Some(e) if self.chance(self.cfg.encap_share) => Some(self.draw_wrap(e)),
            _ => None,
        };
        let link_len = ethernet::HEADER_LEN + tags.len() * vlan::HEADER_LEN + wrap.map_or(0, |w| w.overhead());
        let ip_len = if v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
        let l4_header = match flow.proto {
            ip_proto::TCP => tcp::HEADER_LEN,
            ip_proto::UDP => udp::HEADER_LEN,
            _ => icmp::HEADER_LEN,
        };
        let remaining = self.cfg.count - self.produced;
        let fragment = remaining >= 2 && self.chance(self.cfg.frag_share);
        let payload_len = if fragment {
            self.rng.random_range(FRAG_DATAGRAM.0..FRAG_DATAGRAM.1) - l4_header
        } else {
            self.frame_target().saturating_sub(link_len + ip_len + l4_header)
        };
        let upper = self.upper_layer(&flow, payload_len);
        let proto = if flow.proto == ip_proto::ICMP && v6 { ip_proto::ICMPV6 } else { flow.proto };
        let ident: u32 = self.rng.random();
        let hop = 64;
        if !fragment {
            let d = Datagram { flow: &flow, proto, hop, ident, frag: None, data: &upper };
            self.frame(buf, &tags, &d, wrap.as_ref());
            return listed;
        }
        // Split the upper-layer bytes into 8-byte aligned pieces, at least two,
        // no more than the frames left to produce.
        let dup = remaining >= 3 && self.chance(self.cfg.frag_dup_share);
        let mut unit = 8 * self.rng.random_range(FRAG_DATA.0..=FRAG_DATA.1);
        let max_frags = remaining.min(64) as usize - usize::from(dup);
        unit = unit.max(upper.len().div_ceil(max_frags).next_multiple_of(8));
        if unit >= upper.len() {
            unit = (upper.len() / 2).next_multiple_of(8).max(8);
        }
        let mut frames = VecDeque::new();
        let mut off = 0;
        while off < upper.len() {
            let end = (off + unit).min(upper.len());
            let more = end < upper.len();
            let mut f = Vec::with_capacity(link_len + ip_len + 8 + end - off);
            let piece = &upper[off..end];
            let d = Datagram { flow: &flow, proto, hop, ident, frag: Some((off as u16, more)), data: piece };
            self.frame(&mut f, &tags, &d, wrap.as_ref());
            frames.push_back(f);
            off = end;
        }
        if self.cfg.frag_shuffle {
            frames.make_contiguous().shuffle(&mut self.rng);
        }
        if dup {
            // A copy of a fragment, sent after it and before the datagram's
            // last fragment, so it arrives while the datagram is still being
            // reassembled (a copy after completion would start a datagram of
            // its own, which never completes).
            let n = frames.len();
            let original = self.rng.random_range(0..n - 1);
            let at = self.rng.random_range(original + 1..n);
            let copy = frames[original].clone();
            frames.insert(at, copy);
            self.stats.duplicated_fragments += 1;
        }
        self.stats.fragments += frames.len() as u64;
        self.stats.fragmented_datagrams += 1;
        let first = frames.pop_front().unwrap_or_default();
        buf.extend_from_slice(&first);
        self.pending = Some(Pending { frames, listed });
        listed
    }

    /// The outer headers' values for one datagram in `encap`.
    fn draw_wrap(&mut self, encap: Encap) -> Wrap {
        let outer_v6 = matches!(encap, Encap::FourIn6 | Encap::SixIn6);
        let (outer_src, outer_dst) = if encap.is_tunnel() {
            (self.random_addr(outer_v6), self.random_addr(outer_v6))
        } else {
            (IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        };
        let mut w = Wrap { encap, outer_src, outer_dst, id: 0, extra: None, seq: None, sport: 0 };
        match encap {
            // Labels 0-15 are reserved.
            Encap::Mpls => {
                w.id = self.rng.random_range(16..1 << 20);
                w.extra = self.rng.random_bool(0.5).then(|| self.rng.random_range(16..1 << 20));
            }
            Encap::Pppoe => w.id = self.rng.random_range(1..=0xffff),
            Encap::Gre => {
                w.extra = self.rng.random_bool(0.5).then(|| self.rng.random());
                w.seq = self.rng.random_bool(0.5).then(|| self.rng.random());
            }
            Encap::Vxlan | Encap::Geneve => {
                w.id = self.rng.random_range(1..1 << 24);
                w.sport = self.rng.random_range(49152..=u16::MAX);
            }
            Encap::GtpU => {
                w.id = self.rng.random();
                w.sport = gtpu::PORT;
            }
            Encap::Ipip | Encap::SixIn4 | Encap::FourIn6 | Encap::SixIn6 => {}
        }
        w
    }

    fn random_tags(&mut self) -> Vec<u16> {
        let r: f64 = self.rng.random();
        if r < self.cfg.qinq_share {
            vec![self.rng.random_range(1..4095), self.rng.random_range(1..4095)]
        } else if r < self.cfg.qinq_share + self.cfg.vlan_share {
            vec![self.rng.random_range(1..4095)]
        } else {
            Vec::new()
        }
    }

    /// The L4 header and payload with a correct checksum over the whole datagram.
    fn upper_layer(&mut self, flow: &Flow, payload_len: usize) -> Vec<u8> {
        let v6 = flow.src.is_ipv6();
        let (hdr, proto) = match flow.proto {
            ip_proto::TCP => (tcp::HEADER_LEN, ip_proto::TCP),
            ip_proto::UDP => (udp::HEADER_LEN, ip_proto::UDP),
            _ => (icmp::HEADER_LEN, if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP }),
        };
        let mut seg = vec![0u8; hdr + payload_len];
        let fill = (self.produced as u8).wrapping_mul(31);
        for (i, b) in seg[hdr..].iter_mut().enumerate() {
            *b = fill.wrapping_add(i as u8);
        }
        let pseudo = match (flow.src, flow.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_header_v4(s, d, proto, seg.len() as u32),
            (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_header_v6(s, d, proto, seg.len() as u32),
            _ => unreachable!("flows never mix families"),
        };
        match proto {
            ip_proto::TCP => {
                const FLAGS: [u16; 4] = [
                    tcp::flags::SYN,
                    tcp::flags::ACK,
                    tcp::flags::ACK | tcp::flags::PSH,
                    tcp::flags::FIN | tcp::flags::ACK,
                ];
                tcp::Repr {
                    src_port: flow.sport,
                    dst_port: flow.dport,
                    seq: self.rng.random(),
                    ack: self.rng.random(),
                    flags: FLAGS[self.rng.random_range(0..FLAGS.len())],
                    window: 65535,
                    urgent: 0,
                }
                .emit(&mut seg);
                tcp::Packet::new_unchecked(&mut seg[..]).fill_checksum(pseudo);
            }
            ip_proto::UDP => {
                udp::Repr { src_port: flow.sport, dst_port: flow.dport, length: seg.len() as u16 }.emit(&mut seg);
                udp::Packet::new_unchecked(&mut seg[..]).fill_checksum(pseudo);
            }
            _ => {
                let msg_type = if v6 { icmp::V6_ECHO_REQUEST } else { icmp::V4_ECHO_REQUEST };
                icmp::EchoRepr { msg_type, ident: flow.sport, seq: self.produced as u16 }.emit(&mut seg);
                icmp::Packet::new_unchecked(&mut seg[..]).fill_checksum(if v6 { pseudo } else { 0 });
            }
        }
        seg
    }

    /// Append one Ethernet frame carrying `d` (a whole datagram's upper
    /// layer, or one fragment of it), wrapped as `wrap` says.
    fn frame(&mut self, out: &mut Vec<u8>, tags: &[u16], d: &Datagram, wrap: Option<&Wrap>) {
        let start = out.len();
        let net = if d.flow.src.is_ipv6() { ethertype::IPV6 } else { ethertype::IPV4 };
        match wrap {
            None => {
                self.link(out, tags, d.flow.src, d.flow.dst, net);
                self.datagram(out, d);
            }
            Some(w) if !w.encap.is_tunnel() => self.shimmed(out, tags, d, w, net),
            Some(w) => self.tunnelled(out, tags, d, w, net),
        }
        self.stats.encapsulated += u64::from(wrap.is_some());
        if out.len() - start < MIN_FRAME {
            out.resize(start + MIN_FRAME, 0);
        }
    }

    /// The datagram behind an MPLS label stack or a PPPoE session header.
    fn shimmed(&mut self, out: &mut Vec<u8>, tags: &[u16], d: &Datagram, w: &Wrap, net: u16) {
        let (flow, hop) = (d.flow, d.hop);
        let mpls = w.encap == Encap::Mpls;
        let ty = if mpls { ethertype::MPLS_UNICAST } else { ethertype::PPPOE_SESSION };
        self.link(out, tags, flow.src, flow.dst, ty);
        let shim = out.len();
        if mpls {
            let labels = [Some(w.id), w.extra];
            let n = labels.iter().flatten().count();
            for (i, label) in labels.into_iter().flatten().enumerate() {
                let at = out.len();
                out.resize(at + mpls::HEADER_LEN, 0);
                mpls::Repr { label, traffic_class: 0, bottom_of_stack: i + 1 == n, ttl: hop }.emit(&mut out[at..]);
            }
            self.datagram(out, d);
        } else {
            out.resize(shim + pppoe::HEADER_LEN, 0);
            self.datagram(out, d);
            let ppp_protocol = if net == ethertype::IPV6 { pppoe::ppp_proto::IPV6 } else { pppoe::ppp_proto::IPV4 };
            // The length counts the PPP protocol field and what follows.
            let length = (out.len() - shim - pppoe::HEADER_LEN + 2) as u16;
            pppoe::Repr { session_id: w.id as u16, length, ppp_protocol }.emit(&mut out[shim..]);
        }
    }

    /// The datagram in an IP tunnel (IP-in-IP, GRE, or a UDP tunnel:
    /// VXLAN, Geneve, GTP-U), under an outer header of its own family.
    fn tunnelled(&mut self, out: &mut Vec<u8>, tags: &[u16], d: &Datagram, w: &Wrap, net: u16) {
        let (flow, ident) = (d.flow, d.ident);
        let outer_v6 = w.outer_src.is_ipv6();
        let outer_ty = if outer_v6 { ethertype::IPV6 } else { ethertype::IPV4 };
        let outer_len = if outer_v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
        // VXLAN and Geneve carry the generated frame whole, tags included.
        let l2 = matches!(w.encap, Encap::Vxlan | Encap::Geneve);
        self.link(out, if l2 { &[] } else { tags }, w.outer_src, w.outer_dst, outer_ty);
        let outer = out.len();
        out.resize(outer + outer_len, 0);
        let tunnel = out.len();
        let protocol = match w.encap {
            Encap::Ipip | Encap::FourIn6 => ip_proto::IPIP,
            Encap::SixIn4 | Encap::SixIn6 => ip_proto::IPV6,
            Encap::Gre => {
                let r = gre::Repr { protocol: net, ..w.gre() };
                out.resize(tunnel + r.buffer_len(), 0);
                r.emit(&mut out[tunnel..]);
                ip_proto::GRE
            }
            _ => {
                // UDP, then the tunnel header; lengths filled below.
                let hdr = match w.encap {
                    Encap::Vxlan => vxlan::HEADER_LEN,
                    Encap::Geneve => geneve::MIN_HEADER_LEN,
                    _ => gtpu::MIN_HEADER_LEN,
                };
                out.resize(tunnel + udp::HEADER_LEN + hdr, 0);
                ip_proto::UDP
            }
        };
        let inner = out.len();
        if l2 {
            self.link(out, tags, flow.src, flow.dst, net);
        }
        self.datagram(out, d);
        let h = tunnel + udp::HEADER_LEN;
        match w.encap {
            Encap::Vxlan => vxlan::Repr { vni: w.id }.emit(&mut out[h..]),
            Encap::Geneve => geneve::Repr { options_len: 0, protocol: ethertype::TEB, vni: w.id }.emit(&mut out[h..]),
            Encap::GtpU => {
                let length = (out.len() - inner) as u16;
                gtpu::Repr { msg_type: gtpu::MSG_G_PDU, length, teid: w.id, seq: None }.emit(&mut out[h..]);
            }
            _ => {}
        }
        let payload_len = (out.len() - tunnel) as u16;
        let dport = match w.encap {
            Encap::Vxlan => vxlan::PORT,
            Encap::Geneve => geneve::PORT,
            _ => gtpu::PORT,
        };
        if protocol == ip_proto::UDP {
            udp::Repr { src_port: w.sport, dst_port: dport, length: payload_len }.emit(&mut out[tunnel..]);
        }
        let pseudo = outer_ip(&mut out[outer..], w, protocol, payload_len, ident);
        if protocol == ip_proto::UDP {
            udp::Packet::new_unchecked(&mut out[tunnel..]).fill_checksum(pseudo);
        }
    }

    /// Append an Ethernet header (MACs derived from the addresses) and
    /// `tags`, the last EtherType `net`.
    fn link(&mut self, out: &mut Vec<u8>, tags: &[u16], src: IpAddr, dst: IpAddr, net: u16) {
        let first_type = match tags.len() {
            0 => net,
            1 => ethertype::VLAN,
            _ => ethertype::QINQ,
        };
        let start = out.len();
        out.resize(start + ethernet::HEADER_LEN, 0);
        let mac = |a: IpAddr| match a {
            IpAddr::V4(a) => {
                let o = a.octets();
                [0x02, 0x00, o[0], o[1], o[2], o[3]]
            }
            IpAddr::V6(a) => {
                let o = a.octets();
                [0x02, 0x06, o[12], o[13], o[14], o[15]]
            }
        };
        ethernet::Repr { src: mac(src), dst: mac(dst), ethertype: first_type }
            .emit(&mut ethernet::Frame::new_unchecked(&mut out[start..]));
        for (i, id) in tags.iter().enumerate() {
            let inner = if i + 1 < tags.len() { ethertype::VLAN } else { net };
            let at = out.len();
            out.resize(at + vlan::HEADER_LEN, 0);
            vlan::Repr { priority: 0, drop_eligible: false, vlan_id: *id, ethertype: inner }
                .emit(&mut vlan::Tag::new_unchecked(&mut out[at..]));
        }
        if !tags.is_empty() {
            self.stats.vlan_tagged += 1;
            self.stats.qinq_tagged += u64::from(tags.len() > 1);
        }
    }

    /// Append the flow's IP header (with a fragment header for an IPv6
    /// fragment) and `data`.
    fn datagram(&mut self, out: &mut Vec<u8>, d: &Datagram) {
        let Datagram { flow, proto, hop, ident, frag, data } = *d;
        let at = out.len();
        match (flow.src, flow.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                out.resize(at + ipv4::HEADER_LEN, 0);
                let (frag_offset, more_frags) = frag.unwrap_or((0, false));
                ipv4::Repr {
                    src,
                    dst,
                    protocol: proto,
                    payload_len: data.len() as u16,
                    dscp_ecn: 0,
                    ident: ident as u16,
                    dont_frag: frag.is_none(),
                    more_frags,
                    frag_offset,
                    ttl: hop,
                }
                .emit(&mut out[at..]);
                self.stats.ipv4 += 1;
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let ext = if frag.is_some() { ipv6::FragmentRepr::LEN } else { 0 };
                out.resize(at + ipv6::HEADER_LEN + ext, 0);
                ipv6::Repr {
                    src,
                    dst,
                    next_header: if frag.is_some() { ip_proto::FRAGMENT } else { proto },
                    payload_len: (ext + data.len()) as u16,
                    traffic_class: 0,
                    flow_label: ident & 0xf_ffff,
                    hop_limit: hop,
                }
                .emit(&mut out[at..]);
                if let Some((offset, more_frags)) = frag {
                    ipv6::FragmentRepr { next_header: proto, offset, more_frags, ident }
                        .emit(&mut out[at + ipv6::HEADER_LEN..]);
                }
                self.stats.ipv6 += 1;
            }
            _ => unreachable!("flows never mix families"),
        }
        out.extend_from_slice(data);
        match proto {
            ip_proto::TCP => self.stats.tcp += 1,
            ip_proto::UDP => self.stats.udp += 1,
            _ => self.stats.icmp += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::{decode, LinkType};

    fn all_options(count: u64) -> GenConfig {
        GenConfig {
            count,
            seed: 7,
            ipv6_share: 0.3,
            mix: ProtoMix { tcp: 5, udp: 4, icmp: 1 },
            size: FrameSize::Imix,
            vlan_share: 0.2,
            qinq_share: 0.1,
            listed_share: 0.1,
            list: sluice_rules::parse_list("firehol", sluice_rules::FIREHOL_LEVEL1.as_bytes(), false).unwrap().prefixes,
            frag_share: 0.05,
            ..GenConfig::default()
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        let run = |seed| {
            let mut g = Generator::new(GenConfig { seed, ..all_options(500) }).unwrap();
            let mut buf = Vec::new();
            let mut all = Vec::new();
            while g.next_frame(&mut buf).is_some() {
                all.extend_from_slice(&buf);
            }
            all
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn frames_decode_with_correct_checksums_and_listed_count_is_exact() {
        let cfg = all_options(20_000);
        let set = PrefixHashSet::from_prefixes(&cfg.list);
        let mut g = Generator::new(cfg).unwrap();
        let mut buf = Vec::new();
        let (mut listed_seen, mut in_list, mut frames) = (0u64, 0u64, 0u64);
        while let Some(info) = g.next_frame(&mut buf) {
            frames += 1;
            let s = decode(LinkType::ETHERNET, &buf).unwrap();
            let ip = s.ip.unwrap();
            assert_eq!(ip.anomaly, None);
            if ip.fragment.is_none() {
                let l4 = &buf[ip.l4_offset.unwrap() as usize..];
                let l4 = match ip.src {
                    IpAddr::V4(_) => {
                        &l4[..sluice_wire::ipv4::Packet::new_checked(&buf[ip.l3_offset as usize..])
                            .unwrap()
                            .payload()
                            .len()]
                    }
                    IpAddr::V6(_) => l4,
                };
                let pseudo = match (ip.src, ip.dst) {
                    (IpAddr::V4(a), IpAddr::V4(b)) => checksum::pseudo_header_v4(a, b, ip.protocol, l4.len() as u32),
                    (IpAddr::V6(a), IpAddr::V6(b)) => checksum::pseudo_header_v6(a, b, ip.protocol, l4.len() as u32),
                    _ => unreachable!(),
                };
                let ok = match ip.protocol {
                    ip_proto::TCP => tcp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                    ip_proto::UDP => udp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                    ip_proto::ICMP => icmp::Packet::new_checked(l4).unwrap().verify_checksum(0),
                    _ => icmp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                };
                assert!(ok, "bad L4 checksum in frame {}", info.index);
            }
            if ip.src.is_ipv4() {
                assert!(sluice_wire::ipv4::Packet::new_checked(&buf[ip.l3_offset as usize..])
                    .unwrap()
                    .verify_checksum());
            }
            listed_seen += u64::from(info.listed);
            in_list += u64::from(set.contains(ip.src) || set.contains(ip.dst));
        }
        let st = *g.stats();
        assert_eq!(frames, 20_000);
        assert_eq!(st.packets, 20_000);
        assert_eq!(st.listed, listed_seen);
        assert_eq!(in_list, listed_seen, "only listed frames may touch the list");
        assert!(st.listed > 1_500 && st.listed < 2_500, "{st:?}");
        assert!(st.fragments > 0 && st.qinq_tagged > 0 && st.ipv6 > 0 && st.icmp > 0, "{st:?}");
        assert_eq!(st.ipv4 + st.ipv6, st.packets);
    }

    /// Every encapsulation: the innermost header is the generated packet
    /// (listed count exact, checksums right); the outer headers are sound
    /// and never touch the list.
    #[test]
    fn each_encapsulation_wraps_the_generated_packet() {
        let v6_list: Vec<Prefix> = ["2001:db8:bad::/48"].iter().map(|s| s.parse().unwrap()).collect();
        for encap in Encap::ALL {
            let mut cfg = GenConfig { encap: Some(encap), encap_share: 0.8, frag_shuffle: true, ..all_options(3000) };
            if matches!(encap, Encap::SixIn4 | Encap::SixIn6) {
                cfg.list.extend_from_slice(&v6_list);
            }
            let set = PrefixHashSet::from_prefixes(&cfg.list);
            let mut g = Generator::new(cfg).unwrap();
            let mut buf = Vec::new();
            let (mut listed_seen, mut in_list, mut wrapped) = (0u64, 0u64, 0u64);
            while let Some(info) = g.next_frame(&mut buf) {
                let s = decode(LinkType::ETHERNET, &buf).unwrap();
                let outer = s.ip.unwrap();
                assert_eq!(outer.anomaly, None, "{encap} frame {}", info.index);
                if s.encap.is_empty() {
                    in_list += u64::from(set.contains(outer.src) || set.contains(outer.dst));
                    listed_seen += u64::from(info.listed);
                    continue;
                }
                wrapped += 1;
                assert_eq!(s.encap.as_slice(), &[encap]);
                let inner = *s.innermost().unwrap();
                assert_eq!(s.inner.is_some(), encap.is_tunnel());
                assert_eq!(inner.anomaly, None);
                if encap.is_tunnel() {
                    assert!(!set.contains(outer.src) && !set.contains(outer.dst), "{encap}: outer {outer:?}");
                    assert_eq!(outer.src.is_ipv6(), matches!(encap, Encap::FourIn6 | Encap::SixIn6));
                    assert_eq!(outer.l3_end, inner.l3_end, "{encap}: lengths agree");
                    if outer.src.is_ipv4() {
                        assert!(ipv4::Packet::new_checked(&buf[outer.l3_offset as usize..]).unwrap().verify_checksum());
                    }
                    if outer.protocol == ip_proto::UDP {
                        let l4 = &buf[outer.l4_offset.unwrap() as usize..outer.l3_end as usize];
                        let (IpAddr::V4(a), IpAddr::V4(b)) = (outer.src, outer.dst) else { unreachable!() };
                        let pseudo = checksum::pseudo_header_v4(a, b, ip_proto::UDP, l4.len() as u32);
                        assert!(udp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo));
                    }
                }
                match encap {
                    Encap::Ipip | Encap::FourIn6 => assert!(inner.src.is_ipv4()),
                    Encap::SixIn4 | Encap::SixIn6 => assert!(inner.src.is_ipv6()),
                    _ => {}
                }
                if inner.fragment.is_none() {
                    let l4 = &buf[inner.l4_offset.unwrap() as usize..inner.l3_end as usize];
                    let pseudo = match (inner.src, inner.dst) {
                        (IpAddr::V4(a), IpAddr::V4(b)) => {
                            checksum::pseudo_header_v4(a, b, inner.protocol, l4.len() as u32)
                        }
                        (IpAddr::V6(a), IpAddr::V6(b)) => {
                            checksum::pseudo_header_v6(a, b, inner.protocol, l4.len() as u32)
                        }
                        _ => unreachable!(),
                    };
                    let ok = match inner.protocol {
                        ip_proto::TCP => tcp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                        ip_proto::UDP => udp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                        ip_proto::ICMP => icmp::Packet::new_checked(l4).unwrap().verify_checksum(0),
                        _ => icmp::Packet::new_checked(l4).unwrap().verify_checksum(pseudo),
                    };
                    assert!(ok, "{encap}: bad inner L4 checksum in frame {}", info.index);
                }
                listed_seen += u64::from(info.listed);
                in_list += u64::from(set.contains(inner.src) || set.contains(inner.dst));
            }
            let st = *g.stats();
            assert_eq!(st.encapsulated, wrapped, "{encap}");
            assert!(wrapped > 2000 && wrapped < 3000, "{encap}: {st:?}");
            assert_eq!(st.listed, listed_seen, "{encap}");
            assert_eq!(in_list, listed_seen, "{encap}: only listed frames may touch the list");
            assert!(st.listed > 150 && st.fragments > 0, "{encap}: {st:?}");
        }
    }

    #[test]
    fn encapsulation_is_deterministic_and_family_bound() {
        let run = |encap| {
            let mut g = Generator::new(GenConfig { encap: Some(encap), ..all_options(300) }).unwrap();
            let mut buf = Vec::new();
            let mut all = Vec::new();
            while g.next_frame(&mut buf).is_some() {
                all.extend_from_slice(&buf);
            }
            all
        };
        assert_eq!(run(Encap::Vxlan), run(Encap::Vxlan));
        assert_ne!(run(Encap::Vxlan), run(Encap::Geneve));
        // FireHOL is IPv4 only: no listed source for a tunnel of IPv6.
        assert!(matches!(
            Generator::new(GenConfig { encap: Some(Encap::SixIn4), ..all_options(10) }),
            Err(ConfigError::ListLacksFamily { encap: Encap::SixIn4, family: "IPv6" })
        ));
        assert!(matches!(
            Generator::new(GenConfig { encap: Some(Encap::Gre), encap_share: 1.5, ..GenConfig::default() }),
            Err(ConfigError::Share { name: "encapsulation share", .. })
        ));
    }

    #[test]
    fn zipf_flows_concentrate() {
        let cfg = GenConfig { count: 5000, flows: Some((1000, FlowDist::Zipf(1.2))), ..GenConfig::default() };
        let mut g = Generator::new(cfg).unwrap();
        let mut buf = Vec::new();
        let mut counts = std::collections::HashMap::new();
        while g.next_frame(&mut buf).is_some() {
            let ip = decode(LinkType::ETHERNET, &buf).unwrap().ip.unwrap();
            *counts.entry((ip.src, ip.dst)).or_insert(0u32) += 1;
        }
        let top = counts.values().max().copied().unwrap();
        assert!(top > 5000 / 20, "top flow has {top} packets");
        assert!(counts.len() <= 1000);
    }

    #[test]
    fn rejects_bad_configs() {
        assert!(matches!(
            Generator::new(GenConfig { ipv6_share: 1.5, ..GenConfig::default() }),
            Err(ConfigError::Share { .. })
        ));
        assert!(matches!(
            Generator::new(GenConfig { listed_share: 0.5, ..GenConfig::default() }),
            Err(ConfigError::EmptyList)
        ));
        let halves: Vec<Prefix> = ["0.0.0.0/1", "128.0.0.0/1"].iter().map(|s| s.parse().unwrap()).collect();
        assert!(matches!(
            Generator::new(GenConfig { list: halves, ..GenConfig::default() }),
            Err(ConfigError::ListCoversFamily("IPv4"))
        ));
    }
}

/// One IP datagram to generate: the flow, its upper layer's protocol, hop
/// limit and identification, `data` (the upper layer, or one fragment of
/// it when `frag` is `Some((offset, more))`).
#[derive(Clone, Copy)]
struct Datagram<'a> {
    flow: &'a Flow,
    proto: u8,
    hop: u8,
    ident: u32,
    frag: Option<(u16, bool)>,
    data: &'a [u8],
}

/// Write a tunnel's outer IP header into `out`; its pseudo-header sum.
fn outer_ip(out: &mut [u8], w: &Wrap, protocol: u8, payload_len: u16, ident: u32) -> u32 {
    match (w.outer_src, w.outer_dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            ipv4::Repr {
                src,
                dst,
                protocol,
                payload_len,
                dscp_ecn: 0,
                ident: (ident >> 16) as u16,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
                ttl: 64,
            }
            .emit(out);
            checksum::pseudo_header_v4(src, dst, protocol, u32::from(payload_len))
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            ipv6::Repr {
                src,
                dst,
                next_header: protocol,
                payload_len,
                traffic_class: 0,
                flow_label: ident & 0xf_ffff,
                hop_limit: 64,
            }
            .emit(out);
            checksum::pseudo_header_v6(src, dst, protocol, u32::from(payload_len))
        }
        _ => unreachable!("outer addresses are drawn in one family"),
    }
}
