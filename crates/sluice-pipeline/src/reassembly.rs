//! The reassembly stage between the source and the judge.
//!
//! It rewrites each batch into the order packets are written in: packets
//! that are not fragments as they come; fragments held until their datagram
//! completes and then all of them together, where it completed; fragments of
//! datagrams given up (overlap, malformed, limits, timeout, end of input)
//! with their verdict decided, so they are not judged. A completed
//! datagram's fragments carry the datagram's flow (its 4-tuple, from the
//! reassembled transport header) so workers get them by flow, not by IP
//! pair. Reassembly runs here, before steering, rather than on the IP-pair
//! worker the fragments would otherwise meet on: one thread sees every
//! fragment in arrival order, so the output order is the same for any
//! number of workers. Fragments cut short by the snap length cannot be
//! reassembled and are judged one by one, by their addresses.
//!
//! Time is the packets' own timestamps; a live source also calls
//! [`Reassembly::tick`] with the wall clock so held fragments expire on a
//! quiet link.
//!
//! Lanes (a per-queue bridge: one pipeline per NIC queue, see
//! [`crate::lanes`]) each reassemble what their queue receives. A NIC hashes
//! fragments on the IP pair and so keeps a datagram's fragments on one
//! queue, but nothing guarantees it (a sender that changes queues between
//! fragments, a NIC hashing first fragments on ports). With a
//! [`FragmentRouter`] every fragment is reassembled by the lane its IP pair
//! maps to: a fragment that arrived elsewhere is copied into that lane's
//! bounded inbox, and the owner takes it at its next batch or tick. Only
//! fragments move; a full inbox gives the fragment up with the incomplete
//! verdict (counted), as a lost fragment would be.

use crate::batch::{Disposition, Edit, Meta, PacketBatch, Recycler};
use sluice_defrag::{DatagramKey, DefragLimits, DefragStats, DropCause, Outcome, Reassembler, Released};
use sluice_engine::Verdict;
use sluice_steer::RssInput;
use sluice_wire::{ip_proto, DecodeError, PacketSummary};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A fragment held until its datagram completes: its bytes are copied out of
/// the batch (which is recycled meanwhile), its summary kept.
pub struct Held {
    meta: Meta,
    /// The frame, in a buffer from [`Reassembly`]'s spares (the reassembler
    /// reads the fragment's data from it: [`Reassembler::add`]).
    bytes: Vec<u8>,
    decoded: Result<PacketSummary, DecodeError>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Frame buffers kept for reuse: a fragment's copy is then a copy, not an
/// allocation and a free as well. At most this many, each at most
/// `SPARE_FRAME_BYTES` (a jumbo frame's buffer is freed): 4 MiB kept at most.
const SPARE_FRAMES: usize = 256;
const SPARE_FRAME_BYTES: usize = 16 << 10;

pub struct Reassembly {
    r: Reassembler<Held>,
    /// Emptied frame buffers of fragments emitted.
    spare: Vec<Vec<u8>>,
    /// Verdict for datagrams that never complete.
    incomplete: Verdict,
    /// Lanes: which lane reassembles which fragments.
    router: Option<FragmentRouter>,
}

/// Fragments a lane's inbox holds at most; past it they are given up.
pub const INBOX_FRAGMENTS: usize = 4096;

/// A lane's inbox: fragments moved to it, until it closes at its end.
#[derive(Default)]
struct Inbox {
    moved: VecDeque<Held>,
    /// The lane has finished: keep its fragments where they are.
    closed: bool,
}

/// How long a finishing lane waits for the others to finish too (then
/// nothing more can be moved to it) before it closes its inbox anyway.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// What the lanes' routers share: one inbox per lane, and the counts.
pub struct Inboxes {
    inboxes: Vec<Mutex<Inbox>>,
    /// Lanes that have reached their end.
    finished: std::sync::atomic::AtomicUsize,
    steering: crate::judge::Steering,
    /// Fragments moved to the lane that owns their IP pair.
    pub moved: AtomicU64,
    /// Fragments given up because the owner's inbox was full.
    pub overflowed: AtomicU64,
}

impl Inboxes {
    /// Inboxes for `lanes` lanes.
    pub fn new(lanes: usize) -> Arc<Inboxes> {
        Arc::new(Inboxes {
            inboxes: (0..lanes.max(1)).map(|_| Mutex::new(Inbox::default())).collect(),
            finished: std::sync::atomic::AtomicUsize::new(0),
            // Any fixed hash works as long as every lane uses the same one.
            steering: crate::judge::Steering::new(&sluice_steer::MICROSOFT_KEY, lanes.max(1)),
            moved: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
        })
    }

    /// The lane that reassembles fragments between `src` and `dst`.
    pub fn owner(&self, src: std::net::IpAddr, dst: std::net::IpAddr) -> usize {
        self.steering.worker_for_input(&RssInput::pair(src, dst))
    }

    /// Lane `lane`'s router.
    pub fn router(self: &Arc<Self>, lane: usize) -> FragmentRouter {
        FragmentRouter { lane, shared: Arc::clone(self) }
    }
}

/// How IP fragments are reassembled.
#[derive(Debug, Clone, Copy)]
pub struct ReassemblyConfig {
    pub limits: DefragLimits,
    /// The verdict of fragments whose datagram never completes.
    pub incomplete: Verdict,
}

impl ReassemblyConfig {
    /// A stage reassembling so.
    pub fn stage(&self) -> Reassembly {
        Reassembly::new(self.limits, self.incomplete)
    }
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig { limits: DefragLimits::default(), incomplete: Verdict::Drop }
    }
}

/// One lane's end of the [`Inboxes`].
pub struct FragmentRouter {
    lane: usize,
    shared: Arc<Inboxes>,
}

impl Reassembly {
    pub fn new(limits: DefragLimits, incomplete: Verdict) -> Self {
        Reassembly { r: Reassembler::new(limits), spare: Vec::new(), incomplete, router: None }
    }

    /// Reassemble only the fragments `router` says are this lane's; pass
    /// the others to their lane.
    pub fn routed(mut self, router: FragmentRouter) -> Self {
        self.router = Some(router);
        self
    }

    /// Takes the fragments other lanes moved here and reassembles them,
    /// emitting into `out` what completes or is given up.
    fn take_inbox(&mut self, out: &mut Edit, released: &mut Released<Held>) {
        let Some(router) = &self.router else { return };
        let moved: Vec<Held> = {
            let mut inbox = router.shared.inboxes[router.lane].lock().unwrap_or_else(PoisonError::into_inner);
            if inbox.moved.is_empty() {
                return;
            }
            inbox.moved.drain(..).collect()
        };
        for h in moved {
            self.add_held(h, out, released);
        }
    }

    /// A fragment of another lane's: moved to its inbox (true), or given
    /// up here when that is full (emitted into `out`, true). False: ours.
    fn route_away(
        &self,
        held: &mut Option<Held>,
        src: std::net::IpAddr,
        dst: std::net::IpAddr,
        out: &mut Edit,
    ) -> bool {
        let Some(router) = &self.router else { return false };
        let owner = router.shared.owner(src, dst);
        if owner == router.lane {
            return false;
        }
        let mut inbox = router.shared.inboxes[owner].lock().unwrap_or_else(PoisonError::into_inner);
        if inbox.closed {
            // The owner has finished: reassemble here what can be.
            return false;
        }
        let h = held.take().expect("a fragment to route");
        if inbox.moved.len() < INBOX_FRAGMENTS {
            inbox.moved.push_back(h);
            router.shared.moved.fetch_add(1, Ordering::Relaxed);
        } else {
            drop(inbox);
            router.shared.overflowed.fetch_add(1, Ordering::Relaxed);
            Self::emit(out, vec![h], Disposition::Decided(self.incomplete), &mut Vec::new());
        }
        true
    }

    pub fn stats(&self) -> DefragStats {
        self.r.stats()
    }

    fn verdict_for(&self, cause: DropCause) -> Verdict {
        match cause {
            DropCause::Evicted | DropCause::TimedOut | DropCause::Incomplete => self.incomplete,
            DropCause::Overlap | DropCause::Malformed | DropCause::TooManyFragments => Verdict::Drop,
        }
    }

    /// Put `held` into `out` with disposition `d`, their frame buffers
    /// into `spare`; returns the emptied list, for the reassembler to reuse.
    fn emit(out: &mut Edit, mut held: Vec<Held>, d: Disposition, spare: &mut Vec<Vec<u8>>) -> Vec<Held> {
        out.reserve(held.len());
        for h in held.drain(..) {
            out.insert(h.meta, &h.bytes, h.decoded, d);
            if spare.len() < SPARE_FRAMES && h.bytes.capacity() <= SPARE_FRAME_BYTES {
                spare.push(h.bytes);
            }
        }
        held
    }

    fn emit_released(&mut self, out: &mut Edit, released: &mut Released<Held>) {
        for (held, cause) in released.drain(..) {
            let emptied = Self::emit(out, held, Disposition::Decided(self.verdict_for(cause)), &mut self.spare);
            self.r.recycle(emptied);
        }
    }

    /// Put one decoded batch through reassembly (see the module comment).
    /// Returns the batch to judge, in write order: the same batch, edited
    /// in place (fragments taken out, datagrams put back where they
    /// complete), so the packets it keeps are not copied.
    pub fn process(&mut self, mut input: PacketBatch) -> PacketBatch {
        let reassemblable = |d: &Result<PacketSummary, DecodeError>| match d {
            Ok(PacketSummary { ip: Some(ip), .. }) => ip.fragment.is_some() && !ip.cut_short && ip.l4_offset.is_some(),
            _ => false,
        };
        let mut released = Vec::new();
        // Most traffic has no fragments: then the batch goes on untouched,
        // unless held datagrams have timed out by its last timestamp.
        if !(0..input.len()).any(|i| reassemblable(input.decoded(i))) {
            if let Some(last) = input.packets().last() {
                self.r.expire(last.meta.time_ns(), &mut released);
            }
            if released.is_empty() {
                return input;
            }
        }
        let mut out = input.edit();
        self.emit_released(&mut out, &mut released);
        self.take_inbox(&mut out, &mut released);
        while let Some(p) = out.peek() {
            if !reassemblable(out.peek_decoded()) {
                out.keep();
                continue;
            }
            let decoded = *out.peek_decoded();
            let Ok(PacketSummary { ip: Some(ip), .. }) = decoded else { unreachable!("checked above") };
            let meta = p.meta;
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            bytes.extend_from_slice(out.peek_bytes());
            let held = Held { meta, bytes, decoded };
            out.take();
            let mut held = Some(held);
            if self.route_away(&mut held, ip.src, ip.dst, &mut out) {
                continue;
            }
            self.add_held(held.expect("kept"), &mut out, &mut released);
        }
        drop(out);
        input
    }

    /// Adds one fragment (already checked reassemblable) to the
    /// reassembler, emitting into `out` what completes or is given up.
    fn add_held(&mut self, held: Held, out: &mut Edit, released: &mut Released<Held>) {
        let Ok(PacketSummary { ip: Some(ip), .. }) = held.decoded else { return };
        let (Some(f), Some(start)) = (ip.fragment, ip.l4_offset) else { return };
        let key = DatagramKey {
            src: ip.src,
            dst: ip.dst,
            ident: f.ident,
            protocol: if ip.is_ipv6() { 0 } else { ip.protocol },
        };
        let data = start as usize..ip.l3_end as usize;
        let now = held.meta.time_ns();
        let outcome = self.r.add(key, (u32::from(f.offset), f.more), data, held, now, released);
        self.emit_released(out, released);
        match outcome {
            Outcome::Held => {}
            Outcome::Atomic(h) => {
                Self::emit(out, vec![h], Disposition::Judge, &mut self.spare);
            }
            Outcome::Complete { mut fragments, payload } => {
                // The transport header's fields are in the payload's first
                // 14 bytes (a TCP header's flags are its 14th).
                let mut head = [0u8; 14];
                let n = payload.read(&fragments, 0, &mut head);
                let head = &head[..n];
                self.r.recycle_payload(payload);
                judge_whole(&mut fragments, ip.protocol, head);
                // Re-steer the whole datagram by its flow, as if it had
                // arrived in one piece (the seed's netisr re-injection).
                let ports = match ip.protocol {
                    ip_proto::TCP | ip_proto::UDP if head.len() >= 4 => {
                        let port = |at: usize| u16::from_be_bytes([head[at], head[at + 1]]);
                        Some((port(0), port(2)))
                    }
                    _ => None,
                };
                let emptied = Self::emit(out, fragments, Disposition::JudgeAsFlow(ports), &mut self.spare);
                self.r.recycle(emptied);
            }
            Outcome::Dropped { fragments, cause } => {
                let verdict = self.verdict_for(cause);
                let emptied = Self::emit(out, fragments, Disposition::Decided(verdict), &mut self.spare);
                self.r.recycle(emptied);
            }
        }
    }

    /// Expire what has waited past the timeout at `now_ns` (wall time, for a
    /// live source on a quiet link). Returns the given-up fragments, if any.
    pub fn tick(&mut self, now_ns: u64, recycler: &mut Recycler) -> Option<PacketBatch> {
        let mut released = Vec::new();
        self.r.expire(now_ns, &mut released);
        let mut out = recycler.get();
        let mut edit = out.edit();
        self.emit_released(&mut edit, &mut released);
        self.take_inbox(&mut edit, &mut released);
        drop(edit);
        if out.is_empty() {
            recycler.put(out);
            return None;
        }
        Some(out)
    }

    /// At the end of the input: every datagram still incomplete. A lane
    /// first waits (a while) for the other lanes to end, so no fragment is
    /// moved to it after it has closed its inbox, then takes what it holds.
    pub fn finish(&mut self, recycler: &mut Recycler) -> Option<PacketBatch> {
        let mut out = recycler.get();
        let mut edit = out.edit();
        let mut rest = Vec::new();
        if let Some(router) = &self.router {
            let shared = &router.shared;
            shared.finished.fetch_add(1, Ordering::AcqRel);
            let until = std::time::Instant::now() + FINISH_WAIT;
            while shared.finished.load(Ordering::Acquire) < shared.inboxes.len() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            shared.inboxes[router.lane].lock().unwrap_or_else(PoisonError::into_inner).closed = true;
            self.take_inbox(&mut edit, &mut rest);
        }
        rest.extend(self.r.drain());
        self.emit_released(&mut edit, &mut rest);
        drop(edit);
        if out.is_empty() {
            recycler.put(out);
            return None;
        }
        Some(out)
    }

    /// Datagrams in progress right now.
    pub fn in_progress(&self) -> usize {
        self.r.in_progress()
    }
}

/// A completed datagram is judged whole: every fragment carries the
/// transport fields read from the reassembled payload (ports, TCP flags,
/// ICMP type), so port rules see a later fragment's datagram as nft sees the
/// reassembled packet. Without reassembly a later fragment has no ports and
/// matches no port rule. `head`: the payload's first bytes (14 or all).
fn judge_whole(fragments: &mut [Held], protocol: u8, head: &[u8]) {
    let at = |i: usize| head.get(i).copied();
    let be = |i: usize| Some(u16::from_be_bytes([at(i)?, at(i + 1)?]));
    let (ports, flags, icmp) = match protocol {
        ip_proto::TCP => (be(0).zip(be(2)), at(13), None),
        ip_proto::UDP => (be(0).zip(be(2)), None, None),
        ip_proto::ICMP | ip_proto::ICMPV6 => (None, None, at(0).zip(at(1))),
        _ => (None, None, None),
    };
    for h in fragments {
        if let Ok(PacketSummary { ip: Some(ip), .. }) = &mut h.decoded {
            ip.ports = ports;
            ip.tcp_flags = flags;
            ip.icmp = icmp;
        }
    }
}
