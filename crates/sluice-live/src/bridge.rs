//! The forwarding step of a two-port bridge, for both kinds of port. The
//! pipeline (rules, workers, counters) is built on top of these; the
//! `bridge` example and the live tests run them in a plain loop.

use std::os::fd::RawFd;

use crate::error::{LiveError, Result};
use crate::packet::{FrameMeta, PacketSocket};
use crate::xsk::{Desc, FramePool, Umem, XskSocket};

/// Frames taken per step.
pub const BATCH: usize = 64;

/// What one step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Frames received.
    pub received: u64,
    /// Frames put on the other port's TX ring.
    pub forwarded: u64,
    /// Frames the verdict dropped.
    pub dropped: u64,
    /// Frames lost because the other port's TX ring was full.
    pub tx_full: u64,
}

impl std::ops::AddAssign for StepStats {
    fn add_assign(&mut self, o: StepStats) {
        self.received += o.received;
        self.forwarded += o.forwarded;
        self.dropped += o.dropped;
        self.tx_full += o.tx_full;
    }
}

/// AF_XDP: moves one batch from `rx` to `tx` (two sockets on the same
/// UMEM) by address: a frame `pass` accepts goes on `tx`'s TX ring as it
/// is, with no copy; a dropped one (or one that finds `tx` full) goes
/// straight back to `rx`'s fill ring (or to `pool` if that is full).
pub fn xsk_step(
    umem: &Umem,
    rx: &mut XskSocket,
    tx: &mut XskSocket,
    pool: &mut FramePool,
    mut pass: impl FnMut(&[u8]) -> bool,
) -> Result<StepStats> {
    let mut descs = [Desc::default(); BATCH];
    let n = rx.rx_batch(&mut descs);
    if n == 0 {
        return Ok(StepStats::default());
    }
    let mut fwd = [Desc::default(); BATCH];
    let mut nf = 0;
    let mut back = [0u64; BATCH];
    let mut nb = 0;
    for d in &descs[..n] {
        let keep = umem.data(d).is_some_and(&mut pass);
        if keep {
            fwd[nf] = *d;
            nf += 1;
        } else {
            back[nb] = d.addr;
            nb += 1;
        }
    }
    let dropped = nb as u64;
    let sent = if nf > 0 { tx.tx(&fwd[..nf])? } else { 0 };
    for d in &fwd[sent..nf] {
        back[nb] = d.addr;
        nb += 1;
    }
    let refilled = rx.fill(&back[..nb]);
    pool.free_all(&back[refilled..nb]);
    if sent > 0 && tx.tx_needs_wakeup() {
        tx.kick_tx()?;
    }
    Ok(StepStats { received: n as u64, forwarded: sent as u64, dropped, tx_full: (nf - sent) as u64 })
}

/// AF_XDP housekeeping for one socket: takes completed frames back into
/// `pool`, tops the fill ring up from it, and makes the syscalls the kernel
/// asked for. Call it every loop for every socket.
pub fn xsk_service(sock: &mut XskSocket, pool: &mut FramePool) -> Result<()> {
    sock.complete_into(pool);
    let free = sock.fill_free() as usize;
    if free > 0 {
        sock.fill_from(pool, free);
    }
    sock.wakeup()
}

/// AF_PACKET: moves up to one batch from `rx` to `tx`, copying each frame
/// `pass` accepts into `tx`'s ring (VLAN tags restored), then flushes.
pub fn packet_step(
    rx: &mut PacketSocket,
    tx: &mut PacketSocket,
    mut pass: impl FnMut(&[u8], FrameMeta) -> bool,
) -> Result<StepStats> {
    let mut st = StepStats::default();
    let mut err: Option<LiveError> = None;
    rx.rx_batch(BATCH, |frame, meta| {
        st.received += 1;
        if !pass(frame, meta) {
            st.dropped += 1;
            return;
        }
        match tx.send(frame) {
            Ok(true) => st.forwarded += 1,
            Ok(false) => {
                // Every slot busy: push them out and try once more.
                if let Err(e) = tx.flush() {
                    err.get_or_insert(e);
                }
                match tx.send(frame) {
                    Ok(true) => st.forwarded += 1,
                    Ok(false) => st.tx_full += 1,
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
            // A frame too big for a slot is dropped and counted, not fatal.
            Err(LiveError::FrameTooBig { .. }) => st.tx_full += 1,
            Err(e) => {
                err.get_or_insert(e);
            }
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    if st.forwarded > 0 {
        tx.flush()?;
    }
    Ok(st)
}

/// Waits up to `timeout_ms` until one of `fds` is readable.
pub fn wait_any(fds: &[RawFd], timeout_ms: i32) -> Result<()> {
    crate::sys::poll_many(fds, timeout_ms).map_err(|e| LiveError::Io { op: "poll", source: e })
}
