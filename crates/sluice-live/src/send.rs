//! Sending frames out of one interface: what `sluice send` (pkt-gen's role
//! in the seed's test bed) drives a live path with.
//!
//! Two ways, behind one [`FrameSender`] trait: an AF_PACKET TX ring
//! (`PACKET_QDISC_BYPASS`, one `sendto` per flush), or an AF_XDP socket with
//! a UMEM of its own (no XDP program is needed to transmit: frames are
//! copied into free UMEM frames, put on the TX ring, and come back on the
//! completion ring).

use std::time::{Duration, Instant};

use crate::error::{LiveError, Result};
use crate::packet::{PacketConfig, PacketSocket};
use crate::xsk::{BindMode, Desc, FramePool, Umem, XskConfig, XskSocket};

/// A transmit path on one interface.
pub trait FrameSender {
    /// Queues one frame; `Ok(false)` when the ring has no room right now
    /// (flush, then try again). Nothing leaves before [`FrameSender::flush`].
    fn send(&mut self, frame: &[u8]) -> Result<bool>;
    /// Hands what is queued to the kernel, without waiting.
    fn flush(&mut self) -> Result<()>;
    /// Waits (up to a second) until everything queued has left.
    fn drain(&mut self) -> Result<()>;
}

/// AF_PACKET: a TX-only socket with a `TPACKET_V2` ring.
#[derive(Debug)]
pub struct PacketSender {
    sock: PacketSocket,
}

impl PacketSender {
    /// Opens the TX ring on `iface` (which must exist and be up).
    pub fn open(iface: &str) -> Result<PacketSender> {
        let cfg = PacketConfig { rx: false, tx: true, promisc: false, tx_frames: 1024, ..PacketConfig::default() };
        Ok(PacketSender { sock: PacketSocket::open(iface, &cfg)? })
    }
}

impl FrameSender for PacketSender {
    fn send(&mut self, frame: &[u8]) -> Result<bool> {
        self.sock.send(frame)
    }

    fn flush(&mut self) -> Result<()> {
        self.sock.flush()
    }

    fn drain(&mut self) -> Result<()> {
        self.sock.flush_wait()
    }
}

/// AF_XDP: a socket on queue `queue` of the interface over a UMEM of its own.
pub struct XskSender {
    // Drop order: the socket before the UMEM it uses.
    sock: XskSocket,
    umem: Umem,
    pool: FramePool,
}

impl std::fmt::Debug for XskSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSender").field("sock", &self.sock).finish()
    }
}

const XSK_FRAMES: u32 = 4096;
const XSK_FRAME_SIZE: u32 = 2048;

impl XskSender {
    /// Binds a socket to `queue` of `iface` (copy mode: zero-copy buys
    /// nothing when every frame is copied in anyway).
    pub fn open(iface: &str, queue: u32) -> Result<XskSender> {
        let umem = Umem::new(XSK_FRAMES, XSK_FRAME_SIZE)?;
        let cfg = XskConfig {
            rx_size: 64,
            fill_size: 64,
            tx_size: 2048,
            comp_size: 2048,
            mode: BindMode::Copy,
            need_wakeup: true,
        };
        let sock = XskSocket::bind(iface, queue, &umem, &cfg)?;
        let pool = FramePool::new(&umem);
        Ok(XskSender { sock, umem, pool })
    }

    /// True if the socket was bound zero-copy.
    pub fn is_zero_copy(&self) -> bool {
        self.sock.is_zero_copy()
    }
}

impl FrameSender for XskSender {
    fn send(&mut self, frame: &[u8]) -> Result<bool> {
        if frame.len() > XSK_FRAME_SIZE as usize {
            return Err(LiveError::FrameTooBig { len: frame.len(), max: XSK_FRAME_SIZE as usize });
        }
        if frame.len() < 14 {
            return Err(LiveError::Config(format!("a frame of {} bytes has no Ethernet header", frame.len())));
        }
        if self.pool.is_empty() {
            self.sock.complete_into(&mut self.pool);
        }
        let Some(addr) = self.pool.alloc() else { return Ok(false) };
        self.umem.write_frame(addr, frame);
        if self.sock.tx(&[Desc { addr, len: frame.len() as u32, options: 0 }])? == 0 {
            self.pool.free(addr);
            return Ok(false);
        }
        Ok(true)
    }

    fn flush(&mut self) -> Result<()> {
        if self.sock.tx_pending() > 0 && self.sock.tx_needs_wakeup() {
            self.sock.kick_tx()?;
        }
        self.sock.complete_into(&mut self.pool);
        Ok(())
    }

    fn drain(&mut self) -> Result<()> {
        let end = Instant::now() + Duration::from_secs(1);
        while self.pool.len() < XSK_FRAMES as usize && Instant::now() < end {
            if self.sock.tx_pending() > 0 {
                self.sock.kick_tx()?;
            }
            if self.sock.complete_into(&mut self.pool) == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(())
    }
}
