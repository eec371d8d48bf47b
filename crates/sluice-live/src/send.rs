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
    /// Opens the TX ring on `iface` (which must exist and be up). With
    /// `through_qdisc`, frames go through the qdisc layer, where the kernel
    /// picks each one's TX queue by its flow hash (a multi-queue device's
    /// queues all carry traffic); else they bypass it, on the queue of the
    /// sending CPU.
    pub fn open(iface: &str, through_qdisc: bool) -> Result<PacketSender> {
        let cfg = PacketConfig {
            rx: false,
            tx: true,
            promisc: false,
            tx_frames: 1024,
            qdisc_bypass: !through_qdisc,
            ..PacketConfig::default()
        };
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

/// How [`transmit`] paces and limits a run.
#[derive(Debug, Clone, Default)]
pub struct Pacing {
    /// Frames per second (`None`: as fast as the ring takes them).
    pub rate: Option<f64>,
    /// Frames to send or skip in all (`None`: until the frames end).
    pub count: Option<u64>,
    /// The link's MTU: longer frames are skipped (the kernel would drop them
    /// silently after taking them from the ring).
    pub mtu: Option<usize>,
}

/// What [`transmit`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendTotals {
    /// Frames sent.
    pub sent: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Frames that could not be sent (too big for the MTU or a ring slot,
    /// shorter than an Ethernet header).
    pub skipped: u64,
    /// Of `skipped`, those longer than the MTU allows.
    pub oversize: u64,
}

/// Why [`transmit`] stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TransmitError<E> {
    /// The frames' source failed (its whole chain is printed).
    #[error("{0:#}")]
    Frames(E),
    /// The socket failed: `what` it was doing, and how.
    #[error("{what}: {error}")]
    Live {
        /// What was being done.
        what: &'static str,
        /// The socket's error.
        error: LiveError,
    },
    /// Nothing left the ring for 2 s.
    #[error("the TX ring stayed full for 2 s: is the link up and carrying?")]
    RingStuck,
}

/// The interface's MTU (from sysfs), if it can be read.
pub fn mtu_of(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu")).ok()?.trim().parse().ok()
}

/// The longest frame the kernel sends on a link with `mtu`: the Ethernet
/// header on top, and one VLAN tag more if the frame carries one.
pub fn max_frame(mtu: usize, frame: &[u8]) -> usize {
    let tagged = matches!(frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
    mtu + 14 + if tagged { 4 } else { 0 }
}

/// Tokens at `rate` per second, at most `burst` at a time: at most a
/// millisecond's worth (and at least one), so a stall is not followed by a
/// burst the receiver never sees in real traffic.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Bucket {
        let burst = (rate / 1000.0).clamp(1.0, 256.0);
        Bucket { rate, burst, tokens: 1.0, at: Instant::now() }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + (now - self.at).as_secs_f64() * self.rate).min(self.burst);
        self.at = now;
    }

    /// How long until a token is there.
    fn wait(&self) -> Duration {
        Duration::from_secs_f64(((1.0 - self.tokens) / self.rate).max(0.0))
    }
}

/// Frames queued before a flush when nothing else forces one.
const FLUSH_EVERY: u32 = 64;

/// Send the frames `next` yields (it fills the buffer and returns false at
/// the end) through `sender`, paced by a token bucket: each frame takes a
/// token, and the ring is flushed whenever the bucket runs dry, before
/// sleeping, so paced frames leave on time. Stops at the end, at
/// `pacing.count`, or when `stop` is set; drains the ring before returning.
/// `every_second` sees the totals about once a second (progress lines).
pub fn transmit<E>(
    sender: &mut dyn FrameSender,
    mut next: impl FnMut(&mut Vec<u8>) -> std::result::Result<bool, E>,
    pacing: &Pacing,
    stop: &std::sync::atomic::AtomicBool,
    mut every_second: impl FnMut(&SendTotals),
) -> std::result::Result<SendTotals, TransmitError<E>> {
    use std::sync::atomic::Ordering;
    let flush = |s: &mut dyn FrameSender| {
        s.flush().map_err(|error| TransmitError::Live { what: "flushing the TX ring", error })
    };
    let limit = pacing.count.unwrap_or(u64::MAX);
    let mut bucket = pacing.rate.map(Bucket::new);
    let mut buf = Vec::with_capacity(16_384);
    let mut t = SendTotals::default();
    let mut unflushed = 0u32;
    let mut last_report = Instant::now();
    while t.sent + t.skipped < limit && !stop.load(Ordering::Relaxed) {
        if let Some(b) = bucket.as_mut() {
            b.refill();
            while b.tokens < 1.0 {
                // Out of tokens: what is queued goes now, then wait for the next one.
                flush(sender)?;
                unflushed = 0;
                let w = b.wait();
                if w > Duration::from_micros(50) {
                    std::thread::sleep(w);
                } else {
                    std::hint::spin_loop();
                }
                b.refill();
            }
            b.tokens -= 1.0;
        }
        if !next(&mut buf).map_err(TransmitError::Frames)? {
            break;
        }
        if let Some(limit) = pacing.mtu.map(|m| max_frame(m, &buf)).filter(|&max| buf.len() > max) {
            if t.oversize == 0 {
                tracing::warn!(
                    "skipping frames larger than the MTU allows ({limit} bytes, first one {} bytes)",
                    buf.len()
                );
            }
            t.oversize += 1;
            t.skipped += 1;
            continue;
        }
        let mut full_since = None;
        loop {
            match sender.send(&buf) {
                Ok(true) => {
                    t.sent += 1;
                    t.bytes += buf.len() as u64;
                    unflushed += 1;
                    break;
                }
                Ok(false) => {
                    flush(sender)?;
                    unflushed = 0;
                    let since = *full_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(2) {
                        return Err(TransmitError::RingStuck);
                    }
                    std::thread::sleep(Duration::from_micros(20));
                }
                Err(e @ (LiveError::FrameTooBig { .. } | LiveError::Config(_))) => {
                    if t.skipped == 0 {
                        tracing::warn!("skipping a frame that cannot be sent: {e}");
                    }
                    t.skipped += 1;
                    break;
                }
                Err(error) => return Err(TransmitError::Live { what: "sending", error }),
            }
        }
        if unflushed >= FLUSH_EVERY {
            flush(sender)?;
            unflushed = 0;
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            every_second(&t);
            last_report = Instant::now();
        }
    }
    sender.drain().map_err(|error| TransmitError::Live { what: "waiting for the TX ring to drain", error })?;
    Ok(t)
}

#[cfg(test)]
mod pacing_tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A sender into memory whose ring holds `room` frames between flushes.
    struct Memory {
        room: usize,
        queued: usize,
        sent: Vec<Vec<u8>>,
        flushes: usize,
    }

    impl FrameSender for Memory {
        fn send(&mut self, frame: &[u8]) -> Result<bool> {
            if frame.len() < 14 {
                return Err(LiveError::Config("shorter than an Ethernet header".into()));
            }
            if self.queued == self.room {
                return Ok(false);
            }
            self.queued += 1;
            self.sent.push(frame.to_vec());
            Ok(true)
        }
        fn flush(&mut self) -> Result<()> {
            self.queued = 0;
            self.flushes += 1;
            Ok(())
        }
        fn drain(&mut self) -> Result<()> {
            self.flush()
        }
    }

    fn frames(lens: Vec<usize>) -> impl FnMut(&mut Vec<u8>) -> std::result::Result<bool, std::io::Error> {
        let mut it = lens.into_iter();
        move |buf| {
            Ok(it.next().is_some_and(|n| {
                buf.clear();
                buf.resize(n, 0xab);
                true
            }))
        }
    }

    #[test]
    fn every_frame_goes_once_in_order_and_unsendable_ones_are_counted() {
        let mut s = Memory { room: 3, queued: 0, sent: Vec::new(), flushes: 0 };
        let lens = vec![60, 61, 62, 10, 1600, 63, 64, 1518, 1519];
        let pacing = Pacing { mtu: Some(1500), ..Pacing::default() };
        let t = transmit(&mut s, frames(lens), &pacing, &AtomicBool::new(false), |_| {}).unwrap();
        let got: Vec<usize> = s.sent.iter().map(Vec::len).collect();
        assert_eq!(got, [60, 61, 62, 63, 64]);
        assert_eq!(t, SendTotals { sent: 5, bytes: got.iter().sum::<usize>() as u64, skipped: 4, oversize: 3 });
        // A VLAN tag is carried on top of the MTU.
        let mut tagged = vec![0u8; 1518];
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_eq!((max_frame(1500, &tagged), max_frame(1500, &[0u8; 1514])), (1518, 1514));
    }

    #[test]
    fn count_limits_and_rate_paces() {
        let mut s = Memory { room: 1000, queued: 0, sent: Vec::new(), flushes: 0 };
        let started = Instant::now();
        let pacing = Pacing { rate: Some(2000.0), count: Some(200), mtu: None };
        let t = transmit(&mut s, frames(vec![60; 1000]), &pacing, &AtomicBool::new(false), |_| {}).unwrap();
        assert_eq!(t.sent, 200);
        // 200 frames at 2000/s: about 0.1 s (the first token is there at once).
        let took = started.elapsed().as_secs_f64();
        assert!((0.08..1.0).contains(&took), "{took} s");
        assert!(s.flushes > 1, "a paced run flushes as the bucket runs dry");
    }

    #[test]
    fn a_stop_flag_ends_the_run() {
        let mut s = Memory { room: 8, queued: 0, sent: Vec::new(), flushes: 0 };
        let t = transmit(&mut s, frames(vec![60; 10]), &Pacing::default(), &AtomicBool::new(true), |_| {}).unwrap();
        assert_eq!(t.sent, 0);
    }
}
