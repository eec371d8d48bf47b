//! AF_PACKET ports: the fallback where XDP is not available.
//!
//! A [`PacketSocket`] is two sockets bound to one interface:
//!
//! - RX: a `TPACKET_V3` ring of blocks. The kernel fills a block with many
//!   frames and hands it over when it is full or its timeout (a few ms)
//!   expires; we walk its frames and give the whole block back. It is
//!   created with protocol 0 (receiving nothing), gets its ring, and only
//!   then is bound to the interface with `ETH_P_ALL`, so no frame of another
//!   interface slips in first. `PACKET_IGNORE_OUTGOING` keeps our own
//!   transmissions (and the host's) out; `PACKET_MR_PROMISC` takes frames
//!   for any MAC; optional `PACKET_FANOUT` spreads flows over several
//!   sockets (one per worker).
//! - TX: a `TPACKET_V2` ring of fixed slots with `PACKET_QDISC_BYPASS`:
//!   [`PacketSocket::send`] copies a frame into the next free slot and
//!   marks it, [`PacketSocket::flush`] makes one `sendto` for all marked
//!   slots. Bound with protocol 0, so it receives nothing.
//!
//! The kernel takes the 802.1Q tag out of a received frame before packet
//! sockets see it and reports it in the ring header (`tp_vlan_tci`,
//! `tp_vlan_tpid`, `TP_STATUS_VLAN_VALID`: the ring's form of
//! `PACKET_AUXDATA`). [`PacketSocket::rx_batch`] puts it back into the
//! bytes, so a bridge forwards the frame as it was on the wire.
//!
//! Slot ownership goes through a status word at the head of each block
//! (RX) or slot (TX): we read it with an acquire load before touching the
//! contents and hand the slot over with a release store after the last
//! write to it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{LiveError, Result, NEEDS_RAW};
use crate::sys::{self, Mmap};

const SOL_PACKET: i32 = 263;
const PACKET_ADD_MEMBERSHIP: i32 = 1;
const PACKET_STATISTICS: i32 = 6;
const PACKET_RX_RING: i32 = 5;
const PACKET_VERSION: i32 = 10;
const PACKET_TX_RING: i32 = 13;
const PACKET_LOSS: i32 = 14;
const PACKET_FANOUT: i32 = 18;
const PACKET_QDISC_BYPASS: i32 = 20;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const PACKET_MR_PROMISC: u16 = 1;
const TPACKET_V2: i32 = 1;
const TPACKET_V3: i32 = 2;
const ETH_P_ALL: u16 = 0x0003;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;

/// `struct tpacket_block_desc`: offset of `hdr.bh1.block_status`.
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
/// `struct tpacket3_hdr` field offsets.
const H3_NEXT: usize = 0;
const H3_SEC: usize = 4;
const H3_NSEC: usize = 8;
const H3_SNAPLEN: usize = 12;
const H3_LEN: usize = 16;
const H3_STATUS: usize = 20;
const H3_MAC: usize = 24;
const H3_VLAN_TCI: usize = 32;
const H3_VLAN_TPID: usize = 36;
const H3_SIZE: usize = 48;
/// `struct tpacket2_hdr` field offsets; TX data starts at
/// `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)` = 32.
const H2_LEN: usize = 4;
const H2_DATA: usize = 32;

/// `PACKET_FANOUT` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutMode {
    /// By flow hash. The kernel uses its symmetric flow hash
    /// (`__skb_get_hash_symmetric`): both directions of a flow, and all
    /// fragments of a datagram (hashed by addresses only), pick the same
    /// member index, on every interface — so with the same number of
    /// workers on both ports, a flow's two directions meet on one worker.
    Hash,
    /// Round robin.
    LoadBalance,
    /// By the CPU that received the frame.
    Cpu,
    /// By the recorded RX queue.
    QueueMapping,
}

/// A fanout group membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// Group id, unique per network namespace and interface.
    pub group: u16,
    /// How frames are spread.
    pub mode: FanoutMode,
    /// Let the kernel reassemble IPv4 fragments before hashing
    /// (`PACKET_FANOUT_FLAG_DEFRAG`). Off for a bridge: it would forward
    /// the reassembled datagram, larger than the MTU.
    pub defrag: bool,
}

impl Fanout {
    fn arg(&self) -> u32 {
        let mode = match self.mode {
            FanoutMode::Hash => 0,
            FanoutMode::LoadBalance => 1,
            FanoutMode::Cpu => 2,
            FanoutMode::QueueMapping => 5,
        };
        let flags = if self.defrag { 0x8000 } else { 0 };
        u32::from(self.group) | ((mode | flags) << 16)
    }
}

/// Ring geometry and options of a [`PacketSocket`].
#[derive(Debug, Clone, Copy)]
pub struct PacketConfig {
    /// Open the RX ring.
    pub rx: bool,
    /// Open the TX ring.
    pub tx: bool,
    /// RX block size in bytes (a multiple of the page size; one frame must fit).
    pub block_size: u32,
    /// RX blocks.
    pub block_count: u32,
    /// RX block timeout in ms: a block that is not full is handed over after this.
    pub block_timeout_ms: u32,
    /// TX slot size in bytes (a power of two, at least 64; data gets 32 less).
    pub tx_frame_size: u32,
    /// TX slots.
    pub tx_frames: u32,
    /// Fanout group for RX, if several sockets share the interface.
    pub fanout: Option<Fanout>,
    /// Put the interface in promiscuous mode while the socket is open.
    pub promisc: bool,
    /// `PACKET_QDISC_BYPASS` for TX (skip the qdisc layer).
    pub qdisc_bypass: bool,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            rx: true,
            tx: true,
            block_size: 1 << 18,
            block_count: 16,
            block_timeout_ms: 2,
            tx_frame_size: 4096,
            tx_frames: 512,
            fanout: None,
            promisc: true,
            qdisc_bypass: true,
        }
    }
}

/// What the ring says about a received frame besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMeta {
    /// Length on the wire (as handed up, tag included).
    pub wire_len: u32,
    /// Receive time, seconds.
    pub sec: u32,
    /// Receive time, nanoseconds.
    pub nsec: u32,
    /// The 802.1Q/802.1ad tag was taken out by the kernel and has been put back.
    pub vlan_restored: bool,
    /// The frame came from a local sender with its checksum left to the
    /// device (`TP_STATUS_CSUMNOTREADY`): the bytes hold a partial checksum.
    pub csum_not_ready: bool,
}

/// Counters kept by a [`PacketSocket`] and the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames handed up by `rx_batch`.
    pub rx_frames: u64,
    /// Frames skipped because the ring cut them short (snaplen < len).
    pub rx_truncated: u64,
    /// Frames queued by `send`.
    pub tx_frames: u64,
    /// `send` calls refused because every TX slot was busy.
    pub tx_ring_full: u64,
    /// Kernel: frames that reached the socket since the last read.
    pub kernel_packets: u64,
    /// Kernel: frames dropped since the last read (ring full).
    pub kernel_drops: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct PacketMreq {
    ifindex: i32,
    ty: u16,
    alen: u16,
    address: [u8; 8],
}

struct RxRing {
    // Field order: unmap before closing.
    map: Mmap,
    fd: OwnedFd,
    block_size: usize,
    blocks: usize,
    /// The block being read.
    block: usize,
    /// Frames of `block` already handed up, and the offset of the next one.
    pkt_index: u32,
    pkt_offset: usize,
}

struct TxRing {
    map: Mmap,
    fd: OwnedFd,
    frame_size: usize,
    frames: usize,
    head: usize,
    /// Slots marked since the last flush.
    marked: u32,
}

/// An AF_PACKET port: an RX ring and/or a TX ring on one interface.
pub struct PacketSocket {
    rx: Option<RxRing>,
    tx: Option<TxRing>,
    iface: String,
    ifindex: u32,
    scratch: Vec<u8>,
    stats: PacketStats,
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("iface", &self.iface)
            .field("rx", &self.rx.is_some())
            .field("tx", &self.tx.is_some())
            .finish()
    }
}

fn sockaddr_ll(ifindex: u32, protocol: u16) -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex as i32,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

fn packet_socket() -> Result<OwnedFd> {
    sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(|e| LiveError::io("socket(AF_PACKET)", NEEDS_RAW, e))
}

fn opt<T: Copy>(fd: &OwnedFd, name: i32, what: &'static str, v: &T) -> Result<()> {
    sys::setsockopt(fd, SOL_PACKET, name, v).map_err(|e| LiveError::io(what, NEEDS_RAW, e))
}

fn ring_err(what: &'static str, asked: u64) -> impl Fn(io::Error) -> LiveError {
    move |e| match e.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
            LiveError::Memlock { what, asked, limit: crate::error::memlock_limit_text() }
        }
        Some(libc::EINVAL) => LiveError::Config(format!("{what}: the kernel refused the ring geometry ({e})")),
        _ => LiveError::io(what, NEEDS_RAW, e),
    }
}

impl PacketSocket {
    /// Opens the rings on `iface` (which must exist and be up).
    pub fn open(iface: &str, cfg: &PacketConfig) -> Result<PacketSocket> {
        let ifindex = sys::iface_up(iface)?;
        let rx = if cfg.rx { Some(Self::open_rx(iface, ifindex, cfg)?) } else { None };
        let tx = if cfg.tx { Some(Self::open_tx(iface, ifindex, cfg)?) } else { None };
        Ok(PacketSocket {
            rx,
            tx,
            iface: iface.to_owned(),
            ifindex,
            scratch: Vec::with_capacity(cfg.block_size as usize),
            stats: PacketStats::default(),
        })
    }

    fn open_rx(iface: &str, ifindex: u32, cfg: &PacketConfig) -> Result<RxRing> {
        let page = 4096u32;
        if cfg.block_size == 0
            || !cfg.block_size.is_multiple_of(page)
            || !cfg.block_size.is_power_of_two()
            || cfg.block_count == 0
        {
            return Err(LiveError::Config(format!(
                "RX block size {} must be a power of two multiple of {page}, with at least one block",
                cfg.block_size
            )));
        }
        let fd = packet_socket()?;
        opt(&fd, PACKET_VERSION, "PACKET_VERSION", &TPACKET_V3)?;
        // The nominal frame size only sets the frame count; V3 packs frames of any size.
        let frame_size = 2048u32.min(cfg.block_size);
        let req = TpacketReq3 {
            block_size: cfg.block_size,
            block_nr: cfg.block_count,
            frame_size,
            frame_nr: cfg.block_size / frame_size * cfg.block_count,
            retire_blk_tov: cfg.block_timeout_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        let len = cfg.block_size as u64 * u64::from(cfg.block_count);
        sys::setsockopt(&fd, SOL_PACKET, PACKET_RX_RING, &req).map_err(ring_err("PACKET_RX_RING", len))?;
        let map = Mmap::shared(&fd, len as usize, 0, true).map_err(ring_err("mmap PACKET_RX_RING", len))?;
        let one = 1i32;
        // Our TX socket's frames (and the host's) would otherwise come back to us.
        opt(&fd, PACKET_IGNORE_OUTGOING, "PACKET_IGNORE_OUTGOING", &one)?;
        sys::bind(&fd, &sockaddr_ll(ifindex, ETH_P_ALL))
            .map_err(|e| LiveError::io_iface("bind(AF_PACKET)", NEEDS_RAW, iface, e))?;
        if cfg.promisc {
            let m = PacketMreq { ifindex: ifindex as i32, ty: PACKET_MR_PROMISC, alen: 0, address: [0; 8] };
            opt(&fd, PACKET_ADD_MEMBERSHIP, "PACKET_ADD_MEMBERSHIP (promiscuous)", &m)?;
        }
        if let Some(f) = cfg.fanout {
            sys::setsockopt(&fd, SOL_PACKET, PACKET_FANOUT, &f.arg()).map_err(|e| match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::EEXIST) => LiveError::Config(format!(
                    "fanout group {} on {iface} exists with another mode or belongs to another interface",
                    f.group
                )),
                _ => LiveError::io("PACKET_FANOUT", NEEDS_RAW, e),
            })?;
        }
        Ok(RxRing {
            map,
            fd,
            block_size: cfg.block_size as usize,
            blocks: cfg.block_count as usize,
            block: 0,
            pkt_index: 0,
            pkt_offset: 0,
        })
    }

    fn open_tx(iface: &str, ifindex: u32, cfg: &PacketConfig) -> Result<TxRing> {
        let fs = cfg.tx_frame_size;
        if !fs.is_power_of_two() || !(64..=65536).contains(&fs) || cfg.tx_frames == 0 {
            return Err(LiveError::Config(format!("TX slot size {fs} must be a power of two in 64..=65536")));
        }
        let block_size = fs.max(1 << 16);
        let per_block = block_size / fs;
        let block_nr = cfg.tx_frames.div_ceil(per_block);
        let fd = packet_socket()?;
        opt(&fd, PACKET_VERSION, "PACKET_VERSION", &TPACKET_V2)?;
        let one = 1i32;
        // A malformed slot is skipped instead of stopping the ring.
        opt(&fd, PACKET_LOSS, "PACKET_LOSS", &one)?;
        if cfg.qdisc_bypass {
            opt(&fd, PACKET_QDISC_BYPASS, "PACKET_QDISC_BYPASS", &one)?;
        }
        let req = TpacketReq { block_size, block_nr, frame_size: fs, frame_nr: per_block * block_nr };
        let len = u64::from(block_size) * u64::from(block_nr);
        sys::setsockopt(&fd, SOL_PACKET, PACKET_TX_RING, &req).map_err(ring_err("PACKET_TX_RING", len))?;
        let map = Mmap::shared(&fd, len as usize, 0, true).map_err(ring_err("mmap PACKET_TX_RING", len))?;
        // Protocol 0: bound to the device for sending, receives nothing.
        sys::bind(&fd, &sockaddr_ll(ifindex, 0))
            .map_err(|e| LiveError::io_iface("bind(AF_PACKET)", NEEDS_RAW, iface, e))?;
        Ok(TxRing { map, fd, frame_size: fs as usize, frames: (per_block * block_nr) as usize, head: 0, marked: 0 })
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Its index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The RX socket (for `poll` in a caller's loop).
    pub fn rx_fd(&self) -> Option<RawFd> {
        self.rx.as_ref().map(|r| r.fd.as_raw_fd())
    }

    /// Hands up to `max` received frames to `f`, each complete and with
    /// its VLAN tag back in place; returns how many. Blocks are given back
    /// to the kernel as soon as all their frames have been seen.
    pub fn rx_batch<F: FnMut(&[u8], FrameMeta)>(&mut self, max: usize, mut f: F) -> usize {
        let Some(rx) = self.rx.as_mut() else { return 0 };
        let mut done = 0;
        while done < max {
            let base = rx.block * rx.block_size;
            // SAFETY: `base + BLOCK_STATUS` is a 4-aligned word inside the mapping (blocks are
            // page aligned); the kernel flips it with smp_wmb/flush, we read it atomically.
            let status = unsafe { &*(rx.map.as_ptr().add(base + BLOCK_STATUS) as *const AtomicU32) };
            // Acquire: the frames the kernel wrote into the block are visible after this.
            if status.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the block is ours (status USER) until we store KERNEL below; every read
            // is bounds-checked against the block.
            let block = unsafe { std::slice::from_raw_parts(rx.map.as_ptr().add(base), rx.block_size) };
            let num = rd32(block, BLOCK_NUM_PKTS).unwrap_or(0);
            if rx.pkt_index == 0 {
                rx.pkt_offset = rd32(block, BLOCK_FIRST_PKT).unwrap_or(0) as usize;
            }
            while rx.pkt_index < num && done < max {
                let at = rx.pkt_offset;
                let Some(h) = block.get(at..at + H3_SIZE) else {
                    rx.pkt_index = num;
                    break;
                };
                let next = rd32(h, H3_NEXT).unwrap_or(0) as usize;
                let snap = rd32(h, H3_SNAPLEN).unwrap_or(0) as usize;
                let wire = rd32(h, H3_LEN).unwrap_or(0);
                let st = rd32(h, H3_STATUS).unwrap_or(0);
                let mac = rd16(h, H3_MAC).unwrap_or(0) as usize;
                rx.pkt_index += 1;
                rx.pkt_offset = if next == 0 { block.len() } else { at + next };
                let Some(data) = block.get(at + mac..at + mac + snap) else {
                    self.stats.rx_truncated += 1;
                    continue;
                };
                let mut meta = FrameMeta {
                    wire_len: wire,
                    sec: rd32(h, H3_SEC).unwrap_or(0),
                    nsec: rd32(h, H3_NSEC).unwrap_or(0),
                    vlan_restored: false,
                    csum_not_ready: st & TP_STATUS_CSUMNOTREADY != 0,
                };
                if (snap as u32) < wire {
                    self.stats.rx_truncated += 1;
                    continue;
                }
                if st & TP_STATUS_VLAN_VALID != 0 && data.len() >= 12 {
                    let tci = rd32(h, H3_VLAN_TCI).unwrap_or(0) as u16;
                    let tpid = if st & TP_STATUS_VLAN_TPID_VALID != 0 {
                        rd16(h, H3_VLAN_TPID).unwrap_or(0x8100)
                    } else {
                        0x8100
                    };
                    let tpid = if tpid == 0 { 0x8100 } else { tpid };
                    self.scratch.clear();
                    self.scratch.extend_from_slice(&data[..12]);
                    self.scratch.extend_from_slice(&tpid.to_be_bytes());
                    self.scratch.extend_from_slice(&tci.to_be_bytes());
                    self.scratch.extend_from_slice(&data[12..]);
                    meta.vlan_restored = true;
                    meta.wire_len += 4;
                    f(&self.scratch, meta);
                } else {
                    f(data, meta);
                }
                done += 1;
                self.stats.rx_frames += 1;
            }
            if rx.pkt_index >= num {
                // Release: our reads of the block are done before the kernel refills it.
                status.store(TP_STATUS_KERNEL, Ordering::Release);
                rx.block = (rx.block + 1) % rx.blocks;
                rx.pkt_index = 0;
                rx.pkt_offset = 0;
            }
        }
        done
    }

    /// Waits up to `timeout_ms` for a block of received frames.
    pub fn poll_rx(&mut self, timeout_ms: i32) -> Result<bool> {
        let Some(rx) = self.rx.as_ref() else { return Ok(false) };
        if rx.block_ready() {
            return Ok(true);
        }
        let rev = sys::poll_one(rx.fd.as_raw_fd(), libc::POLLIN | libc::POLLERR, timeout_ms)
            .map_err(|e| LiveError::Io { op: "poll(AF_PACKET)", source: e })?;
        Ok(rev != 0 || rx.block_ready())
    }

    /// Copies `frame` into the next TX slot and marks it for sending;
    /// `Ok(false)` when every slot is still busy (flush, then retry or drop).
    /// Nothing goes out until [`PacketSocket::flush`].
    pub fn send(&mut self, frame: &[u8]) -> Result<bool> {
        let Some(tx) = self.tx.as_mut() else {
            return Err(LiveError::Config(format!("{}: the socket was opened without a TX ring", self.iface)));
        };
        let max = tx.frame_size - H2_DATA;
        if frame.len() > max {
            return Err(LiveError::FrameTooBig { len: frame.len(), max });
        }
        if frame.len() < 14 {
            return Err(LiveError::Config(format!("a frame of {} bytes has no Ethernet header", frame.len())));
        }
        let base = tx.head * tx.frame_size;
        // SAFETY: slot `head` lies inside the mapping; its first word is the 4-aligned status
        // the kernel reads and writes atomically.
        let status = unsafe { &*(tx.map.as_ptr().add(base) as *const AtomicU32) };
        // Acquire: when the kernel says AVAILABLE it has finished reading the slot.
        let s = status.load(Ordering::Acquire);
        if s != TP_STATUS_AVAILABLE && s != TP_STATUS_WRONG_FORMAT {
            self.stats.tx_ring_full += 1;
            return Ok(false);
        }
        // SAFETY: the slot is ours (AVAILABLE) until we store SEND_REQUEST; the writes stay
        // inside it (`H2_DATA + frame.len() <= frame_size`, checked above).
        unsafe {
            let p = tx.map.as_ptr().add(base);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), p.add(H2_DATA), frame.len());
            (p.add(H2_LEN) as *mut u32).write_volatile(frame.len() as u32);
        }
        // Release: the bytes and length are written before the kernel may take the slot.
        status.store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        tx.head = (tx.head + 1) % tx.frames;
        tx.marked += 1;
        self.stats.tx_frames += 1;
        Ok(true)
    }

    /// Sends every marked slot (one `sendto`, not waiting for completion).
    pub fn flush(&mut self) -> Result<()> {
        self.flush_with(libc::MSG_DONTWAIT)
    }

    /// Sends every marked slot and waits until the kernel has sent them.
    pub fn flush_wait(&mut self) -> Result<()> {
        self.flush_with(0)
    }

    fn flush_with(&mut self, flags: i32) -> Result<()> {
        let Some(tx) = self.tx.as_mut() else { return Ok(()) };
        if tx.marked == 0 {
            return Ok(());
        }
        match sys::kick_send(tx.fd.as_raw_fd(), flags) {
            Ok(()) => {
                tx.marked = 0;
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => Ok(()),
            Err(e) => Err(LiveError::io_iface("sendto(AF_PACKET TX ring)", NEEDS_RAW, &self.iface, e)),
        }
    }

    /// Free TX slots right now.
    pub fn tx_free(&self) -> usize {
        let Some(tx) = self.tx.as_ref() else { return 0 };
        (0..tx.frames)
            .filter(|i| {
                // SAFETY: each slot's first word is a 4-aligned status inside the mapping.
                let st = unsafe { &*(tx.map.as_ptr().add(i * tx.frame_size) as *const AtomicU32) };
                st.load(Ordering::Relaxed) == TP_STATUS_AVAILABLE
            })
            .count()
    }

    /// Our counters plus the kernel's (`PACKET_STATISTICS`, which resets on read).
    pub fn stats(&mut self) -> Result<PacketStats> {
        if let Some(rx) = self.rx.as_ref() {
            let (k, _) = sys::getsockopt::<libc::tpacket_stats_v3>(&rx.fd, SOL_PACKET, PACKET_STATISTICS)
                .map_err(|e| LiveError::io("PACKET_STATISTICS", NEEDS_RAW, e))?;
            self.stats.kernel_packets += u64::from(k.tp_packets);
            self.stats.kernel_drops += u64::from(k.tp_drops);
        }
        Ok(self.stats)
    }
}

impl RxRing {
    fn block_ready(&self) -> bool {
        let base = self.block * self.block_size;
        // SAFETY: as in `rx_batch`: a 4-aligned status word inside the mapping.
        let status = unsafe { &*(self.map.as_ptr().add(base + BLOCK_STATUS) as *const AtomicU32) };
        status.load(Ordering::Acquire) & TP_STATUS_USER != 0
    }
}

fn rd32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn rd16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_argument() {
        let f = Fanout { group: 0x1234, mode: FanoutMode::Hash, defrag: false };
        assert_eq!(f.arg(), 0x0000_1234);
        let f = Fanout { group: 7, mode: FanoutMode::Cpu, defrag: true };
        assert_eq!(f.arg(), (0x8002 << 16) | 7);
    }

    #[test]
    fn layouts() {
        assert_eq!(std::mem::size_of::<TpacketReq3>(), 28);
        assert_eq!(std::mem::size_of::<PacketMreq>(), 16);
        assert_eq!(H3_SIZE, std::mem::size_of::<libc::tpacket3_hdr>());
    }
}
