//! Opening a two-port bridge the way the operator asked: AF_XDP, AF_PACKET,
//! or AF_XDP falling back to AF_PACKET; driver-mode XDP, generic, or driver
//! falling back to generic. Each fallback is logged (`log` crate) with the
//! reason, so an operator can see why the bridge runs slower than it could.

use crate::error::LiveError;
use crate::memory::{MemoryPair, MemoryPorts, MemoryTx};
use crate::pipeline::{
    open_packet, open_xsk, open_xsk_lanes, BridgeCounters, PacketPorts, PacketTx, XskBridgeConfig, XskPorts, XskTx,
};
use crate::{PacketConfig, XdpMode};
use sluice_pipeline::{Sink, Source};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

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
    /// `--cpus`: the lanes' CPUs, recorded in their counters (the lanes'
    /// threads are pinned by `sluice_pipeline::lanes`, by the same rule).
    pub cpus: Vec<usize>,
}

/// An open bridge: the pipeline source (both ports' RX) and sink (TX).
pub enum Opened {
    /// AF_XDP sockets on one shared UMEM.
    Xsk(Box<(XskPorts, XskTx)>),
    /// AF_XDP dealt out in lanes, one per queue, to run on a thread each.
    XskLanes(Vec<(XskPorts, XskTx)>),
    /// AF_PACKET rings.
    Packet(Box<(PacketPorts, PacketTx)>),
    /// Two ports joined by channels (tests; [`crate::memory`]).
    Memory(Box<(MemoryPorts, MemoryTx)>),
}

/// A bridge's source, whichever socket layer.
pub type DynSource = Box<dyn Source<Error = LiveError> + Send>;
/// A bridge's sink, whichever socket layer.
pub type DynSink = Box<dyn Sink<Error = LiveError> + Send>;

impl Opened {
    /// The source and sink one thread runs, or the lanes of a per-queue bridge.
    pub fn single(self) -> Result<(DynSource, DynSink), Vec<(XskPorts, XskTx)>> {
        match self {
            Opened::Xsk(b) => Ok((Box::new(b.0), Box::new(b.1))),
            Opened::Packet(b) => Ok((Box::new(b.0), Box::new(b.1))),
            Opened::Memory(b) => Ok((Box::new(b.0), Box::new(b.1))),
            Opened::XskLanes(lanes) => Err(lanes),
        }
    }

    /// Forward every packet whatever its verdict (`--dry-run`).
    pub fn set_dry_run(&mut self, on: bool) {
        match self {
            Opened::Xsk(b) => b.1.dry_run = on,
            Opened::XskLanes(lanes) => lanes.iter_mut().for_each(|l| l.1.dry_run = on),
            Opened::Packet(b) => b.1.dry_run = on,
            Opened::Memory(b) => b.1.dry_run = on,
        }
    }
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

/// Open the bridge between `ifaces` as `cfg` says; returns it and a
/// description of what was opened, for logs and summaries (e.g.
/// `AF_XDP (drv mode, copy, 1 + 1 queues, shared UMEM of 2048-byte frames)`).
pub fn open_bridge(
    ifaces: [&str; 2],
    cfg: &OpenConfig,
    stop: &Arc<AtomicBool>,
    counters: &Arc<BridgeCounters>,
) -> Result<(Opened, String), OpenError> {
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
        Io::Afxdp => open_afxdp(ifaces, cfg, stop, counters),
        Io::Afpacket => open_afpacket(ifaces, stop, counters),
        Io::Auto => open_afxdp(ifaces, cfg, stop, counters).or_else(|e| {
            tracing::warn!("AF_XDP is not available: {e}; falling back to AF_PACKET");
            if cfg.frame_size.is_some() {
                tracing::warn!("--frame-size does not apply to AF_PACKET and is ignored");
            }
            open_afpacket(ifaces, stop, counters)
        }),
    }
}

fn open_afxdp(
    ifaces: [&str; 2],
    cfg: &OpenConfig,
    stop: &Arc<AtomicBool>,
    counters: &Arc<BridgeCounters>,
) -> Result<(Opened, String), OpenError> {
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
            open_xsk_lanes(ifaces, &xsk, &cfg.cpus, Arc::clone(stop), Arc::clone(counters))
                .map(|lanes| (lanes.len(), Opened::XskLanes(lanes)))
        } else {
            open_xsk(ifaces, &xsk, Arc::clone(stop), Arc::clone(counters)).map(|p| (0, Opened::Xsk(Box::new(p))))
        };
        match opened {
            Ok((lanes, opened)) => {
                let first = match &opened {
                    Opened::Xsk(b) => &b.0,
                    Opened::XskLanes(l) => &l[0].0,
                    Opened::Packet(_) | Opened::Memory(_) => unreachable!("opened AF_XDP"),
                };
                let desc = format!(
                    "AF_XDP ({} mode, {}, {} + {} queues{}, shared UMEM of {}-byte frames{})",
                    if mode == XdpMode::Skb { "skb" } else { "drv" },
                    if first.is_zero_copy() { "zero-copy" } else { "copy" },
                    first.queues()[0],
                    first.queues()[1],
                    if lanes > 0 { format!(", a worker per queue: {lanes} lanes") } else { String::new() },
                    xsk.frame_size,
                    if xsk.frame_size.is_power_of_two() { "" } else { ", unaligned" },
                );
                return Ok((opened, desc));
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

fn open_afpacket(
    ifaces: [&str; 2],
    stop: &Arc<AtomicBool>,
    counters: &Arc<BridgeCounters>,
) -> Result<(Opened, String), OpenError> {
    let (source, sink) = open_packet(ifaces, &PacketConfig::default(), Arc::clone(stop), Arc::clone(counters))
        .map_err(|error| OpenError { layer: "AF_PACKET", ifaces: format!("{} and {}", ifaces[0], ifaces[1]), error })?;
    Ok((Opened::Packet(Box::new((source, sink))), "AF_PACKET (TPACKET_V3 RX, TPACKET_V2 TX rings)".to_owned()))
}

/// What a bridge forwards between: two ports it opens once, as its
/// source and sink. The live interfaces ([`LivePorts`]: AF_XDP, AF_PACKET)
/// in production; two channels ([`MemoryPair`]) in tests, so everything
/// around the rings is tested without root.
pub trait PortPair: Send {
    /// The two ports' names, port 0 first.
    fn names(&self) -> [String; 2];
    /// Opens both ports; the source ends when `stop` is set. Returns what
    /// was opened and how it reads (for the log and the summary).
    fn open(
        self: Box<Self>,
        stop: &Arc<AtomicBool>,
        counters: &Arc<BridgeCounters>,
    ) -> Result<(Opened, String), OpenError>;
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
    fn names(&self) -> [String; 2] {
        self.names.clone()
    }

    fn open(
        self: Box<Self>,
        stop: &Arc<AtomicBool>,
        counters: &Arc<BridgeCounters>,
    ) -> Result<(Opened, String), OpenError> {
        open_bridge([&self.names[0], &self.names[1]], &self.config, stop, counters)
    }
}

impl PortPair for MemoryPair {
    fn names(&self) -> [String; 2] {
        MemoryPair::names(self)
    }

    fn open(
        self: Box<Self>,
        stop: &Arc<AtomicBool>,
        counters: &Arc<BridgeCounters>,
    ) -> Result<(Opened, String), OpenError> {
        let pair = (*self).open(Arc::clone(stop), Arc::clone(counters));
        Ok((Opened::Memory(Box::new(pair)), "memory (two channels)".to_owned()))
    }
}
