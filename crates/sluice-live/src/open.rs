//! Opening a two-port bridge the way the operator asked: AF_XDP, AF_PACKET,
//! or AF_XDP falling back to AF_PACKET; driver-mode XDP, generic, or driver
//! falling back to generic. Each fallback is logged (`log` crate) with the
//! reason, so an operator can see why the bridge runs slower than it could.

use crate::error::LiveError;
use crate::pipeline::{
    open_packet, open_xsk, open_xsk_lanes, PacketPorts, PacketTx, PortCount, XskBridgeConfig, XskPorts, XskTx,
};
use crate::{PacketConfig, XdpMode};
use sluice_pipeline::{Fill, PacketBatch, Sink, Source};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Which socket layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Io {
    /// AF_XDP, else AF_PACKET.
    #[default]
    Auto,
    /// AF_XDP only.
    Afxdp,
    /// AF_PACKET only.
    Afpacket,
}

/// Which XDP attach mode, for AF_XDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpChoice {
    /// Driver (native) mode, else generic (skb).
    #[default]
    Auto,
    /// Generic (skb) mode only.
    Skb,
    /// Driver (native) mode only.
    Driver,
}

impl Io {
    /// The names `--io` takes.
    pub const NAMES: [&'static str; 3] = ["auto", "afxdp", "afpacket"];

    /// One of [`Io::NAMES`].
    pub fn from_name(name: &str) -> Option<Io> {
        Some(match name {
            "auto" => Io::Auto,
            "afxdp" => Io::Afxdp,
            "afpacket" => Io::Afpacket,
            _ => return None,
        })
    }
}

impl XdpChoice {
    /// The names `--xdp-mode` takes.
    pub const NAMES: [&'static str; 3] = ["auto", "skb", "drv"];

    /// One of [`XdpChoice::NAMES`].
    pub fn from_name(name: &str) -> Option<XdpChoice> {
        Some(match name {
            "auto" => XdpChoice::Auto,
            "skb" => XdpChoice::Skb,
            "drv" => XdpChoice::Driver,
            _ => return None,
        })
    }
}

/// How to open a bridge.
#[derive(Debug, Clone, Default)]
pub struct OpenConfig {
    /// The socket layer.
    pub io: Io,
    /// The XDP attach mode.
    pub xdp: XdpChoice,
    /// AF_XDP queues per port (`None`: every RX queue, up to 8).
    pub queues: Option<u32>,
    /// AF_XDP UMEM frame size in bytes (`--frame-size`; `None`: 2048).
    pub frame_size: Option<u32>,
    /// AF_XDP: one lane per queue (`--workers auto`), each on its own thread.
    pub per_queue: bool,
    /// `--cpus`: the CPUs the lanes run on, at most one lane each (the
    /// lanes' threads are pinned by `sluice_pipeline::lanes`).
    pub cpus: Vec<usize>,
}

/// An opened port pair: its lanes, each a source (its queues on both
/// ports) and the sink its packets leave by (the same queues' TX rings).
#[derive(Debug)]
pub struct Opened<S, K> {
    /// Lane 0 first. A pair not opened per queue has one lane over every queue.
    pub lanes: Vec<(S, K)>,
    /// Each lane owns its queues and runs on a thread of its own, judging
    /// inline (`sluice_pipeline::lanes`); otherwise the one lane is judged
    /// by a pool of workers.
    pub per_queue: bool,
    /// What was opened and how it reads, for the log and the summary
    /// (e.g. `AF_XDP (drv mode, copy, 1 + 1 queues, shared UMEM of 2048-byte frames)`).
    pub io: String,
}

/// A bridge that could not be opened: which layer, on which ports, and why.
#[derive(Debug, thiserror::Error)]
#[error("opening {layer} on {ifaces}: {error}")]
pub struct OpenError {
    /// `AF_XDP` or `AF_PACKET`.
    pub layer: &'static str,
    /// "A and B".
    pub ifaces: String,
    /// The socket layer's error.
    pub error: LiveError,
}

/// Open the bridge between `ifaces` as `cfg` says; the sources end when
/// `stop` is set, the ports count into `count`, and the sinks forward
/// every packet whatever its verdict if `dry_run` (`--dry-run`).
pub fn open_bridge(
    ifaces: [&str; 2],
    cfg: &OpenConfig,
    stop: &Arc<AtomicBool>,
    count: &Arc<dyn PortCount>,
    dry_run: bool,
) -> Result<Opened<LiveSource, LiveSink>, OpenError> {
    let mut opened = open_any(ifaces, cfg, stop, count)?;
    for (_, sink) in &mut opened.lanes {
        match sink {
            LiveSink::Xsk(t) => t.dry_run = dry_run,
            LiveSink::Packet(t) => t.dry_run = dry_run,
        }
    }
    Ok(opened)
}

type LiveOpened = Result<Opened<LiveSource, LiveSink>, OpenError>;

fn open_any(ifaces: [&str; 2], cfg: &OpenConfig, stop: &Arc<AtomicBool>, count: &Arc<dyn PortCount>) -> LiveOpened {
    if cfg.frame_size.is_some() && cfg.io == Io::Afpacket {
        // TPACKET_V3 packs received frames back to back in its blocks: there
        // is no per-frame buffer to size.
        return Err(OpenError {
            layer: "AF_PACKET",
            ifaces: format!("{} and {}", ifaces[0], ifaces[1]),
            error: LiveError::Config(
                "--frame-size sizes AF_XDP's UMEM frames; AF_PACKET's ring has none (use --io afxdp)".into(),
            ),
        });
    }
    match cfg.io {
        Io::Afxdp => open_afxdp(ifaces, cfg, stop, count),
        Io::Afpacket => open_afpacket(ifaces, stop, count),
        Io::Auto => open_afxdp(ifaces, cfg, stop, count).or_else(|e| {
            tracing::warn!("AF_XDP is not available: {e}; falling back to AF_PACKET");
            if cfg.frame_size.is_some() {
                tracing::warn!("--frame-size does not apply to AF_PACKET and is ignored");
            }
            open_afpacket(ifaces, stop, count)
        }),
    }
}

fn open_afxdp(ifaces: [&str; 2], cfg: &OpenConfig, stop: &Arc<AtomicBool>, count: &Arc<dyn PortCount>) -> LiveOpened {
    let failed = |error| OpenError { layer: "AF_XDP", ifaces: format!("{} and {}", ifaces[0], ifaces[1]), error };
    let modes: &[XdpMode] = match cfg.xdp {
        XdpChoice::Skb => &[XdpMode::Skb],
        XdpChoice::Driver => &[XdpMode::Driver],
        XdpChoice::Auto => &[XdpMode::Driver, XdpMode::Skb],
    };
    let mut last = None;
    for (i, &mode) in modes.iter().enumerate() {
        let mut xsk = XskBridgeConfig { mode, queues: cfg.queues, ..XskBridgeConfig::default() };
        if let Some(fs) = cfg.frame_size {
            xsk.frame_size = fs;
        }
        let opened = if cfg.per_queue {
            open_xsk_lanes(ifaces, &xsk, &cfg.cpus, Arc::clone(stop), Arc::clone(count))
        } else {
            open_xsk(ifaces, &xsk, Arc::clone(stop), Arc::clone(count)).map(|p| vec![p])
        };
        match opened {
            Ok(opened) => {
                let first = &opened[0].0;
                let lanes = if cfg.per_queue { opened.len() } else { 0 };
                let io = format!(
                    "AF_XDP ({} mode, {}, {} + {} queues{}, shared UMEM of {}-byte frames{})",
                    if mode == XdpMode::Skb { "skb" } else { "drv" },
                    if first.is_zero_copy() { "zero-copy" } else { "copy" },
                    first.queues()[0],
                    first.queues()[1],
                    if lanes > 0 { format!(", a worker per queue: {lanes} lanes") } else { String::new() },
                    xsk.frame_size,
                    if xsk.frame_size.is_power_of_two() { "" } else { ", unaligned" },
                );
                let lanes = opened.into_iter().map(|(p, t)| (LiveSource::Xsk(p), LiveSink::Xsk(t))).collect();
                return Ok(Opened { lanes, per_queue: cfg.per_queue, io });
            }
            // Native mode refused by the driver: generic mode may still work.
            Err(e @ LiveError::XdpAttach { .. }) if i + 1 < modes.len() => {
                tracing::warn!("driver-mode XDP refused ({e}); trying skb (generic) mode");
                last = Some(e);
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Err(failed(last.expect("at least one mode was tried")))
}

fn open_afpacket(ifaces: [&str; 2], stop: &Arc<AtomicBool>, count: &Arc<dyn PortCount>) -> LiveOpened {
    let (source, sink) = open_packet(ifaces, &PacketConfig::default(), Arc::clone(stop), Arc::clone(count))
        .map_err(|error| OpenError { layer: "AF_PACKET", ifaces: format!("{} and {}", ifaces[0], ifaces[1]), error })?;
    Ok(Opened {
        lanes: vec![(LiveSource::Packet(source), LiveSink::Packet(sink))],
        per_queue: false,
        io: "AF_PACKET (TPACKET_V3 RX, TPACKET_V2 TX rings)".to_owned(),
    })
}

/// What a bridge forwards between: two ports it opens once, as lanes. The
/// live interfaces ([`LivePorts`]: AF_XDP, AF_PACKET) in production; any
/// other pair (two channels in the bridge's tests, a next data plane)
/// implements it in its own crate. The forwarding loop is generic over the
/// lanes' source and sink, so nothing on the per-batch path is dynamic.
pub trait PortPair: Send {
    /// A lane's source: its queues of both ports' RX.
    type Source: Source<Error = LiveError> + Send + 'static;
    /// A lane's sink: its packets out on the other port.
    type Sink: Sink<Error = LiveError> + Send + 'static;

    /// The two ports' names, port 0 first.
    fn names(&self) -> [String; 2];

    /// Opens both ports: the sources end when `stop` is set, the ports
    /// count what they receive and send into `count`, and the sinks forward
    /// every packet whatever its verdict if `dry_run`.
    fn open(
        self,
        stop: &Arc<AtomicBool>,
        count: &Arc<dyn PortCount>,
        dry_run: bool,
    ) -> Result<Opened<Self::Source, Self::Sink>, OpenError>;
}

/// Two network interfaces, opened as [`OpenConfig`] asks.
#[derive(Debug, Clone)]
pub struct LivePorts {
    /// Port 0's interface, then port 1's.
    pub names: [String; 2],
    /// The socket layer and its geometry.
    pub config: OpenConfig,
}

impl PortPair for LivePorts {
    type Source = LiveSource;
    type Sink = LiveSink;

    fn names(&self) -> [String; 2] {
        self.names.clone()
    }

    fn open(
        self,
        stop: &Arc<AtomicBool>,
        count: &Arc<dyn PortCount>,
        dry_run: bool,
    ) -> Result<Opened<LiveSource, LiveSink>, OpenError> {
        open_bridge([&self.names[0], &self.names[1]], &self.config, stop, count, dry_run)
    }
}

/// A live lane's source: whichever socket layer opened (AF_XDP falls back
/// to AF_PACKET at run time, so the type cannot say which).
#[derive(Debug)]
// One per lane, made once: its size is not worth a pointer chased on every fill.
#[allow(clippy::large_enum_variant)]
pub enum LiveSource {
    /// AF_XDP sockets on one shared UMEM.
    Xsk(XskPorts),
    /// AF_PACKET rings.
    Packet(PacketPorts),
}

/// A live lane's sink, on the same socket layer as its source.
#[derive(Debug)]
// One per lane, made once: its size is not worth a pointer chased on every write.
#[allow(clippy::large_enum_variant)]
pub enum LiveSink {
    /// AF_XDP TX rings, forwarding by UMEM address.
    Xsk(XskTx),
    /// AF_PACKET TX rings.
    Packet(PacketTx),
}

impl Source for LiveSource {
    type Error = LiveError;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill, LiveError> {
        match self {
            LiveSource::Xsk(s) => s.fill(batch, deadline),
            LiveSource::Packet(s) => s.fill(batch, deadline),
        }
    }

    fn is_live(&self) -> bool {
        true
    }
}

impl Sink for LiveSink {
    type Error = LiveError;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), LiveError> {
        match self {
            LiveSink::Xsk(t) => t.write(batch),
            LiveSink::Packet(t) => t.write(batch),
        }
    }

    fn finish(&mut self) -> Result<(), LiveError> {
        match self {
            LiveSink::Xsk(t) => t.finish(),
            LiveSink::Packet(t) => t.finish(),
        }
    }

    fn quiescent(&mut self) {
        match self {
            LiveSink::Xsk(t) => t.quiescent(),
            LiveSink::Packet(t) => t.quiescent(),
        }
    }
}
