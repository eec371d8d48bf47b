//! Live ports as the pipeline's [`Source`] and [`Sink`]: what `sluice bridge` runs.
//!
//! A bridge is one source that reads both ports and one sink that writes
//! every passed packet to the *other* port: `Meta::port` (0 or 1) says
//! where a packet came in, so the sink needs nothing but the batch.
//!
//! - **AF_PACKET** ([`open_packet`]: [`PacketPorts`] + [`PacketTx`]): the
//!   source copies frames out of both ports' `TPACKET_V3` RX rings into the
//!   batch (`push_copy`, VLAN tags put back by the port); the sink copies
//!   each passed frame into the other port's TX ring and flushes once per
//!   batch. Source and sink own separate sockets (RX-only and TX-only), so
//!   they share nothing but counters.
//! - **AF_XDP** ([`open_xsk`]: [`XskPorts`] + [`XskTx`]): the sockets of
//!   both ports (one per queue) share one UMEM. The source lends received
//!   frames to the batch in place (`push_backed` into a [`UmemView`](crate::xsk::UmemView) of the
//!   whole UMEM: a packet's start *is* its UMEM address); the sink forwards
//!   a passed frame by putting that address on the other port's TX ring, no
//!   copy, and gives a dropped frame back to the fill rings. Source and sink
//!   share the sockets, the free-frame pool and the ledger of held frames
//!   behind one mutex, locked once per fill and once per batch written
//!   (uncontended: run them with `read_ahead: false`, both on one thread).
//!
//! # Which frames the pipeline holds (AF_XDP)
//!
//! A received frame is *held* from the moment the source takes it off an RX
//! ring until the sink has put it on a TX or fill ring (or in the pool); the
//! kernel writes no held frame, and nothing reads a frame that is not held
//! (see [`UmemView`](crate::xsk::UmemView)). The source writes every frame it lends into a ledger
//! in receive order, with its packet index. Packets reach the sink in input
//! order (run with ordered output), so the sink meets held frames in ledger
//! order — except frames reassembly took: it copies fragments out of the
//! batch and recycles the batch, and later emits the copies (arena packets,
//! which the sink transmits from a free frame). When the sink meets a lent
//! packet with index *k*, every ledger entry before *k* belongs to a packet
//! that will never reach it and whose batch is gone, so those frames are
//! reclaimed. A lent packet not found in the ledger is never touched (that
//! would hand the kernel a frame someone else may hold). When nothing is
//! in flight between source and sink (`Sink::quiescent`: with an inline
//! judge, after every batch), every entry left belongs to a packet
//! reassembly copied, so all are reclaimed: a stream of nothing but
//! fragments gives its frames back too.
//!
//! A per-queue bridge ([`open_xsk_lanes`]) has one such core per lane, over
//! the lane's sockets and frames only.
//!
//! Both sources return [`Fill::End`] once the stop flag is set (SIGINT or
//! SIGTERM in the CLI) and say they are live, so reassembly expires held
//! fragments on the wall clock. The XDP programs are detached when the last
//! of the source and the sink is dropped (they hang on BPF links).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluice_pipeline::{wall_ns, Backing, Fill, Meta, PacketBatch, Sink, Source, Verdict};
use sluice_wire::capture::{Interface, Timestamp, TsResolution};
use sluice_wire::LinkType;

use crate::error::{LiveError, Result};
use crate::packet::{PacketConfig, PacketSocket};
use crate::xsk::{BindMode, Desc, FramePool, Umem, XskConfig, XskSocket};
use crate::{XdpMode, XdpRedirect};

/// The longest a fill waits without looking at the stop flag.
const STOP_CHECK_MS: i32 = 50;
/// How often the kernel's socket counters are read and reported ([`PortCount::kernel_drops`]).
const KERNEL_STATS_EVERY: Duration = Duration::from_millis(500);
/// At most this many queues per port (`poll` takes 16 descriptors).
pub const MAX_QUEUES: u32 = 8;

/// What the ports count as they go, once per batch and port: frames in
/// and out, and where a ring lost some. The ports name no metric and judge
/// nothing: whoever opens them says where these counts go (the bridge: its
/// counters and `/metrics`), and counts the verdicts itself. `lane` is the
/// lane of a per-queue pair ([`open_xsk_lanes`]) that counted, else `None`.
pub trait PortCount: Send + Sync {
    /// `packets` frames of `bytes` on the wire, received on `port`.
    fn received(&self, port: usize, lane: Option<usize>, packets: u64, bytes: u64);
    /// What a batch's transmission on `port` came to.
    fn sent(&self, port: usize, lane: Option<usize>, sent: &Sent);
    /// What the kernel dropped on `port` since the last report.
    fn kernel_drops(&self, port: usize, drops: &KernelDrops);
    /// AF_XDP: frames whose packets reassembly copied out, given back.
    fn frames_reclaimed(&self, frames: u64);
}

/// A batch's transmission on one port.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Frames put on the TX ring.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Passed frames lost because the TX ring stayed full.
    pub ring_full: u64,
    /// Passed frames that cannot be sent: larger than a slot or frame, or
    /// shorter than an Ethernet header.
    pub invalid: u64,
    /// Passed frames copied by reassembly that found no free UMEM frame.
    pub no_buffer: u64,
    /// Failed transmit system calls (the frames stay queued for the next).
    pub errors: u64,
}

/// Frames the kernel dropped on a port before we saw them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelDrops {
    /// The RX ring was full (AF_PACKET `tp_drops`; AF_XDP `rx_dropped + rx_ring_full`).
    pub rx_ring_full: u64,
    /// AF_XDP: times the kernel found the fill ring empty.
    pub fill_empty: u64,
    /// AF_PACKET: frames the ring cut short (skipped).
    pub truncated: u64,
}

/// The interface every live packet is said to come in on: Ethernet, with
/// nanosecond timestamps.
pub fn ethernet(snaplen: u32) -> Interface {
    Interface { link_type: LinkType::ETHERNET, snaplen, ts_resolution: TsResolution::NANOS }
}

/// A live packet's timestamp: `ns` nanoseconds since the epoch.
pub fn timestamp(ns: u64) -> Timestamp {
    Timestamp::Units { units: ns, resolution: TsResolution::NANOS }
}

/// How long a fill may still wait, in ms (at most [`STOP_CHECK_MS`]), or
/// `None` when the deadline has passed.
/// Waits up to `timeout_ms` until one of `fds` is readable.
fn wait_any(fds: &[std::os::fd::RawFd], timeout_ms: i32, links: &mut Links) -> Result<()> {
    let trouble = crate::sys::poll_many(fds, timeout_ms).map_err(|e| LiveError::Io { op: "poll", source: e })?;
    if trouble {
        links.check()?;
        // Still there (down, or a transient error): do not spin on it.
        std::thread::sleep(Duration::from_millis(5));
    } else if links.checked.elapsed() >= LINK_CHECK {
        links.check()?;
    }
    Ok(())
}

/// How often the ports are looked up while traffic flows.
const LINK_CHECK: Duration = Duration::from_secs(1);

/// The two ports by name and the index they had when opened: an interface
/// deleted or renamed (its name gone, or naming another device) ends the
/// bridge with [`LiveError::InterfaceGone`], instead of a loop polling
/// sockets that will never be readable again.
#[derive(Debug)]
struct Links {
    names: [String; 2],
    indexes: [u32; 2],
    /// Whether each port was up and running at the last check (a change is logged).
    running: [Option<bool>; 2],
    checked: Instant,
}

impl Links {
    fn new(names: [&str; 2]) -> Result<Links> {
        let indexes = [crate::sys::ifindex(names[0])?, crate::sys::ifindex(names[1])?];
        Ok(Links { names: names.map(str::to_owned), indexes, running: [None; 2], checked: Instant::now() })
    }

    fn check(&mut self) -> Result<()> {
        self.checked = Instant::now();
        for (i, (name, &index)) in self.names.iter().zip(&self.indexes).enumerate() {
            if crate::sys::ifindex(name).ok() != Some(index) {
                return Err(LiveError::InterfaceGone { iface: name.clone() });
            }
            let want = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
            let Ok(flags) = crate::sys::if_flags(name) else { continue };
            let running = flags & want == want;
            match (self.running[i], running) {
                (Some(false), true) => tracing::info!(event = "link_up", port = name.as_str(), "port {name}: link up"),
                (Some(true) | None, false) => {
                    tracing::warn!(event = "link_down", port = name.as_str(), "port {name}: link down")
                }
                _ => {}
            }
            self.running[i] = Some(running);
        }
        Ok(())
    }
}

fn wait_budget(deadline: Option<Instant>) -> Option<i32> {
    let Some(d) = deadline else { return Some(STOP_CHECK_MS) };
    let now = Instant::now();
    if now >= d {
        return None;
    }
    let ms = (d - now).as_micros().div_ceil(1000);
    Some(i32::try_from(ms).unwrap_or(STOP_CHECK_MS).min(STOP_CHECK_MS))
}

/// The port a packet that came in on `port` goes out on.
pub fn other(port: u32) -> Option<usize> {
    match port {
        0 => Some(1),
        1 => Some(0),
        _ => None,
    }
}

// ---------------------------------------------------------------- AF_PACKET

/// AF_PACKET: both ports' RX rings as one pipeline source.
pub struct PacketPorts {
    rx: [PacketSocket; 2],
    fds: [RawFd; 2],
    stop: Arc<AtomicBool>,
    count: Arc<dyn PortCount>,
    next_index: u64,
    /// Which port is read first this round (alternates, so neither starves).
    first: usize,
    stats_at: Instant,
    /// The kernel's drops at the last report, per port: (ring full, truncated).
    kernel_seen: [(u64, u64); 2],
    interface: Interface,
    links: Links,
}

/// AF_PACKET: both ports' TX rings as the pipeline's sink.
pub struct PacketTx {
    tx: [PacketSocket; 2],
    count: Arc<dyn PortCount>,
    /// Forward dropped packets too (`--dry-run`): verdicts are counted,
    /// none enforced.
    pub dry_run: bool,
}

impl std::fmt::Debug for PacketPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketPorts").field("ports", &[self.rx[0].iface(), self.rx[1].iface()]).finish()
    }
}

impl std::fmt::Debug for PacketTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketTx").field("ports", &[self.tx[0].iface(), self.tx[1].iface()]).finish()
    }
}

/// Opens an AF_PACKET bridge between `ifaces[0]` (port 0) and `ifaces[1]`
/// (port 1): RX-only sockets for the source, TX-only ones for the sink,
/// both with `cfg`'s geometry. The source ends when `stop` is set.
pub fn open_packet(
    ifaces: [&str; 2],
    cfg: &PacketConfig,
    stop: Arc<AtomicBool>,
    count: Arc<dyn PortCount>,
) -> Result<(PacketPorts, PacketTx)> {
    let rx_cfg = PacketConfig { rx: true, tx: false, ..*cfg };
    // The RX socket holds the port promiscuous; the TX one receives nothing.
    let tx_cfg = PacketConfig { rx: false, tx: true, promisc: false, fanout: None, ..*cfg };
    let rx = [PacketSocket::open(ifaces[0], &rx_cfg)?, PacketSocket::open(ifaces[1], &rx_cfg)?];
    let tx = [PacketSocket::open(ifaces[0], &tx_cfg)?, PacketSocket::open(ifaces[1], &tx_cfg)?];
    let fds = [rx[0].rx_fd().unwrap_or(-1), rx[1].rx_fd().unwrap_or(-1)];
    let ports = PacketPorts {
        rx,
        fds,
        stop,
        count: Arc::clone(&count),
        next_index: 0,
        first: 0,
        stats_at: Instant::now(),
        kernel_seen: [(0, 0); 2],
        interface: ethernet(cfg.block_size),
        links: Links::new(ifaces)?,
    };
    Ok((ports, PacketTx { tx, count, dry_run: false }))
}

impl PacketPorts {
    fn kernel_stats(&mut self) {
        if self.stats_at.elapsed() < KERNEL_STATS_EVERY {
            return;
        }
        self.stats_at = Instant::now();
        for (port, sock) in self.rx.iter_mut().enumerate() {
            // `stats` accumulates the kernel's reset-on-read counters; a failure to read
            // them reports nothing new.
            if let Ok(s) = sock.stats() {
                let seen = &mut self.kernel_seen[port];
                let drops = KernelDrops {
                    rx_ring_full: s.kernel_drops.saturating_sub(seen.0),
                    truncated: s.rx_truncated.saturating_sub(seen.1),
                    ..KernelDrops::default()
                };
                *seen = (seen.0.max(s.kernel_drops), seen.1.max(s.rx_truncated));
                if drops != KernelDrops::default() {
                    self.count.kernel_drops(port, &drops);
                }
            }
        }
    }
}

impl Source for PacketPorts {
    type Error = LiveError;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(Fill::End);
            }
            let before = batch.len();
            for k in 0..2 {
                let port = (self.first + k) % 2;
                let room = batch.capacity().saturating_sub(batch.len());
                if room == 0 {
                    break;
                }
                let (next, interface) = (&mut self.next_index, self.interface);
                let mut bytes = 0u64;
                let n = self.rx[port].rx_batch(room, |data, m| {
                    let ns = if m.sec == 0 && m.nsec == 0 {
                        wall_ns()
                    } else {
                        u64::from(m.sec) * 1_000_000_000 + u64::from(m.nsec)
                    };
                    let meta = Meta {
                        index: *next,
                        offset: 0,
                        timestamp: timestamp(ns),
                        wire_len: m.wire_len,
                        port: port as u32,
                        interface,
                    };
                    batch.push_copy(meta, data);
                    *next += 1;
                    bytes += u64::from(m.wire_len);
                });
                if n > 0 {
                    self.count.received(port, None, n as u64, bytes);
                }
            }
            self.first ^= 1;
            self.kernel_stats();
            if batch.is_full() {
                return Ok(Fill::More);
            }
            if batch.len() > before {
                // More may have arrived meanwhile: look again before waiting.
                continue;
            }
            if !batch.is_empty() {
                return Ok(Fill::More);
            }
            let Some(ms) = wait_budget(deadline) else { return Ok(Fill::More) };
            wait_any(&self.fds, ms, &mut self.links)?;
        }
    }

    fn is_live(&self) -> bool {
        true
    }
}

impl PacketTx {
    /// Queues one frame on port `out`, waiting for the ring once when it is full.
    fn send(&mut self, out: usize, frame: &[u8], t: &mut Sent) -> Result<()> {
        match self.tx[out].send(frame) {
            Ok(true) => {}
            Ok(false) => {
                // Every slot is taken: wait for the kernel to send them (holding the
                // source back, as a full ring should), then try once more.
                if self.tx[out].flush_wait().is_err() {
                    // At once: an error sending this frame ends the batch untallied.
                    self.count.sent(out, None, &Sent { errors: 1, ..Sent::default() });
                }
                match self.tx[out].send(frame) {
                    Ok(true) => {}
                    Ok(false) => {
                        t.ring_full += 1;
                        return Ok(());
                    }
                    Err(_) => {
                        t.invalid += 1;
                        return Ok(());
                    }
                }
            }
            // Too big for a slot, or too short to be Ethernet: this frame only.
            Err(LiveError::FrameTooBig { .. }) | Err(LiveError::Config(_)) => {
                t.invalid += 1;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        t.packets += 1;
        t.bytes += frame.len() as u64;
        Ok(())
    }
}

impl Sink for PacketTx {
    type Error = LiveError;

    fn write(&mut self, batch: &PacketBatch) -> Result<()> {
        let mut tally = [Sent::default(); 2];
        for (i, p) in batch.packets().iter().enumerate() {
            if p.verdict != Verdict::Pass && !self.dry_run {
                continue;
            }
            let Some(out) = other(p.meta.port) else { continue };
            self.send(out, batch.bytes(i), &mut tally[out])?;
        }
        for (out, t) in tally.iter_mut().enumerate() {
            if t.packets > 0 {
                match self.tx[out].flush() {
                    Ok(()) => {}
                    // The interface went away: nothing more can be bridged.
                    Err(e @ LiveError::NoSuchInterface { .. }) => return Err(e),
                    // A link that is down, or a transient error: the frames stay marked
                    // and go with the next flush.
                    Err(_) => t.errors += 1,
                }
            }
            if *t != Sent::default() {
                self.count.sent(out, None, t);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        for tx in &mut self.tx {
            if tx.flush_wait().is_err() {
                self.count.sent(0, None, &Sent { errors: 1, ..Sent::default() });
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ AF_XDP

/// How to open an AF_XDP bridge.
#[derive(Debug, Clone, Copy)]
pub struct XskBridgeConfig {
    /// Skb (generic) or driver (native) XDP.
    pub mode: XdpMode,
    /// Ring sizes and bind mode of every socket.
    pub xsk: XskConfig,
    /// UMEM frames shared by all sockets.
    pub frames: u32,
    /// Bytes from one UMEM frame to the next: a power of two from 2048, or
    /// any size from 1280 (unaligned chunks; see [`Umem::new`]).
    pub frame_size: u32,
    /// Queues per port to bind (one socket each); `None`: as many as the
    /// interface has RX queues (up to [`MAX_QUEUES`]).
    pub queues: Option<u32>,
}

impl Default for XskBridgeConfig {
    fn default() -> Self {
        XskBridgeConfig {
            mode: XdpMode::Skb,
            xsk: XskConfig::default(),
            frames: 8192,
            frame_size: DEFAULT_FRAME_SIZE,
            queues: None,
        }
    }
}

/// UMEM frames per lane of a per-queue bridge, at least.
const LANE_FRAMES: u32 = 4096;

/// UMEM frame size unless `--frame-size` says otherwise: a 1514-byte frame
/// (plus a tag or two) fits after the kernel's 256-byte headroom.
pub const DEFAULT_FRAME_SIZE: u32 = 2048;

/// The longest frame `iface` can receive: its MTU, the Ethernet header and
/// two VLAN tags (AF_XDP sees tags inline).
fn max_wire_frame(iface: &str) -> Option<u32> {
    let mtu: u32 = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu")).ok()?.trim().parse().ok()?;
    Some(mtu + 14 + 8)
}

/// Below 2048 bytes the kernel's chunk (2048 at least) is longer than the
/// frame, so a frame longer than the frame size less the headroom would run
/// into the next one: refuse interfaces whose MTU allows one.
fn check_mtu(ifaces: [&str; 2], umem: &Umem) -> Result<()> {
    if umem.frame_size() >= 2048 {
        return Ok(());
    }
    for iface in ifaces {
        if let Some(len) = max_wire_frame(iface).filter(|&len| len > umem.max_frame()) {
            return Err(LiveError::Config(format!(
                "{iface}'s MTU lets frames of up to {len} bytes in, and a {}-byte frame holds {} after the kernel's 256-byte headroom: lower the MTU or use a larger --frame-size",
                umem.frame_size(),
                umem.max_frame()
            )));
        }
    }
    Ok(())
}

/// What the source and the sink share (see the module doc).
///
/// A single-thread bridge has one core over every socket and frame; a
/// per-queue bridge has one per lane, over the lane's sockets and its own
/// range of frames, so no frame and no ring is ever touched by two threads.
struct XskCore {
    // Field order is drop order: detach the XDP programs first (when this is
    // the last core holding them), so no frame is redirected to a closing
    // socket; then the sockets; the UMEM last.
    redirects: Arc<[XdpRedirect; 2]>,
    /// Per port, this core's sockets: the first one transmits.
    socks: [Vec<XskSocket>; 2],
    umem: Arc<Umem>,
    pool: FramePool,
    /// Frames the pipeline holds, in receive order: (packet index, address).
    held: VecDeque<(u64, u64)>,
    /// Per-batch scratch: descriptors to send on each port.
    fwd: [Vec<Desc>; 2],
    count: Arc<dyn PortCount>,
    /// The lane this core is, in a per-queue bridge.
    lane: Option<usize>,
    /// Frames given back since the last report (reported once per batch).
    reclaimed: u64,
    /// Frames each fill ring is kept stocked with.
    fill_target: u32,
    stats_at: Instant,
    /// The kernel's socket counters at the last read, per port (they are
    /// cumulative per socket; what changed is added to the port's counter,
    /// so lanes add up).
    kernel_seen: [(u64, u64); 2],
}

/// AF_XDP: both ports' RX rings as one pipeline source, lending frames in place.
pub struct XskPorts {
    core: Arc<Mutex<XskCore>>,
    backing: Backing,
    fds: Vec<RawFd>,
    stop: Arc<AtomicBool>,
    next_index: u64,
    first: usize,
    descs: Vec<Desc>,
    interface: Interface,
    zero_copy: bool,
    queues: [u32; 2],
    links: Links,
}

/// AF_XDP: both ports' TX rings as the pipeline's sink (forwarding by address).
pub struct XskTx {
    core: Arc<Mutex<XskCore>>,
    /// The source's backing: packets pointing into it are UMEM frames.
    backing: Backing,
    /// Forward dropped packets too (`--dry-run`): verdicts are counted,
    /// none enforced.
    pub dry_run: bool,
}

impl std::fmt::Debug for XskPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskPorts").field("queues", &self.queues).field("zero_copy", &self.zero_copy).finish()
    }
}

impl std::fmt::Debug for XskTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskTx").finish()
    }
}

/// RX queues of `iface` (from sysfs; 1 if that cannot be read).
pub fn rx_queues(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count() as u32)
        .unwrap_or(1)
        .max(1)
}

/// What every core of one AF_XDP bridge shares.
struct Shared {
    redirects: Arc<[XdpRedirect; 2]>,
    umem: Arc<Umem>,
    /// The whole UMEM as the batches' backing.
    backing: Backing,
    queues: [u32; 2],
    zero_copy: bool,
    fill_size: u32,
    frame_size: u32,
    ifaces: [String; 2],
}

/// One UMEM, the redirect program on both interfaces, one socket per
/// (port, queue) sharing the UMEM. Nothing is redirected to the sockets
/// until [`Shared::register`].
fn bind_xsk(ifaces: [&str; 2], cfg: &XskBridgeConfig) -> Result<(Shared, [Vec<XskSocket>; 2])> {
    let queues = ifaces.map(|i| cfg.queues.unwrap_or_else(|| rx_queues(i)).clamp(1, MAX_QUEUES));
    let umem = Umem::new(cfg.frames, cfg.frame_size)?;
    check_mtu(ifaces, &umem)?;
    // Frames at a stride that is not a power of two cross pages, which a
    // zero-copy driver accepts only over physically contiguous pages (huge
    // pages, not what this UMEM is): copy mode, where the kernel copies.
    let mut xsk_cfg = cfg.xsk;
    if umem.unaligned() && xsk_cfg.mode == BindMode::Auto {
        xsk_cfg.mode = BindMode::Copy;
    }
    let redirects =
        [XdpRedirect::attach(ifaces[0], queues[0], cfg.mode)?, XdpRedirect::attach(ifaces[1], queues[1], cfg.mode)?];
    let mut socks: [Vec<XskSocket>; 2] = [Vec::new(), Vec::new()];
    for port in 0..2 {
        for q in 0..queues[port] {
            socks[port].push(XskSocket::bind(ifaces[port], q, &umem, &xsk_cfg)?);
        }
    }
    let zero_copy = socks.iter().flatten().all(|s| s.is_zero_copy());
    let backing: Backing = Arc::new(umem.view());
    let shared = Shared {
        redirects: Arc::new(redirects),
        umem: Arc::new(umem),
        backing,
        queues,
        zero_copy,
        fill_size: cfg.xsk.fill_size,
        frame_size: cfg.frame_size,
        ifaces: ifaces.map(str::to_owned),
    };
    Ok((shared, socks))
}

impl Shared {
    /// Stocks the fill rings of `socks` from `pool`, evenly, keeping half
    /// the pool for what is in flight; returns the frames each got.
    fn stock(&self, socks: &mut [Vec<XskSocket>; 2], pool: &mut FramePool) -> Result<u32> {
        let sockets = socks[0].len() + socks[1].len();
        let fill_each = (self.fill_size as usize).min(pool.len() / (2 * sockets));
        if fill_each == 0 {
            return Err(LiveError::Config(format!(
                "{} UMEM frames are too few for {} sockets",
                self.umem.frames(),
                self.queues[0] + self.queues[1]
            )));
        }
        for s in socks.iter_mut().flatten() {
            s.fill_from(pool, fill_each);
        }
        Ok(fill_each as u32)
    }

    /// With the fill rings stocked, send the queues' frames to the sockets.
    fn register(&self, socks: &[Vec<XskSocket>; 2]) -> Result<()> {
        for (port, socks) in socks.iter().enumerate() {
            for s in socks {
                self.redirects[port].register(s.queue(), s)?;
            }
        }
        Ok(())
    }

    /// The source and sink over one core: `socks` and the frames in `pool`.
    fn ends(
        &self,
        socks: [Vec<XskSocket>; 2],
        pool: FramePool,
        fill_target: u32,
        lane: Option<usize>,
        stop: &Arc<AtomicBool>,
        count: &Arc<dyn PortCount>,
    ) -> Result<(XskPorts, XskTx)> {
        let fds = socks.iter().flatten().map(|s| s.as_raw_fd()).collect();
        let held = VecDeque::with_capacity(pool.len());
        let core = Arc::new(Mutex::new(XskCore {
            redirects: Arc::clone(&self.redirects),
            socks,
            umem: Arc::clone(&self.umem),
            pool,
            held,
            fwd: [Vec::new(), Vec::new()],
            count: Arc::clone(count),
            lane,
            reclaimed: 0,
            fill_target,
            stats_at: Instant::now(),
            kernel_seen: [(0, 0); 2],
        }));
        let ports = XskPorts {
            core: Arc::clone(&core),
            backing: Arc::clone(&self.backing),
            fds,
            stop: Arc::clone(stop),
            next_index: 0,
            first: 0,
            descs: vec![Desc::default(); 256],
            interface: ethernet(self.frame_size),
            zero_copy: self.zero_copy,
            queues: self.queues,
            links: Links::new([&self.ifaces[0], &self.ifaces[1]])?,
        };
        Ok((ports, XskTx { core, backing: Arc::clone(&self.backing), dry_run: false }))
    }
}

/// Opens an AF_XDP bridge between `ifaces[0]` (port 0) and `ifaces[1]`
/// (port 1) read by one thread: one UMEM, the redirect program on both
/// interfaces, one socket per (port, queue) sharing the UMEM, fill rings
/// stocked. The source ends when `stop` is set; the programs are detached
/// when both halves are dropped.
pub fn open_xsk(
    ifaces: [&str; 2],
    cfg: &XskBridgeConfig,
    stop: Arc<AtomicBool>,
    count: Arc<dyn PortCount>,
) -> Result<(XskPorts, XskTx)> {
    let (shared, mut socks) = bind_xsk(ifaces, cfg)?;
    let mut pool = FramePool::new(&shared.umem);
    let fill_target = shared.stock(&mut socks, &mut pool)?;
    shared.register(&socks)?;
    shared.ends(socks, pool, fill_target, None, &stop, &count)
}

/// Opens an AF_XDP bridge as [`open_xsk`] does, dealt out into lanes, one
/// per queue index q below both ports' queue counts, but at most one per
/// CPU (`cpus`, or every CPU this process may use); queues beyond go to the
/// lanes round robin. Lane l owns queue l's socket on each port (and those
/// dealt to it) and 1/lanes of the UMEM's frames, receives on its sockets
/// and transmits on its own queue of the other port, so its
/// frames come back on its own completion rings and no frame or ring is
/// shared between lanes (they run on a thread each: see
/// `sluice_pipeline::lanes`). Lane l counts as lane `Some(l)`.
pub fn open_xsk_lanes(
    ifaces: [&str; 2],
    cfg: &XskBridgeConfig,
    cpus: &[usize],
    stop: Arc<AtomicBool>,
    count: Arc<dyn PortCount>,
) -> Result<Vec<(XskPorts, XskTx)>> {
    // A lane's share of the frames is what one thread's bridge would have.
    let queues = ifaces.map(|i| cfg.queues.unwrap_or_else(|| rx_queues(i)).clamp(1, MAX_QUEUES));
    let frames = cfg.frames.max(queues[0].min(queues[1]) * LANE_FRAMES);
    let (shared, socks) = bind_xsk(ifaces, &XskBridgeConfig { frames, ..*cfg })?;
    // A lane per queue, but no more lanes than CPUs to run them: two lanes
    // taking turns on one CPU only add wakeups (then a lane serves several
    // queues, as VPP places several RX queues on one worker).
    let cpu_count = if cpus.is_empty() { sluice_pipeline::lanes::available_cpus() } else { cpus.len() };
    let lanes = (shared.queues[0].min(shared.queues[1]) as usize).min(cpu_count.max(1));
    let mut dealt: Vec<[Vec<XskSocket>; 2]> = (0..lanes).map(|_| [Vec::new(), Vec::new()]).collect();
    for (port, socks) in socks.into_iter().enumerate() {
        for (q, s) in socks.into_iter().enumerate() {
            dealt[q % lanes][port].push(s);
        }
    }
    let frames = shared.umem.frames();
    let per = frames / lanes as u32;
    let mut pools = Vec::with_capacity(lanes);
    for (lane, socks) in dealt.iter_mut().enumerate() {
        let mut pool = FramePool::range(&shared.umem, lane as u32 * per, (lane as u32 + 1) * per);
        let fill_target = shared.stock(socks, &mut pool)?;
        pools.push((pool, fill_target));
    }
    for socks in &dealt {
        shared.register(socks)?;
    }
    dealt
        .into_iter()
        .zip(pools)
        .enumerate()
        .map(|(lane, (socks, (pool, fill)))| shared.ends(socks, pool, fill, Some(lane), &stop, &count))
        .collect()
}

fn lock(core: &Mutex<XskCore>) -> MutexGuard<'_, XskCore> {
    // A panic while holding it leaves rings and pool consistent at worst short of some
    // frames; carrying on is better than a second panic.
    core.lock().unwrap_or_else(PoisonError::into_inner)
}

impl XskCore {
    /// Takes completed frames back, tops the fill rings up, and makes the
    /// system calls the kernel asked for.
    fn service(&mut self) -> Result<()> {
        for s in self.socks.iter_mut().flatten() {
            s.complete_into(&mut self.pool);
        }
        for s in self.socks.iter_mut().flatten() {
            // Up to the stocked level, not the ring's size: the rest of the
            // pool stays free for what reassembly copies and sends.
            let want = self.fill_target.saturating_sub(s.fill_queued()) as usize;
            if want > 0 && !self.pool.is_empty() {
                s.fill_from(&mut self.pool, want);
            }
            s.wakeup()?;
        }
        Ok(())
    }

    fn kernel_stats(&mut self) {
        if self.stats_at.elapsed() < KERNEL_STATS_EVERY {
            return;
        }
        self.stats_at = Instant::now();
        for (port, socks) in self.socks.iter().enumerate() {
            let (mut drops, mut empty) = (0, 0);
            for s in socks {
                if let Ok(st) = s.stats() {
                    drops += st.rx_dropped + st.rx_ring_full;
                    empty += st.rx_fill_ring_empty_descs;
                }
            }
            let seen = &mut self.kernel_seen[port];
            let new = KernelDrops {
                rx_ring_full: drops.saturating_sub(seen.0),
                fill_empty: empty.saturating_sub(seen.1),
                ..KernelDrops::default()
            };
            *seen = (seen.0.max(drops), seen.1.max(empty));
            if new != KernelDrops::default() {
                self.count.kernel_drops(port, &new);
            }
        }
    }

    /// Reports the frames given back since the last report.
    fn report_reclaimed(&mut self) {
        if self.reclaimed > 0 {
            self.count.frames_reclaimed(std::mem::take(&mut self.reclaimed));
        }
    }

    /// Every frame still in the ledger belongs to a packet reassembly
    /// copied out (the pipeline is quiescent): all go back to the pool.
    fn reclaim_all(&mut self) {
        self.reclaimed += self.held.len() as u64;
        for (_, a) in self.held.drain(..) {
            self.pool.free(a);
        }
        self.report_reclaimed();
    }

    /// The sink met lent packet `index` at `addr`: settle the ledger. Frames
    /// before it that never reached the sink (reassembly copied their
    /// packets) go back to the pool. True if `addr` is held for `index`
    /// (then the caller owns it now).
    fn settle(&mut self, index: u64, addr: u64) -> bool {
        while let Some(&(i, a)) = self.held.front() {
            if i > index {
                break;
            }
            self.held.pop_front();
            if i == index {
                return a == addr;
            }
            self.pool.free(a);
            self.reclaimed += 1;
        }
        false
    }
}

impl XskPorts {
    /// True if every socket was bound zero-copy (the driver DMAs into the UMEM).
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Sockets bound per port.
    pub fn queues(&self) -> [u32; 2] {
        self.queues
    }

    /// The mode the XDP programs were attached in.
    pub fn xdp_mode(&self) -> XdpMode {
        lock(&self.core).redirects[0].link().mode()
    }

    /// Takes what the RX rings hold into `batch`; returns how many.
    fn take(&mut self, batch: &mut PacketBatch) -> Result<usize> {
        let mut core = lock(&self.core);
        let core = &mut *core;
        core.service()?;
        core.kernel_stats();
        if batch.backing().is_none() {
            batch.set_backing(&self.backing);
        }
        let now = timestamp(wall_ns());
        let mut got = 0;
        for k in 0..2 {
            let port = (self.first + k) % 2;
            let mut bytes = 0u64;
            let mut n_port = 0u64;
            for s in core.socks[port].iter_mut() {
                let room = batch.capacity().saturating_sub(batch.len()).min(self.descs.len());
                if room == 0 {
                    break;
                }
                let n = s.rx_batch(&mut self.descs[..room]);
                for d in &self.descs[..n] {
                    if !core.umem.valid(d.addr, d.len as usize) || d.len == 0 {
                        // Never seen from a sane kernel; the frame is ours all the same.
                        core.pool.free(d.addr);
                        continue;
                    }
                    let meta = Meta {
                        index: self.next_index,
                        offset: d.addr,
                        timestamp: now,
                        wire_len: d.len,
                        port: port as u32,
                        interface: self.interface,
                    };
                    core.held.push_back((self.next_index, d.addr));
                    batch.push_backed(meta, d.addr as usize, d.len as usize, 0);
                    self.next_index += 1;
                    bytes += u64::from(d.len);
                    n_port += 1;
                }
                got += n;
            }
            if n_port > 0 {
                core.count.received(port, core.lane, n_port, bytes);
            }
        }
        self.first ^= 1;
        Ok(got)
    }
}

impl Source for XskPorts {
    type Error = LiveError;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(Fill::End);
            }
            let got = self.take(batch)?;
            if batch.is_full() {
                return Ok(Fill::More);
            }
            if got > 0 {
                continue;
            }
            if !batch.is_empty() {
                return Ok(Fill::More);
            }
            let Some(ms) = wait_budget(deadline) else { return Ok(Fill::More) };
            // Without the lock: the sink may run meanwhile (with read-ahead).
            wait_any(&self.fds, ms, &mut self.links)?;
        }
    }

    fn is_live(&self) -> bool {
        true
    }
}

impl Sink for XskTx {
    type Error = LiveError;

    fn write(&mut self, batch: &PacketBatch) -> Result<()> {
        let mut core = lock(&self.core);
        let core = &mut *core;
        let ours = batch.backing().is_some_and(|b| Arc::ptr_eq(b, &self.backing));
        let forward = |v: Verdict| v == Verdict::Pass || self.dry_run;
        let mut tally = [Sent::default(); 2];
        core.fwd[0].clear();
        core.fwd[1].clear();
        for (i, p) in batch.packets().iter().enumerate() {
            let Some(out) = other(p.meta.port) else { continue };
            match batch.backed_range(i).filter(|_| ours) {
                Some((start, len)) => {
                    let addr = start as u64;
                    if !core.settle(p.meta.index, addr) {
                        // Not a frame we hold for this packet: touch nothing.
                        continue;
                    }
                    if forward(p.verdict) {
                        core.fwd[out].push(Desc { addr, len: len as u32, options: 0 });
                    } else {
                        core.pool.free(addr);
                    }
                }
                None => {
                    // A copy (reassembly's): send it from a free frame.
                    if !forward(p.verdict) {
                        continue;
                    }
                    let bytes = batch.bytes(i);
                    if bytes.len() > core.umem.frame_size() as usize || bytes.len() < 14 {
                        tally[out].invalid += 1;
                        continue;
                    }
                    let Some(addr) = core.pool.alloc() else {
                        tally[out].no_buffer += 1;
                        continue;
                    };
                    core.umem.write_frame(addr, bytes);
                    core.fwd[out].push(Desc { addr, len: bytes.len() as u32, options: 0 });
                }
            }
        }
        core.report_reclaimed();
        for (out, t) in tally.iter_mut().enumerate() {
            if core.fwd[out].is_empty() {
                continue;
            }
            // The core's first socket on the port transmits (queue 0, or the
            // lane's own queue); any socket of the UMEM may send any frame.
            let sock = &mut core.socks[out][0];
            let sent = sock.tx(&core.fwd[out])?;
            for d in &core.fwd[out][..sent] {
                t.packets += 1;
                t.bytes += u64::from(d.len);
            }
            for d in &core.fwd[out][sent..] {
                core.pool.free(d.addr);
                t.ring_full += 1;
            }
            if sent > 0 && sock.tx_needs_wakeup() && sock.kick_tx().is_err() {
                t.errors += 1;
            }
        }
        for (out, t) in tally.iter().enumerate() {
            if *t != Sent::default() {
                core.count.sent(out, core.lane, t);
            }
        }
        // Dropped frames are in the pool: put them straight back on the fill rings.
        core.service()
    }

    fn finish(&mut self) -> Result<()> {
        let mut core = lock(&self.core);
        let end = Instant::now() + Duration::from_millis(100);
        // Let what is queued go out before the sockets close.
        while core.socks.iter().flatten().any(|s| s.tx_pending() > 0) && Instant::now() < end {
            for s in core.socks.iter().flatten() {
                let _ = s.kick_tx();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        core.service()
    }

    fn quiescent(&mut self) {
        let mut core = lock(&self.core);
        if !core.held.is_empty() {
            core.reclaim_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_budget_is_bounded_and_ends_at_the_deadline() {
        assert_eq!(wait_budget(None), Some(STOP_CHECK_MS));
        assert_eq!(wait_budget(Some(Instant::now() - Duration::from_millis(1))), None);
        let ms = wait_budget(Some(Instant::now() + Duration::from_micros(300))).unwrap();
        assert!((0..=1).contains(&ms), "{ms}");
        assert_eq!(wait_budget(Some(Instant::now() + Duration::from_secs(5))), Some(STOP_CHECK_MS));
    }

    #[test]
    fn the_other_port() {
        assert_eq!(other(0), Some(1));
        assert_eq!(other(1), Some(0));
        assert_eq!(other(2), None);
    }

    #[test]
    fn backed_packets_keep_their_umem_address() {
        // The sink recovers a frame's address from where the packet points into the backing.
        let backing: Backing = Arc::new(vec![0u8; 8192]);
        let mut b = PacketBatch::with_capacity(4);
        b.set_backing(&backing);
        let meta = Meta {
            index: 7,
            offset: 4096 + 256,
            timestamp: timestamp(1),
            wire_len: 60,
            port: 1,
            interface: ethernet(2048),
        };
        b.push_backed(meta, 4096 + 256, 60, 0);
        b.push_copy(meta, &[0; 60]);
        assert_eq!(b.backed_range(0), Some((4096 + 256, 60)));
        assert_eq!(b.backed_range(1), None);
    }
}
