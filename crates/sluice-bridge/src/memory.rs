//! Two ports joined by channels instead of rings: what a bridge is tested
//! over without root or veths (smoltcp's loopback device, in spirit).
//!
//! A test holds the [`Wire`]: it puts frames on a port as if they arrived
//! there ([`Wire::send`]) and takes what the bridge transmitted on a port
//! ([`Wire::recv`]). The bridge holds the [`MemoryPair`] and opens it like
//! any other [`PortPair`]: one lane over both ports. What the live ports
//! count of a frame — received by receiving port, transmitted by sending
//! port — is counted the same way here, through the same [`PortCount`], and
//! the bridge counts the verdicts as it does over live ports, so the
//! exporter and the summaries are tested on what they will read in
//! production.

use sluice_live::open::{OpenError, Opened, PortPair};
use sluice_live::pipeline::{ethernet, other, timestamp, PortCount, Sent};
use sluice_live::LiveError;
use sluice_pipeline::{wall_ns, Fill, Meta, PacketBatch, Sink, Source, Verdict};
use sluice_wire::capture::Interface;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest a fill waits without looking at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// The bridge's end of the pair, opened once.
#[derive(Debug)]
pub struct MemoryPair {
    names: [String; 2],
    rx: Receiver<(u32, Vec<u8>)>,
    tx: [Sender<Vec<u8>>; 2],
}

/// The test's end: what arrives on the ports and what leaves them.
#[derive(Debug, Clone)]
pub struct Wire {
    rx: Sender<(u32, Vec<u8>)>,
    tx: Arc<[Mutex<Receiver<Vec<u8>>>; 2]>,
}

impl MemoryPair {
    /// A pair whose ports are called `names` (port 0 first), and its wire.
    pub fn new(names: [&str; 2]) -> (MemoryPair, Wire) {
        let (rx_tx, rx) = channel();
        let (t0, r0) = channel();
        let (t1, r1) = channel();
        let pair = MemoryPair { names: names.map(str::to_owned), rx, tx: [t0, t1] };
        (pair, Wire { rx: rx_tx, tx: Arc::new([Mutex::new(r0), Mutex::new(r1)]) })
    }
}

/// One lane over both ports; its source ends when `stop` is set or every
/// [`Wire`] is dropped (the cable is cut).
impl PortPair for MemoryPair {
    type Source = MemoryPorts;
    type Sink = MemoryTx;

    fn names(&self) -> [String; 2] {
        self.names.clone()
    }

    fn open(
        self,
        stop: &Arc<AtomicBool>,
        count: &Arc<dyn PortCount>,
        dry_run: bool,
    ) -> Result<Opened<MemoryPorts, MemoryTx>, OpenError> {
        let ports = MemoryPorts {
            rx: self.rx,
            stop: Arc::clone(stop),
            count: Arc::clone(count),
            next_index: 0,
            interface: ethernet(65535),
        };
        let tx = MemoryTx { tx: self.tx, count: Arc::clone(count), dry_run };
        Ok(Opened { lanes: vec![(ports, tx)], per_queue: false, io: "memory (two channels)".to_owned() })
    }
}

impl Wire {
    /// `frame` arrives on `port` (0 or 1). False once the bridge is gone.
    pub fn send(&self, port: u32, frame: &[u8]) -> bool {
        self.rx.send((port.min(1), frame.to_vec())).is_ok()
    }

    /// The next frame the bridge transmitted on `port`, waiting up to `wait`.
    pub fn recv(&self, port: u32, wait: Duration) -> Option<Vec<u8>> {
        let rx = self.tx[port.min(1) as usize].lock().unwrap_or_else(PoisonError::into_inner);
        rx.recv_timeout(wait).ok()
    }

    /// Every frame transmitted on `port` so far, without waiting.
    pub fn drain(&self, port: u32) -> Vec<Vec<u8>> {
        let rx = self.tx[port.min(1) as usize].lock().unwrap_or_else(PoisonError::into_inner);
        rx.try_iter().collect()
    }
}

/// Both ports' arrivals, in order, as the pipeline's source.
pub struct MemoryPorts {
    rx: Receiver<(u32, Vec<u8>)>,
    stop: Arc<AtomicBool>,
    count: Arc<dyn PortCount>,
    next_index: u64,
    interface: Interface,
}

/// Both ports' transmissions as the pipeline's sink.
pub struct MemoryTx {
    tx: [Sender<Vec<u8>>; 2],
    count: Arc<dyn PortCount>,
    /// Forward dropped packets too (`--dry-run`).
    pub dry_run: bool,
}

impl std::fmt::Debug for MemoryPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPorts").field("next_index", &self.next_index).finish()
    }
}

impl std::fmt::Debug for MemoryTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTx").field("dry_run", &self.dry_run).finish()
    }
}

impl MemoryPorts {
    fn push(&mut self, batch: &mut PacketBatch, port: u32, frame: &[u8]) {
        let ns = wall_ns();
        let meta = Meta {
            index: self.next_index,
            offset: 0,
            timestamp: timestamp(ns),
            wire_len: frame.len() as u32,
            port,
            interface: self.interface,
        };
        batch.push_copy(meta, frame);
        self.next_index += 1;
        self.count.received(port as usize, None, 1, frame.len() as u64);
    }
}

impl Source for MemoryPorts {
    type Error = LiveError;

    fn fill(&mut self, batch: &mut PacketBatch, deadline: Option<Instant>) -> Result<Fill, LiveError> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(Fill::End);
            }
            while !batch.is_full() {
                match self.rx.try_recv() {
                    Ok((port, frame)) => self.push(batch, port, &frame),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                return Ok(Fill::More);
            }
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(STOP_CHECK),
                None => STOP_CHECK,
            };
            match self.rx.recv_timeout(wait) {
                Ok((port, frame)) => self.push(batch, port, &frame),
                Err(RecvTimeoutError::Disconnected) => return Ok(Fill::End),
                Err(RecvTimeoutError::Timeout) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(Fill::More)
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn is_live(&self) -> bool {
        true
    }
}

impl Sink for MemoryTx {
    type Error = LiveError;

    fn write(&mut self, batch: &PacketBatch) -> Result<(), LiveError> {
        for (i, p) in batch.packets().iter().enumerate() {
            if p.verdict != Verdict::Pass && !self.dry_run {
                continue;
            }
            let Some(out) = other(p.meta.port) else { continue };
            let bytes = batch.bytes(i);
            // A test that stopped listening lost the frame, as a cable would.
            let _ = self.tx[out].send(bytes.to_vec());
            self.count.sent(out, None, &Sent { packets: 1, bytes: bytes.len() as u64, ..Sent::default() });
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), LiveError> {
        Ok(())
    }
}
