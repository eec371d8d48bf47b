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

use crate::batch::{Disposition, Meta, PacketBatch, Recycler};
use sluice_engine::defrag::{DatagramKey, DefragStats, DropCause, Fragment, Limits, Outcome, Reassembler, Released};
use sluice_engine::Verdict;
use sluice_steer::RssInput;
use sluice_wire::{ip_proto, DecodeError, PacketSummary};

/// A fragment held until its datagram completes: its bytes are copied out of
/// the batch (which is recycled meanwhile), its summary kept.
pub struct Held {
    meta: Meta,
    bytes: Vec<u8>,
    decoded: Result<PacketSummary, DecodeError>,
}

pub struct Reassembly {
    r: Reassembler<Held>,
    /// Verdict for datagrams that never complete.
    incomplete: Verdict,
}

impl Reassembly {
    pub fn new(limits: Limits, incomplete: Verdict) -> Self {
        Reassembly { r: Reassembler::new(limits), incomplete }
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

    fn emit(out: &mut PacketBatch, held: Vec<Held>, d: Disposition) {
        for h in held {
            out.push_decoded(h.meta, &h.bytes, h.decoded, d);
        }
    }

    fn emit_released(&self, out: &mut PacketBatch, released: &mut Released<Held>) {
        for (held, cause) in released.drain(..) {
            Self::emit(out, held, Disposition::Decided(self.verdict_for(cause)));
        }
    }

    /// Put one decoded batch through reassembly (see the module comment).
    /// Returns the batch to judge, in write order; the input batch is handed
    /// back to `recycler` when a new one replaces it.
    pub fn process(&mut self, input: PacketBatch, recycler: &mut Recycler) -> PacketBatch {
        let reassemblable = |p: &crate::batch::Packet| match &p.decoded {
            Ok(PacketSummary { ip: Some(ip), .. }) => ip.fragment.is_some() && !ip.cut_short && ip.l4_offset.is_some(),
            _ => false,
        };
        let mut released = Vec::new();
        // Most traffic has no fragments: then the batch goes on untouched,
        // unless held datagrams have timed out by its last timestamp.
        if !input.packets().iter().any(reassemblable) {
            if let Some(last) = input.packets().last() {
                self.r.expire(last.meta.time_ns(), &mut released);
            }
            if released.is_empty() {
                return input;
            }
        }
        let mut out = recycler.get();
        self.emit_released(&mut out, &mut released);
        for i in 0..input.len() {
            let p = input.packets()[i];
            if !reassemblable(&p) {
                out.push_from(&input, i);
                continue;
            }
            let Ok(PacketSummary { ip: Some(ip), .. }) = p.decoded else { unreachable!("checked above") };
            let (Some(f), Some(start)) = (ip.fragment, ip.l4_offset) else { unreachable!("checked above") };
            let bytes = input.bytes(i);
            let key = DatagramKey {
                src: ip.src,
                dst: ip.dst,
                ident: f.ident,
                protocol: if ip.is_ipv6() { 0 } else { ip.protocol },
            };
            let data = bytes.get(start as usize..ip.l3_end as usize).unwrap_or_default();
            let piece = Fragment { offset: u32::from(f.offset), more: f.more, data };
            let held = Held { meta: p.meta, bytes: bytes.to_vec(), decoded: p.decoded };
            let outcome = self.r.add(key, piece, held, p.meta.time_ns(), &mut released);
            self.emit_released(&mut out, &mut released);
            match outcome {
                Outcome::Held => {}
                Outcome::Atomic(h) => Self::emit(&mut out, vec![h], Disposition::Judge),
                Outcome::Complete { mut fragments, payload } => {
                    judge_whole(&mut fragments, ip.protocol, &payload);
                    // Re-steer the whole datagram by its flow, as if it had
                    // arrived in one piece (the seed's netisr re-injection).
                    let flow = match ip.protocol {
                        ip_proto::TCP | ip_proto::UDP if payload.len() >= 4 => {
                            let port = |at: usize| u16::from_be_bytes([payload[at], payload[at + 1]]);
                            RssInput::four_tuple(ip.src, ip.dst, port(0), port(2))
                        }
                        _ => RssInput::pair(ip.src, ip.dst),
                    };
                    Self::emit(&mut out, fragments, Disposition::JudgeAsFlow(flow));
                }
                Outcome::Dropped { fragments, cause } => {
                    Self::emit(&mut out, fragments, Disposition::Decided(self.verdict_for(cause)))
                }
            }
        }
        recycler.put(input);
        out
    }

    /// Expire what has waited past the timeout at `now_ns` (wall time, for a
    /// live source on a quiet link). Returns the given-up fragments, if any.
    pub fn tick(&mut self, now_ns: u64, recycler: &mut Recycler) -> Option<PacketBatch> {
        let mut released = Vec::new();
        self.r.expire(now_ns, &mut released);
        if released.is_empty() {
            return None;
        }
        let mut out = recycler.get();
        self.emit_released(&mut out, &mut released);
        Some(out)
    }

    /// At the end of the input: every datagram still incomplete.
    pub fn finish(&mut self, recycler: &mut Recycler) -> Option<PacketBatch> {
        let mut rest = self.r.drain();
        if rest.is_empty() {
            return None;
        }
        let mut out = recycler.get();
        self.emit_released(&mut out, &mut rest);
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
/// matches no port rule.
fn judge_whole(fragments: &mut [Held], protocol: u8, payload: &[u8]) {
    let at = |i: usize| payload.get(i).copied();
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
