//! `--sample-drops` on the shield: the kernel program writes 1 in N drops
//! into a ring buffer ([`crate::program::SampleTap`], [`crate::program::record`]);
//! a thread here reads the ring every [`POLL`] and hands each record to
//! the bridge's sample writer (`sluice_pipeline::sample`: pcapng with the
//! rule's line and text as each packet's comment, rotation, the
//! `--sample-max-pps` cap, `--log-drops`).
//!
//! The ring and its lost-sample counter are made once and outlive
//! reloads (every program built passes them on), so samples and counts
//! carry across. A record names its counter slot, not its program: one
//! taken just before a reload and read after is named by the new rules'
//! slot.

use crate::mirror::Kernel;
use crate::program::{record, Extra, SampleTap};
use crate::ShieldError;
use sluice_engine::RuleInfo;
use sluice_live::bpf::{BpfMap, MapType};
use sluice_live::ringbuf::RingReader;
use sluice_pipeline::sample::{DecidedDrop, Reason, SampleReport, Sampler};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the ring is read. The program does not wake the reader
/// (`BPF_RB_NO_WAKEUP`, so a drop costs no wakeup); a sample waits at most
/// this long, and the ring holds a poll's worth at [`RING_BYTES`].
pub const POLL: Duration = Duration::from_millis(20);
/// The ring's size: about 1,700 samples.
pub const RING_BYTES: u32 = 256 * 1024;

/// The kernel side of sampling: the ring, the cap's bucket and the
/// counters of samples lost (a full ring) and over the cap.
pub struct SampleRing {
    ring: BpfMap,
    lost: BpfMap,
    cap: BpfMap,
    rate: u32,
    max_pps: u64,
}

impl SampleRing {
    /// A ring for samples of 1 in `rate` drops, at most `max_pps` of them
    /// a second (0: no cap), the cap applied in the kernel.
    pub fn new(rate: u64, max_pps: u64) -> Result<SampleRing, ShieldError> {
        Ok(SampleRing {
            ring: BpfMap::new(MapType::RingBuf, 0, 0, RING_BYTES, 0, "sluice_samples")?,
            lost: BpfMap::new(MapType::PercpuArray, 4, 16, 2, 0, "sluice_smp_lost")?,
            cap: BpfMap::new(MapType::Array, 4, 8, 1, 0, "sluice_smp_cap")?,
            rate: u32::try_from(rate).unwrap_or(u32::MAX),
            max_pps,
        })
    }

    /// What each program built is given (the bucket too: the cap holds
    /// across reloads).
    pub fn tap(&self) -> SampleTap {
        SampleTap {
            ring_fd: self.ring.as_raw_fd(),
            lost_fd: self.lost.as_raw_fd(),
            rate: self.rate,
            max_pps: self.max_pps,
            cap_fd: self.cap.as_raw_fd(),
        }
    }

    /// Samples the ring had no room for, since the start.
    pub fn lost(&self) -> u64 {
        self.counted(0)
    }

    /// Samples the kernel did not take for being over `--sample-max-pps`.
    pub fn over_cap(&self) -> u64 {
        self.counted(1)
    }

    fn counted(&self, key: u32) -> u64 {
        let v = self.lost.lookup(&key.to_ne_bytes()).ok().flatten().unwrap_or_default();
        v.chunks_exact(16).map(|c| u64::from_ne_bytes(c[..8].try_into().expect("8 bytes"))).sum()
    }
}

/// The reading thread, and what stops it.
pub struct Drain {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Sampler>,
}

impl Drain {
    /// Reads `ring` every [`POLL`] into `sampler`, naming each sample's rule
    /// from the program in `kernel` and its port from `ifaces` (by ifindex).
    pub fn start(
        ring: &SampleRing,
        sampler: Sampler,
        kernel: Arc<Mutex<Kernel>>,
        ifaces: &[String],
    ) -> Result<Drain, ShieldError> {
        let mut reader = RingReader::new(&ring.ring)?;
        let ifindexes = ifaces.iter().map(|i| sluice_live::sys::ifindex(i)).collect::<Result<Vec<_>, _>>()?;
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("sluice-shield-samples".into()).spawn(move || {
            loop {
                // Read once more after the stop: what the program wrote
                // before its links went is still written.
                let last = done.load(Ordering::Relaxed);
                drain_once(&mut reader, &sampler, &kernel, &ifindexes);
                if last {
                    return sampler;
                }
                std::thread::sleep(POLL);
            }
        })?;
        Ok(Drain { stop, thread })
    }

    /// Reads what is left, then finishes the files: what was written, and
    /// the writer's error if any.
    pub fn finish(self) -> (Option<SampleReport>, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(sampler) => sampler.end(),
            Err(_) => (None, Some("the shield's sample reader panicked".into())),
        }
    }
}

/// Every record in the ring, to the sampler; the rules named under one
/// lock of the kernel's program.
fn drain_once(reader: &mut RingReader, sampler: &Sampler, kernel: &Mutex<Kernel>, ifindexes: &[u32]) {
    let mut raw: Vec<Vec<u8>> = Vec::new();
    reader.drain(|r| raw.push(r.to_vec()));
    if raw.is_empty() {
        return;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let now = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
    let drops: Vec<DecidedDrop> = {
        let k = kernel.lock().unwrap_or_else(PoisonError::into_inner);
        raw.iter().filter_map(|r| decided(r, &k, ifindexes, now)).collect()
    };
    for d in drops {
        sampler.offer_decided(d);
    }
}

fn u32_at(r: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(r[at..at + 4].try_into().expect("4 bytes"))
}

/// One record as the writer takes it: its rule (line and text) or the
/// default or undecodable, its port, its queue as the worker.
fn decided(r: &[u8], k: &Kernel, ifindexes: &[u32], now: u64) -> Option<DecidedDrop> {
    if r.len() < record::SIZE {
        return None;
    }
    let slot = u32_at(r, record::SLOT) as usize;
    let len = u32_at(r, record::LEN);
    let (texts, lines) = (k.compiled.rule_texts(), k.compiled.rule_lines());
    let copied = (len as usize).min(record::SNAP);
    let bytes = r[record::DATA..record::DATA + copied].to_vec();
    let (reason, rule) = match slot.checked_sub(texts.len()) {
        None => {
            let (line, action) = lines[slot];
            let info = RuleInfo { line, text: texts[slot].clone(), action, side: None, list: String::new() };
            (Reason::Rule(slot), Some(info))
        }
        Some(e) if e == Extra::Default as usize => (Reason::Default, None),
        // The kernel program does not say why a frame is undecodable: the
        // engine's decoder says it of the copy. When the copy decodes, what
        // the program could not read lies past it (a long IPv6 extension
        // chain, the one shape that outgrows 128 bytes).
        Some(_) => match sluice_wire::decode(sluice_wire::LinkType::ETHERNET, &bytes) {
            Err(e) => (Reason::Undecodable(e.kind()), None),
            Ok(_) => (Reason::Undecodable(sluice_wire::DecodeErrorKind::TooManyExtHeaders), None),
        },
    };
    let ifindex = u32_at(r, record::IFINDEX);
    let port = ifindexes.iter().position(|&i| i == ifindex).unwrap_or(ifindexes.len()) as u32;
    Some(DecidedDrop {
        port,
        timestamp_ns: now,
        wire_len: len,
        bytes,
        reason,
        rule,
        worker: Some(u32_at(r, record::QUEUE) as usize),
    })
}
